//! Prometheus metrics of the control plane, under the prefix `flotilla`.
//!
//! One [`Metrics`] is built at start-up and shared (`Arc`) by every controller. Each
//! controller's families live in their own sub-struct, registered at construction (today
//! [`ClusterMetrics`] for the cluster registry). A controller added later can either add its
//! sub-struct here or register families at run time with [`Metrics::register`] /
//! [`Metrics::with_registry`]. [`Metrics::encode`] renders the OpenMetrics text for
//! `/metrics`.

use std::sync::Mutex;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry, Unit};

/// Prefix of every metric name.
pub const PREFIX: &str = "flotilla";

/// The metric registry and the families of the controllers.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Families of the cluster registry and health checks.
    pub clusters: ClusterMetrics,
    /// Families of the sync (propagation) controllers.
    pub sync: SyncMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every built-in family registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let clusters = ClusterMetrics::register(&mut registry);
        let sync = SyncMetrics::register(&mut registry);
        Metrics {
            registry: Mutex::new(registry),
            clusters,
            sync,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        // A poisoned lock only means a panic while registering or encoding; the registry
        // still holds valid families, so keep serving it.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers one more family (its name gets the `flotilla_` prefix). Keep a clone of the
    /// metric to update it: prometheus-client metrics share their state between clones.
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.lock().register(name, help, metric);
    }

    /// Runs `f` on the registry, e.g. to register with a unit or into a sub-registry.
    pub fn with_registry<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        f(&mut self.lock())
    }

    /// Every family in the OpenMetrics text format, for `/metrics`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; an error could only come from a broken
        // custom encoder, and then a partial page is still the most useful answer.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.lock());
        out
    }
}

/// Label set naming one member cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    /// Name of the KubeFedCluster.
    pub cluster: String,
}

/// Outcome of one health probe, as a bounded label value.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ProbeResult {
    /// `/healthz` said `ok`.
    Ready,
    /// `/healthz` answered something else.
    NotReady,
    /// The member rejected the credentials.
    Unauthorized,
    /// The request failed or timed out.
    Offline,
}

/// Label set of a probe counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    /// Name of the KubeFedCluster.
    pub cluster: String,
    /// What the probe found.
    pub result: ProbeResult,
}

fn probe_histogram() -> Histogram {
    // 5 ms … ~10 s: loopback answers in milliseconds, a probe timeout is seconds.
    Histogram::new(exponential_buckets(0.005, 2.0, 12))
}

/// Families of the cluster registry and health checks.
#[derive(Debug, Clone)]
pub struct ClusterMetrics {
    /// `flotilla_clusters`: registered member clusters.
    pub clusters: Gauge,
    /// `flotilla_ready_clusters`: member clusters whose health check says Ready.
    pub ready_clusters: Gauge,
    /// `flotilla_cluster_probe_duration_seconds{cluster}`: latency of `/healthz` probes.
    pub probe_duration: Family<ClusterLabels, Histogram, fn() -> Histogram>,
    /// `flotilla_cluster_probes_total{cluster,result}`: probes by outcome.
    pub probes: Family<ProbeLabels, Counter>,
}

impl ClusterMetrics {
    fn register(registry: &mut Registry) -> Self {
        let metrics = ClusterMetrics {
            clusters: Gauge::default(),
            ready_clusters: Gauge::default(),
            probe_duration: Family::new_with_constructor(probe_histogram),
            probes: Family::default(),
        };
        registry.register(
            "clusters",
            "Registered member clusters (KubeFedClusters)",
            metrics.clusters.clone(),
        );
        registry.register(
            "ready_clusters",
            "Member clusters whose health check says Ready",
            metrics.ready_clusters.clone(),
        );
        registry.register_with_unit(
            "cluster_probe_duration",
            "Latency of /healthz probes of member clusters",
            Unit::Seconds,
            metrics.probe_duration.clone(),
        );
        registry.register(
            "cluster_probes",
            "Health probes of member clusters by outcome",
            metrics.probes.clone(),
        );
        metrics
    }

    /// Records one probe.
    pub fn observe_probe(&self, cluster: &str, result: ProbeResult, seconds: f64) {
        let cluster = cluster.to_owned();
        self.probe_duration
            .get_or_create(&ClusterLabels {
                cluster: cluster.clone(),
            })
            .observe(seconds);
        self.probes
            .get_or_create(&ProbeLabels { cluster, result })
            .inc();
    }

    /// Drops the per-cluster series of a cluster that left the registry.
    pub fn forget_cluster(&self, cluster: &str) {
        self.probe_duration.remove(&ClusterLabels {
            cluster: cluster.to_owned(),
        });
        for result in [
            ProbeResult::Ready,
            ProbeResult::NotReady,
            ProbeResult::Unauthorized,
            ProbeResult::Offline,
        ] {
            self.probes.remove(&ProbeLabels {
                cluster: cluster.to_owned(),
                result,
            });
        }
    }
}

