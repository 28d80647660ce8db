//! The policy controller's writes to the host: the Federated object it builds (created,
//! then replaced as a whole), its release when no policy takes the object any more, the
//! FederatedNamespace a propagated object's namespace needs, and the aggregated status on
//! the native object. Each is sent only when what it would write differs.

use std::collections::BTreeSet;

use flotilla_api::{
    ORPHAN_ANNOTATION,
    federated::FederatedStatus,
    policy::{
        MATERIALIZED_LABEL, NAMESPACE_FOR_OBJECTS, POLICY_ANNOTATION, POLICY_FIELD_MANAGER,
        PRESERVE_ANNOTATION,
    },
};
use flotilla_core::policy_materialize as mat;
use flotilla_multicluster::runner::Action;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams},
};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::{
    Ctx, Key,
    reconcile::{fed_api, host_api, is_materialized, post_params},
    types::TypeView,
};

/// How a Federated object's write ended.
pub(super) enum Written {
    /// Created or replaced.
    Done,
    /// A Federated object of that name that no policy made is the policy's now
    /// (`conflictResolution: Overwrite`).
    TookOver,
    /// A Federated object of that name exists that no policy made: it wins.
    Explicit(String),
    /// The host refused or did not answer; retried with backoff.
    Failed,
}

/// Creates the Federated object, or replaces `current` (the one this controller made, as
/// cached) with it. A create that finds an object of that name no policy made takes it
/// over when `take_over`, and otherwise leaves it ([`Written::Explicit`]).
pub(super) async fn write_federated(
    ctx: &Ctx,
    t: &TypeView,
    key: &Key,
    desired: &Value,
    current: Option<&DynamicObject>,
    take_over: bool,
) -> Written {
    let ns = desired
        .pointer("/metadata/namespace")
        .and_then(Value::as_str);
    let api = fed_api(ctx, t, ns);
    let result = match current {
        Some(cur) => replace(&api, &key.2, desired, cur).await,
        None => match serde_json::from_value::<DynamicObject>(desired.clone()) {
            Ok(obj) => match api.create(&post_params(), &obj).await {
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    return conflict(&api, t, key, desired, take_over).await;
                }
                other => other.map(|_| ()),
            },
            Err(e) => {
                warn!(object = ?key, error = %e, "the Federated object does not parse back");
                return Written::Failed;
            }
        },
    };
    match result {
        Ok(()) => Written::Done,
        Err(e) => {
            warn!(object = ?key, error = %e, "writing the Federated object failed");
            Written::Failed
        }
    }
}

/// Replaces `current` with `desired` over what others keep in it
/// ([`mat::replacement`]); a stale resourceVersion is the server's 409, retried.
async fn replace(
    api: &Api<DynamicObject>,
    name: &str,
    desired: &Value,
    current: &DynamicObject,
) -> kube::Result<()> {
    let cur = serde_json::to_value(current).map_err(kube::Error::SerdeError)?;
    let body = mat::replacement(desired, &cur);
    flotilla_multicluster::unread::replace(api, name, &post_params(), &body).await
}

/// A create found an object of that name: ours (the cache is behind), or one no policy
/// made, taken over when `take_over` and left as the winner otherwise.
async fn conflict(
    api: &Api<DynamicObject>,
    t: &TypeView,
    key: &Key,
    desired: &Value,
    take_over: bool,
) -> Written {
    let found = match api.get(&key.2).await {
        Ok(o) => o,
        Err(_) => return Written::Failed,
    };
    if is_materialized(&found) {
        return Written::Done;
    }
    if !take_over {
        return Written::Explicit(format!(
            "{} {} exists and was not made by a policy: it is propagated as written, and wins over every policy (conflictResolution: Overwrite takes it over)",
            t.fed.kind, key.2
        ));
    }
    match replace(api, &key.2, desired, &found).await {
        Ok(()) => Written::TookOver,
        Err(e) => {
            warn!(object = ?key, error = %e, "taking over the Federated object failed");
            Written::Failed
        }
    }
}

