//! SIG-Multicluster's Work API (`multicluster.x-k8s.io/v1alpha1`, kubernetes-sigs/work-api):
//! the per-cluster inventory of pull mode.
//!
//! **Bundles.** In the host, a Pull cluster's namespace (`flotilla-cluster-<name>`) holds,
//! per federated type and per federated namespace (cluster-scoped types: one group), one or
//! more **bundle** Works ([`WORK_BUNDLE_LABEL`]); each carries the rendered member objects
//! (template + placement + overrides) of that group in `spec.workload.manifests`, and, in the
//! same order, Flotilla's per-manifest [`ManifestConfig`] (which federated object it renders,
//! its drift policy, whether it is being orphaned). A group is split into chunks so that no
//! Work nears the API server's 1.5 MiB object limit: the split rule is
//! `flotilla_core::bundle::assign` (an object stays in the chunk that holds it while that
//! chunk stays under the limit; a new object, or one that no longer fits, goes to the
//! lowest-numbered chunk with room, else a new chunk; an emptied chunk is deleted), so a
//! change to one object rewrites one Work. Bundles are per federated **type** because each
//! type's sync controller is the only writer of its Works (its own watch, cache, leader
//! work and batching): a bundle shared by types would need several independent writers to
//! merge into one object, with conflicts and lost updates. Works written one per federated
//! object by earlier versions (the legacy shape, [`WORK_SOURCE_NAME`] annotations) are still
//! read, and are taken over by bundles and deleted; the agent recognises the objects it
//! applied through either (same content hash: no member write).
//!
//! The cluster's agent applies every manifest on its own (one bad manifest is reported on its
//! own condition, the others still apply; an up-to-date one is not written) and reports per
//! manifest in `status.manifestConditions`. In the member, one cluster-scoped
//! **AppliedWork** per Work (per bundle) records what the agent created, so it can prune
//! exactly those objects (and nothing else) when they leave the inventory, across agent
//! restarts; this is the shape of SIG-Multicluster's Work API draft (KEP-6456).
//!
//! Flotilla's additions to the standard shape, all optional, on a manifest condition:
//! `statusFeedback` (the member object's `.status`, when the FederatedTypeConfig collects
//! status), `generation` (the member object's `metadata.generation`), `hash` (the content
//! hash the agent applied) and `drift` (the last drift the agent saw in the member object,
//! in the shape of a federated object's `status.drift` entry). The federated object's drift
//! policy reaches the agent in its manifest's [`ManifestConfig`] (a legacy Work: as the
//! same annotations on the Work, `flotilla_core::drift::POLICY_ANNOTATION`,
//! `flotilla_core::drift::IGNORE_ANNOTATION`). Types, names and pure helpers only; no I/O.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Prefix of a Pull cluster's namespace in the host: `flotilla-cluster-<cluster>`.
pub const CLUSTER_NAMESPACE_PREFIX: &str = "flotilla-cluster-";
/// Label on every Work Flotilla writes: the federated type (`<plural>.<group>`, or a hash
/// when that is longer than a label value may be), so each type's controller watches its own.
pub const WORK_TYPE_LABEL: &str = "work.flotilla.io/type";
/// Annotation on a Work: namespace of the federated object it renders (absent for
/// cluster-scoped ones).
pub const WORK_SOURCE_NAMESPACE: &str = "work.flotilla.io/source-namespace";
/// Annotation on a Work: name of the federated object it renders.
pub const WORK_SOURCE_NAME: &str = "work.flotilla.io/source-name";
/// Annotation on a Work: `"true"` when the agent reports the member object's status.
pub const WORK_COLLECT_STATUS: &str = "work.flotilla.io/collect-status";
/// Name of the agent's heartbeat Lease in its cluster's namespace.
pub const AGENT_LEASE: &str = "flotilla-agent";
/// Field manager of the agent's writes in the member.
pub const AGENT_FIELD_MANAGER: &str = "flotilla-agent";
/// Annotation on an AppliedWork, written when it is created (before anything is applied):
/// the Work's manifests then, grouped by apiVersion, kind and namespace with their names
/// (`{"objects":[{"apiVersion":…,"kind":…,"namespace":…,"names":[…]}]}`; older agents
/// wrote a JSON list of [`ResourceIdentifier`]s, still read). An agent stopped
/// between applying one and recording it still knows, after a restart, which objects the
/// Work may have left in the member.
pub const APPLYING_ANNOTATION: &str = "work.flotilla.io/applying";
/// Condition type on a Work and on each manifest: the manifest is applied.
pub const APPLIED: &str = "Applied";
/// Label on a bundle Work (value `"true"`): it carries the manifests of one federated type
/// and namespace, with a [`ManifestConfig`] per manifest.
pub const WORK_BUNDLE_LABEL: &str = "work.flotilla.io/bundle";
/// Annotation on a bundle Work: the federated namespace of its group (absent for
/// cluster-scoped types).
pub const WORK_BUNDLE_NAMESPACE: &str = "work.flotilla.io/bundle-namespace";
/// Annotation on a bundle Work: its chunk number within its group (`"0"`, `"1"`...).
pub const WORK_BUNDLE_CHUNK: &str = "work.flotilla.io/bundle-chunk";
/// Reason of a manifest's `Applied` condition once the agent released the member object
/// of a manifest marked [`ManifestConfig::orphan`] (unlabelled, left in place, forgotten).
pub const RELEASED: &str = "Released";
/// The default bound on the manifests of one bundle Work, in bytes of JSON. Every change
/// rewrites its whole chunk, and the host API server's cost of a Work write (and of its
/// watch events and the agent's status report) grows with the chunk's bytes: small chunks
/// keep a stream of changes from rewriting the same large object again and again, while
/// each chunk costs one AppliedWork record in the member. Measured at 1,000 ConfigMaps × 4
/// Pull members (docs/benchmarks-pull-fleet.md): pull took 3.3–4.2× push's time at
/// 512 KiB, 1.4–1.9× at 64 KiB, 1.4–1.6× at 32 KiB and 16 KiB, where the AppliedWork
/// records cost 0.06 and 0.08 member requests per member object.
pub const BUNDLE_MAX_BYTES: usize = 32 * 1024;

