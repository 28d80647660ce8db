//! The types the policy controller looks at: one per enabled FederatedTypeConfig, with a
//! cache of the Federated objects the controller made for it and — only once a
//! propagation policy selects the type, so a host without policies pays nothing — a cache
//! of its native objects. Also the pass that keeps those caches in step with the type
//! configs and the policies, and queues every object again when a policy, a type or a
//! cluster's name or labels change.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use flotilla_api::{
    FederatedTypeConfig,
    core::{FederatedTypeConfigSpec, PropagationMode},
    policy::MATERIALIZED_LABEL,
};
use flotilla_core::policy_select::group_of;
use flotilla_multicluster::{gate::Gate, tasks::AbortOnDrop};
use kube::{
    Api, Client, ResourceExt,
    api::DynamicObject,
    core::ApiResource,
    runtime::{
        reflector::{self, Store},
        watcher,
    },
};
use serde_json::Value;
use tokio::sync::Notify;

use super::{Ctx, Key};
use crate::{
    watch::{Change, WatchParams, watch_into},
    workqueue::WorkQueue,
};

/// One type as the reconcile sees it.
#[derive(Clone)]
pub(crate) struct TypeView {
    pub spec: FederatedTypeConfigSpec,
    pub target: ApiResource,
    pub fed: ApiResource,
    pub materialized: Store<DynamicObject>,
    pub materialized_synced: bool,
    /// The native objects' cache and whether it is listed; `None` while no policy
    /// selects the type.
    pub natives: Option<(Store<DynamicObject>, bool)>,
}

struct Cache {
    store: Store<DynamicObject>,
    synced: Arc<AtomicBool>,
    _task: AbortOnDrop,
}

struct TypeWatch {
    spec: FederatedTypeConfigSpec,
    materialized: Cache,
    natives: Option<Cache>,
}

/// Every watched type, by FederatedTypeConfig name.
pub(crate) struct Types {
    host: Client,
    queue: Arc<WorkQueue<Key>>,
    inner: Mutex<BTreeMap<String, TypeWatch>>,
    /// Set once the caches were first aligned with the type configs (before, an empty map
    /// would read as "everything listed").
    aligned: AtomicBool,
    /// Set when a cache finished listing, until [`run`] has queued every key again: the
    /// keys decided while it listed wait on a delay, and a status pass in between would
    /// read a partial view.
    relisted: Arc<AtomicBool>,
    /// Wakes [`run`] when a cache finished listing.
    listed: Arc<Notify>,
}

/// Annotation that exists only in this controller's cache of native objects, never in the
/// host: the manager that writes the object's status when it is not Flotilla (the cache
/// drops `managedFields`; see `policy_materialize::host_runs_it`).
pub(crate) const STATUS_WRITER: &str = "policy.flotilla.io/status-writer";

/// Before the managed fields go: who writes the status, and the spec cut down to what the
/// object's writers own (`written_fields`: the server's defaults stay out of the template).
fn shrink_native(o: &mut DynamicObject) {
    let managed = serde_json::to_value(&o.metadata.managed_fields).unwrap_or(Value::Null);
    let own = [flotilla_api::policy::POLICY_FIELD_MANAGER];
    if let Some(entries) = managed.as_array() {
        flotilla_core::written_fields::prune_spec(&mut o.data, entries, &own);
    }
    let view = serde_json::json!({"metadata": {"managedFields": managed}});
    if let Some(writer) = flotilla_core::policy_materialize::host_runs_it(&view, &own) {
        o.annotations_mut().insert(STATUS_WRITER.into(), writer);
    }
}

fn no_shrink(_: &mut DynamicObject) {}

