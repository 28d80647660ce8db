//! `core.kubefed.io/v1beta1` KubeFedConfig: the control-plane configuration singleton
//! (kubefed's shape field for field, plus Flotilla's `scheduling`), and the same settings
//! with every default filled in ([`EffectiveConfig`]). Re-exported by [`crate::core`].

use std::time::Duration;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration;

/// The control-plane configuration singleton, named `kubefed`.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "core.kubefed.io",
    version = "v1beta1",
    kind = "KubeFedConfig",
    plural = "kubefedconfigs",
    namespaced,
    category = "kubefed",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KubeFedConfigSpec {
    /// `Cluster` or `Namespaced`: what the control plane watches.
    #[serde(default = "default_scope")]
    pub scope: String,
    /// Delays and timeouts of the controllers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_duration: Option<DurationConfig>,
    /// Leader election timings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_elect: Option<LeaderElectConfig>,
    /// Feature gates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feature_gates: Vec<FeatureGatesConfig>,
    /// How member clusters are health-checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_health_check: Option<ClusterHealthCheckConfig>,
    /// The sync (propagation) controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_controller: Option<SyncControllerConfig>,
    /// The status controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_controller: Option<StatusControllerConfig>,
    /// Flotilla extension: the scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<SchedulingConfig>,
    /// Flotilla extension: Multi-Cluster Services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multi_cluster_services: Option<MultiClusterServicesConfig>,
}

/// The ClusterSet IP ranges when `multiClusterServices.clusterSetIPRanges` is not set: one
/// IPv4 range (in 240.0.0.0/4, reserved, so it collides with no routed network) and one IPv6
/// range (unique local addresses).
pub const DEFAULT_CLUSTERSET_IP_RANGES: [&str; 2] = ["244.0.0.0/16", "fd00:244::/112"];

/// Multi-Cluster Services settings (Flotilla extension).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterServicesConfig {
    /// CIDRs the ClusterSet IPs (`spec.ips` of ClusterSetIP ServiceImports) are allocated
    /// from, at most one per IP family; unset: [`DEFAULT_CLUSTERSET_IP_RANGES`]; empty: no
    /// allocation.
    #[serde(
        default,
        rename = "clusterSetIPRanges",
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_set_ip_ranges: Option<Vec<String>>,
}

/// Scheduler settings (Flotilla extension).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingConfig {
    /// How long an object that lists no toleration for `flotilla.io/unreachable` stays on
    /// an unreachable cluster before it moves (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_unreachable_toleration_seconds: Option<i64>,
    /// How long a pod of a ReplicaSchedulingPreference's workload may stay unschedulable
    /// in a member before that member's capacity is estimated from it (Go duration; kubefed's
    /// fixed 60 s by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unschedulable_threshold: Option<String>,
}

fn default_scope() -> String {
    "Cluster".to_string()
}

/// Controller delays (Go duration strings).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DurationConfig {
    /// Delay before requeueing objects after a cluster becomes available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_delay: Option<String>,
    /// Delay before requeueing objects after a cluster becomes unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_delay: Option<String>,
    /// How long to wait for caches to sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_sync_timeout: Option<String>,
}

/// Leader election timings (Go duration strings).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaderElectConfig {
    /// How long a lease is valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration: Option<String>,
    /// How long the leader retries renewing before giving up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_deadline: Option<String>,
    /// How often candidates retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_period: Option<String>,
    /// Lock kind (kubefed: `configmaps` or `endpoints`; Flotilla always uses a Lease).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_lock: Option<String>,
}

/// One feature gate.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeatureGatesConfig {
    /// Gate name, e.g. `PushReconciler`.
    pub name: String,
    /// `Enabled` or `Disabled`.
    pub configuration: String,
}

