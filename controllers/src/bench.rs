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

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fmt::Write as _,
    future::Future,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use flotilla_crds::{DEFAULT_NAMESPACE, KubeFedCluster, crdgen, federated::FederatedStatus};
use flotilla_localenv::{Cluster, EnvOptions, LocalEnv};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Namespace},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
    core::ApiResource,
    runtime::{WatchStreamExt, watcher},
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::{
    join::{JoinOptions, join},
    manager::ControlPlane,
    metrics::Metrics,
};

/// Name of the control plane's runtime threads, by which its CPU time is found.
const CP_THREAD: &str = "flotilla-cp";
/// Namespace of the federated objects (host) and of their member copies.
const FED_NS: &str = "bench";
/// Namespace of federated objects created while no control plane runs (the input's cost).
const INPUT_NS: &str = "bench-input";
/// Namespace of the raw baseline objects in the members.
const RAW_NS: &str = "bench-raw";
/// Label on every benchmark object; its value tells the parts apart.
const BENCH_LABEL: &str = "flotilla-bench";
/// Field manager of the benchmark's own writes.
const MANAGER: &str = "flotilla-bench";
/// Objects per member written and deleted before measuring, so that no part pays the API
/// servers' and clients' warm-up.
const WARMUP_OBJECTS: usize = 50;
/// The host counts as settled after this long without a write to a federated object.
const QUIET: Duration = Duration::from_millis(1500);
/// How long the clusters' background CPU use is sampled.
const IDLE_SAMPLE: Duration = Duration::from_secs(3);
/// Kernel clock ticks per second in /proc (USER_HZ, fixed at 100 by the Linux ABI).
const USER_HZ: f64 = 100.0;

/// A named workload whose figures can be compared with published ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
pub enum Scenario {
    /// 200 ConfigMaps → 2 members, first create → all 400 member objects present. Reference
    /// on this kind of machine: raw creates 1.5 s, Karmada v1.3.6 push mode 24–29 s.
    #[value(name = "karmada-200x2")]
    #[serde(rename = "karmada-200x2")]
    Karmada200x2,
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
    /// Concurrent writes: federated creates/updates/deletes in the host, and raw writes per
    /// member in the baseline.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Sync workers (KubeFedConfig syncController.maxConcurrentReconciles).
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
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
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            scenario: None,
            members: None,
            objects: None,
            with_deployments: false,
            concurrency: 16,
            workers: 16,
            steady_secs: 10,
            phase_timeout_secs: 600,
            json: None,
            control_plane: ControlPlaneMode::Auto,
            flotilla_bin: None,
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
        let (name, members, objects) = match self.scenario {
            Some(Scenario::Karmada200x2) => ("karmada-200x2".to_string(), 2, 200),
            None => (String::new(), 4, 1000),
        };
        let members = self.members.unwrap_or(members);
        let objects = self.objects.unwrap_or(objects);
        let name = if name.is_empty() || (members, objects) != (2, 200) {
            format!("{objects}x{members}")
        } else {
            name
        };
        (name, members, objects)
    }
}

// ---------------------------------------------------------------------------------------
// The report.

/// Everything one run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    /// `karmada-200x2`, or `<objects>x<members>`.
    pub scenario: String,
    /// Member clusters.
    pub members: usize,
    /// Federated objects per kind.
    pub objects: usize,
    /// Concurrent writes (host writes; raw writes per member).
    pub concurrency: usize,
    /// Sync workers.
    pub workers: usize,
    /// Where the control plane ran and how its cost is attributed.
    pub control_plane: String,
    /// CPU seconds per second the clusters' processes use when nobody writes (their
    /// background work), measured before the first part.
    pub clusters_idle_cpu_per_s: f64,
    /// The machine.
    pub machine: Machine,
    /// Per workload kind: Flotilla against the raw baseline.
    pub kinds: Vec<KindReport>,
    /// Control-plane cost over the whole Flotilla part.
    pub cost: Cost,
    /// Published figures for the named scenario, printed beside ours.
    pub reference: Option<Reference>,
    /// The issue's targets, met or not.
    pub targets: Vec<Target>,
    /// When the run finished (RFC 3339).
    pub finished_at: String,
}

/// The machine the run used.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    /// Logical CPUs.
    pub cpus: usize,
    /// Total memory, MiB.
    pub memory_mib: u64,
    /// Kernel release.
    pub kernel: String,
    /// 1-minute load average when the run started (others' work included).
    pub load_at_start: f64,
}

/// One kind (ConfigMap, Deployment): each phase for Flotilla and for the raw baseline.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KindReport {
    /// Target kind.
    pub kind: String,
    /// Federated create → member objects present.
    pub create: Comparison,
    /// Template change → new data in every member.
    pub update: Comparison,
    /// Federated delete → members empty.
    pub delete: Comparison,
    /// Writes after convergence during a forced resync.
    pub steady: Steady,
    /// The federated creates alone, with no control plane running: what accepting the
    /// input costs the host, a floor under propagation.
    pub host_input: Phase,
}

/// One phase through Flotilla and straight into the members.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    /// Through the control plane.
    pub flotilla: Phase,
    /// Raw writes into the members.
    pub raw: Phase,
    /// flotilla.seconds / raw.seconds (lower is better, 1 = as fast as raw).
    pub time_ratio: f64,
    /// flotilla.objects_per_second / raw.objects_per_second (higher is better).
    pub throughput_ratio: f64,
    /// Latency percentiles, flotilla / raw.
    pub latency_ratio: Percentiles,
}

impl Comparison {
    fn new(flotilla: Phase, raw: Phase) -> Self {
        Comparison {
            time_ratio: ratio(flotilla.seconds, raw.seconds),
            throughput_ratio: ratio(flotilla.objects_per_second, raw.objects_per_second),
            latency_ratio: Percentiles {
                p50: ratio(flotilla.latency_ms.p50, raw.latency_ms.p50),
                p95: ratio(flotilla.latency_ms.p95, raw.latency_ms.p95),
                p99: ratio(flotilla.latency_ms.p99, raw.latency_ms.p99),
                max: ratio(flotilla.latency_ms.max, raw.latency_ms.max),
            },
            flotilla,
            raw,
        }
    }
}

/// One measured phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Phase {
    /// Member objects written (objects × members).
    pub member_objects: usize,
    /// First write call → last member object observed in its new state.
    pub seconds: f64,
    /// member_objects / seconds.
    pub objects_per_second: f64,
    /// Per object: its (first) write call → observed in every member.
    pub latency_ms: Percentiles,
    /// Requests the members served for the kind (watches excluded), by verb.
    pub member_requests: BTreeMap<String, u64>,
    /// Requests the host served for the federated kind and Events, the benchmark's own
    /// writes excluded, by `resource[/subresource] verb`.
    pub host_requests: BTreeMap<String, u64>,
    /// (member + host requests) / member_objects.
    pub requests_per_member_object: f64,
    /// CPU seconds of the control plane's threads, until the host settled.
    pub control_plane_cpu_s: f64,
    /// CPU seconds of the benchmark's load generator and watchers (this process, less the
    /// control plane's threads when it runs in-process).
    pub generator_cpu_s: f64,
    /// CPU seconds of etcd, the API servers and kube-controller-managers.
    pub clusters_cpu_s: f64,
    /// The same, by process: `etcd`, `apiserver (host)`, `apiservers (members)`,
    /// `controller-managers`.
    pub clusters_cpu_by_process: BTreeMap<String, f64>,
    /// CPU seconds the whole machine was busy (other users' work included).
    pub machine_busy_cpu_s: f64,
    /// Wall seconds until the host settled (the window of the CPU and request figures).
    pub window_s: f64,
    /// Wall seconds from the phase's start until the last object reached its state: the
    /// active part of the window.
    pub active_s: f64,
    /// CPU seconds the whole machine was busy during the active part; against
    /// `active_s × CPUs` it tells whether the phase was CPU-bound.
    pub machine_busy_active_cpu_s: f64,
    /// CPU seconds of the clusters' processes during the active part.
    pub clusters_active_cpu_s: f64,
}

/// Latency percentiles in milliseconds (or their ratios).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

/// Writes during a steady-state window, which starts with a forced resync.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Steady {
    /// Window length, seconds.
    pub window_s: f64,
    /// Full resyncs forced (one KubeFedCluster label change per member, each requeueing
    /// every federated object).
    pub resyncs_forced: usize,
    /// Write events on managed member objects (watch events; the goal is 0).
    pub member_writes: u64,
    /// Write events on the federated objects in the host (the goal is 0).
    pub host_writes: u64,
    /// Requests for the kind the members served in the window (watches excluded).
    pub member_requests: u64,
    /// CPU seconds the control plane spent in the window (the resync's work).
    pub control_plane_cpu_s: f64,
}

