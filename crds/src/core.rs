//! `core.kubefed.io/v1beta1`: the cluster registry (KubeFedCluster), the control-plane
//! configuration singleton (KubeFedConfig) and the type configs (FederatedTypeConfig).
//! JSON shapes match kubefed v0.10 field for field.

use std::time::Duration;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration;

/// Condition types of a KubeFedCluster.
pub mod condition {
    /// The cluster answered `/healthz` with `ok`.
    pub const READY: &str = "Ready";
    /// The cluster could not be reached at all.
    pub const OFFLINE: &str = "Offline";
    /// No client could be built from the KubeFedCluster and its Secret.
    pub const CONFIG_MALFORMED: &str = "ConfigMalformed";
}

/// Condition reasons of a KubeFedCluster (kubefed's strings, plus Flotilla's more specific ones).
pub mod reason {
    /// Ready=True.
    pub const CLUSTER_READY: &str = "ClusterReady";
    /// Ready=False: reachable but `/healthz` did not say `ok`.
    pub const CLUSTER_NOT_READY: &str = "ClusterNotReady";
    /// Offline=True: the request failed.
    pub const CLUSTER_NOT_REACHABLE: &str = "ClusterNotReachable";
    /// Offline=False.
    pub const CLUSTER_REACHABLE: &str = "ClusterReachable";
    /// ConfigMalformed=True: the client configuration could not be built.
    pub const CLUSTER_CONFIG_MALFORMED: &str = "ClusterConfigMalformed";
    /// Ready=False: the member rejected the credentials (401/403).
    pub const CLUSTER_UNAUTHORIZED: &str = "ClusterUnauthorized";
}

/// The cluster registry entry: how to reach one member cluster.
// clippy reads each `printcolumn(type_ = ..)` as a repeat of one attribute; they are distinct columns.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "core.kubefed.io",
    version = "v1beta1",
    kind = "KubeFedCluster",
    plural = "kubefedclusters",
    namespaced,
    shortname = "kfc",
    category = "kubefed",
    status = "KubeFedClusterStatus",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].reason",
        priority = 1
    ),
    printcolumn(
        name = "Kubernetes-Version",
        type_ = "string",
        json_path = ".status.kubernetesVersion"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KubeFedClusterSpec {
    /// The address of the member's API server, e.g. `https://10.0.0.5:6443`.
    pub api_endpoint: String,
    /// PEM bundle of CAs the member's serving certificate is verified against (base64 in JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::core::byte_string")]
    pub ca_bundle: Option<String>,
    /// The Secret, in the control-plane namespace, whose key `token` holds the bearer token.
    pub secret_ref: LocalSecretReference,
    /// TLS checks to skip: `*` (all; must be alone), `SubjectName`, `ValidityPeriod`.
    #[serde(
        default,
        rename = "disabledTLSValidations",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub disabled_tls_validations: Vec<TlsValidation>,
    /// Proxy to reach the member through: http, https or socks5.
    #[serde(default, rename = "proxyURL", skip_serializing_if = "Option::is_none")]
    pub proxy_url: Option<String>,
    /// Flotilla extension: taints (core/v1 Taint shape). `NoSchedule` keeps new placements
    /// off; `NoExecute` also moves objects that do not tolerate it away. The registry adds
    /// `flotilla.io/unreachable:NoExecute` while the cluster is not Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<crate::taint::Taint>,
}

/// A reference to a Secret in the same namespace.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct LocalSecretReference {
    /// Name of the Secret.
    pub name: String,
}

/// A TLS validation that a KubeFedCluster may disable.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum TlsValidation {
    /// Every validation.
    #[serde(rename = "*")]
    All,
    /// The certificate's subject name against the endpoint's host.
    SubjectName,
    /// The certificate's validity period.
    ValidityPeriod,
}

/// Observed state of a member cluster.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeFedClusterStatus {
    /// Ready, Offline and ConfigMalformed conditions.
    #[serde(default)]
    pub conditions: Vec<ClusterCondition>,
    /// `gitVersion` the member reports on `/version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// Zones of the cluster (kept for kubefed compatibility; not filled in).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// Region of the cluster (kept for kubefed compatibility; not filled in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// One condition of a KubeFedCluster.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCondition {
    /// `Ready`, `Offline` or `ConfigMalformed`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When the cluster was last probed (RFC 3339).
    pub last_probe_time: String,
    /// When the status last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// A machine-readable CamelCase reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl KubeFedClusterStatus {
    /// The condition of the given type, if present.
    pub fn condition(&self, type_: &str) -> Option<&ClusterCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the Ready condition is `True`.
    pub fn is_ready(&self) -> bool {
        self.condition(condition::READY)
            .is_some_and(|c| c.status == "True")
    }
}

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
}

/// Scheduler settings (Flotilla extension).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingConfig {
    /// How long an object that lists no toleration for `flotilla.io/unreachable` stays on
    /// an unreachable cluster before it moves (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_unreachable_toleration_seconds: Option<i64>,
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
}

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
                    crate::schedule::DEFAULT_UNREACHABLE_TOLERATION_SECONDS,
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
                .unwrap_or(crate::schedule::DEFAULT_UNREACHABLE_TOLERATION_SECONDS),
        }
    }
}

