//! A compact digest of a member object's `managedFields`, kept in Flotilla's member cache
//! in place of the full list: per field manager other than Flotilla's own, its operation,
//! time and the JSON pointers of the fields it owns — without `status` and without
//! metadata other than labels and annotations, which Flotilla never compares. Associative
//! list keys (`k:{"name":"app"}`) are resolved to indexes against the object itself, so a
//! pointer matches the paths [`super::diff`] reports.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{diff::pointer_push, is_within};
use flotilla_api::drift::DriftManager;

/// One field manager's part of an object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ManagerDigest {
    /// The field manager.
    #[serde(rename = "m")]
    pub manager: String,
    /// `Update` or `Apply`.
    #[serde(rename = "o", default, skip_serializing_if = "String::is_empty")]
    pub operation: String,
    /// When it last wrote (RFC 3339).
    #[serde(rename = "t", default, skip_serializing_if = "String::is_empty")]
    pub time: String,
    /// JSON pointers of the fields it owns.
    #[serde(rename = "f", default)]
    pub fields: Vec<String>,
}

/// The digest of `managed_fields` (the object's `metadata.managedFields`, as JSON) for
/// `object`, leaving out the managers in `own` and entries that own nothing Flotilla could
/// compare.
pub fn digest(managed_fields: &[Value], object: &Value, own: &[&str]) -> Vec<ManagerDigest> {
    managed_fields
        .iter()
        .filter_map(|entry| {
            let manager = entry.get("manager").and_then(Value::as_str).unwrap_or("");
            if own.contains(&manager) {
                return None;
            }
            let text = |k: &str| {
                entry
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let mut fields = Vec::new();
            if let Some(Value::Object(top)) = entry.get("fieldsV1") {
                for (key, child) in top {
                    top_level(key, child, object, &mut fields);
                }
            }
            (!fields.is_empty()).then(|| ManagerDigest {
                manager: manager.to_string(),
                operation: text("operation"),
                time: text("time"),
                fields,
            })
        })
        .collect()
}

/// A top-level field set: `status` is skipped; of `metadata` only labels and annotations
/// are kept.
fn top_level(key: &str, child: &Value, object: &Value, out: &mut Vec<String>) {
    let Some(name) = key.strip_prefix("f:") else {
        return;
    };
    match name {
        "status" => {}
        "metadata" => {
            if let Value::Object(meta) = child {
                for sub in ["labels", "annotations"] {
                    if let Some(set) = meta.get(&format!("f:{sub}")) {
                        let at = pointer_push("/metadata", sub);
                        let live = object.pointer(&at);
                        walk(set, &at, live, false, out);
                    }
                }
            }
        }
        _ => {
            let at = pointer_push("", name);
            walk(child, &at, object.get(name), false, out);
        }
    }
}

/// `item`: the set is a list item's (its `.` — the item itself — is kept; a map's `.` says
/// no more than its fields do).
fn walk(set: &Value, at: &str, live: Option<&Value>, item: bool, out: &mut Vec<String>) {
    let Some(children) = set.as_object().filter(|m| !m.is_empty()) else {
        out.push(at.to_string());
        return;
    };
    for (key, child) in children {
        if key == "." {
            if item {
                out.push(at.to_string());
            }
            continue;
        }
        let Some((token, next)) = resolve(key, live) else {
            continue;
        };
        let item = !key.starts_with("f:");
        walk(child, &pointer_push(at, &token), next, item, out);
    }
}

/// The pointer token a field-set key stands for in `live`, and the live value there.
fn resolve<'a>(key: &str, live: Option<&'a Value>) -> Option<(String, Option<&'a Value>)> {
    if let Some(name) = key.strip_prefix("f:") {
        return Some((name.to_string(), live.and_then(|l| l.get(name))));
    }
    let items = live.and_then(Value::as_array);
    if let Some(index) = key.strip_prefix("i:") {
        let i: usize = index.parse().ok()?;
        return Some((i.to_string(), items.and_then(|l| l.get(i))));
    }
    let found = if let Some(keys) = key.strip_prefix("k:") {
        let keys: Map<String, Value> = serde_json::from_str(keys).ok()?;
        items?.iter().position(|item| {
            keys.iter()
                .all(|(k, v)| item.get(k).is_some_and(|iv| same(iv, v)))
        })
    } else if let Some(value) = key.strip_prefix("v:") {
        let value: Value = serde_json::from_str(value).ok()?;
        items?.iter().position(|item| same(item, &value))
    } else {
        None
    }?;
    Some((found.to_string(), items.and_then(|l| l.get(found))))
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// The digest as the cache annotation holds it; `None` when there is nothing to keep.
pub fn encode(digest: &[ManagerDigest]) -> Option<String> {
    if digest.is_empty() {
        return None;
    }
    serde_json::to_string(digest).ok()
}

/// The digest back from the cache annotation (empty when absent or unreadable).
pub fn decode(annotation: Option<&str>) -> Vec<ManagerDigest> {
    annotation
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// The managers owning any of `pointers` (the field, a field below it, or a whole value
/// above it), latest writer first.
pub fn owners(digest: &[ManagerDigest], pointers: &[&str]) -> Vec<DriftManager> {
    let mut found: Vec<DriftManager> = digest
        .iter()
        .filter(|d| {
            pointers
                .iter()
                .any(|p| d.fields.iter().any(|f| is_within(f, p) || is_within(p, f)))
        })
        .map(|d| DriftManager {
            manager: d.manager.clone(),
            operation: d.operation.clone(),
            time: d.time.clone(),
        })
        .collect();
    found.sort_by(|a, b| b.time.cmp(&a.time).then_with(|| a.manager.cmp(&b.manager)));
    found.dedup();
    found
}

/// The cut a member cache makes of a member object: the digest of its `managedFields` (the
/// writers other than Flotilla's controller and agent) as [`super::DIGEST_ANNOTATION`]; the
/// watch drops the full list right after. A digest annotation the member object carries
/// itself is never believed: it is replaced or removed.
pub fn keep_in_annotation(obj: &mut kube::api::DynamicObject) {
    use kube::ResourceExt;
    let entries: Vec<Value> = obj
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|e| serde_json::to_value(e).ok())
        .collect();
    let own = [
        flotilla_api::FIELD_MANAGER,
        flotilla_api::work::AGENT_FIELD_MANAGER,
    ];
    match encode(&digest(&entries, &obj.data, &own)) {
        Some(d) => {
            obj.annotations_mut()
                .insert(super::DIGEST_ANNOTATION.to_string(), d);
        }
        None => {
            if let Some(annotations) = obj.metadata.annotations.as_mut() {
                annotations.remove(super::DIGEST_ANNOTATION);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment() -> Value {
        json!({
            "metadata": {"labels": {"app": "a"}, "annotations": {"deployment.kubernetes.io/revision": "1"}},
            "spec": {"replicas": 5, "template": {"spec": {"containers": [
                {"name": "app", "image": "nginx:2"}, {"name": "proxy", "image": "envoy"}]}}},
            "status": {"replicas": 5}
        })
    }

    fn managed_fields() -> Vec<Value> {
        vec![
            json!({"manager": "flotilla", "operation": "Apply", "time": "2026-01-01T00:00:00Z",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:template": {}}}}),
            json!({"manager": "kube-controller-manager", "operation": "Update", "time": "2026-01-01T00:00:05Z",
                "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:deployment.kubernetes.io/revision": {}}},
                    "f:status": {"f:replicas": {}}}}),
            json!({"manager": "kubectl-scale", "operation": "Update", "time": "2026-01-01T00:01:00Z",
                "fieldsV1": {"f:spec": {"f:replicas": {}}}}),
            json!({"manager": "kubectl-edit", "operation": "Update", "time": "2026-01-01T00:02:00Z",
                "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"app\"}": {"f:image": {}}}}}}}}),
            json!({"manager": "injector", "operation": "Update", "time": "2026-01-01T00:00:01Z",
                "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"proxy\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}}}),
            json!({"manager": "status-only", "operation": "Update",
                "fieldsV1": {"f:status": {"f:replicas": {}}}}),
        ]
    }

    #[test]
    fn the_digest_keeps_other_managers_fields_resolved_to_indexes() {
        let d = digest(&managed_fields(), &deployment(), &["flotilla"]);
        let managers: Vec<&str> = d.iter().map(|m| m.manager.as_str()).collect();
        assert_eq!(
            managers,
            [
                "kube-controller-manager",
                "kubectl-scale",
                "kubectl-edit",
                "injector"
            ],
            "flotilla's own entry and a status-only entry are dropped"
        );
        assert_eq!(
            d[0].fields,
            ["/metadata/annotations/deployment.kubernetes.io~1revision"]
        );
        assert_eq!(d[1].fields, ["/spec/replicas"]);
        assert_eq!(d[2].fields, ["/spec/template/spec/containers/0/image"]);
        assert_eq!(
            d[3].fields,
            [
                "/spec/template/spec/containers/1",
                "/spec/template/spec/containers/1/image",
                "/spec/template/spec/containers/1/name"
            ]
        );
    }

    #[test]
    fn the_digest_round_trips_through_its_annotation() {
        let d = digest(&managed_fields(), &deployment(), &["flotilla"]);
        assert_eq!(decode(encode(&d).as_deref()), d);
        assert_eq!(encode(&[]), None);
        assert!(decode(Some("not json")).is_empty());
    }

    #[test]
    fn owners_of_a_drifted_field_are_named_latest_first() {
        let d = digest(&managed_fields(), &deployment(), &["flotilla"]);
        let names = |ps: &[&str]| -> Vec<String> {
            owners(&d, ps).into_iter().map(|m| m.manager).collect()
        };
        assert_eq!(names(&["/spec/replicas"]), ["kubectl-scale"]);
        assert_eq!(
            names(&["/spec/replicas", "/spec/template/spec/containers/0/image"]),
            ["kubectl-edit", "kubectl-scale"]
        );
        // A drifted object above owned fields names their owners.
        assert_eq!(names(&["/spec/template"]), ["kubectl-edit", "injector"]);
        assert!(names(&["/metadata/labels/app"]).is_empty());
    }

    #[test]
    fn a_list_key_no_longer_in_the_object_is_skipped() {
        let mf = vec![json!({"manager": "x", "operation": "Update",
            "fieldsV1": {"f:spec": {"f:ports": {"k:{\"port\":81,\"protocol\":\"TCP\"}": {"f:name": {}},
                "k:{\"port\":80,\"protocol\":\"TCP\"}": {"f:name": {}}}, "f:ips": {"v:\"1.2.3.4\"": {}}, "f:args": {"i:1": {}}}}})];
        let obj = json!({"spec": {"ports": [{"port": 80, "protocol": "TCP", "name": "http"}],
            "ips": ["9.9.9.9", "1.2.3.4"], "args": ["a", "b"]}});
        let d = digest(&mf, &obj, &["flotilla"]);
        assert_eq!(
            d[0].fields,
            ["/spec/args/1", "/spec/ips/1", "/spec/ports/0/name"]
        );
    }

    /// A Deployment's `managedFields` as a v1.20 member holds them after Flotilla's apply
    /// and the deployment controller's status updates, and after a `kubectl scale`.
    fn deployment_managed_fields() -> Vec<Value> {
        let conditions = json!({"k:{\"type\":\"Available\"}": {".": {}, "f:lastTransitionTime": {},
            "f:lastUpdateTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}},
            "k:{\"type\":\"Progressing\"}": {".": {}, "f:lastTransitionTime": {},
            "f:lastUpdateTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}}});
        vec![
            json!({"manager": "flotilla", "operation": "Apply", "apiVersion": "apps/v1",
                "time": "2026-11-24T18:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {
                "f:metadata": {"f:annotations": {"f:flotilla.io/desired-hash": {}},
                    "f:labels": {"f:kubefed.io/managed": {}}},
                "f:spec": {"f:replicas": {}, "f:selector": {"f:matchLabels": {"f:app": {}}},
                    "f:template": {"f:metadata": {"f:labels": {"f:app": {}}},
                        "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {},
                            "f:image": {}, "f:name": {}}}}}}}}),
            json!({"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
                "time": "2026-11-24T18:00:01Z", "fieldsType": "FieldsV1", "fieldsV1": {
                "f:metadata": {"f:annotations": {".": {}, "f:deployment.kubernetes.io/revision": {}}},
                "f:status": {"f:conditions": conditions, "f:observedGeneration": {},
                    "f:replicas": {}, "f:unavailableReplicas": {}, "f:updatedReplicas": {}}}}),
            json!({"manager": "kubectl-scale", "operation": "Update", "apiVersion": "apps/v1",
                "time": "2026-11-24T18:00:02Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:replicas": {}}}}),
        ]
    }

    #[test]
    fn a_deployments_digest_is_a_small_fraction_of_its_managed_fields() {
        let object = json!({"spec": {"replicas": 5, "template": {"spec": {"containers": [
            {"name": "web", "image": "nginx:1"}]}}}});
        let all = deployment_managed_fields();
        for (what, entries) in [("steady", &all[..2]), ("after kubectl scale", &all[..])] {
            let full = serde_json::to_string(entries).expect("json").len();
            let kept = encode(&digest(entries, &object, &["flotilla"]))
                .map_or(0, |d| d.len() + super::super::DIGEST_ANNOTATION.len());
            // `cargo test -p flotilla-core --lib digest -- --nocapture` prints the figures
            // docs/benchmark-log.md quotes.
            println!("{what}: managedFields {full} bytes of JSON, digest annotation {kept} bytes");
            assert!(kept * 4 < full, "{what}: {kept} of {full}");
        }
    }
}
