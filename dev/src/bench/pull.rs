//! `flotilla bench --pull`: the same federation with every member joined in pull mode — a
//! Work inventory per member in the host and one agent per member, run in this process with
//! the scoped host token `join --mode pull` issues and an admin client of its member. The
//! workload, trackers and raw baseline are the push run's.
//!
//! The agents share one Tokio runtime of their own (threads named [`AGENT_THREAD`]), so
//! their CPU time is read per thread, apart from the control plane's and the load
//! generator's. Their memory cannot be split from this process's: it is the process's RSS
//! growth while they start (see [`super::pull_report::AgentCost`]).

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use kube::{
    Client,
    config::{KubeConfigOptions, Kubeconfig},
};
use tokio::runtime::Runtime;

use super::{
    procfs::rss_mib,
    pull_report::{AgentCost, AgentRestart},
    run::Run,
    snapshot::{Snapshot, window_requests},
    workload::Kind,
};
use crate::bootstrap::{Bootstrap, LocalFederation};
use flotilla_agent::{Agent, AgentOptions};
use flotilla_controllers::pull_join::{PullJoinOptions, join_pull};
use flotilla_localenv::LocalEnv;

/// Name of the agents' runtime threads, by which their CPU time is found.
pub(super) const AGENT_THREAD: &str = "flotilla-agent";
/// Worker threads the agents share: one per core of this 2-core machine.
const AGENT_WORKERS: usize = 2;
/// How long the agents may take to turn ready (host reached, inventory synced) at start.
const AGENT_READY: Duration = Duration::from_secs(300);

/// Where the agents run and what that hides, for the report.
const PLACEMENT: &str = "in the benchmark's process, on one runtime of their own (2 worker threads shared by every agent; CPU per thread); hidden: a separate process per agent would add its own binary, runtime and allocator (counted once here, not per agent) and its own threads (here every agent queues on 2)";

/// What starting one agent takes, kept so that it can be started again.
#[derive(Clone)]
struct AgentSpec {
    name: String,
    host: kube::Config,
    member: kube::Config,
}

/// The pull-mode agents, on their runtime; dropping it stops them.
pub(super) struct Agents {
    agents: Mutex<Vec<Agent>>,
    specs: Vec<AgentSpec>,
    runtime: Option<Runtime>,
    /// What starting them cost.
    pub(super) cost: AgentCost,
}

