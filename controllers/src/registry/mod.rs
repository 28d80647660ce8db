//! The cluster registry: turns KubeFedClusters and their token Secrets into member clients
//! in the [`ClusterSet`], health-checks every member, writes the KubeFedClusters' status,
//! and follows the KubeFedConfig singleton.
//!
//! [`start`] spawns three tasks and returns a [`RegistryHandle`]:
//! - the **config** task creates `kubefed` with defaults when absent and publishes its
//!   [`EffectiveConfig`] (health settings apply to the next probe, without a restart);
//! - the **cluster** task watches KubeFedClusters and Secrets in the control-plane
//!   namespace; it registers each cluster with its labels, (re)builds its client when the
//!   spec or the token changes, and removes it when the KubeFedCluster is deleted;
//! - the **gauge** task keeps the cluster gauges of [`Metrics`] in step with the set.
//!
//! The cluster task runs one health worker per cluster (see [`probe`]) and, for a push
//! member whose token rotates, one token renewer (see [`renewal`]). A problem with one
//! cluster's input (missing Secret, bad CA, bad URL) becomes that cluster's
//! ConfigMalformed condition and never touches another cluster.

/// Member clients from a KubeFedCluster and its Secret (in the multi-cluster library).
pub use flotilla_multicluster::kubefed::client;
pub mod config;
pub mod health;
pub mod heartbeat;
pub mod probe;
pub mod renewal;
pub mod unreachable;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use flotilla_api::KubeFedCluster;
use flotilla_api::core::EffectiveConfig;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, instrument, warn};

use self::client::ClientInputs;
use self::probe::{Shared, WorkerInput};
use self::renewal::RenewalInput;
use crate::metrics::{ClusterModeLabels, Metrics};
use crate::multicluster::ClusterSet;
use flotilla_core::credential::Rotation;
use flotilla_multicluster::kubefed::{
    client::ClientError,
    watch::{Affected, watch_registry},
};
use flotilla_multicluster::provider::{Provider, ProviderHandle};
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

/// Name the registry reports Events under.
pub const REPORTING_CONTROLLER: &str = "flotilla-cluster-registry";

