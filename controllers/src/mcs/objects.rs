//! From a [`Plan`] to one member's objects, pure: the ServiceImport of every multi-cluster
//! service whose namespace exists in the member and one EndpointSlice per exporting
//! cluster's slice (in the member's EndpointSlice version), compared with what the member
//! holds through a content hash, so that only what changed is written and what is no longer
//! wanted is deleted. Objects Flotilla did not write (no managed-by label) never appear here.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::{
    hash::content_hash,
    mcs::{
        CLUSTERSET_IPS_ANNOTATION, ClusterStatus, IMPORT_MANAGED_BY_LABEL, MANAGED_BY,
        MANAGED_BY_LABEL, MCS_GROUP, MCS_VERSION, SERVICE_NAME_LABEL, SOURCE_CLUSTER_ID_ANNOTATION,
        SOURCE_CLUSTER_LABEL, ServiceImportStatus,
    },
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Value, json};

use super::{
    conditions::export_conditions,
    plan::{MergedService, Plan, ServiceKey, SourceSlice},
    slice::SliceVersion,
};

/// Annotation holding the hash of what Flotilla last wrote into an import or a slice.
pub const HASH_ANNOTATION: &str = "mcs.flotilla.io/content-hash";
/// `status.endpointSliceObjects` when the import has slices.
const PRESENT: &str = "Present";
/// `status.endpointSliceObjects` when it has none.
const ABSENT: &str = "Absent";
/// The longest object name the API server accepts.
const MAX_NAME: usize = 253;

/// A ServiceImport Flotilla wrote, as a member holds it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ActualImport {
    /// The hash annotation.
    pub hash: Option<String>,
    /// Its status.
    pub status: ServiceImportStatus,
}

/// An EndpointSlice Flotilla wrote, as a member holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActualSlice {
    /// The hash annotation.
    pub hash: Option<String>,
    /// Its source-cluster label.
    pub source: Option<String>,
}

/// What one member holds of Flotilla's MCS objects.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ActualMember {
    /// Its namespaces.
    pub namespaces: BTreeSet<String>,
    /// Flotilla's ServiceImports.
    pub imports: BTreeMap<ServiceKey, ActualImport>,
    /// Flotilla's EndpointSlices, by namespace and name.
    pub slices: BTreeMap<(String, String), ActualSlice>,
}

/// A write into a member.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Server-side apply of a ServiceImport (metadata and spec).
    ApplyImport {
        /// The import.
        key: ServiceKey,
        /// The object.
        body: Value,
    },
    /// Merge patch of a ServiceImport's status.
    ImportStatus {
        /// The import.
        key: ServiceKey,
        /// `{"status": ..}`.
        body: Value,
    },
    /// Delete a ServiceImport.
    DeleteImport {
        /// The import.
        key: ServiceKey,
    },
    /// Server-side apply of an EndpointSlice.
    ApplySlice {
        /// The service it belongs to.
        key: ServiceKey,
        /// The slice's name.
        name: String,
        /// The object.
        body: Value,
    },
    /// Delete an EndpointSlice.
    DeleteSlice {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl Op {
    /// The write's bounded metric label.
    pub fn as_str(&self) -> &'static str {
        match self {
            Op::ApplyImport { .. } => "apply_import",
            Op::ImportStatus { .. } => "import_status",
            Op::DeleteImport { .. } => "delete_import",
            Op::ApplySlice { .. } => "apply_slice",
            Op::DeleteSlice { .. } => "delete_slice",
        }
    }

    /// The multi-cluster service a write is for, when it is one being created or updated.
    pub fn service(&self) -> Option<&ServiceKey> {
        match self {
            Op::ApplyImport { key, .. }
            | Op::ImportStatus { key, .. }
            | Op::ApplySlice { key, .. } => Some(key),
            Op::DeleteImport { .. } | Op::DeleteSlice { .. } => None,
        }
    }
}

