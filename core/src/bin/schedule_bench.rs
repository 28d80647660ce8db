//! `schedule-bench`: the scheduler as a pure function at scale — N objects × M clusters
//! decided, then re-decided after a cluster change (one cluster drained with a NoExecute
//! taint), as the sync controller does on every cluster change. Prints the timings; nothing
//! is asserted on them.
//!
//! `cargo run --release -p flotilla-core --bin schedule-bench -- [OBJECTS] [CLUSTERS]`
//! (defaults 10000 and 100).

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Instant,
};

use flotilla_api::{
    federated::{ClusterPreference, LabelSelector, Placement, PlacementStatus, SpreadConstraint},
    taint::{Taint, TaintEffect},
};
use flotilla_core::schedule::{ClusterFacts, Decision, Input, ScheduleReason, decide};

const NOW: i64 = 1_800_000_000;

/// One cluster of the synthetic fleet.
struct Cluster {
    name: String,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
}

/// `clusters` clusters over 10 regions, a third of them `tier=gold`.
fn fleet(clusters: usize) -> Vec<Cluster> {
    (0..clusters)
        .map(|i| Cluster {
            name: format!("cluster-{i:03}"),
            labels: BTreeMap::from([
                ("region".to_string(), format!("region-{}", i % 10)),
                (
                    "tier".to_string(),
                    if i % 3 == 0 { "gold" } else { "silver" }.to_string(),
                ),
                ("env".to_string(), "prod".to_string()),
            ]),
            taints: Vec::new(),
        })
        .collect()
}

/// Four shapes of placement, one per object in turn.
fn placements() -> Vec<Placement> {
    let all = Some(LabelSelector::default());
    let gold = ClusterPreference {
        weight: 10,
        selector: LabelSelector {
            match_labels: BTreeMap::from([("tier".into(), "gold".into())]),
            match_expressions: vec![],
        },
    };
    let region = |min| SpreadConstraint {
        topology_key: "region".into(),
        min_groups: Some(min),
        max_groups: None,
    };
    vec![
        Placement {
            cluster_selector: all.clone(),
            max_clusters: Some(3),
            spread_constraints: vec![region(3)],
            ..Placement::default()
        },
        Placement {
            cluster_selector: all.clone(),
            max_clusters: Some(1),
            preferences: vec![gold.clone()],
            ..Placement::default()
        },
        Placement {
            cluster_selector: all.clone(),
            max_clusters: Some(5),
            spread_constraints: vec![region(5)],
            preferences: vec![gold],
            ..Placement::default()
        },
        Placement {
            cluster_selector: all,
            max_clusters: Some(2),
            ..Placement::default()
        },
    ]
}

/// Decides every object once; `previous` (per object) makes it a re-decision.
fn decide_all(
    fleet: &[Cluster],
    shapes: &[Placement],
    objects: usize,
    previous: Option<&[PlacementStatus]>,
) -> Vec<Decision> {
    let facts: Vec<ClusterFacts<'_>> = fleet
        .iter()
        .map(|c| ClusterFacts {
            name: &c.name,
            labels: &c.labels,
            taints: &c.taints,
            ready: true,
        })
        .collect();
    let candidates: BTreeSet<String> = fleet.iter().map(|c| c.name.clone()).collect();
    (0..objects)
        .map(|i| {
            let prev = previous.map(|p| &p[i]);
            let propagated: BTreeSet<String> = prev
                .map(|p| p.clusters.iter().map(|c| c.name.clone()).collect())
                .unwrap_or_default();
            decide(&Input {
                placement: &shapes[i % shapes.len()],
                candidates: &candidates,
                clusters: &facts,
                previous: prev,
                propagated: &propagated,
                default_unreachable_seconds: 300,
                now: NOW,
            })
            .unwrap_or_else(|e| panic!("object {i}: {e}"))
        })
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let objects: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let clusters: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let shapes = placements();
    let mut fleet = fleet(clusters);

    let started = Instant::now();
    let first = decide_all(&fleet, &shapes, objects, None);
    let first_took = started.elapsed();

    // The most chosen cluster is drained: every object on it moves.
    fleet[0].taints.push(Taint {
        key: "drain".into(),
        value: None,
        effect: TaintEffect::NoExecute,
        time_added: None,
    });
    let previous: Vec<PlacementStatus> = first.iter().map(|d| d.status.clone()).collect();
    let started = Instant::now();
    let second = decide_all(&fleet, &shapes, objects, Some(&previous));
    let second_took = started.elapsed();

    let moved = second.iter().filter(|d| !d.status.moves.is_empty()).count();
    let unschedulable = second
        .iter()
        .filter(|d| d.reason == ScheduleReason::Unschedulable)
        .count();
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / objects.max(1) as f64;
    println!("schedule-bench: {objects} objects x {clusters} clusters");
    println!(
        "first decision:                 {:>8.1} ms total, {:>6.2} us per object",
        first_took.as_secs_f64() * 1e3,
        per(first_took)
    );
    println!(
        "re-decision after a drain:      {:>8.1} ms total, {:>6.2} us per object ({moved} objects moving, {unschedulable} unschedulable)",
        second_took.as_secs_f64() * 1e3,
        per(second_took)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_schedules_and_a_drain_moves_the_objects_on_the_drained_cluster() {
        let shapes = placements();
        let mut f = fleet(20);
        let first = decide_all(&f, &shapes, 8, None);
        assert!(first.iter().all(|d| d.reason == ScheduleReason::Scheduled));
        let on_first: usize = first
            .iter()
            .filter(|d| d.status.clusters.iter().any(|c| c.name == "cluster-000"))
            .count();
        assert!(on_first > 0, "cluster-000 sorts first and is gold");
        f[0].taints.push(Taint {
            key: "drain".into(),
            value: None,
            effect: TaintEffect::NoExecute,
            time_added: None,
        });
        let prev: Vec<PlacementStatus> = first.iter().map(|d| d.status.clone()).collect();
        let second = decide_all(&f, &shapes, 8, Some(&prev));
        let moved = second.iter().filter(|d| !d.status.moves.is_empty()).count();
        assert_eq!(moved, on_first);
    }
}
