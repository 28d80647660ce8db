//! The agent's watch caches of its own member cluster, so that deciding costs no request:
//! one label-selected watch per kind the agent has applied (objects labelled
//! `kubefed.io/managed`, as push mode's member caches), an index from each applied object
//! to the Work that applied it — so an edit in the member requeues that Work at once and
//! drift is repaired on the watch event, not on the resync — and the agent's own recent
//! writes, so a cache that has not caught up with a write is not taken for drift. Each
//! cached object keeps a digest of its `managedFields` ([`super::drift::keep_digest`]) so a
//! drift names its writer; the full list is dropped.

use std::{
    collections::HashMap,
    ops::ControlFlow,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use flotilla_api::MANAGED_LABEL;
use flotilla_core::member::{HASH_ANNOTATION, recorded_hash};
use flotilla_multicluster::{
    tasks::AbortOnDrop,
    watch::{Change, WatchParams, watch_into},
    workqueue::WorkQueue,
};
use kube::{
    Api, Client, ResourceExt,
    core::{ApiResource, DynamicObject},
    runtime::{
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use serde_json::Value;

use super::own_writes::OwnWrites;

/// One member object: (group, resource, namespace, name).
pub type ObjectId = (String, String, String, String);

/// The id of `name` in `namespace` of the resource `ar`.
pub fn object_id(ar: &ApiResource, namespace: &str, name: &str) -> ObjectId {
    (
        ar.group.clone(),
        ar.plural.clone(),
        namespace.to_owned(),
        name.to_owned(),
    )
}

/// One kind's cache and whether its first list has completed.
struct KindCache {
    store: Store<DynamicObject>,
    synced: Arc<AtomicBool>,
}

/// What the cache says about one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Cached {
    /// The kind's cache is not complete yet (or the object is not cacheable): read it live.
    Unknown,
    /// The cache never showed the agent's write of the desired manifest, made longer ago
    /// than the agent trusts a write to stand in ([`OwnWrites::unshown`]): read it live, and
    /// a member copy carrying that manifest stands in again.
    Unshown,
    /// The object as the cache holds it (`None`: absent); `lagging` when the agent's own
    /// recent write stands in for a cache that has not shown it yet.
    Known {
        /// The object.
        object: Option<Value>,
        /// Whether the cache lags behind the agent's own write.
        lagging: bool,
    },
}

/// Watch caches of every kind the agent applied, the owner index and recent writes.
pub struct ObjectCache {
    client: Client,
    kinds: Mutex<HashMap<(String, String, String), KindCache>>,
    owners: Arc<Mutex<HashMap<ObjectId, String>>>,
    recent: Arc<Mutex<OwnWrites>>,
    queue: Arc<WorkQueue<String>>,
    tasks: Mutex<AbortOnDrop>,
}

impl ObjectCache {
    /// Caches of the member behind `client`; a change to an applied object queues its Work
    /// on `queue`.
    pub fn new(client: Client, queue: Arc<WorkQueue<String>>) -> Self {
        ObjectCache {
            client,
            kinds: Mutex::default(),
            owners: Arc::default(),
            recent: Arc::default(),
            queue,
            tasks: Mutex::default(),
        }
    }

    /// Starts the watch of a kind unless it runs already.
    pub fn ensure(&self, ar: &ApiResource) {
        let key = (ar.group.clone(), ar.version.clone(), ar.plural.clone());
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        if kinds.contains_key(&key) {
            return;
        }
        let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
        let synced = Arc::new(AtomicBool::new(false));
        kinds.insert(
            key,
            KindCache {
                store: writer.as_reader(),
                synced: synced.clone(),
            },
        );
        let params = WatchParams {
            what: "applied objects",
            cluster: None,
            label_selector: Some(format!("{MANAGED_LABEL} in (true,false)")),
            config: watcher::Config::default(),
            failures: flotilla_multicluster::watch::FailureLog::Warn,
        };
        let (owners, queue, kind) = (self.owners.clone(), self.queue.clone(), ar.clone());
        let (recent, store) = (self.recent.clone(), writer.as_reader());
        let task = tokio::spawn(watch_into(
            Api::<DynamicObject>::all_with(self.client.clone(), ar),
            writer,
            params,
            super::drift::keep_digest,
            move |change| {
                let owners = owners.lock().unwrap_or_else(|e| e.into_inner());
                match change {
                    Change::Object(o) => {
                        let id =
                            object_id(&kind, &o.namespace().unwrap_or_default(), &o.name_any());
                        let hash = o.annotations().get(HASH_ANNOTATION).map(String::as_str);
                        lock(&recent).observed(&id, hash);
                        if let Some(work) = owners.get(&id) {
                            queue.add(work.clone());
                        }
                    }
                    // The cache shows a list only at its end, and until then holds the
                    // objects as they were: a listed object neither ends a stand-in nor
                    // queues its Work (both happen at the end, for the whole kind).
                    Change::Listed(_) => {}
                    Change::Listing => lock(&recent).listing(&kind.group, &kind.plural),
                    Change::Synced => {
                        synced.store(true, Ordering::Release);
                        let listed = |id: &ObjectId| stored_hash(&store, &kind, id);
                        lock(&recent).relisted(&kind.group, &kind.plural, listed);
                        // A relist may have dropped objects deleted while the watch was
                        // down, without an event: their Works look again.
                        for (id, work) in owners.iter() {
                            if id.0 == kind.group && id.1 == kind.plural {
                                queue.add(work.clone());
                            }
                        }
                    }
                }
                ControlFlow::Continue(())
            },
        ));
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
    }

    /// The object as the cache holds it, corrected by the agent's own recent write of
    /// `desired_hash` when the cache has not shown it yet ([`OwnWrites`]).
    pub fn lookup(&self, ar: &ApiResource, id: &ObjectId, desired_hash: Option<&str>) -> Cached {
        let kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        let key = (ar.group.clone(), ar.version.clone(), ar.plural.clone());
        let Some(kind) = kinds.get(&key) else {
            return Cached::Unknown;
        };
        if !kind.synced.load(Ordering::Acquire) {
            return Cached::Unknown;
        }
        let cached = (kind.store.get(&object_ref(ar, id)))
            .map(|o| serde_json::to_value(o.as_ref()).unwrap_or(Value::Null));
        let recent = lock(&self.recent);
        if let Some(want) = desired_hash
            && cached.as_ref().and_then(recorded_hash) != Some(want)
            && recent.unshown(id, want)
        {
            return Cached::Unshown;
        }
        let (object, lagging) = super::plan::newest_view(cached, recent.get(id), desired_hash);
        Cached::Known { object, lagging }
    }

    /// Remembers the agent's write of `hash` (the object the member returned).
    pub fn remember_write(&self, id: ObjectId, hash: Option<&str>, obj: Value) {
        lock(&self.recent).record(id, hash, obj);
    }

    /// Records that `work` owns the object (its edits requeue the Work).
    pub fn own(&self, id: ObjectId, work: &str) {
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, work.to_owned());
    }

    /// Forgets the object's owner and recent write (pruned or released).
    pub fn disown(&self, id: &ObjectId) {
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        lock(&self.recent).forget(id);
    }
}

fn object_ref(ar: &ApiResource, id: &ObjectId) -> ObjectRef<DynamicObject> {
    let oref = ObjectRef::new_with(&id.3, ar.clone());
    match id.2.is_empty() {
        true => oref,
        false => oref.within(&id.2),
    }
}

/// The hash annotation of `id` as `store` holds it.
fn stored_hash(store: &Store<DynamicObject>, ar: &ApiResource, id: &ObjectId) -> Option<String> {
    let object = store.get(&object_ref(ar, id))?;
    object.annotations().get(HASH_ANNOTATION).cloned()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
