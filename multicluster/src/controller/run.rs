//! What a [`Controller`]'s workers do with a key, on the library's
//! [`KeyedRunner`](crate::runner::KeyedRunner): the object from the primary cache, the
//! reconciler (or the collector, for an object that is gone), and the [`Action`] and
//! [`Outcome`] the runner hands back to the queue and records.

use std::{convert::Infallible, fmt::Debug, future::Future, hash::Hash, sync::Arc, time::Duration};

use kube::Resource;
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use super::{Action, Cache, Context, Controller, ObjectKey, Outcome, context::Shared};
use crate::{gc, runner::KeyedRunner};

/// How soon a collection that had to wait for a cluster is tried again.
const COLLECT_RETRY: Duration = Duration::from_secs(15);

struct Worker<K: Resource + Clone + 'static, C, R, P>
where
    K::DynamicType: Eq + Hash + Clone,
{
    shared: Arc<Shared>,
    dyntype: K::DynamicType,
    primary: Cache<K>,
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
            data,
            reconcile,
            error_policy,
        });
        info!(controller = %self.name, workers = self.concurrency, "multi-cluster controller started");
        let mut runner =
            KeyedRunner::new(self.name.clone(), self.queue.clone()).concurrency(self.concurrency);
        if let Some(m) = &self.metrics {
            runner = runner.metrics(m.named(self.name.clone()));
        }
        // Keeps the watches (in `self`) running as long as the workers.
        let _controller = self;
        runner
            .run(move |key: ObjectKey| {
                let worker = worker.clone();
                async move { Ok::<_, Infallible>(worker.process(&key).await) }
            })
            .await;
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
}