impl Drop for Agents {
    fn drop(&mut self) {
        // Aborting an agent's tasks works from any thread; the runtime is then let go
        // without blocking, as this may run inside the main runtime.
        self.agents
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Starts one agent on `runtime`; its clients are made there, so that their connection
/// tasks run (and are counted) there.
async fn start_on(runtime: &Runtime, spec: AgentSpec) -> anyhow::Result<Agent> {
    runtime
        .spawn(async move {
            let host = Client::try_from(spec.host)?;
            let member = Client::try_from(spec.member)?;
            let mut agent = AgentOptions::new(&spec.name, host, member);
            agent.workers = 16;
            agent.resync = Duration::from_secs(60);
            anyhow::Ok(Agent::start(agent))
        })
        .await
        .context("starting an agent")?
}

impl Agents {
    fn runtime(&self) -> anyhow::Result<&Runtime> {
        self.runtime.as_ref().context("the agents' runtime is gone")
    }

    /// Agents ready (host reached, inventory synced).
    fn ready(&self) -> usize {
        let agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        agents
            .iter()
            .filter(|a| a.observer().health.is_ready())
            .count()
    }

    /// Waits until every agent is ready; seconds waited.
    async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<f64> {
        let started = Instant::now();
        while self.ready() < self.specs.len() {
            anyhow::ensure!(
                started.elapsed() < timeout,
                "only {} of {} agents turned ready",
                self.ready(),
                self.specs.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(started.elapsed().as_secs_f64())
    }

    /// Stops every agent at once (their tasks aborted, as a killed process's) and starts
    /// them again; seconds until every new one is ready.
    async fn restart(&self, timeout: Duration) -> anyhow::Result<f64> {
        let old = std::mem::take(&mut *self.agents.lock().unwrap_or_else(|e| e.into_inner()));
        drop(old);
        let started = Instant::now();
        let mut new = Vec::new();
        for spec in &self.specs {
            new.push(start_on(self.runtime()?, spec.clone()).await?);
        }
        *self.agents.lock().unwrap_or_else(|e| e.into_inner()) = new;
        self.wait_ready(timeout).await?;
        Ok(started.elapsed().as_secs_f64())
    }
}

/// Every agent restarted with `kind`'s objects applied: what the new agents write (the
/// goal is nothing) in the steady-state window after all of them are ready.
pub(super) async fn agent_restart_phase(
    run: &Run,
    kind: Kind,
) -> anyhow::Result<Option<AgentRestart>> {
    let Some(agents) = &run.agents else {
        return Ok(None);
    };
    let before = Snapshot::take(run).await?;
    let ready_s = agents.restart(run.timeout).await?;
    tokio::time::sleep(run.steady).await;
    let after = Snapshot::take(run).await?;
    Ok(Some(AgentRestart {
        agents: agents.specs.len(),
        objects: run.objects_of(kind),
        ready_s,
        window_s: after.at.saturating_duration_since(before.at).as_secs_f64(),
        agent_cpu_s: after.agent_cpu - before.agent_cpu,
        requests: window_requests(&before, &after, &kind.target().plural, 0),
    }))
}

/// Installs the host side, joins every member in pull mode and starts its agent.
pub(super) async fn federate(
    boot: &Bootstrap,
    env: &LocalEnv,
) -> anyhow::Result<(LocalFederation, Agents)> {
    let host = env.host().client().await?;
    boot.install(&host).await?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(AGENT_WORKERS)
        .thread_name(AGENT_THREAD)
        .enable_all()
        .build()
        .context("starting the agents' runtime")?;
    let rss_before = rss_mib();
    let mut members = Vec::new();
    let mut names = Vec::new();
    let mut specs = Vec::new();
    let mut started = Vec::new();
    for member in env.members() {
        let mut opts = PullJoinOptions::new(member.name(), env.host().server());
        opts.namespace = boot.namespace.clone();
        opts.host_ca_pem = Some(env.host().ca_pem().to_owned());
        opts.labels.insert("name".into(), member.name().into());
        let joined = join_pull(&host, &opts).await?;
        let client = member.client().await?;
        let crd = flotilla_api::crdgen::applied_work_crd();
        flotilla_controllers::install::install_crds(
            &client,
            &[crd],
            &boot.field_manager,
            boot.crd_timeout,
        )
        .await?;
        let host_config = kube::Config::from_custom_kubeconfig(
            Kubeconfig::from_yaml(&joined.kubeconfig)?,
            &KubeConfigOptions::default(),
        )
        .await
        .context("the agent's kubeconfig")?;
        let spec = AgentSpec {
            name: member.name().to_owned(),
            host: host_config,
            member: member.kube_config(),
        };
        started.push(start_on(&runtime, spec.clone()).await?);
        specs.push(spec);
        members.push(client);
        names.push(member.name().to_owned());
    }
    let count = specs.len();
    let mut agents = Agents {
        agents: Mutex::new(started),
        specs,
        runtime: Some(runtime),
        cost: AgentCost::default(),
    };
    let ready_s = agents.wait_ready(AGENT_READY).await?;
    agents.cost = AgentCost {
        ready_s,
        ..AgentCost::new(
            PLACEMENT.into(),
            count,
            AGENT_WORKERS,
            (rss_mib() - rss_before).max(0.0),
        )
    };
    let fed = LocalFederation {
        host,
        members,
        cluster_names: names,
    };
    Ok((fed, agents))
}
