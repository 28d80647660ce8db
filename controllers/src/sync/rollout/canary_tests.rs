use super::*;

fn split(rows: &[(&str, i64)]) -> BTreeMap<String, i64> {
    rows.iter().map(|(c, r)| (c.to_string(), *r)).collect()
}

fn deployment(status: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "demo", "uid": "u-1", "generation": 1,
            "labels": {"kubefed.io/managed": "true"},
            "annotations": {HASH_ANNOTATION: "h", REVISION_ANNOTATION: "r2"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}},
        "status": status})
}

fn rules() -> std::sync::Arc<TypeHealth> {
    let target = flotilla_api::core::ApiResource {
        group: "apps".into(),
        kind: "Deployment".into(),
        ..Default::default()
    };
    TypeHealth::of(&target, None)
}

fn ready(replicas: i64) -> Value {
    json!({"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
        "readyReplicas": replicas, "availableReplicas": replicas})
}

#[test]
fn each_cluster_runs_its_share_of_the_step_and_keeps_its_split() {
    let s = split(&[("m1", 6), ("m2", 4)]);
    let at = |render: &Render, c: &str| cluster_plan(render, "r2", &s, c, s[c]);
    let ten = Render::Split {
        stable: "r1".into(),
        percent: 10,
    };
    assert_eq!(
        at(&ten, "m1"),
        ClusterPlan {
            stable_revision: "r1".into(),
            stable_replicas: 5,
            canary_replicas: Some(1),
        }
    );
    assert_eq!(at(&ten, "m2").canary_replicas, Some(0));
    assert_eq!(at(&ten, "m2").stable_replicas, 4);
    let promote = at(&Render::Promote, "m2");
    assert_eq!(
        (promote.stable_revision.as_str(), promote.stable_replicas),
        ("r2", 4)
    );
    assert_eq!(
        promote.canary_replicas,
        Some(4),
        "kept until the stable is healthy"
    );
    let stable = at(
        &Render::Stable {
            revision: "r1".into(),
        },
        "m1",
    );
    assert_eq!((stable.stable_replicas, stable.canary_replicas), (6, None));
}

#[test]
fn the_canary_object_is_labelled_renamed_owned_and_hashed() {
    let base = deployment(Value::Null);
    let stable = deployment(ready(2));
    let obj = canary_object(&base, Some(&stable), 3, "r2", "apps/v1").expect("a canary");
    assert_eq!(obj["metadata"]["name"], "web-canary");
    for path in [
        "/metadata/labels",
        "/spec/selector/matchLabels",
        "/spec/template/metadata/labels",
    ] {
        assert_eq!(
            obj.pointer(path).and_then(|l| l.get(CANARY_LABEL)),
            Some(&json!("true"))
        );
    }
    assert_eq!(obj["metadata"]["labels"]["kubefed.io/managed"], "true");
    assert_eq!(obj["spec"]["replicas"], 3);
    assert_eq!(obj["metadata"]["ownerReferences"][0]["uid"], "u-1");
    assert_eq!(obj["metadata"]["ownerReferences"][0]["name"], "web");
    let hash = annotation(&obj, HASH_ANNOTATION).expect("hashed");
    assert_ne!(hash, "h");
    let again = canary_object(&base, Some(&stable), 3, "r2", "apps/v1").expect("a canary");
    assert_eq!(
        annotation(&again, HASH_ANNOTATION),
        Some(hash.clone()),
        "stable hash"
    );
    let more = canary_object(&base, Some(&stable), 4, "r2", "apps/v1").expect("a canary");
    assert_ne!(annotation(&more, HASH_ANNOTATION), Some(hash));
    let unborn = json!({"metadata": {"name": "web"}});
    assert_eq!(
        canary_object(&base, Some(&unborn), 3, "r2", "apps/v1"),
        None
    );
}

#[test]
fn a_canary_counts_at_the_step_only_on_the_new_revision_with_the_steps_replicas_and_healthy() {
    let health = rules();
    let h = Some(&*health);
    let ok = Observed::Present(deployment(ready(2)));
    assert_eq!(canary_check(h, &ok, "r2", 2), Ok(()));
    let wrong_size = canary_check(h, &ok, "r2", 3).expect_err("an error");
    assert!(wrong_size.contains("3 replicas"), "{wrong_size}");
    assert!(
        canary_check(h, &ok, "r3", 2)
            .expect_err("an error")
            .contains("new revision")
    );
    let not_ready = Observed::Present(deployment(json!({"observedGeneration": 1,
        "replicas": 2, "updatedReplicas": 2, "readyReplicas": 0, "availableReplicas": 0})));
    assert!(canary_check(h, &not_ready, "r2", 2).is_err());
    assert!(
        canary_check(h, &Observed::Absent, "r2", 2)
            .expect_err("an error")
            .contains("not created")
    );
    assert_eq!(stable_check(h, &ok, Some("h")), Ok(()));
    assert!(
        stable_check(h, &ok, Some("other"))
            .expect_err("an error")
            .contains("new template")
    );
}

