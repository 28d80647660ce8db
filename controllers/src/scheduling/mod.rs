//! ReplicaSchedulingPreference controller: for each RSP, the FederatedDeployment or
//! FederatedReplicaSet of the same namespace/name gets `spec.placement.clusters` and a
//! per-cluster `/spec/replicas` override computed by [`planner`] over the Ready clusters
//! (intersected with the target's `clusterSelector` when `intersectWithClusterSelector`).
//! Other overrides of the target are kept. Recomputed when the RSP, the target or the
//! cluster set changes; written only when the result differs. A target whose placement
//! uses Flotilla's scheduling fields keeps its placement: replicas are divided over the
//! Ready clusters of its decision (`status.placement.clusters`), so they follow a failover,
//! and only the replica overrides are written.

pub mod planner;

use flotilla_multicluster::{
    runner::{Action, KeyedRunner},
    tasks::AbortOnDrop,
};
use std::{collections::BTreeMap, convert::Infallible, sync::Arc};

use flotilla_api::{
    ReplicaSchedulingPreference, crdgen,
    federated::{
        ClusterOverrides, ClusterReference, FederatedSpec, FederatedStatus, LabelSelector,
    },
    scheduling::ReplicaSchedulingPreferenceSpec,
};
use flotilla_core::replica_division::{apply_plan, current_replicas, is_scheduled};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
    core::ApiResource,
    runtime::{
        events::{EventType, Recorder},
        reflector::{self, ObjectRef, Store},
    },
};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::{
    multicluster::{ClusterSet, ClusterState},
    watch::{Change, reflect},
    workqueue::WorkQueue,
};

/// Field manager of the scheduler's writes to federated objects.
pub const SCHEDULER_MANAGER: &str = "flotilla-scheduler";
/// The scheduler's name as the reporting controller of its Events.
const REPORTING_CONTROLLER: &str = "flotilla-scheduler";

fn federated_ar(kind: &str) -> Option<ApiResource> {
    // Only the workload kinds whose replicas can be divided are scheduled.
    let target = match kind {
        "FederatedDeployment" => "Deployment",
        "FederatedReplicaSet" => "ReplicaSet",
        _ => return None,
    };
    crdgen::default_target_types()
        .into_iter()
        .find(|t| t.api.group == "apps" && t.api.kind == target)
        .map(|t| crdgen::federated_api_resource(&t.api).to_kube())
}

type Key = (String, String);

struct Ctx {
    host: Client,
    clusters: ClusterSet,
    rsps: Store<ReplicaSchedulingPreference>,
    targets: BTreeMap<String, Store<DynamicObject>>,
    recorder: Recorder,
}

/// Spawns a cache of `api`'s objects that queues the namespace/name of every change.
fn watch_queued<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    what: &'static str,
    queue: Arc<WorkQueue<Key>>,
) -> tokio::task::JoinHandle<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    tokio::spawn(reflect(api, writer, what, move |c| {
        if let Change::Object(o) = c {
            queue.add((o.namespace().unwrap_or_default(), o.name_any()));
        }
    }))
}

/// Runs the scheduler until the task is aborted.
pub async fn run(host: Client, clusters: ClusterSet) {
    let queue: Arc<WorkQueue<Key>> = WorkQueue::new();
    let rsp_writer = reflector::store::Writer::<ReplicaSchedulingPreference>::default();
    let rsps = rsp_writer.as_reader();
    let mut tasks = vec![watch_queued(
        Api::all(host.clone()),
        rsp_writer,
        "ReplicaSchedulingPreference",
        queue.clone(),
    )];
    let mut targets = BTreeMap::new();
    for kind in ["FederatedDeployment", "FederatedReplicaSet"] {
        let Some(ar) = federated_ar(kind) else {
            continue;
        };
        let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
        targets.insert(kind.to_string(), writer.as_reader());
        // The federated type may not be enabled (CRD absent): `reflect` keeps retrying.
        tasks.push(watch_queued(
            Api::all_with(host.clone(), &ar),
            writer,
            "federated scheduling target",
            queue.clone(),
        ));
    }
    let ctx = Arc::new(Ctx {
        host: host.clone(),
        clusters: clusters.clone(),
        rsps: rsps.clone(),
        targets,
        recorder: crate::events::recorder(host, REPORTING_CONTROLLER),
    });
    {
        let queue = queue.clone();
        let rsps = rsps.clone();
        let mut changes = clusters.changes();
        tasks.push(tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                for r in rsps.state() {
                    queue.add((r.namespace().unwrap_or_default(), r.name_any()));
                }
            }
        }));
    }
    let _guard = AbortOnDrop::from(tasks);
    // One worker and no gate, as before the runner: a key whose caches are not listed yet
    // finds nothing and waits for the change the list brings.
    KeyedRunner::new("replica-scheduling", queue)
        .run(move |key: Key| {
            let ctx = ctx.clone();
            async move { Ok::<_, Infallible>(ctx.reconcile(&key).await) }
        })
        .await;
}

