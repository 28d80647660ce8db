//! Capacity on real clusters: members whose simulated nodes offer different room, their
//! kube-scheduler leaving pods beyond it Pending (`PodScheduled=False/Unschedulable`).

use std::time::Duration;

use anyhow::ensure;
use flotilla_localenv::{NodeCapacity, PodSimulation};
use flotilla_tests::{EnvOptions, env_with, wait_for};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

/// One node of 1 CPU, 1 GiB and 10 pods.
fn small_node() -> NodeCapacity {
    NodeCapacity {
        cpu: "1".into(),
        memory: "1Gi".into(),
        pods: "10".into(),
    }
}

/// Creates namespace `ns` and a Deployment `web` of `replicas` pods requesting `cpu` each.
async fn deployment(client: &Client, ns: &str, replicas: i32, cpu: &str) -> anyhow::Result<()> {
    let pp = PatchParams::apply("flotilla-tests");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    namespaces.patch(ns, &pp, &Patch::Apply(body)).await?;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), ns);
    let body = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx",
                    "resources": {"requests": {"cpu": cpu}}}]}}}
    });
    deployments.patch("web", &pp, &Patch::Apply(body)).await?;
    Ok(())
}

/// The `PodScheduled` condition's status and reason of every pod of `ns`.
async fn scheduled(client: &Client, ns: &str) -> anyhow::Result<Vec<(String, String)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods.list(&ListParams::default()).await?;
    Ok(list
        .items
        .iter()
        .map(|p| {
            let c = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
            (
                c.map(|c| c.status.clone()).unwrap_or_default(),
                c.and_then(|c| c.reason.clone()).unwrap_or_default(),
            )
        })
        .collect())
}

#[tokio::test]
async fn pods_beyond_a_members_node_capacity_stay_pending_unschedulable() -> anyhow::Result<()> {
    let mut options = EnvOptions::with_members(1);
    options.pods = Some(PodSimulation::default().with_member("member1", 1, small_node()));
    let env = env_with(options).await;
    let member = env.members()[0].client().await?;
    // 1 CPU holds two pods of 400m; the third stays Pending.
    deployment(&member, "demo", 3, "400m").await?;
    wait_for(
        Duration::from_secs(60),
        "2 pods scheduled and 1 unschedulable",
        || async {
            let s = scheduled(&member, "demo").await?;
            let ok = s.iter().filter(|(st, _)| st == "True").count();
            let unschedulable = s
                .iter()
                .filter(|(st, r)| st == "False" && r == "Unschedulable")
                .count();
            ensure!((ok, unschedulable) == (2, 1), "pods {s:?}");
            Ok(())
        },
    )
    .await?;
    Ok(())
}
