//! Clusters from SIG-Multicluster ClusterProfiles (`multicluster.x-k8s.io`, the Cluster
//! Inventory API), Flotilla's own or any other cluster manager's: every ClusterProfile in
//! a namespace of a hub cluster (optionally label-selected, e.g.
//! `x-k8s.io/cluster-manager=flotilla`) is a cluster named after the profile, labelled with
//! its labels.
//!
//! Credentials follow KEP-5339 (ClusterProfile credential plugins): the profile's
//! `status.accessProviders` (or the deprecated `credentialProviders`) say where and how to
//! verify each API server under a provider name; the consumer — this provider — holds an
//! exec credential plugin per provider name ([`AccessProviders`], the
//! `{"providers": [{"name", "execConfig"}]}` file of the KEP). The first access provider of
//! the profile with a configured plugin is used; the plugin runs with the profile's
//! cluster in `KUBERNETES_EXEC_INFO` when its `provideClusterInfo` is set. A profile with
//! no configured access provider, or whose plugin fails, is reported (exit status only:
//! the plugin's output may hold a credential) and skipped; the others run.

use flotilla_api::inventory::{AccessProvider, ClusterProfile};
use futures::{StreamExt, future::BoxFuture};
use kube::{
    Api, Client, ResourceExt,
    config::{ExecConfig, Kubeconfig},
    runtime::watcher,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{
    Desired, Provider, Tracker, complaints::Complaints, follow::snapshots, kubeconfig::ClientCache,
};
use crate::ClusterSet;

/// One consumer-side access provider: its name and the exec credential plugin to run.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccessProviderConfig {
    /// The name matched against the profiles' access providers.
    pub name: String,
    /// The exec credential plugin (kubeconfig `exec` shape).
    pub exec_config: ExecConfig,
}

/// The consumer's access providers (the KEP's provider file).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct AccessProviders {
    /// The providers, by name.
    pub providers: Vec<AccessProviderConfig>,
}

impl AccessProviders {
    /// Parses the provider file (JSON).
    ///
    /// ```
    /// use flotilla_multicluster::provider::profiles::AccessProviders;
    /// let file = r#"{"providers": [{"name": "flotilla", "execConfig": {
    ///     "apiVersion": "client.authentication.k8s.io/v1", "command": "/usr/bin/creds",
    ///     "args": ["--cluster"], "provideClusterInfo": true}}]}"#;
    /// let providers = AccessProviders::parse(file).unwrap();
    /// assert_eq!(providers.providers[0].name, "flotilla");
    /// assert!(providers.providers[0].exec_config.provide_cluster_info);
    /// ```
    pub fn parse(text: &str) -> Result<Self, String> {
        serde_json::from_str(text)
            .map_err(|e| format!("the access provider file does not parse: {e}"))
    }
}

/// The ClusterProfile provider; see the module docs.
pub struct ClusterProfileProvider {
    client: Client,
    namespace: String,
    selector: Option<String>,
    access: AccessProviders,
}

impl ClusterProfileProvider {
    /// ClusterProfiles in `namespace` of the hub `client` talks to, reached through the
    /// plugins of `access`.
    ///
    /// ```no_run
    /// use flotilla_multicluster::{
    ///     ClusterSet,
    ///     provider::profiles::{AccessProviders, ClusterProfileProvider},
    /// };
    /// # async fn demo(hub: kube::Client) -> Result<(), String> {
    /// let access = AccessProviders::parse(&std::fs::read_to_string("providers.json").unwrap_or_default())?;
    /// let provider = ClusterProfileProvider::new(hub, "fleet", access)
    ///     .selector("x-k8s.io/cluster-manager=flotilla");
    /// let (set, _running) = ClusterSet::from_provider(provider);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(client: Client, namespace: impl Into<String>, access: AccessProviders) -> Self {
        ClusterProfileProvider {
            client,
            namespace: namespace.into(),
            selector: None,
            access,
        }
    }

    /// Only profiles matching this label selector (e.g. one cluster manager's).
    pub fn selector(mut self, selector: impl Into<String>) -> Self {
        self.selector = Some(selector.into());
        self
    }
}

/// The access provider of `profile` to use with `access`, or why there is none.
pub fn choose<'a>(
    profile: &'a ClusterProfile,
    access: &'a AccessProviders,
) -> Result<(&'a AccessProvider, &'a AccessProviderConfig), String> {
    let offered: Vec<&AccessProvider> = profile
        .status
        .iter()
        .flat_map(|s| s.access_providers.iter().chain(&s.credential_providers))
        .collect();
    offered
        .iter()
        .find_map(|p| {
            let config = access.providers.iter().find(|c| c.name == p.name)?;
            Some((*p, config))
        })
        .ok_or_else(|| {
            let names = |v: Vec<&str>| {
                if v.is_empty() {
                    "none".into()
                } else {
                    v.join(", ")
                }
            };
            format!(
                "ClusterProfile {}: none of its access providers ({}) is configured here ({})",
                profile.name_any(),
                names(offered.iter().map(|p| p.name.as_str()).collect()),
                names(access.providers.iter().map(|p| p.name.as_str()).collect()),
            )
        })
}

