//! `flotilla bench`: propagation speed, cost and steady state of the control plane, each
//! measured against the raw API servers of the same run.
//!
//! One run starts a local host and N members ([`flotilla_localenv`]), joins them, enables the
//! default types and then, per workload kind (ConfigMaps, optionally Deployments):
//!
//! 1. **Flotilla**: the control plane runs in this process on its own Tokio runtime (threads
//!    named `flotilla-cp`, so its CPU time is read per thread). K federated objects are
//!    created in the host at a fixed concurrency; a label-filtered watcher per member records
//!    when each member object appears, so a per-object latency runs from the federated create
//!    call to "present in every member". Then every template is changed (latency to the new
//!    data in every member), a resync is forced and member/host writes are counted (steady
//!    state), and everything is deleted (time until the members are empty).
//! 2. **Raw baseline**: the control plane is stopped and the same K×N objects are created,
//!    updated and deleted straight in the members with admin clients, at the same per-member
//!    concurrency as the sync controller's workers — the physical limit of these API servers.
//!
//! Requests are counted by the API servers themselves (`apiserver_request_total` from each
//! cluster's `/metrics`, before and after a phase). Peak memory cannot be split between
//! threads, so the control plane's RSS is the growth of the process's peak (`VmHWM`, reset
//! through `/proc/self/clear_refs` before each part) during the Flotilla part, minus the
//! same growth during the raw part, where the same watchers and load generator run without
//! a control plane. The control plane runs first, in a process that has not yet allocated for
//! the raw part, so that freed memory of the raw part cannot hide its allocations.
//!
//! [`run`] returns a [`BenchReport`]; [`BenchReport::table`] renders it for people and the
//! report serializes to JSON for tools (`--json PATH`).
//!
//! This module owns the command-line options and the entry point; the parts live in:
//! `workload` (the objects written), `tracker` (watchers that see them land),
//! `procfs` and `requests` (CPU, memory and request counters), `snapshot` (a phase's
//! start and end figures), `control_plane` (the control plane under test), `session`
//! (one run's clusters and its two parts), `warmup` (unmeasured preparation), `phases`
//! (the measured phases) and `report` / `table` (the results).

mod audit;
pub mod capacity_cost;
pub mod capacity_report;
pub mod compare;
mod control_plane;
mod drain;
mod fleet;
mod fleet_phases;
mod fleet_table;
mod host_events;
mod phases;
mod policy_path;
pub mod policy_report;
mod policy_table;
mod procfs;
mod pull;
pub mod pull_report;
mod pull_table;
mod report;
mod requests;
mod restart;
mod run;
mod sequential;
mod session;
mod snapshot;
pub mod status_cost;
mod table;
mod tracker;
mod warmup;
mod workload;

use std::path::PathBuf;

use anyhow::Context as _;
use flotilla_localenv::{EnvOptions, LocalEnv};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

pub use self::fleet::{DrainPhase, FleetReport, HalfFleet, IdleCost, MemoryBudget, SlowMember};
pub use self::policy_report::{HostCost, PolicyPath, Quiet, ThreePaths};
pub use self::pull_report::{AgentCost, PullRequests};
pub use self::report::{
    BenchReport, Comparison, Cost, KindReport, Machine, Percentiles, Phase, Reference, Restart,
    Steady, Target, percentiles,
};
pub use self::requests::{RequestCounts, parse_request_totals};
pub use self::sequential::{SequentialComparison, SequentialPhase};

/// Name of the control plane's runtime threads, by which its CPU time is found.
const CP_THREAD: &str = "flotilla-cp";
/// Namespace of the federated objects (host) and of their member copies.
const FED_NS: &str = "bench";
/// Namespace of federated objects created while no control plane runs (the input's cost).
const INPUT_NS: &str = "bench-input";
/// Namespace of the raw baseline objects in the members.
const RAW_NS: &str = "bench-raw";
/// Host namespace of the policy path's native objects (`--policy`), and of their member
/// copies.
const POLICY_NS: &str = "bench-policy";
/// Label the benchmark's PropagationPolicy selects native objects by.
const POLICY_SELECT_LABEL: &str = "flotilla-bench-policy";
/// Label on every benchmark object; its value tells the parts apart.
const BENCH_LABEL: &str = "flotilla-bench";
/// Field manager of the benchmark's own writes.
const MANAGER: &str = "flotilla-bench";

