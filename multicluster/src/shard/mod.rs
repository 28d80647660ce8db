//! Sharding (experimental): N replicas of a controller split the clusters between them.
//!
//! Each replica renews a **peer Lease**; the live peers are those whose Lease changed
//! within its duration. A cluster belongs to the peer [`rendezvous`] hashing picks among
//! the live peers, and is reconciled only by the replica holding its **fence Lease**: the
//! owner takes the fence when it is free (released, or left unrenewed for its duration),
//! renews it while it owns the cluster, and on losing ownership (a peer joined) stops
//! reconciling the cluster, waits a drain period for reconciles under way, then releases
//! it. A replica that dies stops renewing: after the lease duration its clusters' fences
//! expire and their new owners take them (hand-over). A replica that cannot renew a fence
//! stops reconciling its cluster before the fence can expire. So two replicas never hold
//! one cluster's fence at once, and a reconcile never outlives its replica's fence as long
//! as it is shorter than the drain period.
//!
//! The [`ShardProvider`] is a [`Provider`]: it engages into the replica's own set the
//! clusters of a source set whose fence it holds (mirroring their clients and readiness);
//! run the controller on that set.
//!
//! ```no_run
//! use flotilla_multicluster::{ClusterSet, Controller, WatchOptions, shard::{ShardProvider, Sharding}};
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # async fn demo(all: ClusterSet, host: kube::Client) {
//! let sharding = Sharding::new(host, "default", "configmaps", "replica-1");
//! let controller = Controller::<ConfigMap>::with_provider(
//!     "configmaps", ShardProvider::new(all, sharding), WatchOptions::all());
//! # }
//! ```

mod lease;
pub mod rendezvous;

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

pub use lease::{GROUP_LABEL, Holder, Observer, ROLE_LABEL, holder};

use crate::{ClusterSet, Engagement, Provider};
use lease::Leases;

/// How a replica takes part in a shard group.
#[derive(Clone)]
pub struct Sharding {
    /// A client of the cluster holding the Leases.
    pub client: Client,
    /// The Leases' namespace.
    pub namespace: String,
    /// The group (one per controller): Leases are named and labelled after it.
    pub group: String,
    /// This replica's identity (e.g. the pod's name), unique in the group.
    pub identity: String,
    /// How long an unrenewed Lease keeps its holder (default 15 s).
    pub lease_duration: Duration,
    /// How long a replica waits between ceasing to reconcile a cluster and releasing its
    /// fence (default 2 s): reconciles under way finish meanwhile.
    pub drain: Duration,
}

impl Sharding {
    /// Replica `identity` of group `group`, with Leases in `namespace` of `client`'s cluster.
    pub fn new(client: Client, namespace: &str, group: &str, identity: &str) -> Self {
        Sharding {
            client,
            namespace: namespace.to_owned(),
            group: group.to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            drain: Duration::from_secs(2),
        }
    }

    /// With this lease duration.
    pub fn lease_duration(mut self, duration: Duration) -> Self {
        self.lease_duration = duration;
        self
    }
}

/// Engages the clusters of a source set this replica holds the fence of; see the module docs.
pub struct ShardProvider {
    source: ClusterSet,
    sharding: Sharding,
}

impl ShardProvider {
    /// The share of `source`'s clusters `sharding` gives this replica.
    pub fn new(source: ClusterSet, sharding: Sharding) -> Self {
        ShardProvider { source, sharding }
    }
}

/// What one replica holds and is letting go.
struct Shard {
    cfg: Sharding,
    leases: Leases,
    observer: Observer,
    /// Fences held, with when each was last renewed.
    held: BTreeMap<String, Instant>,
    /// Clusters given up, with when their fence may be released.
    draining: BTreeMap<String, Instant>,
}

impl Provider for ShardProvider {
    fn run(self: Box<Self>, set: ClusterSet, stop: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let cfg = self.sharding;
            let leases = Leases::new(
                cfg.client.clone(),
                &cfg.namespace,
                &cfg.group,
                cfg.lease_duration,
            );
            let mut shard = Shard {
                cfg,
                leases,
                observer: Observer::default(),
                held: BTreeMap::new(),
                draining: BTreeMap::new(),
            };
            let mut changes = self.source.changes();
            let period = shard.cfg.lease_duration / 5;
            loop {
                shard.step(&self.source, &set).await;
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(period) => {}
                    _ = changes.changed() => {}
                }
            }
            shard.leave(&set).await;
        })
    }
}

impl Shard {
    fn me(&self) -> &str {
        &self.cfg.identity
    }

