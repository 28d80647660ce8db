//! Property tests of what the controllers read from users' objects: kubefed's
//! `kubefed.io/deleteoption` annotation, and the manifests of a Work as the Pull agent
//! reads them before any request. Every input is accepted or rejected with a reason,
//! never a panic.

use kube::api::PropagationPolicy;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::agent::apply::identify;
use crate::agent::plan::{ManifestOp, check_manifest, decide, manifest_hash, may_prune};
use crate::sync::parse_delete_options;

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

fn policy() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Orphan".to_string()),
        Just("Background".to_string()),
        Just("Foreground".to_string()),
        "[A-Za-z]{0,10}",
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_delete_options_annotation_is_parsed_or_rejected(raw in any::<String>(), v in any_json()) {
        for raw in [raw, v.to_string()] {
            if let Err(e) = parse_delete_options(&raw) {
                prop_assert!(!e.to_string().is_empty());
            }
        }
    }

    #[test]
    fn a_delete_options_annotation_keeps_what_it_says(
        grace in prop::option::of(any::<i64>()),
        policy in prop::option::of(policy()),
        uid in prop::option::of(".{0,8}"),
        extra in any_json(),
    ) {
        // kubefed writes Go's DeleteOptions; fields Flotilla does not read are ignored.
        let raw = json!({
            "gracePeriodSeconds": grace, "propagationPolicy": policy,
            "preconditions": {"uid": uid}, "dryRun": extra,
        })
        .to_string();
        let known = policy.as_deref().is_none_or(|p| matches!(p, "Orphan" | "Background" | "Foreground"));
        let grace_fits = grace.is_none_or(|g| u32::try_from(g).is_ok());
        match parse_delete_options(&raw) {
            Ok(dp) => {
                prop_assert!(known && grace_fits);
                prop_assert_eq!(dp.grace_period_seconds.map(i64::from), grace);
                let parsed = dp.propagation_policy.map(|p| match p {
                    PropagationPolicy::Orphan => "Orphan",
                    PropagationPolicy::Background => "Background",
                    PropagationPolicy::Foreground => "Foreground",
                });
                prop_assert_eq!(parsed, policy.as_deref());
                prop_assert_eq!(dp.preconditions.and_then(|p| p.uid), uid);
            }
            Err(e) => {
                prop_assert!(!(known && grace_fits), "{e}");
                // Serde reads the grace period first; past it, the policy is named.
                if grace_fits && !known {
                    let named = policy.as_deref().unwrap_or_default();
                    prop_assert!(e.to_string().contains(&format!("{named:?}")), "{e}");
                }
            }
        }
    }

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