/// Name of the imported slice carrying `source`'s slice of service `service`: the service,
/// the cluster, and a short hash of the source slice's name (unique, stable, and within the
/// API's name length).
pub fn slice_name(service: &str, source: &SourceSlice) -> String {
    let h = content_hash(&json!(source.local_name));
    let suffix = format!("-{}-{}", source.cluster, &h[..10]);
    let keep = MAX_NAME.saturating_sub(suffix.len()).min(service.len());
    format!("{}{suffix}", &service[..keep])
}

/// The import: the exported labels and annotations (Flotilla's own keys win), the
/// allocated ClusterSet IPs in an annotation, and the merged spec.
fn import_body(key: &ServiceKey, merged: &MergedService) -> Value {
    let mut labels = merged.exported.labels.clone();
    labels.insert(IMPORT_MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    let mut annotations = merged.exported.annotations.clone();
    annotations.remove(HASH_ANNOTATION);
    annotations.remove(CLUSTERSET_IPS_ANNOTATION);
    if let Some(ips) = &merged.clusterset_ips {
        annotations.insert(CLUSTERSET_IPS_ANNOTATION.into(), ips.join(","));
    }
    let hash = content_hash(&json!({
        "labels": labels, "annotations": annotations, "spec": merged.spec,
    }));
    annotations.insert(HASH_ANNOTATION.into(), hash);
    json!({
        "apiVersion": format!("{MCS_GROUP}/{MCS_VERSION}"),
        "kind": "ServiceImport",
        "metadata": {
            "name": key.name, "namespace": key.namespace,
            "labels": labels, "annotations": annotations,
        },
        "spec": merged.spec,
    })
}

/// The import's conditions to write, or `None` when the import already says them.
fn import_conditions(
    merged: &MergedService,
    current: Option<&ActualImport>,
    now: &Time,
) -> Option<Vec<Condition>> {
    let existing = current
        .map(|c| c.status.conditions.as_slice())
        .unwrap_or(&[]);
    export_conditions(existing, &merged.import_conditions, None, now)
}

fn import_status(merged: &MergedService) -> ServiceImportStatus {
    ServiceImportStatus {
        endpoint_slice_objects: Some(
            if merged.slices.is_empty() {
                ABSENT
            } else {
                PRESENT
            }
            .to_string(),
        ),
        clusters: merged
            .clusters
            .iter()
            .map(|c| ClusterStatus { cluster: c.clone() })
            .collect(),
        conditions: Vec::new(),
    }
}

/// An imported slice; `id` is the source cluster's id, where known.
fn slice_body(
    key: &ServiceKey,
    name: &str,
    source: &SourceSlice,
    id: Option<&String>,
    version: SliceVersion,
) -> Value {
    let labels = json!({
        SERVICE_NAME_LABEL: key.name,
        SOURCE_CLUSTER_LABEL: source.cluster,
        MANAGED_BY_LABEL: MANAGED_BY,
    });
    let content = source.slice.to_json(version);
    let hash = content_hash(&json!({"labels": labels, "content": content, "id": id}));
    let mut annotations = json!({HASH_ANNOTATION: hash});
    if let Some(id) = id {
        annotations[SOURCE_CLUSTER_ID_ANNOTATION] = json!(id);
    }
    let mut body = json!({
        "apiVersion": version.api_resource().api_version,
        "kind": "EndpointSlice",
        "metadata": {
            "name": name, "namespace": key.namespace,
            "labels": labels, "annotations": annotations,
        },
    });
    if let Value::Object(o) = &mut body {
        o.extend(content);
    }
    body
}

fn hash_of(body: &Value) -> Option<&str> {
    body["metadata"]["annotations"][HASH_ANNOTATION].as_str()
}

/// The writes that bring one available member to the plan, its slices at `version`
/// (`None`: imports only, for the host's mirror). Slices from clusters the plan holds
/// (state unknown) are left as they are.
pub fn member_ops(plan: &Plan, actual: &ActualMember, version: Option<SliceVersion>) -> Vec<Op> {
    let now = plan
        .now
        .clone()
        .unwrap_or(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    let mut ops = Vec::new();
    let mut wanted_imports = BTreeSet::new();
    let mut wanted_slices = BTreeSet::new();
    for (key, merged) in &plan.services {
        if !actual.namespaces.contains(&key.namespace) {
            continue;
        }
        wanted_imports.insert(key.clone());
        let body = import_body(key, merged);
        let current = actual.imports.get(key);
        if current.and_then(|c| c.hash.as_deref()) != hash_of(&body) {
            ops.push(Op::ApplyImport {
                key: key.clone(),
                body,
            });
        }
        let mut status = import_status(merged);
        let current_status = current.map(|c| {
            (
                c.status.clusters.clone(),
                c.status.endpoint_slice_objects.clone(),
            )
        });
        let conditions = import_conditions(merged, current, &now);
        let changed = conditions.is_some();
        status.conditions = conditions.unwrap_or_else(|| {
            current
                .map(|c| c.status.conditions.clone())
                .unwrap_or_default()
        });
        if changed
            || current_status
                != Some((
                    status.clusters.clone(),
                    status.endpoint_slice_objects.clone(),
                ))
        {
            ops.push(Op::ImportStatus {
                key: key.clone(),
                body: json!({"status": status}),
            });
        }
        let Some(version) = version else { continue };
        for source in &merged.slices {
            let name = slice_name(&key.name, source);
            let id = plan.cluster_ids.get(&source.cluster);
            let body = slice_body(key, &name, source, id, version);
            let id = (key.namespace.clone(), name.clone());
            let current = actual.slices.get(&id).and_then(|s| s.hash.as_deref());
            if current != hash_of(&body) {
                ops.push(Op::ApplySlice {
                    key: key.clone(),
                    name,
                    body,
                });
            }
            wanted_slices.insert(id);
        }
    }
    for ((namespace, name), s) in &actual.slices {
        let held = s.source.as_ref().is_some_and(|c| plan.held.contains(c));
        if !held && !wanted_slices.contains(&(namespace.clone(), name.clone())) {
            ops.push(Op::DeleteSlice {
                namespace: namespace.clone(),
                name: name.clone(),
            });
        }
    }
    for key in actual.imports.keys() {
        if !wanted_imports.contains(key) {
            ops.push(Op::DeleteImport { key: key.clone() });
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcs::slice::{Endpoint, Slice};
    use flotilla_api::mcs::{ServiceImportSpec, ServicePort};

    fn source(cluster: &str, ip: &str) -> SourceSlice {
        SourceSlice {
            cluster: cluster.into(),
            local_name: format!("web-{cluster}x"),
            slice: Slice {
                address_type: "IPv4".into(),
                endpoints: vec![Endpoint {
                    addresses: vec![ip.into()],
                    ready: Some(true),
                    ..Endpoint::default()
                }],
                ports: Vec::new(),
            },
        }
    }

    fn plan_with(slices: Vec<SourceSlice>) -> Plan {
        let mut plan = Plan::default();
        plan.services.insert(
            ServiceKey::new("demo", "web"),
            MergedService {
                spec: ServiceImportSpec {
                    ports: vec![ServicePort {
                        port: 80,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                clusters: vec!["m1".into(), "m2".into()],
                slices,
                exported: Default::default(),
                clusterset_ips: None,
                import_conditions: Vec::new(),
            },
        );
        plan
    }

    fn ns(names: &[&str]) -> ActualMember {
        ActualMember {
            namespaces: names.iter().map(|s| s.to_string()).collect(),
            ..ActualMember::default()
        }
    }

    /// What the member holds after `ops` were applied to an empty member.
    fn applied(ops: &[Op], namespaces: &[&str]) -> ActualMember {
        let mut actual = ns(namespaces);
        for op in ops {
            match op {
                Op::ApplyImport { key, body } => {
                    actual.imports.entry(key.clone()).or_default().hash =
                        hash_of(body).map(str::to_owned);
                }
                Op::ImportStatus { key, body } => {
                    actual.imports.entry(key.clone()).or_default().status =
                        serde_json::from_value(body["status"].clone()).expect("a status");
                }
                Op::ApplySlice { key, name, body } => {
                    actual.slices.insert(
                        (key.namespace.clone(), name.clone()),
                        ActualSlice {
                            hash: hash_of(body).map(str::to_owned),
                            source: body["metadata"]["labels"][SOURCE_CLUSTER_LABEL]
                                .as_str()
                                .map(str::to_owned),
                        },
                    );
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        actual
    }

    #[test]
    fn an_empty_member_gets_the_import_its_status_and_one_slice_per_source() {
        let plan = plan_with(vec![source("m1", "10.64.0.1"), source("m2", "10.65.0.1")]);
        let ops = member_ops(&plan, &ns(&["demo"]), Some(SliceVersion::V1));
        assert_eq!(ops.len(), 4, "{ops:?}");
        let Op::ApplySlice { body, .. } = &ops[2] else {
            panic!("{ops:?}")
        };
        assert_eq!(body["apiVersion"], "discovery.k8s.io/v1");
        assert_eq!(body["metadata"]["labels"][SERVICE_NAME_LABEL], "web");
        assert_eq!(body["metadata"]["labels"][SOURCE_CLUSTER_LABEL], "m1");
        assert_eq!(body["metadata"]["labels"][MANAGED_BY_LABEL], MANAGED_BY);
        assert!(
            body["metadata"]["labels"]
                .get("kubernetes.io/service-name")
                .is_none()
        );
        let Op::ImportStatus { body, .. } = &ops[1] else {
            panic!("{ops:?}")
        };
        assert_eq!(
            body["status"],
            json!({"endpointSliceObjects": "Present", "clusters": [{"cluster": "m1"}, {"cluster": "m2"}]})
        );
    }

    #[test]
    fn a_member_that_holds_the_plan_gets_no_write() {
        let plan = plan_with(vec![source("m1", "10.64.0.1")]);
        let first = member_ops(&plan, &ns(&["demo"]), Some(SliceVersion::V1beta1));
        let actual = applied(&first, &["demo"]);
        assert_eq!(
            member_ops(&plan, &actual, Some(SliceVersion::V1beta1)),
            vec![]
        );
    }

    #[test]
    fn a_changed_endpoint_rewrites_only_its_slice_and_a_gone_source_is_deleted() {
        let before = plan_with(vec![source("m1", "10.64.0.1"), source("m2", "10.65.0.1")]);
        let actual = applied(
            &member_ops(&before, &ns(&["demo"]), Some(SliceVersion::V1)),
            &["demo"],
        );
        let after = plan_with(vec![source("m1", "10.64.0.2")]);
        let ops = member_ops(&after, &actual, Some(SliceVersion::V1));
        let m2 = slice_name("web", &source("m2", "x"));
        assert!(
            matches!(&ops[..], [Op::ImportStatus { .. }, Op::ApplySlice { .. }, Op::DeleteSlice { name, .. }] if *name == m2)
                || matches!(&ops[..], [Op::ApplySlice { .. }, Op::DeleteSlice { name, .. }] if *name == m2),
            "{ops:?}"
        );
    }

    #[test]
    fn slices_of_a_held_cluster_stay_and_a_namespace_missing_in_the_member_gets_nothing() {
        let before = plan_with(vec![source("m1", "10.64.0.1"), source("m2", "10.65.0.1")]);
        let actual = applied(
            &member_ops(&before, &ns(&["demo"]), Some(SliceVersion::V1)),
            &["demo"],
        );
        let mut after = plan_with(vec![source("m1", "10.64.0.1")]);
        after.held.insert("m2".into());
        assert_eq!(member_ops(&after, &actual, Some(SliceVersion::V1)), vec![]);

        let ops = member_ops(&before, &ns(&["other"]), Some(SliceVersion::V1));
        assert_eq!(ops, vec![]);
    }

    #[test]
    fn an_import_no_longer_planned_is_deleted_with_its_slices() {
        let before = plan_with(vec![source("m1", "10.64.0.1")]);
        let actual = applied(
            &member_ops(&before, &ns(&["demo"]), Some(SliceVersion::V1)),
            &["demo"],
        );
        let ops = member_ops(&Plan::default(), &actual, Some(SliceVersion::V1));
        assert_eq!(ops.len(), 2, "{ops:?}");
        assert!(matches!(ops[0], Op::DeleteSlice { .. }));
        assert_eq!(
            ops[1],
            Op::DeleteImport {
                key: ServiceKey::new("demo", "web")
            }
        );
    }

    #[test]
    fn the_hosts_mirror_gets_the_import_and_its_status_but_no_slice() {
        let plan = plan_with(vec![source("m1", "10.64.0.1")]);
        let ops = member_ops(&plan, &ns(&["demo"]), None);
        assert!(
            matches!(&ops[..], [Op::ApplyImport { .. }, Op::ImportStatus { .. }]),
            "{ops:?}"
        );
        let actual = applied(&ops, &["demo"]);
        assert_eq!(member_ops(&plan, &actual, None), vec![]);
    }

    #[test]
    fn slice_names_stay_within_the_apis_limit() {
        let long = "s".repeat(300);
        let name = slice_name(&long, &source("member1", "x"));
        assert!(name.len() <= MAX_NAME);
        assert!(name.ends_with(&format!(
            "-member1-{}",
            &content_hash(&json!("web-member1x"))[..10]
        )));
    }

    #[test]
    fn the_import_carries_exported_metadata_ips_and_conditions_and_slices_the_source_id() {
        let mut plan = plan_with(vec![source("m1", "10.64.0.1")]);
        plan.cluster_ids.insert("m1".into(), "id-of-m1".into());
        plan.now = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let web = ServiceKey::new("demo", "web");
        let merged = plan.services.get_mut(&web).expect("planned");
        merged.exported.labels.insert("team".into(), "a".into());
        merged
            .exported
            .labels
            .insert(IMPORT_MANAGED_BY_LABEL.into(), "someone".into());
        merged
            .exported
            .annotations
            .insert("note".into(), "x".into());
        merged.spec.ips = vec!["244.0.0.9".into()];
        merged.clusterset_ips = Some(merged.spec.ips.clone());
        merged.import_conditions = vec![crate::mcs::plan::WantedCondition {
            type_: flotilla_api::mcs::condition::IPS_ALLOCATED,
            status: true,
            reason: "Allocated".into(),
            message: "ClusterSet IPs 244.0.0.9".into(),
        }];
        let ops = member_ops(&plan, &ns(&["demo"]), Some(SliceVersion::V1));
        let Op::ApplyImport { body, .. } = &ops[0] else {
            panic!("{ops:?}")
        };
        let meta = &body["metadata"];
        assert_eq!(meta["labels"]["team"], "a");
        assert_eq!(meta["labels"][IMPORT_MANAGED_BY_LABEL], MANAGED_BY);
        assert_eq!(meta["annotations"]["note"], "x");
        assert_eq!(meta["annotations"][CLUSTERSET_IPS_ANNOTATION], "244.0.0.9");
        assert_eq!(body["spec"]["ips"], json!(["244.0.0.9"]));
        let Op::ImportStatus { body, .. } = &ops[1] else {
            panic!("{ops:?}")
        };
        assert_eq!(body["status"]["conditions"][0]["reason"], "Allocated");
        let Op::ApplySlice { body, .. } = &ops[2] else {
            panic!("{ops:?}")
        };
        assert_eq!(
            body["metadata"]["annotations"][SOURCE_CLUSTER_ID_ANNOTATION],
            "id-of-m1"
        );
        // Written once, nothing more to write; a later pass keeps the transition time.
        let held = applied(&ops, &["demo"]);
        plan.now = Some(Time(k8s_openapi::jiff::Timestamp::MAX));
        assert_eq!(member_ops(&plan, &held, Some(SliceVersion::V1)), Vec::new());
    }
}
