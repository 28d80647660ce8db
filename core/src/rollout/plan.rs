//! The rollout planner: from `spec.rollout`, the placed clusters (labels, whether each
//! holds the target revision and is healthy on it), the stored `status.rollout` and the
//! time, decide which clusters get the target revision now, each cluster's state, the
//! `Rollout` condition, the Events and when to look again. Pure: the state lives in the
//! stored status and in the member objects, so a restart plans the same.

use std::collections::{BTreeMap, BTreeSet};

use super::rollback::{self, Rollback};
use flotilla_api::rollout::{
    ClusterRollout, ClusterRolloutState as State, DEFAULT_PROGRESS_DEADLINE_SECONDS, OnFailure,
    RolloutReason, RolloutSpec, RolloutStatus,
};

/// One placed cluster as the planner sees it.
#[derive(Debug, Clone)]
pub struct ClusterInput<'a> {
    /// Cluster name.
    pub name: &'a str,
    /// Labels of its KubeFedCluster (for the groups).
    pub labels: &'a BTreeMap<String, String>,
    /// The member object holds the target revision's content.
    pub at_target: bool,
    /// On the target and healthy (propagated; a workload rolled out and ready).
    pub healthy: bool,
    /// Why it is not healthy, in the member's words (for a failure's message).
    pub problem: Option<String>,
    /// On the target and failed by its type's health rules: the cluster fails now, not
    /// at the progress deadline.
    pub failed: bool,
}

/// Everything a plan depends on.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    /// `spec.rollout`.
    pub spec: &'a RolloutSpec,
    /// The target revision (hash of the template and overrides).
    pub target: &'a str,
    /// The federated object's generation.
    pub generation: i64,
    /// The stored `status.rollout`.
    pub previous: Option<&'a RolloutStatus>,
    /// The placed clusters.
    pub clusters: &'a [ClusterInput<'a>],
    /// Now, in seconds since the epoch.
    pub now: i64,
}

/// An Event a plan warrants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutEvent {
    /// A new revision started rolling out.
    RolloutStarted,
    /// A wave started.
    WaveStarted,
    /// The rollout stopped on failures.
    RolloutFailed,
    /// Every cluster runs the target.
    RolloutComplete,
    /// `spec.rollout` is invalid: nothing moves.
    RolloutInvalid,
    /// The rollout stopped and its failed clusters went back to the stable revision.
    RolloutRolledBack,
    /// A canary moved to its next step, or to its promotion.
    CanaryStep,
}

impl RolloutEvent {
    /// The Event reason.
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutEvent::RolloutStarted => "RolloutStarted",
            RolloutEvent::WaveStarted => "WaveStarted",
            RolloutEvent::RolloutFailed => "RolloutFailed",
            RolloutEvent::RolloutComplete => "RolloutComplete",
            RolloutEvent::RolloutInvalid => "RolloutInvalid",
            RolloutEvent::RolloutRolledBack => "RolloutRolledBack",
            RolloutEvent::CanaryStep => "CanaryStep",
        }
    }

    /// Whether the Event is a Warning (else Normal).
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            RolloutEvent::RolloutFailed
                | RolloutEvent::RolloutInvalid
                | RolloutEvent::RolloutRolledBack
        )
    }
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The new `status.rollout`.
    pub status: RolloutStatus,
    /// The `Rollout` condition's reason (its status follows from it).
    pub reason: RolloutReason,
    /// The `Rollout` condition's message.
    pub message: String,
    /// Clusters that get (or keep) the target revision; every other placed cluster keeps
    /// what it has, but those of `rollback`.
    pub updated: BTreeSet<String>,
    /// With `onFailure: Rollback` once the rollout stopped: the failed clusters, which get
    /// the stable revision.
    pub rollback: Option<Rollback>,
    /// Seconds until a cluster's success or deadline comes due, if one is pending.
    pub recheck_after: Option<i64>,
    /// Events to publish.
    pub events: Vec<(RolloutEvent, String)>,
}

