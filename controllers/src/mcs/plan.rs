//! The MCS planner, pure: given what every member of the ClusterSet holds (exports,
//! Services, Kubernetes' own EndpointSlices, the imports Flotilla wrote), what the ClusterSet
//! should look like — one merged service per exported namespace/name (its ServiceImport and
//! the slices of every exporting cluster) and the conditions of every export. Conflicts are
//! resolved as KEP-1645 says: the export with the oldest `creationTimestamp` wins, ties go
//! to the cluster name that sorts first. No I/O; [`super::objects`] turns the plan into
//! member objects.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::mcs::{ServiceImportSpec, ServiceImportType, ServicePort, condition};
use k8s_openapi::{api::core::v1::SessionAffinityConfig, apimachinery::pkg::apis::meta::v1::Time};

use super::slice::Slice;

/// A namespace/name: of an export, its Service, and the import.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ServiceKey {
    /// A key.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ServiceKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Whether a member's state is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability {
    /// Ready, with every cache complete: its objects are what it holds.
    Available,
    /// Not Ready: its endpoints leave the ClusterSet until it is back; what it exported
    /// stays listed in the imports.
    Down,
    /// Not known yet (caches still filling, or not yet probed since the controller
    /// started): nothing of it is added or removed.
    Unknown,
}

/// What kind of Service an export refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceKind {
    /// A Service with a cluster IP.
    ClusterIp,
    /// `clusterIP: None`.
    Headless,
    /// `type: ExternalName` (cannot be exported).
    ExternalName,
}

/// What the planner reads of a Service.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceView {
    /// Its kind.
    pub kind: ServiceKind,
    /// Its ports.
    pub ports: Vec<ServicePort>,
    /// `sessionAffinity`, `None` when unset.
    pub session_affinity: String,
    /// `sessionAffinityConfig`.
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// `ipFamilies` (empty when the cluster does not say).
    pub ip_families: Vec<String>,
    /// `internalTrafficPolicy`.
    pub internal_traffic_policy: Option<String>,
    /// `trafficDistribution`.
    pub traffic_distribution: Option<String>,
}

/// What the planner reads of a ServiceExport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportView {
    /// Namespace and name.
    pub key: ServiceKey,
    /// `metadata.creationTimestamp` (RFC 3339, so it sorts as it reads).
    pub created: String,
    /// `spec.exportedLabels`.
    pub labels: BTreeMap<String, String>,
    /// `spec.exportedAnnotations`.
    pub annotations: BTreeMap<String, String>,
}

/// One of the imports Flotilla wrote into a member earlier.
#[derive(Clone, Debug, PartialEq)]
pub struct ExistingImport {
    /// Its spec.
    pub spec: ServiceImportSpec,
    /// `status.clusters`.
    pub clusters: Vec<String>,
    /// The ClusterSet IPs Flotilla wrote into `spec.ips` (its annotation).
    pub clusterset_ips: Option<Vec<String>>,
}

/// One member of the ClusterSet as the planner sees it.
#[derive(Clone, Debug)]
pub struct MemberView {
    /// The cluster's name.
    pub name: String,
    /// Whether its state is known.
    pub availability: Availability,
    /// Its ServiceExports.
    pub exports: Vec<ExportView>,
    /// Its Services, by namespace/name.
    pub services: BTreeMap<ServiceKey, ServiceView>,
    /// Kubernetes' own EndpointSlices of each Service: (slice name, content).
    pub slices: BTreeMap<ServiceKey, Vec<(String, Slice)>>,
    /// The ServiceImports Flotilla wrote into it.
    pub imports: BTreeMap<ServiceKey, ExistingImport>,
}

/// The endpoints of one exporting cluster's slice.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceSlice {
    /// The exporting cluster.
    pub cluster: String,
    /// Name of the slice in that cluster.
    pub local_name: String,
    /// Its content.
    pub slice: Slice,
}

/// One multi-cluster service: what every member gets.
#[derive(Clone, Debug, PartialEq)]
pub struct MergedService {
    /// The ServiceImport's spec.
    pub spec: ServiceImportSpec,
    /// The exporting clusters (`status.clusters`).
    pub clusters: Vec<String>,
    /// The endpoints of every available exporting cluster.
    pub slices: Vec<SourceSlice>,
    /// The labels and annotations of the oldest export (`exportedLabels`,
    /// `exportedAnnotations`), for the import's metadata.
    pub exported: Exported,
    /// The ClusterSet IPs Flotilla allocated (the import's annotation); `None` when it
    /// writes no `spec.ips`.
    pub clusterset_ips: Option<Vec<String>>,
    /// Conditions of the import.
    pub import_conditions: Vec<WantedCondition>,
}