impl Default for EffectiveConfig {
    fn default() -> Self {
        KubeFedConfigSpec::default().effective()
    }
}

/// Enables propagation of one target type through its federated type.
// clippy reads each `printcolumn(type_ = ..)` as a repeat of one attribute; they are distinct columns.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "core.kubefed.io",
    version = "v1beta1",
    kind = "FederatedTypeConfig",
    plural = "federatedtypeconfigs",
    namespaced,
    shortname = "ftc",
    category = "kubefed",
    status = "FederatedTypeConfigStatus",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Propagation",
        type_ = "string",
        json_path = ".spec.propagation"
    ),
    printcolumn(
        name = "Controller",
        type_ = "string",
        json_path = ".status.propagationController"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FederatedTypeConfigSpec {
    /// The type propagated into member clusters.
    pub target_type: ApiResource,
    /// `Enabled` or `Disabled`.
    pub propagation: PropagationMode,
    /// The Federated&lt;Kind&gt; type in the host.
    pub federated_type: ApiResource,
    /// Status type (kubefed's FederatedServiceStatus); optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_type: Option<ApiResource>,
    /// `Enabled` or `Disabled`: whether member status is collected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_collection: Option<StatusCollectionMode>,
}

/// Identifies a Kubernetes API type (kubefed's APIResource).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiResource {
    /// API group; empty for the core group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
    /// Lowercase plural, e.g. `deployments`.
    pub plural_name: String,
    /// `Namespaced` or `Cluster`.
    pub scope: Scope,
}

impl ApiResource {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether objects of this type live in a namespace.
    pub fn namespaced(&self) -> bool {
        self.scope == Scope::Namespaced
    }

    /// The same type as a kube dynamic `ApiResource`.
    pub fn to_kube(&self) -> kube::core::ApiResource {
        kube::core::ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: self.api_version(),
            kind: self.kind.clone(),
            plural: self.plural_name.clone(),
        }
    }

    /// `<plural>.<group>`, or `<plural>` for the core group: the FTC name kubefed uses.
    pub fn qualified_name(&self) -> String {
        if self.group.is_empty() {
            self.plural_name.clone()
        } else {
            format!("{}.{}", self.plural_name, self.group)
        }
    }
}

/// Resource scope.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Scope {
    /// Objects live in namespaces.
    #[default]
    Namespaced,
    /// Objects are cluster-wide.
    Cluster,
}

/// Whether a type config propagates.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PropagationMode {
    /// Propagation runs.
    #[default]
    Enabled,
    /// Propagation is stopped.
    Disabled,
}

/// Whether member status is collected.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum StatusCollectionMode {
    /// Collected.
    Enabled,
    /// Not collected.
    #[default]
    Disabled,
}

/// Observed state of a type config.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedTypeConfigStatus {
    /// Generation the controller last acted on.
    #[serde(default)]
    pub observed_generation: i64,
    /// `Running` or `NotRunning`.
    // An Option, not a defaulted String: schemars would derive `default: ""`, which
    // apiserver v1.20's CRD conversion drops and then rejects as null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub propagation_controller: Option<String>,
    /// `Running` or `NotRunning`, when status collection is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_controller: Option<String>,
}

/// Schema of a `[]byte` field (base64 string in JSON), as kubefed's CRDs have it.
pub(crate) fn byte_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "string", "format": "byte" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_kubefed_config_takes_kubefeds_health_defaults() {
        let e = KubeFedConfigSpec::default().effective();
        assert_eq!(e.health_period, Duration::from_secs(10));
        assert_eq!(e.health_timeout, Duration::from_secs(3));
        assert_eq!(e.failure_threshold, 3);
        assert_eq!(e.success_threshold, 1);
        assert!(e.adopt_resources);
        assert!(e.max_concurrent_reconciles > 1);
    }

    #[test]
    fn the_written_defaults_resolve_to_the_same_settings_as_an_empty_spec() {
        let written = KubeFedConfigSpec::with_defaults().effective();
        let empty = KubeFedConfigSpec::default().effective();
        assert_eq!(written, empty);
    }

    #[test]
    fn adoption_can_be_disabled() {
        let mut spec = KubeFedConfigSpec::with_defaults();
        if let Some(s) = spec.sync_controller.as_mut() {
            s.adopt_resources = Some("Disabled".into());
        }
        assert!(!spec.effective().adopt_resources);
    }

    #[test]
    fn kubefed_cluster_json_uses_kubefeds_field_names() {
        let json = serde_json::json!({
            "apiEndpoint": "https://127.0.0.1:6443",
            "caBundle": "Zm9v",
            "secretRef": {"name": "c1-secret"},
            "disabledTLSValidations": ["*"],
            "proxyURL": "socks5://127.0.0.1:1080"
        });
        let spec: KubeFedClusterSpec = serde_json::from_value(json.clone()).expect("parses");
        assert_eq!(spec.disabled_tls_validations, vec![TlsValidation::All]);
        assert_eq!(serde_json::to_value(&spec).expect("serializes"), json);
    }
}
