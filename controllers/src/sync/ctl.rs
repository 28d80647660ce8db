//! The state one type's sync controller shares between its workers ([`Ctl`]) and the
//! host-side lookups every stage needs: names and APIs of the member object, placement,
//! delete options, protected namespaces. Decisions are in [`super::plan`]; member writes in
//! [`super::dispatch`].

use std::{collections::BTreeSet, sync::Arc};

use flotilla_crds::{
    DEFAULT_NAMESPACE, DELETE_OPTIONS_ANNOTATION,
    core::{EffectiveConfig, Scope},
    federated::{FederatedSpec, FederatedStatus},
    workload::WorkloadKind,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, ResourceExt,
    api::DeleteParams,
    core::{ApiResource, DynamicObject},
    runtime::reflector::{ObjectRef, Store},
};
use tracing::warn;

use super::{
    Key, SyncShared,
    action::Error,
    delete_options::parse_delete_options,
    federated_namespace_ar,
    memory::{Availability, RecentWrites, WrittenStatus},
    plan::{
        PROTECTED_NAMESPACES,
        pipeline::{self, NamespacePlacement},
    },
};
use crate::{
    metrics::TypeLabels,
    multicluster::{ClusterState, MemberWatch},
};

/// The other API's objects of this type, as this controller sees them.
pub(super) struct TwinApi {
    pub ar: ApiResource,
    pub store: Store<DynamicObject>,
}

/// One federated type's sync controller, as its workers see it.
pub(super) struct Ctl {
    pub shared: Arc<SyncShared>,
    pub fed_ar: ApiResource,
    pub target_ar: ApiResource,
    pub target_namespaced: bool,
    pub is_namespace_type: bool,
    pub needs_ns_placement: bool,
    pub host_store: Store<DynamicObject>,
    /// The same type in the other federated API (kubefed's alpha and v1beta1), when both
    /// are served: see [`super::twins`].
    pub twin: Option<TwinApi>,
    pub fns_store: Store<DynamicObject>,
    /// kubefed's alpha FederatedNamespaces, when the alpha API is served: an alpha
    /// namespace places objects of either API, as a v1beta1 one does.
    pub fns_alpha_store: Option<Store<DynamicObject>>,
    /// This type's Works in the host (Pull clusters' inventory).
    pub works: Store<flotilla_crds::work::Work>,
    pub members: Arc<MemberWatch<DynamicObject>>,
    /// Copy each member object's `status` into `status.clusters[].remoteStatus`
    /// (the FTC's `statusCollection: Enabled`).
    pub collect_status: bool,
    /// The workload kind whose status is summed into `status.aggregated`: set for
    /// Deployments, ReplicaSets, StatefulSets, DaemonSets and Jobs when status is collected.
    pub workload: Option<WorkloadKind>,
    /// What the federated CRD's schema drops from status.
    pub pruned: crate::ftc_schema::Pruned,
    pub recent: RecentWrites,
    /// Our last status write per object, while the host cache has not delivered it.
    pub written: WrittenStatus,
    pub availability: Availability,
    /// Recent repairs (fights) and announced drift-policy errors.
    pub drift_memory: super::drift::DriftMemory,
}

impl Ctl {
    pub fn kind_labels(&self) -> TypeLabels {
        TypeLabels {
            kind: self.fed_ar.kind.clone(),
        }
    }

    pub fn config(&self) -> EffectiveConfig {
        self.shared.config.borrow().clone()
    }

    /// The federated object of a key in the host cache.
    pub fn federated(&self, key: &Key) -> Option<Arc<DynamicObject>> {
        let mut obj_ref = ObjectRef::<DynamicObject>::new_with(&key.1, self.fed_ar.clone());
        if let Some(ns) = &key.0 {
            obj_ref = obj_ref.within(ns);
        }
        self.host_store.get(&obj_ref)
    }

