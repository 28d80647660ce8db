//! The Work writes of one type's Pull clusters, batched into bundles. A reconcile does not
//! write a Work: it hands the bundler a change for its object (upsert this manifest, remove
//! it) and returns; the bundler coalesces every pending change of a short interval and then
//! writes each affected bundle once ([`plan_group`]: the group's chunks as the host holds
//! them, the changes applied, the split rule `flotilla_core::bundle::assign`, a write only
//! for a chunk whose content changed). Many objects changing at once thus cost a few Work
//! writes, and a steady state — or a restart, which starts with nothing pending — none.
//!
//! A chunk's content is read from the host's Work cache, or from this process's own last
//! write of it while the cache has not shown that write yet (by the uid and generation the
//! API server answered with: [`super::bundle_standins`]), so two flushes in a row never
//! lose each other's changes, however late the cache is. Legacy one-object Works being
//! taken over are deleted only after the bundle that now holds their object is written:
//! the agent sees the bundle first and hands the object over without a member write.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use flotilla_api::{
    FIELD_MANAGER,
    work::{
        BUNDLE_MAX_BYTES, BUNDLE_MAX_BYTES_CEILING, WORK_BUNDLE_CHUNK, WORK_BUNDLE_LABEL,
        WORK_BUNDLE_NAMESPACE, WORK_COLLECT_STATUS, WORK_TYPE_LABEL, Work, WorkSpec, bundle_name,
        cluster_namespace, type_label,
    },
};
use flotilla_core::bundle::due;
use flotilla_multicluster::{
    runner::{Action, PassRunner, Retry},
    unread,
    watch::Change as WatchChange,
    workqueue::WorkQueue,
};
use futures::StreamExt;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    core::ApiResource,
    runtime::reflector::Store,
};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tracing::{info, warn};

pub use super::bundle_plan::*;
use super::{
    Key,
    bundle_order::stages,
    bundle_standins::{StandIns, Wrote},
};

/// Environment variable overriding [`BUNDLE_MAX_BYTES`] (bytes, at most
/// [`BUNDLE_MAX_BYTES_CEILING`]).
pub const MAX_BYTES_ENV: &str = "FLOTILLA_WORK_BUNDLE_MAX_BYTES";

/// The bound `env` (the value of [`MAX_BYTES_ENV`]) gives: the default when it is absent,
/// not a number or 0; never above [`BUNDLE_MAX_BYTES_CEILING`].
pub fn bound_of(env: Option<&str>) -> usize {
    match env.and_then(|v| v.trim().parse::<usize>().ok()) {
        Some(n) if n > 0 => n.min(BUNDLE_MAX_BYTES_CEILING),
        _ => BUNDLE_MAX_BYTES,
    }
}
/// A process-wide override of the bound (0: none), for end-to-end tests that need a
/// split with small objects; each test runs in its own process.
static MAX_BYTES_OVERRIDE: AtomicUsize = AtomicUsize::new(0);

/// Sets the bound of every bundler started afterwards in this process (tests only; 0
/// restores the default).
pub fn set_max_bytes_for_tests(bytes: usize) {
    MAX_BYTES_OVERRIDE.store(bytes, Ordering::Relaxed);
}

/// A group is written at most once per this interval (from the end of its last write):
/// a stream of changes to one group costs a write per interval, not one per change.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(200);
/// How long the first change of a group not written for [`FLUSH_INTERVAL`] waits for the
/// changes that come with it.
pub const GATHER: Duration = Duration::from_millis(25);
/// The longest a change waits for the changes of its chunk still coming (objects whose
/// reconcile is queued: [`held`]).
pub const MAX_HOLD: Duration = Duration::from_secs(1);
/// How soon a failed bundle write is tried again.
const RETRY: Duration = Duration::from_secs(1);
/// How many groups are written at once.
const GROUPS_AT_ONCE: usize = 8;

/// A pending change and when the first change of its key since the last write came.
type Since = (Change, Instant);

#[derive(Default)]
struct Pending {
    changes: BTreeMap<Group, BTreeMap<Key, Since>>,
    /// Legacy Works to delete once their group is written: (cluster, Work name).
    retire: BTreeMap<Group, BTreeSet<String>>,
}

/// The bundler of one type.
pub struct Bundler {
    host: Client,
    target: ApiResource,
    collect_status: bool,
    limit: usize,
    works: Store<Work>,
    pending: Mutex<Pending>,
    /// This process's writes the cache does not show yet.
    written: StandIns,
    failed: Mutex<HashMap<Group, String>>,
    /// When each group's last write ended.
    flushed: Mutex<HashMap<Group, Instant>>,
    wake: Arc<Notify>,
    /// The reconcile queue of the objects whose changes come here: a chunk waits for its
    /// objects still in it ([`held`]).
    queue: Option<Arc<WorkQueue<Key>>>,
}