/// Labels and annotations exported with a service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exported {
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

/// A condition the planner wants on an export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WantedCondition {
    /// `Valid`, `Ready` or `Conflict`.
    pub type_: &'static str,
    /// True or False.
    pub status: bool,
    /// The reason.
    pub reason: String,
    /// The message.
    pub message: String,
}

impl WantedCondition {
    fn new(type_: &'static str, status: bool, reason: &str, message: String) -> Self {
        WantedCondition {
            type_,
            status,
            reason: reason.to_string(),
            message,
        }
    }
}

/// The conditions one export should carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportVerdict {
    /// The member holding the export.
    pub cluster: String,
    /// The export.
    pub key: ServiceKey,
    /// Its conditions, in the order Valid, Ready, Conflict.
    pub conditions: Vec<WantedCondition>,
}

/// What the ClusterSet should look like.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Every multi-cluster service.
    pub services: BTreeMap<ServiceKey, MergedService>,
    /// Conditions of every export in an available member.
    pub exports: Vec<ExportVerdict>,
    /// Clusters of unknown state: imported slices from them are kept as they are.
    pub held: BTreeSet<String>,
    /// Cluster ids (About API `cluster.clusterset.k8s.io`) by cluster name, where known.
    pub cluster_ids: BTreeMap<String, String>,
    /// When conditions that change status now say they changed.
    pub now: Option<Time>,
}

/// A valid export with its Service.
struct Constituent<'a> {
    cluster: &'a str,
    created: &'a str,
    service: &'a ServiceView,
    export: &'a ExportView,
}

/// Plans the ClusterSet from its members.
pub fn plan(members: &[MemberView]) -> Plan {
    let mut out = Plan {
        held: members
            .iter()
            .filter(|m| m.availability == Availability::Unknown)
            .map(|m| m.name.clone())
            .collect(),
        ..Plan::default()
    };
    let mut constituents = valid_constituents(members, &mut out.exports);
    let retained = retained_exporters(members);
    let keys: BTreeSet<&ServiceKey> = constituents
        .keys()
        .chain(retained.keys())
        .copied()
        .collect();
    for key in keys {
        let mut list = constituents.remove(key).unwrap_or_default();
        list.sort_by(|a, b| (a.created, a.cluster).cmp(&(b.created, b.cluster)));
        if let Some(service) = merged_service(members, key, &list, retained.get(key), &mut out) {
            out.services.insert(key.clone(), service);
        }
    }
    out
}

/// The valid exports of the available members by service; each invalid one is recorded
/// in `verdicts` with its conditions.
fn valid_constituents<'a>(
    members: &'a [MemberView],
    verdicts: &mut Vec<ExportVerdict>,
) -> BTreeMap<&'a ServiceKey, Vec<Constituent<'a>>> {
    let mut constituents: BTreeMap<&ServiceKey, Vec<Constituent<'_>>> = BTreeMap::new();
    for m in members
        .iter()
        .filter(|m| m.availability == Availability::Available)
    {
        for e in &m.exports {
            match validate(m, e) {
                Ok(service) => constituents.entry(&e.key).or_default().push(Constituent {
                    cluster: &m.name,
                    created: &e.created,
                    service,
                    export: e,
                }),
                Err(conditions) => verdicts.push(ExportVerdict {
                    cluster: m.name.clone(),
                    key: e.key.clone(),
                    conditions,
                }),
            }
        }
    }
    constituents
}

