//! What the users of an object wrote, as opposed to what the API server filled in: an
//! object's `metadata.managedFields` name the fields each writer owns, and a default the
//! server set is nobody's. A template taken from a host object is cut down to its owned
//! fields, so each member defaults it itself (as it does for a Federated object's sparse
//! template) and the same manifest, written as a Federated object or as a plain object,
//! gives the same member object. Pure.
//!
//! An object created by a plain POST (`kubectl create`, client-side `kubectl apply`, Helm)
//! has the defaults of its creation in the creator's set, so it keeps them; one written by
//! server-side apply (`kubectl apply --server-side`, Flux, `flotilla unfederate --apply`)
//! keeps only what its appliers wrote.

use serde_json::{Map, Value};

/// `obj`'s `spec`, cut down to the fields the writers in `managed` (the object's
/// `metadata.managedFields`) own, writers named in `skip` left out. Left whole when no
/// writer owns anything under `spec` (an object from before managed fields).
pub fn prune_spec(obj: &mut Value, managed: &[Value], skip: &[&str]) {
    let mut owned = Map::new();
    let mut any = false;
    for entry in managed {
        let manager = entry.get("manager").and_then(Value::as_str).unwrap_or("");
        if skip.contains(&manager) {
            continue;
        }
        if let Some(Value::Object(set)) = entry.pointer("/fieldsV1/f:spec") {
            any = true;
            merge(&mut owned, set);
        }
    }
    if !any {
        return;
    }
    if let Some(spec) = obj.get_mut("spec") {
        *spec = prune(spec, &owned);
    }
}

/// Adds the field set `from` to `into`.
fn merge(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (k, v) in from {
        let slot = into
            .entry(k.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if let (Value::Object(a), Value::Object(b)) = (slot, v) {
            merge(a, b);
        }
    }
}

/// `value` with only the fields of the field set `set` (a `fieldsV1` node). An empty set
/// owns the value whole (a scalar, an atomic list or map).
fn prune(value: &Value, set: &Map<String, Value>) -> Value {
    let children = set.keys().any(|k| k != ".");
    if !children {
        return value.clone();
    }
    match value {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                if let Some(Value::Object(child)) = set.get(&format!("f:{k}")) {
                    out.insert(k.clone(), prune(v, child));
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| prune_item(i, item, set))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A list item kept when the set names it: by its key fields (`k:{"name":"web"}`, which
/// stay in the item), by its value (`v:"x"`) or by its index (`i:0`).
fn prune_item(index: usize, item: &Value, set: &Map<String, Value>) -> Option<Value> {
    for (k, child) in set {
        let child = child.as_object()?;
        if let Some(key) = k.strip_prefix("k:") {
            let Ok(Value::Object(key)) = serde_json::from_str::<Value>(key) else {
                continue;
            };
            let fits = key.iter().all(|(f, v)| item.get(f) == Some(v));
            if fits {
                let mut kept = prune(item, child);
                if let Value::Object(m) = &mut kept {
                    m.extend(key);
                }
                return Some(kept);
            }
        } else if let Some(v) = k.strip_prefix("v:") {
            if serde_json::from_str::<Value>(v).ok().as_ref() == Some(item) {
                return Some(item.clone());
            }
        } else if k.strip_prefix("i:").and_then(|i| i.parse().ok()) == Some(index) {
            return Some(prune(item, child));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A Deployment as the host stores it after `kubectl apply --server-side` of a sparse
    /// manifest, then `kubectl set image`.
    fn deployment() -> (Value, Vec<Value>) {
        let obj = json!({
            "spec": {
                "replicas": 2,
                "progressDeadlineSeconds": 600,
                "revisionHistoryLimit": 10,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}},
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "dnsPolicy": "ClusterFirst",
                        "containers": [{
                            "name": "web", "image": "web:2",
                            "imagePullPolicy": "IfNotPresent",
                            "args": ["--a", "--b"],
                            "ports": [{"containerPort": 8080, "protocol": "TCP"}]
                        }],
                        "finalizersLike": ["x", "y"]
                    }
                }
            }
        });
        let managed = vec![
            json!({"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {
                        "f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:name": {}, "f:args": {},
                            "f:ports": {"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}},
                        "f:finalizersLike": {"v:\"x\"": {}}
                    }
                }
            }}}),
            json!({"manager": "kubectl-set", "operation": "Update", "fieldsV1": {"f:spec": {
                "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {"f:image": {}}}}}
            }}}),
            json!({"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:status": {"f:replicas": {}}}}),
        ];
        (obj, managed)
    }

    #[test]
    fn the_template_keeps_what_its_writers_own_and_loses_the_servers_defaults() {
        let (mut obj, managed) = deployment();
        prune_spec(&mut obj, &managed, &[]);
        assert_eq!(
            obj["spec"],
            json!({
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [{
                            "name": "web", "image": "web:2", "args": ["--a", "--b"],
                            "ports": [{"containerPort": 8080, "protocol": "TCP"}]
                        }],
                        "finalizersLike": ["x"]
                    }
                }
            })
        );
    }

    #[test]
    fn a_skipped_writer_owns_nothing_and_an_object_without_owners_stays_whole() {
        let (mut obj, managed) = deployment();
        prune_spec(&mut obj, &managed, &["kubectl-set"]);
        assert!(
            obj["spec"]["template"]["spec"]["containers"][0]
                .get("image")
                .is_none()
        );
        let (mut whole, _) = deployment();
        let before = whole.clone();
        prune_spec(&mut whole, &managed[2..], &[]);
        assert_eq!(whole, before, "nobody owns anything under spec");
        prune_spec(&mut whole, &[], &[]);
        assert_eq!(whole, before);
    }

    #[test]
    fn a_creators_set_with_the_defaults_keeps_them() {
        let (mut obj, _) = deployment();
        let before = obj.clone();
        let created = json!({"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsV1": {"f:spec": {
            "f:replicas": {}, "f:progressDeadlineSeconds": {}, "f:revisionHistoryLimit": {},
            "f:strategy": {"f:type": {}, "f:rollingUpdate": {".": {}, "f:maxSurge": {}}},
            "f:selector": {}, "f:template": {}
        }}});
        prune_spec(&mut obj, &[created], &[]);
        assert_eq!(obj, before);
    }
}