/// What the control plane cost over the Flotilla part.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Cost {
    /// Estimated peak RSS of the control plane, MiB: peak growth of the process during the
    /// Flotilla part minus that during the raw part (same watchers and generator).
    pub control_plane_peak_rss_mib: f64,
    /// Process RSS before the control plane started, MiB.
    pub process_rss_before_mib: f64,
    /// Process peak RSS during the Flotilla part, MiB.
    pub process_peak_flotilla_mib: f64,
    /// Peak growth during the raw part (the load generator and watchers alone), MiB.
    pub generator_peak_growth_mib: f64,
    /// Whether the peak could be reset between parts (`/proc/self/clear_refs`).
    pub peak_reset: bool,
    /// How the control plane's RSS was measured.
    pub rss_method: String,
    /// CPU seconds of the control plane over the Flotilla part (all kinds and phases).
    pub control_plane_cpu_s: f64,
    /// Control-plane CPU milliseconds per propagated member object (creates, updates and
    /// deletes counted).
    pub control_plane_cpu_ms_per_member_object: f64,
    /// Requests (members + host) per created member object.
    pub requests_per_created_member_object: f64,
}

/// Published figures for a scenario, printed beside ours.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reference {
    /// Raw creates into the members, seconds.
    pub raw_s: f64,
    /// Karmada v1.3.6 push mode, seconds (range).
    pub karmada_s: (f64, f64),
    /// Where the figures come from.
    pub source: String,
}

/// One of the issue's targets.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    /// What is measured.
    pub name: String,
    /// The bar.
    pub goal: String,
    /// What this run measured.
    pub measured: String,
    /// Whether the bar was cleared.
    pub met: bool,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

/// Nearest-rank percentiles of a sample (milliseconds).
pub fn percentiles(samples: &mut [f64]) -> Percentiles {
    if samples.is_empty() {
        return Percentiles::default();
    }
    samples.sort_by(f64::total_cmp);
    let at = |p: f64| {
        let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
        samples[rank.clamp(1, samples.len()) - 1]
    };
    Percentiles {
        p50: at(50.0),
        p95: at(95.0),
        p99: at(99.0),
        max: samples[samples.len() - 1],
    }
}

impl BenchReport {
    /// The report as a plain-text table, every figure beside its raw baseline.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Flotilla bench {}: {} objects per kind x {} members, {} concurrent writes, {} sync workers",
            self.scenario, self.objects, self.members, self.concurrency, self.workers
        );
        let _ = writeln!(
            s,
            "machine: {} CPUs, {:.1} GiB, Linux {}, load {:.2} at start; control plane: {}",
            self.machine.cpus,
            self.machine.memory_mib as f64 / 1024.0,
            self.machine.kernel,
            self.machine.load_at_start,
            self.control_plane
        );
        for k in &self.kinds {
            let _ = writeln!(s);
            let _ = writeln!(
                s,
                "{:<34} {:>16} {:>16} {:>9}",
                format!(
                    "{} ({} member objects)",
                    k.kind, k.create.raw.member_objects
                ),
                "raw (direct)",
                "flotilla",
                "ratio"
            );
            for (label, c) in [
                ("create -> all present", &k.create),
                ("update -> new data everywhere", &k.update),
                ("delete -> members empty", &k.delete),
            ] {
                row(
                    &mut s,
                    label,
                    c.raw.seconds,
                    c.flotilla.seconds,
                    "s",
                    c.time_ratio,
                );
                row(
                    &mut s,
                    "  throughput (obj/s)",
                    c.raw.objects_per_second,
                    c.flotilla.objects_per_second,
                    "",
                    c.throughput_ratio,
                );
                for (name, r, f, q) in [
                    (
                        "  latency p50",
                        c.raw.latency_ms.p50,
                        c.flotilla.latency_ms.p50,
                        c.latency_ratio.p50,
                    ),
                    (
                        "  latency p95",
                        c.raw.latency_ms.p95,
                        c.flotilla.latency_ms.p95,
                        c.latency_ratio.p95,
                    ),
                    (
                        "  latency p99",
                        c.raw.latency_ms.p99,
                        c.flotilla.latency_ms.p99,
                        c.latency_ratio.p99,
                    ),
                ] {
                    row(&mut s, name, r, f, "ms", q);
                }
                let req = |p: &Phase| p.requests_per_member_object;
                row(
                    &mut s,
                    "  requests per member object",
                    req(&c.raw),
                    req(&c.flotilla),
                    "",
                    ratio(req(&c.flotilla), req(&c.raw)),
                );
                let _ = writeln!(
                    s,
                    "  CPU s in the window ({:.1} s, raw {:.1} s): control plane {:.2}, generator+watchers {:.2} (raw {:.2}), clusters above idle {:.2} (raw {:.2}), machine busy {:.1} of {:.1}",
                    c.flotilla.window_s,
                    c.raw.window_s,
                    c.flotilla.control_plane_cpu_s,
                    c.flotilla.generator_cpu_s,
                    c.raw.generator_cpu_s,
                    c.flotilla.clusters_cpu_s - self.clusters_idle_cpu_per_s * c.flotilla.window_s,
                    c.raw.clusters_cpu_s - self.clusters_idle_cpu_per_s * c.raw.window_s,
                    c.flotilla.machine_busy_cpu_s,
                    c.flotilla.window_s * self.machine.cpus as f64,
                );
                let by: Vec<String> = c
                    .flotilla
                    .clusters_cpu_by_process
                    .iter()
                    .map(|(p, v)| {
                        let r = c.raw.clusters_cpu_by_process.get(p).copied().unwrap_or(0.0);
                        format!("{p} {v:.2} (raw {r:.2})")
                    })
                    .collect();
                let _ = writeln!(s, "  cluster CPU s by process: {}", by.join(", "));
                let _ = writeln!(
                    s,
                    "  until the last object landed ({:.2} s, raw {:.2} s): machine busy {:.2} of {:.2} CPU s (raw {:.2} of {:.2}), clusters {:.2} (raw {:.2})",
                    c.flotilla.active_s,
                    c.raw.active_s,
                    c.flotilla.machine_busy_active_cpu_s,
                    c.flotilla.active_s * self.machine.cpus as f64,
                    c.raw.machine_busy_active_cpu_s,
                    c.raw.active_s * self.machine.cpus as f64,
                    c.flotilla.clusters_active_cpu_s,
                    c.raw.clusters_active_cpu_s,
                );
            }
            let hi = &k.host_input;
            let _ = writeln!(
                s,
                "host input alone ({} federated creates, no controller running): {:.2} s, {:.0} obj/s, host apiserver {:.2} CPU s",
                hi.member_objects,
                hi.seconds,
                hi.objects_per_second,
                hi.clusters_cpu_by_process
                    .get("apiserver (host)")
                    .copied()
                    .unwrap_or(0.0),
            );
            let _ = writeln!(
                s,
                "steady state ({:.0} s after {} forced resyncs): {} member writes, {} host status writes, {} member requests, control plane {:.3} CPU s",
                k.steady.window_s,
                k.steady.resyncs_forced,
                k.steady.member_writes,
                k.steady.host_writes,
                k.steady.member_requests,
                k.steady.control_plane_cpu_s
            );
        }
        let c = &self.cost;
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "cost: control plane {:.1} MiB peak RSS ({}{}), {:.2} CPU s ({:.3} ms per member object), {:.2} requests per created member object",
            c.control_plane_peak_rss_mib,
            c.rss_method,
            if c.peak_reset {
                ""
            } else {
                "; peak not resettable, estimate unreliable"
            },
            c.control_plane_cpu_s,
            c.control_plane_cpu_ms_per_member_object,
            c.requests_per_created_member_object,
        );
        if let Some(r) = &self.reference {
            let ours = self
                .kinds
                .first()
                .map(|k| (k.create.raw.seconds, k.create.flotilla.seconds))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "reference ({}): raw {:.1} s, Karmada v1.3.6 push {:.0}-{:.0} s ({:.0}-{:.0}x raw); this run: raw {:.2} s, Flotilla {:.2} s ({:.2}x raw)",
                r.source,
                r.raw_s,
                r.karmada_s.0,
                r.karmada_s.1,
                r.karmada_s.0 / r.raw_s,
                r.karmada_s.1 / r.raw_s,
                ours.0,
                ours.1,
                ratio(ours.1, ours.0),
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "targets:");
        for t in &self.targets {
            let _ = writeln!(
                s,
                "  [{}] {:<44} goal {:<14} measured {}",
                if t.met { "met " } else { "MISS" },
                t.name,
                t.goal,
                t.measured
            );
        }
        s
    }
}

fn row(s: &mut String, label: &str, raw: f64, ours: f64, unit: &str, ratio: f64) {
    let fmt = |v: f64| match unit {
        "s" => format!("{v:.2} s"),
        "ms" => format!("{v:.0} ms"),
        _ => format!("{v:.2}"),
    };
    let _ = writeln!(
        s,
        "{:<34} {:>16} {:>16} {:>8.2}x",
        label,
        fmt(raw),
        fmt(ours),
        ratio
    );
}

