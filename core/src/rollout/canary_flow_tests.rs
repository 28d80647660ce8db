use super::*;
use serde_json::json;

const T0: i64 = 1_700_000_000;

fn spec(on_failure: &str) -> RolloutSpec {
    serde_json::from_value(json!({"strategy": "Canary", "onFailure": on_failure,
        "progressDeadlineSeconds": 60,
        "canary": {"steps": [10, 50, 100], "minSuccessSeconds": 5}}))
    .expect("valid spec.rollout")
}

fn facts(canary_ok: bool, stable_ok: bool) -> Vec<ClusterFacts<'static>> {
    ["m1", "m2"]
        .into_iter()
        .map(|name| ClusterFacts {
            name,
            canary: if canary_ok {
                Ok(())
            } else {
                Err("0 of 1 updated replicas are available".into())
            },
            stable: if stable_ok {
                Ok(())
            } else {
                Err("rolling out".into())
            },
        })
        .collect()
}

fn run(
    spec: &RolloutSpec,
    previous: Option<&RolloutStatus>,
    target: &str,
    clusters: &[ClusterFacts<'_>],
    now: i64,
) -> Course {
    course(&Input {
        spec,
        target,
        generation: 2,
        previous,
        clusters,
        now,
    })
}

fn phase(c: &Course) -> Option<(CanaryPhase, u32, u32)> {
    c.status
        .canary
        .as_ref()
        .map(|c| (c.phase, c.step, c.percent))
}

#[test]
fn the_first_template_is_complete_at_once_and_a_settled_one_writes_nothing_new() {
    let s = spec("Halt");
    let first = run(&s, None, "r1", &facts(false, false), T0);
    assert_eq!(first.reason, RolloutReason::Complete);
    assert_eq!(
        first.render,
        Render::Stable {
            revision: "r1".into()
        }
    );
    assert!(first.events.is_empty());
    let again = run(&s, Some(&first.status), "r1", &facts(false, false), T0 + 99);
    assert_eq!(again.status, first.status, "steady state: the same status");
    assert!(again.events.is_empty() && again.recheck_after.is_none());
}

#[test]
fn a_canary_goes_through_every_step_promotes_and_completes() {
    let s = spec("Halt");
    let done = run(&s, None, "r1", &facts(true, true), T0).status;
    let started = run(&s, Some(&done), "r2", &facts(false, false), T0);
    assert_eq!(phase(&started), Some((CanaryPhase::Stepping, 1, 10)));
    let split = |percent| Render::Split {
        stable: "r1".into(),
        percent,
    };
    assert_eq!(started.render, split(10));
    assert_eq!(started.status.stable_revision.as_deref(), Some("r1"));
    assert_eq!(started.events[0].0, RolloutEvent::RolloutStarted);
    // Not healthy yet: held, with the member's words.
    let waiting = run(
        &s,
        Some(&started.status),
        "r2",
        &facts(false, false),
        T0 + 3,
    );
    assert_eq!(waiting.render, split(10));
    assert!(
        waiting.message.contains("waiting for m1: 0 of 1"),
        "{}",
        waiting.message
    );
    // Healthy: held for minSuccessSeconds, then the next step (a restart reads the same
    // stored status, so it decides the same).
    let healthy = run(&s, Some(&waiting.status), "r2", &facts(true, false), T0 + 4);
    assert_eq!(phase(&healthy), Some((CanaryPhase::Stepping, 1, 10)));
    assert_eq!(healthy.recheck_after, Some(6));
    let next = run(
        &s,
        Some(&healthy.status),
        "r2",
        &facts(true, false),
        T0 + 10,
    );
    assert_eq!(phase(&next), Some((CanaryPhase::Stepping, 2, 50)));
    assert_eq!(next.render, split(50));
    assert_eq!(next.events[0].0, RolloutEvent::CanaryStep);
    let at_100 = run(&s, Some(&next.status), "r2", &facts(true, false), T0 + 11);
    let at_100 = run(&s, Some(&at_100.status), "r2", &facts(true, false), T0 + 17);
    assert_eq!(phase(&at_100), Some((CanaryPhase::Stepping, 3, 100)));
    let held = run(&s, Some(&at_100.status), "r2", &facts(true, false), T0 + 18);
    let promoting = run(&s, Some(&held.status), "r2", &facts(true, false), T0 + 24);
    assert_eq!(phase(&promoting), Some((CanaryPhase::Promoting, 3, 100)));
    assert_eq!(promoting.render, Render::Promote);
    let still = run(
        &s,
        Some(&promoting.status),
        "r2",
        &facts(true, false),
        T0 + 25,
    );
    assert_eq!(still.render, Render::Promote);
    assert!(
        still.message.contains("waiting for m1: rolling out"),
        "{}",
        still.message
    );
    let complete = run(&s, Some(&still.status), "r2", &facts(true, true), T0 + 26);
    assert_eq!(complete.reason, RolloutReason::Complete);
    assert_eq!(
        complete.render,
        Render::Stable {
            revision: "r2".into()
        }
    );
    assert_eq!(complete.status.canary, None);
    assert_eq!(complete.status.stable_revision.as_deref(), Some("r2"));
    assert_eq!(complete.events[0].0, RolloutEvent::RolloutComplete);
}

#[test]
fn a_failed_step_rolls_back_with_the_clusters_and_reasons_and_stays_rolled_back() {
    let s = spec("Rollback");
    let done = run(&s, None, "r1", &facts(true, true), T0).status;
    let started = run(&s, Some(&done), "r2", &facts(false, false), T0);
    let failed = run(
        &s,
        Some(&started.status),
        "r2",
        &facts(false, false),
        T0 + 60,
    );
    assert_eq!(failed.reason, RolloutReason::RolledBack);
    assert_eq!(
        failed.render,
        Render::Stable {
            revision: "r1".into()
        }
    );
    assert_eq!(failed.status.rolled_back_to.as_deref(), Some("r1"));
    assert!(
        failed.message.contains("cluster m1 failed: 0 of 1")
            && failed.message.contains("cluster m2 failed"),
        "{}",
        failed.message
    );
    assert_eq!(failed.events[0].0, RolloutEvent::RolloutRolledBack);
    let later = run(&s, Some(&failed.status), "r2", &facts(true, true), T0 + 99);
    assert_eq!(later.status, failed.status);
    assert_eq!(later.reason, RolloutReason::RolledBack);
    assert_eq!(
        later.render,
        Render::Stable {
            revision: "r1".into()
        }
    );
    assert!(later.events.is_empty());
    // A new template starts a new canary beside the same stable revision.
    let again = run(
        &s,
        Some(&later.status),
        "r3",
        &facts(false, false),
        T0 + 100,
    );
    assert_eq!(phase(&again), Some((CanaryPhase::Stepping, 1, 10)));
    assert_eq!(again.status.stable_revision.as_deref(), Some("r1"));
    assert!(again.status.clusters.is_empty() && again.status.rolled_back_to.is_none());
}

#[test]
fn a_failed_step_with_halt_holds_the_step_and_pause_holds_a_running_one() {
    let s = spec("Halt");
    let done = run(&s, None, "r1", &facts(true, true), T0).status;
    let started = run(&s, Some(&done), "r2", &facts(false, false), T0);
    let failed = run(
        &s,
        Some(&started.status),
        "r2",
        &facts(false, false),
        T0 + 61,
    );
    assert_eq!(failed.reason, RolloutReason::Failed);
    let held = Render::Split {
        stable: "r1".into(),
        percent: 10,
    };
    assert_eq!(failed.render, held);
    assert!(
        failed.message.contains("held at this step"),
        "{}",
        failed.message
    );
    let later = run(&s, Some(&failed.status), "r2", &facts(true, true), T0 + 99);
    assert_eq!(
        (later.reason, later.render),
        (RolloutReason::Failed, held.clone())
    );
    let mut paused = s.clone();
    paused.paused = true;
    let p = run(
        &paused,
        Some(&started.status),
        "r2",
        &facts(true, true),
        T0 + 99,
    );
    assert_eq!((p.reason, p.render), (RolloutReason::Paused, held));
    assert_eq!(p.status, started.status);
}

#[test]
fn a_template_reverted_to_the_stable_revision_mid_canary_completes() {
    let s = spec("Halt");
    let done = run(&s, None, "r1", &facts(true, true), T0).status;
    let started = run(&s, Some(&done), "r2", &facts(false, false), T0);
    let back = run(
        &s,
        Some(&started.status),
        "r1",
        &facts(false, false),
        T0 + 1,
    );
    assert_eq!(back.reason, RolloutReason::Complete);
    assert_eq!(
        back.render,
        Render::Stable {
            revision: "r1".into()
        }
    );
    assert_eq!(back.status.canary, None);
}

#[test]
fn canary_steps_are_validated_with_the_spec() {
    let mut s = spec("Halt");
    assert_eq!(s.validate(), Ok(()));
    s.canary = Some(flotilla_api::rollout::CanarySpec {
        steps: vec![50, 10],
        min_success_seconds: None,
    });
    assert!(
        s.validate()
            .expect_err("an error")
            .contains("must increase")
    );
    s.canary = None;
    assert!(
        s.validate()
            .expect_err("an error")
            .contains("steps is empty")
    );
}
