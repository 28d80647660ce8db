//! Operating the pull agent, end to end on real clusters: one member joined in pull mode,
//! its agent run in this process with the scoped host token `join_pull` issued and a
//! member ServiceAccount allowed Namespaces, ConfigMaps and AppliedWorks only (no
//! Secrets). Its `/readyz` turns ready, `/metrics` counts what it applies; a Work the member
//! finds invalid and one it forbids get a `Rejected` condition and an Event named after
//! the member's reason while the other Works keep flowing; `flotilla agent --check` names
//! the missing Secret permissions and exits non-zero. A record (AppliedWork) the member
//! refuses to create or to write does not hold a bundle back: it is applied, and the
//! refusal is a `Recorded=False` condition of its Work. And least privilege by default: with
//! the member ClusterRole `join --mode pull` generates, a type enabled after the join is
//! applied once the agent has followed, a type not enabled is forbidden.

use std::{net::SocketAddr, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_agent::{Agent, AgentOptions, plan::RECORDED, rejection::REJECTED};
use flotilla_api::{
    DEFAULT_NAMESPACE, FederatedTypeConfig, MANAGED_LABEL,
    work::{AppliedWork, Work, WorkSpec, WorkloadTemplate, cluster_namespace, identify},
};
use flotilla_cli::{self as cli, Context};
use flotilla_controllers::{
    install,
    pull_join::{MemberRole, PullJoinOptions, agent_manifests, join_pull, kubeconfig},
};
use flotilla_multicluster::http::{self, MetricsAccess};
use flotilla_tests::{
    EnvOptions,
    cli::service_account_token,
    federation::{bootstrap, install_host, seeded_env},
    member::config_maps,
    mixed::{client_of_kubeconfig, holds},
    objects::{FederatedObject, create_namespace},
    wait::{wait_absent, wait_namespace_in, wait_present},
    wait_for,
};
use k8s_openapi::api::{
    core::v1::{ConfigMap, PersistentVolume, Secret},
    events::v1::Event,
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const T: Duration = Duration::from_secs(40);
const PULL: &str = "member1";
const NS: &str = "demo";
const AGENT_NS: &str = "agent-ops";

/// A member credential for the agent: Namespaces, ConfigMaps and its AppliedWorks.
async fn restricted_member(
    admin: &Client,
    mut config: kube::Config,
) -> anyhow::Result<(Client, String)> {
    create_namespace(admin, AGENT_NS).await?;
    let pp = PatchParams::apply("flotilla-tests");
    allow_records(admin, Records::All).await?;
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "agent-ops"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "agent-ops"},
        "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": AGENT_NS}],
    });
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(admin.clone());
    bindings
        .patch("agent-ops", &pp, &Patch::Apply(binding))
        .await?;
    let token = service_account_token(admin, AGENT_NS, "agent").await?;
    config.auth_info.token = Some(token.clone().into());
    Ok((Client::try_from(config)?, token))
}

/// What the agent's member credential may do with its AppliedWorks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Records {
    /// Everything.
    All,
    /// Not write their status: the agent applies but cannot record what it applied.
    NoStatus,
    /// Not create them: a new bundle has no record at all.
    NoCreate,
}

/// The agent's member ClusterRole: Namespaces, ConfigMaps, and AppliedWorks as `records`
/// says.
async fn allow_records(admin: &Client, records: Records) -> anyhow::Result<()> {
    let all = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let mut resources = vec!["appliedworks"];
    if records != Records::NoStatus {
        resources.push("appliedworks/status");
    }
    let verbs: Vec<_> = all
        .iter()
        .filter(|v| records != Records::NoCreate || **v != "create")
        .collect();
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "agent-ops"},
        "rules": [
            {"apiGroups": [""], "resources": ["namespaces", "configmaps"], "verbs": all},
            {"apiGroups": ["multicluster.x-k8s.io"], "resources": resources, "verbs": verbs},
        ],
    });
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(admin.clone());
    let pp = PatchParams::apply("flotilla-tests").force();
    roles.patch("agent-ops", &pp, &Patch::Apply(role)).await?;
    Ok(())
}

