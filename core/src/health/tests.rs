use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::{
    rollout::health::member_health,
    workload::{ClusterWorkload, aggregate},
};
use flotilla_api::health::ReplicaRules;

fn target(group: &str, kind: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        kind: kind.into(),
        plural_name: format!("{}s", kind.to_lowercase()),
        ..ApiResource::default()
    }
}

fn builtin(kind: WorkloadKind) -> Arc<TypeHealth> {
    let group = if kind == WorkloadKind::Job {
        "batch"
    } else {
        "apps"
    };
    TypeHealth::of(&target(group, &format!("{kind:?}")), None)
}

fn custom(rules: HealthRules) -> Arc<TypeHealth> {
    TypeHealth::of(&target("example.com", "Widget"), Some(&rules))
}

fn widget_rules() -> HealthRules {
    HealthRules {
        healthy: Some("status.phase == 'Ready'".into()),
        failed: Some("status.phase == 'Failed'".into()),
        message: Some(
            "'phase ' + status.phase + (has(status.reason) ? ': ' + status.reason : '')".into(),
        ),
        replicas: Some(ReplicaRules {
            desired: "spec.size".into(),
            ready: "has(status.readyMembers) ? status.readyMembers : 0".into(),
        }),
        ..HealthRules::default()
    }
}

#[test]
fn a_custom_rule_reads_healthy_failed_and_progressing_with_its_message() {
    let rules = custom(widget_rules());
    let widget = |status: Value| json!({"spec": {"size": 3}, "status": status});
    let ready = evaluate(
        &rules,
        &widget(json!({"phase": "Ready", "readyMembers": 3})),
    );
    assert_eq!(ready.state, HealthState::Healthy);
    assert_eq!(ready.message, None);
    assert_eq!(
        ready.replicas,
        Some(Replicas {
            ready: 3,
            desired: 3
        })
    );
    let failed = evaluate(
        &rules,
        &widget(json!({"phase": "Failed", "reason": "disk full"})),
    );
    assert_eq!(failed.state, HealthState::Failed);
    assert_eq!(failed.message.as_deref(), Some("phase Failed: disk full"));
    assert_eq!(
        failed.replicas,
        Some(Replicas {
            ready: 0,
            desired: 3
        })
    );
    let starting = evaluate(&rules, &widget(json!({"phase": "Starting"})));
    assert_eq!(starting.state, HealthState::Progressing);
    assert_eq!(starting.clone().into_result(), Err("phase Starting".into()));
}

#[test]
fn a_false_progressing_rule_makes_a_not_yet_healthy_object_failed() {
    let rules = custom(HealthRules {
        healthy: Some("status.ready".into()),
        progressing: Some("status.attempts < 3".into()),
        ..HealthRules::default()
    });
    let h = |attempts: i64| {
        evaluate(
            &rules,
            &json!({"status": {"ready": false, "attempts": attempts}}),
        )
    };
    assert_eq!(h(1).state, HealthState::Progressing);
    assert_eq!(h(1).message.as_deref(), Some("not healthy yet"));
    assert_eq!(h(3).state, HealthState::Failed);
}

#[test]
fn the_object_is_self_and_object_and_its_parts_are_variables_of_their_own() {
    let rules = custom(HealthRules {
        healthy: Some(
            "self.metadata.name == object.metadata.name && size(status) == 0 && spec.x == 1".into(),
        ),
        ..HealthRules::default()
    });
    let obj = json!({"metadata": {"name": "a"}, "spec": {"x": 1}, "status": null});
    assert_eq!(evaluate(&rules, &obj).state, HealthState::Healthy);
}

#[test]
fn a_rule_that_errors_on_one_object_fails_that_object_only() {
    let rules = custom(widget_rules());
    let broken = evaluate(&rules, &json!({"spec": {"size": 1}, "status": {}}));
    assert_eq!(broken.state, HealthState::Failed);
    let message = broken.message.expect("a message");
    assert!(message.starts_with("health rule "), "{message}");
    let fine = evaluate(
        &rules,
        &json!({"spec": {"size": 1}, "status": {"phase": "Ready"}}),
    );
    assert!(fine.is_healthy());
}

