//! The multi-cluster runtime: which member clusters exist, which are Ready, a client for
//! each, and watches of one resource kind across every Ready member.
//!
//! It is a small library in the spirit of a "multicluster controller-runtime":
//! - [`ClusterSet`] is the registry's output — the registry controller writes cluster
//!   states into it; every other controller reads it and subscribes to its changes.
//! - [`MemberWatch`] keeps one label-filtered reflector per Ready cluster for one kind,
//!   starting a watch when a cluster turns Ready (or gets a new client) and dropping it,
//!   cache included, when the cluster leaves or turns unready. Every change is reported as
//!   a [`MemberEvent`] keyed by (cluster, namespace, name), so a controller can map it back
//!   to the host object that owns it.

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Debug,
    hash::Hash,
    sync::{Arc, RwLock},
};

use futures::StreamExt;
use kube::{
    Api, Client, Resource,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, mpsc, watch};
use tracing::{debug, info, warn};

/// What the control plane knows about one registered member cluster.
#[derive(Clone)]
pub struct ClusterState {
    /// Name of the KubeFedCluster.
    pub name: String,
    /// Labels of the KubeFedCluster (placement selectors match on these).
    pub labels: BTreeMap<String, String>,
    /// Whether the health check currently says Ready.
    pub ready: bool,
    /// A client for the member, when one could be built.
    pub client: Option<Client>,
    /// Bumped whenever the client is rebuilt (rotated token, changed spec), so watches restart.
    pub client_generation: u64,
}

impl Debug for ClusterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterState")
            .field("name", &self.name)
            .field("labels", &self.labels)
            .field("ready", &self.ready)
            .field("has_client", &self.client.is_some())
            .field("client_generation", &self.client_generation)
            .finish()
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

/// The set of registered member clusters, shared by every controller.
#[derive(Clone)]
pub struct ClusterSet {
    clusters: Arc<RwLock<BTreeMap<String, ClusterState>>>,
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

