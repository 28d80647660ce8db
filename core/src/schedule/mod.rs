//! The scheduler (Flotilla extension): which of the candidate clusters a federated object
//! goes to when its placement sets `maxClusters`, `spreadConstraints`, `preferences`,
//! `tolerations` or `failover`. A pure function of the clusters, the placement, the
//! previous decision (read back from `status.placement`, which makes decisions sticky and
//! survive restarts), where the object is propagated, and the time.
//!
//! Order: filter (candidates, taints and tolerations, Ready) → keep the previous decision
//! where it still fits → spread and `maxClusters` → preferences → name. Leaving a cluster
//! is a move ([`moves`]): the replacement is chosen first and the old copy is only let go
//! once the replacement is propagated, or after the grace period while another copy is
//! propagated; a cluster evicted with no replacement is kept and the object is
//! Unschedulable. No I/O, no clock.

pub mod choose;
pub mod moves;

use std::collections::{BTreeMap, BTreeSet};

use crate::taint::{TaintVerdict, verdict};
use choose::{Candidate, Limits};
use flotilla_api::{
    federated::{ClusterReference, Placement, PlacementMove, PlacementStatus},
    selector::{PlacementError, matches_selector},
    taint::Taint,
};

/// Default `failover.gracePeriodSeconds`.
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 600;

/// A registered cluster as the scheduler sees it.
#[derive(Debug, Clone, Copy)]
pub struct ClusterFacts<'a> {
    /// Name of the KubeFedCluster.
    pub name: &'a str,
    /// Its labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Its `spec.taints`.
    pub taints: &'a [Taint],
    /// Whether its health check says Ready.
    pub ready: bool,
}

/// Everything one decision depends on.
pub struct Input<'a> {
    /// The object's placement.
    pub placement: &'a Placement,
    /// The clusters kubefed's placement selects (names or selector, ∩ namespace placement).
    pub candidates: &'a BTreeSet<String>,
    /// Every registered cluster.
    pub clusters: &'a [ClusterFacts<'a>],
    /// The previous decision, from `status.placement`.
    pub previous: Option<&'a PlacementStatus>,
    /// Clusters where the object is propagated (and, with status collection, available).
    pub propagated: &'a BTreeSet<String>,
    /// Toleration of the unreachable taint for objects that list none.
    pub default_unreachable_seconds: i64,
    /// Now, in Unix seconds.
    pub now: i64,
}

/// Why the `Scheduled` condition is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleReason {
    /// Every constraint is met (condition True).
    Scheduled,
    /// A constraint cannot be met, or an evicted cluster has no replacement (False).
    Unschedulable,
}

impl ScheduleReason {
    /// The reason as written in the condition.
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleReason::Scheduled => "Scheduled",
            ScheduleReason::Unschedulable => "Unschedulable",
        }
    }
}

/// The scheduler's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What to store in `status.placement`.
    pub status: PlacementStatus,
    /// The `Scheduled` condition's reason.
    pub reason: ScheduleReason,
    /// Its message: what is missing, or where the object goes.
    pub message: String,
    /// When (Unix seconds) to decide again even if nothing changes: a toleration or a grace
    /// period ends.
    pub recheck_at: Option<i64>,
}

impl Decision {
    /// The clusters that must hold the object: see [`targets`].
    pub fn targets(&self) -> BTreeSet<String> {
        targets(&self.status)
    }
}

/// The clusters a decision holds the object in: the decided ones and those whose copy is
/// kept until a move completes.
pub fn targets(status: &PlacementStatus) -> BTreeSet<String> {
    status
        .clusters
        .iter()
        .map(|c| c.name.clone())
        .chain(
            status
                .moves
                .iter()
                .filter(|m| m.reason == moves::MoveReason::Evicted.as_str())
                .map(|m| m.cluster.clone()),
        )
        .collect()
}

/// Whether a cluster may keep an object it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stay {
    /// It may.
    Yes,
    /// The placement no longer selects it (the user's choice: no need to hold on to it).
    Deselected(String),
    /// A NoExecute taint it does not tolerate (any more): a failover.
    Evicted(String),
}

