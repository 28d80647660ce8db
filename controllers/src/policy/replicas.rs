//! The ReplicaSchedulingPreference a policy's `replicaScheduling` asks for
//! ([`flotilla_core::policy_replicas`]): created, kept as the policy says (written only
//! when it differs) and deleted when the policy no longer asks, for a selected Deployment
//! or ReplicaSet. The RSP controller divides; a user's own RSP of the object's name wins
//! and is never touched.

use flotilla_api::{
    ReplicaSchedulingPreference,
    policy::{MATERIALIZED_LABEL, POLICY_FIELD_MANAGER, PropagationSpec},
};
use flotilla_core::{
    policy_materialize::{NativeOwner, needs_write},
    policy_replicas::rsp_spec,
};
use flotilla_multicluster::runner::Action;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams},
    runtime::{events::EventType, reflector::ObjectRef},
};
use serde_json::Value;
use tracing::{debug, info, warn};

use super::{Ctx, types::TypeView};

/// The RSP of `native` (namespace `ns`) in the cache, if any.
fn cached(ctx: &Ctx, ns: &str, name: &str) -> Option<std::sync::Arc<ReplicaSchedulingPreference>> {
    ctx.rsps
        .get(&ObjectRef::<ReplicaSchedulingPreference>::new(name).within(ns))
}

fn made_by_policy(rsp: &ReplicaSchedulingPreference) -> bool {
    rsp.labels().get(MATERIALIZED_LABEL).map(String::as_str) == Some("true")
}

/// Makes the RSP of `native` what `policy` asks: written when it differs, deleted when the
/// policy asks none (only one the policy made).
pub(super) async fn ensure(
    ctx: &Ctx,
    t: &TypeView,
    native: &DynamicObject,
    json: &Value,
    owner: &NativeOwner<'_>,
    policy_ref: &str,
    policy: &PropagationSpec,
) -> Action {
    let Some(ns) = native.namespace() else {
        return Action::AwaitChange;
    };
    let current = cached(ctx, &ns, owner.name);
    let spec = match rsp_spec(&t.fed.kind, json, policy) {
        Ok(s) => s,
        Err(ignored) => {
            ctx.event(
                t,
                native,
                EventType::Warning,
                "ReplicaSchedulingIgnored",
                ignored.message().to_owned(),
            )
            .await;
            None
        }
    };
    let Some(spec) = spec else {
        return match current {
            Some(cur) if made_by_policy(&cur) => remove(ctx, &ns, owner.name).await,
            _ => Action::AwaitChange,
        };
    };
    if let Some(cur) = &current
        && !made_by_policy(cur)
    {
        debug!(rsp = %owner.name, %ns, "a user's ReplicaSchedulingPreference divides it; left alone");
        return Action::AwaitChange;
    }
    let desired = flotilla_core::policy_replicas::rsp_object(&ns, owner, policy_ref, &spec);
    let current_json = current.map(|c| serde_json::to_value(&*c).unwrap_or(Value::Null));
    if !needs_write(&desired, current_json.as_ref()) {
        return Action::AwaitChange;
    }
    let api: Api<ReplicaSchedulingPreference> = Api::namespaced(ctx.host.clone(), &ns);
    let params = PatchParams::apply(POLICY_FIELD_MANAGER).force();
    match flotilla_multicluster::unread::patch(&api, owner.name, &params, &Patch::Apply(&desired))
        .await
    {
        Ok(()) => {
            info!(rsp = %owner.name, %ns, policy = %policy_ref, "replica scheduling written");
            Action::AwaitChange
        }
        Err(e) => {
            warn!(rsp = %owner.name, %ns, error = %e, "writing the policy's ReplicaSchedulingPreference failed");
            Action::backoff()
        }
    }
}

/// Deletes the RSP of `name` in `ns` when a policy made it (the object is no longer
/// propagated, or its policy no longer divides replicas).
pub(super) async fn release(ctx: &Ctx, ns: &str, name: &str) -> Action {
    match cached(ctx, ns, name) {
        Some(cur) if made_by_policy(&cur) => remove(ctx, ns, name).await,
        _ => Action::AwaitChange,
    }
}

async fn remove(ctx: &Ctx, ns: &str, name: &str) -> Action {
    let api: Api<ReplicaSchedulingPreference> = Api::namespaced(ctx.host.clone(), ns);
    match flotilla_multicluster::unread::delete(&api, name, &DeleteParams::default()).await {
        Ok(()) => {
            info!(rsp = %name, %ns, "the policy's ReplicaSchedulingPreference removed");
            Action::AwaitChange
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Action::AwaitChange,
        Err(e) => {
            warn!(rsp = %name, %ns, error = %e, "removing the policy's ReplicaSchedulingPreference failed");
            Action::backoff()
        }
    }
}
