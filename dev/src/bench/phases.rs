//! The measured phases: federated creates, updates and deletes through the control plane
//! (and the steady state between them), the host input alone, and the same writes straight
//! into the members. Each phase is the difference of two [`Snapshot`]s around the writes,
//! with per-object latencies from the [`Tracker`].

use std::{
    collections::{BTreeMap, HashMap},
    future::Future,
    sync::atomic::Ordering,
    time::Instant,
};

use anyhow::Context as _;
use flotilla_api::{DEFAULT_NAMESPACE, KubeFedCluster, federated::FederatedStatus};
use kube::{
    Api,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use tracing::info;

use super::{
    BENCH_LABEL, FED_NS, INPUT_NS, RAW_NS,
    host_events::HostEvents,
    procfs::{clusters_cpu, cpu_delta, machine_busy},
    report::{Phase, Restart, Steady, percentiles, ratio},
    requests::delta,
    restart::{Restarter, restart_phase},
    run::Run,
    sequential::{SequentialPhase, flotilla_sequential, raw_sequential},
    snapshot::Snapshot,
    tracker::{Tracker, Want},
    warmup::poll,
    workload::{Kind, Starts, names, to_kube, write_all},
};
use super::{
    fleet::HalfFleet, fleet_phases::half_fleet, pull::agent_restart_phase,
    pull_report::AgentRestart, snapshot::window_requests,
};

/// Flotilla's phases of one kind.
pub(super) struct FlotillaPhases {
    pub(super) create: Phase,
    pub(super) update: Phase,
    pub(super) delete: Phase,
    pub(super) steady: Steady,
    pub(super) restart: Restart,
    /// The sequential client (`--sequential`), after the delete.
    pub(super) sequential: Option<SequentialPhase>,
    /// Placement to half the fleet and back (`--fleet-phases`), between restart and update.
    pub(super) half_fleet: Option<HalfFleet>,
    /// Every agent restarted (`--pull`), after the control plane's restart.
    pub(super) agent_restart: Option<AgentRestart>,
}

/// The raw baseline's phases of one kind (empty by default: a kind the raw part did not
/// reach).
#[derive(Default)]
pub(super) struct RawPhases {
    pub(super) create: Phase,
    pub(super) update: Phase,
    pub(super) delete: Phase,
    /// The sequential client (`--sequential`), after the delete.
    pub(super) sequential: Option<SequentialPhase>,
}

/// The figures when the last object reached its state: the end of the active part.
struct Active {
    at: Instant,
    machine_busy: f64,
    clusters_cpu: f64,
}

/// What one phase observed, from which its [`Phase`] is computed.
struct Observed {
    before: Snapshot,
    active: Active,
    after: Snapshot,
    /// When each object's first write started.
    starts: HashMap<String, Instant>,
    /// When each object reached its state in its last cluster.
    reached: HashMap<String, Instant>,
    /// LISTs of federated objects the benchmark itself sent during the phase.
    own_lists: u64,
}

/// What every phase of one kind shares: the objects, the APIs they are written through
/// (the host's federated API, or every member's) and the tracker that sees them land.
#[derive(Clone, Copy)]
pub(super) struct Phases<'a> {
    pub(super) run: &'a Run,
    pub(super) kind: Kind,
    pub(super) names: &'a [String],
    pub(super) tracker: &'a Tracker,
    pub(super) apis: &'a [Api<DynamicObject>],
    /// The tracked clusters the phase waits for (indexes; `None`: all).
    pub(super) only: Option<&'a [usize]>,
}

impl Phases<'_> {
    /// Measures one phase: `write` goes to every object through every API at once (marking
    /// starts), the tracker sees it land, `settle` waits for trailing work (status writes)
    /// before the end snapshot.
    pub(super) async fn measure<S, SF>(
        self,
        write: Write<'_>,
        own_host_writes: (&str, u64),
        settle: S,
    ) -> anyhow::Result<Phase>
    where
        S: FnOnce() -> SF,
        SF: Future<Output = anyhow::Result<()>>,
    {
        let Phases {
            run,
            kind,
            names,
            tracker,
            apis,
            only,
        } = self;
        let before = Snapshot::take(run).await?;
        let lists_before = run.own_lists.load(Ordering::Relaxed);
        tracker.expect_in(write.want(), names, only);
        let starts = Starts::default();
        let drive = futures::future::try_join_all(
            apis.iter()
                .map(|api| write_each(api, run, kind, names, write, &starts)),
        );
        let (driven, reached) = tokio::join!(drive, tracker.wait(run.timeout));
        driven?;
        let reached = reached?;
        let active = Active {
            at: Instant::now(),
            machine_busy: machine_busy(),
            clusters_cpu: clusters_cpu(&run.procs).values().sum::<f64>(),
        };
        settle().await?;
        let after = Snapshot::take(run).await?;
        let (events_before, events_after) =
            (before.host_events.as_ref(), after.host_events.as_ref());
        for (reason, n) in HostEvents::between(events_before, events_after) {
            let newest = events_after.and_then(|e| e.newest.get(&reason));
            info!(kind = %kind.target().kind, reason, n, newest, "host Events in the phase");
        }
        let observed = Observed {
            before,
            active,
            after,
            starts: starts.take(),
            reached,
            own_lists: run.own_lists.load(Ordering::Relaxed) - lists_before,
        };
        let member_objects = names.len() * only.map_or(tracker.clusters(), <[usize]>::len);
        Ok(phase(
            run,
            kind,
            names,
            member_objects,
            own_host_writes,
            &observed,
        ))
    }
}