/// The largest bound a bundle may be given (`FLOTILLA_WORK_BUNDLE_MAX_BYTES`): a third of
/// the API server's 1.5 MiB object limit, leaving room for the status the agent reports
/// (per-manifest conditions, status feedback, drift) and for one manifest that grows.
pub const BUNDLE_MAX_BYTES_CEILING: usize = 512 * 1024;

/// The host namespace of a Pull cluster's inventory.
pub fn cluster_namespace(cluster: &str) -> String {
    format!("{CLUSTER_NAMESPACE_PREFIX}{cluster}")
}

/// The cluster a namespace of the inventory belongs to.
pub fn cluster_of_namespace(namespace: &str) -> Option<&str> {
    namespace.strip_prefix(CLUSTER_NAMESPACE_PREFIX)
}

/// Value of [`WORK_TYPE_LABEL`] for a target type: `<plural>.<group>` (`<plural>` for the
/// core group), or `t-<hash>` when that is not a valid label value.
pub fn type_label(plural: &str, group: &str) -> String {
    let readable = if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    };
    if readable.len() <= 63 {
        readable
    } else {
        format!(
            "t-{}",
            &crate::hash::content_hash(&Value::String(readable))[..16]
        )
    }
}

/// Name of chunk `chunk` of the bundle of one type's objects in `namespace` (`None`:
/// a cluster-scoped type) — distinct from every legacy Work name (the hashed identity
/// differs).
pub fn bundle_name(plural: &str, group: &str, namespace: Option<&str>, chunk: usize) -> String {
    work_name(plural, group, namespace, &format!("~bundle-{chunk}"))
}