/// Plans one step of the rollout.
pub fn plan(input: &Input<'_>) -> Plan {
    let carried = input.previous.filter(|p| p.target_revision == input.target);
    let ordered = order(input.spec, input.clusters);
    let waves = ordered.iter().map(|(w, _)| *w).max().unwrap_or(0);
    let mut recheck = None;
    let mut entries: Vec<ClusterRollout> = ordered
        .iter()
        .map(|(wave, c)| {
            let prev = carried.and_then(|p| p.clusters.iter().find(|e| e.name == c.name));
            let (entry, due) = advance(input, prev, c, *wave);
            recheck = earliest(recheck, due);
            entry
        })
        .collect();
    let failures = count(&entries, State::Failed);
    let max_failures = usize::try_from(input.spec.max_failures.unwrap_or(0)).unwrap_or(0);
    let blocked = failures > max_failures;
    if !blocked && !input.spec.paused {
        let due = start_next(input, &mut entries);
        recheck = earliest(recheck, due);
    }
    let current_wave = current_wave(&entries, blocked);
    let succeeded = count(&entries, State::Succeeded);
    let stable_revision = stable(input.previous, input.target);
    let rollback = rollback::decide(
        input.spec,
        blocked,
        input.target,
        stable_revision.as_deref(),
        &entries,
    );
    let status = RolloutStatus {
        target_revision: input.target.to_string(),
        target_generation: carried.map_or(input.generation, |p| p.target_generation),
        stable_revision,
        start_time: carried.map_or_else(|| timestamp(input.now), |p| p.start_time.clone()),
        current_wave,
        waves,
        progress: format!("{succeeded}/{}", entries.len()),
        clusters: entries,
        rolled_back_to: rollback
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .map(|r| r.to.clone()),
        canary: None,
    };
    let (reason, message) = condition(input.spec, &status, blocked, &rollback);
    let events = events(carried, &status, reason, &message, max_failures);
    let rollback = rollback.ok().flatten();
    let updated = updated(&status.clusters, rollback.as_ref());
    Plan {
        status,
        reason,
        message,
        updated,
        rollback,
        recheck_after: recheck.map(|r: i64| r.max(1)),
        events,
    }
}

/// The wave the rollout stands at (0 when every wave is done): a stopped rollout stands at
/// its first failure.
fn current_wave(entries: &[ClusterRollout], blocked: bool) -> u32 {
    entries
        .iter()
        .filter(|e| match e.state {
            State::Failed => blocked,
            State::Pending | State::Progressing => true,
            State::Succeeded => false,
        })
        .map(|e| e.wave)
        .min()
        .unwrap_or(0)
}

/// The clusters that get the new revision: every started one but those rolled back.
fn updated(entries: &[ClusterRollout], rollback: Option<&Rollback>) -> BTreeSet<String> {
    entries
        .iter()
        .filter(|e| e.state.is_started())
        .filter(|e| !rollback.is_some_and(|r| r.clusters.contains(&e.name)))
        .map(|e| e.name.clone())
        .collect()
}

/// The placed clusters in rollout order with their wave (from 1): by group (clusters in no
/// group last), then by name; empty groups make no wave.
fn order<'a, 'b>(
    spec: &RolloutSpec,
    clusters: &'b [ClusterInput<'a>],
) -> Vec<(u32, &'b ClusterInput<'a>)> {
    let group_of = |c: &ClusterInput<'_>| {
        spec.groups
            .iter()
            .position(|g| {
                flotilla_api::selector::matches_selector(&g.selector, c.labels).unwrap_or(false)
            })
            .unwrap_or(spec.groups.len())
    };
    let mut by_group: Vec<(usize, &ClusterInput<'a>)> =
        clusters.iter().map(|c| (group_of(c), c)).collect();
    by_group.sort_by(|a, b| (a.0, a.1.name).cmp(&(b.0, b.1.name)));
    let mut wave = 0u32;
    let mut last_group = None;
    by_group
        .into_iter()
        .map(|(group, c)| {
            if last_group != Some(group) {
                wave += 1;
                last_group = Some(group);
            }
            (wave, c)
        })
        .collect()
}

