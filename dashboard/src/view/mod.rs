//! View models: pure functions from a [`State`](super::state::State) to what a page shows
//! (rows, cells, states with their words), shared by the HTML and the JSON answers. Nothing
//! here knows HTML or HTTP.

pub mod object;
pub mod overview;
pub mod policies;
pub mod replicas;

use flotilla_api::{ClusterReason, KubeFedCluster, core::condition};
use serde::Serialize;

use super::state::FedObject;

/// A member cluster's health, from its KubeFedCluster conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Health {
    /// Ready=True.
    Ready,
    /// Offline=True: unreachable.
    Offline,
    /// ConfigMalformed=True: no client could be built.
    ConfigMalformed,
    /// Ready=False (reachable but not healthy).
    NotReady,
    /// Not probed yet.
    Unknown,
}

impl Health {
    /// The word shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Ready => "Ready",
            Health::Offline => "Offline",
            Health::ConfigMalformed => "ConfigMalformed",
            Health::NotReady => "NotReady",
            Health::Unknown => "Unknown",
        }
    }

    /// Whether it is a problem.
    pub fn is_problem(self) -> bool {
        self != Health::Ready
    }

    /// The health of a KubeFedCluster (a malformed config or being offline says more than
    /// Ready=False, so they win).
    pub fn of(cluster: &KubeFedCluster) -> Health {
        let Some(status) = &cluster.status else {
            return Health::Unknown;
        };
        let is_true = |t: &str| status.condition(t).is_some_and(|c| c.status == "True");
        if is_true(condition::CONFIG_MALFORMED) {
            Health::ConfigMalformed
        } else if is_true(condition::OFFLINE) {
            Health::Offline
        } else if is_true(condition::READY) {
            Health::Ready
        } else if status.condition(condition::READY).is_some() {
            Health::NotReady
        } else {
            Health::Unknown
        }
    }
}

/// An object's state in one cluster (a grid cell).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum Cell {
    /// Not placed in the cluster.
    NotPlaced,
    /// Propagated as the current generation asks.
    Propagated,
    /// On its way: not reconciled yet, or being removed.
    Pending {
        /// Why (empty when the generation is not reconciled yet).
        reason: String,
    },
    /// Failing there.
    Failing {
        /// The kubefed reason (`ApplyOverridesFailed`).
        reason: String,
        /// The error behind it.
        message: String,
    },
}

impl Cell {
    /// The cell of `object` in `cluster`.
    pub fn of(object: &FedObject, cluster: &str) -> Cell {
        let Some(entry) = object.status.clusters.iter().find(|c| c.name == cluster) else {
            return Cell::NotPlaced;
        };
        if entry.status.is_empty() {
            return if object.stale() {
                Cell::Pending {
                    reason: String::new(),
                }
            } else {
                Cell::Propagated
            };
        }
        if entry.status == ClusterReason::WaitingForRemoval.as_str() {
            return Cell::Pending {
                reason: entry.status.clone(),
            };
        }
        Cell::Failing {
            reason: entry.status.clone(),
            message: entry.message.clone(),
        }
    }

    /// The words shown (readable without colour): `Propagated`, `Pending`, the reason.
    pub fn label(&self) -> &str {
        match self {
            Cell::NotPlaced => "Not placed",
            Cell::Propagated => "Propagated",
            Cell::Pending { reason } if reason.is_empty() => "Pending",
            Cell::Pending { reason } | Cell::Failing { reason, .. } => reason,
        }
    }

    /// The class of the cell's state, for styling and icons.
    pub fn class(&self) -> &'static str {
        match self {
            Cell::NotPlaced => "none",
            Cell::Propagated => "ok",
            Cell::Pending { .. } => "pending",
            Cell::Failing { .. } => "fail",
        }
    }
}

/// A federated object's overall state (its `Propagation` condition).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Overall {
    /// Propagation=True for the current generation.
    Propagated,
    /// Not reconciled yet, or failing for a reason that may clear.
    Pending,
    /// Propagation=False with a failing cluster or placement.
    Failing,
}

