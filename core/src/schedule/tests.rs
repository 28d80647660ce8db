//! Table-driven tests of the whole decision: filter, spread, preferences, stickiness and moves.

use super::*;
use crate::taint::rfc3339;
use flotilla_api::{
    federated::{ClusterPreference, FailoverPolicy, LabelSelector, SpreadConstraint},
    taint::{TaintEffect, Toleration, TolerationOperator, UNREACHABLE_TAINT_KEY},
};

const NOW: i64 = 1_000_000;

struct Cluster {
    name: &'static str,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    ready: bool,
}

fn cluster(name: &'static str, region: &str) -> Cluster {
    Cluster {
        name,
        labels: BTreeMap::from([("region".to_string(), region.to_string())]),
        taints: vec![],
        ready: true,
    }
}

/// a1, a2 in region a; b1 in b; c1 in c.
fn fleet() -> Vec<Cluster> {
    vec![
        cluster("a1", "a"),
        cluster("a2", "a"),
        cluster("b1", "b"),
        cluster("c1", "c"),
    ]
}

fn taint(effect: TaintEffect, key: &str, added: i64) -> Taint {
    Taint {
        key: key.into(),
        value: None,
        effect,
        time_added: Some(rfc3339(added)),
    }
}

fn spread3() -> Placement {
    Placement {
        cluster_selector: Some(LabelSelector::default()),
        max_clusters: Some(3),
        spread_constraints: vec![SpreadConstraint {
            topology_key: "region".into(),
            min_groups: Some(3),
            max_groups: None,
        }],
        ..Placement::default()
    }
}

fn max(n: u32) -> Placement {
    Placement {
        cluster_selector: Some(LabelSelector::default()),
        max_clusters: Some(n),
        ..Placement::default()
    }
}

fn previous(clusters: &[&str]) -> PlacementStatus {
    PlacementStatus {
        clusters: references(clusters.iter().map(|c| c.to_string())),
        moves: vec![],
    }
}

fn run(
    fleet: &[Cluster],
    placement: &Placement,
    prev: Option<&PlacementStatus>,
    propagated: &[&str],
) -> Decision {
    let candidates: BTreeSet<String> = fleet.iter().map(|c| c.name.to_string()).collect();
    let facts: Vec<ClusterFacts<'_>> = fleet
        .iter()
        .map(|c| ClusterFacts {
            name: c.name,
            labels: &c.labels,
            taints: &c.taints,
            ready: c.ready,
        })
        .collect();
    let propagated: BTreeSet<String> = propagated.iter().map(|p| p.to_string()).collect();
    decide(&Input {
        placement,
        candidates: &candidates,
        clusters: &facts,
        previous: prev,
        propagated: &propagated,
        default_unreachable_seconds: 300,
        now: NOW,
    })
    .expect("valid placement")
}

fn names(d: &Decision) -> Vec<&str> {
    d.status.clusters.iter().map(|c| c.name.as_str()).collect()
}

fn moves(d: &Decision) -> Vec<(&str, &str, Option<&str>)> {
    d.status
        .moves
        .iter()
        .map(|m| {
            (
                m.cluster.as_str(),
                m.reason.as_str(),
                m.replacement.as_deref(),
            )
        })
        .collect()
}

#[test]
fn first_decisions() {
    struct Case {
        what: &'static str,
        fleet: Vec<Cluster>,
        placement: Placement,
        want: Vec<&'static str>,
        reason: ScheduleReason,
    }
    let mut tainted = fleet();
    tainted[0].taints = vec![taint(TaintEffect::NoSchedule, "cordon", 0)];
    let mut unready = fleet();
    unready[0].ready = false;
    let mut gold = max(1);
    gold.preferences = vec![ClusterPreference {
        weight: 10,
        selector: LabelSelector {
            match_labels: BTreeMap::from([("region".into(), "c".into())]),
            match_expressions: vec![],
        },
    }];
    let mut tolerant = max(1);
    tolerant.tolerations = vec![Toleration {
        key: Some("cordon".into()),
        operator: Some(TolerationOperator::Exists),
        ..Toleration::default()
    }];
    let mut four_regions = spread3();
    four_regions.spread_constraints[0].min_groups = Some(4);
    four_regions.max_clusters = Some(4);
    let cases = [
        Case {
            what: "three regions, one cluster each",
            fleet: fleet(),
            placement: spread3(),
            want: vec!["a1", "b1", "c1"],
            reason: ScheduleReason::Scheduled,
        },
        Case {
            what: "NoSchedule keeps a1 off",
            fleet: tainted,
            placement: spread3(),
            want: vec!["a2", "b1", "c1"],
            reason: ScheduleReason::Scheduled,
        },
        Case {
            what: "an unready cluster is not chosen",
            fleet: unready,
            placement: max(2),
            want: vec!["a2", "b1"],
            reason: ScheduleReason::Scheduled,
        },
        Case {
            what: "preferences first",
            fleet: fleet(),
            placement: gold,
            want: vec!["c1"],
            reason: ScheduleReason::Scheduled,
        },
        Case {
            what: "a tolerated NoSchedule taint does not matter",
            fleet: {
                let mut f = fleet();
                f[0].taints = vec![taint(TaintEffect::NoSchedule, "cordon", 0)];
                f
            },
            placement: tolerant,
            want: vec!["a1"],
            reason: ScheduleReason::Scheduled,
        },
        Case {
            what: "four regions cannot be had: nothing is placed",
            fleet: fleet(),
            placement: four_regions,
            want: vec![],
            reason: ScheduleReason::Unschedulable,
        },
    ];
    for case in cases {
        let d = run(&case.fleet, &case.placement, None, &[]);
        assert_eq!(names(&d), case.want, "{}", case.what);
        assert_eq!(d.reason, case.reason, "{}", case.what);
        assert!(d.status.moves.is_empty(), "{}", case.what);
    }
}

