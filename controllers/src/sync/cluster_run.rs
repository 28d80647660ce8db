//! One cluster's part of a live reconcile: the facts every cluster's write needs
//! ([`WriteContext`]) and carrying out the operation decided for one cluster — at once for
//! a report or nothing, through the Work inventory for a Pull cluster, or as a member write
//! that may outlive the reconcile ([`super::inflight`]), remembered with the version it was
//! decided on ([`super::plan::lag`]).

use flotilla_api::{
    RECREATE_ON_IMMUTABLE_ANNOTATION,
    federated::{FederatedSpec, FederatedStatus},
};
use kube::{ResourceExt, core::DynamicObject};

use super::{
    Key,
    ctl::Ctl,
    deletion::no_client,
    dispatch::{MemberOp, MemberRef},
    drift::{self, DriftContext},
    inflight::{self, Detachable, Remember, Written},
    plan::{
        self, DesiredFor, DesiredSet, Observed, Op, Outcome,
        lag::{Basis, LastOp},
    },
};
use crate::multicluster::ClusterState;

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

impl Ctl {
    pub(super) async fn write_context<'a>(
        &'a self,
        key: &'a Key,
        fed: &'a DynamicObject,
        spec: &FederatedSpec,
        desired: &'a DesiredSet,
        previous: &FederatedStatus,
    ) -> WriteContext<'a> {
        let policy = self.drift_policy(key, fed).await;
        WriteContext {
            key,
            fed,
            desired,
            retain_replicas: spec.retain_replicas,
            adopt: self.config().adopt_resources,
            recreate: fed
                .annotations()
                .get(RECREATE_ON_IMMUTABLE_ANNOTATION)
                .is_some_and(|v| v == "true"),
            delete_params: super::delete_options::of_object(fed),
            drift: DriftContext {
                ty: &self.ty,
                memory: &self.drift_memory,
                key,
                policy,
                retain_replicas: spec.retain_replicas,
                previous: drift::previous_drift(&self.written, key, fed, previous),
            },
        }
    }

    /// Carries out the operation decided for one cluster (`job`: the cluster, whether it
    /// is selected, the operation, what it holds, and whether its write may outlive this
    /// reconcile); a member write waits on `detach` (see [`inflight`]).
    pub(super) async fn run_cluster(
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
            let outcome = self
                .run_pull(&name, selected, op, cx.key, object, policy)
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
