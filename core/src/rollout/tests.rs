//! Table tests of the rollout planner.

use std::collections::BTreeMap;

use serde_json::json;

use super::plan::{ClusterInput, Input, Plan, RolloutEvent, plan, timestamp};
use flotilla_api::rollout::{ClusterRolloutState as S, RolloutReason, RolloutSpec, RolloutStatus};

const T0: i64 = 1_800_000_000;

fn spec(v: serde_json::Value) -> RolloutSpec {
    serde_json::from_value(v).expect("valid spec.rollout")
}

/// A cluster: (name, stage label, at target, healthy).
type Row = (&'static str, &'static str, bool, bool);

fn labels(rows: &[Row]) -> Vec<BTreeMap<String, String>> {
    rows.iter()
        .map(|(_, stage, _, _)| BTreeMap::from([("stage".to_string(), stage.to_string())]))
        .collect()
}

fn run(
    spec: &RolloutSpec,
    rows: &[Row],
    previous: Option<&RolloutStatus>,
    target: &str,
    now: i64,
) -> Plan {
    let labels = labels(rows);
    let clusters: Vec<ClusterInput<'_>> = rows
        .iter()
        .zip(&labels)
        .map(|((name, _, at_target, healthy), labels)| ClusterInput {
            name,
            labels,
            at_target: *at_target,
            healthy: *healthy,
            problem: (!healthy).then(|| format!("{name} pods not ready")),
            failed: false,
        })
        .collect();
    plan(&Input {
        spec,
        target,
        generation: 3,
        previous,
        clusters: &clusters,
        now,
    })
}

fn states(p: &Plan) -> Vec<(&str, S)> {
    p.status
        .clusters
        .iter()
        .map(|c| (c.name.as_str(), c.state))
        .collect()
}

fn canary_first() -> RolloutSpec {
    spec(json!({"strategy": "Progressive", "maxConcurrency": 1,
        "groups": [{"selector": {"matchLabels": {"stage": "canary"}}}],
        "minSuccessSeconds": 10, "progressDeadlineSeconds": 30}))
}

const FOUR: [Row; 4] = [
    ("m1", "prod", false, false),
    ("m2", "prod", false, false),
    ("m3", "canary", false, false),
    ("m4", "prod", false, false),
];

#[test]
fn the_canary_group_goes_first_one_cluster_at_a_time() {
    let p = run(&canary_first(), &FOUR, None, "r2", T0);
    assert_eq!(
        states(&p),
        [
            ("m3", S::Progressing),
            ("m1", S::Pending),
            ("m2", S::Pending),
            ("m4", S::Pending)
        ]
    );
    assert_eq!(p.updated.iter().collect::<Vec<_>>(), ["m3"]);
    assert_eq!((p.status.current_wave, p.status.waves), (1, 2));
    assert_eq!(p.status.progress, "0/4");
    assert_eq!(p.reason, RolloutReason::Progressing);
    assert_eq!(p.recheck_after, Some(30));
    let kinds: Vec<_> = p.events.iter().map(|(e, _)| *e).collect();
    assert_eq!(
        kinds,
        [RolloutEvent::RolloutStarted, RolloutEvent::WaveStarted]
    );
}

#[test]
fn a_cluster_must_stay_healthy_for_min_success_seconds_before_the_next_moves() {
    let s = canary_first();
    let first = run(&s, &FOUR, None, "r2", T0);
    let mut rows = FOUR;
    rows[2] = ("m3", "canary", true, true);
    let healthy = run(&s, &rows, Some(&first.status), "r2", T0 + 5);
    assert_eq!(healthy.updated.iter().collect::<Vec<_>>(), ["m3"]);
    // minSuccessSeconds 10 on whole-second times: 11 s, so that no real 9.x s passes.
    assert_eq!(healthy.recheck_after, Some(11));
    let early = run(&s, &rows, Some(&healthy.status), "r2", T0 + 15);
    assert_eq!(
        states(&early)[0],
        ("m3", S::Progressing),
        "10 whole seconds may be 9.x"
    );
    let done = run(&s, &rows, Some(&early.status), "r2", T0 + 16);
    assert_eq!(
        states(&done),
        [
            ("m3", S::Succeeded),
            ("m1", S::Progressing),
            ("m2", S::Pending),
            ("m4", S::Pending)
        ]
    );
    assert_eq!(done.status.current_wave, 2);
    assert_eq!(done.status.progress, "1/4");
    assert!(
        done.events
            .iter()
            .any(|(e, m)| *e == RolloutEvent::WaveStarted && m.contains("m1, m2, m4"))
    );
}

