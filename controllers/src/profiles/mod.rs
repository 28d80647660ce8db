//! The Cluster Inventory API served: one ClusterProfile (`multicluster.x-k8s.io/v1alpha1`)
//! per KubeFedCluster, in the control-plane namespace, labelled
//! `x-k8s.io/cluster-manager: flotilla` and deleted when the cluster leaves. Caches the
//! KubeFedClusters and Flotilla's profiles, asks [`plan`] what differs and only then writes,
//! so an unchanged federation costs no writes. It must not probe members: health and
//! version come from the KubeFedCluster status the registry writes.

pub mod plan;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use flotilla_crds::{
    FIELD_MANAGER, KubeFedCluster,
    inventory::{CLUSTER_MANAGER_LABEL, CLUSTER_MANAGER_NAME, ClusterProfile},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
    runtime::reflector::Store,
};
use serde_json::json;
use tokio::sync::Notify;
use tracing::{debug, info, instrument, warn};

use crate::{
    metrics::{Metrics, ProfileWriteLabels},
    watch::{WatchParams, notifying_store},
};
use plan::Op;

/// How often everything is compared again without a change (a profile edited or deleted
/// by hand is put back even if its watch event was missed).
const RECHECK: Duration = Duration::from_secs(300);
/// Delay before a failed write is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// Errors of one profile write.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The host refused or failed a write.
    #[error("{action} ClusterProfile {name}: {source}")]
    Write {
        /// `read`, `apply`, `apply status of` or `delete`.
        action: &'static str,
        /// Name of the profile.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// Keeps a ClusterProfile per KubeFedCluster of `namespace`. Runs until aborted.
pub async fn run(host: Client, namespace: String, metrics: Arc<Metrics>) {
    let changed = Arc::new(Notify::new());
    let (kfcs, kfc_watch) = notifying_store::<KubeFedCluster>(
        Api::namespaced(host.clone(), &namespace),
        WatchParams::host("kubefed cluster"),
        &changed,
    );
    let mut profile_params = WatchParams::host("cluster profile");
    profile_params.label_selector = Some(format!("{CLUSTER_MANAGER_LABEL}={CLUSTER_MANAGER_NAME}"));
    let profiles_api: Api<ClusterProfile> = Api::namespaced(host, &namespace);
    let (profiles, profile_watch) = notifying_store(profiles_api.clone(), profile_params, &changed);
    let _abort = AbortOnDrop([kfc_watch, profile_watch]);
    let mut memory = Memory::default();
    let mut wait = RECHECK;
    loop {
        tokio::select! {
            _ = changed.notified() => {}
            _ = tokio::time::sleep(wait) => memory.foreign.clear(),
        }
        if kfcs.wait_until_ready().await.is_err() || profiles.wait_until_ready().await.is_err() {
            return;
        }
        wait = match reconcile_all(&profiles_api, &kfcs, &profiles, &mut memory, &metrics).await {
            Ok(()) => RECHECK,
            Err(()) => RETRY,
        };
    }
}

/// What the controller remembers between passes.
#[derive(Default)]
struct Memory {
    /// What was last written per profile (so a label the cluster lost is removed).
    applied: BTreeMap<String, ClusterProfile>,
    /// Names whose profile belongs to another cluster manager: not looked at again until
    /// the next periodic recheck.
    foreign: BTreeSet<String>,
}

/// Plans against the caches and carries the writes out; `Err` when one failed (each
/// failure is logged where it happened).
#[instrument(skip_all)]
async fn reconcile_all(
    api: &Api<ClusterProfile>,
    kfcs: &Store<KubeFedCluster>,
    profiles: &Store<ClusterProfile>,
    memory: &mut Memory,
    metrics: &Metrics,
) -> Result<(), ()> {
    let clusters = kfcs.state();
    let current = profiles.state();
    let current: Vec<&ClusterProfile> = current.iter().map(|p| &**p).collect();
    let ops = plan::plan(clusters.iter().map(|k| &**k), &current, &memory.applied);
    let cached: BTreeSet<String> = current.iter().map(|p| p.name_any()).collect();
    let mut result = Ok(());
    for op in ops {
        let op_label = op.as_str();
        let outcome = match op {
            Op::Apply(profile) => {
                let name = profile.name_any();
                if memory.foreign.contains(&name) {
                    continue;
                }
                match claimable(api, &name, cached.contains(&name)).await {
                    Ok(true) => apply(api, &profile).await.map(|()| {
                        memory.applied.insert(name, *profile);
                    }),
                    Ok(false) => {
                        memory.foreign.insert(name);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Op::Delete { name, uid } => delete(api, &name, uid).await.map(|()| {
                memory.applied.remove(&name);
            }),
        };
        let labels = ProfileWriteLabels {
            op: op_label,
            result: if outcome.is_ok() {
                "success"
            } else {
                "failure"
            },
        };
        metrics.profiles.writes.get_or_create(&labels).inc();
        if let Err(e) = outcome {
            warn!(error = %e, "keeping the cluster inventory failed; retrying");
            result = Err(());
        }
    }
    result
}

/// Whether the profile `name` may be written: always when the cache (Flotilla's profiles
/// only) holds it; otherwise a profile of that name must not belong to another cluster
/// manager. The extra read happens only when a profile is created or recreated.
async fn claimable(api: &Api<ClusterProfile>, name: &str, cached: bool) -> Result<bool, Error> {
    if cached {
        return Ok(true);
    }
    let existing = api.get_opt(name).await.map_err(|source| Error::Write {
        action: "read",
        name: name.to_string(),
        source,
    })?;
    match existing {
        Some(p) if plan::is_foreign(&p) => {
            warn!(
                cluster = %name,
                manager = %p.spec.cluster_manager.name,
                "a ClusterProfile of this name belongs to another cluster manager; leaving it alone"
            );
            Ok(false)
        }
        _ => Ok(true),
    }
}

/// Applies the profile's metadata and spec, then its status (a subresource).
async fn apply(api: &Api<ClusterProfile>, profile: &ClusterProfile) -> Result<(), Error> {
    let name = profile.name_any();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let body = json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
        "metadata": {
            "name": name,
            "labels": profile.labels(),
            "ownerReferences": profile.owner_references(),
        },
        "spec": profile.spec,
    });
    let write_error = |action| {
        let name = name.clone();
        move |source| Error::Write {
            action,
            name,
            source,
        }
    };
    api.patch(&name, &params, &Patch::Apply(&body))
        .await
        .map_err(write_error("apply"))?;
    let status = json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
        "metadata": {"name": name},
        "status": profile.status,
    });
    api.patch_status(&name, &params, &Patch::Apply(&status))
        .await
        .map_err(write_error("apply status of"))?;
    info!(cluster = %name, "cluster profile written");
    Ok(())
}

/// Deletes the profile of a cluster that left; already gone is fine.
async fn delete(api: &Api<ClusterProfile>, name: &str, uid: Option<String>) -> Result<(), Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => {
            info!(cluster = %name, "cluster profile deleted: the cluster left");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
            debug!(cluster = %name, "cluster profile already gone or replaced");
            Ok(())
        }
        Err(source) => Err(Error::Write {
            action: "delete",
            name: name.to_string(),
            source,
        }),
    }
}

struct AbortOnDrop<const N: usize>([tokio::task::JoinHandle<()>; N]);

impl<const N: usize> Drop for AbortOnDrop<N> {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}