fn targets(report: &BenchReport) -> Vec<Target> {
    let mut out = Vec::new();
    let Some(cm) = report.kinds.first() else {
        return out;
    };
    let c = &cm.create;
    out.push(Target {
        name: format!("{}: create -> all present vs raw", report.scenario),
        goal: "<= 2x raw".into(),
        measured: format!(
            "{:.2} s vs {:.2} s = {:.2}x",
            c.flotilla.seconds, c.raw.seconds, c.time_ratio
        ),
        met: c.time_ratio <= 2.0,
    });
    out.push(Target {
        name: "propagation throughput vs raw writes".into(),
        goal: ">= 0.8x raw".into(),
        measured: format!(
            "{:.0} vs {:.0} obj/s = {:.2}x",
            c.flotilla.objects_per_second, c.raw.objects_per_second, c.throughput_ratio
        ),
        met: c.throughput_ratio >= 0.8,
    });
    out.push(Target {
        name: "P99 create-to-all-members latency vs raw".into(),
        goal: "<= 2x raw P99".into(),
        measured: format!(
            "{:.0} vs {:.0} ms = {:.2}x",
            c.flotilla.latency_ms.p99, c.raw.latency_ms.p99, c.latency_ratio.p99
        ),
        met: c.latency_ratio.p99 <= 2.0,
    });
    let (mw, hw) = report.kinds.iter().fold((0, 0), |(m, h), k| {
        (m + k.steady.member_writes, h + k.steady.host_writes)
    });
    out.push(Target {
        name: "steady-state writes (members / host status)".into(),
        goal: "0 / 0".into(),
        measured: format!("{mw} / {hw}"),
        met: mw == 0 && hw == 0,
    });
    let scale = if report.objects >= 1000 && report.members >= 4 {
        ""
    } else {
        " (target set at 1000x4)"
    };
    out.push(Target {
        name: format!("control-plane peak RSS{scale}"),
        goal: "<= 150 MiB".into(),
        measured: format!("{:.1} MiB", report.cost.control_plane_peak_rss_mib),
        met: report.cost.control_plane_peak_rss_mib <= 150.0,
    });
    out
}

// ---------------------------------------------------------------------------------------
// Workload kinds.

#[derive(Debug, Clone, Copy)]
enum Kind {
    ConfigMap,
    Deployment,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Deployment => "Deployment",
        }
    }

    fn target(self) -> ApiResource {
        match self {
            Kind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
            Kind::Deployment => ApiResource::erase::<Deployment>(&()),
        }
    }

    fn federated(self) -> ApiResource {
        let plural = match self {
            Kind::ConfigMap => "federatedconfigmaps",
            Kind::Deployment => "federateddeployments",
        };
        ApiResource {
            group: flotilla_crds::TYPES_GROUP.into(),
            version: flotilla_crds::V1BETA1.into(),
            api_version: format!("{}/{}", flotilla_crds::TYPES_GROUP, flotilla_crds::V1BETA1),
            kind: format!("Federated{}", self.name()),
            plural: plural.into(),
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Kind::ConfigMap => "cm",
            Kind::Deployment => "deploy",
        }
    }

    /// The object's content apart from identity: `metadata.labels` and the rest.
    fn content(self, name: &str, part: &str, version: &str) -> Value {
        match self {
            Kind::ConfigMap => json!({
                "metadata": {"labels": {BENCH_LABEL: part}},
                "data": {"name": name, "payload": "x".repeat(64), "v": version},
            }),
            Kind::Deployment => json!({
                "metadata": {"labels": {BENCH_LABEL: part}},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}, "annotations": {"bench/v": version}},
                        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]},
                    },
                },
            }),
        }
    }

    /// A merge patch of the content that sets the version.
    fn version_patch(self, version: &str) -> Value {
        match self {
            Kind::ConfigMap => json!({"data": {"v": version}}),
            Kind::Deployment => {
                json!({"spec": {"template": {"metadata": {"annotations": {"bench/v": version}}}}})
            }
        }
    }

    fn version_of(self, obj: &DynamicObject) -> Option<String> {
        let pointer = match self {
            Kind::ConfigMap => "/data/v",
            Kind::Deployment => "/spec/template/metadata/annotations/bench~1v",
        };
        obj.data
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    /// The version in a federated object's template.
    fn federated_version_of(self, obj: &DynamicObject) -> Option<String> {
        let pointer = match self {
            Kind::ConfigMap => "/spec/template/data/v",
            Kind::Deployment => "/spec/template/spec/template/metadata/annotations/bench~1v",
        };
        obj.data
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    fn raw_object(self, name: &str, version: &str) -> anyhow::Result<DynamicObject> {
        let mut v = self.content(name, "raw", version);
        let ar = self.target();
        v["apiVersion"] = json!(ar.api_version);
        v["kind"] = json!(ar.kind);
        v["metadata"]["name"] = json!(name);
        v["metadata"]["namespace"] = json!(RAW_NS);
        Ok(serde_json::from_value(v)?)
    }

    fn federated_object(
        self,
        namespace: &str,
        name: &str,
        version: &str,
    ) -> anyhow::Result<DynamicObject> {
        let ar = self.federated();
        Ok(serde_json::from_value(json!({
            "apiVersion": ar.api_version,
            "kind": ar.kind,
            "metadata": {"name": name, "namespace": namespace, "labels": {BENCH_LABEL: "fed"}},
            "spec": {
                "template": self.content(name, "fed", version),
                "placement": {"clusterSelector": {}},
            },
        }))?)
    }
}

// ---------------------------------------------------------------------------------------
// Observation: a watcher per cluster that records when objects reach the wanted state.

#[derive(Debug, Clone)]
enum Want {
    Version(String),
    Absent,
}

#[derive(Default)]
struct ClusterTrack {
    /// Object name → version.
    current: HashMap<String, Option<String>>,
    /// The objects of a relist in progress.
    relist: Option<HashMap<String, Option<String>>>,
    /// When each object first met the phase's want.
    reached: HashMap<String, Instant>,
    /// Write events (adds, modifications, deletions) seen on the live watch.
    writes: u64,
    /// Time of the last write event.
    last_write: Option<Instant>,
    synced: bool,
}

#[derive(Default)]
struct TrackState {
    clusters: Vec<ClusterTrack>,
    want: Option<Want>,
    /// The objects of the phase.
    wanted: HashSet<String>,
    /// (wanted object, cluster) pairs that reached the want.
    reached_pairs: usize,
}

/// Records that `name` reached the want in `c` if it did (and counts it once).
fn reach(
    c: &mut ClusterTrack,
    want: Option<&Want>,
    wanted: &HashSet<String>,
    reached_pairs: &mut usize,
    name: &str,
    now: Instant,
) {
    let ok = match want {
        Some(Want::Version(v)) => c
            .current
            .get(name)
            .is_some_and(|cur| cur.as_deref() == Some(v)),
        Some(Want::Absent) => !c.current.contains_key(name),
        None => false,
    };
    if ok && wanted.contains(name) && !c.reached.contains_key(name) {
        c.reached.insert(name.to_string(), now);
        *reached_pairs += 1;
    }
}

/// Label-filtered watchers on one kind in a set of clusters.
struct Tracker {
    state: Mutex<TrackState>,
    changed: Notify,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for Tracker {
    fn drop(&mut self) {
        for t in self
            .tasks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

impl Tracker {
    fn start(
        clients: &[Client],
        ar: &ApiResource,
        namespace: &str,
        selector: &str,
        version_of: impl Fn(&DynamicObject) -> Option<String> + Clone + Send + Sync + 'static,
    ) -> Arc<Tracker> {
        let tracker = Arc::new(Tracker {
            state: Mutex::new(TrackState {
                clusters: clients.iter().map(|_| ClusterTrack::default()).collect(),
                ..TrackState::default()
            }),
            changed: Notify::new(),
            tasks: Mutex::default(),
        });
        let mut tasks = Vec::new();
        for (i, client) in clients.iter().enumerate() {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, ar);
            let config = watcher::Config::default().labels(selector);
            // The task holds a weak reference, so dropping the tracker ends it.
            let weak = Arc::downgrade(&tracker);
            let version_of = version_of.clone();
            tasks.push(tokio::spawn(async move {
                let stream = watcher(api, config).default_backoff();
                futures::pin_mut!(stream);
                while let Some(ev) = stream.next().await {
                    let Some(t) = weak.upgrade() else { return };
                    match ev {
                        Ok(ev) => t.on_event(i, ev, &version_of),
                        Err(e) => warn!(error = %e, "benchmark watch failed; retrying"),
                    }
                }
            }));
        }
        *tracker.tasks.lock().unwrap_or_else(|e| e.into_inner()) = tasks;
        tracker
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TrackState> {
        // Plain maps and counters: consistent after any panic of a holder.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn on_event(
        &self,
        cluster: usize,
        ev: watcher::Event<DynamicObject>,
        version_of: &impl Fn(&DynamicObject) -> Option<String>,
    ) {
        let now = Instant::now();
        let mut guard = self.lock();
        let TrackState {
            clusters,
            want,
            wanted,
            reached_pairs,
        } = &mut *guard;
        let Some(c) = clusters.get_mut(cluster) else {
            return;
        };
        let mut reach = |c: &mut ClusterTrack, name: &str| {
            reach(c, want.as_ref(), wanted, reached_pairs, name, now);
        };
        match ev {
            watcher::Event::Apply(o) => {
                let name = o.name_any();
                c.current.insert(name.clone(), version_of(&o));
                c.writes += 1;
                c.last_write = Some(now);
                reach(c, &name);
            }
            watcher::Event::Delete(o) => {
                let name = o.name_any();
                c.current.remove(&name);
                c.writes += 1;
                c.last_write = Some(now);
                reach(c, &name);
            }
            watcher::Event::Init => c.relist = Some(HashMap::new()),
            watcher::Event::InitApply(o) => {
                let v = version_of(&o);
                c.relist
                    .get_or_insert_with(HashMap::new)
                    .insert(o.name_any(), v);
            }
            watcher::Event::InitDone => {
                let fresh = c.relist.take().unwrap_or_default();
                let old = std::mem::replace(&mut c.current, fresh);
                let names: HashSet<String> =
                    old.into_keys().chain(c.current.keys().cloned()).collect();
                for name in names {
                    reach(c, &name);
                }
                c.synced = true;
            }
        }
        drop(guard);
        self.changed.notify_waiters();
    }

    async fn wait_synced(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.lock().clusters.iter().all(|c| c.synced) {
            if Instant::now() > deadline {
                bail!("benchmark watchers did not sync within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Starts a phase: from now on record when each of `names` reaches `want`.
    fn expect(&self, want: Want, names: &[String]) {
        let now = Instant::now();
        let mut guard = self.lock();
        let st = &mut *guard;
        st.want = Some(want);
        st.wanted = names.iter().cloned().collect();
        st.reached_pairs = 0;
        for c in &mut st.clusters {
            c.reached.clear();
            for name in names {
                reach(
                    c,
                    st.want.as_ref(),
                    &st.wanted,
                    &mut st.reached_pairs,
                    name,
                    now,
                );
            }
        }
    }

    /// Waits until every object of the phase reached the want in every cluster; returns
    /// per object the time it reached it in its last cluster.
    async fn wait(&self, timeout: Duration) -> anyhow::Result<HashMap<String, Instant>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            if let Some(done) = self.all_reached() {
                return Ok(done);
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(deadline) => {
                    let st = self.lock();
                    let total = st.wanted.len() * st.clusters.len();
                    bail!("only {} of {total} objects reached the wanted state within {timeout:?}", st.reached_pairs);
                }
            }
        }
    }

    fn all_reached(&self) -> Option<HashMap<String, Instant>> {
        let st = self.lock();
        if st.reached_pairs < st.wanted.len() * st.clusters.len() {
            return None;
        }
        let mut done: HashMap<String, Instant> = HashMap::with_capacity(st.wanted.len());
        for c in &st.clusters {
            for (name, t) in &c.reached {
                let e = done.entry(name.clone()).or_insert(*t);
                if t > e {
                    *e = *t;
                }
            }
        }
        Some(done)
    }

    fn writes(&self) -> u64 {
        self.lock().clusters.iter().map(|c| c.writes).sum()
    }

    fn last_write(&self) -> Option<Instant> {
        self.lock()
            .clusters
            .iter()
            .filter_map(|c| c.last_write)
            .max()
    }

    /// Waits until no write was seen for [`QUIET`] (at most `timeout`).
    async fn quiet(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let idle = self.last_write().map_or(QUIET, |t| t.elapsed());
            if idle >= QUIET || Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(QUIET - idle).await;
        }
    }
}

/// When each object's first write call started.
#[derive(Default)]
struct Starts(Mutex<HashMap<String, Instant>>);

impl Starts {
    fn mark(&self, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_string())
            .or_insert_with(Instant::now);
    }

    fn take(&self) -> HashMap<String, Instant> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Calls `op` for every name, `concurrency` at a time, marking each start; a failed call
/// is retried a few times (a conflict after a retried create counts as done).
async fn write_all<F, Fut>(
    names: &[String],
    concurrency: usize,
    starts: &Starts,
    op: F,
) -> anyhow::Result<()>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<(), kube::Error>>,
{
    stream::iter(names.iter().cloned())
        .map(|name| {
            let op = &op;
            async move {
                starts.mark(&name);
                let mut attempt = 0;
                loop {
                    match op(name.clone()).await {
                        Ok(()) => return Ok(()),
                        Err(kube::Error::Api(s))
                            if attempt > 0 && (s.code == 409 || s.code == 404) =>
                        {
                            return Ok(());
                        }
                        Err(e) if attempt < 3 => {
                            warn!(error = %e, %name, "benchmark write failed; retrying");
                            attempt += 1;
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        Err(e) => {
                            return Err(anyhow::Error::new(e).context(format!("writing {name}")));
                        }
                    }
                }
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<()>()
        .await
}

// ---------------------------------------------------------------------------------------
// Process, cluster and machine figures.

fn proc_status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn rss_mib() -> f64 {
    proc_status_kib("VmRSS:").unwrap_or(0) as f64 / 1024.0
}

fn peak_rss_mib() -> f64 {
    proc_status_kib("VmHWM:").unwrap_or(0) as f64 / 1024.0
}

/// Resets the process's peak RSS to its current RSS; false where the kernel refuses.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// (comm, utime + stime in seconds) from a /proc `stat` file.
fn parse_stat(s: &str) -> Option<(String, f64)> {
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = s.get(close + 1..)?.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `rest` starts at field 3.
    let utime: f64 = rest.get(11)?.parse().ok()?;
    let stime: f64 = rest.get(12)?.parse().ok()?;
    Some((comm, (utime + stime) / USER_HZ))
}

fn cpu_of(path: &str) -> f64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| parse_stat(&s))
        .map_or(0.0, |(_, cpu)| cpu)
}

/// CPU seconds of this process's threads whose name starts with `prefix`.
fn threads_cpu(prefix: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|s| parse_stat(&s))
        .filter(|(comm, _)| comm.starts_with(prefix))
        .map(|(_, cpu)| cpu)
        .sum()
}

/// Busy CPU seconds of the whole machine since boot.
fn machine_busy() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let Some(line) = s.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...: all but idle and iowait.
    let busy: f64 = v
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 8)
        .map(|(_, x)| x)
        .sum();
    busy / USER_HZ
}

fn machine() -> Machine {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let memory_kib: u64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_mib: memory_kib / 1024,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        load_at_start: read("/proc/loadavg")
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0),
    }
}

/// Request counters of one API server: (group, resource, subresource, verb) → count.
pub type RequestCounts = BTreeMap<(String, String, String, String), f64>;

/// Parses `apiserver_request_total` from a Prometheus text page, summed over the labels
/// other than group, resource, subresource and verb.
pub fn parse_request_totals(text: &str) -> RequestCounts {
    let mut out = RequestCounts::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some(close) = rest.rfind('}') else {
            continue;
        };
        let Ok(value) = rest[close + 1..].trim().parse::<f64>() else {
            continue;
        };
        let labels = parse_labels(&rest[..close]);
        let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
        *out.entry((
            get("group"),
            get("resource"),
            get("subresource"),
            get("verb"),
        ))
        .or_default() += value;
    }
    out
}

fn parse_labels(s: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = s;
    while let Some(eq) = rest.find("=\"") {
        let key = rest[..eq].trim_start_matches(',').trim().to_string();
        let mut value = String::new();
        let mut chars = rest[eq + 2..].char_indices();
        let mut end = rest.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(n);
                    }
                }
                '"' => {
                    end = eq + 2 + i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key, value);
        rest = &rest[end.min(rest.len())..];
    }
    out
}

