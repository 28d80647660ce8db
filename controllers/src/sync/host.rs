//! The host-side caches one sync controller reads: its federated objects, the twin API's
//! (kubefed's alpha or v1beta1, when both are served), the FederatedNamespaces that place
//! namespaced objects, and this type's Works (Pull clusters' inventory) — and the one
//! live read of the host's own namespace ([`host_namespace_uid`]). Lookups only: the
//! reflectors feeding these stores are wired in [`super`], writes happen elsewhere.

use std::sync::Arc;

use flotilla_api::{
    federated::FederatedSpec,
    work::{WORK_SOURCE_NAME, WORK_SOURCE_NAMESPACE, Work},
};
use flotilla_multicluster::{gate::store_ready, packed};
use futures::FutureExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, ResourceExt,
    core::{ApiResource, DynamicObject},
    runtime::reflector::{ObjectRef, Store},
};

use super::{
    Key, action::Error, federated_namespace_alpha_ar, federated_namespace_ar, key_of,
    plan::pipeline::NamespacePlacement, type_info::TypeInfo,
};

/// The objects of one federated API in the host.
/// The store holds bodies packed (metadata as it is): keys and namespaces read from
/// `store` directly, whole objects through [`ApiStore::get`].
#[derive(Clone)]
pub(super) struct ApiStore {
    pub ar: ApiResource,
    pub store: Store<DynamicObject>,
}

impl ApiStore {
    /// The object of a key, if cached (whole: the store keeps bodies packed, see
    /// [`packed`]).
    pub fn get(&self, key: &Key) -> Option<Arc<DynamicObject>> {
        let mut obj_ref = ObjectRef::<DynamicObject>::new_with(&key.1, self.ar.clone());
        if let Some(ns) = &key.0 {
            obj_ref = obj_ref.within(ns);
        }
        let cached = self.store.get(&obj_ref)?;
        Some(Arc::new(packed::unpack(&cached)))
    }
}

/// What one sync controller reads in the host.
pub(super) struct HostCaches {
    /// The federated objects reconciled.
    pub federated: ApiStore,
    /// The same type in the other federated API (kubefed's alpha and v1beta1), when both
    /// are served (see the `twins` module).
    pub twin: Option<ApiStore>,
    /// FederatedNamespaces (v1beta1).
    pub fns: Store<DynamicObject>,
    /// kubefed's alpha FederatedNamespaces, when the alpha API is served: an alpha
    /// namespace places objects of either API, as a v1beta1 one does.
    pub fns_alpha: Option<Store<DynamicObject>>,
    /// This type's Works in the host (Pull clusters' inventory).
    pub works: Store<Work>,
    /// Where each object's manifest is in those Works.
    pub bundles: Arc<super::bundle_index::BundleIndex>,
}

impl HostCaches {
    /// The federated object of a key in the host cache.
    pub fn federated(&self, key: &Key) -> Option<Arc<DynamicObject>> {
        self.federated.get(key)
    }

    /// The other API's object of the same key, if that API is served and it exists.
    pub fn twin(&self, key: &Key) -> Option<Arc<DynamicObject>> {
        self.twin.as_ref()?.get(key)
    }

    /// Every cached federated object's key.
    pub fn federated_keys(&self) -> impl Iterator<Item = Key> {
        self.federated.store.state().into_iter().map(|o| key_of(&o))
    }

    /// The namespace placement of an object of `key` ([`NamespacePlacement::of`]), from
    /// the FederatedNamespace cache; `needed`: whether the type is placed by namespace.
    pub fn namespace_placement(&self, key: &Key, needed: bool, scope: &str) -> NamespacePlacement {
        // kubefed's alpha FederatedNamespace places objects too, as a v1beta1 one does.
        let fns = key.0.as_ref().and_then(|ns| {
            let fns_ref =
                ObjectRef::<DynamicObject>::new_with(ns, federated_namespace_ar()).within(ns);
            let alpha_fns = || {
                let store = self.fns_alpha.as_ref()?;
                let ar = federated_namespace_alpha_ar()?;
                store.get(&ObjectRef::<DynamicObject>::new_with(ns, ar).within(ns))
            };
            self.fns.get(&fns_ref).or_else(alpha_fns)
        });
        let fns = fns.map(|o| FederatedSpec::from_dynamic(&o).map_err(|e| e.to_string()));
        NamespacePlacement::of(needed, scope, key.0.as_deref(), fns)
    }

    /// The manifest of `key` in a Pull cluster's Works (a bundle's, else the legacy Work
    /// `legacy`'s).
    pub fn locate(
        &self,
        cluster: &str,
        key: &Key,
        legacy: &str,
    ) -> Option<super::bundle_index::Located> {
        self.bundles.locate(&self.works, cluster, key, legacy)
    }

    /// Whether the Work cache has listed once.
    pub fn works_synced(&self) -> bool {
        matches!(self.works.wait_until_ready().now_or_never(), Some(Ok(())))
    }

    /// Every federated key some Work of this type renders (stray detection).
    pub fn work_keys(&self) -> Vec<Key> {
        let mut keys: Vec<Key> = self
            .works
            .state()
            .iter()
            .filter(|w| !w.is_bundle())
            .filter_map(|w| source_key(w))
            .collect();
        keys.extend(self.bundles.keys());
        keys
    }

    /// Whether every cache placement and deletion read is complete (see
    /// [`super::ready`]); `fns_needed`: whether the FederatedNamespace cache is read.
    pub async fn ready(&self, fns_needed: bool) -> bool {
        store_ready(&self.federated.store).await
            && match &self.twin {
                Some(t) => store_ready(&t.store).await,
                None => true,
            }
            && (!fns_needed || store_ready(&self.fns).await)
            && match &self.fns_alpha {
                Some(store) => store_ready(store).await,
                None => true,
            }
    }
}

/// UID of the host namespace of a FederatedNamespace (for other types, `None`): when
/// the host is also joined as a member, that namespace in the "member" is the host's
/// own, which holds the federated objects, and must never be deleted.
pub(super) async fn host_namespace_uid(
    host: &Client,
    ty: &TypeInfo,
    key: &Key,
) -> Result<Option<String>, Error> {
    if !ty.is_namespace_type {
        return Ok(None);
    }
    let api: Api<Namespace> = Api::all(host.clone());
    let ns = api.get_opt(&key.1).await.map_err(Error::HostNamespace)?;
    Ok(ns.and_then(|n| n.metadata.uid))
}

/// The federated object a Work renders, from its annotations.
pub(super) fn source_key(work: &Work) -> Option<Key> {
    let ann = work.annotations();
    let name = ann.get(WORK_SOURCE_NAME)?.clone();
    Some((ann.get(WORK_SOURCE_NAMESPACE).cloned(), name))
}
