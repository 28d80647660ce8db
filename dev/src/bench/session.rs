//! One run on started clusters: the federation set up through [`crate::bootstrap`], the
//! watchers of both parts, the Flotilla part (control plane running) and then the raw part
//! (control plane stopped), and the per-kind reports and cost assembled from them.

use std::{
    sync::{Arc, Mutex, atomic::AtomicU64},
    time::Duration,
};

use flotilla_localenv::LocalEnv;
use kube::api::DynamicObject;
use tracing::{info, warn};

use super::{
    BENCH_LABEL, BenchOptions, FED_NS, INPUT_NS, MANAGER, RAW_NS,
    control_plane::RunningControlPlane,
    phases::{FlotillaPhases, RawPhases, flotilla_phases, input_phase, raw_phases},
    policy_path::{self, PolicyPhases, PolicyTrackers},
    procfs::{clusters_cpu, cpu_delta, peak_rss_mib, process_group, reset_peak_rss, rss_mib},
    report::{Comparison, Cost, KindReport, Phase, ratio},
    restart::Restarter,
    run::Run,
    sequential::SequentialComparison,
    tracker::Tracker,
    warmup::{ensure_namespace, federate_namespace, warm_up_federated, warm_up_raw},
    workload::Kind,
};
use super::{
    drain,
    fleet::{FleetReport, MemoryBudget},
    fleet_phases,
    pull_report::AgentCost,
};
use crate::bootstrap::Bootstrap;

/// How long the clusters' background CPU use is sampled.
const IDLE_SAMPLE: Duration = Duration::from_secs(3);
/// How long the benchmark's watchers may take to list what is there.
const WATCH_SYNC: Duration = Duration::from_secs(60);

/// What [`run_in`] measured.
pub(super) struct Measured {
    pub(super) kinds: Vec<KindReport>,
    pub(super) cost: Cost,
    pub(super) clusters_idle_cpu_per_s: f64,
    pub(super) control_plane: String,
    /// The fleet phases' figures (`--fleet-phases`).
    pub(super) fleet: Option<FleetReport>,
    /// Why the raw part did not finish, when it did not.
    pub(super) raw_error: Option<String>,
}

/// The watchers of one kind, started before both parts so that both carry them.
struct KindTrackers {
    kind: Kind,
    /// Federated objects of the kind.
    objects: usize,
    /// Managed member objects of the federated part.
    fed_members: Arc<Tracker>,
    /// Member objects of the raw part.
    raw_members: Arc<Tracker>,
    /// Federated objects in the host (settling after each phase).
    host: Arc<Tracker>,
    /// Federated objects created with no control plane running.
    input: Arc<Tracker>,
    /// The policy path's watchers (`--policy`).
    policy: Option<PolicyTrackers>,
}

/// The Flotilla part's figures.
struct FlotillaPart {
    phases: Vec<FlotillaPhases>,
    /// The policy path's phases per kind (`--policy`).
    policy: Vec<Option<PolicyPhases>>,
    control_plane: String,
    cp_cpu: f64,
    rss_before: f64,
    peak_reset: bool,
    peak: f64,
    own_peak: Option<f64>,
    /// The fleet phases' figures, the half-fleet ones gathered per kind.
    fleet: Option<FleetReport>,
}

/// Sets up the federation on `env`, measures both parts and assembles the reports.
pub(super) async fn run_in(
    env: &LocalEnv,
    opts: &BenchOptions,
    objects: usize,
) -> anyhow::Result<Measured> {
    let run = setup(env, opts, objects).await?;
    let mut kinds = vec![Kind::ConfigMap];
    if run.deployments > 0 {
        kinds.push(Kind::Deployment);
    }
    let mut trackers = Vec::new();
    for kind in kinds {
        trackers.push(start_trackers(&run, kind).await?);
    }
    warm_up_raw(&run).await?;
    let idle = idle_cpu_per_s(&run).await;
    let flotilla = flotilla_part(env, &run, opts, &trackers).await?;

    // Part 2: the raw baseline, with the same watchers and no control plane.
    let rss_raw_before = rss_mib();
    reset_peak_rss();
    let (raw, raw_error) = raw_part(&run, &trackers).await;
    let generator_growth = (peak_rss_mib() - rss_raw_before).max(0.0);
    let mut measured = assemble(&trackers, flotilla, raw, generator_growth, idle);
    measured.raw_error = raw_error;
    Ok(measured)
}

