//! The Foo example (sample-controller made multi-cluster) tested with the test kit, as a
//! model for testing your own controller: three real clusters with simulated pods, each
//! behind a fault proxy; the controller reaches them through its kubeconfig provider, the
//! test checks them directly. member1 is the central cluster. Phases: a Foo in member2 gets
//! its Deployment in member1 and its status back; a deleted Deployment is recreated; the
//! central cluster is partitioned (black-holed) — a Foo deleted meanwhile goes at once and
//! its Deployment is collected when the partition heals. (tests/tests/library.rs runs the
//! same example on Flotilla's KubeFedCluster registry.)

use crate::foo;

use crate::foo::Foo;
use crate::library_support::*;
use anyhow::ensure;
use flotilla_localenv::{EnvOptions, testkit::TestClusters};
use flotilla_multicluster::{ClusterSet, ObjectKey, provider::kubeconfig::KubeconfigProvider};
use flotilla_tests::wait::{wait_absent, wait_object, wait_present};
use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::json;

const CENTRAL: &str = "member1";

fn deployments(central: &Client) -> Api<Deployment> {
    Api::namespaced(central.clone(), foo::CENTRAL_NAMESPACE)
}

fn deployment_of(cluster: &str, name: &str) -> String {
    let key = ObjectKey {
        cluster: cluster.into(),
        namespace: Some("default".into()),
        name: name.into(),
    };
    foo::deployment_name(&key, name)
}

async fn apply_foo(client: &Client, name: &str, replicas: i32) -> anyhow::Result<()> {
    let obj = json!({
        "apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"deploymentName": name, "replicas": replicas},
    });
    // The controller installs the CRD as the member turns Ready: retry until it is served.
    flotilla_localenv::testkit::wait_until(TIMEOUT, "the Foo applied", || async {
        Api::<Foo>::namespaced(client.clone(), "default")
            .patch(
                name,
                &PatchParams::apply("library-test").force(),
                &Patch::Apply(&obj),
            )
            .await
    })
    .await?;
    Ok(())
}

async fn wait_ready_in_set(set: &ClusterSet, name: &str, ready: bool) -> anyhow::Result<()> {
    flotilla_localenv::testkit::wait_until(TIMEOUT, &format!("{name} ready={ready}"), || async {
        let now = set.get(name).is_some_and(|c| c.ready);
        if now == ready {
            Ok(())
        } else {
            Err(format!("ready={now}"))
        }
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn the_foo_controller_under_the_test_kit() -> anyhow::Result<()> {
    flotilla_tests::init_tracing();
    let kit = TestClusters::start_with(EnvOptions::with_members(2).with_pods()).await?;
    let (central, member2) = (kit.client(CENTRAL).await?, kit.client("member2").await?);
    let set = ClusterSet::new();
    let provider = KubeconfigProvider::file(kit.kubeconfig_path()).contexts([CENTRAL, "member2"]);
    let _provider = set.start_provider(provider);
    let install = tokio::spawn(foo::install_on_join(set.clone(), CENTRAL.into()));
    let controller = tokio::spawn({
        let set = set.clone();
        async move { foo::run(set, CENTRAL, None).await }
    });

    // Fan-in and status back.
    apply_foo(&member2, "web", 1).await?;
    let name = deployment_of("member2", "web");
    let first = wait_present(TIMEOUT, &deployments(&central), &name).await?;
    wait_object(
        TIMEOUT,
        &Api::<Foo>::namespaced(member2.clone(), "default"),
        "web",
        |f: &Foo| {
            let available = f.status.as_ref().map(|s| s.available_replicas);
            ensure!(available == Some(1), "availableReplicas {available:?}");
            Ok(())
        },
    )
    .await?;

    // Repair.
    deployments(&central)
        .delete(&name, &DeleteParams::default())
        .await?;
    wait_object(TIMEOUT, &deployments(&central), &name, |d: &Deployment| {
        ensure!(d.uid() != first.uid(), "still the old one");
        Ok(())
    })
    .await?;

    // A partition of the central cluster: the Foo goes at once, its Deployment later.
    kit.black_hole(CENTRAL);
    wait_ready_in_set(&set, CENTRAL, false).await?;
    let foos = Api::<Foo>::namespaced(member2.clone(), "default");
    foos.delete("web", &DeleteParams::default()).await?;
    wait_absent(TIMEOUT, &foos, "web").await?;
    ensure!(
        deployments(&central).get_opt(&name).await?.is_some(),
        "collected while partitioned"
    );
    kit.heal(CENTRAL);
    wait_ready_in_set(&set, CENTRAL, true).await?;
    wait_absent(TIMEOUT, &deployments(&central), &name).await?;

    controller.abort();
    install.abort();
    kit.shutdown().await?;
    Ok(())
}
