//! The Cluster Inventory API served: one ClusterProfile (`multicluster.x-k8s.io/v1alpha1`)
//! per KubeFedCluster, in the control-plane namespace (or the one configured), labelled
//! `x-k8s.io/cluster-manager: flotilla` and deleted when the cluster leaves, with the
//! About API properties its member declares (which also become `about.flotilla.io/` labels
//! on the KubeFedCluster, see [`properties`]). Caches the KubeFedClusters, Flotilla's
//! profiles and the members' ClusterProperties, asks [`plan`] what differs and only then
//! writes, so an unchanged federation costs no writes. It does not probe members: health
//! and version come from the KubeFedCluster status the registry writes.

pub mod import;
pub mod plan;
pub mod properties;

use flotilla_multicluster::{
    gate::{Gate, store_ready},
    runner::{Action, PassRunner, Retry, Wake},
    tasks::AbortOnDrop,
};
use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use flotilla_api::{
    FIELD_MANAGER, KubeFedCluster,
    about::ClusterProperty,
    inventory::{CLUSTER_MANAGER_LABEL, CLUSTER_MANAGER_NAME, ClusterProfile, Property},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
    runtime::{
        events::{EventType, Recorder},
        reflector::Store,
    },
};
use serde_json::json;
use tokio::sync::{Notify, mpsc};
use tracing::{debug, info, instrument, warn};

use crate::{
    metrics::{Metrics, ProfileWriteLabels},
    multicluster::{ClusterSet, MemberWatch},
    watch::{WatchParams, notifying_store},
};
use plan::Op;

/// How often everything is compared again without a change (a profile edited or deleted
/// by hand is put back even if its watch event was missed).
const RECHECK: Duration = Duration::from_secs(300);
/// Delay before a failed write is tried again.
const RETRY: Duration = Duration::from_secs(5);
/// The reporting controller of the Events this controller publishes.
const REPORTING_CONTROLLER: &str = "flotilla-profiles";
/// Field manager of the property labels on KubeFedClusters (only those labels).
pub const PROPERTY_LABEL_MANAGER: &str = "flotilla-about";

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

/// Where the controller works.
#[derive(Clone, Debug)]
pub struct Namespaces {
    /// The control-plane namespace, holding the KubeFedClusters.
    pub clusters: String,
    /// The namespace of the ClusterProfiles (by default the control-plane namespace).
    pub profiles: String,
}

/// Keeps a ClusterProfile per KubeFedCluster, with the properties its member declares
/// through the About API, and the member's property labels on the KubeFedCluster. Runs
/// until aborted.
pub async fn run(
    host: Client,
    namespaces: Namespaces,
    clusters: ClusterSet,
    metrics: Arc<Metrics>,
) {
    let changed = Arc::new(Notify::new());
    let kfc_api: Api<KubeFedCluster> = Api::namespaced(host.clone(), &namespaces.clusters);
    let (kfcs, kfc_watch) = notifying_store(
        kfc_api.clone(),
        WatchParams::host("kubefed cluster"),
        &changed,
    );
    let mut profile_params = WatchParams::host("cluster profile");
    profile_params.label_selector = Some(format!("{CLUSTER_MANAGER_LABEL}={CLUSTER_MANAGER_NAME}"));
    let profiles_api: Api<ClusterProfile> = Api::namespaced(host.clone(), &namespaces.profiles);
    let (profiles, profile_watch) = notifying_store(profiles_api.clone(), profile_params, &changed);
    let (tx, rx) = mpsc::unbounded_channel();
    let members = MemberWatch::<ClusterProperty>::start_optional(clusters, (), |_| {}, tx);
    let (gate, gate_task) = {
        let (kfcs, profiles) = (kfcs.clone(), profiles.clone());
        Gate::after(async move { store_ready(&kfcs).await && store_ready(&profiles).await })
    };
    let _abort = AbortOnDrop::from([kfc_watch, profile_watch, gate_task]);
    let writer = Writer {
        profiles: profiles_api,
        kfcs: kfc_api,
        recorder: crate::events::recorder(host, REPORTING_CONTROLLER),
        namespace: namespaces.profiles,
    };
    let mut runner = PassRunner::new("cluster-profiles", changed)
        .period(RECHECK)
        .retry(Retry::Fixed(RETRY))
        .gate(gate)
        .wake_on_channel(rx);
    let mut memory = Memory::default();
    while let Some(wake) = runner.next().await {
        // A timer (the recheck, or the retry after a failure) looks at foreign profiles again.
        if wake == Wake::Timer {
            memory.foreign.clear();
        }
        let known = known_properties(&members);
        let action =
            match reconcile_all(&writer, &kfcs, &profiles, &known, &mut memory, &metrics).await {
                Ok(()) => Action::AwaitChange,
                Err(()) => Action::backoff(),
            };
        runner.finish(action);
    }
}

/// The properties of every member whose ClusterProperty cache is complete.
fn known_properties(members: &MemberWatch<ClusterProperty>) -> BTreeMap<String, Vec<Property>> {
    members
        .clusters()
        .into_iter()
        .filter(|c| members.is_synced(c))
        .map(|c| {
            let objects = members.list(&c);
            let listed = properties::profile_properties(objects.iter().map(|o| &**o));
            (c, listed)
        })
        .collect()
}

