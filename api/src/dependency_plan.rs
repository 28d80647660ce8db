//! `status.dependencies` of a federated workload (a Flotilla extension): one entry per
//! ConfigMap, Secret, ServiceAccount or PersistentVolumeClaim that follows the workload,
//! with its state and reason. Which (dependency, cluster) pairs to hold and let go of, and
//! what the report says, is `flotilla_core::dependency_plan`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One entry of `status.dependencies`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DependencyStatus {
    /// `ConfigMap`, `Secret`, `ServiceAccount` or `PersistentVolumeClaim`.
    pub kind: String,
    /// Its name, in the workload's namespace.
    pub name: String,
    /// `Propagated`, `NotFound`, `Explicit`, `Failed` or `Removing`.
    pub state: String,
    /// The clusters holding the workload's copy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// Why it is not simply propagated.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// What happened, for humans.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Where a dependency stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DependencyState {
    /// Copied to every cluster the workload is on.
    Propagated,
    /// Not in the host namespace; copies already made are kept.
    NotFound,
    /// A Federated&lt;Kind&gt; of that name propagates it: its placement decides.
    Explicit,
    /// A copy could not be written in some cluster.
    Failed,
    /// No longer needed, but a copy could not be removed yet.
    Removing,
}

impl DependencyState {
    /// The state as reported.
    pub fn as_str(self) -> &'static str {
        match self {
            DependencyState::Propagated => "Propagated",
            DependencyState::NotFound => "NotFound",
            DependencyState::Explicit => "Explicit",
            DependencyState::Failed => "Failed",
            DependencyState::Removing => "Removing",
        }
    }
}

/// Why a dependency is not simply propagated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DependencyReason {
    /// Missing in the host namespace.
    DependencyNotFound,
    /// The user federates it with a Federated&lt;Kind&gt;.
    FederatedExplicitly,
    /// A member holds an object of that name that is not Flotilla's copy.
    ExistsInMember,
    /// Writing a copy failed.
    WriteFailed,
    /// Removing a copy failed.
    RemovalFailed,
}

impl DependencyReason {
    /// The reason as reported.
    pub fn as_str(self) -> &'static str {
        match self {
            DependencyReason::DependencyNotFound => "DependencyNotFound",
            DependencyReason::FederatedExplicitly => "FederatedExplicitly",
            DependencyReason::ExistsInMember => "ExistsInMember",
            DependencyReason::WriteFailed => "WriteFailed",
            DependencyReason::RemovalFailed => "RemovalFailed",
        }
    }
}
