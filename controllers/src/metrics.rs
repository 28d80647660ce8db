//! Prometheus metrics of the control plane, under the prefix `flotilla`.
//!
//! One [`Metrics`] is built at start-up and shared (`Arc`) by every controller. Each
//! controller's families live in their own sub-struct, registered at construction (today
//! [`ClusterMetrics`] for the cluster registry). A controller added later can either add its
//! sub-struct here or register families at run time with [`Metrics::register`] /
//! [`Metrics::with_registry`]. [`Metrics::encode`] renders the OpenMetrics text for
//! `/metrics`.

use std::sync::{Arc, Mutex};

use flotilla_multicluster::runner::QueueAges;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry, Unit};

/// Prefix of every metric name.
pub const PREFIX: &str = "flotilla";

/// Declares a struct of metric families and its `register`, from one list: each field with
/// its type, its initial value, its name (`in Unit` for a unit suffix) and its help. One list
/// keeps a family's field, name and help from drifting apart as families are added.
macro_rules! families {
    (@unit) => { None };
    (@unit $unit:ident) => { Some(Unit::$unit) };
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$doc:meta])*
                $field:ident: $ty:ty = $init:expr,
                    $metric:literal $(in $unit:ident)?, $help:literal;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        pub struct $name {
            $( $(#[$doc])* pub $field: $ty, )*
        }

        impl $name {
            fn register(registry: &mut Registry) -> Self {
                let families = $name { $( $field: $init, )* };
                $(
                    let unit = families!(@unit $($unit)?);
                    register_family(registry, $metric, $help, unit, families.$field.clone());
                )*
                families
            }
        }
    };
}

/// Registers one family, with its unit suffix when it has one.
fn register_family(
    registry: &mut Registry,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    metric: impl Metric,
) {
    match unit {
        Some(unit) => registry.register_with_unit(name, help, unit, metric),
        None => registry.register(name, help, metric),
    }
}

/// The metric registry and the families of the controllers.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Families of the cluster registry and health checks.
    pub clusters: ClusterMetrics,
    /// Families of the sync (propagation) controllers.
    pub sync: SyncMetrics,
    /// Families of the ServiceAccountImport controller.
    pub imports: ImportMetrics,
    /// Families of the ClusterProfile inventory.
    pub profiles: ProfileMetrics,
    /// `flotilla_queue_oldest_age_seconds{queue}`: every keyed runner's queue given it,
    /// read at each scrape.
    pub queue_ages: Arc<QueueAges>,
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
        let imports = ImportMetrics::register(&mut registry);
        let profiles = ProfileMetrics::register(&mut registry);
        // The member watches' own family (every watch of the process shares it).
        flotilla_multicluster::member_watch::register_metrics(&mut registry);
        let queue_ages = QueueAges::new();
        registry.register_collector(Box::new(queue_ages.clone()));
        Metrics {
            registry: Mutex::new(registry),
            clusters,
            sync,
            imports,
            profiles,
            queue_ages,
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

impl flotilla_multicluster::http::MetricsText for Metrics {
    fn encode(&self) -> String {
        Metrics::encode(self)
    }
}

/// Label set naming one member cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    /// Name of the KubeFedCluster.
    pub cluster: String,
}

/// Label set of a member's readiness: the cluster and how it is reached.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterModeLabels {
    /// Name of the KubeFedCluster.
    pub cluster: String,
    /// `push` (the control plane writes to the member) or `pull` (an agent in the member
    /// pulls Works and its heartbeat says Ready).
    pub mode: &'static str,
}

impl ClusterModeLabels {
    /// The labels of a member, from whether it is a Pull cluster.
    pub fn new(cluster: &str, pull: bool) -> Self {
        ClusterModeLabels {
            cluster: cluster.to_owned(),
            mode: if pull { "pull" } else { "push" },
        }
    }
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

/// Outcome of one member token renewal, as a bounded label value.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum RenewalResult {
    /// A new token was issued and stored.
    Renewed,
    /// The TokenRequest or the Secret write failed.
    Failed,
}

