//! Writing a federated object's status and its Events. What the status says is computed
//! in [`super::plan::status`]; here it is written — only when it changed — and a Warning
//! is published when [`super::plan::status::warrants_warning`] says so.

use std::collections::BTreeMap;

use flotilla_api::{AggregateReason, federated::FederatedStatus, workload::AggregatedStatus};
use flotilla_multicluster::unread;
use kube::{
    Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
    core::{ApiResource, DynamicObject},
    runtime::events::{EventType, Recorder},
};
use serde_json::{Value, json};
use tracing::{debug, warn};

use super::{
    memory::WrittenStatus,
    plan::{Outcome, status as plan},
    scheduled::{self, Scheduling},
    type_info::TypeInfo,
};
use crate::metrics::{FailureLabels, RolloutLabels, SyncMetrics};

/// What a status write is about: the results and the previous status they replace.
pub(super) struct StatusUpdate<'a> {
    pub previous: &'a FederatedStatus,
    pub outcomes: &'a BTreeMap<String, Outcome>,
    pub aggregate: Option<(AggregateReason, String)>,
    pub generation: i64,
    pub remote: &'a BTreeMap<String, Value>,
    /// A workload's status summed over clusters (workload types with status collected).
    pub aggregated: Option<AggregatedStatus>,
    /// The scheduling decision, for placements that use Flotilla's scheduling fields.
    pub scheduling: Scheduling<'a>,
    /// A progressive rollout's step (`spec.rollout`).
    pub rollout: Option<&'a super::rollout::RolloutRound>,
    /// `status.drift` after this round (`None`: kept as it was).
    pub drift: Option<Vec<flotilla_api::drift::ClusterDrift>>,
    /// `status.dependencies` after this round (`None`: kept as it was).
    pub dependencies: Option<Vec<flotilla_api::dependency_plan::DependencyStatus>>,
}

/// Publishes Events on the federated objects of one type.
#[derive(Clone, Copy)]
pub(super) struct Events<'a> {
    pub recorder: &'a Recorder,
    /// The federated API the objects are of.
    pub fed_ar: &'a ApiResource,
}

impl Events<'_> {
    /// Publishes an Event on the federated object (failures are only logged at debug:
    /// an Event is best effort).
    pub async fn publish(&self, fed: &DynamicObject, type_: EventType, reason: &str, note: String) {
        crate::events::publish(
            self.recorder,
            &fed.object_ref(self.fed_ar),
            type_,
            reason,
            "Propagate",
            note,
        )
        .await;
    }

    /// Publishes the Events a scheduling decision warrants (see [`scheduled::events`]).
    pub async fn announce_decision(
        &self,
        fed: &DynamicObject,
        previous: &FederatedStatus,
        decision: &flotilla_core::schedule::Decision,
    ) {
        for (event, note) in scheduled::events(previous, decision) {
            self.publish(fed, event.event_type(), event.as_str(), note)
                .await;
        }
    }
}

/// What writing one type's status needs: the host, the type, our last writes, the
/// metrics and the Events a new failure warrants.
pub(super) struct StatusWriter<'a> {
    pub host: &'a Client,
    pub ty: &'a TypeInfo,
    /// Our last status write per object, while the host cache has not delivered it.
    pub written: &'a WrittenStatus,
    pub metrics: &'a SyncMetrics,
    pub events: Events<'a>,
}

