//! Cached objects kept small: a [`DynamicObject`]'s body (everything but `apiVersion`,
//! `kind` and `metadata`) stored as its JSON text instead of a tree of maps.
//!
//! `serde_json` keeps every JSON object as a B-tree whose first node has room for eleven
//! entries, so a small map costs ≈ 0.6 KiB however few keys it holds: a federated
//! ConfigMap of 0.8 KiB of JSON takes ≈ 10 KiB as a `DynamicObject`, ≈ 1.7 KiB packed. A
//! cache whose objects are read one at a time (a reconcile reads one key) keeps them
//! [`pack`]ed and [`unpack`]s the one it reads; metadata stays as it is, so keys, labels,
//! owners and indexes need no unpacking.
//!
//! ```
//! use flotilla_multicluster::packed;
//! use kube::api::DynamicObject;
//! use serde_json::json;
//!
//! let obj: DynamicObject = serde_json::from_value(json!({
//!     "apiVersion": "v1", "kind": "ConfigMap",
//!     "metadata": {"name": "a", "namespace": "demo"},
//!     "data": {"k": "v"},
//! })).expect("an object");
//! let mut cached = obj.clone();
//! packed::pack(&mut cached);
//! assert!(packed::is_packed(&cached));
//! assert_eq!(cached.metadata.name.as_deref(), Some("a"));
//! assert_eq!(packed::unpack(&cached).data, obj.data);
//! ```

use kube::api::DynamicObject;
use serde_json::Value;

/// Replaces the object's body by its JSON text (no-op when it is packed already or has no
/// body). For a watch's `shrink`.
pub fn pack(obj: &mut DynamicObject) {
    if matches!(obj.data, Value::Object(_) | Value::Array(_)) {
        let text = obj.data.to_string();
        obj.data = Value::String(text);
    }
}

/// Whether the body is packed.
pub fn is_packed(obj: &DynamicObject) -> bool {
    // A Kubernetes object's body is a JSON object; a string body is only ever a packed one.
    obj.data.is_string()
}

/// The object with its body as a tree again (a clone when it was not packed).
pub fn unpack(obj: &DynamicObject) -> DynamicObject {
    let mut out = DynamicObject {
        types: obj.types.clone(),
        metadata: obj.metadata.clone(),
        data: Value::Null,
    };
    out.data = match &obj.data {
        // The text was written by `pack` from a valid tree, so it parses.
        Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
        other => other.clone(),
    };
    out
}

/// The whole object as one JSON tree (`apiVersion`, `kind`, `metadata` and the body), as
/// `serde_json::to_value(unpack(obj))` gives it, without building the unpacked object first:
/// the body's text is parsed straight into the tree and only the metadata is serialized.
pub fn to_value(obj: &DynamicObject) -> Value {
    let body = match &obj.data {
        Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
        other => other.clone(),
    };
    let mut map = match body {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    if let Some(types) = &obj.types {
        map.insert(
            "apiVersion".into(),
            Value::String(types.api_version.clone()),
        );
        map.insert("kind".into(), Value::String(types.kind.clone()));
    }
    let metadata = serde_json::to_value(&obj.metadata).unwrap_or(Value::Null);
    map.insert("metadata".into(), metadata);
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
            "metadata": {"name": "web", "namespace": "demo", "labels": {"a": "b"}},
            "spec": {"template": {"data": {"x": "1"}}, "placement": {"clusters": [{"name": "m1"}]}},
            "status": {"conditions": [{"type": "Propagation", "status": "True"}]},
        }))
        .expect("a valid object")
    }

    #[test]
    fn a_packed_object_unpacks_to_the_same_object() {
        let obj = object();
        let mut cached = obj.clone();
        pack(&mut cached);
        assert!(is_packed(&cached));
        assert_eq!(cached.metadata, obj.metadata);
        assert_eq!(cached.types, obj.types);
        let back = unpack(&cached);
        assert_eq!(back.data, obj.data);
        assert_eq!(back.metadata, obj.metadata);
    }

    #[test]
    fn packing_twice_changes_nothing_and_an_unpacked_object_unpacks_to_itself() {
        let mut cached = object();
        pack(&mut cached);
        let once = cached.data.clone();
        pack(&mut cached);
        assert_eq!(cached.data, once);
        let plain = object();
        assert!(!is_packed(&plain));
        assert_eq!(unpack(&plain).data, plain.data);
    }

    #[test]
    fn the_tree_of_a_packed_object_is_that_of_the_object() {
        let obj = object();
        let mut cached = obj.clone();
        pack(&mut cached);
        let expected = serde_json::to_value(&obj).expect("an object serializes");
        assert_eq!(to_value(&cached), expected);
        assert_eq!(
            to_value(&obj),
            expected,
            "an unpacked object gives the same tree"
        );
        assert_eq!(expected["kind"], "FederatedConfigMap");
        assert_eq!(expected["metadata"]["labels"]["a"], "b");
        let mut untyped = cached.clone();
        untyped.types = None;
        let mut without_types =
            serde_json::to_value(unpack(&untyped)).expect("an object serializes");
        assert_eq!(to_value(&untyped), without_types);
        if let Some(map) = without_types.as_object_mut() {
            map.remove("spec");
        }
        assert_ne!(to_value(&untyped), without_types);
    }

    #[test]
    fn an_object_without_a_body_stays_as_it_is() {
        let mut obj = DynamicObject::new(
            "a",
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
        );
        obj.data = Value::Null;
        pack(&mut obj);
        assert!(!is_packed(&obj));
        assert_eq!(unpack(&obj).data, Value::Null);
    }
}