/// Name of the Work rendering federated object `namespace/name` of a type: readable
/// (`<plural>-<namespace>-<name>`) and, through a short hash of the exact identity, unique
/// even where the readable part is cut to fit 253 characters or is ambiguous.
pub fn work_name(plural: &str, group: &str, namespace: Option<&str>, name: &str) -> String {
    let identity = serde_json::json!([plural, group, namespace, name]);
    let hash = &crate::hash::content_hash(&identity)[..10];
    let readable = match namespace {
        Some(ns) => format!("{plural}-{ns}-{name}"),
        None => format!("{plural}-{name}"),
    };
    let mut readable: String = readable
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(240)
        .collect();
    while readable.ends_with(['-', '.']) {
        readable.pop();
    }
    // A name must also start with a letter or digit; an identity that is all punctuation
    // (or empty) leaves only the hash, which is hex.
    let readable = readable.trim_start_matches(['-', '.']);
    if readable.is_empty() {
        return hash.to_owned();
    }
    format!("{readable}-{hash}")
}

/// A set of manifests to apply in one member cluster.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "Work",
    plural = "works",
    namespaced,
    status = "WorkStatus",
    category = "multicluster",
    derive = "PartialEq",
    printcolumn(
        name = "Applied",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Applied')].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct WorkSpec {
    /// The manifests to apply.
    #[serde(default)]
    pub workload: WorkloadTemplate,
    /// Flotilla (bundles): one entry per manifest, in the same order — which federated
    /// object it renders and how the agent treats it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifest_configs: Vec<ManifestConfig>,
}

/// Flotilla: how the agent treats one manifest of a bundle, and where it comes from.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestConfig {
    /// The member object (group, kind, namespace, name; the ordinal is the manifest's).
    pub identifier: ResourceIdentifier,
    /// Namespace of the federated object the manifest renders (absent: cluster-scoped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_namespace: Option<String>,
    /// Name of the federated object the manifest renders.
    pub source_name: String,
    /// The federated object's drift policy, as its annotations
    /// (`flotilla.io/drift-policy`, `flotilla.io/drift-ignore`); empty: the default.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub drift: std::collections::BTreeMap<String, String>,
    /// The federated object leaves this cluster keeping its member object: the agent
    /// unlabels the object instead of applying it, forgets it, and reports [`RELEASED`];
    /// the manifest is then dropped from the bundle without a prune.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub orphan: bool,
    /// Which existing member object the agent may write over (adopt). Absent (federated
    /// types' manifests, and every Work written before this field): any — an object of the
    /// manifest's name is taken over, as kubefed's `adoptResources: Enabled`. Set to a
    /// label key: only an object labelled `<key>=true`, or the very object the agent
    /// applied for this Work (its recorded UID); any other is left untouched and never
    /// pruned, and the manifest is reported `AlreadyExists` with the object named.
    /// Flotilla sets `flotilla.io/dependency` on every dependency copy, so a user's own
    /// object in a Pull member is refused as in a Push member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopt_label: Option<String>,
}

impl Work {
    /// Whether the Work is a bundle ([`WORK_BUNDLE_LABEL`]).
    pub fn is_bundle(&self) -> bool {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(WORK_BUNDLE_LABEL))
            .is_some_and(|v| v == "true")
    }

    /// The config of manifest `ordinal` (bundles), checked against the manifest's object.
    pub fn manifest_config(&self, ordinal: usize) -> Option<&ManifestConfig> {
        let config = self.spec.manifest_configs.get(ordinal)?;
        let manifest = self.spec.workload.manifests.get(ordinal)?;
        same_object(&config.identifier, &identify(ordinal, manifest)).then_some(config)
    }

    /// The manifest condition the agent reported for manifest `ordinal`, matched by the
    /// object it names (an earlier report's ordinals may differ).
    pub fn manifest_report(&self, ordinal: usize) -> Option<&ManifestCondition> {
        let id = identify(ordinal, self.spec.workload.manifests.get(ordinal)?);
        self.status
            .as_ref()?
            .manifest_conditions
            .iter()
            .find(|m| same_object(&m.identifier, &id))
    }
}