async fn scrape(addr: SocketAddr) -> anyhow::Result<String> {
    let (status, body) = http::get(addr, "/metrics").await?;
    ensure!(status == 200, "{status}: {body}");
    Ok(body)
}

/// The value of the sample `line_start` (name and labels) on the metrics page.
fn sample(page: &str, line_start: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
}

/// Waits for a Work whose `Rejected` condition names `reason` and an Event of that reason
/// about it that names `what`.
async fn wait_rejected(host: &Client, reason: &str, what: &str) -> anyhow::Result<()> {
    let ns = cluster_namespace(PULL);
    let works: Api<Work> = Api::namespaced(host.clone(), &ns);
    let events: Api<Event> = Api::namespaced(host.clone(), &ns);
    wait_for(T, &format!("a {reason} Work with its Event"), || async {
        let rejected: Vec<String> = works
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|w| {
                w.status
                    .iter()
                    .flat_map(|s| &s.conditions)
                    .any(|c| c.type_ == REJECTED && c.reason == reason && c.message.contains(what))
            })
            .filter_map(|w| w.metadata.name)
            .collect();
        ensure!(!rejected.is_empty(), "no Work rejected as {reason}");
        let announced = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .any(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_ref()) == rejected.first()
                    && e.note.as_deref().is_some_and(|n| n.contains(what))
            });
        ensure!(announced, "no {reason} Event about {rejected:?}");
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_agent_reports_metrics_readiness_and_the_members_reasons() -> anyhow::Result<()> {
    let boot = bootstrap();
    let env = seeded_env(EnvOptions::with_members(1), &boot).await;
    let cluster = &env.members()[0];
    ensure!(cluster.name() == PULL);
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let mut opts = PullJoinOptions::new(PULL, env.host().server());
    opts.namespace = boot.namespace.clone();
    opts.host_ca_pem = Some(env.host().ca_pem().to_owned());
    let joined = join_pull(&host, &opts).await?;
    let admin = cluster.client().await?;
    let crd = flotilla_api::crdgen::applied_work_crd();
    install::install_crds(&admin, &[crd], "flotilla-tests", T).await?;
    let (member, token) = restricted_member(&admin, cluster.kube_config()).await?;
    let agent_host = client_of_kubeconfig(&joined.kubeconfig).await?;
    let start_agent = || {
        let mut agent_opts = AgentOptions::new(PULL, agent_host.clone(), member.clone());
        agent_opts.own_namespace = AGENT_NS.into();
        Agent::start(agent_opts)
    };
    let agent = start_agent();
    let addr = agent
        .serve("127.0.0.1:0".parse()?, MetricsAccess::Open)
        .await?;
    wait_for(T, "/readyz ready", || async {
        let (status, body) = http::get(addr, "/readyz").await?;
        ensure!(status == 200, "{status}: {body}");
        Ok(())
    })
    .await?;
    let _control_plane = boot.start_control_plane(&host, 1).await?;

    create_namespace(&host, NS).await?;
    FederatedObject::namespace(NS).apply(&host).await?;
    wait_namespace_in(std::slice::from_ref(&admin), NS).await?;
    FederatedObject::config_map(NS, "good", json!({"k": "v"}))
        .apply(&host)
        .await?;
    wait_present(T, &config_maps(&admin, NS), "good").await?;
    wait_for(T, "/metrics counting the applies", || async {
        let page = scrape(addr).await?;
        let applies = sample(&page, "flotilla_agent_applies_total ").unwrap_or(0.0);
        ensure!(applies >= 2.0, "{page}");
        ensure!(
            page.contains("flotilla_agent_work_last_sync_timestamp_seconds{work=")
                && sample(
                    &page,
                    "flotilla_agent_lease_last_renewal_timestamp_seconds "
                )
                .is_some_and(|t| t > 0.0)
                && page.contains("flotilla_agent_work_queue_depth "),
            "{page}"
        );
        Ok(())
    })
    .await?;

    FederatedObject::config_map(NS, "bad", json!({"not a valid key!": "x"}))
        .apply(&host)
        .await?;
    FederatedObject::new("Secret", "secrets", NS, "hidden")
        .template(json!({"data": {"k": "dg=="}}))
        .apply(&host)
        .await?;
    wait_rejected(&host, "Invalid", "ConfigMap demo/bad").await?;
    wait_rejected(&host, "Forbidden", "Secret demo/hidden").await?;
    // Every other Work keeps flowing.
    FederatedObject::config_map(NS, "after", json!({"k": "v"}))
        .apply(&host)
        .await?;
    wait_present(T, &config_maps(&admin, NS), "after").await?;
    let page = scrape(addr).await?;
    for reason in ["Invalid", "Forbidden"] {
        let line = format!("flotilla_agent_apply_failures_total{{reason=\"{reason}\"}} ");
        ensure!(sample(&page, &line).is_some_and(|n| n >= 1.0), "{page}");
    }

    // `flotilla agent --check` with the same two credentials.
    let dir = cluster.dir();
    let host_kc = dir.join("agent-ops-host.kubeconfig");
    std::fs::write(&host_kc, &joined.kubeconfig)?;
    let member_kc = dir.join("agent-ops-member.kubeconfig");
    let member_config = kubeconfig(cluster.server(), Some(cluster.ca_pem()), &token, AGENT_NS);
    std::fs::write(&member_kc, member_config)?;
    let ctx = Context::captured();
    let args = [
        "flotilla".to_owned(),
        "--kubeconfig".into(),
        member_kc.to_string_lossy().into_owned(),
        "agent".into(),
        "--cluster-name".into(),
        PULL.into(),
        "--host-kubeconfig".into(),
        host_kc.to_string_lossy().into_owned(),
        "--check".into(),
    ];
    let outcome = cli::run(args, ctx.clone()).await;
    let screen = ctx.out.text();
    ensure!(
        outcome.is_err(),
        "--check passed with a missing permission:\n{screen}"
    );
    ensure!(
        screen.contains("MISSING create secrets in namespace demo")
            && screen.contains("ok      create configmaps in namespace demo")
            && screen.contains("ok      patch works/status.multicluster.x-k8s.io in namespace flotilla-cluster-member1")
            && screen.contains("ok      create events.events.k8s.io in namespace flotilla-cluster-member1"),
        "{screen}"
    );
    ensure!(
        !screen.contains(&token) && !screen.contains(&joined.token),
        "no token on the screen"
    );
    std::fs::remove_file(host_kc).context("removing the test's host kubeconfig")?;
    std::fs::remove_file(member_kc).context("removing the test's member kubeconfig")?;

    an_object_applied_but_not_recorded_is_pruned_with_its_work(&host, &admin).await?;
    a_refused_record_creation_does_not_hold_the_bundle_back(&host, &admin).await?;
    an_unresolved_manifest_keeps_what_was_applied(&host, &admin).await?;
    agent.stop().await;
    let agent =
        a_restart_prunes_what_was_applied_but_not_recorded(&host, &admin, start_agent).await?;
    agent.stop().await;
    Ok(())
}

