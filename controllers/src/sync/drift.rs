//! Drift in the sync controller: the managedFields digest kept in the member cache (the
//! cache's `shrink`), the per-cluster check that turns a repair into a report or stops a
//! fight (before dispatch), and after the writes the `status.drift` entries, the
//! `DriftRepaired`/`DriftDetected`/`DriftFight` Events and `flotilla_drift_total`. Every
//! decision is [`flotilla_core::drift`]'s; this module only gathers inputs and records.
//! It never reads a member: the cache already holds what the decision needs.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::{
    ClusterReason, FIELD_MANAGER,
    drift::{ClusterDrift, DriftState},
    federated::FederatedStatus,
};
use flotilla_core::drift::{
    DIGEST_ANNOTATION, Policy,
    decide::{self, Finding, Input, Verdict},
    digest,
    fight::Repair,
};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    ResourceExt,
    core::{ApiResource, DynamicObject},
    runtime::events::EventType,
};
use serde_json::Value;
use tracing::info;

use super::{
    Key, SyncShared,
    memory::{DriftMemory, WrittenStatus},
    plan::{DesiredFor, DesiredSet, HASH_ANNOTATION, Observed, Op, Outcome},
    status::Events,
    type_info::TypeInfo,
};
use crate::metrics::DriftLabels;

/// The cache's cut for a member object: see [`digest::keep_in_annotation`].
pub(super) fn keep_digest(obj: &mut DynamicObject) {
    digest::keep_in_annotation(obj);
}

/// [`keep_digest`], and the member's `status` dropped (no status collection).
pub(super) fn keep_digest_drop_status(obj: &mut DynamicObject) {
    keep_digest(obj);
    super::drop_status(obj);
}

/// This round's drift: findings per cluster and the clusters whose member object was
/// looked at.
#[derive(Default)]
pub(super) struct DriftRound {
    pub findings: BTreeMap<String, Finding>,
    pub checked: BTreeSet<String>,
    /// The drifted member objects, per cluster (the Events' related object).
    pub members: BTreeMap<String, ObjectReference>,
    /// Their resourceVersions, per cluster.
    pub versions: BTreeMap<String, String>,
    /// Entries Pull clusters' agents reported, with the member object they are about.
    pub reported: BTreeMap<String, (ClusterDrift, ObjectReference)>,
}

/// What the per-cluster check needs: the federated object's drift facts, the type, and
/// what the controller remembers of earlier repairs.
pub(super) struct DriftContext<'a> {
    pub ty: &'a TypeInfo,
    pub memory: &'a DriftMemory,
    pub key: &'a Key,
    pub policy: Policy,
    pub retain_replicas: bool,
    /// The previous `status.drift`: ours when the host cache has not caught up with our
    /// last status write (as [`super::memory::WrittenStatus`] knows), so a repair just
    /// reported is not dropped again by a reconcile that overtook the host watch.
    pub previous: Vec<ClusterDrift>,
}

/// The previous `status.drift` the status writer will compare with (see
/// [`DriftContext::previous`]).
pub(super) fn previous_drift(
    written: &WrittenStatus,
    key: &Key,
    fed: &DynamicObject,
    cached: &FederatedStatus,
) -> Vec<ClusterDrift> {
    let base = fed.resource_version().unwrap_or_default();
    match written.lagging(key, &base) {
        Some(ours) => ours.drift,
        None => cached.drift.clone(),
    }
}

/// The federated object's drift policy; a policy that cannot be read is announced once
/// (`memory` knows which were) with a Warning `InvalidDriftPolicy`, and the default,
/// `Repair` of every field, applies.
pub(super) async fn policy(
    memory: &DriftMemory,
    events: Events<'_>,
    key: &Key,
    fed: &DynamicObject,
) -> Policy {
    let parsed = Policy::from_annotations(fed.annotations());
    let error = parsed.as_ref().err().map(ToString::to_string);
    if memory.is_new_error(key, error.as_deref())
        && let Some(e) = error
    {
        let note = format!("{e}; drift is repaired until the annotation is fixed");
        (events.publish(fed, EventType::Warning, "InvalidDriftPolicy", note)).await;
    }
    parsed.unwrap_or_default()
}

