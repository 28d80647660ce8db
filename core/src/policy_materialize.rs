//! A native object and the policy that won it → the Federated&lt;Kind&gt; the sync
//! controller propagates. The policy path ends in the same object a kubefed user would have
//! written, so placement, scheduling, overrides, rollout, drift, dependencies, status,
//! `flotilla diff` and the dashboard are the same code for both models. Pure.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::drift::POLICY_ANNOTATION as DRIFT_POLICY_ANNOTATION;
use crate::policy_select::PolicyScope;
use flotilla_api::core::ApiResource;
use flotilla_api::federated::{ClusterOverrides, FederatedSpec};
use flotilla_api::policy::{
    MATERIALIZED_LABEL, POLICY_ANNOTATION, PRESERVE_ANNOTATION, PropagationSpec,
};

/// The policy that propagates an object, as written in [`POLICY_ANNOTATION`].
pub fn policy_ref(scope: PolicyScope, namespace: Option<&str>, name: &str) -> String {
    match (scope, namespace) {
        (PolicyScope::Namespaced, Some(ns)) => format!("PropagationPolicy/{ns}/{name}"),
        _ => format!("ClusterPropagationPolicy/{name}"),
    }
}

/// The template of a native object: the object without its status and with only its
/// labels left of its metadata (the rest is the host's: uid, resourceVersion, managed
/// fields, and annotations that tools such as `kubectl apply` and Helm keep there; the
/// name and namespace come back from the Federated object).
pub fn template_of(native: &Value) -> Value {
    let mut t = native.as_object().cloned().unwrap_or_default();
    t.remove("status");
    let kind = native
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    drop_server_fields(kind, &mut t);
    let labels = native
        .pointer("/metadata/labels")
        .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
        .cloned();
    let mut meta = Map::new();
    if let Some(l) = labels {
        meta.insert("labels".into(), l);
    }
    if meta.is_empty() {
        t.remove("metadata");
    } else {
        t.insert("metadata".into(), Value::Object(meta));
    }
    Value::Object(t)
}

/// Removes from a template what the host's server or controllers set in an object of
/// `kind` and what must not reach a member: a Namespace's finalizers, a Service's cluster
/// IPs (a headless Service keeps `None`), a ServiceAccount's token secrets; then an empty
/// `spec`.
pub fn drop_server_fields(kind: &str, template: &mut Map<String, Value>) {
    let spec = template.get_mut("spec").and_then(Value::as_object_mut);
    match (kind, spec) {
        ("Namespace", Some(spec)) => {
            spec.remove("finalizers");
        }
        ("Service", Some(spec))
            if spec.get("clusterIP").and_then(Value::as_str) != Some("None") =>
        {
            spec.remove("clusterIP");
            spec.remove("clusterIPs");
        }
        _ => {}
    }
    if kind == "ServiceAccount" {
        template.remove("secrets");
    }
    if template
        .get("spec")
        .and_then(Value::as_object)
        .is_some_and(Map::is_empty)
    {
        template.remove("spec");
    }
}

/// The Federated spec a policy gives a native object.
pub fn federated_spec(
    native: &Value,
    policy: &PropagationSpec,
    overrides: Vec<ClusterOverrides>,
) -> FederatedSpec {
    FederatedSpec {
        template: template_of(native),
        placement: policy.placement.clone(),
        overrides,
        retain_replicas: policy.retain_replicas,
        rollout: policy.rollout.clone(),
        propagate_dependencies: policy.propagate_dependencies,
    }
}

/// What names the native object as the Federated object's owner, so that the host's
/// garbage collector deletes the Federated object (and so the member copies) with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeOwner<'a> {
    /// The native object's `apiVersion`.
    pub api_version: &'a str,
    /// Its kind.
    pub kind: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its uid.
    pub uid: &'a str,
}

/// The whole Federated&lt;Kind&gt; for `native`: `fed` is the federated type, `policy_ref`
/// what [`policy_ref`] wrote. Its name and namespace are the native object's (a
/// FederatedNamespace lives in the namespace it federates, as kubefed's does).
pub fn federated_object(
    fed: &ApiResource,
    native_name: &str,
    native_namespace: Option<&str>,
    owner: &NativeOwner<'_>,
    policy_ref: &str,
    policy: &PropagationSpec,
    spec: &FederatedSpec,
) -> Value {
    let mut annotations = BTreeMap::from([(POLICY_ANNOTATION.to_string(), policy_ref.to_string())]);
    if policy.preserve_resources_on_deletion {
        annotations.insert(PRESERVE_ANNOTATION.into(), "true".into());
    }
    if let Some(d) = policy.drift_policy {
        annotations.insert(DRIFT_POLICY_ANNOTATION.into(), d.as_str().into());
    }
    let namespace = if fed.namespaced() {
        native_namespace.or((owner.kind == "Namespace").then_some(native_name))
    } else {
        None
    };
    let mut metadata = json!({
        "name": native_name,
        "labels": {MATERIALIZED_LABEL: "true"},
        "annotations": annotations,
        "ownerReferences": [{
            "apiVersion": owner.api_version,
            "kind": owner.kind,
            "name": owner.name,
            "uid": owner.uid,
        }],
    });
    if let Some(ns) = namespace {
        metadata["namespace"] = ns.into();
    }
    json!({
        "apiVersion": fed.api_version(),
        "kind": fed.kind,
        "metadata": metadata,
        "spec": spec,
    })
}

