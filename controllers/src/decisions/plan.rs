//! What the PlacementDecisions of a scheduled federated object should say (KEP-5313): one
//! object per 100 chosen clusters, each cluster a reference to its ClusterProfile, named
//! and labelled so that a consumer finds every slice of one decision. Pure functions.

use std::collections::BTreeMap;

use flotilla_api::{
    federated::PlacementStatus,
    hash::bounded,
    placement_decision::{
        ClusterDecision, DECISION_INDEX_LABEL, DECISION_KEY_LABEL, MAX_DECISIONS,
        PLACEMENT_KEY_LABEL, PlacementDecision, ProfileRef, SCHEDULER_NAME,
    },
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// Label selecting the PlacementDecisions Flotilla publishes.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY: &str = "flotilla";

/// The federated object a decision is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    /// `types.kubefed.io/v1beta1`.
    pub api_version: String,
    /// `FederatedDeployment`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its uid (the decisions' owner).
    pub uid: String,
    /// Where its decisions live: its namespace, or the control-plane namespace for a
    /// cluster-scoped object.
    pub namespace: String,
}

impl Subject {
    /// Name of the first slice; slice `i > 0` is `<base>-<i>`.
    pub fn base_name(&self) -> String {
        bounded(&format!("{}-{}", self.name, self.kind.to_lowercase()), 240)
    }

    /// Name of slice `index`.
    pub fn slice_name(&self, index: usize) -> String {
        match index {
            0 => self.base_name(),
            i => format!("{}-{i}", self.base_name()),
        }
    }

    /// The `placement-key` label: which workload the decision places (a label value).
    pub fn placement_key(&self) -> String {
        bounded(&format!("{}.{}", self.kind.to_lowercase(), self.name), 63)
    }
}

/// The decisions for `subject` placed by `placement` (the chosen clusters, in order), with
/// references to the ClusterProfiles in `profile_namespace`.
pub fn desired(
    subject: &Subject,
    placement: &PlacementStatus,
    profile_namespace: &str,
) -> Vec<PlacementDecision> {
    let replacing: BTreeMap<&str, &str> = placement
        .moves
        .iter()
        .filter_map(|m| Some((m.replacement.as_deref()?, m.cluster.as_str())))
        .collect();
    let decisions: Vec<ClusterDecision> = placement
        .clusters
        .iter()
        .map(|c| ClusterDecision {
            cluster_profile_ref: ProfileRef::profile(profile_namespace, &c.name),
            reason: Some(match replacing.get(c.name.as_str()) {
                Some(left) => format!("replaces cluster {left}"),
                None => "meets the placement's constraints".to_string(),
            }),
        })
        .collect();
    let chunks: Vec<&[ClusterDecision]> = if decisions.is_empty() {
        vec![&[]]
    } else {
        decisions.chunks(MAX_DECISIONS).collect()
    };
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, chunk)| slice(subject, i, chunk.to_vec()))
        .collect()
}

fn slice(subject: &Subject, index: usize, decisions: Vec<ClusterDecision>) -> PlacementDecision {
    let labels = [
        (MANAGED_BY_LABEL, MANAGED_BY.to_string()),
        (DECISION_KEY_LABEL, subject.placement_key()),
        (DECISION_INDEX_LABEL, index.to_string()),
        (PLACEMENT_KEY_LABEL, subject.placement_key()),
    ];
    PlacementDecision {
        metadata: ObjectMeta {
            name: Some(subject.slice_name(index)),
            namespace: Some(subject.namespace.clone()),
            labels: Some(
                labels
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            ),
            owner_references: Some(vec![OwnerReference {
                api_version: subject.api_version.clone(),
                kind: subject.kind.clone(),
                name: subject.name.clone(),
                uid: subject.uid.clone(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        decisions,
        scheduler_name: Some(SCHEDULER_NAME.to_string()),
    }
}

/// One write.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Create or update this slice.
    Apply(Box<PlacementDecision>),
    /// Delete the slice of this name.
    Delete(String),
}

/// The writes that turn `current` (the subject's slices as cached, by index) into `desired`:
/// nothing when they already say the same.
pub fn plan(desired: &[PlacementDecision], current: &[Option<&PlacementDecision>]) -> Vec<Op> {
    let mut ops = Vec::new();
    for (i, want) in desired.iter().enumerate() {
        let fresh = current
            .get(i)
            .copied()
            .flatten()
            .is_some_and(|have| same(want, have));
        if !fresh {
            ops.push(Op::Apply(Box::new(want.clone())));
        }
    }
    for have in current.iter().skip(desired.len()).flatten() {
        ops.push(Op::Delete(have.metadata.name.clone().unwrap_or_default()));
    }
    ops
}

/// Whether `have` already says what `want` says (its other labels and owners may differ).
fn same(want: &PlacementDecision, have: &PlacementDecision) -> bool {
    let labels = want
        .metadata
        .labels
        .iter()
        .flatten()
        .all(|(k, v)| have.metadata.labels.as_ref().and_then(|l| l.get(k)) == Some(v));
    let owners = want.metadata.owner_references.iter().flatten().all(|o| {
        have.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|h| h == o)
    });
    labels
        && owners
        && want.decisions == have.decisions
        && want.scheduler_name == have.scheduler_name
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
