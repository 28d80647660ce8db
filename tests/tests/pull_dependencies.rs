//! Dependencies that follow a workload into a Pull member, end to end on a mixed federation
//! (member1 joined in push mode, member2 in pull mode, its agent in this process with the
//! scoped host token `join_pull` issued): the ConfigMap and Secret a FederatedDeployment's
//! pod template references reach the Pull member through Works and are reported there; a
//! host edit reaches the copy; moved to the Push member, the workload takes them along and
//! the Pull member's copies are pruned; moved back, they return; a FederatedConfigMap of
//! the same name takes its copy over (released by the agent, not pruned); deleting the
//! workload removes the rest. The Secret's value never shows in the workload's status. A
//! user's own ConfigMap of a dependency's name in the Pull member is left untouched,
//! reported `ExistsInMember`, and outlives the workload.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_agent::{Agent, AgentOptions};
use flotilla_api::{
    DEFAULT_NAMESPACE, FederatedTypeConfig, MANAGED_LABEL, crdgen,
    dependency_plan::DependencyStatus,
    work::{WORK_TYPE_LABEL, Work, cluster_namespace},
};
use flotilla_controllers::{
    install,
    manager::ControlPlane,
    pull_join::{MemberRole, PullJoinOptions, agent_manifests, join_pull},
};
use flotilla_core::dependencies::{DEPENDENCY_LABEL, OWNERS_ANNOTATION};
use flotilla_tests::{
    EnvOptions,
    cli::service_account_token,
    federation::{apply, bootstrap, install_host, seeded_env},
    host::FederatedRef,
    member::{config_maps, data_is, deployments},
    mixed::{Mixed, PULL, client_of_kubeconfig, join_mixed},
    objects::{FederatedObject, config_map, create_namespace, meta},
    wait::{wait_absent, wait_namespace_in, wait_object, wait_present},
    wait_for,
};
use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const NS: &str = "pull-deps";
const PUSH: &str = "member1";
const T: Duration = Duration::from_secs(90);
/// The Secret's value, which must never show in the workload's status.
const SECRET_VALUE: &str = "pull-s3cr3t";

/// The mixed federation, its agent and control plane (stopped before the clusters).
struct Pulled {
    control_plane: Option<ControlPlane>,
    agent: Option<Agent>,
    fed: Mixed,
}

impl Drop for Pulled {
    fn drop(&mut self) {
        self.agent.take();
        self.control_plane.take();
    }
}

async fn mixed_federation() -> anyhow::Result<Pulled> {
    let boot = bootstrap();
    let env = seeded_env(EnvOptions::with_members(2), &boot).await;
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let fed = join_mixed(env, host, &boot, crdgen::applied_work_crd()).await?;
    let mut opts = AgentOptions::new(PULL, fed.agent_host.clone(), fed.pull.clone());
    // Longer than the test: everything the agent does here starts from a watch event.
    opts.resync = Duration::from_secs(600);
    opts.lease_duration = Duration::from_secs(3);
    let agent = Agent::start(opts);
    let control_plane = boot.start_control_plane(&fed.host, 2).await?;
    create_namespace(&fed.host, NS).await?;
    FederatedObject::namespace(NS).apply(&fed.host).await?;
    wait_namespace_in(&fed.members(), NS).await?;
    Ok(Pulled {
        control_plane: Some(control_plane),
        agent: Some(agent),
        fed,
    })
}

fn secrets(client: &Client) -> Api<Secret> {
    Api::namespaced(client.clone(), NS)
}

