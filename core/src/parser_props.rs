//! Property tests of the parsers users feed through the CRDs: override paths (JSON pointer
//! and kubefed alpha's dotted form), whole override lists, placement selectors and Work
//! objects. Every input must be accepted or rejected with an error, never a panic; where a
//! parser has an algebraic property (round trips, order independence) it is checked too.
//! The case counts are small on purpose: these run in the ordinary unit-test suite.

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::override_path::to_pointer;
use crate::overrides::{OverrideError, apply, by_cluster};
use flotilla_api::federated::{
    ClusterOverride, ClusterOverrides, LabelSelector, LabelSelectorRequirement, OverrideOp,
};
use flotilla_api::selector::matches_selector;
use flotilla_api::work::{Work, cluster_namespace, cluster_of_namespace, type_label, work_name};

fn config() -> ProptestConfig {
    ProptestConfig::with_cases(256)
}

/// Any JSON value, a few levels deep, with keys that often collide with real paths.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("(spec|metadata|name|0|1|[a-z~/.]{0,4})", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A dotted-path key: no `.`, `/`, `~`, whitespace or brackets.
fn dotted_key() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_:@-]{1,8}"
}

/// Strings made of the characters that matter to the path parsers, plus anything else.
fn path_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9./~\\[\\] ]{0,16}",
        "/[a-z0-9/~]{0,12}",
        any::<String>(),
    ]
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_override_path_is_converted_or_rejected_with_a_message(path in path_like()) {
        match to_pointer(&path) {
            Ok(pointer) => prop_assert!(pointer.starts_with('/'), "{path:?} -> {pointer:?}"),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn a_json_pointer_built_from_any_segments_round_trips(
        segments in prop::collection::vec(any::<String>(), 1..5),
    ) {
        let written: String = segments.iter().map(|s| format!("/{}", escape(s))).collect();
        let converted = to_pointer(&written).expect("a pointer is kept as written");
        prop_assert_eq!(&converted, &written);
        let parsed = PointerBuf::parse(&converted).expect("escaped tokens parse");
        let tokens: Vec<String> = parsed.tokens().map(|t| t.decoded().into_owned()).collect();
        prop_assert_eq!(tokens, segments);
    }

    #[test]
    fn a_dotted_path_converts_to_the_pointer_of_the_same_segments(
        segments in prop::collection::vec(dotted_key(), 1..6),
    ) {
        let converted = to_pointer(&segments.join(".")).expect("a plain dotted path");
        let parsed = PointerBuf::parse(&converted).expect("the conversion is a JSON pointer");
        let tokens: Vec<String> = parsed.tokens().map(|t| t.decoded().into_owned()).collect();
        prop_assert_eq!(tokens, segments);
    }

    #[test]
    fn a_bracket_index_means_the_same_as_a_numeric_segment(
        key in dotted_key(), index in 0u32..10_000, rest in dotted_key(),
    ) {
        prop_assert_eq!(
            to_pointer(&format!("{key}[{index}].{rest}")),
            to_pointer(&format!("{key}.{index}.{rest}"))
        );
    }

    #[test]
    fn a_list_index_of_any_size_applies_only_within_the_list(
        index in prop_oneof![0u128..4, any::<u128>()], spelling in any::<bool>(),
    ) {
        let path = if spelling { format!("spec.items[{index}]") } else { format!("spec.items.{index}") };
        let obj = json!({"spec": {"items": ["a", "b"]}});
        let mut patched = obj.clone();
        let op = ClusterOverride { op: Some(OverrideOp::Replace), path, value: Some(json!("z")) };
        match apply(&mut patched, "member1", &[op]) {
            Ok(()) => {
                prop_assert!(index < 2);
                prop_assert_eq!(&patched["spec"]["items"][index as usize], &json!("z"));
            }
            Err(e) => {
                prop_assert!(index >= 2, "{e}");
                prop_assert_eq!(patched, obj);
            }
        }
    }

    #[test]
    fn any_converted_dotted_path_is_a_valid_pointer(path in "[a-z0-9.\\[\\]]{1,16}") {
        if let Ok(pointer) = to_pointer(&path) {
            prop_assert!(PointerBuf::parse(&pointer).is_ok(), "{path:?} -> {pointer:?}");
        }
    }

    #[test]
    fn any_override_list_is_validated_or_rejected_and_a_failure_leaves_the_object(
        obj in any_json(),
        ops in prop::collection::vec(
            (prop::option::of(prop_oneof![
                Just(OverrideOp::Add), Just(OverrideOp::Remove), Just(OverrideOp::Replace)
            ]), path_like(), prop::option::of(any_json())),
            0..4,
        ),
    ) {
        let ops: Vec<ClusterOverride> = ops
            .into_iter()
            .map(|(op, path, value)| ClusterOverride { op, path, value })
            .collect();
        let entry = ClusterOverrides { cluster_name: "member1".into(), cluster_overrides: ops.clone() };
        let grouped = by_cluster(std::slice::from_ref(&entry));
        let mut patched = obj.clone();
        let applied = apply(&mut patched, "member1", &ops);
        // Validation is the same in both places: an invalid list never reaches the object.
        if let Err(e) = &grouped {
            prop_assert_eq!(applied.as_ref().err(), Some(e));
        }
        if applied.is_err() {
            prop_assert_eq!(patched, obj);
        }
    }

    #[test]
    fn a_forbidden_path_is_rejected_in_either_spelling(
        dotted in prop_oneof![
            Just("metadata.name"), Just("metadata.namespace"), Just("kind"),
            Just("apiVersion"), Just("metadata"), Just("metadata.generateName"),
        ],
    ) {
        let pointer = format!("/{}", dotted.replace('.', "/"));
        for path in [dotted.to_string(), pointer] {
            let op = ClusterOverride { op: Some(OverrideOp::Remove), path, value: None };
            let err = apply(&mut json!({}), "member1", &[op]).expect_err("forbidden");
            prop_assert!(matches!(err, OverrideError::ForbiddenPath { .. }), "{err}");
        }
    }
}

fn operator() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("In".to_string()),
        Just("NotIn".to_string()),
        Just("Exists".to_string()),
        Just("DoesNotExist".to_string()),
        "[A-Za-z]{0,6}",
    ]
}