/// Cluster health check settings.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterHealthCheckConfig {
    /// How often each cluster is probed (Go duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    /// Consecutive failures before a cluster is marked not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<i64>,
    /// Consecutive successes before a cluster is marked ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_threshold: Option<i64>,
    /// Timeout of one probe (Go duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// Sync controller settings.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncControllerConfig {
    /// Federated objects reconciled at once per type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_reconciles: Option<i64>,
    /// `Enabled` (adopt pre-existing member objects) or `Disabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopt_resources: Option<String>,
    /// Flotilla extension: how long deletion waits for an unready cluster before giving up
    /// on it (Go duration; default 5m). A cluster removed from the registry is never waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unready_cluster_deletion_timeout: Option<String>,
}

/// Status controller settings.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusControllerConfig {
    /// Objects reconciled at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_reconciles: Option<i64>,
}

/// KubeFedConfig with every default filled in, in Rust types.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectiveConfig {
    /// `Cluster` or `Namespaced`.
    pub scope: String,
    /// Health probe period.
    pub health_period: Duration,
    /// Health probe timeout.
    pub health_timeout: Duration,
    /// Failures before unready.
    pub failure_threshold: u32,
    /// Successes before ready.
    pub success_threshold: u32,
    /// Concurrent reconciles per federated type.
    pub max_concurrent_reconciles: usize,
    /// Adopt pre-existing member objects.
    pub adopt_resources: bool,
    /// How long deletion waits for an unready cluster.
    pub unready_cluster_deletion_timeout: Duration,
    /// Requeue delay after a cluster becomes available.
    pub available_delay: Duration,
    /// Requeue delay after a cluster becomes unavailable.
    pub unavailable_delay: Duration,
    /// Leader election lease duration.
    pub lease_duration: Duration,
    /// Leader election renew deadline.
    pub renew_deadline: Duration,
    /// Leader election retry period.
    pub retry_period: Duration,
    /// Toleration of the unreachable taint for objects that list none, in seconds.
    pub default_unreachable_toleration_seconds: i64,
    /// How long a workload's pod stays unschedulable before the RSP estimates capacity.
    pub unschedulable_threshold: Duration,
    /// CIDRs of the ClusterSet IPs, as written (parsed, and reported when invalid, by the
    /// MCS controller).
    pub clusterset_ip_ranges: Vec<String>,
}

/// kubefed's unschedulable threshold (its podanalyzer's fixed 60 s).
pub const DEFAULT_UNSCHEDULABLE_THRESHOLD: Duration = Duration::from_secs(60);

/// Flotilla's default for concurrent reconciles (kubefed's is 1, see its #1392).
pub const DEFAULT_MAX_CONCURRENT_RECONCILES: usize = 16;

impl KubeFedConfigSpec {
    /// The spec kubefed writes when the singleton is absent, with every default spelled out.
    pub fn with_defaults() -> Self {
        KubeFedConfigSpec {
            scope: default_scope(),
            controller_duration: Some(DurationConfig {
                available_delay: Some("20s".into()),
                unavailable_delay: Some("1m0s".into()),
                cache_sync_timeout: Some("5m0s".into()),
            }),
            leader_elect: Some(LeaderElectConfig {
                lease_duration: Some("15s".into()),
                renew_deadline: Some("10s".into()),
                retry_period: Some("5s".into()),
                resource_lock: Some("configmaps".into()),
            }),
            feature_gates: vec![
                FeatureGatesConfig {
                    name: "PushReconciler".into(),
                    configuration: "Enabled".into(),
                },
                FeatureGatesConfig {
                    name: "SchedulerPreferences".into(),
                    configuration: "Enabled".into(),
                },
                FeatureGatesConfig {
                    name: "RawResourceStatusCollection".into(),
                    configuration: "Disabled".into(),
                },
            ],
            cluster_health_check: Some(ClusterHealthCheckConfig {
                period: Some("10s".into()),
                failure_threshold: Some(3),
                success_threshold: Some(1),
                timeout: Some("3s".into()),
            }),
            sync_controller: Some(SyncControllerConfig {
                max_concurrent_reconciles: Some(DEFAULT_MAX_CONCURRENT_RECONCILES as i64),
                adopt_resources: Some("Enabled".into()),
                unready_cluster_deletion_timeout: Some("5m0s".into()),
            }),
            status_controller: Some(StatusControllerConfig {
                max_concurrent_reconciles: Some(1),
            }),
            scheduling: Some(SchedulingConfig {
                default_unreachable_toleration_seconds: Some(
                    DEFAULT_UNREACHABLE_TOLERATION_SECONDS,
                ),
                unschedulable_threshold: None,
            }),
            multi_cluster_services: Some(MultiClusterServicesConfig {
                cluster_set_ip_ranges: Some(
                    DEFAULT_CLUSTERSET_IP_RANGES.map(String::from).to_vec(),
                ),
            }),
        }
    }

