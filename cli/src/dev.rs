//! `flotilla dev up`: a whole federation on this machine, for trying Flotilla. It starts a
//! local host and N members (the test environment of `flotilla-localenv`), installs the
//! CRDs and the default type configs and joins the members (labelled `name=<member>`)
//! through the shared [`flotilla_dev::bootstrap`], runs the control plane in-process (and
//! `flotilla dns` for each member, on loopback), applies the
//! samples of `config/samples/`, waits until they are propagated and prints the status and
//! how to look with kubectl. Ctrl-C (or SIGTERM) stops the control plane and every cluster
//! process and deletes their files.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use flotilla_localenv::{EnvOptions, LocalEnv};
use kube::Client;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::status::{self, Selection};
use super::{Context, FIELD_MANAGER, GlobalArgs, federate, parse_duration};
use flotilla_controllers::manager::ControlPlane;
use flotilla_controllers::metrics::Metrics;
use flotilla_dev::bootstrap::{Bootstrap, Progress};

/// The samples `dev up` applies, in order (the namespace first). The KubeFedCluster sample
/// is left out: `dev up` joins real clusters instead of its placeholders.
pub const SAMPLES: &[(&str, &str)] = &[
    (
        "federatednamespace.yaml",
        include_str!("../../config/samples/federatednamespace.yaml"),
    ),
    (
        "federatedconfigmap.yaml",
        include_str!("../../config/samples/federatedconfigmap.yaml"),
    ),
    (
        "federateddeployment.yaml",
        include_str!("../../config/samples/federateddeployment.yaml"),
    ),
    (
        "replicaschedulingpreference.yaml",
        include_str!("../../config/samples/replicaschedulingpreference.yaml"),
    ),
];

/// The namespace the samples live in.
pub const SAMPLE_NAMESPACE: &str = "demo";

/// `flotilla dev` commands.
#[derive(Debug, clap::Subcommand)]
pub enum DevCommand {
    /// Start a local host + members, federate the samples, and keep running until Ctrl-C.
    #[command(after_help = UP_EXAMPLES)]
    Up(DevUpArgs),
}

/// Examples of `flotilla dev up --help`.
pub const UP_EXAMPLES: &str = "\
Examples:
  # Host + 2 members; Ctrl-C stops and deletes everything
  flotilla dev up

  # 3 members, with a kubeconfig for kubectl written to ./dev.kubeconfig
  flotilla dev up --members 3 --kubeconfig-out dev.kubeconfig

  # CI: exit 0 once the samples are propagated (non-zero on failure), cleaning up
  flotilla dev up --non-interactive

Needs kube-apiserver, kube-controller-manager and kube-scheduler (scripts/install-k8s.sh, or
KUBE_BIN_DIR) and etcd on PATH. Pods are scheduled onto simulated nodes and reported Running
and Ready by a simulated kubelet: no container runs.";

/// Arguments of `flotilla dev up`.
#[derive(Debug, Clone, clap::Args)]
pub struct DevUpArgs {
    /// Number of member clusters (member1, member2, ...).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=20))]
    pub members: u16,
    /// Also write the kubeconfig (contexts host, member1, ...) to this file.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig_out: Option<PathBuf>,
    /// Stop and exit once the samples are propagated (exit code 0), or on failure.
    #[arg(long)]
    pub non_interactive: bool,
    /// How long propagation of the samples may take.
    #[arg(long, default_value = "180s", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
}

/// Runs a `flotilla dev` command.
pub async fn run(global: &GlobalArgs, cmd: DevCommand, ctx: &Context) -> anyhow::Result<()> {
    super::access::own_clusters_only(global, "dev up")?;
    match cmd {
        DevCommand::Up(args) => up(args, ctx).await,
    }
}

/// Runs `fut` unless `cancel` fires first.
async fn cancellable<T>(
    cancel: &CancellationToken,
    fut: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::select! {
        r = fut => r,
        _ = cancel.cancelled() => anyhow::bail!("interrupted"),
    }
}

