//! The member writes of a live reconcile: the facts every cluster's write needs
//! ([`WriteContext`]), one operation decided per cluster (all clusters at once, see
//! [`MemberWrites::propagate`]) and carrying out the operation decided for one cluster — at
//! once for a report or nothing, through the Work inventory for a Pull cluster, or as a
//! member write that may outlive the reconcile ([`super::inflight`]), remembered with the
//! version it was decided on ([`super::plan::lag`]).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use kube::core::DynamicObject;

use super::{
    Key, SyncShared,
    deletion::no_client,
    dispatch::{MemberOp, MemberRef},
    drift::{self, DriftContext, DriftRound},
    inflight::{self, Detachable, Earlier, InFlight, Remember, Written},
    memory::RecentWrites,
    plan::{
        self, DesiredFor, DesiredSet, Observed, Op, Outcome,
        lag::{Basis, LastOp},
    },
    pull::Works,
    reconcile::earliest,
    type_info::TypeInfo,
};
use crate::multicluster::ClusterState;

/// The results of one propagation round over every cluster.
#[derive(Default)]
pub(super) struct Round {
    pub outcomes: BTreeMap<String, Outcome>,
    /// Clusters whose cache is still listing (look again soon), and whether each is selected.
    pub waiting: BTreeMap<String, bool>,
    /// The earliest time a lagging cache should be looked at again.
    pub recheck: Option<Duration>,
    /// Member objects another writer changed, and the clusters looked at.
    pub drift: DriftRound,
    /// `status.drift` after this round.
    pub drift_status: Vec<flotilla_api::drift::ClusterDrift>,
    /// Clusters whose write goes on after this reconcile (see [`inflight`]).
    pub in_flight: BTreeSet<String>,
}

/// Per-reconcile facts every cluster's write needs.
pub(super) struct WriteContext<'a> {
    pub key: &'a Key,
    pub fed: &'a DynamicObject,
    pub desired: &'a DesiredSet,
    pub retain_replicas: bool,
    pub adopt: bool,
    pub recreate: bool,
    /// kubefed's `deleteoption` annotation, also used when a cluster is deselected.
    pub delete_params: kube::api::DeleteParams,
    /// The drift policy and what the drift check reads.
    pub drift: DriftContext<'a>,
}

/// What the member writes of one type need: the member write path (`shared`: permits,
/// circuit breakers, metrics), the type, the Pull clusters' Works, Flotilla's own recent
/// writes and the writes still in flight.
pub(super) struct MemberWrites<'a> {
    pub shared: &'a Arc<SyncShared>,
    pub ty: &'a TypeInfo,
    pub works: Works<'a>,
    pub recent: &'a Arc<RecentWrites>,
    pub inflight: &'a Arc<InFlight>,
}

impl MemberWrites<'_> {
    /// Decides and runs every cluster's operation, all clusters at once (`selected`: the
    /// clusters placement selects; `host_ns_uid`: the host's own namespace, never deleted).
    pub async fn propagate(
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
                let (host, ty) = (self.works.host, self.ty);
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
            drift::settle(self.shared, cx.fed, &cx.drift, found, outcomes, selected).await;
        round
    }

    /// Carries out the operation decided for one cluster (`job`: the cluster, whether it
    /// is selected, the operation, what it holds, and whether its write may outlive this
    /// reconcile); a member write waits on `detach` (see [`inflight`]).
    async fn run_cluster(
        &self,
        job: (&ClusterState, bool, Op, Observed, bool),
        cx: &WriteContext<'_>,
        detach: tokio::sync::watch::Receiver<bool>,
    ) -> (String, Written) {
        let (cluster, selected, op, observed, may_detach) = job;
        let name = cluster.name.clone();
        let object = match cx.desired.by_cluster.get(&name) {
            Some(DesiredFor::Object { object, .. }) => Some(object.clone()),
            _ => None,
        };
        if cluster.pull {
            let writes = matches!(op, Op::Create | Op::Update);
            let policy = &cx.drift.policy;
            let outcome = (self.works)
                .run(&name, selected, op, cx.key, object, policy)
                .await;
            if writes && outcome == Outcome::Ok {
                let op =
                    (cx.desired.hash(&name)).map(|h| (LastOp::Wrote(h.to_owned()), Basis::Hash));
                self.recent.remember(&name, cx.key, op);
            }
            return (name, Written::Now(outcome));
        }
        let now = |o| (name.clone(), Written::Now(o));
        let member_op = match (op, object) {
            (Op::Nothing, _) => return now(if selected { Outcome::Ok } else { Outcome::Gone }),
            (Op::Report(r, m), _) => return now(Outcome::Status(r, m)),
            (Op::Wait, _) | (Op::Create | Op::Update, None) => return now(Outcome::Gone),
            (Op::Create, Some(object)) => MemberOp::Create {
                object,
                adopt: cx.adopt,
            },
            (Op::Update, Some(object)) => {
                let object = if cx.retain_replicas {
                    plan::retain_replicas(object, &observed)
                } else {
                    object
                };
                let object = drift::keep_ignored(object, &observed, &cx.drift.policy);
                MemberOp::Update {
                    object,
                    recreate: cx.recreate,
                }
            }
            (Op::Delete, _) => MemberOp::Delete(cx.delete_params.clone()),
            (Op::Unlabel, _) => MemberOp::Unlabel,
        };
        let Some(client) = cluster.client.clone() else {
            return now(no_client());
        };
        let (m_ns, m_name) = self.ty.member_name(cx.key);
        let hash = || cx.desired.hash(&name).map(str::to_owned);
        let basis = || Basis::of(&observed);
        let remember = match &member_op {
            MemberOp::Create { .. } => Remember::Write(hash(), basis(), false),
            MemberOp::Update { .. } => Remember::Write(hash(), basis(), true),
            MemberOp::Delete(_) => Remember::Delete(basis()),
            MemberOp::Unlabel | MemberOp::CleanStray { .. } => Remember::Nothing,
        };
        let target = MemberRef {
            cluster: name.clone(),
            api: self.ty.member_api(client, m_ns),
            name: m_name.to_owned(),
        };
        let d = Detachable {
            shared: self.shared.clone(),
            inflight: self.inflight.clone(),
            recent: self.recent.clone(),
            key: cx.key.clone(),
            may_detach,
        };
        let written = inflight::write(d, target, member_op, remember, detach).await;
        (name, written)
    }
}
