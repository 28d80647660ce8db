//! The fleet phases (`--fleet-phases`): the fleet split into two labelled halves and the
//! slow member put behind its fault proxy before the control plane starts; then, with the
//! control plane running, the idle window, one new object to every member, placement to
//! half the fleet and back (per kind, from `phases`), and the slow member's two phases.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use flotilla_api::{DEFAULT_NAMESPACE, KubeFedCluster};
use flotilla_localenv::{FaultMode, FaultProxy, LocalEnv};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use tracing::info;

use super::{
    BenchOptions, FED_NS,
    fleet::{
        HALF_LABEL, HalfFleet, IdleCost, SlowMember, ZONE_LABEL, ZONES, all_but, all_requests,
        halves, per_cluster_per_min, slow_member_index,
    },
    phases::{Phases, Template, Write, wait_propagated},
    procfs::rss_mib,
    report::Phase,
    run::{Run, SlowSetup},
    snapshot::Snapshot,
    tracker::{Tracker, Want},
    workload::Kind,
};

/// Federated ConfigMaps of each slow-member phase (at most `--objects`).
const SLOW_OBJECTS: usize = 100;

/// Before the control plane starts: labels the KubeFedClusters `a` / `b` by half and by
/// zone (`z0` … `z4`, for the drain phase's spread), and, with
/// `--slow-member`, points that member's KubeFedCluster at a fault proxy in front of it.
pub(super) async fn prepare(
    env: &LocalEnv,
    host: &kube::Client,
    names: &[String],
    opts: &BenchOptions,
) -> anyhow::Result<Option<SlowSetup>> {
    let api: Api<KubeFedCluster> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    let (a, _) = halves(names.len());
    for (i, name) in names.iter().enumerate() {
        let half = if a.contains(&i) { "a" } else { "b" };
        let zone = format!("z{}", i % ZONES);
        let labels = json!({"metadata": {"labels": {HALF_LABEL: half, ZONE_LABEL: zone}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(labels))
            .await
            .with_context(|| format!("labelling KubeFedCluster {name}"))?;
    }
    let Some(value) = &opts.slow_member else {
        return Ok(None);
    };
    let index = slow_member_index(value, names)?;
    let name = names[index].clone();
    let proxy = FaultProxy::for_cluster(&env.members()[index])
        .await
        .with_context(|| format!("starting a fault proxy for {name}"))?;
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"apiEndpoint": proxy.url()}})),
    )
    .await
    .with_context(|| format!("pointing KubeFedCluster {name} at its fault proxy"))?;
    info!(member = %name, proxy = %proxy.url(), "slow member behind a fault proxy");
    Ok(Some(SlowSetup {
        index,
        name,
        latency: opts.slow_latency,
        proxy,
    }))
}

