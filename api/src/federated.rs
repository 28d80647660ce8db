//! `types.kubefed.io/v1beta1`: the generic shape of every Federated&lt;Kind&gt; — a template,
//! a placement and per-cluster overrides in `spec`, propagation results in `status`.
//! Federated types are generated per target type, so they are read and written as
//! `DynamicObject`s; these structs give the `spec` and `status` a typed view.

use kube::core::DynamicObject;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::selector::{LabelSelector, LabelSelectorRequirement};
use crate::taint::Toleration;

/// `spec` of a Federated&lt;Kind&gt;.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedSpec {
    /// The object to create in each member cluster (name and namespace come from the
    /// federated object).
    #[serde(default)]
    #[schemars(schema_with = "crate::federated::preserve_object")]
    pub template: Value,
    /// Which member clusters get the object.
    #[serde(default)]
    pub placement: Placement,
    /// Per-cluster JSON patches on top of the template.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<ClusterOverrides>,
    /// Keep the member's `spec.replicas` (for an HPA in the member).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retain_replicas: bool,
    /// Flotilla extension: how a template change reaches the clusters (absent: every
    /// cluster at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::RolloutSpec>,
    /// Flotilla extension: the ConfigMaps, Secrets, ServiceAccounts and
    /// PersistentVolumeClaims the pod template references follow the workload to its
    /// clusters (see docs/dependencies.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub propagate_dependencies: bool,
}

/// Which clusters get an object. A non-nil `clusters` wins (an empty list selects none);
/// otherwise `clusterSelector` (nil selects none, `{}` selects all).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Clusters by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<ClusterReference>>,
    /// Clusters by the labels of their KubeFedCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// Flotilla extension: choose at most this many of the candidate clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_clusters: Option<u32>,
    /// Flotilla extension: spread the chosen clusters over KubeFedCluster label values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread_constraints: Vec<SpreadConstraint>,
    /// Flotilla extension: soft preferences; clusters with a higher total weight first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferences: Vec<ClusterPreference>,
    /// Flotilla extension: cluster taints this object tolerates (core/v1 Toleration shape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Flotilla extension: how a move away from a cluster is carried out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverPolicy>,
}

impl Placement {
    /// Whether any Flotilla scheduling field is set: only then is a decision made and
    /// stored; otherwise placement is exactly kubefed's.
    pub fn is_scheduled(&self) -> bool {
        self.max_clusters.is_some()
            || !self.spread_constraints.is_empty()
            || !self.preferences.is_empty()
            || !self.tolerations.is_empty()
            || self.failover.is_some()
    }
}

/// Spread over the values of one KubeFedCluster label.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpreadConstraint {
    /// The KubeFedCluster label whose values form the groups, e.g.
    /// `topology.kubernetes.io/region`. Clusters without it are not candidates.
    pub topology_key: String,
    /// At least this many distinct values; fewer available makes the object Unschedulable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_groups: Option<u32>,
    /// At most this many distinct values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_groups: Option<u32>,
}

/// A soft preference for clusters matching a selector.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ClusterPreference {
    /// Added to the score of every matching cluster.
    pub weight: i32,
    /// The clusters preferred.
    pub selector: LabelSelector,
}

/// How a move away from a cluster is carried out.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverPolicy {
    /// How long the old copy is kept at most while its replacement is not propagated yet
    /// (default 600). The last propagated copy is never removed, whatever this says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i64>,
}

/// A cluster named in a placement.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ClusterReference {
    /// Name of the KubeFedCluster.
    pub name: String,
}

/// The overrides of one cluster.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOverrides {
    /// Name of the cluster the overrides apply to.
    pub cluster_name: String,
    /// JSON patch operations applied in order.
    #[serde(default)]
    pub cluster_overrides: Vec<ClusterOverride>,
}

/// One JSON patch operation.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ClusterOverride {
    /// `add`, `remove` or `replace` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<OverrideOp>,
    /// JSON pointer into the object, e.g. `/spec/replicas`, or kubefed alpha's dotted
    /// path, e.g. `spec.replicas` (list elements as `containers[0]` or `containers.0`).
    pub path: String,
    /// The value for `add` and `replace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::federated::preserve_any")]
    pub value: Option<Value>,
}

/// Override operation.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OverrideOp {
    /// Add a value (or append with `/-`).
    Add,
    /// Remove the value at the path.
    Remove,
    /// Replace the value at the path.
    #[default]
    Replace,
}

/// `status` of a Federated&lt;Kind&gt;.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedStatus {
    /// Generation of the federated object this status describes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
    /// The `Propagation` condition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<FederatedCondition>,
    /// Per-cluster propagation results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterStatus>,
    /// Flotilla extension: a workload's status summed over its clusters (Deployment,
    /// ReplicaSet, StatefulSet, DaemonSet, Job with `statusCollection: Enabled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregated: Option<crate::workload::AggregatedStatus>,
    /// Flotilla extension: the scheduling decision, when the placement uses Flotilla's
    /// scheduling fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementStatus>,
    /// Flotilla extension: where a progressive rollout stands (`spec.rollout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::RolloutStatus>,
    /// Flotilla extension: the last drift seen per member cluster — fields another writer
    /// changed, who, and whether Flotilla repaired it (`flotilla.io/drift-policy`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<crate::drift::ClusterDrift>,
    /// Flotilla extension: the dependencies that follow the workload
    /// (`spec.propagateDependencies`), where they are and why one is not propagated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<crate::dependency_plan::DependencyStatus>,
}

