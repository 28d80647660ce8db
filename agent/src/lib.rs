//! `flotilla agent`: runs inside a Pull member cluster. It watches the Works in its
//! cluster's namespace of the host (`flotilla-cluster-<name>`, the only namespace its host
//! credential can read), makes the member match them — server-side apply with field
//! manager `flotilla-agent`, drift repaired on every resync — prunes what it applied
//! earlier and no longer should (recorded in an AppliedWork per Work in the member, so a
//! restart forgets nothing and nothing it did not create is ever touched), reports per
//! manifest in the Work's status, and renews a heartbeat Lease.
//!
//! Writes happen only when something changed: an up-to-date member object is not applied
//! again, and an unchanged report or record is not written (restarts included).
//! Decisions are in [`plan`]; member I/O in [`apply`]; the heartbeat in [`lease`].

pub mod apply;
pub mod lease;
pub mod plan;

#[cfg(test)]
mod parser_props;

use std::{
    collections::HashSet, convert::Infallible, ops::ControlFlow, sync::Arc, sync::Mutex,
    time::Duration,
};

use flotilla_crds::work::{
    AppliedWork, AppliedWorkSpec, AppliedWorkStatus, WORK_COLLECT_STATUS, Work, cluster_namespace,
};
use flotilla_multicluster::{
    gate::{Gate, store_ready},
    runner::{Action, KeyedRunner},
};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
    runtime::reflector::{self, ObjectRef, Store},
};
use serde_json::json;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use self::apply::Member;
use flotilla_crds::member::ORPHAN_LABEL;
use flotilla_multicluster::{
    watch::{Change, WatchParams, watch_into},
    workqueue::WorkQueue,
};

/// How the agent runs.
#[derive(Clone)]
pub struct AgentOptions {
    /// Name of the cluster (its KubeFedCluster in the host).
    pub cluster: String,
    /// Client of the host, with the agent's scoped credential.
    pub host: Client,
    /// Client of the member cluster the agent runs in.
    pub member: Client,
    /// The member namespace the agent runs in (never deleted by pruning).
    pub own_namespace: String,
    /// How often every Work is checked against the member again (drift repair, status).
    pub resync: Duration,
    /// Duration of the heartbeat Lease (renewed every third of it).
    pub lease_duration: Duration,
    /// Works applied concurrently.
    pub workers: usize,
}

impl AgentOptions {
    /// Defaults: resync every 30 s, a 40 s Lease, 4 workers.
    pub fn new(cluster: &str, host: Client, member: Client) -> Self {
        AgentOptions {
            cluster: cluster.to_owned(),
            host,
            member,
            own_namespace: flotilla_crds::DEFAULT_NAMESPACE.to_owned(),
            resync: Duration::from_secs(30),
            lease_duration: Duration::from_secs(40),
            workers: 4,
        }
    }
}

/// How soon a Work whose manifests failed is tried again at first (then backing off).
const RETRY_FAILED: Duration = Duration::from_secs(2);

struct State {
    namespace: String,
    works: Store<Work>,
    works_api: Api<Work>,
    applied_api: Api<AppliedWork>,
    member: Member,
    /// Works seen labelled for orphaning: their objects are unlabelled, not deleted.
    orphaned: Mutex<HashSet<String>>,
    queue: Arc<WorkQueue<String>>,
}

/// A running agent; dropping it stops every task.
pub struct Agent {
    tasks: Vec<JoinHandle<()>>,
    queue: Arc<WorkQueue<String>>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.queue.shutdown();
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Agent {
    /// Starts the agent on the current Tokio runtime.
    pub fn start(opts: AgentOptions) -> Agent {
        let namespace = cluster_namespace(&opts.cluster);
        let writer = reflector::store::Writer::<Work>::default();
        let queue: Arc<WorkQueue<String>> = WorkQueue::new();
        let state = Arc::new(State {
            works: writer.as_reader(),
            works_api: Api::namespaced(opts.host.clone(), &namespace),
            applied_api: Api::all(opts.member.clone()),
            member: Member::new(opts.member.clone(), &opts.own_namespace),
            orphaned: Mutex::default(),
            queue: queue.clone(),
            namespace: namespace.clone(),
        });
        info!(cluster = %opts.cluster, %namespace, "agent started");
        let identity = format!("{}-agent", opts.cluster);
        // Until the Work cache is complete, a Work would look deleted and its objects
        // pruned; the gate wakes every worker once it is (a store wakes only one waiter).
        let works = state.works.clone();
        let (gate, gate_task) = Gate::after(async move { store_ready(&works).await });
        let mut tasks = vec![
            gate_task,
            tokio::spawn(watch_works(state.clone(), writer)),
            tokio::spawn(lease::heartbeat(
                Api::namespaced(opts.host.clone(), &namespace),
                opts.member.clone(),
                identity,
                opts.lease_duration,
            )),
            tokio::spawn(resync(state.clone(), opts.resync, gate.clone())),
        ];
        let runner = KeyedRunner::new("agent", queue.clone())
            .concurrency(opts.workers)
            .gate(gate);
        let worker = state.clone();
        tasks.push(tokio::spawn(runner.run(move |name: String| {
            let state = worker.clone();
            async move { Ok::<_, Infallible>(work(&state, &name).await) }
        })));
        Agent { tasks, queue }
    }

    /// Stops the agent and waits until its tasks have ended.
    pub async fn stop(mut self) {
        self.queue.shutdown();
        let tasks = std::mem::take(&mut self.tasks);
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            // An aborted task ends with a cancellation error: the expected outcome.
            let _ = t.await;
        }
    }
}

