//! A multi-cluster controller, in the shape of kube-runtime's `Controller`: one primary
//! kind watched in many clusters, secondary watches whose events a mapper turns into
//! reconcile requests, owned kinds tracked for cross-cluster garbage collection, and
//! workers that reconcile keys `(cluster, namespace, name)` from one [`WorkQueue`] (a key
//! is never reconciled twice at once; failures back off per key).
//!
//! This module wires watches to the queue; the worker loop is in `run.rs`, what a reconciler
//! sees in `context.rs`, the owner index in `dependents.rs`. It makes no decision about
//! objects: those belong to the reconciler and to [`crate::ownership`].

mod context;
pub(crate) mod dependents;
pub(crate) mod key;
pub mod metrics;
mod run;

use std::{
    fmt::Debug,
    hash::Hash,
    ops::ControlFlow,
    sync::{Arc, OnceLock, RwLock, Weak},
};

use kube::{Resource, core::ApiResource};
use serde::de::DeserializeOwned;

pub use crate::runner::{Action, Outcome};
pub use context::Context;
pub(crate) use context::Shared;
pub use key::ObjectKey;
pub use metrics::ControllerMetrics;

use crate::{
    ClusterSet, MemberWatch, Provider,
    member_watch::{OnChange, WatchOptions},
    watch::Change,
    workqueue::WorkQueue,
};
use dependents::{DependentSource, OwnedKind};

/// A cache of one kind in many clusters, readable from a reconciler.
pub type Cache<K> = Arc<MemberWatch<K>>;

type Sources = Arc<RwLock<Vec<Arc<dyn DependentSource>>>>;

/// A multi-cluster controller of kind `K`; see the module docs and docs/library.md.
pub struct Controller<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    name: String,
    set: ClusterSet,
    dyntype: K::DynamicType,
    primary: Cache<K>,
    queue: Arc<WorkQueue<ObjectKey>>,
    sources: Sources,
    /// Secondary watches, kept running for as long as the controller.
    secondary: Vec<Arc<dyn Send + Sync>>,
    concurrency: usize,
    finalizer: Option<String>,
    metrics: Option<Arc<ControllerMetrics>>,
}

/// A cache filled after its watch (and the closure reporting its changes) was made.
fn late<W: Resource + Clone + 'static>() -> Arc<OnceLock<Weak<MemberWatch<W>>>>
where
    W::DynamicType: Eq + Hash + Clone,
{
    Arc::new(OnceLock::new())
}

fn upgrade<W: Resource + Clone + 'static>(
    cell: &OnceLock<Weak<MemberWatch<W>>>,
) -> Option<Arc<MemberWatch<W>>>
where
    W::DynamicType: Eq + Hash + Clone,
{
    cell.get().and_then(Weak::upgrade)
}

impl<K> Controller<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync + Debug + Default,
{
    /// A controller named `name` (metrics, Events, logs) of the kind `K` watched as
    /// `options` say in the clusters of `set`. Every change of a `K` requests its own
    /// reconcile; a cluster's completed (re)list requests every object of that cluster.
    pub fn new(name: impl Into<String>, set: ClusterSet, options: WatchOptions<K>) -> Self {
        Self::new_with(name, set, K::DynamicType::default(), options)
    }

    /// A controller over the clusters `provider` engages (into a set of their own: see
    /// [`Controller::cluster_set`]); the provider runs as long as the controller, and
    /// stopping it disengages them.
    ///
    /// ```no_run
    /// # use flotilla_multicluster::{Controller, WatchOptions, provider::kubeconfig::KubeconfigProvider};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// # async fn demo() {
    /// let provider = KubeconfigProvider::file("clusters.kubeconfig").contexts(["east", "west"]);
    /// let controller = Controller::<ConfigMap>::with_provider("config", provider, WatchOptions::all());
    /// # }
    /// ```
    pub fn with_provider(
        name: impl Into<String>,
        provider: impl Provider,
        options: WatchOptions<K>,
    ) -> Self {
        let (set, handle) = ClusterSet::from_provider(provider);
        let mut controller = Self::new(name, set, options);
        controller.secondary.push(Arc::new(handle));
        controller
    }
}

impl<K> Controller<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync + Debug,
{
    /// [`Controller::new`] for a kind with a runtime type (e.g. `DynamicObject`).
    pub fn new_with(
        name: impl Into<String>,
        set: ClusterSet,
        dyntype: K::DynamicType,
        options: WatchOptions<K>,
    ) -> Self {
        let queue: Arc<WorkQueue<ObjectKey>> = WorkQueue::new();
        let sources: Sources = Arc::default();
        let cell = late::<K>();
        let on_change: OnChange<K> = {
            let (queue, sources, cell) = (queue.clone(), sources.clone(), cell.clone());
            let (api_version, kind) = (
                K::api_version(&dyntype).into_owned(),
                K::kind(&dyntype).into_owned(),
            );
            Arc::new(move |cluster, change| {
                match change {
                    Change::Object(o) => queue.add(ObjectKey::of(cluster, o)),
                    // Queued at the list's end, from the cache that shows it: a reconcile
                    // taken now would read the cache as it was before the list.
                    Change::Listing | Change::Listed(_) => {}
                    Change::Synced => {
                        if let Some(cache) = upgrade(&cell) {
                            for o in cache.list(cluster) {
                                queue.add(ObjectKey::of(cluster, o.as_ref()));
                            }
                        }
                        // Owners deleted while this cluster was away: their dependents
                        // elsewhere can be collected now that absence can be confirmed.
                        let sources = sources.read().unwrap_or_else(|e| e.into_inner());
                        for source in sources.iter() {
                            for (_, owner) in source.all() {
                                if owner.cluster == cluster && owner.is_kind(&api_version, &kind) {
                                    queue.add(owner.key());
                                }
                            }
                        }
                    }
                }
                ControlFlow::Continue(())
            })
        };
        let primary = Arc::new(MemberWatch::start_with(
            set.clone(),
            dyntype.clone(),
            options,
            on_change,
        ));
        let _ = cell.set(Arc::downgrade(&primary));
        Controller {
            name: name.into(),
            set,
            dyntype,
            primary,
            queue,
            sources,
            secondary: Vec::new(),
            concurrency: 1,
            finalizer: None,
            metrics: None,
        }
    }