/// The stored scheduling decision: read back as the sticky input of the next decision.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementStatus {
    /// The decided clusters, in order of choice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterReference>,
    /// Clusters being left or left, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<PlacementMove>,
}

/// A cluster the object moves (or moved) away from.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementMove {
    /// The cluster left.
    pub cluster: String,
    /// `Evicted` (its copy is kept until the replacement is up) or `Replaced` (its copy
    /// was removed).
    pub reason: String,
    /// The cluster that took over, if one fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    /// When the move started (RFC 3339).
    pub since: String,
    /// Why the cluster is left.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// A condition on a federated object.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedCondition {
    /// `Propagation`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Empty when True; a kubefed aggregate reason otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Flotilla extension: a human-readable summary of what went wrong.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the condition was last written (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_update_time: String,
    /// When the status last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_transition_time: String,
}

impl FederatedCondition {
    /// A condition of `type_` as it stands `now`, keeping `prev`'s times where they still
    /// hold: the update time while nothing changed, the transition time while the status
    /// is the same.
    pub fn updated(
        prev: Option<&FederatedCondition>,
        type_: &str,
        status: &str,
        reason: String,
        message: String,
        now: &str,
    ) -> Self {
        let unchanged =
            prev.is_some_and(|p| p.status == status && p.reason == reason && p.message == message);
        FederatedCondition {
            type_: type_.into(),
            status: status.into(),
            reason,
            message,
            last_update_time: match prev {
                Some(p) if unchanged => p.last_update_time.clone(),
                _ => now.to_string(),
            },
            last_transition_time: match prev {
                Some(p) if p.status == status => p.last_transition_time.clone(),
                _ => now.to_string(),
            },
        }
    }
}

/// Propagation result in one cluster.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Cluster name.
    pub name: String,
    /// Empty when propagated; a kubefed per-cluster reason otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// Flotilla extension: the error behind `status`, for humans.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The member object's own status, when status collection is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::federated::preserve_any")]
    pub remote_status: Option<Value>,
}

/// Reading a federated object's spec failed.
#[derive(Debug, thiserror::Error)]
#[error("spec of {kind} {name} is malformed: {source}")]
pub struct SpecError {
    /// Kind of the federated object.
    pub kind: String,
    /// namespace/name of the federated object.
    pub name: String,
    /// The decoding error.
    #[source]
    pub source: serde_json::Error,
}

impl FederatedSpec {
    /// The typed spec of a federated object read as a `DynamicObject`.
    pub fn from_dynamic(obj: &DynamicObject) -> Result<FederatedSpec, SpecError> {
        let spec = obj.data.get("spec").cloned().unwrap_or(Value::Null);
        serde_json::from_value(spec).map_err(|source| SpecError {
            kind: obj
                .types
                .as_ref()
                .map(|t| t.kind.clone())
                .unwrap_or_default(),
            name: format!(
                "{}/{}",
                obj.metadata.namespace.as_deref().unwrap_or(""),
                obj.metadata.name.as_deref().unwrap_or("")
            ),
            source,
        })
    }
}

impl FederatedStatus {
    /// The typed status of a federated object; a missing or unreadable status reads as empty.
    pub fn from_dynamic(obj: &DynamicObject) -> FederatedStatus {
        obj.data
            .get("status")
            .cloned()
            .and_then(|s| serde_json::from_value(s).ok())
            .unwrap_or_default()
    }

    /// The `Propagation` condition, if any.
    pub fn propagation(&self) -> Option<&FederatedCondition> {
        self.conditions.iter().find(|c| c.type_ == "Propagation")
    }

    /// The `Rollout` condition, if any.
    pub fn rollout_condition(&self) -> Option<&FederatedCondition> {
        self.conditions
            .iter()
            .find(|c| c.type_ == crate::rollout::ROLLOUT_CONDITION)
    }

    /// The `Scheduled` condition, if any.
    pub fn scheduled(&self) -> Option<&FederatedCondition> {
        self.conditions.iter().find(|c| c.type_ == "Scheduled")
    }
}

/// Schema of an object whose fields are free-form (the template).
pub(crate) fn preserve_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// Schema of a value of any JSON type (an override value, a remote status).
pub(crate) fn preserve_any(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nil_and_empty_cluster_lists_stay_distinct() {
        let nil: Placement = serde_json::from_value(json!({})).expect("parses");
        let empty: Placement = serde_json::from_value(json!({"clusters": []})).expect("parses");
        assert_eq!(nil.clusters, None);
        assert_eq!(empty.clusters, Some(vec![]));
        assert_eq!(
            serde_json::to_value(&empty).expect("serializes"),
            json!({"clusters": []})
        );
    }

    #[test]
    fn a_kubefed_federated_deployment_spec_round_trips() {
        let spec = json!({
            "template": {"metadata": {"labels": {"app": "nginx"}}, "spec": {"replicas": 3}},
            "placement": {"clusters": [{"name": "cluster1"}, {"name": "cluster2"}]},
            "overrides": [{"clusterName": "cluster2", "clusterOverrides": [
                {"path": "/spec/replicas", "value": 5},
                {"op": "add", "path": "/metadata/labels/env", "value": "prod"}
            ]}]
        });
        let parsed: FederatedSpec = serde_json::from_value(spec.clone()).expect("parses");
        assert_eq!(parsed.overrides[0].cluster_overrides[0].op, None);
        assert_eq!(
            parsed.overrides[0].cluster_overrides[1].op,
            Some(OverrideOp::Add)
        );
        assert_eq!(serde_json::to_value(&parsed).expect("serializes"), spec);
    }
}