/// Whether two identifiers name the same object by group, kind, namespace and name (the
/// ordinal, the version and the resource name do not matter).
pub fn same_object(a: &ResourceIdentifier, b: &ResourceIdentifier) -> bool {
    a.group == b.group && a.kind == b.kind && a.namespace == b.namespace && a.name == b.name
}

/// The identifier of manifest `ordinal` (its resource name is left empty: only the
/// agent's discovery knows it).
pub fn identify(ordinal: usize, manifest: &Value) -> ResourceIdentifier {
    let api_version = manifest["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let text = |p: &str| {
        manifest
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    ResourceIdentifier {
        ordinal: i32::try_from(ordinal).unwrap_or(i32::MAX),
        group: group.to_owned(),
        version: version.to_owned(),
        kind: text("/kind"),
        resource: String::new(),
        namespace: text("/metadata/namespace"),
        name: text("/metadata/name"),
    }
}

/// The objects of a Work.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct WorkloadTemplate {
    /// Whole Kubernetes objects, applied in order.
    #[serde(default)]
    #[schemars(schema_with = "manifests_schema")]
    pub manifests: Vec<Value>,
}

fn manifests_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "x-kubernetes-embedded-resource": true}
    })
}

/// What the agent reports about a Work.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkStatus {
    /// `Applied`: every manifest is applied (observedGeneration: the Work's generation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// One entry per manifest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifest_conditions: Vec<ManifestCondition>,
    /// Flotilla: the drift mode the agent applies to the manifests, `Repair` or `Report`
    /// (an unreadable `flotilla.io/drift-policy` is repaired, so `Repair`): the agent's
    /// acknowledgement that it holds the Work's policy, since an annotation change does
    /// not bump the Work's generation. Absent while the Work carries no drift annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_policy: Option<String>,
}

/// What the agent reports about one manifest.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestCondition {
    /// Which manifest.
    pub identifier: ResourceIdentifier,
    /// `Applied`: True, or False with the member API server's message.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Flotilla: content hash of the manifest the agent last applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// Flotilla: the member object's `metadata.generation` when last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// Flotilla: the member object's `.status` (Works annotated for status collection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::federated::preserve_any")]
    pub status_feedback: Option<Value>,
    /// Flotilla: the last drift the agent saw in the member object (fields, writers, whether
    /// it repaired it), bounded and redacted as a federated object's `status.drift` entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<crate::drift::ClusterDrift>,
}

/// Identifies one manifest of a Work and the member object it became.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceIdentifier {
    /// Index of the manifest in `spec.workload.manifests`.
    #[serde(default)]
    pub ordinal: i32,
    /// API group (empty for the core group).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// API version.
    #[serde(default)]
    pub version: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
    /// Plural resource name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// Namespace (empty for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    #[serde(default)]
    pub name: String,
}

/// In a member cluster: what the agent applied for one Work.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "AppliedWork",
    plural = "appliedworks",
    status = "AppliedWorkStatus",
    category = "multicluster",
    derive = "PartialEq",
    printcolumn(name = "Work", type_ = "string", json_path = ".spec.workName"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AppliedWorkSpec {
    /// Name of the Work in the host.
    pub work_name: String,
    /// Namespace of the Work in the host.
    pub work_namespace: String,
}

/// The member objects the agent created for a Work.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedWorkStatus {
    /// Every object applied, with its UID (a replaced object is never pruned).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_resources: Vec<AppliedResourceMeta>,
}

/// One object the agent applied.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedResourceMeta {
    /// The object.
    #[serde(flatten)]
    pub identifier: ResourceIdentifier,
    /// Its UID when applied.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// A condition in the shape of `metav1.Condition` (an empty message is left out: the API
