//! Deleting a federated object ([`super::finalizer`] holds it until then): each member
//! object is deleted (or only unlabelled: `kubefed.io/orphan`,
//! protected namespaces, the host's own namespace), unready clusters are waited for up to
//! the unready-cluster deletion timeout, and then (in [`super::ctl`]) the finalizer goes.
//! What happens per cluster is decided by [`super::plan::deletion`].

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use flotilla_api::{ORPHAN_ANNOTATION, core::EffectiveConfig, federated::FederatedStatus};
use futures::future::join_all;
use kube::{ResourceExt, api::DeleteParams, core::DynamicObject, runtime::events::EventType};
use tracing::warn;

use super::{
    Key, SyncShared,
    dispatch::{MemberOp, MemberRef, run_on_member},
    observe::Observer,
    plan::{
        Outcome,
        deletion::{self as plan, DeletionOp},
        is_host_namespace,
    },
    pull::Works,
    status::{Events, StatusUpdate, StatusWriter},
    type_info::TypeInfo,
};
use crate::multicluster::ClusterState;

/// Per-deletion facts shared by every cluster's decision.
pub(super) struct DeletionContext {
    /// Member objects are only unlabelled (`kubefed.io/orphan`, protected namespaces).
    pub keep: bool,
    deleted_for: Duration,
    timeout: Duration,
    timeout_text: String,
    may_hold: BTreeSet<String>,
    host_ns_uid: Option<String>,
    params: DeleteParams,
}

impl DeletionContext {
    /// The facts of deleting `fed` (`protected`: a namespace that is never deleted;
    /// `selected`: the clusters placement selects now, when the spec can be read;
    /// `host_ns_uid`: the host's own namespace).
    pub fn new(
        config: &EffectiveConfig,
        protected: bool,
        fed: &DynamicObject,
        previous: &FederatedStatus,
        selected: Option<BTreeSet<String>>,
        host_ns_uid: Option<String>,
    ) -> Self {
        let orphan = fed
            .annotations()
            .get(ORPHAN_ANNOTATION)
            .is_some_and(|v| v == "true");
        let deleted_for = fed
            .metadata
            .deletion_timestamp
            .as_ref()
            .map(|t| {
                let secs = k8s_openapi::jiff::Timestamp::now().as_second() - t.0.as_second();
                Duration::from_secs(secs.max(0).unsigned_abs())
            })
            .unwrap_or_default();
        // A cluster may hold the object if the last status lists it (propagated, failed or
        // pending) or the placement selects it now (a status write may have been lost).
        let mut may_hold: BTreeSet<String> =
            previous.clusters.iter().map(|c| c.name.clone()).collect();
        may_hold.extend(selected.into_iter().flatten());
        DeletionContext {
            keep: orphan || protected,
            deleted_for,
            timeout: config.unready_cluster_deletion_timeout,
            timeout_text: flotilla_api::duration::format(config.unready_cluster_deletion_timeout),
            may_hold,
            host_ns_uid,
            params: super::delete_options::of_object(fed),
        }
    }
}

/// Where the member objects of a deleted federated object stand after one pass.
pub(super) struct DeletionRound {
    /// Some cluster still holds (or may hold) a member object.
    pub pending: bool,
    /// Some member object is still being removed.
    pub held: bool,
    /// Clusters given up on after the timeout.
    pub abandoned: Vec<String>,
    /// When the next unready cluster's timeout runs out.
    pub next_deadline: Duration,
    /// Each cluster's outcome.
    pub outcomes: BTreeMap<String, Outcome>,
}

/// What deleting member objects reads and writes: the cluster set and the member write
/// path (`shared`), the type, what each member holds, the Pull clusters' Works.
pub(super) struct Deletion<'a> {
    pub shared: &'a SyncShared,
    pub ty: &'a TypeInfo,
    pub observer: Observer<'a>,
    pub works: Works<'a>,
}