/// Turns an `Update` that only repairs another writer's change into what the drift
/// policy says: the repair itself, nothing (ignored fields), a report, or a fight.
pub(super) fn check(
    cluster: &str,
    op: Op,
    observed: &Observed,
    desired: &DesiredSet,
    cx: &DriftContext<'_>,
    round: &mut DriftRound,
) -> Op {
    let Observed::Present(live) = observed else {
        return op;
    };
    round.checked.insert(cluster.to_string());
    let Some(DesiredFor::Object { object, hash }) = desired.by_cluster.get(cluster) else {
        return op;
    };
    // Another hash: the template changed (or was never applied): an update, not drift.
    if op != Op::Update || recorded_hash(live) != Some(hash.as_str()) {
        return op;
    }
    let version = super::plan::lag::resource_version(live);
    if cx.memory.awaits_repair(cluster, cx.key, version) {
        // The host watch (our status write) overtook the member watch (our repair).
        return Op::Nothing;
    }
    let digest = digest::decode(
        live.pointer(&annotation_pointer(DIGEST_ANNOTATION))
            .and_then(Value::as_str),
    );
    let retained: &[&str] = if cx.retain_replicas {
        &["/spec/replicas"]
    } else {
        &[]
    };
    let history = cx.memory.history(cluster, cx.key);
    let verdict = decide::decide(&Input {
        desired: object,
        live,
        digest: &digest,
        policy: &cx.policy,
        retained,
        history: &history,
        previous: cx.previous.iter().find(|d| d.cluster == cluster),
        now: super::plan::decision::now(),
    });
    let finding = match verdict {
        Verdict::None => return op,
        Verdict::Ignored => return Op::Nothing,
        Verdict::Drift(f) => f,
    };
    let op = match finding.state {
        DriftState::Repaired => Op::Update,
        DriftState::Detected => Op::Report(ClusterReason::Drifted, message(cx.ty, &finding)),
        DriftState::Fight => Op::Report(
            ClusterReason::DriftFight,
            format!(
                "{}; {FIELD_MANAGER} stopped repairing after {} rewrites by {} within {} s",
                message(cx.ty, &finding),
                flotilla_core::drift::fight::FIGHT_REWRITES,
                finding.writer(),
                flotilla_core::drift::fight::FIGHT_WINDOW_SECONDS,
            ),
        ),
    };
    round.members.insert(
        cluster.to_string(),
        member_ref(&cx.ty.target_ar, live, &finding),
    );
    if let Some(v) = version {
        round.versions.insert(cluster.to_string(), v.to_string());
    }
    round.findings.insert(cluster.to_string(), finding);
    op
}

/// The drifted member object (its UID tells clusters apart) and fields, as an Event's
/// related object.
fn member_ref(target: &ApiResource, live: &Value, finding: &Finding) -> ObjectReference {
    let text = |p: &str| live.pointer(p).and_then(Value::as_str).map(String::from);
    let paths: Vec<String> = finding.differences.iter().map(|d| d.path()).collect();
    ObjectReference {
        api_version: Some(target.api_version.clone()),
        kind: Some(target.kind.clone()),
        namespace: text("/metadata/namespace"),
        name: text("/metadata/name"),
        uid: text("/metadata/uid"),
        field_path: Some(paths.join(",")),
        ..ObjectReference::default()
    }
}

/// The drift in words, without times (a status message must not change by itself).
fn message(ty: &TypeInfo, finding: &Finding) -> String {
    decide::entry("", finding, false, ty.is_secret(), None, "").summary()
}

/// After the writes: the new `status.drift`, and for every new entry an Event, the
/// metric, a log line and (for a repair) the fight history.
pub(super) async fn settle(
    shared: &SyncShared,
    fed: &DynamicObject,
    cx: &DriftContext<'_>,
    round: &DriftRound,
    outcomes: &BTreeMap<String, Outcome>,
    selected: &BTreeSet<String>,
) -> Vec<ClusterDrift> {
    let now_text = k8s_openapi::jiff::Timestamp::now().to_string();
    let now = super::plan::decision::now();
    let mut found = BTreeMap::new();
    for (cluster, finding) in &round.findings {
        let repaired = outcomes.get(cluster) == Some(&Outcome::Ok);
        let previous = cx.previous.iter().find(|d| &d.cluster == cluster);
        let entry = decide::entry(
            cluster,
            finding,
            repaired,
            cx.ty.is_secret(),
            previous,
            &now_text,
        );
        if finding.state == DriftState::Repaired && repaired {
            if let Some(v) = round.versions.get(cluster) {
                cx.memory.repaired(cluster, cx.key, v.clone());
            }
            let pointers = finding.pointers().into_iter().map(String::from).collect();
            let repair = Repair {
                at: now,
                manager: finding.writer().to_string(),
                pointers,
            };
            cx.memory.record(cluster, cx.key, repair);
        }
        if previous != Some(&entry) {
            let related = round.members.get(cluster).cloned().unwrap_or_default();
            announce(shared, cx.ty, fed, &entry, related).await;
        }
        found.insert(cluster.clone(), entry);
    }
    super::pull_drift::settle_reported(shared, fed, cx, round, &mut found).await;
    flotilla_core::drift::merge(&cx.previous, &found, &round.checked, selected)
}

