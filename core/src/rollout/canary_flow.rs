//! Where a canary by replica share stands and what each cluster runs (pure): from the stored
//! `status.rollout`, the revision of the current template and each placed cluster's facts,
//! [`course`] decides the new status, the `Rollout` condition, the Events and what to
//! render ([`Render`]). The shares and the step gate are [`super::canary`]; the sync
//! controller gathers the facts and carries out the render.

use super::{
    canary::{CanaryHealth, Gates, StepDecision, StepState, step},
    plan::{RolloutEvent, seconds, timestamp},
};
use flotilla_api::rollout::{
    CanaryPhase, CanaryStatus, ClusterRollout, ClusterRolloutState,
    DEFAULT_PROGRESS_DEADLINE_SECONDS, OnFailure, RolloutReason, RolloutSpec, RolloutStatus,
};

/// One placed cluster, as the course sees it.
#[derive(Debug, Clone)]
pub struct ClusterFacts<'a> {
    /// Cluster name.
    pub name: &'a str,
    /// Its canary holds the stored step's replicas of the target and is healthy; else why
    /// not.
    pub canary: Result<(), String>,
    /// Its stable Deployment holds the target with its full split and is healthy; else why
    /// not (read while promoting).
    pub stable: Result<(), String>,
}

/// The inputs of one step.
pub struct Input<'a> {
    /// `spec.rollout` (valid, strategy `Canary`).
    pub spec: &'a RolloutSpec,
    /// The revision of the current template.
    pub target: &'a str,
    /// The federated object's generation.
    pub generation: i64,
    /// The stored `status.rollout`.
    pub previous: Option<&'a RolloutStatus>,
    /// The placed clusters.
    pub clusters: &'a [ClusterFacts<'a>],
    /// Now, in seconds since the epoch.
    pub now: i64,
}

/// What every placed cluster runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Render {
    /// Only the stable Deployment, on `revision` with its full split; no canary.
    Stable {
        /// The revision the stable Deployment is rendered from.
        revision: String,
    },
    /// The stable Deployment on `stable` with the rest of its split, the canary on the
    /// target with its share of `percent`.
    Split {
        /// The revision of the stable Deployment.
        stable: String,
        /// The step's percentage.
        percent: u32,
    },
    /// The stable Deployment on the target with its full split; the canary kept at 100 %
    /// until the stable Deployments are healthy.
    Promote,
}

/// The answer of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct Course {
    /// The new `status.rollout`.
    pub status: RolloutStatus,
    /// What the clusters run.
    pub render: Render,
    /// The `Rollout` condition's reason.
    pub reason: RolloutReason,
    /// Its message.
    pub message: String,
    /// Events to publish.
    pub events: Vec<(RolloutEvent, String)>,
    /// Seconds until a success or deadline comes due.
    pub recheck_after: Option<i64>,
}

/// Decides one step of a canary.
pub fn course(input: &Input<'_>) -> Course {
    let Some(previous) = input.previous else {
        // The first template under a canary strategy: nothing to compare it with.
        return complete(input, None);
    };
    if previous.target_revision != input.target {
        return start(input, previous);
    }
    let Some(canary) = &previous.canary else {
        return settled(previous);
    };
    let stable = stable_of(previous);
    match canary.phase {
        CanaryPhase::Stepping => stepping(input, previous, canary, stable),
        CanaryPhase::Promoting => promoting(input, previous),
        CanaryPhase::Failed => Course {
            render: Render::Split {
                stable,
                percent: canary.percent,
            },
            ..stopped(previous, RolloutReason::Failed)
        },
        CanaryPhase::RolledBack => Course {
            render: Render::Stable { revision: stable },
            ..stopped(previous, RolloutReason::RolledBack)
        },
    }
}

/// The revision the stable Deployments run while the canary of `previous` runs (or would
/// run, for a new target).
fn stable_of(previous: &RolloutStatus) -> String {
    match &previous.canary {
        Some(c) if c.phase == CanaryPhase::Promoting => previous.target_revision.clone(),
        Some(_) => (previous.stable_revision.clone()).unwrap_or(previous.target_revision.clone()),
        None => previous.target_revision.clone(),
    }
}

fn gates(spec: &RolloutSpec) -> Gates {
    let canary_min = spec.canary.as_ref().and_then(|c| c.min_success_seconds);
    Gates {
        min_success_seconds: canary_min.or(spec.min_success_seconds).unwrap_or(0),
        progress_deadline_seconds: spec
            .progress_deadline_seconds
            .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS),
    }
}

fn steps(spec: &RolloutSpec) -> &[u32] {
    spec.canary.as_ref().map_or(&[], |c| c.steps.as_slice())
}

