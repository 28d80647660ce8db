//! The object page's Replicas section: the ReplicaSchedulingPreference that divides a
//! FederatedDeployment or FederatedReplicaSet — its spec in brief, and per cluster of the
//! federation the replicas and the reason the scheduler recorded in the RSP's status, with
//! the preference that applies to the cluster and the capacity the division read. When the
//! scheduler has recorded nothing yet, or would now divide otherwise, the division it would
//! make (computed by the caller with the same function as `flotilla diff`) is shown beside
//! it. Pure: it neither computes a division nor reads anything but its arguments.

use flotilla_api::scheduling::{
    ClusterDivision, ReplicaSchedulingPreferenceSpec, ReplicaSchedulingPreferenceStatus,
    WeightPreference,
};
use serde::Serialize;

/// One cluster's row: its division and the RSP's preference for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplicaRow {
    /// Replicas, reason, message, capacity estimate and available replicas.
    #[serde(flatten)]
    pub division: ClusterDivision,
    /// The preference that applies to it (`weight 2, min 1, max 5`, `… ("*")`, `none`).
    pub preference: String,
}

/// The Replicas section.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Replicas {
    /// The RSP (`namespace/name`).
    pub rsp: String,
    /// Its spec in brief (`10 replicas by StaticWeight, rebalance: true`).
    pub summary: String,
    /// Whether `rows` are the division recorded in the RSP's status (else: the preview).
    pub recorded: bool,
    /// Per cluster of the federation, sorted by name.
    pub rows: Vec<ReplicaRow>,
    /// The division the scheduler would make now, when it differs from the recorded one.
    pub next: Vec<ClusterDivision>,
    /// Why the division cannot be previewed, if it cannot.
    pub preview_error: Option<String>,
    /// The last one-off rebalance: its request, outcome and message.
    pub rebalance: Option<String>,
}

