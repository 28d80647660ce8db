//! Writes to member clusters. [`run_on_member`] is the one way a write reaches a
//! member: it owns the cluster's concurrency permit, the operation timeout, the handling of
//! "already gone" answers and the operation metrics; [`MemberOp`] says what to write.
//! Which operation to send is decided in [`super::plan`], not here.

use std::time::{Duration, Instant};

use flotilla_api::{ClusterReason, FIELD_MANAGER, MANAGED_LABEL, RECREATE_ON_IMMUTABLE_ANNOTATION};
use flotilla_multicluster::unread;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, GetParams, Patch, PatchParams, Preconditions, PropagationPolicy},
    core::DynamicObject,
};
use serde_json::{Value, json};
use tracing::info;

use super::{
    SyncShared, breaker,
    plan::{Outcome, excluded_message},
};
use crate::metrics::{ClusterLabels, OperationLabels};

/// How long one member operation may take before it counts as timed out.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(30);

/// One write to one member object.
pub(super) enum MemberOp {
    /// Create (or adopt) the object; `adopt`: an unmanaged object of that name is taken over.
    Create { object: Value, adopt: bool },
    /// Apply the desired object over the existing one; `recreate`: delete and recreate it
    /// when an immutable field changed.
    Update { object: Value, recreate: bool },
    /// Delete the object.
    Delete(DeleteParams),
    /// Remove the managed label and leave the object.
    Unlabel,
    /// The federated object is gone: delete the managed object after checking it live
    /// (unlabel it instead when `keep`, or when its UID is `host_uid`).
    CleanStray {
        keep: bool,
        host_uid: Option<String>,
    },
}

impl MemberOp {
    fn label(&self) -> &'static str {
        match self {
            MemberOp::Create { .. } => "create",
            MemberOp::Update { .. } => "update",
            MemberOp::Delete(_) | MemberOp::CleanStray { .. } => "delete",
            MemberOp::Unlabel => "unlabel",
        }
    }

    pub(super) fn timed_out(&self) -> ClusterReason {
        match self {
            MemberOp::Create { .. } => ClusterReason::CreationTimedOut,
            MemberOp::Update { .. } => ClusterReason::UpdateTimedOut,
            MemberOp::Delete(_) | MemberOp::CleanStray { .. } => ClusterReason::DeletionTimedOut,
            MemberOp::Unlabel => ClusterReason::LabelRemovalTimedOut,
        }
    }
}

/// A member object to write: where it is (`api`: the target type in its cluster and
/// namespace).
pub(super) struct MemberRef {
    pub cluster: String,
    pub api: Api<DynamicObject>,
    pub name: String,
}

/// Sends one write to one member, bounded by the cluster's permit and the timeout.
#[tracing::instrument(name = "member_write", skip_all, fields(
    cluster = %target.cluster,
    name = %target.name,
    operation = op.label(),
))]
pub(super) async fn run_on_member(shared: &SyncShared, target: MemberRef, op: MemberOp) -> Outcome {
    let cluster = target.cluster.as_str();
    if let Err(next) = shared.breakers.admit(cluster) {
        return Outcome::Status(
            op.timed_out(),
            format!(
                "the cluster did not answer a recent operation within {OPERATION_TIMEOUT:?}; next attempt in {}s",
                next.as_secs().max(1)
            ),
        );
    }
    let started = Instant::now();
    let api = target.api;
    let work = async {
        let permit = shared.limit(cluster);
        // A closed semaphore would mean no permit at all; the semaphore is never closed.
        let _permit = permit.acquire().await;
        match tokio::time::timeout(OPERATION_TIMEOUT, execute(&api, &target.name, &op)).await {
            Ok(o) => (o, breaker::Result::Answered),
            Err(_) => (
                Outcome::Status(
                    op.timed_out(),
                    format!("no answer from the cluster within {OPERATION_TIMEOUT:?}"),
                ),
                breaker::Result::NoAnswer,
            ),
        }
    };
    // A cluster that health checks declare unready meanwhile releases the worker at
    // once: its operations would only end at the timeout, holding up every other
    // cluster's objects behind this reconcile.
    let outcome = tokio::select! {
        (outcome, answered) = work => {
            shared.breakers.record(cluster, answered);
            outcome
        }
        _ = shared.clusters.until_unready(cluster) => Outcome::Status(
            ClusterReason::ClusterNotReady,
            "the cluster turned unready during the operation; it is retried when the cluster returns".into(),
        ),
    };
    record_operation(shared, cluster, op.label(), &outcome, started.elapsed());
    outcome
}

/// Counts one member operation (or Work write) and its duration.
pub(super) fn record_operation(
    shared: &SyncShared,
    cluster: &str,
    operation: &'static str,
    outcome: &Outcome,
    took: Duration,
) {
    let result = if matches!(outcome, Outcome::Status(..)) {
        "error"
    } else {
        "ok"
    };
    let m = &shared.metrics.sync;
    m.operations
        .get_or_create(&OperationLabels {
            cluster: cluster.to_string(),
            operation,
            result,
        })
        .inc();
    m.operation_duration
        .get_or_create(&ClusterLabels {
            cluster: cluster.to_string(),
        })
        .observe(took.as_secs_f64());
}

