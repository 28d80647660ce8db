//! The sync (propagation) controller of one federated type: template + placement +
//! overrides → member objects, with per-cluster status on the federated object.
//!
//! Wiring (this module): a reflector on the Federated&lt;Kind&gt; in the host, a
//! [`MemberWatch`] of the target kind in every Ready member (only `kubefed.io/managed=true`
//! objects are cached), the FederatedNamespace reflector for namespace placement, and
//! cluster-set changes all feed one [`WorkQueue`] of host keys. Workers reconcile keys
//! concurrently (`maxConcurrentReconciles`); within one reconcile every cluster is
//! dispatched at once, each bounded by its own semaphore, and a write that runs long after
//! the others finished goes on after the reconcile ([`inflight`]), so a slow member does
//! not hold the workers the other members' objects need.
//!
//! One federated object flows: [`reconcile`] (entry branching) → [`observe`] (what each
//! member holds) → [`plan`] (pure decisions) → [`dispatch`] (member writes) → [`status`]
//! (status and Events); deletion in [`deletion`], strays in [`strays`].

mod action;
mod breaker;
mod cluster_run;
mod ctl;
mod delete_options;
mod deletion;
mod dependencies;
mod dependency_hosts;
mod dispatch;
mod drift;
mod finalizer;
mod host;
mod inflight;
mod memory;
mod observe;
mod orphans;
pub mod plan;
pub mod pull;
mod pull_drift;
mod reconcile;
mod registry_wait;
mod rollout;
pub(crate) mod scheduled;
mod status;
mod strays;
mod twins;
mod type_info;

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{Arc, Mutex},
    time::Duration,
};

use flotilla_api::{
    MANAGED_LABEL,
    core::{EffectiveConfig, FederatedTypeConfigSpec},
};
use flotilla_multicluster::{
    WatchOptions,
    gate::Gate,
    index::Indexer,
    packed,
    runner::{KeyedRunner, Report, RunMetrics},
};
use kube::{
    Api, Client, ResourceExt,
    core::{ApiResource, DynamicObject},
    runtime::{
        events::Recorder,
        reflector::{self, Store},
        watcher,
    },
};
use tokio::sync::{Semaphore, broadcast::error::RecvError, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub use action::{Action, Error, ReconcileResult};
pub use delete_options::parse_delete_options;
/// A rollout's revision of a spec and the labels of its ControllerRevisions (`rollout undo`).
pub use rollout::{KIND_LABEL, NAME_LABEL, name_label, revision_of, revisions_selector};

use crate::ftc_schema::Pruned;
use crate::{
    metrics::{Metrics, ReconcileLabels},
    multicluster::{ClusterEvent, ClusterSet, MemberEvent, MemberWatch},
    watch::{Change, reflect, reflect_shrunk},
    workqueue::WorkQueue,
};
use ctl::Ctl;

/// The controller name on Events the sync controllers publish.
const REPORTING_CONTROLLER: &str = "flotilla-sync";
/// Concurrent operations per member cluster, across every federated type.
const PER_CLUSTER_CONCURRENCY: usize = 64;
/// Full resync period: every federated object is rechecked this often even without events.
const RESYNC_PERIOD: Duration = Duration::from_secs(300);

/// What every type's sync controller shares: clients, the cluster set, configuration,
/// per-cluster concurrency limits and the event recorder.
pub struct SyncShared {
    /// Client of the host cluster.
    pub host: Client,
    /// The member clusters.
    pub clusters: ClusterSet,
    /// The current KubeFedConfig, with defaults resolved.
    pub config: watch::Receiver<EffectiveConfig>,
    /// The control-plane namespace.
    pub namespace: String,
    /// Metrics of every controller.
    pub metrics: Arc<Metrics>,
    /// Publishes the constraint scheduler's decisions as PlacementDecisions.
    pub decisions: Arc<crate::decisions::Publisher>,
    recorder: Recorder,
    limits: Mutex<HashMap<String, Arc<Semaphore>>>,
    breakers: breaker::Breakers,
    /// The stored revisions of progressive rollouts known to exist (every type).
    revisions: rollout::Revisions,
    /// Member objects orphaning deletions gave up on, kept when their cluster returns.
    orphans: orphans::Orphans,
    /// Host caches of the kinds workloads depend on, and who references what.
    dependency_hosts: dependency_hosts::DependencyHosts,
}

impl SyncShared {
    /// Shared state for sync controllers.
    pub fn new(
        host: Client,
        clusters: ClusterSet,
        config: watch::Receiver<EffectiveConfig>,
        namespace: String,
        profile_namespace: &str,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let recorder = crate::events::recorder(host.clone(), REPORTING_CONTROLLER);
        let decisions =
            crate::decisions::Publisher::start(host.clone(), &namespace, profile_namespace);
        Arc::new(SyncShared {
            host: host.clone(),
            clusters,
            config,
            namespace,
            metrics,
            decisions,
            recorder,
            limits: Mutex::default(),
            breakers: breaker::Breakers::default(),
            revisions: rollout::Revisions::default(),
            orphans: orphans::Orphans::default(),
            dependency_hosts: dependency_hosts::DependencyHosts::new(host),
        })
    }

    fn limit(&self, cluster: &str) -> Arc<Semaphore> {
        self.limits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(cluster.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(PER_CLUSTER_CONCURRENCY)))
            .clone()
    }
}

