//! `flotilla agent`: runs inside a Pull member cluster. It watches the Works in its
//! cluster's namespace of the host (`flotilla-cluster-<name>`, the only namespace its host
//! credential can read), makes the member match them — server-side apply with field
//! manager `flotilla-agent`, drift handled on the watch event as the federated object's
//! policy says and reported with its writers ([`drift`]) — prunes what it applied
//! earlier and no longer should (recorded in an AppliedWork per Work in the member, which
//! names beforehand what is about to be applied in [`intent`]'s compact form, so a
//! restart forgets nothing and nothing it did not create is ever touched), reports per
//! manifest in the Work's status, and renews a heartbeat Lease. It also reports the member's
//! ServiceExports to the host for Multi-Cluster Services ([`mcs`]).
//!
//! Writes happen only when something changed: an up-to-date member object is not applied
//! again, and an unchanged report or record is not written (restarts included); a report is
//! compared with the agent's own last write of it while the Work cache lags ([`reports`]).
//! Decisions are in [`plan`]; member I/O in [`apply`]; the heartbeat in [`lease`]; metrics,
//! probes and Events in [`observe`], the member's reasons for refusing in [`rejection`]; the
//! credential check of `flotilla agent --check` in [`check`].

pub mod apply;
pub mod cache;
pub mod check;
pub mod drift;
pub mod host_credential;
pub mod intent;
pub mod lease;
pub mod mcs;
pub mod metrics;
pub mod observe;
mod own_writes;
pub mod plan;
mod pruning;
pub mod rbac;
pub mod records;
pub mod rejection;
pub mod reports;
mod work;

#[cfg(test)]
mod parser_props;

use std::{
    collections::HashSet, convert::Infallible, net::SocketAddr, ops::ControlFlow, sync::Arc,
    sync::Mutex, time::Duration,
};

use flotilla_api::work::{AppliedWork, Work, cluster_namespace};
use flotilla_multicluster::{
    gate::{Gate, store_ready},
    runner::KeyedRunner,
};
use kube::{
    Api, Client, ResourceExt,
    runtime::reflector::{self, Store},
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info};

use self::{
    apply::Member, cache::ObjectCache, observe::Observer, records::Records, reports::Reports,
};
use flotilla_core::member::ORPHAN_LABEL;
use flotilla_multicluster::http::MetricsAccess;
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
    /// The agent's member ClusterRole, kept in step with the enabled types when it is
    /// annotated so ([`rbac`]); `None`: not looked at.
    pub member_role: Option<String>,
}

impl AgentOptions {
    /// Defaults: resync every 30 s, a 40 s Lease, 4 workers, member role `flotilla-agent`.
    pub fn new(cluster: &str, host: Client, member: Client) -> Self {
        AgentOptions {
            cluster: cluster.to_owned(),
            host,
            member,
            own_namespace: flotilla_api::DEFAULT_NAMESPACE.to_owned(),
            resync: Duration::from_secs(30),
            lease_duration: Duration::from_secs(40),
            workers: 4,
            member_role: Some(flotilla_core::agent_role::AGENT_ROLE.to_owned()),
        }
    }
}

struct State {
    /// The member cluster's name.
    cluster: String,
    namespace: String,
    works: Store<Work>,
    works_api: Api<Work>,
    applied_api: Api<AppliedWork>,
    records: Records,
    /// The Work statuses this process wrote last.
    reports: Reports,
    member: Member,
    /// Works seen labelled for orphaning: their objects are unlabelled, not deleted.
    orphaned: Mutex<HashSet<String>>,
    queue: Arc<WorkQueue<String>>,
    observer: Arc<Observer>,
}

