//! Deleting a federated object ([`super::finalizer`] holds it until then): each member
//! object is deleted (or only unlabelled: `kubefed.io/orphan`,
//! protected namespaces, the host's own namespace), unready clusters are waited for up to
//! the unready-cluster deletion timeout, and then the finalizer goes. What happens per
//! cluster is decided by [`super::plan::deletion`].

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use flotilla_api::{
    ORPHAN_ANNOTATION,
    federated::{FederatedSpec, FederatedStatus},
};
use futures::future::join_all;
use kube::{ResourceExt, api::DeleteParams, core::DynamicObject, runtime::events::EventType};
use tracing::{info, warn};

use super::{
    Key,
    action::{Action, Error},
    ctl::Ctl,
    dispatch::{MemberOp, MemberRef, run_on_member},
    finalizer::{self, has_finalizer},
    plan::{
        Outcome,
        deletion::{self as plan, DeletionOp},
        is_host_namespace,
    },
    status::StatusUpdate,
};

/// Per-deletion facts shared by every cluster's decision.
struct DeletionContext {
    keep: bool,
    deleted_for: Duration,
    timeout: Duration,
    timeout_text: String,
    may_hold: BTreeSet<String>,
    host_ns_uid: Option<String>,
    params: DeleteParams,
}

impl Ctl {
    /// The federated object is being deleted: remove (or orphan) its member objects, then
    /// drop the finalizer. A cluster that may hold the object but cannot answer is waited
    /// for up to the configured timeout; a cluster removed from the registry is not.
    pub(super) async fn ensure_deletion(
        &self,
        key: &Key,
        fed: &DynamicObject,
    ) -> Result<Action, Error> {
        if !has_finalizer(fed) {
            return Ok(Action::AwaitChange);
        }
        let previous = FederatedStatus::from_dynamic(fed);
        // Unknown whether a member is the host itself: delete nothing yet.
        let host_ns_uid = self.host_namespace_uid(key).await?;
        let cx = self.deletion_context(key, fed, &previous, host_ns_uid);
        let (m_ns, m_name) = self.ty.member_name(key);
        let mut pending = false;
        let mut held = false;
        let mut abandoned = Vec::new();
        let mut next_deadline = cx.timeout;
        let mut outcomes = BTreeMap::new();
        let mut jobs = Vec::new();
        for cluster in self.shared.clusters.snapshot() {
            let observed = self.observe(&cluster, key);
            let keep = cx.keep || is_host_namespace(&observed, cx.host_ns_uid.as_deref());
            let waited = plan::waited(
                cx.deleted_for,
                self.availability.unavailable_for(&cluster.name),
            );
            let op = plan::decide_deletion(
                &observed,
                cx.may_hold.contains(&cluster.name),
                keep,
                waited >= cx.timeout,
            );
            pending |= op.is_pending();
            held |= op == DeletionOp::WaitForRemoval;
            match op {
                DeletionOp::Done => {}
                DeletionOp::Abandon => abandoned.push(cluster.name),
                DeletionOp::WaitForCluster => {
                    next_deadline = next_deadline.min(cx.timeout.saturating_sub(waited));
                    let (reason, msg) = plan::wait_reason(&observed, &cx.timeout_text);
                    outcomes.insert(cluster.name, Outcome::Status(reason, msg));
                }
                DeletionOp::WaitForRemoval => {
                    outcomes.insert(cluster.name, Outcome::Removing);
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
        outcomes.extend(join_all(jobs).await);
        if !pending {
            self.finish_deletion(key, fed, &abandoned, &cx).await?;
            return Ok(Action::AwaitChange);
        }
        if plan::writes_status(held, &outcomes) {
            self.write_deletion_status(fed, &previous, &outcomes).await;
        }
        Ok(Action::Requeue(plan::recheck_after(next_deadline)))
    }

    /// The status of an object whose deletion waits: each cluster's outcome.
    async fn write_deletion_status(
        &self,
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
        self.write_status(fed, update).await;
    }

    async fn delete_in(
        &self,
        cluster: crate::multicluster::ClusterState,
        key: &Key,
        namespace: Option<&str>,
        name: &str,
        op: MemberOp,
    ) -> (String, Outcome) {
        if cluster.pull {
            let orphan = matches!(op, MemberOp::Unlabel);
            let outcome = self.delete_work(&cluster.name, key, orphan).await;
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
                run_on_member(&self.shared, target, op).await
            }
        };
        (cluster.name, outcome)
    }

    fn deletion_context(
        &self,
        key: &Key,
        fed: &DynamicObject,
        previous: &FederatedStatus,
        host_ns_uid: Option<String>,
    ) -> DeletionContext {
        let config = self.config();
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
        if let Ok(spec) = FederatedSpec::from_dynamic(fed) {
            let clusters = self.shared.clusters.snapshot();
            may_hold.extend(self.selected(key, &spec, previous, &clusters));
        }
        DeletionContext {
            keep: orphan || self.ty.is_protected(key, &self.shared.namespace),
            deleted_for,
            timeout: config.unready_cluster_deletion_timeout,
            timeout_text: flotilla_api::duration::format(config.unready_cluster_deletion_timeout),
            may_hold,
            host_ns_uid,
            params: super::delete_options::of_object(fed),
        }
    }

    /// Nothing is pending any more: warn about clusters given up on, drop the finalizer.
    async fn finish_deletion(
        &self,
        key: &Key,
        fed: &DynamicObject,
        abandoned: &[String],
        cx: &DeletionContext,
    ) -> Result<(), Error> {
        // Before the finalizer goes: once it has, the member copies look like strays.
        self.shared
            .orphans
            .deleted(&self.ty.fed_ar.kind, key, abandoned, cx.keep);
        if !abandoned.is_empty() {
            let object = key
                .0
                .as_ref()
                .map(|ns| format!("{ns}/{}", key.1))
                .unwrap_or_else(|| key.1.clone());
            let msg = plan::abandoned_message(
                abandoned,
                &cx.timeout_text,
                &self.ty.target_ar.kind,
                &object,
                cx.keep,
            );
            warn!(clusters = ?abandoned, object = %object, kind = %self.ty.target_ar.kind, "deletion incomplete: {msg}");
            self.event(fed, EventType::Warning, "DeletionIncomplete", msg)
                .await;
        }
        if !cx.keep {
            self.release_dependencies(key, fed).await;
        }
        self.remove_revisions(key, fed).await?;
        finalizer::remove(&self.shared.host, &self.ty, fed).await?;
        info!(object = ?key, orphan = cx.keep, "member objects removed; finalizer dropped");
        Ok(())
    }
}

/// The outcome for a cluster without a client.
pub(super) fn no_client() -> Outcome {
    Outcome::Status(
        flotilla_api::ClusterReason::ClientRetrievalFailed,
        "no client for the cluster".into(),
    )
}
