//! Workload status summed over clusters: for Deployments, ReplicaSets, StatefulSets,
//! DaemonSets and Jobs whose status is collected, `status.aggregated` on the federated
//! object says how many clusters run the workload ready (`clusters: "2/2"`) and how many
//! of the desired pods are ready (`ready: "9/9"`; Jobs: `completions: "1/2"`), with the
//! member counters summed. The printer columns of those federated types read these
//! strings. Which clusters are ready and the pod figures come from the type's health
//! rules ([`crate::health`]); any type with rules is summed the same way ([`aggregate`]).
//! The shape of `status.aggregated` and which kinds are workloads are
//! `flotilla_api::workload`'s. Pure: the sync controller gathers the per-cluster inputs.

use serde_json::{Value, json};

use crate::health::{TypeHealth, evaluate};
use flotilla_api::workload::{AggregatedStatus, ClusterHealth, Counts, WorkloadKind};

/// What is known of the workload in one cluster it is placed on.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClusterWorkload<'a> {
    /// The cluster's name.
    pub cluster: &'a str,
    /// The object is propagated there (no failure, not waiting).
    pub propagated: bool,
    /// The member object's `spec` (when unknown, the spec Flotilla applies there).
    pub spec: Option<&'a Value>,
    /// The member object's `metadata.generation`, when known.
    pub generation: Option<i64>,
    /// The member object's `status`, when collected.
    pub status: Option<&'a Value>,
}

impl ClusterWorkload<'_> {
    /// The member object as far as it is known: its generation, spec and status.
    fn object(&self) -> Value {
        let mut obj = serde_json::Map::new();
        if let Some(generation) = self.generation {
            obj.insert("metadata".into(), json!({ "generation": generation }));
        }
        if let Some(spec) = self.spec {
            obj.insert("spec".into(), spec.clone());
        }
        if let Some(status) = self.status {
            obj.insert("status".into(), status.clone());
        }
        Value::Object(obj)
    }
}

