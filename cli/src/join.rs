//! `flotilla join` and `flotilla unjoin`: kubefedctl's commands over
//! [`flotilla_controllers::join`]. The member's API endpoint and CA come from its kubeconfig context.

use std::{collections::BTreeMap, time::Duration};

use anyhow::Context as _;
use flotilla_api::KubeFedCluster;
use kube::Api;
use serde_json::json;

use super::access::{self, ClusterAccess};
use super::{Context, GlobalArgs, parse_duration, parse_label};
use flotilla_controllers::join::{
    JoinOptions, join as join_cluster, rotate_credentials, unjoin as unjoin_cluster,
};

/// Examples of `flotilla join --help`.
pub const JOIN_EXAMPLES: &str = "\
Examples:
  # Join the cluster of context c1 as cluster1; the host is context host
  flotilla join cluster1 --cluster-context c1 --host-cluster-context host

  # Label it for placement selectors, and show what would be created first
  flotilla join cluster1 --cluster-context c1 --label region=eu --dry-run

  # Move a cluster joined with a long-lived token to a rotating one (30-minute tokens)
  flotilla join cluster1 --cluster-context c1 --rotate-credentials --token-lifetime 30m";

/// Examples of `flotilla unjoin --help`.
pub const UNJOIN_EXAMPLES: &str = "\
Examples:
  flotilla unjoin cluster1 --cluster-context c1 --host-cluster-context host

  # The member is gone for good: remove only the host side
  flotilla unjoin cluster1 --force";

/// How a member cluster is joined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum JoinMode {
    /// The control plane writes to the member's API server with a member credential.
    #[default]
    Push,
    /// An agent in the member pulls its inventory from the host; the host holds no
    /// credential of the member.
    Pull,
}

/// Arguments of `flotilla join`.
#[derive(Debug, Clone, clap::Args)]
pub struct JoinArgs {
    /// Name of the member cluster (its KubeFedCluster).
    pub name: String,
    /// Which kubeconfig contexts reach the member and the host.
    #[command(flatten)]
    pub contexts: Contexts,
    /// The member's API endpoint as the control plane reaches it (default: the server of
    /// the member's context).
    #[arg(long, value_name = "URL")]
    pub api_endpoint: Option<String>,
    /// Name of the host Secret that holds the member's token (default: NAME-token).
    #[arg(long, value_name = "NAME")]
    pub secret_name: Option<String>,
    /// Print what would be created and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Fail when the cluster is already joined (default: update it).
    #[arg(long)]
    pub error_on_existing: bool,
    /// A label for the KubeFedCluster (repeatable); placement selectors match them.
    #[arg(long = "label", short = 'l', value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Pull mode: how long to wait for the host's CA in the cluster's namespace (when the
    /// host kubeconfig names none).
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub token_timeout: Duration,
    /// Lifetime (10m at least) of the member token the host holds (push mode; the control
    /// plane renews it two thirds in, through the member's TokenRequest API) or of the
    /// agent's host token (pull mode; the agent renews it).
    #[arg(long, default_value = "1h", value_parser = parse_duration, value_name = "DURATION")]
    pub token_lifetime: Duration,
    /// Move an already joined push cluster to a bound, rotating token: only its
    /// ServiceAccount, a Role to renew the token, and the host Secret are written (no
    /// propagated object); the long-lived token Secret of an earlier join is deleted.
    #[arg(long)]
    pub rotate_credentials: bool,
    /// `push` (kubefed's way) or `pull`: an agent in the member pulls its objects from the
    /// host, and the host holds no credential of the member (see docs/pull-mode.md).
    #[arg(long, value_enum, default_value_t = JoinMode::Push)]
    pub mode: JoinMode,
    /// Pull mode: the host API server's address as the agent reaches it (default: the
    /// server of the host context).
    #[arg(long, value_name = "URL")]
    pub host_server: Option<String>,
    /// Pull mode: the agent's container image.
    #[arg(long, default_value = "flotilla:latest", value_name = "IMAGE")]
    pub image: String,
    /// Pull mode: the agent's member ClusterRole — `types`: the enabled federated types,
    /// kept in step as types are enabled or disabled; `all`: every resource.
    #[arg(long, value_enum, default_value_t = MemberRoleArg::Types)]
    pub member_role: MemberRoleArg,
}

/// `--member-role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MemberRoleArg {
    /// The enabled federated types only.
    Types,
    /// Every resource.
    All,
}

