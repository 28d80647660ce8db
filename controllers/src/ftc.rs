//! The FederatedTypeConfig controller: runs one sync controller per FTC with
//! `propagation: Enabled`, restarts it when the FTC's spec changes, stops it when the FTC
//! is disabled or deleted, and reports `status.propagationController`.
//!
//! A `types.kubefed.io/v1beta1` type whose kubefed alpha twin
//! (`types.kubefed.k8s.io/v1alpha1`, [`flotilla_core::alpha`]) has its CRD installed in the
//! host gets a second sync controller for the alpha API; the two know of each other (see
//! `sync::twins`). Whether the alpha CRD is there is looked at whenever the FTC changes and
//! every [`ALPHA_RECHECK`], so installing it later needs no restart.

use std::{collections::HashMap, sync::Arc, time::Duration};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use flotilla_api::core::{
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

use crate::sync::{Serving, SyncShared, TypeController};

/// How often an enabled type is checked for its alpha CRD appearing or going.
const ALPHA_RECHECK: Duration = Duration::from_secs(30);

struct Running {
    spec: FederatedTypeConfigSpec,
    /// What the federated CRD's schema drops from status.
    pruned: crate::ftc_schema::Pruned,
    /// Whether the alpha twin is served (its CRD existed when the controllers started).
    alpha: bool,
    /// The v1beta1 controller, then the alpha one when served.
    controllers: Vec<TypeController>,
}

impl Running {
    fn stop(&self) {
        self.controllers.iter().for_each(TypeController::stop);
    }
}

/// The alpha twin of a type, when its CRD is installed in the host.
async fn served_alpha(
    host: &kube::Client,
    spec: &FederatedTypeConfigSpec,
) -> Option<flotilla_api::core::ApiResource> {
    let alpha = flotilla_api::alpha::alpha_twin(&spec.federated_type)?;
    crd_exists(host, &alpha.qualified_name())
        .await
        .then_some(alpha)
}

async fn crd_exists(host: &kube::Client, name: &str) -> bool {
    let crds: Api<CustomResourceDefinition> = Api::all(host.clone());
    match crds.get_opt(name).await {
        Ok(found) => found.is_some(),
        Err(e) => {
            warn!(crd = %name, error = %e, "reading an alpha CRD failed; taken as not installed");
            false
        }
    }
}

/// One controller per served API of the type, each knowing the other.
async fn start_controllers(
    shared: &Arc<SyncShared>,
    spec: &FederatedTypeConfigSpec,
    pruned: crate::ftc_schema::Pruned,
    alpha: Option<flotilla_api::core::ApiResource>,
) -> Vec<TypeController> {
    let alpha_namespaces = alpha.is_some()
        && crd_exists(
            &shared.host,
            &format!(
                "federatednamespaces.{}",
                flotilla_api::alpha::ALPHA_TYPES_GROUP
            ),
        )
        .await;
    let beta = spec.federated_type.to_kube();
    let alpha = alpha.map(|a| a.to_kube());
    let mut controllers = vec![TypeController::start(
        shared.clone(),
        spec,
        pruned,
        Serving {
            federated: beta.clone(),
            twin: alpha.clone(),
            alpha_namespaces,
        },
    )];
    if let Some(alpha) = alpha {
        // kubefed's alpha CRDs have the same schema, so the same status fields survive.
        controllers.push(TypeController::start(
            shared.clone(),
            spec,
            pruned,
            Serving {
                federated: alpha,
                twin: Some(beta),
                alpha_namespaces,
            },
        ));
    }
    controllers
}

/// Runs the FTC controller until the task is aborted.
pub async fn run(shared: Arc<SyncShared>) {
    let api: Api<FederatedTypeConfig> = Api::namespaced(shared.host.clone(), &shared.namespace);
    let mut running: HashMap<String, Running> = HashMap::new();
    let stream = watcher(api.clone(), watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut recheck = tokio::time::interval(ALPHA_RECHECK);
    loop {
        let ev = tokio::select! {
            ev = stream.next() => match ev { Some(ev) => ev, None => return },
            _ = recheck.tick() => {
                recheck_alpha(&shared, &mut running).await;
                continue;
            }
        };
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
                    r.stop();
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
        let alpha = served_alpha(&shared.host, &ftc.spec).await;
        if current.is_none_or(|r| r.spec != ftc.spec || r.alpha != alpha.is_some()) {
            if let Some(old) = running.remove(&name) {
                old.stop();
                info!(ftc = %name, "FederatedTypeConfig changed; restarting its sync controller");
            }
            let pruned = crate::ftc_schema::check(&shared.host, ftc).await;
            running.insert(
                name.clone(),
                Running {
                    spec: ftc.spec.clone(),
                    pruned,
                    alpha: alpha.is_some(),
                    controllers: start_controllers(shared, &ftc.spec, pruned, alpha).await,
                },
            );
        }
    } else if let Some(old) = running.remove(&name) {
        old.stop();
        info!(ftc = %name, "propagation disabled; sync controller stopped");
    }
    let want = FederatedTypeConfigStatus {
        observed_generation: ftc.metadata.generation.unwrap_or(0),
        propagation_controller: Some(if enabled { "Running" } else { "NotRunning" }.into()),
        status_controller: ftc
            .status
            .as_ref()
            .and_then(|s| s.status_controller.clone()),
        conditions: flotilla_core::health::ftc_conditions(
            &ftc.spec,
            ftc.status.as_ref().map_or(&[], |s| s.conditions.as_slice()),
            ftc.metadata.generation.unwrap_or(0),
            &flotilla_core::taint::rfc3339(crate::sync::plan::decision::now()),
        ),
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

/// An alpha CRD installed or removed since the controllers of a type started restarts
/// them with or without the alpha controller.
async fn recheck_alpha(shared: &Arc<SyncShared>, running: &mut HashMap<String, Running>) {
    for (name, r) in running.iter_mut() {
        let alpha = served_alpha(&shared.host, &r.spec).await;
        if r.alpha == alpha.is_some() {
            continue;
        }
        info!(ftc = %name, alpha = alpha.is_some(), "kubefed alpha CRD changed; restarting the sync controllers");
        r.stop();
        r.alpha = alpha.is_some();
        r.controllers = start_controllers(shared, &r.spec, r.pruned, alpha).await;
    }
}
