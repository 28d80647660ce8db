//! Secret redaction for everything a person reads: the dashboard, `flotilla status`,
//! `flotilla diff` (unless `--show-secrets`), Events and logs. A Secret's `data` and
//! `stringData` values — in a FederatedSecret's template, in overrides that point into them,
//! in member objects and in kubectl's last-applied copy — become `<redacted: N bytes>`.
//! Keys stay visible: they are names, and a reader needs them to see what a Secret holds.
//!
//! Pure: every surface calls these functions on its own copy just before showing it; the
//! controllers' own objects are never touched, so redaction can never change what is
//! written to a member.

use serde_json::{Map, Value};

/// The fields of a Secret whose values are secret.
const SECRET_FIELDS: &[&str] = &["data", "stringData"];

/// kubectl's client-side apply copy of the whole object: a Secret's values in clear.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What a secret value is shown as.
pub fn redacted(bytes: usize) -> String {
    format!("<redacted: {bytes} bytes>")
}

/// Whether a target type (`group`, `kind`) is the core Secret.
pub fn is_secret_type(group: &str, kind: &str) -> bool {
    group.is_empty() && kind == "Secret"
}

/// Whether a whole object (with `apiVersion` and `kind`) is a core v1 Secret.
pub fn is_secret_object(object: &Value) -> bool {
    object.get("kind").and_then(Value::as_str) == Some("Secret")
        && object.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// How many bytes a value holds: a `data` value is base64, so its decoded length (what
/// `kubectl describe secret` shows); anything else its UTF-8 (or JSON) length.
fn byte_count(field: &str, value: &Value) -> usize {
    match value {
        Value::String(s) if field == "data" => base64_len(s).unwrap_or(s.len()),
        Value::String(s) => s.len(),
        other => other.to_string().len(),
    }
}

/// The decoded length of standard, padded base64; `None` when `s` is not that.
fn base64_len(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let pad = bytes.iter().rev().take_while(|b| **b == b'=').count();
    let body = &bytes[..bytes.len() - pad];
    let valid = pad <= 2
        && body
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/');
    valid.then(|| bytes.len() / 4 * 3 - pad)
}

/// Redacts one secret field's value: every entry of a map, or the whole value otherwise
/// (a malformed `data` must not show either).
fn redact_field(field: &str, value: &mut Value) {
    match value {
        Value::Object(entries) => {
            for v in entries.values_mut() {
                *v = Value::String(redacted(byte_count(field, v)));
            }
        }
        Value::Null => {}
        other => *other = Value::String(redacted(byte_count(field, other))),
    }
}

/// Redacts a Secret-shaped object in place — a member Secret, a FederatedSecret's template
/// (which usually has no `kind`), a rendered object — whatever its `kind` says: the caller
/// knows it is a Secret.
pub fn redact_secret(object: &mut Value) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    for field in SECRET_FIELDS {
        if let Some(value) = map.get_mut(*field) {
            redact_field(field, value);
        }
    }
    redact_last_applied(map);
}

fn redact_last_applied(map: &mut Map<String, Value>) {
    let annotation = map
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(|a| a.get_mut(LAST_APPLIED));
    if let Some(value) = annotation {
        let len = value.as_str().map_or(0, str::len);
        *value = Value::String(redacted(len));
    }
}

/// Redacts `object` when it is a core v1 Secret; other objects are left as they are.
pub fn redact_object(object: &mut Value) {
    if is_secret_object(object) {
        redact_secret(object);
    }
}

/// Redacts a live and a desired Secret for a diff: as [`redact_secret`], except that a
/// value that differs between the two is marked `changed` on the desired side, so a diff
/// still shows which key would change without showing either value.
pub fn redact_secret_pair(before: &mut Value, after: &mut Value) {
    let changed = |field: &str, key: &str, after: &Value| {
        before.get(field).and_then(|m| m.get(key)) != Some(after)
    };
    let mut marks = Vec::new();
    for field in SECRET_FIELDS {
        if let Some(entries) = after.get(*field).and_then(Value::as_object) {
            for (key, value) in entries {
                if before.get(*field).is_some() && changed(field, key, value) {
                    marks.push((*field, key.clone()));
                }
            }
        }
    }
    redact_secret(before);
    redact_secret(after);
    for (field, key) in marks {
        if let Some(Value::String(text)) = after.get_mut(field).and_then(|m| m.get_mut(&key)) {
            text.insert_str(text.len() - 1, ", changed");
        }
    }
}

