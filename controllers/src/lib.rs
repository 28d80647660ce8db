//! Flotilla's control plane: the cluster registry and health checks, the multi-cluster watch
//! runtime, the federated type config controller, propagation (sync) and scheduling.
#![forbid(unsafe_code)]

pub mod agent;
#[cfg(feature = "dev")]
pub mod bench;
#[cfg(feature = "dev")]
pub mod bootstrap;
pub mod cli;
pub mod events;
pub mod ftc;
pub mod ftc_schema;
pub mod install;
pub mod join;
pub mod leader;
pub mod manager;
pub mod member_rbac;
pub mod metrics;
pub mod multicluster;
pub mod profiles;
pub mod pull_join;
pub mod registry;
pub mod sa_import;
pub mod scheduling;
pub mod sync;
pub mod watch;
pub mod webhook;
pub mod workqueue;
