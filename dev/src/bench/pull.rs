//! `flotilla bench --pull`: the same federation with every member joined in pull mode — a
//! Work inventory per member in the host and one agent per member, run in this process with
//! the scoped host token `join --mode pull` issues and an admin client of its member. The
//! workload, trackers and raw baseline are the push run's. The agents' CPU is not counted
//! as the control plane's (they run on this process's main runtime, as the load generator).

use std::time::Duration;

use anyhow::Context as _;
use kube::{
    Client,
    config::{KubeConfigOptions, Kubeconfig},
};

use crate::bootstrap::{Bootstrap, LocalFederation};
use flotilla_agent::{Agent, AgentOptions};
use flotilla_controllers::pull_join::{PullJoinOptions, join_pull};
use flotilla_localenv::LocalEnv;

/// Installs the host side, joins every member in pull mode and starts its agent.
pub(super) async fn federate(
    boot: &Bootstrap,
    env: &LocalEnv,
) -> anyhow::Result<(LocalFederation, Vec<Agent>)> {
    let host = env.host().client().await?;
    boot.install(&host).await?;
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
        let config = kube::Config::from_custom_kubeconfig(
            Kubeconfig::from_yaml(&joined.kubeconfig)?,
            &KubeConfigOptions::default(),
        )
        .await
        .context("the agent's kubeconfig")?;
        let mut agent = AgentOptions::new(member.name(), Client::try_from(config)?, client.clone());
        agent.workers = 16;
        agent.resync = Duration::from_secs(60);
        agents.push(Agent::start(agent));
        members.push(client);
        names.push(member.name().to_owned());
    }
    let fed = LocalFederation {
        host,
        members,
        cluster_names: names,
    };
    Ok((fed, agents))
}
