//! The stages of one reconcile that [`super::ctl`] orchestrates and that are neither a
//! decision ([`super::plan`]) nor a member write ([`super::cluster_run`]): a
//! FederatedNamespace not named after its namespace, the host namespace's UID when a
//! namespace is about to go, the Events of dropped template metadata, and the report of a
//! live round — its status, its Events, its scheduling decision and the action. Each takes
//! only what it reads.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use flotilla_api::{
    AggregateReason,
    federated::{FederatedSpec, FederatedStatus},
};
use flotilla_core::schedule::Decision;
use kube::{Client, ResourceExt, core::DynamicObject, runtime::events::EventType};
use serde_json::Value;
use tracing::warn;

use super::{
    Key,
    action::{Action, Error},
    cluster_run::Round,
    dependencies::DependencyRound,
    finalizer::{self, has_finalizer},
    host::host_namespace_uid,
    plan::{self, DesiredSet, Observed},
    rollout::{self, RolloutRound},
    scheduled::{self, Scheduling},
    status::{Events, StatusUpdate, StatusWriter},
    twins,
    type_info::TypeInfo,
};
use crate::{decisions::Publisher, multicluster::ClusterState};

/// How soon to look again at a FederatedNamespace not named after its namespace that is
/// being deleted, when dropping its finalizer failed.
const INVALID_NAME_RECHECK: Duration = Duration::from_secs(5);

/// A FederatedNamespace must be named after its namespace (kubefed's rule): any other
/// is ignored with an `InvalidName` event. Its member counterpart is named after the
/// namespace, so a finalizer left from an earlier version is simply dropped.
pub(super) async fn invalid_namespace_name(
    host: &Client,
    ty: &TypeInfo,
    events: Events<'_>,
    fed: &DynamicObject,
) -> Result<Action, Error> {
    if fed.metadata.deletion_timestamp.is_some() {
        if has_finalizer(fed)
            && let Err(e) = finalizer::remove(host, ty, fed).await
        {
            warn!(error = %e, "removing the sync finalizer failed");
            return Ok(Action::Requeue(INVALID_NAME_RECHECK));
        }
        return Ok(Action::AwaitChange);
    }
    let ns = fed.namespace().unwrap_or_default();
    warn!(name = %fed.name_any(), namespace = %ns, "ignoring a FederatedNamespace not named after its namespace");
    let note = format!(
        "a FederatedNamespace must be named after its namespace: rename {} to {ns}; it is ignored",
        fed.name_any()
    );
    (events.publish(fed, EventType::Warning, "InvalidName", note)).await;
    Ok(Action::AwaitChange)
}

/// A namespace about to be removed from a member might be the host's own (the host
/// joined as a member): its UID is looked up only then.
pub(super) async fn host_uid_if_removing(
    host: &Client,
    ty: &TypeInfo,
    key: &Key,
    snapshot: &[ClusterState],
    observed: &[Observed],
    selected: &BTreeSet<String>,
) -> Result<Option<String>, Error> {
    let removing = snapshot
        .iter()
        .zip(observed)
        .any(|(c, o)| !selected.contains(&c.name) && matches!(o, Observed::Present(_)));
    if removing {
        host_namespace_uid(host, ty, key).await
    } else {
        Ok(None)
    }
}

/// Template metadata Flotilla does not propagate is announced once per generation.
pub(super) async fn announce_dropped_metadata(
    events: Events<'_>,
    fed: &DynamicObject,
    desired: &DesiredSet,
) {
    if desired.dropped_annotations {
        let note = "template metadata.annotations are not propagated (use an override to set member annotations)";
        let reason = "AnnotationsNotSupported";
        (events.publish(fed, EventType::Warning, reason, note.into())).await;
    }
    if desired.dropped_finalizers {
        let note = "template metadata.finalizers are not propagated";
        let reason = "FinalizersNotSupported";
        (events.publish(fed, EventType::Warning, reason, note.into())).await;
    }
}

/// What one live round found and decided, for its report.
pub(super) struct LiveRound<'a> {
    pub previous: &'a FederatedStatus,
    pub generation: i64,
    pub spec: &'a FederatedSpec,
    /// The registry snapshot the round read.
    pub snapshot: &'a [ClusterState],
    pub desired: &'a DesiredSet,
    /// Why placement failed, if it did.
    pub aggregate: Option<(AggregateReason, String)>,
    pub decision: Option<&'a Decision>,
    /// The message of a twin conflict this object wins.
    pub conflict: Option<String>,
    pub rollout: Option<&'a RolloutRound>,
    pub dependencies: DependencyRound,
    /// Each member object's `status` (status collection).
    pub remote: BTreeMap<String, Value>,
    /// Each member object's spec and generation (summed workload status).
    pub member_specs: plan::aggregate::MemberSpecs,
    pub round: Round,
}

/// What reporting a live round needs: the status writer (and its Events), the
/// PlacementDecision publisher, the control-plane namespace.
pub(super) struct Reporter<'a> {
    pub status: StatusWriter<'a>,
    pub decisions: &'a Publisher,
    pub namespace: &'a str,
}

