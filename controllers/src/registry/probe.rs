//! One health worker per member cluster: probes `/healthz` every period, turns outcomes
//! into the published state ([`HealthTracker`]), tells the [`ClusterSet`], writes the
//! KubeFedCluster's status when it changed and records an Event when readiness changes.
//!
//! Each cluster has its own task, so a slow or hanging member only delays itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_api::core::EffectiveConfig;
use flotilla_api::{FIELD_MANAGER, KubeFedCluster, KubeFedClusterStatus};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::{Timestamp, Unit};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{EventType, Recorder};
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{debug, info, instrument, warn};

use super::health::{
    Health, HealthTracker, Thresholds, credential_condition, excerpt, expired_credential,
    next_status, status_changed,
};
use super::heartbeat::{HeartbeatTracker, read_lease};
use crate::metrics::Metrics;
use crate::multicluster::ClusterSet;
use flotilla_core::credential::RenewalState;

/// How often an unchanged status is written anyway, so `lastProbeTime` shows the health
/// check is alive without a write every period.
pub const PROBE_TIME_REFRESH: Duration = Duration::from_secs(300);

/// Shortest probe period honoured, so a tiny `period` (say `1ns`) cannot spin a worker.
pub const MIN_PERIOD: Duration = Duration::from_millis(100);

/// What a health worker probes with; replaced whenever the registry rebuilds the client.
#[derive(Clone)]
pub struct WorkerInput {
    /// The member client, or the reason none could be built.
    pub client: Result<Client, String>,
    /// `namespace/name` of the token Secret, for messages.
    pub secret: String,
    /// The KubeFedCluster, for Events.
    pub object: ObjectReference,
    /// A Pull cluster: its agent's Lease in the host, read instead of probing the member.
    pub heartbeat: Option<Api<k8s_openapi::api::coordination::v1::Lease>>,
}

/// What every health worker shares.
pub struct Shared {
    /// KubeFedClusters in the control-plane namespace (status writes).
    pub api: Api<KubeFedCluster>,
    /// Readiness goes here.
    pub set: ClusterSet,
    /// Current health-check settings.
    pub config: watch::Receiver<EffectiveConfig>,
    /// Probe metrics.
    pub metrics: Arc<Metrics>,
    /// Events on KubeFedClusters.
    pub recorder: Recorder,
    /// The control-plane namespace (KubeFedClusters and token Secrets).
    pub namespace: String,
    /// `--credential-renewal-interval`: renew tokens at most this long after issue.
    pub renewal_interval: Option<Duration>,
    /// What each renewer knows of its cluster's rotating token, for the health worker's
    /// `CredentialRenewed` condition and the expiry verdict.
    pub credentials: std::sync::Mutex<std::collections::HashMap<String, RenewalState>>,
}

impl Shared {
    /// Records what the renewer of `cluster` knows.
    pub fn set_credential(&self, cluster: &str, state: RenewalState) {
        lock(&self.credentials).insert(cluster.to_owned(), state);
    }

    /// Forgets `cluster`'s rotating token (it has none, or left).
    pub fn forget_credential(&self, cluster: &str) {
        lock(&self.credentials).remove(cluster);
    }

    /// What the renewer of `cluster` knows, if its token is rotated.
    pub fn credential(&self, cluster: &str) -> Option<RenewalState> {
        lock(&self.credentials).get(cluster).cloned()
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned map only means a panic while inserting; its entries are still whole.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Probes one cluster until the input sender is dropped (the cluster left the registry).
#[instrument(name = "health", skip_all, fields(cluster = %name))]
pub async fn run_worker(
    shared: Arc<Shared>,
    name: String,
    mut input: watch::Receiver<WorkerInput>,
    initial_status: KubeFedClusterStatus,
) {
    let mut config = shared.config.clone();
    let mut worker = Worker::new(&shared, &name, initial_status);
    loop {
        let current = input.borrow_and_update().clone();
        let settings = config.borrow_and_update().clone();
        let started = Instant::now();
        worker.round(&current, &settings, started).await;
        if !wait_next_round(&mut input, &mut config, started, &settings).await {
            return;
        }
    }
}

/// One worker's memory between rounds.
struct Worker<'a> {
    shared: &'a Shared,
    name: &'a str,
    tracker: HealthTracker,
    /// The status last written (at start, the stored one).
    written: KubeFedClusterStatus,
    written_at: Instant,
    /// Readiness last announced by an Event; starts from the stored status so a controller
    /// restart does not repeat the Event.
    announced: Option<String>,
    /// Whether the version was read since the cluster last became ready.
    version_known: bool,
    /// A Pull cluster's heartbeat as last seen.
    heartbeat: HeartbeatTracker,
}

impl<'a> Worker<'a> {
    fn new(shared: &'a Shared, name: &'a str, initial_status: KubeFedClusterStatus) -> Self {
        let announced = initial_status
            .condition(flotilla_api::core::condition::READY)
            .and_then(|c| c.reason.clone());
        Worker {
            shared,
            name,
            tracker: HealthTracker::default(),
            written: initial_status,
            written_at: Instant::now(),
            announced,
            version_known: false,
            heartbeat: HeartbeatTracker::default(),
        }
    }

