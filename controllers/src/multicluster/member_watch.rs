//! Watches of one resource kind across every Ready member: one label-filtered reflector
//! per cluster, started when the cluster turns Ready (or gets a new client) and dropped,
//! cache included, when it leaves or turns unready. Every change is reported as a
//! [`MemberEvent`]. It reads the [`ClusterSet`]; it never changes it, and it makes no
//! decision about what a change means.

use std::{
    collections::HashMap,
    fmt::Debug,
    hash::Hash,
    ops::ControlFlow,
    sync::{Arc, RwLock},
};

use futures::FutureExt;
use kube::{
    Api, Resource,
    runtime::reflector::{self, ObjectRef, Store},
};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tracing::info;

use super::ClusterSet;
use crate::watch::{Change, FailureLog, WatchParams, watch_into};

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
    /// becomes Ready later), keeping only objects matching `label_selector`, each passed
    /// through `shrink` before it is cached. Events go to `events`.
    pub fn start(
        set: ClusterSet,
        dyntype: K::DynamicType,
        label_selector: Option<String>,
        shrink: fn(&mut K),
        events: mpsc::UnboundedSender<MemberEvent>,
    ) -> Self {
        let filter = Filter {
            label_selector,
            shrink,
            failures: FailureLog::Warn,
        };
        Self::start_filtered(set, dyntype, filter, events)
    }

    /// Like [`MemberWatch::start`] for a kind members may not serve (an optional CRD, such
    /// as the About API's): failed watches are logged at debug level and retried with backoff,
    /// and a member's cache is synced once the kind is served there.
    pub fn start_optional(
        set: ClusterSet,
        dyntype: K::DynamicType,
        shrink: fn(&mut K),
        events: mpsc::UnboundedSender<MemberEvent>,
    ) -> Self {
        let filter = Filter {
            label_selector: None,
            shrink,
            failures: FailureLog::Debug,
        };
        Self::start_filtered(set, dyntype, filter, events)
    }

    fn start_filtered(
        set: ClusterSet,
        dyntype: K::DynamicType,
        filter: Filter<K>,
        events: mpsc::UnboundedSender<MemberEvent>,
    ) -> Self {
        let watches: Arc<RwLock<HashMap<String, RunningWatch<K>>>> = Arc::default();
        let supervisor = tokio::spawn(supervise::<K>(
            set,
            dyntype.clone(),
            filter,
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
        self.read().get(cluster).is_some_and(|w| {
            // Ready once the first list has been applied; never waits.
            matches!(w.store.wait_until_ready().now_or_never(), Some(Ok(())))
        })
    }

    /// Names of the clusters currently watched.
    pub fn clusters(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }
}

/// Which objects a member watch keeps, and how it shrinks them.
struct Filter<K> {
    label_selector: Option<String>,
    shrink: fn(&mut K),
    failures: FailureLog,
}

impl<K> Clone for Filter<K> {
    fn clone(&self) -> Self {
        Filter {
            label_selector: self.label_selector.clone(),
            shrink: self.shrink,
            failures: self.failures,
        }
    }
}

async fn supervise<K>(
    set: ClusterSet,
    dyntype: K::DynamicType,
    filter: Filter<K>,
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
                let task = tokio::spawn(run_watch::<K>(
                    c.name.clone(),
                    Api::all_with(c.client.clone(), &dyntype),
                    filter.clone(),
                    writer,
                    events.clone(),
                ));
                info!(cluster = %c.name, kind = ?dyntype, "started member watch");
                running.insert(
                    c.name.clone(),
                    RunningWatch {
                        generation: c.client_generation,
                        store,
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

/// Feeds one member's cache and reports its changes; ends when `events` has no receiver.
async fn run_watch<K>(
    cluster: String,
    api: Api<K>,
    filter: Filter<K>,
    writer: reflector::store::Writer<K>,
    events: mpsc::UnboundedSender<MemberEvent>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let mut params = WatchParams::member(cluster.clone(), filter.label_selector);
    params.failures = filter.failures;
    watch_into(api, writer, params, filter.shrink, |change| {
        let event = match change {
            Change::Object(o) => MemberEvent::Object {
                cluster: cluster.clone(),
                namespace: o.meta().namespace.clone(),
                name: o.meta().name.clone().unwrap_or_default(),
            },
            Change::Synced => MemberEvent::Synced {
                cluster: cluster.clone(),
            },
        };
        match events.send(event) {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    })
    .await
}
