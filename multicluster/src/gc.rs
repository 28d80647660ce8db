//! Cross-cluster garbage collection, the I/O half: the owner's finalizer (added before any
//! dependent exists, removed once the deletion policy is carried out), deletes and
//! orphaning of dependents in every cluster, and the collector of dependents whose owner is
//! confirmed gone. The decisions are [`crate::ownership`]'s; nothing here decides.

use std::{fmt::Debug, time::Duration};

use kube::{
    Api, Resource,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy},
    core::ApiResource,
};
use serde::de::DeserializeOwned;
use tracing::{debug, info, warn};

use crate::{
    Error,
    controller::{ObjectKey, Shared, metrics::GcLabels},
    ownership::{
        DeletionPolicy, Dependent, GcDecision, MultiClusterOwner, OwnerObservation,
        decide_dependent, orphan_patch, plan_finalize,
    },
};

/// How soon a finalizer that waits (foreground deletes, unreachable clusters) looks again,
/// besides the watch events that wake it earlier.
pub const FINALIZE_RECHECK: Duration = Duration::from_secs(10);

/// A JSON patch that sets `finalizers`, guarded by the object's resourceVersion so that a
/// concurrent change makes it fail (and the reconcile retry) instead of losing a finalizer.
fn finalizers_patch(obj: &impl Resource, finalizers: Vec<String>) -> Patch<()> {
    let rv = obj.meta().resource_version.clone();
    let ops = serde_json::json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
    ]);
    // The literal above is a valid JSON patch.
    Patch::Json(serde_json::from_value(ops).unwrap_or_default())
}

/// Adds `finalizer` to `obj` unless present; whether it was added.
pub async fn ensure_finalizer<K>(
    api: &Api<DynamicObject>,
    obj: &K,
    finalizer: &str,
) -> Result<bool, kube::Error>
where
    K: Resource,
{
    let mut finalizers = obj.meta().finalizers.clone().unwrap_or_default();
    if finalizers.iter().any(|f| f == finalizer) {
        return Ok(false);
    }
    finalizers.push(finalizer.to_owned());
    let name = obj.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::default(),
        &finalizers_patch(obj, finalizers),
    )
    .await?;
    Ok(true)
}

/// Removes `finalizer` from `obj` if present.
pub async fn remove_finalizer<K>(
    api: &Api<DynamicObject>,
    obj: &K,
    finalizer: &str,
) -> Result<(), kube::Error>
where
    K: Resource,
{
    let finalizers = obj.meta().finalizers.clone().unwrap_or_default();
    if !finalizers.iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let kept = finalizers.into_iter().filter(|f| f != finalizer).collect();
    let name = obj.meta().name.clone().unwrap_or_default();
    match api
        .patch(&name, &PatchParams::default(), &finalizers_patch(obj, kept))
        .await
    {
        Ok(_) => Ok(()),
        // Gone already: nothing holds it.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

pub(crate) fn dynamic_api(
    client: kube::Client,
    ar: &ApiResource,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(client, ns, ar),
        None => Api::all_with(client, ar),
    }
}

/// Deletes one dependent (only the object with the uid seen, in the background). An
/// object already gone, or replaced under the same name, counts as deleted.
async fn delete_dependent(shared: &Shared, ar: &ApiResource, d: &Dependent) -> Result<(), Error> {
    let client = shared.client_of(&d.cluster)?;
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: d.uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match dynamic_api(client, ar, d.namespace.as_deref())
        .delete(&d.name, &params)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(source) => {
            return Err(Error::Kube {
                action: "deleting a dependent",
                cluster: d.cluster.clone(),
                source,
            });
        }
    }
    count(shared, "delete");
    info!(cluster = %d.cluster, namespace = ?d.namespace, name = %d.name, kind = %ar.kind, "deleted a dependent");
    Ok(())
}

async fn orphan_dependent(shared: &Shared, ar: &ApiResource, d: &Dependent) -> Result<(), Error> {
    let client = shared.client_of(&d.cluster)?;
    let api = dynamic_api(client, ar, d.namespace.as_deref());
    match api
        .patch(
            &d.name,
            &PatchParams::default(),
            &Patch::Merge(orphan_patch()),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(source) => {
            return Err(Error::Kube {
                action: "orphaning a dependent",
                cluster: d.cluster.clone(),
                source,
            });
        }
    }
    count(shared, "orphan");
    Ok(())
}

