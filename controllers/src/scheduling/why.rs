//! Why an RSP's replicas went where they went: per cluster of the federation, the replicas
//! written and the reason ([`DivisionReason`]) with its numbers, as recorded in the RSP's
//! status and shown by `flotilla status`, `flotilla diff` and the dashboard; and the
//! capacity a recorded division read, for previews that cannot read member pods. Pure.

use std::collections::BTreeMap;

use flotilla_api::{
    federated::Placement,
    scheduling::{ClusterDivision, DivisionReason, ReplicaSchedulingPreferenceStatus},
};
use flotilla_core::taint::{TaintVerdict, verdict};

use super::{CapacityInputs, planner::Plan};
use crate::multicluster::ClusterState;

/// The capacity the last recorded division read (`status.clusters[]`'s
/// `capacityEstimate` and `availableReplicas`), so that a preview divides as the
/// controller did. `available_wanted`: the RSP weighs by available replicas; a cluster
/// the status does not give keeps its `current` replicas, as the controller does while
/// its caches list.
pub fn recorded_capacity(
    status: Option<&ReplicaSchedulingPreferenceStatus>,
    available_wanted: bool,
    current: &BTreeMap<String, i64>,
) -> CapacityInputs {
    let divisions = status.map(|s| s.clusters.as_slice()).unwrap_or_default();
    let estimates = divisions
        .iter()
        .filter_map(|d| Some((d.name.clone(), d.capacity_estimate?)))
        .collect();
    let available = available_wanted.then(|| {
        let mut a: BTreeMap<String, i64> = current.clone();
        for d in divisions {
            if let Some(n) = d.available_replicas {
                a.insert(d.name.clone(), n);
            }
        }
        a
    });
    CapacityInputs {
        estimates,
        available,
        from_scratch: false,
    }
}