impl Types {
    pub fn new(host: Client, queue: Arc<WorkQueue<Key>>) -> Self {
        Types {
            host,
            queue,
            inner: Mutex::new(BTreeMap::new()),
            aligned: AtomicBool::new(false),
            relisted: Arc::new(AtomicBool::new(false)),
            listed: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, TypeWatch>> {
        // A panic while holding the lock leaves a map that is still whole.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The type configured by the FederatedTypeConfig `ftc`.
    pub fn get(&self, ftc: &str) -> Option<TypeView> {
        let map = self.lock();
        let t = map.get(ftc)?;
        Some(TypeView {
            spec: t.spec.clone(),
            target: t.spec.target_type.to_kube(),
            fed: t.spec.federated_type.to_kube(),
            materialized: t.materialized.store.clone(),
            materialized_synced: t.materialized.synced.load(Ordering::Acquire),
            natives: t
                .natives
                .as_ref()
                .map(|c| (c.store.clone(), c.synced.load(Ordering::Acquire))),
        })
    }

    /// Whether every cache (Federated objects, and natives where watched) has listed.
    pub fn all_synced(&self) -> bool {
        self.aligned.load(Ordering::Acquire)
            && !self.relisted.load(Ordering::Acquire)
            && self.lock().values().all(|t| {
                std::iter::once(&t.materialized)
                    .chain(t.natives.as_ref())
                    .all(|c| c.synced.load(Ordering::Acquire))
            })
    }

    /// Every type's name and its target's `(group, kind)`.
    pub fn targets(&self) -> Vec<(String, String, String)> {
        self.lock()
            .iter()
            .map(|(n, t)| {
                (
                    n.clone(),
                    t.spec.target_type.group.clone(),
                    t.spec.target_type.kind.clone(),
                )
            })
            .collect()
    }

    /// Every key the caches hold: native objects and the Federated objects made for them.
    pub fn all_keys(&self) -> Vec<Key> {
        let map = self.lock();
        let mut keys = BTreeSet::new();
        for (name, t) in map.iter() {
            let caches = std::iter::once(&t.materialized).chain(t.natives.as_ref());
            for c in caches {
                for o in c.store.state() {
                    keys.insert((
                        name.clone(),
                        o.namespace().unwrap_or_default(),
                        o.name_any(),
                    ));
                }
            }
        }
        keys.into_iter().collect()
    }

    /// Starts and stops caches so that every enabled type has its Federated objects'
    /// cache, and those `selected` names `(group, kind)` of have their natives' too.
    /// Returns whether anything started or stopped.
    fn align(&self, ftcs: &[FederatedTypeConfig], selected: &BTreeSet<(String, String)>) -> bool {
        let enabled: BTreeMap<String, &FederatedTypeConfigSpec> = ftcs
            .iter()
            .filter(|f| {
                f.spec.propagation == PropagationMode::Enabled
                    && f.metadata.deletion_timestamp.is_none()
            })
            .map(|f| (f.name_any(), &f.spec))
            .collect();
        let mut map = self.lock();
        let before = map.len();
        map.retain(|name, t| enabled.get(name).is_some_and(|s| **s == t.spec));
        let mut changed = map.len() != before;
        for (name, spec) in enabled {
            let t = map.entry(name.clone()).or_insert_with(|| {
                changed = true;
                TypeWatch {
                    spec: spec.clone(),
                    materialized: self.cache(
                        &name,
                        spec.federated_type.to_kube(),
                        Some(MATERIALIZED_LABEL),
                        no_shrink,
                    ),
                    natives: None,
                }
            });
            let wanted = selected.contains(&(
                spec.target_type.group.clone(),
                spec.target_type.kind.clone(),
            ));
            if wanted && t.natives.is_none() {
                t.natives =
                    Some(self.cache(&name, spec.target_type.to_kube(), None, shrink_native));
                changed = true;
            }
        }
        changed
    }

    /// A host cache of `ar` (only objects with `label` when set) queueing each object's key.
    fn cache(
        &self,
        ftc: &str,
        ar: ApiResource,
        label: Option<&str>,
        shrink: fn(&mut DynamicObject),
    ) -> Cache {
        let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
        let store = writer.as_reader();
        let synced = Arc::new(AtomicBool::new(false));
        let mut params = WatchParams::host(if label.is_some() {
            "policy-made federated object"
        } else {
            "policy-selected native object"
        });
        params.label_selector = label.map(|l| format!("{l}=true"));
        params.config = watcher::Config::default();
        let (queue, flag, ftc) = (self.queue.clone(), synced.clone(), ftc.to_string());
        let (relisted, listed) = (self.relisted.clone(), self.listed.clone());
        let task = tokio::spawn(watch_into(
            Api::<DynamicObject>::all_with(self.host.clone(), &ar),
            writer,
            params,
            shrink,
            move |c| {
                match c {
                    Change::Object(o) => {
                        queue.add((ftc.clone(), o.namespace().unwrap_or_default(), o.name_any()))
                    }
                    // Queued at the list's end (every key, from the cache that shows it):
                    // a reconcile taken now would read the manifest as it was before the
                    // list, and could write that older template into its federated object.
                    Change::Listing | Change::Listed(_) => {}
                    Change::Synced => {
                        flag.store(true, Ordering::Release);
                        relisted.store(true, Ordering::Release);
                        listed.notify_one();
                    }
                }
                std::ops::ControlFlow::Continue(())
            },
        ));
        Cache {
            store,
            synced,
            _task: AbortOnDrop::from(vec![task]),
        }
    }
}

/// The `(group, kind)` every propagation policy selects.
fn selected_kinds(ctx: &Ctx) -> BTreeSet<(String, String)> {
    let p = &ctx.policies;
    let pp = p.propagation.state();
    let cpp = p.cluster_propagation.state();
    pp.iter()
        .flat_map(|x| x.spec.resource_selectors.clone())
        .chain(
            cpp.iter()
                .flat_map(|x| x.spec.spec.resource_selectors.clone()),
        )
        .map(|s| (group_of(&s.api_version).to_string(), s.kind))
        .collect()
}

/// The names and labels of every cluster: what override targets look at.
fn cluster_fingerprint(ctx: &Ctx) -> Vec<(String, BTreeMap<String, String>)> {
    let mut v: Vec<_> = ctx
        .clusters
        .snapshot()
        .into_iter()
        .map(|c| (c.name, c.labels))
        .collect();
    v.sort();
    v
}

/// Keeps the caches in step and queues every object on a change of policy, type or
/// cluster labels. Runs until aborted.
pub(crate) async fn run(
    ctx: Arc<Ctx>,
    ftcs: Store<FederatedTypeConfig>,
    changed: Arc<Notify>,
    gate: Gate,
) {
    if !gate.opened().await {
        return;
    }
    let mut clusters = ctx.clusters.changes();
    let mut fingerprint = cluster_fingerprint(&ctx);
    loop {
        ctx.types.align(
            &ftcs
                .state()
                .iter()
                .map(|f| (**f).clone())
                .collect::<Vec<_>>(),
            &selected_kinds(&ctx),
        );
        // Cleared before the keys are read: a cache that lists meanwhile sets it again.
        ctx.types.relisted.store(false, Ordering::Release);
        for key in ctx.types.all_keys() {
            ctx.queue.add(key);
        }
        ctx.types.aligned.store(true, Ordering::Release);
        ctx.status_wake.notify_one();
        loop {
            tokio::select! {
                _ = changed.notified() => break,
                _ = ctx.types.listed.notified() => break,
                r = clusters.changed() => {
                    if r.is_err() {
                        return;
                    }
                    let now = cluster_fingerprint(&ctx);
                    if now != fingerprint {
                        fingerprint = now;
                        break;
                    }
                }
            }
        }
        // Let a burst of changes (an `kubectl apply -f` of several policies) settle.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
