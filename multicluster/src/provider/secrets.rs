//! Clusters from kubeconfig Secrets: every Secret matching a label selector in one
//! namespace of a cluster is a cluster named after the Secret (labelled with its labels),
//! whose client comes from the kubeconfig in its data (key `kubeconfig` by default; its
//! current context). Secrets are watched: a new Secret is engaged, a changed one
//! re-engaged, a deleted one disengaged. A Secret whose kubeconfig is missing or does not
//! parse is reported and skipped (the reason never quotes the data); the others run.

use futures::{StreamExt, future::BoxFuture};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt, config::Kubeconfig, runtime::watcher};
use tokio_util::sync::CancellationToken;

use super::{
    Desired, Provider, Tracker, complaints::Complaints, follow::snapshots, kubeconfig::ClientCache,
};
use crate::ClusterSet;

/// The data key holding the kubeconfig by default.
pub const DEFAULT_KEY: &str = "kubeconfig";

/// The kubeconfig Secret provider; see the module docs.
pub struct SecretProvider {
    client: Client,
    namespace: String,
    selector: String,
    key: String,
}

impl SecretProvider {
    /// Secrets matching label selector `selector` (e.g. `example.com/cluster=true`) in
    /// `namespace` of the cluster `client` talks to.
    ///
    /// ```no_run
    /// use flotilla_multicluster::{ClusterSet, provider::secrets::SecretProvider};
    /// # async fn demo(hub: kube::Client) {
    /// let set = ClusterSet::new();
    /// let provider = SecretProvider::new(hub, "fleet", "example.com/cluster=true").key("config");
    /// let _running = set.start_provider(provider);
    /// // Clusters named after the Secrets; a Secret that does not parse shows here:
    /// println!("{:?}", set.problems());
    /// # }
    /// ```
    pub fn new(client: Client, namespace: impl Into<String>, selector: impl Into<String>) -> Self {
        SecretProvider {
            client,
            namespace: namespace.into(),
            selector: selector.into(),
            key: DEFAULT_KEY.into(),
        }
    }

    /// The data key holding the kubeconfig (default [`DEFAULT_KEY`]).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }
}

/// The kubeconfig in `secret`'s `key`, or why there is none usable (never quoting it).
pub fn kubeconfig_of(secret: &Secret, key: &str) -> Result<Kubeconfig, String> {
    let where_ = format!(
        "Secret {}/{}",
        secret.namespace().unwrap_or_default(),
        secret.name_any()
    );
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .ok_or_else(|| format!("{where_} has no data key {key}"))?;
    let text = std::str::from_utf8(&data.0)
        .map_err(|_| format!("{where_}: data key {key} is not UTF-8 text"))?;
    let kubeconfig = Kubeconfig::from_yaml(text)
        .map_err(|_| format!("{where_}: data key {key} does not parse as a kubeconfig"))?;
    if kubeconfig.contexts.is_empty() {
        return Err(format!("{where_}: the kubeconfig in {key} has no context"));
    }
    Ok(kubeconfig)
}

async fn desired(
    secrets: &[std::sync::Arc<Secret>],
    key: &str,
    cache: &mut ClientCache,
) -> Desired {
    let mut desired = Desired::new();
    for secret in secrets {
        let engagement = match kubeconfig_of(secret, key) {
            Ok(kubeconfig) => {
                let current = kubeconfig.current_context.clone();
                let context =
                    current.or_else(|| kubeconfig.contexts.first().map(|c| c.name.clone()));
                cache
                    .engagement(&kubeconfig, context.as_deref())
                    .await
                    .map(|mut e| {
                        e.labels = secret.labels().clone();
                        e
                    })
                    .map_err(|reason| format!("Secret {}: {reason}", secret.name_any()))
            }
            Err(reason) => Err(reason),
        };
        desired.insert(secret.name_any(), engagement);
    }
    cache.sweep();
    desired
}

impl Provider for SecretProvider {
    fn run(self: Box<Self>, set: ClusterSet, stop: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut tracker = Tracker::new(set, "kubeconfig-secrets");
            let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
            let config = watcher::Config::default().labels(&self.selector);
            let secrets = snapshots(api, config, stop);
            futures::pin_mut!(secrets);
            let mut complaints = Complaints::new(
                self.client.clone(),
                "multicluster-secrets",
                "InvalidKubeconfig",
            );
            let mut cache = ClientCache::default();
            while let Some(secrets) = secrets.next().await {
                let desired = desired(&secrets, &self.key, &mut cache).await;
                for secret in &secrets {
                    if let Some(Err(reason)) = desired.get(&secret.name_any()) {
                        complaints.about(secret.as_ref(), reason).await;
                    }
                }
                tracker.apply(desired);
            }
            tracker.release();
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    fn secret(data: &[u8]) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some("c1".into());
        s.metadata.namespace = Some("clusters".into());
        s.data = Some(BTreeMap::from([(
            DEFAULT_KEY.to_string(),
            ByteString(data.to_vec()),
        )]));
        s
    }

    #[test]
    fn a_kubeconfig_that_does_not_parse_is_refused_without_quoting_it() {
        let reason =
            kubeconfig_of(&secret(b"token: s3cr3t: [unclosed"), DEFAULT_KEY).expect_err("an error");
        assert!(reason.contains("does not parse"), "{reason}");
        assert!(!reason.contains("s3cr3t"), "{reason}");
        let reason = kubeconfig_of(&secret(&[0xff, 0xfe]), DEFAULT_KEY).expect_err("an error");
        assert!(reason.contains("not UTF-8"), "{reason}");
        let reason = kubeconfig_of(&secret(b"x"), "other").expect_err("an error");
        assert!(reason.contains("no data key other"), "{reason}");
    }

    #[test]
    fn a_kubeconfig_with_a_context_is_accepted() {
        let yaml = b"apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n";
        let kubeconfig = kubeconfig_of(&secret(yaml), DEFAULT_KEY).expect("a kubeconfig");
        assert_eq!(kubeconfig.current_context.as_deref(), Some("x"));
    }
}
