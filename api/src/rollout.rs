//! Progressive rollout across clusters (Flotilla extension `spec.rollout` of every
//! Federated&lt;Kind&gt;): the API types of `spec.rollout` and `status.rollout`, the
//! `Rollout` condition's type, the revision annotation on member objects and the reasons a
//! rollout reports. What they mean — the wave planner, the canary by replica share,
//! rollback, the checks a schema cannot make — is `flotilla_core::rollout`; nothing here
//! decides anything.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::selector::LabelSelector;

/// Annotation on member objects written under a progressive rollout: the revision (hash of
/// the template and overrides) the object was rendered from, so a cluster the rollout has
/// not reached keeps being rendered from that revision, even after a restart.
pub const REVISION_ANNOTATION: &str = "flotilla.io/rollout-revision";

/// The `Rollout` condition's type.
pub const ROLLOUT_CONDITION: &str = "Rollout";

/// Default `progressDeadlineSeconds`.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i64 = 600;

/// `spec.rollout`: how a template change reaches the placed clusters.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// `All` (the default: every cluster at once, as kubefed) or `Progressive`.
    #[serde(default)]
    pub strategy: RolloutStrategy,
    /// Clusters updated at once: a number, or a percentage of the placed clusters such as
    /// `"25%"` (rounded down, at least 1). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<MaxConcurrency>,
    /// Ordered waves by KubeFedCluster labels: a cluster belongs to the first group whose
    /// selector matches it; clusters in no group go last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<RolloutGroup>,
    /// A cluster must stay healthy this long before the next cluster or wave (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_success_seconds: Option<i64>,
    /// A cluster not healthy this long after its update started counts as failed
    /// (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i64>,
    /// Failed clusters tolerated before the rollout pauses (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<i64>,
    /// Set by a user to stop the rollout where it is: no further cluster is updated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// What a stopped rollout does with the clusters that failed: `Halt` (the default:
    /// they keep the new revision) or `Rollback` (they go back to the last revision that
    /// reached every cluster).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub on_failure: OnFailure,
    /// With `strategy: Canary`: the steps of the canary by replica share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanarySpec>,
}

/// `spec.rollout.canary`: the new template runs as a second Deployment `<name>-canary` per
/// cluster on a growing share of the replicas (see docs/rollout.md).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanarySpec {
    /// Percentages of the total replicas, increasing, ending at 100 (the promotion).
    #[serde(default)]
    pub steps: Vec<u32>,
    /// Every cluster's canary healthy this long before the next step (default: the
    /// rollout's `minSuccessSeconds`, else 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_success_seconds: Option<i64>,
}

/// What a rollout stopped on failures does with the failed clusters.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnFailure {
    /// They keep the new revision; nothing else moves until the template changes.
    #[default]
    Halt,
    /// They go back to the last revision that reached every cluster
    /// (`status.rollout.stableRevision`, rendered from its ControllerRevision).
    Rollback,
}

impl RolloutSpec {
    /// Whether the rollout is progressive (otherwise every cluster is updated at once).
    pub fn is_progressive(&self) -> bool {
        self.strategy == RolloutStrategy::Progressive
    }

    /// Whether the rollout is a canary by replica share.
    pub fn is_canary(&self) -> bool {
        self.strategy == RolloutStrategy::Canary
    }