/// The raw baseline of each kind, in order. A failure ends the part but not the run: the
/// kinds it did not reach have no baseline (`None`), and the error is returned beside them,
/// so that the Flotilla part (most of a long run) keeps its report.
async fn raw_part(
    run: &Run,
    trackers: &[KindTrackers],
) -> (Vec<Option<(RawPhases, Phase)>>, Option<String>) {
    let mut raw = Vec::new();
    for t in trackers {
        info!(kind = t.kind.name(), "measuring the raw baseline");
        let measured = async {
            let phases = raw_phases(run, t.kind, &t.raw_members).await?;
            anyhow::Ok((phases, input_phase(run, t.kind, &t.input).await?))
        };
        match measured.await {
            Ok(m) => raw.push(Some(m)),
            Err(e) => {
                let error = format!("{}: {e:#}", t.kind.name());
                warn!(
                    error,
                    "the raw baseline failed; the Flotilla part's figures are kept"
                );
                raw.resize_with(trackers.len(), || None);
                return (raw, Some(error));
            }
        }
    }
    (raw, None)
}

/// The federation (CRDs, KubeFedConfig with `opts.workers` sync workers, joined members,
/// default types) and the benchmark's namespaces.
async fn setup(env: &LocalEnv, opts: &BenchOptions, objects: usize) -> anyhow::Result<Run> {
    let mut boot = Bootstrap::new(MANAGER);
    boot.member_admin_credentials = opts.without_member_controller_manager();
    if let Some(sc) = boot.config.sync_controller.as_mut() {
        sc.max_concurrent_reconciles = Some(opts.workers as i64);
    }
    let (fed, agents) = if opts.pull {
        let (fed, agents) = super::pull::federate(&boot, env).await?;
        (fed, Some(agents))
    } else {
        (boot.federate(env, |_| {}).await?, None)
    };
    let slow = if opts.runs_fleet_phases() {
        fleet_phases::prepare(env, &fed.host, &fed.cluster_names, opts).await?
    } else {
        None
    };
    let run = Run {
        host: fed.host,
        members: fed.members,
        kubefed_clusters: fed.cluster_names,
        cp_pid: Mutex::new(None),
        cp_cpu_retired: Mutex::new(0.0),
        own_lists: AtomicU64::new(0),
        procs: env
            .pids()
            .into_iter()
            .map(|p| (p, process_group(p)))
            .collect(),
        objects,
        deployments: opts.deployment_count(objects),
        fleet_phases: opts.runs_fleet_phases(),
        slow,
        sequential: opts.sequential.min(objects),
        concurrency: opts.concurrency,
        timeout: Duration::from_secs(opts.phase_timeout_secs),
        steady: Duration::from_secs(opts.steady_secs),
        policy: opts.policy,
        agents,
    };
    for client in &run.members {
        ensure_namespace(client, RAW_NS).await?;
    }
    ensure_namespace(&run.host, FED_NS).await?;
    ensure_namespace(&run.host, INPUT_NS).await?;
    Ok(run)
}

async fn start_trackers(run: &Run, kind: Kind) -> anyhow::Result<KindTrackers> {
    let vo = move |o: &DynamicObject| kind.version_of(o);
    let fed = format!("{BENCH_LABEL}=fed");
    let t = KindTrackers {
        kind,
        objects: run.objects_of(kind),
        fed_members: Tracker::start(
            &run.members,
            &kind.target(),
            FED_NS,
            &format!("{fed},{}=true", flotilla_api::MANAGED_LABEL),
            vo,
        ),
        raw_members: Tracker::start(
            &run.members,
            &kind.target(),
            RAW_NS,
            &format!("{BENCH_LABEL}=raw"),
            vo,
        ),
        host: Tracker::start(
            std::slice::from_ref(&run.host),
            &kind.federated(),
            FED_NS,
            &fed,
            |_| Some(String::new()),
        ),
        input: Tracker::start(
            std::slice::from_ref(&run.host),
            &kind.federated(),
            INPUT_NS,
            &fed,
            move |o: &DynamicObject| kind.federated_version_of(o),
        ),
        policy: None,
    };
    for tracker in [&t.fed_members, &t.raw_members, &t.host, &t.input] {
        tracker.wait_synced(WATCH_SYNC).await?;
    }
    let policy = if run.policy {
        Some(policy_path::start_trackers(run, kind).await?)
    } else {
        None
    };
    Ok(KindTrackers { policy, ..t })
}

