//! Capacity-aware replicas in the policy model on real clusters: a PropagationPolicy's
//! `replicaScheduling` divides a plain Deployment's replicas by the members' free capacity
//! (Karmada's `dynamicWeight: AvailableReplicas`) through the ReplicaSchedulingPreference
//! the policy controller keeps for it, whose status says per cluster why.

use std::time::Duration;

use anyhow::ensure;
use flotilla_tests::{
    cli::run_ok,
    federation::{Federation, federation_of_2_and_8_cpus},
    member::{deployments, replicas},
    objects::rsp_resource,
    wait_for,
};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Namespace};
use kube::{
    Api,
    api::{DynamicObject, Patch, PatchParams},
};
use serde_json::json;

const NS: &str = "divided";

/// Applies the plain Deployment `web` of `replicas` pods requesting 500m CPU each.
async fn web(fed: &Federation, replicas: i32) -> anyhow::Result<()> {
    let api: Api<Deployment> = Api::namespaced(fed.host.clone(), NS);
    let body = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx",
                    "resources": {"requests": {"cpu": "500m"}}}]}}}
    });
    api.patch(
        "web",
        &PatchParams::apply("flotilla-tests"),
        &Patch::Apply(body),
    )
    .await?;
    Ok(())
}

/// Applies the PropagationPolicy `web` with `replica_scheduling` (or none).
async fn policy(fed: &Federation, replica_scheduling: serde_json::Value) -> anyhow::Result<()> {
    let api: Api<flotilla_api::policy::PropagationPolicy> = Api::namespaced(fed.host.clone(), NS);
    let mut spec = json!({
        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
        "placement": {"clusterSelector": {}}
    });
    if !replica_scheduling.is_null() {
        spec["replicaScheduling"] = replica_scheduling;
    }
    let body = json!({"apiVersion": "policy.flotilla.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "web", "namespace": NS}, "spec": spec});
    api.patch(
        "web",
        &PatchParams::apply("flotilla-tests").force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(())
}

/// Waits until the members run `want` replicas of `web` and, when `reasons` is given,
/// the RSP's status says them per member.
async fn wait_split(
    fed: &Federation,
    want: [i32; 2],
    reasons: Option<[&str; 2]>,
) -> anyhow::Result<()> {
    let rsps: Api<DynamicObject> = Api::namespaced_with(fed.host.clone(), NS, &rsp_resource());
    wait_for(
        Duration::from_secs(90),
        &format!("{want:?} {reasons:?}"),
        || async {
            let mut got = Vec::new();
            for m in &fed.members {
                let d = deployments(m, NS).get_opt("web").await?;
                got.push(d.as_ref().and_then(replicas).unwrap_or(0));
            }
            ensure!(got == want, "replicas {got:?}");
            let rsp = rsps.get_opt("web").await?;
            match reasons {
                Some(r) => {
                    let rsp = rsp.ok_or_else(|| anyhow::anyhow!("no RSP"))?;
                    let status = &rsp.data["status"]["clusters"];
                    let seen: Vec<&str> = (0..2)
                        .map(|i| status[i]["reason"].as_str().unwrap_or_default())
                        .collect();
                    ensure!(seen == r, "status {status}");
                }
                None => ensure!(rsp.is_none(), "the policy's RSP is still there"),
            }
            Ok(())
        },
    )
    .await
}

#[tokio::test]
async fn a_policys_replica_scheduling_divides_a_plain_deployment_by_available_replicas()
-> anyhow::Result<()> {
    let fed = federation_of_2_and_8_cpus().await?;
    let namespaces: Api<Namespace> = Api::all(fed.host.clone());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    namespaces
        .patch(NS, &PatchParams::apply("flotilla-tests"), &Patch::Apply(ns))
        .await?;

    // 10 replicas by 4:16 free → 2 and 8, each with its reason in the policy's RSP.
    web(&fed, 10).await?;
    let available =
        json!({"weightPreference": "AvailableReplicas", "clusters": {"*": {"weight": 1}}});
    policy(&fed, available).await?;
    wait_split(
        &fed,
        [2, 8],
        Some(["AvailableReplicas", "AvailableReplicas"]),
    )
    .await?;
    let rsps: Api<DynamicObject> = Api::namespaced_with(fed.host.clone(), NS, &rsp_resource());
    let made = rsps.get("web").await?;
    ensure!(
        made.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("policy.flotilla.io/materialized"))
            == Some(&"true".to_string()),
        "the RSP is the policy's: {:?}",
        made.metadata
    );
    let out = run_ok(&fed, &["status", "rsp/web", "-n", NS]).await?;
    ensure!(
        out.lines()
            .any(|l| l.contains("member2") && l.contains("AvailableReplicas")),
        "flotilla status: {out}"
    );

    // Static weights with a minimum: member1 first gets its 3, the other 2 go 1:1.
    let weighted = json!({"clusters": {"member1": {"weight": 1, "minReplicas": 3},
        "member2": {"weight": 1}}, "rebalance": true});
    policy(&fed, weighted).await?;
    web(&fed, 5).await?;
    wait_split(&fed, [4, 1], Some(["Weight", "Weight"])).await?;

    // Without replicaScheduling the policy's RSP goes, and the template's replicas return.
    policy(&fed, serde_json::Value::Null).await?;
    wait_split(&fed, [5, 5], None).await?;
    Ok(())
}
