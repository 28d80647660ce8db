//! `flotilla controller-manager`: every controller ([`ControlPlane`]) under leader election,
//! plus `/metrics`, `/healthz` and `/readyz`.
//!
//! Only the Lease holder runs the control plane, so only it writes. When it loses the
//! Lease (another candidate took it, or the host API was away for longer than the renew
//! deadline) it stops the control plane — nothing of it writes after that — and campaigns
//! again, leading again once it wins: a host control-plane outage is ridden out in the
//! same process instead of ending in a restart loop (kubefed exits). On SIGTERM it stops
//! and releases the Lease, so a standby takes over at once.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use flotilla_api::{KUBEFED_CONFIG_NAME, KubeFedConfig};
use kube::{Api, Client};
use prometheus_client::metrics::gauge::Gauge;
use tracing::{error, info, warn};

use super::{Context, GlobalArgs, access, parse_duration};
use flotilla_controllers::leader::{self, LeaderElectionConfig, LeaderElector, LeadershipEnd};
use flotilla_controllers::manager::{ControlPlane, Options};
use flotilla_controllers::metrics::Metrics;
use flotilla_controllers::sharded::{DEFAULT_LEASE_DURATION, ShardedMemberWork};
use flotilla_controllers::startup::{self, Problem};
use flotilla_multicluster::http::auth::{self as http_auth, Exposure};
use flotilla_multicluster::http::{self as http, Health, MetricsAccess};
use flotilla_webhook as webhook;

/// Examples of `flotilla controller-manager --help`.
pub const EXAMPLES: &str = "\
Examples:
  # In the host cluster (see config/manager/): in-cluster credentials, leader election on
  flotilla controller-manager --kubefed-namespace kube-federation-system

  # From a workstation against the host context, a single instance
  flotilla controller-manager --context host --leader-elect=false --metrics-addr 127.0.0.1:8080

  # Short leases (tests, demos); the defaults come from the KubeFedConfig (15s/10s/5s)
  flotilla controller-manager --lease-duration 3s --renew-deadline 2s --retry-period 1s";

