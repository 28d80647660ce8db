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
//! One federated object flows, orchestrated by [`ctl`] (entry branching): [`observe`]
//! (what each member holds) → [`plan`] (pure decisions) → [`cluster_run`] and [`dispatch`]
//! (member writes) → [`reconcile`] and [`status`] (status and Events); deletion in
//! [`deletion`], strays in [`strays`]. Each concern gets only what it reads, never the
//! whole controller.

mod action;
mod breaker;
mod bundle_index;
mod bundle_order;
mod bundle_plan;
mod bundle_standins;
pub mod bundles;
mod cluster_run;
mod ctl;
mod delete_options;
mod deletion;
mod dependencies;
mod dependency_hosts;
mod dispatch;
mod drift;
mod feeds;
mod finalizer;
mod host;
mod inflight;
mod memory;
mod observe;
mod origin;
mod orphans;
pub mod plan;
pub mod pull;
mod pull_dependencies;
mod pull_drift;
mod reconcile;
mod registry_wait;
mod rollout;
pub(crate) mod scheduled;
mod side_works;
mod status;
mod strays;
mod trace_id;
mod twins;
mod type_info;

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{Arc, Mutex},
};

use flotilla_api::core::{EffectiveConfig, FederatedTypeConfigSpec};
use flotilla_multicluster::{
    gate::Gate,
    runner::{KeyedRunner, Report, RunMetrics},
};
use kube::{
    Client, ResourceExt,
    core::{ApiResource, DynamicObject},
    runtime::{events::Recorder, reflector},
};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, info, warn};

pub use action::{Action, Error, ReconcileResult};
pub use delete_options::parse_delete_options;
pub use origin::export_host_events;
/// A rollout's revision of a spec and the labels of its ControllerRevisions (`rollout undo`).
pub use rollout::{KIND_LABEL, NAME_LABEL, name_label, revision_of, revisions_selector};

use crate::ftc_schema::Pruned;
use crate::{
    metrics::{Metrics, ReconcileLabels},
    multicluster::ClusterSet,
    workqueue::WorkQueue,
};
use ctl::Ctl;
use feeds::{AllKeys, Feeds, member_watch, ready};