    /// Registers a cluster (unready, without a client) or updates its labels.
    pub fn upsert(&self, name: &str, labels: BTreeMap<String, String>) {
        let mut events = Vec::new();
        {
            let mut map = self.write();
            match map.get_mut(name) {
                Some(state) => {
                    if state.labels != labels {
                        state.labels = labels;
                        events.push(ClusterEvent::Updated(name.to_string()));
                    }
                }
                None => {
                    map.insert(
                        name.to_string(),
                        ClusterState {
                            name: name.to_string(),
                            labels,
                            ready: false,
                            client: None,
                            client_generation: 0,
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

    /// Records the health check's verdict. A cluster without a client never counts as Ready.
    pub fn set_ready(&self, name: &str, ready: bool) {
        let mut events = Vec::new();
        {
            let mut map = self.write();
            if let Some(state) = map.get_mut(name) {
                let ready = ready && state.client.is_some();
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

    /// Removes a cluster from the set.
    pub fn remove(&self, name: &str) {
        let removed = self.write().remove(name).is_some();
        if removed {
            self.publish(vec![ClusterEvent::Removed(name.to_string())]);
        }
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
}

/// A change to a watched object in one member, or a member's cache becoming complete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberEvent {
    /// An object was added, changed or deleted in a member.
    Object {
        /// The member cluster.
        cluster: String,
        /// Namespace of the object, for namespaced kinds.
        namespace: Option<String>,
        /// Name of the object.
        name: String,
    },
    /// A member's cache finished its initial list (after the cluster turned Ready, or
    /// after a watch restart); everything that depends on it should be rechecked.
    Synced {
        /// The member cluster.
        cluster: String,
    },
}

struct RunningWatch<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    generation: u64,
    store: Store<K>,
    synced: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

/// One kind watched in every Ready member, label-filtered, each with its own cache.
pub struct MemberWatch<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    dyntype: K::DynamicType,
    watches: Arc<RwLock<HashMap<String, RunningWatch<K>>>>,
    supervisor: tokio::task::JoinHandle<()>,
}

impl<K: Resource + Clone + 'static> Drop for MemberWatch<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn drop(&mut self) {
        self.supervisor.abort();
        let watches = self.watches.write().unwrap_or_else(|e| e.into_inner());
        for w in watches.values() {
            w.task.abort();
        }
    }
}

impl<K> MemberWatch<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync + Debug,
{
    /// Starts watching the kind in every Ready member of `set` (and every member that
    /// becomes Ready later), keeping only objects matching `label_selector`. Events go to
    /// `events`.
    pub fn start(
        set: ClusterSet,
        dyntype: K::DynamicType,
        label_selector: Option<String>,
        events: mpsc::UnboundedSender<MemberEvent>,
    ) -> Self {
        let watches: Arc<RwLock<HashMap<String, RunningWatch<K>>>> = Arc::default();
        let supervisor = tokio::spawn(supervise::<K>(
            set,
            dyntype.clone(),
            label_selector,
            events,
            watches.clone(),
        ));
        MemberWatch {
            dyntype,
            watches,
            supervisor,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, RunningWatch<K>>> {
        self.watches.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached object in one member; `None` when absent or the member is not watched.
    pub fn get(&self, cluster: &str, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        let watches = self.read();
        let w = watches.get(cluster)?;
        let mut key = ObjectRef::<K>::new_with(name, self.dyntype.clone());
        if let Some(ns) = namespace {
            key = key.within(ns);
        }
        w.store.get(&key)
    }

    /// Every cached object in one member.
    pub fn list(&self, cluster: &str) -> Vec<Arc<K>> {
        self.read()
            .get(cluster)
            .map(|w| w.store.state())
            .unwrap_or_default()
    }

    /// Whether the member is watched and its initial list has completed.
    pub fn is_synced(&self, cluster: &str) -> bool {
        self.read()
            .get(cluster)
            .is_some_and(|w| w.synced.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Names of the clusters currently watched.
    pub fn clusters(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }
}

async fn supervise<K>(
    set: ClusterSet,
    dyntype: K::DynamicType,
    label_selector: Option<String>,
    events: mpsc::UnboundedSender<MemberEvent>,
    watches: Arc<RwLock<HashMap<String, RunningWatch<K>>>>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync + Debug,
{
    let mut changes = set.changes();
    loop {
        let ready = set.ready();
        {
            let mut running = watches.write().unwrap_or_else(|e| e.into_inner());
            // Stop watches of clusters that left, turned unready or got a new client.
            let stale: Vec<String> = running
                .iter()
                .filter(|(name, w)| {
                    !ready
                        .iter()
                        .any(|c| &c.name == *name && c.client_generation == w.generation)
                })
                .map(|(name, _)| name.clone())
                .collect();
            for name in stale {
                if let Some(w) = running.remove(&name) {
                    w.task.abort();
                    info!(cluster = %name, kind = ?dyntype, "stopped member watch");
                }
            }
            for c in ready {
                if running.contains_key(&c.name) {
                    continue;
                }
                // The writer keys objects by the real dynamic type, so lookups built with
                // `ObjectRef::new_with(.., dyntype)` find them.
                let writer = reflector::store::Writer::<K>::new(dyntype.clone());
                let store = writer.as_reader();
                let synced = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let task = tokio::spawn(run_watch::<K>(
                    c.name.clone(),
                    Api::all_with(c.client.clone(), &dyntype),
                    label_selector.clone(),
                    writer,
                    synced.clone(),
                    events.clone(),
                ));
                info!(cluster = %c.name, kind = ?dyntype, "started member watch");
                running.insert(
                    c.name.clone(),
                    RunningWatch {
                        generation: c.client_generation,
                        store,
                        synced,
                        task,
                    },
                );
            }
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

async fn run_watch<K>(
    cluster: String,
    api: Api<K>,
    label_selector: Option<String>,
    writer: reflector::store::Writer<K>,
    synced: Arc<std::sync::atomic::AtomicBool>,
    events: mpsc::UnboundedSender<MemberEvent>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let mut config = watcher::Config::default();
    if let Some(sel) = &label_selector {
        config = config.labels(sel);
    }
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
    futures::pin_mut!(stream);
    while let Some(item) = stream.next().await {
        let event = match item {
            Ok(e) => e,
            Err(err) => {
                warn!(%cluster, error = %err, "member watch failed; retrying with backoff");
                continue;
            }
        };
        let objects: Vec<&K> = match &event {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) | watcher::Event::InitApply(o) => {
                vec![o]
            }
            watcher::Event::Init => Vec::new(),
            watcher::Event::InitDone => {
                synced.store(true, std::sync::atomic::Ordering::Release);
                if events
                    .send(MemberEvent::Synced {
                        cluster: cluster.clone(),
                    })
                    .is_err()
                {
                    return;
                }
                Vec::new()
            }
        };
        for o in objects {
            let meta = o.meta();
            let sent = events.send(MemberEvent::Object {
                cluster: cluster.clone(),
                namespace: meta.namespace.clone(),
                name: meta.name.clone().unwrap_or_default(),
            });
            if sent.is_err() {
                return;
            }
        }
    }
}