fn requirement() -> impl Strategy<Value = LabelSelectorRequirement> {
    (
        "(env|region|tier|[a-z]{0,3})",
        operator(),
        prop::collection::vec("(prod|dev|eu|[a-z]{0,2})", 0..3),
    )
        .prop_map(|(key, operator, values)| LabelSelectorRequirement {
            key,
            operator,
            values,
        })
}

/// A requirement that always validates, so that evaluation itself is exercised.
fn valid_requirement() -> impl Strategy<Value = LabelSelectorRequirement> {
    requirement().prop_map(|mut r| {
        if r.key.is_empty() {
            r.key = "env".into();
        }
        if !matches!(
            r.operator.as_str(),
            "In" | "NotIn" | "Exists" | "DoesNotExist"
        ) {
            r.operator = "Exists".into();
        }
        match r.operator.as_str() {
            "In" | "NotIn" if r.values.is_empty() => r.values.push("prod".into()),
            "In" | "NotIn" => {}
            _ => r.values.clear(),
        }
        r
    })
}

fn cluster_labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(
        "(env|region|tier|[a-z]{0,3})",
        "(prod|dev|eu|[a-z]{0,2})",
        0..4,
    )
}

fn selector(
    req: impl Strategy<Value = LabelSelectorRequirement>,
) -> impl Strategy<Value = LabelSelector> {
    (
        prop::collection::btree_map("(env|region|[a-z]{0,2})", "(prod|dev|[a-z]{0,2})", 0..2),
        prop::collection::vec(req, 0..5),
    )
        .prop_map(|(match_labels, match_expressions)| LabelSelector {
            match_labels,
            match_expressions,
        })
}

