//! The restart phase: with every object of a kind propagated, the control plane is stopped
//! hard (SIGKILL for a child process) and started again, as a crash or an upgrade does. A
//! fresh process must recognise every up-to-date member object: the figures are the writes
//! the members and the host served in a window after the restart (the goal is 0), and how
//! long a federated object created right after the restart took to reach every member.

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;

use flotilla_api::work::{APPLIED, AppliedWork, Work};
use flotilla_localenv::LocalEnv;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::json;

use super::{
    BENCH_LABEL, FED_NS,
    control_plane::RunningControlPlane,
    report::Restart,
    requests::delta,
    run::Run,
    snapshot::{Snapshot, window_requests},
    warmup::poll,
    workload::Kind,
};

/// Name of the object created right after the restart.
const PROBE: &str = "restart-probe";
/// How long the probe's watch is given to deliver the writes counted before it stops.
const PROBE_WATCH_GRACE: Duration = Duration::from_millis(500);
/// Request verbs that write.
const WRITE_VERBS: [&str; 5] = ["POST", "PUT", "PATCH", "APPLY", "DELETE"];

/// How to restart the control plane under test.
pub(super) struct Restarter<'a> {
    pub(super) env: &'a LocalEnv,
    pub(super) binary: Option<&'a Path>,
    pub(super) cp: &'a mut Option<RunningControlPlane>,
    /// The highest peak RSS of the child processes stopped so far, MiB.
    pub(super) peak_mib: Option<f64>,
}

impl Restarter<'_> {
    /// Stops the running control plane and starts a new one; returns when it was started.
    pub(super) async fn restart(&mut self, run: &Run) -> anyhow::Result<Instant> {
        if let Some(old) = self.cp.take() {
            self.peak_mib = [self.peak_mib, old.own_peak_rss_mib()]
                .into_iter()
                .flatten()
                .reduce(f64::max);
            let spent = run.running_cp_cpu();
            old.stop().await;
            *run.cp_cpu_retired.lock().unwrap_or_else(|e| e.into_inner()) += spent;
        }
        let started = Instant::now();
        let cp = RunningControlPlane::start(self.env, self.binary)?;
        if let Some(pid) = cp.child_pid() {
            *run.cp_pid.lock().unwrap_or_else(|e| e.into_inner()) = Some(pid);
        }
        *self.cp = Some(cp);
        Ok(started)
    }
}

