//! SIG-Multicluster's Multi-Cluster Services API (KEP-1645), `multicluster.x-k8s.io`:
//! ServiceExport and ServiceImport, `v1beta1` served and stored, `v1alpha1` served too (same
//! group, no conversion webhook: the two versions' shapes differ only in fields v1alpha1
//! lacks, which the API server prunes when an object is read at v1alpha1). Types, names and
//! the well-known labels only; no I/O.
//!
//! Left out of the schema, on purpose: `x-kubernetes-validations` (CEL needs Kubernetes ≥
//! 1.23) and the RFC-1123 patterns on cluster names (Flotilla's cluster names are
//! KubeFedCluster names, already DNS-1123 subdomains).

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::SessionAffinityConfig,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::Condition,
};
use kube::{CustomResourceExt, core::crd::merge_crds};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of the Multi-Cluster Services API.
pub const MCS_GROUP: &str = "multicluster.x-k8s.io";
/// The version Flotilla reads and writes (and the storage version of its CRDs).
pub const MCS_VERSION: &str = "v1beta1";
/// Label on an imported EndpointSlice: the name of the multi-cluster service (its
/// ServiceImport) it belongs to.
pub const SERVICE_NAME_LABEL: &str = "multicluster.kubernetes.io/service-name";
/// Label on an imported EndpointSlice: the cluster whose endpoints it carries.
pub const SOURCE_CLUSTER_LABEL: &str = "multicluster.kubernetes.io/source-cluster";
/// EndpointSlice label naming the controller that manages a slice.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY_LABEL`] on slices Flotilla writes, and of
/// [`IMPORT_MANAGED_BY_LABEL`] on its ServiceImports.
pub const MANAGED_BY: &str = "mcs.flotilla.io";
/// Label on every ServiceImport Flotilla writes (value [`MANAGED_BY`]); a ServiceImport
/// without it belongs to someone else and is never touched.
pub const IMPORT_MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The label Kubernetes' own EndpointSlice controller puts on a Service's slices.
pub const K8S_SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// ServiceExport condition types and reasons (as the v1beta1 API lists them).
pub mod condition {
    /// The export refers to a Service that can be exported.
    pub const VALID: &str = "Valid";
    /// The service has been exported to the ClusterSet.
    pub const READY: &str = "Ready";
    /// Some property differs between the exports of one name.
    pub const CONFLICT: &str = "Conflict";
    /// Reason of `Valid=True`.
    pub const REASON_VALID: &str = "Valid";
    /// `Valid=False`: no Service of the export's name.
    pub const REASON_NO_SERVICE: &str = "NoService";
    /// `Valid=False`: an ExternalName Service.
    pub const REASON_INVALID_SERVICE_TYPE: &str = "InvalidServiceType";
    /// `Ready=True`: imports and endpoints were written to the ClusterSet.
    pub const REASON_EXPORTED: &str = "Exported";
    /// `Ready=False`: the export is not valid, or writing the imports failed.
    pub const REASON_FAILED: &str = "Failed";
    /// `Conflict=True`: ports differ.
    pub const REASON_PORT_CONFLICT: &str = "PortConflict";
    /// `Conflict=True`: headless in one cluster, not in another.
    pub const REASON_TYPE_CONFLICT: &str = "TypeConflict";
    /// `Conflict=True`: session affinity differs.
    pub const REASON_SESSION_AFFINITY_CONFLICT: &str = "SessionAffinityConflict";
    /// `Conflict=True`: session affinity config differs.
    pub const REASON_SESSION_AFFINITY_CONFIG_CONFLICT: &str = "SessionAffinityConfigConflict";
    /// `Conflict=False`.
    pub const REASON_NO_CONFLICTS: &str = "NoConflicts";
    /// `Conflict=True`: `internalTrafficPolicy` differs.
    pub const REASON_INTERNAL_TRAFFIC_POLICY_CONFLICT: &str = "InternalTrafficPolicyConflict";
    /// `Conflict=True`: `trafficDistribution` differs.
    pub const REASON_TRAFFIC_DISTRIBUTION_CONFLICT: &str = "TrafficDistributionConflict";
    /// `Conflict=True`: `ipFamilies` differ (Flotilla's reason).
    pub const REASON_IP_FAMILY_CONFLICT: &str = "IPFamilyConflict";
    /// `Conflict=True`: `exportedLabels` differ.
    pub const REASON_LABELS_CONFLICT: &str = "LabelsConflict";
    /// `Conflict=True`: `exportedAnnotations` differ.
    pub const REASON_ANNOTATIONS_CONFLICT: &str = "AnnotationsConflict";
    /// Flotilla's condition on a ClusterSetIP ServiceImport and on its exports: whether the
    /// import has its ClusterSet IPs.
    pub const IPS_ALLOCATED: &str = "ClusterSetIPAllocated";
    /// `ClusterSetIPAllocated=True`: allocated from the configured ranges.
    pub const REASON_ALLOCATED: &str = "Allocated";
    /// `ClusterSetIPAllocated=False`: every address of the family's range is taken.
    pub const REASON_RANGE_EXHAUSTED: &str = "RangeExhausted";
    /// `ClusterSetIPAllocated=False`: no valid range of a family the service needs (a
    /// configured range that does not parse is named in the message).
    pub const REASON_NO_RANGE: &str = "NoRangeForFamily";
    /// `ClusterSetIPAllocated=False`: `spec.ips` was written by another manager; Flotilla
    /// leaves them as they are.
    pub const REASON_IPS_OF_ANOTHER_MANAGER: &str = "IPsSetByAnotherManager";
}

