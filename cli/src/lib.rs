//! The `flotilla` command line: the controller-manager, a kubefedctl-compatible CLI
//! (`join`, `unjoin`, `enable`, `disable`, `federate`, `orphaning-deletion`), `status`,
//! `uninstall`,
//! the `dev` demo, `bench` and `version`. `dev` and `bench` exist only with the crate's
//! `dev` feature (on by default; the container image builds without it).
//!
//! The binary is a thin shell around [`run`] / [`execute`], so tests drive every command
//! in-process with their own [`Context`] (captured output, their own shutdown signal).
//! Commands use `anyhow`: they are the outermost layer and only report.

pub mod access;
pub mod dashboard;
pub mod decision;
#[cfg(feature = "dev")]
pub mod dev;
pub mod diff;
pub mod drift;
pub mod enable;
pub mod federate;
pub mod join;
pub mod logging;
pub mod manager;
pub mod optional_apis;
pub mod orphan;
pub mod output;
pub mod progress;
pub mod pull;
pub mod rebalance;
pub mod resolve;
pub mod rollout;
pub mod rollout_history;
pub mod status;
pub mod status_capacity;
pub mod traces;
pub mod unfederate;
pub mod uninstall;

use std::{ffi::OsString, path::PathBuf, time::Duration};

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

pub use self::output::Output;

/// Field manager of every object the CLI writes with server-side apply.
pub const FIELD_MANAGER: &str = flotilla_api::FIELD_MANAGER;

/// The examples of every build; a build with `dev` adds the local demo.
macro_rules! examples {
    () => {
        "\
Examples:
  # Run the control plane (in the host cluster, or against it from outside)
  flotilla controller-manager --kubefed-namespace kube-federation-system

  # Register two member clusters from kubeconfig contexts
  flotilla join cluster1 --cluster-context c1 --host-cluster-context host
  flotilla join cluster2 --cluster-context c2 --host-cluster-context host

  # Federate a type, then an existing object of it
  flotilla enable deployments.apps
  flotilla federate deployment nginx -n demo

  # Watch propagation, and wait for it in a script
  flotilla status -n demo
  flotilla status federateddeployment/nginx -n demo --wait --timeout 2m"
    };
}

#[cfg(feature = "dev")]
const EXAMPLES: &str = concat!(
    examples!(),
    "

  # Try it all on local clusters
  flotilla dev up --members 2"
);
#[cfg(not(feature = "dev"))]
const EXAMPLES: &str = examples!();

