//! Drift: a member object that another writer changed after Flotilla applied it. What
//! differs ([`diff`]), who wrote it ([`digest`], from the member's `managedFields`), what a
//! federated object asks to be done about it ([`Policy`], from its annotations), when a
//! repair is fighting another writer ([`fight`]), and what `status.drift` holds after a
//! round ([`merge`]; its entries, [`ClusterDrift`], are `flotilla_api::drift`'s).
//!
//! Only fields Flotilla applies count: the desired object is Flotilla's whole applied set
//! (server-side apply), so defaults, `status`, a Service's `clusterIP` and fields a webhook
//! injected are never compared. Pure: no I/O, no clock (callers pass "now").

pub mod decide;
pub mod diff;
pub mod digest;
pub mod fight;

use std::collections::{BTreeMap, BTreeSet};

use crate::override_path::{self, PathError};
use flotilla_api::drift::{ClusterDrift, DriftState};

/// Annotation on a federated object: `Repair` (the default), `Report` or `Ignore`.
pub const POLICY_ANNOTATION: &str = "flotilla.io/drift-policy";
/// Annotation on a federated object: comma-separated field paths (dotted, `spec.replicas`,
/// or JSON pointers, `/metadata/labels/app.kubernetes.io~1name`) another writer owns in
/// the members; differences there are neither repaired nor reported.
pub const IGNORE_ANNOTATION: &str = "flotilla.io/drift-ignore";
/// Annotation that exists only in Flotilla's member caches, never in a cluster: the
/// compact digest of the member object's `managedFields` (see [`digest`]).
pub const DIGEST_ANNOTATION: &str = "flotilla.io/field-managers";

/// Fields listed per cluster in `status.drift`; the rest are counted in `moreFields`.
pub const MAX_FIELDS: usize = 8;
/// Managers listed per cluster in `status.drift`.
pub const MAX_MANAGERS: usize = 4;
/// Characters of a desired or live value shown in `status.drift` (JSON, then cut).
pub const MAX_VALUE_CHARS: usize = 120;

/// What to do when a member object drifted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Apply the desired object again (Flotilla's behaviour without the annotation).
    #[default]
    Repair,
    /// Leave the member's change in place and report it.
    Report,
}

/// A federated object's drift policy: the mode, and the paths (JSON pointers) left to
/// other writers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Repair or report.
    pub mode: Mode,
    /// Field paths (JSON pointers) neither repaired nor reported, with all below them.
    pub ignore: Vec<String>,
}

/// Why a drift annotation cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The policy is not one of the three.
    #[error("{POLICY_ANNOTATION} is {0:?}; expected Repair, Report or Ignore")]
    UnknownMode(String),
    /// `Ignore` without any path.
    #[error(
        "{POLICY_ANNOTATION}: Ignore needs the fields in {IGNORE_ANNOTATION} (e.g. spec.replicas)"
    )]
    IgnoreWithoutPaths,
    /// A path that is neither dotted nor a JSON pointer.
    #[error("{IGNORE_ANNOTATION}: path {path:?}: {source}")]
    BadPath {
        /// The path as written.
        path: String,
        /// Why it is not a path.
        #[source]
        source: PathError,
    },
}

impl Policy {
    /// The policy a federated object's annotations ask for. `Ignore` is `Repair` of every
    /// field but the ignored ones (ignored paths apply under `Report` too).
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Result<Policy, PolicyError> {
        let ignore = match annotations.get(IGNORE_ANNOTATION) {
            Some(list) => parse_paths(list)?,
            None => Vec::new(),
        };
        let mode = match annotations.get(POLICY_ANNOTATION).map(|s| s.trim()) {
            None | Some("") | Some("Repair") => Mode::Repair,
            Some("Report") => Mode::Report,
            Some("Ignore") if ignore.is_empty() => return Err(PolicyError::IgnoreWithoutPaths),
            Some("Ignore") => Mode::Repair,
            Some(other) => return Err(PolicyError::UnknownMode(other.to_string())),
        };
        Ok(Policy { mode, ignore })
    }

