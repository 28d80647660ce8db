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
    member_rbac: tokio::task::JoinHandle<()>,
    sa_import: tokio::task::JoinHandle<()>,
    profiles: tokio::task::JoinHandle<()>,
    mcs: tokio::task::JoinHandle<()>,
}

impl ControlPlane {
    /// Starts every controller against the host cluster, for the KubeFed objects in
    /// `namespace` (the control-plane namespace). Must be called inside a Tokio runtime.
    pub fn start(host: Client, namespace: &str, metrics: Arc<Metrics>) -> ControlPlane {
        let clusters = ClusterSet::new();
        let registry = registry::start(host.clone(), namespace, clusters.clone(), metrics.clone());
        let scheduler = tokio::spawn(crate::scheduling::run(host.clone(), clusters.clone()));
        let member_rbac = tokio::spawn(crate::member_rbac::run(
            host.clone(),
            namespace.to_string(),
            clusters.clone(),
        ));
        let sa_import = tokio::spawn(crate::sa_import::run(
            host.clone(),
            namespace.to_string(),
            clusters.clone(),
            metrics.clone(),
        ));
        let profiles = tokio::spawn(crate::profiles::run(
            host.clone(),
            namespace.to_string(),
            metrics.clone(),
        ));
        let mcs = tokio::spawn(crate::mcs::run(
            host.clone(),
            clusters.clone(),
            metrics.clone(),
        ));
        let shared = SyncShared::new(
            host,
            clusters.clone(),
            registry.config(),
            namespace.to_string(),
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
            member_rbac,
            sa_import,
            profiles,
            mcs,
        }
    }

    /// Stops every controller and waits for the registry's tasks to end.
    pub async fn shutdown(mut self) {
        self.ftc.abort();
        self.scheduler.abort();
        self.member_rbac.abort();
        self.sa_import.abort();
        self.profiles.abort();
        self.mcs.abort();
        if let Some(r) = self.registry.take() {
            r.shutdown().await;
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.ftc.abort();
        self.scheduler.abort();
        self.member_rbac.abort();
        self.sa_import.abort();
        self.profiles.abort();
        self.mcs.abort();
    }
}