/// The figures of a phase from what it observed.
fn phase(
    run: &Run,
    kind: Kind,
    names: &[String],
    member_objects: usize,
    own_host_writes: (&str, u64),
    o: &Observed,
) -> Phase {
    let (before, after) = (&o.before, &o.after);
    let first = o.starts.values().min().copied().unwrap_or(before.at);
    let last = o.reached.values().max().copied().unwrap_or(first);
    let seconds = last.saturating_duration_since(first).as_secs_f64();
    let mut lat: Vec<f64> = names
        .iter()
        .filter_map(|n| {
            Some(
                o.reached
                    .get(n)?
                    .saturating_duration_since(*o.starts.get(n)?),
            )
        })
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    let member_requests = member_requests(before, after, &kind.target().plural);
    let host_requests = host_requests(kind, own_host_writes, o);
    let member_total: u64 = member_requests.values().sum();
    let host_total: u64 = host_requests.values().sum();
    let total = member_total + host_total;
    let cp_cpu = after.cp_cpu - before.cp_cpu;
    let agent_cpu_s = after.agent_cpu - before.agent_cpu;
    // In-process, the control plane's threads are part of this process's CPU time.
    let cp_in_process = if run.child_pid().is_some() {
        0.0
    } else {
        cp_cpu
    };
    Phase {
        member_objects,
        seconds,
        objects_per_second: ratio(member_objects as f64, seconds),
        latency_ms: percentiles(&mut lat),
        member_requests,
        host_requests,
        host_events: HostEvents::between(before.host_events.as_ref(), after.host_events.as_ref()),
        requests_per_member_object: ratio(total as f64, member_objects as f64),
        member_requests_per_member_object: ratio(member_total as f64, member_objects as f64),
        host_requests_per_federated_object: ratio(host_total as f64, names.len() as f64),
        control_plane_cpu_s: cp_cpu,
        agent_cpu_s,
        pull: run
            .pull()
            .then(|| window_requests(before, after, &kind.target().plural, member_objects)),
        generator_cpu_s: after.process_cpu - before.process_cpu - cp_in_process - agent_cpu_s,
        clusters_cpu_s: after.clusters_cpu_total() - before.clusters_cpu_total(),
        clusters_cpu_by_process: cpu_delta(&before.clusters_cpu, &after.clusters_cpu),
        machine_busy_cpu_s: after.machine_busy - before.machine_busy,
        window_s: after.at.saturating_duration_since(before.at).as_secs_f64(),
        active_s: o
            .active
            .at
            .saturating_duration_since(before.at)
            .as_secs_f64(),
        machine_busy_active_cpu_s: o.active.machine_busy - before.machine_busy,
        clusters_active_cpu_s: o.active.clusters_cpu - before.clusters_cpu_total(),
    }
}

/// Requests for `resource` the members served, by verb, summed over the members.
fn member_requests(before: &Snapshot, after: &Snapshot, resource: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (b, a) in before.members.iter().zip(&after.members) {
        for (k, v) in delta(b, a, resource, |_, verb| verb.to_string()) {
            *out.entry(k).or_insert(0) += v;
        }
    }
    out
}

/// Requests the host served for the federated kind and Events, the benchmark's own
/// writes and LISTs excluded.
fn host_requests(kind: Kind, own_host_writes: (&str, u64), o: &Observed) -> BTreeMap<String, u64> {
    let (before, after) = (&o.before.host, &o.after.host);
    let fed = kind.federated().plural;
    let mut out = delta(before, after, &fed, |sub, verb| {
        if sub.is_empty() {
            format!("{fed} {verb}")
        } else {
            format!("{fed}/{sub} {verb}")
        }
    });
    for (k, v) in delta(before, after, "events", |_, verb| format!("events {verb}")) {
        // The benchmark's own reading of the Events is a LIST; the control plane sends none.
        if k != "events LIST" {
            *out.entry(k).or_insert(0) += v;
        }
    }
    // The benchmark's own writes: one per object, on the main resource.
    let (own_verb, own) = own_host_writes;
    for (verb, n) in [(own_verb, own), ("LIST", o.own_lists)] {
        if let Some(v) = out.get_mut(&format!("{fed} {verb}")) {
            *v = v.saturating_sub(n);
        }
    }
    out.retain(|_, v| *v > 0);
    out
}

