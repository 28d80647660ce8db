//! The pull agent's own host credential, on real clusters: `join_pull` issues a bound token
//! (TokenRequest) and no token Secret; the agent (run in this process, its host client
//! reading the token from a file) renews it every few seconds through the host's
//! TokenRequest API and keeps each new token in its member kubeconfig Secret, while Works
//! keep flowing and its heartbeat keeps the cluster Ready; its credential may request tokens
//! of its own ServiceAccount only.

use std::{sync::Arc, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_agent::{
    Agent, AgentOptions,
    host_credential::{self, HostCredential, Persist},
};
use flotilla_api::{DEFAULT_NAMESPACE, work::cluster_namespace};
use flotilla_controllers::{
    install,
    manager::ControlPlane,
    metrics::Metrics,
    pull_join::{AGENT_ACCOUNT, KUBECONFIG_KEY, KUBECONFIG_SECRET, PullJoinOptions, join_pull},
};
use flotilla_multicluster::http::MetricsText as _;
use flotilla_tests::{
    EnvOptions,
    federation::{Federation, bootstrap, federated_namespace, install_host, seeded_env},
    init_tracing, wait_for,
};
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::{Secret, ServiceAccount},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::credential_rotation::{NS, apply_fcm, condition, wait_propagated};

const T: Duration = Duration::from_secs(60);
const PULL: &str = "member1";
/// The agent's member namespace (holding its kubeconfig Secret).
const AGENT_NS: &str = "flotilla-agent-test";

/// The token the member Secret's kubeconfig holds.
async fn kept_token(member: &Client) -> anyhow::Result<String> {
    let secrets: Api<Secret> = Api::namespaced(member.clone(), AGENT_NS);
    let secret = secrets.get(KUBECONFIG_SECRET).await?;
    let data = secret.data.context("no data")?;
    let text = String::from_utf8(data.get(KUBECONFIG_KEY).context("no kubeconfig")?.0.clone())?;
    let kubeconfig = Kubeconfig::from_yaml(&text)?;
    let user = serde_json::to_value(&kubeconfig.auth_infos[0])?;
    let token = user["user"]["token"].as_str().context("no token")?;
    Ok(token.to_owned())
}

#[tokio::test]
async fn the_pull_agent_renews_its_bound_host_token_and_keeps_working() -> anyhow::Result<()> {
    init_tracing();
    let boot = bootstrap();
    let env = seeded_env(EnvOptions::with_members(1), &boot).await;
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let mut opts = PullJoinOptions::new(PULL, env.host().server());
    opts.namespace = boot.namespace.clone();
    opts.host_ca_pem = Some(env.host().ca_pem().to_owned());
    opts.labels.insert("name".into(), PULL.into());
    opts.token_lifetime = flotilla_core::credential::MIN_LIFETIME;
    let joined = join_pull(&host, &opts).await?;
    let host_ns = cluster_namespace(PULL);
    let secrets: Api<Secret> = Api::namespaced(host.clone(), &host_ns);
    let listed = secrets.list(&Default::default()).await?;
    ensure!(
        !listed.items.iter().any(|s| s.type_.as_deref()
            == Some("kubernetes.io/service-account-token")
            && s.metadata.name.as_deref() == Some("flotilla-agent-token")),
        "join_pull created a long-lived token Secret"
    );

    let member = env.members()[0].client().await?;
    let crd = flotilla_api::crdgen::applied_work_crd();
    install::install_crds(&member, &[crd], "flotilla-tests", T).await?;
    flotilla_tests::objects::create_namespace(&member, AGENT_NS).await?;
    let kept: Api<Secret> = Api::namespaced(member.clone(), AGENT_NS);
    let body = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": KUBECONFIG_SECRET},
                      "stringData": {KUBECONFIG_KEY: joined.kubeconfig}});
    kept.patch(
        KUBECONFIG_SECRET,
        &PatchParams::apply("flotilla-tests"),
        &Patch::Apply(body),
    )
    .await?;

    // The agent's host client, reading its token from a file the renewer replaces.
    let kubeconfig = Kubeconfig::from_yaml(&joined.kubeconfig)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &KubeConfigOptions::default())
            .await?;
    let dir = std::env::temp_dir().join(format!("flotilla-agent-cred-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("host-token");
    ensure!(
        host_credential::use_token_file(&mut config, &file)?,
        "no token to renew"
    );
    let agent_host = flotilla_multicluster::credentials::client(config)?;

    let cp = ControlPlane::start(host.clone(), DEFAULT_NAMESPACE, Arc::new(Metrics::new()));
    let mut agent_opts = AgentOptions::new(PULL, agent_host.clone(), member.clone());
    agent_opts.resync = Duration::from_secs(1);
    agent_opts.lease_duration = Duration::from_secs(3);
    let agent = Agent::start(agent_opts);
    let stop = CancellationToken::new();
    let credential = HostCredential {
        namespace: host_ns.clone(),
        service_account: AGENT_ACCOUNT.into(),
        lifetime: flotilla_core::credential::MIN_LIFETIME,
        renewal_interval: Some(Duration::from_secs(2)),
        token_file: file.clone(),
        persist: Some(Persist {
            member: member.clone(),
            namespace: AGENT_NS.into(),
            secret: KUBECONFIG_SECRET.into(),
            key: KUBECONFIG_KEY.into(),
            kubeconfig,
        }),
    };
    let metrics = agent.observer().metrics.clone();
    let renewer = tokio::spawn(host_credential::run(
        agent_host.clone(),
        credential,
        metrics.clone(),
        stop.clone(),
    ));
    let fed = Federation {
        control_plane: Some(cp),
        host: host.clone(),
        members: vec![member.clone()],
        env,
    };

    let outcome = renewals_while_works_flow(&fed, &file, &joined.token).await;
    let scoped = only_its_own_tokens(&agent_host, &host_ns).await;
    stop.cancel();
    renewer.await?;
    let counted = renewals_counted(&metrics.encode());
    agent.stop().await;
    std::fs::remove_dir_all(&dir)?;
    outcome?;
    let (renewed, failed, expiry) = counted;
    ensure!(
        renewed >= 3 && failed == 0,
        "the agent counted {renewed} renewals and {failed} failures"
    );
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    ensure!(
        expiry > now,
        "the host token's expiry on /metrics ({expiry}) is not in the future ({now})"
    );
    scoped
}

/// Renewed and failed host-token renewals, and the token's expiry, from the agent's
/// `/metrics` text.
fn renewals_counted(page: &str) -> (u64, u64, i64) {
    let value = |prefix: &str| {
        page.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let count = |result: &str| {
        let prefix = format!("flotilla_agent_host_token_renewals_total{{result=\"{result}\"}} ");
        value(&prefix) as u64
    };
    let expiry = value("flotilla_agent_host_token_expiry_timestamp_seconds ") as i64;
    (count("renewed"), count("failed"), expiry)
}

/// Several renewals (token file and member Secret) while objects propagate through Works
/// and the cluster stays Ready.
async fn renewals_while_works_flow(
    fed: &Federation,
    file: &std::path::Path,
    first: &str,
) -> anyhow::Result<()> {
    federated_namespace(fed, NS).await?;
    let mut seen = vec![first.to_owned()];
    let mut round = 0;
    // kube reads the token file again about once a minute: run past a reload.
    let until = tokio::time::Instant::now() + Duration::from_secs(70);
    while tokio::time::Instant::now() < until || seen.len() < 4 {
        round += 1;
        ensure!(round <= 200, "only {} tokens in {round} rounds", seen.len());
        apply_fcm(fed, "agent-renewing", &round.to_string()).await?;
        wait_propagated(fed, "agent-renewing", &round.to_string()).await?;
        let in_file = std::fs::read_to_string(file)?;
        let in_secret = kept_token(&fed.members[0]).await?;
        for token in [in_file, in_secret] {
            if !seen.contains(&token) {
                seen.push(token);
            }
        }
        let (status, reason) = condition(&fed.host, PULL, "Ready").await?;
        ensure!(
            status == "True",
            "{PULL} not Ready while renewing: {reason}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!(
        "agent host tokens seen in {round} propagation rounds: {}",
        seen.len()
    );
    // The file and the Secret end with the same, newest token.
    wait_for(T, "the file and the Secret agree", || async {
        let (a, b) = (
            std::fs::read_to_string(file)?,
            kept_token(&fed.members[0]).await?,
        );
        ensure!(a == b, "they differ");
        Ok(())
    })
    .await
}

/// The agent's host credential may request tokens of its own ServiceAccount only.
async fn only_its_own_tokens(agent_host: &Client, ns: &str) -> anyhow::Result<()> {
    let sas: Api<ServiceAccount> = Api::namespaced(agent_host.clone(), ns);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(600),
            ..Default::default()
        },
        ..Default::default()
    };
    let refused = sas
        .create_token_request("default", &PostParams::default(), &request)
        .await;
    ensure!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "a token of another ServiceAccount was not refused with 403: {:?}",
        refused.as_ref().map(|_| "issued")
    );
    sas.create_token_request(AGENT_ACCOUNT, &PostParams::default(), &request)
        .await
        .context("its own token refused")?;
    Ok(())
}
