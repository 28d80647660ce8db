//! What the ClusterSet IP route helper wants in one member, pure. For every `ClusterSetIP`
//! ServiceImport that has ClusterSet IPs: a selector-less Service `<svc>-clusterset` in the
//! import's namespace, whose `externalIPs` are the ClusterSet IPs and whose ports are the
//! import's, and one EndpointSlice per imported slice of that service, carrying the slice's
//! endpoints and ports and labelled `kubernetes.io/service-name: <svc>-clusterset`. kube-proxy
//! in the member then sends traffic for a ClusterSet IP to the merged endpoints of every
//! exporting cluster. Each object carries the hash of its own content, so an unchanged
//! object is never written again.

use std::{borrow::Borrow, collections::BTreeMap};

use flotilla_api::{
    hash::content_hash,
    mcs::{
        IMPORT_MANAGED_BY_LABEL, K8S_SERVICE_NAME_LABEL, MANAGED_BY_LABEL, SERVICE_NAME_LABEL,
        SOURCE_CLUSTER_LABEL, ServiceImport, ServiceImportType,
    },
};
use kube::{ResourceExt, api::DynamicObject};
use serde_json::{Map, Value, json};

/// Value of `app.kubernetes.io/managed-by` and `endpointslice.kubernetes.io/managed-by` on
/// everything the helper writes (and the label its watches select).
pub const MANAGER: &str = "clusterset-routes.flotilla.io";
/// Label naming the ServiceImport an object routes for.
pub const IMPORT_LABEL: &str = "mcs.flotilla.io/service-import";
/// Annotation with the hash of the object's content as the helper last wrote it.
pub const HASH_ANNOTATION: &str = "mcs.flotilla.io/route-hash";
/// Suffix of the Service's name.
pub const SUFFIX: &str = "-clusterset";
/// A Service name is a DNS-1035 label.
const NAME_LIMIT: usize = 63;
/// An EndpointSlice name is a DNS subdomain.
const SLICE_NAME_LIMIT: usize = 253;

/// Namespace and name of an object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// Why a ServiceImport gets no route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The ServiceImport.
    pub import: Key,
    /// Event reason.
    pub reason: &'static str,
    /// What a person reads.
    pub message: String,
}

/// Every object the helper wants in the member, with its content hash annotated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Routes {
    /// The Services, by key.
    pub services: BTreeMap<Key, Value>,
    /// The EndpointSlices, by key.
    pub slices: BTreeMap<Key, Value>,
    /// ServiceImports that get no route, and why.
    pub problems: Vec<Problem>,
}

/// The name of the route Service of the import named `import`.
pub fn service_name(import: &str) -> String {
    format!("{import}{SUFFIX}")
}

/// The routes for `imports` and the imported `slices` (those labelled
/// `multicluster.kubernetes.io/service-name`), slices written at `slice_api_version`.
pub fn plan(
    imports: &[impl Borrow<ServiceImport>],
    slices: &[impl Borrow<DynamicObject>],
    slice_api_version: &str,
) -> Routes {
    let mut routes = Routes::default();
    for import in imports.iter().map(Borrow::borrow) {
        let key = Key {
            namespace: import.namespace().unwrap_or_default(),
            name: import.name_any(),
        };
        if import.spec.type_ != ServiceImportType::ClusterSetIP || import.spec.ips.is_empty() {
            continue;
        }
        let name = service_name(&key.name);
        if name.len() > NAME_LIMIT {
            routes.problems.push(Problem {
                reason: "RouteNameTooLong",
                message: format!(
                    "the route Service {name} would be longer than {NAME_LIMIT} characters; \
                     no ClusterSet IP route for this service"
                ),
                import: key,
            });
            continue;
        }
        let service = hashed(service(import, &key, &name));
        routes.services.insert(
            Key {
                namespace: key.namespace.clone(),
                name: name.clone(),
            },
            service,
        );
        for slice in slices
            .iter()
            .map(Borrow::borrow)
            .filter(|s| imported_for(s, &key))
        {
            let slice_name = format!("{}{SUFFIX}", slice.name_any());
            if slice_name.len() > SLICE_NAME_LIMIT {
                continue;
            }
            let object = hashed(route_slice(
                slice,
                &key,
                &name,
                &slice_name,
                slice_api_version,
            ));
            routes.slices.insert(
                Key {
                    namespace: key.namespace.clone(),
                    name: slice_name,
                },
                object,
            );
        }
    }
    routes
}

/// `slice` is an imported slice of the service `import`.
fn imported_for(slice: &DynamicObject, import: &Key) -> bool {
    slice.namespace().as_deref() == Some(import.namespace.as_str())
        && slice.labels().get(SERVICE_NAME_LABEL) == Some(&import.name)
}

fn labels(import: &Key) -> Map<String, Value> {
    let mut labels = Map::new();
    labels.insert(IMPORT_MANAGED_BY_LABEL.into(), MANAGER.into());
    labels.insert(IMPORT_LABEL.into(), import.name.clone().into());
    labels
}

fn service(import: &ServiceImport, key: &Key, name: &str) -> Value {
    let ports: Vec<Value> = import
        .spec
        .ports
        .iter()
        .map(|p| {
            let mut port = json!({
                "port": p.port,
                "protocol": p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            });
            if !p.name.is_empty() {
                port["name"] = p.name.clone().into();
            }
            port
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": key.namespace, "labels": labels(key)},
        "spec": {"type": "ClusterIP", "externalIPs": import.spec.ips, "ports": ports},
    })
}