/// CPU seconds per second the clusters use while nobody writes.
async fn idle_cpu_per_s(run: &Run) -> f64 {
    let idle_before = clusters_cpu(&run.procs);
    tokio::time::sleep(IDLE_SAMPLE).await;
    cpu_delta(&idle_before, &clusters_cpu(&run.procs))
        .values()
        .sum::<f64>()
        / IDLE_SAMPLE.as_secs_f64()
}

/// Part 1: every kind through the control plane, which is stopped again at the end.
async fn flotilla_part(
    env: &LocalEnv,
    run: &Run,
    opts: &BenchOptions,
    trackers: &[KindTrackers],
) -> anyhow::Result<FlotillaPart> {
    let rss_before = rss_mib();
    let peak_reset = reset_peak_rss();
    let binary = opts.control_plane_binary()?;
    let mut cp = RunningControlPlane::start(env, binary.as_deref())?;
    if let Some(pid) = cp.child_pid() {
        *run.cp_pid.lock().unwrap_or_else(|e| e.into_inner()) = Some(pid);
    }
    let control_plane = cp.describe();
    let cp_started = std::time::Instant::now();
    cp.wait_ready(run).await?;
    let ready_s = cp_started.elapsed().as_secs_f64();
    federate_namespace(run).await?;
    let mut fleet = if run.fleet_phases {
        Some(fleet_start(run, opts, &trackers[0], ready_s, rss_before).await?)
    } else {
        None
    };
    let cp_cpu_start = run.cp_cpu();
    let agent_cpu_start = run.agent_cpu();
    let mut phases = Vec::new();
    let mut policy = Vec::new();
    let mut running = Some(cp);
    let mut restarter = Restarter {
        env,
        binary: binary.as_deref(),
        cp: &mut running,
        peak_mib: None,
    };
    for t in trackers {
        warm_up_federated(run, t.kind).await?;
        info!(kind = t.kind.name(), "measuring propagation");
        phases.push(flotilla_phases(run, t.kind, &t.fed_members, &t.host, &mut restarter).await?);
        if let Some(p) = &t.policy {
            info!(kind = t.kind.name(), "measuring the policy path");
            // Made only now, so that the Federated<Kind> figures are those of a run
            // without --policy (the policy controller then has no native cache).
            let kinds: Vec<Kind> = trackers.iter().map(|t| t.kind).collect();
            policy_path::create_policy(run, &kinds).await?;
            let measured = policy_path::policy_phases(run, t.kind, p, &mut restarter).await?;
            policy.push(Some(measured));
        } else {
            policy.push(None);
        }
    }
    if let Some(fleet) = fleet.as_mut() {
        fleet.half_fleet = phases.iter().filter_map(|p| p.half_fleet.clone()).collect();
        let (members, host) = (&trackers[0].fed_members, &trackers[0].host);
        fleet.slow_member = fleet_phases::slow_member(run, members, host).await?;
        fleet.drain = drain::drain_phase(run, members, host).await?;
    }
    if let Some(agents) = fleet.as_mut().and_then(|f| f.agents.as_mut()) {
        agents.cpu_s = run.agent_cpu() - agent_cpu_start;
    }
    let earlier_peak = restarter.peak_mib;
    let cp_cpu = run.cp_cpu() - cp_cpu_start;
    let peak = peak_rss_mib();
    let mut own_peak = None;
    if let Some(cp) = running {
        own_peak = [earlier_peak, cp.own_peak_rss_mib()]
            .into_iter()
            .flatten()
            .reduce(f64::max);
        cp.stop().await;
    }
    Ok(FlotillaPart {
        phases,
        policy,
        control_plane,
        cp_cpu,
        rss_before,
        peak_reset,
        peak,
        own_peak,
        fleet,
    })
}

