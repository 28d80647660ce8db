//! The multi-cluster controller library end to end, through its example: sample-controller
//! made multi-cluster (`multicluster/examples/foo_controller`), on a real federation of a
//! host and three members (member1 is the central cluster, with pods that run). Clusters
//! come from the KubeFedCluster registry that the in-process control plane health-checks.
//!
//! One environment, phases in order: Foos in two members fan in to Deployments in the
//! central cluster (status and Events flow back); a deleted Deployment is recreated; a
//! deleted Foo deletes its Deployment, or leaves it when asked to orphan it; a member leaves (its Deployments are kept, its new
//! Foos wait) and joins again at run time; a Foo deleted while the central cluster is down
//! is let go, and its Deployment is collected when the central cluster returns.

use crate::foo;

use std::time::Duration;

use crate::foo::Foo;
use anyhow::{Context as _, ensure};
use flotilla_api::{KubeFedCluster, MEMBER_ROLE_ANNOTATION};
use flotilla_multicluster::{
    ClusterSet, ControllerMetrics, ObjectKey,
    kubefed::KubeFedSource,
    ownership::{OWNER_ANNOTATION, OWNER_LABEL},
};
use flotilla_tests::{
    assert::events_about,
    federation::{Federation, federation_with_pods},
    wait::{wait_absent, wait_object, wait_present},
    wait_for,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    rbac::v1::{ClusterRole, ClusterRoleBinding},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::json;

const REGISTRY_NS: &str = "kube-federation-system";
const CENTRAL: &str = "member1";
const NS: &str = "default";
const TIMEOUT: Duration = Duration::from_secs(60);

fn foos(client: &Client) -> Api<Foo> {
    Api::namespaced(client.clone(), NS)
}

fn deployments(fed: &Federation) -> Api<Deployment> {
    Api::namespaced(fed.members[0].clone(), foo::CENTRAL_NAMESPACE)
}

fn deployment_of(cluster: &str, name: &str) -> String {
    let key = ObjectKey {
        cluster: cluster.into(),
        namespace: Some(NS.into()),
        name: name.into(),
    };
    foo::deployment_name(&key, name)
}

/// Grants the example's ClusterRole (rbac.yaml) in every member to the ServiceAccount
/// whose token the member's KubeFedCluster carries (Flotilla's own role is least-privilege).
async fn grant_example_rbac(fed: &Federation) -> anyhow::Result<()> {
    let role: ClusterRole = serde_saphyr::from_str(include_str!(
        "../../multicluster/examples/foo_controller/rbac.yaml"
    ))?;
    let registry: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), REGISTRY_NS);
    let params = PatchParams::apply("library-test").force();
    for (i, member) in fed.members.iter().enumerate() {
        let cluster = registry.get(&format!("member{}", i + 1)).await?;
        let flotilla_role = cluster
            .annotations()
            .get(MEMBER_ROLE_ANNOTATION)
            .context("the member's role annotation")?;
        let binding: ClusterRoleBinding = Api::all(member.clone()).get(flotilla_role).await?;
        Api::<ClusterRole>::all(member.clone())
            .patch(&role.name_any(), &params, &Patch::Apply(&role))
            .await?;
        let grant = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "foo-controller"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": role.name_any()},
            "subjects": binding.subjects,
        });
        Api::<ClusterRoleBinding>::all(member.clone())
            .patch("foo-controller", &params, &Patch::Apply(grant))
            .await?;
    }
    Ok(())
}

async fn apply_foo(client: &Client, name: &str, replicas: i32) -> anyhow::Result<()> {
    apply_foo_annotated(client, name, replicas, json!({})).await
}

async fn apply_foo_annotated(
    client: &Client,
    name: &str,
    replicas: i32,
    annotations: serde_json::Value,
) -> anyhow::Result<()> {
    let obj = json!({
        "apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"deploymentName": name, "replicas": replicas},
    });
    let api: Api<Foo> = foos(client);
    api.patch(
        name,
        &PatchParams::apply("library-test").force(),
        &Patch::Apply(obj),
    )
    .await?;
    Ok(())
}

async fn wait_crd(client: &Client) -> anyhow::Result<()> {
    wait_for(TIMEOUT, "the Foo CRD served", || async {
        foos(client).list(&Default::default()).await?;
        Ok(())
    })
    .await
}

