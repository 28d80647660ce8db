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
    printcolumn(name = "Total", type_ = "integer", json_path = ".spec.totalReplicas")
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