/// A member object's status is read only with status collection on; without it, the
/// cache does not keep it.
fn drop_status(obj: &mut DynamicObject) {
    if let Some(data) = obj.data.as_object_mut() {
        data.remove("status");
    }
}

/// Which federated API a sync controller reconciles, and the twin API it must not
/// propagate twice with (kubefed's alpha for v1beta1 and back).
pub struct Serving {
    /// The Federated&lt;Kind&gt; API resource reconciled.
    pub federated: ApiResource,
    /// The same type in the other API, when that is served too.
    pub twin: Option<ApiResource>,
    /// Whether kubefed's alpha FederatedNamespace CRD is installed: its objects then
    /// place namespaced objects too (a watch of a missing CRD would never sync).
    pub alpha_namespaces: bool,
}

/// Key of a federated object in the host.
type Key = (Option<String>, String);

/// A running sync controller for one federated type.
pub struct TypeController {
    cancel: CancellationToken,
    queue: Arc<WorkQueue<Key>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl TypeController {
    /// Starts propagation for the type configured by `ftc`; `pruned`: what the federated
    /// CRD's schema drops from status (left out of the status compared and written).
    /// `serving`: the federated API this controller reconciles and its twin's, when both
    /// kubefed's alpha and v1beta1 are served.
    pub fn start(
        shared: Arc<SyncShared>,
        ftc: &FederatedTypeConfigSpec,
        pruned: Pruned,
        serving: Serving,
    ) -> TypeController {
        let ty = type_info::TypeInfo::of(ftc, serving.federated.clone(), pruned);
        let needs_ns_placement = ty.needs_ns_placement;
        let cancel = CancellationToken::new();
        let queue: Arc<WorkQueue<Key>> = WorkQueue::new();
        let host_writer = reflector::store::Writer::<DynamicObject>::new(ty.fed_ar.clone());
        let fns_writer = reflector::store::Writer::<DynamicObject>::new(federated_namespace_ar());
        let work_writer = reflector::store::Writer::<flotilla_api::work::Work>::default();
        let alpha = twins::AlphaWiring::new(&serving, needs_ns_placement);
        let (member_tx, member_rx) = mpsc::unbounded_channel();
        let members = member_watch(&shared, &ty.target_ar, ty.collect_status, member_tx);
        let host = host::HostCaches {
            federated: host::ApiStore {
                ar: ty.fed_ar.clone(),
                store: host_writer.as_reader(),
            },
            twin: alpha.twin_api(),
            fns: fns_writer.as_reader(),
            fns_alpha: alpha.fns_alpha_store(),
            works: work_writer.as_reader(),
        };
        let (inflight, landed) = inflight::InFlight::new();
        let ctl = Arc::new(Ctl {
            shared: shared.clone(),
            ty,
            host,
            members,
            recent: Default::default(),
            finalizer_adds: Default::default(),
            inflight,
            written: Default::default(),
            availability: Default::default(),
            drift_memory: Default::default(),
        });
        // Workers start once the caches and the registry are ready (see `ready`); one task
        // awaits that and the gate wakes every worker.
        let (gate, gate_task) = Gate::after(ready(ctl.clone()));
        let mut tasks = vec![
            tokio::spawn(watch_federated(ctl.clone(), host_writer, queue.clone())),
            tokio::spawn(follow_members(ctl.clone(), member_rx, queue.clone())),
            tokio::spawn(follow_clusters(ctl.clone(), queue.clone())),
            tokio::spawn(follow_landed_writes(landed, queue.clone())),
            tokio::spawn(pull::watch_works(ctl.clone(), work_writer, queue.clone())),
            tokio::spawn(dependencies::follow_host_changes(
                ctl.clone(),
                queue.clone(),
            )),
            gate_task,
        ];
        if needs_ns_placement {
            tasks.push(tokio::spawn(watch_federated_namespaces(
                ctl.clone(),
                federated_namespace_ar(),
                fns_writer,
                queue.clone(),
            )));
        }
        tasks.extend(alpha.spawn(&ctl, &queue));
        let workers = ctl.shared.config.borrow().max_concurrent_reconciles.max(1);
        tasks.push(spawn_workers(&ctl, &queue, workers, gate, &cancel));
        info!(federated = %ctl.ty.fed_ar.kind, target = %ctl.ty.target_ar.kind, workers, "sync controller started");
        TypeController {
            cancel,
            queue,
            tasks,
        }
    }

    /// Stops the controller and its watches.
    pub fn stop(&self) {
        self.cancel.cancel();
        self.queue.shutdown();
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for TypeController {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The target kind in every Ready member.
fn member_watch(
    shared: &SyncShared,
    target_ar: &ApiResource,
    collect_status: bool,
    events: mpsc::UnboundedSender<MemberEvent>,
) -> Arc<MemberWatch<DynamicObject>> {
    // `managed=false` objects too: knowing them spares a read before each create.
    let config = watcher::Config::default().labels(&format!("{MANAGED_LABEL} in (true,false)"));
    let options = WatchOptions {
        shrink: if collect_status {
            observe::cache_form
        } else {
            observe::cache_form_without_status
        },
        ..WatchOptions::all().with_config(config)
    }
    // Stray detection looks up the managed objects of a cluster by this index.
    .index(Indexer::label(MANAGED_LABEL));
    Arc::new(MemberWatch::<DynamicObject>::start_with_events(
        shared.clusters.clone(),
        target_ar.clone(),
        options,
        events,
    ))
}

/// Host: the federated objects. Objects deleted while we were not watching are found
/// through the member caches (stray cleanup) on their Synced events.
async fn watch_federated(
    ctl: Arc<Ctl>,
    writer: reflector::store::Writer<DynamicObject>,
    queue: Arc<WorkQueue<Key>>,
) {
    let api: Api<DynamicObject> = Api::all_with(ctl.shared.host.clone(), &ctl.ty.fed_ar);
    let store = ctl.host.federated.store.clone();
    reflect_shrunk(
        api,
        writer,
        "federated object",
        packed::pack,
        move |c| match c {
            Change::Object(o) => queue.add(key_of(o)),
            Change::Synced => {
                for o in store.state() {
                    queue.add(key_of(&o));
                }
            }
        },
    )
    .await;
}

/// Host: FederatedNamespaces, for namespace placement: a change requeues every federated
/// object of that namespace.
async fn watch_federated_namespaces(
    ctl: Arc<Ctl>,
    ar: ApiResource,
    writer: reflector::store::Writer<DynamicObject>,
    queue: Arc<WorkQueue<Key>>,
) {
    let api: Api<DynamicObject> = Api::all_with(ctl.shared.host.clone(), &ar);
    let store: Store<DynamicObject> = ctl.host.federated.store.clone();
    reflect(api, writer, "federated namespace", move |c| match c {
        Change::Object(o) => {
            let ns = o.namespace();
            for fed in store.state() {
                if fed.namespace() == ns {
                    queue.add(key_of(&fed));
                }
            }
        }
        Change::Synced => {}
    })
    .await;
}

/// Members: managed objects map back to their federated object.
async fn follow_members(
    ctl: Arc<Ctl>,
    mut events: mpsc::UnboundedReceiver<MemberEvent>,
    queue: Arc<WorkQueue<Key>>,
) {
    while let Some(ev) = events.recv().await {
        match ev {
            MemberEvent::Object {
                cluster,
                namespace,
                name,
            } => {
                // A canary Deployment's change is its stable one's federated object's.
                if let Some(stable) = flotilla_core::rollout::canary::stable_name(&name) {
                    queue.add(ctl.ty.key_of_member(namespace.clone(), stable.to_string()));
                }
                let cached = ctl.members.get(&cluster, namespace.as_deref(), &name);
                let key = ctl.ty.key_of_member(namespace, name);
                let version = cached
                    .as_ref()
                    .and_then(|o| o.metadata.resource_version.as_deref());
                ctl.recent.cache_moved(&cluster, &key, version);
                queue.add(key);
            }
            MemberEvent::Synced { cluster } => {
                debug!(%cluster, "member cache synced; rechecking every object");
                requeue_all(&ctl, &queue);
            }
        }
    }
}

/// A member write that went on after its reconcile landed: its object is looked at again.
async fn follow_landed_writes(
    mut landed: mpsc::UnboundedReceiver<Key>,
    queue: Arc<WorkQueue<Key>>,
) {
    while let Some(key) = landed.recv().await {
        queue.add(key);
    }
}

/// Cluster readiness changes and the periodic resync requeue everything.
async fn follow_clusters(ctl: Arc<Ctl>, queue: Arc<WorkQueue<Key>>) {
    let mut events = ctl.shared.clusters.subscribe();
    let mut resync = tokio::time::interval(RESYNC_PERIOD);
    resync.tick().await;
    loop {
        tokio::select! {
            ev = events.recv() => match ev {
                // Objects are requeued when the member cache has synced; a Pull cluster has
                // no member cache (its Works are cached from the start).
                Ok(ClusterEvent::Ready(name)) => {
                    if ctl.shared.clusters.get(&name).is_some_and(|c| c.pull) {
                        requeue_all(&ctl, &queue);
                    }
                }
                Ok(_) | Err(RecvError::Lagged(_)) => requeue_all(&ctl, &queue),
                Err(RecvError::Closed) => return,
            },
            _ = resync.tick() => requeue_all(&ctl, &queue),
        }
    }
}

/// Every federated object and every managed member object (a stray whose federated
/// object is gone) as keys.
fn requeue_all(ctl: &Ctl, queue: &WorkQueue<Key>) {
    let members = observe::managed_keys(&ctl.members, &ctl.ty);
    let keys = (ctl.host.federated_keys())
        .chain(members)
        .chain(ctl.host.work_keys());
    for key in keys {
        queue.add(key);
    }
}

/// Until both host caches are complete, an object would look deleted (a stray) or its
/// namespace unfederated (placed nowhere), and its member copies would be deleted. Until
/// the registry knows every cluster (each registered cluster probed once), a deletion would
/// not wait for the clusters it lacks. Awaited by one task: a store's readiness wakes only
/// its last waiter (see [`Gate`]).
async fn ready(ctl: Arc<Ctl>) -> bool {
    registry_wait::wait_for_registry(ctl.shared.clone()).await;
    ctl.host.ready(ctl.ty.needs_ns_placement).await
}

/// The workers on the library's keyed runner: `workers` at once, none before the gate
/// opens, all stopped by `cancel`.
fn spawn_workers(
    ctl: &Arc<Ctl>,
    queue: &Arc<WorkQueue<Key>>,
    workers: usize,
    gate: Gate,
    cancel: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let runner = KeyedRunner::new(format!("sync-{}", ctl.ty.fed_ar.kind), queue.clone())
        .concurrency(workers)
        .gate(gate)
        .metrics(Arc::new(SyncMetrics(ctl.clone())))
        .shutdown(cancel.clone());
    let ctl = ctl.clone();
    tokio::spawn(runner.run(move |key: Key| {
        let ctl = ctl.clone();
        async move { Ok::<_, Infallible>(reconcile_key(&ctl, &key).await) }
    }))
}

/// One key on the keyed runner; a failed reconcile backs the key off.
async fn reconcile_key(ctl: &Ctl, key: &Key) -> Action {
    match ctl.reconcile(key).await {
        Ok(action) => action,
        Err(e) => {
            warn!(object = ?key, error = %e, kind = e.as_str(), "reconcile failed; backing off");
            Action::backoff()
        }
    }
}

/// The sync controller's own series, per federated kind: reconciles by result, durations,
/// queue depth, and `flotilla_sync_workers_ready` (workers past the gate, taking keys).
struct SyncMetrics(Arc<Ctl>);

impl RunMetrics for SyncMetrics {
    fn reconciled(&self, report: &Report) {
        let ctl = &self.0;
        let m = &ctl.shared.metrics.sync;
        m.reconcile_duration
            .get_or_create(&ctl.ty.kind_labels())
            .observe(report.took.as_secs_f64());
        m.reconciles
            .get_or_create(&ReconcileLabels {
                kind: ctl.ty.fed_ar.kind.clone(),
                result: ReconcileResult::of(report.action).as_str(),
            })
            .inc();
        m.queue_depth
            .get_or_create(&ctl.ty.kind_labels())
            .set(report.queue_depth as i64);
    }

    fn worker_started(&self) {
        self.workers_ready().inc();
    }

    fn worker_stopped(&self) {
        self.workers_ready().dec();
    }
}

impl SyncMetrics {
    fn workers_ready(&self) -> prometheus_client::metrics::gauge::Gauge {
        let ctl = &self.0;
        ctl.shared
            .metrics
            .sync
            .workers_ready
            .get_or_create(&ctl.ty.kind_labels())
            .clone()
    }
}

/// The FederatedNamespace type, for namespace placement.
fn federated_namespace_ar() -> ApiResource {
    let namespace = flotilla_api::core::ApiResource {
        group: String::new(),
        version: "v1".into(),
        kind: "Namespace".into(),
        plural_name: "namespaces".into(),
        scope: flotilla_api::core::Scope::Cluster,
    };
    flotilla_api::crdgen::federated_api_resource(&namespace).to_kube()
}

/// kubefed's alpha FederatedNamespace type (`types.kubefed.k8s.io/v1alpha1`).
fn federated_namespace_alpha_ar() -> Option<ApiResource> {
    let beta = flotilla_api::core::ApiResource {
        group: flotilla_api::TYPES_GROUP.into(),
        version: flotilla_api::V1BETA1.into(),
        kind: "FederatedNamespace".into(),
        plural_name: "federatednamespaces".into(),
        scope: flotilla_api::core::Scope::Namespaced,
    };
    flotilla_api::alpha::alpha_twin(&beta).map(|a| a.to_kube())
}

fn key_of(o: &DynamicObject) -> Key {
    (o.namespace(), o.name_any())
}