#[test]
fn the_unschedulable_message_says_what_is_missing() {
    let mut f = fleet();
    f.retain(|c| c.name != "c1");
    let d = run(&f, &spread3(), None, &[]);
    assert_eq!(d.reason, ScheduleReason::Unschedulable);
    assert_eq!(d.message, "need 3 distinct region, 2 available");
}

#[test]
fn the_same_inputs_give_the_same_decision() {
    let a = run(&fleet(), &spread3(), None, &[]);
    let mut reversed = fleet();
    reversed.reverse();
    let b = run(&reversed, &spread3(), None, &[]);
    assert_eq!(a, b);
}

#[test]
fn decisions_are_sticky() {
    // a2 was chosen earlier (a1 was tainted then); a1 fits again and sorts first, but a2 stays.
    let prev = previous(&["a2", "b1", "c1"]);
    let d = run(&fleet(), &spread3(), Some(&prev), &["a2", "b1", "c1"]);
    assert_eq!(names(&d), ["a2", "b1", "c1"]);
    // A new cluster joining does not reshuffle either.
    let mut bigger = fleet();
    bigger.push(cluster("a0", "a"));
    let d = run(&bigger, &spread3(), Some(&prev), &[]);
    assert_eq!(names(&d), ["a2", "b1", "c1"]);
    assert_eq!(d.reason, ScheduleReason::Scheduled);
}

#[test]
fn a_no_execute_taint_starts_a_graceful_move_that_completes_once_the_replacement_is_up() {
    let mut f = fleet();
    f[0].taints = vec![taint(TaintEffect::NoExecute, "drain", NOW - 5)];
    let prev = previous(&["a1", "b1", "c1"]);
    let d = run(&f, &spread3(), Some(&prev), &["a1", "b1", "c1"]);
    assert_eq!(names(&d), ["b1", "c1", "a2"]);
    assert_eq!(moves(&d), [("a1", "Evicted", Some("a2"))]);
    assert_eq!(d.targets().len(), 4, "a1 keeps its copy meanwhile");
    assert_eq!(d.recheck_at, Some(NOW + DEFAULT_GRACE_PERIOD_SECONDS));
    // Next round: a2 is not up yet — nothing changes.
    let d2 = run(&f, &spread3(), Some(&d.status), &["a1", "b1", "c1"]);
    assert_eq!(d2.status, d.status);
    // a2 reports propagated: the move completes, a1's copy may go.
    let d3 = run(&f, &spread3(), Some(&d2.status), &["a1", "b1", "c1", "a2"]);
    assert_eq!(moves(&d3), [("a1", "Replaced", Some("a2"))]);
    assert!(!d3.targets().contains("a1"));
    assert_eq!(d3.reason, ScheduleReason::Scheduled);
}

#[test]
fn after_the_grace_period_the_old_copy_goes_only_while_another_copy_is_propagated() {
    let mut f = fleet();
    f[0].taints = vec![taint(TaintEffect::NoExecute, "drain", 0)];
    let mut p = max(1);
    p.failover = Some(FailoverPolicy {
        grace_period_seconds: Some(60),
    });
    let mut prev = previous(&["a2"]);
    prev.clusters = references(["a1".to_string()]);
    let started = run(&f, &p, Some(&prev), &["a1"]);
    assert_eq!(moves(&started), [("a1", "Evicted", Some("a2"))]);
    let mut late = started.status.clone();
    late.moves[0].since = rfc3339(NOW - 61);
    // No decided cluster holds a propagated copy: a1 is kept past the grace period.
    let d = run(&f, &p, Some(&late), &["a1"]);
    assert_eq!(moves(&d), [("a1", "Evicted", Some("a2"))]);
    // With b1 also decided and propagated it may go.
    let mut p2 = max(2);
    p2.failover = p.failover.clone();
    late.clusters = references(["a2".to_string(), "b1".to_string()]);
    let d = run(&f, &p2, Some(&late), &["a1", "b1"]);
    assert_eq!(moves(&d), [("a1", "Replaced", Some("a2"))]);
}