async fn wait_available(client: &Client, name: &str, n: i32) -> anyhow::Result<()> {
    wait_object(TIMEOUT, &foos(client), name, |f: &Foo| {
        let available = f.status.as_ref().map(|s| s.available_replicas);
        ensure!(available == Some(n), "availableReplicas {available:?}");
        Ok(())
    })
    .await
    .map(|_| ())
}

async fn wait_ready_in_set(set: &ClusterSet, name: &str, ready: bool) -> anyhow::Result<()> {
    wait_for(
        TIMEOUT,
        &format!("{name} ready={ready} in the set"),
        || async {
            let now = set.get(name).is_some_and(|c| c.ready);
            ensure!(now == ready, "ready={now}");
            Ok(())
        },
    )
    .await
}

/// Foos in member2 and member3 with the same namespace and name get two Deployments in
/// the central cluster; status and an Event come back to each Foo in its own cluster.
async fn fan_in(fed: &Federation) -> anyhow::Result<()> {
    for member in &fed.members[1..] {
        wait_crd(member).await?;
        apply_foo(member, "web", 1).await?;
    }
    for cluster in ["member2", "member3"] {
        let d = wait_present(TIMEOUT, &deployments(fed), &deployment_of(cluster, "web")).await?;
        let owner = d
            .annotations()
            .get(OWNER_ANNOTATION)
            .context("owner annotation")?;
        ensure!(
            owner.contains(&format!("\"cluster\":\"{cluster}\"")),
            "{owner}"
        );
    }
    for member in &fed.members[1..] {
        wait_available(member, "web", 1).await?;
        wait_for(TIMEOUT, "a DeploymentCreated Event on the Foo", || async {
            let events = events_about(member, NS, "web", "DeploymentCreated").await?;
            ensure!(!events.is_empty(), "none yet");
            Ok(())
        })
        .await?;
    }
    Ok(())
}

/// A deleted Deployment comes back; a replica change flows through.
async fn repair_and_update(fed: &Federation) -> anyhow::Result<()> {
    let name = deployment_of("member2", "web");
    let before = deployments(fed).get(&name).await?;
    deployments(fed)
        .delete(&name, &DeleteParams::default())
        .await?;
    wait_object(TIMEOUT, &deployments(fed), &name, |d: &Deployment| {
        ensure!(d.uid() != before.uid(), "still the old one");
        Ok(())
    })
    .await?;
    apply_foo(&fed.members[1], "web", 2).await?;
    wait_available(&fed.members[1], "web", 2).await
}

/// A deleted Foo deletes its Deployment, then goes.
async fn delete_foo(fed: &Federation, member: usize, cluster: &str) -> anyhow::Result<()> {
    foos(&fed.members[member])
        .delete("web", &DeleteParams::default())
        .await?;
    wait_absent(TIMEOUT, &deployments(fed), &deployment_of(cluster, "web")).await?;
    wait_absent(TIMEOUT, &foos(&fed.members[member]), "web").await
}

/// A Foo deleted with the Orphan policy leaves its Deployment, without the owner reference.
async fn orphan(fed: &Federation) -> anyhow::Result<()> {
    let member2 = &fed.members[1];
    let policy = json!({foo::DELETION_POLICY_ANNOTATION: "Orphan"});
    apply_foo_annotated(member2, "orphan", 1, policy).await?;
    let name = deployment_of("member2", "orphan");
    wait_present(TIMEOUT, &deployments(fed), &name).await?;
    foos(member2)
        .delete("orphan", &DeleteParams::default())
        .await?;
    wait_absent(TIMEOUT, &foos(member2), "orphan").await?;
    let left = deployments(fed).get(&name).await?;
    ensure!(
        !left.annotations().contains_key(OWNER_ANNOTATION)
            && !left.labels().contains_key(OWNER_LABEL),
        "still owned: {:?}",
        left.metadata
    );
    Ok(())
}

