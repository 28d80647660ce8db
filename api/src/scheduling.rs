//! `scheduling.kubefed.io/v1alpha1`: ReplicaSchedulingPreference — spread a total replica
//! count over clusters by weight, with per-cluster minimum and maximum.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Spreads the replicas of a FederatedDeployment or FederatedReplicaSet of the same
/// namespace/name over member clusters.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.kubefed.io",
    version = "v1alpha1",
    kind = "ReplicaSchedulingPreference",
    plural = "replicaschedulingpreferences",
    namespaced,
    shortname = "rsp",
    category = "kubefed",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Target", type_ = "string", json_path = ".spec.targetKind"),
    printcolumn(name = "Total", type_ = "integer", json_path = ".spec.totalReplicas"),
    status = "ReplicaSchedulingPreferenceStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSchedulingPreferenceSpec {
    /// `FederatedDeployment` or `FederatedReplicaSet`.
    pub target_kind: String,
    /// Replicas to spread over all clusters.
    pub total_replicas: i32,
    /// Preferences per cluster name, or `*` for every cluster not listed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clusters: BTreeMap<String, ClusterPreferences>,
    /// Move replicas away from clusters that already have them when weights say so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rebalance: bool,
    /// Only consider clusters matching the target's `clusterSelector`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub intersect_with_cluster_selector: bool,
    /// Flotilla extension: what a cluster's weight is. `StaticWeight` (the default, as
    /// kubefed): `clusters[].weight`. `AvailableReplicas`: how many replicas of the
    /// target's pod template fit the cluster's Ready, schedulable nodes, the static weight
    /// breaking ties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_preference: Option<WeightPreference>,
}

/// What a cluster's weight is (`spec.weightPreference`).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum WeightPreference {
    /// `clusters[].weight`, as kubefed.
    #[default]
    StaticWeight,
    /// The replicas of the target's pod template that fit the cluster's free capacity.
    AvailableReplicas,
}

/// Flotilla extension (kubefed's RSP has no status): the last division and why.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSchedulingPreferenceStatus {
    /// The generation of the RSP the division was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Per cluster of the federation: its replicas and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterDivision>,
    /// The last one-off rebalance asked with [`REBALANCE_ANNOTATION`] and what became of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance: Option<RebalanceStatus>,
}

/// Annotation on a ReplicaSchedulingPreference asking for one rebalance now (Flotilla's
/// answer to Karmada's WorkloadRebalancer): its value is any token, new for each request
/// (`flotilla rebalance` writes the time). The division is then computed once as if no
/// replica ran anywhere yet — by weight, available replicas and capacity estimates, after
/// each cluster's `minReplicas` — unless the target's rollout is under way or stopped.
pub const REBALANCE_ANNOTATION: &str = "scheduling.flotilla.io/rebalance";

/// What became of a one-off rebalance.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RebalanceStatus {
    /// The value of the annotation this answers.
    pub request: String,
    /// `Rebalanced` or `Refused`.
    pub outcome: RebalanceOutcome,
    /// The division before and after, or why it was refused.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The outcome of a one-off rebalance.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RebalanceOutcome {
    /// The division was recomputed from the current capacity.
    #[default]
    Rebalanced,
    /// Not done: the target's rollout is in progress or stopped.
    Refused,
}

impl RebalanceOutcome {
    /// The outcome as written in status.
    pub fn as_str(self) -> &'static str {
        match self {
            RebalanceOutcome::Rebalanced => "Rebalanced",
            RebalanceOutcome::Refused => "Refused",
        }
    }
}

/// One cluster's share of an RSP's replicas and the reason for it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDivision {
    /// The cluster.
    pub name: String,
    /// Replicas written for it (with kubefed's overflow, more than it can run).
    pub replicas: i64,
    /// What decided the number.
    pub reason: DivisionReason,
    /// The numbers behind the reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// kubefed's capacity estimate the division used for it (pods unschedulable past the
    /// threshold), if any: what `flotilla diff` and the dashboard preview with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_estimate: Option<i64>,
    /// With `AvailableReplicas`: the replicas of the template that fit it, as the division
    /// read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i64>,
}

/// What decided one cluster's replicas.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DivisionReason {
    /// Its share by static weight.
    #[default]
    Weight,
    /// Its `minReplicas`.
    MinReplicas,
    /// Capped at its `maxReplicas`.
    MaxReplicas,
    /// Capped at kubefed's capacity estimate: pods left unschedulable past the threshold.
    CapacityEstimate,
    /// Its share by available replicas (`weightPreference: AvailableReplicas`).
    AvailableReplicas,
    /// Kept where they are (`rebalance: false`).
    Current,
    /// Not Ready, not matching the selector, or without a preference: none.
    NotSelected,
    /// None: a taint of the cluster (`spec.taints`) the placement's tolerations do not
    /// tolerate kept the placement's scheduler off it.
    Tainted,
    /// None: not one pod of the template can be scheduled there (no Ready, schedulable
    /// node has room for it, or every pod stayed unschedulable past the threshold).
    Unschedulable,
}

impl DivisionReason {
    /// The reason as written in status.
    pub fn as_str(self) -> &'static str {
        match self {
            DivisionReason::Weight => "Weight",
            DivisionReason::MinReplicas => "MinReplicas",
            DivisionReason::MaxReplicas => "MaxReplicas",
            DivisionReason::CapacityEstimate => "CapacityEstimate",
            DivisionReason::AvailableReplicas => "AvailableReplicas",
            DivisionReason::Current => "Current",
            DivisionReason::NotSelected => "NotSelected",
            DivisionReason::Tainted => "Tainted",
            DivisionReason::Unschedulable => "Unschedulable",
        }
    }
}

/// Preferences of one cluster.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPreferences {
    /// Replicas the cluster gets first.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_replicas: i64,
    /// Replicas the cluster never exceeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i64>,
    /// Relative share of the remaining replicas.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub weight: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}
