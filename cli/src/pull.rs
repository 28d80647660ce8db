//! Pull mode on the command line: `flotilla join --mode pull NAME` (registration in the
//! host over [`flotilla_controllers::pull_join`], then the agent's manifests applied to the member through
//! `--cluster-context`, or printed for `kubectl apply -f -`) and `flotilla agent` (the
//! agent, run inside the member, see [`flotilla_agent`]).

use std::{net::SocketAddr, path::PathBuf, sync::Arc, sync::OnceLock, time::Duration};

use anyhow::Context as _;
use kube::{
    Api,
    api::{DynamicObject, Patch, PatchParams},
    core::GroupVersionKind,
    discovery::pinned_kind,
};
use serde_json::Value;

use super::{
    Context, GlobalArgs, access,
    join::{JoinArgs, MemberRoleArg},
    parse_duration,
};
use flotilla_agent::{Agent, AgentOptions, check, host_credential};
use flotilla_controllers::pull_join::{MemberRole, PullJoinOptions, agent_manifests, join_pull};
use flotilla_multicluster::http::{
    MetricsAccess,
    auth::{Authenticator, Exposure, exposure},
};
use tracing::{info, warn};

/// Arguments of `flotilla agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// Name of this cluster (its KubeFedCluster in the host).
    #[arg(long, value_name = "NAME")]
    pub cluster_name: String,
    /// Kubeconfig of the agent's host credential (printed by `flotilla join --mode pull`).
    #[arg(long, value_name = "PATH")]
    pub host_kubeconfig: PathBuf,
    /// Context of that kubeconfig (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub host_context: Option<String>,
    /// The member namespace the agent runs in; never deleted by pruning.
    #[arg(long, default_value = flotilla_api::DEFAULT_NAMESPACE, value_name = "NS")]
    pub agent_namespace: String,
    /// How often every Work is checked against the member again (drift repair, status).
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub resync: Duration,
    /// Duration of the heartbeat Lease; the host marks the cluster Offline after it lapses.
    #[arg(long, default_value = "40s", value_parser = parse_duration, value_name = "DURATION")]
    pub lease_duration: Duration,
    /// Address of `/metrics`, `/healthz` and `/readyz`. On a non-loopback address `/metrics`
    /// needs a bearer token the member allows `get` on the URL `/metrics`.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    pub metrics_addr: SocketAddr,
    /// Serve `/metrics` on a non-loopback `--metrics-addr` without authentication.
    #[arg(long)]
    pub metrics_insecure_no_auth: bool,
    /// Do not run: check what both credentials may do, print one screen, exit non-zero when
    /// something the agent needs is missing.
    #[arg(long)]
    pub check: bool,
    /// The file the agent keeps its renewed host token in (the host client reads it from
    /// there; written 0600). Default: a file in the temporary directory.
    #[arg(long, value_name = "PATH")]
    pub host_token_file: Option<PathBuf>,
    /// Lifetime asked for each renewed host token (10 minutes at least).
    #[arg(long, default_value = "1h", value_parser = parse_duration, value_name = "DURATION")]
    pub host_token_lifetime: Duration,
    /// Renew the host token at most this long after it was issued (two thirds of its life
    /// otherwise); for tests and drills.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub host_token_renewal_interval: Option<Duration>,
    /// The member Secret (in `--agent-namespace`) whose `kubeconfig` key the agent's host
    /// kubeconfig came from: each renewed token is written back there, so that a restarted
    /// agent starts from a valid token. Empty: not written back.
    #[arg(long, default_value = flotilla_controllers::pull_join::KUBECONFIG_SECRET, value_name = "NAME")]
    pub host_kubeconfig_secret: String,
}