impl Reporter<'_> {
    /// Writes the round's status (unless a write is still in flight), publishes its
    /// Events and scheduling decision; the action the round ends with.
    pub async fn report(&self, fed: &DynamicObject, live: LiveRound<'_>) -> Action {
        let LiveRound {
            previous,
            generation,
            spec,
            snapshot,
            desired,
            aggregate,
            decision,
            conflict,
            rollout,
            dependencies,
            mut remote,
            member_specs,
            mut round,
        } = live;
        let backoff = plan::needs_backoff(round.outcomes.values());
        let placement = aggregate.is_none().then_some(&spec.placement);
        Unsettled::new(previous, snapshot, placement, self.namespace)
            .report(&mut round, &mut remote);
        let summary = (&member_specs, desired, &remote, previous);
        let ty = self.status.ty;
        let aggregated = (ty.health.as_deref()).map(|h| summarize(h, &round, summary));
        let scheduling = Scheduling::of(decision, spec.placement.is_scheduled());
        let events = self.status.events;
        if let Some(message) = &conflict {
            twins::announce_conflict(events, fed, message).await;
        }
        let update = StatusUpdate {
            previous,
            outcomes: &round.outcomes,
            aggregate: aggregate.or(conflict.map(|m| (AggregateReason::VersionConflict, m))),
            generation,
            remote: &remote,
            aggregated,
            scheduling,
            rollout,
            drift: Some(std::mem::take(&mut round.drift_status)),
            dependencies: dependencies.status,
        };
        // With a write still in flight the status waits for it (its landing queues this
        // object again), so it is written once, with every cluster's result.
        if round.in_flight.is_empty() {
            self.status.write(fed, update).await;
        }
        scheduled::publish(self.decisions, &ty.fed_ar, fed, scheduling).await;
        let announced = announce_steps(events, fed, previous, rollout, decision).await;
        round.recheck = earliest(earliest(round.recheck, announced), dependencies.recheck);
        plan::live_action(!round.waiting.is_empty(), backoff, round.recheck)
    }
}

/// The Events of a rollout's step and of a scheduling decision; when either wants to
/// be looked at again.
async fn announce_steps(
    events: Events<'_>,
    fed: &DynamicObject,
    previous: &FederatedStatus,
    rollout: Option<&RolloutRound>,
    decision: Option<&Decision>,
) -> Option<Duration> {
    let mut recheck = None;
    if let Some(r) = rollout {
        rollout::announce(events, fed, r).await;
        recheck = earliest(recheck, r.recheck);
    }
    if let Some(d) = decision {
        events.announce_decision(fed, previous, d).await;
        recheck = earliest(recheck, scheduled::recheck(d));
    }
    recheck
}

/// What a round's outcomes do not say by themselves: clusters whose cache is still listing
/// keep their previous status and are reported syncing; clusters the placement names that
/// are not registered are reported (unless placement itself failed).
struct Unsettled<'a> {
    previous: &'a FederatedStatus,
    registered: BTreeSet<String>,
    unregistered: Option<Vec<String>>,
    namespace: &'a str,
}

impl<'a> Unsettled<'a> {
    /// `placement`: the placement whose unregistered clusters are reported (`None` when
    /// placement itself failed).
    fn new(
        previous: &'a FederatedStatus,
        snapshot: &[ClusterState],
        placement: Option<&flotilla_api::federated::Placement>,
        namespace: &'a str,
    ) -> Self {
        let registered: BTreeSet<String> = snapshot.iter().map(|c| c.name.clone()).collect();
        let unregistered = placement.map(|p| plan::unregistered_clusters(p, &registered));
        Unsettled {
            previous,
            registered,
            unregistered,
            namespace,
        }
    }

    fn report(self, round: &mut Round, remote: &mut BTreeMap<String, Value>) {
        if !round.waiting.is_empty() {
            plan::status::keep_previous(
                &mut round.outcomes,
                remote,
                self.previous,
                &self.registered,
            );
            plan::status::report_syncing(&mut round.outcomes, &round.waiting);
        }
        if let Some(unregistered) = self.unregistered {
            plan::status::report_unregistered(&mut round.outcomes, unregistered, self.namespace);
        }
    }
}

/// Each member object's `status`, when status collection is enabled.
pub(super) fn remote_statuses(
    collect_status: bool,
    snapshot: &[ClusterState],
    observed: &[Observed],
) -> BTreeMap<String, Value> {
    let mut remote = BTreeMap::new();
    if !collect_status {
        return remote;
    }
    for (c, o) in snapshot.iter().zip(observed) {
        if let Observed::Present(obj) = o
            && let Some(st) = obj.get("status").filter(|v| !v.is_null())
        {
            remote.insert(c.name.clone(), st.clone());
        }
    }
    remote
}

/// Each member object's spec and generation, for workloads whose status is summed
/// (`summed`).
pub(super) fn member_specs(
    summed: bool,
    snapshot: &[ClusterState],
    observed: &[Observed],
) -> plan::aggregate::MemberSpecs {
    if !summed {
        return Default::default();
    }
    let present = snapshot.iter().zip(observed).filter_map(|(c, o)| match o {
        Observed::Present(obj) => Some((c.name.as_str(), obj)),
        _ => None,
    });
    plan::aggregate::member_specs(present)
}

/// `status.aggregated` of a workload after a round (the previous one while a member lists).
fn summarize(
    health: &flotilla_core::health::TypeHealth,
    round: &Round,
    (members, desired, remote, previous): (
        &plan::aggregate::MemberSpecs,
        &DesiredSet,
        &BTreeMap<String, Value>,
        &FederatedStatus,
    ),
) -> flotilla_api::workload::AggregatedStatus {
    let now = plan::aggregate::aggregated(health, &round.outcomes, members, desired, remote);
    plan::aggregate::unless_listing(now, previous.aggregated.as_ref(), &round.waiting)
}

pub(super) fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