    /// `desired` with every ignored field that `live` has set to the live value (as
    /// `retainReplicas` keeps replicas): the other writer owns them, and a write for another
    /// reason (a repair of another field, a template change) must not undo them. The sync
    /// controller and `flotilla diff` both apply it.
    pub fn keep_ignored(
        &self,
        mut desired: serde_json::Value,
        live: &serde_json::Value,
    ) -> serde_json::Value {
        for pointer in &self.ignore {
            if let Some(value) = live.pointer(pointer)
                && let Some(slot) = desired.pointer_mut(pointer)
            {
                *slot = value.clone();
            }
        }
        desired
    }

    /// Whether `pointer` is an ignored path or lies below one.
    pub fn ignores(&self, pointer: &str) -> bool {
        self.ignore.iter().any(|p| is_within(pointer, p))
    }

    /// The policy as the annotations [`Policy::from_annotations`] reads back, in one
    /// spelling (mode `Repair` or `Report`, ignored paths as JSON pointers): what the sync
    /// controller writes on a Pull cluster's Work so that its agent applies the same policy.
    pub fn to_annotations(&self) -> BTreeMap<String, String> {
        let mode = match self.mode {
            Mode::Repair => "Repair",
            Mode::Report => "Report",
        };
        let mut out = BTreeMap::from([(POLICY_ANNOTATION.to_string(), mode.to_string())]);
        if !self.ignore.is_empty() {
            out.insert(IGNORE_ANNOTATION.to_string(), self.ignore.join(","));
        }
        out
    }
}

fn parse_paths(list: &str) -> Result<Vec<String>, PolicyError> {
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            override_path::to_pointer(p).map_err(|source| PolicyError::BadPath {
                path: p.to_string(),
                source,
            })
        })
        .collect()
}

/// Whether JSON pointer `path` is `base` or lies below it.
pub fn is_within(path: &str, base: &str) -> bool {
    path == base || (path.starts_with(base) && path.as_bytes().get(base.len()) == Some(&b'/'))
}