impl Ctx {
    async fn reconcile(&self, key: &Key) -> Action {
        let rsp_ref = ObjectRef::<ReplicaSchedulingPreference>::new(&key.1).within(&key.0);
        let Some(rsp) = self.rsps.get(&rsp_ref) else {
            return Action::AwaitChange;
        };
        let Some((ar, spec, status)) = self.target(key, &rsp).await else {
            return Action::AwaitChange;
        };
        let s = match schedule(&rsp.spec, &spec, &status, &self.clusters.snapshot(), key) {
            Ok(Some(s)) => s,
            Ok(None) => {
                debug!(rsp = ?key, "the target has no Ready decided cluster yet");
                return Action::AwaitChange;
            }
            Err(e) => {
                self.event(&rsp, "InvalidClusterSelector", e.to_string())
                    .await;
                return Action::AwaitChange;
            }
        };
        let patch = if s.composed {
            if s.overrides == spec.overrides {
                return Action::AwaitChange;
            }
            json!({"spec": {"overrides": s.overrides}})
        } else {
            if is_scheduled(&spec, &s.placement, &s.overrides) {
                return Action::AwaitChange;
            }
            json!({"spec": {"placement": {"clusters": s.placement}, "overrides": s.overrides}})
        };
        self.write_schedule(key, &ar, &patch, &s.plan).await
    }

    /// The federated object `rsp` schedules and its spec; `None` (after an Event when the
    /// RSP or the target is at fault) when there is nothing to schedule now.
    async fn target(
        &self,
        key: &Key,
        rsp: &ReplicaSchedulingPreference,
    ) -> Option<(ApiResource, FederatedSpec, FederatedStatus)> {
        let Some(ar) = federated_ar(&rsp.spec.target_kind) else {
            self.event(
                rsp,
                "InvalidTargetKind",
                format!(
                    "targetKind {:?} is not FederatedDeployment or FederatedReplicaSet",
                    rsp.spec.target_kind
                ),
            )
            .await;
            return None;
        };
        let store = self.targets.get(&rsp.spec.target_kind)?;
        let Some(target) = store.get(&ObjectRef::new_with(&key.1, ar.clone()).within(&key.0))
        else {
            debug!(rsp = ?key, "no target yet; scheduling waits for it");
            return None;
        };
        if target.metadata.deletion_timestamp.is_some() {
            return None;
        }
        match FederatedSpec::from_dynamic(&target) {
            Ok(spec) => Some((ar, spec, FederatedStatus::from_dynamic(&target))),
            Err(e) => {
                self.event(rsp, "TargetMalformed", e.to_string()).await;
                None
            }
        }
    }

    /// Writes the new placement and overrides; a failed write backs the key off.
    async fn write_schedule(
        &self,
        key: &Key,
        ar: &ApiResource,
        patch: &serde_json::Value,
        plan: &BTreeMap<String, i64>,
    ) -> Action {
        let api: Api<DynamicObject> = Api::namespaced_with(self.host.clone(), &key.0, ar);
        match api
            .patch(&key.1, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {
                info!(rsp = ?key, plan = ?plan, "replicas scheduled");
                Action::AwaitChange
            }
            Err(e) => {
                // Deliberately the per-key backoff (1 s, doubling to 60 s) where this
                // controller used to retry every 5 s forever.
                warn!(rsp = ?key, error = %e, "writing the schedule failed");
                Action::backoff()
            }
        }
    }

    async fn event(&self, rsp: &ReplicaSchedulingPreference, reason: &str, note: String) {
        let reference = rsp.object_ref(&());
        crate::events::publish(
            &self.recorder,
            &reference,
            EventType::Warning,
            reason,
            "Schedule",
            note,
        )
        .await;
    }
}

/// What the scheduler writes into an RSP's target.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// Replicas per cluster.
    pub plan: BTreeMap<String, i64>,
    /// `spec.placement.clusters`: the clusters with replicas.
    pub placement: Vec<ClusterReference>,
    /// `spec.overrides`: a `/spec/replicas` override per placed cluster, the target's
    /// other overrides kept.
    pub overrides: Vec<ClusterOverrides>,
    /// The target's placement is the constraint scheduler's: only `overrides` is written.
    pub composed: bool,
}

