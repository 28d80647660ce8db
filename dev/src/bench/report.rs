//! The report of a run: what was measured (serialized as the `--json` output, so field
//! names and shapes are a format), ratios and percentiles, and the targets. Only
//! pure data and arithmetic; [`super::table`] renders it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
    /// The targets, met or not.
    pub targets: Vec<Target>,
    /// The fleet phases' figures (`--fleet-phases`, `--scenario fleet-100`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<super::FleetReport>,
    /// Why the raw baseline did not finish, when it did not: the Flotilla part's figures
    /// are kept, the raw ones of the kinds it did not reach are empty (zero) and their
    /// ratios absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_error: Option<String>,
    /// When the run finished (RFC 3339).
    pub finished_at: String,
}

/// The machine the run used.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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
    /// A hard restart of the control plane with every object propagated.
    #[serde(default)]
    pub restart: Restart,
    /// One writer with a GET before each create, then a bulk delete (`--sequential`).
    #[serde(default)]
    pub sequential: Option<super::SequentialComparison>,
    /// The federated creates alone, with no control plane running: what accepting the
    /// input costs the host, a floor under propagation.
    pub host_input: Phase,
    /// The policy path beside the other two (`--policy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<super::PolicyPath>,
    /// Every pull-mode agent restarted with the objects applied (`--pull`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_restart: Option<super::pull_report::AgentRestart>,
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
    /// Flotilla's phase beside the raw one, with their ratios.
    pub(super) fn new(flotilla: Phase, raw: Phase) -> Self {
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
    /// The control plane's Events on the federated objects during the phase, by reason
    /// (a Warning comes with a status write reporting a failure).
    #[serde(default)]
    pub host_events: BTreeMap<String, u64>,
    /// (member + host requests) / member_objects.
    pub requests_per_member_object: f64,
    /// Member requests alone / member_objects (raw = 1).
    pub member_requests_per_member_object: f64,
    /// Host requests / federated objects (the input itself excluded).
    pub host_requests_per_federated_object: f64,
    /// CPU seconds of the control plane's threads, until the host settled.
    pub control_plane_cpu_s: f64,
    /// CPU seconds of the pull-mode agents' threads (`--pull`; 0 without agents).
    #[serde(default)]
    pub agent_cpu_s: f64,
    /// Every request of the phase in pull mode (`--pull`): the host's Works and the
    /// members' AppliedWork records beside the kind, per member object, and what those
    /// figures leave out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<super::pull_report::PullRequests>,
    /// CPU seconds of the benchmark's load generator and watchers (this process, less the
    /// control plane's threads when it runs in-process and the agents' threads).
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
    /// Every request of the window in pull mode (`--pull`), Works and AppliedWork records
    /// included (no member object is written, so its ratios are NaN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<super::pull_report::PullRequests>,
}

/// A hard restart of the control plane with every object of the kind propagated
/// (`restart.rs`). The probe object created right after the restart is not counted.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Restart {
    /// Federated objects propagated when the control plane was restarted.
    pub objects: usize,
    /// Window from just before the restart, seconds.
    pub window_s: f64,
    /// Write requests (POST, PUT, PATCH, APPLY, DELETE) for the kind the members served in
    /// the window (the goal is 0).
    pub member_writes: u64,
    /// Reads (LIST, GET, WATCH) for the kind the members served in the window: the new
    /// process's initial lists.
    pub member_reads: u64,
    /// Write requests on the federated kind and its status the host served (the goal is 0).
    pub host_writes: u64,
    /// From the new control plane's start to a federated object created right then being
    /// present in every member, seconds.
    pub first_new_object_s: f64,
    /// CPU seconds of the control plane in the window (start-up: lists and one reconcile
    /// of every object).
    pub control_plane_cpu_s: f64,
    /// Every request of the window in pull mode (`--pull`), Works and AppliedWork records
    /// included; the probe's member objects (one per member) are in it, and are its
    /// per-object denominator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<super::pull_report::PullRequests>,
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

/// One of the targets.
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