/// The fleet phases at idle, right after every member turned Ready: the idle window and
/// one new object to every member.
async fn fleet_start(
    run: &Run,
    opts: &BenchOptions,
    configmaps: &KindTrackers,
    ready_s: f64,
    process_rss_before: f64,
) -> anyhow::Result<FleetReport> {
    let idle_rss = fleet_phases::control_plane_rss_mib(run, process_rss_before);
    let idle = fleet_phases::idle(run, Duration::from_secs(opts.idle_secs)).await?;
    info!(
        requests_per_cluster_per_min = idle.member_requests_per_cluster_per_min,
        "idle fleet"
    );
    let one_object_s = fleet_phases::one_object(run, &configmaps.fed_members).await?;
    let agents = run.agents.as_ref().map(|a| AgentCost {
        idle_cpu_ms_per_cluster_per_min: idle.agent_cpu_ms_per_cluster_per_min,
        ..a.cost.clone()
    });
    Ok(FleetReport {
        agents,
        member_controller_manager: !opts.without_member_controller_manager(),
        ready_s,
        idle,
        // The peak is known at the end of the part (see `assemble`).
        memory: MemoryBudget {
            idle_rss_mib: idle_rss,
            ..MemoryBudget::default()
        },
        one_object_s,
        ..FleetReport::default()
    })
}

/// Per-kind comparisons and the control plane's cost.
fn assemble(
    trackers: &[KindTrackers],
    flotilla: FlotillaPart,
    raw: Vec<Option<(RawPhases, Phase)>>,
    generator_growth: f64,
    idle: f64,
) -> Measured {
    let mut kinds = Vec::new();
    let mut member_objects = 0usize;
    let mut created_requests = 0.0;
    let paths = flotilla.phases.into_iter().zip(flotilla.policy);
    for (t, ((f, p), r)) in trackers.iter().zip(paths.zip(raw)) {
        member_objects +=
            f.create.member_objects + f.update.member_objects + f.delete.member_objects;
        created_requests += f.create.requests_per_member_object * f.create.member_objects as f64;
        // A kind the raw part did not reach: empty raw phases (every figure zero, no
        // sequential phase), so NaN ratios.
        let (r, host_input) = r.unwrap_or_default();
        let (create, update, delete) = (
            Comparison::new(f.create, r.create),
            Comparison::new(f.update, r.update),
            Comparison::new(f.delete, r.delete),
        );
        let policy = p.map(|p| p.report(&create, &update, &delete));
        kinds.push(KindReport {
            kind: t.kind.name().to_string(),
            create,
            update,
            delete,
            policy,
            steady: f.steady,
            restart: f.restart,
            sequential: f
                .sequential
                .zip(r.sequential)
                .map(|(f, r)| SequentialComparison::new(f, r)),
            host_input,
            agent_restart: f.agent_restart,
        });
    }
    let created: usize = kinds.iter().map(|k| k.create.flotilla.member_objects).sum();
    let cp_cpu = flotilla.cp_cpu;
    let cost = Cost {
        control_plane_peak_rss_mib: flotilla
            .own_peak
            .unwrap_or(((flotilla.peak - flotilla.rss_before) - generator_growth).max(0.0)),
        rss_method: if flotilla.own_peak.is_some() {
            "VmHWM of the controller-manager process".into()
        } else {
            "growth of this process's VmHWM during the Flotilla part minus that during the raw part (includes the load generator: an upper bound)".into()
        },
        process_rss_before_mib: flotilla.rss_before,
        process_peak_flotilla_mib: flotilla.peak,
        generator_peak_growth_mib: generator_growth,
        peak_reset: flotilla.peak_reset,
        control_plane_cpu_s: cp_cpu,
        control_plane_cpu_ms_per_member_object: ratio(cp_cpu * 1000.0, member_objects as f64),
        requests_per_created_member_object: ratio(created_requests, created as f64),
    };
    let fleet = flotilla.fleet.map(|mut f| {
        let members = trackers.first().map_or(0, |t| t.fed_members.clusters());
        let peak_objects = trackers
            .iter()
            .map(|t| t.objects * members)
            .max()
            .unwrap_or(0);
        f.memory = MemoryBudget::new(
            f.memory.idle_rss_mib,
            cost.control_plane_peak_rss_mib,
            members,
            peak_objects,
        );
        f
    });
    Measured {
        kinds,
        cost,
        clusters_idle_cpu_per_s: idle,
        control_plane: flotilla.control_plane,
        fleet,
        raw_error: None,
    }
}