    /// One round: renew the peer Lease, see who is alive, take, renew and let go of fences,
    /// and mirror the held clusters into `set`.
    async fn step(&mut self, source: &ClusterSet, set: &ClusterSet) {
        let peer = self.leases.peer_name(self.me());
        let all = self.leases.list().await.unwrap_or_default();
        let by_name: BTreeMap<String, Lease> = all.into_iter().map(|l| (l.name_any(), l)).collect();
        let me = self.cfg.identity.clone();
        if let Err(e) = self
            .leases
            .write(&peer, "peer", Some(&me), by_name.get(&peer))
            .await
        {
            debug!(error = %e, "renewing the peer Lease failed");
        }
        let mut peers = BTreeSet::from([me.clone()]);
        for lease in by_name.values() {
            let unchanged = self.observer.observe(lease);
            let spec = lease.spec.as_ref();
            let h = holder(
                spec.and_then(|s| s.holder_identity.as_deref()),
                &me,
                unchanged,
                self.cfg.lease_duration,
            );
            if lease.labels().get(ROLE_LABEL).map(String::as_str) == Some("peer")
                && matches!(h, Holder::Other(_))
            {
                peers.extend(spec.and_then(|s| s.holder_identity.clone()));
            }
        }
        let wanted: BTreeSet<String> = source
            .snapshot()
            .into_iter()
            .map(|c| c.name)
            .filter(|c| rendezvous::owner(c, peers.iter().map(String::as_str)) == Some(me.as_str()))
            .collect();
        self.let_go(set, &wanted, &by_name).await;
        self.take_and_renew(&wanted, &by_name).await;
        mirror(source, set, &self.held);
    }

    /// Stops reconciling clusters no longer wanted (or whose fence could not be renewed in
    /// time), and releases their fences once drained.
    async fn let_go(
        &mut self,
        set: &ClusterSet,
        wanted: &BTreeSet<String>,
        leases: &BTreeMap<String, Lease>,
    ) {
        let deadline = self.cfg.lease_duration * 2 / 3;
        let gone: Vec<String> = self
            .held
            .iter()
            .filter(|(c, renewed)| !wanted.contains(*c) || renewed.elapsed() >= deadline)
            .map(|(c, _)| c.clone())
            .collect();
        for cluster in gone {
            info!(cluster = %cluster, replica = %self.me(), "letting the cluster go");
            self.held.remove(&cluster);
            set.disengage(&cluster);
            self.draining
                .insert(cluster, Instant::now() + self.cfg.drain);
        }
        let drained: Vec<String> = self
            .draining
            .iter()
            .filter(|(_, at)| **at <= Instant::now())
            .map(|(c, _)| c.clone())
            .collect();
        for cluster in drained {
            let name = self.leases.fence_name(&cluster);
            let current = leases.get(&name);
            let mine = current.and_then(|l| l.spec.as_ref()?.holder_identity.as_deref())
                == Some(self.me());
            if !mine
                || self
                    .leases
                    .write(&name, "fence", None, current)
                    .await
                    .is_ok()
            {
                self.draining.remove(&cluster);
            }
        }
    }

    /// Takes the free fences of wanted clusters and renews the held ones; a failed renewal
    /// is retried next round (the deadline in `let_go` stops reconciles in time).
    async fn take_and_renew(
        &mut self,
        wanted: &BTreeSet<String>,
        leases: &BTreeMap<String, Lease>,
    ) {
        for cluster in wanted {
            if self.draining.contains_key(cluster) {
                continue;
            }
            let name = self.leases.fence_name(cluster);
            let current = leases.get(&name);
            let h = match current {
                Some(lease) => {
                    let unchanged = self.observer.observe(lease);
                    let who = lease
                        .spec
                        .as_ref()
                        .and_then(|s| s.holder_identity.as_deref());
                    holder(who, self.me(), unchanged, self.cfg.lease_duration)
                }
                None => Holder::Nobody,
            };
            if matches!(h, Holder::Other(_)) {
                continue;
            }
            let me = self.cfg.identity.clone();
            match self.leases.write(&name, "fence", Some(&me), current).await {
                Ok(()) => {
                    if h != Holder::Me || !self.held.contains_key(cluster) {
                        info!(cluster = %cluster, replica = %me, previous = ?h, "took the cluster's fence");
                    }
                    self.held.insert(cluster.clone(), Instant::now());
                }
                Err(e) => debug!(cluster = %cluster, error = %e, "writing the fence failed"),
            }
        }
    }

    /// Stops every reconcile, releases every fence and the peer Lease.
    async fn leave(&mut self, set: &ClusterSet) {
        for cluster in std::mem::take(&mut self.held).into_keys() {
            set.disengage(&cluster);
            self.draining
                .insert(cluster, Instant::now() + self.cfg.drain);
        }
        tokio::time::sleep(self.cfg.drain).await;
        let leases: BTreeMap<String, Lease> = self
            .leases
            .list()
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|l| (l.name_any(), l))
            .collect();
        for cluster in std::mem::take(&mut self.draining).into_keys() {
            let name = self.leases.fence_name(&cluster);
            let _ = self
                .leases
                .write(&name, "fence", None, leases.get(&name))
                .await;
        }
        let _ = self.leases.delete(&self.leases.peer_name(self.me())).await;
    }
}

/// Engages into `set` the `held` clusters of `source` that have a client, with their
/// readiness; disengages the others.
fn mirror(source: &ClusterSet, set: &ClusterSet, held: &BTreeMap<String, Instant>) {
    for state in set.snapshot() {
        if !held.contains_key(&state.name) {
            set.disengage(&state.name);
        }
    }
    for cluster in held.keys() {
        let Some(state) = source.get(cluster) else {
            continue;
        };
        let Some(client) = state.client.clone() else {
            continue;
        };
        let engagement = Engagement {
            client,
            labels: state.labels.clone(),
            identity: state.client_generation.to_string(),
            namespace: source.namespace_of(cluster),
        };
        set.engage(cluster, engagement);
        set.set_ready(cluster, state.ready);
    }
}