/// `status.drift` after a round: a cluster with a drift now gets its new entry; one seen
/// without drift keeps a `Repaired` entry (the record of the last repair) and drops a
/// `Detected` or `Fight` one (resolved); a cluster not looked at (`checked` lacks it) keeps
/// its entry; a cluster no longer `placed` loses it. Sorted by cluster.
pub fn merge(
    previous: &[ClusterDrift],
    found: &BTreeMap<String, ClusterDrift>,
    checked: &BTreeSet<String>,
    placed: &BTreeSet<String>,
) -> Vec<ClusterDrift> {
    let mut out: BTreeMap<&str, ClusterDrift> = BTreeMap::new();
    for p in previous.iter().filter(|p| placed.contains(&p.cluster)) {
        let resolved = checked.contains(&p.cluster)
            && DriftState::parse(&p.state) != Some(DriftState::Repaired);
        if !resolved {
            out.insert(&p.cluster, p.clone());
        }
    }
    for (cluster, d) in found.iter().filter(|(c, _)| placed.contains(*c)) {
        out.insert(cluster, d.clone());
    }
    out.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::drift::{DriftField, DriftManager};

    fn drift(cluster: &str, state: DriftState) -> ClusterDrift {
        ClusterDrift {
            cluster: cluster.into(),
            state: state.as_str().into(),
            detected_at: "T".into(),
            ..ClusterDrift::default()
        }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_repair_is_remembered_and_a_resolved_report_or_fight_forgotten() {
        let previous = [
            drift("a", DriftState::Repaired),
            drift("b", DriftState::Detected),
            drift("c", DriftState::Fight),
            drift("d", DriftState::Detected),
            drift("gone", DriftState::Repaired),
        ];
        let found = BTreeMap::from([("e".to_string(), drift("e", DriftState::Detected))]);
        let merged = merge(
            &previous,
            &found,
            &set(&["a", "b", "c", "e"]),
            &set(&["a", "b", "c", "d", "e"]),
        );
        let names: Vec<&str> = merged.iter().map(|d| d.cluster.as_str()).collect();
        assert_eq!(names, ["a", "d", "e"], "d was not looked at: kept");
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn without_annotations_drift_is_repaired_and_nothing_ignored() {
        let p = Policy::from_annotations(&BTreeMap::new()).expect("policy");
        assert_eq!(p, Policy::default());
        assert_eq!(p.mode, Mode::Repair);
    }

    #[test]
    fn report_and_ignore_paths_are_read_in_both_spellings() {
        let p = Policy::from_annotations(&annotations(&[
            (POLICY_ANNOTATION, "Report"),
            (
                IGNORE_ANNOTATION,
                "spec.replicas, /metadata/labels/app.kubernetes.io~1name",
            ),
        ]))
        .expect("policy");
        assert_eq!(p.mode, Mode::Report);
        assert_eq!(
            p.ignore,
            ["/spec/replicas", "/metadata/labels/app.kubernetes.io~1name"]
        );
        assert!(p.ignores("/spec/replicas"));
        assert!(!p.ignores("/spec/replicasX"));
        assert!(!p.ignores("/spec"));
    }

    #[test]
    fn a_policy_written_as_annotations_reads_back_the_same() {
        let p = Policy::from_annotations(&annotations(&[
            (POLICY_ANNOTATION, "Ignore"),
            (IGNORE_ANNOTATION, "spec.replicas,metadata.labels.team"),
        ]))
        .expect("policy");
        assert_eq!(Policy::from_annotations(&p.to_annotations()), Ok(p));
        let report = Policy {
            mode: Mode::Report,
            ignore: vec![],
        };
        assert_eq!(
            Policy::from_annotations(&report.to_annotations()),
            Ok(report)
        );
        assert_eq!(
            Policy::default().to_annotations().get(POLICY_ANNOTATION),
            Some(&"Repair".to_string())
        );
    }

    #[test]
    fn ignore_repairs_every_other_field_and_needs_paths() {
        let p = Policy::from_annotations(&annotations(&[
            (POLICY_ANNOTATION, "Ignore"),
            (IGNORE_ANNOTATION, "spec.template.spec.containers[1]"),
        ]))
        .expect("policy");
        assert_eq!(p.mode, Mode::Repair);
        assert!(p.ignores("/spec/template/spec/containers/1/image"));
        assert!(!p.ignores("/spec/template/spec/containers/0/image"));
        let e = Policy::from_annotations(&annotations(&[(POLICY_ANNOTATION, "Ignore")]));
        assert_eq!(e, Err(PolicyError::IgnoreWithoutPaths));
    }

    #[test]
    fn ignored_fields_keep_the_members_values_in_what_is_applied() {
        let policy = Policy {
            ignore: vec!["/spec/replicas".into(), "/spec/absent".into()],
            ..Policy::default()
        };
        let live = serde_json::json!({"spec": {"replicas": 7}});
        let applied =
            policy.keep_ignored(serde_json::json!({"spec": {"replicas": 2, "x": 1}}), &live);
        assert_eq!(
            applied,
            serde_json::json!({"spec": {"replicas": 7, "x": 1}})
        );
    }

    #[test]
    fn a_bad_policy_or_path_is_an_error_naming_it() {
        let e = Policy::from_annotations(&annotations(&[(POLICY_ANNOTATION, "Sometimes")]))
            .expect_err("bad mode");
        assert!(e.to_string().contains("Sometimes"), "{e}");
        let e = Policy::from_annotations(&annotations(&[(IGNORE_ANNOTATION, "spec..replicas")]))
            .expect_err("bad path");
        assert!(e.to_string().contains("spec..replicas"), "{e}");
    }

    #[test]
    fn a_summary_names_fields_and_managers() {
        let d = ClusterDrift {
            cluster: "m1".into(),
            state: "Repaired".into(),
            fields: vec![DriftField {
                path: "spec.replicas".into(),
                desired: "2".into(),
                live: "5".into(),
            }],
            more_fields: 2,
            managers: vec![DriftManager {
                manager: "kubectl-scale".into(),
                operation: "Update".into(),
                time: "t".into(),
            }],
            detected_at: "t".into(),
            repaired_at: None,
        };
        assert_eq!(
            d.summary(),
            "spec.replicas and 2 more changed by kubectl-scale (Update)"
        );
        assert_eq!(d.first_manager(), "kubectl-scale");
    }

    #[test]
    fn states_round_trip_and_name_their_events() {
        for s in DriftState::ALL {
            assert_eq!(DriftState::parse(s.as_str()), Some(s));
        }
        assert_eq!(DriftState::Fight.event_reason(), "DriftFight");
    }
}
