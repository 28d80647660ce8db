//! Why an RSP's replicas went where they went: per cluster of the federation, the replicas
//! written and the reason ([`DivisionReason`]) with its numbers, as recorded in the RSP's
//! status and shown by `flotilla status`. Pure.

use flotilla_api::scheduling::{ClusterDivision, DivisionReason};

use super::planner::Plan;
use crate::multicluster::ClusterState;

/// The status entries of a plan over `clusters` (every cluster of the federation, so that
/// those left out say why), sorted by name.
pub fn divisions(plan: &Plan, clusters: &[ClusterState]) -> Vec<ClusterDivision> {
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
            }
        })
        .collect();
    for c in clusters.iter().filter(|c| !written.contains_key(&c.name)) {
        let message = if c.ready {
            "no preference for it (no entry and no \"*\"), or not matching the target's clusterSelector"
        } else {
            "the cluster is not Ready"
        };
        out.push(ClusterDivision {
            name: c.name.clone(),
            replicas: 0,
            reason: DivisionReason::NotSelected,
            message: message.to_owned(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
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
        let d = divisions(&plan, &clusters);
        let names: Vec<_> = d.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        assert_eq!(d[0].replicas, 7, "the overflow is written too");
        assert!(d[0].message.contains("3 more stay Pending"), "{d:?}");
        assert_eq!(d[1].reason, DivisionReason::Weight);
        assert_eq!(d[2].reason, DivisionReason::NotSelected);
        assert!(d[2].message.contains("not Ready"));
        assert!(d[3].message.contains("no preference"));
    }
}