/// A running agent; dropping it stops every task.
pub struct Agent {
    tasks: Vec<JoinHandle<()>>,
    queue: Arc<WorkQueue<String>>,
    observer: Arc<Observer>,
    /// Stops the metrics and probe server.
    cancel: CancellationToken,
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.cancel.cancel();
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
        let applied_writer = reflector::store::Writer::<AppliedWork>::default();
        let queue: Arc<WorkQueue<String>> = WorkQueue::new();
        let objects = Arc::new(ObjectCache::new(opts.member.clone(), queue.clone()));
        let observer = Observer::new(opts.host.clone());
        observer.metrics.watch_queue(queue.clone());
        let state = Arc::new(State {
            works: writer.as_reader(),
            works_api: Api::namespaced(opts.host.clone(), &namespace),
            applied_api: Api::all(opts.member.clone()),
            records: Records::new(applied_writer.as_reader(), &namespace),
            reports: Reports::default(),
            member: Member::new(opts.member.clone(), &opts.own_namespace, objects),
            orphaned: Mutex::default(),
            queue: queue.clone(),
            namespace: namespace.clone(),
            cluster: opts.cluster.clone(),
            observer: observer.clone(),
        });
        info!(cluster = %opts.cluster, %namespace, "agent started");
        let identity = format!("{}-agent", opts.cluster);
        // Until the Work cache is complete, a Work would look deleted and its objects
        // pruned; the gate wakes every worker once it is (a store wakes only one waiter).
        let works = state.works.clone();
        let applied = applied_writer.as_reader();
        let (gate, gate_task) =
            Gate::after(async move { store_ready(&works).await && store_ready(&applied).await });
        let mut tasks = vec![
            gate_task,
            tokio::spawn(watch_works(state.clone(), writer)),
            tokio::spawn(records::watch(
                state.applied_api.clone(),
                applied_writer,
                namespace.clone(),
                queue.clone(),
            )),
            tokio::spawn(lease::heartbeat(
                Api::namespaced(opts.host.clone(), &namespace),
                opts.member.clone(),
                identity,
                opts.lease_duration,
                observer.clone(),
            )),
            tokio::spawn(resync(state.clone(), opts.resync, gate.clone())),
            tokio::spawn(mcs::report(
                opts.host.clone(),
                opts.member.clone(),
                namespace.clone(),
                opts.cluster.clone(),
            )),
            tokio::spawn(observe::keep_ready(observer.clone(), gate.clone())),
        ];
        if let Some(role) = opts.member_role.clone() {
            let published = Api::namespaced(opts.host.clone(), &namespace);
            tasks.push(tokio::spawn(rbac::keep_role(
                published,
                opts.member.clone(),
                role,
            )));
        }
        let runner = KeyedRunner::new("agent", queue.clone())
            .concurrency(opts.workers)
            .gate(gate);
        let worker = state.clone();
        tasks.push(tokio::spawn(runner.run(move |name: String| {
            let state = worker.clone();
            // Every line of a Work's round names the member and the Work (agents of many
            // members can share one log: the benchmark's fleet runs them in its process).
            let span = tracing::info_span!("work", cluster = %state.cluster, work = %name);
            async move { Ok::<_, Infallible>(work::work(&state, &name).await) }.instrument(span)
        })));
        Agent {
            tasks,
            queue,
            observer,
            cancel: CancellationToken::new(),
        }
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until the agent stops;
    /// `/metrics` is open to whom `access` says. Returns the bound address.
    pub async fn serve(
        &self,
        addr: SocketAddr,
        access: MetricsAccess,
    ) -> std::io::Result<SocketAddr> {
        observe::serve(&self.observer, addr, access, self.cancel.clone()).await
    }

    /// The agent's metrics, probes and Events.
    pub fn observer(&self) -> &Arc<Observer> {
        &self.observer
    }

    /// Stops the agent and waits until its tasks have ended.
    pub async fn stop(mut self) {
        self.cancel.cancel();
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
        if let Some(w) = c.object()
            && w.labels().get(ORPHAN_LABEL).is_some_and(|v| v == "true")
        {
            s.orphaned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(w.name_any());
        }
        match c {
            Change::Object(w) => s.queue.add(w.name_any()),
            // A listed Work is queued at the list's end: the cache holds the Work as it
            // was before the list until then, and applying that would take the member
            // back to an older manifest.
            Change::Listing | Change::Listed(_) => {}
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

/// Every period: every Work and every AppliedWork, a safety net behind the watches (drift is
/// repaired on the member watch's event, a deleted Work on the Work watch's).
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
        for name in state.records.names() {
            state.queue.add(name);
        }
    }
}
