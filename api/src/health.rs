//! `spec.health` of a FederatedTypeConfig (a Flotilla extension): the CEL rules over a
//! member object of the target type, as users write them, and the FTC condition type that
//! reports on them. Compiling and evaluating them is `flotilla_core::health`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The FTC condition type that reports on `spec.health`.
pub const HEALTH_RULES_CONDITION: &str = "HealthRules";

/// `spec.health` of a FederatedTypeConfig: CEL expressions over a member object of the
/// target type. Each sees the object as `self` (also `object`), and its `metadata`,
/// `spec` and `status` as variables of their own (`{}` when the object has none).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthRules {
    /// bool: the object is healthy (absent: healthy unless failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy: Option<String>,
    /// bool: a not yet healthy object is still working towards it; false makes it failed
    /// (absent: a not yet healthy object is progressing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progressing: Option<String>,
    /// bool: the object has failed (checked first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// string: why the object is not healthy (evaluated only when it is not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// ints: the object's ready and desired replicas, summed into `status.aggregated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<ReplicaRules>,
}

/// The replica figure of an object: CEL expressions of type int.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaRules {
    /// int: replicas the object wants.
    pub desired: String,
    /// int: replicas ready.
    pub ready: String,
}