/// Whether the Federated object in the host (`current`) differs from `desired` in what the
/// policy controller owns: its spec, its label, its annotations and its owner. Nothing
/// else is compared, so a steady state sends no write.
pub fn needs_write(desired: &Value, current: Option<&Value>) -> bool {
    let Some(cur) = current else { return true };
    if desired.get("spec") != cur.get("spec") {
        return true;
    }
    let owned_entries_differ = |field: &str| {
        let want = desired
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object);
        let have = cur
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object);
        want.is_some_and(|w| {
            w.iter()
                .any(|(k, v)| have.and_then(|h| h.get(k)) != Some(v))
        })
    };
    if owned_entries_differ("labels") || owned_entries_differ("annotations") {
        return true;
    }
    let dropped = |k: &&str| {
        cur.pointer("/metadata/annotations")
            .and_then(|a| a.get(*k))
            .is_some()
            && desired
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(*k))
                .is_none()
    };
    if OWNED_ANNOTATIONS.iter().any(dropped) {
        return true;
    }
    let owner_uid = |v: &Value| v.pointer("/metadata/ownerReferences/0/uid").cloned();
    let owners = cur
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    !owners
        .iter()
        .any(|o| Some(o.get("uid").cloned().unwrap_or_default()) == owner_uid(desired))
}

/// The annotations this controller sets on a Federated object; one the desired object no
/// longer has is removed.
const OWNED_ANNOTATIONS: [&str; 3] = [
    POLICY_ANNOTATION,
    PRESERVE_ANNOTATION,
    DRIFT_POLICY_ANNOTATION,
];