/// Label set naming a federated type.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabels {
    /// The federated kind, e.g. `FederatedDeployment`.
    pub kind: String,
}

/// Label set of a reconcile counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// The federated kind.
    pub kind: String,
    /// `success`, `waiting` or `failure` (`sync::ReconcileResult::as_str`).
    pub result: &'static str,
}

/// Label set of a per-cluster failure counter: the kubefed reason is a bounded set.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// The federated kind.
    pub kind: String,
    /// kubefed's per-cluster reason (`ClusterReason::as_str`).
    pub reason: &'static str,
}

/// Label set of member operations.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// The member cluster.
    pub cluster: String,
    /// `create`, `update`, `delete` or `unlabel`.
    pub operation: &'static str,
    /// `ok` or `error`.
    pub result: &'static str,
}

fn reconcile_histogram() -> Histogram {
    // 1 ms … ~30 s.
    Histogram::new(exponential_buckets(0.001, 2.5, 12))
}

/// Families of the sync controllers.
#[derive(Debug, Clone)]
pub struct SyncMetrics {
    /// `flotilla_reconciles_total{kind,result}`.
    pub reconciles: Family<ReconcileLabels, Counter>,
    /// `flotilla_reconcile_duration_seconds{kind}`.
    pub reconcile_duration: Family<TypeLabels, Histogram, fn() -> Histogram>,
    /// `flotilla_propagation_failures_total{kind,reason}`: per-cluster failures reported.
    pub failures: Family<FailureLabels, Counter>,
    /// `flotilla_member_operations_total{cluster,operation,result}`.
    pub operations: Family<OperationLabels, Counter>,
    /// `flotilla_member_operation_duration_seconds{cluster}`.
    pub operation_duration: Family<ClusterLabels, Histogram, fn() -> Histogram>,
    /// `flotilla_queue_depth{kind}`: keys waiting in a type's work queue.
    pub queue_depth: Family<TypeLabels, Gauge>,
    /// `flotilla_status_writes_total{kind}`: status updates of federated objects.
    pub status_writes: Family<TypeLabels, Counter>,
}

impl SyncMetrics {
    fn register(registry: &mut Registry) -> Self {
        let m = SyncMetrics {
            reconciles: Family::default(),
            reconcile_duration: Family::new_with_constructor(reconcile_histogram),
            failures: Family::default(),
            operations: Family::default(),
            operation_duration: Family::new_with_constructor(reconcile_histogram),
            queue_depth: Family::default(),
            status_writes: Family::default(),
        };
        registry.register(
            "reconciles",
            "Reconciles of federated objects by result",
            m.reconciles.clone(),
        );
        registry.register_with_unit(
            "reconcile_duration",
            "Duration of one reconcile of a federated object",
            Unit::Seconds,
            m.reconcile_duration.clone(),
        );
        registry.register(
            "propagation_failures",
            "Per-cluster propagation failures reported in status, by reason",
            m.failures.clone(),
        );
        registry.register(
            "member_operations",
            "Writes sent to member clusters",
            m.operations.clone(),
        );
        registry.register_with_unit(
            "member_operation_duration",
            "Latency of writes to member clusters",
            Unit::Seconds,
            m.operation_duration.clone(),
        );
        registry.register(
            "queue_depth",
            "Federated objects waiting to be reconciled",
            m.queue_depth.clone(),
        );
        registry.register(
            "status_writes",
            "Status updates written to federated objects",
            m.status_writes.clone(),
        );
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_metrics_carry_the_flotilla_prefix_and_per_cluster_probe_latency() {
        let metrics = Metrics::new();
        metrics.clusters.clusters.set(2);
        metrics.clusters.ready_clusters.set(1);
        metrics
            .clusters
            .observe_probe("member1", ProbeResult::Ready, 0.012);
        let text = metrics.encode();
        assert!(text.contains("flotilla_clusters 2"), "{text}");
        assert!(text.contains("flotilla_ready_clusters 1"), "{text}");
        assert!(
            text.contains("flotilla_cluster_probe_duration_seconds_count{cluster=\"member1\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("flotilla_cluster_probes_total{cluster=\"member1\",result=\"Ready\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn a_forgotten_cluster_has_no_series_left() {
        let metrics = Metrics::new();
        metrics
            .clusters
            .observe_probe("gone", ProbeResult::Offline, 1.0);
        metrics.clusters.forget_cluster("gone");
        assert!(!metrics.encode().contains("gone"));
    }

    #[test]
    fn other_controllers_can_register_their_own_families() {
        let metrics = Metrics::new();
        let reconciles: Counter = Counter::default();
        metrics.register("sync_reconciles", "Reconciles", reconciles.clone());
        reconciles.inc();
        assert!(
            metrics
                .encode()
                .contains("flotilla_sync_reconciles_total 1")
        );
    }
}
