use serde_json::{Value, json};

use super::*;

/// A CRD `widgets.example.com` with one version `v1` of the given schema.
fn crd(schema: Value) -> Value {
    crd_with_versions(json!([{"name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": schema}}]))
}

fn crd_with_versions(versions: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": versions,
        }
    })
}

fn spec_schema(spec: Value) -> Value {
    json!({"type": "object", "properties": {"spec": spec}})
}

fn base() -> Value {
    spec_schema(json!({
        "type": "object",
        "required": ["size"],
        "properties": {
            "size": {"type": "integer"},
            "mode": {"type": "string", "enum": ["Push", "Pull"]},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "clusters": {"type": "array", "items": {
                "type": "object", "properties": {"name": {"type": "string"}}}},
            "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "port": {"x-kubernetes-int-or-string": true},
        }
    }))
}

/// `base()` with `edit` applied to its spec schema.
fn edited(edit: impl FnOnce(&mut Value)) -> Value {
    let mut schema = base();
    edit(schema.pointer_mut("/properties/spec").expect("spec"));
    crd(schema)
}

fn kinds(breaks: &[Break]) -> Vec<(BreakKind, String)> {
    breaks.iter().map(|b| (b.kind, b.at.clone())).collect()
}

#[test]
fn an_identical_crd_is_compatible() {
    assert_eq!(compare(&crd(base()), &crd(base())), []);
}

#[test]
fn a_new_optional_field_a_new_enum_value_and_a_new_description_are_compatible() {
    let new = edited(|s| {
        s["properties"]["replicas"] = json!({"type": "integer"});
        s["properties"]["mode"]["enum"] = json!(["Push", "Pull", "Hybrid"]);
        s["description"] = json!("now documented");
    });
    assert_eq!(compare(&crd(base()), &new), []);
}

#[test]
fn a_dropped_field_is_rejected() {
    let new = edited(|s| {
        s["properties"]
            .as_object_mut()
            .expect("props")
            .remove("size");
        s["required"] = json!([]);
    });
    assert_eq!(
        kinds(&compare(&crd(base()), &new)),
        [(BreakKind::FieldRemoved, "v1 .spec.size".to_string())]
    );
}

#[test]
fn a_field_dropped_under_a_parent_that_keeps_unknown_fields_is_compatible() {
    let old =
        edited(|s| s["properties"]["template"]["properties"] = json!({"a": {"type": "string"}}));
    assert_eq!(compare(&old, &crd(base())), []);
}

#[test]
fn a_dropped_field_of_a_list_item_is_rejected() {
    let new = edited(|s| s["properties"]["clusters"]["items"]["properties"] = json!({}));
    assert_eq!(
        kinds(&compare(&crd(base()), &new)),
        [(
            BreakKind::FieldRemoved,
            "v1 .spec.clusters[].name".to_string()
        )]
    );
}

#[test]
fn a_narrowed_type_is_rejected_and_a_widened_one_is_not() {
    let narrowed = edited(|s| s["properties"]["size"]["type"] = json!("string"));
    assert_eq!(
        kinds(&compare(&crd(base()), &narrowed)),
        [(BreakKind::TypeNarrowed, "v1 .spec.size".to_string())]
    );
    let widened = edited(|s| s["properties"]["size"]["type"] = json!("number"));
    assert_eq!(compare(&crd(base()), &widened), []);
    // number → integer rejects 1.5.
    assert_eq!(
        kinds(&compare(&widened, &crd(base()))),
        [(BreakKind::TypeNarrowed, "v1 .spec.size".to_string())]
    );
}

#[test]
fn int_or_string_turned_into_one_of_them_is_narrowed_and_the_reverse_is_not() {
    let narrowed = edited(|s| s["properties"]["port"] = json!({"type": "integer"}));
    assert_eq!(
        kinds(&compare(&crd(base()), &narrowed)),
        [(BreakKind::TypeNarrowed, "v1 .spec.port".to_string())]
    );
    assert_eq!(compare(&narrowed, &crd(base())), []);
}