/// A named workload whose figures can be compared with published ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
pub enum Scenario {
    /// 200 ConfigMaps → 2 members, first create → all 400 member objects present. Reference
    /// on this kind of machine: raw creates 1.5 s, Karmada v1.3.6 push mode 24–29 s.
    #[value(name = "karmada-200x2")]
    #[serde(rename = "karmada-200x2")]
    Karmada200x2,
    /// 10,000 ConfigMaps → 2 members: scale, memory, and a restart with 10,000 objects
    /// propagated (the restart figures of every run; this scenario makes them large).
    #[value(name = "restart-10k")]
    #[serde(rename = "restart-10k")]
    Restart10k,
    /// 1,000 ConfigMaps → 10 members (11 API servers on this machine): fan-out cost per cluster.
    #[value(name = "10-members")]
    #[serde(rename = "10-members")]
    TenMembers,
    /// 1,000 ConfigMaps and 100 Deployments → 100 lean members without a
    /// controller-manager (see `--lean-members`, `--no-member-controller-manager`), started
    /// 10 at a time, with the fleet phases (`--fleet-phases`): what a fleet costs per
    /// cluster.
    #[value(name = "fleet-100")]
    #[serde(rename = "fleet-100")]
    Fleet100,
    /// What one status write of a federated object costs the host API server, by patch
    /// type, status and object size and number of watchers (no control plane; a table of
    /// its own, see `status_cost`).
    #[value(name = "status-cost")]
    #[serde(rename = "status-cost")]
    StatusCost,
    /// What the members' resource summary costs (watches of Nodes and Pods, the summary,
    /// KubeFedCluster and ClusterProfile writes) with 1,000 pods in each of 10 members,
    /// against the same control plane before the pods exist (a table of its own, see
    /// `capacity_cost`; `--objects` is pods per member, `--steady-secs` each window).
    #[value(name = "capacity-10x1000")]
    #[serde(rename = "capacity-10x1000")]
    Capacity10x1000,
}

impl Scenario {
    /// The scenario's name, members and objects.
    fn shape(self) -> (&'static str, usize, usize) {
        match self {
            Scenario::Karmada200x2 => ("karmada-200x2", 2, 200),
            Scenario::Restart10k => ("restart-10k", 2, 10_000),
            Scenario::TenMembers => ("10-members", 10, 1_000),
            Scenario::Fleet100 => ("fleet-100", 100, 1_000),
            Scenario::StatusCost => ("status-cost", 1, 1_000),
            Scenario::Capacity10x1000 => ("capacity-10x1000", 10, 1_000),
        }
    }
}

/// Where the control plane runs during the benchmark.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ControlPlaneMode {
    /// `process` when this program is the `flotilla` binary (or --flotilla-bin is given),
    /// else `in-process`.
    #[default]
    Auto,
    /// In this process on its own runtime: CPU per thread, RSS estimated (an upper bound).
    InProcess,
    /// A child `flotilla controller-manager` (leader election off): CPU and peak RSS exact.
    Process,
}

