//! Pure status decisions: the federated object's status from per-cluster outcomes, what
//! is kept from the previous status, and when a change is worth a Warning event.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::{
    AggregateReason, ClusterReason,
    federated::{ClusterStatus, FederatedCondition, FederatedStatus},
    workload::AggregatedStatus,
};
use serde_json::Value;

use super::Outcome;

/// Builds the federated object's status from per-cluster outcomes. `aggregate` is an
/// object-level failure (reason, message) that makes the condition False regardless.
/// Timestamps are carried over from `previous` when the condition did not change, so an
/// unchanged result produces an identical status (and no write). `aggregated` is a
/// workload's status summed over clusters, when collected.
pub fn build_status(
    generation: i64,
    outcomes: &BTreeMap<String, Outcome>,
    aggregate: Option<(AggregateReason, String)>,
    previous: &FederatedStatus,
    remote: &BTreeMap<String, Value>,
    aggregated: Option<AggregatedStatus>,
    now: &str,
) -> FederatedStatus {
    let clusters: Vec<ClusterStatus> = outcomes
        .iter()
        .filter_map(|(name, o)| {
            let (status, message) = match o {
                Outcome::Ok => (String::new(), String::new()),
                Outcome::Gone => return None,
                Outcome::Removing => (
                    ClusterReason::WaitingForRemoval.as_str().to_string(),
                    String::new(),
                ),
                Outcome::Status(r, m) => (r.as_str().to_string(), m.clone()),
            };
            let remote_status = remote.get(name).cloned();
            Some(ClusterStatus {
                name: name.clone(),
                status,
                message,
                remote_status,
            })
        })
        .collect();
    let failing: BTreeSet<&str> = clusters
        .iter()
        .filter(|c| !c.status.is_empty())
        .map(|c| c.name.as_str())
        .collect();
    let (status, reason, message) = match aggregate {
        Some((r, m)) => ("False", r.as_str().to_string(), m),
        None if failing.is_empty() => ("True", String::new(), String::new()),
        None => (
            "False",
            AggregateReason::CheckClusters.as_str().to_string(),
            format!(
                "not propagated to {}: see status.clusters",
                failing.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ),
    };
    let condition = FederatedCondition::updated(
        previous.propagation(),
        "Propagation",
        status,
        reason,
        message,
        now,
    );
    FederatedStatus {
        observed_generation: generation,
        conditions: vec![condition],
        clusters,
        aggregated,
        placement: None,
        rollout: None,
        drift: Vec::new(),
        dependencies: Vec::new(),
    }
}

/// Clusters whose cache is still syncing keep the status they had (`previous`), with
/// their collected remote status, instead of dropping out of the status for a moment.
/// `registered` are the clusters in the registry now.
pub fn keep_previous(
    outcomes: &mut BTreeMap<String, Outcome>,
    remote: &mut BTreeMap<String, Value>,
    previous: &FederatedStatus,
    registered: &BTreeSet<String>,
) {
    for c in &previous.clusters {
        if outcomes.contains_key(&c.name) || !registered.contains(&c.name) {
            continue;
        }
        let o = if c.status.is_empty() {
            Outcome::Ok
        } else {
            match c.status.parse::<ClusterReason>() {
                Ok(reason) => Outcome::Status(reason, c.message.clone()),
                // Not a reason Flotilla writes: recomputed once the cache has synced.
                Err(_) => continue,
            }
        };
        outcomes.insert(c.name.clone(), o);
        if let Some(r) = &c.remote_status {
            remote.entry(c.name.clone()).or_insert_with(|| r.clone());
        }
    }
}

/// A selected cluster whose cache is still listing and that has no previous status (a new
/// object, or a cluster just added to the placement) is reported as not ready yet: the
/// object is not known to be there, so the condition must not say True. `waiting` maps
/// each such cluster to whether it is selected.
pub fn report_syncing(outcomes: &mut BTreeMap<String, Outcome>, waiting: &BTreeMap<String, bool>) {
    for (name, _) in waiting.iter().filter(|(_, selected)| **selected) {
        outcomes.entry(name.clone()).or_insert_with(|| {
            Outcome::Status(
                ClusterReason::ClusterNotReady,
                "waiting for the cluster's cache to sync".into(),
            )
        });
    }
}

/// Clusters the placement names that are not registered are reported (ClusterNotReady
/// with a message) rather than dropped silently as kubefed does, so a typo or a cluster
/// not joined yet shows.
pub fn report_unregistered(
    outcomes: &mut BTreeMap<String, Outcome>,
    unregistered: Vec<String>,
    namespace: &str,
) {
    for name in unregistered {
        let msg = format!(
            "the placement names cluster {name}, but no KubeFedCluster {name} is registered in {namespace}"
        );
        outcomes.insert(name, Outcome::Status(ClusterReason::ClusterNotReady, msg));
    }
}

/// Whether a new status is worth a Warning event: propagation turned (or stays) False
/// with a new reason or message, because of a real failure. Removal from a deselected
/// cluster is routine, not a failure worth a Warning.
pub fn warrants_warning(previous: &FederatedStatus, status: &FederatedStatus) -> bool {
    let now = status.propagation();
    now.is_some_and(|c| c.status == "False")
        && previous.propagation().map(|c| (&c.reason, &c.message))
            != now.map(|c| (&c.reason, &c.message))
        && (status.clusters.is_empty()
            || status.clusters.iter().any(|c| {
                !c.status.is_empty() && c.status != ClusterReason::WaitingForRemoval.as_str()
            }))
}

/// The per-cluster failures that appear in `status` and were not in `previous` (each
/// failure is counted once, when it first appears).
pub fn new_failures(previous: &FederatedStatus, status: &FederatedStatus) -> Vec<ClusterReason> {
    status
        .clusters
        .iter()
        .filter(|c| !c.status.is_empty())
        .filter(|c| {
            !previous
                .clusters
                .iter()
                .any(|p| p.name == c.name && p.status == c.status)
        })
        .filter_map(|c| c.status.parse().ok())
        .collect()
}

/// The Warning event's note: the condition's message and each failing cluster.
pub fn warning_note(status: &FederatedStatus) -> Option<(String, String)> {
    let c = status.propagation()?;
    let mut note = c.message.clone();
    for cl in status.clusters.iter().filter(|c| !c.status.is_empty()) {
        note.push_str(&format!("; {}: {} {}", cl.name, cl.status, cl.message));
    }
    Some((c.reason.clone(), note))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn collected_remote_status_is_reported_per_cluster() {
        let outcomes = BTreeMap::from([("m1".to_string(), Outcome::Ok)]);
        let remote = BTreeMap::from([("m1".to_string(), json!({"readyReplicas": 2}))]);
        let s = build_status(
            1,
            &outcomes,
            None,
            &FederatedStatus::default(),
            &remote,
            None,
            "t0",
        );
        assert_eq!(
            s.clusters[0].remote_status,
            Some(json!({"readyReplicas": 2}))
        );
    }

    #[test]
    fn status_is_true_when_every_cluster_propagated() {
        let outcomes = BTreeMap::from([
            ("m1".to_string(), Outcome::Ok),
            ("m2".to_string(), Outcome::Gone),
        ]);
        let s = build_status(
            3,
            &outcomes,
            None,
            &FederatedStatus::default(),
            &BTreeMap::new(),
            None,
            "t0",
        );
        assert_eq!(s.observed_generation, 3);
        assert_eq!(s.conditions[0].status, "True");
        assert_eq!(s.clusters.len(), 1);
    }

    #[test]
    fn status_names_failing_clusters_with_check_clusters() {
        let outcomes = BTreeMap::from([
            ("m1".to_string(), Outcome::Ok),
            (
                "m2".to_string(),
                Outcome::Status(ClusterReason::ApplyOverridesFailed, "bad".into()),
            ),
        ]);
        let s = build_status(
            1,
            &outcomes,
            None,
            &FederatedStatus::default(),
            &BTreeMap::new(),
            None,
            "t0",
        );
        assert_eq!(s.conditions[0].status, "False");
        assert_eq!(s.conditions[0].reason, "CheckClusters");
        assert!(s.conditions[0].message.contains("m2"));
    }

    #[test]
    fn an_unchanged_result_rebuilds_an_identical_status() {
        let outcomes = BTreeMap::from([("m1".to_string(), Outcome::Ok)]);
        let first = build_status(
            1,
            &outcomes,
            None,
            &FederatedStatus::default(),
            &BTreeMap::new(),
            None,
            "t0",
        );
        let second = build_status(1, &outcomes, None, &first, &BTreeMap::new(), None, "t1");
        assert_eq!(first, second);
    }

    fn failed(clusters: &[(&str, ClusterReason)]) -> FederatedStatus {
        let outcomes = clusters
            .iter()
            .map(|(n, r)| (n.to_string(), Outcome::Status(*r, "why".into())))
            .collect();
        build_status(
            1,
            &outcomes,
            None,
            &FederatedStatus::default(),
            &BTreeMap::new(),
            None,
            "t0",
        )
    }

    #[test]
    fn a_syncing_cluster_keeps_its_previous_status_and_remote_status() {
        let mut previous = failed(&[("m2", ClusterReason::CreationFailed)]);
        previous.clusters.push(ClusterStatus {
            name: "m1".into(),
            remote_status: Some(json!({"replicas": 1})),
            ..ClusterStatus::default()
        });
        let mut outcomes = BTreeMap::new();
        let mut remote = BTreeMap::new();
        let registered = BTreeSet::from(["m1".to_string(), "m2".to_string()]);
        keep_previous(&mut outcomes, &mut remote, &previous, &registered);
        assert_eq!(outcomes["m1"], Outcome::Ok);
        assert_eq!(
            outcomes["m2"],
            Outcome::Status(ClusterReason::CreationFailed, "why".into())
        );
        assert_eq!(remote["m1"], json!({"replicas": 1}));
    }

    #[test]
    fn a_selected_cluster_still_syncing_without_a_previous_status_is_not_reported_propagated() {
        let mut outcomes = BTreeMap::from([("m1".to_string(), Outcome::Ok)]);
        let waiting = BTreeMap::from([("m2".to_string(), true), ("m3".to_string(), false)]);
        report_syncing(&mut outcomes, &waiting);
        assert!(matches!(
            outcomes["m2"],
            Outcome::Status(ClusterReason::ClusterNotReady, _)
        ));
        assert!(!outcomes.contains_key("m3"));
        let s = build_status(
            1,
            &outcomes,
            None,
            &FederatedStatus::default(),
            &BTreeMap::new(),
            None,
            "t",
        );
        assert_eq!(s.conditions[0].status, "False");
    }

    #[test]
    fn a_kept_previous_status_wins_over_the_syncing_report() {
        let mut outcomes = BTreeMap::from([("m2".to_string(), Outcome::Ok)]);
        report_syncing(&mut outcomes, &BTreeMap::from([("m2".to_string(), true)]));
        assert_eq!(outcomes["m2"], Outcome::Ok);
    }

    #[test]
    fn an_unregistered_cluster_does_not_keep_its_previous_status() {
        let previous = failed(&[("gone", ClusterReason::CreationFailed)]);
        let mut outcomes = BTreeMap::new();
        keep_previous(
            &mut outcomes,
            &mut BTreeMap::new(),
            &previous,
            &BTreeSet::new(),
        );
        assert!(outcomes.is_empty());
    }

    #[test]
    fn a_placement_naming_an_unregistered_cluster_reports_it() {
        let mut outcomes = BTreeMap::new();
        report_unregistered(&mut outcomes, vec!["typo".into()], "kube-federation-system");
        let Outcome::Status(reason, msg) = &outcomes["typo"] else {
            panic!("reported");
        };
        assert_eq!(*reason, ClusterReason::ClusterNotReady);
        assert!(msg.contains("no KubeFedCluster typo"));
    }

    #[test]
    fn a_new_failure_warrants_a_warning_but_a_routine_removal_does_not() {
        let none = FederatedStatus::default();
        assert!(warrants_warning(
            &none,
            &failed(&[("m1", ClusterReason::CreationFailed)])
        ));
        assert!(!warrants_warning(
            &none,
            &failed(&[("m1", ClusterReason::WaitingForRemoval)])
        ));
        let same = failed(&[("m1", ClusterReason::CreationFailed)]);
        assert!(!warrants_warning(&same, &same));
    }

    #[test]
    fn a_failure_is_counted_once_when_it_first_appears() {
        let first = failed(&[("m1", ClusterReason::UpdateFailed)]);
        assert_eq!(
            new_failures(&FederatedStatus::default(), &first),
            vec![ClusterReason::UpdateFailed]
        );
        assert!(new_failures(&first, &first).is_empty());
    }

    #[test]
    fn the_warning_note_names_each_failing_cluster() {
        let s = failed(&[("m1", ClusterReason::UpdateFailed)]);
        let (reason, note) = warning_note(&s).expect("a condition");
        assert_eq!(reason, "CheckClusters");
        assert!(note.contains("m1: UpdateFailed why"), "{note}");
    }
}
