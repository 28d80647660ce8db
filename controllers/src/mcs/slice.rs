//! EndpointSlices in both API versions a member may serve: `discovery.k8s.io/v1` (Kubernetes
//! ≥ 1.21; the only one from 1.25) and `discovery.k8s.io/v1beta1` (≤ 1.24). Reads either
//! into one version-neutral [`Slice`] and writes a [`Slice`] back in the member's version.
//! The versions differ in where an endpoint's node and zone live: v1 has `nodeName` and
//! `zone`, v1beta1 a `topology` map (`kubernetes.io/hostname`,
//! `topology.kubernetes.io/zone`). Pure: no I/O.

use std::collections::BTreeMap;

use kube::core::ApiResource;
use serde_json::{Map, Value, json};

/// The discovery.k8s.io version a member serves EndpointSlices at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SliceVersion {
    /// `discovery.k8s.io/v1`.
    V1,
    /// `discovery.k8s.io/v1beta1`.
    V1beta1,
}

const GROUP: &str = "discovery.k8s.io";
const HOSTNAME_TOPOLOGY: &str = "kubernetes.io/hostname";
const ZONE_TOPOLOGY: &str = "topology.kubernetes.io/zone";

impl SliceVersion {
    /// The version's name.
    pub fn as_str(&self) -> &'static str {
        match self {
            SliceVersion::V1 => "v1",
            SliceVersion::V1beta1 => "v1beta1",
        }
    }

    /// The preferred of the versions a member lists for the group (v1 over v1beta1);
    /// `None` when it serves neither.
    pub fn preferred<'a>(served: impl IntoIterator<Item = &'a str>) -> Option<SliceVersion> {
        let served: Vec<&str> = served.into_iter().collect();
        if served.contains(&"v1") {
            Some(SliceVersion::V1)
        } else if served.contains(&"v1beta1") {
            Some(SliceVersion::V1beta1)
        } else {
            None
        }
    }

    /// The kube ApiResource of EndpointSlices at this version.
    pub fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: GROUP.into(),
            version: self.as_str().into(),
            api_version: format!("{GROUP}/{}", self.as_str()),
            kind: "EndpointSlice".into(),
            plural: "endpointslices".into(),
        }
    }
}

/// One endpoint, as both versions can say it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Endpoint {
    /// The endpoint's addresses.
    pub addresses: Vec<String>,
    /// `conditions.ready`.
    pub ready: Option<bool>,
    /// `conditions.serving`.
    pub serving: Option<bool>,
    /// `conditions.terminating`.
    pub terminating: Option<bool>,
    /// The endpoint's hostname (headless services).
    pub hostname: Option<String>,
    /// The node it runs on (in its own cluster).
    pub node_name: Option<String>,
    /// The zone it runs in.
    pub zone: Option<String>,
}

/// One port of a slice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlicePort {
    /// The port's name.
    pub name: Option<String>,
    /// TCP, UDP or SCTP.
    pub protocol: Option<String>,
    /// The port number.
    pub port: Option<i32>,
    /// The application protocol.
    pub app_protocol: Option<String>,
}

/// The content of an EndpointSlice, independent of its API version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slice {
    /// `addressType`: IPv4, IPv6 or FQDN.
    pub address_type: String,
    /// The endpoints.
    pub endpoints: Vec<Endpoint>,
    /// The ports.
    pub ports: Vec<SlicePort>,
}

