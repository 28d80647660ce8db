//! Progressive rollout in the sync controller (`spec.rollout.strategy: Progressive`): the
//! one seam between propagation and [`flotilla_core::rollout::plan`]. Before the member
//! writes, [`Rollout::progressive`] reads where each placed cluster stands (does its member
//! object hold the target revision, is it healthy there), asks the planner which clusters
//! may have the target now, and rewrites the desired objects of every other cluster to the
//! revision it holds (read back from its [`revisions`] record), so those clusters are left
//! as they are — drift repaired, nothing written while nothing changes. Everything it
//! needs is in the host (status, revisions) and the members (annotations): a restart plans
//! the same. An object without `spec.rollout` never comes here.

mod canary;
mod canary_pull;
mod revisions;

use std::{collections::BTreeSet, time::Duration};

use flotilla_api::{
    federated::{FederatedCondition, FederatedSpec, FederatedStatus},
    rollout::{
        ClusterRolloutState, REVISION_ANNOTATION, ROLLOUT_CONDITION, RolloutReason, RolloutStatus,
    },
};
use flotilla_core::rollout::{
    health::member_verdict,
    plan::{ClusterInput, Input, RolloutEvent, plan},
    rollback::Rollback,
};
use kube::{ResourceExt, core::DynamicObject, runtime::events::EventType};
use serde_json::{Value, json};
use tracing::warn;

pub(crate) use canary::is_canary;
pub(crate) use canary_pull::PullCanaries;
pub(super) use revisions::RevisionStore;
pub use revisions::{KIND_LABEL, NAME_LABEL, Revisions, name_label, revisions_selector};

use super::{
    Key, SyncShared,
    memory::WrittenStatus,
    observe::Observer,
    plan::{self as sync_plan, DesiredFor, DesiredSet, HASH_ANNOTATION, Observed},
    status::Events,
    type_info::TypeInfo,
};
use crate::multicluster::ClusterState;

/// Characters of the content hash that name a revision.
const REVISION_CHARS: usize = 16;

/// What one reconcile decided about the rollout, for the status and the Events.
pub(super) struct RolloutRound {
    /// The new `status.rollout` (the stored one while the spec is invalid).
    pub status: Option<RolloutStatus>,
    /// The `Rollout` condition.
    pub reason: RolloutReason,
    /// Its message.
    pub message: String,
    /// Events to publish once the status is written.
    pub events: Vec<(RolloutEvent, String)>,
    /// When a cluster's success or deadline comes due.
    pub recheck: Option<Duration>,
}

/// The inputs of one rollout step besides the spec.
pub(super) struct Members<'a> {
    pub snapshot: &'a [ClusterState],
    pub observed: &'a [Observed],
}

/// The revision of a spec: its template and overrides (placement, rollout settings and
/// the rest change no member object) and their hash.
pub fn revision_of(spec: &FederatedSpec) -> (String, Value) {
    let content = json!({"template": spec.template, "overrides": spec.overrides});
    let hash = flotilla_api::hash::content_hash(&content);
    (hash[..REVISION_CHARS].to_string(), content)
}

/// The round of a rollout whose spec is invalid: reason `InvalidSpec`, and a
/// `RolloutInvalid` Event once per distinct problem (as the condition's message changes).
pub(super) fn invalid_round(stored: FederatedStatus, message: String) -> RolloutRound {
    let said = stored
        .rollout_condition()
        .is_some_and(|c| c.message == message);
    let events = (!said)
        .then(|| (RolloutEvent::RolloutInvalid, message.clone()))
        .into_iter()
        .collect();
    RolloutRound {
        status: stored.rollout,
        reason: RolloutReason::InvalidSpec,
        message,
        events,
        recheck: None,
    }
}

/// What a rollout step reads and writes: the type, the stored revisions, our last status
/// writes (the step is planned from the stored status), and — for a canary — the member
/// caches and the member write path (`shared`) of the canary Deployments.
pub(super) struct Rollout<'a> {
    pub shared: &'a SyncShared,
    pub ty: &'a TypeInfo,
    pub revisions: RevisionStore<'a>,
    pub written: &'a WrittenStatus,
    pub observer: Observer<'a>,
    /// The canary Deployments of Pull clusters (a Deployment type).
    pub canaries: Option<&'a PullCanaries>,
}

