//! Clusters from a fixed list: contexts of a kubeconfig, or the in-cluster configuration.
//! Each is registered under a name and health-checked by this source (a `/version` read
//! every period; Ready after one success, unready after [`FAILURE_THRESHOLD`] failures in a
//! row), so a disconnected cluster stops its watches and a returning one starts them
//! again. For clusters from Flotilla's registry, see [`crate::kubefed::KubeFedSource`].

use std::time::Duration;

use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};
use tokio::task::JoinHandle;
use tracing::{debug, info};

use crate::{ClusterSet, Error};

/// How often a fixed cluster is probed.
pub const PROBE_PERIOD: Duration = Duration::from_secs(5);
/// How long a probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Failed probes in a row before a cluster is unready.
pub const FAILURE_THRESHOLD: u32 = 3;

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
        self.probes
            .push(tokio::spawn(probe(set.clone(), name.to_owned(), client)));
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
    Client::try_from(config).map_err(|source| Error::Kube {
        action: "building the client",
        cluster: cluster.to_owned(),
        source,
    })
}

/// The health verdict after a probe: `Some(ready)` when it changes what the set says.
pub fn next_ready(ready: bool, failures_in_a_row: u32, probe_ok: bool) -> Option<bool> {
    match (ready, probe_ok) {
        (false, true) => Some(true),
        (true, false) if failures_in_a_row >= FAILURE_THRESHOLD => Some(false),
        _ => None,
    }
}

async fn probe(set: ClusterSet, name: String, client: Client) {
    let mut failures = 0;
    let mut ready = false;
    let mut ticks = tokio::time::interval(PROBE_PERIOD);
    loop {
        ticks.tick().await;
        let ok = matches!(
            tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await,
            Ok(Ok(_))
        );
        failures = if ok { 0 } else { failures + 1 };
        debug!(cluster = %name, ok, failures, "probed");
        if let Some(now) = next_ready(ready, failures, ok) {
            info!(cluster = %name, ready = now, "cluster health changed");
            ready = now;
            set.set_ready(&name, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_turns_ready_on_one_success_and_unready_after_three_failures() {
        assert_eq!(next_ready(false, 0, true), Some(true));
        assert_eq!(next_ready(true, 1, false), None);
        assert_eq!(next_ready(true, 3, false), Some(false));
        assert_eq!(next_ready(false, 5, false), None);
        assert_eq!(next_ready(true, 0, true), None);
    }
}