/// What to benchmark. Defaults: 1,000 ConfigMaps × 4 members, 16 concurrent writes, 16 sync
/// workers, a 10 s steady-state window.
#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct BenchOptions {
    /// A named scenario (sets members and objects; explicit --members/--objects win).
    #[arg(long, value_enum)]
    pub scenario: Option<Scenario>,
    /// Member clusters [default: 4; 2 for karmada-200x2].
    #[arg(long)]
    pub members: Option<usize>,
    /// Federated objects per kind [default: 1000; 200 for karmada-200x2].
    #[arg(long)]
    pub objects: Option<usize>,
    /// Also benchmark as many Deployments (0 replicas, so only the API objects count).
    #[arg(long)]
    pub with_deployments: bool,
    /// Start the members lean, so that many fit on one machine: no kube-controller-manager
    /// in a member, API Priority and Fairness off, the apiserver's collector at `GOGC=25`
    /// (see `--member-gogc`); they start 10 at a time. Implied by `--scenario fleet-100`.
    #[arg(long)]
    pub lean_members: bool,
    /// `GOMEMLIMIT` of a lean member's apiserver (`150MiB`) [default: none]. A limit
    /// below what a watched member holds makes its collector run without pause.
    #[arg(long, value_name = "LIMIT")]
    pub member_memory_limit: Option<String>,
    /// `GOGC` of a lean member's apiserver: lower holds less memory for more collections
    /// [default: 25].
    #[arg(long)]
    pub member_gogc: Option<u32>,
    /// Start the members without a kube-controller-manager and join them with their admin
    /// credentials (no ServiceAccount token is needed). Implied by `--scenario fleet-100`.
    #[arg(long)]
    pub no_member_controller_manager: bool,
    /// Federated Deployments (`replicas: 0`), when fewer than --objects [default: --objects
    /// with --with-deployments; 100 for fleet-100]. Implies --with-deployments.
    #[arg(long)]
    pub deployments: Option<usize>,
    /// The fleet phases: start-to-Ready time, the idle cost per cluster (health checks,
    /// CPU, memory), one new object to every member, and placement by label to half the
    /// fleet and back. Implied by `--scenario fleet-100` and `--slow-member`.
    #[arg(long)]
    pub fleet_phases: bool,
    /// A member the control plane reaches through a fault proxy that, in one phase, delays
    /// its traffic by --slow-latency (a name such as `member3`, or an index from 1).
    #[arg(long, value_name = "NAME|INDEX")]
    pub slow_member: Option<String>,
    /// The delay of the slow member's phase (`2s`, `500ms`).
    #[arg(long, default_value = "2s", value_parser = fleet::parse_latency, value_name = "DURATION")]
    pub slow_latency: std::time::Duration,
    /// Seconds of the fleet phases' idle window (health checks counted).
    #[arg(long, default_value_t = 30)]
    pub idle_secs: u64,
    /// Join every member in pull mode: a Work inventory per member in the host and an agent
    /// per member (run in this process on a runtime of their own, with its scoped host
    /// token) applying it. Every host and member request is counted (Works and AppliedWork
    /// records too), and every agent is restarted after the control plane. Not with
    /// --slow-member.
    #[arg(long)]
    pub pull: bool,
    /// Also measure the policy path on the same clusters: the same objects written as plain
    /// objects into the host, selected by one PropagationPolicy (the host then runs
    /// without its workload controllers), beside the Federated<Kind> path and raw writes.
    #[arg(long)]
    pub policy: bool,
    /// Concurrent writes: federated creates/updates/deletes in the host, and raw writes per
    /// member in the baseline.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Sync workers (KubeFedConfig syncController.maxConcurrentReconciles).
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
    /// Objects of the sequential-client phase, after the concurrent ones: one writer, a GET
    /// before each create (as `kubectl apply -f` of a many-document file), then one bulk
    /// delete; at most --objects, 0 skips it.
    #[arg(long, default_value_t = 200)]
    pub sequential: usize,
    /// Seconds to count writes after forcing a resync of every converged object.
    #[arg(long, default_value_t = 10)]
    pub steady_secs: u64,
    /// Seconds one phase may take before the run fails.
    #[arg(long, default_value_t = 600)]
    pub phase_timeout_secs: u64,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Where the control plane runs.
    #[arg(long, value_enum, default_value_t = ControlPlaneMode::Auto)]
    pub control_plane: ControlPlaneMode,
    /// The `flotilla` binary whose `controller-manager` is run for `--control-plane process`
    /// [default: this program, when it is `flotilla`].
    #[arg(long, value_name = "PATH")]
    pub flotilla_bin: Option<PathBuf>,
    /// Compare with this `flotilla` binary (the before of a change): the benchmark runs
    /// --rounds times with each as the control plane process, alternating, and reports the
    /// medians of both and their ratio.
    #[arg(long, value_name = "PATH")]
    pub compare_bin: Option<PathBuf>,
    /// Runs per binary with --compare-bin.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            scenario: None,
            members: None,
            objects: None,
            with_deployments: false,
            lean_members: false,
            member_memory_limit: None,
            member_gogc: None,
            no_member_controller_manager: false,
            deployments: None,
            fleet_phases: false,
            slow_member: None,
            slow_latency: std::time::Duration::from_secs(2),
            idle_secs: 30,
            pull: false,
            policy: false,
            concurrency: 16,
            workers: 16,
            sequential: 200,
            steady_secs: 10,
            phase_timeout_secs: 600,
            json: None,
            control_plane: ControlPlaneMode::Auto,
            flotilla_bin: None,
            compare_bin: None,
            rounds: 3,
        }
    }
}

