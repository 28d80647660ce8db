//! The way back from `Federated<Kind>` to plain manifests (`flotilla unfederate`, a policy
//! with `conflictResolution: Overwrite` taking the Federated objects over without touching
//! their member copies), and a policy-made Deployment whose replicas a
//! ReplicaSchedulingPreference divides (the two controllers agree instead of fighting).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_tests::{
    cli::run_ok,
    federation::Federation,
    member::{config_maps, deployments, first_image, replicas},
    wait_for,
};
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};
use serde_json::Value;

use super::{T, apply, kubectl, namespace};

/// How long nothing may be written for "no writes" to hold.
const QUIET: Duration = Duration::from_secs(6);

const FEDERATED: &str = r#"
apiVersion: types.kubefed.io/v1beta1
kind: FederatedNamespace
metadata: {name: migrate}
spec:
  placement: {clusterSelector: {}}
---
apiVersion: types.kubefed.io/v1beta1
kind: FederatedDeployment
metadata: {name: web}
spec:
  template:
    metadata: {labels: {app: web}}
    spec:
      replicas: 2
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec:
          containers:
          - {name: web, image: "registry.example/web:1.0"}
  placement:
    clusters: [{name: member1}, {name: member2}]
  overrides:
  - clusterName: member2
    clusterOverrides:
    - {path: /spec/replicas, value: 3}
---
apiVersion: types.kubefed.io/v1beta1
kind: FederatedConfigMap
metadata: {name: settings}
spec:
  template: {data: {color: blue}}
  placement: {clusterSelector: {}}
"#;

fn federated(fed: &Federation, ns: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("types.kubefed.io", "v1beta1", kind);
    let plural = format!("{}s", kind.to_lowercase());
    Api::namespaced_with(
        fed.host.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, &plural),
    )
}

/// What Flotilla's writes to a member object change: its generation, the desired-hash
/// annotation and the time of Flotilla's own managed-fields entry (not the resourceVersion:
/// the member's deployment controller keeps writing the Deployment's status).
fn written(meta: &kube::core::ObjectMeta) -> String {
    let flotilla = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.manager.as_deref() == Some("flotilla"))
        .map(|f| format!("{:?}", f.time))
        .collect::<Vec<_>>()
        .join(",");
    let hash = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get("flotilla.io/desired-hash"))
        .cloned()
        .unwrap_or_default();
    format!(
        "generation {:?}, hash {hash}, applied {flotilla}",
        meta.generation
    )
}

/// [`written`] of each member's Deployment `web` and ConfigMap `settings`.
async fn member_versions(fed: &Federation, ns: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (i, m) in fed.members.iter().enumerate() {
        let d = deployments(m, ns).get("web").await?;
        let c = config_maps(m, ns).get("settings").await?;
        out.insert(format!("member{}/deployment", i + 1), written(&d.metadata));
        out.insert(format!("member{}/configmap", i + 1), written(&c.metadata));
    }
    Ok(out)
}

/// Waits until the sync controller has seen the Federated object's latest generation.
async fn observed(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    wait_for(T, "the Federated object's generation observed", || async {
        let o = api.get(name).await?;
        let seen = o
            .data
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64);
        ensure!(
            seen == o.metadata.generation,
            "{seen:?} {:?}",
            o.metadata.generation
        );
        Ok(())
    })
    .await
}

