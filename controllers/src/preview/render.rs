//! How `flotilla diff` shows a member object: without the fields that change on every
//! write or that the member's controllers own (`managedFields`, `resourceVersion`, `uid`,
//! `creationTimestamp`, `generation`, `selfLink`, `status`) and without Flotilla's content
//! hash annotation (it changes whenever anything else does), as YAML with sorted keys so
//! that two renderings of equal objects are equal text; a Secret's values redacted unless
//! asked for ([`shown`]). Pure.

use flotilla_core::redact;
use serde_json::Value;

use crate::sync::plan::HASH_ANNOTATION;

/// Server-set metadata fields left out of a diff.
const NOISY_METADATA: &[&str] = &[
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
];

/// `object` without the noise a diff must not show.
pub fn strip_noise(object: &Value) -> Value {
    let mut object = object.clone();
    let Some(map) = object.as_object_mut() else {
        return object;
    };
    map.remove("status");
    if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in NOISY_METADATA {
            meta.remove(*field);
        }
        let empty = match meta.get_mut("annotations").and_then(Value::as_object_mut) {
            Some(annotations) => {
                annotations.remove(HASH_ANNOTATION);
                annotations.is_empty()
            }
            None => false,
        };
        if empty {
            meta.remove("annotations");
        }
    }
    object
}

/// The live and the desired object as a diff may show them: a Secret's values redacted
/// (a changed value marked as such) unless `show_secrets`.
pub fn shown(before: &Value, after: &Value, show_secrets: bool) -> (Value, Value) {
    let (mut before, mut after) = (before.clone(), after.clone());
    if !show_secrets && (redact::is_secret_object(&before) || redact::is_secret_object(&after)) {
        redact::redact_secret_pair(&mut before, &mut after);
    }
    (before, after)
}

/// The object as YAML (keys sorted: `serde_json` maps are ordered), noise stripped.
pub fn yaml(object: &Value) -> anyhow::Result<String> {
    Ok(serde_saphyr::to_string(&strip_noise(object))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_set_fields_status_and_the_hash_are_left_out() {
        let live = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "a", "namespace": "demo", "uid": "u", "resourceVersion": "7",
                "generation": 2, "creationTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{"manager": "flotilla"}],
                "labels": {"kubefed.io/managed": "true"},
                "annotations": {HASH_ANNOTATION: "h"}
            },
            "data": {"k": "v"},
            "status": {"x": 1}
        });
        assert_eq!(
            strip_noise(&live),
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "demo", "labels": {"kubefed.io/managed": "true"}},
                "data": {"k": "v"}
            })
        );
    }

    #[test]
    fn a_secret_is_shown_redacted_unless_asked_for() {
        let live = json!({"apiVersion": "v1", "kind": "Secret", "data": {"k": "YWJj"}});
        let desired = json!({"apiVersion": "v1", "kind": "Secret", "data": {"k": "eHl6"}});
        let (before, after) = shown(&live, &desired, false);
        assert_eq!(before["data"]["k"], "<redacted: 3 bytes>");
        assert_eq!(after["data"]["k"], "<redacted: 3 bytes, changed>");
        let (_, created) = shown(&Value::Null, &desired, false);
        assert_eq!(created["data"]["k"], "<redacted: 3 bytes>");
        assert_eq!(shown(&live, &desired, true), (live, desired));
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}});
        assert_eq!(shown(&config_map, &config_map, false).1, config_map);
    }

    #[test]
    fn other_annotations_stay() {
        let obj = json!({"metadata": {"annotations": {HASH_ANNOTATION: "h", "team": "a"}}});
        assert_eq!(
            strip_noise(&obj),
            json!({"metadata": {"annotations": {"team": "a"}}})
        );
    }

    #[test]
    fn equal_objects_render_to_equal_text_whatever_their_noise() {
        let a =
            json!({"kind": "ConfigMap", "data": {"b": "2", "a": "1"}, "metadata": {"uid": "1"}});
        let b =
            json!({"metadata": {"uid": "2"}, "data": {"a": "1", "b": "2"}, "kind": "ConfigMap"});
        let text = yaml(&a).expect("renders");
        assert_eq!(text, yaml(&b).expect("renders"));
        assert!(
            text.find("a: ").expect("a") < text.find("b: ").expect("b"),
            "{text}"
        );
    }
}
