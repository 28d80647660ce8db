//! SIG-Multicluster's Cluster Inventory API (KEP-4322), `multicluster.x-k8s.io/v1alpha1`:
//! the ClusterProfile Flotilla publishes for every joined cluster, so tools that read the
//! inventory (Argo CD, MultiKueue, multicluster-runtime, ...) see Flotilla's members without
//! another registration. The JSON shape follows the published v1alpha1 schema of
//! `sigs.k8s.io/cluster-inventory-api`; types and names only, no I/O.
//!
//! Left out of the schema, on purpose: the CEL rule that keeps `spec.clusterManager`
//! immutable (`x-kubernetes-validations` needs Kubernetes ≥ 1.23; the controller never
//! changes it), and in an access provider's `cluster` the kubeconfig fields that name local
//! files (`certificate-authority`) or carry free-form `extensions`. No field of this type can
//! hold a credential: consumers bring their own (see `docs/standards.md`).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of the Cluster Inventory API.
pub const INVENTORY_GROUP: &str = "multicluster.x-k8s.io";
/// Label naming the cluster manager that owns a ClusterProfile (value: its name).
pub const CLUSTER_MANAGER_LABEL: &str = "x-k8s.io/cluster-manager";
/// Flotilla's name as a cluster manager: `spec.clusterManager.name` and the label's value.
pub const CLUSTER_MANAGER_NAME: &str = "flotilla";
/// Name of the access provider Flotilla lists: a consumer configures a credential provider
/// of this name (e.g. an exec plugin) and gets from the profile only where and how to
/// verify the API server.
pub const ACCESS_PROVIDER_NAME: &str = "flotilla";

/// Condition types of a ClusterProfile.
pub mod condition {
    /// The API defines it: whether the cluster's control plane is healthy.
    pub const CONTROL_PLANE_HEALTHY: &str = "ControlPlaneHealthy";
    /// Whether the cluster is joined to the cluster manager (as Open Cluster Management
    /// reports it): True while its KubeFedCluster exists.
    pub const JOINED: &str = "Joined";
}

/// One cluster of a multi-cluster inventory, as its cluster manager sees it.
// clippy reads each `printcolumn(type_ = ..)` as a repeat of one attribute; they are distinct columns.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ClusterProfile",
    plural = "clusterprofiles",
    namespaced,
    status = "ClusterProfileStatus",
    category = "multicluster",
    derive = "PartialEq",
    printcolumn(
        name = "Display Name",
        type_ = "string",
        json_path = ".spec.displayName"
    ),
    printcolumn(
        name = "Manager",
        type_ = "string",
        json_path = ".spec.clusterManager.name"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.version.kubernetes"
    ),
    printcolumn(
        name = "Healthy",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='ControlPlaneHealthy')].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProfileSpec {
    /// A human-readable name of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The cluster manager that owns this profile (never changed once set).
    pub cluster_manager: ClusterManager,
}

/// The cluster manager owning a ClusterProfile.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ClusterManager {
    /// Name of the cluster manager; also the value of the `x-k8s.io/cluster-manager` label.
    pub name: String,
}

/// Observed state of a ClusterProfile.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProfileStatus {
    /// Conditions of the cluster (`ControlPlaneHealthy`, `Joined`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ProfileCondition>,
    /// Versions of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<ClusterVersion>,
    /// Properties of the cluster: About API ClusterProperties (KEP-2149) or the cluster
    /// manager's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub properties: Vec<Property>,
    /// Deprecated by the API in favour of `accessProviders`; same shape.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credential_providers: Vec<AccessProvider>,
    /// Ways a consumer can connect to the cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_providers: Vec<AccessProvider>,
}

impl ClusterProfileStatus {
    /// The condition of the given type, if present.
    pub fn condition(&self, type_: &str) -> Option<&ProfileCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// A condition in the shape of `metav1.Condition`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProfileCondition {
    /// Type of the condition, in CamelCase.
    #[serde(rename = "type")]
    #[schemars(length(max = 316))]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The `metadata.generation` the condition was set from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// When the status last changed (RFC 3339).
    pub last_transition_time: String,
    /// A machine-readable CamelCase reason.
    #[schemars(length(min = 1, max = 1024))]
    pub reason: String,
    /// A human-readable message (may be empty).
    #[schemars(length(max = 32768))]
    pub message: String,
}

/// Version information of a cluster.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ClusterVersion {
    /// The Kubernetes version (`gitVersion`) of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<String>,
}

/// A name/value property of a cluster.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Property {
    /// Well-known or custom name of the property.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The property's value.
    #[schemars(length(min = 1, max = 1024))]
    pub value: String,
    /// When the property was last observed on the cluster (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_observed_time: Option<String>,
}

/// One way a consumer can connect to the cluster: which provider, and the cluster's
/// connection details (never a credential).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct AccessProvider {
    /// Name a consumer matches against its configured access providers.
    pub name: String,
    /// How to reach and verify the cluster's API server (kubeconfig `cluster` shape).
    #[serde(default)]
    pub cluster: AccessCluster,
}

/// The connection fields of a kubeconfig `cluster` entry.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct AccessCluster {
    /// URL of the API server.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server: String,
    /// Server name used to verify the serving certificate, when not the host of `server`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_server_name: Option<String>,
    /// Skips verifying the serving certificate (insecure).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_tls_verify: bool,
    /// PEM CA bundle the serving certificate is verified against (base64 in JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::core::byte_string")]
    pub certificate_authority_data: Option<String>,
    /// Proxy to reach the cluster through (http, https or socks5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_url: Option<String>,
    /// Disables response compression.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_compression: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;
    use serde_json::json;

    #[test]
    fn a_profile_serializes_in_the_published_json_shape() {
        let mut profile = ClusterProfile::new(
            "member1",
            ClusterProfileSpec {
                display_name: Some("member1".into()),
                cluster_manager: ClusterManager {
                    name: CLUSTER_MANAGER_NAME.into(),
                },
            },
        );
        profile.status = Some(ClusterProfileStatus {
            version: Some(ClusterVersion {
                kubernetes: Some("v1.20.2".into()),
            }),
            access_providers: vec![AccessProvider {
                name: ACCESS_PROVIDER_NAME.into(),
                cluster: AccessCluster {
                    server: "https://127.0.0.1:6443".into(),
                    certificate_authority_data: Some("Q0E=".into()),
                    ..Default::default()
                },
            }],
            ..Default::default()
        });
        let value = serde_json::to_value(&profile).expect("serializable");
        assert_eq!(value["apiVersion"], "multicluster.x-k8s.io/v1alpha1");
        assert_eq!(value["spec"]["clusterManager"]["name"], "flotilla");
        assert_eq!(value["status"]["version"], json!({"kubernetes": "v1.20.2"}));
        assert_eq!(
            value["status"]["accessProviders"][0]["cluster"],
            json!({"server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0E="})
        );
    }

    #[test]
    fn the_crd_is_namespaced_with_a_status_subresource() {
        let crd = ClusterProfile::crd();
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("clusterprofiles.multicluster.x-k8s.io")
        );
        assert!(
            crd.spec.versions[0]
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some())
        );
    }
}
