//! Prometheus metrics of multi-cluster controllers, labelled by controller (and outcome):
//! reconciles, reconcile durations, queue depth, and objects collected.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// Labels of a controller-wide series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// The controller's name.
    pub controller: String,
}

/// Labels of a reconcile count.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// The controller's name.
    pub controller: String,
    /// [`super::Outcome::as_str`].
    pub result: &'static str,
}

/// Labels of the collector's count.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GcLabels {
    /// The controller's name.
    pub controller: String,
    /// What was done: `delete`, `orphan`.
    pub op: &'static str,
}

/// The metrics of every multi-cluster controller of a process.
pub struct ControllerMetrics {
    /// Reconciles by controller and outcome.
    pub reconciles: Family<ReconcileLabels, Counter>,
    /// Reconcile durations in seconds.
    pub reconcile_duration: Family<ControllerLabels, Histogram>,
    /// Keys ready in the queue.
    pub queue_depth: Family<ControllerLabels, Gauge>,
    /// Dependents deleted or orphaned by garbage collection.
    pub gc_operations: Family<GcLabels, Counter>,
}

impl ControllerMetrics {
    /// The metrics, registered in `registry` under the prefix `multicluster_controller`.
    pub fn new(registry: &mut Registry) -> Self {
        let metrics = ControllerMetrics {
            reconciles: Family::default(),
            reconcile_duration: Family::new_with_constructor(|| {
                Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                    0.001, 2.0, 16,
                ))
            }),
            queue_depth: Family::default(),
            gc_operations: Family::default(),
        };
        let sub = registry.sub_registry_with_prefix("multicluster_controller");
        sub.register(
            "reconciles",
            "Reconciles by controller and result",
            metrics.reconciles.clone(),
        );
        sub.register(
            "reconcile_duration_seconds",
            "How long reconciles took",
            metrics.reconcile_duration.clone(),
        );
        sub.register(
            "queue_depth",
            "Keys waiting to be reconciled",
            metrics.queue_depth.clone(),
        );
        sub.register(
            "gc_operations",
            "Dependents deleted or orphaned by cross-cluster garbage collection",
            metrics.gc_operations.clone(),
        );
        metrics
    }
}