/// a / b, NaN when b is not positive.
pub(super) fn ratio(a: f64, b: f64) -> f64 {
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

/// The targets, judged on `report`.
pub(super) fn targets(report: &BenchReport) -> Vec<Target> {
    let Some(cm) = report.kinds.first() else {
        return Vec::new();
    };
    let mut out = if report.raw_error.is_none() {
        speed_targets(report, cm)
    } else {
        Vec::new()
    };
    out.extend(request_targets(cm));
    out.extend(quiet_targets(report));
    out.push(memory_target(report));
    out
}

/// Time, throughput and P99 against the same run's raw writes.
fn speed_targets(report: &BenchReport, cm: &KindReport) -> Vec<Target> {
    let c = &cm.create;
    let u = &cm.update;
    let big = report.objects >= 10_000;
    let (create_goal, update_goal) = if big {
        (3.0, 2.5)
    } else {
        (2.5, f64::INFINITY)
    };
    let mut out = vec![Target {
        name: format!("{}: create -> all present vs raw", report.scenario),
        goal: format!("<= {create_goal}x raw"),
        measured: format!(
            "{:.2} s vs {:.2} s = {:.2}x",
            c.flotilla.seconds, c.raw.seconds, c.time_ratio
        ),
        met: c.time_ratio <= create_goal,
    }];
    if big {
        out.push(Target {
            name: format!("{}: update -> new data everywhere vs raw", report.scenario),
            goal: format!("<= {update_goal}x raw"),
            measured: format!(
                "{:.2} s vs {:.2} s = {:.2}x",
                u.flotilla.seconds, u.raw.seconds, u.time_ratio
            ),
            met: u.time_ratio <= update_goal,
        });
    }
    out.push(Target {
        name: "propagation throughput vs raw writes".into(),
        goal: ">= 0.6x raw".into(),
        measured: format!(
            "{:.0} vs {:.0} obj/s = {:.2}x",
            c.flotilla.objects_per_second, c.raw.objects_per_second, c.throughput_ratio
        ),
        met: c.throughput_ratio >= 0.6,
    });
    out.push(Target {
        name: "P99 create-to-all-members latency vs raw".into(),
        goal: "<= 4x raw P99".into(),
        measured: format!(
            "{:.0} vs {:.0} ms = {:.2}x",
            c.flotilla.latency_ms.p99, c.raw.latency_ms.p99, c.latency_ratio.p99
        ),
        met: c.latency_ratio.p99 <= 4.0,
    });
    out
}

/// Relative slack on request counts: 1 %.
const SLACK: f64 = 1.01;

/// Member requests per member object (raw = 1) and host requests per federated object.
fn request_targets(cm: &KindReport) -> Vec<Target> {
    let phases = [
        ("create", &cm.create),
        ("update", &cm.update),
        ("delete", &cm.delete),
    ];
    let member: Vec<f64> = phases
        .iter()
        .map(|(_, c)| c.flotilla.member_requests_per_member_object)
        .collect();
    let host = |c: &Comparison| c.flotilla.host_requests_per_federated_object;
    vec![
        Target {
            name: "member requests per member object (create / update / delete)".into(),
            goal: "<= 1.1 each".into(),
            measured: format!("{:.2} / {:.2} / {:.2}", member[0], member[1], member[2]),
            met: member.iter().all(|m| *m <= 1.1 * SLACK),
        },
        Target {
            name: "host requests per federated object (create / update)".into(),
            goal: "<= 2 / <= 1".into(),
            measured: format!("{:.2} / {:.2}", host(&cm.create), host(&cm.update)),
            // A list or a retried write among thousands must not flip the verdict.
            met: host(&cm.create) <= 2.0 * SLACK && host(&cm.update) <= SLACK,
        },
    ]
}

/// No writes at steady state and across a restart; a restarted process converges fast.
fn quiet_targets(report: &BenchReport) -> Vec<Target> {
    let sum = |f: &dyn Fn(&KindReport) -> u64| report.kinds.iter().map(f).sum::<u64>();
    let (mw, hw) = (
        sum(&|k| k.steady.member_writes),
        sum(&|k| k.steady.host_writes),
    );
    let (rmw, rhw) = (
        sum(&|k| k.restart.member_writes),
        sum(&|k| k.restart.host_writes),
    );
    let first = report
        .kinds
        .iter()
        .map(|k| k.restart.first_new_object_s)
        .fold(0.0, f64::max);
    vec![
        Target {
            name: "steady-state writes (members / host status)".into(),
            goal: "0 / 0".into(),
            measured: format!("{mw} / {hw}"),
            met: mw == 0 && hw == 0,
        },
        Target {
            name: "restart: writes (members / host), first new object".into(),
            goal: "0 / 0, <= 15 s".into(),
            measured: format!("{rmw} / {rhw}, {first:.2} s"),
            met: rmw == 0 && rhw == 0 && first <= 15.0,
        },
    ]
}

/// Peak RSS: 150 MiB set at 1,000 × 4, 200 MiB at 10,000 × 2.
fn memory_target(report: &BenchReport) -> Target {
    let (goal, at) = if report.objects >= 10_000 {
        (200.0, "")
    } else if report.objects >= 1000 && report.members >= 4 {
        (150.0, "")
    } else {
        (150.0, " (target set at 1000x4)")
    };
    Target {
        name: format!("control-plane peak RSS{at}"),
        goal: format!("<= {goal} MiB"),
        measured: format!("{:.1} MiB", report.cost.control_plane_peak_rss_mib),
        met: report.cost.control_plane_peak_rss_mib <= goal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
            machine: super::super::procfs::machine(),
            kinds: vec![KindReport {
                kind: "ConfigMap".into(),
                create: cmp.clone(),
                update: cmp.clone(),
                delete: cmp,
                steady: Steady::default(),
                restart: Restart::default(),
                sequential: Some(super::super::SequentialComparison::default()),
                host_input: Phase::default(),
                policy: None,
                agent_restart: None,
            }],
            cost: Cost::default(),
            reference: None,
            targets: Vec::new(),
            fleet: None,
            raw_error: None,
            finished_at: String::new(),
        };
        report.targets = targets(&report);
        assert_eq!(report.targets.len(), 8);
        let table = report.table();
        for t in &report.targets {
            assert!(table.contains(&t.name), "{table}");
        }
        let json = serde_json::to_value(&report).expect("serializes");
        assert_eq!(json["kinds"][0]["create"]["time_ratio"], json!(1.0));
        assert!(json.get("raw_error").is_none());

        // Without a raw baseline the targets measured against it are not judged, and the
        // table says why its raw columns are empty.
        report.raw_error = Some("deleting: 500 context deadline exceeded".into());
        report.targets = targets(&report);
        assert_eq!(report.targets.len(), 5);
        assert!(report.targets.iter().all(|t| !t.name.contains("vs raw")));
        let table = report.table();
        assert!(table.contains("500 context deadline exceeded"), "{table}");
    }
}
