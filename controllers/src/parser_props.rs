//! Property tests of what the controllers read from users' objects: kubefed's
//! `kubefed.io/deleteoption` annotation. Every input is accepted or rejected with a reason,
//! never a panic.

use kube::api::PropagationPolicy;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::sync::parse_delete_options;

fn config() -> ProptestConfig {
    ProptestConfig::with_cases(256)
}

/// A JSON scalar or a short list of them: what a stray field of the annotation may hold.
fn any_json() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
    ];
    prop_oneof![
        scalar.clone(),
        prop::collection::vec(scalar, 0..3).prop_map(Value::Array),
    ]
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
}
