//! ReplicaSchedulingPreference on real clusters: replicas spread by weight into member
//! Deployments, and moved to the remaining cluster when one becomes unready.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_tests::{
    federation::{apply, federated, federated_namespace, federation},
    wait_for,
};
use k8s_openapi::api::apps::v1::Deployment;
use kube::{Api, Client, core::ApiResource};
use serde_json::json;

async fn replicas(client: &Client) -> anyhow::Result<Option<i32>> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), "demo");
    Ok(api
        .get_opt("web")
        .await?
        .and_then(|d| d.spec)
        .and_then(|s| s.replicas))
}

#[tokio::test]
async fn replicas_are_spread_by_weight_and_follow_cluster_readiness() -> anyhow::Result<()> {
    let fed = federation(2).await?;
    federated_namespace(&fed, "demo").await?;
    apply(
        &fed.host,
        &federated("Deployment", "deployments"),
        Some("demo"),
        &json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedDeployment",
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {
                "template": {"spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]}}
                }},
                "placement": {"clusterSelector": {}}
            }
        }),
    )
    .await?;
    let rsp_ar = ApiResource {
        group: "scheduling.kubefed.io".into(),
        version: "v1alpha1".into(),
        api_version: "scheduling.kubefed.io/v1alpha1".into(),
        kind: "ReplicaSchedulingPreference".into(),
        plural: "replicaschedulingpreferences".into(),
    };
    apply(
        &fed.host,
        &rsp_ar,
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
            let r1 = replicas(&fed.members[0])
                .await?
                .context("absent in member1")?;
            let r2 = replicas(&fed.members[1])
                .await?
                .context("absent in member2")?;
            ensure!((r1, r2) == (6, 3), "replicas {r1} {r2}");
            Ok(())
        },
    )
    .await?;

    fed.env.stop_apiserver("member1").await?;
    wait_for(
        Duration::from_secs(60),
        "all 9 replicas in member2",
        || async {
            let r2 = replicas(&fed.members[1])
                .await?
                .context("absent in member2")?;
            ensure!(r2 == 9, "member2 has {r2}");
            Ok(())
        },
    )
    .await?;
    Ok(())
}