/// Every federated object reports Propagation=True for its current generation.
pub(super) async fn wait_propagated(run: &Run, kind: Kind, host: &Tracker) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(run.host.clone(), FED_NS, &kind.federated());
    let lp = ListParams::default().labels(&format!("{BENCH_LABEL}=fed"));
    poll(run.timeout, "every federated object propagated", || async {
        run.own_lists.fetch_add(1, Ordering::Relaxed);
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

/// Which object a create writes.
#[derive(Clone, Copy)]
pub(super) enum Template<'a> {
    /// The federated object of the kind, in this host namespace.
    Federated(&'a str),
    /// The kind's own object, straight into a member.
    Raw,
    /// The kind's own object in this host namespace, for a policy to select.
    Native(&'a str),
}

/// What one phase writes to every named object.
#[derive(Clone, Copy)]
pub(super) enum Write<'a> {
    /// Creates version 1.
    Create(Template<'a>),
    /// Applies this merge patch (the update to version 2).
    Patch(&'a Value),
    /// Deletes the object.
    Delete,
    /// Applies this merge patch of the placement; the objects (at version 1) then appear
    /// in the awaited clusters (`true`) or leave them (`false`).
    Place(&'a Value, bool),
}

impl Write<'_> {
    /// What the tracker waits for once the write is done.
    fn want(self) -> Want {
        match self {
            Write::Create(_) => Want::Version("1".into()),
            Write::Patch(_) => Want::Version("2".into()),
            Write::Delete => Want::Absent,
            Write::Place(_, true) => Want::Version("1".into()),
            Write::Place(_, false) => Want::Absent,
        }
    }
}

/// Applies `write` to every named object of `kind` through `api`.
async fn write_each(
    api: &Api<DynamicObject>,
    run: &Run,
    kind: Kind,
    names: &[String],
    write: Write<'_>,
    starts: &Starts,
) -> anyhow::Result<()> {
    write_all(names, run.concurrency, starts, |n| {
        let api = api.clone();
        async move {
            match write {
                Write::Create(template) => {
                    let o = match template {
                        Template::Federated(namespace) => kind.federated_object(namespace, &n, "1"),
                        Template::Raw => kind.raw_object(&n, "1"),
                        Template::Native(namespace) => kind.native_object(namespace, &n, "1"),
                    }
                    .map_err(to_kube)?;
                    api.create(&PostParams::default(), &o).await.map(|_| ())
                }
                Write::Patch(patch) | Write::Place(patch, _) => api
                    .patch(&n, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map(|_| ()),
                Write::Delete => api.delete(&n, &DeleteParams::default()).await.map(|_| ()),
            }
        }
    })
    .await
}

/// Creates, updates and deletes the federated objects of `kind`, measuring each until the
/// members show it; the steady state and a restart are measured between create and update.
pub(super) async fn flotilla_phases(
    run: &Run,
    kind: Kind,
    members: &Tracker,
    host: &Tracker,
    restarter: &mut Restarter<'_>,
) -> anyhow::Result<FlotillaPhases> {
    let names = &names(kind, run.objects_of(kind));
    let own = names.len() as u64;
    let api = Api::namespaced_with(run.host.clone(), FED_NS, &kind.federated());
    let phases = Phases {
        run,
        kind,
        names,
        tracker: members,
        apis: std::slice::from_ref(&api),
        only: None,
    };
    let propagated = || wait_propagated(run, kind, host);
    let create = Write::Create(Template::Federated(FED_NS));
    let create = phases.measure(create, ("POST", own), propagated).await?;
    info!(kind = kind.name(), seconds = create.seconds, "created");

    let (steady, restart) = steady_and_restart(run, kind, members, host, restarter).await?;
    let agent_restart = agent_restart_phase(run, kind).await?;
    if let Some(r) = &agent_restart {
        info!(kind = kind.name(), ready_s = r.ready_s, writes = ?r.requests.writes(), "agents restarted");
    }

    let half_fleet = if run.fleet_phases {
        Some(half_fleet(phases, || wait_propagated(run, kind, host)).await?)
    } else {
        None
    };

    let patch = &json!({"spec": {"template": kind.version_patch("2")}});
    let update = Write::Patch(patch);
    let update = phases.measure(update, ("PATCH", own), propagated).await?;
    info!(kind = kind.name(), seconds = update.seconds, "updated");

    let host_empty = || async {
        host.expect(Want::Absent, names);
        host.wait(run.timeout).await?;
        host.quiet(run.timeout).await;
        Ok(())
    };
    let delete = phases
        .measure(Write::Delete, ("DELETE", own), host_empty)
        .await?;
    info!(kind = kind.name(), seconds = delete.seconds, "deleted");
    let sequential = if run.sequential > 0 {
        Some(sequential_phase(run, kind, members, host).await?)
    } else {
        None
    };
    Ok(FlotillaPhases {
        create,
        update,
        delete,
        steady,
        restart,
        sequential,
        half_fleet,
        agent_restart,
    })
}

/// The steady state after the create, then a restart with every object propagated.
async fn steady_and_restart(
    run: &Run,
    kind: Kind,
    members: &Tracker,
    host: &Tracker,
    restarter: &mut Restarter<'_>,
) -> anyhow::Result<(Steady, Restart)> {
    if run.pull() {
        super::restart::wait_works_reported(run).await?;
    }
    let steady = steady_state(run, kind, members, host).await?;
    info!(
        kind = kind.name(),
        member_writes = steady.member_writes,
        host_writes = steady.host_writes,
        "steady state"
    );
    let restart = restart_phase(run, kind, restarter).await?;
    info!(
        kind = kind.name(),
        member_writes = restart.member_writes,
        host_writes = restart.host_writes,
        first_new_object_s = restart.first_new_object_s,
        "restart"
    );
    Ok((steady, restart))
}

/// The sequential client's phase, once the host is quiet.
async fn sequential_phase(
    run: &Run,
    kind: Kind,
    members: &Tracker,
    host: &Tracker,
) -> anyhow::Result<SequentialPhase> {
    let settled = || async {
        host.quiet(run.timeout).await;
        Ok(())
    };
    let s = flotilla_sequential(run, kind, members, settled).await?;
    info!(
        kind = kind.name(),
        present_after_last_write_s = s.present_after_last_write_s,
        empty_after_bulk_delete_s = s.empty_after_bulk_delete_s,
        "sequential client"
    );
    Ok(s)
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
    let member_requests: u64 = member_requests(&before, &after, &kind.target().plural)
        .values()
        .sum();
    Ok(Steady {
        window_s: after.at.saturating_duration_since(before.at).as_secs_f64(),
        resyncs_forced: run.kubefed_clusters.len(),
        member_writes: members.writes() - mw,
        host_writes: host.writes() - hw,
        member_requests,
        control_plane_cpu_s: after.cp_cpu - before.cp_cpu,
        pull: run
            .pull()
            .then(|| window_requests(&before, &after, &kind.target().plural, 0)),
    })
}

/// The federated objects created with no control plane running, then deleted unmeasured.
pub(super) async fn input_phase(run: &Run, kind: Kind, tracker: &Tracker) -> anyhow::Result<Phase> {
    let names = &names(kind, run.objects_of(kind));
    let api = Api::namespaced_with(run.host.clone(), INPUT_NS, &kind.federated());
    let phases = Phases {
        run,
        kind,
        names,
        tracker,
        apis: std::slice::from_ref(&api),
        only: None,
    };
    let create = Write::Create(Template::Federated(INPUT_NS));
    let own = ("POST", names.len() as u64);
    let phase = phases.measure(create, own, || async { Ok(()) }).await?;
    tracker.expect(Want::Absent, names);
    write_each(&api, run, kind, names, Write::Delete, &Starts::default()).await?;
    tracker.wait(run.timeout).await?;
    Ok(phase)
}

/// The same creates, updates and deletes straight into the members, with no control plane;
/// each member is written `run.concurrency` at a time (the sync controller's per-member
/// concurrency).
pub(super) async fn raw_phases(
    run: &Run,
    kind: Kind,
    tracker: &Tracker,
) -> anyhow::Result<RawPhases> {
    let names = names(kind, run.objects_of(kind));
    let apis: Vec<Api<DynamicObject>> = run
        .members
        .iter()
        .map(|c| Api::namespaced_with(c.clone(), RAW_NS, &kind.target()))
        .collect();
    let patch = kind.version_patch("2");
    let phases = Phases {
        run,
        kind,
        names: &names,
        tracker,
        apis: &apis,
        only: None,
    };
    let unsettled = || async { Ok(()) };
    let create = Write::Create(Template::Raw);
    let create = phases.measure(create, ("", 0), unsettled).await?;
    info!(
        kind = kind.name(),
        seconds = create.seconds,
        "raw creates done"
    );
    let update = Write::Patch(&patch);
    let update = phases.measure(update, ("", 0), unsettled).await?;
    let delete = phases.measure(Write::Delete, ("", 0), unsettled).await?;
    let sequential = if run.sequential > 0 {
        Some(raw_sequential(run, kind, tracker).await?)
    } else {
        None
    };
    Ok(RawPhases {
        create,
        update,
        delete,
        sequential,
    })
}