impl Overall {
    /// The overall state of `object`.
    pub fn of(object: &FedObject) -> Overall {
        if object.spec.is_err() {
            return Overall::Failing;
        }
        if object.stale() {
            return Overall::Pending;
        }
        match object.status.propagation() {
            Some(c) if c.status == "True" => Overall::Propagated,
            Some(_) => Overall::Failing,
            None => Overall::Pending,
        }
    }

    /// The word shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Overall::Propagated => "Propagated",
            Overall::Pending => "Pending",
            Overall::Failing => "Failing",
        }
    }

    /// The class of the state, for styling and icons.
    pub fn class(self) -> &'static str {
        match self {
            Overall::Propagated => "ok",
            Overall::Pending => "pending",
            Overall::Failing => "fail",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::{
        FederatedStatus, KubeFedClusterSpec,
        core::{ClusterCondition, KubeFedClusterStatus},
    };
    use serde_json::json;

    pub(crate) fn object(generation: i64, status: serde_json::Value) -> FedObject {
        let status: FederatedStatus = serde_json::from_value(status).expect("status");
        FedObject {
            type_name: "configmaps".into(),
            generation,
            spec: Ok(serde_json::from_value(json!({"template": {}})).expect("spec")),
            status,
            policy: None,
        }
    }

    fn kfc(conditions: &[(&str, &str)]) -> KubeFedCluster {
        let mut c = KubeFedCluster::new("m1", KubeFedClusterSpec::default());
        c.status = Some(KubeFedClusterStatus {
            conditions: conditions
                .iter()
                .map(|(t, s)| ClusterCondition {
                    type_: (*t).into(),
                    status: (*s).into(),
                    ..ClusterCondition::default()
                })
                .collect(),
            ..KubeFedClusterStatus::default()
        });
        c
    }

    #[test]
    fn cluster_health_reads_the_conditions_most_telling_first() {
        assert_eq!(Health::of(&kfc(&[("Ready", "True")])), Health::Ready);
        assert_eq!(
            Health::of(&kfc(&[("Ready", "False"), ("Offline", "True")])),
            Health::Offline
        );
        assert_eq!(
            Health::of(&kfc(&[("Ready", "False"), ("ConfigMalformed", "True")])),
            Health::ConfigMalformed
        );
        assert_eq!(Health::of(&kfc(&[("Ready", "False")])), Health::NotReady);
        assert_eq!(Health::of(&kfc(&[])), Health::Unknown);
        let mut unprobed = kfc(&[]);
        unprobed.status = None;
        assert_eq!(Health::of(&unprobed), Health::Unknown);
    }

    #[test]
    fn a_cell_says_propagated_pending_failing_or_not_placed() {
        let o = object(
            1,
            json!({"observedGeneration": 1,
                   "conditions": [{"type": "Propagation", "status": "False", "reason": "CheckClusters"}],
                   "clusters": [{"name": "m1"},
                                {"name": "m2", "status": "ApplyOverridesFailed", "message": "bad path"},
                                {"name": "m3", "status": "WaitingForRemoval"}]}),
        );
        assert_eq!(Cell::of(&o, "m1"), Cell::Propagated);
        assert_eq!(
            Cell::of(&o, "m2"),
            Cell::Failing {
                reason: "ApplyOverridesFailed".into(),
                message: "bad path".into()
            }
        );
        assert_eq!(Cell::of(&o, "m2").label(), "ApplyOverridesFailed");
        assert_eq!(Cell::of(&o, "m3").class(), "pending");
        assert_eq!(Cell::of(&o, "m4"), Cell::NotPlaced);
        assert_eq!(Overall::of(&o), Overall::Failing);
    }

    #[test]
    fn a_new_generation_is_pending_until_reconciled() {
        let o = object(
            2,
            json!({"observedGeneration": 1,
                   "conditions": [{"type": "Propagation", "status": "True"}],
                   "clusters": [{"name": "m1"}]}),
        );
        assert_eq!(Cell::of(&o, "m1").label(), "Pending");
        assert_eq!(Overall::of(&o), Overall::Pending);
    }
}