/// Whether a cluster may keep or take the object.
#[derive(Debug, Clone)]
pub struct Fit<'a> {
    /// The cluster for the chooser.
    pub candidate: Candidate<'a>,
    /// May keep the object it has.
    pub stay: Stay,
    /// May take the object anew.
    pub new: bool,
    /// When a tolerated NoExecute taint runs out.
    pub evict_at: Option<i64>,
}

fn fit<'a>(c: &ClusterFacts<'a>, input: &Input<'_>, scores: i64) -> Fit<'a> {
    let p = input.placement;
    let groups = choose::group_values(c.labels, &p.spread_constraints);
    let v = verdict(
        c.taints,
        &p.tolerations,
        input.default_unreachable_seconds,
        input.now,
    );
    let selected = input.candidates.contains(c.name);
    let stay = match (&v, selected, &groups) {
        (_, false, _) => Stay::Deselected("no longer selected by the placement".to_string()),
        (_, _, None) => {
            Stay::Deselected("lacks a topology label of the spread constraints".to_string())
        }
        (TaintVerdict::Evict { taint }, _, _) => Stay::Evicted(format!("tainted {taint}")),
        _ => Stay::Yes,
    };
    let new =
        stay == Stay::Yes && c.ready && matches!(v, TaintVerdict::Fits | TaintVerdict::Disfavoured);
    let evict_at = match v {
        TaintVerdict::NoNewPlacement { evict_at, .. } => evict_at,
        _ => None,
    };
    Fit {
        candidate: Candidate {
            name: c.name,
            groups: groups.unwrap_or_default(),
            score: scores,
            disfavoured: v == TaintVerdict::Disfavoured,
        },
        stay,
        new,
        evict_at,
    }
}

/// Total preference weight of each cluster.
fn scores(input: &Input<'_>) -> Result<Vec<i64>, PlacementError> {
    input
        .clusters
        .iter()
        .map(|c| {
            input
                .placement
                .preferences
                .iter()
                .try_fold(0i64, |sum, pref| {
                    Ok(if matches_selector(&pref.selector, c.labels)? {
                        sum + i64::from(pref.weight)
                    } else {
                        sum
                    })
                })
        })
        .collect()
}

/// Decides where the object goes. An error is a preference selector that cannot be
/// evaluated.
pub fn decide(input: &Input<'_>) -> Result<Decision, PlacementError> {
    let scores = scores(input)?;
    let fits: BTreeMap<&str, Fit<'_>> = input
        .clusters
        .iter()
        .zip(scores)
        .map(|(c, s)| (c.name, fit(c, input, s)))
        .collect();
    let empty = PlacementStatus::default();
    let previous = input.previous.unwrap_or(&empty);
    let limits = Limits {
        max_clusters: input
            .placement
            .max_clusters
            .map_or(usize::MAX, |m| m as usize),
        spread: &input.placement.spread_constraints,
    };
    let plan = moves::plan(previous, &fits, &limits);
    let mut pool: Vec<Candidate<'_>> = fits
        .values()
        .filter(|f| f.new && !plan.excludes(f.candidate.name))
        .map(|f| f.candidate.clone())
        .collect();
    choose::rank(&mut pool);
    let choice = choose::fill(&plan.kept, &pool, &limits);
    let outcome = moves::settle(plan, choice, input);
    let recheck_at = outcome
        .status
        .clusters
        .iter()
        .filter_map(|c| fits.get(c.name.as_str()).and_then(|f| f.evict_at))
        .chain(outcome.grace_ends)
        .min();
    Ok(Decision {
        status: outcome.status,
        reason: outcome.reason,
        message: outcome.message,
        recheck_at,
    })
}

/// Names as `ClusterReference`s.
pub(crate) fn references(names: impl IntoIterator<Item = String>) -> Vec<ClusterReference> {
    names
        .into_iter()
        .map(|name| ClusterReference { name })
        .collect()
}

/// A new move record.
pub(crate) fn new_move(
    cluster: &str,
    reason: moves::MoveReason,
    replacement: Option<String>,
    since: String,
    message: String,
) -> PlacementMove {
    PlacementMove {
        cluster: cluster.to_string(),
        reason: reason.as_str().to_string(),
        replacement,
        since,
        message,
    }
}

#[cfg(test)]
mod tests;