impl Bundler {
    /// The bundler of `target`'s Works, reading the host's Work cache `works`.
    pub fn new(
        host: Client,
        target: ApiResource,
        collect_status: bool,
        works: Store<Work>,
    ) -> Self {
        let limit = match MAX_BYTES_OVERRIDE.load(Ordering::Relaxed) {
            0 => {
                let env = std::env::var(MAX_BYTES_ENV).ok();
                let bound = bound_of(env.as_deref());
                if let Some(v) = env.filter(|v| v.trim() != bound.to_string()) {
                    warn!(
                        value = %v, bound,
                        "{MAX_BYTES_ENV} is not a number of bytes from 1 to {BUNDLE_MAX_BYTES_CEILING}: bundles are bounded at {bound}"
                    );
                }
                bound
            }
            n => n,
        };
        Bundler {
            host,
            target,
            collect_status,
            limit,
            works,
            pending: Mutex::default(),
            written: StandIns::default(),
            failed: Mutex::default(),
            flushed: Mutex::default(),
            wake: Arc::new(Notify::new()),
            queue: None,
        }
    }

    /// Holds a chunk's changes while objects of the chunk wait in `queue`, their
    /// reconciles' queue (at most [`MAX_HOLD`]).
    pub fn waiting_on(mut self, queue: Arc<WorkQueue<Key>>) -> Self {
        self.queue = Some(queue);
        self
    }

    /// The group of `key` in `cluster`.
    pub fn group(cluster: &str, key: &Key) -> Group {
        (cluster.to_owned(), key.0.clone())
    }

    /// Queues a change of `key` in `cluster`; `retire`: a legacy Work to delete once the
    /// group is written.
    pub fn change(&self, cluster: &str, key: &Key, change: Change, retire: Option<String>) {
        let group = Self::group(cluster, key);
        let mut p = lock(&self.pending);
        if let Some(name) = retire {
            p.retire.entry(group.clone()).or_default().insert(name);
        }
        let since = (p.changes.get(&group).and_then(|c| c.get(key)))
            .map_or_else(Instant::now, |(_, since)| *since);
        p.changes
            .entry(group)
            .or_default()
            .insert(key.clone(), (change, since));
        drop(p);
        self.wake.notify_one();
    }

    /// Drops a pending change of `key` (its object is gone before it was written);
    /// whether one was pending.
    pub fn cancel(&self, cluster: &str, key: &Key) -> bool {
        let group = Self::group(cluster, key);
        let mut p = lock(&self.pending);
        p.changes
            .get_mut(&group)
            .is_some_and(|c| c.remove(key).is_some())
    }

    /// The last failure writing the group, if its last flush failed.
    pub fn failure(&self, cluster: &str, key: &Key) -> Option<String> {
        lock(&self.failed).get(&Self::group(cluster, key)).cloned()
    }

    /// Writes pending changes: a group [`GATHER`] after its first change, then at most once
    /// per [`FLUSH_INTERVAL`]; a failed flush again after [`RETRY`], until the task is
    /// aborted.
    pub async fn run(self: Arc<Self>) {
        let mut runner = PassRunner::new("work-bundles", self.wake.clone())
            .debounce(GATHER)
            .retry(Retry::Fixed(RETRY));
        while runner.next().await.is_some() {
            let written = self.flush().await;
            runner.finish(match (written, self.next_due()) {
                (false, _) => Action::backoff(),
                (true, Some(after)) => Action::Requeue(after),
                (true, None) => Action::AwaitChange,
            });
        }
    }

    /// How soon the first pending group is due (none pending: `None`).
    fn next_due(&self) -> Option<Duration> {
        let p = lock(&self.pending);
        let (ready, later) = due(
            p.changes.keys(),
            &lock(&self.flushed),
            Instant::now(),
            FLUSH_INTERVAL,
        );
        if ready.is_empty() {
            later
        } else {
            Some(Duration::ZERO)
        }
    }