async fn request_counts(client: &Client) -> anyhow::Result<RequestCounts> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client
        .request_text(req)
        .await
        .context("reading the API server's /metrics")?;
    Ok(parse_request_totals(&text))
}

/// Requests in `after - before` whose resource is `resource` (any subresource), watches
/// excluded, summed under the label `key(subresource, verb)`.
fn delta(
    before: &RequestCounts,
    after: &RequestCounts,
    resource: &str,
    key: impl Fn(&str, &str) -> String,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (k, v) in after {
        let (_, res, sub, verb) = k;
        if res != resource || verb == "WATCH" || verb == "CONNECT" {
            continue;
        }
        let b = before.get(k).copied().unwrap_or(0.0);
        let d = (v - b).max(0.0).round() as u64;
        if d > 0 {
            *out.entry(key(sub, verb)).or_default() += d;
        }
    }
    out
}

/// Everything a phase measures at its start and end.
struct Snapshot {
    at: Instant,
    members: Vec<RequestCounts>,
    host: RequestCounts,
    cp_cpu: f64,
    process_cpu: f64,
    clusters_cpu: BTreeMap<String, f64>,
    machine_busy: f64,
}

/// What kind of cluster process `pid` is, from its command line.
fn process_group(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let binary = args
        .first()
        .and_then(|a| a.rsplit('/').next())
        .unwrap_or_default();
    match binary {
        "kube-apiserver" if args.iter().any(|a| a == "--etcd-prefix=/host") => {
            "apiserver (host)".into()
        }
        "kube-apiserver" => "apiservers (members)".into(),
        "kube-controller-manager" => "controller-managers".into(),
        b if b.contains("etcd") => "etcd".into(),
        _ => "other".into(),
    }
}

fn clusters_cpu(procs: &[(u32, String)]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (pid, group) in procs {
        *out.entry(group.clone()).or_insert(0.0) += cpu_of(&format!("/proc/{pid}/stat"));
    }
    out
}

fn cpu_delta(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .collect()
}

impl Snapshot {
    async fn take(run: &Run) -> anyhow::Result<Snapshot> {
        let members = futures::future::try_join_all(run.members.iter().map(request_counts)).await?;
        let host = request_counts(&run.host).await?;
        Ok(Snapshot {
            at: Instant::now(),
            members,
            host,
            cp_cpu: run.cp_cpu(),
            process_cpu: cpu_of("/proc/self/stat"),
            clusters_cpu: clusters_cpu(&run.procs),
            machine_busy: machine_busy(),
        })
    }
}