impl Rollout<'_> {
    /// For a progressive rollout: plans this step and rewrites `desired` so that only the
    /// clusters the plan allows get the target; `None` without `spec.rollout` (or with
    /// strategy `All`).
    pub async fn progressive(
        &self,
        key: &Key,
        fed: &DynamicObject,
        spec: &FederatedSpec,
        members: Members<'_>,
        desired: &mut DesiredSet,
    ) -> Option<RolloutRound> {
        if spec.rollout.as_ref().is_some_and(|r| r.is_canary()) {
            return self.canary(key, fed, spec, members, desired).await;
        }
        let rollout = spec.rollout.as_ref().filter(|r| r.is_progressive())?;
        let stored = self.stored_status(key, fed);
        if let Err(message) = rollout.validate() {
            hold_present(desired, &members);
            return Some(invalid_round(stored, message));
        }
        let (target, content) = revision_of(spec);
        if let Err(e) = self.revisions.ensure(fed, key, &target, &content).await {
            // Without the record this revision cannot be rendered again once a newer one
            // arrives; the rollout itself goes on.
            warn!(error = %e, "storing the rollout revision failed");
        }
        let inputs = cluster_inputs(self.ty.health.as_deref(), &members, desired);
        let clusters: Vec<ClusterInput<'_>> = inputs.iter().map(|i| i.as_input()).collect();
        let plan = plan(&Input {
            spec: rollout,
            target: &target,
            generation: fed.metadata.generation.unwrap_or(0),
            previous: stored.rollout.as_ref(),
            clusters: &clusters,
            now: super::plan::decision::now(),
        });
        let reached = plan
            .status
            .clusters
            .iter()
            .any(|c| c.state == ClusterRolloutState::Succeeded);
        let fallback = match (&plan.status.stable_revision, reached) {
            (Some(stable), false) => Some(stable.as_str()),
            _ => None,
        };
        let held = Held {
            spec,
            target: &target,
            fallback,
            updated: &plan.updated,
            rollback: plan.rollback.as_ref(),
        };
        self.render_held(key, &members, desired, &held).await;
        Some(RolloutRound {
            status: Some(plan.status),
            reason: plan.reason,
            message: plan.message,
            events: plan.events,
            recheck: plan
                .recheck_after
                .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(1))),
        })
    }

    /// The status the host holds — or our own last write while the cache lags behind it,
    /// so a step is not planned twice from the same stored state.
    fn stored_status(&self, key: &Key, fed: &DynamicObject) -> FederatedStatus {
        let base = fed.resource_version().unwrap_or_default();
        self.written
            .lagging(key, &base)
            .unwrap_or_else(|| FederatedStatus::from_dynamic(fed))
    }

    /// Gives every placed cluster the plan does not move the revision it holds: rendered
    /// from that revision's record, or left exactly as it is when there is none. A cluster
    /// without the object gets the version the rollout has reached.
    async fn render_held(
        &self,
        key: &Key,
        members: &Members<'_>,
        desired: &mut DesiredSet,
        held: &Held<'_>,
    ) {
        for (cluster, observed) in members.snapshot.iter().zip(members.observed) {
            let name = &cluster.name;
            if !desired.by_cluster.contains_key(name) {
                continue;
            }
            let Some(revision) = revision_for(held, name, observed) else {
                // Written before the rollout was progressive: kept as it is.
                desired.by_cluster.remove(name);
                continue;
            };
            if revision != held.target {
                match self.render(key, held.spec, &revision, name).await {
                    Some(d) => {
                        desired.by_cluster.insert(name.clone(), d);
                    }
                    None => {
                        desired.by_cluster.remove(name);
                        continue;
                    }
                }
            }
            if let Some(DesiredFor::Object { object, .. }) = desired.by_cluster.get_mut(name) {
                set_annotation(object, REVISION_ANNOTATION, &revision);
            }
        }
    }

    /// The desired object of `cluster` rendered from a stored revision.
    async fn render(
        &self,
        key: &Key,
        spec: &FederatedSpec,
        revision: &str,
        cluster: &str,
    ) -> Option<DesiredFor> {
        let content = match self.revisions.get(key, revision).await {
            Ok(Some(c)) => c,
            Ok(None) => return None,
            Err(e) => {
                warn!(error = %e, %revision, "reading a rollout revision failed");
                return None;
            }
        };
        let old = FederatedSpec {
            template: content.get("template").cloned().unwrap_or(Value::Null),
            overrides: serde_json::from_value(
                content.get("overrides").cloned().unwrap_or(json!([])),
            )
            .ok()?,
            ..spec.clone()
        };
        let set = sync_plan::desired_objects(
            &self.ty.target_type_api(),
            &key.1,
            key.0.as_deref(),
            &old,
            &BTreeSet::from([cluster.to_string()]),
        );
        set.by_cluster.get(cluster).cloned()
    }
}

