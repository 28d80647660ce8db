//! How long the oldest key of each keyed runner's queue has waited, read from the queues at
//! each scrape: [`QueueAges`], a prometheus-client collector. Nothing is recorded between
//! scrapes, and a queue whose workers are all stuck still reports (a gauge set after each
//! reconcile would freeze exactly then). It reads queues; it never changes one.

use std::{
    collections::BTreeMap,
    fmt,
    hash::Hash,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric},
    metrics::{MetricType, gauge::ConstGauge},
    registry::Unit,
};

use crate::workqueue::WorkQueue;

/// The family's name; a registry's prefix goes before it and `_seconds` after it.
pub const QUEUE_OLDEST_AGE: &str = "queue_oldest_age";

/// A queue whose oldest wait can be read.
trait Waiting: Send + Sync {
    fn oldest_wait(&self) -> Duration;
}

impl<K: Clone + Eq + Hash + Send + 'static> Waiting for WorkQueue<K> {
    fn oldest_wait(&self) -> Duration {
        WorkQueue::oldest_wait(self)
    }
}

/// The label of one queue: the runner's name (e.g. `sync-FederatedConfigMap`, `policy`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

/// The queues being watched, by registration id.
#[derive(Default)]
struct Queues {
    next_id: u64,
    queues: BTreeMap<u64, (String, Weak<dyn Waiting>)>,
}

/// `<prefix>_queue_oldest_age_seconds{queue}`: for every running keyed runner given it
/// ([`super::KeyedRunner::queue_ages`]), how long the head of its queue has waited
/// ([`WorkQueue::oldest_wait`]). Register it once with
/// [`prometheus_client::registry::Registry::register_collector`].
///
/// ```
/// use std::sync::Arc;
/// use flotilla_multicluster::runner::QueueAges;
/// use flotilla_multicluster::workqueue::WorkQueue;
/// use prometheus_client::registry::Registry;
///
/// let ages = QueueAges::new();
/// let mut registry = Registry::with_prefix("example");
/// registry.register_collector(Box::new(ages.clone()));
/// let queue: Arc<WorkQueue<u32>> = WorkQueue::new();
/// let _watched = ages.watch("numbers", &queue);
/// let mut page = String::new();
/// prometheus_client::encoding::text::encode(&mut page, &registry).unwrap();
/// assert!(page.contains("example_queue_oldest_age_seconds{queue=\"numbers\"} 0.0"));
/// ```
#[derive(Default)]
pub struct QueueAges {
    queues: Mutex<Queues>,
}

impl fmt::Debug for QueueAges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueAges").finish_non_exhaustive()
    }
}

/// Keeps one queue in [`QueueAges`] until dropped.
#[must_use = "the queue is reported only while this is kept"]
pub struct Watched {
    ages: Arc<QueueAges>,
    id: u64,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.ages.lock().queues.remove(&self.id);
    }
}

impl QueueAges {
    /// A collector watching no queue yet.
    pub fn new() -> Arc<Self> {
        Arc::new(QueueAges::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queues> {
        // A map of names and weak references, valid after any panic in a holder.
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reports `queue` under the label `queue="<name>"` until the returned guard is dropped
    /// (or the queue is).
    pub fn watch<K: Clone + Eq + Hash + Send + 'static>(
        self: &Arc<Self>,
        name: impl Into<String>,
        queue: &Arc<WorkQueue<K>>,
    ) -> Watched {
        let weak: Weak<dyn Waiting> = Arc::downgrade(queue) as Weak<dyn Waiting>;
        let mut q = self.lock();
        let id = q.next_id;
        q.next_id += 1;
        q.queues.insert(id, (name.into(), weak));
        Watched {
            ages: self.clone(),
            id,
        }
    }

    /// Every watched queue's label and oldest wait in seconds; the longest wait of a name
    /// registered twice.
    fn read(&self) -> BTreeMap<String, f64> {
        let mut out: BTreeMap<String, f64> = BTreeMap::new();
        for (name, weak) in self.lock().queues.values() {
            if let Some(queue) = weak.upgrade() {
                let age = queue.oldest_wait().as_secs_f64();
                let slot = out.entry(name.clone()).or_default();
                *slot = slot.max(age);
            }
        }
        out
    }
}

impl Collector for QueueAges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let ages = self.read();
        let mut family = encoder.encode_descriptor(
            QUEUE_OLDEST_AGE,
            "How long the oldest key waiting in a controller's work queue has waited",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        for (queue, age) in ages {
            let labels = QueueLabels { queue };
            ConstGauge::new(age).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    fn page(ages: &Arc<QueueAges>) -> String {
        let mut registry = Registry::with_prefix("flotilla");
        registry.register_collector(Box::new(ages.clone()));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode");
        out
    }

    #[tokio::test(start_paused = true)]
    async fn a_scrape_reads_each_watched_queues_oldest_wait_until_its_guard_goes() {
        let ages = QueueAges::new();
        let queue: Arc<WorkQueue<&str>> = WorkQueue::new();
        let watched = ages.watch("sync-FederatedConfigMap", &queue);
        queue.add("a");
        tokio::time::advance(Duration::from_secs(42)).await;
        let text = page(&ages);
        assert!(
            text.contains("# TYPE flotilla_queue_oldest_age_seconds gauge"),
            "{text}"
        );
        assert!(
            text.contains(
                "flotilla_queue_oldest_age_seconds{queue=\"sync-FederatedConfigMap\"} 42.0"
            ),
            "{text}"
        );
        drop(watched);
        assert!(!page(&ages).contains("sync-FederatedConfigMap"));
    }

    #[test]
    fn a_dropped_queue_is_no_longer_reported() {
        let ages = QueueAges::new();
        let queue: Arc<WorkQueue<u8>> = WorkQueue::new();
        let _watched = ages.watch("policy", &queue);
        assert!(page(&ages).contains("queue=\"policy\""));
        drop(queue);
        assert!(!page(&ages).contains("queue=\"policy\""));
    }
}