// ---------------------------------------------------------------------------------------
// The run.

struct Run {
    host: Client,
    members: Vec<Client>,
    kubefed_clusters: Vec<String>,
    /// The clusters' processes and their kinds.
    procs: Vec<(u32, String)>,
    /// The control plane's process when it runs as a child.
    cp_pid: Mutex<Option<u32>>,
    /// LISTs of federated objects the benchmark itself sent (convergence checks).
    own_lists: std::sync::atomic::AtomicU64,
    objects: usize,
    concurrency: usize,
    timeout: Duration,
    steady: Duration,
}

impl Run {
    /// CPU seconds the control plane used so far.
    fn cp_cpu(&self) -> f64 {
        match *self.cp_pid.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(pid) => cpu_of(&format!("/proc/{pid}/stat")),
            None => threads_cpu(CP_THREAD),
        }
    }
}

/// The control plane under test.
enum RunningControlPlane {
    InProcess(InProcessControlPlane),
    Child {
        child: tokio::process::Child,
        pid: u32,
        log: PathBuf,
    },
}

impl RunningControlPlane {
    fn start(env: &LocalEnv, binary: Option<&std::path::Path>) -> anyhow::Result<Self> {
        let Some(binary) = binary else {
            return Ok(RunningControlPlane::InProcess(
                InProcessControlPlane::start(env.host())?,
            ));
        };
        let log = env.dir().join("controller-manager.log");
        let file = std::fs::File::create(&log)?;
        let child = tokio::process::Command::new(binary)
            .arg("--kubeconfig")
            .arg(env.kubeconfig_path())
            .args(["--context", "host", "controller-manager"])
            .args(["--leader-elect=false", "--metrics-addr", "127.0.0.1:0"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} controller-manager", binary.display()))?;
        let pid = child
            .id()
            .context("the controller-manager exited at once")?;
        Ok(RunningControlPlane::Child { child, pid, log })
    }

    fn describe(&self) -> String {
        match self {
            RunningControlPlane::InProcess(_) => format!(
                "in-process on its own runtime (threads {CP_THREAD}*: CPU per thread; RSS = the process's peak growth, an upper bound)"
            ),
            RunningControlPlane::Child { .. } => {
                "child process `flotilla controller-manager` (CPU and peak RSS of that process)"
                    .into()
            }
        }
    }

    /// Waits until the control plane sees every member Ready.
    async fn wait_ready(&mut self, run: &Run) -> anyhow::Result<()> {
        let started = Instant::now();
        let api: Api<KubeFedCluster> = Api::namespaced(run.host.clone(), DEFAULT_NAMESPACE);
        loop {
            let ready = match self {
                RunningControlPlane::InProcess(cp) => cp.ready(),
                RunningControlPlane::Child { child, log, .. } => {
                    if let Some(status) = child.try_wait()? {
                        let text = std::fs::read_to_string(&*log).unwrap_or_default();
                        let tail: Vec<&str> = text.lines().rev().take(20).collect();
                        bail!(
                            "the controller-manager exited ({status}):\n{}",
                            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                        );
                    }
                    api.list(&ListParams::default())
                        .await?
                        .items
                        .iter()
                        .filter(|c| {
                            serde_json::to_value(c).ok().is_some_and(|v| {
                                v.pointer("/status/conditions")
                                    .and_then(Value::as_array)
                                    .is_some_and(|cs| {
                                        cs.iter()
                                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                                    })
                            })
                        })
                        .count()
                }
            };
            if ready >= run.members.len() {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(120) {
                bail!("only {ready} of {} members turned Ready", run.members.len());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Peak RSS of the control plane's own process, when it has one.
    fn own_peak_rss_mib(&self) -> Option<f64> {
        match self {
            RunningControlPlane::InProcess(_) => None,
            RunningControlPlane::Child { pid, .. } => {
                let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                let kib: f64 = s
                    .lines()
                    .find(|l| l.starts_with("VmHWM:"))?
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()?;
                Some(kib / 1024.0)
            }
        }
    }

    async fn stop(self) {
        match self {
            RunningControlPlane::InProcess(cp) => cp.stop().await,
            RunningControlPlane::Child { mut child, .. } => {
                if let Err(e) = child.kill().await {
                    warn!(error = %e, "stopping the controller-manager failed");
                }
            }
        }
    }
}

/// The control plane on its own runtime, so that its threads (and CPU time) are its own.
struct InProcessControlPlane {
    cp: Option<ControlPlane>,
    rt: Option<tokio::runtime::Runtime>,
}

impl InProcessControlPlane {
    fn start(host: &Cluster) -> anyhow::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .thread_name(CP_THREAD)
            // Threads that exit take their CPU time with them; keep them for the run.
            .thread_keep_alive(Duration::from_secs(24 * 3600))
            .enable_all()
            .build()?;
        let cp = {
            // The client's connection tasks and every controller task are spawned on the
            // runtime entered here.
            let _guard = rt.enter();
            let client = Client::try_from(host.kube_config())?;
            ControlPlane::start(client, DEFAULT_NAMESPACE, Arc::new(Metrics::new()))
        };
        Ok(InProcessControlPlane {
            cp: Some(cp),
            rt: Some(rt),
        })
    }

    fn ready(&self) -> usize {
        self.cp.as_ref().map_or(0, |cp| cp.clusters.ready().len())
    }

    async fn stop(mut self) {
        if let Some(cp) = self.cp.take() {
            cp.shutdown().await;
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for InProcessControlPlane {
    fn drop(&mut self) {
        self.cp.take();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Runs the benchmark: starts the clusters, measures, stops them. Writes the JSON report to
/// `opts.json` when set; printing [`BenchReport::table`] is left to the caller.
pub async fn run(opts: BenchOptions) -> anyhow::Result<BenchReport> {
    let (scenario, members, objects) = opts.resolved();
    anyhow::ensure!(members >= 1, "at least one member is needed");
    anyhow::ensure!(objects >= 1, "at least one object is needed");
    let machine = machine();
    info!(%scenario, members, objects, "starting the local clusters");
    let env = LocalEnv::start(EnvOptions::with_members(members))
        .await
        .context("starting the local clusters")?;
    let result = run_in(&env, &opts, objects).await;
    if let Err(e) = env.shutdown().await {
        warn!(error = %e, "stopping the local clusters failed");
    }
    let (kinds, cost, clusters_idle_cpu_per_s, control_plane) = result?;
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
        finished_at: k8s_openapi::jiff::Timestamp::now().to_string(),
    };
    report.targets = targets(&report);
    if let Some(path) = &opts.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report)
}

async fn run_in(
    env: &LocalEnv,
    opts: &BenchOptions,
    objects: usize,
) -> anyhow::Result<(Vec<KindReport>, Cost, f64, String)> {
    let host = env.host().client().await?;
    let mut members = Vec::new();
    for m in env.members() {
        members.push(m.client().await?);
    }
    let kubefed_clusters = setup_federation(env, &host, &members, opts.workers).await?;
    let run = Run {
        host,
        members,
        kubefed_clusters,
        cp_pid: Mutex::new(None),
        own_lists: std::sync::atomic::AtomicU64::new(0),
        procs: env
            .pids()
            .into_iter()
            .map(|p| (p, process_group(p)))
            .collect(),
        objects,
        concurrency: opts.concurrency,
        timeout: Duration::from_secs(opts.phase_timeout_secs),
        steady: Duration::from_secs(opts.steady_secs),
    };
    let mut kinds = vec![Kind::ConfigMap];
    if opts.with_deployments {
        kinds.push(Kind::Deployment);
    }
    for client in &run.members {
        ensure_namespace(client, RAW_NS).await?;
    }
    ensure_namespace(&run.host, FED_NS).await?;
    ensure_namespace(&run.host, INPUT_NS).await?;

    // Watchers for both parts start now, so both parts carry them.
    let mut trackers = Vec::new();
    for &kind in &kinds {
        let vo = move |o: &DynamicObject| kind.version_of(o);
        let fed_members = Tracker::start(
            &run.members,
            &kind.target(),
            FED_NS,
            &format!("{BENCH_LABEL}=fed,{}=true", flotilla_crds::MANAGED_LABEL),
            vo,
        );
        let raw_members = Tracker::start(
            &run.members,
            &kind.target(),
            RAW_NS,
            &format!("{BENCH_LABEL}=raw"),
            vo,
        );
        let host = Tracker::start(
            std::slice::from_ref(&run.host),
            &kind.federated(),
            FED_NS,
            &format!("{BENCH_LABEL}=fed"),
            |_| Some(String::new()),
        );
        let input = Tracker::start(
            std::slice::from_ref(&run.host),
            &kind.federated(),
            INPUT_NS,
            &format!("{BENCH_LABEL}=fed"),
            move |o: &DynamicObject| kind.federated_version_of(o),
        );
        for t in [&fed_members, &raw_members, &host, &input] {
            t.wait_synced(Duration::from_secs(60)).await?;
        }
        trackers.push((kind, fed_members, raw_members, host, input));
    }
    warm_up_raw(&run).await?;
    let idle_before = clusters_cpu(&run.procs);
    tokio::time::sleep(IDLE_SAMPLE).await;
    let idle = cpu_delta(&idle_before, &clusters_cpu(&run.procs))
        .values()
        .sum::<f64>()
        / IDLE_SAMPLE.as_secs_f64();

    // Part 1: through the control plane.
    let rss_before = rss_mib();
    let peak_reset = reset_peak_rss();
    let mut cp = RunningControlPlane::start(env, opts.control_plane_binary()?.as_deref())?;
    if let RunningControlPlane::Child { pid, .. } = &cp {
        *run.cp_pid.lock().unwrap_or_else(|e| e.into_inner()) = Some(*pid);
    }
    let control_plane = cp.describe();
    cp.wait_ready(&run).await?;
    federate_namespace(&run).await?;
    let cp_cpu_start = run.cp_cpu();
    let mut flotilla = Vec::new();
    for (kind, fed_members, _, host, _) in &trackers {
        warm_up_federated(&run, *kind).await?;
        info!(kind = kind.name(), "measuring propagation");
        let phases = flotilla_phases(&run, *kind, fed_members, host).await?;
        flotilla.push(phases);
    }
    let cp_cpu = run.cp_cpu() - cp_cpu_start;
    let peak_flotilla = peak_rss_mib();
    let own_peak = cp.own_peak_rss_mib();
    cp.stop().await;

    // Part 2: the raw baseline, with the same watchers and no control plane.
    let rss_raw_before = rss_mib();
    reset_peak_rss();
    let mut raw = Vec::new();
    for (kind, _, raw_members, _, input) in &trackers {
        info!(kind = kind.name(), "measuring the raw baseline");
        let phases = raw_phases(&run, *kind, raw_members).await?;
        raw.push((phases, input_phase(&run, *kind, input).await?));
    }
    let generator_growth = (peak_rss_mib() - rss_raw_before).max(0.0);

    let mut reports = Vec::new();
    let mut member_objects = 0usize;
    let mut created_requests = 0.0;
    for ((kind, ..), ((create, update, delete, steady), ((rc, ru, rd), host_input))) in
        trackers.iter().zip(flotilla.into_iter().zip(raw))
    {
        member_objects += create.member_objects + update.member_objects + delete.member_objects;
        created_requests += create.requests_per_member_object * create.member_objects as f64;
        reports.push(KindReport {
            kind: kind.name().to_string(),
            create: Comparison::new(create, rc),
            update: Comparison::new(update, ru),
            delete: Comparison::new(delete, rd),
            steady,
            host_input,
        });
    }
    let created: usize = reports
        .iter()
        .map(|k| k.create.flotilla.member_objects)
        .sum();
    let cost = Cost {
        control_plane_peak_rss_mib: own_peak
            .unwrap_or(((peak_flotilla - rss_before) - generator_growth).max(0.0)),
        rss_method: if own_peak.is_some() {
            "VmHWM of the controller-manager process".into()
        } else {
            "growth of this process's VmHWM during the Flotilla part minus that during the raw part (includes the load generator: an upper bound)".into()
        },
        process_rss_before_mib: rss_before,
        process_peak_flotilla_mib: peak_flotilla,
        generator_peak_growth_mib: generator_growth,
        peak_reset,
        control_plane_cpu_s: cp_cpu,
        control_plane_cpu_ms_per_member_object: ratio(cp_cpu * 1000.0, member_objects as f64),
        requests_per_created_member_object: ratio(created_requests, created as f64),
    };
    Ok((reports, cost, idle, control_plane))
}

fn names(kind: Kind, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("{}-{i:05}", kind.prefix()))
        .collect()
}

async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    api.patch(
        name,
        &PatchParams::apply(MANAGER),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})),
    )
    .await
    .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

async fn poll<F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!("waiting for {what}")));
            }
            Err(_) => {}
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// CRDs, control-plane namespace, KubeFedConfig, joined members, default type configs.
/// Returns the KubeFedCluster names.
async fn setup_federation(
    env: &LocalEnv,
    host: &Client,
    members: &[Client],
    workers: usize,
) -> anyhow::Result<Vec<String>> {
    crate::install::install_crds(host, &crdgen::all_crds(), MANAGER, Duration::from_secs(60))
        .await?;
    let pp = PatchParams::apply(MANAGER).force();
    ensure_namespace(host, DEFAULT_NAMESPACE).await?;
    let mut config = flotilla_crds::KubeFedConfigSpec::with_defaults();
    if let Some(sc) = config.sync_controller.as_mut() {
        sc.max_concurrent_reconciles = Some(workers as i64);
    }
    let cfg_api: Api<flotilla_crds::KubeFedConfig> =
        Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    cfg_api
        .patch(
            flotilla_crds::KUBEFED_CONFIG_NAME,
            &pp,
            &Patch::Apply(json!({
                "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedConfig",
                "metadata": {"name": flotilla_crds::KUBEFED_CONFIG_NAME, "namespace": DEFAULT_NAMESPACE},
                "spec": config,
            })),
        )
        .await
        .context("writing the KubeFedConfig")?;
    let mut names = Vec::new();
    for (m, client) in env.members().iter().zip(members) {
        let mut jo = JoinOptions::new(m.name(), m.server());
        jo.ca_pem = Some(m.ca_pem().to_string());
        jo.labels.insert("name".into(), m.name().into());
        join(host, client, &jo)
            .await
            .with_context(|| format!("joining {}", m.name()))?;
        names.push(m.name().to_string());
    }
    let ftc_api: Api<flotilla_crds::FederatedTypeConfig> =
        Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    for t in crdgen::default_target_types() {
        let ftc = crdgen::federated_type_config(&t, DEFAULT_NAMESPACE);
        let name = ftc
            .metadata
            .name
            .clone()
            .context("type config without a name")?;
        ftc_api
            .patch(&name, &pp, &Patch::Apply(&ftc))
            .await
            .with_context(|| format!("enabling {name}"))?;
    }
    Ok(names)
}