fn route_slice(
    slice: &DynamicObject,
    import: &Key,
    service: &str,
    name: &str,
    api_version: &str,
) -> Value {
    let mut labels = labels(import);
    labels.insert(K8S_SERVICE_NAME_LABEL.into(), service.into());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGER.into());
    if let Some(source) = slice.labels().get(SOURCE_CLUSTER_LABEL) {
        labels.insert(SOURCE_CLUSTER_LABEL.into(), source.clone().into());
    }
    // Endpoints of another cluster: their Pod references and node names mean nothing here.
    let endpoints: Vec<Value> = slice
        .data
        .get("endpoints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| {
            let mut e = e.clone();
            if let Some(map) = e.as_object_mut() {
                map.remove("targetRef");
                map.remove("nodeName");
            }
            e
        })
        .collect();
    json!({
        "apiVersion": api_version,
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": import.namespace, "labels": labels},
        "addressType": slice.data.get("addressType").cloned().unwrap_or_else(|| "IPv4".into()),
        "endpoints": endpoints,
        "ports": slice.data.get("ports").cloned().unwrap_or_else(|| json!([])),
    })
}

/// `object` with the hash of its content in [`HASH_ANNOTATION`].
fn hashed(mut object: Value) -> Value {
    let hash = content_hash(&object);
    object["metadata"]["annotations"] = json!({ HASH_ANNOTATION: hash });
    object
}

/// The hash an object written by the helper carries.
pub fn written_hash(object: &DynamicObject) -> Option<&str> {
    object
        .annotations()
        .get(HASH_ANNOTATION)
        .map(String::as_str)
}

/// The hash a desired object carries.
pub fn desired_hash(object: &Value) -> Option<&str> {
    object["metadata"]["annotations"][HASH_ANNOTATION].as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No imported slices.
    const NONE: [DynamicObject; 0] = [];
    use flotilla_api::mcs::{ServiceImportSpec, ServicePort};

    fn import(name: &str, type_: ServiceImportType, ips: &[&str]) -> ServiceImport {
        let mut i = ServiceImport::new(
            name,
            ServiceImportSpec {
                type_,
                ips: ips.iter().map(|s| s.to_string()).collect(),
                ports: vec![ServicePort {
                    name: "http".into(),
                    protocol: Some("TCP".into()),
                    port: 80,
                    ..Default::default()
                }],
                ..Default::default()
            },
        );
        i.metadata.namespace = Some("demo".into());
        i
    }

    fn slice(name: &str, service: &str, cluster: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "demo", "labels": {
                SERVICE_NAME_LABEL: service, SOURCE_CLUSTER_LABEL: cluster}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": true},
                "nodeName": "n1", "targetRef": {"kind": "Pod", "name": "web-1"}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }))
        .expect("a slice")
    }

    fn key(name: &str) -> Key {
        Key {
            namespace: "demo".into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_clusterset_ip_import_gets_a_service_on_its_ips_and_its_slices_endpoints() {
        let imports = [import(
            "web",
            ServiceImportType::ClusterSetIP,
            &["241.0.0.7"],
        )];
        let slices = [slice("web-m1-x", "web", "m1"), slice("db-m1-x", "db", "m1")];
        let routes = plan(&imports, &slices, "discovery.k8s.io/v1");
        assert!(routes.problems.is_empty());
        let svc = &routes.services[&key("web-clusterset")];
        assert_eq!(svc["spec"]["externalIPs"], json!(["241.0.0.7"]));
        assert_eq!(
            svc["spec"]["ports"],
            json!([{"name": "http", "port": 80, "protocol": "TCP"}])
        );
        assert!(svc["spec"].get("selector").is_none());
        assert_eq!(routes.slices.len(), 1, "only the web slice: {routes:?}");
        let s = &routes.slices[&key("web-m1-x-clusterset")];
        assert_eq!(
            s["metadata"]["labels"][K8S_SERVICE_NAME_LABEL],
            "web-clusterset"
        );
        assert_eq!(s["metadata"]["labels"][MANAGED_BY_LABEL], MANAGER);
        assert_eq!(
            s["endpoints"],
            json!([{"addresses": ["10.1.0.5"], "conditions": {"ready": true}}])
        );
        assert_eq!(s["ports"][0]["port"], 8080);
    }

    #[test]
    fn headless_imports_and_imports_without_ips_get_nothing() {
        let imports = [
            import("db", ServiceImportType::Headless, &[]),
            import("web", ServiceImportType::ClusterSetIP, &[]),
        ];
        let routes = plan(
            &imports,
            &[slice("db-m1-x", "db", "m1")],
            "discovery.k8s.io/v1",
        );
        assert_eq!(routes, Routes::default());
    }

    #[test]
    fn a_name_too_long_for_the_route_service_is_a_problem_not_a_write() {
        let long = "a".repeat(60);
        let routes = plan(
            &[import(
                &long,
                ServiceImportType::ClusterSetIP,
                &["241.0.0.7"],
            )],
            &NONE,
            "discovery.k8s.io/v1",
        );
        assert!(routes.services.is_empty());
        assert_eq!(routes.problems.len(), 1);
        assert_eq!(routes.problems[0].reason, "RouteNameTooLong");
    }

    #[test]
    fn the_hash_follows_the_content_only() {
        let imports = [import(
            "web",
            ServiceImportType::ClusterSetIP,
            &["241.0.0.7"],
        )];
        let a = plan(&imports, &NONE, "discovery.k8s.io/v1");
        let b = plan(&imports, &NONE, "discovery.k8s.io/v1");
        let moved = [import(
            "web",
            ServiceImportType::ClusterSetIP,
            &["241.0.0.8"],
        )];
        let c = plan(&moved, &NONE, "discovery.k8s.io/v1");
        let hash =
            |r: &Routes| desired_hash(&r.services[&key("web-clusterset")]).map(str::to_owned);
        assert_eq!(hash(&a), hash(&b));
        assert_ne!(hash(&a), hash(&c));
    }
}