pub async fn federated_objects_are_taken_over_without_member_writes(
    fed: &Federation,
) -> anyhow::Result<()> {
    let ns = "migrate";
    namespace(fed, ns).await?;
    apply(fed, ns, FEDERATED)?;
    let (d1, d2) = (
        deployments(&fed.members[0], ns),
        deployments(&fed.members[1], ns),
    );
    wait_for(T, "the Federated objects propagated", || async {
        ensure!(replicas(&d1.get("web").await?) == Some(2));
        ensure!(replicas(&d2.get("web").await?) == Some(3));
        for m in &fed.members {
            config_maps(m, ns).get("settings").await?;
        }
        Ok(())
    })
    .await?;
    let feds = federated(fed, ns, "FederatedDeployment");
    observed(&feds, "web").await?;
    let before = member_versions(fed, ns).await?;

    // The way back: the plain objects and their policies, applied.
    let printed = run_ok(fed, &["unfederate", "federateddeployment", "web", "-n", ns]).await?;
    ensure!(
        printed.contains("kind: OverridePolicy")
            && printed.contains("conflictResolution: Overwrite"),
        "{printed}"
    );
    // Both ways the docs give: the printed YAML through `kubectl apply --server-side`, and
    // `--apply`.
    kubectl(
        fed,
        &["apply", "--server-side", "-n", ns, "-f", "-"],
        Some(&printed),
    )?;
    run_ok(
        fed,
        &["unfederate", "configmaps", "settings", "-n", ns, "--apply"],
    )
    .await?;
    for (kind, name) in [
        ("FederatedDeployment", "web"),
        ("FederatedConfigMap", "settings"),
    ] {
        let api = federated(fed, ns, kind);
        wait_for(
            T,
            "the Federated object taken over by its policy",
            || async {
                let o = api.get(name).await?;
                ensure!(
                    o.labels()
                        .get("policy.flotilla.io/materialized")
                        .map(String::as_str)
                        == Some("true"),
                    "{:?}",
                    o.labels()
                );
                ensure!(o.owner_references().iter().any(|r| r.name == name));
                Ok(())
            },
        )
        .await?;
        observed(&api, name).await?;
    }
    tokio::time::sleep(QUIET).await;
    let after = member_versions(fed, ns).await?;
    if after != before {
        let d = serde_json::to_string_pretty(&d1.get("web").await?)?;
        let c =
            serde_json::to_string_pretty(&config_maps(&fed.members[0], ns).get("settings").await?)?;
        anyhow::bail!("the takeover wrote to a member: {before:?} → {after:?}\n{d}\n{c}");
    }
    let events = kubectl(fed, &["get", "events", "-n", ns], None)?;
    ensure!(events.contains("TookOver"), "{events}");

    // The plain object drives its copies now; the override policy keeps member2's replicas.
    kubectl(
        fed,
        &[
            "set",
            "image",
            "deployment/web",
            "web=registry.example/web:2.0",
            "-n",
            ns,
        ],
        None,
    )?;
    wait_for(T, "the new image in both members", || async {
        for d in [&d1, &d2] {
            let dep = d.get("web").await?;
            ensure!(first_image(&dep) == Some("registry.example/web:2.0"));
        }
        ensure!(replicas(&d2.get("web").await?) == Some(3));
        Ok(())
    })
    .await?;
    // An override the policies no longer set goes, although the user wrote it first.
    kubectl(fed, &["delete", "overridepolicies", "web", "-n", ns], None)?;
    wait_for(T, "member2 back to the template's replicas", || async {
        ensure!(replicas(&d2.get("web").await?) == Some(2));
        Ok(())
    })
    .await?;
    Ok(())
}

const DIVIDED: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: web, image: "registry.example/web:1.0"}
---
apiVersion: policy.flotilla.io/v1alpha1
kind: PropagationPolicy
metadata: {name: web}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  placement: {clusterSelector: {}}
---
apiVersion: scheduling.kubefed.io/v1alpha1
kind: ReplicaSchedulingPreference
metadata: {name: web}
spec:
  targetKind: FederatedDeployment
  totalReplicas: 6
  clusters:
    member1: {weight: 2}
    member2: {weight: 1}
"#;

pub async fn a_replica_scheduling_preference_divides_a_policy_made_deployment(
    fed: &Federation,
) -> anyhow::Result<()> {
    let ns = "divide";
    namespace(fed, ns).await?;
    apply(fed, ns, DIVIDED)?;
    let (d1, d2) = (
        deployments(&fed.members[0], ns),
        deployments(&fed.members[1], ns),
    );
    let split = |a: i32, b: i32, image: &'static str| {
        let (d1, d2) = (d1.clone(), d2.clone());
        async move {
            let (x, y) = (d1.get("web").await?, d2.get("web").await?);
            ensure!(
                (replicas(&x), replicas(&y)) == (Some(a), Some(b)),
                "{:?} {:?}",
                replicas(&x),
                replicas(&y)
            );
            ensure!(first_image(&x) == Some(image) && first_image(&y) == Some(image));
            Ok(())
        }
    };
    wait_for(T, "6 replicas divided 4/2", || {
        split(4, 2, "registry.example/web:1.0")
    })
    .await?;
    // Settled: the spec's generation (not the status the sync controller keeps current)
    // holds still for a while. Two controllers fighting would bump it forever.
    let feds = federated(fed, ns, "FederatedDeployment");
    wait_for(T, "the FederatedDeployment settled, no fight", || async {
        let before = feds.get("web").await?.metadata.generation;
        tokio::time::sleep(QUIET).await;
        let after = feds.get("web").await?.metadata.generation;
        ensure!(before == after, "generation {before:?} → {after:?}");
        Ok(())
    })
    .await?;
    // A template change through the plain object keeps the division.
    kubectl(
        fed,
        &[
            "set",
            "image",
            "deployment/web",
            "web=registry.example/web:2.0",
            "-n",
            ns,
        ],
        None,
    )?;
    wait_for(T, "the new image, still 4/2", || {
        split(4, 2, "registry.example/web:2.0")
    })
    .await?;
    // Without the RSP the policy's own spec comes back: the template's one replica.
    kubectl(
        fed,
        &["delete", "replicaschedulingpreferences", "web", "-n", ns],
        None,
    )
    .context("deleting the RSP")?;
    wait_for(T, "the template's replicas everywhere", || {
        split(1, 1, "registry.example/web:2.0")
    })
    .await?;
    Ok(())
}