/// Runs `flotilla agent` until shutdown. The member is the `--kubeconfig`/`--context`
/// cluster (in a Pod: in-cluster).
pub async fn agent(global: &GlobalArgs, args: AgentArgs, ctx: &Context) -> anyhow::Result<()> {
    let member = access::load(global.kubeconfig.as_deref(), global.context.as_deref())
        .await
        .context("member cluster")?
        .client()?;
    let host_access = access::load(Some(&args.host_kubeconfig), args.host_context.as_deref())
        .await
        .context("host cluster (--host-kubeconfig)")?;
    let (host, renewal) = renewing_host(&args, host_access.config.clone(), &member)?;
    if args.check {
        let findings = check::run(&args.cluster_name, &host, &member).await;
        ctx.out.write(check::render(&findings));
        let problems = findings.iter().filter(|f| f.is_problem()).count();
        anyhow::ensure!(
            problems == 0,
            "the agent's credentials miss {problems} thing(s)"
        );
        return Ok(());
    }
    let access = match exposure(&args.metrics_addr, args.metrics_insecure_no_auth) {
        Exposure::Authenticated => MetricsAccess::Authenticated(Arc::new(OnceLock::from(
            Authenticator::new(member.clone()),
        ))),
        Exposure::InsecureOpen => {
            warn!(addr = %args.metrics_addr, "/metrics is served without authentication (--metrics-insecure-no-auth)");
            MetricsAccess::Open
        }
        Exposure::Loopback => MetricsAccess::Open,
    };
    let renewer_host = host.clone();
    let mut opts = AgentOptions::new(&args.cluster_name, host, member);
    opts.own_namespace = args.agent_namespace;
    opts.resync = args.resync;
    opts.lease_duration = args.lease_duration;
    let agent = Agent::start(opts);
    // Ends with the shutdown.
    let _renewer = renewal.map(|credential| {
        let stop = ctx.shutdown.clone();
        let metrics = agent.observer().metrics.clone();
        tokio::spawn(host_credential::run(
            renewer_host,
            credential,
            metrics,
            stop,
        ))
    });
    let addr = agent
        .serve(args.metrics_addr, access)
        .await
        .with_context(|| format!("listening on {}", args.metrics_addr))?;
    info!(%addr, "serving /metrics, /healthz and /readyz");
    ctx.shutdown.cancelled().await;
    agent.stop().await;
    Ok(())
}

/// The agent's host client reading its token from `--host-token-file`, and what the
/// renewer renews; no renewer for a host credential that is no bearer token.
fn renewing_host(
    args: &AgentArgs,
    mut config: kube::Config,
    member: &kube::Client,
) -> anyhow::Result<(kube::Client, Option<host_credential::HostCredential>)> {
    let file = args.host_token_file.clone().unwrap_or_else(|| {
        let name = format!("flotilla-agent-{}-host-token", args.cluster_name);
        std::env::temp_dir().join(name)
    });
    // A file that cannot be written (no writable volume there) leaves the token as the
    // kubeconfig has it, unrenewed: the agent runs until that token expires.
    let renewing = match host_credential::use_token_file(&mut config, &file) {
        Ok(renewing) => renewing,
        Err(error) => {
            warn!(file = %file.display(), %error, "cannot keep the host token in --host-token-file; it is not renewed");
            false
        }
    };
    let host =
        flotilla_multicluster::credentials::client(config).context("building the host client")?;
    if !renewing {
        return Ok((host, None));
    }
    let persist = match args.host_kubeconfig_secret.as_str() {
        "" => None,
        secret => Some(host_credential::Persist {
            member: member.clone(),
            namespace: args.agent_namespace.clone(),
            secret: secret.to_owned(),
            key: flotilla_controllers::pull_join::KUBECONFIG_KEY.to_owned(),
            kubeconfig: kube::config::Kubeconfig::read_from(&args.host_kubeconfig)
                .context("reading --host-kubeconfig")?,
        }),
    };
    let credential = host_credential::HostCredential {
        namespace: flotilla_api::work::cluster_namespace(&args.cluster_name),
        service_account: flotilla_controllers::pull_join::AGENT_ACCOUNT.to_owned(),
        lifetime: args.host_token_lifetime,
        renewal_interval: args.host_token_renewal_interval,
        token_file: file,
        persist,
    };
    Ok((host, Some(credential)))
}

