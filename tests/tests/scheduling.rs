//! ReplicaSchedulingPreference on real clusters: replicas spread by weight into member
//! Deployments, and moved to the remaining cluster when one becomes unready.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_tests::{
    federation::apply,
    member::{deployments, replicas},
    objects::FederatedObject,
    objects::rsp_resource,
    setup::federation_with_namespace,
    wait::wait_object,
    wait_for,
};
use kube::Client;
use serde_json::json;

/// The replicas of Deployment `demo/web` in a member, if it exists.
async fn web_replicas(client: &Client) -> anyhow::Result<Option<i32>> {
    let web = deployments(client, "demo").get_opt("web").await?;
    Ok(web.as_ref().and_then(replicas))
}

#[tokio::test]
async fn replicas_are_spread_by_weight_and_follow_cluster_readiness() -> anyhow::Result<()> {
    let fed = federation_with_namespace(2, "demo").await?;
    FederatedObject::deployment("demo", "web", 1, "nginx:1.25")
        .apply(&fed.host)
        .await?;
    apply(
        &fed.host,
        &rsp_resource(),
        Some("demo"),
        &json!({
            "apiVersion": "scheduling.kubefed.io/v1alpha1", "kind": "ReplicaSchedulingPreference",
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"targetKind": "FederatedDeployment", "totalReplicas": 9, "rebalance": true,
                "clusters": {"member1": {"weight": 2}, "member2": {"weight": 1}}}
        }),
    )
    .await?;
    wait_for(
        Duration::from_secs(60),
        "6 replicas in member1 and 3 in member2",
        || async {
            let r1 = web_replicas(&fed.members[0])
                .await?
                .context("absent in member1")?;
            let r2 = web_replicas(&fed.members[1])
                .await?
                .context("absent in member2")?;
            ensure!((r1, r2) == (6, 3), "replicas {r1} {r2}");
            Ok(())
        },
    )
    .await?;

    fed.env.stop_apiserver("member1").await?;
    let m2 = deployments(&fed.members[1], "demo");
    wait_object(Duration::from_secs(60), &m2, "web", |d| {
        let r2 = replicas(d);
        ensure!(r2 == Some(9), "member2 has {r2:?}");
        Ok(())
    })
    .await?;
    Ok(())
}
