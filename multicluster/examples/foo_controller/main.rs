//! sample-controller, multi-cluster: a Foo in any member cluster gets its Deployment in a
//! central cluster. See docs/library.md.
//!
//! ```text
//! flotilla dev up --kubeconfig-out dev.kubeconfig          # in one terminal
//! cargo run -p flotilla-multicluster --example foo_controller -- \
//!     --kubeconfig dev.kubeconfig --central member1          # in another
//! kubectl --kubeconfig dev.kubeconfig --context member2 apply \
//!     -f multicluster/examples/foo_controller/foo.yaml
//! ```
#![forbid(unsafe_code)]

mod foo;

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use flotilla_api::KubeFedCluster;
use flotilla_multicluster::{ClusterSet, kubefed::KubeFedSource, sources::StaticClusters};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Keeps a Deployment in the central cluster for every Foo in the member clusters.
#[derive(Parser)]
struct Args {
    /// Kubeconfig with the clusters' contexts.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Context (and cluster name) of the central cluster, where Deployments go.
    #[arg(long)]
    central: String,
    /// Member clusters as kubeconfig contexts. Without it, members come from the
    /// KubeFedClusters in the host cluster (`--host-context`), joining and leaving at
    /// run time.
    #[arg(long, value_delimiter = ',')]
    members: Vec<String>,
    /// Context of Flotilla's host cluster, for the KubeFedCluster registry.
    #[arg(long, default_value = "host")]
    host_context: String,
    /// Namespace of the KubeFedClusters.
    #[arg(long, default_value = "kube-federation-system")]
    registry_namespace: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let kubeconfig = Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let set = ClusterSet::new();
    let mut fixed = StaticClusters::new();
    let mut _registry = None;
    if args.members.is_empty() {
        let options = KubeConfigOptions {
            context: Some(args.host_context.clone()),
            ..KubeConfigOptions::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &options).await?;
        let host = kube::Client::try_from(config)?;
        let registry: kube::Api<KubeFedCluster> =
            kube::Api::namespaced(host.clone(), &args.registry_namespace);
        // A registered central cluster comes from the registry like the members.
        if registry.get_opt(&args.central).await?.is_none() {
            fixed.add_context(&set, &kubeconfig, &args.central).await?;
        }
        _registry = Some(KubeFedSource::start(
            set.clone(),
            host,
            &args.registry_namespace,
        ));
    } else {
        fixed.add_context(&set, &kubeconfig, &args.central).await?;
        for member in &args.members {
            fixed.add_context(&set, &kubeconfig, member).await?;
        }
    }
    let install = tokio::spawn(foo::install_on_join(set.clone(), args.central.clone()));
    tokio::select! {
        _ = foo::run(set, &args.central, None) => {}
        result = install => result??,
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}
