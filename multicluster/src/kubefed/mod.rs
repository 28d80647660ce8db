//! Clusters from Flotilla's (kubefed's) cluster registry: KubeFedClusters and their token
//! Secrets in the host's control-plane namespace.
//!
//! - [`client`] builds a member client from a KubeFedCluster and its Secret (TLS verified
//!   against `spec.caBundle`, the bearer token only from the Secret, never logged);
//! - [`watch`] is the registry watch Flotilla's own registry runs on as well;
//! - [`source`] keeps a [`crate::ClusterSet`] in step with the registry, for a controller
//!   that runs beside Flotilla's controller-manager: clusters appear and leave at run time,
//!   and a cluster is Ready when its KubeFedCluster's `Ready` condition (written by
//!   Flotilla's health checks) says `True`.

pub mod client;
#[cfg(test)]
mod client_props;
pub mod exec_plugin;
pub mod source;
pub mod watch;

pub use source::{KubeFedProvider, KubeFedSource, cluster_ready};
