//! ReplicaSchedulingPreference controller: for each RSP, the FederatedDeployment or
//! FederatedReplicaSet of the same namespace/name gets `spec.placement.clusters` and a
//! per-cluster `/spec/replicas` override computed by [`planner`] over the Ready clusters
//! (intersected with the target's `clusterSelector` when `intersectWithClusterSelector`).
//! Other overrides of the target are kept. Recomputed when the RSP, the target or the
//! cluster set changes; written only when the result differs. A target whose placement
//! uses Flotilla's scheduling fields keeps its placement: replicas are divided over the
//! Ready clusters of its decision (`status.placement.clusters`), so they follow a failover,
//! and only the replica overrides are written.
//!
//! Capacity (#53): kubefed's estimate caps a cluster whose pods of the target stayed
//! unschedulable past KubeFedConfig's `scheduling.unschedulableThreshold`, and
//! `weightPreference: AvailableReplicas` weighs clusters by the replicas that fit them,
//! both read from [`crate::capacity::MemberResources`]. Each division is recorded with its
//! reasons in the RSP's status ([`why`]).

pub mod planner;
pub mod why;

use flotilla_multicluster::{
    runner::{Action, KeyedRunner, QueueAges},
    tasks::AbortOnDrop,
};
use std::{collections::BTreeMap, convert::Infallible, sync::Arc, time::Duration};

use flotilla_api::{
    ReplicaSchedulingPreference,
    core::EffectiveConfig,
    crdgen,
    federated::{
        ClusterOverrides, ClusterReference, FederatedSpec, FederatedStatus, LabelSelector,
    },
    scheduling::{
        RebalanceOutcome, RebalanceStatus, ReplicaSchedulingPreferenceSpec, WeightPreference,
    },
};
use flotilla_core::{
    rebalance,
    replica_division::{apply_plan, current_replicas, is_scheduled},
};
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::jiff::Timestamp;
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
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use crate::{
    capacity::MemberResources,
    multicluster::{ClusterSet, ClusterState, MemberEvent},
    watch::reflect,
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
    resources: Arc<MemberResources>,
    config: watch::Receiver<EffectiveConfig>,
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
        if let Some(o) = c.object() {
            queue.add((o.namespace().unwrap_or_default(), o.name_any()));
        }
    }))
}

/// What the scheduler reads of the members: their cached Nodes and Pods, and every change
/// to them.
pub struct Members {
    /// The caches.
    pub resources: Arc<MemberResources>,
    /// Their changes.
    pub events: mpsc::UnboundedReceiver<MemberEvent>,
}

/// Runs the scheduler until the task is aborted.
pub async fn run(
    host: Client,
    clusters: ClusterSet,
    members: Members,
    config: watch::Receiver<EffectiveConfig>,
    ages: Arc<QueueAges>,
) {
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
        resources: members.resources,
        config,
    });
    tasks.push(tokio::spawn(requeue_on_member_changes(
        members.events,
        rsps.clone(),
        queue.clone(),
    )));
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
        .queue_ages(ages)
        .run(move |key: Key| {
            let ctx = ctx.clone();
            async move { Ok::<_, Infallible>(ctx.reconcile(&key).await) }
        })
        .await;
}

/// Queues the RSPs a member change may concern: those of the pod's namespace, or every RSP
/// for a node change or a cache (re)listed.
async fn requeue_on_member_changes(
    mut events: mpsc::UnboundedReceiver<MemberEvent>,
    rsps: Store<ReplicaSchedulingPreference>,
    queue: Arc<WorkQueue<Key>>,
) {
    while let Some(event) = events.recv().await {
        let namespace = match &event {
            MemberEvent::Object { namespace, .. } => namespace.clone(),
            _ => None,
        };
        for r in rsps.state() {
            let ns = r.namespace().unwrap_or_default();
            if namespace.as_ref().is_none_or(|n| *n == ns) {
                queue.add((ns, r.name_any()));
            }
        }
    }
}