    /// Clusters that may be updating at once among `placed` clusters (at least 1).
    pub fn concurrency(&self, placed: usize) -> usize {
        match &self.max_concurrency {
            None => 1,
            Some(MaxConcurrency::Count(n)) => usize::try_from(*n).unwrap_or(0).max(1),
            Some(MaxConcurrency::Percent(p)) => {
                let pct = p
                    .trim()
                    .strip_suffix('%')
                    .and_then(|n| n.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                (placed * pct / 100).max(1)
            }
        }
    }

    /// Checks the fields a schema cannot: the message says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(MaxConcurrency::Percent(p)) = &self.max_concurrency {
            let ok = p
                .trim()
                .strip_suffix('%')
                .and_then(|n| n.trim().parse::<u32>().ok())
                .is_some_and(|n| (1..=100).contains(&n));
            if !ok {
                return Err(format!(
                    "spec.rollout.maxConcurrency {p:?} is neither a number nor a percentage between 1% and 100%"
                ));
            }
        }
        for (field, v) in [
            ("minSuccessSeconds", self.min_success_seconds),
            ("progressDeadlineSeconds", self.progress_deadline_seconds),
            ("maxFailures", self.max_failures),
        ] {
            if v.is_some_and(|v| v < 0) {
                return Err(format!("spec.rollout.{field} must not be negative"));
            }
        }
        if self.is_canary() {
            let steps = self.canary.as_ref().map(|c| c.steps.as_slice());
            validate_steps(steps.unwrap_or_default())?;
            let min = self.canary.as_ref().and_then(|c| c.min_success_seconds);
            if min.is_some_and(|v| v < 0) {
                return Err("spec.rollout.canary.minSuccessSeconds must not be negative".into());
            }
        }
        for (i, g) in self.groups.iter().enumerate() {
            crate::selector::matches_selector(&g.selector, &Default::default())
                .map_err(|e| format!("spec.rollout.groups[{i}].selector: {e}"))?;
        }
        Ok(())
    }
}

/// How a template change reaches the clusters.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RolloutStrategy {
    /// Every placed cluster at once (kubefed's behaviour).
    #[default]
    All,
    /// In waves, a few clusters at a time, gated on health.
    Progressive,
    /// A canary by replica share (`spec.rollout.canary`): Deployments with replicas.
    Canary,
}

/// A count of clusters or a percentage of the placed clusters.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum MaxConcurrency {
    /// A number of clusters.
    Count(i64),
    /// A percentage such as `"25%"`.
    Percent(String),
}

impl JsonSchema for MaxConcurrency {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "MaxConcurrency".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "x-kubernetes-int-or-string": true })
    }
}

/// One wave: the clusters whose KubeFedCluster labels match the selector.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct RolloutGroup {
    /// The clusters of this wave.
    pub selector: LabelSelector,
}

/// `status.rollout`: where the rollout of the current template stands.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The revision being rolled out (hash of the template and overrides).
    pub target_revision: String,
    /// The federated object's generation that set this target.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub target_generation: i64,
    /// The last revision that reached every cluster, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_revision: Option<String>,
    /// When this rollout started (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub start_time: String,
    /// The wave being rolled out, from 1 (absent when every wave is done).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub current_wave: u32,
    /// How many waves there are.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waves: u32,
    /// Clusters succeeded of the placed clusters, e.g. `3/5` (the ROLLOUT column).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub progress: String,
    /// Per placed cluster, in rollout order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterRollout>,
    /// With `onFailure: Rollback`, once the rollout stopped: the revision the failed
    /// clusters went back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back_to: Option<String>,
    /// With `strategy: Canary`, while a canary runs or after it stopped: where it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryStatus>,
}

/// `status.rollout.canary`: the step of a canary by replica share.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStatus {
    /// `Stepping`, `Promoting`, `Failed` (held at the step) or `RolledBack`.
    pub phase: CanaryPhase,
    /// The step, from 1.
    pub step: u32,
    /// The step's percentage of the total replicas.
    pub percent: u32,
    /// When the step (or the promotion) started (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub since: String,
    /// Since when every cluster's canary has been healthy at this step (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub healthy_since: String,
}

/// Where a canary stands.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CanaryPhase {
    /// The canaries run the step's share; the next step waits on their health.
    #[default]
    Stepping,
    /// The last step held: the stable Deployments take the new template and their full
    /// split; the canaries go once the stable ones are healthy.
    Promoting,
    /// A step failed with `onFailure: Halt`: held there.
    Failed,
    /// A step failed with `onFailure: Rollback`: the canaries are gone, the stable
    /// Deployments run their full split on the stable revision.
    RolledBack,
}