/// A kubeconfig reaching `offered`'s cluster with `config`'s exec plugin (context `profile`).
pub fn kubeconfig_for(
    offered: &AccessProvider,
    config: &AccessProviderConfig,
) -> Result<Kubeconfig, String> {
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "profile", "cluster": offered.cluster}],
        "users": [{"name": "profile", "user": {"exec": config.exec_config}}],
        "contexts": [{"name": "profile", "context": {"cluster": "profile", "user": "profile"}}],
        "current-context": "profile",
    });
    serde_json::from_value(kubeconfig).map_err(|e| {
        format!(
            "access provider {}: not a kubeconfig cluster: {e}",
            offered.name
        )
    })
}

async fn desired(
    profiles: &[std::sync::Arc<ClusterProfile>],
    access: &AccessProviders,
    cache: &mut ClientCache,
) -> Desired {
    let mut desired = Desired::new();
    for profile in profiles {
        let name = profile.name_any();
        let engagement = match choose(profile, access).and_then(|(o, c)| kubeconfig_for(o, c)) {
            Ok(kubeconfig) => cache
                .engagement(&kubeconfig, Some("profile"))
                .await
                .map(|mut e| {
                    e.labels = profile.labels().clone();
                    e
                })
                .map_err(|reason| format!("ClusterProfile {name}: {reason}")),
            Err(reason) => Err(reason),
        };
        desired.insert(name, engagement);
    }
    cache.sweep();
    desired
}

impl Provider for ClusterProfileProvider {
    fn run(self: Box<Self>, set: ClusterSet, stop: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut tracker = Tracker::new(set, "cluster-profiles");
            let api: Api<ClusterProfile> = Api::namespaced(self.client.clone(), &self.namespace);
            let mut config = watcher::Config::default();
            if let Some(selector) = &self.selector {
                config = config.labels(selector);
            }
            let profiles = snapshots(api, config, stop);
            futures::pin_mut!(profiles);
            let mut complaints =
                Complaints::new(self.client.clone(), "multicluster-profiles", "AccessFailed");
            let mut cache = ClientCache::default();
            while let Some(profiles) = profiles.next().await {
                let desired = desired(&profiles, &self.access, &mut cache).await;
                for profile in &profiles {
                    if let Some(Err(reason)) = desired.get(&profile.name_any()) {
                        complaints.about(profile.as_ref(), reason).await;
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
    use flotilla_api::inventory::{AccessCluster, ClusterProfileSpec, ClusterProfileStatus};

    use super::*;

    fn profile(providers: &[&str]) -> ClusterProfile {
        let mut p = ClusterProfile::new("c1", ClusterProfileSpec::default());
        p.status = Some(ClusterProfileStatus {
            access_providers: providers
                .iter()
                .map(|n| AccessProvider {
                    name: n.to_string(),
                    cluster: AccessCluster {
                        server: format!("https://{n}.example:6443"),
                        ..AccessCluster::default()
                    },
                })
                .collect(),
            ..ClusterProfileStatus::default()
        });
        p
    }

    fn access(names: &[&str]) -> AccessProviders {
        AccessProviders {
            providers: names
                .iter()
                .map(|n| AccessProviderConfig {
                    name: n.to_string(),
                    exec_config: ExecConfig {
                        command: Some(format!("/bin/{n}")),
                        ..ExecConfig::default()
                    },
                })
                .collect(),
        }
    }

    #[test]
    fn the_first_offered_provider_with_a_plugin_is_chosen() {
        let (p, a) = (profile(&["a", "b", "c"]), access(&["c", "b"]));
        let (offered, config) = choose(&p, &a).expect("present");
        assert_eq!((offered.name.as_str(), config.name.as_str()), ("b", "b"));
    }

    #[test]
    fn a_profile_without_a_configured_provider_says_which_exist() {
        let reason = choose(&profile(&["a"]), &access(&["b"])).expect_err("an error");
        assert!(reason.contains("(a)") && reason.contains("(b)"), "{reason}");
        let reason = choose(&profile(&[]), &access(&[])).expect_err("an error");
        assert!(reason.contains("(none)"), "{reason}");
    }

    #[test]
    fn the_kubeconfig_runs_the_plugin_against_the_offered_server() {
        let p = profile(&["a"]);
        let a = access(&["a"]);
        let (offered, config) = choose(&p, &a).expect("present");
        let kubeconfig = kubeconfig_for(offered, config).expect("present");
        let cluster = kubeconfig.clusters[0].cluster.as_ref().expect("present");
        assert_eq!(cluster.server.as_deref(), Some("https://a.example:6443"));
        let user = kubeconfig.auth_infos[0]
            .auth_info
            .as_ref()
            .expect("present");
        assert_eq!(
            user.exec.as_ref().expect("present").command.as_deref(),
            Some("/bin/a")
        );
    }
}