/// Publishes the Events of a rollout step.
pub(super) async fn announce(events: Events<'_>, fed: &DynamicObject, round: &RolloutRound) {
    for (event, note) in &round.events {
        let type_ = if event.is_warning() {
            EventType::Warning
        } else {
            EventType::Normal
        };
        events
            .publish(fed, type_, event.as_str(), note.clone())
            .await;
    }
}

/// What the held clusters are rendered from.
struct Held<'a> {
    spec: &'a FederatedSpec,
    target: &'a str,
    /// The revision a cluster without the object gets (else the target).
    fallback: Option<&'a str>,
    updated: &'a BTreeSet<String>,
    /// Failed clusters going back to the stable revision (`onFailure: Rollback`).
    rollback: Option<&'a Rollback>,
}

/// The revision a placed cluster gets: the stable one when it failed and goes back; the
/// target when the plan moves it; else the one its member object holds (`None`: an object
/// written before the rollout was progressive, kept as it is); a cluster without the
/// object gets the version the rollout has reached.
fn revision_for(held: &Held<'_>, cluster: &str, observed: &Observed) -> Option<String> {
    if let Some(r) = held.rollback.filter(|r| r.clusters.contains(cluster)) {
        return Some(r.to.clone());
    }
    if held.updated.contains(cluster) {
        return Some(held.target.to_string());
    }
    match observed {
        Observed::Present(obj) => annotation(obj, REVISION_ANNOTATION),
        _ => Some(held.fallback.unwrap_or(held.target).to_string()),
    }
}

/// One placed cluster's facts, owned.
struct ClusterFacts {
    name: String,
    labels: std::collections::BTreeMap<String, String>,
    at_target: bool,
    healthy: bool,
    problem: Option<String>,
    /// Failed by the type's health rules (not merely not healthy yet).
    failed: bool,
}

impl ClusterFacts {
    fn as_input(&self) -> ClusterInput<'_> {
        ClusterInput {
            name: &self.name,
            labels: &self.labels,
            at_target: self.at_target,
            healthy: self.healthy,
            problem: self.problem.clone(),
            failed: self.failed,
        }
    }
}

/// Where each placed cluster (a cluster with a desired entry) stands on the target.
fn cluster_inputs(
    health: Option<&flotilla_core::health::TypeHealth>,
    members: &Members<'_>,
    desired: &DesiredSet,
) -> Vec<ClusterFacts> {
    members
        .snapshot
        .iter()
        .zip(members.observed)
        .filter_map(|(cluster, observed)| {
            let entry = desired.by_cluster.get(&cluster.name)?;
            let not_yet = |why: &str| (false, (Err(why.to_owned()), false));
            let (at_target, (health, failed)) = match (entry, observed) {
                (DesiredFor::Failed(_, message), _) => (false, (Err(message.clone()), false)),
                (DesiredFor::Object { hash, .. }, Observed::Present(obj)) => {
                    if annotation(obj, HASH_ANNOTATION).as_deref() == Some(hash.as_str()) {
                        (true, member_verdict(health, obj))
                    } else {
                        not_yet("the member object does not hold the target yet")
                    }
                }
                (_, Observed::NotReady) => not_yet("the cluster is not ready"),
                (_, _) => not_yet("the member object is not created yet"),
            };
            Some(ClusterFacts {
                name: cluster.name.clone(),
                labels: cluster.labels.clone(),
                at_target,
                healthy: health.is_ok(),
                problem: health.err(),
                failed,
            })
        })
        .collect()
}

/// An invalid `spec.rollout` moves nothing: members keep what they have.
fn hold_present(desired: &mut DesiredSet, members: &Members<'_>) {
    for (cluster, observed) in members.snapshot.iter().zip(members.observed) {
        if matches!(observed, Observed::Present(_)) {
            desired.by_cluster.remove(&cluster.name);
        }
    }
}

fn annotation(obj: &Value, key: &str) -> Option<String> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn set_annotation(obj: &mut Value, key: &str, value: &str) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let ann = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(map) = ann.as_object_mut() {
            map.insert(key.to_string(), Value::String(value.to_string()));
        }
    }
}

