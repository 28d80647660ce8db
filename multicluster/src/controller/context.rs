//! What a reconciler is handed besides its object: the key and client of the object's
//! cluster, the user's data, the cluster set, and the cross-cluster tools — Events in the
//! object's own cluster, clients of other clusters, and the owner-side garbage collection
//! (finalizer first, dependents in every cluster on deletion).

use std::{collections::BTreeSet, fmt::Debug, sync::Arc};

use kube::{
    Api, Client, Resource, api::DynamicObject, core::ApiResource, runtime::events::EventType,
};
use serde::de::DeserializeOwned;

use super::{Action, ControllerMetrics, ObjectKey, Sources};
use crate::{
    ClusterSet, Error, gc,
    ownership::{DeletionPolicy, Dependent, MultiClusterOwner, OwnerRefError},
};

/// What every reconcile of a controller shares.
pub(crate) struct Shared {
    pub name: String,
    pub set: ClusterSet,
    pub sources: Sources,
    pub finalizer: String,
    pub metrics: Option<Arc<ControllerMetrics>>,
}

impl Shared {
    /// Every dependent of `owner` that a complete cache shows, and the clusters that may
    /// hold more but cannot be seen now.
    pub fn dependents_of(
        &self,
        owner: &MultiClusterOwner,
    ) -> Vec<(kube::core::ApiResource, Dependent)> {
        let sources = self.sources.read().unwrap_or_else(|e| e.into_inner());
        sources
            .iter()
            .flat_map(|s| {
                s.dependents_of(owner)
                    .into_iter()
                    .map(|d| (s.api_resource().clone(), d))
            })
            .collect()
    }

    pub fn unseen(&self) -> BTreeSet<String> {
        let sources = self.sources.read().unwrap_or_else(|e| e.into_inner());
        sources.iter().flat_map(|s| s.unseen(&self.set)).collect()
    }

    pub fn client_of(&self, cluster: &str) -> Result<Client, Error> {
        self.set
            .get(cluster)
            .filter(|c| c.ready)
            .and_then(|c| c.client)
            .ok_or_else(|| Error::ClusterNotReady(cluster.to_owned()))
    }
}

/// The reconciler's view of the world for one key.
pub struct Context<C> {
    pub(crate) key: ObjectKey,
    pub(crate) client: Client,
    pub(crate) data: Arc<C>,
    pub(crate) shared: Arc<Shared>,
}

impl<C> Clone for Context<C> {
    fn clone(&self) -> Self {
        Context {
            key: self.key.clone(),
            client: self.client.clone(),
            data: self.data.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<C> Context<C> {
    /// The key being reconciled.
    pub fn key(&self) -> &ObjectKey {
        &self.key
    }

    /// The cluster of the object being reconciled.
    pub fn cluster(&self) -> &str {
        &self.key.cluster
    }

    /// A client of the object's cluster.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The data given to [`super::Controller::run`].
    pub fn data(&self) -> &Arc<C> {
        &self.data
    }

    /// The cluster set.
    pub fn clusters(&self) -> &ClusterSet {
        &self.shared.set
    }

    /// A client of another cluster; an error when it is not Ready.
    pub fn client_of(&self, cluster: &str) -> Result<Client, Error> {
        self.shared.client_of(cluster)
    }

    /// The multi-cluster owner reference of `obj` (the object being reconciled), to set on
    /// its dependents with [`MultiClusterOwner::set_on`].
    pub fn owner_ref<K>(&self, obj: &K) -> Result<MultiClusterOwner, OwnerRefError>
    where
        K: Resource<DynamicType: Default>,
    {
        MultiClusterOwner::of(&self.key.cluster, obj, &Default::default())
    }

    /// Publishes an Event about `obj` in the object's own cluster (best effort: a failure
    /// is logged at debug level).
    pub async fn publish_event<K>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) where
        K: Resource<DynamicType: Default>,
    {
        let recorder = crate::events::recorder(self.client.clone(), &self.shared.name);
        let reference = obj.object_ref(&Default::default());
        crate::events::publish(&recorder, &reference, type_, reason, action, note).await;
    }

    /// Adds the controller's finalizer to `obj` unless it has it; call it before creating
    /// any dependent, so no dependent can outlive an owner deleted meanwhile. Returns
    /// whether it was added.
    pub async fn ensure_finalizer<K>(&self, obj: &K) -> Result<bool, Error>
    where
        K: Resource<DynamicType: Default> + Clone + DeserializeOwned + Debug,
    {
        gc::ensure_finalizer(&self.api_for(obj), obj, &self.shared.finalizer)
            .await
            .map_err(|source| self.kube_error("adding the finalizer", source))
    }

    /// For an owner being deleted: applies `policy` to its dependents in every cluster,
    /// and removes the finalizer once the plan allows (see
    /// [`crate::ownership::plan_finalize`]). Returns the action to take meanwhile.
    pub async fn finalize<K>(&self, obj: &K, policy: DeletionPolicy) -> Result<Action, Error>
    where
        K: Resource<DynamicType: Default> + Clone + DeserializeOwned + Debug,
    {
        let owner = self.owner_ref(obj)?;
        let done = gc::finalize(&self.shared, &owner, policy).await?;
        if !done {
            return Ok(Action::requeue(gc::FINALIZE_RECHECK));
        }
        gc::remove_finalizer(&self.api_for(obj), obj, &self.shared.finalizer)
            .await
            .map_err(|source| self.kube_error("removing the finalizer", source))?;
        Ok(Action::await_change())
    }

    fn api_for<K>(&self, obj: &K) -> Api<DynamicObject>
    where
        K: Resource<DynamicType: Default>,
    {
        let ar = ApiResource::erase::<K>(&Default::default());
        gc::dynamic_api(self.client.clone(), &ar, obj.meta().namespace.as_deref())
    }

    fn kube_error(&self, action: &'static str, source: kube::Error) -> Error {
        Error::Kube {
            action,
            cluster: self.key.cluster.clone(),
            source,
        }
    }
}
