//! One reconcile of one federated object: the entry branching (gone → strays, deleting →
//! deletion, no finalizer → add it, else sync) and the live path — placement, desired
//! objects, one decision per cluster, the member writes, and the status. Every decision is
//! a call into [`super::plan`]; this module only gathers inputs and carries out results.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use flotilla_api::{
    AggregateReason,
    federated::{FederatedSpec, FederatedStatus},
};
use kube::{ResourceExt, core::DynamicObject, runtime::events::EventType};
use serde_json::Value;
use tracing::{instrument, warn};

use super::{
    Key,
    action::{Action, Error},
    cluster_run::WriteContext,
    ctl::Ctl,
    dependencies,
    drift::{self, DriftRound},
    finalizer::{self, has_finalizer},
    inflight::{self, Earlier},
    plan::{self, DesiredSet, Observed, Op, Outcome, pipeline},
    rollout::{Members, RolloutRound},
    scheduled::{self, Scheduling},
    status::StatusUpdate,
    twins::{self, TwinCheck},
};
use crate::multicluster::ClusterState;

/// How soon to look again at a FederatedNamespace not named after its namespace that is
/// being deleted, when dropping its finalizer failed.
const INVALID_NAME_RECHECK: Duration = Duration::from_secs(5);

/// The results of one propagation round over every cluster.
#[derive(Default)]
struct Round {
    outcomes: BTreeMap<String, Outcome>,
    /// Clusters whose cache is still listing (look again soon), and whether each is selected.
    waiting: BTreeMap<String, bool>,
    /// The earliest time a lagging cache should be looked at again.
    recheck: Option<Duration>,
    /// Member objects another writer changed, and the clusters looked at.
    drift: DriftRound,
    /// `status.drift` after this round.
    drift_status: Vec<flotilla_api::drift::ClusterDrift>,
    /// Clusters whose write goes on after this reconcile (see [`inflight`]).
    in_flight: BTreeSet<String>,
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

impl Ctl {
    /// Reconciles one key.
    #[instrument(skip(self), fields(kind = %self.ty.fed_ar.kind))]
    pub(super) async fn reconcile(&self, key: &Key) -> Result<Action, Error> {
        let Some(fed) = self.host.federated(key) else {
            if self.host.twin(key).is_some() {
                // The member objects are the twin's (kubefed's alpha or v1beta1), not strays.
                return Ok(Action::AwaitChange);
            }
            return self.clean_strays(key).await;
        };
        if self.ty.is_namespace_type && key.0.as_deref() != Some(key.1.as_str()) {
            return self.invalid_namespace_name(&fed).await;
        }
        if fed.metadata.deletion_timestamp.is_some() {
            if twins::releases_on_delete(&self.ty, &fed, self.host.twin(key).as_deref()) {
                return self.release(&fed).await;
            }
            return self.ensure_deletion(key, &fed).await;
        }
        // A live object of this name again: an older orphaning deletion no longer decides.
        self.shared.orphans.forget(&self.ty.fed_ar.kind, key);
        if !has_finalizer(&fed) {
            let base = fed.resource_version().unwrap_or_default();
            if !self.finalizer_adds.lagging(key, &base) {
                finalizer::add(&self.shared.host, &self.ty, &fed).await?;
                self.finalizer_adds.remember(key.clone(), base);
            }
            // Propagation continues on the watch event of the patched object.
            return Ok(Action::AwaitChange);
        }
        let conflict = match twins::check(&self.ty, key, &fed, self.host.twin(key).as_deref()) {
            TwinCheck::Alone => None,
            TwinCheck::Yields(message) => return Ok(self.report_yielding(&fed, message).await),
            TwinCheck::Propagates(message) => Some(message),
        };
        Ok(self.sync(key, &fed, conflict).await)
    }