async fn up(args: DevUpArgs, ctx: &Context) -> anyhow::Result<()> {
    let out = &ctx.out;
    let started = Instant::now();
    out.line(format!(
        "Starting a local host cluster and {} member cluster(s)...",
        args.members
    ));
    // The host stores plain workload manifests for policies without running them
    // (docs/policies.md, "A host that stores templates").
    let mut options = EnvOptions::with_members(args.members.into()).with_pods();
    options.host_workload_controllers = false;
    let env = cancellable(&ctx.shutdown, async {
        LocalEnv::start(options)
            .await
            .map_err(|e| anyhow::Error::new(e).context("starting the local clusters"))
    })
    .await?;
    out.line(format!(
        "  {} clusters up in {:.1}s (working directory {})",
        env.clusters().len(),
        started.elapsed().as_secs_f64(),
        env.dir().display()
    ));
    let result = federate_and_wait(&env, &args, ctx).await;
    if let Err(e) = &result {
        out.line(format!("dev up failed: {e:#}"));
    }
    out.line("Stopping the control plane and the local clusters...");
    env.shutdown()
        .await
        .context("stopping the local clusters")?;
    out.line("Stopped; every process started here is gone.");
    result
}

async fn federate_and_wait(env: &LocalEnv, args: &DevUpArgs, ctx: &Context) -> anyhow::Result<()> {
    let out = &ctx.out;
    let boot = bootstrap();
    let fed = cancellable(&ctx.shutdown, async {
        boot.federate(env, |step| match step {
            Progress::Installed { crds, type_configs } => out.line(format!(
                "  installed {crds} CRDs and {type_configs} FederatedTypeConfigs"
            )),
            Progress::Joined { name, server } => out.line(format!("  joined {name} ({server})")),
        })
        .await
        .map_err(anyhow::Error::new)
    })
    .await?;
    let cp = ControlPlane::start(fed.host.clone(), &boot.namespace, Arc::new(Metrics::new()));
    let (addr, webhook) = flotilla_webhook::local::start_local(fed.host.clone(), &boot.namespace)
        .await
        .context("starting the service-account-import webhook")?;
    out.line(format!(
        "  service-account-import webhook serving on {addr}"
    ));
    let dashboard = ctx.shutdown.child_token();
    let url = start_dashboard(&fed.host, &boot.namespace, &dashboard).await?;
    out.line(format!("  dashboard (live, read-only): {url}"));
    let dns = start_dns(env, &fed.members, ctx).await?;
    let result = run_demo(env, &fed.host, &boot, &cp, args, ctx).await;
    drop(dns);
    dashboard.cancel();
    webhook.abort();
    cp.shutdown().await;
    result
}

/// Serves the dashboard on its default loopback address, or any free loopback port when
/// that one is taken (another demo); returns its URL.
async fn start_dashboard(
    host: &Client,
    namespace: &str,
    cancel: &CancellationToken,
) -> anyhow::Result<String> {
    let default: std::net::SocketAddr = flotilla_dashboard::DEFAULT_ADDRESS.parse()?;
    // Loopback: open, as the authentication rule allows (no flag needed).
    let addr =
        match flotilla_dashboard::start(host.clone(), namespace, default, false, cancel.clone())
            .await
        {
            Ok(addr) => addr,
            Err(_) => flotilla_dashboard::start(
                host.clone(),
                namespace,
                ([127, 0, 0, 1], 0).into(),
                false,
                cancel.clone(),
            )
            .await
            .context("serving the dashboard")?,
        };
    Ok(flotilla_dashboard::url(addr))
}