/// Puts the rollout part into a freshly built status: `status.rollout` and the `Rollout`
/// condition (its times carried over while it does not change).
pub(super) fn apply(
    status: &mut FederatedStatus,
    round: Option<&RolloutRound>,
    previous: &FederatedStatus,
    now: &str,
) {
    let Some(r) = round else {
        return;
    };
    status.rollout = r.status.clone();
    status.conditions.push(FederatedCondition::updated(
        previous.rollout_condition(),
        ROLLOUT_CONDITION,
        r.reason.status(),
        r.reason.as_str().into(),
        r.message.clone(),
        now,
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(revision: Option<&str>, hash: &str) -> Observed {
        let mut annotations = json!({ HASH_ANNOTATION: hash });
        if let Some(r) = revision {
            annotations[REVISION_ANNOTATION] = json!(r);
        }
        Observed::Present(
            json!({"metadata": {"generation": 1, "annotations": annotations},
            "spec": {"replicas": 1},
            "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                "readyReplicas": 1, "availableReplicas": 1}}),
        )
    }

    #[test]
    fn a_held_cluster_keeps_its_revision_and_a_new_one_gets_what_the_rollout_reached() {
        let spec = FederatedSpec::default();
        let updated = BTreeSet::from(["moved".to_string()]);
        let held = |fallback| Held {
            spec: &spec,
            target: "r2",
            fallback,
            updated: &updated,
            rollback: None,
        };
        let old = member(Some("r1"), "h1");
        let table: [(&str, &Observed, Option<&str>, Option<&str>); 6] = [
            ("moved", &old, Some("r1"), Some("r2")),
            ("held", &old, Some("r1"), Some("r1")),
            ("held", &member(None, "h1"), None, None),
            ("new", &Observed::Absent, Some("r1"), Some("r1")),
            ("new", &Observed::Absent, None, Some("r2")),
            ("down", &Observed::NotReady, Some("r1"), Some("r1")),
        ];
        for (cluster, observed, fallback, want) in table {
            assert_eq!(
                revision_for(&held(fallback), cluster, observed).as_deref(),
                want,
                "{cluster} with fallback {fallback:?}"
            );
        }
    }

    #[test]
    fn a_failed_cluster_going_back_gets_the_stable_revision_whatever_it_holds() {
        let spec = FederatedSpec::default();
        let updated = BTreeSet::from(["ok".to_string()]);
        let rollback = Rollback {
            to: "r1".into(),
            clusters: BTreeSet::from(["bad".to_string()]),
        };
        let held = Held {
            spec: &spec,
            target: "r2",
            fallback: None,
            updated: &updated,
            rollback: Some(&rollback),
        };
        let on_target = member(Some("r2"), "h2");
        for (cluster, want) in [("bad", "r1"), ("ok", "r2")] {
            assert_eq!(
                revision_for(&held, cluster, &on_target).as_deref(),
                Some(want),
                "{cluster}"
            );
        }
        assert_eq!(
            revision_for(&held, "bad", &Observed::Absent).as_deref(),
            Some("r1")
        );
    }

    #[test]
    fn a_cluster_is_at_the_target_when_its_member_holds_the_target_hash() {
        let snapshot: Vec<ClusterState> = ["m1", "m2", "m3"]
            .iter()
            .map(|n| ClusterState {
                name: n.to_string(),
                labels: Default::default(),
                taints: Vec::new(),
                ready: true,
                client: None,
                client_generation: 0,
                pull: false,
            })
            .collect();
        let observed = [
            member(Some("r2"), "h2"),
            member(Some("r1"), "h1"),
            Observed::NotReady,
        ];
        let mut desired = DesiredSet::default();
        for c in ["m1", "m2", "m3"] {
            desired.by_cluster.insert(
                c.into(),
                DesiredFor::Object {
                    object: json!({}),
                    hash: "h2".into(),
                },
            );
        }
        let members = Members {
            snapshot: &snapshot,
            observed: &observed,
        };
        let deployment = flotilla_api::core::ApiResource {
            group: "apps".into(),
            kind: "Deployment".into(),
            ..Default::default()
        };
        let health = flotilla_core::health::TypeHealth::of(&deployment, None);
        let facts = cluster_inputs(Some(&health), &members, &desired);
        let got: Vec<(&str, bool, bool, Option<&str>)> = facts
            .iter()
            .map(|f| {
                (
                    f.name.as_str(),
                    f.at_target,
                    f.healthy,
                    f.problem.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("m1", true, true, None),
                (
                    "m2",
                    false,
                    false,
                    Some("the member object does not hold the target yet")
                ),
                ("m3", false, false, Some("the cluster is not ready")),
            ]
        );
    }
}
