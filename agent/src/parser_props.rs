//! Property tests of the manifests of a Work as the Pull agent reads them before any
//! request: every input is accepted or rejected with a reason, never a panic.

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::apply::identify;
use crate::plan::{Adoption, ManifestOp, check_manifest, decide, manifest_hash, may_prune};

fn config() -> ProptestConfig {
    ProptestConfig::with_cases(256)
}

/// Any JSON value, a few levels deep, with the keys a manifest has.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "(v1|apps/v1|/v1|a/b/c|[a-z/]{0,6})".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                "(apiVersion|kind|metadata|name|namespace|labels|annotations|uid|[a-z]{0,3})",
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_manifest_is_checked_read_and_decided_without_panicking(
        manifest in any_json(), live in prop::option::of(any_json()),
    ) {
        if let Err(reason) = check_manifest(&manifest) {
            prop_assert!(!reason.is_empty());
        }
        let id = identify(7, &manifest);
        prop_assert_eq!(id.ordinal, 7);
        let _ = manifest_hash(&manifest);
        if let Some(live) = &live {
            let _ = may_prune("", live);
        }
        let op = decide(&manifest, live.as_ref());
        let rule = Adoption { label: Some("flotilla.io/dependency".into()), applied_uid: None };
        if let Some(live) = &live {
            let _ = rule.refusal(live);
        }
        if live.is_none() {
            prop_assert_eq!(op, ManifestOp::Apply);
        }
    }

    #[test]
    fn an_accepted_manifest_is_identified_by_what_it_says(
        group in prop::option::of("[a-z]{1,6}(\\.[a-z]{1,4})?"), version in "v[0-9]{1,2}",
        kind in "[A-Z][a-z]{0,8}", name in "[a-z0-9.-]{1,12}", namespace in prop::option::of("[a-z]{1,6}"),
    ) {
        let api_version = match &group {
            Some(g) => format!("{g}/{version}"),
            None => version.clone(),
        };
        let manifest = json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
        });
        prop_assert_eq!(check_manifest(&manifest), Ok(()));
        let id = identify(0, &manifest);
        prop_assert_eq!(id.group, group.unwrap_or_default());
        prop_assert_eq!(id.version, version);
        prop_assert_eq!(id.kind, kind);
        prop_assert_eq!(id.name, name);
        prop_assert_eq!(id.namespace, namespace.unwrap_or_default());
        let mut no_kind = manifest.clone();
        no_kind["kind"] = json!(42);
        prop_assert_eq!(check_manifest(&no_kind), Err("the manifest has no kind".to_string()));
        let mut no_name = manifest;
        no_name["metadata"]["name"] = json!("");
        let reason = check_manifest(&no_name).expect_err("no name");
        prop_assert!(reason.contains("metadata.name"), "{reason}");
    }

    #[test]
    fn a_malformed_api_version_is_rejected_with_a_reason(
        api_version in "(/[a-z0-9]{0,3}|[a-z0-9]{0,3}/|[a-z]{1,3}/[a-z]{0,3}/[a-z0-9]{0,3}|)",
    ) {
        let manifest = json!({"apiVersion": api_version, "kind": "ConfigMap", "metadata": {"name": "a"}});
        let reason = check_manifest(&manifest).expect_err("malformed apiVersion");
        prop_assert!(reason.contains("apiVersion"), "{reason}");
    }
}
