//! Multi-Cluster Services across Pull clusters: the **ServiceExportReport**
//! (`multicluster.flotilla.io/v1alpha1`), one per ServiceExport of a Pull member, written by
//! that member's agent into its inventory namespace of the host (`flotilla-cluster-NAME`)
//! with the agent's own credential — the host never reads a Pull member. Its spec is what the
//! MCS planner reads of a push member's caches (the export, its Service, Kubernetes' own
//! EndpointSlices of it); its status is the control plane's answer (the export's `Valid`,
//! `Ready`, `Conflict` and `ClusterSetIPAllocated` conditions), which the agent copies onto
//! the ServiceExport in its member. Types and pure conversions only; no I/O.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Service, SessionAffinityConfig},
    apimachinery::pkg::apis::meta::v1::Condition,
};
use kube::{CustomResource, ResourceExt, api::DynamicObject};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::mcs::{ServicePort, export_created, export_spec_map};

/// Label on a Work carrying a Pull member's MCS objects (its ServiceImport and imported
/// EndpointSlices): `<namespace>.<name>` of the service. Such Works have no
/// `work.flotilla.io/type` label, so no type's sync controller takes them for its own.
pub const MCS_WORK_LABEL: &str = "mcs.flotilla.io/service";
/// Label on the reports an agent writes (value [`REPORTER`]): an agent deletes only those
/// when their export is gone, never a report someone else wrote.
pub const REPORTER_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`REPORTER_LABEL`].
pub const REPORTER: &str = "flotilla-agent";
/// Annotation on a Pull member's Lease: the EndpointSlice version (`v1`, `v1beta1`) its
/// member serves, as the agent discovered it (the host cannot ask the member).
pub const SLICE_VERSION_ANNOTATION: &str = "mcs.flotilla.io/endpointslice-version";

/// What a Pull member's agent reports of one of its ServiceExports.
// clippy reads each `printcolumn(type_ = ..)` as a repeat of one attribute; they are distinct columns.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.flotilla.io",
    version = "v1alpha1",
    kind = "ServiceExportReport",
    plural = "serviceexportreports",
    shortname = "ser",
    namespaced,
    status = "ServiceExportReportStatus",
    category = "kubefed",
    category = "flotilla",
    derive = "PartialEq",
    printcolumn(name = "Namespace", type_ = "string", json_path = ".spec.namespace"),
    printcolumn(name = "Service", type_ = "string", json_path = ".spec.name"),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Valid')].status"
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
pub struct ServiceExportReportSpec {
    /// Namespace of the ServiceExport (and its Service) in the member.
    pub namespace: String,
    /// Name of the ServiceExport (and its Service).
    pub name: String,
    /// The export's `metadata.creationTimestamp` (RFC 3339): the oldest export wins a conflict.
    #[serde(default)]
    pub created: String,
    /// The export's `metadata.generation` (the conditions' `observedGeneration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The export's `spec.exportedLabels`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_labels: BTreeMap<String, String>,
    /// The export's `spec.exportedAnnotations`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_annotations: BTreeMap<String, String>,
    /// The exported Service; absent when the member has no Service of that name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ReportedService>,
    /// Kubernetes' own EndpointSlices of the Service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoint_slices: Vec<ReportedSlice>,
}

/// What the planner reads of a Service.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportedService {
    /// `spec.type`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// `spec.clusterIP` (`None` for a headless Service).
    #[serde(default, rename = "clusterIP", skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<String>,
    /// `spec.ports` (name, protocol, appProtocol, port).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ServicePort>,
    /// `spec.sessionAffinity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    /// `spec.sessionAffinityConfig`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// `spec.ipFamilies`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_families: Vec<String>,
    /// `spec.internalTrafficPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    /// `spec.trafficDistribution`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
}

/// One of the Service's EndpointSlices in the member.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ReportedSlice {
    /// Its name in the member.
    pub name: String,
    /// Its `addressType`, `endpoints` and `ports`, in the shape of the EndpointSlice version
    /// the member serves (each endpoint's `targetRef` left out: it names a member Pod).
    #[schemars(schema_with = "crate::federated::preserve_object")]
    pub content: Value,
}

/// The control plane's answer about the export.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportReportStatus {
    /// The conditions the ServiceExport in the member should carry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The report's name for the export `namespace/name`: `<namespace>.<name>` (both are DNS
/// labels, so the name is a valid, unique DNS subdomain).
pub fn report_name(namespace: &str, name: &str) -> String {
    format!("{namespace}.{name}")
}

/// The report's spec for an export (dynamic: an export without `spec` does not fit the
/// typed struct), its Service (if any) and the member's EndpointSlices of that Service.
pub fn report_spec(
    export: &DynamicObject,
    service: Option<&Service>,
    slices: &[&DynamicObject],
) -> ServiceExportReportSpec {
    let mut endpoint_slices: Vec<ReportedSlice> = slices
        .iter()
        .map(|s| ReportedSlice {
            name: s.name_any(),
            content: slice_content(&s.data),
        })
        .collect();
    endpoint_slices.sort_by(|a, b| a.name.cmp(&b.name));
    ServiceExportReportSpec {
        namespace: export.namespace().unwrap_or_default(),
        name: export.name_any(),
        created: export_created(export),
        generation: export.metadata.generation,
        exported_labels: export_spec_map(export, "exportedLabels"),
        exported_annotations: export_spec_map(export, "exportedAnnotations"),
        service: service.map(reported_service),
        endpoint_slices,
    }
}