/// The host's ConfigMap `settings` and Secret `creds`.
async fn host_objects(host: &Client) -> anyhow::Result<()> {
    let pp = PostParams::default();
    let cm = config_map("settings", &[("team", "a")], &[("mode", "blue")]);
    config_maps(host, NS).create(&pp, &cm).await?;
    let secret = Secret {
        metadata: meta("creds", Some(NS)),
        data: Some(BTreeMap::from([(
            "password".to_string(),
            ByteString(SECRET_VALUE.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    };
    secrets(host).create(&pp, &secret).await?;
    Ok(())
}

/// FederatedDeployment `web` on `cluster`, its ConfigMap and Secret following it.
async fn web_on(host: &Client, cluster: &str) -> anyhow::Result<FederatedRef> {
    let obj = FederatedObject::deployment(NS, "web", 1, "nginx:1.25").on_clusters(&[cluster]);
    let mut value = obj.to_json();
    value["spec"]["propagateDependencies"] = json!(true);
    value["spec"]["template"]["spec"]["template"]["spec"] = json!({
        "volumes": [{"name": "settings", "configMap": {"name": "settings"}}],
        "containers": [{
            "name": "web", "image": "nginx:1.25",
            "env": [{"name": "PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}}],
        }]
    });
    apply(host, &obj.api_resource(), Some(NS), &value).await?;
    Ok(obj.in_host(host))
}

/// A copy made for `web`: labelled, and naming it as its only owner.
fn owned<K: ResourceExt>(o: &K) -> anyhow::Result<()> {
    ensure!(o.labels().get(DEPENDENCY_LABEL).map(String::as_str) == Some("true"));
    let owners = o.annotations().get(OWNERS_ANNOTATION).cloned();
    ensure!(
        owners.as_deref() == Some("FederatedDeployment/web"),
        "owners {owners:?}"
    );
    Ok(())
}

/// Waits until `member` holds both copies for `web`, the ConfigMap's `mode` at `mode`.
async fn wait_copies(member: &Client, mode: &str) -> anyhow::Result<()> {
    let cm = wait_object(
        T,
        &config_maps(member, NS),
        "settings",
        data_is("mode", mode),
    )
    .await?;
    owned(&cm)?;
    let secret = wait_present(T, &secrets(member), "creds").await?;
    owned(&secret)?;
    let password = secret.data.as_ref().and_then(|d| d.get("password"));
    ensure!(password.map(|b| b.0.as_slice()) == Some(SECRET_VALUE.as_bytes()));
    Ok(())
}

async fn wait_copies_gone(member: &Client) -> anyhow::Result<()> {
    wait_absent(T, &config_maps(member, NS), "settings").await?;
    wait_absent(T, &secrets(member), "creds").await
}

/// The names of the dependency copies the Pull member's Works carry (ConfigMaps and
/// Secrets, under their own Work type labels).
async fn dependency_manifests(host: &Client) -> anyhow::Result<Vec<String>> {
    let works: Api<Work> = Api::namespaced(host.clone(), &cluster_namespace(PULL));
    let mut names = Vec::new();
    for plural in ["configmaps", "secrets"] {
        let label = format!("{WORK_TYPE_LABEL}={plural}.dependencies.flotilla.io");
        for w in works.list(&ListParams::default().labels(&label)).await? {
            for m in &w.spec.workload.manifests {
                names.extend(
                    m.pointer("/metadata/name")
                        .and_then(|n| n.as_str())
                        .map(String::from),
                );
            }
        }
    }
    names.sort();
    Ok(names)
}

/// Each dependency Work of the Pull member and its generation.
async fn dependency_generations(host: &Client) -> anyhow::Result<Vec<(String, Option<i64>)>> {
    let works: Api<Work> = Api::namespaced(host.clone(), &cluster_namespace(PULL));
    let mut out = Vec::new();
    for plural in ["configmaps", "secrets"] {
        let label = format!("{WORK_TYPE_LABEL}={plural}.dependencies.flotilla.io");
        for w in works.list(&ListParams::default().labels(&label)).await? {
            out.push((w.name_any(), w.metadata.generation));
        }
    }
    out.sort();
    Ok(out)
}

fn entry<'a>(deps: &'a [DependencyStatus], name: &str) -> anyhow::Result<&'a DependencyStatus> {
    deps.iter()
        .find(|d| d.name == name)
        .with_context(|| format!("no status entry for {name}: {deps:?}"))
}

/// Waits until `status.dependencies` reports both copies propagated to `cluster` only.
async fn wait_reported_on(web: &FederatedRef, cluster: &str) -> anyhow::Result<()> {
    wait_for(
        T,
        &format!("dependencies reported on {cluster}"),
        || async {
            let deps = web.status().await?.dependencies;
            for name in ["settings", "creds"] {
                let d = entry(&deps, name)?;
                ensure!(d.state == "Propagated" && d.clusters == [cluster], "{d:?}");
            }
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dependencies_follow_a_workload_into_a_pull_member_are_updated_and_leave_with_it()
-> anyhow::Result<()> {
    let p = mixed_federation().await?;
    let (host, pull, push) = (&p.fed.host, &p.fed.pull, &p.fed.push);
    host_objects(host).await?;

    // On the Pull member: the workload and both copies arrive through Works, reported.
    let web = web_on(host, PULL).await?;
    wait_present(T, &deployments(pull, NS), "web").await?;
    wait_copies(pull, "blue").await?;
    wait_reported_on(&web, PULL).await?;
    ensure!(dependency_manifests(host).await? == ["creds", "settings"]);
    // A reconcile with nothing new rewrites no dependency Work.
    let before = dependency_generations(host).await?;
    let touch = json!({"metadata": {"annotations": {"touched": "1"}}});
    web.api
        .patch(&web.name, &PatchParams::default(), &Patch::Merge(&touch))
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        dependency_generations(host).await? == before,
        "a Work rewritten"
    );
    ensure!(
        config_maps(push, NS).get_opt("settings").await?.is_none(),
        "{PUSH} got a dependency of a workload it does not run"
    );
    let status = serde_json::to_string(&web.get().await?.data["status"])?;
    ensure!(
        !status.contains(SECRET_VALUE),
        "the Secret's value is in the status"
    );

    // A host edit reaches the Pull member's copy.
    let patch = json!({"data": {"mode": "green"}});
    config_maps(host, NS)
        .patch("settings", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_copies(pull, "green").await?;

    // Moved to the Push member: the copies follow and the agent prunes the Pull member's.
    web_on(host, PUSH).await?;
    wait_copies(push, "green").await?;
    wait_copies_gone(pull).await?;
    wait_reported_on(&web, PUSH).await?;

    // And back: the copies return to the Pull member and leave the Push member.
    web_on(host, PULL).await?;
    wait_copies(pull, "green").await?;
    wait_copies_gone(push).await?;
    wait_reported_on(&web, PULL).await?;

    // A FederatedConfigMap `settings` created now takes the Pull member's copy over: the
    // agent releases the copy (no prune) and applies the federated content; the workload
    // reports it explicit.
    FederatedObject::config_map(NS, "settings", json!({"from": "federated"}))
        .on_clusters(&[PULL])
        .apply(host)
        .await?;
    wait_for(
        T,
        "settings handed over to its FederatedConfigMap",
        || async {
            let deps = web.status().await?.dependencies;
            let d = entry(&deps, "settings")?;
            ensure!(d.state == "Explicit", "{d:?}");
            let cm = config_maps(pull, NS).get("settings").await?;
            data_is("from", "federated")(&cm)?;
            ensure!(cm.labels().get(MANAGED_LABEL).map(String::as_str) == Some("true"));
            ensure!(
                !cm.annotations().contains_key(OWNERS_ANNOTATION),
                "still a dependency copy: {:?}",
                cm.annotations()
            );
            ensure!(
                dependency_manifests(host).await? == ["creds"],
                "the dependency Works still carry settings"
            );
            Ok(())
        },
    )
    .await?;

    // Deleting the workload removes the copies it held, not the federated ConfigMap.
    web.delete().await?;
    web.wait_gone(T).await?;
    wait_absent(T, &secrets(pull), "creds").await?;
    wait_absent(T, &deployments(pull, NS), "web").await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cm = config_maps(pull, NS).get_opt("settings").await?;
    ensure!(
        cm.as_ref()
            .is_some_and(|c| data_is("from", "federated")(c).is_ok()),
        "the explicitly federated ConfigMap went with the workload: {cm:?}"
    );
    Ok(())
}

/// With the member ClusterRole `join --mode pull` generates and Secrets not federated, the
/// agent may still apply and prune the copies of a workload's Secret and ConfigMap (the
/// role grants the dependency kinds once a workload type is enabled), without being allowed
/// to list Secrets.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_with_the_generated_role_applies_and_prunes_dependency_copies()
-> anyhow::Result<()> {
    const ONLY: &str = "member1";
    let boot = bootstrap();
    let env = seeded_env(EnvOptions::with_members(1), &boot).await;
    let cluster = &env.members()[0];
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    let disabled = Patch::Merge(json!({"spec": {"propagation": "Disabled"}}));
    ftcs.patch("secrets", &PatchParams::default(), &disabled)
        .await?;
    let mut opts = PullJoinOptions::new(ONLY, env.host().server());
    opts.namespace = boot.namespace.clone();
    opts.host_ca_pem = Some(env.host().ca_pem().to_owned());
    let joined = join_pull(&host, &opts).await?;
    let admin = cluster.client().await?;
    install::install_crds(&admin, &[crdgen::applied_work_crd()], "flotilla-tests", T).await?;
    let role = MemberRole::Types(joined.type_rules.clone());
    let manifests = agent_manifests(ONLY, DEFAULT_NAMESPACE, "unused", &joined.kubeconfig, &role);
    let items: Vec<_> = (manifests["items"].as_array().into_iter().flatten())
        .filter(|i| {
            !matches!(
                i["kind"].as_str(),
                Some("Deployment" | "Secret" | "CustomResourceDefinition")
            )
        })
        .cloned()
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    flotilla_cli::pull::apply_list(&admin, &list).await?;
    let token = service_account_token(&admin, DEFAULT_NAMESPACE, "flotilla-agent").await?;
    let mut config = cluster.kube_config();
    config.auth_info.token = Some(token.into());
    let member = Client::try_from(config)?;
    let agent = Agent::start(AgentOptions::new(
        ONLY,
        client_of_kubeconfig(&joined.kubeconfig).await?,
        member.clone(),
    ));
    let control_plane = boot.start_control_plane(&host, 1).await?;
    create_namespace(&host, NS).await?;
    FederatedObject::namespace(NS).apply(&host).await?;
    wait_namespace_in(std::slice::from_ref(&admin), NS).await?;
    host_objects(&host).await?;

    let web = web_on(&host, ONLY).await?;
    wait_present(T, &deployments(&admin, NS), "web").await?;
    wait_copies(&admin, "blue").await?;
    wait_reported_on(&web, ONLY).await?;
    let listed = secrets(&member).list(&ListParams::default().limit(1)).await;
    ensure!(
        matches!(listed, Err(kube::Error::Api(ref s)) if s.code == 403),
        "the agent may list Secrets: {listed:?}"
    );
    web.delete().await?;
    web.wait_gone(T).await?;
    wait_copies_gone(&admin).await?;
    drop(control_plane);
    agent.stop().await;
    Ok(())
}

/// A user's own ConfigMap of a dependency's name in the Pull member is left alone, as in a
/// Push member: the agent neither writes over it nor prunes it, and the workload reports
/// `ExistsInMember` for that cluster while its other dependency (the Secret) is copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_users_own_object_in_a_pull_member_is_refused_and_never_pruned() -> anyhow::Result<()> {
    let p = mixed_federation().await?;
    let (host, pull) = (&p.fed.host, &p.fed.pull);
    host_objects(host).await?;
    let mine = config_map("settings", &[("owner", "user")], &[("mode", "mine")]);
    let before = config_maps(pull, NS)
        .create(&PostParams::default(), &mine)
        .await?;

    let web = web_on(host, PULL).await?;
    wait_present(T, &deployments(pull, NS), "web").await?;
    let secret = wait_present(T, &secrets(pull), "creds").await?;
    owned(&secret)?;
    wait_for(T, "settings refused on the Pull member", || async {
        let deps = web.status().await?.dependencies;
        let d = entry(&deps, "settings")?;
        ensure!(
            d.state == "Failed" && d.reason == "ExistsInMember" && d.clusters.is_empty(),
            "{d:?}"
        );
        ensure!(
            d.message
                .contains(&format!("{PULL}: an object not made by Flotilla")),
            "{d:?}"
        );
        let c = entry(&deps, "creds")?;
        ensure!(c.state == "Propagated" && c.clusters == [PULL], "{c:?}");
        Ok(())
    })
    .await?;
    // Left byte for byte: no write at all (same resourceVersion), no label added.
    let unchanged = |cm: &k8s_openapi::api::core::v1::ConfigMap| -> anyhow::Result<()> {
        ensure!(
            cm.metadata.resource_version == before.metadata.resource_version
                && cm.metadata.uid == before.metadata.uid,
            "the user's ConfigMap was written: {:?}",
            cm.metadata
        );
        ensure!(cm.labels() == before.labels() && cm.data == before.data);
        ensure!(!cm.labels().contains_key(MANAGED_LABEL));
        Ok(())
    };
    unchanged(&config_maps(pull, NS).get("settings").await?)?;

    // Deleting the workload prunes its copy and leaves the user's object.
    web.delete().await?;
    web.wait_gone(T).await?;
    wait_absent(T, &secrets(pull), "creds").await?;
    wait_for(T, "the dependency Works emptied", || async {
        ensure!(dependency_manifests(host).await?.is_empty());
        Ok(())
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    unchanged(&config_maps(pull, NS).get("settings").await?)?;
    Ok(())
}
