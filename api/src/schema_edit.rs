//! Edits of generated OpenAPI schemas that make them fit for apiextensions v1 and for
//! `kubectl explain`: dropping keywords, empty-string defaults, rustdoc escapes, and
//! relaxing a target's own schema for `spec.template`. Pure JSON in, JSON out; used by
//! [`crate::crdgen`].

use serde_json::{Value, json};

/// Removes a keyword from a schema and from all its subschemas.
pub(crate) fn strip_keyword(schema: &mut Value, keyword: &str) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    obj.remove(keyword);
    if let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut) {
        props.values_mut().for_each(|p| strip_keyword(p, keyword));
    }
    for sub in ["items", "additionalProperties"] {
        if let Some(s) = obj.get_mut(sub) {
            strip_keyword(s, keyword);
        }
    }
}

/// Drops `default` keywords made of empty strings (a `#[serde(default)]` String, or a struct
/// of them): the API server stores them as `null` and rejects them as not strings, and the
/// types' own defaults fill them in when read anyway.
pub(crate) fn strip_empty_defaults(schema: &mut Value) {
    fn empty(v: &Value) -> bool {
        match v {
            Value::String(s) => s.is_empty(),
            Value::Object(m) => !m.is_empty() && m.values().all(empty),
            _ => false,
        }
    }
    match schema {
        Value::Object(map) => {
            if map.get("default").is_some_and(empty) {
                map.remove("default");
            }
            map.values_mut().for_each(strip_empty_defaults);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_empty_defaults),
        _ => {}
    }
}

/// rustdoc wants `&lt;` for a literal `<`; `kubectl explain` shows descriptions raw.
pub(crate) fn unescape_descriptions(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                match v {
                    Value::String(s) if k == "description" => {
                        *s = s.replace("&lt;", "<").replace("&gt;", ">");
                    }
                    _ => unescape_descriptions(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(unescape_descriptions),
        _ => {}
    }
}

pub(crate) fn push_required(schema: &mut Value, field: &str) {
    if let Some(obj) = schema.as_object_mut() {
        let required = obj.entry("required").or_insert_with(|| json!([]));
        if let Some(list) = required.as_array_mut()
            && !list.iter().any(|f| f == field)
        {
            list.push(field.into());
            list.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        }
    }
}

/// A target's own schema made fit for `spec.template`: `metadata` is free-form (name and
/// namespace come from the federated object), `apiVersion` and `kind` optional, `status`
/// gone.
pub(crate) fn relax_template_schema(mut schema: Value) -> Value {
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("type".into(), "object".into());
        let props = obj.entry("properties").or_insert_with(|| json!({}));
        if let Some(props) = props.as_object_mut() {
            props.remove("status");
            props.insert(
                "metadata".into(),
                json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            );
            props.insert("apiVersion".into(), json!({"type": "string"}));
            props.insert("kind".into(), json!({"type": "string"}));
        }
        if let Some(required) = obj.get_mut("required").and_then(Value::as_array_mut) {
            required.retain(|f| {
                !matches!(
                    f.as_str(),
                    Some("metadata" | "apiVersion" | "kind" | "status")
                )
            });
            if required.is_empty() {
                obj.remove("required");
            }
        }
    }
    schema
}