fn string(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn boolean(v: &Value, key: &str) -> Option<bool> {
    v.get(key).and_then(Value::as_bool)
}

fn endpoint_from(e: &Value) -> Endpoint {
    let conditions = e.get("conditions").cloned().unwrap_or(Value::Null);
    let topology = e.get("topology").cloned().unwrap_or(Value::Null);
    Endpoint {
        addresses: e
            .get("addresses")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        ready: boolean(&conditions, "ready"),
        serving: boolean(&conditions, "serving"),
        terminating: boolean(&conditions, "terminating"),
        hostname: string(e, "hostname"),
        // v1 (and a v1beta1 of 1.20+) has nodeName; older v1beta1 only the topology key.
        node_name: string(e, "nodeName").or_else(|| string(&topology, HOSTNAME_TOPOLOGY)),
        zone: string(e, "zone").or_else(|| string(&topology, ZONE_TOPOLOGY)),
    }
}

impl Slice {
    /// Reads a slice of either version (the fields both share, plus node and zone from
    /// wherever the version keeps them).
    pub fn from_json(obj: &Value) -> Slice {
        let endpoints = obj
            .get("endpoints")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(endpoint_from).collect())
            .unwrap_or_default();
        let ports = obj
            .get("ports")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|p| SlicePort {
                        name: string(p, "name"),
                        protocol: string(p, "protocol"),
                        port: p.get("port").and_then(Value::as_i64).map(|n| n as i32),
                        app_protocol: string(p, "appProtocol"),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Slice {
            address_type: string(obj, "addressType").unwrap_or_else(|| "IPv4".into()),
            endpoints,
            ports,
        }
    }

    /// The slice's body fields (`addressType`, `endpoints`, `ports`) in `version`'s shape.
    pub fn to_json(&self, version: SliceVersion) -> Map<String, Value> {
        let endpoints: Vec<Value> = self
            .endpoints
            .iter()
            .map(|e| endpoint_to(e, version))
            .collect();
        let ports: Vec<Value> = self
            .ports
            .iter()
            .map(|p| {
                let mut o = Map::new();
                put(&mut o, "name", p.name.clone().map(Value::from));
                put(&mut o, "protocol", p.protocol.clone().map(Value::from));
                put(&mut o, "port", p.port.map(Value::from));
                put(
                    &mut o,
                    "appProtocol",
                    p.app_protocol.clone().map(Value::from),
                );
                Value::Object(o)
            })
            .collect();
        let mut body = Map::new();
        body.insert("addressType".into(), json!(self.address_type));
        body.insert("endpoints".into(), Value::Array(endpoints));
        body.insert("ports".into(), Value::Array(ports));
        body
    }
}

fn put(o: &mut Map<String, Value>, key: &str, v: Option<Value>) {
    if let Some(v) = v {
        o.insert(key.into(), v);
    }
}

fn endpoint_to(e: &Endpoint, version: SliceVersion) -> Value {
    let mut o = Map::new();
    o.insert("addresses".into(), json!(e.addresses));
    let mut conditions = Map::new();
    put(&mut conditions, "ready", e.ready.map(Value::from));
    put(&mut conditions, "serving", e.serving.map(Value::from));
    put(
        &mut conditions,
        "terminating",
        e.terminating.map(Value::from),
    );
    o.insert("conditions".into(), Value::Object(conditions));
    put(&mut o, "hostname", e.hostname.clone().map(Value::from));
    match version {
        SliceVersion::V1 => {
            put(&mut o, "nodeName", e.node_name.clone().map(Value::from));
            put(&mut o, "zone", e.zone.clone().map(Value::from));
        }
        SliceVersion::V1beta1 => {
            let mut topology = BTreeMap::new();
            if let Some(node) = &e.node_name {
                topology.insert(HOSTNAME_TOPOLOGY, node.clone());
            }
            if let Some(zone) = &e.zone {
                topology.insert(ZONE_TOPOLOGY, zone.clone());
            }
            if !topology.is_empty() {
                o.insert("topology".into(), json!(topology));
            }
        }
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1beta1_slice() -> Value {
        json!({
            "apiVersion": "discovery.k8s.io/v1beta1", "kind": "EndpointSlice",
            "metadata": {"name": "web-abcde", "namespace": "demo"},
            "addressType": "IPv4",
            "endpoints": [{
                "addresses": ["10.64.0.7"],
                "conditions": {"ready": true},
                "targetRef": {"kind": "Pod", "name": "web-1", "namespace": "demo"},
                "topology": {"kubernetes.io/hostname": "node-1", "topology.kubernetes.io/zone": "z1"}
            }],
            "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]
        })
    }

    #[test]
    fn a_v1beta1_slice_reads_node_and_zone_from_its_topology() {
        let s = Slice::from_json(&v1beta1_slice());
        assert_eq!(s.address_type, "IPv4");
        assert_eq!(s.endpoints.len(), 1);
        let e = &s.endpoints[0];
        assert_eq!(e.addresses, vec!["10.64.0.7"]);
        assert_eq!(e.ready, Some(true));
        assert_eq!(e.serving, None);
        assert_eq!(e.node_name.as_deref(), Some("node-1"));
        assert_eq!(e.zone.as_deref(), Some("z1"));
        assert_eq!(
            s.ports,
            vec![SlicePort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                port: Some(8080),
                app_protocol: None
            }]
        );
    }

    #[test]
    fn a_slice_read_at_v1beta1_is_written_at_v1_with_node_name_and_zone() {
        let s = Slice::from_json(&v1beta1_slice());
        let v1 = Value::Object(s.to_json(SliceVersion::V1));
        let e = &v1["endpoints"][0];
        assert_eq!(e["nodeName"], "node-1");
        assert_eq!(e["zone"], "z1");
        assert!(e.get("topology").is_none());
        assert!(
            e.get("targetRef").is_none(),
            "a remote pod is no local reference"
        );
        assert_eq!(e["conditions"], json!({"ready": true}));
        // And back: nothing is lost either way.
        assert_eq!(Slice::from_json(&v1), s);
    }

    #[test]
    fn a_slice_read_at_v1_is_written_at_v1beta1_with_topology() {
        let v1 = json!({
            "addressType": "IPv6",
            "endpoints": [{"addresses": ["fd00::1"], "conditions": {"ready": false, "serving": true, "terminating": true},
                           "nodeName": "n2", "zone": "z2", "hostname": "web-0"}],
            "ports": [{"port": 53, "protocol": "UDP"}]
        });
        let s = Slice::from_json(&v1);
        let beta = Value::Object(s.to_json(SliceVersion::V1beta1));
        let e = &beta["endpoints"][0];
        assert_eq!(
            e["topology"],
            json!({"kubernetes.io/hostname": "n2", "topology.kubernetes.io/zone": "z2"})
        );
        assert!(e.get("nodeName").is_none() && e.get("zone").is_none());
        assert_eq!(e["hostname"], "web-0");
        assert_eq!(
            e["conditions"],
            json!({"ready": false, "serving": true, "terminating": true})
        );
        assert_eq!(beta["addressType"], "IPv6");
        assert_eq!(beta["ports"], json!([{"port": 53, "protocol": "UDP"}]));
        assert_eq!(Slice::from_json(&beta), s);
    }

    #[test]
    fn v1_is_preferred_when_a_member_serves_both() {
        assert_eq!(
            SliceVersion::preferred(["v1beta1", "v1"]),
            Some(SliceVersion::V1)
        );
        assert_eq!(
            SliceVersion::preferred(["v1beta1"]),
            Some(SliceVersion::V1beta1)
        );
        assert_eq!(SliceVersion::preferred(["v2alpha1"]), None);
        assert_eq!(
            SliceVersion::V1beta1.api_resource().api_version,
            "discovery.k8s.io/v1beta1"
        );
    }
}
