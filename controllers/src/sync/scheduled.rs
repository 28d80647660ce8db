//! The scheduler inside the sync controller: for an object whose placement uses Flotilla's
//! scheduling fields, the clusters it goes to are the decision of
//! [`flotilla_core::schedule::decide`] instead of kubefed's placement. This module gathers
//! the decision's inputs (cluster facts, where the object is propagated, the stored
//! decision) and turns its result into `status.placement`, the `Scheduled` condition and
//! Events. An object without those fields never comes here: no decision, no condition.

use std::time::Duration;

use flotilla_api::federated::{FederatedCondition, FederatedStatus};
use flotilla_core::schedule::{Decision, ScheduleReason, moves::MoveReason};
use kube::{
    core::{ApiResource, DynamicObject},
    runtime::events::EventType,
};

use crate::decisions::{Published, Publisher};

use super::plan::decision::now;

/// The `Scheduled` condition's type.
pub const SCHEDULED: &str = "Scheduled";

/// What the status says about scheduling.
#[derive(Clone, Copy)]
pub(super) enum Scheduling<'a> {
    /// kubefed placement: nothing stored, no condition.
    Off,
    /// A decision was made.
    Decided(&'a Decision),
    /// No decision could be made this time (the placement failed): keep the stored one.
    Keep,
}

impl<'a> Scheduling<'a> {
    /// The decision when one was made; else keep the stored one when the placement is
    /// scheduled (or a decision is stored), else kubefed's placement.
    pub fn of(decision: Option<&'a Decision>, scheduled: bool) -> Self {
        match (decision, scheduled) {
            (Some(d), _) => Scheduling::Decided(d),
            (None, true) => Scheduling::Keep,
            (None, false) => Scheduling::Off,
        }
    }
}

/// An Event about a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedulingEvent {
    /// The decided clusters changed.
    Scheduled,
    /// A cluster is being left.
    Evicted,
    /// A cluster must be left but nothing can replace it: its copy stays.
    FailoverBlocked,
    /// A constraint cannot be met.
    Unschedulable,
}

impl SchedulingEvent {
    /// The Event reason.
    pub fn as_str(self) -> &'static str {
        match self {
            SchedulingEvent::Scheduled => "Scheduled",
            SchedulingEvent::Evicted => "Evicted",
            SchedulingEvent::FailoverBlocked => "FailoverBlocked",
            SchedulingEvent::Unschedulable => "Unschedulable",
        }
    }

    /// Normal or Warning.
    pub fn event_type(self) -> EventType {
        match self {
            SchedulingEvent::Scheduled | SchedulingEvent::Evicted => EventType::Normal,
            SchedulingEvent::FailoverBlocked | SchedulingEvent::Unschedulable => EventType::Warning,
        }
    }
}

/// Publishes the decision as PlacementDecisions (none when the object is not scheduled;
/// unchanged when no decision could be made this time); `fed_ar`: `fed`'s API.
pub(super) async fn publish(
    decisions: &Publisher,
    fed_ar: &ApiResource,
    fed: &DynamicObject,
    scheduling: Scheduling<'_>,
) {
    let published = match scheduling {
        Scheduling::Off => Published::None,
        Scheduling::Decided(d) => Published::Decided(&d.status),
        Scheduling::Keep => Published::Keep,
    };
    decisions.publish(fed_ar, fed, published).await;
}

/// How long until the decision must be made again, if ever.
pub fn recheck(decision: &Decision) -> Option<Duration> {
    decision.recheck_at.map(|at| {
        // One second more: a toleration that ends at `at` has ended by then.
        Duration::from_secs(u64::try_from(at - now()).unwrap_or(0) + 1)
    })
}

/// Puts the scheduling part into a freshly built status: `status.placement` and the
/// `Scheduled` condition (its times carried over while it does not change).
pub(super) fn apply(
    status: &mut FederatedStatus,
    scheduling: &Scheduling<'_>,
    previous: &FederatedStatus,
    now: &str,
) {
    match scheduling {
        Scheduling::Off => {}
        Scheduling::Keep => {
            status.placement = previous.placement.clone();
            status.conditions.extend(previous.scheduled().cloned());
        }
        Scheduling::Decided(d) => {
            status.placement = Some(d.status.clone());
            status
                .conditions
                .push(condition(d, previous.scheduled(), now));
        }
    }
}

fn condition(d: &Decision, prev: Option<&FederatedCondition>, now: &str) -> FederatedCondition {
    let status = if d.reason == ScheduleReason::Scheduled {
        "True"
    } else {
        "False"
    };
    FederatedCondition::updated(
        prev,
        SCHEDULED,
        status,
        d.reason.as_str().into(),
        d.message.clone(),
        now,
    )
}

