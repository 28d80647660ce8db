//! Cluster taints and object tolerations, in the shape of core/v1 `Taint` and `Toleration`
//! (Flotilla extension: `KubeFedCluster.spec.taints`, `spec.placement.tolerations`), and
//! which taint a toleration covers (Kubernetes' `ToleratesTaint`, which Kubernetes keeps
//! beside the type too). What an object's taints and tolerations decide — fit, eviction
//! and when — is `flotilla_core::taint`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The taint the registry puts on a cluster while it is not Ready, and takes off when it
/// recovers (as Kubernetes' node controller does with `node.kubernetes.io/unreachable`).
pub const UNREACHABLE_TAINT_KEY: &str = "flotilla.io/unreachable";

/// What a taint does to objects that do not tolerate it.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum TaintEffect {
    /// No new placement onto the cluster; objects already there stay.
    NoSchedule,
    /// Soft NoSchedule: the cluster is chosen only when nothing else fits.
    PreferNoSchedule,
    /// No new placement, and objects already there move away (gracefully).
    NoExecute,
}

impl TaintEffect {
    /// The effect as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

/// A taint on a member cluster (core/v1 Taint).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// The taint key, e.g. `flotilla.io/draining`.
    pub key: String,
    /// The taint value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: TaintEffect,
    /// When the taint was added (RFC 3339); a `NoExecute` toleration's seconds count from
    /// here. A taint without it counts as added long ago.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<String>,
}

impl Taint {
    /// `key[=value]:effect`, for messages.
    pub fn describe(&self) -> String {
        match &self.value {
            Some(v) if !v.is_empty() => format!("{}={}:{}", self.key, v, self.effect.as_str()),
            _ => format!("{}:{}", self.key, self.effect.as_str()),
        }
    }
}

/// How a toleration compares its value.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum TolerationOperator {
    /// Any value (and, with an empty key, any taint).
    Exists,
    /// The value must be equal (the default).
    #[default]
    Equal,
}

/// A toleration on a federated object's placement (core/v1 Toleration).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// The taint key; empty with `Exists` matches every taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `Exists` or `Equal` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<TolerationOperator>,
    /// The value compared by `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The effect tolerated; empty tolerates every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    /// For `NoExecute`: how long the object may stay after the taint was added; absent
    /// means forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

impl Toleration {
    /// Whether this toleration covers `taint` (Kubernetes' `ToleratesTaint`).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        let key = self.key.as_deref().unwrap_or("");
        if !key.is_empty() && key != taint.key {
            return false;
        }
        match self.operator.unwrap_or_default() {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => {
                !key.is_empty()
                    && self.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
            }
        }
    }
}
