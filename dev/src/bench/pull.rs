//! `flotilla bench --pull`: the same federation with every member joined in pull mode — a
//! Work inventory per member in the host and one agent per member, run in this process with
//! the scoped host token `join --mode pull` issues and an admin client of its member. The
//! workload, trackers and raw baseline are the push run's.
//!
//! The agents share one Tokio runtime of their own (threads named [`AGENT_THREAD`]), so
//! their CPU time is read per thread, apart from the control plane's and the load
//! generator's. Their memory cannot be split from this process's: it is the process's RSS
//! growth while they start (see [`super::pull_report::AgentCost`]).

use std::time::Duration;

use anyhow::Context as _;
use kube::{
    Client,
    config::{KubeConfigOptions, Kubeconfig},
};
use tokio::runtime::Runtime;

use super::{procfs::rss_mib, pull_report::AgentCost};
use crate::bootstrap::{Bootstrap, LocalFederation};
use flotilla_agent::{Agent, AgentOptions};
use flotilla_controllers::pull_join::{PullJoinOptions, join_pull};
use flotilla_localenv::LocalEnv;

/// Name of the agents' runtime threads, by which their CPU time is found.
pub(super) const AGENT_THREAD: &str = "flotilla-agent";
/// Worker threads the agents share: one per core of this 2-core machine.
const AGENT_WORKERS: usize = 2;
/// How long the agents may settle (first lists, first lease) before their memory is read.
const AGENT_SETTLE: Duration = Duration::from_secs(5);

/// Where the agents run and what that hides, for the report.
const PLACEMENT: &str = "in the benchmark's process, on one runtime of their own (2 worker threads shared by every agent; CPU per thread); hidden: a separate process per agent would add its own binary, runtime and allocator (counted once here, not per agent) and its own threads (here every agent queues on 2)";

/// The pull-mode agents, on their runtime; dropping it stops them.
pub(super) struct Agents {
    agents: Vec<Agent>,
    runtime: Option<Runtime>,
    /// What starting them cost.
    pub(super) cost: AgentCost,
}

impl Drop for Agents {
    fn drop(&mut self) {
        // Aborting an agent's tasks works from any thread; the runtime is then let go
        // without blocking, as this may run inside the main runtime.
        self.agents.clear();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
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
    let mut agents = Vec::new();
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
        let (name, member_config) = (member.name().to_owned(), member.kube_config());
        // The clients are made on the agents' runtime, so that their connection tasks run
        // (and are counted) there.
        let agent = runtime
            .spawn(async move {
                let host = Client::try_from(host_config)?;
                let member = Client::try_from(member_config)?;
                let mut agent = AgentOptions::new(&name, host, member);
                agent.workers = 16;
                agent.resync = Duration::from_secs(60);
                anyhow::Ok(Agent::start(agent))
            })
            .await
            .context("starting an agent")??;
        agents.push(agent);
        members.push(client);
        names.push(member.name().to_owned());
    }
    tokio::time::sleep(AGENT_SETTLE).await;
    let count = agents.len();
    let cost = AgentCost::new(
        PLACEMENT.into(),
        count,
        AGENT_WORKERS,
        (rss_mib() - rss_before).max(0.0),
    );
    let fed = LocalFederation {
        host,
        members,
        cluster_names: names,
    };
    let agents = Agents {
        agents,
        runtime: Some(runtime),
        cost,
    };
    Ok((fed, agents))
}
