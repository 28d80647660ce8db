//! Observation: a label-filtered watcher per cluster that records when each object of a
//! phase reaches the wanted state (a version, or gone), and counts write events. It only
//! watches; writes and figures belong to the phases.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::bail;
use futures::StreamExt;
use kube::{
    Api, Client, ResourceExt,
    api::DynamicObject,
    core::ApiResource,
    runtime::{WatchStreamExt, watcher},
};
use tokio::sync::Notify;
use tracing::warn;

/// The host counts as settled after this long without a write to a federated object.
const QUIET: Duration = Duration::from_millis(1500);

/// The state a phase waits for.
#[derive(Debug, Clone)]
pub(super) enum Want {
    Version(String),
    Absent,
}

#[derive(Default)]
struct ClusterTrack {
    /// Object name → version.
    current: HashMap<String, Option<String>>,
    /// The objects of a relist in progress.
    relist: Option<HashMap<String, Option<String>>>,
    /// When each object first met the phase's want.
    reached: HashMap<String, Instant>,
    /// Write events (adds, modifications, deletions) seen on the live watch.
    writes: u64,
    /// Time of the last write event.
    last_write: Option<Instant>,
    synced: bool,
    /// Whether the current phase waits for this cluster (all do, unless
    /// [`Tracker::expect_in`] named some).
    inactive: bool,
}

#[derive(Default)]
struct TrackState {
    clusters: Vec<ClusterTrack>,
    want: Option<Want>,
    /// The objects of the phase.
    wanted: HashSet<String>,
    /// (wanted object, cluster) pairs that reached the want.
    reached_pairs: usize,
}

impl TrackState {
    /// Clusters the current phase waits for.
    fn active(&self) -> usize {
        self.clusters.iter().filter(|c| !c.inactive).count()
    }
}

/// Records that `name` reached the want in `c` if it did (and counts it once).
fn reach(
    c: &mut ClusterTrack,
    want: Option<&Want>,
    wanted: &HashSet<String>,
    reached_pairs: &mut usize,
    name: &str,
    now: Instant,
) {
    let ok = match want {
        Some(Want::Version(v)) => c
            .current
            .get(name)
            .is_some_and(|cur| cur.as_deref() == Some(v)),
        Some(Want::Absent) => !c.current.contains_key(name),
        None => false,
    };
    if ok && !c.inactive && wanted.contains(name) && !c.reached.contains_key(name) {
        c.reached.insert(name.to_string(), now);
        *reached_pairs += 1;
    }
}