impl BenchOptions {
    /// The binary to run as the control plane, or `None` to run it in-process.
    pub fn control_plane_binary(&self) -> anyhow::Result<Option<PathBuf>> {
        let this = || {
            std::env::current_exe()
                .ok()
                .filter(|p| p.file_stem().is_some_and(|s| s == "flotilla"))
        };
        match self.control_plane {
            ControlPlaneMode::InProcess => Ok(None),
            ControlPlaneMode::Auto => Ok(self.flotilla_bin.clone().or_else(this)),
            ControlPlaneMode::Process => self.flotilla_bin.clone().or_else(this).map(Some).context(
                "--control-plane process needs --flotilla-bin when this program is not flotilla",
            ),
        }
    }

    /// The scenario's name and the effective member and object counts.
    pub fn resolved(&self) -> (String, usize, usize) {
        let (name, members, objects) = self.scenario.map_or(("", 4, 1000), Scenario::shape);
        let shape = (members, objects);
        let members = self.members.unwrap_or(members);
        let objects = self.objects.unwrap_or(objects);
        let name = if name.is_empty() || (members, objects) != shape {
            format!("{objects}x{members}")
        } else {
            name.to_string()
        };
        (name, members, objects)
    }
}

/// Apiservers started at once with lean members.
const LEAN_START_BATCH: usize = 10;

impl BenchOptions {
    /// The local clusters for `members` members: lean ones (started in batches, each batch
    /// given longer to start) with `--lean-members` or the fleet scenario.
    fn env_options(&self, members: usize) -> EnvOptions {
        let mut env = EnvOptions::with_members(members);
        if self.lean_members || self.is_fleet() {
            env.lean_members = true;
            env.start_batch = Some(LEAN_START_BATCH);
            // One etcd stands in for every member's own: kept ahead of 100 apiservers.
            env.favour_etcd = true;
            env.startup_timeout = env.startup_timeout.max(std::time::Duration::from_secs(180));
            env.lean_memory_limit = self.member_memory_limit.clone();
            env.lean_gogc = self.member_gogc.or(env.lean_gogc);
        }
        env.member_controller_manager = !self.without_member_controller_manager();
        // The policy path's native objects are templates: the host must not run them.
        env.host_workload_controllers = !self.policy;
        env
    }

    fn is_fleet(&self) -> bool {
        self.scenario == Some(Scenario::Fleet100)
    }

    /// Members start without a kube-controller-manager (and join with admin credentials).
    fn without_member_controller_manager(&self) -> bool {
        self.no_member_controller_manager || self.is_fleet()
    }

    /// Whether the fleet phases run.
    fn runs_fleet_phases(&self) -> bool {
        self.fleet_phases || self.is_fleet() || self.slow_member.is_some()
    }

    /// Federated Deployments benchmarked (0: none).
    fn deployment_count(&self, objects: usize) -> usize {
        match self.deployments {
            Some(d) => d,
            None if self.is_fleet() => FLEET_DEPLOYMENTS,
            None if self.with_deployments => objects,
            None => 0,
        }
    }
}

/// Federated Deployments of the fleet scenario.
const FLEET_DEPLOYMENTS: usize = 100;