/// Restarts the control plane with `kind`'s objects propagated and measures what follows.
pub(super) async fn restart_phase(
    run: &Run,
    kind: Kind,
    restarter: &mut Restarter<'_>,
) -> anyhow::Result<Restart> {
    let before = Snapshot::take(run).await?;
    let started = restarter.restart(run).await?;
    let api: Api<DynamicObject> = Api::namespaced_with(run.host.clone(), FED_NS, &kind.federated());
    let (probe_writes, counter) = count_writes(api.clone()).await?;
    api.create(&PostParams::default(), &probe(kind)?).await?;
    wait_in_members(run, kind, true).await?;
    let first_new_object_s = started.elapsed().as_secs_f64();
    if let Some(rest) = run.steady.checked_sub(started.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let after = Snapshot::take(run).await?;
    // A probe write the snapshot counted may still be on its way to the probe's watch.
    tokio::time::sleep(PROBE_WATCH_GRACE).await;
    let probe_host_writes = probe_writes.load(Ordering::Relaxed);
    counter.abort();
    api.delete(PROBE, &DeleteParams::default()).await?;
    wait_in_members(run, kind, false).await?;
    if run.pull() {
        wait_removal_reported(run).await?;
    }
    let mut restart = figures(run, kind, &before, &after, first_new_object_s);
    restart.host_writes = restart.host_writes.saturating_sub(probe_host_writes);
    Ok(restart)
}

/// Counts the writes the host applies to the probe (its create, the finalizer, each status
/// write: one watch event each), so that they can be taken out of the host's figures.
async fn count_writes(
    api: Api<DynamicObject>,
) -> anyhow::Result<(Arc<AtomicU64>, tokio::task::JoinHandle<()>)> {
    let count = Arc::new(AtomicU64::new(0));
    let params = WatchParams::default().fields(&format!("metadata.name={PROBE}"));
    let stream = api.watch(&params, "0").await?;
    let counted = count.clone();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(Ok(ev)) = stream.next().await {
            if matches!(ev, WatchEvent::Added(_) | WatchEvent::Modified(_)) {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    Ok((count, task))
}

/// The counts of the window, without the probe's write in each member (its host writes
/// are taken out by the caller, which counted them).
fn figures(run: &Run, kind: Kind, before: &Snapshot, after: &Snapshot, first: f64) -> Restart {
    let is_write = |verb: &str| WRITE_VERBS.contains(&verb);
    let target = kind.target().plural;
    let mut member_writes = 0u64;
    let mut member_reads = 0u64;
    for (b, a) in before.members.iter().zip(&after.members) {
        for (verb, n) in delta(b, a, &target, |_, verb| verb.to_string()) {
            if is_write(&verb) {
                member_writes += n;
            } else {
                member_reads += n;
            }
        }
    }
    let fed = kind.federated().plural;
    let host_writes: u64 = delta(&before.host, &after.host, &fed, |_, verb| verb.to_string())
        .into_iter()
        .filter(|(verb, _)| is_write(verb))
        .map(|(_, n)| n)
        .sum();
    Restart {
        objects: run.objects_of(kind),
        window_s: after.at.saturating_duration_since(before.at).as_secs_f64(),
        member_writes: member_writes.saturating_sub(run.members.len() as u64),
        member_reads,
        host_writes,
        first_new_object_s: first,
        control_plane_cpu_s: after.cp_cpu - before.cp_cpu,
        pull: run
            .pull()
            .then(|| window_requests(before, after, &target, run.members.len())),
    }
}

/// The probe: placed in every member, labelled apart from the measured objects.
fn probe(kind: Kind) -> anyhow::Result<DynamicObject> {
    let mut o = kind.federated_object(FED_NS, PROBE, "1")?;
    o.metadata
        .labels
        .get_or_insert_default()
        .insert(BENCH_LABEL.into(), "probe".into());
    if let Some(labels) = o.data.pointer_mut("/spec/template/metadata/labels") {
        *labels = json!({BENCH_LABEL: "probe"});
    }
    Ok(o)
}

/// In pull mode, waits until the probe's removal is complete: no Work reports it and no
/// AppliedWork records it. An agent writes the record, then the report, just after the
/// member object is gone; without this wait those writes could fall into the window of the
/// phase that follows (every agent restarted) and be counted as the restart's.
async fn wait_removal_reported(run: &Run) -> anyhow::Result<()> {
    let what = "the restart probe's removal recorded and reported";
    poll(run.timeout.max(Duration::from_secs(60)), what, || async {
        let works: Api<Work> = Api::all(run.host.clone());
        for w in works.list(&ListParams::default()).await?.items {
            let reported = w.status.iter().flat_map(|s| &s.manifest_conditions);
            if reported.into_iter().any(|m| m.identifier.name == PROBE) {
                return Ok(false);
            }
        }
        for m in &run.members {
            let applied: Api<AppliedWork> = Api::all(m.clone());
            for a in applied.list(&ListParams::default()).await?.items {
                let recorded = a.status.iter().flat_map(|s| &s.applied_resources);
                if recorded.into_iter().any(|r| r.identifier.name == PROBE) {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    })
    .await
}

/// In pull mode, waits until every agent has reported on the current generation of every
/// Work in the host (its `Applied` condition's `observedGeneration`): the reports that trail
/// a phase whose member objects are all in place belong to that phase, not to the window
/// that follows it.
pub(super) async fn wait_works_reported(run: &Run) -> anyhow::Result<()> {
    let what = "every Work reported on its current generation";
    poll(run.timeout.max(Duration::from_secs(60)), what, || async {
        let works: Api<Work> = Api::all(run.host.clone());
        let items = works.list(&ListParams::default()).await?.items;
        Ok(items.iter().all(|w| {
            let applied =
                (w.status.iter().flat_map(|s| &s.conditions)).find(|c| c.type_ == APPLIED);
            applied.is_some_and(|c| c.observed_generation == w.metadata.generation)
        }))
    })
    .await
}

/// Waits until the probe is in every member (`present`) or in none.
async fn wait_in_members(run: &Run, kind: Kind, present: bool) -> anyhow::Result<()> {
    let what = if present {
        "the restart probe in every member"
    } else {
        "the restart probe gone from every member"
    };
    poll(run.timeout.max(Duration::from_secs(60)), what, || async {
        for m in &run.members {
            let api: Api<DynamicObject> = Api::namespaced_with(m.clone(), FED_NS, &kind.target());
            if api.get_opt(PROBE).await?.is_some() != present {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await
}