/// Every cluster runs the target: the status says so, nothing else moves.
fn complete(input: &Input<'_>, previous: Option<&RolloutStatus>) -> Course {
    let status = RolloutStatus {
        target_revision: input.target.to_string(),
        target_generation: previous.map_or(input.generation, |p| p.target_generation),
        stable_revision: Some(input.target.to_string()),
        start_time: previous.map_or_else(|| timestamp(input.now), |p| p.start_time.clone()),
        progress: "100%".into(),
        ..RolloutStatus::default()
    };
    let message = format!("every cluster runs revision {}", input.target);
    let events = match previous {
        Some(_) => vec![(RolloutEvent::RolloutComplete, message.clone())],
        None => Vec::new(),
    };
    Course {
        status,
        render: Render::Stable {
            revision: input.target.to_string(),
        },
        reason: RolloutReason::Complete,
        message,
        events,
        recheck_after: None,
    }
}

/// The target is the stored one and no canary runs: as stored.
fn settled(previous: &RolloutStatus) -> Course {
    Course {
        status: previous.clone(),
        render: Render::Stable {
            revision: previous.target_revision.clone(),
        },
        reason: RolloutReason::Complete,
        message: format!("every cluster runs revision {}", previous.target_revision),
        events: Vec::new(),
        recheck_after: None,
    }
}

/// A new template: its canary starts at the first step, beside the stable revision.
fn start(input: &Input<'_>, previous: &RolloutStatus) -> Course {
    let stable = stable_of(previous);
    if stable == input.target {
        // Back to what the stable Deployments run (a canary reverted by hand).
        let mut c = complete(input, None);
        c.events = vec![(RolloutEvent::RolloutComplete, c.message.clone())];
        return c;
    }
    let percent = steps(input.spec).first().copied().unwrap_or(100);
    let status = RolloutStatus {
        target_revision: input.target.to_string(),
        target_generation: input.generation,
        stable_revision: Some(stable.clone()),
        start_time: timestamp(input.now),
        progress: format!("{percent}%"),
        canary: Some(CanaryStatus {
            phase: CanaryPhase::Stepping,
            step: 1,
            percent,
            since: timestamp(input.now),
            healthy_since: String::new(),
        }),
        ..RolloutStatus::default()
    };
    let message = step_message(input.spec, 1, percent, "starting");
    Course {
        status,
        render: Render::Split { stable, percent },
        reason: RolloutReason::Progressing,
        events: vec![(RolloutEvent::RolloutStarted, message.clone())],
        message,
        recheck_after: Some(gates(input.spec).progress_deadline_seconds),
    }
}

fn step_message(spec: &RolloutSpec, step: u32, percent: u32, what: &str) -> String {
    let n = steps(spec).len();
    format!("canary at {percent}% (step {step}/{n}): {what}")
}

/// At a step: hold, go on, promote or fail, by the canaries' health.
fn stepping(
    input: &Input<'_>,
    previous: &RolloutStatus,
    canary: &CanaryStatus,
    stable: String,
) -> Course {
    let steps = steps(input.spec);
    let index = usize::try_from(canary.step.saturating_sub(1)).unwrap_or(0);
    let state = StepState {
        index: index.min(steps.len().saturating_sub(1)),
        since: seconds(&canary.since).unwrap_or(input.now),
        healthy_since: seconds(&canary.healthy_since),
    };
    let health: Vec<CanaryHealth<'_>> = (input.clusters.iter())
        .map(|c| CanaryHealth {
            name: c.name,
            healthy: c.canary.is_ok(),
            problem: c.canary.clone().err(),
        })
        .collect();
    let split = |percent| Render::Split {
        stable: stable.clone(),
        percent,
    };
    if input.spec.paused {
        let message = step_message(input.spec, canary.step, canary.percent, "paused");
        return Course {
            status: previous.clone(),
            render: split(canary.percent),
            reason: RolloutReason::Paused,
            message,
            events: Vec::new(),
            recheck_after: None,
        };
    }
    match step(steps, state, &health, gates(input.spec), input.now) {
        StepDecision::Hold {
            state,
            recheck_after,
        } => {
            let mut status = previous.clone();
            if let Some(c) = status.canary.as_mut() {
                c.healthy_since = state.healthy_since.map(timestamp).unwrap_or_default();
            }
            Course {
                status,
                render: split(canary.percent),
                reason: RolloutReason::Progressing,
                message: hold_message(input.spec, canary, &health),
                events: Vec::new(),
                recheck_after: Some(recheck_after.max(1)),
            }
        }
        StepDecision::Next(next) => next_step(input, previous, next.index, stable),
        StepDecision::Promote => promote(input, previous, canary),
        StepDecision::Failed(failed) => fail(input, previous, canary, stable, &failed),
    }
}