/// member3 leaves the registry: its Deployment stays (its owner cannot be confirmed gone),
/// a Foo made meanwhile waits; when it joins again, that Foo gets its Deployment.
async fn leave_and_join(fed: &Federation, set: &ClusterSet) -> anyhow::Result<()> {
    let member3 = &fed.members[2];
    apply_foo(member3, "kept", 1).await?;
    let kept = deployment_of("member3", "kept");
    wait_present(TIMEOUT, &deployments(fed), &kept).await?;
    let registry: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), REGISTRY_NS);
    let registered = registry.get("member3").await?;
    registry.delete("member3", &DeleteParams::default()).await?;
    wait_absent(TIMEOUT, &registry, "member3").await?;
    wait_for(TIMEOUT, "member3 gone from the set", || async {
        ensure!(set.get("member3").is_none(), "still there");
        Ok(())
    })
    .await?;
    apply_foo(member3, "late", 1).await?;
    // A change of the kept Deployment makes the controller look at its (unknown) owner.
    let touch = json!({"metadata": {"labels": {"touched": "yes"}}});
    deployments(fed)
        .patch(&kept, &PatchParams::default(), &Patch::Merge(touch))
        .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    ensure!(
        deployments(fed).get_opt(&kept).await?.is_some(),
        "a Deployment was collected while its owner's cluster was away"
    );
    let late = deployment_of("member3", "late");
    ensure!(
        deployments(fed).get_opt(&late).await?.is_none(),
        "served while away"
    );
    let rejoin = KubeFedCluster {
        metadata: ObjectMeta {
            name: Some("member3".into()),
            labels: registered.metadata.labels.clone(),
            annotations: registered.metadata.annotations.clone(),
            ..ObjectMeta::default()
        },
        spec: registered.spec.clone(),
        status: None,
    };
    registry.create(&PostParams::default(), &rejoin).await?;
    wait_ready_in_set(set, "member3", true).await?;
    wait_present(TIMEOUT, &deployments(fed), &late).await?;
    wait_present(TIMEOUT, &deployments(fed), &kept).await?;
    Ok(())
}

/// The central cluster goes down; a Foo deleted meanwhile goes at once, and its Deployment
/// is collected when the central cluster is back.
async fn owner_deleted_while_dependents_cluster_is_down(
    fed: &Federation,
    set: &ClusterSet,
) -> anyhow::Result<()> {
    let member2 = &fed.members[1];
    apply_foo(member2, "orphaned", 1).await?;
    let name = deployment_of("member2", "orphaned");
    wait_present(TIMEOUT, &deployments(fed), &name).await?;
    fed.env.stop_apiserver(CENTRAL).await?;
    wait_ready_in_set(set, CENTRAL, false).await?;
    foos(member2)
        .delete("orphaned", &DeleteParams::default())
        .await?;
    wait_absent(TIMEOUT, &foos(member2), "orphaned").await?;
    fed.env.start_apiserver(CENTRAL).await?;
    wait_ready_in_set(set, CENTRAL, true).await?;
    wait_absent(TIMEOUT, &deployments(fed), &name).await
}

#[tokio::test]
async fn the_foo_controller_fans_in_follows_clusters_and_collects_across_clusters()
-> anyhow::Result<()> {
    let fed = federation_with_pods(3).await?;
    grant_example_rbac(&fed).await?;
    let set = ClusterSet::new();
    let _source = KubeFedSource::start(set.clone(), fed.host.clone(), REGISTRY_NS);
    let install = tokio::spawn(foo::install_on_join(set.clone(), CENTRAL.into()));
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = std::sync::Arc::new(ControllerMetrics::new(&mut registry));
    let controller = tokio::spawn({
        let (set, metrics) = (set.clone(), metrics.clone());
        async move { foo::run(set, CENTRAL, Some(metrics)).await }
    });
    let result = async {
        fan_in(&fed).await.context("fan-in")?;
        repair_and_update(&fed).await.context("repair")?;
        delete_foo(&fed, 2, "member3").await.context("delete")?;
        orphan(&fed).await.context("orphan")?;
        leave_and_join(&fed, &set).await.context("leave and join")?;
        owner_deleted_while_dependents_cluster_is_down(&fed, &set)
            .await
            .context("central down")
    }
    .await;
    controller.abort();
    install.abort();
    result?;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    for series in [
        "multicluster_controller_reconciles_total{controller=\"foo-controller\",result=\"success\"}",
        "multicluster_controller_gc_operations_total{controller=\"foo-controller\",op=\"delete\"}",
    ] {
        ensure!(text.contains(series), "no {series} in\n{text}");
    }
    Ok(())
}