    /// Writes every pending group that is due; `false` when one failed (its changes are put
    /// back).
    async fn flush(&self) -> bool {
        let pending = {
            let mut p = lock(&self.pending);
            let mut flushed = lock(&self.flushed);
            let now = Instant::now();
            flushed.retain(|_, at| now.duration_since(*at) < FLUSH_INTERVAL);
            let (due, _) = due(p.changes.keys(), &flushed, now, FLUSH_INTERVAL);
            let mut taken = Pending::default();
            for group in due {
                let changes = p.changes.remove(&group).unwrap_or_default();
                taken.retire.extend(p.retire.remove_entry(&group));
                taken.changes.insert(group, changes);
            }
            taken
        };
        let mut retire = pending.retire;
        let waiting = (self.queue.as_ref())
            .map(|q| q.waiting())
            .unwrap_or_default();
        let waiting = &waiting;
        let jobs = pending.changes.into_iter().map(|(group, changes)| {
            let retire = retire.remove(&group).unwrap_or_default();
            async move {
                let (changes, result) = self.flush_group(&group, changes, &retire, waiting).await;
                lock(&self.flushed).insert(group.clone(), Instant::now());
                (group, changes, retire, result)
            }
        });
        let done: Vec<_> = futures::stream::iter(jobs)
            .buffer_unordered(GROUPS_AT_ONCE)
            .collect()
            .await;
        let mut all_written = true;
        for (group, changes, retire, result) in done {
            match result {
                Ok(()) => {
                    lock(&self.failed).remove(&group);
                    if !changes.is_empty() {
                        // Held back: its legacy Works wait with them.
                        self.requeue(group, changes, retire);
                    }
                }
                Err(message) => {
                    warn!(cluster = %group.0, namespace = ?group.1, %message, "writing a bundle failed; retrying");
                    lock(&self.failed).insert(group.clone(), message);
                    self.requeue(group, changes, retire);
                    all_written = false;
                }
            }
        }
        all_written
    }

    /// Puts back the changes of a failed flush, or the held ones, under any newer change
    /// of the same key (which keeps the earlier arrival).
    fn requeue(&self, group: Group, changes: BTreeMap<Key, Since>, retire: BTreeSet<String>) {
        let mut p = lock(&self.pending);
        let newer = p.changes.entry(group.clone()).or_default();
        for (key, (change, since)) in changes {
            let entry = newer.entry(key).or_insert((change, since));
            entry.1 = entry.1.min(since);
        }
        p.retire.entry(group).or_default().extend(retire);
    }

    /// Writes the group's changes but those [`held`] for the changes still coming; returns
    /// the changes not written (all of them on failure, the held ones on success).
    async fn flush_group(
        &self,
        group: &Group,
        changes: BTreeMap<Key, Since>,
        retire: &BTreeSet<String>,
        waiting: &HashSet<Key>,
    ) -> (BTreeMap<Key, Since>, Result<(), String>) {
        let Some(base) = self.base(group) else {
            // Held whole until the cache catches up with what it already showed.
            return (changes, Ok(()));
        };
        // Moved apart, not cloned: a change carries its whole manifest.
        let (mut plain, mut since) = (BTreeMap::new(), BTreeMap::new());
        for (k, (c, at)) in changes {
            since.insert(k.clone(), at);
            plain.insert(k, c);
        }
        let waiting: BTreeSet<Key> = (waiting.iter())
            .filter(|k| k.0 == group.1 && !plain.contains_key(*k))
            .cloned()
            .collect();
        let now = Instant::now();
        let overdue = |k: &Key| (since.get(k)).is_none_or(|at| now.duration_since(*at) >= MAX_HOLD);
        let hold = held(&base, &plain, self.limit, &waiting, overdue);
        let (kept, release): (BTreeMap<Key, Change>, BTreeMap<Key, Change>) =
            plain.into_iter().partition(|(k, _)| hold.contains(k));
        let result = self
            .write_group(group, &base, &release, retire, hold.is_empty())
            .await;
        // What is not written goes back with its arrival: the held changes, or all on failure.
        let unwritten = match result {
            Ok(()) => kept,
            Err(_) => kept.into_iter().chain(release).collect(),
        };
        let back = (unwritten.into_iter())
            .filter_map(|(k, c)| since.remove(&k).map(|at| (k, (c, at))))
            .collect();
        (back, result)
    }

    /// Writes `changes` to the group's chunks (`base`), then — when `retire_now`, nothing
    /// of the group held back — deletes the legacy Works in `retire`.
    async fn write_group(
        &self,
        group: &Group,
        base: &BTreeMap<usize, Chunk>,
        changes: &BTreeMap<Key, Change>,
        retire: &BTreeSet<String>,
        retire_now: bool,
    ) -> Result<(), String> {
        let namespace = cluster_namespace(&group.0);
        let api: Api<Work> = Api::namespaced(self.host.clone(), &namespace);
        for stage in stages(base, plan_group(base, changes, self.limit)) {
            let writes = (stage.into_iter()).map(|(index, write)| {
                self.write_chunk(&api, group, (index, base.get(&index)), write)
            });
            futures::future::join_all(writes)
                .await
                .into_iter()
                .collect::<Result<Vec<()>, String>>()?;
        }
        if !retire_now {
            return Ok(());
        }
        for name in retire {
            match unread::delete(&api, name, &DeleteParams::default()).await {
                Ok(_) => info!(cluster = %group.0, work = %name, "a bundle took over the Work"),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(format!("deleting Work {name}: {}", message(&e))),
            }
        }
        Ok(())
    }