/// The section for an object divided by `spec` (whose status is `status`), the preview of
/// its division being `preview` (`Ok(None)`: the preview found no RSP dividing it).
pub fn replicas(
    rsp: &str,
    spec: &ReplicaSchedulingPreferenceSpec,
    status: Option<&ReplicaSchedulingPreferenceStatus>,
    preview: Result<Option<Vec<ClusterDivision>>, String>,
) -> Replicas {
    let recorded = status.map(|s| s.clusters.as_slice()).unwrap_or_default();
    let (preview, preview_error) = match preview {
        Ok(p) => (p.unwrap_or_default(), None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let (rows, next) = if recorded.is_empty() {
        (preview, Vec::new())
    } else if preview.is_empty() || same_division(recorded, &preview) {
        (recorded.to_vec(), Vec::new())
    } else {
        (recorded.to_vec(), preview)
    };
    Replicas {
        rsp: rsp.to_owned(),
        summary: summary(spec),
        recorded: !recorded.is_empty(),
        rows: rows
            .into_iter()
            .map(|d| ReplicaRow {
                preference: preference(spec, &d.name),
                division: d,
            })
            .collect(),
        next,
        preview_error,
        rebalance: status.and_then(|s| s.rebalance.as_ref()).map(|r| {
            let mut text = format!("{}: {}", r.request, r.outcome.as_str());
            if !r.message.is_empty() {
                text.push_str(&format!(" — {}", r.message));
            }
            text
        }),
    }
}

/// Whether two divisions give every cluster the same replicas for the same reason (the
/// message's numbers follow from those and the capacity read).
fn same_division(a: &[ClusterDivision], b: &[ClusterDivision]) -> bool {
    let key = |d: &ClusterDivision| (d.name.clone(), d.replicas, d.reason);
    a.len() == b.len() && a.iter().map(key).eq(b.iter().map(key))
}

/// `10 replicas by StaticWeight, rebalance: false`, and the selector's part when it has one.
fn summary(spec: &ReplicaSchedulingPreferenceSpec) -> String {
    let by = match spec.weight_preference.unwrap_or_default() {
        WeightPreference::StaticWeight => "static weight",
        WeightPreference::AvailableReplicas => "available replicas (AvailableReplicas)",
    };
    let mut text = format!(
        "{} replicas by {by}, rebalance: {}",
        spec.total_replicas, spec.rebalance
    );
    if spec.intersect_with_cluster_selector {
        text.push_str(", only clusters matching the target's clusterSelector");
    }
    text
}

/// The preference the scheduler applies to `cluster`: its own entry, else `*`'s, else none
/// (no entry at all: every cluster weighs 1, as kubefed).
fn preference(spec: &ReplicaSchedulingPreferenceSpec, cluster: &str) -> String {
    if spec.clusters.is_empty() {
        return "weight 1 (no preferences: the default)".into();
    }
    let (p, via) = match spec.clusters.get(cluster) {
        Some(p) => (p, ""),
        None => match spec.clusters.get("*") {
            Some(p) => (p, " (\"*\")"),
            None => return "none".into(),
        },
    };
    let mut parts = vec![format!("weight {}", p.weight)];
    if p.min_replicas > 0 {
        parts.push(format!("min {}", p.min_replicas));
    }
    if let Some(max) = p.max_replicas {
        parts.push(format!("max {max}"));
    }
    format!("{}{via}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::scheduling::{DivisionReason, RebalanceOutcome, RebalanceStatus};
    use serde_json::json;

    fn spec(value: serde_json::Value) -> ReplicaSchedulingPreferenceSpec {
        serde_json::from_value(value).expect("spec")
    }

    fn row(name: &str, replicas: i64, reason: DivisionReason) -> ClusterDivision {
        ClusterDivision {
            name: name.into(),
            replicas,
            reason,
            ..ClusterDivision::default()
        }
    }

    fn weights() -> ReplicaSchedulingPreferenceSpec {
        spec(
            json!({"targetKind": "FederatedDeployment", "totalReplicas": 10,
            "rebalance": true,
            "clusters": {"m1": {"weight": 2, "maxReplicas": 7}, "*": {"weight": 1, "minReplicas": 1}}}),
        )
    }

    #[test]
    fn each_cluster_gets_its_own_preference_or_the_stars_or_none() {
        let s = weights();
        assert_eq!(preference(&s, "m1"), "weight 2, max 7");
        assert_eq!(preference(&s, "m2"), "weight 1, min 1 (\"*\")");
        let only_m1 = spec(
            json!({"targetKind": "FederatedDeployment", "totalReplicas": 1,
            "clusters": {"m1": {"weight": 1}}}),
        );
        assert_eq!(preference(&only_m1, "m2"), "none");
        let bare = spec(json!({"targetKind": "FederatedDeployment", "totalReplicas": 1}));
        assert!(preference(&bare, "m2").starts_with("weight 1"));
    }

    #[test]
    fn the_summary_names_total_weighing_rebalance_and_the_selector() {
        assert_eq!(
            summary(&weights()),
            "10 replicas by static weight, rebalance: true"
        );
        let fit = spec(
            json!({"targetKind": "FederatedDeployment", "totalReplicas": 3,
            "weightPreference": "AvailableReplicas", "intersectWithClusterSelector": true}),
        );
        assert_eq!(
            summary(&fit),
            "3 replicas by available replicas (AvailableReplicas), rebalance: false, only clusters matching the target's clusterSelector"
        );
    }

    #[test]
    fn the_recorded_division_is_shown_and_a_differing_preview_beside_it() {
        let status = ReplicaSchedulingPreferenceStatus {
            clusters: vec![
                ClusterDivision {
                    capacity_estimate: Some(4),
                    ..row("m1", 7, DivisionReason::CapacityEstimate)
                },
                row("m2", 6, DivisionReason::Weight),
            ],
            rebalance: Some(RebalanceStatus {
                request: "now".into(),
                outcome: RebalanceOutcome::Refused,
                message: "the target's rollout is Paused".into(),
            }),
            ..Default::default()
        };
        let agreeing = Ok(Some(status.clusters.clone()));
        let r = replicas("demo/web", &weights(), Some(&status), agreeing);
        assert!(r.recorded && r.next.is_empty());
        assert_eq!(r.rows[0].division, status.clusters[0]);
        assert_eq!(r.rows[0].preference, "weight 2, max 7");
        assert_eq!(
            r.rebalance.as_deref(),
            Some("now: Refused — the target's rollout is Paused")
        );
        let moved = vec![
            row("m1", 4, DivisionReason::Weight),
            row("m2", 2, DivisionReason::Weight),
        ];
        let r = replicas(
            "demo/web",
            &weights(),
            Some(&status),
            Ok(Some(moved.clone())),
        );
        assert_eq!(r.rows[1].division, status.clusters[1], "still the recorded");
        assert_eq!(r.next, moved);
    }

    #[test]
    fn without_a_recorded_division_the_preview_is_shown_and_a_failure_said() {
        let preview = vec![row("m1", 3, DivisionReason::Weight)];
        let r = replicas("demo/web", &weights(), None, Ok(Some(preview.clone())));
        assert!(!r.recorded);
        assert_eq!(r.rows[0].division, preview[0]);
        let r = replicas("demo/web", &weights(), None, Err("bad selector".into()));
        assert!(r.rows.is_empty());
        assert_eq!(r.preview_error.as_deref(), Some("bad selector"));
    }
}