/// `flotilla dns` for each member, on a free loopback port each (no cluster DNS forwards to
/// them here: ask them directly, as the printed `dig` line shows).
async fn start_dns(
    env: &LocalEnv,
    members: &[Client],
    ctx: &Context,
) -> anyhow::Result<Vec<flotilla_dns::Dns>> {
    let mut servers = Vec::new();
    for (cluster, member) in env.members().iter().zip(members) {
        let dns = cancellable(&ctx.shutdown, async {
            flotilla_dns::Dns::start(member.clone(), ([127, 0, 0, 1], 0).into(), 5)
                .await
                .with_context(|| format!("starting clusterset.local DNS for {}", cluster.name()))
        })
        .await?;
        ctx.out.line(format!(
            "  {}: clusterset.local DNS on {} (dig @{} -p {} <svc>.<ns>.svc.clusterset.local)",
            cluster.name(),
            dns.addr,
            dns.addr.ip(),
            dns.addr.port()
        ));
        servers.push(dns);
    }
    Ok(servers)
}

/// The demo's federation: written as `flotilla`, with quicker health checks than the
/// defaults, so members turn Ready within a second or two.
fn bootstrap() -> Bootstrap {
    let mut boot = Bootstrap::new(FIELD_MANAGER);
    boot.collect_workload_status = true;
    if let Some(hc) = boot.config.cluster_health_check.as_mut() {
        hc.period = Some("2s".into());
        hc.timeout = Some("2s".into());
    }
    boot
}

async fn run_demo(
    env: &LocalEnv,
    host: &Client,
    boot: &Bootstrap,
    cp: &ControlPlane,
    args: &DevUpArgs,
    ctx: &Context,
) -> anyhow::Result<()> {
    let out = &ctx.out;
    let cancel = &ctx.shutdown;
    let members = env.members().len();
    cancellable(cancel, async {
        flotilla_dev::bootstrap::wait_ready(cp, members, boot.ready_timeout)
            .await
            .map_err(anyhow::Error::new)
    })
    .await?;
    out.line(format!(
        "  control plane running; {members} member(s) Ready"
    ));

    for (file, text) in SAMPLES {
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(text).with_context(|| format!("parsing sample {file}"))?;
        for doc in docs.iter().filter(|d| !d.is_null()) {
            cancellable(cancel, apply_with_retry(host, doc)).await?;
        }
        out.line(format!("  applied config/samples/{file}"));
    }

    out.line("Waiting for propagation...\n");
    let selection = Selection {
        namespace: Some(SAMPLE_NAMESPACE.into()),
        ..Selection::default()
    };
    let objects = status::wait(
        host,
        flotilla_api::DEFAULT_NAMESPACE,
        &selection,
        args.timeout,
        cancel,
        out,
    )
    .await?;
    out.write(status::table(&objects));
    out.line("");
    out.line(format!("all propagated: {}", status::summary(&objects)));
    out.line(
        "\nWaiting for the workloads' pods (simulated kubelet: pods are reported Running, no container runs)...\n",
    );
    let objects = cancellable(cancel, wait_workloads_ready(host, &selection, args.timeout)).await?;
    out.write(status::table(&objects));

    let kubeconfig = match &args.kubeconfig_out {
        Some(path) => {
            std::fs::copy(env.kubeconfig_path(), path)
                .with_context(|| format!("writing the kubeconfig to {}", path.display()))?;
            path.clone()
        }
        None => env.kubeconfig_path().to_path_buf(),
    };
    out.write(instructions(env, &kubeconfig.display().to_string()));
    if args.non_interactive {
        return Ok(());
    }
    out.line(
        "\nPress Ctrl-C to stop; every process started here is stopped and its files deleted.",
    );
    cancel.cancelled().await;
    Ok(())
}