fn count(shared: &Shared, op: &'static str) {
    if let Some(m) = &shared.metrics {
        m.gc_operations
            .get_or_create(&GcLabels {
                controller: shared.name.clone(),
                op,
            })
            .inc();
    }
}

/// Carries out `policy` for an owner being deleted; whether its finalizer may go now.
pub(crate) async fn finalize(
    shared: &Shared,
    owner: &MultiClusterOwner,
    policy: DeletionPolicy,
) -> Result<bool, Error> {
    let found = shared.dependents_of(owner);
    let dependents: Vec<Dependent> = found.iter().map(|(_, d)| d.clone()).collect();
    let unseen = shared.unseen();
    let plan = plan_finalize(policy, &dependents, &unseen);
    debug!(owner = %owner.key(), ?policy, ?plan, "finalizing");
    for (ar, d) in &found {
        if plan.delete.contains(d) {
            delete_dependent(shared, ar, d).await?;
        }
        if plan.orphan.contains(d) {
            orphan_dependent(shared, ar, d).await?;
        }
    }
    if !plan.waiting_for.is_empty() {
        info!(owner = %owner.key(), clusters = ?plan.waiting_for, "the owner's finalizer waits for these clusters");
    }
    Ok(plan.remove_finalizer)
}

/// What the owner's cluster says about `key` now: [`OwnerObservation::Unknown`] unless
/// the cluster is Ready and answers a live read (a cache may lag behind a new owner).
pub(crate) async fn observe_owner<K>(
    shared: &Shared,
    key: &ObjectKey,
    dyntype: &K::DynamicType,
) -> OwnerObservation
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let Ok(client) = shared.client_of(&key.cluster) else {
        return OwnerObservation::Unknown;
    };
    let api = dynamic_api(
        client,
        &ApiResource::erase::<K>(dyntype),
        key.namespace.as_deref(),
    );
    match api.get_opt(&key.name).await {
        Ok(None) => OwnerObservation::Absent,
        Ok(Some(o)) => OwnerObservation::Exists {
            uid: o.meta().uid.clone().unwrap_or_default(),
            deleting: o.meta().deletion_timestamp.is_some(),
        },
        Err(e) => {
            debug!(owner = %key, error = %e, "the owner's cluster did not answer");
            OwnerObservation::Unknown
        }
    }
}

/// Collects the dependents of the owner `key` (absent from the primary cache): each is
/// deleted once the owner's cluster confirms the owner gone. Whether any must be looked at
/// again later (a cluster could not be reached).
pub(crate) async fn collect<K>(shared: &Shared, key: &ObjectKey, dyntype: &K::DynamicType) -> bool
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let (api_version, kind) = (K::api_version(dyntype), K::kind(dyntype));
    let owners: Vec<MultiClusterOwner> = {
        let sources = shared.sources.read().unwrap_or_else(|e| e.into_inner());
        let mut owners: Vec<_> = sources
            .iter()
            .flat_map(|s| s.all())
            .map(|(_, o)| o)
            .filter(|o| o.key() == *key && o.is_kind(&api_version, &kind))
            .collect();
        owners.sort_by(|a, b| a.uid.cmp(&b.uid));
        owners.dedup();
        owners
    };
    if owners.is_empty() {
        return false;
    }
    let observed = observe_owner::<K>(shared, key, dyntype).await;
    let mut retry = false;
    for owner in owners {
        for (ar, d) in shared.dependents_of(&owner) {
            let ready = shared.client_of(&d.cluster).is_ok();
            match decide_dependent(&owner, &observed, ready) {
                GcDecision::Keep => {}
                GcDecision::Wait => retry = true,
                GcDecision::Delete if d.deleting => {}
                GcDecision::Delete => {
                    if let Err(e) = delete_dependent(shared, &ar, &d).await {
                        warn!(error = %crate::error_chain(&e), "collecting a dependent failed");
                        retry = true;
                    }
                }
            }
        }
    }
    retry
}