/// The schedule of one RSP for its target. `key` is the RSP's (and the target's)
/// `(namespace, name)`. A target placed by Flotilla's scheduler (`composed`): replicas go
/// to its Ready decided clusters (`status.placement`) and only the replica overrides are
/// written, the scheduler owning the placement; `None` while none of them is Ready. Also
/// used by `flotilla diff`, which shows what the controller would write.
pub fn schedule(
    rsp: &ReplicaSchedulingPreferenceSpec,
    spec: &FederatedSpec,
    status: &FederatedStatus,
    clusters: &[ClusterState],
    key: &(String, String),
) -> Result<Option<Schedule>, flotilla_api::selector::PlacementError> {
    let composed = spec.placement.is_scheduled();
    let candidates = if composed {
        decided_candidates(clusters, status)
    } else {
        let selector = spec
            .placement
            .cluster_selector
            .as_ref()
            .filter(|_| rsp.intersect_with_cluster_selector);
        candidates(clusters, selector)?
    };
    if composed && candidates.is_empty() {
        return Ok(None);
    }
    let current = current_replicas(spec);
    let plan = planner::plan(&planner::PlanInput {
        total_replicas: i64::from(rsp.total_replicas),
        preferences: &rsp.clusters,
        clusters: &candidates,
        current: &current,
        rebalance: rsp.rebalance,
        key: &format!("{}/{}", key.0, key.1),
    });
    let (placement, overrides) = apply_plan(spec, &plan, composed);
    Ok(Some(Schedule {
        plan,
        placement,
        overrides,
        composed,
    }))
}

/// The Ready clusters that may receive replicas: all of them, or those `selector` matches.
/// A malformed selector is an error as soon as there is a Ready cluster to match.
fn candidates(
    clusters: &[ClusterState],
    selector: Option<&LabelSelector>,
) -> Result<Vec<String>, flotilla_api::selector::PlacementError> {
    let mut kept = Vec::new();
    for c in clusters.iter().filter(|c| c.ready) {
        if selector.map_or(Ok(true), |sel| {
            flotilla_api::selector::matches_selector(sel, &c.labels)
        })? {
            kept.push(c.name.clone());
        }
    }
    Ok(kept)
}

/// The Ready clusters among those the scheduler decided for the target (its
/// `status.placement.clusters`).
fn decided_candidates(clusters: &[ClusterState], status: &FederatedStatus) -> Vec<String> {
    let Some(p) = &status.placement else {
        return Vec::new();
    };
    p.clusters
        .iter()
        .filter(|d| clusters.iter().any(|c| c.ready && c.name == d.name))
        .map(|d| d.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_federated_deployments_and_replica_sets_are_scheduled() {
        let ar = federated_ar("FederatedDeployment").expect("scheduled");
        assert_eq!(
            (ar.api_version.as_str(), ar.plural.as_str()),
            ("types.kubefed.io/v1beta1", "federateddeployments")
        );
        let ar = federated_ar("FederatedReplicaSet").expect("scheduled");
        assert_eq!(ar.plural, "federatedreplicasets");
        assert!(federated_ar("FederatedConfigMap").is_none());
    }

    fn cluster(name: &str, ready: bool, region: &str) -> ClusterState {
        ClusterState {
            name: name.into(),
            labels: BTreeMap::from([("region".to_string(), region.to_string())]),
            taints: vec![],
            ready,
            client: None,
            client_generation: 0,
            pull: false,
        }
    }

    #[test]
    fn a_scheduled_target_gets_replicas_on_its_ready_decided_clusters_only() {
        let clusters = [
            cluster("a", true, "eu"),
            cluster("b", false, "eu"),
            cluster("c", true, "us"),
        ];
        let status: FederatedStatus = serde_json::from_value(json!({
            "placement": {"clusters": [{"name": "b"}, {"name": "a"}]}
        }))
        .expect("valid status");
        assert_eq!(decided_candidates(&clusters, &status), ["a"]);
        assert!(decided_candidates(&clusters, &FederatedStatus::default()).is_empty());
        let plan = BTreeMap::from([("a".to_string(), 3), ("c".to_string(), 0)]);
        let (placed, overrides) = apply_plan(&FederatedSpec::default(), &plan, true);
        assert_eq!(placed.len(), 2, "zero-replica clusters keep an override");
        assert_eq!(overrides[1].cluster_overrides[0].value, Some(json!(0)));
    }

    #[test]
    fn candidates_are_the_ready_clusters_the_selector_matches() {
        let clusters = [
            cluster("a", true, "eu"),
            cluster("b", false, "eu"),
            cluster("c", true, "us"),
        ];
        assert_eq!(
            candidates(&clusters, None).expect("no selector"),
            ["a", "c"]
        );
        let eu = LabelSelector {
            match_labels: BTreeMap::from([("region".to_string(), "eu".to_string())]),
            ..LabelSelector::default()
        };
        assert_eq!(candidates(&clusters, Some(&eu)).expect("valid"), ["a"]);
    }

    #[test]
    fn a_malformed_selector_fails_only_when_a_ready_cluster_is_matched() {
        let bad = LabelSelector {
            match_expressions: vec![flotilla_api::federated::LabelSelectorRequirement {
                key: String::new(),
                operator: "Exists".into(),
                values: Vec::new(),
            }],
            ..LabelSelector::default()
        };
        assert!(candidates(&[cluster("a", true, "eu")], Some(&bad)).is_err());
        assert!(candidates(&[cluster("a", false, "eu")], Some(&bad)).is_ok());
    }
}