/// Annotation on a ServiceImport: the ClusterSet IPs Flotilla allocated and wrote into
/// `spec.ips` (comma-separated). `spec.ips` that differ were written by someone else.
pub const CLUSTERSET_IPS_ANNOTATION: &str = "mcs.flotilla.io/clusterset-ips";
/// Annotation on an imported EndpointSlice: the source cluster's id (its About API
/// `cluster.clusterset.k8s.io` property), the `<clusterid>` of the MCS DNS names.
pub const SOURCE_CLUSTER_ID_ANNOTATION: &str = "mcs.flotilla.io/source-cluster-id";

/// Observed state of a ServiceExport.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportStatus {
    /// `Valid`, `Ready`, `Conflict`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The type of an imported service.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServiceImportType {
    /// Reached through a ClusterSet IP (the exported Services have cluster IPs).
    #[default]
    ClusterSetIP,
    /// Backends addressed directly (the exported Services are headless).
    Headless,
}

impl ServiceImportType {
    /// The API's spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            ServiceImportType::ClusterSetIP => "ClusterSetIP",
            ServiceImportType::Headless => "Headless",
        }
    }
}

/// A port of an imported service.
#[derive(
    Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    /// The port's name (matches the EndpointSlice port name).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// TCP, UDP or SCTP (default TCP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// The application protocol of the port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// The port number.
    pub port: i32,
}

/// An exporting cluster of a ServiceImport.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ClusterStatus {
    /// Name of the exporting cluster.
    pub cluster: String,
}

/// Observed state of a ServiceImport.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportStatus {
    /// `Present` or `Absent`: whether imported EndpointSlices exist for the import.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_slice_objects: Option<String>,
    /// The clusters exporting the service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["cluster"]))]
    pub clusters: Vec<ClusterStatus>,
    /// Conditions of the import.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The storage version, `v1beta1`.
pub mod v1beta1 {
    use super::*;
    use kube::CustomResource;

