//! Health rules of a FederatedTypeConfig (`spec.health`, CEL) on real clusters: a CRD
//! with no controller in the members — the test writes the member objects' status as
//! its operator would — whose rules gate a progressive rollout, fill
//! `status.aggregated` and show in `flotilla status`; then a rule that does not compile
//! is reported on the FTC while the type and every other type keep propagating.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::{
    DEFAULT_NAMESPACE, core::FederatedTypeConfig, federated::FederatedStatus, work::Condition,
};
use flotilla_cli as cli;
use flotilla_controllers::install;
use flotilla_tests::{
    federation::{Federation, apply, federated_namespace, federation},
    host::FederatedRef,
    objects::FederatedObject,
    wait::wait_namespace_in,
    wait_for,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
};
use serde_json::{Value, json};

const NS: &str = "health-rules";
const FTC: &str = "gadgets.example.com";
/// Healthy: Ready, as observed for the object's current generation.
const CURRENT_AND_READY: &str = "has(status.phase) && status.phase == 'Ready' \
     && has(status.observedGeneration) && status.observedGeneration == metadata.generation";
const T: Duration = Duration::from_secs(90);
/// Long enough for the first cluster's object to be created and its status written.
const DEADLINE_SECONDS: u64 = 20;

#[tokio::test]
async fn a_cel_health_rule_gates_a_rollout_and_an_invalid_one_is_reported() -> anyhow::Result<()> {
    let fed = federation(2).await?;
    install_gadgets(&fed).await?;
    flotilla(&fed, &["enable", FTC]).await?;
    set_rules(&fed, rules(CURRENT_AND_READY)).await?;
    let valid = wait_rules_condition(&fed, "Valid").await?;
    assert_eq!(valid.status, "True");
    federated_namespace(&fed, NS).await?;
    wait_namespace_in(&fed.members, NS).await?;

    let gadget = apply_gadget(&fed, 1).await?;
    for i in 0..2 {
        wait_size(fed_gadgets(&fed, i), 1).await?;
        write_status(&fed_gadgets(&fed, i), ready(1)).await?;
    }
    wait_rollout(&gadget, "Complete").await?;
    a_healthy_first_wave_lets_the_second_start(&fed).await?;
    a_failed_member_halts_the_rollout_with_its_message(&fed, &gadget).await?;
    an_invalid_rule_is_reported_and_disturbs_nothing(&fed, &gadget).await?;
    Ok(())
}

/// A new revision reaches member1 first; member2 keeps the old one until member1's
/// Gadget reports `phase: Ready` for its new generation, then gets it.
async fn a_healthy_first_wave_lets_the_second_start(fed: &Federation) -> anyhow::Result<()> {
    apply_gadget(fed, 2).await?;
    let m1 = fed_gadgets(fed, 0);
    wait_size(m1.clone(), 2).await?;
    let m2 = fed_gadgets(fed, 1);
    let held = m2.get("g").await?;
    assert_eq!(
        held.data["spec"]["size"], 1,
        "member2 waits for member1's wave"
    );
    write_status(&m1, ready(2)).await?;
    wait_size(m2, 2).await?;
    Ok(())
}

/// member2's Gadget reports `phase: Failed`: its wave fails with the rule's message, the
/// aggregated status counts one cluster ready of two and names why, and `flotilla status`
/// shows it.
async fn a_failed_member_halts_the_rollout_with_its_message(
    fed: &Federation,
    gadget: &FederatedRef,
) -> anyhow::Result<()> {
    write_status(
        &fed_gadgets(fed, 1),
        json!({"phase": "Failed", "reason": "disk full", "readyMembers": 0}),
    )
    .await?;
    let status = wait_rollout(gadget, "Failed").await?;
    let c = status.rollout_condition().context("condition")?;
    assert!(c.message.contains("member2"), "{}", c.message);
    assert!(
        c.message.contains("phase Failed: disk full"),
        "the rule's message: {}",
        c.message
    );
    let status = wait_for(T, "member2 failed in status.aggregated", || async {
        let status = gadget.status().await?;
        let a = status.aggregated.clone().context("no status.aggregated")?;
        ensure!(a.clusters == "1/2" && !a.health.is_empty(), "{a:?}");
        Ok(status)
    })
    .await?;
    let a = status.aggregated.context("aggregated")?;
    assert_eq!(
        a.ready.as_deref(),
        Some("2/4"),
        "readyMembers of spec.size summed"
    );
    assert_eq!(a.health.len(), 1, "{:?}", a.health);
    assert_eq!(
        (a.health[0].cluster.as_str(), a.health[0].state.as_str()),
        ("member2", "Failed")
    );
    assert_eq!(a.health[0].message, "phase Failed: disk full");
    let out = flotilla(fed, &["status", "-n", NS]).await?;
    assert!(out.contains("Failed: phase Failed: disk full"), "{out}");
    Ok(())
}