/// Label set of a renewal counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RenewalLabels {
    /// Name of the KubeFedCluster.
    pub cluster: String,
    /// What the renewal did.
    pub result: RenewalResult,
}

fn probe_histogram() -> Histogram {
    // 5 ms … ~10 s: loopback answers in milliseconds, a probe timeout is seconds.
    Histogram::new(exponential_buckets(0.005, 2.0, 12))
}

families! {
    /// Families of the cluster registry and health checks.
    pub struct ClusterMetrics {
        /// `flotilla_clusters`: registered member clusters.
        clusters: Gauge = Gauge::default(),
            "clusters", "Registered member clusters (KubeFedClusters)";
        /// `flotilla_ready_clusters`: member clusters whose health check says Ready.
        ready_clusters: Gauge = Gauge::default(),
            "ready_clusters", "Member clusters whose health check says Ready";
        /// `flotilla_cluster_ready{cluster,mode}`: 1 while a member's health check (a Pull
        /// member's agent heartbeat) says Ready, else 0; what alerts name a member by.
        cluster_ready: Family<ClusterModeLabels, Gauge> = Family::default(),
            "cluster_ready", "1 while the member cluster is Ready (probe, or agent heartbeat for pull), else 0";
        /// `flotilla_cluster_probe_duration_seconds{cluster}`: latency of `/healthz` probes.
        probe_duration: Family<ClusterLabels, Histogram, fn() -> Histogram>
            = Family::new_with_constructor(probe_histogram),
            "cluster_probe_duration" in Seconds, "Latency of /healthz probes of member clusters";
        /// `flotilla_cluster_probes_total{cluster,result}`: probes by outcome.
        probes: Family<ProbeLabels, Counter> = Family::default(),
            "cluster_probes", "Health probes of member clusters by outcome";
        /// `flotilla_credential_renewals_total{cluster,result}`: member token renewals.
        renewals: Family<RenewalLabels, Counter> = Family::default(),
            "credential_renewals", "Renewals of rotating member tokens by outcome";
        /// `flotilla_credential_expiry_timestamp_seconds{cluster}`: when the member token
        /// the control plane holds expires (alert on `- time() < 600`).
        expiry: Family<ClusterLabels, Gauge> = Family::default(),
            "credential_expiry_timestamp" in Seconds, "Expiry (Unix time) of the rotating member token the control plane holds";
    }
}

impl ClusterMetrics {
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

    /// Records one renewal attempt and the expiry of the token held after it.
    pub fn observe_renewal(
        &self,
        cluster: &str,
        result: RenewalResult,
        held: &flotilla_core::credential::Rotation,
    ) {
        let cluster = cluster.to_owned();
        self.expiry
            .get_or_create(&ClusterLabels {
                cluster: cluster.clone(),
            })
            .set(held.expires_at.as_second());
        self.renewals
            .get_or_create(&RenewalLabels { cluster, result })
            .inc();
    }

