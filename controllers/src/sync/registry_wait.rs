//! Start-up gate of the sync controllers: reconciling waits until the cluster registry
//! knows every KubeFedCluster of the host and has probed each once. Before that, a cluster
//! missing from the set would look removed — deletion would not wait for it — and an
//! unprobed one unready.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use flotilla_api::KubeFedCluster;
use kube::{Api, ResourceExt, api::ListParams};
use tracing::{debug, warn};

use super::SyncShared;

/// Longest wait for the registry at start-up; after it, reconciling starts anyway.
const REGISTRY_WAIT_LIMIT: Duration = Duration::from_secs(60);

/// Returns once every KubeFedCluster of the host is registered in the cluster set and
/// has had its first health verdict (Ready, or unready for longer than a probe takes).
/// Before that, a cluster missing from the set would look removed — deletion would not wait
/// for it — and an unprobed one unready.
pub(super) async fn wait_for_registry(shared: Arc<SyncShared>) {
    let started = Instant::now();
    let api: Api<KubeFedCluster> = Api::namespaced(shared.host.clone(), &shared.namespace);
    let names: Vec<String> = loop {
        match api.list_metadata(&ListParams::default()).await {
            Ok(list) => break list.items.iter().map(|c| c.name_any()).collect(),
            Err(e) if started.elapsed() < REGISTRY_WAIT_LIMIT => {
                debug!(error = %e, "listing KubeFedClusters failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                warn!(error = %e, "listing KubeFedClusters failed; reconciling without waiting for the registry");
                return;
            }
        }
    };
    let mut changes = shared.clusters.changes();
    loop {
        let config = shared.config.borrow().clone();
        let probe_time = config.health_timeout
            + config.health_period * config.success_threshold.max(1)
            + Duration::from_secs(1);
        let states: Vec<_> = names.iter().map(|n| shared.clusters.get(n)).collect();
        let registered = states.iter().all(Option::is_some);
        let probed = started.elapsed() >= probe_time || states.iter().flatten().all(|c| c.ready);
        if registered && probed {
            debug!(clusters = names.len(), waited = ?started.elapsed(), "cluster registry ready");
            break;
        }
        if started.elapsed() >= REGISTRY_WAIT_LIMIT {
            let missing: Vec<&String> = names
                .iter()
                .zip(&states)
                .filter(|(_, s)| s.is_none())
                .map(|(n, _)| n)
                .collect();
            warn!(?missing, "clusters still unregistered; reconciling anyway");
            break;
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}
