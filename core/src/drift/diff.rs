//! Which of Flotilla's fields differ in a member object: every leaf of the desired object
//! (Flotilla's applied set) compared with the live object. Fields only the live object has
//! (defaults, status, injected containers after Flotilla's, a Service's `clusterIP`) are
//! never a difference; a missing leaf is.

use serde_json::Value;

/// Top-level fields never compared: a listed object carries no `apiVersion`/`kind`.
const TYPE_META: &[&str] = &["apiVersion", "kind"];

/// One field where the live object differs from the desired one.
#[derive(Clone, Debug, PartialEq)]
pub struct Difference {
    /// JSON pointer of the field (`/spec/replicas`).
    pub pointer: String,
    /// The desired value.
    pub desired: Value,
    /// The live value; `None` when the member object lacks the field.
    pub live: Option<Value>,
}

impl Difference {
    /// The dotted path a person reads (`spec.template.spec.containers[0].image`,
    /// `metadata.labels["app.kubernetes.io/name"]`).
    pub fn path(&self) -> String {
        dotted(&self.pointer)
    }
}

/// Every field of `desired` whose value `live` does not hold, in document order.
pub fn differences(desired: &Value, live: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    if let (Value::Object(w), Value::Object(h)) = (desired, live) {
        for (k, wv) in w.iter().filter(|(k, _)| !TYPE_META.contains(&k.as_str())) {
            walk(&pointer_push("", k), wv, h.get(k), &mut out);
        }
    } else {
        walk("", desired, Some(live), &mut out);
    }
    out
}

fn walk(at: &str, want: &Value, have: Option<&Value>, out: &mut Vec<Difference>) {
    let Some(have) = have else {
        // A null in the desired object asks for the field's absence.
        if !want.is_null() {
            out.push(difference(at, want, None));
        }
        return;
    };
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => {
            for (k, wv) in w {
                walk(&pointer_push(at, k), wv, h.get(k), out);
            }
        }
        (Value::Array(w), Value::Array(h)) => {
            for (i, wv) in w.iter().enumerate() {
                walk(&pointer_push(at, &i.to_string()), wv, h.get(i), out);
            }
        }
        (Value::Number(w), Value::Number(h)) if w.as_f64() == h.as_f64() => {}
        (w, h) if w == h => {}
        (w, h) => out.push(difference(at, w, Some(h))),
    }
}

fn difference(at: &str, want: &Value, have: Option<&Value>) -> Difference {
    Difference {
        pointer: at.to_string(),
        desired: want.clone(),
        live: have.cloned(),
    }
}

/// `base` with one more token, escaped as a JSON pointer token.
pub fn pointer_push(base: &str, token: &str) -> String {
    format!("{base}/{}", token.replace('~', "~0").replace('/', "~1"))
}

/// A JSON pointer as a dotted path: numeric tokens as `[n]`, keys that a dotted path cannot
/// carry as `["key"]`.
pub fn dotted(pointer: &str) -> String {
    let mut out = String::new();
    for raw in pointer.split('/').skip(1) {
        let token = raw.replace("~1", "/").replace("~0", "~");
        if !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{token}]"));
        } else if token.is_empty() || token.contains(['.', '/', '~', '[', ']', '"', ' ']) {
            out.push_str(&format!("[{}]", Value::String(token)));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&token);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pointers(d: &[Difference]) -> Vec<&str> {
        d.iter().map(|d| d.pointer.as_str()).collect()
    }

    #[test]
    fn fields_only_the_member_has_are_not_differences() {
        let desired = json!({"apiVersion": "v1", "kind": "Service",
            "spec": {"ports": [{"port": 80}], "selector": {"app": "a"}}});
        let live = json!({"spec": {"ports": [{"port": 80, "protocol": "TCP"}],
            "selector": {"app": "a"}, "clusterIP": "10.0.0.7"},
            "status": {"loadBalancer": {}}, "metadata": {"uid": "u"}});
        assert!(differences(&desired, &live).is_empty());
    }

    #[test]
    fn injected_items_after_flotillas_are_not_differences_but_a_changed_item_is() {
        let desired = json!({"spec": {"containers": [{"name": "app", "image": "nginx:1"}]}});
        let live = json!({"spec": {"containers": [
            {"name": "app", "image": "nginx:2", "resources": {}},
            {"name": "sidecar", "image": "proxy"}]}});
        let d = differences(&desired, &live);
        assert_eq!(pointers(&d), ["/spec/containers/0/image"]);
        assert_eq!(d[0].path(), "spec.containers[0].image");
        assert_eq!(d[0].desired, json!("nginx:1"));
        assert_eq!(d[0].live, Some(json!("nginx:2")));
    }

    #[test]
    fn a_removed_field_or_item_is_a_difference_without_a_live_value() {
        let desired = json!({"metadata": {"labels": {"app.kubernetes.io/name": "a"}},
            "data": {"k": "v"}, "spec": {"args": ["a", "b"]}});
        let live = json!({"metadata": {"labels": {}}, "data": {"k": "v"}, "spec": {"args": ["a"]}});
        let d = differences(&desired, &live);
        assert_eq!(
            pointers(&d),
            ["/metadata/labels/app.kubernetes.io~1name", "/spec/args/1"]
        );
        assert_eq!(d[0].path(), "metadata.labels[\"app.kubernetes.io/name\"]");
        assert_eq!(d[0].live, None);
        assert_eq!(d[1].path(), "spec.args[1]");
    }

    #[test]
    fn numbers_compare_by_value_and_a_desired_null_wants_absence() {
        let desired = json!({"spec": {"replicas": 2, "paused": null}});
        assert!(differences(&desired, &json!({"spec": {"replicas": 2.0}})).is_empty());
        let d = differences(&desired, &json!({"spec": {"replicas": 5, "paused": true}}));
        assert_eq!(pointers(&d), ["/spec/paused", "/spec/replicas"]);
    }

    #[test]
    fn a_value_of_another_shape_is_one_difference() {
        let d = differences(&json!({"data": {"a": "1"}}), &json!({"data": "x"}));
        assert_eq!(pointers(&d), ["/data"]);
    }
}