fn with_operator(r: &LabelSelectorRequirement, operator: &str) -> LabelSelector {
    LabelSelector {
        match_labels: BTreeMap::new(),
        match_expressions: vec![LabelSelectorRequirement {
            operator: operator.into(),
            ..r.clone()
        }],
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_selector_is_valid_or_invalid_whatever_the_labels(
        sel in selector(requirement()), a in cluster_labels(), b in cluster_labels(),
    ) {
        let (ra, rb) = (matches_selector(&sel, &a), matches_selector(&sel, &b));
        prop_assert_eq!(ra.is_ok(), rb.is_ok());
        if let Err(e) = ra {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn the_order_of_match_expressions_does_not_change_the_result(
        (sel, shuffled) in selector(requirement()).prop_flat_map(|sel| {
            let exprs = sel.match_expressions.clone();
            (Just(sel), Just(exprs).prop_shuffle())
        }),
        labels in cluster_labels(),
    ) {
        let permuted = LabelSelector { match_expressions: shuffled, ..sel.clone() };
        let (a, b) = (matches_selector(&sel, &labels), matches_selector(&permuted, &labels));
        prop_assert_eq!(a.is_ok(), b.is_ok());
        if let (Ok(a), Ok(b)) = (a, b) {
            prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn complementary_operators_give_complementary_answers(
        req in valid_requirement(), labels in cluster_labels(),
    ) {
        let (yes, no) = match req.operator.as_str() {
            "In" | "NotIn" => ("In", "NotIn"),
            _ => ("Exists", "DoesNotExist"),
        };
        let a = matches_selector(&with_operator(&req, yes), &labels).expect("valid");
        let b = matches_selector(&with_operator(&req, no), &labels).expect("valid");
        prop_assert_ne!(a, b);
    }

    #[test]
    fn match_labels_mean_the_same_as_in_with_one_value(
        key in "(env|[a-z]{1,3})", value in "(prod|[a-z]{0,2})", labels in cluster_labels(),
    ) {
        let by_labels = LabelSelector {
            match_labels: BTreeMap::from([(key.clone(), value.clone())]),
            match_expressions: vec![],
        };
        let by_expression = LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![LabelSelectorRequirement {
                key, operator: "In".into(), values: vec![value],
            }],
        };
        prop_assert_eq!(
            matches_selector(&by_labels, &labels),
            matches_selector(&by_expression, &labels)
        );
    }

    #[test]
    fn any_json_is_read_as_a_work_or_rejected(value in any_json()) {
        if let Ok(work) = serde_json::from_value::<Work>(value) {
            let again = serde_json::to_value(&work).expect("a Work serializes");
            let back: Work = serde_json::from_value(again).expect("and reads back");
            prop_assert_eq!(back.spec, work.spec);
        }
    }

    #[test]
    fn a_work_keeps_any_manifests_through_json(manifests in prop::collection::vec(any_json(), 0..4)) {
        let value = json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "Work",
            "metadata": {"name": "w"}, "spec": {"workload": {"manifests": manifests}},
        });
        let work: Work = serde_json::from_value(value).expect("a Work");
        prop_assert_eq!(work.spec.workload.manifests, manifests);
    }

    #[test]
    fn work_names_and_type_labels_stay_valid_for_any_identity(
        plural in any::<String>(), group in any::<String>(),
        namespace in prop::option::of(any::<String>()), name in any::<String>(),
    ) {
        let n = work_name(&plural, &group, namespace.as_deref(), &name);
        prop_assert!(n.len() <= 253, "{n}");
        prop_assert!(
            n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'),
            "{n}"
        );
        let alnum = |c: char| c.is_ascii_alphanumeric();
        prop_assert!(n.starts_with(alnum) && n.ends_with(alnum), "{n}");
        prop_assert!(type_label(&plural, &group).len() <= 63);
    }

    #[test]
    fn a_cluster_namespace_names_its_cluster_back(cluster in any::<String>()) {
        let namespace = cluster_namespace(&cluster);
        prop_assert_eq!(cluster_of_namespace(&namespace), Some(cluster.as_str()));
    }
}