/// Sums a workload's status over the clusters it is placed on, judging each cluster's
/// object by its type's health rules ([`crate::health`]). A cluster that is not
/// propagated or not healthy counts its desired replicas with none ready, so a member that
/// went down shows as `clusters: 1/2` and fewer ready pods than desired.
pub fn aggregate(health: &TypeHealth, clusters: &[ClusterWorkload<'_>]) -> AggregatedStatus {
    let mut counts = Counts::default();
    let (mut ready, mut desired, mut ready_clusters) = (0, 0, 0);
    let mut notes = Vec::new();
    for c in clusters {
        let h = evaluate(health, &c.object());
        if let (Some(kind), Some(status)) = (health.workload, c.status) {
            counts.add(&Counts::read(kind, Some(status)));
        }
        if let Some(r) = h.replicas {
            ready += if c.status.is_some() { r.ready } else { 0 };
            desired += r.desired;
        }
        let observed = c.status.is_some() || !health.has_rules();
        ready_clusters += i64::from(c.propagated && observed && h.is_healthy());
        if c.status.is_some()
            && let Some(message) = h.message
        {
            notes.push(ClusterHealth {
                cluster: c.cluster.to_string(),
                state: h.state.as_str().into(),
                message,
            });
        }
    }
    let pods = health.has_replicas().then(|| format!("{ready}/{desired}"));
    let (ready, completions) = match health.workload {
        Some(WorkloadKind::Job) => (None, pods),
        _ => (pods, None),
    };
    AggregatedStatus {
        clusters: format!("{ready_clusters}/{}", clusters.len()),
        ready,
        completions,
        health: notes,
        counts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::core::ApiResource;
    use serde_json::json;
    use std::sync::Arc;

    fn rules(kind: WorkloadKind) -> Arc<TypeHealth> {
        let (group, kind) = match kind {
            WorkloadKind::Job => ("batch", format!("{kind:?}")),
            _ => ("apps", format!("{kind:?}")),
        };
        let target = ApiResource {
            group: group.into(),
            kind,
            ..ApiResource::default()
        };
        TypeHealth::of(&target, None)
    }

    fn deployment<'a>(spec: &'a Value, status: Option<&'a Value>) -> ClusterWorkload<'a> {
        ClusterWorkload {
            cluster: "m1",
            propagated: true,
            spec: Some(spec),
            generation: Some(1),
            status,
        }
    }

    #[test]
    fn workload_kinds_are_recognised_by_group_and_kind() {
        let ar = |group: &str, kind: &str| ApiResource {
            group: group.into(),
            kind: kind.into(),
            ..ApiResource::default()
        };
        assert_eq!(
            WorkloadKind::of(&ar("apps", "Deployment")),
            Some(WorkloadKind::Deployment)
        );
        assert_eq!(
            WorkloadKind::of(&ar("batch", "Job")),
            Some(WorkloadKind::Job)
        );
        assert_eq!(WorkloadKind::of(&ar("", "ConfigMap")), None);
        assert_eq!(WorkloadKind::of(&ar("example.com", "Deployment")), None);
    }

    #[test]
    fn ready_deployments_in_every_cluster_read_all_ready() {
        let spec = json!({"replicas": 3});
        let status = json!({"observedGeneration": 1, "replicas": 3, "readyReplicas": 3,
                            "availableReplicas": 3, "updatedReplicas": 3});
        let a = aggregate(
            &rules(WorkloadKind::Deployment),
            &[
                deployment(&spec, Some(&status)),
                deployment(&spec, Some(&status)),
            ],
        );
        assert_eq!(a.clusters, "2/2");
        assert_eq!(a.ready.as_deref(), Some("6/6"));
        assert_eq!(a.counts.ready_replicas, Some(6));
        assert_eq!(a.counts.available_replicas, Some(6));
        assert_eq!(a.counts.active, None);
    }

    #[test]
    fn a_cluster_without_status_counts_its_desired_pods_as_not_ready() {
        let spec = json!({"replicas": 3});
        let status = json!({"observedGeneration": 1, "replicas": 3, "readyReplicas": 3,
                            "availableReplicas": 3, "updatedReplicas": 3});
        let down = ClusterWorkload {
            propagated: false,
            spec: Some(&spec),
            ..ClusterWorkload::default()
        };
        let a = aggregate(
            &rules(WorkloadKind::Deployment),
            &[deployment(&spec, Some(&status)), down],
        );
        assert_eq!(a.clusters, "1/2");
        assert_eq!(a.ready.as_deref(), Some("3/6"));
    }

    #[test]
    fn unready_pods_keep_the_cluster_and_the_figure_below_desired() {
        let spec = json!({"replicas": 3});
        let status = json!({"observedGeneration": 1, "replicas": 3, "readyReplicas": 1,
                            "updatedReplicas": 3});
        let a = aggregate(
            &rules(WorkloadKind::Deployment),
            &[deployment(&spec, Some(&status))],
        );
        assert_eq!(a.clusters, "0/1");
        assert_eq!(a.ready.as_deref(), Some("1/3"));
    }

    #[test]
    fn a_status_of_an_older_generation_is_not_ready() {
        let spec = json!({"replicas": 1});
        let status = json!({"observedGeneration": 1, "readyReplicas": 1, "updatedReplicas": 1});
        let c = ClusterWorkload {
            generation: Some(2),
            ..deployment(&spec, Some(&status))
        };
        assert_eq!(
            aggregate(&rules(WorkloadKind::Deployment), &[c]).clusters,
            "0/1"
        );
    }

    #[test]
    fn a_deployment_without_replicas_wants_one() {
        let spec = json!({});
        assert_eq!(
            aggregate(&rules(WorkloadKind::Deployment), &[deployment(&spec, None)])
                .ready
                .as_deref(),
            Some("0/1")
        );
    }

    #[test]
    fn all_ready_needs_every_cluster_and_every_pod() {
        let a = |clusters: &str, ready: &str| AggregatedStatus {
            clusters: clusters.into(),
            ready: Some(ready.into()),
            ..AggregatedStatus::default()
        };
        assert!(a("2/2", "9/9").all_ready());
        assert!(!a("1/2", "9/9").all_ready());
        assert!(!a("2/2", "8/9").all_ready());
        assert!(!a("0/0", "0/0").all_ready());
    }

    #[test]
    fn daemon_sets_read_their_scheduled_counters() {
        let status = json!({"desiredNumberScheduled": 3, "currentNumberScheduled": 3,
                            "numberReady": 2, "numberAvailable": 2, "updatedNumberScheduled": 3});
        let c = ClusterWorkload {
            propagated: true,
            status: Some(&status),
            ..ClusterWorkload::default()
        };
        let a = aggregate(&rules(WorkloadKind::DaemonSet), &[c]);
        assert_eq!(a.ready.as_deref(), Some("2/3"));
        assert_eq!(a.counts.number_ready, Some(2));
        assert_eq!(a.counts.desired_number_scheduled, Some(3));
        assert_eq!(a.clusters, "0/1");
    }

    #[test]
    fn jobs_report_completions_and_their_counters() {
        let spec = json!({"completions": 2});
        let done = json!({"succeeded": 2});
        let running = json!({"active": 1, "succeeded": 1, "failed": 1});
        let c = |status| ClusterWorkload {
            propagated: true,
            spec: Some(&spec),
            status: Some(status),
            ..ClusterWorkload::default()
        };
        let a = aggregate(&rules(WorkloadKind::Job), &[c(&done), c(&running)]);
        assert_eq!(a.completions.as_deref(), Some("3/4"));
        assert_eq!(a.ready, None);
        assert_eq!(a.clusters, "1/2");
        assert_eq!((a.counts.active, a.counts.failed), (Some(1), Some(1)));
    }

    #[test]
    fn the_aggregated_status_serializes_with_kubernetes_field_names() {
        let spec = json!({"replicas": 1});
        let status = json!({"readyReplicas": 1, "updatedReplicas": 1});
        let a = aggregate(
            &rules(WorkloadKind::ReplicaSet),
            &[deployment(&spec, Some(&status))],
        );
        let v = serde_json::to_value(&a).expect("serializes");
        assert_eq!(v["clusters"], "1/1");
        assert_eq!(v["ready"], "1/1");
        assert_eq!(v["readyReplicas"], 1);
        assert!(v.get("completions").is_none());
        assert_eq!(
            serde_json::from_value::<AggregatedStatus>(v).expect("parses"),
            a
        );
    }
}