/// Removes the Federated object of an object no policy takes: its member copies go with
/// it, or stay (unlabelled, as `kubefed.io/orphan` keeps them) when its policy asked to
/// preserve them. A FederatedNamespace made for a namespace's objects stays.
pub(super) async fn release(ctx: &Ctx, t: &TypeView, cur: &DynamicObject) -> Action {
    if cur.metadata.deletion_timestamp.is_some()
        || cur.annotations().get(POLICY_ANNOTATION).map(String::as_str)
            == Some(NAMESPACE_FOR_OBJECTS)
    {
        return Action::AwaitChange;
    }
    let name = cur.name_any();
    let api = fed_api(ctx, t, cur.namespace().as_deref());
    let preserve = cur
        .annotations()
        .get(PRESERVE_ANNOTATION)
        .map(String::as_str)
        == Some("true");
    if preserve && cur.annotations().get(ORPHAN_ANNOTATION).map(String::as_str) != Some("true") {
        let patch = json!({"metadata": {"annotations": {ORPHAN_ANNOTATION: "true"}}});
        if let Err(e) = flotilla_multicluster::unread::patch(
            &api,
            &name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        {
            warn!(object = %name, error = %e, "marking the Federated object to keep its member copies failed");
            return Action::backoff();
        }
    }
    match flotilla_multicluster::unread::delete(&api, &name, &DeleteParams::default()).await {
        Ok(()) => {
            info!(kind = %t.fed.kind, object = %name, preserve, "released: no policy propagates it");
            Action::AwaitChange
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Action::AwaitChange,
        Err(e) => {
            warn!(object = %name, error = %e, "releasing the Federated object failed");
            Action::backoff()
        }
    }
}

/// Makes sure namespace `ns` is federated (every cluster), as the sync controller places
/// namespaced objects only where their FederatedNamespace is. An existing
/// FederatedNamespace, made by a user or a policy, is left as it is.
pub(super) async fn ensure_namespace(ctx: &Ctx, ns: &str) {
    let Some(name) = ctx
        .types
        .targets()
        .into_iter()
        .find(|(_, g, k)| g.is_empty() && k == "Namespace")
        .map(|(n, _, _)| n)
    else {
        return;
    };
    let Some(t) = ctx.types.get(&name) else {
        return;
    };
    let seen = |set: &BTreeSet<String>| set.contains(ns);
    if seen(
        &ctx.namespaces_known
            .lock()
            .unwrap_or_else(|e| e.into_inner()),
    ) {
        return;
    }
    let cached = t
        .materialized
        .get(&kube::runtime::reflector::ObjectRef::new_with(ns, t.fed.clone()).within(ns))
        .is_some();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.host.clone(), ns, &t.fed);
    let exists = cached
        || match api.get_opt(ns).await {
            Ok(found) => found.is_some(),
            Err(_) => return,
        };
    if !exists {
        let obj = json!({
            "apiVersion": t.fed.api_version, "kind": t.fed.kind,
            "metadata": {"name": ns, "namespace": ns,
                "labels": {MATERIALIZED_LABEL: "true"},
                "annotations": {POLICY_ANNOTATION: NAMESPACE_FOR_OBJECTS}},
            "spec": {"placement": {"clusterSelector": {}}},
        });
        let Ok(obj) = serde_json::from_value::<DynamicObject>(obj) else {
            return;
        };
        match api.create(&post_params(), &obj).await {
            Ok(_) => info!(namespace = %ns, "federated the namespace of propagated objects"),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                warn!(namespace = %ns, error = %e, "federating the namespace failed");
                return;
            }
        }
    }
    ctx.namespaces_known
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(ns.to_string());
}

/// Writes the fleet's aggregated status onto the native object, when the host does not run
/// it and the sum differs from what it shows.
pub(super) async fn status_home(
    ctx: &Ctx,
    t: &TypeView,
    native: &DynamicObject,
    status: &FederatedStatus,
    caught_up: bool,
) -> Action {
    let generation = native.metadata.generation.filter(|_| caught_up);
    let Some(want) = mat::native_status(status.aggregated.as_ref(), generation) else {
        return Action::AwaitChange;
    };
    let json = serde_json::to_value(native).unwrap_or(Value::Null);
    if !mat::status_differs(&json, &want) {
        return Action::AwaitChange;
    }
    let api = host_api(ctx, &t.target, native.namespace().as_deref());
    let patch = json!({"status": want});
    // Named, so that the status-writer check does not take this write for the host's own.
    let pp = PatchParams {
        field_manager: Some(POLICY_FIELD_MANAGER.into()),
        ..Default::default()
    };
    match flotilla_multicluster::unread::patch_status(
        &api,
        &native.name_any(),
        &pp,
        &Patch::Merge(&patch),
    )
    .await
    {
        Ok(()) => Action::AwaitChange,
        Err(e) => {
            warn!(object = %native.name_any(), error = %e, "writing the aggregated status to the native object failed");
            Action::backoff()
        }
    }
}
