//! The policies' statuses, written in passes: after a burst of decisions settles, every
//! policy's status is computed from the recorded outcomes and its own validation, and
//! written only where it changed.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use flotilla_api::policy::PolicyStatus;
use flotilla_core::policy_select::{self, PolicyScope};
use flotilla_multicluster::{
    gate::Gate,
    runner::{Action, PassRunner},
};
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::{info, warn};

/// How long a pass waits for the caches and the workers to settle.
const UNSETTLED: Duration = Duration::from_millis(500);

use super::{
    Ctx,
    outcome::{self, PolicyId, PolicyKind, PolicyProblems},
};

/// One policy as the pass writes it.
struct Entry {
    id: PolicyId,
    generation: i64,
    selectors: Vec<flotilla_api::policy::ResourceSelector>,
    status: Option<PolicyStatus>,
}

fn entries<K>(
    objs: &[Arc<K>],
    kind: PolicyKind,
    sel: impl Fn(
        &K,
    ) -> (
        &[flotilla_api::policy::ResourceSelector],
        Option<&PolicyStatus>,
    ),
) -> Vec<Entry>
where
    K: Resource,
{
    objs.iter()
        .filter(|o| o.meta().deletion_timestamp.is_none())
        .map(|o| {
            let (s, st) = sel(o);
            Entry {
                id: PolicyId {
                    kind,
                    namespace: o.namespace(),
                    name: o.name_any(),
                },
                generation: o.meta().generation.unwrap_or_default(),
                selectors: s.to_vec(),
                status: st.cloned(),
            }
        })
        .collect()
}

/// Writes the policies' statuses until the task is aborted.
pub(super) async fn run(ctx: Arc<Ctx>, gate: Gate) {
    let mut runner = PassRunner::new("policy-status", ctx.status_wake.clone())
        .debounce(Duration::from_millis(500))
        .gate(gate);
    while runner.next().await.is_some() {
        // Only a settled view is written: every cache listed and no object being decided
        // (after a start, a pass over the first few outcomes would write a partial status).
        if !ctx.queue.is_idle() || !ctx.types.all_synced() {
            runner.finish(Action::requeue(UNSETTLED));
            continue;
        }
        let failed = pass(&ctx).await;
        runner.finish(if failed {
            Action::backoff()
        } else {
            Action::AwaitChange
        });
    }
}

/// One pass over every policy; `true` if a write failed.
async fn pass(ctx: &Ctx) -> bool {
    let p = &ctx.policies;
    let mut all = entries(&p.propagation.state(), PolicyKind::Propagation, |o| {
        (&o.spec.resource_selectors, o.status.as_ref())
    });
    all.extend(entries(
        &p.cluster_propagation.state(),
        PolicyKind::ClusterPropagation,
        |o| (&o.spec.spec.resource_selectors, o.status.as_ref()),
    ));
    all.extend(entries(&p.overrides.state(), PolicyKind::Override, |o| {
        (&o.spec.resource_selectors, o.status.as_ref())
    }));
    all.extend(entries(
        &p.cluster_overrides.state(),
        PolicyKind::ClusterOverride,
        |o| (&o.spec.spec.resource_selectors, o.status.as_ref()),
    ));
    let enabled: BTreeSet<(String, String)> = ctx
        .types
        .targets()
        .into_iter()
        .map(|(_, g, k)| (g, k))
        .collect();
    let now = jiff_now();
    let outcomes = ctx
        .outcomes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut failed = false;
    for e in all {
        let scope = match e.id.kind {
            PolicyKind::Propagation | PolicyKind::Override => PolicyScope::Namespaced,
            _ => PolicyScope::Cluster,
        };
        let problems = PolicyProblems {
            selectors: policy_select::validate(
                scope,
                e.id.namespace.as_deref(),
                &e.selectors,
                &enabled,
            ),
        };
        let next = outcome::policy_status(
            &e.id,
            e.generation,
            &problems,
            outcomes.values(),
            e.status.as_ref(),
            &now,
        );
        if !outcome::status_changed(e.status.as_ref(), &next) {
            continue;
        }
        info!(
            policy = %e.id,
            selected = next.selected_count,
            conflicts = next.conflicts.len(),
            was_selected = e.status.as_ref().map(|s| s.selected_count),
            was_conflicts = e.status.as_ref().map(|s| s.conflicts.len()),
            "writing the policy's status"
        );
        failed |= write(ctx, &e.id, &next, e.status.as_ref()).await.is_err();
    }
    failed
}

/// Writes `status` over `prev` as a merge patch that names what it drops with `null` (a
/// list emptied, such as the last conflict, would otherwise stay).
async fn write(
    ctx: &Ctx,
    id: &PolicyId,
    status: &PolicyStatus,
    prev: Option<&PolicyStatus>,
) -> kube::Result<()> {
    use flotilla_api::policy::{
        ClusterOverridePolicy, ClusterPropagationPolicy, OverridePolicy, PropagationPolicy,
    };
    let mut body = serde_json::to_value(status).map_err(kube::Error::SerdeError)?;
    let old = serde_json::to_value(prev).map_err(kube::Error::SerdeError)?;
    flotilla_core::merge_patch::null_dropped_keys(&mut body, &old);
    let patch = json!({"status": body});
    let ns = id.namespace.as_deref().unwrap_or_default();
    let r = match id.kind {
        PolicyKind::Propagation => {
            send(
                Api::<PropagationPolicy>::namespaced(ctx.host.clone(), ns),
                &id.name,
                &patch,
            )
            .await
        }
        PolicyKind::Override => {
            send(
                Api::<OverridePolicy>::namespaced(ctx.host.clone(), ns),
                &id.name,
                &patch,
            )
            .await
        }
        PolicyKind::ClusterPropagation => {
            send(
                Api::<ClusterPropagationPolicy>::all(ctx.host.clone()),
                &id.name,
                &patch,
            )
            .await
        }
        PolicyKind::ClusterOverride => {
            send(
                Api::<ClusterOverridePolicy>::all(ctx.host.clone()),
                &id.name,
                &patch,
            )
            .await
        }
    };
    if let Err(e) = &r {
        warn!(policy = %id, error = %e, "writing the policy's status failed");
    }
    r
}

async fn send<K>(api: Api<K>, name: &str, patch: &serde_json::Value) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match flotilla_multicluster::unread::patch_status(
        &api,
        name,
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    {
        // The policy went away meanwhile: nothing to report on.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => other,
    }
}

fn jiff_now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}
