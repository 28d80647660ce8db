//! Flotilla's control plane: the cluster registry and health checks, type configs, propagation
//! (sync), RSP and constraint scheduling, MCS, ClusterProfiles, member RBAC, leader election.
#![forbid(unsafe_code)]

pub mod capacity;
pub mod cluster_id;
pub mod decisions;
/// Events (in the multi-cluster library).
pub use flotilla_multicluster::events;
pub mod ftc;
pub mod ftc_schema;
/// The `/metrics` and probe server (moved to the multi-cluster library; kept at this path).
pub use flotilla_multicluster::http as http_server;
/// Authentication of HTTP endpoints (moved to the multi-cluster library; kept at this path).
pub use flotilla_multicluster::http::auth as http_auth;
pub mod install;
pub mod join;
pub mod leader;
pub mod manager;
pub mod mcs;
pub mod member_rbac;
pub mod member_token;
pub mod metrics;
pub mod multicluster;
#[cfg(test)]
mod parser_props;
pub mod policy;
pub mod preview;
pub mod profiles;
pub mod pull_join;
pub mod pull_rbac;
pub mod registry;
pub mod sa_import;
pub mod scheduling;
pub mod sharded;
pub mod startup;
pub mod sync;
/// The watch loop (in the multi-cluster library).
pub use flotilla_multicluster::watch;
/// The work queue (in the multi-cluster library).
pub use flotilla_multicluster::workqueue;