#[test]
fn a_canary_needs_a_deployment_with_replicas() {
    assert_eq!(
        shareable("Deployment", &split(&[("m1", 5), ("m2", 5)])),
        Ok(())
    );
    let none = shareable("Deployment", &split(&[("m1", 0)])).expect_err("an error");
    assert!(
        none.contains("needs replicas") && none.contains("without a canary"),
        "{none}"
    );
    let kind = shareable("ConfigMap", &split(&[("m1", 1)])).expect_err("an error");
    assert!(kind.contains("for Deployments"), "{kind}");
}

#[test]
fn the_split_is_each_placed_clusters_desired_replicas() {
    let mut desired = DesiredSet::default();
    let mut with = |c: &str, r: Option<i64>| {
        let mut object = deployment(Value::Null);
        match r {
            Some(r) => object["spec"]["replicas"] = json!(r),
            None => {
                if let Some(spec) = object["spec"].as_object_mut() {
                    spec.remove("replicas");
                }
            }
        }
        let hash = "h".to_string();
        desired
            .by_cluster
            .insert(c.into(), DesiredFor::Object { object, hash });
    };
    with("m1", Some(7));
    with("m2", None);
    desired.by_cluster.insert(
        "m3".into(),
        DesiredFor::Failed(
            flotilla_api::ClusterReason::ApplyOverridesFailed,
            "x".into(),
        ),
    );
    assert_eq!(split_of(&desired), split(&[("m1", 7), ("m2", 0)]));
}

#[test]
fn a_pull_clusters_canary_has_no_owner_and_is_otherwise_the_push_one() {
    let base = deployment(Value::Null);
    let stable = deployment(ready(2));
    let pull = canary_object(&base, None, 3, "r2", "apps/v1").expect("a canary");
    let push = canary_object(&base, Some(&stable), 3, "r2", "apps/v1").expect("a canary");
    assert_eq!(pull["metadata"]["name"], "web-canary");
    assert_eq!(pull["metadata"].get("ownerReferences"), None);
    assert_eq!(pull["spec"], push["spec"]);
    assert_eq!(pull["metadata"]["labels"], push["metadata"]["labels"]);
    assert_eq!(
        annotation(&pull, REVISION_ANNOTATION).as_deref(),
        Some("r2")
    );
}

/// A Pull cluster's canary as the agent reports it: healthy only once the report is about
/// the manifest the Work carries now.
#[test]
fn a_pull_canary_is_judged_on_the_agents_report_of_the_current_manifest() {
    use flotilla_api::work::{ManifestCondition, Work, WorkSpec, WorkStatus, identify};
    let health = rules();
    let h = Some(&*health);
    let mut manifest =
        canary_object(&deployment(Value::Null), None, 2, "r2", "apps/v1").expect("a canary");
    if let Some(m) = manifest.as_object_mut() {
        m.remove("status");
    }
    let mut work = Work::new("w", WorkSpec::default());
    work.spec.workload.manifests.push(manifest.clone());
    let report = |hash: Option<String>| ManifestCondition {
        identifier: identify(0, &manifest),
        hash,
        generation: Some(1),
        status_feedback: Some(ready(2)),
        ..ManifestCondition::default()
    };
    work.status = Some(WorkStatus {
        manifest_conditions: vec![report(Some("an older manifest".into()))],
        ..WorkStatus::default()
    });
    let seen = Observed::Present(crate::sync::pull::observed_of(&work, 0));
    assert!(canary_check(h, &seen, "r2", 2).is_err(), "no status yet");
    work.status = Some(WorkStatus {
        manifest_conditions: vec![report(annotation(&manifest, HASH_ANNOTATION))],
        ..WorkStatus::default()
    });
    let seen = Observed::Present(crate::sync::pull::observed_of(&work, 0));
    assert_eq!(canary_check(h, &seen, "r2", 2), Ok(()));
    assert!(
        canary_check(h, &seen, "r2", 3).is_err(),
        "another step's share"
    );
}
