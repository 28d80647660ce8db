//! One type's sync controller as its workers see it ([`Ctl`]): the concerns it is made of
//! (the type's description, the host caches, the member caches, what it remembers) and the
//! lookups that need several of them — the placement pipeline's input, the host's own
//! namespace. Decisions are in [`super::plan`].

use std::{collections::BTreeSet, sync::Arc};

use flotilla_api::{
    core::EffectiveConfig,
    federated::{FederatedSpec, FederatedStatus},
};
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, core::DynamicObject};

use super::{
    Key, SyncShared,
    action::Error,
    host::HostCaches,
    memory::{Availability, DriftMemory, RecentWrites, WrittenStatus},
    plan::pipeline::{self, NamespacePlacement},
    type_info::TypeInfo,
};
use crate::multicluster::{ClusterState, MemberWatch};

/// One federated type's sync controller, as its workers see it: the concerns it composes.
pub(super) struct Ctl {
    pub shared: Arc<SyncShared>,
    /// What is propagated: the APIs, scope and status handling of the type.
    pub ty: TypeInfo,
    /// The host-side caches read (federated objects, twin, FederatedNamespaces, Works).
    pub host: HostCaches,
    /// The target kind's managed objects in every Ready member.
    pub members: Arc<MemberWatch<DynamicObject>>,
    /// Flotilla's own recent member writes.
    pub recent: Arc<RecentWrites>,
    /// Finalizer patches the host cache has not delivered yet.
    pub finalizer_adds: super::memory::FinalizerAdds,
    /// Member writes that went on after their reconcile.
    pub inflight: Arc<super::inflight::InFlight>,
    /// Our last status write per object, while the host cache has not delivered it.
    pub written: WrittenStatus,
    /// Since when each cluster has been unavailable.
    pub availability: Availability,
    /// Recent repairs (fights) and announced drift-policy errors.
    pub drift_memory: DriftMemory,
}

impl Ctl {
    pub fn config(&self) -> EffectiveConfig {
        self.shared.config.borrow().clone()
    }

    /// The namespace placement of an object of `key`, from the FederatedNamespace cache.
    pub fn namespace_placement(&self, key: &Key) -> NamespacePlacement {
        let scope = self.config().scope;
        self.host
            .namespace_placement(key, self.ty.needs_ns_placement, &scope)
    }

    /// Runs the placement → scheduling → desired-objects pipeline for one object, with
    /// `clusters` as the one snapshot of the registry it reads.
    pub fn pipeline(
        &self,
        key: &Key,
        spec: &FederatedSpec,
        previous: &FederatedStatus,
        clusters: &[ClusterState],
    ) -> pipeline::Outcome {
        self.with_input(key, spec, previous, clusters, pipeline::run)
    }

    /// The clusters the pipeline selects for the object, without its desired objects (what
    /// a deletion needs to know).
    pub fn selected(
        &self,
        key: &Key,
        spec: &FederatedSpec,
        previous: &FederatedStatus,
        clusters: &[ClusterState],
    ) -> BTreeSet<String> {
        self.with_input(key, spec, previous, clusters, pipeline::selected)
    }

    /// Calls `f` with the pipeline's input for one object, built from this type's caches
    /// and configuration.
    fn with_input<R>(
        &self,
        key: &Key,
        spec: &FederatedSpec,
        previous: &FederatedStatus,
        clusters: &[ClusterState],
        f: impl FnOnce(&pipeline::Input<'_>) -> R,
    ) -> R {
        let target = self.ty.target_type_api();
        let namespace_placement = self.namespace_placement(key);
        f(&pipeline::Input {
            target: &target,
            name: &key.1,
            namespace: key.0.as_deref(),
            spec,
            previous,
            clusters,
            namespace_placement: &namespace_placement,
            collect_status: self.ty.collect_status,
            default_unreachable_seconds: self.config().default_unreachable_toleration_seconds,
        })
    }

    /// UID of the host namespace of a FederatedNamespace (for other types, `None`): when
    /// the host is also joined as a member, that namespace in the "member" is the host's
    /// own, which holds the federated objects, and must never be deleted.
    pub async fn host_namespace_uid(&self, key: &Key) -> Result<Option<String>, Error> {
        if !self.ty.is_namespace_type {
            return Ok(None);
        }
        let api: Api<Namespace> = Api::all(self.shared.host.clone());
        let ns = api.get_opt(&key.1).await.map_err(Error::HostNamespace)?;
        Ok(ns.and_then(|n| n.metadata.uid))
    }
}
