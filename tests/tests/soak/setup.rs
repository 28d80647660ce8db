//! The soak's federation: a host and three members whose pods run in appearance (a
//! scheduler and a simulated kubelet each), workload status collected:
//!
//! - member1: push mode, joined directly;
//! - member2: push mode, joined through a [`FaultProxy`] (`member_proxy`): a partition or
//!   latency between the host's control plane and member2;
//! - member3: pull mode, its agent in this process with the scoped host token `join_pull`
//!   issued, reaching the host through a second [`FaultProxy`] (`agent_proxy`): a partition
//!   or latency between member3 and the host.
//!
//! Checks always use admin clients that reach every cluster directly.

use std::time::Duration;

use flotilla_agent::{Agent, AgentOptions};
use flotilla_api::crdgen;
use flotilla_controllers::{
    install,
    join::{JoinOptions, join},
    pull_join::{PullJoinOptions, join_pull},
};
use flotilla_localenv::FaultProxy;
use flotilla_tests::{
    EnvOptions,
    federation::{Federation, bootstrap, install_host, seeded_env},
};
use k8s_openapi::api::{
    core::v1::ServiceAccount,
    rbac::v1::{Role, RoleBinding},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::{Value, json};

use crate::fault_harness::{federated_namespace_everywhere, wait_cluster_ready};

/// The namespace everything of the soak lives in.
pub const NS: &str = "chaos";
/// The push member the control plane reaches through `member_proxy`.
pub const PUSH_PROXIED: &str = "member2";
/// The pull member; its agent reaches the host through `agent_proxy`.
pub const PULL: &str = "member3";
/// The remote ServiceAccount the soak's ServiceAccountImports import (in [`NS`] of each
/// push member, allowed to list ConfigMaps there).
pub const READER: &str = "reader";
/// The agent's resync: drift repaired and failed Works retried at least this often.
const AGENT_RESYNC: Duration = Duration::from_secs(5);
/// The agent's Lease: member3 turns not Ready a few seconds into a partition or agent kill.
const AGENT_LEASE: Duration = Duration::from_secs(3);
const MANAGER: &str = "flotilla-soak";

/// The running soak federation. Dropped in order: agent, proxies, control plane, clusters.
pub struct Soak {
    /// member3's agent; `None` while killed.
    pub agent: Option<Agent>,
    /// The agent's own host client (through `agent_proxy`, the scoped token only).
    pub agent_host: Client,
    /// Between the control plane and member2.
    pub member_proxy: FaultProxy,
    /// Between member3's agent and the host.
    pub agent_proxy: FaultProxy,
    /// Host, admin clients of the members (direct), the clusters and the control plane.
    pub fed: Federation,
    /// Member names, in order.
    pub names: Vec<String>,
}

impl Soak {
    /// `(name, admin client)` of every member.
    pub fn member_clients(&self) -> Vec<(String, Client)> {
        self.names
            .iter()
            .cloned()
            .zip(self.fed.members.iter().cloned())
            .collect()
    }

    /// `(name, admin client)` of the push members (Multi-Cluster Services and
    /// ServiceAccountImports reach push members only).
    pub fn push_clients(&self) -> Vec<(String, Client)> {
        self.member_clients()
            .into_iter()
            .filter(|(name, _)| name != PULL)
            .collect()
    }

    /// The pull member's admin client.
    pub fn pull_client(&self) -> Client {
        self.fed.members[2].clone()
    }

    /// Starts member3's agent (again).
    pub fn start_agent(&mut self) {
        let mut opts = AgentOptions::new(PULL, self.agent_host.clone(), self.pull_client());
        opts.resync = AGENT_RESYNC;
        opts.lease_duration = AGENT_LEASE;
        self.agent = Some(Agent::start(opts));
    }

    /// Drops the agent: its tasks are aborted mid-flight, as in a SIGKILL.
    pub fn kill_agent(&mut self) {
        drop(self.agent.take());
    }
}

impl Drop for Soak {
    fn drop(&mut self) {
        self.agent.take();
    }
}

/// Starts the soak federation, namespace [`NS`] federated everywhere and the ServiceAccount
/// [`READER`] in each push member.
pub async fn soak_federation() -> anyhow::Result<Soak> {
    let mut boot = bootstrap();
    boot.collect_workload_status = true;
    let env = seeded_env(EnvOptions::with_members(3).with_pods(), &boot).await;
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let m1 = boot.join(&host, &env.members()[0]).await?;

    let proxied = &env.members()[1];
    let member_proxy = FaultProxy::for_cluster(proxied).await?;
    let m2 = proxied.client().await?;
    let mut opts = JoinOptions::new(PUSH_PROXIED, &member_proxy.url());
    opts.namespace = boot.namespace.clone();
    opts.ca_pem = Some(proxied.ca_pem().to_owned());
    opts.labels.insert("name".into(), PUSH_PROXIED.into());
    join(&host, &m2, &opts).await?;

    let agent_proxy = FaultProxy::for_cluster(env.host()).await?;
    let mut pull = PullJoinOptions::new(PULL, &agent_proxy.url());
    pull.namespace = boot.namespace.clone();
    pull.host_ca_pem = Some(env.host().ca_pem().to_owned());
    pull.labels.insert("name".into(), PULL.into());
    let joined = join_pull(&host, &pull).await?;
    let m3 = env.members()[2].client().await?;
    let applied_work = [crdgen::applied_work_crd()];
    install::install_crds(&m3, &applied_work, MANAGER, Duration::from_secs(60)).await?;
    let kubeconfig = Kubeconfig::from_yaml(&joined.kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let agent_host = Client::try_from(config)?;

    let names: Vec<String> = env.members().iter().map(|m| m.name().to_owned()).collect();
    let mut soak = Soak {
        agent: None,
        agent_host,
        member_proxy,
        agent_proxy,
        fed: Federation {
            control_plane: None,
            host: host.clone(),
            members: vec![m1, m2, m3],
            env,
        },
        names,
    };
    soak.start_agent();
    soak.fed.control_plane = Some(boot.start_control_plane(&host, 3).await?);
    for name in &soak.names {
        wait_cluster_ready(&host, name, Duration::from_secs(60)).await?;
    }
    federated_namespace_everywhere(&host, &soak.member_clients(), NS).await?;
    for (_, client) in soak.push_clients() {
        reader_account(&client).await?;
    }
    Ok(soak)
}

/// ServiceAccount [`READER`] in [`NS`], allowed to list ConfigMaps there and nothing else.
async fn reader_account(member: &Client) -> anyhow::Result<()> {
    apply(
        &Api::<ServiceAccount>::namespaced(member.clone(), NS),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": READER}}),
    )
    .await?;
    apply(
        &Api::<Role>::namespaced(member.clone(), NS),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": READER},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
    )
    .await?;
    apply(
        &Api::<RoleBinding>::namespaced(member.clone(), NS),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": READER},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": READER},
               "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": NS}]}),
    )
    .await
}

/// Server-side applies `body` (which names itself) through `api`.
pub async fn apply<K>(api: &Api<K>, body: Value) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = body["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(())
}