async fn execute(api: &Api<DynamicObject>, name: &str, op: &MemberOp) -> Outcome {
    match op {
        MemberOp::Create { object, adopt } => create(api, name, object, *adopt).await,
        MemberOp::Update { object, recreate } => update(api, name, object, *recreate).await,
        MemberOp::Delete(dp) => delete(api, name, dp).await,
        MemberOp::Unlabel => unlabel(api, name).await,
        MemberOp::CleanStray { keep, host_uid } => {
            clean_stray(api, name, *keep, host_uid.as_deref()).await
        }
    }
}

/// The member cache holds the objects labelled `managed=true` or `managed=false`, so an
/// object the user excluded has been reported by the plan already, without a request. An
/// object without the label is not cached: with `adoptResources` Enabled (kubefed's
/// default) the apply takes it over, so no read is needed — one request per created member
/// object. With adoption Disabled it is read first, and an unmanaged object is left alone.
async fn create(api: &Api<DynamicObject>, name: &str, object: &Value, adopt: bool) -> Outcome {
    if !adopt {
        match api.get_metadata_opt_with(name, &GetParams::any()).await {
            Err(e) => return Outcome::Status(ClusterReason::RetrievalFailed, e.to_string()),
            Ok(Some(existing)) => {
                let label = existing.labels().get(MANAGED_LABEL);
                if label.is_some_and(|v| v == "false") {
                    return Outcome::Status(ClusterReason::ManagedLabelFalse, excluded_message());
                }
                if label.is_none_or(|v| v != "true") {
                    return Outcome::Status(
                        ClusterReason::AlreadyExists,
                        "an unmanaged object of this name exists and adoptResources is Disabled"
                            .into(),
                    );
                }
            }
            Ok(None) => {}
        }
    }
    match apply(api, name, object).await {
        Ok(()) => Outcome::Ok,
        Err(e) => Outcome::Status(ClusterReason::CreationFailed, api_message(&e)),
    }
}

async fn update(api: &Api<DynamicObject>, name: &str, object: &Value, recreate: bool) -> Outcome {
    let e = match apply(api, name, object).await {
        Ok(()) => return Outcome::Ok,
        Err(e) => e,
    };
    if !is_immutable(&e) {
        return Outcome::Status(ClusterReason::UpdateFailed, api_message(&e));
    }
    if !recreate {
        let msg = format!(
            "{} (annotate the federated object with {RECREATE_ON_IMMUTABLE_ANNOTATION}=\"true\" to delete and recreate it)",
            api_message(&e)
        );
        return Outcome::Status(ClusterReason::UpdateFailed, msg);
    }
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    match unread::delete(api, name, &dp).await {
        Ok(()) => Outcome::Status(
            ClusterReason::WaitingForRemoval,
            format!(
                "recreating: an immutable field changed ({})",
                api_message(&e)
            ),
        ),
        Err(de) => Outcome::Status(ClusterReason::DeletionFailed, api_message(&de)),
    }
}

async fn delete(api: &Api<DynamicObject>, name: &str, dp: &DeleteParams) -> Outcome {
    match unread::delete(api, name, dp).await {
        Ok(()) => Outcome::Removing,
        Err(kube::Error::Api(s)) if s.code == 404 => Outcome::Gone,
        Err(e) => Outcome::Status(ClusterReason::DeletionFailed, api_message(&e)),
    }
}

/// Checked live before it is deleted, so an object unlabelled meanwhile is never touched;
/// the delete carries the read's UID and resourceVersion as preconditions, so an object
/// replaced or relabelled since fails the delete and is read again next time.
async fn clean_stray(
    api: &Api<DynamicObject>,
    name: &str,
    keep: bool,
    host_uid: Option<&str>,
) -> Outcome {
    let live = match api.get_opt(name).await {
        Ok(Some(live)) => live,
        Ok(None) => return Outcome::Gone,
        Err(e) => return Outcome::Status(ClusterReason::RetrievalFailed, api_message(&e)),
    };
    if live.labels().get(MANAGED_LABEL).is_none_or(|v| v != "true") {
        return Outcome::Gone;
    }
    if keep || host_uid.is_some() && live.uid().as_deref() == host_uid {
        info!(object = %name, "unlabelling a protected namespace whose federated namespace is gone");
        return unlabel(api, name).await;
    }
    info!(object = %name, "deleting a managed object whose federated object is gone");
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: live.uid(),
            resource_version: live.resource_version(),
        }),
        ..DeleteParams::default()
    };
    delete(api, name, &dp).await
}

async fn apply(api: &Api<DynamicObject>, name: &str, object: &Value) -> Result<(), kube::Error> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    unread::patch(api, name, &pp, &Patch::Apply(object)).await
}

/// Removes the managed label; an object already gone is fine.
async fn unlabel(api: &Api<DynamicObject>, name: &str) -> Outcome {
    let patch = json!({"metadata": {"labels": {MANAGED_LABEL: null}}});
    match unread::patch(api, name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(()) => Outcome::Gone,
        Err(kube::Error::Api(s)) if s.code == 404 => Outcome::Gone,
        Err(e) => Outcome::Status(ClusterReason::LabelRemovalFailed, api_message(&e)),
    }
}

fn is_immutable(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422 && s.message.contains("immutable"))
}

/// The API server's message for an API error, else the error's text.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}