#[test]
fn a_cluster_not_healthy_by_the_deadline_fails_and_stops_the_rollout() {
    let s = canary_first();
    let first = run(&s, &FOUR, None, "r2", T0);
    let mut rows = FOUR;
    rows[2] = ("m3", "canary", true, false);
    let failed = run(&s, &rows, Some(&first.status), "r2", T0 + 31);
    assert_eq!(failed.reason, RolloutReason::Failed);
    assert!(
        failed
            .message
            .contains("cluster m3 failed: m3 pods not ready"),
        "{}",
        failed.message
    );
    assert_eq!(failed.updated.iter().collect::<Vec<_>>(), ["m3"]);
    assert_eq!(failed.status.clusters[1].state, S::Pending);
    assert_eq!(failed.events[0].0, RolloutEvent::RolloutFailed);
    // Later steps keep it stopped, without a second Event.
    let later = run(&s, &rows, Some(&failed.status), "r2", T0 + 100);
    assert_eq!(later.status, failed.status);
    assert!(later.events.is_empty());
}

#[test]
fn a_cluster_its_health_rules_call_failed_stops_the_rollout_before_the_deadline() {
    let s = canary_first();
    let first = run(&s, &FOUR, None, "r2", T0);
    let labels = labels(&FOUR);
    let clusters: Vec<ClusterInput<'_>> = FOUR
        .iter()
        .zip(&labels)
        .map(|((name, _, _, _), labels)| ClusterInput {
            name,
            labels,
            at_target: *name == "m3",
            healthy: false,
            problem: (*name == "m3").then(|| "disk full".to_string()),
            failed: *name == "m3",
        })
        .collect();
    // One second in, far from the 30 s deadline.
    let failed = plan(&Input {
        spec: &s,
        target: "r2",
        generation: 3,
        previous: Some(&first.status),
        clusters: &clusters,
        now: T0 + 1,
    });
    assert_eq!(failed.reason, RolloutReason::Failed);
    assert!(
        failed.message.contains("cluster m3 failed: disk full"),
        "{}",
        failed.message
    );
}

#[test]
fn tolerated_failures_let_the_rollout_continue() {
    let s = spec(json!({"strategy": "Progressive", "maxFailures": 1,
        "progressDeadlineSeconds": 30}));
    let rows: [Row; 2] = [("a", "", false, false), ("b", "", false, false)];
    let first = run(&s, &rows, None, "r2", T0);
    let rows: [Row; 2] = [("a", "", true, false), ("b", "", false, false)];
    let p = run(&s, &rows, Some(&first.status), "r2", T0 + 40);
    assert_eq!(states(&p), [("a", S::Failed), ("b", S::Progressing)]);
    assert_eq!(p.reason, RolloutReason::Progressing);
}

#[test]
fn a_member_that_is_down_counts_as_failed_at_the_deadline() {
    let s = canary_first();
    let first = run(&s, &FOUR, None, "r2", T0);
    // m3 never shows the target: its member is unreachable.
    let p = run(&s, &FOUR, Some(&first.status), "r2", T0 + 29);
    assert_eq!(p.status.clusters[0].state, S::Progressing);
    assert_eq!(p.recheck_after, Some(1));
    let p = run(&s, &FOUR, Some(&p.status), "r2", T0 + 30);
    assert_eq!(p.status.clusters[0].state, S::Failed);
    assert_eq!(p.reason, RolloutReason::Failed);
}