/// A cluster's new entry from its stored one and what the member shows, and when it comes
/// due (success or deadline) in seconds.
fn advance(
    input: &Input<'_>,
    prev: Option<&ClusterRollout>,
    c: &ClusterInput<'_>,
    wave: u32,
) -> (ClusterRollout, Option<i64>) {
    let now = input.now;
    let base = ClusterRollout {
        name: c.name.to_string(),
        wave,
        ..ClusterRollout::default()
    };
    let prev_state = prev.map_or(State::Pending, |p| p.state);
    if prev_state == State::Succeeded {
        let kept = prev.cloned().unwrap_or_default();
        return (ClusterRollout { wave, ..kept }, None);
    }
    if prev_state == State::Pending && !c.at_target {
        let since = prev.map_or_else(|| timestamp(now), |p| p.since.clone());
        return (ClusterRollout { since, ..base }, None);
    }
    // Started: given the target now or earlier.
    let since = prev
        .filter(|p| p.state.is_started())
        .map_or_else(|| timestamp(now), |p| p.since.clone());
    let started_at = seconds(&since).unwrap_or(now);
    if c.healthy {
        return healthy(input, prev, since, base);
    }
    let deadline = input
        .spec
        .progress_deadline_seconds
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS);
    if prev_state == State::Failed || c.failed || now - started_at >= deadline {
        let entry = ClusterRollout {
            state: State::Failed,
            since,
            message: failure_message(input, prev, c, deadline),
            ..base
        };
        return (entry, None);
    }
    let entry = ClusterRollout {
        state: State::Progressing,
        since,
        ..base
    };
    (entry, Some(started_at + deadline - now))
}

/// A started cluster that the member shows healthy: Succeeded once healthy for
/// minSuccessSeconds, else Progressing until then (and when that comes due, in seconds).
fn healthy(
    input: &Input<'_>,
    prev: Option<&ClusterRollout>,
    since: String,
    base: ClusterRollout,
) -> (ClusterRollout, Option<i64>) {
    let now = input.now;
    let healthy_since = prev
        .map(|p| p.healthy_since.clone())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| timestamp(now));
    let healthy_at = seconds(&healthy_since).unwrap_or(now);
    let min_success = input.spec.min_success_seconds.unwrap_or(0);
    // Times are whole seconds: `healthy_at` stands for any instant of its second and
    // `now` for any of its own, so the difference overstates the time healthy by up to
    // a second. One more second makes minSuccessSeconds a lower bound.
    let needed = if min_success > 0 { min_success + 1 } else { 0 };
    if now - healthy_at >= needed {
        let entry = ClusterRollout {
            state: State::Succeeded,
            since: timestamp(now),
            ..base
        };
        return (entry, None);
    }
    let entry = ClusterRollout {
        state: State::Progressing,
        since,
        healthy_since,
        ..base
    };
    (entry, Some(healthy_at + needed - now))
}

/// Why a cluster failed: the stored reason when rolled back (the cluster no longer holds
/// the target), else the member's problem, else the deadline.
fn failure_message(
    input: &Input<'_>,
    prev: Option<&ClusterRollout>,
    c: &ClusterInput<'_>,
    deadline: i64,
) -> String {
    let rolled_back = input.spec.on_failure == OnFailure::Rollback && !c.at_target;
    let kept = prev
        .filter(|p| rolled_back && p.state == State::Failed && !p.message.is_empty())
        .map(|p| p.message.clone());
    kept.or_else(|| c.problem.clone())
        .unwrap_or_else(|| format!("not healthy within progressDeadlineSeconds ({deadline}s)"))
}

/// Starts Pending clusters of the current wave while fewer than `maxConcurrency` are
/// progressing; returns when the first started one's deadline comes due.
fn start_next(input: &Input<'_>, entries: &mut [ClusterRollout]) -> Option<i64> {
    let wave = entries
        .iter()
        .filter(|e| matches!(e.state, State::Pending | State::Progressing))
        .map(|e| e.wave)
        .min()?;
    // Clusters of later waves already on the target (given it out of turn) take no slot.
    let progressing = entries
        .iter()
        .filter(|e| e.wave <= wave && e.state == State::Progressing)
        .count();
    let mut slots = input
        .spec
        .concurrency(entries.len())
        .saturating_sub(progressing);
    let deadline = input
        .spec
        .progress_deadline_seconds
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS);
    let mut due = None;
    for e in entries
        .iter_mut()
        .filter(|e| e.wave == wave && e.state == State::Pending)
    {
        if slots == 0 {
            break;
        }
        slots -= 1;
        e.state = State::Progressing;
        e.since = timestamp(input.now);
        due = Some(deadline);
    }
    due
}

/// The last revision that reached every cluster, as of the stored status.
fn stable(previous: Option<&RolloutStatus>, target: &str) -> Option<String> {
    let p = previous?;
    // A rolled-back revision never becomes the stable one.
    if p.target_revision == target || p.rolled_back_to.is_some() {
        return p.stable_revision.clone();
    }
    let finished = !p.clusters.is_empty()
        && p.clusters
            .iter()
            .all(|c| matches!(c.state, State::Succeeded | State::Failed));
    if finished {
        Some(p.target_revision.clone())
    } else {
        p.stable_revision.clone()
    }
}

