//! The registry watch shared by Flotilla's cluster registry and the library's KubeFedCluster
//! source: KubeFedClusters and their token Secrets in one namespace of the host, cached,
//! reported as the cluster names a change affects — and nothing at all until both caches
//! are complete (until then a missing Secret may only be not listed yet).

use std::collections::BTreeSet;

use flotilla_api::KubeFedCluster;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};
use tracing::warn;

/// The registry's caches.
#[derive(Clone)]
pub struct RegistryCaches {
    /// The KubeFedClusters.
    pub clusters: Store<KubeFedCluster>,
    /// The Secrets of the namespace (the tokens of the clusters).
    pub secrets: Store<Secret>,
}

impl RegistryCaches {
    /// Names of the clusters whose `spec.secretRef` names `secret`.
    pub fn clusters_using(&self, secret: &str) -> BTreeSet<String> {
        self.clusters
            .state()
            .iter()
            .filter(|c| c.spec.secret_ref.name == secret)
            .map(|c| c.name_any())
            .collect()
    }

    /// Names of every cached cluster.
    pub fn cluster_names(&self) -> BTreeSet<String> {
        self.clusters.state().iter().map(|c| c.name_any()).collect()
    }
}

/// Which clusters a change of the registry affects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Affected {
    /// Every cluster (a cache completed a (re)list; clusters deleted meanwhile included).
    All,
    /// These clusters.
    Clusters(BTreeSet<String>),
}

enum Change {
    Cluster(Result<watcher::Event<KubeFedCluster>, watcher::Error>),
    Secret(Result<watcher::Event<Secret>, watcher::Error>),
}

/// Watches the registry in `namespace` of the host; the stream yields what each change
/// affects once both caches are complete. Failures are logged and retried with backoff.
pub fn watch_registry(
    host: Client,
    namespace: &str,
) -> (
    RegistryCaches,
    impl Stream<Item = Affected> + Send + 'static,
) {
    let (clusters, cluster_writer) = reflector::store::<KubeFedCluster>();
    let (secrets, secret_writer) = reflector::store::<Secret>();
    let cluster_stream = reflector::reflector(
        cluster_writer,
        watcher(
            Api::<KubeFedCluster>::namespaced(host.clone(), namespace),
            watcher::Config::default(),
        )
        .default_backoff(),
    )
    .map(Change::Cluster)
    .boxed();
    let secret_stream = reflector::reflector(
        secret_writer,
        watcher(
            Api::<Secret>::namespaced(host, namespace),
            watcher::Config::default(),
        )
        .default_backoff(),
    )
    .map(Change::Secret)
    .boxed();
    let caches = RegistryCaches { clusters, secrets };
    let state = caches.clone();
    let mut listed = (false, false);
    let stream = futures::stream::select(cluster_stream, secret_stream).filter_map(move |change| {
        let affected = affected(&state, &mut listed, change);
        std::future::ready(affected.filter(|_| listed.0 && listed.1))
    });
    (caches, stream)
}

fn affected(
    caches: &RegistryCaches,
    listed: &mut (bool, bool),
    change: Change,
) -> Option<Affected> {
    match change {
        Change::Cluster(Ok(event)) => match event {
            watcher::Event::Apply(c) | watcher::Event::Delete(c) => {
                Some(Affected::Clusters(BTreeSet::from([c.name_any()])))
            }
            watcher::Event::InitDone => {
                listed.0 = true;
                Some(Affected::All)
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => None,
        },
        Change::Secret(Ok(event)) => match event {
            watcher::Event::Apply(s) | watcher::Event::Delete(s) => {
                Some(Affected::Clusters(caches.clusters_using(&s.name_any())))
            }
            watcher::Event::InitDone => {
                listed.1 = true;
                Some(Affected::All)
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => None,
        },
        Change::Cluster(Err(error)) | Change::Secret(Err(error))
            if crate::watch::is_expected_relist(&error) =>
        {
            tracing::debug!(error = %error, "registry watch expired; relisting");
            None
        }
        Change::Cluster(Err(error)) => {
            warn!(error = %crate::error_chain(&error), "watching KubeFedClusters failed; retrying");
            None
        }
        Change::Secret(Err(error)) => {
            warn!(error = %crate::error_chain(&error), "watching Secrets failed; retrying");
            None
        }
    }
}