/// Waits until no Work in the host has a manifest of the ConfigMap `name` (it left its
/// bundle) and, when `applied_works`, no AppliedWork in the member records it.
async fn wait_work_gone(
    host: &Client,
    admin: &Client,
    name: &str,
    applied_works: bool,
) -> anyhow::Result<()> {
    let works: Api<Work> = Api::namespaced(host.clone(), &cluster_namespace(PULL));
    let records: Api<AppliedWork> = Api::all(admin.clone());
    let is_it =
        |kind: &str, namespace: &str, n: &str| kind == "ConfigMap" && namespace == NS && n == name;
    wait_for(
        T,
        &format!("the manifest of {name} and its record gone"),
        || async {
            let left: Vec<_> = works
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|w| {
                    w.spec.workload.manifests.iter().enumerate().any(|(i, m)| {
                        let id = identify(i, m);
                        is_it(&id.kind, &id.namespace, &id.name)
                    })
                })
                .map(|w| w.name_any())
                .collect();
            ensure!(left.is_empty(), "Works {left:?} still list it");
            if applied_works {
                let recorded: Vec<_> = records
                    .list(&ListParams::default())
                    .await?
                    .items
                    .into_iter()
                    .filter(|a| {
                        a.status.iter().flat_map(|s| &s.applied_resources).any(|r| {
                            let id = &r.identifier;
                            is_it(&id.kind, &id.namespace, &id.name)
                        })
                    })
                    .map(|a| a.name_any())
                    .collect();
                ensure!(recorded.is_empty(), "AppliedWorks {recorded:?} record it");
            }
            Ok(())
        },
    )
    .await
}