/// A rule that does not compile: the FTC says which and why; Gadgets fall back to healthy
/// once propagated (saying so), so a new revision rolls out everywhere; other types go on.
async fn an_invalid_rule_is_reported_and_disturbs_nothing(
    fed: &Federation,
    gadget: &FederatedRef,
) -> anyhow::Result<()> {
    set_rules(fed, rules("status.phase == ")).await?;
    let invalid = wait_rules_condition(fed, "InvalidHealthRule").await?;
    assert_eq!(invalid.status, "False");
    assert!(
        invalid.message.starts_with("spec.health.healthy: "),
        "names the field: {}",
        invalid.message
    );
    apply_gadget(fed, 3).await?;
    wait_rollout(gadget, "Complete").await?;
    let status = wait_for(T, "every cluster ready on the fallback", || async {
        let status = gadget.status().await?;
        let a = status.aggregated.clone().context("no status.aggregated")?;
        ensure!(a.clusters == "2/2", "{a:?}");
        Ok(status)
    })
    .await?;
    let a = status.aggregated.context("aggregated")?;
    assert_eq!(a.health.len(), 2, "{:?}", a.health);
    assert!(
        a.health
            .iter()
            .all(|h| h.state == "Healthy" && h.message.starts_with("InvalidHealthRule: ")),
        "{:?}",
        a.health
    );
    for i in 0..2 {
        let g = fed_gadgets(fed, i).get("g").await?;
        assert_eq!(
            g.data["spec"]["size"],
            3,
            "member{} has the new revision",
            i + 1
        );
    }
    let cm = FederatedObject::config_map(NS, "after", json!({"k": "v"}));
    cm.apply(&fed.host).await?.wait_propagated().await?;
    Ok(())
}

/// The Gadget CRD (`spec.size`, a free-form status with a status subresource) in the host
/// and every member.
async fn install_gadgets(fed: &Federation) -> anyhow::Result<()> {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": FTC},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    }))?;
    for client in std::iter::once(&fed.host).chain(&fed.members) {
        install::install_crds(client, std::slice::from_ref(&crd), "flotilla-tests", T).await?;
    }
    Ok(())
}

/// Gadget health: `healthy` as given; Failed phase fails with the phase and reason.
fn rules(healthy: &str) -> Value {
    json!({
        "healthy": healthy,
        "failed": "has(status.phase) && status.phase == 'Failed'",
        "message": "has(status.phase) ? 'phase ' + status.phase \
                    + (has(status.reason) ? ': ' + status.reason : '') : 'no phase yet'",
        "replicas": {"desired": "spec.size",
                     "ready": "has(status.readyMembers) ? status.readyMembers : 0"},
    })
}

async fn set_rules(fed: &Federation, health: Value) -> anyhow::Result<()> {
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    let patch = json!({"spec": {"statusCollection": "Enabled", "health": health}});
    ftcs.patch(FTC, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Waits for the FTC's `HealthRules` condition with `reason` for its current generation.
async fn wait_rules_condition(fed: &Federation, reason: &str) -> anyhow::Result<Condition> {
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    wait_for(T, &format!("HealthRules {reason}"), || async {
        let ftc = ftcs.get(FTC).await?;
        let status = ftc.status.unwrap_or_default();
        let c = status
            .conditions
            .into_iter()
            .find(|c| c.type_ == "HealthRules")
            .context("no HealthRules condition")?;
        ensure!(
            c.reason == reason && c.observed_generation == ftc.metadata.generation,
            "{c:?}"
        );
        Ok(c)
    })
    .await
}

/// Applies the FederatedGadget `g`: both members, one cluster at a time, gated by health.
async fn apply_gadget(fed: &Federation, size: i64) -> anyhow::Result<FederatedRef> {
    let object = FederatedObject::new("Gadget", "gadgets", NS, "g")
        .template(json!({"spec": {"size": size}}))
        .on_clusters(&["member1", "member2"]);
    let mut manifest = object.to_json();
    manifest["spec"]["rollout"] = json!({
        "strategy": "Progressive",
        "maxConcurrency": 1,
        "progressDeadlineSeconds": DEADLINE_SECONDS,
        "maxFailures": 0,
    });
    apply(&fed.host, &object.api_resource(), Some(NS), &manifest).await?;
    Ok(object.in_host(&fed.host))
}

fn fed_gadgets(fed: &Federation, index: usize) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    Api::namespaced_with(fed.members[index].clone(), NS, &ar)
}

/// A Ready status with `members` ready.
fn ready(members: i64) -> Value {
    json!({"phase": "Ready", "readyMembers": members})
}

/// Waits for a member Gadget `g` of `size`.
async fn wait_size(api: Api<DynamicObject>, size: i64) -> anyhow::Result<()> {
    wait_for(T, &format!("a member Gadget of size {size}"), || async {
        let g = api.get_opt("g").await?.context("no Gadget")?;
        ensure!(g.data["spec"]["size"] == size, "{:?}", g.data["spec"]);
        Ok(())
    })
    .await
}

/// Waits until the `Rollout` condition has `reason` for the current generation.
async fn wait_rollout(gadget: &FederatedRef, reason: &str) -> anyhow::Result<FederatedStatus> {
    gadget.wait_rollout(reason, T).await
}

/// Writes a member Gadget's status for its current generation, as its operator would.
async fn write_status(api: &Api<DynamicObject>, mut status: Value) -> anyhow::Result<()> {
    let generation = api.get("g").await?.metadata.generation;
    status["observedGeneration"] = json!(generation);
    let patch = json!({ "status": status });
    api.patch_status("g", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// `flotilla ARGS` against the host, in-process; its output.
async fn flotilla(fed: &Federation, args: &[&str]) -> anyhow::Result<String> {
    let kubeconfig = fed.env.kubeconfig_path();
    let mut argv = vec![
        "flotilla".to_string(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--context".into(),
        "host".into(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    let ctx = cli::Context::captured();
    let result = cli::run(argv, ctx.clone()).await;
    let text = ctx.out.text();
    result.with_context(|| format!("flotilla {args:?} printed:\n{text}"))?;
    Ok(text)
}
