//! `policy.flotilla.io/v1alpha1`: the second resource model. Plain manifests (a Deployment,
//! a Service, a ConfigMap …) stay as they are in the host; a PropagationPolicy selects them
//! and says where they go, an OverridePolicy says what differs per cluster. The field shapes
//! follow Karmada's and KubeFleet's policies where those are good, and carry Flotilla's own
//! placement, rollout and dependency fields unchanged. Types and names only; no I/O.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::federated::{FederatedCondition, OverrideOp, Placement};
use crate::rollout::RolloutSpec;
use crate::selector::LabelSelector;

/// API group of Flotilla's propagation and override policies.
pub const POLICY_GROUP: &str = "policy.flotilla.io";
/// Version of the policy group.
pub const POLICY_VERSION: &str = "v1alpha1";
/// Label (`"true"`) on every Federated&lt;Kind&gt; the policy controller built for a native
/// object, so it watches only those. An explicit Federated&lt;Kind&gt; lacks it, and wins
/// over every policy.
pub const MATERIALIZED_LABEL: &str = "policy.flotilla.io/materialized";
/// Annotation on such a Federated&lt;Kind&gt;: the policy that propagates it, as
/// `PropagationPolicy/<namespace>/<name>` or `ClusterPropagationPolicy/<name>`.
pub const POLICY_ANNOTATION: &str = "policy.flotilla.io/propagation-policy";
/// Annotation on such a Federated&lt;Kind&gt;: `"true"` when its policy asked to keep the
/// member copies once it no longer propagates the object (`preserveResourcesOnDeletion`).
pub const PRESERVE_ANNOTATION: &str = "policy.flotilla.io/preserve-resources-on-deletion";
/// The value of [`POLICY_ANNOTATION`] on a FederatedNamespace the policy controller made
/// because a policy propagates objects in that namespace (placed on every cluster, as the
/// namespace must exist wherever its objects go).
pub const NAMESPACE_FOR_OBJECTS: &str = "namespace-of-propagated-objects";
/// Annotation on a native object: `"false"` keeps every policy away from it.
pub const PROPAGATE_ANNOTATION: &str = "policy.flotilla.io/propagate";
/// Field manager of the policy controller's writes (Federated&lt;Kind&gt; objects and
/// the aggregated status of native objects).
pub const POLICY_FIELD_MANAGER: &str = "flotilla-policy";

/// The spec shared by [`PropagationPolicy`] and [`ClusterPropagationPolicy`].
// clippy reads each `printcolumn(type_ = ..)` as a repeat of one attribute; they are distinct columns.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "policy.flotilla.io",
    version = "v1alpha1",
    kind = "PropagationPolicy",
    plural = "propagationpolicies",
    namespaced,
    status = "PolicyStatus",
    shortname = "pp",
    category = "kubefed",
    category = "flotilla",
    printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority"),
    printcolumn(
        name = "Selected",
        type_ = "integer",
        json_path = ".status.selectedCount"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PropagationSpec {
    /// The objects this policy propagates. An object must match one selector.
    pub resource_selectors: Vec<ResourceSelector>,
    /// Which clusters get them: Flotilla's placement (clusters, clusterSelector,
    /// maxClusters, spreadConstraints, preferences, tolerations, failover).
    #[serde(default)]
    pub placement: Placement,
    /// Where several policies select one object, the highest priority wins (default 0).
    #[serde(default, skip_serializing_if = "crate::rollout::is_zero")]
    pub priority: i32,
    /// How a template change reaches the clusters (as a Federated&lt;Kind&gt;'s
    /// `spec.rollout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,
    /// The ConfigMaps, Secrets, ServiceAccounts and PVCs the selected workloads reference
    /// follow them (as `spec.propagateDependencies`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub propagate_dependencies: bool,
    /// Keep each member's `spec.replicas` (an HPA in the member owns it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retain_replicas: bool,
    /// What a change made in a member does: `Repair` (default) or `Report`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_policy: Option<DriftPolicy>,
    /// Keep the member copies when this policy is deleted or stops selecting an object
    /// (they are unlabelled and left alone, as `kubefed.io/orphan`); the native object's
    /// own deletion still removes them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preserve_resources_on_deletion: bool,
    /// Propagate objects the host runs itself too (another writer, such as the host's
    /// deployment controller, owns their status). By default such an object is refused
    /// with `HostRunsWorkload`: its pods would run in the host as well (docs/policies.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_running_in_host: bool,
    /// What happens when a selected object already has a Federated&lt;Kind&gt; of its name
    /// that no policy made: `Abort` (the default: the Federated object wins, the policy
    /// reports the conflict) or `Overwrite` (the policy takes it over — the way back from
    /// `flotilla federate`; member copies are rewritten only where the result differs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict_resolution: Option<ConflictResolution>,
    /// Divide a selected Deployment's or ReplicaSet's `spec.replicas` over the placed
    /// clusters (Karmada's `placement.replicaScheduling` with `Divided`/`Weighted`):
    /// the controller keeps a ReplicaSchedulingPreference of the object's name for it, whose
    /// status says per cluster its replicas and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_scheduling: Option<ReplicaScheduling>,
}

/// How a policy divides a workload's replicas over its clusters.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaScheduling {
    /// `StaticWeight` (the default: `clusters[].weight`, Karmada's `staticWeightList`) or
    /// `AvailableReplicas` (how many replicas fit each cluster's free capacity, Karmada's
    /// `dynamicWeight: AvailableReplicas`; the static weight breaks ties).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_preference: Option<crate::scheduling::WeightPreference>,
    /// `minReplicas`, `maxReplicas` and `weight` per cluster name, or `*` for every
    /// cluster not listed (absent: weight 1 each), as a ReplicaSchedulingPreference's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clusters: BTreeMap<String, crate::scheduling::ClusterPreferences>,
    /// Move running replicas when the weights or the capacity say so (kubefed's
    /// `rebalance`); without it they stay until `flotilla rebalance`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rebalance: bool,
}

