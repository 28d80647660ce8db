//! The KubeFedCluster source: a [`ClusterSet`] that follows the registry — registered,
//! relabelled, removed as KubeFedClusters are (clusters another source put in the same set
//! are left alone); a client rebuilt only when the spec or the
//! token changes; Ready as the KubeFedCluster's `Ready` condition says. It writes nothing to
//! any cluster (Flotilla's controller-manager owns the health checks and the status).

use std::collections::HashMap;

use flotilla_api::{KubeFedCluster, core::KubeFedClusterStatus};
use futures::{StreamExt, future::BoxFuture};
use kube::{Client, ResourceExt, runtime::reflector::ObjectRef};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{
    client::ClientInputs,
    watch::{Affected, RegistryCaches, watch_registry},
};
use crate::{ClusterSet, provider::Provider};

/// Whether a KubeFedCluster's status says Ready.
pub fn cluster_ready(status: Option<&KubeFedClusterStatus>) -> bool {
    status.is_some_and(|s| s.condition("Ready").is_some_and(|c| c.status == "True"))
}

/// A running KubeFedCluster source; stops when dropped.
pub struct KubeFedSource {
    task: JoinHandle<()>,
}

impl Drop for KubeFedSource {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl KubeFedSource {
    /// Keeps `set` in step with the KubeFedClusters in `namespace` of the host (Flotilla's
    /// default is `kube-federation-system`).
    pub fn start(set: ClusterSet, host: Client, namespace: &str) -> Self {
        let namespace = namespace.to_owned();
        let task = tokio::spawn(async move {
            let mut built = HashMap::new();
            follow_registry(&set, host, &namespace, &mut built).await;
        });
        KubeFedSource { task }
    }
}

/// The KubeFedCluster registry as a [`Provider`]: clusters engaged and disengaged as
/// KubeFedClusters come and go; stopping it disengages them all.
pub struct KubeFedProvider {
    host: Client,
    namespace: String,
}

impl KubeFedProvider {
    /// The KubeFedClusters in `namespace` of the host (Flotilla's default is
    /// `kube-federation-system`).
    ///
    /// ```no_run
    /// use flotilla_multicluster::{ClusterSet, kubefed::KubeFedProvider};
    /// # async fn demo(host: kube::Client) {
    /// let set = ClusterSet::new();
    /// let running = set.start_provider(KubeFedProvider::new(host, "kube-federation-system"));
    /// // ... later: every registry cluster is disengaged.
    /// running.stop().await;
    /// # }
    /// ```
    pub fn new(host: Client, namespace: impl Into<String>) -> Self {
        KubeFedProvider {
            host,
            namespace: namespace.into(),
        }
    }
}

impl Provider for KubeFedProvider {
    fn run(self: Box<Self>, set: ClusterSet, stop: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut built = HashMap::new();
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = follow_registry(&set, self.host, &self.namespace, &mut built) => {}
            }
            for name in built.keys() {
                set.disengage(name);
            }
        })
    }
}

async fn follow_registry(
    set: &ClusterSet,
    host: Client,
    namespace: &str,
    built: &mut HashMap<String, ClientInputs>,
) {
    let (caches, changes) = watch_registry(host, namespace);
    futures::pin_mut!(changes);
    while let Some(affected) = changes.next().await {
        let names = match affected {
            Affected::All => {
                // Clusters deleted while the watch was down too; never clusters
                // another source put in the set.
                let mut names = caches.cluster_names();
                names.extend(built.keys().cloned());
                names
            }
            Affected::Clusters(names) => names,
        };
        for name in names {
            follow(set, &caches, namespace, &name, built);
        }
    }
}

/// Brings one cluster of the set in line with the registry's caches.
fn follow(
    set: &ClusterSet,
    caches: &RegistryCaches,
    namespace: &str,
    name: &str,
    built: &mut HashMap<String, ClientInputs>,
) {
    let key = ObjectRef::<KubeFedCluster>::new(name).within(namespace);
    let Some(cluster) = caches.clusters.get(&key) else {
        if built.remove(name).is_some() {
            info!(cluster = %name, "KubeFedCluster deleted; the cluster leaves the set");
            set.remove(name);
            set.report(name, None);
        }
        return;
    };
    set.upsert(name, cluster.labels().clone(), cluster.spec.taints.clone());
    let secret_key = ObjectRef::new(&cluster.spec.secret_ref.name).within(namespace);
    let secret = caches.secrets.get(&secret_key);
    let inputs = ClientInputs::new(&cluster.spec, namespace, secret.as_deref());
    if built.get(name) != Some(&inputs) {
        let client = match inputs.client() {
            Ok(client) => {
                set.report(name, None);
                Some(client)
            }
            Err(error) => {
                let problem = crate::error_chain(&error);
                warn!(cluster = %name, %problem, "no client for the cluster");
                set.report(name, Some(format!("no client: {problem}")));
                None
            }
        };
        set.set_client(name, client);
        built.insert(name.to_owned(), inputs);
    }
    set.set_ready(name, cluster_ready(cluster.status.as_ref()));
}

#[cfg(test)]
mod tests {
    use flotilla_api::core::ClusterCondition;

    use super::*;

    fn status(type_: &str, value: &str) -> KubeFedClusterStatus {
        KubeFedClusterStatus {
            conditions: vec![ClusterCondition {
                type_: type_.into(),
                status: value.into(),
                ..ClusterCondition::default()
            }],
            ..KubeFedClusterStatus::default()
        }
    }

    #[test]
    fn a_cluster_is_ready_only_when_its_ready_condition_is_true() {
        assert!(cluster_ready(Some(&status("Ready", "True"))));
        assert!(!cluster_ready(Some(&status("Ready", "False"))));
        assert!(!cluster_ready(Some(&status("Offline", "True"))));
        assert!(!cluster_ready(None));
    }
}
