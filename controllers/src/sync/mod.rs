//! The sync (propagation) controller of one federated type: template + placement +
//! overrides → member objects, with per-cluster status on the federated object.
//!
//! Wiring: a reflector on the Federated&lt;Kind&gt; in the host, a [`MemberWatch`] of the
//! target kind in every Ready member (only `kubefed.io/managed=true` objects are cached),
//! the FederatedNamespace reflector for namespace placement, and cluster-set changes all
//! feed one [`WorkQueue`] of host keys. Workers reconcile keys concurrently
//! (`maxConcurrentReconciles`); within one reconcile every cluster is dispatched at once,
//! each bounded by its own semaphore, so a slow member never delays the others.
//! Decisions live in [`plan`]; this module only fetches, applies and records.

pub mod plan;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use flotilla_crds::{
    DEFAULT_NAMESPACE, DELETE_OPTIONS_ANNOTATION, FIELD_MANAGER, KubeFedCluster, MANAGED_LABEL,
    ORPHAN_ANNOTATION, RECREATE_ON_IMMUTABLE_ANNOTATION, SYNC_FINALIZER,
    core::{EffectiveConfig, FederatedTypeConfigSpec, StatusCollectionMode},
    federated::{FederatedSpec, FederatedStatus, aggregate_reason, cluster_reason},
};
use futures::future::join_all;
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, GetParams, ListParams, Patch, PatchParams, PropagationPolicy},
    core::{ApiResource, DynamicObject},
    runtime::{
        events::{Event as KubeEvent, EventType, Recorder, Reporter},
        reflector::{self, ObjectRef, Store},
    },
};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, instrument, warn};

use crate::{
    metrics::{
        ClusterLabels, FailureLabels, Metrics, OperationLabels, ReconcileLabels, TypeLabels,
    },
    multicluster::{ClusterEvent, ClusterSet, MemberEvent, MemberWatch},
    watch::{Change, reflect},
    workqueue::WorkQueue,
};
use plan::{DeletionOp, DesiredFor, HASH_ANNOTATION, Observed, Op, Outcome};