/// The `Rollout` condition: (reason, message).
fn condition(
    spec: &RolloutSpec,
    status: &RolloutStatus,
    blocked: bool,
    rollback: &Result<Option<Rollback>, String>,
) -> (RolloutReason, String) {
    let total = status.clusters.len();
    let names = |state: State| {
        status
            .clusters
            .iter()
            .filter(|c| c.state == state)
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
    };
    if blocked {
        let failed: Vec<String> = status
            .clusters
            .iter()
            .filter(|c| c.state == State::Failed)
            .map(|c| format!("cluster {} failed: {}", c.name, c.message))
            .collect();
        let note = format!(
            "rollout stopped at wave {}/{}: {} (maxFailures {}); the remaining clusters keep the previous version",
            status.current_wave,
            status.waves,
            failed.join("; "),
            spec.max_failures.unwrap_or(0)
        );
        return match rollback {
            Ok(Some(r)) => (
                RolloutReason::RolledBack,
                format!(
                    "{note}; the failed clusters went back to revision {}",
                    rollback::short(&r.to)
                ),
            ),
            Ok(None) => (RolloutReason::Failed, note),
            Err(why) => (
                RolloutReason::Failed,
                format!("{note}; onFailure Rollback: {why}"),
            ),
        };
    }
    if status.current_wave == 0 {
        let failed = names(State::Failed);
        let mut note = format!("{} of {total} clusters run the target", status.progress);
        if !failed.is_empty() {
            note.push_str(&format!(" ({} failed, tolerated)", failed.join(", ")));
        }
        return (RolloutReason::Complete, note);
    }
    let wave = format!("wave {}/{}", status.current_wave, status.waves);
    if spec.paused {
        let note = format!(
            "paused at {wave} ({} clusters done); remove spec.rollout.paused to continue",
            status.progress
        );
        return (RolloutReason::Paused, note);
    }
    let updating = names(State::Progressing);
    let note = format!(
        "{wave}: updating {} ({} clusters done)",
        updating.join(", "),
        status.progress
    );
    (RolloutReason::Progressing, note)
}

/// The Events of this step, compared with the stored status of the same target.
fn events(
    carried: Option<&RolloutStatus>,
    status: &RolloutStatus,
    reason: RolloutReason,
    message: &str,
    max_failures: usize,
) -> Vec<(RolloutEvent, String)> {
    let mut out = Vec::new();
    if status.clusters.is_empty() {
        return out;
    }
    let short = &status.target_revision[..status.target_revision.len().min(10)];
    if carried.is_none() {
        out.push((
            RolloutEvent::RolloutStarted,
            format!(
                "rolling out revision {short} to {} clusters in {} waves",
                status.clusters.len(),
                status.waves
            ),
        ));
    }
    let prev_wave = carried.map(|p| p.current_wave);
    if status.current_wave != 0
        && prev_wave != Some(status.current_wave)
        && !matches!(reason, RolloutReason::Failed | RolloutReason::RolledBack)
    {
        let members: Vec<&str> = status
            .clusters
            .iter()
            .filter(|c| c.wave == status.current_wave)
            .map(|c| c.name.as_str())
            .collect();
        out.push((
            RolloutEvent::WaveStarted,
            format!(
                "wave {}/{} of revision {short}: {}",
                status.current_wave,
                status.waves,
                members.join(", ")
            ),
        ));
    }
    let prev_failures = carried.map_or(0, |p| count(&p.clusters, State::Failed));
    if prev_failures <= max_failures {
        match reason {
            RolloutReason::Failed => out.push((RolloutEvent::RolloutFailed, message.to_string())),
            RolloutReason::RolledBack => {
                out.push((RolloutEvent::RolloutRolledBack, message.to_string()));
            }
            _ => {}
        }
    }
    let was_open = carried.is_none_or(|p| {
        p.clusters
            .iter()
            .any(|c| matches!(c.state, State::Pending | State::Progressing))
    });
    if reason == RolloutReason::Complete && was_open {
        out.push((RolloutEvent::RolloutComplete, message.to_string()));
    }
    out
}

fn count(entries: &[ClusterRollout], state: State) -> usize {
    entries.iter().filter(|e| e.state == state).count()
}

fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// RFC 3339 of a time in seconds since the epoch.
pub fn timestamp(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Seconds since the epoch of an RFC 3339 time.
pub fn seconds(rfc3339: &str) -> Option<i64> {
    rfc3339
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(|t| t.as_second())
}