/// Arguments of `flotilla controller-manager`.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerManagerArgs {
    /// Run only while holding the leader Lease (`--leader-elect=false` for a single
    /// instance).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,
    /// Address of the `/metrics`, `/healthz` and `/readyz` endpoints. On a non-loopback
    /// address `/metrics` needs a bearer token allowed `get` on the URL `/metrics`.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    pub metrics_addr: SocketAddr,
    /// Serve `/metrics` on a non-loopback `--metrics-addr` without authentication.
    #[arg(long)]
    pub metrics_insecure_no_auth: bool,
    /// Export propagation traces over OTLP/HTTP (protobuf) to this endpoint, OTLP's base
    /// URL (e.g. `http://otel-collector:4318`; `/v1/traces` is appended). Off when unset.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Name of the leader Lease in the control-plane namespace.
    #[arg(long, default_value = leader::DEFAULT_LEASE_NAME, value_name = "NAME")]
    pub leader_election_id: String,
    /// Lease duration (default: the KubeFedConfig's leaderElect.leaseDuration, 15s).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub lease_duration: Option<Duration>,
    /// Renew deadline (default: the KubeFedConfig's leaderElect.renewDeadline, 10s).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub renew_deadline: Option<Duration>,
    /// Retry period (default: the KubeFedConfig's leaderElect.retryPeriod, 5s).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub retry_period: Option<Duration>,
    /// Identity in the Lease (default: $POD_NAME, else hostname_pid).
    #[arg(long, value_name = "ID")]
    pub identity: Option<String>,
    /// Serve the ServiceAccountImport auto-mount webhook (HTTPS) on this address, on every
    /// replica (admission must not wait for the leader). Off when absent.
    #[arg(long, value_name = "ADDR")]
    pub webhook_addr: Option<SocketAddr>,
    /// Names (DNS or IP) of the webhook's serving certificate, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "flotilla-webhook.kube-federation-system.svc",
        value_name = "NAMES"
    )]
    pub webhook_cert_names: Vec<String>,
    /// Namespace of the ClusterProfiles (Cluster Inventory API) the control plane publishes
    /// (default: the control-plane namespace). Grant the controller-manager the
    /// `clusterprofiles` rules of `config/rbac/role.yaml` there.
    #[arg(
        long,
        env = "FLOTILLA_CLUSTER_PROFILE_NAMESPACE",
        value_name = "NAMESPACE"
    )]
    pub cluster_profile_namespace: Option<String>,
    /// Serve the read-only web dashboard on this address, on every replica (see
    /// docs/dashboard.md). Off when absent. On a non-loopback address each request needs a
    /// bearer token of the host cluster, authorised by its RBAC.
    #[arg(long, value_name = "ADDR")]
    pub dashboard_addr: Option<SocketAddr>,
    /// Serve a non-loopback `--dashboard-addr` without authentication.
    #[arg(long)]
    pub dashboard_insecure_no_auth: bool,
    /// The MutatingWebhookConfiguration whose CA bundle the controller-manager keeps.
    #[arg(long, default_value = webhook::DEFAULT_CONFIGURATION, value_name = "NAME")]
    pub webhook_configuration: String,
    /// Lifetime of the webhook's CA; it is rolled over at 2/3 of it. At least six times
    /// `--webhook-rotation-overlap` (its last third must hold two overlaps).
    #[arg(long, value_parser = parse_duration, default_value = "8760h", value_name = "DURATION")]
    pub webhook_ca_lifetime: Duration,
    /// Lifetime of the webhook's serving certificate; it is renewed at 2/3 of it.
    #[arg(long, value_parser = parse_duration, default_value = "720h", value_name = "DURATION")]
    pub webhook_cert_lifetime: Duration,
    /// How long a CA bundle change is given to reach the API server and every replica
    /// before the rotation relies on it; each replica looks at the certificate every fifth
    /// of it (at most every minute).
    #[arg(long, value_parser = parse_duration, default_value = "5m", value_name = "DURATION")]
    pub webhook_rotation_overlap: Duration,
    /// Shard the member work (member RBAC on Push members) over every replica, leader or
    /// not, with peer and fence Leases in the control-plane namespace (docs/operations.md;
    /// grant `config/sharded/`'s Role).
    #[arg(long)]
    pub shard_member_work: bool,
    /// Renew rotating member tokens at most this long after they were issued (default:
    /// two thirds into their life). Tokens live 10 minutes at least, so a shorter interval
    /// is for tests and drills; a renewal that fails is retried with backoff.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub credential_renewal_interval: Option<Duration>,
    /// Run the exec credential plugins KubeFedClusters name (`spec.exec`) when their
    /// command lies in this directory; without the flag none runs (a plugin runs with the
    /// controller-manager's rights, so only the plugins you installed there may).
    #[arg(long, value_name = "DIR")]
    pub exec_plugin_dir: Option<std::path::PathBuf>,
    /// KEP-5339's access provider file (`{"providers": [{"name", "execConfig"}]}`): other
    /// cluster managers' ClusterProfiles offering one of these providers become members,
    /// their credential from the provider's exec plugin (which must lie under
    /// `--exec-plugin-dir`). Without the flag no ClusterProfile is imported.
    #[arg(long, value_name = "FILE")]
    pub access_providers: Option<std::path::PathBuf>,
}

impl ControllerManagerArgs {
    /// The webhook's certificate rotation as the flags set it ([`webhook::rotation::Policy::check`]
    /// says whether it can rotate without a gap).
    pub fn rotation_policy(&self) -> webhook::rotation::Policy {
        webhook::rotation::Policy::from_flags(
            self.webhook_ca_lifetime,
            self.webhook_cert_lifetime,
            self.webhook_rotation_overlap,
        )
    }