/// Creates and deletes some objects straight in every member, unmeasured.
async fn warm_up_raw(run: &Run) -> anyhow::Result<()> {
    let names: Vec<String> = (0..WARMUP_OBJECTS).map(|i| format!("warmup-{i}")).collect();
    let ar = Kind::ConfigMap.target();
    for client in &run.members {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), RAW_NS, &ar);
        let starts = Starts::default();
        write_all(&names, run.concurrency, &starts, |n| {
            let api = api.clone();
            async move {
                let mut o = Kind::ConfigMap.raw_object(&n, "0").map_err(to_kube)?;
                o.labels_mut().insert(BENCH_LABEL.into(), "warmup".into());
                api.create(&PostParams::default(), &o).await.map(|_| ())
            }
        })
        .await?;
        write_all(&names, run.concurrency, &starts, |n| {
            let api = api.clone();
            async move { api.delete(&n, &DeleteParams::default()).await.map(|_| ()) }
        })
        .await?;
    }
    Ok(())
}

/// The benchmark namespace, federated to every member.
async fn federate_namespace(run: &Run) -> anyhow::Result<()> {
    let ar = ApiResource {
        group: flotilla_crds::TYPES_GROUP.into(),
        version: flotilla_crds::V1BETA1.into(),
        api_version: format!("{}/{}", flotilla_crds::TYPES_GROUP, flotilla_crds::V1BETA1),
        kind: "FederatedNamespace".into(),
        plural: "federatednamespaces".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(run.host.clone(), FED_NS, &ar);
    api.patch(
        FED_NS,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(json!({
            "apiVersion": ar.api_version, "kind": ar.kind,
            "metadata": {"name": FED_NS, "namespace": FED_NS},
            "spec": {"template": {}, "placement": {"clusterSelector": {}}},
        })),
    )
    .await
    .context("creating the FederatedNamespace")?;
    for client in &run.members {
        let ns: Api<Namespace> = Api::all(client.clone());
        poll(
            run.timeout,
            "the federated namespace in every member",
            || async { Ok(ns.get_opt(FED_NS).await?.is_some()) },
        )
        .await?;
    }
    Ok(())
}

/// One federated object through its life, unmeasured: the controller of the kind runs and
/// its member caches are synced before anything is timed.
async fn warm_up_federated(run: &Run, kind: Kind) -> anyhow::Result<()> {
    let name = format!("{}-warmup", kind.prefix());
    let api: Api<DynamicObject> = Api::namespaced_with(run.host.clone(), FED_NS, &kind.federated());
    let mut obj = kind.federated_object(FED_NS, &name, "0")?;
    obj.labels_mut().insert(BENCH_LABEL.into(), "warmup".into());
    api.create(&PostParams::default(), &obj)
        .await
        .context("creating the warm-up object")?;
    let member_apis: Vec<Api<DynamicObject>> = run
        .members
        .iter()
        .map(|c| Api::namespaced_with(c.clone(), FED_NS, &kind.target()))
        .collect();
    poll(
        run.timeout,
        "the warm-up object in every member",
        || async {
            for m in &member_apis {
                if m.get_opt(&name).await?.is_none() {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
    .await?;
    api.delete(&name, &DeleteParams::default()).await?;
    poll(run.timeout, "the warm-up object gone", || async {
        Ok(api.get_opt(&name).await?.is_none())
    })
    .await
}

/// Measures one phase: `drive` issues the writes (marking starts), `tracker` sees them land,
/// `settle` waits for trailing work (status writes) before the end snapshot.
#[allow(clippy::too_many_arguments)] // private, two call sites; each argument is one fact of the phase
async fn measure<D, DF, S, SF>(
    run: &Run,
    kind: Kind,
    names: &[String],
    tracker: &Tracker,
    want: Want,
    own_host_writes: (&str, u64),
    drive: D,
    settle: S,
) -> anyhow::Result<Phase>
where
    D: FnOnce(Arc<Starts>) -> DF,
    DF: Future<Output = anyhow::Result<()>>,
    S: FnOnce() -> SF,
    SF: Future<Output = anyhow::Result<()>>,
{
    let before = Snapshot::take(run).await?;
    let lists_before = run.own_lists.load(std::sync::atomic::Ordering::Relaxed);
    tracker.expect(want, names);
    let starts = Arc::new(Starts::default());
    let wait = tracker.wait(run.timeout);
    let (driven, reached) = tokio::join!(drive(starts.clone()), wait);
    driven?;
    let reached = reached?;
    let (active_at, active_busy, active_clusters) = (
        Instant::now(),
        machine_busy(),
        clusters_cpu(&run.procs).values().sum::<f64>(),
    );
    settle().await?;
    let after = Snapshot::take(run).await?;
    let starts = starts.take();
    let first = starts.values().min().copied().unwrap_or(before.at);
    let last = reached.values().max().copied().unwrap_or(first);
    let seconds = last.saturating_duration_since(first).as_secs_f64();
    let mut lat: Vec<f64> = names
        .iter()
        .filter_map(|n| Some(reached.get(n)?.saturating_duration_since(*starts.get(n)?)))
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    let member_objects = names.len() * tracker.lock().clusters.len();
    let target = kind.target().plural;
    let mut member_requests = BTreeMap::new();
    for (b, a) in before.members.iter().zip(&after.members) {
        for (k, v) in delta(b, a, &target, |_, verb| verb.to_string()) {
            *member_requests.entry(k).or_insert(0) += v;
        }
    }
    let fed = kind.federated().plural;
    let mut host_requests = delta(&before.host, &after.host, &fed, |sub, verb| {
        if sub.is_empty() {
            format!("{fed} {verb}")
        } else {
            format!("{fed}/{sub} {verb}")
        }
    });
    for (k, v) in delta(&before.host, &after.host, "events", |_, verb| {
        format!("events {verb}")
    }) {
        *host_requests.entry(k).or_insert(0) += v;
    }
    // The benchmark's own writes: one per object, on the main resource.
    let (own_verb, own) = own_host_writes;
    let own_lists = run.own_lists.load(std::sync::atomic::Ordering::Relaxed) - lists_before;
    for (verb, n) in [(own_verb, own), ("LIST", own_lists)] {
        if let Some(v) = host_requests.get_mut(&format!("{fed} {verb}")) {
            *v = v.saturating_sub(n);
        }
    }
    host_requests.retain(|_, v| *v > 0);
    let total: u64 = member_requests.values().sum::<u64>() + host_requests.values().sum::<u64>();
    Ok(Phase {
        member_objects,
        seconds,
        objects_per_second: ratio(member_objects as f64, seconds),
        latency_ms: percentiles(&mut lat),
        member_requests,
        host_requests,
        requests_per_member_object: ratio(total as f64, member_objects as f64),
        control_plane_cpu_s: after.cp_cpu - before.cp_cpu,
        generator_cpu_s: after.process_cpu
            - before.process_cpu
            - if run
                .cp_pid
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some()
            {
                0.0
            } else {
                after.cp_cpu - before.cp_cpu
            },
        clusters_cpu_s: after.clusters_cpu.values().sum::<f64>()
            - before.clusters_cpu.values().sum::<f64>(),
        clusters_cpu_by_process: cpu_delta(&before.clusters_cpu, &after.clusters_cpu),
        machine_busy_cpu_s: after.machine_busy - before.machine_busy,
        window_s: after.at.saturating_duration_since(before.at).as_secs_f64(),
        active_s: active_at.saturating_duration_since(before.at).as_secs_f64(),
        machine_busy_active_cpu_s: active_busy - before.machine_busy,
        clusters_active_cpu_s: active_clusters - before.clusters_cpu.values().sum::<f64>(),
    })
}

fn to_kube(e: anyhow::Error) -> kube::Error {
    kube::Error::SerdeError(serde_json::Error::io(std::io::Error::other(e.to_string())))
}

/// Every federated object reports Propagation=True for its current generation.
async fn wait_propagated(run: &Run, kind: Kind, host: &Tracker) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(run.host.clone(), FED_NS, &kind.federated());
    let lp = ListParams::default().labels(&format!("{BENCH_LABEL}=fed"));
    poll(run.timeout, "every federated object propagated", || async {
        run.own_lists
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let list = api.list(&lp).await?;
        Ok(list.items.iter().all(|o| {
            let s = FederatedStatus::from_dynamic(o);
            s.observed_generation == o.metadata.generation.unwrap_or(0)
                && s.propagation().is_some_and(|c| c.status == "True")
        }))
    })
    .await?;
    host.quiet(run.timeout).await;
    Ok(())
}

async fn flotilla_phases(
    run: &Run,
    kind: Kind,
    members: &Tracker,
    host: &Tracker,
) -> anyhow::Result<(Phase, Phase, Phase, Steady)> {
    let names = names(kind, run.objects);
    let own = names.len() as u64;
    let api: Api<DynamicObject> = Api::namespaced_with(run.host.clone(), FED_NS, &kind.federated());
    let create = measure(
        run,
        kind,
        &names,
        members,
        Want::Version("1".into()),
        ("POST", own),
        |starts| async {
            let starts = starts;
            write_all(&names, run.concurrency, &starts, |n| {
                let api = api.clone();
                async move {
                    let o = kind.federated_object(FED_NS, &n, "1").map_err(to_kube)?;
                    api.create(&PostParams::default(), &o).await.map(|_| ())
                }
            })
            .await
        },
        || wait_propagated(run, kind, host),
    )
    .await?;
    info!(kind = kind.name(), seconds = create.seconds, "created");

    let steady = steady_state(run, kind, members, host).await?;
    info!(
        kind = kind.name(),
        member_writes = steady.member_writes,
        host_writes = steady.host_writes,
        "steady state"
    );

    let patch = json!({"spec": {"template": kind.version_patch("2")}});
    let update = measure(
        run,
        kind,
        &names,
        members,
        Want::Version("2".into()),
        ("PATCH", own),
        |starts| async {
            let starts = starts;
            write_all(&names, run.concurrency, &starts, |n| {
                let api = api.clone();
                let patch = &patch;
                async move {
                    api.patch(&n, &PatchParams::default(), &Patch::Merge(patch))
                        .await
                        .map(|_| ())
                }
            })
            .await
        },
        || wait_propagated(run, kind, host),
    )
    .await?;
    info!(kind = kind.name(), seconds = update.seconds, "updated");

    let delete = measure(
        run,
        kind,
        &names,
        members,
        Want::Absent,
        ("DELETE", own),
        |starts| async {
            let starts = starts;
            write_all(&names, run.concurrency, &starts, |n| {
                let api = api.clone();
                async move { api.delete(&n, &DeleteParams::default()).await.map(|_| ()) }
            })
            .await
        },
        || async {
            host.expect(Want::Absent, &names);
            host.wait(run.timeout).await?;
            host.quiet(run.timeout).await;
            Ok(())
        },
    )
    .await?;
    info!(kind = kind.name(), seconds = delete.seconds, "deleted");
    Ok((create, update, delete, steady))
}

/// Forces a resync of every converged object and counts the writes it causes.
async fn steady_state(
    run: &Run,
    kind: Kind,
    members: &Tracker,
    host: &Tracker,
) -> anyhow::Result<Steady> {
    let before = Snapshot::take(run).await?;
    let (mw, hw) = (members.writes(), host.writes());
    let api: Api<KubeFedCluster> = Api::namespaced(run.host.clone(), DEFAULT_NAMESPACE);
    let stamp = k8s_openapi::jiff::Timestamp::now()
        .as_millisecond()
        .to_string();
    for name in &run.kubefed_clusters {
        // A label change requeues every federated object that could place onto the cluster.
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"flotilla-bench/resync": stamp}}})),
        )
        .await
        .with_context(|| format!("labelling KubeFedCluster {name}"))?;
    }
    tokio::time::sleep(run.steady).await;
    let after = Snapshot::take(run).await?;
    let target = kind.target().plural;
    let member_requests: u64 = before
        .members
        .iter()
        .zip(&after.members)
        .map(|(b, a)| {
            delta(b, a, &target, |_, v| v.to_string())
                .values()
                .sum::<u64>()
        })
        .sum();
    Ok(Steady {
        window_s: after.at.saturating_duration_since(before.at).as_secs_f64(),
        resyncs_forced: run.kubefed_clusters.len(),
        member_writes: members.writes() - mw,
        host_writes: host.writes() - hw,
        member_requests,
        control_plane_cpu_s: after.cp_cpu - before.cp_cpu,
    })
}