#[test]
fn a_free_form_field_that_becomes_typed_is_narrowed_and_typed_to_free_form_is_not() {
    let free = edited(|s| {
        s["properties"]["labels"] = json!({"x-kubernetes-preserve-unknown-fields": true})
    });
    assert_eq!(compare(&crd(base()), &free), []);
    assert_eq!(
        kinds(&compare(&free, &crd(base()))),
        [(BreakKind::TypeNarrowed, "v1 .spec.labels".to_string())]
    );
}

#[test]
fn pruning_what_was_kept_is_rejected() {
    let new = edited(|s| s["properties"]["template"] = json!({"type": "object"}));
    assert_eq!(
        kinds(&compare(&crd(base()), &new)),
        [(
            BreakKind::UnknownFieldsPruned,
            "v1 .spec.template".to_string()
        )]
    );
}

#[test]
fn a_removed_enum_value_and_a_new_enum_are_rejected() {
    let removed = edited(|s| s["properties"]["mode"]["enum"] = json!(["Push"]));
    let breaks = compare(&crd(base()), &removed);
    assert_eq!(
        kinds(&breaks),
        [(BreakKind::EnumNarrowed, "v1 .spec.mode".to_string())]
    );
    assert!(breaks[0].detail.contains("Pull"), "{}", breaks[0]);
    let introduced =
        edited(|s| s["properties"]["labels"]["additionalProperties"]["enum"] = json!(["a"]));
    assert_eq!(
        kinds(&compare(&crd(base()), &introduced)),
        [(BreakKind::EnumNarrowed, "v1 .spec.labels{}".to_string())]
    );
}

#[test]
fn a_newly_required_field_is_rejected_and_a_no_longer_required_one_is_not() {
    let required = edited(|s| s["required"] = json!(["size", "mode"]));
    let breaks = compare(&crd(base()), &required);
    assert_eq!(
        kinds(&breaks),
        [(BreakKind::NewlyRequired, "v1 .spec".to_string())]
    );
    assert_eq!(breaks[0].detail, "mode");
    let optional = edited(|s| s["required"] = json!([]));
    assert_eq!(compare(&crd(base()), &optional), []);
}

fn version(name: &str, served: bool, storage: bool, schema: Value) -> Value {
    json!({"name": name, "served": served, "storage": storage,
        "schema": {"openAPIV3Schema": schema}})
}

#[test]
fn a_tighter_validation_is_rejected_and_a_looser_one_is_not() {
    let bounded = edited(|s| {
        s["properties"]["size"]["maximum"] = json!(10);
        s["properties"]["mode"]["maxLength"] = json!(8);
    });
    let found = kinds(&compare(&crd(base()), &bounded));
    assert_eq!(
        found,
        [
            (BreakKind::ValidationTightened, "v1 .spec.mode".to_string()),
            (BreakKind::ValidationTightened, "v1 .spec.size".to_string())
        ]
    );
    let lower = edited(|s| {
        s["properties"]["size"]["maximum"] = json!(5);
        s["properties"]["mode"]["maxLength"] = json!(8);
    });
    assert_eq!(
        kinds(&compare(&bounded, &lower)),
        [(BreakKind::ValidationTightened, "v1 .spec.size".to_string())]
    );
    assert_eq!(compare(&lower, &bounded), [], "raising a maximum loosens");
    let min = edited(|s| s["properties"]["clusters"]["minItems"] = json!(1));
    assert_eq!(
        kinds(&compare(&crd(base()), &min)),
        [(
            BreakKind::ValidationTightened,
            "v1 .spec.clusters".to_string()
        )]
    );
    assert_eq!(
        compare(&min, &crd(base())),
        [],
        "dropping a minimum loosens"
    );
    let pattern = edited(|s| s["properties"]["mode"]["pattern"] = json!("^P"));
    assert_eq!(
        kinds(&compare(&crd(base()), &pattern)),
        [(BreakKind::ValidationTightened, "v1 .spec.mode".to_string())]
    );
    assert_eq!(compare(&pattern, &pattern), []);
    assert_eq!(
        compare(&pattern, &crd(base())),
        [],
        "dropping a pattern loosens"
    );
}