    /// Applies or deletes chunk `index` of the group (`old`: as it was read), and remembers
    /// the write.
    async fn write_chunk(
        &self,
        api: &Api<Work>,
        group: &Group,
        (index, old): (usize, Option<&Chunk>),
        write: ChunkWrite,
    ) -> Result<(), String> {
        let name = bundle_name(
            &self.target.plural,
            &self.target.group,
            group.1.as_deref(),
            index,
        );
        let read = old.map_or_else(|| "nothing".to_owned(), |c| c.read.to_string());
        let namespace = cluster_namespace(&group.0);
        // What stood in for the chunk when it was planned.
        let standin = self.written.describe(&namespace, &name);
        let wrote = match write {
            ChunkWrite::Apply { spec, .. } => {
                let body = self.body(group, index, &name, &spec);
                let pp = PatchParams::apply(FIELD_MANAGER).force();
                let stamp = unread::patch_stamped(api, &name, &pp, &Patch::Apply(&body))
                    .await
                    .map_err(|e| format!("writing Work {name}: {}", message(&e)))?;
                let ChunkDiff {
                    added,
                    changed,
                    removed,
                } = chunk_diff(old, &spec);
                let manifests = spec.workload.manifests.len();
                let wrote = Read::own_write(&stamp);
                info!(cluster = %group.0, work = %name, manifests, added, changed, removed, %read, %wrote, %standin, "wrote a bundle");
                Wrote::Applied { spec, stamp }
            }
            ChunkWrite::Delete => {
                // The Work the deletion was planned from (the cache's, or this process's own
                // write standing in).
                let uid = old.and_then(|c| c.read.uid.clone());
                match unread::delete(api, &name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(format!("deleting Work {name}: {}", message(&e))),
                }
                info!(cluster = %group.0, work = %name, %read, %standin, "deleted an emptied bundle");
                Wrote::Deleted { uid }
            }
        };
        self.written.record(&namespace, &name, group, index, wrote);
        Ok(())
    }

    /// A change of the watch of this type's Works (after the cache took it in): a write of
    /// this process an event shows stands in no more, and no group is planned while the
    /// watch lists ([`StandIns::observe`]).
    pub fn observe(&self, change: &WatchChange<'_, Work>) {
        self.written.observe(change, &self.works);
    }

    /// The group's chunks: each from the cache, or from this process's own last write
    /// while the cache has not shown it; `None` while the cache holds one of them as it
    /// was before a write of this process it already showed, or while the Works watch
    /// lists (see [`StandIns::overlay`]).
    fn base(&self, group: &Group) -> Option<BTreeMap<usize, Chunk>> {
        let namespace = cluster_namespace(&group.0);
        let mut out = BTreeMap::new();
        let mut read = BTreeMap::new();
        for w in self.works.state() {
            if w.namespace().as_deref() != Some(namespace.as_str()) || !w.is_bundle() {
                continue;
            }
            let ann = w.annotations();
            if ann.get(WORK_BUNDLE_NAMESPACE) != group.1.as_ref() {
                continue;
            }
            let Some(index) = ann.get(WORK_BUNDLE_CHUNK).and_then(|c| c.parse().ok()) else {
                continue;
            };
            let collect = ann.get(WORK_COLLECT_STATUS).map(String::as_str);
            let current_metadata =
                collect == Some(if self.collect_status { "true" } else { "false" });
            out.insert(
                index,
                Chunk {
                    entries: entries_of(&w.spec),
                    current_metadata,
                    read: Read {
                        own_write: false,
                        uid: w.metadata.uid.clone(),
                        generation: w.metadata.generation,
                    },
                },
            );
            read.insert(w.name_any(), w);
        }
        let overlaid = (self.written).overlay(group, &namespace, &self.works, &read, &mut out);
        (!overlaid.waits()).then_some(out)
    }

    /// The Work of chunk `index` of `group`.
    fn body(&self, group: &Group, index: usize, name: &str, spec: &WorkSpec) -> Value {
        let mut annotations = json!({
            WORK_BUNDLE_CHUNK: index.to_string(),
            WORK_COLLECT_STATUS: self.collect_status.to_string(),
        });
        if let Some(ns) = &group.1 {
            annotations[WORK_BUNDLE_NAMESPACE] = json!(ns);
        }
        json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1",
            "kind": "Work",
            "metadata": {
                "name": name,
                "namespace": cluster_namespace(&group.0),
                "labels": {
                    WORK_TYPE_LABEL: type_label(&self.target.plural, &self.target.group),
                    WORK_BUNDLE_LABEL: "true",
                },
                "annotations": annotations,
            },
            "spec": spec,
        })
    }
}

fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
#[path = "bundles_tests.rs"]
mod tests;