/// Runs the benchmark: starts the clusters, measures, stops them. Writes the JSON report to
/// `opts.json` when set; printing [`BenchReport::table`] is left to the caller.
pub async fn run(opts: BenchOptions) -> anyhow::Result<BenchReport> {
    let (scenario, members, objects) = opts.resolved();
    anyhow::ensure!(members >= 1, "at least one member is needed");
    anyhow::ensure!(objects >= 1, "at least one object is needed");
    anyhow::ensure!(
        !(opts.pull && opts.slow_member.is_some()),
        "--slow-member delays the control plane's traffic to one member, and in pull mode \
         (--pull) the control plane sends its members none: leave out --slow-member"
    );
    let machine = procfs::machine();
    info!(%scenario, members, objects, "starting the local clusters");
    let started = std::time::Instant::now();
    let env = LocalEnv::start(opts.env_options(members))
        .await
        .context("starting the local clusters")?;
    let clusters_start_s = started.elapsed().as_secs_f64();
    info!(seconds = clusters_start_s, "local clusters started");
    let result = session::run_in(&env, &opts, objects).await;
    if let Err(e) = env.shutdown().await {
        warn!(error = %e, "stopping the local clusters failed");
    }
    let session::Measured {
        kinds,
        cost,
        clusters_idle_cpu_per_s,
        control_plane,
        fleet,
        raw_error,
    } = result?;
    let fleet = fleet.map(|f| FleetReport {
        clusters_start_s,
        ..f
    });
    let mut report = BenchReport {
        scenario: scenario.clone(),
        members,
        objects,
        concurrency: opts.concurrency,
        workers: opts.workers,
        control_plane,
        clusters_idle_cpu_per_s,
        machine,
        kinds,
        cost,
        reference: (scenario == "karmada-200x2").then(|| Reference {
            raw_s: 1.5,
            karmada_s: (24.0, 29.0),
            source: "issue 8: kubectl creates and Karmada v1.3.6 push mode, on this kind of machine (kind)".into(),
        }),
        targets: Vec::new(),
        fleet,
        raw_error,
        finished_at: k8s_openapi::jiff::Timestamp::now().to_string(),
    };
    report.targets = report::targets(&report);
    report
        .targets
        .extend(policy_report::policy_targets(&report.kinds));
    report
        .targets
        .extend(pull_report::pull_targets(&report.kinds));
    write_json(opts.json.as_deref(), &report)?;
    Ok(report)
}

/// Writes a report as JSON to `path` (`--json`), when one is given.
fn write_json(path: Option<&std::path::Path>, report: &impl Serialize) -> anyhow::Result<()> {
    if let Some(path) = path {
        let text = serde_json::to_string_pretty(report)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_karmada_scenario_sets_two_members_and_two_hundred_objects() {
        let opts = BenchOptions {
            scenario: Some(Scenario::Karmada200x2),
            ..BenchOptions::default()
        };
        assert_eq!(opts.resolved(), ("karmada-200x2".to_string(), 2, 200));
        let opts = BenchOptions::default();
        assert_eq!(opts.resolved(), ("1000x4".to_string(), 4, 1000));
        let opts = BenchOptions {
            scenario: Some(Scenario::Karmada200x2),
            objects: Some(10),
            ..BenchOptions::default()
        };
        assert_eq!(opts.resolved(), ("10x2".to_string(), 2, 10));
    }

    #[test]
    fn the_scale_scenarios_name_their_shapes() {
        let of = |s| BenchOptions {
            scenario: Some(s),
            ..BenchOptions::default()
        };
        assert_eq!(
            of(Scenario::Restart10k).resolved(),
            ("restart-10k".to_string(), 2, 10_000)
        );
        assert_eq!(
            of(Scenario::TenMembers).resolved(),
            ("10-members".to_string(), 10, 1_000)
        );
        assert_eq!(
            of(Scenario::Fleet100).resolved(),
            ("fleet-100".to_string(), 100, 1_000)
        );
        assert_eq!(
            of(Scenario::Capacity10x1000).resolved(),
            ("capacity-10x1000".to_string(), 10, 1_000)
        );
    }

    #[test]
    fn the_fleet_scenario_and_the_flag_start_lean_members_in_batches() {
        let fleet = BenchOptions {
            scenario: Some(Scenario::Fleet100),
            ..BenchOptions::default()
        };
        let env = fleet.env_options(100);
        assert!(env.lean_members);
        assert_eq!(env.start_batch, Some(LEAN_START_BATCH));
        let flag = BenchOptions {
            lean_members: true,
            ..BenchOptions::default()
        };
        assert!(flag.env_options(3).lean_members);
        let plain = BenchOptions::default().env_options(4);
        assert!(!plain.lean_members);
        assert_eq!(plain.start_batch, None);
        assert_eq!(plain.members, 4);
    }

    #[test]
    fn the_policy_path_starts_a_host_that_stores_templates_without_running_them() {
        assert!(
            BenchOptions::default()
                .env_options(2)
                .host_workload_controllers
        );
        let policy = BenchOptions {
            policy: true,
            ..BenchOptions::default()
        };
        assert!(!policy.env_options(2).host_workload_controllers);
    }
}