    /// Refuses flags that cannot work, before anything listens or asks the host.
    fn refuse_bad_flags(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.access_providers.is_none() || self.exec_plugin_dir.is_some(),
            "--access-providers needs --exec-plugin-dir: the access providers' exec plugins run \
             only from that directory"
        );
        self.rotation_policy()
            .check()
            .map_err(|reason| anyhow::anyhow!("--webhook-* flags: {reason}"))
    }
}

/// Joins the replicas' member work when `--shard-member-work` is given (on every replica).
fn start_sharded(
    host: &Client,
    namespace: &str,
    args: &ControllerManagerArgs,
) -> Option<ShardedMemberWork> {
    let identity = args
        .identity
        .clone()
        .unwrap_or_else(leader::default_identity);
    args.shard_member_work.then(|| {
        ShardedMemberWork::start(host.clone(), namespace, &identity, DEFAULT_LEASE_DURATION)
    })
}

/// The leader election settings: the KubeFedConfig's, overridden by flags.
async fn election_config(
    host: &Client,
    namespace: &str,
    args: &ControllerManagerArgs,
) -> LeaderElectionConfig {
    let api: Api<KubeFedConfig> = Api::namespaced(host.clone(), namespace);
    let effective = match api.get_opt(KUBEFED_CONFIG_NAME).await {
        Ok(Some(c)) => c.spec.effective(),
        Ok(None) => flotilla_api::KubeFedConfigSpec::default().effective(),
        Err(error) => {
            warn!(%error, "reading the KubeFedConfig failed; using default leader election timings");
            flotilla_api::KubeFedConfigSpec::default().effective()
        }
    };
    let mut config = LeaderElectionConfig::new(
        namespace,
        &args
            .identity
            .clone()
            .unwrap_or_else(leader::default_identity),
    );
    config.lease_name = args.leader_election_id.clone();
    config.lease_duration = args.lease_duration.unwrap_or(effective.lease_duration);
    config.renew_deadline = args.renew_deadline.unwrap_or(effective.renew_deadline);
    config.retry_period = args.retry_period.unwrap_or(effective.retry_period);
    config
}

/// Who may read `/metrics`: anyone on loopback or when turned off explicitly, else whom
/// the host's authenticator allows once `slot` holds it (the host reached).
fn metrics_access(
    args: &ControllerManagerArgs,
    slot: &Arc<OnceLock<Arc<http_auth::Authenticator>>>,
) -> MetricsAccess {
    match http_auth::exposure(&args.metrics_addr, args.metrics_insecure_no_auth) {
        Exposure::Authenticated => MetricsAccess::Authenticated(slot.clone()),
        Exposure::InsecureOpen => {
            warn!(addr = %args.metrics_addr, "/metrics is served without authentication (--metrics-insecure-no-auth)");
            MetricsAccess::Open
        }
        Exposure::Loopback => MetricsAccess::Open,
    }
}

/// Serves the dashboard when `--dashboard-addr` is given.
async fn start_dashboard(
    host: &Client,
    namespace: &str,
    args: &ControllerManagerArgs,
    ctx: &Context,
) -> anyhow::Result<()> {
    let Some(bind) = args.dashboard_addr else {
        return Ok(());
    };
    let addr = flotilla_dashboard::start(
        host.clone(),
        namespace,
        bind,
        args.dashboard_insecure_no_auth,
        ctx.shutdown.clone(),
    )
    .await
    .with_context(|| format!("serving the dashboard on {bind}"))?;
    info!(url = %flotilla_dashboard::url(addr), "serving the dashboard");
    Ok(())
}

/// The access provider file of `--access-providers`, read and parsed.
fn access_providers(
    path: Option<&std::path::Path>,
) -> anyhow::Result<Option<flotilla_multicluster::provider::profiles::AccessProviders>> {
    let Some(path) = path else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --access-providers {}", path.display()))?;
    let parsed = flotilla_multicluster::provider::profiles::AccessProviders::parse(&text)
        .map_err(|e| anyhow::anyhow!("--access-providers {}: {e}", path.display()))?;
    Ok(Some(parsed))
}

