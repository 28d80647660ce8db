//! Clusters from a fixed list: contexts of a kubeconfig, or the in-cluster configuration.
//! Each is registered under a name and health-checked by this source (a `/version` read
//! every period; Ready after one success, unready after [`FAILURE_THRESHOLD`] failures in a
//! row), so a disconnected cluster stops its watches and a returning one starts them
//! again. For clusters from Flotilla's registry, see [`crate::kubefed::KubeFedSource`].

use crate::{ClusterSet, Error, kubefed::client::ClientError, provider::health};
use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};
use tokio::task::JoinHandle;

pub use crate::provider::health::{FAILURE_THRESHOLD, PROBE_PERIOD, next_ready};

/// Fixed clusters with their health checks; the checks stop when this is dropped (the
/// clusters stay in the set).
#[derive(Default)]
pub struct StaticClusters {
    probes: Vec<JoinHandle<()>>,
}

impl Drop for StaticClusters {
    fn drop(&mut self) {
        for p in &self.probes {
            p.abort();
        }
    }
}

impl StaticClusters {
    /// No clusters yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `client` as cluster `name` of `set` and health-checks it.
    pub fn add(&mut self, set: &ClusterSet, name: &str, client: Client) {
        set.upsert(name, Default::default(), Vec::new());
        set.set_client(name, Some(client.clone()));
        // The check lives as long as this source (dropping it aborts the check).
        let forever = tokio_util::sync::CancellationToken::new();
        self.probes.push(tokio::spawn(health::probe(
            set.clone(),
            name.to_owned(),
            client,
            forever,
        )));
    }

    /// Registers context `context` of `kubeconfig` as a cluster named after the context.
    pub async fn add_context(
        &mut self,
        set: &ClusterSet,
        kubeconfig: &Kubeconfig,
        context: &str,
    ) -> Result<(), Error> {
        let options = KubeConfigOptions {
            context: Some(context.to_owned()),
            ..KubeConfigOptions::default()
        };
        let config = Config::from_custom_kubeconfig(kubeconfig.clone(), &options)
            .await
            .map_err(|source| Error::Kubeconfig {
                context: context.to_owned(),
                source,
            })?;
        let client = client_from(config, context)?;
        self.add(set, context, client);
        Ok(())
    }

    /// Registers the cluster this process runs in as cluster `name`.
    pub fn add_in_cluster(&mut self, set: &ClusterSet, name: &str) -> Result<(), Error> {
        let config = Config::incluster().map_err(|source| Error::InCluster { source })?;
        let client = client_from(config, name)?;
        self.add(set, name, client);
        Ok(())
    }
}

fn client_from(config: Config, cluster: &str) -> Result<Client, Error> {
    // Bearer tokens trimmed as client-go trims them (see `credentials`).
    crate::credentials::client(config).map_err(|error| match error {
        Error::Client(ClientError::ClientBuild { source }) => Error::Kube {
            action: "building the client",
            cluster: cluster.to_owned(),
            source,
        },
        other => other,
    })
}