/// The object to replace `current` (a Federated object in the host) with so that it is
/// `desired`: `desired`'s spec, label, annotations and owner over what others keep in
/// `current`'s metadata (their labels, annotations, owners, finalizers, and the
/// resourceVersion the replacement is checked against). A replacement rather than a patch:
/// the whole spec is the policy's, so a field the policy no longer sets goes too, whoever
/// wrote it before (the object's creator, or the user of a Federated object taken over).
pub fn replacement(desired: &Value, current: &Value) -> Value {
    let mut out = current.clone();
    let Some(obj) = out.as_object_mut() else {
        return desired.clone();
    };
    obj.remove("status");
    obj.insert(
        "spec".into(),
        desired.get("spec").cloned().unwrap_or(Value::Null),
    );
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    let Some(meta) = meta else {
        return desired.clone();
    };
    meta.remove("managedFields");
    let want = |f: &str| {
        desired
            .pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let mut labels = meta
        .get("labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.extend(want("labels"));
    meta.insert("labels".into(), Value::Object(labels));
    let mut annotations = meta
        .get("annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    annotations.retain(|k, _| !OWNED_ANNOTATIONS.contains(&k.as_str()));
    annotations.extend(want("annotations"));
    meta.insert("annotations".into(), Value::Object(annotations));
    let ours = desired
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let same_object = |a: &Value, b: &Value| {
        ["apiVersion", "kind", "name"]
            .iter()
            .all(|k| a.get(k) == b.get(k))
    };
    let mut owners: Vec<Value> = meta
        .get("ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|o| !ours.iter().any(|w| same_object(o, w)))
        .collect();
    owners.extend(ours);
    meta.insert("ownerReferences".into(), Value::Array(owners));
    out
}

/// Whether something in the host already runs this native object: another writer than
/// Flotilla owns fields of its `status` (the host's deployment, job or daemon set
/// controller does as soon as it sees the object). Such a host would start the workload
/// itself, so the policy controller refuses the object unless told otherwise.
pub fn host_runs_it(native: &Value, own_managers: &[&str]) -> Option<String> {
    let entries = native.pointer("/metadata/managedFields")?.as_array()?;
    entries.iter().find_map(|e| {
        let manager = e.get("manager").and_then(Value::as_str).unwrap_or_default();
        let writes_status = e.pointer("/fieldsV1/f:status").is_some();
        (writes_status && !own_managers.contains(&manager)).then(|| manager.to_string())
    })
}

/// The status a native workload shows in the host: its Federated object's counters summed
/// over the clusters (`replicas`, `readyReplicas`, … as the members name them) and, given
/// once the fleet has caught up ([`fleet_caught_up`]), the native object's generation as
/// `observedGeneration`, so `kubectl get`, `kubectl rollout status` and tools that wait on
/// the object read the fleet. `None` when nothing is summed.
pub fn native_status(
    agg: Option<&flotilla_api::workload::AggregatedStatus>,
    generation: Option<i64>,
) -> Option<Value> {
    let mut status = serde_json::to_value(&agg?.counts).ok()?;
    let map = status.as_object_mut()?;
    if let Some(g) = generation {
        map.insert("observedGeneration".into(), g.into());
    }
    Some(status)
}

/// Whether the fleet has caught up with the Federated object `fed`: the sync controller saw
/// its latest generation and its rollout, if it has one, is complete. Until then the native
/// object's `observedGeneration` is held back, so `kubectl rollout status` on the host waits
/// for every cluster instead of reading a canary's or a paused rollout's sum as done.
pub fn fleet_caught_up(fed: &Value) -> bool {
    let generation = fed.pointer("/metadata/generation").and_then(Value::as_i64);
    let observed = fed
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    let rollout_done = fed
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c.get("type") == Some(&json!("Rollout"))))
        .is_none_or(|c| c.get("status") == Some(&json!("True")));
    generation.is_some() && generation == observed && rollout_done
}

/// Whether `native`'s status lacks or differs in any field of `want`.
pub fn status_differs(native: &Value, want: &Value) -> bool {
    let have = native.get("status");
    want.as_object().is_some_and(|w| {
        w.iter()
            .any(|(k, v)| have.and_then(|h| h.get(k)) != Some(v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::core::Scope;
    use flotilla_api::federated::{ClusterOverride, ClusterReference, Placement};
    use flotilla_api::policy::DriftPolicy;

    fn fed_deployments() -> ApiResource {
        ApiResource {
            group: "types.kubefed.io".into(),
            version: "v1beta1".into(),
            kind: "FederatedDeployment".into(),
            plural_name: "federateddeployments".into(),
            scope: Scope::Namespaced,
        }
    }

    fn native() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "demo", "uid": "u-1", "resourceVersion": "7",
                "labels": {"app": "web"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "meta.helm.sh/release-name": "web"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
            },
            "spec": {"replicas": 2},
            "status": {"replicas": 2}
        })
    }

    fn owner() -> NativeOwner<'static> {
        NativeOwner {
            api_version: "apps/v1",
            kind: "Deployment",
            name: "web",
            uid: "u-1",
        }
    }

    fn policy() -> PropagationSpec {
        PropagationSpec {
            placement: Placement {
                clusters: Some(vec![ClusterReference {
                    name: "member1".into(),
                }]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn the_template_keeps_the_body_and_labels_and_drops_the_hosts_metadata_and_status() {
        let t = template_of(&native());
        assert_eq!(
            t,
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"labels": {"app": "web"}}, "spec": {"replicas": 2}})
        );
        let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "uid": "u"}, "data": {"k": "v"}});
        assert_eq!(
            template_of(&bare),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}})
        );
    }

    #[test]
    fn the_federated_object_carries_placement_overrides_owner_and_policy() {
        let p = PropagationSpec {
            preserve_resources_on_deletion: true,
            drift_policy: Some(DriftPolicy::Report),
            propagate_dependencies: true,
            ..policy()
        };
        let overrides = vec![ClusterOverrides {
            cluster_name: "member1".into(),
            cluster_overrides: vec![ClusterOverride {
                op: None,
                path: "/spec/replicas".into(),
                value: Some(json!(5)),
            }],
        }];
        let spec = federated_spec(&native(), &p, overrides);
        let obj = federated_object(
            &fed_deployments(),
            "web",
            Some("demo"),
            &owner(),
            "PropagationPolicy/demo/pp",
            &p,
            &spec,
        );
        assert_eq!(obj["apiVersion"], "types.kubefed.io/v1beta1");
        assert_eq!(obj["kind"], "FederatedDeployment");
        assert_eq!(obj["metadata"]["namespace"], "demo");
        assert_eq!(obj["metadata"]["labels"][MATERIALIZED_LABEL], "true");
        assert_eq!(
            obj["metadata"]["annotations"][POLICY_ANNOTATION],
            "PropagationPolicy/demo/pp"
        );
        assert_eq!(obj["metadata"]["annotations"][PRESERVE_ANNOTATION], "true");
        assert_eq!(
            obj["metadata"]["annotations"][DRIFT_POLICY_ANNOTATION],
            "Report"
        );
        assert_eq!(obj["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(obj["spec"]["placement"]["clusters"][0]["name"], "member1");
        assert_eq!(
            obj["spec"]["overrides"][0]["clusterOverrides"][0]["value"],
            5
        );
        assert_eq!(obj["spec"]["propagateDependencies"], true);
        let back: FederatedSpec =
            serde_json::from_value(obj["spec"].clone()).expect("a FederatedSpec");
        assert_eq!(back, spec);
    }

    #[test]
    fn a_services_cluster_ips_stay_in_the_host() {
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"clusterIP": "10.0.0.12", "clusterIPs": ["10.0.0.12"], "ports": [{"port": 80}]}});
        let t = template_of(&svc);
        assert!(t["spec"].get("clusterIP").is_none() && t["spec"].get("clusterIPs").is_none());
        let headless = json!({"kind": "Service", "spec": {"clusterIP": "None"}});
        assert_eq!(template_of(&headless)["spec"]["clusterIP"], "None");
    }

    #[test]
    fn a_replacement_is_the_policys_spec_over_what_others_keep() {
        let p = PropagationSpec {
            drift_policy: Some(DriftPolicy::Report),
            ..policy()
        };
        let spec = federated_spec(&native(), &p, vec![]);
        let desired = federated_object(
            &fed_deployments(),
            "web",
            Some("demo"),
            &owner(),
            "PropagationPolicy/demo/pp",
            &p,
            &spec,
        );
        // A Federated object a user wrote, with overrides the policy does not set and an
        // annotation of the policy that no longer applies.
        let current = json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedDeployment",
            "metadata": {"name": "web", "namespace": "demo", "resourceVersion": "42",
                "labels": {"team": "a"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}",
                    PRESERVE_ANNOTATION: "true"},
                "finalizers": ["kubefed.io/sync-controller"],
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "old"},
                    {"apiVersion": "x/v1", "kind": "App", "name": "shop", "uid": "s"}]},
            "spec": {"template": {}, "overrides": [{"clusterName": "a", "clusterOverrides": [{"path": "/spec/replicas", "value": 1}]}]},
            "status": {"conditions": []}
        });
        assert!(needs_write(&desired, Some(&current)));
        let r = replacement(&desired, &current);
        assert_eq!(r["spec"], desired["spec"], "the whole spec is the policy's");
        assert!(r.get("status").is_none() && r["metadata"].get("managedFields").is_none());
        assert_eq!(r["metadata"]["resourceVersion"], "42");
        assert_eq!(r["metadata"]["labels"]["team"], "a");
        assert_eq!(r["metadata"]["labels"][MATERIALIZED_LABEL], "true");
        let a = &r["metadata"]["annotations"];
        assert!(a.get(PRESERVE_ANNOTATION).is_none(), "{a}");
        assert_eq!(a[DRIFT_POLICY_ANNOTATION], "Report");
        assert_eq!(a["kubectl.kubernetes.io/last-applied-configuration"], "{}");
        assert_eq!(r["metadata"]["finalizers"][0], "kubefed.io/sync-controller");
        let uids: Vec<_> = r["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| o["uid"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            uids,
            ["s", "u-1"],
            "the stale owner of the same name is replaced"
        );
        assert!(
            !needs_write(&desired, Some(&r)),
            "the replacement is what the policy wants"
        );
    }

    #[test]
    fn an_annotation_the_policy_dropped_needs_a_write() {
        let p = PropagationSpec {
            preserve_resources_on_deletion: true,
            ..policy()
        };
        let spec = federated_spec(&native(), &p, vec![]);
        let args = |p: &PropagationSpec| {
            federated_object(
                &fed_deployments(),
                "web",
                Some("demo"),
                &owner(),
                "PropagationPolicy/demo/pp",
                p,
                &spec,
            )
        };
        let with = args(&p);
        let without = args(&policy());
        assert!(!needs_write(&with, Some(&with)));
        assert!(needs_write(&without, Some(&with)));
        assert!(
            needs_write(&with, Some(&without)),
            "an annotation the policy now sets"
        );
    }

    #[test]
    fn a_federated_namespace_lives_in_the_namespace_it_federates() {
        let fed_ns = ApiResource {
            kind: "FederatedNamespace".into(),
            plural_name: "federatednamespaces".into(),
            ..fed_deployments()
        };
        let o = NativeOwner {
            api_version: "v1",
            kind: "Namespace",
            name: "demo",
            uid: "n",
        };
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}});
        let spec = federated_spec(&ns, &policy(), vec![]);
        let obj = federated_object(
            &fed_ns,
            "demo",
            None,
            &o,
            "ClusterPropagationPolicy/all",
            &policy(),
            &spec,
        );
        assert_eq!(obj["metadata"]["namespace"], "demo");
        assert_eq!(obj["metadata"]["name"], "demo");
    }

    #[test]
    fn an_unchanged_federated_object_needs_no_write_whatever_the_server_added() {
        let spec = federated_spec(&native(), &policy(), vec![]);
        let want = federated_object(
            &fed_deployments(),
            "web",
            Some("demo"),
            &owner(),
            "PropagationPolicy/demo/pp",
            &policy(),
            &spec,
        );
        assert!(needs_write(&want, None));
        let mut have = want.clone();
        have["metadata"]["uid"] = "f-1".into();
        have["metadata"]["labels"]["extra"] = "x".into();
        have["metadata"]["finalizers"] = json!(["kubefed.io/sync-controller"]);
        have["status"] = json!({"clusters": []});
        assert!(!needs_write(&want, Some(&have)));
        let mut changed = have.clone();
        changed["spec"]["placement"]["clusters"] = json!([]);
        assert!(needs_write(&want, Some(&changed)));
        let mut other_policy = have.clone();
        other_policy["metadata"]["annotations"][POLICY_ANNOTATION] =
            "PropagationPolicy/demo/other".into();
        assert!(needs_write(&want, Some(&other_policy)));
        let mut new_owner = have;
        new_owner["metadata"]["ownerReferences"][0]["uid"] = "u-2".into();
        assert!(needs_write(&want, Some(&new_owner)));
    }

    #[test]
    fn the_native_status_is_the_sum_over_clusters_with_the_native_generation() {
        let agg: flotilla_api::workload::AggregatedStatus = serde_json::from_value(json!({
            "clusters": "2/2", "ready": "4/4", "replicas": 4, "readyReplicas": 4, "availableReplicas": 4, "updatedReplicas": 4
        }))
        .expect("aggregated");
        let want = native_status(Some(&agg), Some(3)).expect("a status");
        assert_eq!(
            want,
            json!({"replicas": 4, "readyReplicas": 4, "availableReplicas": 4, "updatedReplicas": 4, "observedGeneration": 3})
        );
        assert!(status_differs(&native(), &want));
        let mut n = native();
        n["status"] = json!({"replicas": 4, "readyReplicas": 4, "availableReplicas": 4, "updatedReplicas": 4, "observedGeneration": 3, "conditions": []});
        assert!(!status_differs(&n, &want));
        assert_eq!(native_status(None, Some(1)), None);
        let held = native_status(Some(&agg), None).expect("a status");
        assert!(held.get("observedGeneration").is_none());
    }

    #[test]
    fn the_fleet_has_caught_up_once_the_generation_is_seen_and_the_rollout_done() {
        let fed = |observed: i64, rollout: Option<&str>| {
            let mut f = json!({"metadata": {"generation": 4}, "status": {"observedGeneration": observed, "conditions": [{"type": "Propagation", "status": "True"}]}});
            if let Some(r) = rollout {
                f["status"]["conditions"]
                    .as_array_mut()
                    .expect("a list")
                    .push(json!({"type": "Rollout", "status": r}));
            }
            f
        };
        assert!(fleet_caught_up(&fed(4, None)));
        assert!(fleet_caught_up(&fed(4, Some("True"))));
        assert!(
            !fleet_caught_up(&fed(4, Some("False"))),
            "paused, progressing or failed"
        );
        assert!(
            !fleet_caught_up(&fed(3, None)),
            "the sync controller is behind"
        );
        assert!(!fleet_caught_up(&json!({})));
    }

    #[test]
    fn a_host_that_writes_the_objects_status_runs_it() {
        let mut n = native();
        assert_eq!(host_runs_it(&n, &["flotilla-policy"]), None);
        n["metadata"]["managedFields"]
            .as_array_mut()
            .expect("array")
            .push(json!({"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:status": {"f:replicas": {}}}}));
        assert_eq!(
            host_runs_it(&n, &["flotilla-policy"]).as_deref(),
            Some("kube-controller-manager")
        );
        let mut own = native();
        own["metadata"]["managedFields"] =
            json!([{"manager": "flotilla-policy", "fieldsV1": {"f:status": {}}}]);
        assert_eq!(host_runs_it(&own, &["flotilla-policy"]), None);
    }
}
