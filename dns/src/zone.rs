//! The `clusterset.local` zone, pure: built from the ServiceImports and imported
//! EndpointSlices of one cluster, and answering one question as the Multi-Cluster Services
//! DNS specification says:
//!
//! - `<svc>.<ns>.svc.clusterset.local` `A`/`AAAA`: a ClusterSetIP service's ClusterSet IPs;
//!   a Headless service's ready endpoints (every exporting cluster's);
//! - `<hostname>.<clusterid>.<svc>.<ns>.svc.clusterset.local`: a headless endpoint with a
//!   hostname;
//! - `_<port>._<proto>.<svc>.<ns>.svc.clusterset.local` `SRV`, for every named port: the
//!   service name (ClusterSetIP) or each endpoint's hostname name (Headless);
//! - a name that exists with no record of the asked type (including the names between the
//!   zone and the records, such as `<ns>.svc.clusterset.local`) is `NODATA`; any other name
//!   in the zone is `NXDOMAIN`; both carry the zone's SOA, whose minimum is the TTL.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use hickory_proto::{
    op::ResponseCode,
    rr::{
        Name, RData, Record, RecordType,
        rdata::{A, AAAA, SOA, SRV},
    },
};

/// The zone Flotilla answers.
pub const ZONE: &str = "clusterset.local";

/// What the zone is built from: one ServiceImport.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportedService {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Headless (else ClusterSetIP).
    pub headless: bool,
    /// `spec.ips`.
    pub ips: Vec<IpAddr>,
    /// Named ports: (name, protocol, port).
    pub ports: Vec<(String, String, u16)>,
}

/// One ready endpoint of an imported service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportedEndpoint {
    /// Namespace of the slice.
    pub namespace: String,
    /// The multi-cluster service it belongs to.
    pub service: String,
    /// The id of the cluster it runs in.
    pub cluster_id: String,
    /// Its addresses.
    pub addresses: Vec<IpAddr>,
    /// Its hostname, when it has one.
    pub hostname: Option<String>,
}

/// The records of one name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Node {
    addresses: BTreeSet<IpAddr>,
    /// (port, target name).
    srv: BTreeSet<(u16, String)>,
}

/// The zone: every name that exists, with its records.
#[derive(Clone, Debug)]
pub struct Zone {
    names: BTreeMap<String, Node>,
    ttl: u32,
    serial: u32,
}

/// An answer to one question.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// NoError, NXDomain or Refused (outside the zone).
    pub code: ResponseCode,
    /// The answer section.
    pub answers: Vec<Record>,
    /// The additional section (addresses of SRV targets).
    pub additionals: Vec<Record>,
    /// The authority section: the SOA when there is no answer.
    pub authorities: Vec<Record>,
}