    /// The clusters the controller runs on.
    pub fn cluster_set(&self) -> &ClusterSet {
        &self.set
    }

    /// The cache of the primary kind.
    pub fn cache(&self) -> Cache<K> {
        self.primary.clone()
    }

    /// Reconciles up to `n` keys at once (at least one); a key is never reconciled twice
    /// at once.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Records the controller's metrics.
    pub fn metrics(mut self, metrics: Arc<ControllerMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The finalizer [`Context::ensure_finalizer`] and [`Context::finalize`] use; without
    /// one, the controller's name.
    pub fn finalizer(mut self, name: impl Into<String>) -> Self {
        self.finalizer = Some(name.into());
        self
    }

    /// Watches kind `W` as `options` say; `mapper` turns each changed object (with its
    /// cluster) into the keys to reconcile. Returns the watch's cache.
    ///
    /// ```no_run
    /// # use flotilla_multicluster::{ClusterSet, Controller, ObjectKey, WatchOptions};
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # async fn demo(set: ClusterSet) {
    /// let mut controller = Controller::<ConfigMap>::new("config", set, WatchOptions::all());
    /// // A Secret `x` in the central cluster requests the ConfigMap `x` of every member.
    /// let members = vec!["member1".to_string(), "member2".to_string()];
    /// let secrets = controller.watches::<Secret, _>(
    ///     (),
    ///     WatchOptions::all().in_cluster("central"),
    ///     move |_cluster, secret: &Secret| {
    ///         members
    ///             .iter()
    ///             .map(|m| ObjectKey {
    ///                 cluster: m.clone(),
    ///                 namespace: secret.metadata.namespace.clone(),
    ///                 name: secret.metadata.name.clone().unwrap_or_default(),
    ///             })
    ///             .collect()
    ///     },
    /// );
    /// # }
    /// ```
    pub fn watches<W, F>(
        &mut self,
        dyntype: W::DynamicType,
        options: WatchOptions<W>,
        mapper: F,
    ) -> Cache<W>
    where
        W: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        W::DynamicType: Eq + Hash + Clone + Send + Sync + Debug,
        F: Fn(&str, &W) -> Vec<ObjectKey> + Send + Sync + 'static,
    {
        let cell = late::<W>();
        let on_change: OnChange<W> = {
            let (queue, cell) = (self.queue.clone(), cell.clone());
            Arc::new(move |cluster, change| {
                match change {
                    Change::Object(o) => mapper(cluster, o).into_iter().for_each(|k| queue.add(k)),
                    // Mapped at the list's end, from the cache that shows it.
                    Change::Listing | Change::Listed(_) => {}
                    Change::Synced => {
                        for o in upgrade(&cell).map(|c| c.list(cluster)).unwrap_or_default() {
                            mapper(cluster, o.as_ref())
                                .into_iter()
                                .for_each(|k| queue.add(k));
                        }
                    }
                }
                ControlFlow::Continue(())
            })
        };
        let cache = Arc::new(MemberWatch::start_with(
            self.set.clone(),
            dyntype,
            options,
            on_change,
        ));
        let _ = cell.set(Arc::downgrade(&cache));
        self.secondary.push(cache.clone());
        cache
    }

    /// Watches dependents of kind `W` (objects carrying a multi-cluster owner reference to
    /// a `K`) as `options` say: a change requests its owner's reconcile, and the owner's
    /// finalizer and the collector delete them across clusters. Only objects with an owner
    /// reference are cached. Returns the cache.
    ///
    /// ```no_run
    /// # use flotilla_multicluster::{ClusterSet, Controller, WatchOptions};
    /// # use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
    /// # async fn demo(set: ClusterSet) {
    /// let mut controller = Controller::<ConfigMap>::new("config", set, WatchOptions::all())
    ///     .finalizer("example.com/cleanup");
    /// // Deployments in the central cluster owned by ConfigMaps anywhere.
    /// let deployments = controller.owns::<Deployment>((), WatchOptions::all().in_cluster("central"));
    /// # }
    /// ```
    pub fn owns<W>(&mut self, dyntype: W::DynamicType, mut options: WatchOptions<W>) -> Cache<W>
    where
        W: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        W::DynamicType: Eq + Hash + Clone + Send + Sync + Debug,
    {
        let (api_version, kind) = (
            K::api_version(&self.dyntype).into_owned(),
            K::kind(&self.dyntype).into_owned(),
        );
        let selector = dependents::owned_labels(options.config.label_selector.as_deref());
        options.config = options.config.labels(&selector);
        let clusters = options.clusters.clone();
        let ar = ApiResource::erase::<W>(&dyntype);
        let cache = self.watches(dyntype, options, move |_, o: &W| {
            dependents::owner_key_of(o, &api_version, &kind)
                .into_iter()
                .collect()
        });
        let source: Arc<dyn DependentSource> = Arc::new(OwnedKind {
            cache: cache.clone(),
            ar,
            clusters,
        });
        self.sources
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(source);
        cache
    }
}