/// The agent applies a ConfigMap but may not write its record (no permission on
/// `appliedworks/status`, as when the member API server fails between the two requests);
/// the federated object is deleted meanwhile: the member object goes with its Work, not
/// left behind as a stray (what the chaos soak found).
async fn an_object_applied_but_not_recorded_is_pruned_with_its_work(
    host: &Client,
    admin: &Client,
) -> anyhow::Result<()> {
    let name = "unrecorded";
    allow_records(admin, Records::NoStatus).await?;
    let cm = FederatedObject::config_map(NS, name, json!({"k": "v"}))
        .apply(host)
        .await?;
    wait_present(T, &config_maps(admin, NS), name).await?;
    // The refused record does not hold the bundle back: the manifest is reported applied,
    // and the record failure is a condition of the Work.
    wait_recorded(host, name, Some("appliedworks/status")).await?;
    cm.delete().await?;
    cm.wait_gone(T).await?;
    wait_work_gone(host, admin, name, true).await?;
    allow_records(admin, Records::All).await?;
    wait_absent(T, &config_maps(admin, NS), name).await?;
    wait_recorded(host, "good", None).await
}

/// A new bundle whose AppliedWork the member refuses to create (the agent may not create
/// AppliedWorks) is applied all the same, and the refusal is a `Recorded=False` condition
/// of its Work naming the member's reason; once creation is allowed again, the record is
/// created with what was applied and the condition goes.
async fn a_refused_record_creation_does_not_hold_the_bundle_back(
    host: &Client,
    admin: &Client,
) -> anyhow::Result<()> {
    let (ns, name) = ("norecord", "first");
    allow_records(admin, Records::NoCreate).await?;
    create_namespace(host, ns).await?;
    FederatedObject::namespace(ns).apply(host).await?;
    wait_namespace_in(std::slice::from_ref(admin), ns).await?;
    FederatedObject::config_map(ns, name, json!({"k": "v"}))
        .apply(host)
        .await?;
    wait_present(T, &config_maps(admin, ns), name).await?;
    wait_recorded(host, name, Some("cannot create resource \"appliedworks\"")).await?;
    let records: Api<AppliedWork> = Api::all(admin.clone());
    let recorded = || async {
        let list = records.list(&ListParams::default()).await?.items;
        anyhow::Ok(list.into_iter().any(|a| {
            a.status
                .iter()
                .flat_map(|s| &s.applied_resources)
                .any(|r| r.identifier.namespace == ns && r.identifier.name == name)
        }))
    };
    ensure!(
        !recorded().await?,
        "recorded although creation is forbidden"
    );
    allow_records(admin, Records::All).await?;
    wait_recorded(host, name, None).await?;
    wait_for(T, "the record created with what was applied", || async {
        ensure!(recorded().await?, "no AppliedWork records {ns}/{name}");
        Ok(())
    })
    .await
}

