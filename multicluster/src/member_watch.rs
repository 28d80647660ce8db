//! Watches of one resource kind across the Ready members (all of them, or one named
//! cluster): one filtered reflector per cluster, started when the cluster turns Ready (or
//! gets a new client) and dropped, cache included, when it leaves or turns unready. Every
//! change is reported to a callback with its cluster (or, with [`MemberWatch::start`], as
//! a [`MemberEvent`]). It reads the [`ClusterSet`]; it never changes it, and it makes no
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
    runtime::{
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tracing::info;

use crate::ClusterSet;
use crate::watch::{Change, FailureLog, WatchParams, watch_into};

/// Which member clusters a watch covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterSelector {
    /// Every Ready cluster of the set, including those that join later.
    All,
    /// Only this cluster, while it is Ready.
    Named(String),
    /// Every Ready cluster but this one (e.g. every member but a central cluster).
    AllExcept(String),
}

impl ClusterSelector {
    /// Whether the selector covers `cluster`.
    pub fn matches(&self, cluster: &str) -> bool {
        match self {
            ClusterSelector::All => true,
            ClusterSelector::Named(name) => name == cluster,
            ClusterSelector::AllExcept(name) => name != cluster,
        }
    }
}

/// What a [`MemberWatch`] watches in each selected cluster, and what it keeps.
pub struct WatchOptions<K> {
    /// The clusters watched.
    pub clusters: ClusterSelector,
    /// Only this namespace (a `metadata.namespace` field selector: list and watch of the
    /// kind must be granted cluster-wide); `None` for every namespace.
    pub namespace: Option<String>,
    /// The watcher's configuration: label and field selectors, page size, ...
    pub config: watcher::Config,
    /// A cut applied to every object before it is cached (e.g. drop a status nobody reads).
    /// It still sees `managedFields`, which are dropped after it (keep a digest if needed).
    pub shrink: fn(&mut K),
    /// How loudly a failing watch is logged: `Warn` (an unreachable member), or `Debug` for
    /// a kind members may not serve (an optional CRD).
    pub failures: FailureLog,
}

impl<K> Clone for WatchOptions<K> {
    fn clone(&self) -> Self {
        WatchOptions {
            clusters: self.clusters.clone(),
            namespace: self.namespace.clone(),
            config: self.config.clone(),
            shrink: self.shrink,
            failures: self.failures,
        }
    }
}

impl<K> WatchOptions<K> {
    /// Every object of the kind in every Ready cluster, kept whole.
    pub fn all() -> Self {
        WatchOptions {
            clusters: ClusterSelector::All,
            namespace: None,
            config: watcher::Config::default(),
            shrink: |_| {},
            failures: FailureLog::Warn,
        }
    }

    /// For a kind members may not serve (an optional CRD such as the About API's): failed
    /// watches are logged at debug level and retried with a growing pause.
    pub fn optional_kind(mut self) -> Self {
        self.failures = FailureLog::Debug;
        self
    }

    /// Only in cluster `name`.
    pub fn in_cluster(mut self, name: impl Into<String>) -> Self {
        self.clusters = ClusterSelector::Named(name.into());
        self
    }

    /// In every cluster but `name`.
    pub fn except_cluster(mut self, name: impl Into<String>) -> Self {
        self.clusters = ClusterSelector::AllExcept(name.into());
        self
    }

    /// Only in namespace `ns`.
    pub fn in_namespace(mut self, ns: impl Into<String>) -> Self {
        self.namespace = Some(ns.into());
        self
    }

    /// With this watcher configuration (selectors).
    pub fn with_config(mut self, config: watcher::Config) -> Self {
        self.config = config;
        self
    }
}

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
        let mut config = watcher::Config::default();
        if let Some(selector) = &label_selector {
            config = config.labels(selector);
        }
        let options = WatchOptions {
            shrink,
            ..WatchOptions::all().with_config(config)
        };
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
        let supervisor = tokio::spawn(supervise::<K>(
            set,
            dyntype.clone(),
            options,
            on_change,
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
}

/// A change callback that sends every change as a [`MemberEvent`] to `events`, and breaks
/// (ending the watch) once nobody receives them.
fn forward_to<K: Resource>(events: mpsc::UnboundedSender<MemberEvent>) -> OnChange<K> {
    Arc::new(move |cluster, change| {
        let event = match change {
            Change::Object(o) => MemberEvent::Object {
                cluster: cluster.to_owned(),
                namespace: o.meta().namespace.clone(),
                name: o.meta().name.clone().unwrap_or_default(),
            },
            Change::Synced => MemberEvent::Synced {
                cluster: cluster.to_owned(),
            },
        };
        match events.send(event) {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    })
}

async fn supervise<K>(
    set: ClusterSet,
    dyntype: K::DynamicType,
    options: WatchOptions<K>,
    on_change: OnChange<K>,
    watches: Arc<RwLock<HashMap<String, RunningWatch<K>>>>,
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
                let api = Api::all_with(c.client.clone(), &dyntype);
                let task = tokio::spawn(run_watch::<K>(
                    c.name.clone(),
                    api,
                    options.clone(),
                    writer,
                    on_change.clone(),
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

/// Feeds one member's cache and reports its changes; ends when `on_change` breaks.
async fn run_watch<K>(
    cluster: String,
    api: Api<K>,
    options: WatchOptions<K>,
    writer: reflector::store::Writer<K>,
    on_change: OnChange<K>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
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
    watch_into(api, writer, params, options.shrink, |change| {
        on_change(&cluster, change)
    })
    .await
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