#[test]
fn a_removed_or_unserved_version_is_rejected_and_a_new_one_is_not() {
    let old = crd_with_versions(json!([
        version("v1alpha1", true, false, base()),
        version("v1", true, true, base()),
    ]));
    let removed = crd(base());
    assert_eq!(
        kinds(&compare(&old, &removed)),
        [(BreakKind::VersionRemoved, "v1alpha1".to_string())]
    );
    let unserved = crd_with_versions(json!([
        version("v1alpha1", false, false, base()),
        version("v1", true, true, base()),
    ]));
    assert_eq!(
        kinds(&compare(&old, &unserved)),
        [(BreakKind::VersionNotServed, "v1alpha1".to_string())]
    );
    let added = crd_with_versions(json!([
        version("v1alpha1", true, false, base()),
        version("v1", true, true, base()),
        version("v2", true, false, spec_schema(json!({"type": "object"}))),
    ]));
    assert_eq!(compare(&old, &added), []);
}

#[test]
fn a_storage_version_move_needs_a_conversion_path() {
    let old = crd_with_versions(json!([
        version("v1", true, true, base()),
        version("v2", true, false, base()),
    ]));
    // Same schema: strategy None converts by rewriting apiVersion.
    let same = crd_with_versions(json!([
        version("v1", true, false, base()),
        version("v2", true, true, base()),
    ]));
    assert_eq!(compare(&old, &same), []);
    // Different schemas and no webhook: stored v1 objects cannot be read as v2.
    let mut other = base();
    other["properties"]["spec"]["properties"]["extra"] = json!({"type": "string"});
    let differs = crd_with_versions(json!([
        version("v1", true, false, base()),
        version("v2", true, true, other.clone()),
    ]));
    assert_eq!(
        kinds(&compare(&old, &differs)),
        [(BreakKind::StorageVersionChanged, String::new())]
    );
    let mut webhook = differs.clone();
    webhook["spec"]["conversion"] = json!({"strategy": "Webhook"});
    assert_eq!(compare(&old, &webhook), []);
    // The old storage version no longer served: stored objects are unreadable.
    let unserved = crd_with_versions(json!([
        version("v1", false, false, base()),
        version("v2", true, true, base()),
    ]));
    let found = kinds(&compare(&old, &unserved));
    assert!(
        found.contains(&(BreakKind::StorageVersionChanged, String::new())),
        "{found:?}"
    );
    assert!(
        found.contains(&(BreakKind::VersionNotServed, "v1".to_string())),
        "{found:?}"
    );
}

#[test]
fn scope_and_name_changes_are_rejected() {
    let mut new = crd(base());
    new["spec"]["scope"] = json!("Cluster");
    new["spec"]["names"]["plural"] = json!("widgetz");
    assert_eq!(
        kinds(&compare(&crd(base()), &new)),
        [
            (BreakKind::ScopeChanged, String::new()),
            (BreakKind::NamesChanged, String::new())
        ]
    );
}

#[test]
fn a_crd_missing_from_the_new_set_is_rejected_and_a_new_crd_is_not() {
    let mut other = crd(base());
    other["metadata"]["name"] = json!("gadgets.example.com");
    let breaks = compare_sets(&[crd(base())], std::slice::from_ref(&other));
    assert_eq!(kinds(&breaks), [(BreakKind::CrdRemoved, String::new())]);
    assert_eq!(breaks[0].crd, "widgets.example.com");
    assert_eq!(compare_sets(&[crd(base())], &[crd(base()), other]), []);
}

#[test]
fn a_break_reads_as_a_sentence() {
    let new = edited(|s| s["properties"]["size"]["type"] = json!("string"));
    let text = compare(&crd(base()), &new)[0].to_string();
    assert_eq!(
        text,
        "widgets.example.com: type narrowed at v1 .spec.size (Some(\"integer\") → Some(\"string\"))"
    );
}

#[test]
fn the_generated_crds_are_compatible_with_themselves() {
    let all: Vec<Value> = crate::crdgen::all_crds()
        .iter()
        .chain(crate::crdgen::member_crds().iter())
        .map(|c| serde_json::to_value(c).expect("serializes"))
        .collect();
    assert_eq!(compare_sets(&all, &all), []);
}
