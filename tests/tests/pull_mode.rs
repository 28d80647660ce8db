//! Pull mode end to end, on one mixed federation: member1 joined in push mode, member2 in
//! pull mode — the host holds no credential of member2; its agent runs in this process with
//! the scoped host token `join_pull` issued (the real ServiceAccount token), and an admin
//! client of member2. One environment serves every case, in an order where each leaves the
//! next a known state; the host outage comes last.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_agent::{Agent, AgentOptions};
use flotilla_api::{
    KubeFedCluster,
    work::{AppliedWork, Work, cluster_namespace},
};
use flotilla_cli::{self as cli, Context};
use flotilla_controllers::{
    install,
    manager::ControlPlane,
    pull_join::{PullJoinOptions, join_pull},
};
use flotilla_tests::{
    EnvOptions, LocalEnv,
    federation::{bootstrap, install_host, seeded_env},
    host::cluster_status,
    member::{config_maps, data_is},
    mixed::client_of_kubeconfig,
    objects::FederatedObject,
    requests::{requests, writes},
    wait::{wait_absent, wait_namespace_in, wait_object, wait_present},
    wait_for,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const T: Duration = Duration::from_secs(40);
const PULL: &str = "member2";
const PUSH: &str = "member1";
const NS: &str = "demo";
/// Longer than the test: every repair, prune and report here comes from a watch event (the
/// member caches' and the Work watch's), never from the agent's periodic safety net.
const RESYNC: Duration = Duration::from_secs(600);
/// A window with no request of the test's own on member ConfigMaps.
const QUIET: Duration = Duration::from_secs(3);
const LEASE: Duration = Duration::from_secs(3);

struct PullFederation {
    control_plane: Option<ControlPlane>,
    agent: Option<Agent>,
    host: Client,
    push: Client,
    pull: Client,
    /// The agent's own host client: the scoped token, nothing more.
    agent_host: Client,
    env: LocalEnv,
}

impl PullFederation {
    fn start_agent(&mut self) {
        let mut opts = AgentOptions::new(PULL, self.agent_host.clone(), self.pull.clone());
        opts.resync = RESYNC;
        opts.lease_duration = LEASE;
        self.agent = Some(Agent::start(opts));
    }

    async fn stop_agent(&mut self) {
        if let Some(a) = self.agent.take() {
            a.stop().await;
        }
    }
}

impl Drop for PullFederation {
    fn drop(&mut self) {
        self.agent.take();
        self.control_plane.take();
    }
}

async fn pull_federation() -> anyhow::Result<PullFederation> {
    let mut boot = bootstrap();
    boot.collect_workload_status = true;
    let env = seeded_env(EnvOptions::with_members(2), &boot).await;
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let push = boot.join(&host, &env.members()[0]).await?;
    let pull_cluster = &env.members()[1];
    ensure!(pull_cluster.name() == PULL);
    let mut opts = PullJoinOptions::new(PULL, env.host().server());
    opts.namespace = boot.namespace.clone();
    opts.host_ca_pem = Some(env.host().ca_pem().to_owned());
    opts.labels.insert("name".into(), PULL.into());
    let joined = join_pull(&host, &opts).await?;
    let kfc = joined.cluster;
    ensure!(kfc.spec.is_pull() && kfc.spec.api_endpoint.is_empty());
    let pull = pull_cluster.client().await?;
    install::install_crds(
        &pull,
        &[flotilla_api::crdgen::applied_work_crd()],
        "flotilla-tests",
        T,
    )
    .await?;
    let agent_host = client_of_kubeconfig(&joined.kubeconfig).await?;
    let mut fed = PullFederation {
        control_plane: None,
        agent: None,
        host: host.clone(),
        push,
        pull,
        agent_host,
        env,
    };
    fed.start_agent();
    fed.control_plane = Some(boot.start_control_plane(&host, 2).await?);
    Ok(fed)
}

fn kfc_ready(kfc: &KubeFedCluster) -> bool {
    kfc.status.as_ref().is_some_and(|s| s.is_ready())
}

async fn wait_cluster(fed: &PullFederation, ready: bool) -> anyhow::Result<KubeFedCluster> {
    let kfcs: Api<KubeFedCluster> =
        Api::namespaced(fed.host.clone(), flotilla_api::DEFAULT_NAMESPACE);
    wait_object(T, &kfcs, PULL, |k| {
        ensure!(kfc_ready(k) == ready, "{:?}", k.status);
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pull_member_gets_reconciled_by_its_agent_beside_a_push_member() -> anyhow::Result<()> {
    let mut fed = pull_federation().await?;
    let version = wait_cluster(&fed, true)
        .await?
        .status
        .and_then(|s| s.kubernetes_version);
    ensure!(version.is_some(), "the Lease carries the member's version");
    flotilla_tests::objects::create_namespace(&fed.host, NS).await?;
    FederatedObject::namespace(NS).apply(&fed.host).await?;
    if let Err(e) = wait_namespace_in(&[fed.push.clone(), fed.pull.clone()], NS).await {
        let st = FederatedObject::namespace(NS)
            .in_host(&fed.host)
            .get()
            .await?;
        let works: Api<Work> = Api::namespaced(fed.host.clone(), &cluster_namespace(PULL));
        let w = works.list(&ListParams::default()).await?;
        eprintln!(
            "FederatedNamespace status: {:?}\nWorks of member2: {:?}",
            st.data.get("status"),
            w.items
        );
        return Err(e);
    }
    // An object the agent did not create: it is never touched.
    let mine = config_maps(&fed.pull, NS);
    mine.create(
        &PostParams::default(),
        &flotilla_tests::objects::config_map("mine", &[], &[("k", "v")]),
    )
    .await?;

    objects_arrive_with_overrides(&fed).await?;
    status_flows_back(&fed).await?;
    a_member_side_edit_is_reverted(&fed).await?;
    a_bad_manifest_fails_alone_with_the_members_message(&fed).await?;
    a_removed_placement_prunes_and_deletion_cascades(&fed).await?;
    the_agents_credential_reads_only_its_own_namespace(&fed).await?;
    a_stopped_agent_turns_the_cluster_offline_and_a_restart_writes_nothing(&mut fed).await?;
    a_stopped_host_leaves_the_member_its_objects(&fed).await?;
    wait_present(T, &mine, "mine").await?;
    join_in_pull_mode_is_one_command(&fed).await
}

/// `flotilla join --mode pull` with a member context: the host side registered, the agent's
/// manifests applied in the member, its kubeconfig there and not in the host.
async fn join_in_pull_mode_is_one_command(fed: &PullFederation) -> anyhow::Result<()> {
    let kubeconfig = fed.env.kubeconfig_path().to_string_lossy().to_string();
    let ctx = Context::captured();
    let args = [
        "flotilla",
        "--kubeconfig",
        &kubeconfig,
        "--context",
        "host",
        "join",
        "extra",
        "--mode",
        "pull",
        "--cluster-context",
        PULL,
    ];
    cli::run(args, ctx.clone()).await?;
    ensure!(ctx.out.text().contains("pull mode"), "{}", ctx.out.text());
    let kfcs: Api<KubeFedCluster> =
        Api::namespaced(fed.host.clone(), flotilla_api::DEFAULT_NAMESPACE);
    let extra = kfcs.get("extra").await?;
    ensure!(
        extra.spec.is_pull() && extra.spec.secret_ref.name.is_empty(),
        "{:?}",
        extra.spec
    );
    let deployments =
        flotilla_tests::member::deployments(&fed.pull, flotilla_api::DEFAULT_NAMESPACE);
    let agent = deployments.get("flotilla-agent").await?;
    let args = serde_json::to_string(&agent.spec)?;
    ensure!(
        args.contains("\"extra\"") && args.contains("--host-kubeconfig"),
        "{args}"
    );
    let secrets: Api<Secret> = Api::namespaced(fed.pull.clone(), flotilla_api::DEFAULT_NAMESPACE);
    ensure!(
        secrets
            .get("flotilla-agent-host")
            .await?
            .data
            .is_some_and(|d| d.contains_key("kubeconfig"))
    );
    kfcs.delete("extra", &Default::default()).await?;
    Ok(())
}

async fn objects_arrive_with_overrides(fed: &PullFederation) -> anyhow::Result<()> {
    let cfg = FederatedObject::config_map(NS, "cfg", json!({"k": "v"}))
        .override_path(PULL, "/data/k", json!("pulled"))
        .apply(&fed.host)
        .await?;
    wait_object(T, &config_maps(&fed.push, NS), "cfg", data_is("k", "v")).await?;
    let cm = wait_object(
        T,
        &config_maps(&fed.pull, NS),
        "cfg",
        data_is("k", "pulled"),
    )
    .await?;
    let managers: Vec<_> = cm
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    ensure!(
        managers.contains(&"flotilla-agent".to_string()),
        "{managers:?}"
    );
    cfg.wait_cluster_reasons(&[(PUSH, ""), (PULL, "")]).await?;
    cfg.wait_propagated().await?;
    let works: Api<Work> = Api::namespaced(fed.host.clone(), &cluster_namespace(PULL));
    ensure!(
        works.list(&ListParams::default()).await?.items.len() >= 2,
        "a Work per object"
    );
    Ok(())
}

async fn status_flows_back(fed: &PullFederation) -> anyhow::Result<()> {
    let web = FederatedObject::deployment(NS, "web", 1, "nginx")
        .apply(&fed.host)
        .await?;
    wait_for(T, "member2's Deployment status in the host", || async {
        let status = web.status().await?;
        let remote = cluster_status(&status, PULL)
            .and_then(|c| c.remote_status.clone())
            .context("no remoteStatus for member2")?;
        ensure!(remote.get("observedGeneration").is_some(), "{remote}");
        ensure!(
            cluster_status(&status, PUSH)
                .and_then(|c| c.remote_status.as_ref())
                .is_some()
        );
        Ok(())
    })
    .await?;
    web.delete().await?;
    web.wait_gone(T).await
}

/// Drift in the Pull member is repaired on the member watch's event (the resync is longer
/// than the test), with one write, and the agent reads nothing to decide: no GET of the
/// object, not even when its own status write brings the Work back to its queue.
async fn a_member_side_edit_is_reverted(fed: &PullFederation) -> anyhow::Result<()> {
    let cms = config_maps(&fed.pull, NS);
    let written = writes(&fed.pull, &["configmaps"]).await?;
    let edit = json!({"data": {"k": "edited"}});
    cms.patch("cfg", &PatchParams::default(), &Patch::Merge(&edit))
        .await?;
    wait_object(T, &cms, "cfg", data_is("k", "pulled")).await?;
    let read = requests(&fed.pull, &["GET"], &["configmaps"]).await?;
    tokio::time::sleep(QUIET).await;
    ensure!(
        requests(&fed.pull, &["GET"], &["configmaps"]).await? == read,
        "the agent read a ConfigMap live instead of from its cache"
    );
    let repairs = writes(&fed.pull, &["configmaps"]).await? - written - 1;
    ensure!(repairs == 1, "{repairs} writes repaired one edit");
    // A member object deleted by hand comes back on the delete event.
    cms.delete("cfg", &Default::default()).await?;
    wait_object(T, &cms, "cfg", data_is("k", "pulled")).await?;
    Ok(())
}

async fn a_bad_manifest_fails_alone_with_the_members_message(
    fed: &PullFederation,
) -> anyhow::Result<()> {
    let bad = FederatedObject::config_map(NS, "bad", json!({"not a valid key!": "x"}))
        .on_clusters(&[PULL])
        .apply(&fed.host)
        .await?;
    let status = bad
        .wait_cluster_reasons(&[(PULL, "CreationFailed")])
        .await?;
    let message = &cluster_status(&status, PULL).context("member2")?.message;
    ensure!(message.contains("valid config key"), "{message}");
    wait_present(T, &config_maps(&fed.pull, NS), "cfg").await?;
    let ctx = Context::captured();
    let kubeconfig = fed.env.kubeconfig_path().to_string_lossy().to_string();
    let args = [
        "flotilla",
        "--kubeconfig",
        &kubeconfig,
        "--context",
        "host",
        "status",
        "federatedconfigmap/bad",
        "-n",
        NS,
    ];
    // `status` exits non-zero for an object that is not propagated; its table is what counts.
    let _ = cli::run(args, ctx.clone()).await;
    let text = ctx.out.text();
    ensure!(
        text.contains(PULL) && text.contains("CreationFailed"),
        "{text}"
    );
    bad.delete().await?;
    bad.wait_gone(T).await
}

async fn a_removed_placement_prunes_and_deletion_cascades(
    fed: &PullFederation,
) -> anyhow::Result<()> {
    let moving = FederatedObject::config_map(NS, "moving", json!({"k": "v"}));
    let moving_ref = moving.apply(&fed.host).await?;
    wait_present(T, &config_maps(&fed.pull, NS), "moving").await?;
    moving.on_clusters(&[PUSH]).apply(&fed.host).await?;
    wait_absent(T, &config_maps(&fed.pull, NS), "moving").await?;
    moving_ref.wait_cluster_reasons(&[(PUSH, "")]).await?;
    wait_present(T, &config_maps(&fed.push, NS), "moving").await?;
    moving_ref.delete().await?;
    moving_ref.wait_gone(T).await?;
    wait_absent(T, &config_maps(&fed.push, NS), "moving").await?;
    let applied: Api<AppliedWork> = Api::all(fed.pull.clone());
    wait_for(T, "the pruned Work's record gone", || async {
        let names: Vec<_> = applied
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|a| a.spec.work_name)
            .collect();
        ensure!(!names.iter().any(|n| n.contains("moving")), "{names:?}");
        Ok(())
    })
    .await
}

async fn the_agents_credential_reads_only_its_own_namespace(
    fed: &PullFederation,
) -> anyhow::Result<()> {
    let own: Api<Work> = Api::namespaced(fed.agent_host.clone(), &cluster_namespace(PULL));
    own.list(&ListParams::default()).await?;
    let other_ns = cluster_namespace("other");
    flotilla_tests::objects::create_namespace(&fed.host, &other_ns).await?;
    let other: Api<Work> = Api::namespaced(fed.agent_host.clone(), &other_ns);
    let forbidden = |r: Result<kube::core::ObjectList<Work>, kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);
    ensure!(
        forbidden(other.list(&ListParams::default()).await),
        "another cluster's Works"
    );
    let all: Api<Work> = Api::all(fed.agent_host.clone());
    ensure!(
        forbidden(all.list(&ListParams::default()).await),
        "every namespace's Works"
    );
    let secrets: Api<Secret> = Api::namespaced(fed.agent_host.clone(), &cluster_namespace(PULL));
    ensure!(
        matches!(secrets.list(&ListParams::default()).await, Err(kube::Error::Api(s)) if s.code == 403),
        "Secrets of its own namespace"
    );
    let kfcs: Api<KubeFedCluster> =
        Api::namespaced(fed.agent_host.clone(), flotilla_api::DEFAULT_NAMESPACE);
    ensure!(
        matches!(kfcs.get(PULL).await, Err(kube::Error::Api(s)) if s.code == 403),
        "the cluster registry"
    );
    Ok(())
}

/// Write requests the agent could make: member objects, its records, the Works' status.
async fn agent_writes(fed: &PullFederation) -> anyhow::Result<(u64, u64)> {
    let member = writes(
        &fed.pull,
        &["configmaps", "namespaces", "deployments", "appliedworks"],
    )
    .await?;
    let host = writes(&fed.host, &["works"]).await?;
    Ok((member, host))
}

async fn a_stopped_agent_turns_the_cluster_offline_and_a_restart_writes_nothing(
    fed: &mut PullFederation,
) -> anyhow::Result<()> {
    let cfg = FederatedObject::config_map(NS, "cfg", json!({})).in_host(&fed.host);
    cfg.wait_cluster_reasons(&[(PUSH, ""), (PULL, "")]).await?;
    let before: ConfigMap = config_maps(&fed.pull, NS).get("cfg").await?;
    fed.stop_agent().await;
    let kfc = wait_cluster(fed, false).await?;
    let offline = kfc
        .status
        .as_ref()
        .and_then(|s| s.condition("Offline"))
        .context("Offline")?;
    ensure!(offline.status == "True", "{offline:?}");
    cfg.wait_cluster_reasons(&[(PULL, "ClusterNotReady")])
        .await?;
    flotilla_tests::assert::assert_unchanged(
        &config_maps(&fed.pull, NS),
        &before,
        "cfg in member2",
    )
    .await?;
    let counted = agent_writes(fed).await?;
    fed.start_agent();
    wait_cluster(fed, true).await?;
    cfg.wait_cluster_reasons(&[(PULL, "")]).await?;
    // The agent's relists and the host's requeue after the cluster's return.
    tokio::time::sleep(QUIET * 2).await;
    ensure!(
        agent_writes(fed).await? == counted,
        "writes after a restart with nothing changed"
    );
    Ok(())
}

async fn a_stopped_host_leaves_the_member_its_objects(fed: &PullFederation) -> anyhow::Result<()> {
    fed.env.stop_apiserver("host").await?;
    // The agent's Work watch fails and retries meanwhile; it never prunes from that.
    tokio::time::sleep(QUIET * 2).await;
    let cm = config_maps(&fed.pull, NS).get("cfg").await?;
    fed.env.start_apiserver("host").await?;
    ensure!(data_is("k", "pulled")(&cm).is_ok(), "{cm:?}");
    Ok(())
}
