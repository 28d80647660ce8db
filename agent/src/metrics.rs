//! The agent's Prometheus metrics, under the prefix `flotilla_agent`: server-side applies,
//! failed manifests by reason (the member's reason when its API server refused, else the
//! agent's own), the Work queue's depth (read when scraped), when each Work last settled and
//! when the heartbeat Lease was last renewed (Unix seconds), and the renewals of the agent's
//! own host token by result with that token's expiry (Unix seconds). Served at `/metrics` through
//! [`flotilla_multicluster::http`].

use std::sync::{Arc, Mutex, OnceLock};

use flotilla_multicluster::{http::MetricsText, workqueue::WorkQueue};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// Prefix of every metric name.
pub const PREFIX: &str = "flotilla_agent";

/// Label set of a failure.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// `Forbidden`, `Invalid`, `Conflict`, `NotFound`... or the agent's own reason.
    pub reason: String,
}

/// Label set of a host-token renewal: `renewed`, `failed` or `refused`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// What the renewal came to.
    pub result: String,
}

/// Label set naming one Work.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkLabels {
    /// The Work's name.
    pub work: String,
}

/// The agent's metric families.
pub struct AgentMetrics {
    registry: Mutex<Registry>,
    /// Server-side applies the member accepted.
    pub applies: Counter,
    /// Manifests that failed, by reason.
    pub failures: Family<ReasonLabels, Counter>,
    /// Works waiting in the queue (set when scraped).
    pub queue_depth: Gauge,
    /// When each Work last settled (Unix seconds).
    pub last_sync: Family<WorkLabels, Gauge>,
    /// When the heartbeat Lease was last renewed (Unix seconds).
    pub lease_renewed: Gauge,
    /// Renewals of the agent's host token, by result.
    pub host_token_renewals: Family<ResultLabels, Counter>,
    /// When the agent's current host token expires (Unix seconds; 0: not known).
    pub host_token_expiry: Gauge,
    queue: OnceLock<Arc<WorkQueue<String>>>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentMetrics {
    /// A registry with every family registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let m = AgentMetrics {
            registry: Mutex::new(Registry::default()),
            applies: Counter::default(),
            failures: Family::default(),
            queue_depth: Gauge::default(),
            last_sync: Family::default(),
            lease_renewed: Gauge::default(),
            host_token_renewals: Family::default(),
            host_token_expiry: Gauge::default(),
            queue: OnceLock::new(),
        };
        registry.register(
            "applies",
            "Server-side applies the member accepted",
            m.applies.clone(),
        );
        registry.register(
            "apply_failures",
            "Manifests that failed, by the member's reason (or the agent's own)",
            m.failures.clone(),
        );
        registry.register(
            "work_queue_depth",
            "Works waiting to be processed",
            m.queue_depth.clone(),
        );
        registry.register_with_unit(
            "work_last_sync_timestamp",
            "When each Work last settled (everything applied and reported)",
            Unit::Seconds,
            m.last_sync.clone(),
        );
        registry.register_with_unit(
            "lease_last_renewal_timestamp",
            "When the heartbeat Lease in the host was last renewed",
            Unit::Seconds,
            m.lease_renewed.clone(),
        );
        registry.register(
            "host_token_renewals",
            "Renewals of the agent's own host token, by result (renewed, failed, refused)",
            m.host_token_renewals.clone(),
        );
        registry.register_with_unit(
            "host_token_expiry_timestamp",
            "When the agent's current host token expires (0 until a renewal tells)",
            Unit::Seconds,
            m.host_token_expiry.clone(),
        );
        *m.registry.lock().unwrap_or_else(|e| e.into_inner()) = registry;
        m
    }

    /// The queue whose depth `/metrics` reports.
    pub fn watch_queue(&self, queue: Arc<WorkQueue<String>>) {
        let _ = self.queue.set(queue);
    }

    /// Counts a failed manifest.
    pub fn failed(&self, reason: &str) {
        self.failures
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Records that `work` settled now.
    pub fn settled(&self, work: &str) {
        self.last_sync.get_or_create(&labels(work)).set(now());
    }

    /// Forgets a Work that left the inventory.
    pub fn forget(&self, work: &str) {
        self.last_sync.remove(&labels(work));
    }

    /// Counts a host-token renewal that came to `result`.
    pub fn host_token_renewal(&self, result: &str) {
        self.host_token_renewals
            .get_or_create(&ResultLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    /// Records a renewal of the Lease now.
    pub fn lease_renewed(&self) {
        self.lease_renewed.set(now());
    }
}

impl MetricsText for AgentMetrics {
    fn encode(&self) -> String {
        if let Some(q) = self.queue.get() {
            self.queue_depth
                .set(i64::try_from(q.len()).unwrap_or(i64::MAX));
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

fn labels(work: &str) -> WorkLabels {
    WorkLabels {
        work: work.to_owned(),
    }
}

fn now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_named_under_the_agent_prefix_and_move_with_the_counts() {
        let m = AgentMetrics::new();
        m.applies.inc();
        m.failed("Forbidden");
        m.failed("Forbidden");
        m.settled("w1");
        m.host_token_renewal("failed");
        m.host_token_expiry.set(1_900_000_000);
        let queue = WorkQueue::new();
        queue.add("a".to_owned());
        m.watch_queue(queue);
        let page = m.encode();
        assert!(page.contains("flotilla_agent_applies_total 1\n"), "{page}");
        assert!(
            page.contains("flotilla_agent_apply_failures_total{reason=\"Forbidden\"} 2\n"),
            "{page}"
        );
        assert!(
            page.contains("flotilla_agent_work_queue_depth 1\n"),
            "{page}"
        );
        assert!(
            page.contains("flotilla_agent_work_last_sync_timestamp_seconds{work=\"w1\"}"),
            "{page}"
        );
        assert!(
            page.contains("flotilla_agent_host_token_renewals_total{result=\"failed\"} 1\n"),
            "{page}"
        );
        assert!(
            page.contains("flotilla_agent_host_token_expiry_timestamp_seconds 1900000000\n"),
            "{page}"
        );
        assert!(page.ends_with("# EOF\n"), "{page}");
        m.forget("w1");
        assert!(!m.encode().contains("work=\"w1\""));
    }
}