/// Flotilla: a kubefed-compatible multi-cluster federation control plane.
#[derive(Debug, Parser)]
#[command(name = "flotilla", version, after_help = EXAMPLES)]
pub struct Cli {
    /// Options shared by every command.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// kubectl-style options of every command.
#[derive(Debug, Clone, clap::Args)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context of the host cluster. `--host-cluster-context` (kubefedctl's
    /// name) is the same flag, accepted by every command.
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        visible_alias = "host-cluster-context"
    )]
    pub context: Option<String>,
    /// Namespace of the objects a command works on (default: the context's namespace).
    #[arg(short = 'n', long, global = true, value_name = "NS")]
    pub namespace: Option<String>,
    /// The control-plane namespace in the host cluster.
    #[arg(
        long,
        global = true,
        env = "KUBEFED_NAMESPACE",
        default_value = flotilla_api::DEFAULT_NAMESPACE,
        value_name = "NS"
    )]
    pub kubefed_namespace: String,
    /// Log format: `text` for people, `json` for log collectors. The filter is RUST_LOG.
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Text)]
    pub log_format: logging::LogFormat,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the control plane (every controller) under leader election.
    #[command(after_help = manager::EXAMPLES)]
    ControllerManager(manager::ControllerManagerArgs),
    /// Register a member cluster with the host (kubefedctl join).
    #[command(after_help = join::JOIN_EXAMPLES)]
    Join(join::JoinArgs),
    /// Remove a member cluster from the federation (kubefedctl unjoin).
    #[command(after_help = join::UNJOIN_EXAMPLES)]
    Unjoin(join::UnjoinArgs),
    /// Enable propagation of a type: create its Federated CRD and FederatedTypeConfig.
    #[command(after_help = enable::ENABLE_EXAMPLES)]
    Enable(enable::EnableArgs),
    /// Disable propagation of a type and delete its FederatedTypeConfig.
    #[command(after_help = enable::DISABLE_EXAMPLES)]
    Disable(enable::DisableArgs),
    /// Build a Federated object from an existing resource (all clusters).
    #[command(after_help = federate::EXAMPLES)]
    Federate(federate::FederateArgs),
    /// The way back: print (or apply) the plain object and the policies that take a
    /// Federated object over.
    #[command(after_help = unfederate::EXAMPLES)]
    Unfederate(unfederate::UnfederateArgs),
    /// Keep (or stop keeping) member objects when a federated object is deleted.
    #[command(name = "orphaning-deletion", after_help = orphan::EXAMPLES)]
    OrphaningDeletion(orphan::OrphanArgs),
    /// Show what a federated object would change in each member cluster (kubectl diff).
    #[command(after_help = diff::EXAMPLES)]
    Diff(diff::DiffArgs),
    /// Show per-cluster propagation of federated objects; optionally wait for it.
    #[command(after_help = status::EXAMPLES)]
    Status(status::StatusArgs),
    /// Serve the live web dashboard (clusters, federated objects, per-cluster state).
    #[command(after_help = dashboard::EXAMPLES)]
    Dashboard(dashboard::DashboardArgs),
    /// Divide a workload's replicas again, once, from the members' current capacity.
    #[command(after_help = rebalance::EXAMPLES)]
    Rebalance(rebalance::RebalanceArgs),
    /// Follow, pause, resume and undo a progressive rollout (spec.rollout).
    #[command(subcommand, after_help = rollout::EXAMPLES)]
    Rollout(rollout::RolloutCommand),
    /// A local federation for trying Flotilla: host + members, samples, propagation.
    #[cfg(feature = "dev")]
    #[command(subcommand)]
    Dev(dev::DevCommand),
    /// Measure propagation on local clusters against the raw API servers.
    #[cfg(feature = "dev")]
    Bench(flotilla_dev::bench::BenchOptions),
    /// Run the pull-mode agent inside a member cluster (see `join --mode pull`).
    Agent(pull::AgentArgs),
    /// Remove every federated object before uninstalling, keeping or deleting member objects.
    #[command(after_help = uninstall::EXAMPLES)]
    Uninstall(uninstall::UninstallArgs),
    /// Answer `clusterset.local` DNS queries for a member's multi-cluster services.
    Dns(flotilla_dns::Args),
    /// Route a member's ClusterSet IPs to the merged endpoints (selector-less Services
    /// `<svc>-clusterset` for kube-proxy).
    ClustersetRoutes(flotilla_dns::routes::Args),
    /// Print the version.
    Version,
}

/// A command's outcome that sets a particular exit status (the binary maps it with
/// [`Exit::code`]); other errors exit with 1.
#[derive(Debug, thiserror::Error)]
pub enum Exit {
    /// `diff` found differences: status 1, nothing more to print.
    #[error("differences found")]
    Differences,
    /// `diff` failed: status 2, as `kubectl diff`.
    #[error("{0}")]
    Failed(String),
}

impl Exit {
    /// The process exit status.
    pub fn code(&self) -> u8 {
        match self {
            Exit::Differences => 1,
            Exit::Failed(_) => 2,
        }
    }

    /// Whether the binary prints the error (`Differences` was already shown).
    pub fn is_reported(&self) -> bool {
        matches!(self, Exit::Failed(_))
    }
}

/// What a command runs with besides its arguments.
#[derive(Clone, Debug)]
pub struct Context {
    /// Where results go (stdout, or a buffer in tests).
    pub out: Output,
    /// Cancelled on SIGINT/SIGTERM: long-running commands stop cleanly.
    pub shutdown: CancellationToken,
}