impl Ctx {
    /// kubefed's capacity estimates and, with `AvailableReplicas`, the replicas that fit,
    /// of the Ready clusters for the target's pods; and when to look again (a pod about to
    /// cross the threshold).
    fn capacity(
        &self,
        rsp: &ReplicaSchedulingPreferenceSpec,
        spec: &FederatedSpec,
        namespace: &str,
    ) -> (CapacityInputs, Option<Duration>) {
        let Some(workload) = Workload::of(spec) else {
            return (CapacityInputs::default(), None);
        };
        let threshold = self.config.borrow().unschedulable_threshold;
        let now = Timestamp::now();
        let current = current_replicas(spec);
        let mut inputs = CapacityInputs::default();
        let mut recheck: Option<Duration> = None;
        let available_wanted = rsp.weight_preference == Some(WeightPreference::AvailableReplicas);
        let mut available = BTreeMap::new();
        for c in self.clusters.snapshot().iter().filter(|c| c.ready) {
            let e = self
                .resources
                .estimate(&c.name, namespace, &workload.selector, now, threshold);
            if let Some(cap) = e.capacity {
                inputs.estimates.insert(c.name.clone(), cap);
            }
            recheck = match (recheck, e.recheck_in) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if available_wanted {
                // Unknown while the caches list: its current replicas, so nothing moves.
                let n = self
                    .resources
                    .available(&c.name, namespace, &workload.selector, &workload.pod)
                    .unwrap_or_else(|| current.get(&c.name).copied().unwrap_or(0));
                available.insert(c.name.clone(), n);
            }
        }
        inputs.available = available_wanted.then_some(available);
        (inputs, recheck)
    }