/// Label-filtered watchers on one kind in a set of clusters.
pub(super) struct Tracker {
    state: Mutex<TrackState>,
    changed: Notify,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for Tracker {
    fn drop(&mut self) {
        for t in self
            .tasks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

impl Tracker {
    pub(super) fn start(
        clients: &[Client],
        ar: &ApiResource,
        namespace: &str,
        selector: &str,
        version_of: impl Fn(&DynamicObject) -> Option<String> + Clone + Send + Sync + 'static,
    ) -> Arc<Tracker> {
        let tracker = Arc::new(Tracker {
            state: Mutex::new(TrackState {
                clusters: clients.iter().map(|_| ClusterTrack::default()).collect(),
                ..TrackState::default()
            }),
            changed: Notify::new(),
            tasks: Mutex::default(),
        });
        let mut tasks = Vec::new();
        for (i, client) in clients.iter().enumerate() {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, ar);
            let config = watcher::Config::default().labels(selector);
            // The task holds a weak reference, so dropping the tracker ends it.
            let weak = Arc::downgrade(&tracker);
            let version_of = version_of.clone();
            tasks.push(tokio::spawn(async move {
                let stream = watcher(api, config).default_backoff();
                futures::pin_mut!(stream);
                while let Some(ev) = stream.next().await {
                    let Some(t) = weak.upgrade() else { return };
                    match ev {
                        Ok(ev) => t.on_event(i, ev, &version_of),
                        Err(e) if flotilla_controllers::watch::is_expected_relist(&e) => {
                            tracing::debug!(error = %e, "benchmark watch expired; relisting")
                        }
                        Err(e) => warn!(error = %e, "benchmark watch failed; retrying"),
                    }
                }
            }));
        }
        *tracker.tasks.lock().unwrap_or_else(|e| e.into_inner()) = tasks;
        tracker
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TrackState> {
        // Plain maps and counters: consistent after any panic of a holder.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn on_event(
        &self,
        cluster: usize,
        ev: watcher::Event<DynamicObject>,
        version_of: &impl Fn(&DynamicObject) -> Option<String>,
    ) {
        let now = Instant::now();
        let mut guard = self.lock();
        let TrackState {
            clusters,
            want,
            wanted,
            reached_pairs,
        } = &mut *guard;
        let Some(c) = clusters.get_mut(cluster) else {
            return;
        };
        let mut reach = |c: &mut ClusterTrack, name: &str| {
            reach(c, want.as_ref(), wanted, reached_pairs, name, now);
        };
        match ev {
            watcher::Event::Apply(o) => {
                let name = o.name_any();
                c.current.insert(name.clone(), version_of(&o));
                c.writes += 1;
                c.last_write = Some(now);
                reach(c, &name);
            }
            watcher::Event::Delete(o) => {
                let name = o.name_any();
                c.current.remove(&name);
                c.writes += 1;
                c.last_write = Some(now);
                reach(c, &name);
            }
            watcher::Event::Init => c.relist = Some(HashMap::new()),
            watcher::Event::InitApply(o) => {
                let v = version_of(&o);
                c.relist
                    .get_or_insert_with(HashMap::new)
                    .insert(o.name_any(), v);
            }
            watcher::Event::InitDone => {
                let fresh = c.relist.take().unwrap_or_default();
                let old = std::mem::replace(&mut c.current, fresh);
                let names: HashSet<String> =
                    old.into_keys().chain(c.current.keys().cloned()).collect();
                for name in names {
                    reach(c, &name);
                }
                c.synced = true;
            }
        }
        drop(guard);
        self.changed.notify_waiters();
    }

    pub(super) async fn wait_synced(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.lock().clusters.iter().all(|c| c.synced) {
            if Instant::now() > deadline {
                bail!("benchmark watchers did not sync within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Starts a phase: from now on record when each of `names` reaches `want`.
    pub(super) fn expect(&self, want: Want, names: &[String]) {
        self.expect_in(want, names, None);
    }

    /// Starts a phase that waits only for the clusters `only` (indexes; `None`: all).
    pub(super) fn expect_in(&self, want: Want, names: &[String], only: Option<&[usize]>) {
        let now = Instant::now();
        let mut guard = self.lock();
        let st = &mut *guard;
        st.want = Some(want);
        st.wanted = names.iter().cloned().collect();
        st.reached_pairs = 0;
        for (i, c) in st.clusters.iter_mut().enumerate() {
            c.inactive = only.is_some_and(|only| !only.contains(&i));
            c.reached.clear();
            for name in names {
                reach(
                    c,
                    st.want.as_ref(),
                    &st.wanted,
                    &mut st.reached_pairs,
                    name,
                    now,
                );
            }
        }
    }

    /// Waits until every object of the phase reached the want in every cluster; returns
    /// per object the time it reached it in its last cluster.
    pub(super) async fn wait(&self, timeout: Duration) -> anyhow::Result<HashMap<String, Instant>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            if let Some(done) = self.all_reached() {
                return Ok(done);
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(deadline) => {
                    let st = self.lock();
                    let total = st.wanted.len() * st.active();
                    bail!("only {} of {total} objects reached the wanted state within {timeout:?}", st.reached_pairs);
                }
            }
        }
    }

    fn all_reached(&self) -> Option<HashMap<String, Instant>> {
        let st = self.lock();
        if st.reached_pairs < st.wanted.len() * st.active() {
            return None;
        }
        let mut done: HashMap<String, Instant> = HashMap::with_capacity(st.wanted.len());
        for c in &st.clusters {
            for (name, t) in &c.reached {
                let e = done.entry(name.clone()).or_insert(*t);
                if t > e {
                    *e = *t;
                }
            }
        }
        Some(done)
    }

    /// Per cluster, how many of `names` it holds at `version`.
    pub(super) fn held(&self, names: &[String], version: &str) -> Vec<usize> {
        self.lock()
            .clusters
            .iter()
            .map(|c| {
                names
                    .iter()
                    .filter(|n| {
                        c.current
                            .get(*n)
                            .is_some_and(|v| v.as_deref() == Some(version))
                    })
                    .count()
            })
            .collect()
    }

    /// Which of `names` any of `clusters` holds (in any version).
    pub(super) fn holders(&self, names: &[String], clusters: &[usize]) -> Vec<String> {
        let st = self.lock();
        names
            .iter()
            .filter(|n| {
                clusters.iter().any(|&i| {
                    st.clusters
                        .get(i)
                        .is_some_and(|c| c.current.contains_key(*n))
                })
            })
            .cloned()
            .collect()
    }

    /// How many clusters are watched.
    pub(super) fn clusters(&self) -> usize {
        self.lock().clusters.len()
    }

    /// Write events seen so far, in every cluster.
    pub(super) fn writes(&self) -> u64 {
        self.lock().clusters.iter().map(|c| c.writes).sum()
    }

    fn last_write(&self) -> Option<Instant> {
        self.lock()
            .clusters
            .iter()
            .filter_map(|c| c.last_write)
            .max()
    }

    /// Waits until no write was seen for [`QUIET`] (at most `timeout`).
    pub(super) async fn quiet(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let idle = self.last_write().map_or(QUIET, |t| t.elapsed());
            if idle >= QUIET || Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(QUIET - idle).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::workload::Kind;

    fn tracker(clusters: usize) -> Tracker {
        Tracker {
            state: Mutex::new(TrackState {
                clusters: (0..clusters).map(|_| ClusterTrack::default()).collect(),
                ..TrackState::default()
            }),
            changed: Notify::new(),
            tasks: Mutex::default(),
        }
    }

    fn cm(name: &str, v: &str) -> DynamicObject {
        Kind::ConfigMap.raw_object(name, v).expect("a valid object")
    }

    #[test]
    fn an_object_is_reached_once_every_cluster_shows_the_wanted_version() {
        let t = tracker(2);
        let names = vec!["a".to_string(), "b".to_string()];
        let version = |o: &DynamicObject| Kind::ConfigMap.version_of(o);
        t.expect(Want::Version("1".into()), &names);
        t.on_event(0, watcher::Event::Apply(cm("a", "1")), &version);
        t.on_event(1, watcher::Event::Apply(cm("a", "0")), &version);
        t.on_event(0, watcher::Event::Apply(cm("b", "1")), &version);
        t.on_event(1, watcher::Event::Apply(cm("b", "1")), &version);
        assert!(t.all_reached().is_none(), "a is at version 0 in cluster 1");
        t.on_event(1, watcher::Event::Apply(cm("a", "1")), &version);
        let done = t.all_reached().expect("all reached");
        assert_eq!(done.len(), 2);
        assert_eq!(t.writes(), 5);
    }

    #[test]
    fn a_phase_over_some_clusters_ignores_the_others() {
        let t = tracker(3);
        let names = vec!["a".to_string()];
        let version = |o: &DynamicObject| Kind::ConfigMap.version_of(o);
        t.expect_in(Want::Version("1".into()), &names, Some(&[0, 2]));
        t.on_event(0, watcher::Event::Apply(cm("a", "1")), &version);
        assert!(t.all_reached().is_none(), "cluster 2 lacks it");
        t.on_event(2, watcher::Event::Apply(cm("a", "1")), &version);
        assert_eq!(
            t.all_reached().map(|d| d.len()),
            Some(1),
            "cluster 1 is not awaited"
        );
        t.expect(Want::Version("1".into()), &names);
        assert!(t.all_reached().is_none(), "now cluster 1 counts again");
        t.on_event(1, watcher::Event::Apply(cm("a", "1")), &version);
        assert!(t.all_reached().is_some());
    }

    #[test]
    fn objects_missing_from_a_relist_count_as_deleted() {
        let t = tracker(1);
        let names = vec!["a".to_string(), "b".to_string()];
        let version = |o: &DynamicObject| Kind::ConfigMap.version_of(o);
        t.on_event(0, watcher::Event::Apply(cm("a", "1")), &version);
        t.on_event(0, watcher::Event::Apply(cm("b", "1")), &version);
        t.expect(Want::Absent, &names);
        assert!(t.all_reached().is_none());
        t.on_event(0, watcher::Event::Delete(cm("a", "1")), &version);
        t.on_event(0, watcher::Event::Init, &version);
        t.on_event(0, watcher::Event::InitDone, &version);
        assert_eq!(t.all_reached().map(|d| d.len()), Some(2));
    }
}
