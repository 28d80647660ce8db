//! The multi-cluster runtime, in the spirit of a "multicluster controller-runtime":
//! - [`ClusterSet`] ([`cluster_set`]) is the registry's output — the registry controller
//!   writes cluster states into it; every other controller reads it and subscribes to its
//!   changes.
//! - [`MemberWatch`] ([`member_watch`]) keeps one label-filtered reflector per Ready
//!   cluster for one kind and reports every change as a [`MemberEvent`] keyed by
//!   (cluster, namespace, name), so a controller can map it back to the host object that
//!   owns it.

pub mod cluster_set;
pub mod member_watch;

pub use cluster_set::{ClusterEvent, ClusterSet, ClusterState, ReadyCluster};
pub use member_watch::{MemberEvent, MemberWatch};
