//! Watches of one resource kind across the Ready members (all of them, or one named
//! cluster): one filtered reflector per cluster, started when the cluster turns Ready (or
//! gets a new client) and dropped, cache included, when it leaves or turns unready. Every
//! change is reported to a callback with its cluster (or, with [`MemberWatch::start`], as
//! a [`MemberEvent`]). A member that does not serve the kind is reported once and looked
//! at again through discovery ([`unserved`]). It reads the [`ClusterSet`]; it never
//! changes it, and it makes no decision about what a change means.

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Debug,
    hash::Hash,
    ops::ControlFlow,
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

use futures::FutureExt;
use kube::{
    Api, Resource,
    runtime::{
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tracing::{info, warn};

mod options;
pub mod unserved;

use crate::index::{Indexes, name_of};
use crate::sync_state::{SyncState, lock, sync_state, timed_out_reason};
use crate::watch::{Change, Retry, WatchParams, not_served, watch_into_reporting};
use crate::{ClusterSet, Provider, ProviderHandle, ReadyCluster};

pub use options::{ClusterSelector, WatchOptions};
pub use unserved::register_metrics;
use unserved::{Served, Unserved};

/// Called for every change in a member, with the cluster's name; breaking ends the
/// cluster's watch loop (its subscriber is gone).
pub type OnChange<K> = Arc<dyn Fn(&str, Change<'_, K>) -> ControlFlow<()> + Send + Sync>;

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
    started: Instant,
    failure: Failure,
}

/// The last failure of a cluster's watch, for the sync-timeout report.
type Failure = Arc<Mutex<Option<String>>>;

/// One kind watched in every Ready member, label-filtered, each with its own cache.
pub struct MemberWatch<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    dyntype: K::DynamicType,
    watches: Arc<RwLock<HashMap<String, RunningWatch<K>>>>,
    supervisor: tokio::task::JoinHandle<()>,
    indexes: Arc<Indexes<K>>,
    sync_timeout: Option<Duration>,
    /// The provider of a watch started with [`MemberWatch::with_provider`].
    provider: Option<ProviderHandle>,
    unserved: Arc<Unserved>,
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
        self.unserved.forget_all();
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
        let mut config = watcher::Config::default();
        if let Some(selector) = &label_selector {
            config = config.labels(selector);
        }
        let options = WatchOptions {
            shrink,
            ..WatchOptions::all().with_config(config)
        };
        Self::start_with_events(set, dyntype, options, events)
    }

    /// Like [`MemberWatch::start_with`], sending every change as a [`MemberEvent`] to
    /// `events` (as [`MemberWatch::start`] does) — for options such as indexes or a sync
    /// timeout with the channel-driven controllers.
    pub fn start_with_events(
        set: ClusterSet,
        dyntype: K::DynamicType,
        options: WatchOptions<K>,
        events: mpsc::UnboundedSender<MemberEvent>,
    ) -> Self {
        Self::start_with(set, dyntype, options, forward_to(events))
    }

    /// Like [`MemberWatch::start`], for a kind members may not serve (see
    /// [`WatchOptions::optional_kind`]): a member's cache is synced once the kind is served
    /// there.
    pub fn start_optional(
        set: ClusterSet,
        dyntype: K::DynamicType,
        shrink: fn(&mut K),
        events: mpsc::UnboundedSender<MemberEvent>,
    ) -> Self {
        let options = WatchOptions {
            shrink,
            ..WatchOptions::all().optional_kind()
        };
        Self::start_with(set, dyntype, options, forward_to(events))
    }

    /// Starts watching the kind as `options` say, in the selected Ready members of `set`
    /// (and those that become Ready later); every change is passed to `on_change` after
    /// the cluster's cache has applied it.
    pub fn start_with(
        set: ClusterSet,
        dyntype: K::DynamicType,
        options: WatchOptions<K>,
        on_change: OnChange<K>,
    ) -> Self {
        let watches: Arc<RwLock<HashMap<String, RunningWatch<K>>>> = Arc::default();
        let indexes = Arc::new(Indexes::new(options.indexers.clone()));
        let sync_timeout = options.sync_timeout;
        let unserved = Arc::new(unserved_of::<K>(&dyntype, options.unserved_recheck));
        let supervisor = tokio::spawn(supervise::<K>(
            set,
            dyntype.clone(),
            options,
            Watched {
                on_change,
                watches: watches.clone(),
                indexes: indexes.clone(),
                unserved: unserved.clone(),
            },
        ));
        MemberWatch {
            dyntype,
            watches,
            supervisor,
            indexes,
            sync_timeout,
            provider: None,
            unserved,
        }
    }

    /// Like [`MemberWatch::start_with`], in the clusters `provider` engages (into a set of
    /// their own, returned); the provider stops, disengaging them, when the watch is dropped.
    pub fn with_provider(
        provider: impl Provider,
        dyntype: K::DynamicType,
        options: WatchOptions<K>,
        on_change: OnChange<K>,
    ) -> (Self, ClusterSet) {
        let (set, handle) = ClusterSet::from_provider(provider);
        let mut watch = Self::start_with(set.clone(), dyntype, options, on_change);
        watch.provider = Some(handle);
        (watch, set)
    }

    /// The provider this watch runs, if it was started with one.
    pub fn provider(&self) -> Option<&ProviderHandle> {
        self.provider.as_ref()
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

    /// Every cached object in every watched member, with its cluster.
    pub fn list_all(&self) -> Vec<(String, Arc<K>)> {
        self.read()
            .iter()
            .flat_map(|(cluster, w)| {
                w.store
                    .state()
                    .into_iter()
                    .map(move |o| (cluster.clone(), o))
            })
            .collect()
    }

    /// Names of the clusters currently watched.
    pub fn clusters(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// Names of the watched clusters that do not serve the kind (their list answered
    /// `404`); each is looked at again through discovery (see [`unserved`]).
    pub fn unserved(&self) -> Vec<String> {
        self.unserved.clusters()
    }

    /// The cached objects of `cluster` found under `value` in index `index` (see
    /// [`WatchOptions::index`]).
    pub fn by_index(&self, cluster: &str, index: &str, value: &str) -> Vec<Arc<K>> {
        self.indexes
            .lookup(cluster, index, value)
            .into_iter()
            .filter_map(|(ns, name)| self.get(cluster, ns.as_deref(), &name))
            .collect()
    }

    /// [`MemberWatch::by_index`] in every watched cluster, with the cluster.
    pub fn by_index_all(&self, index: &str, value: &str) -> Vec<(String, Arc<K>)> {
        let mut found = Vec::new();
        for cluster in self.clusters() {
            let objects = self.by_index(&cluster, index, value);
            found.extend(objects.into_iter().map(|o| (cluster.clone(), o)));
        }
        found
    }

    /// Where the cache of `cluster` stands; `None` when the cluster is not watched.
    pub fn sync_state(&self, cluster: &str) -> Option<SyncState> {
        let watches = self.read();
        let w = watches.get(cluster)?;
        let synced = matches!(w.store.wait_until_ready().now_or_never(), Some(Ok(())));
        let failure = lock(&w.failure).clone();
        Some(sync_state(
            synced,
            w.started.elapsed(),
            self.sync_timeout,
            failure,
        ))
    }

    /// The watched clusters whose cache missed the sync timeout, with the reason.
    pub fn sync_problems(&self) -> BTreeMap<String, String> {
        self.clusters()
            .into_iter()
            .filter_map(|c| match self.sync_state(&c) {
                Some(SyncState::TimedOut { reason }) => Some((c, reason)),
                _ => None,
            })
            .collect()
    }

    /// Waits until the cache of every watched cluster is synced or has missed the sync
    /// timeout (checked every 100 ms), and returns those that missed it: one unreachable
    /// cluster does not stall the others. Without a timeout, waits for every cluster.
    pub async fn wait_for_sync(&self) -> BTreeMap<String, String> {
        loop {
            let states: Vec<_> = self
                .clusters()
                .iter()
                .filter_map(|c| self.sync_state(c))
                .collect();
            if states.iter().all(|s| !matches!(s, SyncState::Syncing)) {
                return self.sync_problems();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `on_change` after the cluster's indexes have taken the change in.
fn indexed<K>(
    indexes: &Arc<Indexes<K>>,
    store: &Store<K>,
    dyntype: &K::DynamicType,
    on_change: OnChange<K>,
) -> OnChange<K>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    if indexes.is_empty() {
        return on_change;
    }
    let (indexes, store, dyntype) = (indexes.clone(), store.clone(), dyntype.clone());
    Arc::new(move |cluster, change| {
        match &change {
            Change::Object(o) => {
                let key = name_of(*o);
                let mut at = ObjectRef::<K>::new_with(&key.1, dyntype.clone());
                if let Some(ns) = &key.0 {
                    at = at.within(ns);
                }
                let current = store.get(&at);
                indexes.update(cluster, key, current.as_deref());
            }
            // The store shows a list only at its end, where the indexes are rebuilt from
            // it: updating them from the store now would write back what they hold.
            Change::Listing | Change::Listed(_) => {}
            Change::Synced => indexes.rebuild(cluster, &store.state()),
        }
        on_change(cluster, change)
    })
}

/// A change callback that sends every change as a [`MemberEvent`] to `events`, and breaks
/// (ending the watch) once nobody receives them.
fn forward_to<K: Resource>(events: mpsc::UnboundedSender<MemberEvent>) -> OnChange<K> {
    Arc::new(move |cluster, change| {
        let event = match change {
            Change::Object(o) | Change::Listed(o) => MemberEvent::Object {
                cluster: cluster.to_owned(),
                namespace: o.meta().namespace.clone(),
                name: o.meta().name.clone().unwrap_or_default(),
            },
            Change::Synced => MemberEvent::Synced {
                cluster: cluster.to_owned(),
            },
            Change::Listing => return ControlFlow::Continue(()),
        };
        match events.send(event) {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    })
}

/// What the supervisor keeps up to date, and whom it reports to.
struct Watched<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    on_change: OnChange<K>,
    watches: Arc<RwLock<HashMap<String, RunningWatch<K>>>>,
    indexes: Arc<Indexes<K>>,
    unserved: Arc<Unserved>,
}

/// kubectl's name of the kind (`plural.group`) and where discovery lists it.
fn unserved_of<K: Resource>(dyntype: &K::DynamicType, max_pause: Duration) -> Unserved {
    let (group, plural) = (K::group(dyntype), K::plural(dyntype));
    let resource = match group.is_empty() {
        true => plural.to_string(),
        false => format!("{plural}.{group}"),
    };
    let served = Served {
        group_version: K::api_version(dyntype).into_owned(),
        plural: plural.into_owned(),
    };
    Unserved::new(resource, served, max_pause)
}

async fn supervise<K>(
    set: ClusterSet,
    dyntype: K::DynamicType,
    options: WatchOptions<K>,
    watched: Watched<K>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync + Debug,
{
    let mut changes = set.changes();
    loop {
        let ready: Vec<_> = set
            .ready()
            .into_iter()
            .filter(|c| options.clusters.matches(&c.name))
            .collect();
        {
            let mut running = watched.watches.write().unwrap_or_else(|e| e.into_inner());
            stop_stale(&mut running, &ready, &watched);
            for c in ready {
                if running.contains_key(&c.name) {
                    continue;
                }
                // The writer keys objects by the real dynamic type, so lookups built with
                // `ObjectRef::new_with(.., dyntype)` find them.
                let writer = reflector::store::Writer::<K>::new(dyntype.clone());
                let store = writer.as_reader();
                let api = Api::all_with(c.client.clone(), &dyntype);
                let mut options = options.clone();
                if options.namespace.is_none() {
                    // A namespace-per-cluster provider confines the cluster to its namespace.
                    options.namespace = set.namespace_of(&c.name);
                }
                let failure = Failure::default();
                let on_change = indexed(
                    &watched.indexes,
                    &store,
                    &dyntype,
                    watched.on_change.clone(),
                );
                let task = tokio::spawn(run_watch::<K>(
                    c.name.clone(),
                    api,
                    options,
                    writer,
                    Report {
                        on_change,
                        failure: failure.clone(),
                        unserved: watched.unserved.clone(),
                    },
                ));
                info!(cluster = %c.name, resource = %watched.unserved.resource(), "started member watch");
                running.insert(
                    c.name.clone(),
                    RunningWatch {
                        generation: c.client_generation,
                        store,
                        task,
                        started: Instant::now(),
                        failure,
                    },
                );
            }
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// Stops the watches of clusters that left, turned unready or got a new client.
fn stop_stale<K>(
    running: &mut HashMap<String, RunningWatch<K>>,
    ready: &[ReadyCluster],
    watched: &Watched<K>,
) where
    K: Resource + Clone,
    K::DynamicType: Eq + Hash + Clone + Debug,
{
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
            watched.indexes.drop_cluster(&name);
            watched.unserved.forget(&name);
            info!(cluster = %name, resource = %watched.unserved.resource(), "stopped member watch");
        }
    }
}

/// Where one member's watch reports: its changes, its last failure, its kind unserved.
struct Report<K> {
    on_change: OnChange<K>,
    failure: Failure,
    unserved: Arc<Unserved>,
}

/// Feeds one member's cache and reports its changes; ends when `on_change` breaks.
async fn run_watch<K>(
    cluster: String,
    api: Api<K>,
    options: WatchOptions<K>,
    writer: reflector::store::Writer<K>,
    report: Report<K>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let store = writer.as_reader();
    let timeout = options.sync_timeout;
    let mut config = options.config;
    if let Some(ns) = &options.namespace {
        // kube builds a namespaced URL only for kinds known to be namespaced at compile
        // time; a field selector narrows a watch of any kind (list/watch of the kind must
        // then be granted cluster-wide).
        let field = format!("metadata.namespace={ns}");
        config.field_selector = Some(match config.field_selector.take() {
            Some(other) if !other.is_empty() => format!("{other},{field}"),
            _ => field,
        });
    }
    let mut params = WatchParams::member(cluster.clone(), config);
    params.failures = options.failures;
    let Report {
        on_change,
        failure,
        unserved,
    } = report;
    let client = api.clone().into_client();
    let watch = watch_into_reporting(
        api,
        writer,
        params,
        options.shrink,
        |change| {
            if matches!(change, Change::Synced) {
                unserved.synced(&cluster);
            }
            on_change(&cluster, change)
        },
        |error| {
            let Some(message) = not_served(error) else {
                *lock(&failure) = Some(crate::error_chain(error));
                return Retry::AsUsual;
            };
            let resource = unserved.resource();
            *lock(&failure) = Some(format!("the member does not serve {resource} ({message})"));
            let (unserved, cluster, client) = (unserved.clone(), cluster.clone(), client.clone());
            let message = message.to_owned();
            Retry::After(Box::pin(async move {
                unserved.until_served(&cluster, &client, &message).await
            }))
        },
    );
    let deadline = async {
        let Some(timeout) = timeout else { return };
        tokio::time::sleep(timeout).await;
        if store.wait_until_ready().now_or_never().is_none() {
            let reason = timed_out_reason(timeout, lock(&failure).clone());
            warn!(cluster = %cluster, %reason, "member cache not synced; not waited for");
        }
    };
    futures::join!(watch, deadline);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_cover_all_one_or_all_but_one_cluster() {
        let cases = [
            (ClusterSelector::All, [true, true]),
            (ClusterSelector::Named("c1".into()), [true, false]),
            (ClusterSelector::AllExcept("c1".into()), [false, true]),
        ];
        for (selector, expected) in cases {
            assert_eq!(
                [selector.matches("c1"), selector.matches("c2")],
                expected,
                "{selector:?}"
            );
        }
    }
}