    async fn reconcile(&self, key: &Key) -> Action {
        let rsp_ref = ObjectRef::<ReplicaSchedulingPreference>::new(&key.1).within(&key.0);
        let Some(rsp) = self.rsps.get(&rsp_ref) else {
            return Action::AwaitChange;
        };
        let Some((ar, spec, status)) = self.target(key, &rsp).await else {
            return Action::AwaitChange;
        };
        let (mut capacity, recheck) = self.capacity(&rsp.spec, &spec, &key.0);
        // A one-off rebalance asked and let through by the rollout: divide as if nothing
        // ran anywhere yet (`rebalance: true` does so every time already).
        let asked =
            rebalance::pending(&rsp).map(|t| (t.to_owned(), rebalance::rollout_gate(&status)));
        capacity.from_scratch = matches!(asked, Some((_, Ok(()))));
        let clusters = self.clusters.snapshot();
        let s = match schedule(&rsp.spec, &spec, &status, &clusters, key, &capacity) {
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
        let divisions = why::divisions(&s.plan, &clusters, &capacity, &spec.placement);
        let answer = match asked {
            Some((request, gate)) => Some(self.answer(&rsp, &spec, &s, request, gate).await),
            None => rsp.status.as_ref().and_then(|st| st.rebalance.clone()),
        };
        self.write_status(key, &rsp, divisions, answer).await;
        let after = match recheck {
            Some(d) => Action::requeue(d),
            None => Action::AwaitChange,
        };
        let patch = if s.composed {
            if s.overrides == spec.overrides {
                return after;
            }
            json!({"spec": {"overrides": s.overrides}})
        } else {
            if is_scheduled(&spec, &s.placement, &s.overrides) {
                return after;
            }
            json!({"spec": {"placement": {"clusters": s.placement}, "overrides": s.overrides}})
        };
        match self
            .write_schedule(key, &ar, &patch, &s.plan.written())
            .await
        {
            Action::AwaitChange => after,
            other => other,
        }
    }

    /// The answer to a one-off rebalance request, announced by an Event on the RSP.
    async fn answer(
        &self,
        rsp: &ReplicaSchedulingPreference,
        spec: &FederatedSpec,
        s: &Schedule,
        request: String,
        gate: Result<(), String>,
    ) -> RebalanceStatus {
        let (outcome, message) = match gate {
            Ok(()) => {
                let mut m = rebalance::describe(&current_replicas(spec), &s.plan.written());
                if rsp.spec.rebalance {
                    m.push_str(" (rebalance: true divides from the current capacity every time)");
                }
                (RebalanceOutcome::Rebalanced, m)
            }
            Err(why) => (RebalanceOutcome::Refused, why),
        };
        let kind = match outcome {
            RebalanceOutcome::Rebalanced => EventType::Normal,
            RebalanceOutcome::Refused => EventType::Warning,
        };
        info!(rsp = %rsp.name_any(), outcome = outcome.as_str(), %message, "one-off rebalance");
        self.publish(rsp, kind, outcome.as_str(), message.clone())
            .await;
        RebalanceStatus {
            request,
            outcome,
            message,
        }
    }

    /// Records the division and its reasons in the RSP's status, when they changed.
    async fn write_status(
        &self,
        key: &Key,
        rsp: &ReplicaSchedulingPreference,
        clusters: Vec<flotilla_api::scheduling::ClusterDivision>,
        rebalance: Option<RebalanceStatus>,
    ) {
        let status = flotilla_api::scheduling::ReplicaSchedulingPreferenceStatus {
            observed_generation: rsp.metadata.generation,
            clusters,
            rebalance,
        };
        if rsp.status.as_ref() == Some(&status) {
            return;
        }
        let api: Api<ReplicaSchedulingPreference> = Api::namespaced(self.host.clone(), &key.0);
        let patch = json!({"status": status});
        let params = PatchParams {
            field_manager: Some(SCHEDULER_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        if let Err(e) = api
            .patch_status(&key.1, &params, &Patch::Merge(&patch))
            .await
        {
            warn!(rsp = ?key, error = %e, "writing the RSP status failed");
        }
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
        self.publish(rsp, EventType::Warning, reason, note).await;
    }

    async fn publish(
        &self,
        rsp: &ReplicaSchedulingPreference,
        kind: EventType,
        reason: &str,
        note: String,
    ) {
        let reference = rsp.object_ref(&());
        crate::events::publish(&self.recorder, &reference, kind, reason, "Schedule", note).await;
    }
}

/// The target's workload as capacity reads it: its pods' selector and pod template.
struct Workload {
    selector: LabelSelector,
    pod: PodSpec,
}

impl Workload {
    /// From a FederatedDeployment's or FederatedReplicaSet's template; `None` when it has
    /// no selector or pod template that can be read.
    fn of(spec: &FederatedSpec) -> Option<Workload> {
        let t = spec.template.get("spec")?;
        Some(Workload {
            selector: serde_json::from_value(t.get("selector")?.clone()).ok()?,
            pod: serde_json::from_value(t.get("template")?.get("spec")?.clone()).ok()?,
        })
    }
}

/// What capacity tells the planner: kubefed's estimates and, with
/// `weightPreference: AvailableReplicas`, the replicas that fit each cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CapacityInputs {
    /// Capacity estimate per cluster (replicas it can run).
    pub estimates: BTreeMap<String, i64>,
    /// Replicas of the template that fit each cluster.
    pub available: Option<BTreeMap<String, i64>>,
    /// A one-off rebalance: the division ignores where replicas run now, as if none ran
    /// yet (`rebalance: false` otherwise keeps them).
    pub from_scratch: bool,
}

/// What the scheduler writes into an RSP's target.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// Replicas per cluster, overflow and reasons.
    pub plan: planner::Plan,
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
    capacity: &CapacityInputs,
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
    let current = if capacity.from_scratch {
        BTreeMap::new()
    } else {
        current_replicas(spec)
    };
    let plan = planner::plan(&planner::PlanInput {
        total_replicas: i64::from(rsp.total_replicas),
        preferences: &rsp.clusters,
        clusters: &candidates,
        current: &current,
        rebalance: rsp.rebalance,
        key: &format!("{}/{}", key.0, key.1),
        capacity: &capacity.estimates,
        available: capacity.available.as_ref(),
    });
    let (placement, overrides) = apply_plan(spec, &plan.written(), composed);
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
    fn a_one_off_rebalance_divides_as_if_nothing_ran_yet_and_keeps_each_minimum() {
        let clusters = [cluster("a", true, "eu"), cluster("b", true, "eu")];
        let spec: FederatedSpec = serde_json::from_value(json!({
            "template": {},
            "overrides": [
                {"clusterName": "a", "clusterOverrides": [{"path": "/spec/replicas", "value": 9}]},
                {"clusterName": "b", "clusterOverrides": [{"path": "/spec/replicas", "value": 1}]}
            ]
        }))
        .expect("valid spec");
        let rsp: ReplicaSchedulingPreferenceSpec = serde_json::from_value(json!({
            "targetKind": "FederatedDeployment", "totalReplicas": 10,
            "clusters": {"a": {"weight": 1}, "b": {"weight": 1, "minReplicas": 6}}
        }))
        .expect("valid rsp");
        let key = ("demo".to_string(), "web".to_string());
        let run = |from_scratch| {
            let capacity = CapacityInputs {
                from_scratch,
                ..CapacityInputs::default()
            };
            schedule(
                &rsp,
                &spec,
                &FederatedStatus::default(),
                &clusters,
                &key,
                &capacity,
            )
            .expect("valid")
            .expect("scheduled")
            .plan
            .written()
        };
        let kept = run(false);
        assert_eq!((kept["a"], kept["b"]), (4, 6), "minimum first, then kept");
        let fresh = run(true);
        assert_eq!(fresh["b"], 8, "minimum 6, then half of the other 4");
        assert_eq!(fresh["a"], 2);
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
