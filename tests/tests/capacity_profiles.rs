//! A member's resource summary as ClusterProfile `status.properties` on real clusters:
//! coarse values, so a pod that comes and goes writes no profile, a tenth of the capacity
//! filling does, and a restarted control plane writes none.

use std::{sync::Arc, time::Duration};

use anyhow::ensure;
use flotilla_api::{DEFAULT_NAMESPACE, KubeFedCluster, inventory::ClusterProfile};
use flotilla_controllers::{manager::ControlPlane, metrics::Metrics};
use flotilla_localenv::{NodeCapacity, PodSimulation};
use flotilla_tests::{
    federation::{Federation, federation_with_capacity},
    requests::writes,
    wait_for,
};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Namespace};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

const CPU_AVAILABLE: &str = "resources.flotilla.io/cpu-available";

/// Runs `replicas` pods of 300m CPU in member1's namespace `load`.
async fn load(fed: &Federation, replicas: i32) -> anyhow::Result<()> {
    let member = &fed.members[0];
    let pp = PatchParams::apply("flotilla-tests");
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "load"}});
    Api::<Namespace>::all(member.clone())
        .patch("load", &pp, &Patch::Apply(ns))
        .await?;
    let body = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "load", "namespace": "load"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "load"}},
            "template": {"metadata": {"labels": {"app": "load"}},
                "spec": {"containers": [{"name": "load", "image": "nginx",
                    "resources": {"requests": {"cpu": "300m"}}}]}}}
    });
    Api::<Deployment>::namespaced(member.clone(), "load")
        .patch("load", &pp, &Patch::Apply(body))
        .await?;
    Ok(())
}

/// Waits until member1's summary says `cpu` requested.
async fn wait_requested(fed: &Federation, cpu: &str) -> anyhow::Result<()> {
    let kfcs: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    wait_for(
        Duration::from_secs(60),
        &format!("{cpu} requested"),
        || async {
            let s = kfcs.get("member1").await?.status.and_then(|s| s.resources);
            let got = s.and_then(|s| s.requested.get("cpu").cloned());
            ensure!(got.as_deref() == Some(cpu), "requested {got:?}");
            Ok(())
        },
    )
    .await
}

/// Waits until member1's profile publishes `cpu` available.
async fn wait_available(fed: &Federation, cpu: &str) -> anyhow::Result<()> {
    let profiles: Api<ClusterProfile> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    wait_for(
        Duration::from_secs(60),
        &format!("{cpu} available"),
        || async {
            let p = profiles.get("member1").await?;
            let props = p.status.map(|s| s.properties).unwrap_or_default();
            let got = props.iter().find(|p| p.name == CPU_AVAILABLE);
            ensure!(got.is_some_and(|p| p.value == cpu), "properties {props:?}");
            Ok(())
        },
    )
    .await
}

#[tokio::test]
async fn the_resource_summary_reaches_the_cluster_profile_coarsely_and_not_again_after_a_restart()
-> anyhow::Result<()> {
    let node = NodeCapacity {
        cpu: "8".into(),
        memory: "8Gi".into(),
        pods: "110".into(),
    };
    let pods = PodSimulation::default().with_member("member1", 1, node);
    let mut fed = federation_with_capacity(1, pods, "5s").await?;
    wait_available(&fed, "8").await?;

    // One pod of 300m: the summary follows, the profile (steps of 800m) does not.
    let before = writes(&fed.host, &["clusterprofiles"]).await?;
    load(&fed, 1).await?;
    wait_requested(&fed, "300m").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = writes(&fed.host, &["clusterprofiles"]).await?;
    ensure!(
        before == after,
        "profile writes for one pod: {before} → {after}"
    );

    // Ten: 3 CPUs requested, 5 free, published as 4800m (the nearest step).
    load(&fed, 10).await?;
    wait_available(&fed, "4800m").await?;

    // A restarted control plane writes no profile (waited for longer than a summary
    // period); the next real change is published.
    let before = writes(&fed.host, &["clusterprofiles"]).await?;
    if let Some(cp) = fed.control_plane.take() {
        cp.shutdown().await;
    }
    fed.control_plane = Some(ControlPlane::start(
        fed.host.clone(),
        DEFAULT_NAMESPACE,
        Arc::new(Metrics::new()),
    ));
    tokio::time::sleep(Duration::from_secs(15)).await;
    let after = writes(&fed.host, &["clusterprofiles"]).await?;
    ensure!(
        before == after,
        "profile writes after a restart: {before} → {after}"
    );
    load(&fed, 1).await?;
    wait_available(&fed, "8").await?;
    Ok(())
}