/// The path of an override as segments: a JSON pointer (`/data/password`, `~1` and `~0`
/// unescaped) or kubefed alpha's dotted field path (`data.password`).
fn segments(path: &str) -> Vec<String> {
    match path.strip_prefix('/') {
        Some(rest) => rest
            .split('/')
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect(),
        None if path.is_empty() => Vec::new(),
        None => path.split('.').map(str::to_owned).collect(),
    }
}

/// The value of an override of a Secret, as it may be shown: redacted when the path points
/// into `data` or `stringData`, at one of them, or at the whole object (``, `/`).
pub fn redact_override_value(path: &str, value: &Value) -> Value {
    let segments = segments(path);
    let mut value = value.clone();
    match segments.as_slice() {
        [] => redact_secret(&mut value),
        [only] if only.is_empty() => redact_secret(&mut value),
        [field] if SECRET_FIELDS.contains(&field.as_str()) => redact_field(field, &mut value),
        [field, ..] if SECRET_FIELDS.contains(&field.as_str()) => {
            value = Value::String(redacted(byte_count(field, &value)));
        }
        [meta, annotations, key]
            if meta == "metadata" && annotations == "annotations" && key == LAST_APPLIED =>
        {
            value = Value::String(redacted(value.as_str().map_or(0, str::len)));
        }
        [meta, annotations] if meta == "metadata" && annotations == "annotations" => {
            if let Some(v) = value.get_mut(LAST_APPLIED) {
                *v = Value::String(redacted(v.as_str().map_or(0, str::len)));
            }
        }
        _ => {}
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_federated_secret_template_keeps_its_keys_and_loses_its_values() {
        let mut template = json!({
            "metadata": {"labels": {"app": "web"}},
            "type": "Opaque",
            "data": {"password": "aHVudGVyMg=="},
            "stringData": {"token": "s3cr3t-token"}
        });
        redact_secret(&mut template);
        assert_eq!(
            template,
            json!({
                "metadata": {"labels": {"app": "web"}},
                "type": "Opaque",
                "data": {"password": "<redacted: 7 bytes>"},
                "stringData": {"token": "<redacted: 12 bytes>"}
            })
        );
    }

    #[test]
    fn a_member_secret_is_recognised_by_its_kind_and_its_last_applied_copy_is_hidden() {
        let mut member = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "annotations": {
                LAST_APPLIED: "{\"data\":{\"password\":\"aHVudGVyMg==\"}}", "team": "a"}},
            "data": {"password": "aHVudGVyMg=="}
        });
        redact_object(&mut member);
        assert_eq!(member["data"]["password"], "<redacted: 7 bytes>");
        assert_eq!(
            member["metadata"]["annotations"][LAST_APPLIED],
            "<redacted: 36 bytes>"
        );
        assert_eq!(member["metadata"]["annotations"]["team"], "a");
    }

    #[test]
    fn objects_of_other_kinds_are_left_alone() {
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}});
        let mut shown = config_map.clone();
        redact_object(&mut shown);
        assert_eq!(shown, config_map);
        let crd = json!({"apiVersion": "example.com/v1", "kind": "Secret", "data": {"k": "v"}});
        assert!(!is_secret_object(&crd));
        assert!(is_secret_type("", "Secret") && !is_secret_type("example.com", "Secret"));
    }

    #[test]
    fn malformed_data_is_hidden_whole_and_counted_as_written() {
        let mut odd = json!({"data": "not-a-map", "stringData": {"n": 42, "s": "not base64!"}});
        redact_secret(&mut odd);
        assert_eq!(odd["data"], "<redacted: 9 bytes>");
        assert_eq!(odd["stringData"]["n"], "<redacted: 2 bytes>");
        assert_eq!(odd["stringData"]["s"], "<redacted: 11 bytes>");
        let mut bad_base64 = json!({"data": {"k": "abc"}});
        redact_secret(&mut bad_base64);
        assert_eq!(bad_base64["data"]["k"], "<redacted: 3 bytes>");
    }

    #[test]
    fn base64_lengths_count_the_decoded_bytes() {
        assert_eq!(base64_len(""), Some(0));
        assert_eq!(base64_len("YQ=="), Some(1));
        assert_eq!(base64_len("YWI="), Some(2));
        assert_eq!(base64_len("YWJj"), Some(3));
        assert_eq!(base64_len("YW=j"), None);
        assert_eq!(base64_len("Y==="), None);
        assert_eq!(base64_len("abc"), None);
    }

    #[test]
    fn an_override_into_one_value_is_redacted() {
        assert_eq!(
            redact_override_value("/data/password", &json!("aHVudGVyMg==")),
            json!("<redacted: 7 bytes>")
        );
        assert_eq!(
            redact_override_value("/stringData/token", &json!("s3cr3t")),
            json!("<redacted: 6 bytes>")
        );
        assert_eq!(
            redact_override_value("data.password", &json!("aHVudGVyMg==")),
            json!("<redacted: 7 bytes>")
        );
        assert_eq!(
            redact_override_value("/stringData/a~1b", &json!({"nested": "x"})),
            json!("<redacted: 14 bytes>")
        );
    }

    #[test]
    fn an_override_of_a_whole_secret_field_keeps_its_keys() {
        assert_eq!(
            redact_override_value("/stringData", &json!({"token": "s3cr3t", "user": "me"})),
            json!({"token": "<redacted: 6 bytes>", "user": "<redacted: 2 bytes>"})
        );
        assert_eq!(
            redact_override_value("/data", &json!({"k": "YWJj"})),
            json!({"k": "<redacted: 3 bytes>"})
        );
    }

    #[test]
    fn a_whole_object_replace_is_redacted_like_a_secret() {
        let whole = json!({"data": {"k": "YWJj"}, "type": "Opaque"});
        for path in ["", "/"] {
            assert_eq!(
                redact_override_value(path, &whole),
                json!({"data": {"k": "<redacted: 3 bytes>"}, "type": "Opaque"}),
                "{path:?}"
            );
        }
        let annotations = json!({LAST_APPLIED: "{\"data\":1}", "team": "a"});
        assert_eq!(
            redact_override_value("/metadata/annotations", &annotations),
            json!({LAST_APPLIED: "<redacted: 10 bytes>", "team": "a"})
        );
    }

    #[test]
    fn overrides_elsewhere_are_shown_as_written() {
        for (path, value) in [
            ("/type", json!("Opaque")),
            ("/metadata/labels/tier", json!("db")),
            ("/immutable", json!(true)),
        ] {
            assert_eq!(redact_override_value(path, &value), value, "{path}");
        }
    }

    #[test]
    fn a_diff_of_two_secrets_marks_changed_values_without_showing_them() {
        let mut live = json!({"apiVersion": "v1", "kind": "Secret",
                              "data": {"same": "YWJj", "old": "YWJj"}});
        let mut desired = json!({"apiVersion": "v1", "kind": "Secret",
                                 "data": {"same": "YWJj", "old": "eHl6", "new": "YQ=="}});
        redact_secret_pair(&mut live, &mut desired);
        assert_eq!(
            live["data"],
            json!({"same": "<redacted: 3 bytes>", "old": "<redacted: 3 bytes>"})
        );
        assert_eq!(
            desired["data"],
            json!({"same": "<redacted: 3 bytes>", "old": "<redacted: 3 bytes, changed>",
                   "new": "<redacted: 1 bytes, changed>"})
        );
    }
}