    /// A FederatedNamespace must be named after its namespace (kubefed's rule): any other
    /// is ignored with an `InvalidName` event. Its member counterpart is named after the
    /// namespace, so a finalizer left from an earlier version is simply dropped.
    async fn invalid_namespace_name(&self, fed: &DynamicObject) -> Result<Action, Error> {
        if fed.metadata.deletion_timestamp.is_some() {
            if has_finalizer(fed)
                && let Err(e) = finalizer::remove(&self.shared.host, &self.ty, fed).await
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
        self.event(fed, EventType::Warning, "InvalidName", note)
            .await;
        Ok(Action::AwaitChange)
    }

    /// The live path: bring every member in line with the federated object. `conflict`:
    /// the message of a twin conflict this object wins (it still propagates, and says so).
    async fn sync(&self, key: &Key, fed: &DynamicObject, conflict: Option<String>) -> Action {
        let previous = FederatedStatus::from_dynamic(fed);
        let generation = fed.metadata.generation.unwrap_or(0);
        let Some(spec) = self.spec_or_report(fed, &previous, generation).await else {
            return Action::AwaitChange;
        };
        let snapshot = self.shared.clusters.snapshot();
        let pipeline::Outcome {
            selected,
            decision,
            failure: aggregate,
            desired,
        } = self.pipeline(key, &spec, &previous, &snapshot);
        let observed: Vec<Observed> = snapshot.iter().map(|c| self.observe(c, key)).collect();
        let members = Members {
            snapshot: &snapshot,
            observed: &observed,
        };
        let mut desired = desired;
        let rollout = self
            .progressive(key, fed, &spec, members, &mut desired)
            .await;
        if generation != previous.observed_generation {
            self.announce_dropped_metadata(fed, &desired).await;
        }
        let mut remote = remote_statuses(self.ty.collect_status, &snapshot, &observed);
        let member_specs = member_specs(self.ty.health.is_some(), &snapshot, &observed);
        let removing = self.host_uid_if_removing(key, &snapshot, &observed, &selected);
        let Ok(host_ns_uid) = removing.await.inspect_err(|e| {
            warn!(error = %e, "reading the host namespace failed");
        }) else {
            return Action::Backoff { recheck: None };
        };
        let cx = self
            .write_context(key, fed, &spec, &desired, &previous)
            .await;
        let lands = dependencies::lands_on(&selected, &desired);
        let deps = (self.follow_dependencies(key, fed, &spec, &previous, &snapshot, &lands)).await;
        let mut round = self
            .propagate(&snapshot, observed, &selected, host_ns_uid.as_deref(), &cx)
            .await;
        let backoff = plan::needs_backoff(round.outcomes.values());
        let placement = aggregate.is_none().then_some(&spec.placement);
        Unsettled::new(&previous, &snapshot, placement, &self.shared.namespace)
            .report(&mut round, &mut remote);
        let summary = (&member_specs, &desired, &remote, &previous);
        let aggregated = self
            .ty
            .health
            .as_deref()
            .map(|h| summarize(h, &round, summary));
        let scheduling = Scheduling::of(decision.as_ref(), spec.placement.is_scheduled());
        if let Some(message) = &conflict {
            self.announce_conflict(fed, message).await;
        }
        let update = StatusUpdate {
            previous: &previous,
            outcomes: &round.outcomes,
            aggregate: aggregate.or(conflict.map(|m| (AggregateReason::VersionConflict, m))),
            generation,
            remote: &remote,
            aggregated,
            scheduling,
            rollout: rollout.as_ref(),
            drift: Some(std::mem::take(&mut round.drift_status)),
            dependencies: deps.status,
        };
        // With a write still in flight the status waits for it (its landing queues this
        // object again), so it is written once, with every cluster's result.
        if round.in_flight.is_empty() {
            self.write_status(fed, update).await;
        }
        scheduled::publish(&self.shared.decisions, &self.ty.fed_ar, fed, scheduling).await;
        let announced = self
            .announce_steps(fed, &previous, rollout.as_ref(), decision.as_ref())
            .await;
        round.recheck = earliest(earliest(round.recheck, announced), deps.recheck);
        plan::live_action(!round.waiting.is_empty(), backoff, round.recheck)
    }

    /// The federated object's spec; None (reported as malformed) when it does not parse.
    async fn spec_or_report(
        &self,
        fed: &DynamicObject,
        previous: &FederatedStatus,
        generation: i64,
    ) -> Option<FederatedSpec> {
        match FederatedSpec::from_dynamic(fed) {
            Ok(s) => Some(s),
            Err(e) => {
                self.report_malformed(fed, previous, generation, e.to_string())
                    .await;
                None
            }
        }
    }

    /// The Events of a rollout's step and of a scheduling decision; when either wants to
    /// be looked at again.
    async fn announce_steps(
        &self,
        fed: &DynamicObject,
        previous: &FederatedStatus,
        rollout: Option<&RolloutRound>,
        decision: Option<&flotilla_core::schedule::Decision>,
    ) -> Option<Duration> {
        let mut recheck = None;
        if let Some(r) = rollout {
            self.announce_rollout(fed, r).await;
            recheck = earliest(recheck, r.recheck);
        }
        if let Some(d) = decision {
            self.announce_decision(fed, previous, d).await;
            recheck = earliest(recheck, scheduled::recheck(d));
        }
        recheck
    }

    /// A spec that cannot be read: nothing is propagated, the status says why.
    async fn report_malformed(
        &self,
        fed: &DynamicObject,
        previous: &FederatedStatus,
        generation: i64,
        error: String,
    ) {
        let update = StatusUpdate {
            previous,
            outcomes: &BTreeMap::new(),
            aggregate: Some((AggregateReason::ComputePlacementFailed, error)),
            generation,
            remote: &BTreeMap::new(),
            aggregated: None,
            scheduling: Scheduling::of(None, previous.placement.is_some()),
            rollout: None,
            drift: None,
            dependencies: None,
        };
        self.write_status(fed, update).await;
    }

    /// Decides and runs every cluster's operation, all clusters at once.
    async fn propagate(
        &self,
        snapshot: &[ClusterState],
        observed: Vec<Observed>,
        selected: &BTreeSet<String>,
        host_ns_uid: Option<&str>,
        cx: &WriteContext<'_>,
    ) -> Round {
        let mut round = Round::default();
        let mut jobs = Vec::new();
        let (detach, signal) = inflight::detach_signal();
        for (cluster, observed) in snapshot.iter().zip(observed) {
            match self.inflight.earlier(&cluster.name, cx.key) {
                Earlier::Settled => {}
                Earlier::Pending => {
                    round.in_flight.insert(cluster.name.clone());
                    continue;
                }
                Earlier::Failed(outcome) => {
                    round.outcomes.insert(cluster.name.clone(), outcome);
                    continue;
                }
            }
            let is_selected = selected.contains(&cluster.name);
            let recent = self.recent.get(&cluster.name, cx.key);
            let protected = self.ty.is_protected(cx.key, &self.shared.namespace)
                || plan::is_host_namespace(&observed, host_ns_uid);
            let (op, recheck) = plan::cluster_op(
                is_selected,
                &observed,
                recent.as_ref(),
                cx.desired,
                &cluster.name,
                protected,
            );
            round.recheck = earliest(round.recheck, recheck);
            if op == Op::Wait {
                round.waiting.insert(cluster.name.clone(), is_selected);
                continue;
            }
            let op = if cluster.pull {
                let (host, ty) = (&self.host, &self.ty);
                super::pull_drift::pull_drift(host, ty, &cluster.name, cx.key, &mut round.drift);
                op
            } else {
                let (name, desired) = (&cluster.name, cx.desired);
                drift::check(name, op, &observed, desired, &cx.drift, &mut round.drift)
            };
            // A drift repair's result is this round's to report: it is always waited for.
            let may_detach = !round.drift.findings.contains_key(&cluster.name);
            let job = (cluster, is_selected, op, observed, may_detach);
            jobs.push(self.run_cluster(job, cx, signal.clone()));
        }
        drop(signal);
        let (outcomes, in_flight) = inflight::gather(jobs, detach).await;
        round.outcomes.extend(outcomes);
        round.in_flight.extend(in_flight);
        let (found, outcomes) = (&round.drift, &round.outcomes);
        round.drift_status =
            drift::settle(&self.shared, cx.fed, &cx.drift, found, outcomes, selected).await;
        round
    }

    /// A namespace about to be removed from a member might be the host's own (the host
    /// joined as a member): its UID is looked up only then.
    async fn host_uid_if_removing(
        &self,
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
            self.host_namespace_uid(key).await
        } else {
            Ok(None)
        }
    }

    /// Template metadata Flotilla does not propagate is announced once per generation.
    async fn announce_dropped_metadata(&self, fed: &DynamicObject, desired: &DesiredSet) {
        if desired.dropped_annotations {
            let note = "template metadata.annotations are not propagated (use an override to set member annotations)";
            self.event(
                fed,
                EventType::Warning,
                "AnnotationsNotSupported",
                note.into(),
            )
            .await;
        }
        if desired.dropped_finalizers {
            let note = "template metadata.finalizers are not propagated";
            self.event(
                fed,
                EventType::Warning,
                "FinalizersNotSupported",
                note.into(),
            )
            .await;
        }
    }
}

/// Each member object's `status`, when status collection is enabled.
fn remote_statuses(
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
fn member_specs(
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

fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
