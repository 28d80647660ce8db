use super::*;
use serde_json::json;

fn deployment(pod: Value) -> Value {
    json!({"spec": {"replicas": 1, "template": {"spec": pod}}})
}

fn names(refs: &BTreeSet<Dependency>) -> Vec<(&'static str, &str)> {
    refs.iter()
        .map(|d| (d.kind.as_str(), d.name.as_str()))
        .collect()
}

#[test]
fn every_kind_of_reference_in_a_pod_template_is_found() {
    let pod = json!({
        "serviceAccountName": "runner",
        "imagePullSecrets": [{"name": "registry"}],
        "volumes": [
            {"name": "a", "configMap": {"name": "settings"}},
            {"name": "b", "secret": {"secretName": "tls"}},
            {"name": "c", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "d", "projected": {"sources": [
                {"configMap": {"name": "projected-cm"}},
                {"secret": {"name": "projected-secret"}},
                {"serviceAccountToken": {"path": "token"}}
            ]}},
            {"name": "e", "emptyDir": {}}
        ],
        "initContainers": [{"name": "init", "envFrom": [{"configMapRef": {"name": "init-env"}}]}],
        "containers": [{
            "name": "app",
            "env": [
                {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "x"}}},
                {"name": "Y", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "y"}}},
                {"name": "Z", "value": "plain"}
            ],
            "envFrom": [{"secretRef": {"name": "all-secret"}}]
        }]
    });
    let refs = references(pod_spec("Deployment", &deployment(pod)).expect("a pod spec"));
    assert_eq!(
        names(&refs),
        vec![
            ("ConfigMap", "env-cm"),
            ("ConfigMap", "init-env"),
            ("ConfigMap", "projected-cm"),
            ("ConfigMap", "settings"),
            ("Secret", "all-secret"),
            ("Secret", "env-secret"),
            ("Secret", "projected-secret"),
            ("Secret", "registry"),
            ("Secret", "tls"),
            ("ServiceAccount", "runner"),
            ("PersistentVolumeClaim", "data"),
        ]
    );
}

#[test]
fn the_default_service_account_and_empty_names_are_not_dependencies() {
    let pod = json!({"serviceAccountName": "default", "volumes": [{"configMap": {"name": ""}}]});
    assert!(references(&pod).is_empty());
    let old_field = json!({"serviceAccount": "legacy"});
    assert_eq!(
        names(&references(&old_field)),
        vec![("ServiceAccount", "legacy")]
    );
}

#[test]
fn pods_cron_jobs_and_other_workloads_have_their_pod_spec_in_different_places() {
    let pod = json!({"spec": {"serviceAccountName": "a"}});
    assert_eq!(
        pod_spec("Pod", &pod),
        Some(&json!({"serviceAccountName": "a"}))
    );
    let cron = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"serviceAccountName": "b"}}}}}});
    assert!(pod_spec("CronJob", &cron).is_some());
    assert_eq!(pod_spec("ConfigMap", &json!({"data": {"a": "b"}})), None);
}

#[test]
fn the_spec_field_or_the_annotation_turns_propagation_on() {
    let none = BTreeMap::new();
    assert!(enabled(&json!({"propagateDependencies": true}), &none));
    assert!(!enabled(&json!({"propagateDependencies": false}), &none));
    let on = BTreeMap::from([(
        PROPAGATE_DEPENDENCIES_ANNOTATION.to_string(),
        "true".to_string(),
    )]);
    assert!(enabled(&json!({}), &on));
}

fn host_secret() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "tls", "namespace": "demo", "uid": "host-uid",
            "resourceVersion": "7", "labels": {"team": "a"}},
        "data": {"key": "c2VjcmV0"}
    })
}

#[test]
fn a_missing_copy_is_created_with_the_label_the_owner_and_the_content_only() {
    let EnsureOp::Create(obj) = ensure_op(
        DependencyKind::Secret,
        &host_secret(),
        None,
        "FederatedDeployment/web",
    ) else {
        panic!("expected a create");
    };
    assert_eq!(obj["metadata"]["name"], "tls");
    assert_eq!(obj["metadata"]["namespace"], "demo");
    assert_eq!(obj["metadata"]["uid"], Value::Null);
    assert_eq!(obj["metadata"]["resourceVersion"], Value::Null);
    assert_eq!(obj["metadata"]["labels"]["team"], "a");
    assert_eq!(obj["metadata"]["labels"][DEPENDENCY_LABEL], "true");
    assert_eq!(
        obj["metadata"]["annotations"][OWNERS_ANNOTATION],
        "FederatedDeployment/web"
    );
    assert_eq!(obj["data"]["key"], "c2VjcmV0");
    assert_eq!(obj["type"], "Opaque");
}

