//! The policy controller's writes to the host: the Federated object it builds (created,
//! then server-side applied), its release when no policy takes the object any more, the
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
    reconcile::{fed_api, is_materialized, post_params},
    types::TypeView,
};

/// How a Federated object's write ended.
pub(super) enum Written {
    /// Created or applied.
    Done,
    /// A Federated object of that name exists that no policy made: it wins.
    Explicit(String),
    /// The host refused or did not answer; retried with backoff.
    Failed,
}

/// Creates the Federated object (`exists`: applies it over the one this controller made).
pub(super) async fn write_federated(
    ctx: &Ctx,
    t: &TypeView,
    key: &Key,
    desired: &Value,
    exists: bool,
) -> Written {
    let ns = desired
        .pointer("/metadata/namespace")
        .and_then(Value::as_str);
    let api = fed_api(ctx, t, ns);
    let obj: DynamicObject = match serde_json::from_value(desired.clone()) {
        Ok(o) => o,
        Err(e) => {
            warn!(object = ?key, error = %e, "the Federated object does not parse back");
            return Written::Failed;
        }
    };
    let result = if exists {
        let pp = PatchParams::apply(POLICY_FIELD_MANAGER).force();
        flotilla_multicluster::unread::patch(&api, &key.2, &pp, &Patch::Apply(desired)).await
    } else {
        match api.create(&post_params(), &obj).await {
            Err(kube::Error::Api(e)) if e.code == 409 => return conflict(&api, t, key).await,
            other => other.map(|_| ()),
        }
    };
    match result {
        Ok(()) => Written::Done,
        Err(e) => {
            warn!(object = ?key, error = %e, "writing the Federated object failed");
            Written::Failed
        }
    }
}

/// A create found an object of that name: ours (the cache is behind) or an explicit one.
async fn conflict(api: &Api<DynamicObject>, t: &TypeView, key: &Key) -> Written {
    match api.get(&key.2).await {
        Ok(o) if is_materialized(&o) => Written::Done,
        Ok(_) => Written::Explicit(format!(
            "{} {} exists and was not made by a policy: it is propagated as written, and wins over every policy",
            t.fed.kind, key.2
        )),
        Err(_) => Written::Failed,
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
) -> Action {
    let Some(want) = mat::native_status(status.aggregated.as_ref(), native.metadata.generation)
    else {
        return Action::AwaitChange;
    };
    let json = serde_json::to_value(native).unwrap_or(Value::Null);
    if !mat::status_differs(&json, &want) {
        return Action::AwaitChange;
    }
    let api: Api<DynamicObject> = match native.namespace() {
        Some(ns) => Api::namespaced_with(ctx.host.clone(), &ns, &t.target),
        None => Api::all_with(ctx.host.clone(), &t.target),
    };
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