    /// Resolves the spec into typed settings; a missing or malformed field takes its default.
    pub fn effective(&self) -> EffectiveConfig {
        fn dur(v: Option<&String>, default: Duration) -> Duration {
            v.and_then(|s| duration::parse(s))
                .filter(|d| !d.is_zero())
                .unwrap_or(default)
        }
        fn count(v: Option<i64>, default: u32) -> u32 {
            v.and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0)
                .unwrap_or(default)
        }
        let hc = self.cluster_health_check.clone().unwrap_or_default();
        let sc = self.sync_controller.clone().unwrap_or_default();
        let cd = self.controller_duration.clone().unwrap_or_default();
        let le = self.leader_elect.clone().unwrap_or_default();
        EffectiveConfig {
            scope: if self.scope.is_empty() {
                default_scope()
            } else {
                self.scope.clone()
            },
            health_period: dur(hc.period.as_ref(), Duration::from_secs(10)),
            health_timeout: dur(hc.timeout.as_ref(), Duration::from_secs(3)),
            failure_threshold: count(hc.failure_threshold, 3),
            success_threshold: count(hc.success_threshold, 1),
            max_concurrent_reconciles: count(
                sc.max_concurrent_reconciles,
                DEFAULT_MAX_CONCURRENT_RECONCILES as u32,
            ) as usize,
            adopt_resources: sc.adopt_resources.as_deref() != Some("Disabled"),
            unready_cluster_deletion_timeout: dur(
                sc.unready_cluster_deletion_timeout.as_ref(),
                Duration::from_secs(300),
            ),
            available_delay: dur(cd.available_delay.as_ref(), Duration::from_secs(20)),
            unavailable_delay: dur(cd.unavailable_delay.as_ref(), Duration::from_secs(60)),
            lease_duration: dur(le.lease_duration.as_ref(), Duration::from_secs(15)),
            renew_deadline: dur(le.renew_deadline.as_ref(), Duration::from_secs(10)),
            retry_period: dur(le.retry_period.as_ref(), Duration::from_secs(5)),
            default_unreachable_toleration_seconds: self
                .scheduling
                .as_ref()
                .and_then(|s| s.default_unreachable_toleration_seconds)
                .filter(|s| *s >= 0)
                .unwrap_or(DEFAULT_UNREACHABLE_TOLERATION_SECONDS),
            unschedulable_threshold: dur(
                self.scheduling
                    .as_ref()
                    .and_then(|s| s.unschedulable_threshold.as_ref()),
                DEFAULT_UNSCHEDULABLE_THRESHOLD,
            ),
            clusterset_ip_ranges: self
                .multi_cluster_services
                .as_ref()
                .and_then(|m| m.cluster_set_ip_ranges.clone())
                .unwrap_or_else(|| DEFAULT_CLUSTERSET_IP_RANGES.map(String::from).to_vec()),
        }
    }
}

impl Default for EffectiveConfig {
    fn default() -> Self {
        KubeFedConfigSpec::default().effective()
    }
}

/// Default toleration of the unreachable taint (KubeFedConfig
/// `scheduling.defaultUnreachableTolerationSeconds`).
pub const DEFAULT_UNREACHABLE_TOLERATION_SECONDS: i64 = 300;