/// The clients and recorder the controller writes through.
struct Writer {
    profiles: Api<ClusterProfile>,
    kfcs: Api<KubeFedCluster>,
    recorder: Recorder,
    namespace: String,
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
    writer: &Writer,
    kfcs: &Store<KubeFedCluster>,
    profiles: &Store<ClusterProfile>,
    known: &BTreeMap<String, Vec<Property>>,
    memory: &mut Memory,
    metrics: &Metrics,
) -> Result<(), ()> {
    let clusters = kfcs.state();
    let mut result = label_clusters(writer, &clusters, known, metrics).await;
    let current = profiles.state();
    let current: Vec<&ClusterProfile> = current.iter().map(|p| &**p).collect();
    let inputs = plan::Inputs {
        namespace: &writer.namespace,
        properties: known,
    };
    // An imported cluster's profile is the other cluster manager's ([`import`]).
    let ops = plan::plan(
        clusters
            .iter()
            .map(|k| &**k)
            .filter(|k| !import::is_imported(k)),
        &current,
        &memory.applied,
        inputs,
    );
    let cached: BTreeSet<String> = current.iter().map(|p| p.name_any()).collect();
    for op in ops {
        let op_label = op.as_str();
        let outcome = match op {
            Op::Apply(profile, parts) => {
                let name = profile.name_any();
                if memory.foreign.contains(&name) {
                    continue;
                }
                match claimable(writer, &clusters, &name, cached.contains(&name)).await {
                    Ok(true) => apply(&writer.profiles, &profile, parts).await.map(|()| {
                        memory.applied.insert(name, *profile);
                    }),
                    Ok(false) => {
                        memory.foreign.insert(name);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Op::Delete { name, uid } => delete(&writer.profiles, &name, uid).await.map(|()| {
                memory.applied.remove(&name);
            }),
        };
        count(metrics, op_label, &outcome);
        if let Err(e) = outcome {
            warn!(error = %e, "keeping the cluster inventory failed; retrying");
            result = Err(());
        }
    }
    result
}

fn count(metrics: &Metrics, op: &'static str, outcome: &Result<(), Error>) {
    let labels = ProfileWriteLabels {
        op,
        result: if outcome.is_ok() {
            "success"
        } else {
            "failure"
        },
    };
    metrics.profiles.writes.get_or_create(&labels).inc();
}

/// Puts each member's property labels on its KubeFedCluster where they differ, with a
/// field manager of their own so that only those labels are touched.
async fn label_clusters(
    writer: &Writer,
    clusters: &[Arc<KubeFedCluster>],
    known: &BTreeMap<String, Vec<Property>>,
    metrics: &Metrics,
) -> Result<(), ()> {
    let mut result = Ok(());
    for kfc in clusters {
        let name = kfc.name_any();
        let Some(labels) = properties::label_update(kfc, known.get(&name).map(Vec::as_slice))
        else {
            continue;
        };
        let body = json!({
            "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedCluster",
            "metadata": {"name": name, "labels": labels},
        });
        let params = PatchParams::apply(PROPERTY_LABEL_MANAGER).force();
        let outcome = writer
            .kfcs
            .patch(&name, &params, &Patch::Apply(&body))
            .await
            .map(|_| info!(cluster = %name, "property labels written to the KubeFedCluster"))
            .map_err(|source| Error::Write {
                action: "label",
                name: name.clone(),
                source,
            });
        count(metrics, "label", &outcome);
        if let Err(e) = outcome {
            warn!(error = %e, "labelling a cluster with its properties failed; retrying");
            result = Err(());
        }
    }
    result
}

/// Whether the profile `name` may be written: always when the cache (Flotilla's profiles
/// only) holds it; otherwise a profile of that name must not belong to another cluster
/// manager (a Warning Event on the KubeFedCluster says so). The extra read happens only when
/// a profile is created or recreated.
async fn claimable(
    writer: &Writer,
    clusters: &[Arc<KubeFedCluster>],
    name: &str,
    cached: bool,
) -> Result<bool, Error> {
    if cached {
        return Ok(true);
    }
    let existing = writer
        .profiles
        .get_opt(name)
        .await
        .map_err(|source| Error::Write {
            action: "read",
            name: name.to_string(),
            source,
        })?;
    let Some(p) = existing.filter(plan::is_foreign) else {
        return Ok(true);
    };
    let manager = &p.spec.cluster_manager.name;
    warn!(cluster = %name, %manager, "a ClusterProfile of this name belongs to another cluster manager; leaving it alone");
    if let Some(kfc) = clusters.iter().find(|k| k.name_any() == name) {
        let note = format!(
            "ClusterProfile {}/{name} belongs to cluster manager {manager:?}: Flotilla leaves it \
             alone and publishes no profile for this cluster",
            writer.namespace
        );
        let reference = kfc.object_ref(&());
        crate::events::publish(
            &writer.recorder,
            &reference,
            EventType::Warning,
            "ClusterProfileConflict",
            "PublishProfile",
            note,
        )
        .await;
    }
    Ok(false)
}

/// Applies the `parts` of the profile that are not up to date (its metadata and spec, then
/// its status).
async fn apply(
    api: &Api<ClusterProfile>,
    profile: &ClusterProfile,
    parts: plan::Parts,
) -> Result<(), Error> {
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
    if parts.spec {
        api.patch(&name, &params, &Patch::Apply(&body))
            .await
            .map_err(write_error("apply"))?;
    }
    if parts.status {
        let status = json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
            "metadata": {"name": name},
            "status": profile.status,
        });
        api.patch_status(&name, &params, &Patch::Apply(&status))
            .await
            .map_err(write_error("apply status of"))?;
    }
    info!(cluster = %name, spec = parts.spec, status = parts.status, "cluster profile written");
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
