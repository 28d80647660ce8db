//! Health of member objects, per federated type: CEL rules over the member object say
//! whether it is healthy, still progressing or failed, why, and how many of its replicas
//! are ready. A FederatedTypeConfig may carry its own rules (`spec.health`, a Flotilla
//! extension whose shape is `flotilla_api::health`); the workload kinds (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job)
//! have built-in rules written the same way ([`builtin`]), so every type goes through
//! [`evaluate`]. Rollout gates, `status.aggregated`, `flotilla status` and the dashboard
//! read the result. Pure: no I/O; compiled rules are cached ([`TypeHealth::of`]).

mod builtin;
mod cache;
mod condition;
mod eval;
#[cfg(test)]
mod legacy;
#[cfg(test)]
mod tests;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use flotilla_api::health::HealthRules;
use flotilla_api::{core::ApiResource, workload::WorkloadKind};

pub use builtin::builtin_rules;
pub use condition::{ftc_conditions, rules_condition};
pub use eval::{CompiledRules, RuleError};

/// Where a member object stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum HealthState {
    /// Healthy: a rollout may go on.
    Healthy,
    /// Not healthy yet, still working towards it.
    Progressing,
    /// Failed (or a rule could not be evaluated on it).
    Failed,
}

impl HealthState {
    /// The state's name as shown in status.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Healthy => "Healthy",
            HealthState::Progressing => "Progressing",
            HealthState::Failed => "Failed",
        }
    }
}

/// Ready of desired replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Replicas {
    /// Replicas ready.
    pub ready: i64,
    /// Replicas wanted.
    pub desired: i64,
}

/// One member object's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Healthy, progressing or failed.
    pub state: HealthState,
    /// Why not healthy; or, when the type's rules are invalid, that they were not used.
    pub message: Option<String>,
    /// The replica figure, when the type's rules give one.
    pub replicas: Option<Replicas>,
}

impl Health {
    /// Whether a rollout may go on past this object.
    pub fn is_healthy(&self) -> bool {
        self.state == HealthState::Healthy
    }

    /// `Ok` when healthy, else the message (the rollout gate's shape).
    pub fn into_result(self) -> Result<(), String> {
        match self.state {
            HealthState::Healthy => Ok(()),
            state => Err(self
                .message
                .unwrap_or_else(|| state.as_str().to_lowercase())),
        }
    }

    fn healthy() -> Health {
        Health {
            state: HealthState::Healthy,
            message: None,
            replicas: None,
        }
    }
}

/// The health rules of one federated type, compiled.
#[derive(Debug)]
pub struct TypeHealth {
    /// The workload kind, whose member counters `status.aggregated` sums.
    pub workload: Option<WorkloadKind>,
    /// The rules in force: the FTC's own, else the kind's built-in ones; `None`: any
    /// propagated object is healthy.
    rules: Option<CompiledRules>,
    /// The FTC's own rules did not compile (then no rule is in force).
    invalid: Option<RuleError>,
}

impl TypeHealth {
    /// The compiled rules of a target type: `rules` (the FTC's `spec.health`) when given,
    /// else the built-in rules of a workload kind. Compiled once per distinct rule set and
    /// shared (an FTC's rules change only with its generation).
    pub fn of(target: &ApiResource, rules: Option<&HealthRules>) -> std::sync::Arc<TypeHealth> {
        cache::compiled(target, rules)
    }

    fn compile(target: &ApiResource, rules: Option<&HealthRules>) -> TypeHealth {
        let workload = WorkloadKind::of(target);
        let own = rules.map(CompiledRules::compile);
        // Invariant: the built-in rules are constant source text, compiled by every test
        // run (`the_built_in_rules_judge_members_as_the_hand_coded_health_did`).
        let builtin = || workload.map(|k| builtin::rules(k).expect("built-in rules compile"));
        let (rules, invalid) = match own {
            Some(Ok(rules)) => (Some(rules), None),
            Some(Err(e)) => (None, Some(e)),
            None => (builtin(), None),
        };
        TypeHealth {
            workload,
            rules,
            invalid,
        }
    }

    /// Whether any rule is in force (else every propagated object is healthy).
    pub fn has_rules(&self) -> bool {
        self.rules.is_some()
    }

    /// Whether the rules give a replica figure.
    pub fn has_replicas(&self) -> bool {
        self.rules.as_ref().is_some_and(CompiledRules::has_replicas)
    }

    /// The compile error of the FTC's own rules.
    pub fn invalid(&self) -> Option<&RuleError> {
        self.invalid.as_ref()
    }
}

/// The health of a member object under its type's rules — the one entry point for rollout
/// gates, aggregated status, `flotilla status` and the dashboard. Without rules, any
/// propagated object is healthy (with invalid rules, saying so in the message); a rule that
/// fails on this object makes it failed with the rule's error.
pub fn evaluate(rules: &TypeHealth, member: &Value) -> Health {
    match (&rules.rules, &rules.invalid) {
        (Some(compiled), _) => compiled.evaluate(member),
        (None, Some(e)) => Health {
            message: Some(format!(
                "{}: {e}; healthy once propagated",
                RuleError::REASON
            )),
            ..Health::healthy()
        },
        (None, None) => Health::healthy(),
    }
}
