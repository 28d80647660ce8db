//! The set of registered member clusters: which exist, their labels, which are Ready, and a
//! client for each. The registry writes it; every other controller reads it and subscribes
//! to its changes ([`ClusterEvent`]). It does no I/O of its own.

use std::{
    collections::BTreeMap,
    fmt::Debug,
    sync::{Arc, RwLock},
};

use flotilla_api::taint::Taint;
use kube::Client;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// What the control plane knows about one registered member cluster.
#[derive(Clone)]
pub struct ClusterState {
    /// Name of the KubeFedCluster.
    pub name: String,
    /// Labels of the KubeFedCluster (placement selectors match on these).
    pub labels: BTreeMap<String, String>,
    /// `spec.taints` of the KubeFedCluster (the scheduler filters on these).
    pub taints: Vec<Taint>,
    /// Whether the health check currently says Ready.
    pub ready: bool,
    /// A client for the member, when one could be built.
    pub client: Option<Client>,
    /// Bumped whenever the client is rebuilt (rotated token, changed spec), so watches restart.
    pub client_generation: u64,
    /// A Pull cluster: no client; its agent pulls Works from the host (see `crate::pull`),
    /// and its readiness comes from the agent's heartbeat.
    pub pull: bool,
}

impl Debug for ClusterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterState")
            .field("name", &self.name)
            .field("labels", &self.labels)
            .field("taints", &self.taints)
            .field("ready", &self.ready)
            .field("has_client", &self.client.is_some())
            .field("client_generation", &self.client_generation)
            .field("pull", &self.pull)
            .finish()
    }
}

impl ClusterState {
    /// What the constraint scheduler reads of the cluster.
    pub fn facts(&self) -> flotilla_core::schedule::ClusterFacts<'_> {
        flotilla_core::schedule::ClusterFacts {
            name: &self.name,
            labels: &self.labels,
            taints: &self.taints,
            ready: self.ready,
        }
    }
}

/// A Ready member cluster with its client.
#[derive(Clone)]
pub struct ReadyCluster {
    /// Name of the KubeFedCluster.
    pub name: String,
    /// Client for the member's API server.
    pub client: Client,
    /// Bumped whenever the client is rebuilt.
    pub client_generation: u64,
}

/// A change in the cluster set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterEvent {
    /// The cluster turned Ready (or got a new client while Ready).
    Ready(String),
    /// The cluster turned unready.
    NotReady(String),
    /// The cluster was registered or its labels changed.
    Updated(String),
    /// The cluster was removed from the registry.
    Removed(String),
}

impl ClusterEvent {
    /// Name of the cluster the event is about.
    pub fn cluster(&self) -> &str {
        match self {
            ClusterEvent::Ready(n)
            | ClusterEvent::NotReady(n)
            | ClusterEvent::Updated(n)
            | ClusterEvent::Removed(n) => n,
        }
    }
}

/// What engaging a cluster takes: its client, its labels, and what identifies the
/// credentials the client was built from (engaging again with the same identity changes
/// nothing but the labels).
#[derive(Clone)]
pub struct Engagement {
    /// A client for the cluster's API server.
    pub client: Client,
    /// Labels of the cluster (placement selectors and providers' filters match on these).
    pub labels: BTreeMap<String, String>,
    /// Identifies the client's inputs (e.g. a hash of a kubeconfig, a Secret's resource
    /// version); a different identity replaces the client and cancels the old engagement.
    pub identity: String,
    /// Confines the cluster to one namespace (a namespace-per-cluster provider): member
    /// watches of every kind are limited to it.
    pub namespace: Option<String>,
}

/// Per-cluster bookkeeping beside [`ClusterState`]: the engagement token, the identity of
/// its client's inputs and its namespace scope.
#[derive(Clone, Default)]
struct Engaged {
    token: CancellationToken,
    identity: Option<String>,
    namespace: Option<String>,
}

/// The set of registered member clusters, shared by every controller.
#[derive(Clone)]
pub struct ClusterSet {
    clusters: Arc<RwLock<BTreeMap<String, ClusterState>>>,
    engaged: Arc<RwLock<BTreeMap<String, Engaged>>>,
    problems: Arc<RwLock<BTreeMap<String, String>>>,
    events: broadcast::Sender<ClusterEvent>,
    version: Arc<watch::Sender<u64>>,
}

impl Default for ClusterSet {
    fn default() -> Self {
        Self::new()
    }
}

