//! Placement: which member clusters a federated object goes to, decided from its
//! `spec.placement` and the registered clusters' labels (kubefed's
//! `pkg/controller/util/placement.go` semantics).
//!
//! - A non-nil `clusters` list wins; an empty list selects no cluster, and the
//!   `clusterSelector` is then ignored (not even validated), as in kubefed.
//! - Otherwise `clusterSelector` decides: absent selects none, `{}` selects all.
//! - The result only ever names registered clusters; unknown names are dropped.
//!
//! Readiness and the FederatedNamespace's placement are applied by the caller with
//! [`ready_only`] and [`intersect`], so that this module stays a function of its inputs.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::selector::PlacementError;
#[cfg(test)]
use flotilla_api::selector::{LabelSelector, LabelSelectorRequirement};
use flotilla_api::{federated::Placement, selector::CompiledSelector};

/// A registered member cluster as placement sees it.
#[derive(Debug, Clone, Copy)]
pub struct ClusterInfo<'a> {
    /// Name of the KubeFedCluster.
    pub name: &'a str,
    /// Labels of the KubeFedCluster.
    pub labels: &'a BTreeMap<String, String>,
}

/// The names of the clusters `placement` selects among the registered `clusters`.
///
/// Readiness is not considered here; see [`ready_only`].
pub fn select(
    placement: &Placement,
    clusters: &[ClusterInfo<'_>],
) -> Result<BTreeSet<String>, PlacementError> {
    if let Some(named) = &placement.clusters {
        let named: BTreeSet<&str> = named.iter().map(|c| c.name.as_str()).collect();
        return Ok(clusters
            .iter()
            .filter(|c| named.contains(c.name))
            .map(|c| c.name.to_string())
            .collect());
    }
    let Some(sel) = &placement.cluster_selector else {
        return Ok(BTreeSet::new());
    };
    let sel = CompiledSelector::new(sel)?;
    Ok(clusters
        .iter()
        .filter(|c| sel.matches(c.labels))
        .map(|c| c.name.to_string())
        .collect())
}

/// The clusters in both sets: a namespaced object's placement intersected with its
/// FederatedNamespace's placement.
pub fn intersect(a: &BTreeSet<String>, b: &BTreeSet<String>) -> BTreeSet<String> {
    a.intersection(b).cloned().collect()
}

/// The selected clusters that are Ready.
pub fn ready_only(selected: &BTreeSet<String>, ready: &BTreeSet<String>) -> BTreeSet<String> {
    intersect(selected, ready)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federated::ClusterReference;
    use flotilla_api::selector::matches_selector;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, operator: &str, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![LabelSelectorRequirement {
                key: key.into(),
                operator: operator.into(),
                values: values.iter().map(|v| v.to_string()).collect(),
            }],
        }
    }

    fn names(set: &BTreeSet<String>) -> Vec<&str> {
        set.iter().map(String::as_str).collect()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    struct Fleet {
        labels: Vec<(String, BTreeMap<String, String>)>,
    }

    impl Fleet {
        /// member1 (env=prod, region=eu), member2 (env=dev), member3 (no labels).
        fn new() -> Self {
            Fleet {
                labels: vec![
                    (
                        "member1".into(),
                        labels(&[("env", "prod"), ("region", "eu")]),
                    ),
                    ("member2".into(), labels(&[("env", "dev")])),
                    ("member3".into(), labels(&[])),
                ],
            }
        }

        fn clusters(&self) -> Vec<ClusterInfo<'_>> {
            self.labels
                .iter()
                .map(|(name, labels)| ClusterInfo { name, labels })
                .collect()
        }
    }

    fn by_names(names: &[&str]) -> Placement {
        Placement {
            clusters: Some(
                names
                    .iter()
                    .map(|n| ClusterReference {
                        name: n.to_string(),
                    })
                    .collect(),
            ),
            cluster_selector: None,
            ..Placement::default()
        }
    }

    fn by_selector(sel: LabelSelector) -> Placement {
        Placement {
            clusters: None,
            cluster_selector: Some(sel),
            ..Placement::default()
        }
    }

    #[test]
    fn placement_with_empty_cluster_list_selects_nothing() {
        let fleet = Fleet::new();
        let mut placement = by_names(&[]);
        // Even a select-all selector does not apply once the list is non-nil.
        placement.cluster_selector = Some(LabelSelector::default());
        assert!(
            select(&placement, &fleet.clusters())
                .expect("valid")
                .is_empty()
        );
    }

    #[test]
    fn named_clusters_are_selected_and_the_selector_is_ignored() {
        let fleet = Fleet::new();
        let mut placement = by_names(&["member1", "member3"]);
        placement.cluster_selector = Some(expr("env", "Bogus", &[]));
        let selected = select(&placement, &fleet.clusters()).expect("selector is ignored");
        assert_eq!(names(&selected), ["member1", "member3"]);
    }

    #[test]
    fn names_not_registered_are_dropped() {
        let fleet = Fleet::new();
        let selected = select(&by_names(&["member2", "ghost"]), &fleet.clusters()).expect("valid");
        assert_eq!(names(&selected), ["member2"]);
    }

    #[test]
    fn nil_selector_selects_nothing() {
        let fleet = Fleet::new();
        let selected = select(&Placement::default(), &fleet.clusters()).expect("valid");
        assert!(selected.is_empty());
    }

    #[test]
    fn empty_selector_selects_all() {
        let fleet = Fleet::new();
        let selected =
            select(&by_selector(LabelSelector::default()), &fleet.clusters()).expect("valid");
        assert_eq!(names(&selected), ["member1", "member2", "member3"]);
    }

    #[test]
    fn empty_selector_with_no_registered_clusters_selects_nothing() {
        let selected = select(&by_selector(LabelSelector::default()), &[]).expect("valid");
        assert!(selected.is_empty());
    }

    #[test]
    fn match_labels_must_all_match() {
        let fleet = Fleet::new();
        let sel = LabelSelector {
            match_labels: labels(&[("env", "prod"), ("region", "eu")]),
            match_expressions: vec![],
        };
        let selected = select(&by_selector(sel), &fleet.clusters()).expect("valid");
        assert_eq!(names(&selected), ["member1"]);
        let sel = LabelSelector {
            match_labels: labels(&[("env", "prod"), ("region", "us")]),
            match_expressions: vec![],
        };
        assert!(
            select(&by_selector(sel), &fleet.clusters())
                .expect("valid")
                .is_empty()
        );
    }

    #[test]
    fn match_labels_and_match_expressions_must_both_hold() {
        let fleet = Fleet::new();
        let mut sel = expr("region", "Exists", &[]);
        sel.match_labels = labels(&[("env", "dev")]);
        assert!(
            select(&by_selector(sel), &fleet.clusters())
                .expect("valid")
                .is_empty()
        );
    }

    #[test]
    fn in_operator_matches_a_listed_value() {
        let fleet = Fleet::new();
        let selected = select(
            &by_selector(expr("env", "In", &["prod", "staging"])),
            &fleet.clusters(),
        )
        .expect("valid");
        assert_eq!(names(&selected), ["member1"]);
    }

    #[test]
    fn not_in_operator_matches_other_values_and_missing_labels() {
        let fleet = Fleet::new();
        let selected = select(
            &by_selector(expr("env", "NotIn", &["prod"])),
            &fleet.clusters(),
        )
        .expect("valid");
        assert_eq!(names(&selected), ["member2", "member3"]);
    }

    #[test]
    fn exists_operator_matches_clusters_with_the_label() {
        let fleet = Fleet::new();
        let selected =
            select(&by_selector(expr("env", "Exists", &[])), &fleet.clusters()).expect("valid");
        assert_eq!(names(&selected), ["member1", "member2"]);
    }

    #[test]
    fn does_not_exist_operator_matches_clusters_without_the_label() {
        let fleet = Fleet::new();
        let selected = select(
            &by_selector(expr("region", "DoesNotExist", &[])),
            &fleet.clusters(),
        )
        .expect("valid");
        assert_eq!(names(&selected), ["member2", "member3"]);
    }

    #[test]
    fn an_unknown_operator_is_an_error_naming_key_and_operator() {
        let err = matches_selector(&expr("env", "Equals", &["prod"]), &labels(&[]))
            .expect_err("unknown operator");
        assert!(matches!(err, PlacementError::UnknownOperator { .. }));
        let msg = err.to_string();
        assert!(
            msg.contains("\"env\"") && msg.contains("\"Equals\""),
            "{msg}"
        );
    }

    #[test]
    fn in_and_not_in_without_values_are_errors() {
        for op in ["In", "NotIn"] {
            let err = matches_selector(&expr("env", op, &[]), &labels(&[("env", "prod")]))
                .expect_err("no values");
            assert_eq!(
                err,
                PlacementError::MissingValues {
                    key: "env".into(),
                    operator: op.into()
                }
            );
            assert!(err.to_string().contains("needs at least one value"));
        }
    }

    #[test]
    fn exists_and_does_not_exist_with_values_are_errors() {
        for op in ["Exists", "DoesNotExist"] {
            let err =
                matches_selector(&expr("env", op, &["prod"]), &labels(&[])).expect_err("values");
            assert_eq!(
                err,
                PlacementError::UnexpectedValues {
                    key: "env".into(),
                    operator: op.into()
                }
            );
            assert!(err.to_string().contains("takes no values"));
        }
    }

    #[test]
    fn an_expression_with_an_empty_key_is_an_error() {
        let err = matches_selector(&expr("", "Exists", &[]), &labels(&[])).expect_err("empty key");
        assert_eq!(err, PlacementError::EmptyKey);
    }

    #[test]
    fn a_malformed_selector_fails_even_when_no_cluster_is_registered() {
        let err = select(&by_selector(expr("env", "Bogus", &[])), &[]).expect_err("invalid");
        assert!(matches!(err, PlacementError::UnknownOperator { .. }));
    }

    #[test]
    fn a_malformed_selector_fails_even_when_match_labels_already_rule_the_cluster_out() {
        let mut sel = expr("env", "In", &[]);
        sel.match_labels = labels(&[("tier", "gold")]);
        assert!(matches_selector(&sel, &labels(&[])).is_err());
    }

    #[test]
    fn intersect_keeps_clusters_in_both_sets() {
        let both = intersect(&set(&["member1", "member2"]), &set(&["member2", "member3"]));
        assert_eq!(names(&both), ["member2"]);
    }

    #[test]
    fn ready_only_drops_clusters_that_are_not_ready() {
        let ready = ready_only(&set(&["member1", "member2"]), &set(&["member1", "other"]));
        assert_eq!(names(&ready), ["member1"]);
    }
}