#[test]
fn an_eviction_without_a_replacement_keeps_the_copy_and_is_unschedulable() {
    let mut f = fleet();
    f[0].taints = vec![taint(TaintEffect::NoExecute, "drain", 0)];
    f[1].taints = vec![taint(TaintEffect::NoSchedule, "cordon", 0)];
    let prev = previous(&["a1", "b1", "c1"]);
    let d = run(&f, &spread3(), Some(&prev), &["a1", "b1", "c1"]);
    assert_eq!(d.reason, ScheduleReason::Unschedulable);
    assert!(d.targets().contains("a1"), "the old copy is kept");
    assert_eq!(moves(&d), [("a1", "Evicted", None)]);
    assert!(
        d.message.contains("need 3 distinct region, 2 available")
            && d.message
                .contains("a1 must be left (tainted drain:NoExecute)"),
        "{}",
        d.message
    );
    // The taint is lifted before a replacement appeared: a1 simply stays.
    let d2 = run(&fleet(), &spread3(), Some(&d.status), &["a1", "b1", "c1"]);
    assert_eq!(names(&d2), ["b1", "c1", "a1"]);
    assert!(d2.status.moves.is_empty());
    assert_eq!(d2.reason, ScheduleReason::Scheduled);
}

#[test]
fn the_last_copy_is_kept_when_the_only_cluster_is_evicted() {
    let mut f = vec![cluster("a1", "a")];
    f[0].taints = vec![taint(TaintEffect::NoExecute, "drain", 0)];
    let d = run(&f, &max(1), Some(&previous(&["a1"])), &["a1"]);
    assert!(d.targets().contains("a1"));
    assert_eq!(d.reason, ScheduleReason::Unschedulable);
}

#[test]
fn an_unreachable_cluster_is_left_after_the_default_toleration() {
    let mut f = fleet();
    f[0].ready = false;
    f[0].taints = vec![taint(
        TaintEffect::NoExecute,
        UNREACHABLE_TAINT_KEY,
        NOW - 100,
    )];
    let prev = previous(&["a1"]);
    let d = run(&f, &max(1), Some(&prev), &["a1"]);
    assert_eq!(names(&d), ["a1"], "tolerated for 300 s");
    assert_eq!(d.recheck_at, Some(NOW + 200));
    f[0].taints[0].time_added = Some(rfc3339(NOW - 300));
    let d = run(&f, &max(1), Some(&prev), &["a1"]);
    assert_eq!(names(&d), ["a2"]);
    assert_eq!(moves(&d), [("a1", "Evicted", Some("a2"))]);
}

#[test]
fn a_completed_move_does_not_churn_back() {
    let prev = PlacementStatus {
        clusters: references(["a2".to_string()]),
        moves: vec![new_move(
            "a1",
            moves::MoveReason::Replaced,
            Some("a2".into()),
            rfc3339(NOW - 10),
            "tainted drain:NoExecute".into(),
        )],
    };
    // a1 is healthy and untainted again, and sorts first: the decision stays on a2.
    let d = run(&fleet(), &max(1), Some(&prev), &["a2"]);
    assert_eq!(names(&d), ["a2"]);
    assert_eq!(d.status, prev);
}

#[test]
fn a_deselected_cluster_is_dropped_at_once_when_nothing_replaces_it() {
    let mut p = max(3);
    p.cluster_selector = Some(LabelSelector {
        match_labels: BTreeMap::from([("region".into(), "a".into())]),
        match_expressions: vec![],
    });
    let f = fleet();
    let candidates: BTreeSet<String> = ["a1".to_string(), "a2".to_string()].into();
    let facts: Vec<ClusterFacts<'_>> = f
        .iter()
        .map(|c| ClusterFacts {
            name: c.name,
            labels: &c.labels,
            taints: &c.taints,
            ready: c.ready,
        })
        .collect();
    let prev = previous(&["a1", "a2", "b1"]);
    let d = decide(&Input {
        placement: &p,
        candidates: &candidates,
        clusters: &facts,
        previous: Some(&prev),
        propagated: &BTreeSet::new(),
        default_unreachable_seconds: 300,
        now: NOW,
    })
    .expect("valid");
    assert_eq!(names(&d), ["a1", "a2"]);
    assert!(d.status.moves.is_empty());
}

#[test]
fn lowering_max_clusters_drops_the_last_chosen() {
    let d = run(&fleet(), &max(2), Some(&previous(&["c1", "b1", "a1"])), &[]);
    assert_eq!(names(&d), ["c1", "b1"]);
}

#[test]
fn a_malformed_preference_selector_is_an_error() {
    let mut p = max(1);
    p.preferences = vec![ClusterPreference {
        weight: 1,
        selector: LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![flotilla_api::federated::LabelSelectorRequirement {
                key: "x".into(),
                operator: "Bogus".into(),
                values: vec![],
            }],
        },
    }];
    let f = fleet();
    let facts: Vec<ClusterFacts<'_>> = f
        .iter()
        .map(|c| ClusterFacts {
            name: c.name,
            labels: &c.labels,
            taints: &c.taints,
            ready: c.ready,
        })
        .collect();
    let err = decide(&Input {
        placement: &p,
        candidates: &BTreeSet::new(),
        clusters: &facts,
        previous: None,
        propagated: &BTreeSet::new(),
        default_unreachable_seconds: 300,
        now: NOW,
    });
    assert!(err.is_err());
}
