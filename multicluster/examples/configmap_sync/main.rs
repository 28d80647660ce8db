//! Keeps one ConfigMap of a hub cluster in sync across every cluster of a ClusterProfile
//! set. See docs/library.md ("A second example").
//!
//! ```text
//! cargo run -p flotilla-multicluster --example configmap_sync -- \
//!     --kubeconfig hub.kubeconfig --hub-context hub --profiles-namespace fleet \
//!     --access-providers providers.json --namespace apps --name shared-config
//! ```
#![forbid(unsafe_code)]

mod sync;

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use flotilla_multicluster::{
    ClusterSet,
    provider::{
        kubeconfig::{KubeconfigProvider, engagement_from},
        profiles::{AccessProviders, ClusterProfileProvider},
    },
};
use kube::config::Kubeconfig;

/// Keeps ConfigMap `--namespace/--name` of the hub in every cluster of the profile set.
#[derive(Parser)]
struct Args {
    /// Kubeconfig with the hub's context.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Context (and cluster name) of the hub: the source ConfigMap and the ClusterProfiles.
    #[arg(long, default_value = "hub")]
    hub_context: String,
    /// Namespace of the ClusterProfiles in the hub.
    #[arg(long)]
    profiles_namespace: String,
    /// Only ClusterProfiles matching this label selector (e.g. one cluster manager's).
    #[arg(long)]
    selector: Option<String>,
    /// The access provider file (KEP-5339): `{"providers": [{"name", "execConfig"}]}`.
    #[arg(long)]
    access_providers: PathBuf,
    /// Namespace of the ConfigMap.
    #[arg(long)]
    namespace: String,
    /// Name of the ConfigMap.
    #[arg(long)]
    name: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let text = std::fs::read_to_string(&args.access_providers)
        .with_context(|| format!("reading {}", args.access_providers.display()))?;
    let access = AccessProviders::parse(&text).map_err(anyhow::Error::msg)?;
    let kubeconfig = Kubeconfig::read_from(&args.kubeconfig)?;
    let hub = engagement_from(&kubeconfig, Some(&args.hub_context))
        .await
        .map_err(anyhow::Error::msg)?
        .client;
    let set = ClusterSet::new();
    let hub_provider =
        KubeconfigProvider::file(&args.kubeconfig).contexts([args.hub_context.clone()]);
    let _hub = set.start_provider(hub_provider);
    let mut profiles = ClusterProfileProvider::new(hub, &args.profiles_namespace, access);
    if let Some(selector) = &args.selector {
        profiles = profiles.selector(selector);
    }
    let _members = set.start_provider(profiles);
    tokio::select! {
        _ = sync::run(set, &args.hub_context, &args.namespace, &args.name) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}