/// server of Kubernetes 1.20 reads an empty string in a custom resource as null).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of the condition (`Applied`).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The Work's `metadata.generation` the condition was set from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the status last changed (RFC 3339).
    pub last_transition_time: String,
    /// A machine-readable CamelCase reason.
    pub reason: String,
    /// A human-readable message.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_names_are_readable_unique_and_bounded() {
        let a = work_name("configmaps", "", Some("demo"), "web");
        assert!(a.starts_with("configmaps-demo-web-"), "{a}");
        assert_ne!(a, work_name("configmaps", "", Some("demo-web"), ""));
        assert_ne!(
            a,
            work_name("configmaps", "example.com", Some("demo"), "web")
        );
        let long = work_name("configmaps", "", Some("demo"), &"x".repeat(253));
        assert!(long.len() <= 253);
        assert!(!work_name("namespaces", "", None, "Demo_1").contains(['_', 'D']));
    }

    #[test]
    fn bundle_names_are_per_chunk_and_never_a_legacy_works() {
        let b0 = bundle_name("configmaps", "", Some("demo"), 0);
        assert!(b0.starts_with("configmaps-demo--bundle-0-"), "{b0}");
        assert_ne!(b0, bundle_name("configmaps", "", Some("demo"), 1));
        assert_ne!(b0, work_name("configmaps", "", Some("demo"), "-bundle-0"));
        assert_ne!(b0, bundle_name("configmaps", "", None, 0));
    }

    #[test]
    fn a_manifest_config_and_report_are_found_by_the_object_they_name() {
        let cm = |name: &str| serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "d"}});
        let mut w = Work::new(
            "w",
            WorkSpec {
                workload: WorkloadTemplate {
                    manifests: vec![cm("a"), cm("b")],
                },
                manifest_configs: vec![ManifestConfig {
                    identifier: identify(0, &cm("a")),
                    source_name: "a".into(),
                    ..ManifestConfig::default()
                }],
            },
        );
        assert_eq!(
            w.manifest_config(0).map(|c| c.source_name.as_str()),
            Some("a")
        );
        assert_eq!(w.manifest_config(1), None);
        // A report written when "b" was the first manifest is still "b"'s.
        w.status = Some(WorkStatus {
            manifest_conditions: vec![ManifestCondition {
                identifier: identify(0, &cm("b")),
                hash: Some("hb".into()),
                ..ManifestCondition::default()
            }],
            ..WorkStatus::default()
        });
        assert_eq!(
            w.manifest_report(1).and_then(|m| m.hash.as_deref()),
            Some("hb")
        );
        assert_eq!(w.manifest_report(0), None);
        assert!(!w.is_bundle());
    }

    #[test]
    fn type_labels_stay_valid_label_values() {
        assert_eq!(type_label("configmaps", ""), "configmaps");
        assert_eq!(type_label("deployments", "apps"), "deployments.apps");
        let long = type_label("widgets", &"a".repeat(80));
        assert!(long.len() <= 63 && long.starts_with("t-"));
    }

    #[test]
    fn a_cluster_namespace_names_its_cluster() {
        assert_eq!(cluster_namespace("m1"), "flotilla-cluster-m1");
        assert_eq!(cluster_of_namespace("flotilla-cluster-m1"), Some("m1"));
        assert_eq!(cluster_of_namespace("demo"), None);
    }

    #[test]
    fn a_work_serializes_in_the_work_api_shape() {
        let work = Work::new(
            "w",
            WorkSpec {
                workload: WorkloadTemplate {
                    manifests: vec![serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap"})],
                },
                manifest_configs: vec![],
            },
        );
        let v = serde_json::to_value(&work).expect("serializable");
        assert_eq!(v["apiVersion"], "multicluster.x-k8s.io/v1alpha1");
        assert_eq!(v["spec"]["workload"]["manifests"][0]["kind"], "ConfigMap");
    }
}
