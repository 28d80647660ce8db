//! Reading the caches into what the planner and the object diff take: a [`MemberView`] and
//! an [`ActualMember`] per cluster (whose [`Availability`] [`super::known`] decides).
//! Conversions only; no I/O and no decision.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::mcs::{
    CLUSTERSET_IPS_ANNOTATION, IMPORT_MANAGED_BY_LABEL, K8S_SERVICE_NAME_LABEL, MANAGED_BY,
    MANAGED_BY_LABEL, SOURCE_CLUSTER_LABEL, ServiceImport, ServicePort, export_created,
    export_spec_map,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{ResourceExt, api::DynamicObject};

use super::{
    objects::{ActualImport, ActualMember, ActualSlice, HASH_ANNOTATION},
    plan::{
        Availability, ExistingImport, ExportView, MemberView, ServiceKey, ServiceKind, ServiceView,
    },
    slice::Slice,
};

fn key_of<K: ResourceExt>(o: &K) -> ServiceKey {
    ServiceKey::new(o.namespace().unwrap_or_default(), o.name_any())
}

/// What the planner reads of a ServiceExport.
pub fn export_view(e: &DynamicObject) -> ExportView {
    ExportView {
        key: key_of(e),
        created: export_created(e),
        labels: export_spec_map(e, "exportedLabels"),
        annotations: export_spec_map(e, "exportedAnnotations"),
    }
}

/// What the planner reads of a Service.
pub fn service_view(s: &Service) -> ServiceView {
    let spec = s.spec.clone().unwrap_or_default();
    let kind = if spec.type_.as_deref() == Some("ExternalName") {
        ServiceKind::ExternalName
    } else if spec.cluster_ip.as_deref() == Some("None") {
        ServiceKind::Headless
    } else {
        ServiceKind::ClusterIp
    };
    let ports = spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .map(|p| ServicePort {
            name: p.name.unwrap_or_default(),
            protocol: Some(p.protocol.unwrap_or_else(|| "TCP".into())),
            app_protocol: p.app_protocol,
            port: p.port,
        })
        .collect();
    ServiceView {
        kind,
        ports,
        session_affinity: spec.session_affinity.unwrap_or_else(|| "None".into()),
        session_affinity_config: spec.session_affinity_config,
        ip_families: spec.ip_families.unwrap_or_default(),
        internal_traffic_policy: spec.internal_traffic_policy,
        traffic_distribution: spec.traffic_distribution,
    }
}

/// An export's `status.conditions` (none when absent or unreadable).
pub fn export_conditions(e: &DynamicObject) -> Vec<Condition> {
    e.data
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default()
}

fn managed_slice(o: &DynamicObject) -> bool {
    o.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
}

fn managed_import(o: &ServiceImport) -> bool {
    o.labels().get(IMPORT_MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
}

/// Everything cached of one member.
pub struct MemberCaches<'a> {
    /// The cluster.
    pub name: &'a str,
    /// Its availability.
    pub availability: Availability,
    /// Its ServiceExports.
    pub exports: &'a [std::sync::Arc<DynamicObject>],
    /// Its Services.
    pub services: &'a [std::sync::Arc<Service>],
    /// Its EndpointSlices (every one).
    pub slices: &'a [std::sync::Arc<DynamicObject>],
    /// Flotilla's ServiceImports in it.
    pub imports: &'a [std::sync::Arc<ServiceImport>],
    /// Its namespace names.
    pub namespaces: BTreeSet<String>,
}

impl MemberCaches<'_> {
    /// The planner's view: exports, the Services and Kubernetes' own slices of exported
    /// names only, and Flotilla's imports.
    pub fn view(&self) -> MemberView {
        let exports: Vec<ExportView> = self.exports.iter().map(|e| export_view(e)).collect();
        let exported: BTreeSet<&ServiceKey> = exports.iter().map(|e| &e.key).collect();
        let services = self
            .services
            .iter()
            .map(|s| (key_of(&**s), s))
            .filter(|(k, _)| exported.contains(k))
            .map(|(k, s)| (k, service_view(s)))
            .collect();
        let mut slices: BTreeMap<ServiceKey, Vec<(String, Slice)>> = BTreeMap::new();
        for o in self.slices.iter().filter(|o| !managed_slice(o)) {
            let Some(service) = o.labels().get(K8S_SERVICE_NAME_LABEL) else {
                continue;
            };
            let key = ServiceKey::new(o.namespace().unwrap_or_default(), service.clone());
            if exported.contains(&key) {
                slices
                    .entry(key)
                    .or_default()
                    .push((o.name_any(), Slice::from_json(&o.data)));
            }
        }
        let imports = self
            .imports
            .iter()
            .filter(|i| managed_import(i))
            .map(|i| {
                let clusters = i
                    .status
                    .iter()
                    .flat_map(|s| s.clusters.iter().map(|c| c.cluster.clone()))
                    .collect();
                (
                    key_of(&**i),
                    ExistingImport {
                        spec: i.spec.clone(),
                        clusters,
                        clusterset_ips: i.annotations().get(CLUSTERSET_IPS_ANNOTATION).map(|a| {
                            a.split(',')
                                .filter(|s| !s.is_empty())
                                .map(str::to_string)
                                .collect()
                        }),
                    },
                )
            })
            .collect();
        MemberView {
            name: self.name.to_string(),
            availability: self.availability,
            exports,
            services,
            slices,
            imports,
        }
    }

    /// What the member holds of Flotilla's objects.
    pub fn actual(&self) -> ActualMember {
        let imports = self
            .imports
            .iter()
            .filter(|i| managed_import(i))
            .map(|i| {
                (
                    key_of(&**i),
                    ActualImport {
                        hash: i.annotations().get(HASH_ANNOTATION).cloned(),
                        status: i.status.clone().unwrap_or_default(),
                    },
                )
            })
            .collect();
        let slices = self
            .slices
            .iter()
            .filter(|o| managed_slice(o))
            .map(|o| {
                (
                    (o.namespace().unwrap_or_default(), o.name_any()),
                    ActualSlice {
                        hash: o.annotations().get(HASH_ANNOTATION).cloned(),
                        source: o.labels().get(SOURCE_CLUSTER_LABEL).cloned(),
                    },
                )
            })
            .collect();
        ActualMember {
            namespaces: self.namespaces.clone(),
            imports,
            slices,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn services_are_read_as_headless_external_or_with_a_cluster_ip() {
        let svc = |spec: serde_json::Value| -> Service {
            serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": spec}))
                .expect("a Service")
        };
        let v = service_view(&svc(
            json!({"clusterIP": "None", "ports": [{"port": 80, "name": "http"}]}),
        ));
        assert_eq!(v.kind, ServiceKind::Headless);
        assert_eq!(v.ports[0].protocol.as_deref(), Some("TCP"));
        assert_eq!(v.session_affinity, "None");
        let v = service_view(&svc(
            json!({"type": "ExternalName", "externalName": "x.example"}),
        ));
        assert_eq!(v.kind, ServiceKind::ExternalName);
        let v = service_view(&svc(
            json!({"clusterIP": "10.0.0.3", "sessionAffinity": "ClientIP"}),
        ));
        assert_eq!(
            (v.kind, v.session_affinity.as_str()),
            (ServiceKind::ClusterIp, "ClientIP")
        );
    }
}
