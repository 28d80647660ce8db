//! Multi-Cluster Services for Pull members, pure: a Pull member's [`MemberView`] read from
//! the ServiceExportReports its agent wrote (a report that does not parse or names another
//! export than its own is rejected with a reason, the others are read), and the Works that
//! carry a plan's ServiceImport and EndpointSlices of each service into a Pull member — one
//! Work per service, compared with what the inventory holds through a content hash. No I/O;
//! [`super::pull`] fetches and writes.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::{
    MANAGED_LABEL,
    hash::content_hash,
    mcs_report::{MCS_WORK_LABEL, ServiceExportReport, report_name, service_of},
    work::{cluster_namespace, work_name},
};
use flotilla_core::member::HASH_ANNOTATION as DESIRED_HASH;
use kube::{ResourceExt, api::DynamicObject};
use serde_json::{Value, json};

use super::{
    objects::{ActualMember, HASH_ANNOTATION, Op, member_ops},
    observe::service_view,
    plan::{Availability, ExportView, MemberView, Plan, ServiceKey},
    slice::{Slice, SliceVersion},
};

/// Why a report is not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// It does not parse as a ServiceExportReport.
    Malformed(String),
    /// Its name is not `<namespace>.<name>` of the export it describes.
    WrongName(String),
    /// Its namespace is no Pull cluster's inventory.
    UnknownCluster(String),
}

impl Rejection {
    /// The condition reason.
    pub fn as_str(&self) -> &'static str {
        match self {
            Rejection::Malformed(_) => "MalformedReport",
            Rejection::WrongName(_) => "ReportNameMismatch",
            Rejection::UnknownCluster(_) => "UnknownCluster",
        }
    }

    /// The condition message.
    pub fn message(&self) -> &str {
        match self {
            Rejection::Malformed(m) | Rejection::WrongName(m) | Rejection::UnknownCluster(m) => m,
        }
    }
}

/// A report read, or why not.
pub type Read = Result<ServiceExportReport, Rejection>;

/// Reads one report (dynamic, so one bad report cannot stop the watch of the others).
pub fn read_report(o: &DynamicObject) -> Read {
    let value = serde_json::to_value(o).map_err(|e| Rejection::Malformed(e.to_string()))?;
    let r: ServiceExportReport = serde_json::from_value(value)
        .map_err(|e| Rejection::Malformed(format!("not a ServiceExportReport: {e}")))?;
    if r.spec
        .created
        .parse::<k8s_openapi::jiff::Timestamp>()
        .is_err()
    {
        return Err(Rejection::Malformed(format!(
            "spec.created {:?} is not an RFC 3339 time",
            r.spec.created
        )));
    }
    let want = report_name(&r.spec.namespace, &r.spec.name);
    if r.spec.namespace.is_empty() || r.spec.name.is_empty() || r.name_any() != want {
        return Err(Rejection::WrongName(format!(
            "a report on export {}/{} must be named {want}",
            r.spec.namespace, r.spec.name
        )));
    }
    Ok(r)
}

/// A Pull member's view from its readable reports.
pub fn report_view(
    name: &str,
    availability: Availability,
    reports: &[&ServiceExportReport],
) -> MemberView {
    let mut view = MemberView {
        name: name.to_string(),
        availability,
        exports: Vec::new(),
        services: BTreeMap::new(),
        slices: BTreeMap::new(),
        imports: BTreeMap::new(),
    };
    for r in reports {
        let s = &r.spec;
        let key = ServiceKey::new(s.namespace.clone(), s.name.clone());
        view.exports.push(ExportView {
            key: key.clone(),
            created: s.created.clone(),
            labels: s.exported_labels.clone(),
            annotations: s.exported_annotations.clone(),
        });
        if let Some(service) = &s.service {
            view.services
                .insert(key.clone(), service_view(&service_of(service)));
        }
        let slices: Vec<(String, Slice)> = s
            .endpoint_slices
            .iter()
            .map(|e| (e.name.clone(), Slice::from_json(&e.content)))
            .collect();
        if !slices.is_empty() {
            view.slices.insert(key, slices);
        }
    }
    view
}

/// Name of the Work carrying service `key` into a Pull member.
pub fn mcs_work_name(key: &ServiceKey) -> String {
    work_name("mcs", "mcs.flotilla.io", Some(&key.namespace), &key.name)
}

/// Marks a manifest for the agent: managed (so it is pruned when it leaves its Work) and
/// carrying its content hash (so an up-to-date object costs the agent no write).
fn managed_manifest(mut body: Value) -> Value {
    let hash = body["metadata"]["annotations"][HASH_ANNOTATION].clone();
    body["metadata"]["labels"][MANAGED_LABEL] = json!("true");
    body["metadata"]["annotations"][DESIRED_HASH] = hash;
    body
}

/// The Works a Pull member should hold, by name: one per service of the plan, its
/// ServiceImport and the imported slices at the member's EndpointSlice `version`. A
/// namespace the member lacks is not known to the host: the agent reports that Work as not
/// applied until the namespace exists.
pub fn member_works(plan: &Plan, cluster: &str, version: SliceVersion) -> BTreeMap<String, Value> {
    let actual = ActualMember {
        namespaces: plan.services.keys().map(|k| k.namespace.clone()).collect(),
        ..ActualMember::default()
    };
    let mut manifests: BTreeMap<ServiceKey, Vec<Value>> = BTreeMap::new();
    for op in member_ops(plan, &actual, Some(version)) {
        match op {
            Op::ApplyImport { key, body } | Op::ApplySlice { key, body, .. } => {
                manifests
                    .entry(key)
                    .or_default()
                    .push(managed_manifest(body));
            }
            // The import's status cannot travel in a manifest (see docs).
            Op::ImportStatus { .. } | Op::DeleteImport { .. } | Op::DeleteSlice { .. } => {}
        }
    }
    manifests
        .into_iter()
        .map(|(key, manifests)| {
            let name = mcs_work_name(&key);
            let hash = content_hash(&json!(manifests));
            let body = json!({
                "apiVersion": "multicluster.x-k8s.io/v1alpha1",
                "kind": "Work",
                "metadata": {
                    "name": name,
                    "namespace": cluster_namespace(cluster),
                    "labels": {MCS_WORK_LABEL: format!("{}.{}", key.namespace, key.name)},
                    "annotations": {HASH_ANNOTATION: hash},
                },
                "spec": {"workload": {"manifests": manifests}},
            });
            (name, body)
        })
        .collect()
}

/// Writes to a Pull member's inventory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkOps {
    /// Works to apply (their hash differs or they are missing).
    pub apply: Vec<(String, Value)>,
    /// Works to delete (no longer wanted).
    pub delete: Vec<String>,
}

/// The Works to write, given those wanted and those held (name → hash annotation).
pub fn work_ops(
    wanted: BTreeMap<String, Value>,
    held: &BTreeMap<String, Option<String>>,
) -> WorkOps {
    let names: BTreeSet<String> = wanted.keys().cloned().collect();
    let apply = wanted
        .into_iter()
        .filter(|(name, body)| {
            held.get(name).and_then(|h| h.as_deref())
                != body["metadata"]["annotations"][HASH_ANNOTATION].as_str()
        })
        .collect();
    let delete = held
        .keys()
        .filter(|n| !names.contains(*n))
        .cloned()
        .collect();
    WorkOps { apply, delete }
}

#[cfg(test)]
#[path = "pull_plan_tests.rs"]
mod tests;