impl StatusWriter<'_> {
    /// Writes the status built from `update` when it differs from the previous one.
    #[tracing::instrument(name = "status_write", skip_all, fields(name = %fed.name_any()))]
    pub async fn write(&self, fed: &DynamicObject, update: StatusUpdate<'_>) {
        // When the host cache still holds the version our last status write was based
        // on, the status in the host is the one we wrote: compare with that, or the same
        // status would be sent again (a no-op PATCH, but a request all the same).
        let key = (fed.namespace(), fed.name_any());
        let base = fed.resource_version().unwrap_or_default();
        let ours = self.written.lagging(&key, &base);
        let previous = ours.as_ref().unwrap_or(update.previous);
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let mut status = plan::build_status(
            update.generation,
            update.outcomes,
            update.aggregate,
            previous,
            update.remote,
            update.aggregated,
            &now,
        );
        scheduled::apply(&mut status, &update.scheduling, previous, &now);
        super::rollout::apply(&mut status, update.rollout, previous, &now);
        status.drift = update.drift.unwrap_or_else(|| previous.drift.clone());
        status.dependencies =
            (update.dependencies).unwrap_or_else(|| previous.dependencies.clone());
        self.ty.pruned.strip(&mut status);
        if &status == previous {
            return;
        }
        let api = (self.ty).host_api(self.host.clone(), fed.metadata.namespace.as_deref());
        let patch = json!({ "status": status_patch(&status, previous) });
        // Which parts changed (names only: a status never carries a Secret's value, but the
        // log needs no more).
        debug!(object = ?key, changed = ?changed_parts(&status, previous), "writing status");
        self.written.forget(&key);
        let written = unread::patch_status(
            &api,
            &fed.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await;
        if let Err(e) = written {
            if !matches!(&e, kube::Error::Api(s) if s.code == 404) {
                warn!(error = %e, "writing status failed");
            }
            return;
        }
        self.written.remember(key, base, status.clone());
        self.count_write(previous, &status, update.rollout);
        if plan::warrants_warning(previous, &status)
            && let Some((reason, note)) = plan::warning_note(&status)
        {
            (self.events.publish(fed, EventType::Warning, &reason, note)).await;
        }
    }

    /// The metrics of one status write: the write, the per-cluster failures it reports
    /// first, and the rollout's new reason when it changed.
    fn count_write(
        &self,
        previous: &FederatedStatus,
        status: &FederatedStatus,
        rollout: Option<&super::rollout::RolloutRound>,
    ) {
        let m = self.metrics;
        m.status_writes.get_or_create(&self.ty.kind_labels()).inc();
        for reason in plan::new_failures(previous, status) {
            m.failures
                .get_or_create(&FailureLabels {
                    kind: self.ty.fed_ar.kind.clone(),
                    reason: reason.as_str(),
                })
                .inc();
        }
        if let Some(round) = rollout {
            let reason = round.reason.as_str();
            if previous.rollout_condition().map(|c| c.reason.as_str()) != Some(reason) {
                let labels = RolloutLabels {
                    kind: self.ty.fed_ar.kind.clone(),
                    reason,
                };
                m.rollout_transitions.get_or_create(&labels).inc();
            }
        }
    }

    /// A spec that cannot be read: nothing is propagated, the status says why.
    pub async fn report_malformed(
        &self,
        fed: &DynamicObject,
        previous: &FederatedStatus,
        generation: i64,
        error: String,
    ) {
        let update = StatusUpdate {
            previous,
            outcomes: &BTreeMap::new(),
            aggregate: Some((AggregateReason::ComputePlacementFailed, error)),
            generation,
            remote: &BTreeMap::new(),
            aggregated: None,
            scheduling: Scheduling::of(None, previous.placement.is_some()),
            rollout: None,
            drift: None,
            dependencies: None,
        };
        self.write(fed, update).await;
    }
}

/// The merge patch's `status` turning `previous` into `status`: every key `status` drops,
/// nested or top-level, is sent as null (a merge patch would keep absent keys' old values).
fn status_patch(status: &FederatedStatus, previous: &FederatedStatus) -> Value {
    let mut value = serde_json::to_value(status).unwrap_or(Value::Null);
    // Merge patch: nested keys the new status drops (an empty `aggregated.health`, a
    // finished rollout's `currentWave`) would keep their old values.
    let base_value = serde_json::to_value(previous).unwrap_or(Value::Null);
    flotilla_core::merge_patch::null_dropped_keys(&mut value, &base_value);
    if let Some(map) = value.as_object_mut() {
        // Merge patch: absent keys would keep old values, so clear them explicitly.
        for k in [
            "clusters",
            "conditions",
            "aggregated",
            "placement",
            "rollout",
            "drift",
            "dependencies",
        ] {
            map.entry(k).or_insert(Value::Null);
        }
    }
    value
}

/// The top-level status fields that differ from `previous`.
fn changed_parts(status: &FederatedStatus, previous: &FederatedStatus) -> Vec<String> {
    let (now, before) = (serde_json::to_value(status), serde_json::to_value(previous));
    let (Ok(Value::Object(now)), Ok(Value::Object(before))) = (now, before) else {
        return Vec::new();
    };
    let keys: std::collections::BTreeSet<&String> = now.keys().chain(before.keys()).collect();
    keys.into_iter()
        .filter(|k| now.get(*k) != before.get(*k))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_clears_every_list_and_extension_the_new_status_drops() {
        let previous: FederatedStatus = serde_json::from_value(json!({
            "observedGeneration": 3,
            "clusters": [{"name": "member1"}],
            "rollout": {"targetRevision": "r1", "progress": "1/2", "currentWave": 2},
        }))
        .expect("previous status");
        let status = FederatedStatus {
            observed_generation: 4,
            ..FederatedStatus::default()
        };
        let patch = status_patch(&status, &previous);
        assert_eq!(patch["observedGeneration"], json!(4));
        for key in [
            "clusters",
            "conditions",
            "aggregated",
            "placement",
            "rollout",
            "drift",
            "dependencies",
        ] {
            assert_eq!(patch[key], Value::Null, "{key} in {patch}");
            assert!(
                patch.as_object().is_some_and(|m| m.contains_key(key)),
                "{key}"
            );
        }
    }

    #[test]
    fn a_patch_nulls_a_nested_key_the_new_status_drops() {
        let previous: FederatedStatus = serde_json::from_value(json!({
            "rollout": {"targetRevision": "r1", "progress": "1/2", "currentWave": 2},
        }))
        .expect("previous status");
        let status: FederatedStatus = serde_json::from_value(json!({
            "rollout": {"targetRevision": "r1", "progress": "2/2"},
        }))
        .expect("new status");
        let patch = status_patch(&status, &previous);
        assert_eq!(patch["rollout"]["progress"], json!("2/2"));
        assert_eq!(patch["rollout"]["currentWave"], Value::Null, "{patch}");
    }
}