/// Runs `flotilla join --mode pull`.
pub async fn join(global: &GlobalArgs, args: JoinArgs, ctx: &Context) -> anyhow::Result<()> {
    let host = access::load(global.kubeconfig.as_deref(), global.context.as_deref())
        .await
        .context("host cluster")?;
    let mut opts = PullJoinOptions::new(
        &args.name,
        &args.host_server.clone().unwrap_or_else(|| host.server()),
    );
    opts.namespace = global.kubefed_namespace.clone();
    opts.host_ca_pem = host.ca_pem();
    opts.labels = args.labels.iter().cloned().collect();
    opts.token_timeout = args.token_timeout;
    opts.token_lifetime = args.token_lifetime;
    if args.dry_run {
        ctx.out.line(format!(
            "Dry run: nothing is changed. In the host: Namespace {ns}, ServiceAccount/Role/RoleBinding {ns}/flotilla-agent \
             (Works of {ns}: read, status: write; Lease {ns}/flotilla-agent; Events; ConfigMaps of {ns}: read; tokens of itself), ConfigMap {ns}/flotilla-agent-types (the enabled types), a bound token of the agent (renewed by the agent), and KubeFedCluster {}/{} with mode Pull. \
             In the member: the agent's namespace, kubeconfig Secret (and a Role to write its renewed token there), ServiceAccount, ClusterRole(Binding) (the enabled types, or every resource with --member-role all), AppliedWork CRD and Deployment.",
            opts.namespace,
            args.name,
            ns = flotilla_api::work::cluster_namespace(&args.name),
        ));
        return Ok(());
    }
    let joined = join_pull(&host.client()?, &opts).await?;
    let role = match args.member_role {
        MemberRoleArg::Types => MemberRole::Types(joined.type_rules.clone()),
        MemberRoleArg::All => MemberRole::All,
    };
    let manifests = agent_manifests(
        &args.name,
        &opts.namespace,
        &args.image,
        &joined.kubeconfig,
        &role,
    );
    match &args.contexts.cluster_context {
        Some(member_context) => {
            let member = access::load(global.kubeconfig.as_deref(), Some(member_context))
                .await
                .context("member cluster")?
                .client()?;
            apply_list(&member, &manifests).await?;
            ctx.out.line(format!(
                "cluster {} joined in pull mode; the agent is deployed in context {member_context}",
                args.name
            ));
        }
        None => {
            ctx.out.write(serde_saphyr::to_string(&manifests)?);
            eprintln!(
                "cluster {} registered in pull mode; apply the manifests above in the member (they hold the agent's host credential)",
                args.name
            );
        }
    }
    Ok(())
}

/// Applies every item of a `List` (server-side apply, kinds found through discovery).
pub async fn apply_list(client: &kube::Client, list: &Value) -> anyhow::Result<()> {
    for item in list["items"].as_array().into_iter().flatten() {
        let api_version = item["apiVersion"].as_str().unwrap_or_default();
        let kind = item["kind"].as_str().unwrap_or_default();
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let (ar, caps) = pinned_kind(client, &GroupVersionKind::gvk(group, version, kind))
            .await
            .with_context(|| format!("the member does not serve {kind}"))?;
        let api: Api<DynamicObject> = match item["metadata"]["namespace"].as_str() {
            Some(ns) if caps.scope == kube::discovery::Scope::Namespaced => {
                Api::namespaced_with(client.clone(), ns, &ar)
            }
            _ => Api::all_with(client.clone(), &ar),
        };
        let pp = PatchParams::apply(flotilla_api::FIELD_MANAGER).force();
        api.patch(name, &pp, &Patch::Apply(item))
            .await
            .with_context(|| format!("applying {kind} {name} in the member"))?;
    }
    Ok(())
}