/// The service `key` merged from its constituents (oldest first) and the exporters kept
/// while unknown or down; the constituents' verdicts go to `out`. None when there is
/// nothing to import.
fn merged_service(
    members: &[MemberView],
    key: &ServiceKey,
    list: &[Constituent<'_>],
    kept: Option<&(BTreeSet<String>, &ServiceImportSpec)>,
    out: &mut Plan,
) -> Option<MergedService> {
    let (spec, exported, import_conditions) = if list.is_empty() {
        // Only exporters of unknown or down state: keep the import as it was.
        let (_, spec) = kept?;
        ((*spec).clone(), Exported::default(), Vec::new())
    } else {
        let merged = merge(key, list);
        // The import says the same Conflict as its exports.
        let conflict = merged
            .verdicts
            .first()
            .and_then(|v| v.conditions.iter().find(|c| c.type_ == condition::CONFLICT))
            .cloned();
        out.exports.extend(merged.verdicts);
        let winner = list[0].export;
        let exported = Exported {
            labels: winner.labels.clone(),
            annotations: winner.annotations.clone(),
        };
        (merged.spec, exported, conflict.into_iter().collect())
    };
    let mut clusters: BTreeSet<String> = list.iter().map(|c| c.cluster.to_string()).collect();
    clusters.extend(
        kept.into_iter()
            .flat_map(|(names, _)| names.iter().cloned()),
    );
    Some(MergedService {
        spec,
        clusters: clusters.into_iter().collect(),
        slices: source_slices(members, key, list),
        exported,
        clusterset_ips: None,
        import_conditions,
    })
}

fn validate<'a>(
    member: &'a MemberView,
    export: &ExportView,
) -> Result<&'a ServiceView, Vec<WantedCondition>> {
    let invalid = |reason: &str, message: String| {
        vec![
            WantedCondition::new(condition::VALID, false, reason, message.clone()),
            WantedCondition::new(
                condition::READY,
                false,
                condition::REASON_FAILED,
                format!("not exported: {message}"),
            ),
        ]
    };
    match member.services.get(&export.key) {
        None => Err(invalid(
            condition::REASON_NO_SERVICE,
            format!("no Service {} in cluster {}", export.key, member.name),
        )),
        Some(s) if s.kind == ServiceKind::ExternalName => Err(invalid(
            condition::REASON_INVALID_SERVICE_TYPE,
            format!(
                "Service {} is of type ExternalName, which cannot be exported",
                export.key
            ),
        )),
        Some(s) => Ok(s),
    }
}

/// Exporters whose state is not known now (down or unknown members) but that the imports
/// in available members list: they stay listed, with the import's spec as it was.
fn retained_exporters(
    members: &[MemberView],
) -> BTreeMap<&ServiceKey, (BTreeSet<String>, &ServiceImportSpec)> {
    let not_available: BTreeSet<&str> = members
        .iter()
        .filter(|m| m.availability != Availability::Available)
        .map(|m| m.name.as_str())
        .collect();
    let mut out: BTreeMap<&ServiceKey, (BTreeSet<String>, &ServiceImportSpec)> = BTreeMap::new();
    for m in members
        .iter()
        .filter(|m| m.availability == Availability::Available)
    {
        for (key, import) in &m.imports {
            let names: BTreeSet<String> = import
                .clusters
                .iter()
                .filter(|c| not_available.contains(c.as_str()))
                .cloned()
                .collect();
            if names.is_empty() {
                continue;
            }
            let entry = out.entry(key).or_insert((BTreeSet::new(), &import.spec));
            entry.0.extend(names);
        }
    }
    out
}

