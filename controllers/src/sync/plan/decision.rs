//! The constraint scheduler's input for one federated object, and what the stored decision
//! says: the clusters it holds the object in, where the object is propagated (and
//! available), the time "now". Pure but for the clock; the sync controller's pipeline and
//! its status writer both read it.

use std::collections::BTreeSet;

use flotilla_api::{
    ClusterReason,
    federated::{FederatedSpec, FederatedStatus},
};
use flotilla_core::schedule::{self, ClusterFacts, Decision, Input};
use serde_json::Value;

use crate::multicluster::ClusterState;

/// The constraint scheduler's decision for `spec` among `candidates` (the clusters
/// kubefed's placement selects), from the registered `clusters` and the stored decision in
/// `previous`: the one place the sync controller and `flotilla diff` build its input.
pub fn decide(
    spec: &FederatedSpec,
    candidates: &BTreeSet<String>,
    clusters: &[ClusterState],
    previous: &FederatedStatus,
    collect_status: bool,
    default_unreachable_seconds: i64,
) -> Result<Decision, flotilla_api::selector::PlacementError> {
    let facts: Vec<ClusterFacts<'_>> = clusters.iter().map(ClusterState::facts).collect();
    let propagated = propagated(previous, collect_status);
    schedule::decide(&Input {
        placement: &spec.placement,
        candidates,
        clusters: &facts,
        previous: previous.placement.as_ref(),
        propagated: &propagated,
        default_unreachable_seconds,
        now: now(),
    })
}

/// The clusters the stored decision holds the object in.
pub fn stored_targets(previous: &FederatedStatus) -> BTreeSet<String> {
    previous
        .placement
        .as_ref()
        .map(schedule::targets)
        .unwrap_or_default()
}

pub fn now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

/// Clusters where the previous status says the object is propagated — and, with status
/// collection, available when its status has an `Available` condition.
pub fn propagated(previous: &FederatedStatus, collect_status: bool) -> BTreeSet<String> {
    previous
        .clusters
        .iter()
        .filter(|c| c.status.is_empty() || holds_drifted_copy(&c.status))
        .filter(|c| !collect_status || c.remote_status.as_ref().is_none_or(is_available))
        .map(|c| c.name.clone())
        .collect()
}

/// A cluster reporting drift (left in place, or a fight) holds the object all the same.
fn holds_drifted_copy(reason: &str) -> bool {
    reason == ClusterReason::Drifted.as_str() || reason == ClusterReason::DriftFight.as_str()
}

/// A member object's status is available unless it has an `Available` condition that is
/// not True (Deployments); kinds without one are available once propagated.
pub fn is_available(status: &Value) -> bool {
    let Some(conditions) = status.get("conditions").and_then(Value::as_array) else {
        return true;
    };
    conditions
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Available"))
        .is_none_or(|c| c.get("status").and_then(Value::as_str) == Some("True"))
}

#[cfg(test)]
mod tests {
    use flotilla_api::federated::ClusterStatus;
    use serde_json::json;

    use super::*;

    fn cluster_status(name: &str, status: &str, remote: Option<Value>) -> ClusterStatus {
        ClusterStatus {
            name: name.into(),
            status: status.into(),
            message: String::new(),
            remote_status: remote,
        }
    }

    #[test]
    fn propagated_needs_an_ok_status_and_with_status_collection_availability() {
        let previous = FederatedStatus {
            clusters: vec![
                cluster_status("a", "", None),
                cluster_status("b", "CreationFailed", None),
                cluster_status(
                    "c",
                    "",
                    Some(json!({"conditions": [{"type": "Available", "status": "False"}]})),
                ),
                cluster_status("d", "", Some(json!({"phase": "Active"}))),
            ],
            ..FederatedStatus::default()
        };
        let names = |s: BTreeSet<String>| s.into_iter().collect::<Vec<_>>();
        assert_eq!(names(propagated(&previous, false)), ["a", "c", "d"]);
        assert_eq!(names(propagated(&previous, true)), ["a", "d"]);
    }
}