/// The federated objects created with no control plane running, then deleted unmeasured.
async fn input_phase(run: &Run, kind: Kind, tracker: &Tracker) -> anyhow::Result<Phase> {
    let names = names(kind, run.objects);
    let api: Api<DynamicObject> =
        Api::namespaced_with(run.host.clone(), INPUT_NS, &kind.federated());
    let phase = measure(
        run,
        kind,
        &names,
        tracker,
        Want::Version("1".into()),
        ("POST", names.len() as u64),
        |starts| async {
            let starts = starts;
            write_all(&names, run.concurrency, &starts, |n| {
                let api = api.clone();
                async move {
                    let o = kind.federated_object(INPUT_NS, &n, "1").map_err(to_kube)?;
                    api.create(&PostParams::default(), &o).await.map(|_| ())
                }
            })
            .await
        },
        || async { Ok(()) },
    )
    .await?;
    tracker.expect(Want::Absent, &names);
    write_all(&names, run.concurrency, &Starts::default(), |n| {
        let api = api.clone();
        async move { api.delete(&n, &DeleteParams::default()).await.map(|_| ()) }
    })
    .await?;
    tracker.wait(run.timeout).await?;
    Ok(phase)
}

async fn raw_phases(
    run: &Run,
    kind: Kind,
    tracker: &Tracker,
) -> anyhow::Result<(Phase, Phase, Phase)> {
    let names = names(kind, run.objects);
    let apis: Vec<Api<DynamicObject>> = run
        .members
        .iter()
        .map(|c| Api::namespaced_with(c.clone(), RAW_NS, &kind.target()))
        .collect();
    let none = || async { Ok(()) };
    let create = measure(
        run,
        kind,
        &names,
        tracker,
        Want::Version("1".into()),
        ("", 0),
        |starts| {
            let names = &names;
            let apis = &apis;
            async move {
                futures::future::try_join_all(apis.iter().map(|api| {
                    write_all(names, run.concurrency, &starts, move |n| {
                        let api = api.clone();
                        async move {
                            let o = kind.raw_object(&n, "1").map_err(to_kube)?;
                            api.create(&PostParams::default(), &o).await.map(|_| ())
                        }
                    })
                }))
                .await
                .map(|_| ())
            }
        },
        none,
    )
    .await?;
    info!(
        kind = kind.name(),
        seconds = create.seconds,
        "raw creates done"
    );
    let patch = kind.version_patch("2");
    let update = measure(
        run,
        kind,
        &names,
        tracker,
        Want::Version("2".into()),
        ("", 0),
        |starts| {
            let names = &names;
            let apis = &apis;
            let patch = &patch;
            async move {
                futures::future::try_join_all(apis.iter().map(|api| {
                    write_all(names, run.concurrency, &starts, move |n| {
                        let api = api.clone();
                        async move {
                            api.patch(&n, &PatchParams::default(), &Patch::Merge(patch))
                                .await
                                .map(|_| ())
                        }
                    })
                }))
                .await
                .map(|_| ())
            }
        },
        none,
    )
    .await?;
    let delete = measure(
        run,
        kind,
        &names,
        tracker,
        Want::Absent,
        ("", 0),
        |starts| {
            let names = &names;
            let apis = &apis;
            async move {
                futures::future::try_join_all(apis.iter().map(|api| {
                    write_all(names, run.concurrency, &starts, move |n| {
                        let api = api.clone();
                        async move { api.delete(&n, &DeleteParams::default()).await.map(|_| ()) }
                    })
                }))
                .await
                .map(|_| ())
            }
        },
        none,
    )
    .await?;
    Ok((create, update, delete))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(clusters: usize) -> Tracker {
        Tracker {
            state: Mutex::new(TrackState {
                clusters: (0..clusters).map(|_| ClusterTrack::default()).collect(),
                ..TrackState::default()
            }),
            changed: Notify::new(),
            tasks: Mutex::default(),
        }
    }

    fn cm(name: &str, v: &str) -> DynamicObject {
        Kind::ConfigMap.raw_object(name, v).expect("a valid object")
    }

    #[test]
    fn an_object_is_reached_once_every_cluster_shows_the_wanted_version() {
        let t = tracker(2);
        let names = vec!["a".to_string(), "b".to_string()];
        let version = |o: &DynamicObject| Kind::ConfigMap.version_of(o);
        t.expect(Want::Version("1".into()), &names);
        t.on_event(0, watcher::Event::Apply(cm("a", "1")), &version);
        t.on_event(1, watcher::Event::Apply(cm("a", "0")), &version);
        t.on_event(0, watcher::Event::Apply(cm("b", "1")), &version);
        t.on_event(1, watcher::Event::Apply(cm("b", "1")), &version);
        assert!(t.all_reached().is_none(), "a is at version 0 in cluster 1");
        t.on_event(1, watcher::Event::Apply(cm("a", "1")), &version);
        let done = t.all_reached().expect("all reached");
        assert_eq!(done.len(), 2);
        assert_eq!(t.writes(), 5);
    }

    #[test]
    fn objects_missing_from_a_relist_count_as_deleted() {
        let t = tracker(1);
        let names = vec!["a".to_string(), "b".to_string()];
        let version = |o: &DynamicObject| Kind::ConfigMap.version_of(o);
        t.on_event(0, watcher::Event::Apply(cm("a", "1")), &version);
        t.on_event(0, watcher::Event::Apply(cm("b", "1")), &version);
        t.expect(Want::Absent, &names);
        assert!(t.all_reached().is_none());
        t.on_event(0, watcher::Event::Delete(cm("a", "1")), &version);
        t.on_event(0, watcher::Event::Init, &version);
        t.on_event(0, watcher::Event::InitDone, &version);
        assert_eq!(t.all_reached().map(|d| d.len()), Some(2));
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = percentiles(&mut v);
        assert_eq!((p.p50, p.p95, p.p99, p.max), (50.0, 95.0, 99.0, 100.0));
        let mut one = vec![7.0];
        assert_eq!(percentiles(&mut one).p99, 7.0);
        assert_eq!(percentiles(&mut []), Percentiles::default());
    }

    #[test]
    fn request_totals_are_summed_over_codes_and_other_labels() {
        let text = r#"# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",contentType="application/json",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="POST",version="v1"} 5
apiserver_request_total{code="409",component="apiserver",contentType="application/json",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="types.kubefed.io",resource="federatedconfigmaps",scope="namespace",subresource="status",verb="PATCH",version="v1beta1"} 3
apiserver_request_total_other{verb="POST"} 9
"#;
        let c = parse_request_totals(text);
        let key = |g: &str, r: &str, s: &str, v: &str| {
            (g.to_string(), r.to_string(), s.to_string(), v.to_string())
        };
        assert_eq!(c.get(&key("", "configmaps", "", "POST")), Some(&7.0));
        assert_eq!(
            c.get(&key(
                "types.kubefed.io",
                "federatedconfigmaps",
                "status",
                "PATCH"
            )),
            Some(&3.0)
        );
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn request_deltas_skip_watches_and_other_resources() {
        let key = |r: &str, s: &str, v: &str| {
            (String::new(), r.to_string(), s.to_string(), v.to_string())
        };
        let before: RequestCounts = [(key("configmaps", "", "POST"), 10.0)].into();
        let after: RequestCounts = [
            (key("configmaps", "", "POST"), 14.0),
            (key("configmaps", "", "WATCH"), 3.0),
            (key("configmaps", "", "GET"), 4.0),
            (key("secrets", "", "GET"), 4.0),
        ]
        .into();
        let d = delta(&before, &after, "configmaps", |_, v| v.to_string());
        assert_eq!(d, [("GET".to_string(), 4), ("POST".to_string(), 4)].into());
    }

    #[test]
    fn proc_stat_lines_give_the_thread_name_and_cpu_seconds() {
        let line =
            "1234 (flotilla-cp) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 2 0 1 0 0";
        let (comm, cpu) = parse_stat(line).expect("parses");
        assert_eq!(comm, "flotilla-cp");
        assert!((cpu - 3.0).abs() < 1e-9);
    }

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
    fn the_table_names_every_target() {
        let phase = Phase {
            member_objects: 4,
            seconds: 1.0,
            objects_per_second: 4.0,
            ..Phase::default()
        };
        let cmp = Comparison::new(phase.clone(), phase);
        let mut report = BenchReport {
            scenario: "karmada-200x2".into(),
            members: 2,
            objects: 2,
            concurrency: 16,
            workers: 16,
            control_plane: "in-process".into(),
            clusters_idle_cpu_per_s: 0.0,
            machine: machine(),
            kinds: vec![KindReport {
                kind: "ConfigMap".into(),
                create: cmp.clone(),
                update: cmp.clone(),
                delete: cmp,
                steady: Steady::default(),
                host_input: Phase::default(),
            }],
            cost: Cost::default(),
            reference: None,
            targets: Vec::new(),
            finished_at: String::new(),
        };
        report.targets = targets(&report);
        assert_eq!(report.targets.len(), 5);
        let table = report.table();
        for t in &report.targets {
            assert!(table.contains(&t.name), "{table}");
        }
        let json = serde_json::to_value(&report).expect("serializes");
        assert_eq!(json["kinds"][0]["create"]["time_ratio"], json!(1.0));
    }
}