/// The controller name on Events the sync controllers publish.
const REPORTING_CONTROLLER: &str = "flotilla-sync";
/// Concurrent operations per member cluster, across every federated type.
const PER_CLUSTER_CONCURRENCY: usize = 64;

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
    /// The dependency copies carried to Pull clusters.
    pull_dependencies: pull_dependencies::PullDependencies,
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
        let dependency_hosts = dependency_hosts::DependencyHosts::new(host.clone());
        let pull_dependencies =
            pull_dependencies::PullDependencies::new(host.clone(), dependency_hosts.sender());
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
            dependency_hosts,
            pull_dependencies,
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
        let ty = Arc::new(type_info::TypeInfo::of(
            ftc,
            serving.federated.clone(),
            pruned,
        ));
        let needs_ns_placement = ty.needs_ns_placement;
        let cancel = CancellationToken::new();
        let queue: Arc<WorkQueue<Key>> = WorkQueue::new();
        let host_writer = reflector::store::Writer::<DynamicObject>::new(ty.fed_ar.clone());
        let fns_writer = reflector::store::Writer::<DynamicObject>::new(federated_namespace_ar());
        let work_writer = reflector::store::Writer::<flotilla_api::work::Work>::default();
        let alpha = twins::AlphaWiring::new(&serving, needs_ns_placement);
        let (member_tx, member_rx) = mpsc::unbounded_channel();
        let members = member_watch(&shared, &ty.target_ar, ty.collect_status, member_tx);
        let host = Arc::new(host::HostCaches {
            federated: host::ApiStore {
                ar: ty.fed_ar.clone(),
                store: host_writer.as_reader(),
            },
            twin: alpha.twin_api(),
            fns: fns_writer.as_reader(),
            fns_alpha: alpha.fns_alpha_store(),
            works: work_writer.as_reader(),
            bundles: Arc::default(),
        });
        let bundler = Arc::new(
            bundles::Bundler::new(
                shared.host.clone(),
                ty.target_ar.clone(),
                ty.collect_status,
                work_writer.as_reader(),
            )
            .waiting_on(queue.clone()),
        );
        // A canary by replica share is for Deployments only; its Pull side starts on use.
        let canaries = (ty.target_ar.kind == "Deployment").then(|| {
            Arc::new(rollout::PullCanaries::new(
                shared.host.clone(),
                &ty.target_ar,
                queue.clone(),
            ))
        });
        let (inflight, landed) = inflight::InFlight::new();
        let recent = Arc::new(memory::RecentWrites::default());
        let all = AllKeys {
            ty: ty.clone(),
            host: host.clone(),
            members: members.clone(),
        };
        let origins = Arc::new(origin::Origins::new(&ty.fed_ar.kind));
        let feeds = Feeds {
            origins: origins.clone(),
            host_writer,
            fns_writer,
            work_writer,
            bundler: bundler.clone(),
            alpha,
            member_rx,
            landed,
        };
        // Workers start once the caches and the registry are ready (see `ready`); one task
        // awaits that and the gate wakes every worker.
        let (gate, gate_task) =
            Gate::after(ready(shared.clone(), host.clone(), needs_ns_placement));
        let mut tasks = feeds.spawn(&shared, all, recent.clone(), &queue);
        tasks.push(gate_task);
        tasks.push(tokio::spawn(bundler.clone().run()));
        let workers = shared.config.borrow().max_concurrent_reconciles.max(1);
        let runner = runner(&shared, &ty, &queue, workers, gate).shutdown(cancel.clone());
        let ctl = Arc::new(
            Ctl::new(shared, ty.clone(), host, members, recent, inflight, bundler)
                .with_canaries(canaries),
        );
        tasks.push(tokio::spawn(runner.run(move |key: Key| {
            let ctl = ctl.clone();
            // The host event that queued the key (if traced) is the reconcile span's parent.
            let origin = origins.take(&key);
            async move { Ok::<_, Infallible>(action_of(&key, ctl.reconcile(&key).await)) }
                .instrument(origin)
        })));
        info!(federated = %ty.fed_ar.kind, target = %ty.target_ar.kind, workers, "sync controller started");
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

/// The keyed runner of one type's workers: `workers` at once, none before the gate opens.
fn runner(
    shared: &SyncShared,
    ty: &Arc<type_info::TypeInfo>,
    queue: &Arc<WorkQueue<Key>>,
    workers: usize,
    gate: Gate,
) -> KeyedRunner<Key> {
    let metrics = SyncMetrics {
        metrics: shared.metrics.clone(),
        ty: ty.clone(),
    };
    KeyedRunner::new(format!("sync-{}", ty.fed_ar.kind), queue.clone())
        .concurrency(workers)
        .gate(gate)
        .queue_ages(shared.metrics.queue_ages.clone())
        .metrics(Arc::new(metrics))
}

/// One key's reconcile on the keyed runner; a failed reconcile backs the key off.
fn action_of(key: &Key, reconciled: Result<Action, Error>) -> Action {
    match reconciled {
        Ok(action) => action,
        Err(e) => {
            warn!(object = ?key, error = %e, kind = e.as_str(), "reconcile failed; backing off");
            Action::backoff()
        }
    }
}

/// The sync controller's own series, per federated kind: reconciles by result, durations,
/// queue depth, and `flotilla_sync_workers_ready` (workers past the gate, taking keys).
struct SyncMetrics {
    metrics: Arc<Metrics>,
    ty: Arc<type_info::TypeInfo>,
}

impl RunMetrics for SyncMetrics {
    fn reconciled(&self, report: &Report) {
        let m = &self.metrics.sync;
        m.reconcile_duration
            .get_or_create(&self.ty.kind_labels())
            .observe(report.took.as_secs_f64());
        m.reconciles
            .get_or_create(&ReconcileLabels {
                kind: self.ty.fed_ar.kind.clone(),
                result: ReconcileResult::of(report.action).as_str(),
            })
            .inc();
        m.queue_depth
            .get_or_create(&self.ty.kind_labels())
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
        (self.metrics.sync.workers_ready)
            .get_or_create(&self.ty.kind_labels())
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
