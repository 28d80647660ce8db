//! Whether a member object counts as healthy for the rollout: any propagated object is;
//! a workload whose status is collected is once the member reports it rolled out (status
//! of the current generation, every desired pod updated and ready, and for Deployments
//! available) — the same figure as `status.aggregated`. Otherwise the member's own words
//! say why not.

use serde_json::Value;

use crate::workload::{ClusterWorkload, WorkloadKind, aggregate};

/// `Ok` when the member object is healthy; otherwise why not. `kind` is the workload kind
/// when its status is collected (`None`: propagated is healthy).
pub fn member_health(kind: Option<WorkloadKind>, member: &Value) -> Result<(), String> {
    let Some(kind) = kind else {
        return Ok(());
    };
    let status = member.get("status").filter(|s| !s.is_null());
    let Some(status) = status else {
        return Err("the member reports no status yet".into());
    };
    let spec = member.get("spec");
    let c = ClusterWorkload {
        propagated: true,
        spec,
        generation: member
            .pointer("/metadata/generation")
            .and_then(Value::as_i64),
        status: Some(status),
    };
    let a = aggregate(kind, &[c]);
    let desired = spec
        .and_then(|s| s.get("replicas"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let n = |field: &str| status.get(field).and_then(Value::as_i64).unwrap_or(0);
    // A Deployment is rolled out when updated = ready = available = desired replicas and
    // no pod of an older version remains (those still count as ready while the new ones
    // never get ready).
    let deployment_ok = kind != WorkloadKind::Deployment
        || (n("availableReplicas") >= desired && n("replicas") <= n("updatedReplicas"));
    if a.clusters == "1/1" && deployment_ok {
        return Ok(());
    }
    let pods = match (kind, &a.ready, &a.completions) {
        (WorkloadKind::Deployment, _, _) => format!(
            "{} updated, {} ready, {} available of {desired} replicas; {} in total",
            n("updatedReplicas"),
            n("readyReplicas"),
            n("availableReplicas"),
            n("replicas")
        ),
        (_, Some(r), _) => format!("{r} pods ready"),
        (_, None, Some(c)) => format!("{c} completions"),
        (_, None, None) => String::new(),
    };
    Err(match false_condition(status) {
        Some(c) => format!("{c} ({pods})"),
        None => format!("not rolled out: {pods}"),
    })
}

/// The member's first condition that is not True, as `Type Reason: message`.
fn false_condition(status: &Value) -> Option<String> {
    let conditions = status.get("conditions")?.as_array()?;
    conditions.iter().find_map(|c| {
        let field = |f: &str| c.get(f).and_then(Value::as_str).unwrap_or_default();
        (field("status") != "True").then(|| {
            format!(
                "{} {}: {}",
                field("type"),
                field("reason"),
                field("message")
            )
            .trim()
            .to_string()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
            member_health(Some(WorkloadKind::Deployment), &member),
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
        let err = member_health(Some(WorkloadKind::Deployment), &member).expect_err("unhealthy");
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
        let err = member_health(Some(WorkloadKind::Deployment), &member).expect_err("unhealthy");
        assert_eq!(
            err,
            "not rolled out: 1 updated, 1 ready, 1 available of 1 replicas; 2 in total"
        );
    }

    #[test]
    fn a_status_of_an_older_generation_or_no_status_is_not_healthy() {
        let old = deployment(json!({"observedGeneration": 1, "updatedReplicas": 2,
            "readyReplicas": 2, "availableReplicas": 2}));
        assert!(member_health(Some(WorkloadKind::Deployment), &old).is_err());
        let none = json!({"spec": {"replicas": 1}});
        assert_eq!(
            member_health(Some(WorkloadKind::Deployment), &none),
            Err("the member reports no status yet".into())
        );
    }

    #[test]
    fn ready_but_unavailable_deployment_pods_are_not_healthy() {
        let member = deployment(json!({"observedGeneration": 2, "updatedReplicas": 2,
            "readyReplicas": 2, "availableReplicas": 1}));
        assert!(member_health(Some(WorkloadKind::Deployment), &member).is_err());
    }
}
