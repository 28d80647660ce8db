//! `flotilla unfederate`: the way back from `flotilla federate`. From a live
//! Federated&lt;Kind&gt; it builds the plain object (its template, named as it is) and the
//! policies that propagate it as the Federated object did — a PropagationPolicy with its
//! placement, rollout, dependencies, drift and orphan settings and `conflictResolution:
//! Overwrite`, and an OverridePolicy with its per-cluster overrides. Applied (in the
//! printed order: overrides, object, propagation policy), the policy takes the Federated
//! object over: its member copies are left as they are when nothing differs.

use anyhow::Context as _;
use flotilla_api::{FederatedTypeConfigSpec, ORPHAN_ANNOTATION};
use flotilla_core::drift::POLICY_ANNOTATION as DRIFT_POLICY_ANNOTATION;
use serde_json::{Map, Value, json};

use super::enable::OutputFormat;
use super::{Context, GlobalArgs, access, federate, resolve};

/// Examples of `flotilla unfederate --help`.
pub const EXAMPLES: &str = "\
Examples:
  # Print the plain Deployment and the policies that take FederatedDeployment web over
  flotilla unfederate federateddeployment web -n demo

  # ... and apply them to the host (the FederatedDeployment becomes the policy's)
  flotilla unfederate deployments.apps web -n demo --apply

  # Name the policies
  flotilla unfederate configmap settings -n demo --policy settings-everywhere --apply";

