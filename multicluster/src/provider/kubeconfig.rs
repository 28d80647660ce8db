//! Clusters from the contexts of a kubeconfig file (each context a cluster named after it),
//! re-read every period so contexts added, changed or removed in the file are engaged,
//! re-engaged or disengaged. A context whose client cannot be built is reported and
//! skipped; a file that cannot be read or parsed is reported under the file's name and the
//! clusters engaged from it are kept.

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    time::Duration,
};

use futures::future::BoxFuture;
use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{Desired, Provider, Tracker, health::describe, identity_of};
use crate::{ClusterSet, cluster_set::Engagement, kubefed::client::ClientError};

/// How often the file is read again by default.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(10);

/// The kubeconfig provider; see the module docs.
pub struct KubeconfigProvider {
    path: PathBuf,
    contexts: Option<Vec<String>>,
    period: Duration,
}

impl KubeconfigProvider {
    /// Every context of the kubeconfig file at `path`.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        KubeconfigProvider {
            path: path.into(),
            contexts: None,
            period: DEFAULT_PERIOD,
        }
    }

    /// Only these contexts of the file.
    pub fn contexts<S: Into<String>>(mut self, contexts: impl IntoIterator<Item = S>) -> Self {
        self.contexts = Some(contexts.into_iter().map(Into::into).collect());
        self
    }

    /// Reads the file again this often (default [`DEFAULT_PERIOD`]).
    pub fn period(mut self, period: Duration) -> Self {
        self.period = period;
        self
    }

    async fn desired(&self, cache: &mut ClientCache) -> Result<Desired, String> {
        let kubeconfig = Kubeconfig::read_from(&self.path)
            .map_err(|_| "the file cannot be read or is not a kubeconfig".to_string())?;
        let mut desired = Desired::new();
        for named in &kubeconfig.contexts {
            let wanted = self.contexts.as_ref();
            if wanted.is_some_and(|w| !w.contains(&named.name)) {
                continue;
            }
            let engagement = cache.engagement(&kubeconfig, Some(&named.name)).await;
            desired.insert(named.name.clone(), engagement);
        }
        Ok(desired)
    }
}

impl Provider for KubeconfigProvider {
    fn run(self: Box<Self>, set: ClusterSet, stop: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut tracker = Tracker::new(set.clone(), "kubeconfig");
            let file = self.path.display().to_string();
            let mut cache = ClientCache::default();
            loop {
                match self.desired(&mut cache).await {
                    Ok(desired) => {
                        cache.sweep();
                        set.report(&file, None);
                        tracker.apply(desired);
                    }
                    Err(reason) => set.report(&file, Some(reason)),
                }
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(self.period) => {}
                }
            }
            set.report(&file, None);
            tracker.release();
        })
    }
}

/// The engagement of `context` (the current context when `None`) of `kubeconfig`: its
/// client, identified by the context's own entries (cluster, user), so that editing one
/// context re-engages only that cluster. An exec credential plugin runs here, off the
/// async workers. The error never repeats a credential.
pub async fn engagement_from(
    kubeconfig: &Kubeconfig,
    context: Option<&str>,
) -> Result<Engagement, String> {
    ClientCache::default().engagement(kubeconfig, context).await
}

/// Clients built so far, by the identity of their inputs: a provider that reads unchanged
/// inputs again reuses the client (an exec credential plugin runs once per identity, not
/// at every change; the client refreshes its credential itself).
#[derive(Default)]
pub struct ClientCache {
    clients: HashMap<String, Client>,
    used: HashSet<String>,
}

impl ClientCache {
    /// Like [`engagement_from`], reusing the client built for the same inputs.
    pub async fn engagement(
        &mut self,
        kubeconfig: &Kubeconfig,
        context: Option<&str>,
    ) -> Result<Engagement, String> {
        let options = KubeConfigOptions {
            context: context.map(str::to_owned),
            ..KubeConfigOptions::default()
        };
        let identity = identity_of(&context_entries(kubeconfig, context));
        self.used.insert(identity.clone());
        let client = match self.clients.get(&identity) {
            Some(client) => client.clone(),
            None => {
                let config = Config::from_custom_kubeconfig(kubeconfig.clone(), &options)
                    .await
                    .map_err(|e| {
                        format!(
                            "the kubeconfig context cannot be used: {}",
                            kubeconfig_problem(&e)
                        )
                    })?;
                let client = build_client(config).await?;
                self.clients.insert(identity.clone(), client.clone());
                client
            }
        };
        Ok(Engagement {
            client,
            labels: Default::default(),
            identity,
            namespace: None,
        })
    }

    /// Forgets the clients not asked for since the last call (their inputs are gone).
    pub fn sweep(&mut self) {
        let used = std::mem::take(&mut self.used);
        self.clients.retain(|identity, _| used.contains(identity));
    }
}

/// Builds a client off the async workers (an exec credential plugin runs while building),
/// its bearer token trimmed as client-go trims it (see [`crate::credentials`]).
pub(crate) async fn build_client(config: Config) -> Result<Client, String> {
    tokio::task::spawn_blocking(move || crate::credentials::client(config))
        .await
        .map_err(|e| format!("building the client panicked: {e}"))?
        .map_err(|e| match e {
            crate::Error::Client(ClientError::ClientBuild { source }) => describe(&source),
            // The token-file and token errors name a path at most, never a token.
            other => other.to_string(),
        })
}

/// What of a kubeconfig error can be shown: never a parse error's text, which may quote
/// the file (and so a token).
fn kubeconfig_problem(error: &kube::config::KubeconfigError) -> String {
    use kube::config::KubeconfigError as E;
    match error {
        E::CurrentContextNotSet => "no current context".into(),
        E::LoadContext(name) => format!("no context {name}"),
        E::LoadClusterOfContext(name) => format!("no cluster {name}"),
        E::MissingClusterUrl => "the cluster has no server".into(),
        E::LoadCertificateAuthority(_) => "the certificate authority cannot be loaded".into(),
        E::ParseClusterUrl(_) => "the cluster's server is not a URL".into(),
        _ => "it is invalid".into(),
    }
}

/// The entries of the kubeconfig one context is made of.
fn context_entries(kubeconfig: &Kubeconfig, context: Option<&str>) -> serde_json::Value {
    let name = context.or(kubeconfig.current_context.as_deref());
    let ctx = kubeconfig
        .contexts
        .iter()
        .find(|c| Some(c.name.as_str()) == name);
    let inner = ctx.and_then(|c| c.context.as_ref());
    let cluster = inner.and_then(|c| kubeconfig.clusters.iter().find(|n| n.name == c.cluster));
    let user = inner.and_then(|c| {
        let user = c.user.as_deref()?;
        kubeconfig.auth_infos.iter().find(|n| n.name == user)
    });
    json!([ctx, cluster, user])
}
