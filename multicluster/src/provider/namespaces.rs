//! Namespace-per-cluster, for tests: every namespace matching a label selector in one real
//! cluster is a cluster named after the namespace. Its client is the real cluster's with
//! that namespace as default, and member watches of every kind are confined to the
//! namespace ([`crate::ClusterSet::namespace_of`]); cluster-scoped kinds are shared by all
//! such clusters, so a controller under test should watch namespaced kinds. Namespaces are
//! watched: a new one is engaged, a deleted one disengaged.

use futures::{StreamExt, future::BoxFuture};
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client, Config, ResourceExt, runtime::watcher};
use tokio_util::sync::CancellationToken;

use super::{Desired, Provider, Tracker, follow::snapshots, kubeconfig::build_client};
use crate::{ClusterSet, cluster_set::Engagement};

/// The namespace-per-cluster provider; see the module docs.
pub struct NamespaceProvider {
    config: Config,
    selector: String,
}

impl NamespaceProvider {
    /// Namespaces matching label selector `selector` in the cluster `config` reaches.
    ///
    /// ```no_run
    /// use flotilla_multicluster::{Controller, WatchOptions, provider::namespaces::NamespaceProvider};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// # async fn demo(config: kube::Config) {
    /// // Every namespace labelled `tenant=yes` is a cluster of its own.
    /// let provider = NamespaceProvider::new(config, "tenant=yes");
    /// let controller = Controller::<ConfigMap>::with_provider("per-tenant", provider, WatchOptions::all());
    /// # }
    /// ```
    pub fn new(config: Config, selector: impl Into<String>) -> Self {
        NamespaceProvider {
            config,
            selector: selector.into(),
        }
    }

    async fn desired(&self, namespaces: &[std::sync::Arc<Namespace>]) -> Desired {
        let mut desired = Desired::new();
        for ns in namespaces {
            if ns.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = ns.name_any();
            let mut config = self.config.clone();
            config.default_namespace = name.clone();
            let engagement = build_client(config).await.map(|client| Engagement {
                client,
                labels: ns.labels().clone(),
                identity: name.clone(),
                namespace: Some(name.clone()),
            });
            desired.insert(name, engagement);
        }
        desired
    }
}

impl Provider for NamespaceProvider {
    fn run(self: Box<Self>, set: ClusterSet, stop: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut tracker = Tracker::new(set, "namespaces");
            let client = match build_client(self.config.clone()).await {
                Ok(client) => client,
                Err(reason) => {
                    tracing::warn!(%reason, "no client for the namespace provider's cluster");
                    return;
                }
            };
            let api: Api<Namespace> = Api::all(client as Client);
            let config = watcher::Config::default().labels(&self.selector);
            let namespaces = snapshots(api, config, stop);
            futures::pin_mut!(namespaces);
            while let Some(namespaces) = namespaces.next().await {
                tracker.apply(self.desired(&namespaces).await);
            }
            tracker.release();
        })
    }
}