/// What a policy does with a Federated&lt;Kind&gt; it did not make (Karmada's field name).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ConflictResolution {
    /// Leave it: it is propagated as written and wins over the policy.
    #[default]
    Abort,
    /// Take it over: it becomes the policy's, as if the policy had made it.
    Overwrite,
}

/// The cluster-scoped twin of [`PropagationPolicy`]: selects cluster-scoped objects, and
/// namespaced ones in any namespace.
// clippy reads each `printcolumn(type_ = ..)` as a repeat of one attribute; they are distinct columns.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "policy.flotilla.io",
    version = "v1alpha1",
    kind = "ClusterPropagationPolicy",
    plural = "clusterpropagationpolicies",
    status = "PolicyStatus",
    shortname = "cpp",
    category = "kubefed",
    category = "flotilla",
    printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority"),
    printcolumn(
        name = "Selected",
        type_ = "integer",
        json_path = ".status.selectedCount"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPropagationSpec {
    /// The same fields as a PropagationPolicy's spec.
    #[serde(flatten)]
    pub spec: PropagationSpec,
}

/// Selects objects by type, and optionally namespace, name and labels.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSelector {
    /// `group/version` or `version` of the object, e.g. `apps/v1`; only the group is
    /// compared (the FederatedTypeConfig decides the propagated version).
    pub api_version: String,
    /// The kind, e.g. `Deployment`.
    pub kind: String,
    /// Namespace of the objects: in a PropagationPolicy only its own namespace (absent =
    /// the policy's); in a ClusterPropagationPolicy absent means every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// One object by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Objects by their labels (ignored when `name` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// How a drifted member object is treated.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DriftPolicy {
    /// Put the member object back as desired (the default).
    #[default]
    Repair,
    /// Only report the drift in status.
    Report,
}

impl DriftPolicy {
    /// The value of `flotilla.io/drift-policy` this stands for.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftPolicy::Repair => "Repair",
            DriftPolicy::Report => "Report",
        }
    }
}

/// `status` of every policy kind.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// Generation of the policy this status describes.
    #[serde(default, skip_serializing_if = "crate::rollout::is_zero")]
    pub observed_generation: i64,
    /// `Ready`: the policy is valid and applied (`Applied`), or why not
    /// (`InvalidSelector`, `UnknownKind`, `InvalidOverride`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<FederatedCondition>,
    /// How many objects this policy propagates (or overrides) now.
    #[serde(default)]
    pub selected_count: i64,
    /// The objects it propagates, at most 100 listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selected: Vec<ObjectRef>,
    /// Objects the policy's selectors match but another policy or an explicit
    /// Federated&lt;Kind&gt; propagates, each with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<PolicyConflict>,
}