impl ClusterSet {
    /// An empty set.
    pub fn new() -> Self {
        let (events, _) = broadcast::channel(1024);
        let (version, _) = watch::channel(0);
        ClusterSet {
            clusters: Arc::default(),
            engaged: Arc::default(),
            problems: Arc::default(),
            events,
            version: Arc::new(version),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, ClusterState>> {
        // A poisoned lock only means a writer panicked mid-update of a plain map; the map
        // itself is still consistent, so keep serving it.
        self.clusters.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, ClusterState>> {
        self.clusters.write().unwrap_or_else(|e| e.into_inner())
    }

    fn publish(&self, events: Vec<ClusterEvent>) {
        if events.is_empty() {
            return;
        }
        for e in events {
            debug!(event = ?e, "cluster set changed");
            // No receivers is fine: nobody is interested yet.
            let _ = self.events.send(e);
        }
        self.version.send_modify(|v| *v += 1);
    }

    /// Registers a cluster (unready, without a client) or updates its labels and taints.
    pub fn upsert(&self, name: &str, labels: BTreeMap<String, String>, taints: Vec<Taint>) {
        let mut events = Vec::new();
        {
            let mut map = self.write();
            match map.get_mut(name) {
                Some(state) => {
                    if state.labels != labels || state.taints != taints {
                        state.labels = labels;
                        state.taints = taints;
                        events.push(ClusterEvent::Updated(name.to_string()));
                    }
                }
                None => {
                    self.renew_engagement(name);
                    map.insert(
                        name.to_string(),
                        ClusterState {
                            name: name.to_string(),
                            labels,
                            taints,
                            ready: false,
                            client: None,
                            client_generation: 0,
                            pull: false,
                        },
                    );
                    events.push(ClusterEvent::Updated(name.to_string()));
                }
            }
        }
        self.publish(events);
    }

    /// Replaces a cluster's client (a rebuilt one after a token rotation or spec change, or
    /// `None` when none can be built). Watches of a Ready cluster restart on the new client;
    /// a cluster without a client turns unready.
    pub fn set_client(&self, name: &str, client: Option<Client>) {
        let mut events = Vec::new();
        {
            let mut map = self.write();
            if let Some(state) = map.get_mut(name) {
                state.client = client;
                state.client_generation += 1;
                self.renew_engagement(name);
                if state.ready {
                    if state.client.is_none() {
                        state.ready = false;
                        events.push(ClusterEvent::NotReady(name.to_string()));
                    } else {
                        events.push(ClusterEvent::Ready(name.to_string()));
                    }
                }
            }
        }
        self.publish(events);
    }

    /// Marks a cluster as a Pull cluster (or not); a Pull cluster is Ready without a client.
    pub fn set_pull(&self, name: &str, pull: bool) {
        let mut events = Vec::new();
        if let Some(state) = self.write().get_mut(name)
            && state.pull != pull
        {
            state.pull = pull;
            if state.ready {
                state.ready = false;
                events.push(ClusterEvent::NotReady(name.to_string()));
            }
            events.push(ClusterEvent::Updated(name.to_string()));
        }
        self.publish(events);
    }

    /// Records the health check's verdict. A Push cluster without a client never counts as
    /// Ready.
    pub fn set_ready(&self, name: &str, ready: bool) {
        let mut events = Vec::new();
        {
            let mut map = self.write();
            if let Some(state) = map.get_mut(name) {
                let ready = ready && (state.client.is_some() || state.pull);
                if state.ready != ready {
                    state.ready = ready;
                    events.push(if ready {
                        ClusterEvent::Ready(name.to_string())
                    } else {
                        ClusterEvent::NotReady(name.to_string())
                    });
                }
            }
        }
        self.publish(events);
    }

    /// Removes a cluster from the set; its engagement is cancelled.
    pub fn remove(&self, name: &str) {
        let removed = self.write().remove(name).is_some();
        let engaged = self
            .engaged
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        if let Some(engaged) = engaged {
            engaged.token.cancel();
        }
        if removed {
            self.publish(vec![ClusterEvent::Removed(name.to_string())]);
        }
    }

    /// Engages cluster `name`: registers it (unready until its health check says Ready)
    /// with `engagement`'s client and labels, and returns the engagement's token, cancelled
    /// when the cluster leaves the set or its client is replaced. Idempotent and
    /// non-blocking: engaging an engaged cluster with the same identity only updates its
    /// labels and returns the same token.
    pub fn engage(&self, name: &str, engagement: Engagement) -> CancellationToken {
        self.upsert(name, engagement.labels, Vec::new());
        let same = |e: &Engaged| e.identity.as_deref() == Some(engagement.identity.as_str());
        if let Some(current) = self.engaged_of(name).filter(same) {
            return current.token;
        }
        self.set_client(name, Some(engagement.client));
        let mut engaged = self.engaged.write().unwrap_or_else(|e| e.into_inner());
        let entry = engaged.entry(name.to_owned()).or_default();
        entry.identity = Some(engagement.identity);
        entry.namespace = engagement.namespace;
        entry.token.clone()
    }

    /// Disengages cluster `name`: cancels its engagement and removes it from the set.
    pub fn disengage(&self, name: &str) {
        self.remove(name);
    }

    /// The token of cluster `name`'s current engagement: cancelled when it leaves the set
    /// or gets another client.
    pub fn engagement(&self, name: &str) -> Option<CancellationToken> {
        self.engaged_of(name).map(|e| e.token)
    }

    /// The namespace cluster `name` is confined to, if its provider confines it.
    pub fn namespace_of(&self, name: &str) -> Option<String> {
        self.engaged_of(name).and_then(|e| e.namespace)
    }

    fn engaged_of(&self, name: &str) -> Option<Engaged> {
        let engaged = self.engaged.read().unwrap_or_else(|e| e.into_inner());
        engaged.get(name).cloned()
    }

    /// Cancels the current engagement of `name` (if any) and starts a new one.
    fn renew_engagement(&self, name: &str) {
        let mut engaged = self.engaged.write().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = engaged.insert(name.to_owned(), Engaged::default()) {
            old.token.cancel();
        }
    }

    /// Records why cluster `name` cannot be used (its kubeconfig does not parse, its access
    /// provider fails, ...), or clears it with `None`. The cluster need not be registered:
    /// a provider reports a cluster it skips. Never put a credential in `reason`.
    pub fn report(&self, name: &str, reason: Option<String>) {
        let changed = {
            let mut problems = self.problems.write().unwrap_or_else(|e| e.into_inner());
            match reason {
                Some(reason) => problems.insert(name.to_owned(), reason.clone()) != Some(reason),
                None => problems.remove(name).is_some(),
            }
        };
        if changed {
            self.version.send_modify(|v| *v += 1);
        }
    }

    /// Clusters that cannot be used, with the reason: see [`ClusterSet::report`].
    pub fn problems(&self) -> BTreeMap<String, String> {
        self.problems
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every registered cluster.
    pub fn snapshot(&self) -> Vec<ClusterState> {
        self.read().values().cloned().collect()
    }

    /// One cluster's state.
    pub fn get(&self, name: &str) -> Option<ClusterState> {
        self.read().get(name).cloned()
    }

    /// The Ready clusters with their clients.
    pub fn ready(&self) -> Vec<ReadyCluster> {
        self.read()
            .values()
            .filter(|c| c.ready)
            .filter_map(|c| {
                c.client.clone().map(|client| ReadyCluster {
                    name: c.name.clone(),
                    client,
                    client_generation: c.client_generation,
                })
            })
            .collect()
    }

    /// A receiver of every change from now on. A lagging receiver should treat
    /// `RecvError::Lagged` as "anything may have changed".
    pub fn subscribe(&self) -> broadcast::Receiver<ClusterEvent> {
        self.events.subscribe()
    }

    /// A receiver that is notified (without detail) whenever anything changed.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Resolves once cluster `name` is not Ready (or no longer registered): lets work
    /// that is waiting on a cluster give up as soon as health checks declare it gone.
    pub async fn until_unready(&self, name: &str) {
        let mut changes = self.changes();
        loop {
            if !self.get(name).is_some_and(|c| c.ready) {
                return;
            }
            if changes.changed().await.is_err() {
                // The set is gone; nothing will ever change again.
                return std::future::pending().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engagement(identity: &str) -> Engagement {
        let config = kube::Config::new(http::Uri::from_static("https://127.0.0.1:1"));
        Engagement {
            client: Client::try_from(config).expect("a client (no connection is made)"),
            labels: BTreeMap::from([("id".to_string(), identity.to_string())]),
            identity: identity.into(),
            namespace: Some("ns".into()),
        }
    }

    #[tokio::test]
    async fn engaging_again_with_the_same_identity_keeps_the_engagement() {
        let set = ClusterSet::new();
        let first = set.engage("c", engagement("a"));
        let generation = set.get("c").map(|c| c.client_generation);
        let again = set.engage("c", engagement("a"));
        assert!(!first.is_cancelled() && !again.is_cancelled());
        assert_eq!(set.get("c").map(|c| c.client_generation), generation);
        assert_eq!(set.namespace_of("c").as_deref(), Some("ns"));
    }

    #[tokio::test]
    async fn a_new_identity_or_a_disengagement_cancels_the_engagement() {
        let set = ClusterSet::new();
        let first = set.engage("c", engagement("a"));
        let second = set.engage("c", engagement("b"));
        assert!(first.is_cancelled() && !second.is_cancelled());
        assert_eq!(
            set.get("c").map(|c| c.labels["id"].clone()).as_deref(),
            Some("b")
        );
        set.disengage("c");
        assert!(second.is_cancelled());
        assert!(set.get("c").is_none() && set.engagement("c").is_none());
    }

    #[test]
    fn problems_are_reported_and_cleared() {
        let set = ClusterSet::new();
        let mut changes = set.changes();
        set.report("bad", Some("does not parse".into()));
        assert_eq!(
            set.problems().get("bad").map(String::as_str),
            Some("does not parse")
        );
        assert!(changes.has_changed().unwrap_or(false));
        changes.mark_unchanged();
        set.report("bad", Some("does not parse".into()));
        assert!(
            !changes.has_changed().unwrap_or(true),
            "an unchanged report is no change"
        );
        set.report("bad", None);
        assert!(set.problems().is_empty());
    }
}