/// Waits until every federated workload in `selection` reports all its clusters and pods
/// ready (`status.aggregated`), and returns the last snapshot.
async fn wait_workloads_ready(
    host: &Client,
    selection: &Selection,
    timeout: Duration,
) -> anyhow::Result<Vec<status::ObjectState>> {
    let deadline = Instant::now() + timeout;
    loop {
        let (objects, _) =
            status::snapshot(host, flotilla_api::DEFAULT_NAMESPACE, selection).await?;
        let ready = objects
            .iter()
            .filter_map(|o| o.status.aggregated.as_ref())
            .all(|a| a.all_ready());
        if ready {
            return Ok(objects);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the workloads' pods were not all ready within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What to try next, printed once everything is propagated.
fn instructions(env: &LocalEnv, kubeconfig: &str) -> String {
    let mut text = String::from("\nThe local federation is running:\n");
    for c in env.clusters() {
        text.push_str(&format!("  {:<9} {}\n", c.name(), c.server()));
    }
    let contexts: Vec<&str> = env.clusters().iter().map(|c| c.name()).collect();
    text.push_str(&format!(
        "\nKubeconfig: {kubeconfig} (contexts: {})\n\nTry:\n",
        contexts.join(", ")
    ));
    let k = format!("kubectl --kubeconfig {kubeconfig}");
    text.push_str(&format!(
        "  {k} --context host get federatednamespaces,federatedconfigmaps,federateddeployments -n demo\n"
    ));
    text.push_str(&format!(
        "  {k} --context member1 get deploy,pods -n demo -o wide   # simulated pods: no container runs\n"
    ));
    text.push_str(&format!(
        "  {k} --context member1 get configmap web-config -n demo -o yaml\n"
    ));
    let f = format!(
        "{} --kubeconfig {kubeconfig} --context host",
        flotilla_command()
    );
    text.push_str(&format!("  {f} status -n demo\n"));
    text.push_str(&format!(
        "  {f} diff federateddeployment/web -n demo   # what the controller would change, per cluster\n"
    ));
    text.push_str(&format!(
        "  {k} --context host edit federatedconfigmap web-config -n demo   # then look again in the members\n"
    ));
    text
}

/// How a person runs this binary: `flotilla` when that name on the PATH is this very
/// binary, else its full path (`scripts/dev.sh` runs `target/release/flotilla`, which is
/// not on the PATH).
fn flotilla_command() -> String {
    let Ok(exe) = std::env::current_exe() else {
        return "flotilla".into();
    };
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("flotilla"))
            .find(|candidate| candidate.is_file())
    });
    command_for(&exe, on_path.as_deref())
}

/// `flotilla` when `on_path` (what the PATH finds under that name) is `exe`, else `exe`.
fn command_for(exe: &std::path::Path, on_path: Option<&std::path::Path>) -> String {
    let same =
        on_path.is_some_and(
            |p| match (std::fs::canonicalize(p), std::fs::canonicalize(exe)) {
                (Ok(a), Ok(b)) => a == b,
                _ => p == exe,
            },
        );
    if same {
        "flotilla".into()
    } else {
        exe.display().to_string()
    }
}

/// Applies a sample, retrying briefly: a just-created namespace or CRD may take a moment.
async fn apply_with_retry(host: &Client, doc: &Value) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match federate::apply(host, doc).await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_names_flotilla_only_when_the_path_finds_this_binary() {
        let exe = std::path::Path::new("/opt/flotilla/target/release/flotilla");
        assert_eq!(command_for(exe, Some(exe)), "flotilla");
        assert_eq!(
            command_for(exe, None),
            "/opt/flotilla/target/release/flotilla"
        );
        assert_eq!(
            command_for(exe, Some(std::path::Path::new("/usr/bin/flotilla"))),
            "/opt/flotilla/target/release/flotilla"
        );
    }

    #[test]
    fn every_embedded_sample_parses_and_the_namespace_comes_first() {
        let kinds: Vec<String> = SAMPLES
            .iter()
            .flat_map(|(file, text)| {
                serde_saphyr::from_multiple::<Value>(text).unwrap_or_else(|e| panic!("{file}: {e}"))
            })
            .filter_map(|d| d["kind"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(kinds.first().map(String::as_str), Some("Namespace"));
        assert!(
            kinds.iter().any(|k| k == "FederatedDeployment"),
            "{kinds:?}"
        );
        assert!(!kinds.iter().any(|k| k == "KubeFedCluster"), "{kinds:?}");
    }
}
