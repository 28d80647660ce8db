//! Member work sharded over the controller-manager's replicas (`--shard-member-work`).
//!
//! The leader runs the control plane, the registry included; the member-facing work that
//! needs no leader — member RBAC on the Push members — runs on **every** replica instead,
//! each on its share of the members, with the library's sharding coordinator:
//!
//! - the replica's view of the federation is the library's read-only [`KubeFedProvider`]
//!   (clients from the KubeFedClusters and their Secrets; Ready as the leader's health
//!   checks wrote it in their status; it writes nothing);
//! - a [`ShardProvider`] over that set gives the replica the members rendezvous hashing over
//!   the group's peer Leases assigns it, each only while it holds the member's fence Lease
//!   (`flotilla-member-work-fence-<cluster>`), so one member's work is done by exactly one
//!   replica at a time, and a dead replica's members are handed over once its Leases
//!   expire;
//! - member RBAC ([`crate::member_rbac`], [`Scope::Push`]) runs on that share; the
//!   leader's own member RBAC keeps the Pull members (their roles live in the host).
//!
//! The Leases live in the control-plane namespace; a replica needs get, list, create,
//! update and delete on Leases there (`config/sharded/`).

use std::time::Duration;

use flotilla_multicluster::{
    ProviderHandle,
    kubefed::KubeFedProvider,
    shard::{ShardProvider, Sharding},
    tasks::AbortOnDrop,
};
use kube::Client;
use tracing::info;

use crate::{member_rbac::Scope, multicluster::ClusterSet};

/// The shard group of the member work: its Leases are named and labelled after it.
pub const GROUP: &str = "flotilla-member-work";
/// How long an unrenewed peer or fence Lease keeps its holder by default.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);

/// One replica's share of the member work, running until stopped, aborted or dropped
/// (dropping stops it as [`ShardedMemberWork::stop`] does, without waiting).
pub struct ShardedMemberWork {
    share: ClusterSet,
    all: ProviderHandle,
    shard: ProviderHandle,
    rbac: AbortOnDrop,
}

impl ShardedMemberWork {
    /// Joins the group as replica `identity` (unique among the replicas: the pod's name)
    /// with Leases of `lease_duration` in `namespace` of the host, and starts the member
    /// work on the replica's share.
    pub fn start(
        host: Client,
        namespace: &str,
        identity: &str,
        lease_duration: Duration,
    ) -> ShardedMemberWork {
        let (all, all_provider) =
            ClusterSet::from_provider(KubeFedProvider::new(host.clone(), namespace));
        let sharding =
            Sharding::new(host.clone(), namespace, GROUP, identity).lease_duration(lease_duration);
        let (share, shard) = ClusterSet::from_provider(ShardProvider::new(all, sharding));
        let rbac = tokio::spawn(crate::member_rbac::run(
            host,
            namespace.to_owned(),
            share.clone(),
            Scope::Push,
        ));
        info!(%identity, group = GROUP, ?lease_duration, "sharded member work started");
        ShardedMemberWork {
            share,
            all: all_provider,
            shard,
            rbac: AbortOnDrop::from([rbac]),
        }
    }

    /// The members this replica holds now.
    pub fn share(&self) -> &ClusterSet {
        &self.share
    }

    /// Leaves the group: stops the work, releases the fences (after the drain period) and
    /// the peer Lease, so the others take the members over at once.
    pub async fn stop(self) {
        let ShardedMemberWork {
            all, shard, rbac, ..
        } = self;
        drop(rbac);
        shard.stop().await;
        all.stop().await;
    }

    /// Ends at once, releasing nothing — as a replica that dies: its members are handed
    /// over once its Leases expire.
    pub fn abort(self) {
        let ShardedMemberWork {
            all, shard, rbac, ..
        } = self;
        drop(rbac);
        shard.abort();
        all.abort();
    }
}