#[test]
fn a_rule_of_the_wrong_type_is_that_objects_error() {
    let rules = custom(HealthRules {
        healthy: Some("status.phase".into()),
        ..HealthRules::default()
    });
    let h = evaluate(&rules, &json!({"status": {"phase": "Ready"}}));
    assert_eq!(h.state, HealthState::Failed);
    assert_eq!(
        h.message.as_deref(),
        Some("health rule healthy gave string, not a bool")
    );
}

#[test]
fn a_rule_that_does_not_compile_names_its_field_and_objects_are_healthy_once_propagated() {
    let rules = HealthRules {
        healthy: Some("status.phase == 'Ready'".into()),
        replicas: Some(ReplicaRules {
            desired: "spec.size +".into(),
            ready: "1".into(),
        }),
        ..HealthRules::default()
    };
    let compiled = custom(rules.clone());
    let e = compiled.invalid().expect("invalid");
    assert_eq!(e.field, "replicas.desired");
    assert!(!compiled.has_rules());
    let h = evaluate(&compiled, &json!({"status": {"phase": "Broken"}}));
    assert!(h.is_healthy());
    let message = h.message.expect("says the rules are not used");
    assert!(
        message.starts_with("InvalidHealthRule: spec.health.replicas.desired: "),
        "{message}"
    );
    let (status, reason, text) =
        rules_condition(&target("example.com", "Widget"), Some(&rules), true).expect("a condition");
    assert_eq!((status, reason), ("False", "InvalidHealthRule"));
    assert!(text.starts_with("spec.health.replicas.desired: "), "{text}");
}

#[test]
fn the_condition_says_valid_rules_compiled_and_warns_without_status_collection() {
    let t = target("example.com", "Widget");
    let rules = widget_rules();
    assert_eq!(rules_condition(&t, None, true), None);
    assert_eq!(
        rules_condition(&t, Some(&rules), true).map(|c| c.1),
        Some("Valid")
    );
    assert_eq!(
        rules_condition(&t, Some(&rules), false).map(|c| c.1),
        Some("StatusCollectionDisabled")
    );
}

#[test]
fn an_ftcs_own_rules_replace_the_built_in_ones_and_compile_once() {
    let rules = HealthRules {
        healthy: Some("true".into()),
        ..HealthRules::default()
    };
    let deployment = target("apps", "Deployment");
    let own = TypeHealth::of(&deployment, Some(&rules));
    assert!(Arc::ptr_eq(
        &own,
        &TypeHealth::of(&deployment, Some(&rules))
    ));
    assert!(evaluate(&own, &json!({"spec": {"replicas": 3}})).is_healthy());
    assert!(
        !evaluate(
            &builtin(WorkloadKind::Deployment),
            &json!({"spec": {"replicas": 3}})
        )
        .is_healthy()
    );
    assert!(!TypeHealth::of(&target("", "ConfigMap"), None).has_rules());
}

/// A small deterministic generator of member objects for the comparison with the old code.
struct Gen(u64);