fn service_name(namespace: &str, name: &str) -> String {
    format!("{name}.{namespace}.svc.{ZONE}").to_ascii_lowercase()
}

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Zone {
    /// Builds the zone; every record gets `ttl`, and `serial` becomes the SOA's serial.
    pub fn build(
        services: &[ImportedService],
        endpoints: &[ImportedEndpoint],
        ttl: u32,
        serial: u32,
    ) -> Zone {
        let mut names: BTreeMap<String, Node> = BTreeMap::new();
        let touch = |names: &mut BTreeMap<String, Node>, name: &str| {
            // The name and every name between it and the zone exist.
            let mut n = name;
            loop {
                names.entry(n.to_string()).or_default();
                match n.split_once('.') {
                    Some((_, rest)) if n != ZONE => n = rest,
                    _ => break,
                }
            }
        };
        touch(&mut names, ZONE);
        for s in services {
            let base = service_name(&s.namespace, &s.name);
            touch(&mut names, &base);
            let mut targets: Vec<String> = Vec::new();
            if s.headless {
                for e in endpoints
                    .iter()
                    .filter(|e| e.namespace == s.namespace && e.service == s.name)
                {
                    let node = names.entry(base.clone()).or_default();
                    node.addresses.extend(&e.addresses);
                    let Some(host) = e.hostname.as_deref() else {
                        continue;
                    };
                    if !is_label(host) || !is_label(&e.cluster_id) {
                        continue;
                    }
                    let name = format!("{host}.{}.{base}", e.cluster_id).to_ascii_lowercase();
                    touch(&mut names, &name);
                    let node = names.entry(name.clone()).or_default();
                    node.addresses.extend(&e.addresses);
                    targets.push(name);
                }
            } else {
                names
                    .entry(base.clone())
                    .or_default()
                    .addresses
                    .extend(&s.ips);
                targets.push(base.clone());
            }
            for (port_name, protocol, port) in &s.ports {
                if !is_label(port_name) {
                    continue;
                }
                let srv = format!("_{port_name}._{}.{base}", protocol.to_ascii_lowercase())
                    .to_ascii_lowercase();
                touch(&mut names, &srv);
                let node = names.entry(srv).or_default();
                node.srv.extend(targets.iter().map(|t| (*port, t.clone())));
            }
        }
        Zone { names, ttl, serial }
    }

    /// How many names the zone holds.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the zone holds only its apex.
    pub fn is_empty(&self) -> bool {
        self.names.len() <= 1
    }

    fn soa(&self) -> Record {
        let apex = fqdn(ZONE);
        let soa = SOA::new(
            fqdn(&format!("ns.dns.{ZONE}")),
            fqdn(&format!("hostmaster.{ZONE}")),
            self.serial,
            7200,
            1800,
            86400,
            self.ttl,
        );
        Record::from_rdata(apex, self.ttl, RData::SOA(soa))
    }

    fn address_records(&self, name: &str, node: &Node, type_: RecordType) -> Vec<Record> {
        node.addresses
            .iter()
            .filter_map(|ip| match (ip, type_) {
                (IpAddr::V4(v4), RecordType::A) => Some(RData::A(A(*v4))),
                (IpAddr::V6(v6), RecordType::AAAA) => Some(RData::AAAA(AAAA(*v6))),
                _ => None,
            })
            .map(|data| Record::from_rdata(fqdn(name), self.ttl, data))
            .collect()
    }

    /// Answers one question (`name` with or without its trailing dot, any case).
    pub fn answer(&self, name: &str, type_: RecordType) -> Answer {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let mut out = Answer {
            code: ResponseCode::NoError,
            answers: Vec::new(),
            additionals: Vec::new(),
            authorities: Vec::new(),
        };
        if name != ZONE && !name.ends_with(&format!(".{ZONE}")) {
            out.code = ResponseCode::Refused;
            return out;
        }
        let Some(node) = self.names.get(&name) else {
            out.code = ResponseCode::NXDomain;
            out.authorities.push(self.soa());
            return out;
        };
        match type_ {
            RecordType::A | RecordType::AAAA => {
                out.answers = self.address_records(&name, node, type_);
            }
            RecordType::SRV => {
                for (port, target) in &node.srv {
                    let srv = SRV::new(0, 100, *port, fqdn(target));
                    out.answers
                        .push(Record::from_rdata(fqdn(&name), self.ttl, RData::SRV(srv)));
                }
                let targets: BTreeSet<&String> = node.srv.iter().map(|(_, t)| t).collect();
                for t in targets {
                    if let Some(n) = self.names.get(t.as_str()) {
                        out.additionals
                            .extend(self.address_records(t, n, RecordType::A));
                        out.additionals
                            .extend(self.address_records(t, n, RecordType::AAAA));
                    }
                }
            }
            RecordType::SOA if name == ZONE => out.answers.push(self.soa()),
            _ => {}
        }
        if out.answers.is_empty() {
            out.authorities.push(self.soa());
        }
        out
    }
}

fn fqdn(name: &str) -> Name {
    // Invariant: every name here is made of labels checked by `is_label` or of the zone's.
    Name::from_ascii(format!("{name}.")).unwrap_or_else(|_| Name::root())
}

#[cfg(test)]
#[path = "zone_tests.rs"]
mod tests;
