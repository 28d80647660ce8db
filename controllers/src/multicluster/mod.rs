//! The multi-cluster runtime Flotilla's controllers run on: the `flotilla-multicluster`
//! library crate (see docs/library.md). These re-exports keep the older
//! `crate::multicluster::*` paths working.

pub use flotilla_multicluster::{
    ClusterEvent, ClusterSet, ClusterState, MemberEvent, MemberWatch, ReadyCluster, cluster_set,
    member_watch,
};