impl Deletion<'_> {
    /// Removes (or orphans) the member objects of a federated object being deleted. A
    /// cluster that may hold the object but cannot answer is waited for up to the
    /// configured timeout; a cluster removed from the registry is not.
    pub async fn run(&self, key: &Key, cx: &DeletionContext) -> DeletionRound {
        let (m_ns, m_name) = self.ty.member_name(key);
        let mut round = DeletionRound {
            pending: false,
            held: false,
            abandoned: Vec::new(),
            next_deadline: cx.timeout,
            outcomes: BTreeMap::new(),
        };
        let mut jobs = Vec::new();
        for cluster in self.shared.clusters.snapshot() {
            let observed = self.observer.observe(&cluster, key);
            let keep = cx.keep || is_host_namespace(&observed, cx.host_ns_uid.as_deref());
            let waited = plan::waited(
                cx.deleted_for,
                self.observer.availability.unavailable_for(&cluster.name),
            );
            let op = plan::decide_deletion(
                &observed,
                cx.may_hold.contains(&cluster.name),
                keep,
                waited >= cx.timeout,
            );
            round.pending |= op.is_pending();
            round.held |= op == DeletionOp::WaitForRemoval;
            match op {
                DeletionOp::Done => {}
                DeletionOp::Abandon => round.abandoned.push(cluster.name),
                DeletionOp::WaitForCluster => {
                    let left = cx.timeout.saturating_sub(waited);
                    round.next_deadline = round.next_deadline.min(left);
                    let (reason, msg) = plan::wait_reason(&observed, &cx.timeout_text);
                    round
                        .outcomes
                        .insert(cluster.name, Outcome::Status(reason, msg));
                }
                DeletionOp::WaitForRemoval => {
                    round.outcomes.insert(cluster.name, Outcome::Removing);
                }
                DeletionOp::Delete => jobs.push(self.delete_in(
                    cluster,
                    key,
                    m_ns,
                    m_name,
                    MemberOp::Delete(cx.params.clone()),
                )),
                DeletionOp::Unlabel => {
                    jobs.push(self.delete_in(cluster, key, m_ns, m_name, MemberOp::Unlabel))
                }
            }
        }
        round.outcomes.extend(join_all(jobs).await);
        round
    }

    async fn delete_in(
        &self,
        cluster: ClusterState,
        key: &Key,
        namespace: Option<&str>,
        name: &str,
        op: MemberOp,
    ) -> (String, Outcome) {
        if cluster.pull {
            let orphan = matches!(op, MemberOp::Unlabel);
            let outcome = self.works.delete(&cluster.name, key, orphan).await;
            return (cluster.name, outcome);
        }
        let outcome = match cluster.client {
            None => no_client(),
            Some(client) => {
                let target = MemberRef {
                    cluster: cluster.name.clone(),
                    api: self.ty.member_api(client, namespace),
                    name: name.to_owned(),
                };
                run_on_member(self.shared, target, op).await
            }
        };
        (cluster.name, outcome)
    }
}

/// The status of an object whose deletion waits: each cluster's outcome.
pub(super) async fn write_status(
    status: &StatusWriter<'_>,
    fed: &DynamicObject,
    previous: &FederatedStatus,
    outcomes: &BTreeMap<String, Outcome>,
) {
    let update = StatusUpdate {
        previous,
        outcomes,
        aggregate: None,
        generation: fed.metadata.generation.unwrap_or(0),
        remote: &Default::default(),
        aggregated: None,
        scheduling: if previous.placement.is_some() {
            super::scheduled::Scheduling::Keep
        } else {
            super::scheduled::Scheduling::Off
        },
        rollout: None,
        drift: None,
        dependencies: None,
    };
    status.write(fed, update).await;
}

/// Clusters given up on: a warning in the log and a `DeletionIncomplete` Event.
pub(super) async fn announce_abandoned(
    events: Events<'_>,
    ty: &TypeInfo,
    key: &Key,
    fed: &DynamicObject,
    abandoned: &[String],
    cx: &DeletionContext,
) {
    let object = key
        .0
        .as_ref()
        .map(|ns| format!("{ns}/{}", key.1))
        .unwrap_or_else(|| key.1.clone());
    let msg = plan::abandoned_message(
        abandoned,
        &cx.timeout_text,
        &ty.target_ar.kind,
        &object,
        cx.keep,
    );
    warn!(clusters = ?abandoned, object = %object, kind = %ty.target_ar.kind, "deletion incomplete: {msg}");
    (events.publish(fed, EventType::Warning, "DeletionIncomplete", msg)).await;
}

/// The outcome for a cluster without a client.
pub(super) fn no_client() -> Outcome {
    Outcome::Status(
        flotilla_api::ClusterReason::ClientRetrievalFailed,
        "no client for the cluster".into(),
    )
}
