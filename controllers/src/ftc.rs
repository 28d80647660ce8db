//! The FederatedTypeConfig controller: runs one sync controller per FTC with
//! `propagation: Enabled`, restarts it when the FTC's spec changes, stops it when the FTC
//! is disabled or deleted, and reports `status.propagationController`.

use std::{collections::HashMap, sync::Arc};

use flotilla_crds::core::{
    FederatedTypeConfig, FederatedTypeConfigSpec, FederatedTypeConfigStatus, PropagationMode,
};
use futures::StreamExt;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use tracing::{info, warn};

use crate::sync::{SyncShared, TypeController};

struct Running {
    spec: FederatedTypeConfigSpec,
    controller: TypeController,
}

/// Runs the FTC controller until the task is aborted.
pub async fn run(shared: Arc<SyncShared>) {
    let api: Api<FederatedTypeConfig> = Api::namespaced(shared.host.clone(), &shared.namespace);
    let mut running: HashMap<String, Running> = HashMap::new();
    let stream = watcher(api.clone(), watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) if crate::watch::is_expected_relist(&e) => {
                tracing::debug!(error = %e, "FederatedTypeConfig watch expired; relisting");
                continue;
            }
            Err(e) => {
                warn!(error = %e, "FederatedTypeConfig watch failed; retrying");
                continue;
            }
        };
        match ev {
            watcher::Event::Apply(ftc) | watcher::Event::InitApply(ftc) => {
                handle(&shared, &api, &mut running, &ftc).await;
            }
            watcher::Event::Delete(ftc) => {
                if let Some(r) = running.remove(&ftc.name_any()) {
                    r.controller.stop();
                    info!(ftc = %ftc.name_any(), "FederatedTypeConfig deleted; sync controller stopped");
                }
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
}

async fn handle(
    shared: &Arc<SyncShared>,
    api: &Api<FederatedTypeConfig>,
    running: &mut HashMap<String, Running>,
    ftc: &FederatedTypeConfig,
) {
    let name = ftc.name_any();
    let enabled = ftc.spec.propagation == PropagationMode::Enabled
        && ftc.metadata.deletion_timestamp.is_none();
    let current = running.get(&name);
    if enabled {
        if current.is_none_or(|r| r.spec != ftc.spec) {
            if let Some(old) = running.remove(&name) {
                old.controller.stop();
                info!(ftc = %name, "FederatedTypeConfig changed; restarting its sync controller");
            }
            let pruned = crate::ftc_schema::check(&shared.host, ftc).await;
            let controller = TypeController::start(shared.clone(), &ftc.spec, pruned);
            running.insert(
                name.clone(),
                Running {
                    spec: ftc.spec.clone(),
                    controller,
                },
            );
        }
    } else if let Some(old) = running.remove(&name) {
        old.controller.stop();
        info!(ftc = %name, "propagation disabled; sync controller stopped");
    }
    let want = FederatedTypeConfigStatus {
        observed_generation: ftc.metadata.generation.unwrap_or(0),
        propagation_controller: Some(if enabled { "Running" } else { "NotRunning" }.into()),
        status_controller: ftc
            .status
            .as_ref()
            .and_then(|s| s.status_controller.clone()),
    };
    if ftc.status.as_ref() != Some(&want) {
        let patch = json!({ "status": want });
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            warn!(ftc = %name, error = %e, "writing FederatedTypeConfig status failed");
        }
    }
}