fn source_slices(
    members: &[MemberView],
    key: &ServiceKey,
    constituents: &[Constituent<'_>],
) -> Vec<SourceSlice> {
    let mut out = Vec::new();
    for c in constituents {
        let Some(member) = members.iter().find(|m| m.name == c.cluster) else {
            continue;
        };
        for (local_name, slice) in member.slices.get(key).into_iter().flatten() {
            out.push(SourceSlice {
                cluster: c.cluster.to_string(),
                local_name: local_name.clone(),
                slice: slice.clone(),
            });
        }
    }
    out.sort_by(|a, b| (&a.cluster, &a.local_name).cmp(&(&b.cluster, &b.local_name)));
    out
}

struct Merged {
    spec: ServiceImportSpec,
    verdicts: Vec<ExportVerdict>,
}

/// Two ports under one name are the same port when number, protocol (TCP when unset) and
/// application protocol agree.
fn same_port(a: &ServicePort, b: &ServicePort) -> bool {
    let protocol = |p: &ServicePort| p.protocol.clone().unwrap_or_else(|| "TCP".into());
    a.port == b.port && protocol(a) == protocol(b) && a.app_protocol == b.app_protocol
}

/// `internalTrafficPolicy`, unset meaning the default.
fn traffic_policy(s: &ServiceView) -> &str {
    s.internal_traffic_policy.as_deref().unwrap_or("Cluster")
}

/// The conflicts of everything but ports between the constituents (winner first).
fn setting_conflicts(list: &[Constituent<'_>]) -> Vec<&'static str> {
    let mut reasons = Vec::new();
    let differs = |f: &dyn Fn(&ServiceView) -> bool| list.iter().any(|c| f(c.service));
    let w = list[0].service;
    if differs(&|s| (s.kind == ServiceKind::Headless) != (w.kind == ServiceKind::Headless)) {
        reasons.push(condition::REASON_TYPE_CONFLICT);
    }
    if differs(&|s| s.session_affinity != w.session_affinity) {
        reasons.push(condition::REASON_SESSION_AFFINITY_CONFLICT);
    }
    if differs(&|s| s.session_affinity_config != w.session_affinity_config) {
        reasons.push(condition::REASON_SESSION_AFFINITY_CONFIG_CONFLICT);
    }
    if differs(&|s| !s.ip_families.is_empty() && s.ip_families != w.ip_families) {
        reasons.push(condition::REASON_IP_FAMILY_CONFLICT);
    }
    // Unset means the default (Cluster; no distribution preference).
    if differs(&|s| traffic_policy(s) != traffic_policy(w)) {
        reasons.push(condition::REASON_INTERNAL_TRAFFIC_POLICY_CONFLICT);
    }
    if differs(&|s| s.traffic_distribution != w.traffic_distribution) {
        reasons.push(condition::REASON_TRAFFIC_DISTRIBUTION_CONFLICT);
    }
    let we = list[0].export;
    if list.iter().any(|c| c.export.labels != we.labels) {
        reasons.push(condition::REASON_LABELS_CONFLICT);
    }
    if list.iter().any(|c| c.export.annotations != we.annotations) {
        reasons.push(condition::REASON_ANNOTATIONS_CONFLICT);
    }
    reasons
}

/// Merges the constituents of one name (sorted, winner first): the winner's type and
/// session affinity, the union of every port name (the winner's definition of a name used
/// differently elsewhere), and the conditions of each export.
fn merge(key: &ServiceKey, list: &[Constituent<'_>]) -> Merged {
    let winner = &list[0];
    let mut reasons: Vec<&'static str> = Vec::new();
    let mut ports: Vec<ServicePort> = Vec::new();
    let mut port_conflict = false;
    for c in list {
        for p in &c.service.ports {
            match ports.iter().find(|q| q.name == p.name) {
                Some(q) => port_conflict |= !same_port(q, p),
                None => ports.push(p.clone()),
            }
        }
    }
    if port_conflict {
        reasons.push(condition::REASON_PORT_CONFLICT);
    }
    reasons.extend(setting_conflicts(list));
    let w = winner.service;
    let type_ = if w.kind == ServiceKind::Headless {
        ServiceImportType::Headless
    } else {
        ServiceImportType::ClusterSetIP
    };
    let spec = ServiceImportSpec {
        ports,
        type_,
        session_affinity: Some(w.session_affinity.clone()),
        session_affinity_config: w.session_affinity_config.clone(),
        ip_families: w.ip_families.clone(),
        internal_traffic_policy: w.internal_traffic_policy.clone(),
        traffic_distribution: w.traffic_distribution.clone(),
        ..ServiceImportSpec::default()
    };
    let conflict = if reasons.is_empty() {
        WantedCondition::new(
            condition::CONFLICT,
            false,
            condition::REASON_NO_CONFLICTS,
            format!("the clusters exporting {key} agree"),
        )
    } else {
        let message = format!(
            "{} differ between the clusters exporting {key}; the ServiceImport uses the values of cluster {} (the oldest export)",
            reasons.join(", "),
            winner.cluster
        );
        WantedCondition::new(condition::CONFLICT, true, &reasons.join(","), message)
    };
    let verdicts = list
        .iter()
        .map(|c| ExportVerdict {
            cluster: c.cluster.to_string(),
            key: key.clone(),
            conditions: vec![
                WantedCondition::new(
                    condition::VALID,
                    true,
                    condition::REASON_VALID,
                    format!("Service {key} can be exported"),
                ),
                WantedCondition::new(
                    condition::READY,
                    true,
                    condition::REASON_EXPORTED,
                    format!("exported to the ClusterSet as ServiceImport {key}"),
                ),
                conflict.clone(),
            ],
        })
        .collect();
    Merged { spec, verdicts }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