/// Runs `flotilla controller-manager` until `ctx.shutdown` fires. Losing leadership is
/// not an end: the controllers stop and the instance campaigns again.
pub async fn run(
    global: &GlobalArgs,
    args: ControllerManagerArgs,
    ctx: &Context,
) -> anyhow::Result<()> {
    args.refuse_bad_flags()?;
    let namespace = global.kubefed_namespace.clone();
    let options = Options {
        namespace: namespace.clone(),
        profile_namespace: args.cluster_profile_namespace.clone(),
        shard_member_work: args.shard_member_work,
        credential_renewal_interval: args.credential_renewal_interval,
        exec_plugin_dir: args.exec_plugin_dir.clone(),
        access_providers: access_providers(args.access_providers.as_deref())?,
    };
    let metrics = Arc::new(Metrics::new());
    let leading = Gauge::<i64>::default();
    metrics.register(
        "leader",
        "1 while this controller-manager holds the leader Lease and runs the controllers",
        leading.clone(),
    );
    let health = Arc::new(Health::default());
    let leading = Leading {
        gauge: leading,
        health: health.clone(),
    };
    let authenticator = Arc::new(OnceLock::new());
    let addr = http::serve(
        args.metrics_addr,
        metrics.clone(),
        health.clone(),
        metrics_access(&args, &authenticator),
        ctx.shutdown.clone(),
    )
    .await
    .with_context(|| format!("listening on {}", args.metrics_addr))?;
    info!(%addr, "serving /metrics, /healthz and /readyz");

    let lease = args
        .leader_elect
        .then_some(args.leader_election_id.as_str());
    let Some((host, version)) = connect(global, &namespace, lease, &health, ctx).await else {
        return Ok(());
    };
    let _ = authenticator.set(http_auth::Authenticator::new(host.clone()));
    info!(host_version = %version.git_version, %namespace, "connected to the host cluster");
    let _webhook = start_webhook(&host, &namespace, &args, &metrics).await?;
    start_dashboard(&host, &namespace, &args, ctx).await?;
    // Ready means "can serve as leader or standby": the host answered.
    health.set_ready(true);
    let sharded = start_sharded(&host, &namespace, &args);

    if !args.leader_elect {
        let cp = ControlPlane::start_with(host, &options, metrics.clone());
        leading.set(true);
        ctx.shutdown.cancelled().await;
        cp.shutdown().await;
        leading.set(false);
        if let Some(sharded) = sharded {
            sharded.stop().await;
        }
        info!("controller-manager stopped");
        return Ok(());
    }

    let config = election_config(&host, &namespace, &args).await;
    info!(
        identity = %config.identity,
        lease = %config.lease_name,
        lease_duration = ?config.lease_duration,
        renew_deadline = ?config.renew_deadline,
        retry_period = ?config.retry_period,
        "leader election enabled"
    );
    let mut elector = LeaderElector::new(host.clone(), config)?;
    lead_while_elected(&mut elector, &host, &options, &metrics, &leading, ctx).await;
    if let Some(sharded) = sharded {
        sharded.stop().await;
    }
    Ok(())
}

/// Aborts the webhook's serving task when dropped.
struct WebhookTask(tokio::task::JoinHandle<()>);

impl Drop for WebhookTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the auto-mount webhook when `--webhook-addr` is given.
async fn start_webhook(
    host: &Client,
    namespace: &str,
    args: &ControllerManagerArgs,
    metrics: &Metrics,
) -> anyhow::Result<Option<WebhookTask>> {
    let Some(bind) = args.webhook_addr else {
        return Ok(None);
    };
    let options = webhook::WebhookOptions {
        bind,
        names: args.webhook_cert_names.clone(),
        configuration: args.webhook_configuration.clone(),
        cert_secret: webhook::DEFAULT_CERT_SECRET.into(),
        namespace: namespace.into(),
        rotation: args.rotation_policy(),
        metrics: Some(metrics.with_registry(webhook::expiry::WebhookMetrics::register)),
    };
    let (_, task) = webhook::start(host.clone(), &options)
        .await
        .context("starting the service-account-import webhook")?;
    Ok(Some(WebhookTask(task)))
}

