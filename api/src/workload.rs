//! `status.aggregated` of a federated workload: the shape the printer columns of the
//! Deployment, ReplicaSet, StatefulSet, DaemonSet and Job federated types read
//! (`clusters: "2/2"`, `ready: "9/9"`; Jobs: `completions: "1/2"`), the members' status
//! counters it sums, and which target types are such workloads ([`WorkloadKind`]).
//! Summing the clusters under the type's health rules is `flotilla_core::workload`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::ApiResource;

/// A workload kind whose status Flotilla sums over clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    /// apps/Deployment
    Deployment,
    /// apps/ReplicaSet
    ReplicaSet,
    /// apps/StatefulSet
    StatefulSet,
    /// apps/DaemonSet
    DaemonSet,
    /// batch/Job
    Job,
}

impl WorkloadKind {
    /// The workload kind of a target type, `None` for every other type.
    pub fn of(target: &ApiResource) -> Option<WorkloadKind> {
        match (target.group.as_str(), target.kind.as_str()) {
            ("apps", "Deployment") => Some(WorkloadKind::Deployment),
            ("apps", "ReplicaSet") => Some(WorkloadKind::ReplicaSet),
            ("apps", "StatefulSet") => Some(WorkloadKind::StatefulSet),
            ("apps", "DaemonSet") => Some(WorkloadKind::DaemonSet),
            ("batch", "Job") => Some(WorkloadKind::Job),
            _ => None,
        }
    }

    /// The printer column of the pod figure: (name, JSONPath).
    pub fn pods_column(self) -> (&'static str, &'static str) {
        match self {
            WorkloadKind::Job => ("Completions", ".status.aggregated.completions"),
            _ => ("Ready", ".status.aggregated.ready"),
        }
    }
}

/// `status.aggregated` of a federated workload.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AggregatedStatus {
    /// Clusters where the workload is rolled out and ready (Jobs: complete), of the
    /// clusters it is placed on, e.g. `2/2`.
    pub clusters: String,
    /// Ready pods of the desired pods over all clusters, e.g. `9/9` (not for Jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// Succeeded pods of the desired completions over all clusters (Jobs only), e.g. `1/2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<String>,
    /// Clusters whose object is not healthy under its type's health rules, and why (or
    /// whose rules could not be used).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health: Vec<ClusterHealth>,
    /// The members' status counters, summed.
    #[serde(flatten)]
    pub counts: Counts,
}

/// One cluster's health, when it is not plainly healthy.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterHealth {
    /// The cluster.
    pub cluster: String,
    /// `Healthy`, `Progressing` or `Failed`.
    pub state: String,
    /// Why, in the words of the type's health rules.
    pub message: String,
}

/// Status counters of a workload, named as in the members' own status; each kind has its
/// own (a Deployment has no `active`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_replicas: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_number_scheduled: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_number_scheduled: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number_ready: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number_available: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_number_scheduled: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i64>,
}

impl AggregatedStatus {
    /// Every cluster it is placed on (at least one) runs it ready, with all desired pods
    /// ready (Jobs: complete).
    pub fn all_ready(&self) -> bool {
        let full = |figure: &str| {
            figure
                .split_once('/')
                .and_then(|(a, b)| Some((a.parse::<i64>().ok()?, b.parse::<i64>().ok()?)))
                .is_some_and(|(a, b)| a >= b)
        };
        let placed = self
            .clusters
            .split_once('/')
            .is_some_and(|(_, total)| total != "0");
        let pods = self.ready.as_ref().or(self.completions.as_ref());
        placed && full(&self.clusters) && pods.is_none_or(|p| full(p))
    }
}

impl Counts {
    /// The counters of `kind` read from a member status (absent counters read as 0).
    pub fn read(kind: WorkloadKind, status: Option<&Value>) -> Counts {
        let n = |field: &str| {
            Some(
                status
                    .and_then(|s| s.get(field))
                    .and_then(Value::as_i64)
                    .unwrap_or(0),
            )
        };
        match kind {
            WorkloadKind::Deployment => Counts {
                replicas: n("replicas"),
                ready_replicas: n("readyReplicas"),
                available_replicas: n("availableReplicas"),
                updated_replicas: n("updatedReplicas"),
                ..Counts::default()
            },
            WorkloadKind::ReplicaSet => Counts {
                replicas: n("replicas"),
                ready_replicas: n("readyReplicas"),
                available_replicas: n("availableReplicas"),
                ..Counts::default()
            },
            WorkloadKind::StatefulSet => Counts {
                replicas: n("replicas"),
                ready_replicas: n("readyReplicas"),
                current_replicas: n("currentReplicas"),
                updated_replicas: n("updatedReplicas"),
                ..Counts::default()
            },
            WorkloadKind::DaemonSet => Counts {
                desired_number_scheduled: n("desiredNumberScheduled"),
                current_number_scheduled: n("currentNumberScheduled"),
                number_ready: n("numberReady"),
                number_available: n("numberAvailable"),
                updated_number_scheduled: n("updatedNumberScheduled"),
                ..Counts::default()
            },
            WorkloadKind::Job => Counts {
                active: n("active"),
                succeeded: n("succeeded"),
                failed: n("failed"),
                ..Counts::default()
            },
        }
    }

    /// Adds `other`'s counters to these (a counter absent from both stays absent).
    pub fn add(&mut self, other: &Counts) {
        let sum = |a: &mut Option<i64>, b: Option<i64>| {
            if let Some(b) = b {
                *a = Some(a.unwrap_or(0) + b);
            }
        };
        sum(&mut self.replicas, other.replicas);
        sum(&mut self.ready_replicas, other.ready_replicas);
        sum(&mut self.available_replicas, other.available_replicas);
        sum(&mut self.updated_replicas, other.updated_replicas);
        sum(&mut self.current_replicas, other.current_replicas);
        sum(
            &mut self.desired_number_scheduled,
            other.desired_number_scheduled,
        );
        sum(
            &mut self.current_number_scheduled,
            other.current_number_scheduled,
        );
        sum(&mut self.number_ready, other.number_ready);
        sum(&mut self.number_available, other.number_available);
        sum(
            &mut self.updated_number_scheduled,
            other.updated_number_scheduled,
        );
        sum(&mut self.active, other.active);
        sum(&mut self.succeeded, other.succeeded);
        sum(&mut self.failed, other.failed);
    }
}