async fn watch_works(state: Arc<State>, writer: reflector::store::Writer<Work>) {
    let api = state.works_api.clone();
    let s = state.clone();
    watch_into(api, writer, WatchParams::host("work"), keep, move |c| {
        match c {
            Change::Object(w) => {
                if w.labels().get(ORPHAN_LABEL).is_some_and(|v| v == "true") {
                    s.orphaned
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(w.name_any());
                }
                s.queue.add(w.name_any());
            }
            Change::Synced => {
                for w in s.works.state() {
                    s.queue.add(w.name_any());
                }
            }
        }
        ControlFlow::Continue(())
    })
    .await;
}

fn keep(_: &mut Work) {}

/// Every period: every Work (drift, status) and every AppliedWork (a Work deleted while the
/// agent was not watching).
async fn resync(state: Arc<State>, period: Duration, gate: Gate) {
    let mut tick = tokio::time::interval(period.max(Duration::from_millis(200)));
    loop {
        tick.tick().await;
        if !gate.is_open() {
            continue;
        }
        for w in state.works.state() {
            state.queue.add(w.name_any());
        }
        match state.applied_api.list(&ListParams::default()).await {
            Ok(list) => {
                for a in list
                    .items
                    .iter()
                    .filter(|a| a.spec.work_namespace == state.namespace)
                {
                    state.queue.add(a.name_any());
                }
            }
            Err(e) => warn!(error = %e, "listing AppliedWorks failed"),
        }
    }
}

/// One Work on the runner: a failure backs off per Work, but is tried again after
/// [`RETRY_FAILED`] at the latest while the backoff is longer.
async fn work(state: &State, name: &str) -> Action {
    debug!(work = %name, "processing");
    let ok = match process(state, name).await {
        Ok(ok) => ok,
        Err(e) => {
            warn!(work = %name, error = %e, "processing the Work failed; retrying");
            false
        }
    };
    if ok {
        Action::AwaitChange
    } else {
        Action::Backoff {
            recheck: Some(RETRY_FAILED),
        }
    }
}

/// One Work: `Ok(true)` when everything is as it should be.
async fn process(state: &State, name: &str) -> Result<bool, kube::Error> {
    let work = state
        .works
        .get(&ObjectRef::new(name).within(&state.namespace));
    let applied = state.applied_api.get_opt(name).await?;
    match work {
        Some(w) => sync_work(state, &w, applied).await,
        None => {
            let Some(applied) = applied.filter(|a| a.spec.work_namespace == state.namespace) else {
                return Ok(true);
            };
            let orphan = state
                .orphaned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(name);
            let previous = applied.status.unwrap_or_default().applied_resources;
            let mut ok = true;
            for r in &previous {
                if let Err(e) = state.member.prune(r, orphan).await {
                    warn!(work = %name, object = %r.identifier.name, error = %e, "pruning failed");
                    ok = false;
                }
            }
            if ok {
                state
                    .applied_api
                    .delete(name, &Default::default())
                    .await
                    .map(|_| ())
                    .or_else(ignore_404)?;
                state
                    .orphaned
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(name);
                info!(work = %name, orphan, "the Work left the inventory; its objects are removed");
            }
            Ok(ok)
        }
    }
}

async fn sync_work(
    state: &State,
    work: &Work,
    applied: Option<AppliedWork>,
) -> Result<bool, kube::Error> {
    let name = work.name_any();
    if applied.is_none() {
        let record = AppliedWork::new(
            &name,
            AppliedWorkSpec {
                work_name: name.clone(),
                work_namespace: state.namespace.clone(),
            },
        );
        match state
            .applied_api
            .create(&PostParams::default(), &record)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    let collect = work
        .annotations()
        .get(WORK_COLLECT_STATUS)
        .is_some_and(|v| v == "true");
    let mut results = Vec::new();
    let mut records = Vec::new();
    for (i, manifest) in work.spec.workload.manifests.iter().enumerate() {
        let (result, record) = state.member.apply_manifest(i, manifest, collect).await;
        results.push(result);
        records.extend(record);
    }
    let previous = applied
        .and_then(|a| a.status)
        .unwrap_or_default()
        .applied_resources;
    let current: Vec<_> = results.iter().map(|r| r.identifier.clone()).collect();
    let mut ok = results.iter().all(|r| r.result.is_ok());
    for gone in plan::to_prune(&previous, &current) {
        if let Err(e) = state.member.prune(gone, false).await {
            warn!(work = %name, object = %gone.identifier.name, error = %e, "pruning failed");
            records.push(gone.clone());
            ok = false;
        }
    }
    // An object whose manifest failed this round stays recorded, so it is never lost.
    for p in &previous {
        let listed = current.iter().any(|c| plan::same_object(&p.identifier, c));
        let recorded = records
            .iter()
            .any(|r| plan::same_object(&p.identifier, &r.identifier));
        if listed && !recorded {
            records.push(p.clone());
        }
    }
    if records != previous {
        let patch = json!({"status": AppliedWorkStatus { applied_resources: records }});
        state
            .applied_api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let status = plan::work_status(
        work.status.as_ref(),
        &results,
        work.metadata.generation,
        &now_rfc3339(),
    );
    if work.status.as_ref() != Some(&status) {
        let patch = json!({"status": status});
        state
            .works_api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(ok)
}

fn ignore_404(e: kube::Error) -> Result<(), kube::Error> {
    match e {
        kube::Error::Api(s) if s.code == 404 => Ok(()),
        e => Err(e),
    }
}

fn now_rfc3339() -> String {
    use k8s_openapi::jiff::{Timestamp, Unit};
    Timestamp::now()
        .round(Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| Timestamp::now().to_string())
}