    /// Name and namespace of the member object for a federated key.
    pub fn member_name<'a>(&self, key: &'a Key) -> (Option<&'a str>, &'a str) {
        if self.target_namespaced && !self.is_namespace_type {
            (key.0.as_deref(), key.1.as_str())
        } else {
            (None, key.1.as_str())
        }
    }

    pub fn member_api(&self, client: Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(client, ns, &self.target_ar),
            None => Api::all_with(client, &self.target_ar),
        }
    }

    pub fn host_api(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.shared.host.clone(), ns, &self.fed_ar),
            None => Api::all_with(self.shared.host.clone(), &self.fed_ar),
        }
    }

    pub fn target_type_api(&self) -> flotilla_crds::core::ApiResource {
        flotilla_crds::core::ApiResource {
            group: self.target_ar.group.clone(),
            version: self.target_ar.version.clone(),
            kind: self.target_ar.kind.clone(),
            plural_name: self.target_ar.plural.clone(),
            scope: if self.target_namespaced {
                Scope::Namespaced
            } else {
                Scope::Cluster
            },
        }
    }

    /// Namespaces that are only ever unlabelled in members, never deleted.
    pub fn is_protected(&self, key: &Key) -> bool {
        self.is_namespace_type
            && (PROTECTED_NAMESPACES.contains(&key.1.as_str())
                || key.1 == self.shared.namespace
                || key.1 == DEFAULT_NAMESPACE)
    }

    /// Every federated object and every managed member object (a stray whose federated
    /// object is gone) as keys.
    pub fn all_keys(&self) -> Vec<Key> {
        let mut keys: Vec<Key> = self
            .host_store
            .state()
            .iter()
            .map(|o| super::key_of(o))
            .collect();
        keys.extend(self.member_keys());
        keys.extend(self.work_keys());
        keys
    }

    /// The namespace placement of an object of `key` ([`NamespacePlacement::of`]), from
    /// the FederatedNamespace cache.
    pub fn namespace_placement(&self, key: &Key) -> NamespacePlacement {
        // kubefed's alpha FederatedNamespace places objects too, as a v1beta1 one does.
        let fns = key.0.as_ref().and_then(|ns| {
            let fns_ref =
                ObjectRef::<DynamicObject>::new_with(ns, federated_namespace_ar()).within(ns);
            let alpha_fns = || {
                let store = self.fns_alpha_store.as_ref()?;
                let ar = super::federated_namespace_alpha_ar()?;
                store.get(&ObjectRef::<DynamicObject>::new_with(ns, ar).within(ns))
            };
            self.fns_store.get(&fns_ref).or_else(alpha_fns)
        });
        let fns = fns.map(|o| FederatedSpec::from_dynamic(&o).map_err(|e| e.to_string()));
        NamespacePlacement::of(
            self.needs_ns_placement,
            &self.config().scope,
            key.0.as_deref(),
            fns,
        )
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
        let target = self.target_type_api();
        let namespace_placement = self.namespace_placement(key);
        f(&pipeline::Input {
            target: &target,
            name: &key.1,
            namespace: key.0.as_deref(),
            spec,
            previous,
            clusters,
            namespace_placement: &namespace_placement,
            collect_status: self.collect_status,
            default_unreachable_seconds: self.config().default_unreachable_toleration_seconds,
        })
    }

    /// The member delete options of kubefed's `kubefed.io/deleteoption` annotation.
    pub fn delete_options(&self, fed: &DynamicObject) -> DeleteParams {
        let Some(raw) = fed.annotations().get(DELETE_OPTIONS_ANNOTATION) else {
            return DeleteParams::default();
        };
        match parse_delete_options(raw) {
            Ok(dp) => dp,
            Err(e) => {
                warn!(error = %e, "ignoring malformed {DELETE_OPTIONS_ANNOTATION} annotation");
                DeleteParams::default()
            }
        }
    }

    /// UID of the host namespace of a FederatedNamespace (for other types, `None`): when
    /// the host is also joined as a member, that namespace in the "member" is the host's
    /// own, which holds the federated objects, and must never be deleted.
    pub async fn host_namespace_uid(&self, key: &Key) -> Result<Option<String>, Error> {
        if !self.is_namespace_type {
            return Ok(None);
        }
        let api: Api<Namespace> = Api::all(self.shared.host.clone());
        let ns = api.get_opt(&key.1).await.map_err(Error::HostNamespace)?;
        Ok(ns.and_then(|n| n.metadata.uid))
    }
}
