//! Flotilla's API: the kubefed v1beta1-compatible types (`core.kubefed.io`,
//! `types.kubefed.io`, `scheduling.kubefed.io`, and kubefed's alpha `types.kubefed.k8s.io`),
//! Flotilla's own (`multicluster.flotilla.io`) and the SIG-Multicluster and Admiralty types
//! served beside them; their group/version, label, annotation and condition names; the
//! CustomResourceDefinitions generated from them ([`crdgen`], written and drift-checked by
//! the `crdgen` binary) and the rules that keep them compatible with the last release
//! ([`compat`], the `crdcompat` binary).
//!
//! Shapes only: a type here may read itself (accessors, `as_str`, `from_dynamic`), but
//! what it means — placement, scheduling, overrides, rollouts, drift, health, dependencies —
//! is decided in `flotilla-core`, which depends on this crate and never the reverse.
//! Nothing here does I/O.
#![forbid(unsafe_code)]

pub mod about;
pub mod admiralty;
pub mod alpha;
pub mod compat;
pub mod core;
pub mod crdgen;
pub mod dependency_plan;
pub mod drift;
pub mod duration;
pub mod federated;
pub mod hash;
pub mod health;
pub mod inventory;
pub mod kubectl_names;
pub mod kubefed_config;
pub mod mcs;
pub mod mcs_report;
pub mod multicluster;
pub mod placement_decision;
pub mod policy;
pub mod reason;
pub mod rollout;
pub mod scheduling;
mod schema_edit;
pub mod selector;
pub mod taint;
pub mod work;
pub mod workload;

pub use crate::core::{
    ClusterCondition, FederatedTypeConfig, FederatedTypeConfigSpec, FederatedTypeConfigStatus,
    KubeFedCluster, KubeFedClusterSpec, KubeFedClusterStatus, KubeFedConfig, KubeFedConfigSpec,
};
pub use crate::federated::{FederatedSpec, FederatedStatus, Placement};
pub use crate::multicluster::{
    ServiceAccountImport, ServiceAccountImportSpec, ServiceAccountImportStatus,
};
pub use crate::reason::{AggregateReason, ClusterReason};
pub use crate::scheduling::ReplicaSchedulingPreference;

/// API group of the cluster registry, configuration and type configs.
pub const CORE_GROUP: &str = "core.kubefed.io";
/// API group of the generated Federated&lt;Kind&gt; types.
pub const TYPES_GROUP: &str = "types.kubefed.io";
/// API group of scheduling preferences.
pub const SCHEDULING_GROUP: &str = "scheduling.kubefed.io";
/// Version of the core and types groups.
pub const V1BETA1: &str = "v1beta1";

/// Label put on every object Flotilla propagates; `"false"` on a member object blocks management.
pub const MANAGED_LABEL: &str = "kubefed.io/managed";
/// Annotation on a federated object: `"true"` keeps the member objects when it is deleted.
pub const ORPHAN_ANNOTATION: &str = "kubefed.io/orphan";
/// Annotation on a federated object holding JSON `DeleteOptions` used for member deletions.
pub const DELETE_OPTIONS_ANNOTATION: &str = "kubefed.io/deleteoption";
/// Finalizer the sync controller keeps on federated objects until members are cleaned up.
pub const SYNC_FINALIZER: &str = "kubefed.io/sync-controller";
/// Finalizer on FederatedTypeConfigs.
pub const FTC_FINALIZER: &str = "core.kubefed.io/federated-type-config";
/// Flotilla extension (beyond kubefed #574): `"true"` lets the sync controller delete and
/// recreate a member object whose update is rejected because a field is immutable.
pub const RECREATE_ON_IMMUTABLE_ANNOTATION: &str = "flotilla.io/recreate-on-immutable";
/// Default control-plane namespace.
pub const DEFAULT_NAMESPACE: &str = "kube-federation-system";
/// Name of the KubeFedConfig singleton.
pub const KUBEFED_CONFIG_NAME: &str = "kubefed";
/// Annotation on a KubeFedCluster naming the member ClusterRole that `flotilla join` bound
/// to the control plane's credential; the control plane keeps its rules in step with the
/// enabled types.
pub const MEMBER_ROLE_ANNOTATION: &str = "flotilla.io/member-cluster-role";
/// Field manager used for every server-side apply Flotilla sends.
pub const FIELD_MANAGER: &str = "flotilla";