impl Context {
    /// Output to stdout and a shutdown token nobody has cancelled yet.
    pub fn stdout() -> Self {
        Context {
            out: Output::stdout(),
            shutdown: CancellationToken::new(),
        }
    }

    /// Output captured into a buffer (read it with [`Output::text`]).
    pub fn captured() -> Self {
        Context {
            out: Output::captured(),
            shutdown: CancellationToken::new(),
        }
    }
}

/// Parses `args` (the first one is the program name) and runs the command.
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// use flotilla_cli::{self as cli, Context};
/// let ctx = Context::captured();
/// cli::run(["flotilla", "status", "-A"], ctx.clone()).await?;
/// println!("{}", ctx.out.text());
/// # Ok(())
/// # }
/// ```
pub async fn run<I, T>(args: I, ctx: Context) -> anyhow::Result<()>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = Cli::try_parse_from(args)?;
    execute(cli, ctx).await
}

/// Runs a parsed command.
pub async fn execute(cli: Cli, ctx: Context) -> anyhow::Result<()> {
    let global = cli.global;
    #[cfg(feature = "dev")]
    if matches!(cli.command, Command::Bench(_)) {
        access::own_clusters_only(&global, "bench")?;
    }
    match cli.command {
        Command::ControllerManager(args) => manager::run(&global, args, &ctx).await,
        Command::Join(args) if args.mode == join::JoinMode::Pull => {
            pull::join(&global, args, &ctx).await
        }
        Command::Join(args) => join::join(&global, args, &ctx).await,
        Command::Unjoin(args) => join::unjoin(&global, args, &ctx).await,
        Command::Enable(args) => enable::enable(&global, args, &ctx).await,
        Command::Disable(args) => enable::disable(&global, args, &ctx).await,
        Command::Federate(args) => federate::run(&global, args, &ctx).await,
        Command::Unfederate(args) => unfederate::run(&global, args, &ctx).await,
        Command::OrphaningDeletion(args) => orphan::run(&global, args, &ctx).await,
        Command::Status(args) => status::run(&global, args, &ctx).await,
        Command::Diff(args) => diff::run(&global, args, &ctx).await,
        Command::Dashboard(args) => dashboard::run(&global, args, &ctx).await,
        Command::Rollout(cmd) => rollout::run(&global, cmd, &ctx).await,
        Command::Rebalance(args) => rebalance::run(&global, args, &ctx).await,
        Command::Agent(args) => pull::agent(&global, args, &ctx).await,
        Command::Uninstall(args) => uninstall::run(&global, args, &ctx).await,
        Command::Dns(args) => flotilla_dns::run(access::host(&global).await?.client()?, args).await,
        Command::ClustersetRoutes(args) => {
            flotilla_dns::routes::run(access::host(&global).await?.client()?, args).await
        }
        #[cfg(feature = "dev")]
        Command::Dev(cmd) => dev::run(&global, cmd, &ctx).await,
        #[cfg(feature = "dev")]
        Command::Bench(opts)
            if opts.scenario == Some(flotilla_dev::bench::Scenario::StatusCost) =>
        {
            let report = flotilla_dev::bench::status_cost::run(&opts).await?;
            ctx.out.write(report.table());
            Ok(())
        }
        #[cfg(feature = "dev")]
        Command::Bench(opts)
            if opts.scenario == Some(flotilla_dev::bench::Scenario::Capacity10x1000) =>
        {
            let report = tokio::select! {
                report = flotilla_dev::bench::capacity_cost::run(&opts) => report?,
                () = ctx.shutdown.cancelled() => {
                    anyhow::bail!("benchmark stopped by a signal before it finished; no report")
                }
            };
            ctx.out.write(report.table());
            Ok(())
        }
        #[cfg(feature = "dev")]
        Command::Bench(opts) if opts.compare_bin.is_some() => {
            let report = tokio::select! {
                report = flotilla_dev::bench::compare::run(opts) => report?,
                () = ctx.shutdown.cancelled() => {
                    anyhow::bail!("comparison stopped by a signal before it finished; no report")
                }
            };
            ctx.out.write(report.table());
            Ok(())
        }
        #[cfg(feature = "dev")]
        Command::Bench(opts) => {
            // A signal ends the run: dropping it stops its clusters and control plane.
            let report = tokio::select! {
                report = flotilla_dev::bench::run(opts) => report?,
                () = ctx.shutdown.cancelled() => {
                    anyhow::bail!("benchmark stopped by a signal before it finished; no report")
                }
            };
            ctx.out.write(report.table());
            // The report (and its --json) is kept; the exit status says it is incomplete.
            match &report.raw_error {
                Some(e) => anyhow::bail!("the raw baseline did not finish: {e}"),
                None => Ok(()),
            }
        }
        Command::Version => {
            ctx.out.line(format!(
                "flotilla {} (kubefed API {}/{})",
                env!("CARGO_PKG_VERSION"),
                flotilla_api::CORE_GROUP,
                flotilla_api::V1BETA1
            ));
            Ok(())
        }
    }
}