    /// Drops the per-cluster series of a cluster that left the registry.
    pub fn forget_cluster(&self, cluster: &str) {
        self.expiry.remove(&ClusterLabels {
            cluster: cluster.to_owned(),
        });
        for result in [RenewalResult::Renewed, RenewalResult::Failed] {
            self.renewals.remove(&RenewalLabels {
                cluster: cluster.to_owned(),
                result,
            });
        }
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

/// Label set of a rollout transition: the kind and the Rollout condition's new reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutLabels {
    /// The federated kind.
    pub kind: String,
    /// `RolloutReason::as_str`: `Progressing`, `Complete`, `Paused`, `Failed`, ...
    pub reason: &'static str,
}

/// Label set of drift: the member cluster and the field manager that changed its object.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DriftLabels {
    /// The member cluster.
    pub cluster: String,
    /// The field manager owning the drifted fields now (`unknown` when none does).
    pub manager: String,
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

families! {
    /// Families of the sync controllers.
    pub struct SyncMetrics {
        /// `flotilla_reconciles_total{kind,result}`.
        reconciles: Family<ReconcileLabels, Counter> = Family::default(),
            "reconciles", "Reconciles of federated objects by result";
        /// `flotilla_reconcile_duration_seconds{kind}`.
        reconcile_duration: Family<TypeLabels, Histogram, fn() -> Histogram>
            = Family::new_with_constructor(reconcile_histogram),
            "reconcile_duration" in Seconds, "Duration of one reconcile of a federated object";
        /// `flotilla_propagation_failures_total{kind,reason}`: per-cluster failures reported.
        failures: Family<FailureLabels, Counter> = Family::default(),
            "propagation_failures", "Per-cluster propagation failures reported in status, by reason";
        /// `flotilla_member_operations_total{cluster,operation,result}`.
        operations: Family<OperationLabels, Counter> = Family::default(),
            "member_operations", "Writes sent to member clusters";
        /// `flotilla_member_operation_duration_seconds{cluster}`.
        operation_duration: Family<ClusterLabels, Histogram, fn() -> Histogram>
            = Family::new_with_constructor(reconcile_histogram),
            "member_operation_duration" in Seconds, "Latency of writes to member clusters";
        /// `flotilla_queue_depth{kind}`: keys waiting in a type's work queue.
        queue_depth: Family<TypeLabels, Gauge> = Family::default(),
            "queue_depth", "Federated objects waiting to be reconciled";
        /// `flotilla_sync_workers_ready{kind}`: workers past the readiness gate, taking keys
        /// (`maxConcurrentReconciles` once the type's caches and the registry are ready).
        workers_ready: Family<TypeLabels, Gauge> = Family::default(),
            "sync_workers_ready", "Sync workers of a federated type that passed the readiness gate and take keys";
        /// `flotilla_status_writes_total{kind}`: status updates of federated objects.
        status_writes: Family<TypeLabels, Counter> = Family::default(),
            "status_writes", "Status updates written to federated objects";
        /// `flotilla_drift_total{cluster,manager}`: member objects found changed by another
        /// writer (each repair, each newly reported drift, each fight declared).
        drift: Family<DriftLabels, Counter> = Family::default(),
            "drift", "Member objects found changed by a writer other than Flotilla, by the writer";
        /// `flotilla_rollout_transitions_total{kind,reason}`: rollouts whose `Rollout`
        /// condition took a new reason (a rollout halting counts once under `Failed`).
        rollout_transitions: Family<RolloutLabels, Counter> = Family::default(),
            "rollout_transitions", "Rollouts whose Rollout condition changed reason, by the new reason";
    }
}

/// Label set of a ServiceAccountImport reconcile: its Ready reason, a bounded set.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ImportLabels {
    /// `ImportReason::as_str`.
    pub reason: &'static str,
}

families! {
    /// Families of the ServiceAccountImport controller.
    pub struct ImportMetrics {
        /// `flotilla_serviceaccountimport_reconciles_total{reason}`.
        reconciles: Family<ImportLabels, Counter> = Family::default(),
            "serviceaccountimport_reconciles", "Reconciles of ServiceAccountImports by the Ready reason they ended with";
        /// `flotilla_serviceaccountimport_tokens_issued_total`: TokenRequests that succeeded.
        tokens_issued: Counter = Counter::default(),
            "serviceaccountimport_tokens_issued", "Tokens obtained from member TokenRequest APIs and written to import Secrets";
    }
}

/// Label set of a ClusterProfile write: which write and how it ended, both bounded.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProfileWriteLabels {
    /// `apply` or `delete` (`profiles::plan::Op::as_str`).
    pub op: &'static str,
    /// `success` or `failure`.
    pub result: &'static str,
}

families! {
    /// Families of the ClusterProfile inventory.
    pub struct ProfileMetrics {
        /// `flotilla_cluster_profile_writes_total{op,result}`.
        writes: Family<ProfileWriteLabels, Counter> = Family::default(),
            "cluster_profile_writes", "ClusterProfile writes (apply of metadata, spec and status; delete) by outcome";
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
        metrics
            .clusters
            .cluster_ready
            .get_or_create(&ClusterModeLabels::new("member2", true))
            .set(0);
        let text = metrics.encode();
        assert!(
            text.contains("flotilla_cluster_ready{cluster=\"member2\",mode=\"pull\"} 0"),
            "{text}"
        );
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
