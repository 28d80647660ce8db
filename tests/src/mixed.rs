//! A mixed federation whose control plane and pull agent the test starts itself (as an
//! upgrade starts new binaries): member1 joined in push mode, member2 in pull mode — the
//! host holds no credential of member2; its agent gets the scoped host token `join_pull`
//! issued. The host side (CRDs, configuration, type configs) is the caller's to install.

use std::time::Duration;

use anyhow::ensure;
use flotilla_agent::{Agent, AgentOptions};
use flotilla_api::work::{Work, identify};
use flotilla_controllers::{
    install,
    pull_join::{PullJoinOptions, join_pull},
};
use flotilla_dev::bootstrap::Bootstrap;
use k8s_openapi::{
    api::coordination::v1::Lease,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client,
    config::{KubeConfigOptions, Kubeconfig},
};

use crate::{LocalEnv, wait_for};

/// The Pull member's name.
pub const PULL: &str = "member2";
/// Short, so a restarted agent has gone over every Work within seconds.
pub const AGENT_RESYNC: Duration = Duration::from_secs(1);
const T: Duration = Duration::from_secs(60);

/// The federation's clients; the clusters are dropped last.
pub struct Mixed {
    /// Host admin client.
    pub host: Client,
    /// member1 (push) admin client.
    pub push: Client,
    /// member2 (pull) admin client, as its agent uses it.
    pub pull: Client,
    /// The agent's host client: the scoped token, nothing more.
    pub agent_host: Client,
    /// The clusters.
    pub env: LocalEnv,
}

/// Joins member1 in push mode and member2 in pull mode (installing `applied_work_crd` in
/// member2, the agent's records), on a host where `boot`'s namespace and the type configs
/// exist.
pub async fn join_mixed(
    env: LocalEnv,
    host: Client,
    boot: &Bootstrap,
    applied_work_crd: CustomResourceDefinition,
) -> anyhow::Result<Mixed> {
    let push = boot.join(&host, &env.members()[0]).await?;
    let pull_cluster = &env.members()[1];
    ensure!(pull_cluster.name() == PULL, "{}", pull_cluster.name());
    let mut opts = PullJoinOptions::new(PULL, env.host().server());
    opts.namespace = boot.namespace.clone();
    opts.host_ca_pem = Some(env.host().ca_pem().to_owned());
    opts.labels.insert("name".into(), PULL.into());
    let joined = join_pull(&host, &opts).await?;
    let pull = pull_cluster.client().await?;
    install::install_crds(&pull, &[applied_work_crd], "flotilla-tests", T).await?;
    Ok(Mixed {
        host,
        push,
        pull,
        agent_host: client_of_kubeconfig(&joined.kubeconfig).await?,
        env,
    })
}

/// A client of the kubeconfig `yaml` (its current context): a Pull agent's host client
/// from the kubeconfig `join_pull` issued.
pub async fn client_of_kubeconfig(yaml: &str) -> anyhow::Result<Client> {
    let kubeconfig = Kubeconfig::from_yaml(yaml)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Whether `work` carries a manifest of an object named `name`.
pub fn holds(work: &Work, name: &str) -> bool {
    (work.spec.workload.manifests.iter().enumerate()).any(|(i, m)| identify(i, m).name == name)
}

impl Mixed {
    /// Both members' admin clients, member1 first.
    pub fn members(&self) -> Vec<Client> {
        vec![self.push.clone(), self.pull.clone()]
    }

    /// Starts member2's agent (resync every [`AGENT_RESYNC`], a 3 s Lease) and waits until
    /// its heartbeat Lease is in the host.
    pub async fn start_agent(&self) -> anyhow::Result<Agent> {
        let mut opts = AgentOptions::new(PULL, self.agent_host.clone(), self.pull.clone());
        opts.resync = AGENT_RESYNC;
        opts.lease_duration = Duration::from_secs(3);
        let agent = Agent::start(opts);
        let ns = flotilla_api::work::cluster_namespace(PULL);
        let leases: Api<Lease> = Api::namespaced(self.host.clone(), &ns);
        wait_for(T, "the agent's heartbeat Lease", || async {
            ensure!(
                leases
                    .get_opt(flotilla_api::work::AGENT_LEASE)
                    .await?
                    .is_some(),
                "no Lease yet"
            );
            Ok(())
        })
        .await?;
        Ok(agent)
    }
}