/// Whether this instance runs the controllers: the `flotilla_leader` gauge and `/readyz`.
struct Leading {
    gauge: Gauge<i64>,
    health: Arc<Health>,
}

impl Leading {
    fn set(&self, leading: bool) {
        self.gauge.set(i64::from(leading));
        self.health.set_leading(leading);
    }
}

/// The first wait between attempts to start (doubling up to [`START_RETRY_MAX`]).
const START_RETRY: Duration = Duration::from_secs(2);
/// The longest wait between attempts to start.
const START_RETRY_MAX: Duration = Duration::from_secs(30);

/// Loads the host's configuration and checks the host with it (reachable, TLS verified,
/// credential accepted, the RBAC of `config/rbac/`) until all holds; each failure is
/// logged and shown on `/readyz` with its reason, then tried again — with the files read
/// anew, so a token or CA mounted late is picked up. `None` when shut down first.
async fn connect(
    global: &GlobalArgs,
    namespace: &str,
    lease: Option<&str>,
    health: &Health,
    ctx: &Context,
) -> Option<(Client, k8s_openapi::apimachinery::pkg::version::Info)> {
    let mut delay = START_RETRY;
    loop {
        let attempt = async {
            let config = |e: anyhow::Error| Problem::Credentials(startup::messages(e.chain()));
            let host = access::host(global)
                .await
                .map_err(config)?
                .client()
                .map_err(config)?;
            let wanted = startup::required_permissions(namespace, lease);
            let version = startup::check_host(&host, wanted).await?;
            Ok::<_, Problem>((host, version))
        };
        let problem = tokio::select! {
            result = attempt => match result {
                Ok(connected) => {
                    health.set_problem(None);
                    return Some(connected);
                }
                Err(problem) => problem,
            },
            _ = ctx.shutdown.cancelled() => return None,
        };
        if matches!(problem, Problem::Unreachable(_)) {
            warn!(reason = problem.reason(), retry_in = ?delay, "the host cluster does not answer yet: {problem}");
        } else {
            error!(reason = problem.reason(), retry_in = ?delay, "cannot start the controllers: {problem}");
        }
        health.set_problem(Some(problem.to_string()));
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = ctx.shutdown.cancelled() => return None,
        }
        delay = (delay * 2).min(START_RETRY_MAX);
    }
}

/// Campaigns, runs the controllers while leading, and campaigns again when leadership is
/// lost, until shutdown. The Lease is released only after the controllers have stopped.
async fn lead_while_elected(
    elector: &mut LeaderElector,
    host: &Client,
    options: &Options,
    metrics: &Arc<Metrics>,
    leading: &Leading,
    ctx: &Context,
) {
    let mut terms = 0u64;
    loop {
        if !elector.acquire(&ctx.shutdown).await {
            info!("stopped before becoming leader");
            return;
        }
        terms += 1;
        info!(identity = %elector.config().identity, term = terms, "leading: starting the controllers");
        let cp = ControlPlane::start_with(host.clone(), options, metrics.clone());
        leading.set(true);
        let end = elector.hold(&ctx.shutdown).await;
        leading.set(false);
        cp.shutdown().await;
        match end {
            LeadershipEnd::Cancelled => {
                // Released only now that nothing of ours writes any more.
                elector.release().await;
                info!("controller-manager stopped; lease released");
                return;
            }
            LeadershipEnd::Lost => {
                warn!("leader election lost; controllers stopped, campaigning again as a standby");
            }
        }
    }
}