/// The control plane's resident memory now: its process's, or when it runs in-process the
/// growth of this process's since `process_before` (an upper bound).
pub(super) fn control_plane_rss_mib(run: &Run, process_before: f64) -> f64 {
    let Some(pid) = run.child_pid() else {
        return (rss_mib() - process_before).max(0.0);
    };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// Counts what the idle control plane does for `window`: requests per member and to the
/// host, and its CPU.
pub(super) async fn idle(run: &Run, window: Duration) -> anyhow::Result<IdleCost> {
    let before = Snapshot::take(run).await?;
    tokio::time::sleep(window).await;
    let after = Snapshot::take(run).await?;
    let window_s = after.at.saturating_duration_since(before.at).as_secs_f64();
    let members = run.members.len();
    let member_requests = all_requests(&before.members, &after.members);
    let member_total: u64 = member_requests.values().sum();
    let host_requests = all_requests(
        std::slice::from_ref(&before.host),
        std::slice::from_ref(&after.host),
    );
    let host_total: u64 = host_requests.values().sum();
    let cp_cpu_ms = (after.cp_cpu - before.cp_cpu) * 1000.0;
    let agent_cpu_ms = (after.agent_cpu - before.agent_cpu) * 1000.0;
    Ok(IdleCost {
        window_s,
        member_requests_per_cluster_per_min: per_cluster_per_min(
            member_total as f64,
            members,
            window_s,
        ),
        member_requests,
        host_requests_per_min: per_cluster_per_min(host_total as f64, 1, window_s),
        control_plane_cpu_ms_per_cluster_per_min: per_cluster_per_min(cp_cpu_ms, members, window_s),
        host_requests_per_cluster_per_min: per_cluster_per_min(
            host_total as f64,
            members,
            window_s,
        ),
        host_requests,
        agent_cpu_ms_per_cluster_per_min: per_cluster_per_min(agent_cpu_ms, members, window_s),
    })
}

/// One federated ConfigMap created at idle: seconds until it is in every member (then it
/// is deleted again).
pub(super) async fn one_object(run: &Run, members: &Tracker) -> anyhow::Result<f64> {
    let kind = Kind::ConfigMap;
    let api: Api<DynamicObject> = Api::namespaced_with(run.host.clone(), FED_NS, &kind.federated());
    let name = "fleet-probe".to_string();
    let names = std::slice::from_ref(&name);
    members.expect(Want::Version("1".into()), names);
    let started = Instant::now();
    api.create(
        &PostParams::default(),
        &kind.federated_object(FED_NS, &name, "1")?,
    )
    .await
    .context("creating the fleet probe")?;
    members.wait(run.timeout).await?;
    let seconds = started.elapsed().as_secs_f64();
    members.expect(Want::Absent, names);
    api.delete(&name, &DeleteParams::default()).await?;
    members.wait(run.timeout).await?;
    Ok(seconds)
}

/// Placement narrowed to half `a` of the fleet (the objects leave half `b`), then widened
/// back to every member; `settle` waits for trailing work after each.
pub(super) async fn half_fleet<S, SF>(phases: Phases<'_>, settle: S) -> anyhow::Result<HalfFleet>
where
    S: Fn() -> SF,
    SF: std::future::Future<Output = anyhow::Result<()>>,
{
    let (kept, moved) = halves(phases.run.members.len());
    let phases = Phases {
        only: Some(&moved),
        ..phases
    };
    let own = ("PATCH", phases.names.len() as u64);
    let narrow =
        json!({"spec": {"placement": {"clusterSelector": {"matchLabels": {HALF_LABEL: "a"}}}}});
    let to_half = phases
        .measure(Write::Place(&narrow, false), own, &settle)
        .await?;
    info!(
        kind = phases.kind.name(),
        seconds = to_half.seconds,
        "placed on half the fleet"
    );
    let widen = json!({"spec": {"placement": {"clusterSelector": {"matchLabels": null}}}});
    let back = phases
        .measure(Write::Place(&widen, true), own, &settle)
        .await?;
    info!(
        kind = phases.kind.name(),
        seconds = back.seconds,
        "placed on the whole fleet again"
    );
    Ok(HalfFleet {
        kind: phases.kind.name().to_string(),
        kept: kept.len(),
        moved: moved.len(),
        to_half,
        back,
    })
}

/// The slow member's phases: `SLOW_OBJECTS` federated ConfigMaps created with no fault, then
/// as many while the slow member's proxy delays its traffic; each measured until present in
/// every other member. The fault is lifted before the objects are awaited everywhere and
/// deleted.
pub(super) async fn slow_member(
    run: &Run,
    members: &Tracker,
    host: &Tracker,
) -> anyhow::Result<Option<SlowMember>> {
    let Some(slow) = &run.slow else {
        return Ok(None);
    };
    let kind = Kind::ConfigMap;
    let count = SLOW_OBJECTS.min(run.objects);
    let others = all_but(run.members.len(), slow.index);
    let api: Api<DynamicObject> = Api::namespaced_with(run.host.clone(), FED_NS, &kind.federated());
    let apis = std::slice::from_ref(&api);
    let without_names: Vec<String> = (0..count).map(|i| format!("slow-off-{i:05}")).collect();
    let with_names: Vec<String> = (0..count).map(|i| format!("slow-on-{i:05}")).collect();
    let base = Phases {
        run,
        kind,
        names: &[],
        tracker: members,
        apis,
        only: Some(&others),
    };
    let create = Write::Create(Template::Federated(FED_NS));
    let own = ("POST", count as u64);
    let settled = || async {
        slow.proxy.set_mode(FaultMode::PassThrough);
        wait_propagated(run, kind, host).await
    };
    let without = Phases {
        names: &without_names,
        ..base
    }
    .measure(create, own, settled)
    .await?;
    everywhere(run, members, &without_names).await?;
    slow.proxy.set_mode(FaultMode::Latency(slow.latency));
    info!(member = %slow.name, latency = ?slow.latency, "slow member delayed");
    let with = Phases {
        names: &with_names,
        ..base
    }
    .measure(create, own, settled)
    .await?;
    let caught_up_s = catch_up(run, members, &with_names).await;
    let all: Vec<String> = without_names.into_iter().chain(with_names).collect();
    // A slow member that never caught up keeps its copies; the others are emptied.
    let deleted = Phases {
        names: &all,
        only: if caught_up_s.is_some() {
            None
        } else {
            Some(&others)
        },
        ..base
    };
    let _: Phase = deleted
        .measure(Write::Delete, ("DELETE", all.len() as u64), || async {
            Ok(())
        })
        .await?;
    info!(
        member = %slow.name,
        p99_without_ms = without.latency_ms.p99,
        p99_with_ms = with.latency_ms.p99,
        "slow member phases"
    );
    let mut report = SlowMember::new(slow.name.clone(), slow.latency, count, without, with);
    report.caught_up_s = caught_up_s;
    Ok(Some(report))
}

/// How long the slow member may take to catch up once its fault is lifted.
const CATCH_UP: Duration = Duration::from_secs(120);

/// Seconds until every member (the slow one too) holds `names` once the fault is lifted;
/// `None` when the slow member did not catch up within [`CATCH_UP`].
async fn catch_up(run: &Run, members: &Tracker, names: &[String]) -> Option<f64> {
    let started = Instant::now();
    members.expect(Want::Version("1".into()), names);
    match members.wait(CATCH_UP.min(run.timeout)).await {
        Ok(_) => Some(started.elapsed().as_secs_f64()),
        Err(e) => {
            tracing::warn!(error = %e, "the slow member did not catch up after its fault was lifted");
            None
        }
    }
}

/// Waits until `names` are in every member (version 1).
async fn everywhere(run: &Run, members: &Tracker, names: &[String]) -> anyhow::Result<()> {
    members.expect(Want::Version("1".into()), names);
    members.wait(run.timeout).await?;
    Ok(())
}