/// One object named in a policy's status.
#[derive(
    Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `group/version` or `version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// Namespace, absent for a cluster-scoped object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

/// An object this policy matches but does not propagate.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyConflict {
    /// The object.
    pub object: ObjectRef,
    /// `LostToPolicy` or `ExplicitFederatedObject`.
    pub reason: String,
    /// Which policy or object won, for humans.
    pub message: String,
}

/// The spec shared by [`OverridePolicy`] and [`ClusterOverridePolicy`].
// clippy reads each `printcolumn(type_ = ..)` as a repeat of one attribute; they are distinct columns.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "policy.flotilla.io",
    version = "v1alpha1",
    kind = "OverridePolicy",
    plural = "overridepolicies",
    namespaced,
    status = "PolicyStatus",
    shortname = "op",
    category = "kubefed",
    category = "flotilla",
    printcolumn(
        name = "Selected",
        type_ = "integer",
        json_path = ".status.selectedCount"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct OverrideSpec {
    /// The objects these overrides apply to (absent: every object the policy may see).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_selectors: Vec<ResourceSelector>,
    /// The rules, applied in order.
    #[serde(default)]
    pub override_rules: Vec<OverrideRule>,
}

/// The cluster-scoped twin of [`OverridePolicy`]: applies in every namespace, before the
/// namespaced ones.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "policy.flotilla.io",
    version = "v1alpha1",
    kind = "ClusterOverridePolicy",
    plural = "clusteroverridepolicies",
    status = "PolicyStatus",
    shortname = "cop",
    category = "kubefed",
    category = "flotilla",
    printcolumn(
        name = "Selected",
        type_ = "integer",
        json_path = ".status.selectedCount"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOverrideSpec {
    /// The same fields as an OverridePolicy's spec.
    #[serde(flatten)]
    pub spec: OverrideSpec,
}

/// Overriders for the clusters a target selects.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverrideRule {
    /// Which clusters (absent: every cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cluster: Option<ClusterTarget>,
    /// What changes there.
    pub overriders: Overriders,
}

/// Clusters by name or by the labels of their KubeFedCluster; both set means either.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTarget {
    /// KubeFedCluster names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// KubeFedCluster labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// The changes of one rule, applied in this order: images, labels, annotations, plaintext.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Overriders {
    /// Container images by component.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_overrider: Vec<ImageOverrider>,
    /// Labels added, replaced or removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels_overrider: Vec<MapOverrider>,
    /// Annotations added, replaced or removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub annotations_overrider: Vec<MapOverrider>,
    /// JSON patch operations by JSON pointer (`/spec/replicas`) or dotted path
    /// (`spec.replicas`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plaintext: Vec<PlaintextOverrider>,
}

/// One JSON patch operation.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlaintextOverrider {
    /// JSON pointer or dotted path.
    pub path: String,
    /// `add`, `remove` or `replace` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<OverrideOp>,
    /// The value for `add` and `replace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::federated::preserve_any")]
    pub value: Option<Value>,
}

/// Changes one component of container images (`[registry/]repository[:tag|@digest]`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageOverrider {
    /// Only the image at this JSON pointer, e.g.
    /// `/spec/template/spec/containers/0/image`; absent: every container and init
    /// container of a pod template (Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet,
    /// Job, CronJob).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `Registry`, `Repository` or `Tag`.
    pub component: ImageComponent,
    /// `add` (only where the component is missing), `remove` or `replace` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<OverrideOp>,
    /// The new component (for `add` and `replace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A part of an image reference.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ImageComponent {
    /// The registry host, e.g. `registry.example:5000`.
    Registry,
    /// The repository path, e.g. `library/nginx`.
    Repository,
    /// The tag, e.g. `1.25`.
    #[default]
    Tag,
}

/// Adds, replaces or removes entries of a string map (labels or annotations).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MapOverrider {
    /// `add`, `remove` or `replace` (the default; `add` and `replace` both set the value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<OverrideOp>,
    /// The entries (for `remove` only the keys count).
    #[serde(default)]
    pub value: BTreeMap<String, String>,
}