/// The status entries of a plan over `clusters` (every cluster of the federation, so that
/// those left out say why), sorted by name, with the capacity each was divided by.
pub fn divisions(
    plan: &Plan,
    clusters: &[ClusterState],
    capacity: &CapacityInputs,
    placement: &Placement,
) -> Vec<ClusterDivision> {
    let written = plan.written();
    let mut out: Vec<ClusterDivision> = written
        .iter()
        .map(|(name, replicas)| {
            let (reason, mut message) = plan
                .reasons
                .get(name)
                .cloned()
                .unwrap_or((DivisionReason::Weight, String::new()));
            if let Some(over) = plan.overflow.get(name) {
                message.push_str(&format!(
                    "; {over} more stay Pending there (kubefed's overflow)"
                ));
            }
            ClusterDivision {
                name: name.clone(),
                replicas: *replicas,
                reason,
                message,
                capacity_estimate: capacity.estimates.get(name).copied(),
                available_replicas: capacity
                    .available
                    .as_ref()
                    .and_then(|a| a.get(name).copied()),
            }
        })
        .collect();
    for c in clusters.iter().filter(|c| !written.contains_key(&c.name)) {
        let (reason, message) = left_out(c, placement);
        out.push(ClusterDivision {
            name: c.name.clone(),
            replicas: 0,
            reason,
            message,
            capacity_estimate: None,
            available_replicas: None,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Why a cluster of the federation got no replica at all: not Ready; kept off by a taint
/// the placement does not tolerate (a target placed by Flotilla's scheduler, the only
/// placement that reads cluster taints); not chosen by that scheduler; or, for a
/// placement of its own, without a preference or not matching the clusterSelector.
fn left_out(c: &ClusterState, placement: &Placement) -> (DivisionReason, String) {
    if !c.ready {
        return (
            DivisionReason::NotSelected,
            "the cluster is not Ready".into(),
        );
    }
    if !placement.is_scheduled() {
        return (
            DivisionReason::NotSelected,
            "no preference for it (no entry and no \"*\"), or not matching the target's clusterSelector".into(),
        );
    }
    // Only whether a taint keeps new placements off matters here, not when.
    match verdict(&c.taints, &placement.tolerations, i64::MAX, 0) {
        TaintVerdict::NoNewPlacement { taint, .. } | TaintVerdict::Evict { taint } => (
            DivisionReason::Tainted,
            format!("its taint {taint} is not tolerated by the placement's tolerations"),
        ),
        TaintVerdict::Fits | TaintVerdict::Disfavoured => (
            DivisionReason::NotSelected,
            "not chosen by the placement's scheduler (status.placement)".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn cluster(name: &str, ready: bool) -> ClusterState {
        ClusterState {
            name: name.into(),
            labels: BTreeMap::new(),
            taints: vec![],
            ready,
            client: None,
            client_generation: 0,
            pull: false,
        }
    }

    #[test]
    fn every_cluster_gets_its_replicas_and_a_reason() {
        let plan = Plan {
            replicas: BTreeMap::from([("a".to_string(), 4), ("b".to_string(), 6)]),
            overflow: BTreeMap::from([("a".to_string(), 3)]),
            reasons: BTreeMap::from([
                (
                    "a".to_string(),
                    (
                        DivisionReason::CapacityEstimate,
                        "capacity estimate 4".into(),
                    ),
                ),
                (
                    "b".to_string(),
                    (DivisionReason::Weight, "weight 1 of 3".into()),
                ),
            ]),
        };
        let clusters = [
            cluster("a", true),
            cluster("b", true),
            cluster("c", false),
            cluster("d", true),
        ];
        let capacity = CapacityInputs {
            estimates: BTreeMap::from([("a".to_string(), 4)]),
            ..CapacityInputs::default()
        };
        let d = divisions(&plan, &clusters, &capacity, &Placement::default());
        assert_eq!(
            (d[0].capacity_estimate, d[1].capacity_estimate),
            (Some(4), None)
        );
        let names: Vec<_> = d.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        assert_eq!(d[0].replicas, 7, "the overflow is written too");
        assert!(d[0].message.contains("3 more stay Pending"), "{d:?}");
        assert_eq!(d[1].reason, DivisionReason::Weight);
        assert_eq!(d[2].reason, DivisionReason::NotSelected);
        assert!(d[2].message.contains("not Ready"));
        assert!(d[3].message.contains("no preference"));
    }

    #[test]
    fn a_scheduled_placement_names_the_taint_that_kept_a_cluster_out() {
        use flotilla_api::taint::{Taint, TaintEffect, Toleration, TolerationOperator};
        let plan = Plan {
            replicas: BTreeMap::from([("a".to_string(), 3)]),
            ..Plan::default()
        };
        let mut tainted = cluster("b", true);
        tainted.taints = vec![Taint {
            key: "example.com/gpu".into(),
            value: Some("none".into()),
            effect: TaintEffect::NoSchedule,
            time_added: None,
        }];
        let mut prefer = cluster("c", true);
        prefer.taints = vec![Taint {
            key: "example.com/cost".into(),
            value: None,
            effect: TaintEffect::PreferNoSchedule,
            time_added: None,
        }];
        let clusters = [cluster("a", true), tainted, prefer];
        let scheduled = Placement {
            max_clusters: Some(1),
            ..Placement::default()
        };
        let d = divisions(&plan, &clusters, &CapacityInputs::default(), &scheduled);
        assert_eq!(d[1].reason, DivisionReason::Tainted, "{d:?}");
        assert!(
            d[1].message.contains("example.com/gpu=none:NoSchedule"),
            "{d:?}"
        );
        assert_eq!(
            d[2].reason,
            DivisionReason::NotSelected,
            "a preference only"
        );
        assert!(d[2].message.contains("scheduler"), "{d:?}");
        let tolerant = Placement {
            tolerations: vec![Toleration {
                key: Some("example.com/gpu".into()),
                operator: Some(TolerationOperator::Exists),
                ..Toleration::default()
            }],
            ..scheduled
        };
        let d = divisions(&plan, &clusters, &CapacityInputs::default(), &tolerant);
        assert_eq!(d[1].reason, DivisionReason::NotSelected, "tolerated: {d:?}");
        let own = divisions(
            &plan,
            &clusters,
            &CapacityInputs::default(),
            &Placement::default(),
        );
        assert_eq!(
            own[1].reason,
            DivisionReason::NotSelected,
            "taints are the scheduler's"
        );
    }

    #[test]
    fn a_preview_reads_the_capacity_the_recorded_division_used() {
        let status = ReplicaSchedulingPreferenceStatus {
            clusters: vec![
                ClusterDivision {
                    name: "a".into(),
                    capacity_estimate: Some(4),
                    available_replicas: Some(9),
                    ..ClusterDivision::default()
                },
                ClusterDivision {
                    name: "b".into(),
                    ..ClusterDivision::default()
                },
            ],
            ..Default::default()
        };
        let current = BTreeMap::from([("a".to_string(), 1), ("b".to_string(), 3)]);
        let c = recorded_capacity(Some(&status), true, &current);
        assert_eq!(c.estimates, BTreeMap::from([("a".to_string(), 4)]));
        let a = c.available.expect("available replicas wanted");
        assert_eq!((a["a"], a["b"]), (9, 3), "b unknown: its current replicas");
        let plain = recorded_capacity(None, false, &current);
        assert!(plain.estimates.is_empty() && plain.available.is_none());
    }
}