/// Whether a value is its type's default (serde's `skip_serializing_if` for zero fields).
pub(crate) fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

/// Where one cluster stands in the rollout.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRollout {
    /// Cluster name.
    pub name: String,
    /// `Pending`, `Progressing`, `Succeeded` or `Failed`.
    pub state: ClusterRolloutState,
    /// The cluster's wave, from 1.
    pub wave: u32,
    /// When the cluster entered its state (RFC 3339; for `Progressing`, when its update
    /// started).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub since: String,
    /// Since when the cluster has been healthy on the target, while `Progressing`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub healthy_since: String,
    /// Why the cluster failed (the member's own words).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The state of one cluster in a rollout.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ClusterRolloutState {
    /// Not reached yet: keeps the previous version.
    #[default]
    Pending,
    /// Updated; waiting to be healthy for `minSuccessSeconds`.
    Progressing,
    /// Healthy on the target for `minSuccessSeconds`.
    Succeeded,
    /// Not healthy within `progressDeadlineSeconds`.
    Failed,
}

impl ClusterRolloutState {
    /// The state as written in status.
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterRolloutState::Pending => "Pending",
            ClusterRolloutState::Progressing => "Progressing",
            ClusterRolloutState::Succeeded => "Succeeded",
            ClusterRolloutState::Failed => "Failed",
        }
    }

    /// Whether the cluster has been given the target version.
    pub fn is_started(self) -> bool {
        self != ClusterRolloutState::Pending
    }
}

/// The reason of the `Rollout` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RolloutReason {
    /// Every placed cluster runs the target healthy (condition True).
    Complete,
    /// Clusters are being updated.
    Progressing,
    /// Stopped by `spec.rollout.paused`.
    Paused,
    /// More clusters failed than `maxFailures` allows: stopped.
    Failed,
    /// Stopped on failures, and the failed clusters went back to the stable revision
    /// (`onFailure: Rollback`).
    RolledBack,
    /// `spec.rollout` is invalid: nothing moves.
    InvalidSpec,
}

impl RolloutReason {
    /// The reason as written in the condition.
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutReason::Complete => "Complete",
            RolloutReason::Progressing => "Progressing",
            RolloutReason::Paused => "Paused",
            RolloutReason::Failed => "Failed",
            RolloutReason::RolledBack => "RolledBack",
            RolloutReason::InvalidSpec => "InvalidSpec",
        }
    }

    /// The condition status: `True` only when complete.
    pub fn status(self) -> &'static str {
        if self == RolloutReason::Complete {
            "True"
        } else {
            "False"
        }
    }
}

/// Checks the steps: at least one, each between 1 and 100, increasing, the last 100.
fn validate_steps(steps: &[u32]) -> Result<(), String> {
    if steps.is_empty() {
        return Err("spec.rollout.canary.steps is empty: give percentages ending at 100".into());
    }
    if let Some(bad) = steps.iter().find(|p| !(1..=100).contains(*p)) {
        return Err(format!(
            "spec.rollout.canary.steps: {bad} is not a percentage between 1 and 100"
        ));
    }
    if steps.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!(
            "spec.rollout.canary.steps {steps:?} must increase from step to step"
        ));
    }
    if steps.last() != Some(&100) {
        return Err(format!(
            "spec.rollout.canary.steps {steps:?} must end at 100 (the promotion)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canary_steps_are_checked_with_the_reason_named() {
        assert_eq!(validate_steps(&[10, 50, 100]), Ok(()));
        assert!(validate_steps(&[]).expect_err("empty").contains("empty"));
        assert!(
            validate_steps(&[0, 100])
                .expect_err("0")
                .contains("between 1 and 100")
        );
        assert!(
            validate_steps(&[50, 10, 100])
                .expect_err("order")
                .contains("increase")
        );
        assert!(
            validate_steps(&[10, 50])
                .expect_err("end")
                .contains("end at 100")
        );
    }
}