/// A Work written by hand (the Work API's own use), its manifest then changed to a version
/// the member does not serve: the manifest fails, reported with the member's answer, and
/// the object applied before stays — a round that cannot resolve a manifest prunes
/// nothing it names (a fleet run pruned objects whose discovery met a refused connection).
/// The Work's deletion removes it.
async fn an_unresolved_manifest_keeps_what_was_applied(
    host: &Client,
    admin: &Client,
) -> anyhow::Result<()> {
    let name = "by-hand";
    let works: Api<Work> = Api::namespaced(host.clone(), &cluster_namespace(PULL));
    let manifest = |api_version: &str| {
        // Labelled managed, as the control plane's manifests are: the agent prunes only
        // what is still Flotilla's.
        json!({"apiVersion": api_version, "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": NS, "labels": {MANAGED_LABEL: "true"}},
               "data": {"k": "v"}})
    };
    let spec = WorkSpec {
        workload: WorkloadTemplate {
            manifests: vec![manifest("v1")],
        },
        ..WorkSpec::default()
    };
    works
        .create(&PostParams::default(), &Work::new(name, spec))
        .await?;
    let cms = config_maps(admin, NS);
    wait_present(T, &cms, name).await?;
    let applied = cms.get(name).await?.uid();
    let unserved = json!({"spec": {"workload": {"manifests": [manifest("v9")]}}});
    works
        .patch(name, &PatchParams::default(), &Patch::Merge(&unserved))
        .await?;
    wait_for(T, "the unserved version reported", || async {
        let status = works.get(name).await?.status.unwrap_or_default();
        let reported = (status.manifest_conditions.iter())
            .flat_map(|m| &m.conditions)
            .any(|c| c.status == "False" && c.message.contains("does not serve ConfigMap in v9"));
        ensure!(reported, "{status:?}");
        Ok(())
    })
    .await?;
    let kept = cms.get_opt(name).await?.and_then(|c| c.uid());
    ensure!(
        kept == applied,
        "the applied ConfigMap was pruned: {kept:?}"
    );
    works.delete(name, &Default::default()).await?;
    wait_absent(T, &cms, name).await
}

/// Waits for the bundle listing the ConfigMap `name` to report it applied, with a
/// `Recorded=False` condition on the Work whose message contains `failure` (`None`:
/// without one).
async fn wait_recorded(host: &Client, name: &str, failure: Option<&str>) -> anyhow::Result<()> {
    let works: Api<Work> = Api::namespaced(host.clone(), &cluster_namespace(PULL));
    wait_for(
        T,
        &format!("the bundle of {name} applied, record failure: {failure:?}"),
        || async {
            let list = works.list(&ListParams::default()).await?.items;
            let work = list
                .iter()
                .find(|w| holds(w, name))
                .context("no Work lists it")?;
            let status = work.status.clone().unwrap_or_default();
            let applied = status.manifest_conditions.iter().any(|m| {
                m.identifier.name == name
                    && m.conditions
                        .iter()
                        .any(|c| c.type_ == "Applied" && c.status == "True")
            });
            ensure!(applied, "not reported applied: {status:?}");
            let found = status.conditions.iter().find(|c| c.type_ == RECORDED);
            match (found, failure) {
                (None, None) => {}
                (Some(f), Some(fragment)) => ensure!(
                    f.status == "False"
                        && f.reason == "RecordFailed"
                        && f.message.contains(fragment),
                    "{f:?}"
                ),
                (found, _) => anyhow::bail!("Recorded condition {found:?}"),
            }
            Ok(())
        },
    )
    .await
}

/// The same with the agent stopped between its apply and the record it could not write,
/// and the Work deleted while it is away: the restarted agent still prunes the object.
async fn a_restart_prunes_what_was_applied_but_not_recorded(
    host: &Client,
    admin: &Client,
    start_agent: impl Fn() -> Agent,
) -> anyhow::Result<Agent> {
    let name = "unrecorded-restart";
    allow_records(admin, Records::NoStatus).await?;
    let agent = start_agent();
    let cm = FederatedObject::config_map(NS, name, json!({"k": "v"}))
        .apply(host)
        .await?;
    wait_present(T, &config_maps(admin, NS), name).await?;
    agent.stop().await;
    cm.delete().await?;
    cm.wait_gone(T).await?;
    wait_work_gone(host, admin, name, false).await?;
    allow_records(admin, Records::All).await?;
    let agent = start_agent();
    wait_absent(T, &config_maps(admin, NS), name).await?;
    wait_work_gone(host, admin, name, true).await?;
    Ok(agent)
}

