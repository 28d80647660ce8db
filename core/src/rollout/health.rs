//! Whether a member object counts as healthy for the rollout: its type's health rules
//! decide ([`crate::health`]); a type without rules (or without collected status) is
//! healthy once propagated. Otherwise the rules' message says why not — for the workload
//! kinds, the member's own words.

use serde_json::Value;

use crate::health::{HealthState, TypeHealth, evaluate};

/// `Ok` when the member object is healthy; otherwise why not. `health`: the type's rules
/// when its status is collected (`None`: propagated is healthy).
pub fn member_health(health: Option<&TypeHealth>, member: &Value) -> Result<(), String> {
    match health {
        Some(rules) => evaluate(rules, member).into_result(),
        None => Ok(()),
    }
}

/// [`member_health`], and whether the rules call the member object failed (their `failed`
/// expression held): a rollout stops there at once instead of at its progress deadline.
pub fn member_verdict(health: Option<&TypeHealth>, member: &Value) -> (Result<(), String>, bool) {
    match health {
        Some(rules) => {
            let verdict = evaluate(rules, member);
            let failed = verdict.state == HealthState::Failed;
            (verdict.into_result(), failed)
        }
        None => (Ok(()), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::{core::ApiResource, workload::WorkloadKind};
    use serde_json::json;
    use std::sync::Arc;

    fn rules(kind: WorkloadKind) -> Option<Arc<TypeHealth>> {
        let target = ApiResource {
            group: "apps".into(),
            kind: format!("{kind:?}"),
            ..ApiResource::default()
        };
        Some(TypeHealth::of(&target, None))
    }

    fn deployment(status: Value) -> Value {
        json!({"metadata": {"generation": 2}, "spec": {"replicas": 2}, "status": status})
    }

    #[test]
    fn any_propagated_object_of_a_kind_without_collected_status_is_healthy() {
        assert_eq!(member_health(None, &json!({"data": {}})), Ok(()));
    }

    #[test]
    fn a_rolled_out_available_deployment_is_healthy() {
        let member = deployment(json!({"observedGeneration": 2, "replicas": 2,
            "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2}));
        assert_eq!(
            member_health(rules(WorkloadKind::Deployment).as_deref(), &member),
            Ok(())
        );
    }

    #[test]
    fn a_deployment_whose_pods_never_get_ready_says_why_in_the_members_words() {
        let member = deployment(json!({"observedGeneration": 2, "replicas": 2,
            "updatedReplicas": 2, "readyReplicas": 0, "availableReplicas": 0,
            "conditions": [
                {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                 "message": "Deployment does not have minimum availability."}]}));
        let err = member_health(rules(WorkloadKind::Deployment).as_deref(), &member)
            .expect_err("unhealthy");
        assert_eq!(
            err,
            "Available MinimumReplicasUnavailable: Deployment does not have minimum availability. (2 updated, 0 ready, 0 available of 2 replicas; 2 in total)"
        );
    }

    #[test]
    fn old_pods_still_ready_beside_new_ones_that_never_get_ready_are_not_healthy() {
        // A rolling update of one replica: the old pod serves, the new one never gets ready.
        let member = json!({"metadata": {"generation": 2}, "spec": {"replicas": 1},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1,
                "readyReplicas": 1, "availableReplicas": 1, "unavailableReplicas": 1}});
        let err = member_health(rules(WorkloadKind::Deployment).as_deref(), &member)
            .expect_err("unhealthy");
        assert_eq!(
            err,
            "not rolled out: 1 updated, 1 ready, 1 available of 1 replicas; 2 in total"
        );
    }

    #[test]
    fn a_status_of_an_older_generation_or_no_status_is_not_healthy() {
        let old = deployment(json!({"observedGeneration": 1, "updatedReplicas": 2,
            "readyReplicas": 2, "availableReplicas": 2}));
        assert!(member_health(rules(WorkloadKind::Deployment).as_deref(), &old).is_err());
        let none = json!({"spec": {"replicas": 1}});
        assert_eq!(
            member_health(rules(WorkloadKind::Deployment).as_deref(), &none),
            Err("the member reports no status yet".into())
        );
    }

    #[test]
    fn ready_but_unavailable_deployment_pods_are_not_healthy() {
        let member = deployment(json!({"observedGeneration": 2, "updatedReplicas": 2,
            "readyReplicas": 2, "availableReplicas": 1}));
        assert!(member_health(rules(WorkloadKind::Deployment).as_deref(), &member).is_err());
    }
}