#[test]
fn pausing_stops_new_clusters_but_keeps_those_already_updated() {
    let mut s = canary_first();
    s.min_success_seconds = Some(0);
    let first = run(&s, &FOUR, None, "r2", T0);
    s.paused = true;
    let mut rows = FOUR;
    rows[2] = ("m3", "canary", true, true);
    let p = run(&s, &rows, Some(&first.status), "r2", T0 + 20);
    assert_eq!(
        states(&p),
        [
            ("m3", S::Succeeded),
            ("m1", S::Pending),
            ("m2", S::Pending),
            ("m4", S::Pending)
        ]
    );
    assert_eq!(p.reason, RolloutReason::Paused);
    assert_eq!(p.updated.iter().collect::<Vec<_>>(), ["m3"]);
    s.paused = false;
    let resumed = run(&s, &rows, Some(&p.status), "r2", T0 + 21);
    assert_eq!(resumed.status.clusters[1].state, S::Progressing);
}

#[test]
fn a_new_revision_restarts_from_the_first_wave_and_remembers_the_stable_one() {
    let s = canary_first();
    let done = RolloutStatus {
        target_revision: "r1".into(),
        clusters: FOUR
            .iter()
            .map(|(name, _, _, _)| flotilla_api::rollout::ClusterRollout {
                name: name.to_string(),
                state: S::Succeeded,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let p = run(&s, &FOUR, Some(&done), "r2", T0);
    assert_eq!(p.status.stable_revision.as_deref(), Some("r1"));
    assert_eq!(p.status.start_time, timestamp(T0));
    assert_eq!(p.updated.iter().collect::<Vec<_>>(), ["m3"]);
    // A third revision while r2 is half way: r1 stays the stable one.
    let p3 = run(&s, &FOUR, Some(&p.status), "r3", T0 + 1);
    assert_eq!(p3.status.stable_revision.as_deref(), Some("r1"));
}

#[test]
fn a_percentage_of_the_placed_clusters_move_at_once() {
    let s = spec(json!({"strategy": "Progressive", "maxConcurrency": "50%"}));
    let p = run(&s, &FOUR, None, "r2", T0);
    assert_eq!(p.updated.iter().collect::<Vec<_>>(), ["m1", "m2"]);
}

#[test]
fn every_cluster_healthy_completes_once_and_then_plans_without_change() {
    let s = spec(json!({"strategy": "Progressive", "maxConcurrency": 4}));
    let first = run(&s, &FOUR, None, "r2", T0);
    assert_eq!(first.updated.len(), 4);
    let rows = FOUR.map(|(n, l, _, _)| (n, l, true, true));
    let done = run(&s, &rows, Some(&first.status), "r2", T0 + 3);
    assert_eq!(done.reason, RolloutReason::Complete);
    assert_eq!(
        (done.status.current_wave, done.status.progress.as_str()),
        (0, "4/4")
    );
    assert_eq!(done.events[0].0, RolloutEvent::RolloutComplete);
    let again = run(&s, &rows, Some(&done.status), "r2", T0 + 100);
    assert_eq!(again.status, done.status, "no change, so no status write");
    assert!(again.events.is_empty());
}

#[test]
fn a_cluster_already_on_the_target_counts_as_started() {
    let s = canary_first();
    let mut rows = FOUR;
    rows[0] = ("m1", "prod", true, true);
    let p = run(&s, &rows, None, "r2", T0);
    assert_eq!(p.status.clusters[1].state, S::Progressing, "m1");
    assert!(p.updated.contains("m1") && p.updated.contains("m3"));
}

#[test]
fn invalid_rollout_fields_are_named() {
    let bad = |v| spec(v).validate().expect_err("invalid");
    assert!(bad(json!({"maxConcurrency": "150%"})).contains("maxConcurrency"));
    assert!(bad(json!({"maxConcurrency": "x"})).contains("maxConcurrency"));
    assert!(bad(json!({"maxFailures": -1})).contains("maxFailures"));
    assert!(
        bad(json!({"groups": [{"selector": {"matchExpressions": [
            {"key": "a", "operator": "Near"}]}}]}))
        .contains("groups[0]")
    );
    assert_eq!(canary_first().validate(), Ok(()));
    assert_eq!(canary_first().concurrency(4), 1);
    assert_eq!(spec(json!({"maxConcurrency": "25%"})).concurrency(2), 1);
}

/// `canary_first` with `onFailure: Rollback`, and the status of a rollout of r1 complete on
/// every cluster.
fn rollback_from_r1() -> (RolloutSpec, RolloutStatus) {
    let mut s = canary_first();
    s.on_failure = flotilla_api::rollout::OnFailure::Rollback;
    let done = RolloutStatus {
        target_revision: "r1".into(),
        clusters: FOUR
            .iter()
            .map(|(name, _, _, _)| flotilla_api::rollout::ClusterRollout {
                name: name.to_string(),
                state: S::Succeeded,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    (s, done)
}

#[test]
fn with_rollback_a_failed_canary_goes_back_to_the_stable_revision_and_the_rest_stay() {
    let (s, done) = rollback_from_r1();
    let first = run(&s, &FOUR, Some(&done), "r2", T0);
    let mut rows = FOUR;
    rows[2] = ("m3", "canary", true, false);
    let failed = run(&s, &rows, Some(&first.status), "r2", T0 + 31);
    assert_eq!(failed.reason, RolloutReason::RolledBack);
    assert!(
        failed
            .message
            .contains("cluster m3 failed: m3 pods not ready")
            && failed.message.contains("went back to revision r1"),
        "{}",
        failed.message
    );
    let rollback = failed.rollback.clone().expect("a rollback");
    assert_eq!(rollback.to, "r1");
    assert_eq!(rollback.clusters.iter().collect::<Vec<_>>(), ["m3"]);
    assert!(failed.updated.is_empty(), "no cluster keeps r2");
    assert_eq!(failed.status.rolled_back_to.as_deref(), Some("r1"));
    assert_eq!(failed.status.clusters[1].state, S::Pending);
    let kinds: Vec<_> = failed.events.iter().map(|(e, _)| *e).collect();
    assert_eq!(kinds, [RolloutEvent::RolloutRolledBack]);
    // Back on r1, m3 no longer holds the target: it stays failed with its reason, and
    // later steps change nothing.
    rows[2] = ("m3", "canary", false, false);
    let later = run(&s, &rows, Some(&failed.status), "r2", T0 + 100);
    assert_eq!(later.status, failed.status);
    assert_eq!(later.rollback, failed.rollback);
    assert!(later.events.is_empty());
}

#[test]
fn after_a_rollback_a_new_revision_starts_a_new_rollout_from_the_stable_one() {
    let (s, done) = rollback_from_r1();
    let first = run(&s, &FOUR, Some(&done), "r2", T0);
    let mut rows = FOUR;
    rows[2] = ("m3", "canary", true, false);
    let failed = run(&s, &rows, Some(&first.status), "r2", T0 + 31);
    let next = run(&s, &FOUR, Some(&failed.status), "r3", T0 + 40);
    assert_eq!(next.reason, RolloutReason::Progressing);
    assert_eq!(
        next.status.stable_revision.as_deref(),
        Some("r1"),
        "the rolled-back r2 never becomes stable"
    );
    assert_eq!(next.status.rolled_back_to, None);
    assert_eq!(next.rollback, None);
    assert_eq!(next.updated.iter().collect::<Vec<_>>(), ["m3"]);
}

#[test]
fn with_rollback_but_no_stable_revision_the_rollout_stops_as_with_halt() {
    let (s, _) = rollback_from_r1();
    let first = run(&s, &FOUR, None, "r2", T0);
    let mut rows = FOUR;
    rows[2] = ("m3", "canary", true, false);
    let failed = run(&s, &rows, Some(&first.status), "r2", T0 + 31);
    assert_eq!(failed.reason, RolloutReason::Failed);
    assert!(
        failed.message.contains("nothing to roll back to"),
        "{}",
        failed.message
    );
    assert_eq!(failed.rollback, None);
    assert_eq!(failed.updated.iter().collect::<Vec<_>>(), ["m3"]);
    assert_eq!(failed.events[0].0, RolloutEvent::RolloutFailed);
}