/// Parses a Go-style duration (`90s`, `2m`, `1m30s`, `500ms`) for a flag.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    flotilla_api::duration::parse(s)
        .ok_or_else(|| format!("{s:?} is not a duration (examples: 30s, 2m, 1m30s, 500ms)"))
}

/// Parses a `key=value` label for a flag.
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{s:?} is not a label (expected key=value)")),
    }
}

/// Server-side applies `object` as `name` with the CLI's field manager. Forced, so a field
/// someone else set by hand is taken over rather than failing the command with a conflict.
pub async fn apply<K, P>(api: &kube::Api<K>, name: &str, object: &P) -> kube::Result<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    P: serde::Serialize + std::fmt::Debug,
{
    let params = kube::api::PatchParams::apply(FIELD_MANAGER).force();
    api.patch(name, &params, &kube::api::Patch::Apply(object))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_are_accepted_after_the_command_like_kubectl() {
        let cli = Cli::try_parse_from([
            "flotilla",
            "status",
            "federatedconfigmaps",
            "-n",
            "demo",
            "--kubeconfig",
            "/tmp/kc",
            "--context",
            "host",
        ])
        .expect("parses");
        assert_eq!(cli.global.namespace.as_deref(), Some("demo"));
        assert_eq!(cli.global.context.as_deref(), Some("host"));
        assert_eq!(cli.global.kubefed_namespace, "kube-federation-system");
    }

    #[test]
    fn every_command_accepts_kubefedctls_host_cluster_context() {
        for args in [
            &["federate", "configmaps", "plain", "-n", "ns"][..],
            &["join", "cluster1", "--cluster-context", "c1"][..],
            &["unjoin", "cluster1"][..],
            &["enable", "deployments.apps"][..],
            &["status", "-n", "demo"][..],
            &["disable", "widgets.example.com"][..],
            &["orphaning-deletion", "status", "fdeploy", "web"][..],
            &["diff", "federateddeployment/web", "-n", "demo"][..],
            &["diff", "-f", "web.yaml"][..],
            &["federate", "-f", "app.yaml", "--apply"][..],
            &["federate", "secrets", "s", "--enable-type"][..],
            &["controller-manager"][..],
            &["dashboard", "--address", "127.0.0.1:0"][..],
            &[
                "enable",
                "limitranges",
                "--federated-group",
                "x.example.io",
                "--federated-version",
                "v1alpha1",
            ][..],
        ] {
            let argv = ["flotilla"]
                .iter()
                .chain(args)
                .chain(&["--host-cluster-context", "host"]);
            let cli = Cli::try_parse_from(argv).expect("parses");
            assert_eq!(cli.global.context.as_deref(), Some("host"), "{args:?}");
        }
    }

    #[test]
    fn labels_and_durations_parse_like_kubectl_flags() {
        assert_eq!(parse_label("region=eu"), Ok(("region".into(), "eu".into())));
        assert!(parse_label("=eu").is_err());
        assert!(parse_label("region").is_err());
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("soon").is_err());
    }
}
