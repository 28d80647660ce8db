//! `core.kubefed.io/v1beta1`: the cluster registry (KubeFedCluster), the control-plane
//! configuration singleton (KubeFedConfig) and the type configs (FederatedTypeConfig).
//! JSON shapes match kubefed v0.10 field for field.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::kubefed_config::*;

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
    /// Ready=False, Offline=True: the rotating member token expired before a renewal got
    /// through.
    pub const CLUSTER_CREDENTIAL_EXPIRED: &str = "ClusterCredentialExpired";
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
    /// The address of the member's API server, e.g. `https://10.0.0.5:6443` (empty for a
    /// Pull cluster: the host never calls it).
    #[serde(default)]
    pub api_endpoint: String,
    /// PEM bundle of CAs the member's serving certificate is verified against (base64 in JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::core::byte_string")]
    pub ca_bundle: Option<String>,
    /// The Secret, in the control-plane namespace, whose key `token` holds the bearer token
    /// (unused for a Pull cluster).
    #[serde(default)]
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
    /// Flotilla extension: how objects reach the cluster. `Push` (absent: the default) —
    /// the control plane writes them through `apiEndpoint`; `Pull` — the control plane
    /// writes Works into the host namespace `flotilla-cluster-<name>` and the cluster's
    /// `flotilla agent` applies them (no endpoint or credential of the member in the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ClusterMode>,
    /// Flotilla extension: an exec credential plugin (client-go's exec protocol) the
    /// control plane runs for the member's credential instead of reading `secretRef`. Its
    /// command must lie under the controller-manager's `--exec-plugin-dir`; without that
    /// flag no plugin runs and the cluster is ConfigMalformed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<Box<ExecPlugin>>,
}

/// An exec credential plugin: a command printing an `ExecCredential` whose
/// `status.token` (and `status.expirationTimestamp`, when it expires) the client uses.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecPlugin {
    /// The `ExecCredential` version the plugin speaks (default
    /// `client.authentication.k8s.io/v1beta1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Absolute path of the plugin.
    pub command: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables set for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<ExecEnvVar>,
}

/// One environment variable of an exec plugin.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ExecEnvVar {
    /// Its name.
    pub name: String,
    /// Its value (not a secret: it is visible to whoever reads the KubeFedCluster).
    pub value: String,
}

/// How objects reach a member cluster.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ClusterMode {
    /// The control plane writes to the member's API server.
    #[default]
    Push,
    /// The member's agent pulls its inventory from the host.
    Pull,
}

impl KubeFedClusterSpec {
    /// Whether the cluster is in pull mode.
    pub fn is_pull(&self) -> bool {
        self.mode == Some(ClusterMode::Pull)
    }
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
    /// Flotilla extension: the member's nodes and what its pods request, kept from watches
    /// by the capacity controller (the health probe never writes it). Boxed: most readers
    /// of a KubeFedCluster never look at it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Box<ClusterResources>>,
}

/// A member's resource summary (Flotilla extension).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterResources {
    /// Nodes.
    pub nodes: i64,
    /// Nodes whose `Ready` condition is `True`.
    pub ready_nodes: i64,
    /// What the nodes offer: `cpu`, `memory`, `pods` (Kubernetes quantities).
    #[serde(default)]
    pub allocatable: BTreeMap<String, String>,
    /// What the pods bound to them request: `cpu`, `memory`, `pods`.
    #[serde(default)]
    pub requested: BTreeMap<String, String>,
    /// Pods in the member, bound or not.
    pub pods: i64,
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
    /// Flotilla extension: CEL rules saying when a member object of the target type is
    /// healthy, progressing or failed, why, and its ready of desired replicas; they gate
    /// rollouts and fill `status.aggregated` (read with `statusCollection: Enabled`).
    /// Absent: the workload kinds use their built-in rules, other types are healthy once
    /// propagated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::health::HealthRules>,
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
    /// Flotilla extension: the `HealthRules` condition, when `spec.health` is set
    /// (`InvalidHealthRule` names the rule that does not compile).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<crate::work::Condition>,
}

/// Schema of a `[]byte` field (base64 string in JSON), as kubefed's CRDs have it.
pub(crate) fn byte_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "string", "format": "byte" })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