    /// ServiceExport: the Service of the same namespace and name is exported to the
    /// ClusterSet.
    // The typed root needs a `spec`; exports are usually written without one, so read
    // exports from a cluster as dynamic objects (as the controller does).
    // clippy reads each `printcolumn(type_ = ..)` as a repeat of one attribute; they are distinct columns.
    #[allow(clippy::duplicated_attributes)]
    #[derive(
        CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema,
    )]
    #[kube(
        group = "multicluster.x-k8s.io",
        version = "v1beta1",
        kind = "ServiceExport",
        plural = "serviceexports",
        namespaced,
        status = "ServiceExportStatus",
        shortname = "svcex",
        shortname = "svcexport",
        category = "multicluster",
        derive = "PartialEq",
        derive = "Default",
        printcolumn(
            name = "Valid",
            type_ = "string",
            json_path = ".status.conditions[?(@.type=='Valid')].status"
        ),
        printcolumn(
            name = "Ready",
            type_ = "string",
            json_path = ".status.conditions[?(@.type=='Ready')].status"
        ),
        printcolumn(
            name = "Conflict",
            type_ = "string",
            json_path = ".status.conditions[?(@.type=='Conflict')].status"
        ),
        printcolumn(
            name = "Age",
            type_ = "date",
            json_path = ".metadata.creationTimestamp"
        )
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ServiceExportSpec {
        /// Labels to export with the service: copied to the ServiceImports.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub exported_labels: BTreeMap<String, String>,
        /// Annotations to export with the service: copied to the ServiceImports.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub exported_annotations: BTreeMap<String, String>,
    }

    /// ServiceImport: a service of the ClusterSet, made of the Services exported under
    /// its namespace and name.
    #[allow(clippy::duplicated_attributes)]
    #[derive(
        CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema,
    )]
    #[kube(
        group = "multicluster.x-k8s.io",
        version = "v1beta1",
        kind = "ServiceImport",
        plural = "serviceimports",
        namespaced,
        status = "ServiceImportStatus",
        shortname = "svcim",
        shortname = "svcimport",
        category = "multicluster",
        derive = "PartialEq",
        derive = "Default",
        printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
        printcolumn(name = "IP", type_ = "string", json_path = ".spec.ips"),
        printcolumn(
            name = "Clusters",
            type_ = "string",
            json_path = ".status.clusters[*].cluster"
        ),
        printcolumn(
            name = "Age",
            type_ = "date",
            json_path = ".metadata.creationTimestamp"
        )
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ServiceImportSpec {
        /// The merged ports of the exported Services.
        pub ports: Vec<ServicePort>,
        /// The ClusterSet VIPs (type ClusterSetIP), one per IP family, allocated by Flotilla
        /// from the configured ranges unless another manager set them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(length(max = 2))]
        pub ips: Vec<String>,
        /// ClusterSetIP or Headless.
        #[serde(rename = "type")]
        pub type_: ServiceImportType,
        /// `ClientIP` or `None` (ignored for Headless).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub session_affinity: Option<String>,
        /// Session affinity configuration.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub session_affinity_config: Option<SessionAffinityConfig>,
        /// IP families of the import.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(length(max = 2))]
        pub ip_families: Vec<String>,
        /// `Cluster` or `Local`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub internal_traffic_policy: Option<String>,
        /// A hint for how traffic is distributed, e.g. `PreferClose`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub traffic_distribution: Option<String>,
    }
}

/// The first version, `v1alpha1`: served for clients that have not moved on.
pub mod v1alpha1 {
    use super::*;
    use kube::CustomResource;

    /// ServiceExport at v1alpha1 (no spec fields).
    #[derive(
        CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema,
    )]
    #[kube(
        group = "multicluster.x-k8s.io",
        version = "v1alpha1",
        kind = "ServiceExport",
        plural = "serviceexports",
        namespaced,
        status = "ServiceExportStatus",
        shortname = "svcex",
        shortname = "svcexport",
        category = "multicluster"
    )]
    pub struct ServiceExportSpec {}

    /// ServiceImport at v1alpha1.
    #[derive(
        CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema,
    )]
    #[kube(
        group = "multicluster.x-k8s.io",
        version = "v1alpha1",
        kind = "ServiceImport",
        plural = "serviceimports",
        namespaced,
        status = "ServiceImportStatus",
        shortname = "svcim",
        shortname = "svcimport",
        category = "multicluster"
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ServiceImportSpec {
        /// The merged ports of the exported Services.
        pub ports: Vec<ServicePort>,
        /// The ClusterSet VIP (type ClusterSetIP).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(length(max = 1))]
        pub ips: Vec<String>,
        /// ClusterSetIP or Headless.
        #[serde(rename = "type")]
        pub type_: ServiceImportType,
        /// `ClientIP` or `None`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub session_affinity: Option<String>,
        /// Session affinity configuration.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub session_affinity_config: Option<SessionAffinityConfig>,
    }
}