/// Errors of the cluster registry. [`Error::Config`] describes a malformed cluster
/// configuration; its text is the ConfigMalformed condition's message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cluster's configuration (Secret, CA bundle, endpoint, proxy) is malformed.
    #[error(transparent)]
    Config(#[from] ClientError),
    /// A request to the host cluster failed.
    #[error("{action} failed")]
    Kube {
        /// What was being done.
        action: &'static str,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
}

pub use flotilla_multicluster::error_chain;

/// Aborts its task when dropped.
struct TaskGuard(JoinHandle<()>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The running registry. Dropping it stops every task it started (health workers too);
/// the [`ClusterSet`] keeps its last contents.
pub struct RegistryHandle {
    config: watch::Receiver<EffectiveConfig>,
    provider: Option<ProviderHandle>,
    tasks: Vec<TaskGuard>,
}

impl Drop for RegistryHandle {
    fn drop(&mut self) {
        // Ended, not stopped: the set keeps its last contents (a stopping control plane
        // must not see its members leave and act on it).
        if let Some(provider) = self.provider.take() {
            provider.abort();
        }
    }
}

impl RegistryHandle {
    /// The current KubeFedConfig settings, updated whenever the singleton changes (kubefed's
    /// defaults until it has been read).
    pub fn config(&self) -> watch::Receiver<EffectiveConfig> {
        self.config.clone()
    }

    /// Stops every task and waits until they have ended.
    pub async fn shutdown(mut self) {
        if let Some(provider) = self.provider.take() {
            provider.abort();
        }
        let tasks = std::mem::take(&mut self.tasks);
        for t in &tasks {
            t.0.abort();
        }
        for mut t in tasks {
            // An aborted task ends with a cancellation error; that is the expected outcome.
            let _ = (&mut t.0).await;
        }
    }
}

/// Starts the registry for the KubeFedClusters in `namespace` of the host cluster,
/// writing member states into `set` and its metrics into `metrics`. Must be called inside
/// a Tokio runtime. The host client needs: get/list/watch Secrets; get/list/watch/patch
/// KubeFedClusters and their status; get/list/watch/create KubeFedConfigs; create/patch
/// events.k8s.io Events — all in `namespace`.
///
/// The clusters come into `set` from a [`RegistryProvider`], the library's provider
/// contract ([`flotilla_multicluster::provider`]), like any library user's clusters.
pub fn start(
    host: Client,
    namespace: impl Into<String>,
    set: ClusterSet,
    metrics: Arc<Metrics>,
) -> RegistryHandle {
    start_with(host, namespace, set, metrics, RegistryOptions::default())
}

/// What the registry may do beyond kubefed's defaults.
#[derive(Clone, Debug, Default)]
pub struct RegistryOptions {
    /// `--credential-renewal-interval`: rotating member tokens are renewed at most this
    /// long after they were issued (two thirds of their life otherwise).
    pub renewal_interval: Option<std::time::Duration>,
    /// `--exec-plugin-dir`: exec credential plugins (`spec.exec`) under this directory
    /// run; none without it.
    pub exec_plugin_dir: Option<std::path::PathBuf>,
}

/// [`start`] with [`RegistryOptions`].
pub fn start_with(
    host: Client,
    namespace: impl Into<String>,
    set: ClusterSet,
    metrics: Arc<Metrics>,
    options: RegistryOptions,
) -> RegistryHandle {
    let namespace = namespace.into();
    let (config_tx, config_rx) = watch::channel(EffectiveConfig::default());
    let config_task = tokio::spawn(config::run(
        Api::namespaced(host.clone(), &namespace),
        namespace.clone(),
        config_tx,
    ));
    let provider = set.start_provider(RegistryProvider {
        host,
        namespace,
        config: config_rx.clone(),
        metrics: metrics.clone(),
        options,
    });
    let gauge_task = tokio::spawn(run_gauges(set, metrics));
    RegistryHandle {
        config: config_rx,
        provider: Some(provider),
        tasks: vec![TaskGuard(config_task), TaskGuard(gauge_task)],
    }
}

async fn run_gauges(set: ClusterSet, metrics: Arc<Metrics>) {
    let mut changes = set.changes();
    let mut shown = HashSet::new();
    loop {
        let snapshot = set.snapshot();
        let ready = snapshot.iter().filter(|c| c.ready).count();
        metrics.clusters.clusters.set(snapshot.len() as i64);
        metrics.clusters.ready_clusters.set(ready as i64);
        let now: HashSet<_> = snapshot
            .iter()
            .map(|c| ClusterModeLabels::new(&c.name, c.pull))
            .collect();
        for gone in shown.difference(&now) {
            metrics.clusters.cluster_ready.remove(gone);
        }
        for c in &snapshot {
            let labels = ClusterModeLabels::new(&c.name, c.pull);
            let gauge = metrics.clusters.cluster_ready.get_or_create(&labels);
            gauge.set(i64::from(c.ready));
        }
        shown = now;
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// A health worker and token renewer, and what their current client was built from.
struct Worker {
    inputs: ClientInputs,
    rotation: Option<Rotation>,
    uid: Option<String>,
    input: watch::Sender<WorkerInput>,
    renewal: watch::Sender<RenewalInput>,
    _task: TaskGuard,
    _renewer: TaskGuard,
}

/// The cluster task's state: both caches and the workers.
struct Registry {
    namespace: String,
    clusters: Store<KubeFedCluster>,
    secrets: Store<Secret>,
    workers: HashMap<String, Worker>,
    shared: Arc<Shared>,
    exec_plugin_dir: Option<std::path::PathBuf>,
}

/// The registry as a cluster provider: KubeFedClusters and their Secrets in, clusters
/// (with their clients, labels, taints and mode) engaged into the set, one health worker
/// per cluster. Stopped, it disengages every cluster it registered.
pub struct RegistryProvider {
    host: Client,
    namespace: String,
    config: watch::Receiver<EffectiveConfig>,
    metrics: Arc<Metrics>,
    options: RegistryOptions,
}

impl Provider for RegistryProvider {
    fn run(self: Box<Self>, set: ClusterSet, stop: CancellationToken) -> BoxFuture<'static, ()> {
        let RegistryProvider {
            host,
            namespace,
            config,
            metrics,
            options,
        } = *self;
        let shared = Arc::new(Shared {
            api: Api::namespaced(host.clone(), &namespace),
            set: set.clone(),
            config,
            metrics,
            recorder: crate::events::recorder(host.clone(), REPORTING_CONTROLLER),
            namespace: namespace.clone(),
            renewal_interval: options.renewal_interval,
            credentials: Default::default(),
        });
        let exec_plugin_dir = options.exec_plugin_dir;
        Box::pin(async move {
            tokio::select! {
                _ = run_clusters(host, namespace, shared, exec_plugin_dir) => {}
                _ = stop.cancelled() => {}
            }
            // The control plane's set holds the registry's clusters only.
            for cluster in set.snapshot() {
                set.disengage(&cluster.name);
            }
        })
    }
}

/// Follows the registry until its watch ends.
async fn run_clusters(
    host: Client,
    namespace: String,
    shared: Arc<Shared>,
    exec_plugin_dir: Option<std::path::PathBuf>,
) {
    let (caches, changes) = watch_registry(host, &namespace);
    futures::pin_mut!(changes);
    let mut registry = Registry {
        namespace,
        clusters: caches.clusters,
        secrets: caches.secrets,
        workers: HashMap::new(),
        shared,
        exec_plugin_dir,
    };
    while let Some(affected) = changes.next().await {
        let names = match affected {
            Affected::All => registry.all_names(),
            Affected::Clusters(names) => names,
        };
        for name in names {
            registry.reconcile(&name);
        }
    }
}

/// The member's client, or why there is none (empty for a Pull cluster, which needs none).
fn build_client(inputs: &ClientInputs, pull: bool) -> Result<Client, String> {
    if pull {
        info!("a Pull cluster: readiness comes from its agent's heartbeat");
        return Err(String::new());
    }
    match inputs.client() {
        Ok(client) => {
            info!(endpoint = %inputs.spec.api_endpoint, "built the cluster's client");
            Ok(client)
        }
        Err(error) => {
            let problem = error_chain(&error);
            warn!(%problem, "the cluster's configuration is malformed");
            Err(problem)
        }
    }
}

/// The rotation a token Secret's annotations describe; a malformed one is said in a
/// warning and the token is then not renewed (it still works until it expires).
fn rotation_of(secret: &Secret) -> Option<Rotation> {
    match Rotation::from_annotations(secret.annotations()) {
        Ok(rotation) => rotation,
        Err(error) => {
            warn!(secret = %secret.name_any(), %error, "the token Secret's rotation annotations are malformed; the token is not renewed");
            None
        }
    }
}

impl Registry {
    fn all_names(&self) -> BTreeSet<String> {
        self.clusters
            .state()
            .iter()
            .map(|c| c.name_any())
            .chain(self.workers.keys().cloned())
            .collect()
    }

    /// Brings one cluster's registration, client and worker in line with the caches.
    #[instrument(skip(self), fields(cluster = %name))]
    fn reconcile(&mut self, name: &str) {
        let key = ObjectRef::<KubeFedCluster>::new(name).within(&self.namespace);
        let Some(cluster) = self.clusters.get(&key) else {
            if self.workers.remove(name).is_some() {
                info!("KubeFedCluster deleted; removing the cluster");
            }
            self.shared.set.remove(name);
            self.shared.set.report(name, None);
            self.shared.metrics.clusters.forget_cluster(name);
            self.shared.forget_credential(name);
            return;
        };
        let labels: BTreeMap<String, String> = cluster.labels().clone();
        self.shared
            .set
            .upsert(name, labels, cluster.spec.taints.clone());

        let secret_key =
            ObjectRef::<Secret>::new(&cluster.spec.secret_ref.name).within(&self.namespace);
        let secret = self.secrets.get(&secret_key);
        let inputs = ClientInputs::new(&cluster.spec, &self.namespace, secret.as_deref())
            .with_exec_plugin_dir(self.exec_plugin_dir.clone());
        let rotation = secret.as_deref().and_then(rotation_of);
        let uid = cluster.uid();
        if let Some(worker) = self.workers.get(name)
            && worker.inputs == inputs
            && worker.rotation == rotation
            && worker.uid == uid
        {
            return;
        }

        let pull = cluster.spec.is_pull();
        self.shared.set.set_pull(name, pull);
        let client = build_client(&inputs, pull);
        self.shared.set.set_client(name, client.clone().ok());
        let renewal_client = client.clone().ok();
        let input = WorkerInput {
            client,
            secret: inputs.secret_ref(),
            object: cluster.object_ref(&()),
            heartbeat: pull
                .then(|| heartbeat::lease_api(&self.shared.api.clone().into_client(), name)),
        };
        let renewal = RenewalInput {
            client: renewal_client,
            secret: cluster.spec.secret_ref.name.clone(),
            rotation: rotation.clone(),
            object: cluster.object_ref(&()),
        };
        match self.workers.get_mut(name) {
            Some(worker) if worker.uid == uid => {
                debug!("handing the rebuilt client to the health worker and the renewer");
                worker.inputs = inputs;
                worker.rotation = rotation;
                // The tasks hold the receivers for as long as they run.
                let _ = worker.input.send(input);
                let _ = worker.renewal.send(renewal);
            }
            _ => {
                let (tx, rx) = watch::channel(input);
                let task = tokio::spawn(probe::run_worker(
                    self.shared.clone(),
                    name.to_owned(),
                    rx,
                    cluster.status.clone().unwrap_or_default(),
                ));
                let (renewal_tx, renewal_rx) = watch::channel(renewal);
                let renewer = tokio::spawn(renewal::run_renewer(
                    self.shared.clone(),
                    name.to_owned(),
                    renewal_rx,
                ));
                self.workers.insert(
                    name.to_owned(),
                    Worker {
                        inputs,
                        rotation,
                        uid,
                        input: tx,
                        renewal: renewal_tx,
                        _task: TaskGuard(task),
                        _renewer: TaskGuard(renewer),
                    },
                );
            }
        }
    }
}