/// What a held step waits for.
fn hold_message(spec: &RolloutSpec, canary: &CanaryStatus, health: &[CanaryHealth<'_>]) -> String {
    let what = match health.iter().find(|h| !h.healthy) {
        Some(h) => format!(
            "waiting for {}: {}",
            h.name,
            h.problem.as_deref().unwrap_or("not healthy")
        ),
        None => "every canary is healthy; waiting for minSuccessSeconds".into(),
    };
    step_message(spec, canary.step, canary.percent, &what)
}

/// The step at `index` starts now.
fn next_step(input: &Input<'_>, previous: &RolloutStatus, index: usize, stable: String) -> Course {
    let percent = steps(input.spec).get(index).copied().unwrap_or(100);
    let number = u32::try_from(index + 1).unwrap_or(u32::MAX);
    let mut status = previous.clone();
    status.progress = format!("{percent}%");
    status.canary = Some(CanaryStatus {
        phase: CanaryPhase::Stepping,
        step: number,
        percent,
        since: timestamp(input.now),
        healthy_since: String::new(),
    });
    let message = step_message(input.spec, number, percent, "starting");
    Course {
        status,
        render: Render::Split { stable, percent },
        reason: RolloutReason::Progressing,
        events: vec![(RolloutEvent::CanaryStep, message.clone())],
        message,
        recheck_after: Some(gates(input.spec).progress_deadline_seconds),
    }
}

/// The last step held: the promotion starts now.
fn promote(input: &Input<'_>, previous: &RolloutStatus, canary: &CanaryStatus) -> Course {
    let mut status = previous.clone();
    status.canary = Some(CanaryStatus {
        phase: CanaryPhase::Promoting,
        since: timestamp(input.now),
        healthy_since: String::new(),
        ..canary.clone()
    });
    let message = promoting_message(previous);
    Course {
        status,
        render: Render::Promote,
        reason: RolloutReason::Progressing,
        events: vec![(RolloutEvent::CanaryStep, message.clone())],
        message,
        recheck_after: None,
    }
}

fn promoting_message(previous: &RolloutStatus) -> String {
    format!(
        "promoting revision {}: the stable Deployments take the new template and their full split",
        previous.target_revision
    )
}

/// A step failed: `Rollback` removes the canaries and restores the stable split, `Halt`
/// holds the step.
fn fail(
    input: &Input<'_>,
    previous: &RolloutStatus,
    canary: &CanaryStatus,
    stable: String,
    failed: &[(String, String)],
) -> Course {
    let rollback = input.spec.on_failure == OnFailure::Rollback;
    let phase = if rollback {
        CanaryPhase::RolledBack
    } else {
        CanaryPhase::Failed
    };
    let mut status = previous.clone();
    status.canary = Some(CanaryStatus {
        phase,
        since: timestamp(input.now),
        healthy_since: String::new(),
        ..canary.clone()
    });
    status.clusters = (failed.iter())
        .map(|(name, why)| ClusterRollout {
            name: name.clone(),
            state: ClusterRolloutState::Failed,
            since: timestamp(input.now),
            message: why.clone(),
            ..ClusterRollout::default()
        })
        .collect();
    if rollback {
        status.rolled_back_to = Some(stable.clone());
    }
    let (reason, event, render) = if rollback {
        let render = Render::Stable {
            revision: stable.clone(),
        };
        (
            RolloutReason::RolledBack,
            RolloutEvent::RolloutRolledBack,
            render,
        )
    } else {
        let render = Render::Split {
            stable,
            percent: canary.percent,
        };
        (RolloutReason::Failed, RolloutEvent::RolloutFailed, render)
    };
    let message = failed_message(&status);
    Course {
        status,
        render,
        reason,
        events: vec![(event, message.clone())],
        message,
        recheck_after: None,
    }
}

/// The message of a stopped canary, from its stored status.
fn failed_message(status: &RolloutStatus) -> String {
    let Some(c) = &status.canary else {
        return String::new();
    };
    let clusters: Vec<String> = (status.clusters.iter())
        .filter(|e| e.state == ClusterRolloutState::Failed)
        .map(|e| format!("cluster {} failed: {}", e.name, e.message))
        .collect();
    let after = match &status.rolled_back_to {
        Some(to) if c.phase == CanaryPhase::RolledBack => {
            format!("; rolled back to revision {to} (canaries removed)")
        }
        _ => "; held at this step".into(),
    };
    format!(
        "the canary failed at {}% (step {}): {}{after}",
        c.percent,
        c.step,
        clusters.join("; ")
    )
}

/// A stopped canary (Failed or RolledBack) stays so until the template changes.
fn stopped(previous: &RolloutStatus, reason: RolloutReason) -> Course {
    Course {
        status: previous.clone(),
        render: Render::Promote,
        reason,
        message: failed_message(previous),
        events: Vec::new(),
        recheck_after: None,
    }
}

/// Promoting: complete once every stable Deployment is healthy on the target.
fn promoting(input: &Input<'_>, previous: &RolloutStatus) -> Course {
    if input.clusters.iter().all(|c| c.stable.is_ok()) {
        let mut c = complete(input, Some(previous));
        c.status.target_generation = previous.target_generation;
        return c;
    }
    let waiting = input.clusters.iter().find_map(|c| match &c.stable {
        Err(why) => Some(format!("; waiting for {}: {why}", c.name)),
        Ok(()) => None,
    });
    Course {
        status: previous.clone(),
        render: Render::Promote,
        reason: RolloutReason::Progressing,
        message: format!(
            "{}{}",
            promoting_message(previous),
            waiting.unwrap_or_default()
        ),
        events: Vec::new(),
        recheck_after: None,
    }
}

#[cfg(test)]
#[path = "canary_flow_tests.rs"]
mod tests;
