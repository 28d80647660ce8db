//! Cluster providers: where the clusters of a [`ClusterSet`] come from.
//!
//! A [`Provider`] runs until its stop token is cancelled, **engaging** clusters into the
//! set ([`ClusterSet::engage`]: idempotent, non-blocking; each engagement has a
//! cancellation token, cancelled when the cluster leaves or gets another client) and
//! **disengaging** them when they go away; when it stops, it disengages every cluster it
//! engaged. A cluster a provider cannot use (a kubeconfig that does not parse, an access
//! provider that fails) is reported ([`ClusterSet::problems`]) and skipped; the others run.
//!
//! | provider | clusters from |
//! |---|---|
//! | [`kubeconfig::KubeconfigProvider`] | the contexts of a kubeconfig file, re-read periodically |
//! | [`secrets::SecretProvider`] | labelled Secrets holding a kubeconfig, in a namespace of a cluster |
//! | [`profiles::ClusterProfileProvider`] | SIG-Multicluster ClusterProfiles (any cluster manager's), through their `accessProviders` and exec credential plugins |
//! | [`crate::kubefed::KubeFedProvider`] | Flotilla's KubeFedCluster registry |
//! | [`namespaces::NamespaceProvider`] | labelled namespaces of one cluster, each a cluster (for tests) |
//!
//! ```no_run
//! use flotilla_multicluster::{ClusterSet, provider::kubeconfig::KubeconfigProvider};
//! # async fn demo() {
//! let set = ClusterSet::new();
//! // Every context of the file is a cluster; edits of the file are followed.
//! let provider = set.start_provider(KubeconfigProvider::file("clusters.kubeconfig"));
//! // ... run controllers on `set`; dropping `provider` disengages its clusters.
//! # drop(provider);
//! # }
//! ```

mod complaints;
mod follow;
pub mod health;
pub mod kubeconfig;
pub mod namespaces;
pub mod profiles;
pub mod secrets;
mod tracker;

use futures::future::BoxFuture;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use tracker::{Desired, Plan, Tracker, plan};

use crate::ClusterSet;

/// A source of clusters; see the module docs.
pub trait Provider: Send + 'static {
    /// Engages clusters into `set` (and disengages them as they go) until `stop` is
    /// cancelled; then disengages every cluster it engaged.
    fn run(self: Box<Self>, set: ClusterSet, stop: CancellationToken) -> BoxFuture<'static, ()>;
}

/// A running provider: dropping it (or [`ProviderHandle::stop`]) stops the provider, which
/// disengages its clusters.
pub struct ProviderHandle {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl ProviderHandle {
    /// Ends the provider at once, without disengaging anything or cleaning up (as a
    /// crashed process would): for tests of what others do when a replica dies.
    pub fn abort(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    /// Stops the provider and waits until it has disengaged its clusters.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ProviderHandle {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl ClusterSet {
    /// Runs `provider` on this set until the returned handle is dropped or stopped.
    pub fn start_provider(&self, provider: impl Provider) -> ProviderHandle {
        let stop = CancellationToken::new();
        let task = tokio::spawn(Box::new(provider).run(self.clone(), stop.clone()));
        ProviderHandle {
            stop,
            task: Some(task),
        }
    }

    /// A new set whose clusters come from `provider` (see [`ClusterSet::start_provider`]).
    pub fn from_provider(provider: impl Provider) -> (ClusterSet, ProviderHandle) {
        let set = ClusterSet::new();
        let handle = set.start_provider(provider);
        (set, handle)
    }
}

/// A stable identity of a client's inputs (never shown: it may be computed over a token).
pub(crate) fn identity_of(inputs: &impl serde::Serialize) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(inputs)
        .unwrap_or_default()
        .hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}