async fn can_list(client: &Client, ar: &ApiResource) -> anyhow::Result<bool> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

async fn set_propagation(host: &Client, ftc: &str, mode: &str) -> anyhow::Result<()> {
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    let patch = Patch::Merge(json!({"spec": {"propagation": mode}}));
    ftcs.patch(ftc, &PatchParams::default(), &patch).await?;
    Ok(())
}

/// Applies the member manifests `join --mode pull` generates, but the Deployment and its
/// Secret (the agent runs in this process) and the CRD (installed already).
async fn apply_member_side(admin: &Client, manifests: &serde_json::Value) -> anyhow::Result<()> {
    let items: Vec<_> = manifests["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| {
            !matches!(
                i["kind"].as_str(),
                Some("Deployment" | "Secret" | "CustomResourceDefinition")
            )
        })
        .cloned()
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    cli::pull::apply_list(admin, &list).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_generated_member_role_follows_the_enabled_types() -> anyhow::Result<()> {
    let boot = bootstrap();
    let env = seeded_env(EnvOptions::with_members(1), &boot).await;
    let cluster = &env.members()[0];
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    // Secrets are not federated at the join.
    set_propagation(&host, "secrets", "Disabled").await?;
    let mut opts = PullJoinOptions::new(PULL, env.host().server());
    opts.namespace = boot.namespace.clone();
    opts.host_ca_pem = Some(env.host().ca_pem().to_owned());
    let joined = join_pull(&host, &opts).await?;
    let admin = cluster.client().await?;
    let crd = flotilla_api::crdgen::applied_work_crd();
    install::install_crds(&admin, &[crd], "flotilla-tests", T).await?;
    let role = MemberRole::Types(joined.type_rules.clone());
    let manifests = agent_manifests(PULL, DEFAULT_NAMESPACE, "unused", &joined.kubeconfig, &role);
    apply_member_side(&admin, &manifests).await?;
    let token = service_account_token(&admin, DEFAULT_NAMESPACE, "flotilla-agent").await?;
    let mut config = cluster.kube_config();
    config.auth_info.token = Some(token.into());
    let member = Client::try_from(config)?;
    let secrets = ApiResource::erase::<Secret>(&());
    let pvs = ApiResource::erase::<PersistentVolume>(&());
    ensure!(
        !can_list(&member, &secrets).await?,
        "Secrets allowed before they are enabled"
    );
    ensure!(
        can_list(&member, &ApiResource::erase::<ConfigMap>(&())).await?,
        "ConfigMaps"
    );

    let agent = Agent::start(AgentOptions::new(
        PULL,
        client_of_kubeconfig(&joined.kubeconfig).await?,
        member.clone(),
    ));
    let _control_plane = boot.start_control_plane(&host, 1).await?;
    create_namespace(&host, NS).await?;
    FederatedObject::namespace(NS).apply(&host).await?;
    wait_namespace_in(std::slice::from_ref(&admin), NS).await?;
    FederatedObject::config_map(NS, "cfg", json!({"k": "v"}))
        .apply(&host)
        .await?;
    wait_present(T, &config_maps(&admin, NS), "cfg").await?;

    set_propagation(&host, "secrets", "Enabled").await?;
    FederatedObject::new("Secret", "secrets", NS, "s1")
        .template(json!({"data": {"k": "dg=="}}))
        .apply(&host)
        .await?;
    let member_secrets: Api<Secret> = Api::namespaced(admin.clone(), NS);
    wait_present(T, &member_secrets, "s1").await?;
    ensure!(
        can_list(&member, &secrets).await?,
        "Secrets forbidden once enabled"
    );
    ensure!(
        !can_list(&member, &pvs).await?,
        "a type no config names is allowed"
    );

    set_propagation(&host, "secrets", "Disabled").await?;
    wait_for(T, "Secrets forbidden again once disabled", || async {
        ensure!(!can_list(&member, &secrets).await?, "still allowed");
        Ok(())
    })
    .await?;
    agent.stop().await;
    Ok(())
}