#[test]
fn a_current_copy_needs_nothing_and_a_second_owner_is_added() {
    let host = host_secret();
    let EnsureOp::Create(mut member) = ensure_op(
        DependencyKind::Secret,
        &host,
        None,
        "FederatedDeployment/web",
    ) else {
        panic!("expected a create");
    };
    member["metadata"]["resourceVersion"] = json!("3");
    assert_eq!(
        ensure_op(
            DependencyKind::Secret,
            &host,
            Some(&member),
            "FederatedDeployment/web"
        ),
        EnsureOp::Nothing
    );
    let EnsureOp::Replace(next) = ensure_op(
        DependencyKind::Secret,
        &host,
        Some(&member),
        "FederatedJob/migrate",
    ) else {
        panic!("expected a replace");
    };
    assert_eq!(
        next["metadata"]["annotations"][OWNERS_ANNOTATION],
        "FederatedDeployment/web,FederatedJob/migrate"
    );
    assert_eq!(
        next["metadata"]["resourceVersion"], "3",
        "the replace is conditional"
    );
    let mut edited = host.clone();
    edited["data"]["key"] = json!("bmV3");
    let EnsureOp::Replace(next) = ensure_op(
        DependencyKind::Secret,
        &edited,
        Some(&member),
        "FederatedDeployment/web",
    ) else {
        panic!("expected a replace");
    };
    assert_eq!(next["data"]["key"], "bmV3");
}

#[test]
fn objects_flotilla_did_not_copy_are_never_taken() {
    let host = host_secret();
    let users = json!({"metadata": {"name": "tls", "labels": {}}});
    assert_eq!(
        ensure_op(DependencyKind::Secret, &host, Some(&users), "o"),
        EnsureOp::Refuse(Holder::Foreign)
    );
    let federated = json!({"metadata": {"name": "tls", "labels": {MANAGED_LABEL: "true", DEPENDENCY_LABEL: "true"}}});
    assert_eq!(
        ensure_op(DependencyKind::Secret, &host, Some(&federated), "o"),
        EnsureOp::Refuse(Holder::Federated)
    );
    assert_eq!(release_op(Some(&users), "o"), ReleaseOp::Nothing);
    assert_eq!(release_op(Some(&federated), "o"), ReleaseOp::Nothing);
}

#[test]
fn the_last_owner_deletes_the_copy_and_others_only_leave_the_annotation() {
    let copy = json!({"metadata": {"name": "tls", "uid": "u1", "resourceVersion": "9",
        "labels": {DEPENDENCY_LABEL: "true"},
        "annotations": {OWNERS_ANNOTATION: "FederatedDeployment/web,FederatedJob/migrate"}}});
    let ReleaseOp::Replace(next) = release_op(Some(&copy), "FederatedJob/migrate") else {
        panic!("expected a replace");
    };
    assert_eq!(
        next["metadata"]["annotations"][OWNERS_ANNOTATION],
        "FederatedDeployment/web"
    );
    assert_eq!(
        release_op(Some(&next), "FederatedJob/migrate"),
        ReleaseOp::Nothing
    );
    assert_eq!(
        release_op(Some(&next), "FederatedDeployment/web"),
        ReleaseOp::Delete {
            uid: Some("u1".into()),
            resource_version: Some("9".into())
        }
    );
    assert_eq!(
        release_op(None, "FederatedDeployment/web"),
        ReleaseOp::Nothing
    );
}

#[test]
fn an_existing_claim_only_takes_new_requests_and_keeps_its_bound_volume() {
    let host = json!({"metadata": {"name": "data", "namespace": "demo"},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-host",
            "resources": {"requests": {"storage": "2Gi"}}}});
    let EnsureOp::Create(created) =
        ensure_op(DependencyKind::PersistentVolumeClaim, &host, None, "o")
    else {
        panic!("expected a create");
    };
    assert_eq!(created["spec"].get("volumeName"), None);
    let mut member = created.clone();
    member["spec"]["volumeName"] = json!("pv-member");
    let mut bigger = host.clone();
    bigger["spec"]["resources"]["requests"]["storage"] = json!("5Gi");
    let EnsureOp::Replace(next) = ensure_op(
        DependencyKind::PersistentVolumeClaim,
        &bigger,
        Some(&member),
        "o",
    ) else {
        panic!("expected a replace");
    };
    assert_eq!(next["spec"]["volumeName"], "pv-member");
    assert_eq!(next["spec"]["resources"]["requests"]["storage"], "5Gi");
}