    /// Probes once, then publishes what the thresholds make of it: readiness, an Event when
    /// it changed, and the status when it changed or is due a refresh.
    async fn round(&mut self, current: &WorkerInput, settings: &EffectiveConfig, started: Instant) {
        let mut lease_version = None;
        let outcome = match (&current.heartbeat, &current.client) {
            (Some(leases), _) => match read_lease(leases, settings.health_timeout).await {
                Ok(lease) => {
                    lease_version = lease.as_ref().and_then(|l| l.version.clone());
                    self.heartbeat
                        .judge(lease.as_ref(), Timestamp::now(), Instant::now())
                }
                Err(error) => Health::Offline { error },
            },
            (None, Err(problem)) => Health::Malformed {
                problem: problem.clone(),
            },
            (None, Ok(client)) => probe(client, settings.health_timeout, &current.secret).await,
        };
        if let Some(result) = outcome.probe_result() {
            self.shared.metrics.clusters.observe_probe(
                self.name,
                result,
                started.elapsed().as_secs_f64(),
            );
        }
        let version = match &current.heartbeat {
            Some(_) => {
                lease_version.filter(|v| self.written.kubernetes_version.as_ref() != Some(v))
            }
            None => self.new_version(&outcome, current, settings).await,
        };
        let credential = self.shared.credential(self.name);
        let outcome = expired_credential(outcome, credential.as_ref(), Timestamp::now());
        debug!(outcome = ?outcome, "probed");

        let thresholds = Thresholds {
            failure: settings.failure_threshold,
            success: settings.success_threshold,
        };
        let published = self.tracker.observe(outcome, thresholds);
        self.shared.set.set_ready(self.name, published.is_ready());
        // The verdict, for controllers that wait for one (MCS): why an unready cluster is not.
        let problem = (!published.is_ready()).then(|| published.message());
        self.shared.set.report(self.name, problem);
        if let Some(state) = self.shared.set.get(self.name) {
            super::unreachable::sync_taint(
                &self.shared.api,
                self.name,
                &state.taints,
                published.is_ready(),
            )
            .await;
        }

        if self.announced.as_deref() != Some(published.reason()) {
            announce(
                &self.shared.recorder,
                &current.object,
                self.name,
                &published,
            )
            .await;
            self.announced = Some(published.reason().to_owned());
        }
        let extra: Vec<_> = credential
            .iter()
            .map(|c| credential_condition(c, Timestamp::now()))
            .collect();
        self.write_status(&published, version.as_deref(), &extra)
            .await;
    }

    /// The member's version, read once after every comeback (a restart may have been an
    /// upgrade); `None` when it is known already or could not be read.
    async fn new_version(
        &mut self,
        outcome: &Health,
        current: &WorkerInput,
        settings: &EffectiveConfig,
    ) -> Option<String> {
        if !outcome.is_ready() {
            self.version_known = false;
            return None;
        }
        let Ok(client) = &current.client else {
            return None;
        };
        if self.version_known {
            return None;
        }
        let version = kubernetes_version(self.name, client, settings.health_timeout).await;
        self.version_known = version.is_some();
        version
    }