/// Arguments of `flotilla unjoin`.
#[derive(Debug, Clone, clap::Args)]
pub struct UnjoinArgs {
    /// Name of the member cluster.
    pub name: String,
    /// Which kubeconfig contexts reach the member and the host.
    #[command(flatten)]
    pub contexts: Contexts,
    /// Remove the host side even when the member cannot be reached or cleaned up.
    #[arg(long)]
    pub force: bool,
}

/// The kubeconfig contexts of `join` and `unjoin`: the same two flags with the same
/// defaults, resolved in one place.
#[derive(Debug, Clone, clap::Args)]
pub struct Contexts {
    /// Kubeconfig context of the member cluster (default: NAME).
    #[arg(long, value_name = "CONTEXT")]
    pub cluster_context: Option<String>,
}

impl Contexts {
    /// The member's context: `--cluster-context`, else the cluster's name.
    fn member(&self, name: &str) -> String {
        self.cluster_context
            .clone()
            .unwrap_or_else(|| name.to_owned())
    }

    /// The host's access: `--context` (alias `--host-cluster-context`), else the current one.
    async fn host(&self, global: &GlobalArgs) -> anyhow::Result<ClusterAccess> {
        access::load(global.kubeconfig.as_deref(), global.context.as_deref())
            .await
            .context("host cluster")
    }
}

fn host_name(host: &ClusterAccess) -> String {
    // kubefedctl names the member's service account `<cluster>-<host context>`.
    access::dns_label(host.context.as_deref().unwrap_or("host"), 30)
}

/// Runs `flotilla join` for a push member (`--mode pull` is [`super::pull::join`]).
pub async fn join(global: &GlobalArgs, args: JoinArgs, ctx: &Context) -> anyhow::Result<()> {
    let host = args.contexts.host(global).await?;
    let member_context = args.contexts.member(&args.name);
    let member = access::load(global.kubeconfig.as_deref(), Some(&member_context))
        .await
        .context("member cluster")?;
    let mut opts = JoinOptions::new(
        &args.name,
        &args.api_endpoint.clone().unwrap_or_else(|| member.server()),
    );
    opts.host_name = host_name(&host);
    opts.namespace = global.kubefed_namespace.clone();
    opts.ca_pem = member.ca_pem();
    opts.labels = args.labels.iter().cloned().collect::<BTreeMap<_, _>>();
    opts.secret_name = args.secret_name.clone();
    opts.error_on_existing = args.error_on_existing;
    opts.token_lifetime = args.token_lifetime;

    if args.dry_run {
        ctx.out.write(dry_run_plan(
            &opts,
            &member_context,
            host.context.as_deref().unwrap_or("in-cluster"),
        )?);
        return Ok(());
    }
    let host_client = host.client()?;
    let member_client = member.client()?;
    if args.rotate_credentials {
        let rotated = rotate_credentials(&host_client, &member_client, &opts).await?;
        ctx.out.line(format!(
            "cluster {}: the host Secret {}/{} holds a rotating token (expires {}){}",
            args.name,
            opts.namespace,
            rotated.secret,
            rotated.expires_at,
            if rotated.legacy_secret_deleted {
                "; the long-lived token Secret was deleted"
            } else {
                ""
            }
        ));
        return Ok(());
    }
    let kfc = join_cluster(&host_client, &member_client, &opts).await?;
    ctx.out.line(format!(
        "cluster {} joined (KubeFedCluster {}/{}, endpoint {})",
        args.name, opts.namespace, args.name, kfc.spec.api_endpoint
    ));
    Ok(())
}

