//! The worker loop of a [`Controller`]: keys from the queue, the object from the primary
//! cache, the reconciler (or the collector, for an object that is gone), then the key back
//! to the queue as the returned [`Action`] says, with metrics.

use std::{
    fmt::Debug,
    future::Future,
    hash::Hash,
    sync::Arc,
    time::{Duration, Instant},
};

use kube::Resource;
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;
use tracing::{info, warn};

use super::{
    Action, Cache, Context, Controller, ObjectKey, Outcome,
    context::Shared,
    metrics::{ControllerLabels, ReconcileLabels},
};
use crate::{gc, workqueue::WorkQueue};

/// How soon a collection that had to wait for a cluster is tried again.
const COLLECT_RETRY: Duration = Duration::from_secs(15);

struct Worker<K: Resource + Clone + 'static, C, R, P>
where
    K::DynamicType: Eq + Hash + Clone,
{
    shared: Arc<Shared>,
    dyntype: K::DynamicType,
    primary: Cache<K>,
    queue: Arc<WorkQueue<ObjectKey>>,
    data: Arc<C>,
    reconcile: R,
    error_policy: P,
}

impl<K> Controller<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync + Debug,
{
    /// Runs the controller: `reconcile` for every requested key whose object is cached,
    /// `error_policy` when it fails. Runs until the returned future is dropped (which
    /// stops the workers and every watch).
    pub async fn run<C, E, R, Fut, P>(self, reconcile: R, error_policy: P, data: Arc<C>)
    where
        C: Send + Sync + 'static,
        E: std::error::Error + Send + 'static,
        R: Fn(Arc<K>, Context<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        P: Fn(Arc<K>, &E, &Context<C>) -> Action + Send + Sync + 'static,
    {
        let shared = Arc::new(Shared {
            finalizer: self.finalizer.clone().unwrap_or_else(|| self.name.clone()),
            name: self.name.clone(),
            set: self.set.clone(),
            sources: self.sources.clone(),
            metrics: self.metrics.clone(),
        });
        let worker = Arc::new(Worker {
            shared,
            dyntype: self.dyntype.clone(),
            primary: self.primary.clone(),
            queue: self.queue.clone(),
            data,
            reconcile,
            error_policy,
        });
        info!(controller = %self.name, workers = self.concurrency, "multi-cluster controller started");
        let mut workers = JoinSet::new();
        for _ in 0..self.concurrency {
            let worker = worker.clone();
            workers.spawn(async move { worker.work().await });
        }
        // Keeps the watches (in `self`) and the workers running until dropped.
        let _controller = self;
        while workers.join_next().await.is_some() {}
    }
}

impl<K, C, E, R, Fut, P> Worker<K, C, R, P>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync + Debug,
    C: Send + Sync + 'static,
    E: std::error::Error + Send + 'static,
    R: Fn(Arc<K>, Context<C>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    P: Fn(Arc<K>, &E, &Context<C>) -> Action + Send + Sync + 'static,
{
    async fn work(&self) {
        while let Some(key) = self.queue.next().await {
            let started = Instant::now();
            let (outcome, action) = self.process(&key).await;
            self.queue.done(&key);
            self.record(started.elapsed(), outcome);
            action.requeue_in(&self.queue, key);
        }
    }

    async fn process(&self, key: &ObjectKey) -> (Outcome, Action) {
        let client = match self.shared.client_of(&key.cluster) {
            Ok(client) if self.primary.is_synced(&key.cluster) => client,
            // Not Ready, or its cache still listing: nothing can be concluded about the
            // object. The cluster's completed list requests it (and the owners its
            // dependents name) again.
            _ => return (Outcome::ClusterNotReady, Action::AwaitChange),
        };
        let Some(obj) = self
            .primary
            .get(&key.cluster, key.namespace.as_deref(), &key.name)
        else {
            return self.missing(key).await;
        };
        let ctx = Context {
            key: key.clone(),
            client,
            data: self.data.clone(),
            shared: self.shared.clone(),
        };
        match (self.reconcile)(obj.clone(), ctx.clone()).await {
            Ok(action) => (Outcome::Success, action),
            Err(error) => {
                warn!(controller = %self.shared.name, object = %key, error = %crate::error_chain(&error), "reconcile failed");
                (Outcome::Error, (self.error_policy)(obj, &error, &ctx))
            }
        }
    }

    /// The object is not in its cluster's complete cache: deleted. Its dependents are
    /// collected once the owner's cluster confirms it gone.
    async fn missing(&self, key: &ObjectKey) -> (Outcome, Action) {
        let retry = gc::collect::<K>(&self.shared, key, &self.dyntype).await;
        let action = if retry {
            Action::requeue(COLLECT_RETRY)
        } else {
            Action::AwaitChange
        };
        (Outcome::Missing, action)
    }

    fn record(&self, took: Duration, outcome: Outcome) {
        let Some(m) = &self.shared.metrics else {
            return;
        };
        let controller = self.shared.name.clone();
        m.reconciles
            .get_or_create(&ReconcileLabels {
                controller: controller.clone(),
                result: outcome.as_str(),
            })
            .inc();
        let labels = ControllerLabels { controller };
        m.reconcile_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        m.queue_depth
            .get_or_create(&labels)
            .set(self.queue.len() as i64);
    }
}