    /// Writes the status when it changed, or unchanged every [`PROBE_TIME_REFRESH`].
    async fn write_status(
        &mut self,
        published: &Health,
        version: Option<&str>,
        extra: &[super::health::Cond],
    ) {
        let refresh = self.written_at.elapsed() >= PROBE_TIME_REFRESH;
        let now = now_rfc3339();
        let next = next_status(&self.written, published, version, &now, refresh, extra);
        if !refresh && !status_changed(&self.written, &next) {
            return;
        }
        match write_status(&self.shared.api, self.name, &next).await {
            Ok(()) => {
                self.written = next;
                self.written_at = Instant::now();
            }
            Err(error) => {
                warn!(%error, "writing the KubeFedCluster status failed; retrying next period")
            }
        }
    }
}

/// Waits for the next round: the period after `started`, or at once for a new client; new
/// settings re-time the wait. `false` when the input sender is gone.
async fn wait_next_round(
    input: &mut watch::Receiver<WorkerInput>,
    config: &mut watch::Receiver<EffectiveConfig>,
    started: Instant,
    settings: &EffectiveConfig,
) -> bool {
    let mut deadline = started + settings.health_period.max(MIN_PERIOD);
    let mut config_open = true;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline.into()) => return true,
            changed = input.changed() => return changed.is_ok(),
            changed = config.changed(), if config_open => {
                // A closed config channel means the registry is stopping: keep the last
                // settings.
                config_open = changed.is_ok();
                deadline = started + config.borrow_and_update().health_period.max(MIN_PERIOD);
            }
        }
    }
}

/// One `/healthz` probe within `timeout`.
pub async fn probe(client: &Client, timeout: Duration, secret: &str) -> Health {
    let request = match http::Request::get("/healthz").body(Vec::new()) {
        Ok(r) => r,
        Err(e) => {
            return Health::Offline {
                error: e.to_string(),
            };
        }
    };
    match tokio::time::timeout(timeout, client.request_text(request)).await {
        Err(_) => Health::Offline {
            error: format!("no answer to /healthz within {timeout:?}"),
        },
        Ok(Ok(body)) if body.trim().eq_ignore_ascii_case("ok") => Health::Ready,
        Ok(Ok(body)) => Health::NotReady {
            status: 200,
            body: excerpt(&body),
        },
        Ok(Err(kube::Error::Api(status))) if matches!(status.code, 401 | 403) => {
            Health::Unauthorized {
                status: status.code,
                secret: secret.to_owned(),
            }
        }
        Ok(Err(kube::Error::Api(status))) => Health::NotReady {
            status: status.code,
            body: excerpt(&status.message),
        },
        // The member was never asked: the configuration is at fault, not the network.
        Ok(Err(error)) if flotilla_multicluster::credentials::is_credential_error(&error) => {
            Health::Malformed {
                problem: excerpt(&super::error_chain(&error)),
            }
        }
        Ok(Err(error)) => Health::Offline {
            error: excerpt(&super::error_chain(&error)),
        },
    }
}

/// The member's `gitVersion` (retried on the next probe when it cannot be read).
async fn kubernetes_version(cluster: &str, client: &Client, timeout: Duration) -> Option<String> {
    match tokio::time::timeout(timeout, client.apiserver_version()).await {
        Ok(Ok(info)) => Some(info.git_version),
        Ok(Err(error)) => {
            let error = super::error_chain(&error);
            warn!(%cluster, %error, "reading /version failed; retried on the next probe");
            None
        }
        Err(_) => {
            warn!(%cluster, ?timeout, "reading /version timed out; retried on the next probe");
            None
        }
    }
}

async fn write_status(
    api: &Api<KubeFedCluster>,
    name: &str,
    status: &KubeFedClusterStatus,
) -> Result<(), String> {
    let patch = serde_json::json!({ "status": status });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    api.patch_status(name, &params, &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|e| super::error_chain(&e))
}

async fn announce(recorder: &Recorder, object: &ObjectReference, name: &str, health: &Health) {
    let (type_, action) = match health {
        Health::Ready => (EventType::Normal, "ClusterReady"),
        Health::Malformed { .. } => (EventType::Warning, "ClusterConfigMalformed"),
        _ => (EventType::Warning, "ClusterNotReady"),
    };
    info!(cluster = %name, reason = health.reason(), "cluster health changed");
    crate::events::publish(
        recorder,
        object,
        type_,
        health.reason(),
        action,
        health.message(),
    )
    .await;
}

fn now_rfc3339() -> String {
    // Kubernetes writes times with one-second precision.
    Timestamp::now()
        .round(Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| Timestamp::now().to_string())
}