/// How long one member operation may take before it counts as timed out.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(30);
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
    recorder: Recorder,
    limits: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl SyncShared {
    /// Shared state for sync controllers.
    pub fn new(
        host: Client,
        clusters: ClusterSet,
        config: watch::Receiver<EffectiveConfig>,
        namespace: String,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let recorder = Recorder::new(
            host.clone(),
            Reporter {
                controller: "flotilla-sync".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Arc::new(SyncShared {
            host,
            clusters,
            config,
            namespace,
            metrics,
            recorder,
            limits: Mutex::default(),
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

/// Key of a federated object in the host.
type Key = (Option<String>, String);

/// A running sync controller for one federated type.
pub struct TypeController {
    cancel: CancellationToken,
    queue: Arc<WorkQueue<Key>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl TypeController {
    /// Starts propagation for the type configured by `ftc`.
    pub fn start(shared: Arc<SyncShared>, ftc: &FederatedTypeConfigSpec) -> TypeController {
        let fed_ar = ftc.federated_type.to_kube();
        let target_ar = ftc.target_type.to_kube();
        let target_namespaced = ftc.target_type.namespaced();
        let is_namespace_type =
            ftc.target_type.group.is_empty() && ftc.target_type.kind == "Namespace";
        let cancel = CancellationToken::new();
        let queue: Arc<WorkQueue<Key>> = WorkQueue::new();

        let host_writer = reflector::store::Writer::<DynamicObject>::new(fed_ar.clone());
        let host_store = host_writer.as_reader();

        let fns_ar = federated_namespace_ar();
        let needs_ns_placement = target_namespaced && !is_namespace_type;
        let fns_writer = reflector::store::Writer::<DynamicObject>::new(fns_ar.clone());
        let fns_store = fns_writer.as_reader();

        let (member_tx, mut member_rx) = mpsc::unbounded_channel();
        let members = Arc::new(MemberWatch::<DynamicObject>::start(
            shared.clusters.clone(),
            target_ar.clone(),
            Some(format!("{MANAGED_LABEL}=true")),
            member_tx,
        ));

        let ctl = Arc::new(Ctl {
            shared: shared.clone(),
            fed_ar: fed_ar.clone(),
            target_ar,
            target_namespaced,
            is_namespace_type,
            needs_ns_placement,
            host_store: host_store.clone(),
            fns_store: fns_store.clone(),
            members: members.clone(),
            collect_status: ftc.status_collection == Some(StatusCollectionMode::Enabled),
            recent: Mutex::default(),
            failures: Mutex::default(),
            unavailable_since: Mutex::default(),
        });
        let mut tasks = Vec::new();

        // Host: the federated objects.
        {
            let queue = queue.clone();
            let api: Api<DynamicObject> = Api::all_with(shared.host.clone(), &fed_ar);
            let host_store = host_store.clone();
            tasks.push(tokio::spawn(reflect(
                api,
                host_writer,
                "federated object",
                move |c| {
                    match c {
                        Change::Object(o) => queue.add(key_of(o)),
                        Change::Synced => {
                            // Objects deleted while we were not watching are found through the
                            // member caches (stray cleanup) on their Synced events.
                            for o in host_store.state() {
                                queue.add(key_of(&o));
                            }
                        }
                    }
                },
            )));
        }
        // Host: FederatedNamespaces, for namespace placement.
        if needs_ns_placement {
            let queue = queue.clone();
            let host_store = host_store.clone();
            let api: Api<DynamicObject> = Api::all_with(shared.host.clone(), &fns_ar);
            tasks.push(tokio::spawn(reflect(
                api,
                fns_writer,
                "federated namespace",
                move |c| {
                    if let Change::Object(o) = c {
                        let ns = o.namespace();
                        for fed in host_store.state() {
                            if fed.namespace() == ns {
                                queue.add(key_of(&fed));
                            }
                        }
                    }
                },
            )));
        }
        // Members: managed objects map back to their federated object.
        {
            let queue = queue.clone();
            let ctl = ctl.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(ev) = member_rx.recv().await {
                    match ev {
                        MemberEvent::Object {
                            namespace, name, ..
                        } => {
                            let key = if ctl.is_namespace_type {
                                (Some(name.clone()), name)
                            } else {
                                (namespace, name)
                            };
                            queue.add(key);
                        }
                        MemberEvent::Synced { cluster } => {
                            debug!(%cluster, "member cache synced; rechecking every object");
                            ctl.requeue_all(&queue);
                        }
                    }
                }
            }));
        }
        // Cluster readiness changes and periodic resync.
        {
            let queue = queue.clone();
            let ctl = ctl.clone();
            let mut events = shared.clusters.subscribe();
            tasks.push(tokio::spawn(async move {
                let mut resync = tokio::time::interval(RESYNC_PERIOD);
                resync.tick().await;
                loop {
                    tokio::select! {
                        ev = events.recv() => match ev {
                            Ok(ClusterEvent::Ready(_)) => {
                                // Objects are requeued when the member cache has synced.
                            }
                            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => ctl.requeue_all(&queue),
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                        },
                        _ = resync.tick() => ctl.requeue_all(&queue),
                    }
                }
            }));
        }
        // The cluster registry: every registered cluster known and probed once.
        let (known_tx, clusters_known) = watch::channel(false);
        {
            let shared = shared.clone();
            tasks.push(tokio::spawn(async move {
                wait_for_registry(shared).await;
                // Workers hold receivers for as long as they run.
                let _ = known_tx.send(true);
            }));
        }
        // Workers.
        let workers = shared.config.borrow().max_concurrent_reconciles.max(1);
        for _ in 0..workers {
            let queue = queue.clone();
            let ctl = ctl.clone();
            let cancel = cancel.clone();
            let mut clusters_known = clusters_known.clone();
            tasks.push(tokio::spawn(async move {
                // Until both host caches are complete, an object would look deleted
                // (a stray) or its namespace unfederated (placed nowhere), and its
                // member copies would be deleted. Until the registry knows every
                // cluster, a deletion would not wait for the clusters it lacks.
                let ready = async {
                    ctl.host_store.wait_until_ready().await.is_ok()
                        && (!ctl.needs_ns_placement
                            || ctl.fns_store.wait_until_ready().await.is_ok())
                        && clusters_known.wait_for(|known| *known).await.is_ok()
                };
                tokio::select! {
                    ready = ready => if !ready { return },
                    _ = cancel.cancelled() => return,
                }
                loop {
                    let key = tokio::select! {
                        k = queue.next() => match k { Some(k) => k, None => return },
                        _ = cancel.cancelled() => return,
                    };
                    let started = Instant::now();
                    let requeue = ctl.reconcile(&key).await;
                    queue.done(&key);
                    ctl.record_reconcile(started.elapsed(), requeue.is_some(), queue.len());
                    if let Some(d) = requeue {
                        queue.add_after(key, d);
                    }
                }
            }));
        }
        info!(federated = %fed_ar.kind, target = %ctl.target_ar.kind, workers, "sync controller started");
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

/// Longest wait for the registry at start-up; after it, reconciling starts anyway.
const REGISTRY_WAIT_LIMIT: Duration = Duration::from_secs(60);

/// Returns once every KubeFedCluster of the host is registered in the cluster set and
/// has had its first health verdict (Ready, or unready for longer than a probe takes).
/// Before that, a cluster missing from the set would look removed — deletion would not wait
/// for it — and an unprobed one unready.
async fn wait_for_registry(shared: Arc<SyncShared>) {
    let started = Instant::now();
    let api: Api<KubeFedCluster> = Api::namespaced(shared.host.clone(), &shared.namespace);
    let names: Vec<String> = loop {
        match api.list_metadata(&ListParams::default()).await {
            Ok(list) => break list.items.iter().map(|c| c.name_any()).collect(),
            Err(e) if started.elapsed() < REGISTRY_WAIT_LIMIT => {
                debug!(error = %e, "listing KubeFedClusters failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                warn!(error = %e, "listing KubeFedClusters failed; reconciling without waiting for the registry");
                return;
            }
        }
    };
    let mut changes = shared.clusters.changes();
    loop {
        let config = shared.config.borrow().clone();
        let probe_time = config.health_timeout
            + config.health_period * config.success_threshold.max(1)
            + Duration::from_secs(1);
        let states: Vec<_> = names.iter().map(|n| shared.clusters.get(n)).collect();
        let registered = states.iter().all(Option::is_some);
        let probed = started.elapsed() >= probe_time || states.iter().flatten().all(|c| c.ready);
        if registered && probed {
            debug!(clusters = names.len(), waited = ?started.elapsed(), "cluster registry ready");
            break;
        }
        if started.elapsed() >= REGISTRY_WAIT_LIMIT {
            let missing: Vec<&String> = names
                .iter()
                .zip(&states)
                .filter(|(_, s)| s.is_none())
                .map(|(n, _)| n)
                .collect();
            warn!(?missing, "clusters still unregistered; reconciling anyway");
            break;
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

fn federated_namespace_ar() -> ApiResource {
    ApiResource {
        group: flotilla_crds::TYPES_GROUP.into(),
        version: flotilla_crds::V1BETA1.into(),
        api_version: format!("{}/{}", flotilla_crds::TYPES_GROUP, flotilla_crds::V1BETA1),
        kind: "FederatedNamespace".into(),
        plural: "federatednamespaces".into(),
    }
}

fn key_of(o: &DynamicObject) -> Key {
    (o.namespace(), o.name_any())
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

struct Ctl {
    shared: Arc<SyncShared>,
    fed_ar: ApiResource,
    target_ar: ApiResource,
    target_namespaced: bool,
    is_namespace_type: bool,
    needs_ns_placement: bool,
    host_store: Store<DynamicObject>,
    fns_store: Store<DynamicObject>,
    members: Arc<MemberWatch<DynamicObject>>,
    /// Flotilla's own recent writes: (cluster, key) → (hash written, when).
    recent: Mutex<HashMap<(String, Key), (String, Instant)>>,
    /// Copy each member object's `status` into `status.clusters[].remoteStatus`
    /// (the FTC's `statusCollection: Enabled`).
    collect_status: bool,
    failures: Mutex<HashMap<Key, u32>>,
    /// Since when each cluster has been seen unready or unsynced, continuously. Deletion
    /// gives up on a cluster only once it has been unavailable for the whole timeout as
    /// far as this controller knows, so a restart never gives up on clusters that have
    /// not been probed or listed yet.
    unavailable_since: Mutex<HashMap<String, Instant>>,
}

/// Result of one cluster's operation, with the member object name for events.
struct ClusterResult {
    cluster: String,
    outcome: Outcome,
}

impl Ctl {
    fn kind_labels(&self) -> TypeLabels {
        TypeLabels {
            kind: self.fed_ar.kind.clone(),
        }
    }

    fn record_reconcile(&self, took: Duration, requeued: bool, depth: usize) {
        let m = &self.shared.metrics.sync;
        let kind = self.fed_ar.kind.clone();
        m.reconcile_duration
            .get_or_create(&self.kind_labels())
            .observe(took.as_secs_f64());
        m.reconciles
            .get_or_create(&ReconcileLabels {
                kind,
                result: if requeued { "requeued" } else { "ok" },
            })
            .inc();
        m.queue_depth
            .get_or_create(&self.kind_labels())
            .set(depth as i64);
    }

    /// The hash Flotilla wrote to this member object within [`plan::RECENT_WRITE_TTL`],
    /// and how long ago.
    fn recent_write(&self, cluster: &str, key: &Key) -> Option<(String, Duration)> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let (hash, at) = recent.get(&(cluster.to_string(), key.clone()))?;
        let age = at.elapsed();
        (age < plan::RECENT_WRITE_TTL).then(|| (hash.clone(), age))
    }

    fn remember_write(&self, cluster: &str, key: &Key, hash: Option<String>) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() > 4096 {
            recent.retain(|_, (_, at)| at.elapsed() < plan::RECENT_WRITE_TTL);
        }
        let k = (cluster.to_string(), key.clone());
        match hash {
            Some(h) => {
                recent.insert(k, (h, Instant::now()));
            }
            None => {
                recent.remove(&k);
            }
        }
    }

    fn record_operation(&self, cluster: &str, op: &Op, outcome: &Outcome, took: Duration) {
        let operation = match op {
            Op::Create => "create",
            Op::Update => "update",
            Op::Delete => "delete",
            Op::Unlabel => "unlabel",
            _ => return,
        };
        let result = if matches!(outcome, Outcome::Status(..)) {
            "error"
        } else {
            "ok"
        };
        let m = &self.shared.metrics.sync;
        m.operations
            .get_or_create(&OperationLabels {
                cluster: cluster.to_string(),
                operation,
                result,
            })
            .inc();
        m.operation_duration
            .get_or_create(&ClusterLabels {
                cluster: cluster.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    fn requeue_all(&self, queue: &WorkQueue<Key>) {
        for o in self.host_store.state() {
            queue.add(key_of(&o));
        }
        // Stray managed objects whose federated object is gone.
        for cluster in self.members.clusters() {
            for m in self.members.list(&cluster) {
                let key = if self.is_namespace_type {
                    (Some(m.name_any()), m.name_any())
                } else {
                    (m.namespace(), m.name_any())
                };
                queue.add(key);
            }
        }
    }

    fn config(&self) -> EffectiveConfig {
        self.shared.config.borrow().clone()
    }

    /// Name and namespace of the member object for a federated key.
    fn member_name<'a>(&self, key: &'a Key) -> (Option<&'a str>, &'a str) {
        if self.is_namespace_type {
            (None, key.1.as_str())
        } else if self.target_namespaced {
            (key.0.as_deref(), key.1.as_str())
        } else {
            (None, key.1.as_str())
        }
    }

    fn member_api(&self, client: Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(client, ns, &self.target_ar),
            None => Api::all_with(client, &self.target_ar),
        }
    }

    fn host_api(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.shared.host.clone(), ns, &self.fed_ar),
            None => Api::all_with(self.shared.host.clone(), &self.fed_ar),
        }
    }

    fn observe(&self, cluster: &crate::multicluster::ClusterState, key: &Key) -> Observed {
        let available = cluster.ready && cluster.client.is_some();
        let synced = available && self.members.is_synced(&cluster.name);
        {
            let mut since = self
                .unavailable_since
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if synced {
                since.remove(&cluster.name);
            } else {
                since
                    .entry(cluster.name.clone())
                    .or_insert_with(Instant::now);
            }
        }
        if !available {
            return Observed::NotReady;
        }
        if !synced {
            return Observed::NotSynced;
        }
        let (ns, name) = self.member_name(key);
        match self.members.get(&cluster.name, ns, name) {
            Some(obj) => Observed::Present(serde_json::to_value(&*obj).unwrap_or(Value::Null)),
            None => Observed::Absent,
        }
    }

    fn is_protected(&self, key: &Key) -> bool {
        self.is_namespace_type
            && (plan::PROTECTED_NAMESPACES.contains(&key.1.as_str())
                || key.1 == self.shared.namespace
                || key.1 == DEFAULT_NAMESPACE)
    }

    fn backoff(&self, key: &Key, failed: bool) -> Option<Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failed {
            let n = failures.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            Some(
                Duration::from_millis(500u64.saturating_mul(1 << (*n).min(7)))
                    .min(Duration::from_secs(60)),
            )
        } else {
            failures.remove(key);
            None
        }
    }

    #[instrument(skip(self), fields(kind = %self.fed_ar.kind))]
    async fn reconcile(&self, key: &Key) -> Option<Duration> {
        let mut obj_ref = ObjectRef::<DynamicObject>::new_with(&key.1, self.fed_ar.clone());
        if let Some(ns) = &key.0 {
            obj_ref = obj_ref.within(ns);
        }
        let Some(fed) = self.host_store.get(&obj_ref) else {
            return self.clean_strays(key).await;
        };
        if self.is_namespace_type && key.0.as_deref() != Some(key.1.as_str()) {
            return self.invalid_namespace_name(&fed).await;
        }
        if fed.metadata.deletion_timestamp.is_some() {
            return self.ensure_deletion(key, &fed).await;
        }
        if !fed.finalizers().iter().any(|f| f == SYNC_FINALIZER) {
            if let Err(e) = self.add_finalizer(&fed).await {
                warn!(error = %e, "adding the sync finalizer failed");
                return self.backoff(key, true);
            }
            // Propagation continues on the watch event of the patched object.
            return None;
        }
        self.sync(key, &fed).await
    }

    /// A FederatedNamespace must be named after its namespace (kubefed's rule): any other
    /// is ignored with an `InvalidName` event. Its member counterpart is named after the
    /// namespace, so a finalizer left from an earlier version is simply dropped.
    async fn invalid_namespace_name(&self, fed: &DynamicObject) -> Option<Duration> {
        if fed.metadata.deletion_timestamp.is_some() {
            if fed.finalizers().iter().any(|f| f == SYNC_FINALIZER)
                && let Err(e) = self.remove_finalizer(fed).await
            {
                warn!(error = %e, "removing the sync finalizer failed");
                return Some(Duration::from_secs(5));
            }
            return None;
        }
        let ns = fed.namespace().unwrap_or_default();
        warn!(name = %fed.name_any(), namespace = %ns, "ignoring a FederatedNamespace not named after its namespace");
        self.event(
            fed,
            EventType::Warning,
            "InvalidName",
            format!(
                "a FederatedNamespace must be named after its namespace: rename {} to {ns}; it is ignored",
                fed.name_any()
            ),
        )
        .await;
        None
    }

    async fn add_finalizer(&self, fed: &DynamicObject) -> Result<(), kube::Error> {
        let api = self.host_api(fed.metadata.namespace.as_deref());
        let patch = match &fed.metadata.finalizers {
            None => {
                json!([{"op": "add", "path": "/metadata/finalizers", "value": [SYNC_FINALIZER]}])
            }
            Some(list) => json!([
                {"op": "test", "path": "/metadata/finalizers", "value": list},
                {"op": "add", "path": "/metadata/finalizers/-", "value": SYNC_FINALIZER}
            ]),
        };
        let patch: json_patch::Patch =
            serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
        api.patch(
            &fed.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await?;
        Ok(())
    }

    async fn remove_finalizer(&self, fed: &DynamicObject) -> Result<(), kube::Error> {
        let api = self.host_api(fed.metadata.namespace.as_deref());
        let list = fed.metadata.finalizers.clone().unwrap_or_default();
        let kept: Vec<&String> = list.iter().filter(|f| *f != SYNC_FINALIZER).collect();
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": list},
            {"op": "replace", "path": "/metadata/finalizers", "value": kept}
        ]);
        let patch: json_patch::Patch =
            serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
        match api
            .patch(
                &fed.name_any(),
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Placement of the object: the selected registered clusters, or an object-level
    /// failure (reason, message).
    fn placement(
        &self,
        key: &Key,
        spec: &FederatedSpec,
    ) -> Result<BTreeSet<String>, (&'static str, String)> {
        let snapshot = self.shared.clusters.snapshot();
        let infos: Vec<flotilla_crds::placement::ClusterInfo<'_>> = snapshot
            .iter()
            .map(|c| flotilla_crds::placement::ClusterInfo {
                name: &c.name,
                labels: &c.labels,
            })
            .collect();
        let selected = flotilla_crds::placement::select(&spec.placement, &infos)
            .map_err(|e| (aggregate_reason::COMPUTE_PLACEMENT_FAILED, e.to_string()))?;
        if !self.needs_ns_placement || self.config().scope == "Namespaced" {
            return Ok(selected);
        }
        let Some(ns) = &key.0 else {
            return Ok(selected);
        };
        let fns_ref = ObjectRef::<DynamicObject>::new_with(ns, federated_namespace_ar()).within(ns);
        let Some(fns) = self.fns_store.get(&fns_ref) else {
            return Err((
                aggregate_reason::NAMESPACE_NOT_FEDERATED,
                format!(
                    "namespace {ns} is not federated: create a FederatedNamespace named {ns} in it"
                ),
            ));
        };
        let ns_spec = FederatedSpec::from_dynamic(&fns)
            .map_err(|e| (aggregate_reason::COMPUTE_PLACEMENT_FAILED, e.to_string()))?;
        let ns_selected =
            flotilla_crds::placement::select(&ns_spec.placement, &infos).map_err(|e| {
                (
                    aggregate_reason::COMPUTE_PLACEMENT_FAILED,
                    format!("namespace placement: {e}"),
                )
            })?;
        Ok(flotilla_crds::placement::intersect(&selected, &ns_selected))
    }

    async fn sync(&self, key: &Key, fed: &DynamicObject) -> Option<Duration> {
        let previous = FederatedStatus::from_dynamic(fed);
        let generation = fed.metadata.generation.unwrap_or(0);
        let spec = match FederatedSpec::from_dynamic(fed) {
            Ok(s) => s,
            Err(e) => {
                let msg = e.to_string();
                self.write_status(
                    fed,
                    &previous,
                    &BTreeMap::new(),
                    Some((aggregate_reason::COMPUTE_PLACEMENT_FAILED, msg)),
                    generation,
                    &BTreeMap::new(),
                )
                .await;
                return None;
            }
        };
        let (selected, aggregate) = match self.placement(key, &spec) {
            Ok(s) => (s, None),
            Err(agg) => (BTreeSet::new(), Some(agg)),
        };
        let (m_ns, m_name) = self.member_name(key);
        let overrides = flotilla_crds::overrides::by_cluster(&spec.overrides);
        let mut dropped = (false, false);
        let mut desired: BTreeMap<String, DesiredFor> = BTreeMap::new();
        for cluster in &selected {
            let d = match &overrides {
                Err(e) => DesiredFor::Failed(cluster_reason::APPLY_OVERRIDES_FAILED, e.to_string()),
                Ok(by_cluster) => {
                    let ops = by_cluster.get(cluster).map(Vec::as_slice);
                    match flotilla_crds::desired::compute(
                        &self.target_type_api(),
                        &key.1,
                        key.0.as_deref(),
                        &spec,
                        cluster,
                        ops,
                    ) {
                        Ok(d) => {
                            dropped.0 |= d.dropped_annotations;
                            dropped.1 |= d.dropped_finalizers;
                            let mut object = d.object;
                            let hash = flotilla_crds::hash::content_hash(&object);
                            set_annotation(&mut object, HASH_ANNOTATION, &hash);
                            DesiredFor::Object { object, hash }
                        }
                        Err(e) => DesiredFor::Failed(e.reason(), e.to_string()),
                    }
                }
            };
            desired.insert(cluster.clone(), d);
        }
        if generation != previous.observed_generation {
            if dropped.0 {
                self.event(fed, EventType::Warning, "AnnotationsNotSupported", "template metadata.annotations are not propagated (use an override to set member annotations)".into()).await;
            }
            if dropped.1 {
                self.event(
                    fed,
                    EventType::Warning,
                    "FinalizersNotSupported",
                    "template metadata.finalizers are not propagated".into(),
                )
                .await;
            }
        }

        let config = self.config();
        let recreate = fed
            .annotations()
            .get(RECREATE_ON_IMMUTABLE_ANNOTATION)
            .is_some_and(|v| v == "true");
        let dp = &self.delete_options(fed);
        let snapshot = self.shared.clusters.snapshot();
        let observed: Vec<Observed> = snapshot.iter().map(|c| self.observe(c, key)).collect();
        let mut remote: BTreeMap<String, Value> = BTreeMap::new();
        if self.collect_status {
            for (c, o) in snapshot.iter().zip(&observed) {
                if let Observed::Present(obj) = o
                    && let Some(st) = obj.get("status").filter(|v| !v.is_null())
                {
                    remote.insert(c.name.clone(), st.clone());
                }
            }
        }
        // A namespace about to be removed from a member might be the host's own (the host
        // joined as a member): look its UID up only then.
        let removing = snapshot
            .iter()
            .zip(&observed)
            .any(|(c, o)| !selected.contains(&c.name) && matches!(o, Observed::Present(_)));
        let host_ns_uid = if removing {
            match self.host_namespace_uid(key).await {
                Ok(uid) => uid,
                Err(e) => {
                    warn!(error = %e, "reading the host namespace failed");
                    return self.backoff(key, true);
                }
            }
        } else {
            None
        };
        let mut wait = false;
        let mut jobs = Vec::new();
        let mut recheck_after: Option<Duration> = None;
        for (cluster, observed) in snapshot.iter().zip(observed) {
            let is_selected = selected.contains(&cluster.name);
            let desired_hash = match desired.get(&cluster.name) {
                Some(DesiredFor::Object { hash, .. }) => Some(hash.clone()),
                _ => None,
            };
            let recent = self.recent_write(&cluster.name, key);
            let lagging = is_selected
                && desired_hash.as_deref().is_some_and(|h| {
                    plan::cache_lags(&observed, recent.as_ref().map(|(r, _)| r.as_str()), h)
                });
            let op = if lagging {
                // Recheck once the memory expires, in case the object really is gone.
                if let (Observed::Absent, Some((_, age))) = (&observed, &recent) {
                    let left =
                        plan::RECENT_WRITE_TTL.saturating_sub(*age) + Duration::from_millis(100);
                    recheck_after = Some(recheck_after.map_or(left, |r| r.min(left)));
                }
                Op::Nothing
            } else {
                plan::decide(
                    is_selected,
                    &observed,
                    desired.get(&cluster.name),
                    self.is_protected(key) || is_host_namespace(&observed, host_ns_uid.as_deref()),
                )
            };
            if op == Op::Wait {
                wait = true;
                continue;
            }
            let name = cluster.name.clone();
            let client = cluster.client.clone();
            let d = desired.get(&cluster.name).cloned();
            let retain = spec.retain_replicas;
            let adopt = config.adopt_resources;
            jobs.push(async move {
                let outcome = match (op, client) {
                    (Op::Nothing, _) => {
                        if is_selected {
                            Outcome::Ok
                        } else {
                            Outcome::Gone
                        }
                    }
                    (Op::Report(r, m), _) => Outcome::Status(r, m),
                    (Op::Wait, _) => Outcome::Gone,
                    (_, None) => Outcome::Status(
                        cluster_reason::CLIENT_RETRIEVAL_FAILED,
                        "no client for the cluster".into(),
                    ),
                    (op, Some(client)) => {
                        let permit = self.shared.limit(&name);
                        let _permit = permit.acquire().await;
                        let api = self.member_api(client, m_ns);
                        let fut = self.dispatch(
                            op.clone(),
                            &api,
                            m_name,
                            d,
                            &observed,
                            retain,
                            adopt,
                            recreate,
                            dp,
                        );
                        let started = Instant::now();
                        let outcome = match tokio::time::timeout(OPERATION_TIMEOUT, fut).await {
                            Ok(o) => o,
                            Err(_) => Outcome::Status(
                                timed_out(&op),
                                format!("no answer from the cluster within {OPERATION_TIMEOUT:?}"),
                            ),
                        };
                        self.record_operation(&name, &op, &outcome, started.elapsed());
                        match (&op, &outcome) {
                            (Op::Create | Op::Update, Outcome::Ok) => {
                                self.remember_write(&name, key, desired_hash)
                            }
                            (Op::Delete | Op::Update, _) => self.remember_write(&name, key, None),
                            _ => {}
                        }
                        outcome
                    }
                };
                ClusterResult {
                    cluster: name,
                    outcome,
                }
            });
        }
        let results = join_all(jobs).await;
        let mut outcomes = BTreeMap::new();
        let mut recoverable = false;
        for r in results {
            if let Outcome::Status(reason, _) = &r.outcome {
                recoverable |= plan::is_recoverable(reason);
            }
            if r.outcome == Outcome::Removing {
                recoverable = true;
            }
            outcomes.insert(r.cluster, r.outcome);
        }
        // Clusters whose cache is still syncing keep the status they had.
        for c in &previous.clusters {
            if !outcomes.contains_key(&c.name) && wait && snapshot.iter().any(|s| s.name == c.name)
            {
                let o = if c.status.is_empty() {
                    Outcome::Ok
                } else {
                    Outcome::Status(static_reason(&c.status), c.message.clone())
                };
                outcomes.insert(c.name.clone(), o);
                if let Some(r) = &c.remote_status {
                    remote.entry(c.name.clone()).or_insert_with(|| r.clone());
                }
            }
        }
        // Clusters the placement names that are not registered: report them rather than
        // drop them silently (kubefed does), so a typo or a cluster not joined yet shows.
        if aggregate.is_none() {
            let registered: BTreeSet<String> = snapshot.iter().map(|c| c.name.clone()).collect();
            for name in plan::unregistered_clusters(&spec.placement, &registered) {
                let msg = format!(
                    "the placement names cluster {name}, but no KubeFedCluster {name} is registered in {}",
                    self.shared.namespace
                );
                outcomes.insert(
                    name,
                    Outcome::Status(cluster_reason::CLUSTER_NOT_READY, msg),
                );
            }
        }
        self.write_status(fed, &previous, &outcomes, aggregate, generation, &remote)
            .await;
        if wait {
            return Some(Duration::from_millis(500));
        }
        match (self.backoff(key, recoverable), recheck_after) {
            (Some(b), Some(r)) => Some(b.min(r)),
            (b, r) => b.or(r),
        }
    }

    fn target_type_api(&self) -> flotilla_crds::core::ApiResource {
        flotilla_crds::core::ApiResource {
            group: self.target_ar.group.clone(),
            version: self.target_ar.version.clone(),
            kind: self.target_ar.kind.clone(),
            plural_name: self.target_ar.plural.clone(),
            scope: if self.target_namespaced {
                flotilla_crds::core::Scope::Namespaced
            } else {
                flotilla_crds::core::Scope::Cluster
            },
        }
    }

    #[allow(clippy::too_many_arguments)] // one call site; the flags are independent per-call facts
    async fn dispatch(
        &self,
        op: Op,
        api: &Api<DynamicObject>,
        name: &str,
        desired: Option<DesiredFor>,
        observed: &Observed,
        retain_replicas: bool,
        adopt: bool,
        recreate: bool,
        dp: &DeleteParams,
    ) -> Outcome {
        match op {
            Op::Create => {
                let Some(DesiredFor::Object { object, .. }) = desired else {
                    return Outcome::Gone;
                };
                // The cache holds managed objects only: an unmanaged one may exist.
                match api.get_metadata_opt_with(name, &GetParams::any()).await {
                    Err(e) => {
                        return Outcome::Status(cluster_reason::RETRIEVAL_FAILED, e.to_string());
                    }
                    Ok(Some(existing)) => {
                        let label = existing
                            .metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(MANAGED_LABEL));
                        if label.is_some_and(|v| v == "false") {
                            return Outcome::Status(
                                cluster_reason::MANAGED_LABEL_FALSE,
                                format!(
                                    "the member object is labelled {MANAGED_LABEL}=false; Flotilla leaves it alone"
                                ),
                            );
                        }
                        if label.is_none_or(|v| v != "true") && !adopt {
                            return Outcome::Status(
                                cluster_reason::ALREADY_EXISTS,
                                "an unmanaged object of this name exists and adoptResources is Disabled".into(),
                            );
                        }
                    }
                    Ok(None) => {}
                }
                match apply(api, name, &object).await {
                    Ok(()) => Outcome::Ok,
                    Err(e) => Outcome::Status(cluster_reason::CREATION_FAILED, api_message(&e)),
                }
            }
            Op::Update => {
                let Some(DesiredFor::Object { mut object, .. }) = desired else {
                    return Outcome::Gone;
                };
                if retain_replicas
                    && let Observed::Present(actual) = observed
                    && let Some(r) = actual.pointer("/spec/replicas")
                    && let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
                {
                    spec.insert("replicas".into(), r.clone());
                }
                match apply(api, name, &object).await {
                    Ok(()) => Outcome::Ok,
                    Err(e) if is_immutable(&e) && recreate => {
                        let dp = DeleteParams {
                            propagation_policy: Some(PropagationPolicy::Background),
                            ..Default::default()
                        };
                        match api.delete(name, &dp).await {
                            Ok(_) => Outcome::Status(
                                cluster_reason::WAITING_FOR_REMOVAL,
                                format!(
                                    "recreating: an immutable field changed ({})",
                                    api_message(&e)
                                ),
                            ),
                            Err(de) => {
                                Outcome::Status(cluster_reason::DELETION_FAILED, api_message(&de))
                            }
                        }
                    }
                    Err(e) => {
                        let mut msg = api_message(&e);
                        if is_immutable(&e) {
                            msg.push_str(&format!(
                                " (annotate the federated object with {RECREATE_ON_IMMUTABLE_ANNOTATION}=\"true\" to delete and recreate it)"
                            ));
                        }
                        Outcome::Status(cluster_reason::UPDATE_FAILED, msg)
                    }
                }
            }
            Op::Delete => match api.delete(name, dp).await {
                Ok(_) => Outcome::Removing,
                Err(kube::Error::Api(s)) if s.code == 404 => Outcome::Gone,
                Err(e) => Outcome::Status(cluster_reason::DELETION_FAILED, api_message(&e)),
            },
            Op::Unlabel => match unlabel(api, name).await {
                Ok(()) => Outcome::Gone,
                Err(e) => Outcome::Status(cluster_reason::LABEL_REMOVAL_FAILED, api_message(&e)),
            },
            Op::Nothing | Op::Wait => Outcome::Gone,
            Op::Report(r, m) => Outcome::Status(r, m),
        }
    }

    async fn write_status(
        &self,
        fed: &DynamicObject,
        previous: &FederatedStatus,
        outcomes: &BTreeMap<String, Outcome>,
        aggregate: Option<(&'static str, String)>,
        generation: i64,
        remote: &BTreeMap<String, Value>,
    ) {
        let status = plan::build_status(
            generation,
            outcomes,
            aggregate,
            previous,
            remote,
            &now_rfc3339(),
        );
        if &status == previous {
            return;
        }
        // Removal from a deselected cluster is routine, not a failure worth a Warning.
        let became_failed = status.propagation().is_some_and(|c| c.status == "False")
            && previous.propagation().map(|c| (&c.reason, &c.message))
                != status.propagation().map(|c| (&c.reason, &c.message))
            && (status.clusters.is_empty()
                || status.clusters.iter().any(|c| {
                    !c.status.is_empty() && c.status != cluster_reason::WAITING_FOR_REMOVAL
                }));
        let mut value = serde_json::to_value(&status).unwrap_or(Value::Null);
        if let Some(map) = value.as_object_mut() {
            // Merge patch: absent keys would keep old values, so clear them explicitly.
            for k in ["clusters", "conditions"] {
                map.entry(k).or_insert(Value::Null);
            }
        }
        let api = self.host_api(fed.metadata.namespace.as_deref());
        let patch = json!({ "status": value });
        if let Err(e) = api
            .patch_status(
                &fed.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            if !matches!(&e, kube::Error::Api(s) if s.code == 404) {
                warn!(error = %e, "writing status failed");
            }
            return;
        }
        let m = &self.shared.metrics.sync;
        m.status_writes.get_or_create(&self.kind_labels()).inc();
        // Count each failure once, when it first appears in status.
        for c in status.clusters.iter().filter(|c| !c.status.is_empty()) {
            let known = previous
                .clusters
                .iter()
                .any(|p| p.name == c.name && p.status == c.status);
            if !known {
                m.failures
                    .get_or_create(&FailureLabels {
                        kind: self.fed_ar.kind.clone(),
                        reason: c.status.clone(),
                    })
                    .inc();
            }
        }
        if became_failed && let Some(c) = status.propagation() {
            let mut note = c.message.clone();
            for cl in status.clusters.iter().filter(|c| !c.status.is_empty()) {
                note.push_str(&format!("; {}: {} {}", cl.name, cl.status, cl.message));
            }
            self.event(fed, EventType::Warning, &c.reason, note).await;
        }
    }

    async fn event(&self, fed: &DynamicObject, type_: EventType, reason: &str, note: String) {
        let mut note = note;
        // The events API limits notes to 1 kB.
        if note.len() > 1000 {
            let mut cut = 1000;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
        }
        let ev = KubeEvent {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: "Propagate".into(),
            secondary: None,
        };
        if let Err(e) = self
            .shared
            .recorder
            .publish(&ev, &fed.object_ref(&self.fed_ar))
            .await
        {
            debug!(error = %e, "publishing an event failed");
        }
    }

    /// The federated object is being deleted: remove (or orphan) its member objects, then
    /// drop the finalizer. A cluster that may hold the object but cannot answer is waited
    /// for up to the configured timeout; a cluster removed from the registry is not.
    async fn ensure_deletion(&self, key: &Key, fed: &DynamicObject) -> Option<Duration> {
        if !fed.finalizers().iter().any(|f| f == SYNC_FINALIZER) {
            return None;
        }
        let orphan = fed
            .annotations()
            .get(ORPHAN_ANNOTATION)
            .is_some_and(|v| v == "true");
        let previous = FederatedStatus::from_dynamic(fed);
        let config = self.config();
        let deleted_for = fed
            .metadata
            .deletion_timestamp
            .as_ref()
            .map(|t| {
                let secs = k8s_openapi::jiff::Timestamp::now().as_second() - t.0.as_second();
                Duration::from_secs(secs.max(0).unsigned_abs())
            })
            .unwrap_or_default();
        let timeout = config.unready_cluster_deletion_timeout;
        let mut next_deadline = timeout;
        // A cluster may hold the object if the last status lists it (propagated, failed or
        // pending) or the placement selects it now (a status write may have been lost).
        let mut may_hold: BTreeSet<String> =
            previous.clusters.iter().map(|c| c.name.clone()).collect();
        if let Ok(spec) = FederatedSpec::from_dynamic(fed)
            && let Ok(selected) = self.placement(key, &spec)
        {
            may_hold.extend(selected);
        }
        let (m_ns, m_name) = self.member_name(key);
        let dp = self.delete_options(fed);
        let host_ns_uid = match self.host_namespace_uid(key).await {
            Ok(uid) => uid,
            Err(e) => {
                // Unknown whether a member is the host itself: delete nothing yet.
                warn!(error = %e, "reading the host namespace failed");
                return self.backoff(key, true);
            }
        };
        let snapshot = self.shared.clusters.snapshot();
        let mut pending = false;
        let mut held = false;
        let mut abandoned = Vec::new();
        let mut jobs = Vec::new();
        for cluster in &snapshot {
            let observed = self.observe(cluster, key);
            let keep = orphan
                || self.is_protected(key)
                || is_host_namespace(&observed, host_ns_uid.as_deref());
            // Waited for this cluster: since the deletion, or since this controller first saw
            // the cluster unavailable if that is later (e.g. after a restart).
            let waited = self
                .unavailable_since
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&cluster.name)
                .map_or(deleted_for, |since| since.elapsed().min(deleted_for));
            let timed_out = waited >= timeout;
            let op =
                plan::decide_deletion(&observed, may_hold.contains(&cluster.name), keep, timed_out);
            if op == DeletionOp::WaitForCluster {
                next_deadline = next_deadline.min(timeout.saturating_sub(waited));
            }
            pending |= op.is_pending();
            held |= op == DeletionOp::WaitForRemoval;
            let name = cluster.name.clone();
            let client = cluster.client.clone();
            let dp = &dp;
            let wait_message = match &observed {
                Observed::NotSynced => (
                    cluster_reason::WAITING_FOR_REMOVAL,
                    "waiting for the cluster's cache to sync to remove the object".to_string(),
                ),
                _ => (
                    cluster_reason::CLUSTER_NOT_READY,
                    format!(
                        "waiting up to {} for the cluster to return to remove the object",
                        flotilla_crds::duration::format(config.unready_cluster_deletion_timeout)
                    ),
                ),
            };
            match op {
                DeletionOp::Done => continue,
                DeletionOp::Abandon => {
                    abandoned.push(name);
                    continue;
                }
                _ => {}
            }
            jobs.push(async move {
                let outcome = match (op, client) {
                    (DeletionOp::WaitForCluster, _) => {
                        Outcome::Status(wait_message.0, wait_message.1)
                    }
                    (DeletionOp::WaitForRemoval, _) => Outcome::Removing,
                    (_, None) => Outcome::Status(
                        cluster_reason::CLIENT_RETRIEVAL_FAILED,
                        "no client for the cluster".into(),
                    ),
                    (op, Some(client)) => {
                        let permit = self.shared.limit(&name);
                        let _permit = permit.acquire().await;
                        let api = self.member_api(client, m_ns);
                        let unlabelling = op == DeletionOp::Unlabel;
                        let work = async {
                            if unlabelling {
                                match unlabel(&api, m_name).await {
                                    Ok(()) => Outcome::Removing,
                                    Err(e) => Outcome::Status(
                                        cluster_reason::LABEL_REMOVAL_FAILED,
                                        api_message(&e),
                                    ),
                                }
                            } else {
                                match api.delete(m_name, dp).await {
                                    Ok(_) => Outcome::Removing,
                                    Err(kube::Error::Api(s)) if s.code == 404 => Outcome::Gone,
                                    Err(e) => Outcome::Status(
                                        cluster_reason::DELETION_FAILED,
                                        api_message(&e),
                                    ),
                                }
                            }
                        };
                        match tokio::time::timeout(OPERATION_TIMEOUT, work).await {
                            Ok(o) => o,
                            Err(_) => Outcome::Status(
                                if unlabelling {
                                    cluster_reason::LABEL_REMOVAL_TIMED_OUT
                                } else {
                                    cluster_reason::DELETION_TIMED_OUT
                                },
                                format!("no answer from the cluster within {OPERATION_TIMEOUT:?}"),
                            ),
                        }
                    }
                };
                ClusterResult {
                    cluster: name,
                    outcome,
                }
            });
        }
        let results = join_all(jobs).await;
        if !pending {
            if !abandoned.is_empty() {
                let object = key
                    .0
                    .as_ref()
                    .map(|ns| format!("{ns}/{}", key.1))
                    .unwrap_or_else(|| key.1.clone());
                let msg = format!(
                    "gave up waiting for unready cluster(s) {} after {}: the {} {object} may be left behind there; it is removed as a stray when the cluster returns",
                    abandoned.join(", "),
                    flotilla_crds::duration::format(config.unready_cluster_deletion_timeout),
                    self.target_ar.kind,
                );
                warn!(clusters = ?abandoned, object = %object, kind = %self.target_ar.kind, "deletion incomplete: {msg}");
                self.event(fed, EventType::Warning, "DeletionIncomplete", msg)
                    .await;
            }
            if let Err(e) = self.remove_finalizer(fed).await {
                warn!(error = %e, "removing the sync finalizer failed");
                return self.backoff(key, true);
            }
            info!(object = ?key, orphan, "member objects removed; finalizer dropped");
            self.backoff(key, false);
            return None;
        }
        let outcomes: BTreeMap<String, Outcome> = results
            .into_iter()
            .map(|r| (r.cluster, r.outcome))
            .collect();
        // A deletion just issued everywhere is not news: writing WaitingForRemoval for
        // every deleted object would double the host writes of a bulk delete. Status is
        // written when something holds the deletion up: a member object still terminating
        // on a later pass (a finalizer in the member), an unready cluster, a failure.
        let only_removing = outcomes
            .values()
            .all(|o| matches!(o, Outcome::Removing | Outcome::Gone));
        if held || !only_removing {
            self.write_status(
                fed,
                &previous,
                &outcomes,
                None,
                fed.metadata.generation.unwrap_or(0),
                &BTreeMap::new(),
            )
            .await;
        }
        // Member delete events requeue us; the timer covers the unready-cluster deadline
        // and clusters that failed to answer.
        Some(next_deadline.clamp(Duration::from_secs(1), Duration::from_secs(5)))
    }

    /// UID of the host namespace of a FederatedNamespace (for other types, `None`): when
    /// the host is also joined as a member, that namespace in the "member" is the host's
    /// own, which holds the federated objects, and must never be deleted.
    async fn host_namespace_uid(&self, key: &Key) -> Result<Option<String>, kube::Error> {
        if !self.is_namespace_type {
            return Ok(None);
        }
        let api: Api<Namespace> = Api::all(self.shared.host.clone());
        Ok(api.get_opt(&key.1).await?.and_then(|n| n.metadata.uid))
    }

    fn delete_options(&self, fed: &DynamicObject) -> DeleteParams {
        let Some(raw) = fed.annotations().get(DELETE_OPTIONS_ANNOTATION) else {
            return DeleteParams::default();
        };
        match parse_delete_options(raw) {
            Ok(dp) => dp,
            Err(e) => {
                warn!(error = %e, "ignoring malformed {DELETE_OPTIONS_ANNOTATION} annotation");
                DeleteParams::default()
            }
        }
    }

    /// No federated object for the key: any managed member object of that name is a stray
    /// (its federated object was deleted while Flotilla was not running). Each is checked
    /// live before it is deleted, so an object unlabelled meanwhile is never touched.
    async fn clean_strays(&self, key: &Key) -> Option<Duration> {
        let (m_ns, m_name) = self.member_name(key);
        let clusters: Vec<_> = self
            .shared
            .clusters
            .ready()
            .into_iter()
            .filter(|c| self.members.get(&c.name, m_ns, m_name).is_some())
            .collect();
        if clusters.is_empty() {
            return self.backoff(key, false);
        }
        let host_ns_uid = match self.host_namespace_uid(key).await {
            Ok(uid) => uid,
            Err(e) => {
                warn!(error = %e, "reading the host namespace failed");
                return self.backoff(key, true);
            }
        };
        let mut jobs = Vec::new();
        for c in clusters {
            let api = self.member_api(c.client.clone(), m_ns);
            let protected = self.is_protected(key);
            let host_ns_uid = host_ns_uid.as_deref();
            jobs.push(async move {
                let permit = self.shared.limit(&c.name);
                let _permit = permit.acquire().await;
                let work = async {
                    let Some(live) = api.get_opt(m_name).await? else {
                        return Ok(());
                    };
                    if live.labels().get(MANAGED_LABEL).is_none_or(|v| v != "true") {
                        return Ok(());
                    }
                    if protected || host_ns_uid.is_some() && live.uid().as_deref() == host_ns_uid {
                        info!(cluster = %c.name, object = ?key, "unlabelling a protected namespace whose federated namespace is gone");
                        return unlabel(&api, m_name).await;
                    }
                    info!(cluster = %c.name, object = ?key, "deleting a managed object whose federated object is gone");
                    // Preconditions: if the object was replaced or relabelled since it was
                    // read, the delete fails and the next attempt reads it again.
                    let dp = DeleteParams {
                        preconditions: Some(kube::api::Preconditions {
                            uid: live.uid(),
                            resource_version: live.resource_version(),
                        }),
                        ..DeleteParams::default()
                    };
                    match api.delete(m_name, &dp).await {
                        Ok(_) => Ok(()),
                        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                        Err(e) => Err(e),
                    }
                };
                match tokio::time::timeout(OPERATION_TIMEOUT, work).await {
                    Ok(Ok(())) => true,
                    Ok(Err(e)) => {
                        warn!(cluster = %c.name, object = ?key, error = %e, "cleaning up a stray member object failed");
                        false
                    }
                    Err(_) => {
                        warn!(cluster = %c.name, object = ?key, "cleaning up a stray member object timed out");
                        false
                    }
                }
            });
        }
        let ok = join_all(jobs).await.into_iter().all(|ok| ok);
        self.backoff(key, !ok)
    }
}

fn timed_out(op: &Op) -> &'static str {
    match op {
        Op::Create => cluster_reason::CREATION_TIMED_OUT,
        Op::Delete => cluster_reason::DELETION_TIMED_OUT,
        Op::Unlabel => cluster_reason::LABEL_REMOVAL_TIMED_OUT,
        _ => cluster_reason::UPDATE_TIMED_OUT,
    }
}

/// Maps a reason string read back from a status to the constant of the same text.
fn static_reason(s: &str) -> &'static str {
    use cluster_reason::*;
    [
        WAITING_FOR_REMOVAL,
        CLUSTER_NOT_READY,
        CACHED_RETRIEVAL_FAILED,
        COMPUTE_RESOURCE_FAILED,
        APPLY_OVERRIDES_FAILED,
        CREATION_FAILED,
        UPDATE_FAILED,
        DELETION_FAILED,
        LABEL_REMOVAL_FAILED,
        RETRIEVAL_FAILED,
        ALREADY_EXISTS,
        FIELD_RETENTION_FAILED,
        VERSION_RETRIEVAL_FAILED,
        CLIENT_RETRIEVAL_FAILED,
        MANAGED_LABEL_FALSE,
        CREATION_TIMED_OUT,
        UPDATE_TIMED_OUT,
        DELETION_TIMED_OUT,
        LABEL_REMOVAL_TIMED_OUT,
    ]
    .into_iter()
    .find(|r| *r == s)
    .unwrap_or(CHECK)
}

const CHECK: &str = "Unknown";

fn set_annotation(obj: &mut Value, key: &str, value: &str) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let ann = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(map) = ann.as_object_mut() {
            map.insert(key.to_string(), Value::String(value.to_string()));
        }
    }
}

async fn apply(api: &Api<DynamicObject>, name: &str, object: &Value) -> Result<(), kube::Error> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(name, &pp, &Patch::Apply(object))
        .await
        .map(|_| ())
}

async fn unlabel(api: &Api<DynamicObject>, name: &str) -> Result<(), kube::Error> {
    let patch = json!({"metadata": {"labels": {MANAGED_LABEL: null}}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether an observed member namespace is the host's own namespace (same UID), which
/// happens when the host cluster is also joined as a member.
fn is_host_namespace(observed: &Observed, host_uid: Option<&str>) -> bool {
    match (observed, host_uid) {
        (Observed::Present(obj), Some(uid)) => {
            obj.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid)
        }
        _ => false,
    }
}

fn is_immutable(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422 && s.message.contains("immutable"))
}

/// The API server's message for an API error, else the error's text.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// Parses kubefed's `kubefed.io/deleteoption` annotation (JSON DeleteOptions).
pub fn parse_delete_options(raw: &str) -> Result<DeleteParams, serde_json::Error> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Raw {
        grace_period_seconds: Option<u32>,
        propagation_policy: Option<String>,
        preconditions: Option<RawPre>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct RawPre {
        resource_version: Option<String>,
        uid: Option<String>,
    }
    let r: Raw = serde_json::from_str(raw)?;
    let propagation_policy = match r.propagation_policy.as_deref() {
        None => None,
        Some("Orphan") => Some(PropagationPolicy::Orphan),
        Some("Background") => Some(PropagationPolicy::Background),
        Some("Foreground") => Some(PropagationPolicy::Foreground),
        Some(other) => {
            return Err(serde::de::Error::custom(format!(
                "propagationPolicy {other:?} is not one of Orphan, Background, Foreground"
            )));
        }
    };
    Ok(DeleteParams {
        grace_period_seconds: r.grace_period_seconds,
        propagation_policy,
        preconditions: r.preconditions.map(|p| kube::api::Preconditions {
            resource_version: p.resource_version,
            uid: p.uid,
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_options_annotation_parses_kubefeds_json() {
        let dp = parse_delete_options(r#"{"propagationPolicy":"Orphan","gracePeriodSeconds":5}"#)
            .expect("parses");
        assert!(matches!(
            dp.propagation_policy,
            Some(PropagationPolicy::Orphan)
        ));
        assert_eq!(dp.grace_period_seconds, Some(5));
    }

    #[test]
    fn only_a_member_namespace_with_the_host_namespaces_uid_is_the_host_namespace() {
        let ns = |uid: &str| Observed::Present(json!({"metadata": {"name": "demo", "uid": uid}}));
        assert!(is_host_namespace(&ns("u1"), Some("u1")));
        assert!(!is_host_namespace(&ns("u2"), Some("u1")));
        assert!(!is_host_namespace(&ns("u1"), None));
        assert!(!is_host_namespace(&Observed::Absent, Some("u1")));
    }

    #[test]
    fn an_unknown_propagation_policy_is_an_error_naming_it() {
        let err =
            parse_delete_options(r#"{"propagationPolicy":"Sideways"}"#).expect_err("rejected");
        assert!(err.to_string().contains("Sideways"));
    }
}