fn reported_service(s: &Service) -> ReportedService {
    let spec = s.spec.clone().unwrap_or_default();
    ReportedService {
        type_: spec.type_,
        cluster_ip: spec.cluster_ip,
        ports: spec
            .ports
            .unwrap_or_default()
            .into_iter()
            .map(|p| ServicePort {
                name: p.name.unwrap_or_default(),
                protocol: p.protocol,
                app_protocol: p.app_protocol,
                port: p.port,
            })
            .collect(),
        session_affinity: spec.session_affinity,
        session_affinity_config: spec.session_affinity_config,
        ip_families: spec.ip_families.unwrap_or_default(),
        internal_traffic_policy: spec.internal_traffic_policy,
        traffic_distribution: spec.traffic_distribution,
    }
}

/// A slice's `addressType`, `endpoints` (without `targetRef`) and `ports`.
fn slice_content(data: &Value) -> Value {
    let mut out = Map::new();
    for key in ["addressType", "ports"] {
        if let Some(v) = data.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    if let Some(endpoints) = data.get("endpoints").and_then(Value::as_array) {
        let endpoints = endpoints
            .iter()
            .map(|e| {
                let mut e = e.clone();
                if let Some(o) = e.as_object_mut() {
                    o.remove("targetRef");
                }
                e
            })
            .collect();
        out.insert("endpoints".into(), Value::Array(endpoints));
    }
    Value::Object(out)
}

/// The Service a report describes, as a Service object (so the host reads a Pull member's
/// Service with the same function as a push member's).
pub fn service_of(reported: &ReportedService) -> Service {
    let spec = k8s_openapi::api::core::v1::ServiceSpec {
        type_: reported.type_.clone(),
        cluster_ip: reported.cluster_ip.clone(),
        ports: Some(
            reported
                .ports
                .iter()
                .map(|p| k8s_openapi::api::core::v1::ServicePort {
                    name: (!p.name.is_empty()).then(|| p.name.clone()),
                    protocol: p.protocol.clone(),
                    app_protocol: p.app_protocol.clone(),
                    port: p.port,
                    ..Default::default()
                })
                .collect(),
        ),
        session_affinity: reported.session_affinity.clone(),
        session_affinity_config: reported.session_affinity_config.clone(),
        ip_families: (!reported.ip_families.is_empty()).then(|| reported.ip_families.clone()),
        internal_traffic_policy: reported.internal_traffic_policy.clone(),
        traffic_distribution: reported.traffic_distribution.clone(),
        ..Default::default()
    };
    Service {
        spec: Some(spec),
        ..Default::default()
    }
}

/// Whether two condition lists say the same (type, status, reason, message, observed
/// generation; times aside), so an unchanged answer costs no write.
pub fn same_conditions(a: &[Condition], b: &[Condition]) -> bool {
    let key = |c: &Condition| {
        (
            c.type_.clone(),
            c.status.clone(),
            c.reason.clone(),
            c.message.clone(),
            c.observed_generation,
        )
    };
    let mut a: Vec<_> = a.iter().map(key).collect();
    let mut b: Vec<_> = b.iter().map(key).collect();
    a.sort();
    b.sort();
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dynamic(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("an object")
    }

    #[test]
    fn a_report_carries_the_export_its_service_and_slices_without_pod_references() {
        let export = dynamic(json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
            "metadata": {"name": "web", "namespace": "demo", "generation": 2,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"exportedLabels": {"tier": "front"}},
        }));
        let service: Service = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"clusterIP": "10.0.0.9", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        }))
        .expect("a Service");
        let slice = dynamic(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-abc", "namespace": "demo"},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.1.0.5"], "targetRef": {"kind": "Pod", "name": "web-1"}}],
            "ports": [{"name": "http", "port": 8080}],
        }));
        let spec = report_spec(&export, Some(&service), &[&slice]);
        assert_eq!(report_name(&spec.namespace, &spec.name), "demo.web");
        assert_eq!(spec.created, "2026-01-01T00:00:00Z");
        assert_eq!(spec.generation, Some(2));
        assert_eq!(
            spec.exported_labels.get("tier").map(String::as_str),
            Some("front")
        );
        let svc = spec.service.as_ref().expect("the service");
        assert_eq!(svc.ports[0].port, 80);
        let back = service_of(svc);
        assert_eq!(
            back.spec.and_then(|s| s.cluster_ip).as_deref(),
            Some("10.0.0.9")
        );
        let content = &spec.endpoint_slices[0].content;
        assert_eq!(content["endpoints"][0]["addresses"][0], "10.1.0.5");
        assert!(content["endpoints"][0].get("targetRef").is_none());
    }

    #[test]
    fn conditions_compare_without_their_times() {
        let c = |status: &str, time: &str| Condition {
            type_: "Valid".into(),
            status: status.into(),
            reason: "Valid".into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: serde_json::from_value(json!(time)).expect("a time"),
        };
        assert!(same_conditions(
            &[c("True", "2026-01-01T00:00:00Z")],
            &[c("True", "2026-02-01T00:00:00Z")]
        ));
        assert!(!same_conditions(
            &[c("True", "2026-01-01T00:00:00Z")],
            &[c("False", "2026-01-01T00:00:00Z")]
        ));
    }
}