impl Gen {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }

    fn maybe(&mut self, obj: &mut serde_json::Map<String, Value>, field: &str) {
        match self.next(6) {
            0 => {}
            k => {
                obj.insert(field.into(), json!(k - 1));
            }
        }
    }

    fn member(&mut self, kind: WorkloadKind) -> Value {
        let mut spec = serde_json::Map::new();
        self.maybe(
            &mut spec,
            if kind == WorkloadKind::Job {
                "completions"
            } else {
                "replicas"
            },
        );
        let mut status = serde_json::Map::new();
        for f in [
            "observedGeneration",
            "replicas",
            "readyReplicas",
            "availableReplicas",
            "updatedReplicas",
            "desiredNumberScheduled",
            "numberReady",
            "updatedNumberScheduled",
            "succeeded",
        ] {
            self.maybe(&mut status, f);
        }
        let condition =
            |s: &str| json!({"type": "Available", "status": s, "reason": "R", "message": "m."});
        match self.next(4) {
            0 => {}
            1 => {
                status.insert(
                    "conditions".into(),
                    json!([condition("True"), condition("False")]),
                );
            }
            2 => {
                status.insert("conditions".into(), json!([condition("True")]));
            }
            _ => {
                status.insert(
                    "conditions".into(),
                    json!([{"type": "Progressing", "status": "Unknown"}]),
                );
            }
        }
        let mut obj = json!({"spec": spec});
        if self.next(5) > 0 {
            obj["metadata"] = json!({"generation": self.next(3) + 1});
        }
        if self.next(8) > 0 {
            obj["status"] = Value::Object(status);
        }
        obj
    }
}

const KINDS: [WorkloadKind; 5] = [
    WorkloadKind::Deployment,
    WorkloadKind::ReplicaSet,
    WorkloadKind::StatefulSet,
    WorkloadKind::DaemonSet,
    WorkloadKind::Job,
];

#[test]
fn the_built_in_rules_judge_members_as_the_hand_coded_health_did() {
    let mut rng = Gen(7);
    for kind in KINDS {
        let rules = builtin(kind);
        for _ in 0..1500 {
            let member = rng.member(kind);
            assert_eq!(
                member_health(Some(&rules), &member),
                legacy::member_health(Some(kind), &member),
                "{kind:?} {member}"
            );
        }
    }
}

#[test]
fn the_built_in_rules_sum_clusters_and_pods_as_the_hand_coded_aggregate_did() {
    let mut rng = Gen(11);
    for kind in KINDS {
        let rules = builtin(kind);
        for _ in 0..500 {
            let members: Vec<Value> = (0..3).map(|_| rng.member(kind)).collect();
            let propagated: Vec<bool> = (0..3).map(|_| rng.next(4) > 0).collect();
            let clusters: Vec<ClusterWorkload<'_>> = members
                .iter()
                .zip(&propagated)
                .map(|(m, p)| ClusterWorkload {
                    cluster: "m",
                    propagated: *p,
                    spec: m.get("spec"),
                    generation: m.pointer("/metadata/generation").and_then(Value::as_i64),
                    status: m.get("status"),
                })
                .collect();
            let new = aggregate(&rules, &clusters);
            let (old_clusters, old_pods) = legacy::aggregate(kind, &clusters);
            let pods = new.ready.clone().or(new.completions.clone());
            assert_eq!(pods, Some(old_pods), "{kind:?} {members:?}");
            // A cluster is ready when its member is healthy — the rollout gate's test,
            // which for Deployments also wants every replica available and no older pod.
            let healthy = members
                .iter()
                .zip(&propagated)
                .filter(|(m, p)| **p && legacy::member_health(Some(kind), m).is_ok())
                .count();
            assert_eq!(new.clusters, format!("{healthy}/3"), "{kind:?} {members:?}");
            if kind != WorkloadKind::Deployment {
                assert_eq!(new.clusters, old_clusters, "{kind:?} {members:?}");
            }
        }
    }
}

#[test]
fn built_in_rules_give_the_members_words_for_each_kind() {
    let rs = json!({"spec": {"replicas": 2}, "status": {"readyReplicas": 1}});
    assert_eq!(
        evaluate(&builtin(WorkloadKind::ReplicaSet), &rs)
            .message
            .as_deref(),
        Some("not rolled out: 1/2 pods ready")
    );
    let job = json!({"spec": {"completions": 2}, "status": {"succeeded": 1,
        "conditions": [{"type": "Failed", "status": "True"}, {"type": "Complete", "status": "False", "reason": "BackoffLimit"}]}});
    assert_eq!(
        evaluate(&builtin(WorkloadKind::Job), &job)
            .message
            .as_deref(),
        Some("Complete BackoffLimit: (1/2 completions)")
    );
}