pub use v1beta1::{ServiceExport, ServiceExportSpec, ServiceImport, ServiceImportSpec};

/// The two CRDs: each with v1beta1 (served, stored; listed first, so tools that read the
/// first version see the current one) and v1alpha1 (served).
pub fn mcs_crds() -> Vec<CustomResourceDefinition> {
    let merged = [
        merge_crds(
            vec![
                v1beta1::ServiceExport::crd(),
                v1alpha1::ServiceExport::crd(),
            ],
            MCS_VERSION,
        ),
        merge_crds(
            vec![
                v1beta1::ServiceImport::crd(),
                v1alpha1::ServiceImport::crd(),
            ],
            MCS_VERSION,
        ),
    ];
    // Invariant: both inputs of each merge are generated above with the same group, kind,
    // names and scope, which is all merge_crds checks.
    merged
        .into_iter()
        .map(|m| spec_optional(m.expect("the MCS CRD versions agree on names and scope")))
        .collect()
}

/// The API makes `spec` optional on both kinds (a ServiceExport is usually written without
/// one); the derive makes it required.
fn spec_optional(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let root = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut());
        if let Some(root) = root {
            let mut required = root.required.take().unwrap_or_default();
            required.retain(|r| r != "spec");
            root.required = (!required.is_empty()).then_some(required);
        }
    }
    crd
}

/// A ServiceExport's creation time as the API writes it (RFC 3339; empty when unset): the
/// conflict rule's "oldest export wins" compares these.
pub fn export_created(export: &kube::api::DynamicObject) -> String {
    export
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A string map of a ServiceExport's spec (`exportedLabels`, `exportedAnnotations`;
/// empty when absent or not a string map). Dynamic: an export without `spec` does not fit
/// a typed struct.
pub fn export_spec_map(
    export: &kube::api::DynamicObject,
    field: &str,
) -> std::collections::BTreeMap<String, String> {
    export
        .data
        .get("spec")
        .and_then(|s| s.get(field))
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_crds_serve_two_versions_and_store_v1beta1() {
        let crds = mcs_crds();
        assert_eq!(crds.len(), 2);
        for crd in &crds {
            let versions: Vec<(&str, bool, bool)> = crd
                .spec
                .versions
                .iter()
                .map(|v| (v.name.as_str(), v.served, v.storage))
                .collect();
            assert_eq!(
                versions,
                vec![("v1beta1", true, true), ("v1alpha1", true, false)]
            );
            assert!(
                crd.spec
                    .versions
                    .iter()
                    .all(|v| v.subresources.as_ref().is_some_and(|s| s.status.is_some())),
                "status subresource on every version"
            );
        }
        for v in crds.iter().flat_map(|c| &c.spec.versions) {
            let root = v
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref());
            let required = root.and_then(|r| r.required.clone()).unwrap_or_default();
            assert!(!required.contains(&"spec".to_string()), "{}", v.name);
        }
        let names: Vec<_> = crds
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        assert_eq!(
            names,
            vec![
                "serviceexports.multicluster.x-k8s.io",
                "serviceimports.multicluster.x-k8s.io"
            ]
        );
    }

    #[test]
    fn a_service_import_has_the_apis_json_shape() {
        let import = ServiceImport::new(
            "web",
            ServiceImportSpec {
                ports: vec![ServicePort {
                    name: "http".into(),
                    protocol: Some("TCP".into()),
                    app_protocol: None,
                    port: 80,
                }],
                type_: ServiceImportType::Headless,
                ..Default::default()
            },
        );
        let json = serde_json::to_value(&import).expect("serializes");
        assert_eq!(json["apiVersion"], "multicluster.x-k8s.io/v1beta1");
        assert_eq!(json["spec"]["type"], "Headless");
        assert_eq!(json["spec"]["ports"][0]["port"], 80);
        assert!(json["spec"].get("ips").is_none());
    }
}