/// The Events a decision warrants compared with the stored one.
pub fn events(previous: &FederatedStatus, d: &Decision) -> Vec<(SchedulingEvent, String)> {
    let mut out = Vec::new();
    let before = previous.placement.clone().unwrap_or_default();
    if before.clusters != d.status.clusters && !d.status.clusters.is_empty() {
        out.push((SchedulingEvent::Scheduled, d.message.clone()));
    }
    for m in &d.status.moves {
        let was = before.moves.iter().find(|p| p.cluster == m.cluster);
        if m.reason != MoveReason::Evicted.as_str()
            || was.is_some_and(|w| w.reason == m.reason && w.replacement == m.replacement)
        {
            continue;
        }
        match &m.replacement {
            Some(r) => out.push((
                SchedulingEvent::Evicted,
                format!(
                    "leaving {} ({}): its copy stays until {r} reports the object propagated",
                    m.cluster, m.message
                ),
            )),
            None => out.push((
                SchedulingEvent::FailoverBlocked,
                format!(
                    "{} must be left ({}) but no other cluster fits; its copy stays",
                    m.cluster, m.message
                ),
            )),
        }
    }
    let was_false = previous
        .scheduled()
        .is_some_and(|c| c.status == "False" && c.message == d.message);
    if d.reason == ScheduleReason::Unschedulable
        && !was_false
        && !out
            .iter()
            .any(|(e, _)| *e == SchedulingEvent::FailoverBlocked)
    {
        out.push((SchedulingEvent::Unschedulable, d.message.clone()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::plan::decision::stored_targets;
    use flotilla_api::federated::{ClusterReference, PlacementMove, PlacementStatus};

    fn decision(clusters: &[&str], moves: Vec<PlacementMove>, reason: ScheduleReason) -> Decision {
        Decision {
            status: PlacementStatus {
                clusters: clusters
                    .iter()
                    .map(|c| ClusterReference {
                        name: c.to_string(),
                    })
                    .collect(),
                moves,
            },
            reason,
            message: "m".into(),
            recheck_at: None,
        }
    }

    fn evicted(cluster: &str, replacement: Option<&str>) -> PlacementMove {
        PlacementMove {
            cluster: cluster.into(),
            reason: "Evicted".into(),
            replacement: replacement.map(Into::into),
            since: "2026-01-01T00:00:00Z".into(),
            message: "tainted drain:NoExecute".into(),
        }
    }

    #[test]
    fn the_condition_and_the_decision_go_into_the_status_and_keep_their_times() {
        let d = decision(&["a"], vec![], ScheduleReason::Scheduled);
        let mut status = FederatedStatus::default();
        apply(
            &mut status,
            &Scheduling::Decided(&d),
            &FederatedStatus::default(),
            "t1",
        );
        assert_eq!(status.placement, Some(d.status.clone()));
        let c = status.scheduled().expect("condition").clone();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "Scheduled")
        );
        let mut again = FederatedStatus::default();
        apply(&mut again, &Scheduling::Decided(&d), &status, "t2");
        assert_eq!(again.scheduled().expect("condition").last_update_time, "t1");
    }

    #[test]
    fn without_scheduling_nothing_is_added_and_keep_carries_the_stored_decision() {
        let mut status = FederatedStatus::default();
        apply(
            &mut status,
            &Scheduling::Off,
            &FederatedStatus::default(),
            "t",
        );
        assert_eq!(status, FederatedStatus::default());
        let d = decision(&["a"], vec![], ScheduleReason::Scheduled);
        let mut stored = FederatedStatus::default();
        apply(
            &mut stored,
            &Scheduling::Decided(&d),
            &FederatedStatus::default(),
            "t",
        );
        let mut kept = FederatedStatus::default();
        apply(&mut kept, &Scheduling::Keep, &stored, "t2");
        assert_eq!(kept, stored);
    }

    #[test]
    fn the_stored_targets_are_the_decided_clusters_and_the_copies_kept_for_moves() {
        let d = decision(
            &["b"],
            vec![evicted("a", Some("b"))],
            ScheduleReason::Scheduled,
        );
        let mut stored = FederatedStatus::default();
        apply(
            &mut stored,
            &Scheduling::Decided(&d),
            &FederatedStatus::default(),
            "t",
        );
        assert_eq!(
            stored_targets(&stored).into_iter().collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(stored_targets(&FederatedStatus::default()).is_empty());
    }

    #[test]
    fn events_follow_changes_only() {
        let first = decision(&["a", "b"], vec![], ScheduleReason::Scheduled);
        let kinds =
            |v: Vec<(SchedulingEvent, String)>| v.into_iter().map(|(e, _)| e).collect::<Vec<_>>();
        assert_eq!(
            kinds(events(&FederatedStatus::default(), &first)),
            [SchedulingEvent::Scheduled]
        );
        let mut stored = FederatedStatus::default();
        apply(
            &mut stored,
            &Scheduling::Decided(&first),
            &FederatedStatus::default(),
            "t",
        );
        assert!(events(&stored, &first).is_empty(), "nothing changed");
        let moving = decision(
            &["b", "c"],
            vec![evicted("a", Some("c"))],
            ScheduleReason::Scheduled,
        );
        assert_eq!(
            kinds(events(&stored, &moving)),
            [SchedulingEvent::Scheduled, SchedulingEvent::Evicted]
        );
        let blocked = decision(
            &["b"],
            vec![evicted("a", None)],
            ScheduleReason::Unschedulable,
        );
        assert_eq!(
            kinds(events(&stored, &blocked)),
            [SchedulingEvent::Scheduled, SchedulingEvent::FailoverBlocked]
        );
    }
}