/// What `join --dry-run` prints: every object in each cluster, then the KubeFedCluster.
pub fn dry_run_plan(
    opts: &JoinOptions,
    member_context: &str,
    host_context: &str,
) -> anyhow::Result<String> {
    let ns = &opts.namespace;
    let sa = opts.service_account();
    let role = format!("kubefed-controller-manager:{sa}");
    let kfc = json!({
        "apiVersion": format!("{}/{}", flotilla_api::CORE_GROUP, flotilla_api::V1BETA1),
        "kind": "KubeFedCluster",
        "metadata": {"name": opts.cluster_name, "namespace": ns, "labels": opts.labels},
        "spec": {
            "apiEndpoint": opts.api_endpoint,
            "caBundle": opts.ca_pem.as_ref().map(|pem| {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD.encode(pem)
            }).unwrap_or_else(|| "<the member's service account CA>".into()),
            "secretRef": {"name": opts.host_secret()},
        }
    });
    let yaml = serde_saphyr::to_string(&kfc).context("rendering the KubeFedCluster")?;
    Ok(format!(
        "Dry run: nothing is changed.\n\
         In the member cluster (context {member_context}):\n\
         \x20 Namespace           {ns}\n\
         \x20 ServiceAccount      {ns}/{sa}\n\
         \x20 Role, RoleBinding   {ns}/{sa}-token-renewal (create serviceaccounts/token of {sa} only)\n\
         \x20 ClusterRole         {role}\n\
         \x20 ClusterRoleBinding  {role}\n\
         In the host cluster (context {host_context}):\n\
         \x20 Namespace           {ns}\n\
         \x20 Secret              {ns}/{secret} (a bound token of {sa}, {lifetime:?}, renewed by the control plane)\n\
         \x20 KubeFedCluster      {ns}/{name}:\n{yaml}",
        secret = opts.host_secret(),
        name = opts.cluster_name,
        lifetime = opts.token_lifetime,
    ))
}

/// Runs `flotilla unjoin`.
pub async fn unjoin(global: &GlobalArgs, args: UnjoinArgs, ctx: &Context) -> anyhow::Result<()> {
    let host = args.contexts.host(global).await?;
    let host_client = host.client()?;
    let mut opts = JoinOptions::new(&args.name, "");
    opts.host_name = host_name(&host);
    opts.namespace = global.kubefed_namespace.clone();
    // The token Secret may have been named at join time: the KubeFedCluster says which.
    let kfcs: Api<KubeFedCluster> = Api::namespaced(host_client.clone(), &opts.namespace);
    if let Some(kfc) = kfcs
        .get_opt(&args.name)
        .await
        .context("reading the KubeFedCluster")?
    {
        opts.secret_name = Some(kfc.spec.secret_ref.name.clone());
    } else if !args.force {
        anyhow::bail!(
            "cluster {} is not joined (no KubeFedCluster {}/{}); use --force to clean up anyway",
            args.name,
            opts.namespace,
            args.name
        );
    }
    let member_context = args.contexts.member(&args.name);
    let member = match reachable_member(global, &member_context).await {
        Ok(client) => Some(client),
        Err(e) if args.force => {
            tracing::warn!(error = %format!("{e:#}"), cluster = %args.name, "member unreachable; removing the host side only");
            ctx.out.line(format!(
                "member {} is unreachable ({e:#}); removing the host side only",
                args.name
            ));
            None
        }
        Err(e) => {
            return Err(e.context(format!(
                "cannot reach member {}; use --force to remove only the host side",
                args.name
            )));
        }
    };
    match unjoin_cluster(&host_client, member.as_ref(), &opts).await {
        Ok(()) => {}
        Err(e) if args.force && member.is_some() => {
            tracing::warn!(error = %e, "member clean-up failed; removing the host side only");
            unjoin_cluster(&host_client, None, &opts).await?;
        }
        Err(e) => return Err(e.into()),
    }
    ctx.out.line(format!("cluster {} unjoined", args.name));
    Ok(())
}

/// A member client that answered `/version` within a few seconds.
async fn reachable_member(global: &GlobalArgs, context: &str) -> anyhow::Result<kube::Client> {
    let member = access::load(global.kubeconfig.as_deref(), Some(context)).await?;
    let client = member.client()?;
    tokio::time::timeout(Duration::from_secs(10), client.apiserver_version())
        .await
        .context("no answer within 10s")?
        .context("asking the member for its version")?;
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dry_run_names_every_object_join_creates() {
        let mut opts = JoinOptions::new("cluster1", "https://10.0.0.1:6443");
        opts.host_name = "host".into();
        opts.labels.insert("region".into(), "eu".into());
        opts.ca_pem = Some("PEM".into());
        let plan = dry_run_plan(&opts, "c1", "host").expect("renders");
        for expected in [
            "ServiceAccount      kube-federation-system/cluster1-host",
            "ClusterRole         kubefed-controller-manager:cluster1-host",
            "ClusterRoleBinding  kubefed-controller-manager:cluster1-host",
            "Role, RoleBinding   kube-federation-system/cluster1-host-token-renewal",
            "Secret              kube-federation-system/cluster1-token",
            "kind: KubeFedCluster",
            "apiEndpoint: https://10.0.0.1:6443",
            "region: eu",
        ] {
            assert!(plan.contains(expected), "{expected:?} missing from\n{plan}");
        }
    }
}