/// Arguments of `flotilla unfederate`.
#[derive(Debug, Clone, clap::Args)]
pub struct UnfederateArgs {
    /// The type (target or federated, e.g. `deployments.apps` or `federateddeployment`).
    #[arg(value_name = "TYPE")]
    pub type_name: String,
    /// Name of the federated object.
    pub name: String,
    /// Name of the policies (default: the object's name).
    #[arg(long, value_name = "NAME")]
    pub policy: Option<String>,
    /// Apply the objects to the host instead of printing them.
    #[arg(long, conflicts_with = "output")]
    pub apply: bool,
    /// Print the objects (the default unless `--apply`).
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

/// The objects that replace the Federated object `fed` of the type `spec`, in the order to
/// apply them: the OverridePolicy (when it has overrides), the plain object, the
/// PropagationPolicy (cluster-scoped twins for a cluster-scoped type).
pub fn replacement_of(
    spec: &FederatedTypeConfigSpec,
    fed: &Value,
    policy: &str,
) -> anyhow::Result<Vec<Value>> {
    let name = fed
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .context("the federated object has no name")?;
    let target = &spec.target_type;
    let namespace = target
        .namespaced()
        .then(|| fed.pointer("/metadata/namespace").and_then(Value::as_str))
        .flatten();
    let fspec = fed.get("spec").cloned().unwrap_or_else(|| json!({}));
    let mut native = fspec
        .get("template")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    native.insert("apiVersion".into(), target.api_version().into());
    native.insert("kind".into(), target.kind.clone().into());
    let mut meta = native
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    meta.insert("name".into(), name.into());
    if let Some(ns) = namespace {
        meta.insert("namespace".into(), ns.into());
    }
    native.insert("metadata".into(), Value::Object(meta));
    let selector = json!([{"apiVersion": target.api_version(), "kind": target.kind, "name": name}]);
    let policy_meta = || {
        let mut m = json!({"name": policy});
        if let Some(ns) = namespace {
            m["namespace"] = ns.into();
        }
        m
    };
    let (pp_kind, op_kind) = match namespace {
        Some(_) => ("PropagationPolicy", "OverridePolicy"),
        None => ("ClusterPropagationPolicy", "ClusterOverridePolicy"),
    };
    let mut out = Vec::new();
    let rules = override_rules(&fspec);
    if !rules.is_empty() {
        out.push(json!({
            "apiVersion": "policy.flotilla.io/v1alpha1", "kind": op_kind,
            "metadata": policy_meta(),
            "spec": {"resourceSelectors": selector, "overrideRules": rules},
        }));
    }
    out.push(Value::Object(native));
    out.push(json!({
        "apiVersion": "policy.flotilla.io/v1alpha1", "kind": pp_kind,
        "metadata": policy_meta(),
        "spec": propagation_spec(fed, &fspec, selector),
    }));
    Ok(out)
}

/// A PropagationPolicy's spec that places as the Federated object's spec and annotations do.
fn propagation_spec(fed: &Value, fspec: &Value, selector: Value) -> Value {
    let mut spec = Map::new();
    spec.insert("resourceSelectors".into(), selector);
    for field in [
        "placement",
        "rollout",
        "retainReplicas",
        "propagateDependencies",
    ] {
        if let Some(v) = fspec.get(field) {
            spec.insert(field.into(), v.clone());
        }
    }
    let annotation = |k: &str| {
        fed.pointer("/metadata/annotations")
            .and_then(|a| a.get(k))
            .and_then(Value::as_str)
    };
    if let Some(d) = annotation(DRIFT_POLICY_ANNOTATION) {
        spec.insert("driftPolicy".into(), d.into());
    }
    if annotation(ORPHAN_ANNOTATION) == Some("true") {
        spec.insert("preserveResourcesOnDeletion".into(), true.into());
    }
    spec.insert("conflictResolution".into(), "Overwrite".into());
    Value::Object(spec)
}

/// One override rule per cluster of the Federated object's `spec.overrides`, its
/// operations as plaintext overriders in their order.
fn override_rules(fspec: &Value) -> Vec<Value> {
    let overrides = fspec
        .get("overrides")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    overrides
        .iter()
        .filter_map(|o| {
            let cluster = o.get("clusterName")?.as_str()?;
            let ops: Vec<Value> = o
                .get("clusterOverrides")?
                .as_array()?
                .iter()
                .map(|op| {
                    let mut p = json!({
                        "path": op.get("path").cloned().unwrap_or(Value::Null),
                        "operator": op.get("op").cloned().unwrap_or_else(|| "replace".into()),
                    });
                    if let Some(v) = op.get("value") {
                        p["value"] = v.clone();
                    }
                    p
                })
                .collect();
            (!ops.is_empty()).then(|| {
                json!({
                    "targetCluster": {"clusterNames": [cluster]},
                    "overriders": {"plaintext": ops},
                })
            })
        })
        .collect()
}

/// Runs `flotilla unfederate`.
pub async fn run(global: &GlobalArgs, args: UnfederateArgs, ctx: &Context) -> anyhow::Result<()> {
    let access = access::host(global).await?;
    let host = access.client()?;
    let ftc = resolve::ftc_for(&host, &global.kubefed_namespace, &args.type_name).await?;
    let fed = &ftc.spec.federated_type;
    let ns = access::namespace(global, &access);
    let api = resolve::federated_api(&host, fed, &ns);
    let obj = api
        .get(&args.name)
        .await
        .with_context(|| format!("reading {} {}", fed.kind, args.name))?;
    let value = serde_json::to_value(&obj)?;
    let policy = args.policy.as_deref().unwrap_or(&args.name);
    let objects = replacement_of(&ftc.spec, &value, policy)?;
    if !args.apply {
        let docs = objects
            .iter()
            .map(serde_saphyr::to_string)
            .collect::<Result<Vec<_>, _>>()
            .context("rendering YAML")?;
        ctx.out.write(docs.join("---\n"));
        return Ok(());
    }
    for o in &objects {
        federate::apply(&host, o).await?;
        ctx.out.line(format!(
            "{} {} applied",
            o["kind"].as_str().unwrap_or_default(),
            o.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::federate::tests::spec_of;

    #[test]
    fn a_federated_deployment_becomes_a_deployment_and_its_two_policies() {
        let fed = json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedDeployment",
            "metadata": {"name": "web", "namespace": "demo",
                "annotations": {"flotilla.io/drift-policy": "Report", "kubefed.io/orphan": "true"}},
            "spec": {
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"replicas": 2}},
                "placement": {"clusters": [{"name": "a"}, {"name": "b"}]},
                "overrides": [{"clusterName": "b", "clusterOverrides": [
                    {"path": "/spec/replicas", "value": 3},
                    {"op": "remove", "path": "/metadata/labels/app"}]}],
                "rollout": {"maxUnavailableClusters": 1},
            }
        });
        let out = replacement_of(&spec_of("deployments"), &fed, "web").expect("built");
        let kinds: Vec<_> = out
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(kinds, ["OverridePolicy", "Deployment", "PropagationPolicy"]);
        let (op, dep, pp) = (&out[0], &out[1], &out[2]);
        assert_eq!(dep["apiVersion"], "apps/v1");
        assert_eq!(
            dep["metadata"],
            json!({"name": "web", "namespace": "demo", "labels": {"app": "web"}})
        );
        assert_eq!(dep["spec"]["replicas"], 2);
        let rule = &op["spec"]["overrideRules"][0];
        assert_eq!(rule["targetCluster"]["clusterNames"], json!(["b"]));
        assert_eq!(
            rule["overriders"]["plaintext"],
            json!([{"path": "/spec/replicas", "operator": "replace", "value": 3},
                   {"path": "/metadata/labels/app", "operator": "remove"}])
        );
        assert_eq!(pp["metadata"], json!({"name": "web", "namespace": "demo"}));
        let s = &pp["spec"];
        assert_eq!(
            s["resourceSelectors"],
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}])
        );
        assert_eq!(s["placement"], fed["spec"]["placement"]);
        assert_eq!(s["rollout"], fed["spec"]["rollout"]);
        assert_eq!(s["driftPolicy"], "Report");
        assert_eq!(s["preserveResourcesOnDeletion"], true);
        assert_eq!(s["conflictResolution"], "Overwrite");
        // Each one reads back as the API's types.
        serde_json::from_value::<flotilla_api::policy::PropagationPolicy>(pp.clone())
            .expect("a PropagationPolicy");
        serde_json::from_value::<flotilla_api::policy::OverridePolicy>(op.clone())
            .expect("an OverridePolicy");
    }

    #[test]
    fn a_cluster_scoped_type_gets_the_cluster_policies_and_no_overrides_no_override_policy() {
        let fed = json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedClusterRole",
            "metadata": {"name": "reader"},
            "spec": {"template": {"rules": []}, "placement": {"clusterSelector": {}}}
        });
        let out = replacement_of(&spec_of("clusterroles"), &fed, "readers").expect("built");
        let kinds: Vec<_> = out
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(kinds, ["ClusterRole", "ClusterPropagationPolicy"]);
        assert_eq!(out[0]["metadata"], json!({"name": "reader"}));
        assert_eq!(out[1]["metadata"], json!({"name": "readers"}));
    }
}
