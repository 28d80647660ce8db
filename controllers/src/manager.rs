//! The control plane assembled: registry + health, KubeFedConfig, the FederatedTypeConfig
//! controller and through it one sync controller per enabled type, and the
//! ReplicaSchedulingPreference scheduler, the ServiceAccountImport controller, the
//! ClusterProfile inventory and Multi-Cluster Services (ServiceExport/ServiceImport). Used in-process by
//! `flotilla controller-manager`, `flotilla dev`, the benchmark and the tests.

use std::sync::Arc;

use kube::Client;
use tracing::info;

use crate::{
    metrics::Metrics,
    multicluster::ClusterSet,
    registry::{self, RegistryHandle},
    sync::SyncShared,
};

/// A running control plane. Dropping it stops every controller.
pub struct ControlPlane {
    /// The member clusters as the registry sees them.
    pub clusters: ClusterSet,
    /// Metrics of every controller.
    pub metrics: Arc<Metrics>,
    registry: Option<RegistryHandle>,
    ftc: tokio::task::JoinHandle<()>,
    scheduler: tokio::task::JoinHandle<()>,
    capacity: tokio::task::JoinHandle<()>,
    member_rbac: tokio::task::JoinHandle<()>,
    sa_import: tokio::task::JoinHandle<()>,
    profiles: tokio::task::JoinHandle<()>,
    mcs: tokio::task::JoinHandle<()>,
    policy: tokio::task::JoinHandle<()>,
}

/// Where the control plane keeps its objects.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The control-plane namespace (KubeFedClusters, KubeFedConfig, type configs).
    pub namespace: String,
    /// The namespace of the ClusterProfiles; the control-plane namespace when `None`.
    pub profile_namespace: Option<String>,
    /// Member work is sharded over every replica ([`crate::sharded`]): the leader's member
    /// RBAC covers only Pull members.
    pub shard_member_work: bool,
    /// `--credential-renewal-interval`: rotating member tokens are renewed at most this
    /// long after they were issued (two thirds of their life otherwise).
    pub credential_renewal_interval: Option<std::time::Duration>,
    /// `--exec-plugin-dir`: KubeFedClusters' exec credential plugins under this directory
    /// run; none without it.
    pub exec_plugin_dir: Option<std::path::PathBuf>,
    /// `--access-providers`: other cluster managers' ClusterProfiles offering one of these
    /// access providers become members ([`crate::profiles::import`]); none without it.
    pub access_providers: Option<flotilla_multicluster::provider::profiles::AccessProviders>,
}

impl Options {
    /// Everything in `namespace`.
    pub fn new(namespace: &str) -> Self {
        Options {
            namespace: namespace.to_string(),
            profile_namespace: None,
            shard_member_work: false,
            credential_renewal_interval: None,
            exec_plugin_dir: None,
            access_providers: None,
        }
    }

    /// The namespace of the ClusterProfiles.
    pub fn profile_namespace(&self) -> &str {
        self.profile_namespace.as_deref().unwrap_or(&self.namespace)
    }
}

impl ControlPlane {
    /// Starts every controller against the host cluster, for the KubeFed objects in
    /// `namespace` (the control-plane namespace). Must be called inside a Tokio runtime.
    pub fn start(host: Client, namespace: &str, metrics: Arc<Metrics>) -> ControlPlane {
        ControlPlane::start_with(host, &Options::new(namespace), metrics)
    }

    /// [`ControlPlane::start`] with every option.
    pub fn start_with(host: Client, options: &Options, metrics: Arc<Metrics>) -> ControlPlane {
        let namespace = options.namespace.as_str();
        let clusters = ClusterSet::new();
        let registry = registry::start_with(
            host.clone(),
            namespace,
            clusters.clone(),
            metrics.clone(),
            registry::RegistryOptions {
                renewal_interval: options.credential_renewal_interval,
                exec_plugin_dir: options.exec_plugin_dir.clone(),
            },
        );
        let (member_tx, member_rx) = tokio::sync::mpsc::unbounded_channel();
        let resources = Arc::new(crate::capacity::MemberResources::start(
            clusters.clone(),
            member_tx,
        ));
        let capacity = tokio::spawn(crate::capacity::publish(
            host.clone(),
            namespace.to_string(),
            clusters.clone(),
            resources.clone(),
        ));
        let scheduler = tokio::spawn(crate::scheduling::run(
            host.clone(),
            clusters.clone(),
            crate::scheduling::Members {
                resources,
                events: member_rx,
            },
            registry.config(),
            metrics.queue_ages.clone(),
        ));
        let member_rbac = tokio::spawn(crate::member_rbac::run(
            host.clone(),
            namespace.to_string(),
            clusters.clone(),
            match options.shard_member_work {
                true => crate::member_rbac::Scope::Pull,
                false => crate::member_rbac::Scope::All,
            },
        ));
        let sa_import = tokio::spawn(crate::sa_import::run(
            host.clone(),
            namespace.to_string(),
            clusters.clone(),
            metrics.clone(),
        ));
        let profile_namespaces = crate::profiles::Namespaces {
            clusters: namespace.to_string(),
            profiles: options.profile_namespace().to_string(),
        };
        let import = options.access_providers.clone().map(|access| {
            crate::profiles::import::run(host.clone(), profile_namespaces.clone(), access)
        });
        let publish = crate::profiles::run(
            host.clone(),
            profile_namespaces,
            clusters.clone(),
            metrics.clone(),
        );
        // Publishing Flotilla's profiles and importing others' end together.
        let profiles = tokio::spawn(async move {
            match import {
                Some(import) => {
                    tokio::join!(publish, import);
                }
                None => publish.await,
            }
        });
        let mcs = tokio::spawn(crate::mcs::run(
            host.clone(),
            clusters.clone(),
            registry.config(),
            metrics.clone(),
        ));
        let policy = tokio::spawn(crate::policy::run(
            host.clone(),
            namespace.to_string(),
            clusters.clone(),
            metrics.queue_ages.clone(),
        ));
        let shared = SyncShared::new(
            host,
            clusters.clone(),
            registry.config(),
            namespace.to_string(),
            options.profile_namespace(),
            metrics.clone(),
        );
        let ftc = tokio::spawn(crate::ftc::run(shared));
        info!(%namespace, "control plane started");
        ControlPlane {
            clusters,
            metrics,
            registry: Some(registry),
            ftc,
            scheduler,
            capacity,
            member_rbac,
            sa_import,
            profiles,
            mcs,
            policy,
        }
    }

    /// Stops every controller and waits for the registry's tasks to end.
    pub async fn shutdown(mut self) {
        self.ftc.abort();
        self.scheduler.abort();
        self.capacity.abort();
        self.member_rbac.abort();
        self.sa_import.abort();
        self.profiles.abort();
        self.mcs.abort();
        self.policy.abort();
        if let Some(r) = self.registry.take() {
            r.shutdown().await;
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.ftc.abort();
        self.scheduler.abort();
        self.capacity.abort();
        self.member_rbac.abort();
        self.sa_import.abort();
        self.profiles.abort();
        self.mcs.abort();
        self.policy.abort();
    }
}