pub(super) async fn announce(
    shared: &SyncShared,
    ty: &TypeInfo,
    fed: &DynamicObject,
    entry: &ClusterDrift,
    related: ObjectReference,
) {
    let state = DriftState::parse(&entry.state).unwrap_or(DriftState::Detected);
    let note = match state {
        DriftState::Repaired => format!("{}: {}; repaired", entry.cluster, entry.summary()),
        DriftState::Detected => {
            format!("{}: {}; left in place", entry.cluster, entry.summary())
        }
        DriftState::Fight => format!(
            "{}: {}; {FIELD_MANAGER} and {} keep rewriting it, repairs stopped",
            entry.cluster,
            entry.summary(),
            entry.first_manager()
        ),
    };
    info!(cluster = %entry.cluster, manager = %entry.first_manager(), state = state.as_str(), "member object drifted");
    shared
        .metrics
        .sync
        .drift
        .get_or_create(&DriftLabels {
            cluster: entry.cluster.clone(),
            manager: entry.first_manager().to_string(),
        })
        .inc();
    crate::events::publish_related(
        &shared.recorder,
        &ty.object_ref(fed),
        related,
        EventType::Warning,
        state.event_reason(),
        "Propagate",
        note,
    )
    .await;
}

/// The desired object with the ignored fields at the member's values
/// ([`Policy::keep_ignored`]), when the member holds the object.
pub(super) fn keep_ignored(object: Value, observed: &Observed, policy: &Policy) -> Value {
    match observed {
        Observed::Present(live) => policy.keep_ignored(object, live),
        _ => object,
    }
}

fn annotation_pointer(key: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        key.replace('~', "~0").replace('/', "~1")
    )
}

fn recorded_hash(obj: &Value) -> Option<&str> {
    obj.pointer(&annotation_pointer(HASH_ANNOTATION))
        .and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use kube::core::ApiResource;
    use serde_json::json;

    use super::*;

    fn member(managers: Vec<ManagedFieldsEntry>) -> DynamicObject {
        let ar = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
        let mut obj = DynamicObject::new("a", &ar).data(json!({"spec": {"replicas": 5}}));
        obj.metadata.managed_fields = Some(managers);
        obj
    }

    fn entry(manager: &str, fields: Value) -> ManagedFieldsEntry {
        serde_json::from_value(json!({"manager": manager, "operation": "Update",
            "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields}))
        .expect("entry")
    }

    #[test]
    fn the_cache_keeps_a_digest_of_other_managers_only() {
        let mut obj = member(vec![
            entry("flotilla", json!({"f:spec": {"f:replicas": {}}})),
            entry("kubectl-scale", json!({"f:spec": {"f:replicas": {}}})),
        ]);
        keep_digest(&mut obj);
        let d = digest::decode(obj.annotations().get(DIGEST_ANNOTATION).map(String::as_str));
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].manager, "kubectl-scale");
        assert_eq!(d[0].fields, ["/spec/replicas"]);
    }

    #[test]
    fn a_digest_annotation_a_member_sets_itself_is_not_believed() {
        let mut obj = member(vec![entry(
            "flotilla",
            json!({"f:spec": {"f:replicas": {}}}),
        )]);
        obj.annotations_mut()
            .insert(DIGEST_ANNOTATION.into(), "[{\"m\":\"forged\"}]".into());
        keep_digest(&mut obj);
        assert_eq!(obj.annotations().get(DIGEST_ANNOTATION), None);
    }
}
