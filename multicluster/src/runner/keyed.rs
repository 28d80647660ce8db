//! The keyed runner: N workers taking keys of any type from one [`WorkQueue`], started
//! together behind an optional [`Gate`], each reconcile's [`Action`] handed back to the
//! queue (per-key backoff on errors), reported to [`RunMetrics`], stopped by a
//! [`CancellationToken`]. It knows nothing of what a key means or where keys come from.

use std::{fmt::Debug, future::Future, hash::Hash, sync::Arc};

use tokio::{task::JoinSet, time::Instant};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Action, Outcome, QueueAges, Reconciled, Report, RunMetrics, metrics::Started};
use crate::{gate::Gate, workqueue::WorkQueue};

/// Runs a reconcile per key from a work queue; see the module docs.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::convert::Infallible;
/// use flotilla_multicluster::runner::{Action, KeyedRunner};
/// use flotilla_multicluster::workqueue::WorkQueue;
/// use tokio_util::sync::CancellationToken;
///
/// let queue = WorkQueue::new();
/// queue.add(("default".to_string(), "web".to_string()));
/// let stop = CancellationToken::new();
/// let done = stop.clone();
/// KeyedRunner::new("example", queue)
///     .concurrency(2)
///     .shutdown(stop)
///     .run(move |key: (String, String)| {
///         let done = done.clone();
///         async move {
///             println!("reconciling {}/{}", key.0, key.1);
///             done.cancel(); // a real reconciler would not stop its own runner
///             Ok::<_, Infallible>(Action::await_change())
///         }
///     })
///     .await;
/// # }
/// ```
pub struct KeyedRunner<K> {
    name: String,
    queue: Arc<WorkQueue<K>>,
    concurrency: usize,
    gate: Option<Gate>,
    metrics: Option<Arc<dyn RunMetrics>>,
    queue_ages: Option<Arc<QueueAges>>,
    shutdown: CancellationToken,
}

impl<K> KeyedRunner<K>
where
    K: Clone + Eq + Hash + Debug + Send + 'static,
{
    /// A runner named `name` (logs, metrics) taking keys from `queue`, with one worker,
    /// no gate, no metrics, stopped only when its future is dropped.
    pub fn new(name: impl Into<String>, queue: Arc<WorkQueue<K>>) -> Self {
        KeyedRunner {
            name: name.into(),
            queue,
            concurrency: 1,
            gate: None,
            metrics: None,
            queue_ages: None,
            shutdown: CancellationToken::new(),
        }
    }

    /// Reconciles up to `n` keys at once (at least one); a key is never reconciled twice
    /// at once.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Workers take no key before `gate` opens, and stop if it fails.
    pub fn gate(mut self, gate: Gate) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Reports every reconcile (and workers starting and stopping) to `metrics`.
    pub fn metrics(mut self, metrics: Arc<dyn RunMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Reports how long the oldest key of its queue has waited, under the runner's name, in
    /// `ages` while it runs (read at each scrape: nothing is recorded per key).
    pub fn queue_ages(mut self, ages: Arc<QueueAges>) -> Self {
        self.queue_ages = Some(ages);
        self
    }

    /// Stops the workers when `token` is cancelled: a reconcile in progress is finished
    /// first, no new key is taken.
    pub fn shutdown(mut self, token: CancellationToken) -> Self {
        self.shutdown = token;
        self
    }

    /// Runs the workers until shutdown, a failed gate or a shut-down queue. An `Err` is
    /// logged and backs the key off; `Ok` is an [`Action`] (or anything [`Reconciled`]).
    pub async fn run<T, E, R, Fut>(self, reconcile: R)
    where
        T: Reconciled,
        E: std::error::Error + Send + 'static,
        R: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        info!(runner = %self.name, workers = self.concurrency, "runner started");
        let concurrency = self.concurrency;
        let _watched = (self.queue_ages.as_ref()).map(|ages| ages.watch(&self.name, &self.queue));
        let runner = Arc::new(self);
        let reconcile = Arc::new(reconcile);
        let mut workers = JoinSet::new();
        for _ in 0..concurrency {
            let (runner, reconcile) = (runner.clone(), reconcile.clone());
            workers.spawn(async move { runner.work(reconcile.as_ref()).await });
        }
        while workers.join_next().await.is_some() {}
    }

    async fn work<T, E, R, Fut>(&self, reconcile: &R)
    where
        T: Reconciled,
        E: std::error::Error + Send + 'static,
        R: Fn(K) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        if let Some(gate) = &self.gate {
            tokio::select! {
                open = gate.opened() => if !open { return },
                _ = self.shutdown.cancelled() => return,
            }
        }
        let _started = Started::new(self.metrics.clone());
        loop {
            let key = tokio::select! {
                k = self.queue.next() => match k { Some(k) => k, None => return },
                _ = self.shutdown.cancelled() => return,
            };
            let started = Instant::now();
            let (outcome, action) = match reconcile(key.clone()).await {
                Ok(done) => (done.outcome(), done.action()),
                Err(e) => {
                    warn!(runner = %self.name, ?key, error = %crate::error_chain(&e), "reconcile failed; backing off");
                    (Outcome::Error, Action::backoff())
                }
            };
            self.queue.done(&key);
            if let Some(m) = &self.metrics {
                m.reconciled(&Report {
                    outcome,
                    action,
                    took: started.elapsed(),
                    queue_depth: self.queue.len(),
                });
            }
            action.requeue_in(&self.queue, key);
            // A reconcile that needed no I/O never returned Pending, and the queue hands the
            // next key out at once: without this a worker keeps its runtime thread for as
            // long as keys are queued, and every other task on it (health probes, watches,
            // the metrics endpoint) waits.
            tokio::task::yield_now().await;
        }
    }
}
