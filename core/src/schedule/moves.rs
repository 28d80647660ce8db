//! Sticky decisions and graceful moves: which previously decided clusters stay, which
//! must be left, and when a left cluster's copy may go. A copy is let go only once its
//! replacement is propagated, or after the grace period while another decided cluster
//! holds a propagated copy — never the last copy. A cluster evicted with no replacement
//! keeps its copy and makes the object Unschedulable.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    DEFAULT_GRACE_PERIOD_SECONDS, Fit, Input, ScheduleReason, Stay,
    choose::{self, Candidate, Choice, Limits},
    new_move, references,
};
use crate::taint::{rfc3339, unix_seconds};
use flotilla_api::federated::{PlacementMove, PlacementStatus};

/// Why a cluster appears in `status.placement.moves`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveReason {
    /// The cluster must be left; its copy is kept until the move completes.
    Evicted,
    /// The move completed: the cluster's copy is removed.
    Replaced,
}

impl MoveReason {
    /// The reason as written in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            MoveReason::Evicted => "Evicted",
            MoveReason::Replaced => "Replaced",
        }
    }
}

/// A cluster to leave that needs a replacement.
#[derive(Debug, Clone)]
struct Leaving {
    cluster: String,
    why: String,
    /// When the move started (a move already under way keeps its start).
    since: Option<String>,
    /// Keep the copy when no replacement fits (an eviction, not a deselection).
    hold: bool,
}

/// The previous decision sorted out before new clusters are chosen.
pub struct Plan<'a> {
    /// Previously decided clusters that stay, in their order.
    pub kept: Vec<Candidate<'a>>,
    leaving: Vec<Leaving>,
    /// Moves under way whose replacement is still decided, and completed moves.
    carried: Vec<PlacementMove>,
}

impl Plan<'_> {
    /// Whether a cluster is already decided or being left (so not a new choice).
    pub fn excludes(&self, name: &str) -> bool {
        self.kept.iter().any(|k| k.name == name)
            || self.leaving.iter().any(|l| l.cluster == name)
            || self
                .carried
                .iter()
                .any(|m| m.cluster == name && m.reason == MoveReason::Evicted.as_str())
    }
}

/// Sorts the previous decision: what stays, what must be left, what is under way.
pub fn plan<'a>(
    previous: &PlacementStatus,
    fits: &BTreeMap<&str, Fit<'a>>,
    limits: &Limits<'_>,
) -> Plan<'a> {
    let mut kept = Vec::new();
    let mut leaving = Vec::new();
    for c in &previous.clusters {
        // A cluster no longer registered is simply gone: nothing to hold on to.
        let Some(f) = fits.get(c.name.as_str()) else {
            continue;
        };
        match &f.stay {
            Stay::Yes => kept.push(f.candidate.clone()),
            Stay::Deselected(why) | Stay::Evicted(why) => leaving.push(Leaving {
                cluster: c.name.clone(),
                why: why.clone(),
                since: None,
                hold: matches!(f.stay, Stay::Evicted(_)),
            }),
        }
    }
    let mut carried = Vec::new();
    for m in &previous.moves {
        let Some(f) = fits.get(m.cluster.as_str()) else {
            continue;
        };
        if m.reason == MoveReason::Replaced.as_str() {
            carried.push(m.clone());
            continue;
        }
        let replacement_decided = m
            .replacement
            .as_ref()
            .is_some_and(|r| kept.iter().any(|k: &Candidate<'_>| k.name == r));
        if replacement_decided {
            carried.push(m.clone());
        } else if m.replacement.is_none() && f.stay == Stay::Yes {
            // A blocked eviction whose cluster fits again: it simply stays.
            kept.push(f.candidate.clone());
        } else {
            leaving.push(Leaving {
                cluster: m.cluster.clone(),
                why: m.message.clone(),
                since: Some(m.since.clone()),
                hold: true,
            });
        }
    }
    let (kept, _dropped) = choose::trim(kept, limits);
    let kept_names: BTreeSet<&str> = kept.iter().map(|k| k.name).collect();
    carried.retain(|m| !kept_names.contains(m.cluster.as_str()));
    Plan {
        kept,
        leaving,
        carried,
    }
}

/// The settled decision before rechecks are added.
pub struct Outcome {
    /// What to store.
    pub status: PlacementStatus,
    /// The condition's reason.
    pub reason: ScheduleReason,
    /// The condition's message.
    pub message: String,
    /// When grace periods of moves under way end.
    pub grace_ends: Vec<i64>,
}

/// Pairs clusters being left with the new choices, completes moves whose replacement is
/// up, and says whether the object is scheduled.
pub fn settle(plan: Plan<'_>, choice: Choice, input: &Input<'_>) -> Outcome {
    let unmet = !choice.unmet.is_empty();
    let mut decided: Vec<String> = plan.kept.iter().map(|k| k.name.to_string()).collect();
    let added = if unmet { Vec::new() } else { choice.added };
    decided.extend(added.iter().cloned());
    let now = rfc3339(input.now);
    let mut moves = plan.carried;
    let mut blocked = Vec::new();
    for (i, l) in plan.leaving.into_iter().enumerate() {
        let replacement = added.get(i).cloned();
        if replacement.is_none() && !l.hold {
            continue;
        }
        if replacement.is_none() {
            blocked.push(format!(
                "{} must be left ({}) but no other cluster fits",
                l.cluster, l.why
            ));
        }
        let since = l.since.unwrap_or_else(|| now.clone());
        moves.push(new_move(
            &l.cluster,
            MoveReason::Evicted,
            replacement,
            since,
            l.why,
        ));
    }
    let grace = input
        .placement
        .failover
        .as_ref()
        .and_then(|f| f.grace_period_seconds)
        .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS);
    let another_copy = decided.iter().any(|d| input.propagated.contains(d));
    let mut grace_ends = Vec::new();
    for m in moves
        .iter_mut()
        .filter(|m| m.reason == MoveReason::Evicted.as_str())
    {
        let Some(r) = &m.replacement else { continue };
        let ends = unix_seconds(&m.since)
            .unwrap_or(input.now)
            .saturating_add(grace.max(0));
        if input.propagated.contains(r) || (ends <= input.now && another_copy) {
            m.reason = MoveReason::Replaced.as_str().to_string();
        } else {
            grace_ends.push(ends);
        }
    }
    moves.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    let (reason, message) = condition(&decided, &choice.unmet, &blocked);
    Outcome {
        status: PlacementStatus {
            clusters: references(decided),
            moves,
        },
        reason,
        message,
        grace_ends,
    }
}

fn condition(decided: &[String], unmet: &[String], blocked: &[String]) -> (ScheduleReason, String) {
    let problems: Vec<&str> = unmet.iter().chain(blocked).map(String::as_str).collect();
    if !problems.is_empty() {
        return (ScheduleReason::Unschedulable, problems.join("; "));
    }
    if decided.is_empty() {
        return (
            ScheduleReason::Unschedulable,
            "no candidate cluster fits (selector, taints, readiness)".to_string(),
        );
    }
    (
        ScheduleReason::Scheduled,
        format!("scheduled to {}", decided.join(", ")),
    )
}
