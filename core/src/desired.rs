//! The desired object: what a federated object asks for in one member cluster, computed
//! from its template, its identity and the cluster's overrides (kubefed's `sync/resource.go`).
//!
//! Steps, in order:
//! 1. Start from `spec.template` (an absent or `null` template is `{}`; anything but an
//!    object is an error). A template `kind` that differs from the target kind is an error.
//! 2. `apiVersion` and `kind` come from the target type (the FederatedTypeConfig decides
//!    which version is propagated, whatever the template says).
//! 3. `metadata` is rebuilt: only the template's `labels` are kept; `name` is the federated
//!    object's name and `namespace` its namespace when the target is namespaced. For a
//!    FederatedNamespace (target kind `Namespace`) the name is the federated object's
//!    namespace and there is no namespace field.
//! 4. Template `metadata.annotations` and `metadata.finalizers` are dropped, as kubefed
//!    does (it cannot tell them apart from those the member's controllers set); the
//!    [`Desired`] flags say so, for the caller's `AnnotationsNotSupported` /
//!    `FinalizersNotSupported` events. Server-set metadata (`resourceVersion`, `uid`,
//!    `creationTimestamp`, `managedFields`, `generation`, `selfLink`, `ownerReferences`,
//!    and anything else but labels) and a top-level `status` are dropped silently.
//! 5. The label `kubefed.io/managed: "true"` is set.
//! 6. The cluster's overrides are applied, so they can still add annotations or labels.
//! 7. The managed label is set again, in case an override replaced the labels, since the
//!    controller only sees member objects that carry it.
//! 8. `spec.retainReplicas` is not applied here: like kubefed, the sync controller keeps
//!    the member's current `spec.replicas` when it *updates* an object (so an HPA in the
//!    member owns the count), while a *new* object gets the template's (or override's)
//!    replicas. The desired object therefore always carries them.

use serde_json::{Map, Value};

use crate::overrides::{self, OverrideError};
use flotilla_api::MANAGED_LABEL;
use flotilla_api::core::ApiResource;
use flotilla_api::{
    federated::{ClusterOverride, FederatedSpec},
    reason::ClusterReason,
};

/// The object to apply in one member cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// The full object: apiVersion, kind, metadata and the template's other fields.
    pub object: Value,
    /// The template had annotations, which were not propagated.
    pub dropped_annotations: bool,
    /// The template had finalizers, which were not propagated.
    pub dropped_finalizers: bool,
}

/// A template that cannot become a member object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `spec.template` is not an object.
    #[error("spec.template must be an object, not {found}")]
    NotAnObject {
        /// The JSON type found.
        found: &'static str,
    },
    /// `spec.template.metadata` is not an object.
    #[error("spec.template.metadata must be an object, not {found}")]
    MetadataNotAnObject {
        /// The JSON type found.
        found: &'static str,
    },
    /// `spec.template.metadata.labels` is not a map of strings.
    #[error("spec.template.metadata.labels must map strings to strings")]
    LabelsNotStrings,
    /// The template names another kind than the target type.
    #[error("spec.template.kind is {found:?} but this federated type propagates {expected:?}")]
    KindMismatch {
        /// The target kind.
        expected: String,
        /// The template's kind.
        found: String,
    },
    /// A namespaced target (or a FederatedNamespace) without a namespace.
    #[error("a federated {kind} must be namespaced, but the federated object has no namespace")]
    MissingNamespace {
        /// The target kind.
        kind: String,
    },
}

/// Computing the desired object failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DesiredError {
    /// The template is malformed (kubefed reason `ComputeResourceFailed`).
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The overrides could not be applied (kubefed reason `ApplyOverridesFailed`).
    #[error(transparent)]
    Overrides(#[from] OverrideError),
}

impl DesiredError {
    /// The kubefed per-cluster status reason for this error.
    pub fn reason(&self) -> ClusterReason {
        match self {
            DesiredError::Template(_) => ClusterReason::ComputeResourceFailed,
            DesiredError::Overrides(_) => ClusterReason::ApplyOverridesFailed,
        }
    }
}

/// Computes the object for `cluster` from a federated object's name, namespace and spec.
/// `overrides` are that cluster's operations (from [`overrides::by_cluster`]).
pub fn compute(
    target: &ApiResource,
    fed_name: &str,
    fed_namespace: Option<&str>,
    spec: &FederatedSpec,
    cluster: &str,
    overrides: Option<&[ClusterOverride]>,
) -> Result<Desired, DesiredError> {
    let mut template = match &spec.template {
        Value::Null => Map::new(),
        Value::Object(m) => m.clone(),
        other => {
            return Err(TemplateError::NotAnObject {
                found: json_type(other),
            }
            .into());
        }
    };
    if let Some(kind) = template.get("kind").filter(|k| !k.is_null())
        && kind.as_str() != Some(target.kind.as_str())
    {
        return Err(TemplateError::KindMismatch {
            expected: target.kind.clone(),
            found: kind
                .as_str()
                .map_or_else(|| kind.to_string(), str::to_string),
        }
        .into());
    }

    let template_meta = match template.remove("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(TemplateError::MetadataNotAnObject {
                found: json_type(&other),
            }
            .into());
        }
    };
    let dropped_annotations = non_empty(template_meta.get("annotations"));
    let dropped_finalizers = non_empty(template_meta.get("finalizers"));
    let mut labels = match template_meta.get("labels") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) if m.values().all(Value::is_string) => m.clone(),
        Some(_) => return Err(TemplateError::LabelsNotStrings.into()),
    };
    labels.insert(MANAGED_LABEL.into(), Value::String("true".into()));

    let meta = member_metadata(target, fed_name, fed_namespace, labels)?;

    template.remove("status");
    template.insert("apiVersion".into(), target.api_version().into());
    template.insert("kind".into(), target.kind.clone().into());
    template.insert("metadata".into(), Value::Object(meta));
    let mut object = Value::Object(template);

    if let Some(ops) = overrides {
        overrides::apply(&mut object, cluster, ops)?;
        ensure_managed_label(&mut object);
    }
    crate::defaults::fill_list_map_keys(target, &mut object);
    Ok(Desired {
        object,
        dropped_annotations,
        dropped_finalizers,
    })
}

/// The member object's metadata: its name (a Namespace is named after the federated
/// object's namespace), its namespace for namespaced kinds, and the labels.
fn member_metadata(
    target: &ApiResource,
    fed_name: &str,
    fed_namespace: Option<&str>,
    labels: Map<String, Value>,
) -> Result<Map<String, Value>, TemplateError> {
    let mut meta = Map::new();
    if target.kind == "Namespace" && target.group.is_empty() {
        let ns = fed_namespace.ok_or_else(|| TemplateError::MissingNamespace {
            kind: target.kind.clone(),
        })?;
        meta.insert("name".into(), ns.into());
    } else {
        meta.insert("name".into(), fed_name.into());
        if target.namespaced() {
            let ns = fed_namespace.ok_or_else(|| TemplateError::MissingNamespace {
                kind: target.kind.clone(),
            })?;
            meta.insert("namespace".into(), ns.into());
        }
    }
    meta.insert("labels".into(), Value::Object(labels));
    Ok(meta)
}

/// Puts the managed label back after overrides, whatever they did to `metadata.labels`.
fn ensure_managed_label(object: &mut Value) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let labels = meta
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if !labels.is_object() {
        *labels = Value::Object(Map::new());
    }
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(MANAGED_LABEL.into(), Value::String("true".into()));
    }
}

fn non_empty(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Object(m)) => !m.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::core::Scope;
    use flotilla_api::federated::OverrideOp;
    use serde_json::json;

    fn api(group: &str, version: &str, kind: &str, plural: &str, scope: Scope) -> ApiResource {
        ApiResource {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural_name: plural.into(),
            scope,
        }
    }

    fn deployments() -> ApiResource {
        api("apps", "v1", "Deployment", "deployments", Scope::Namespaced)
    }

    fn spec(template: Value) -> FederatedSpec {
        FederatedSpec {
            template,
            ..Default::default()
        }
    }

    fn nginx() -> Value {
        json!({
            "metadata": {"labels": {"app": "nginx"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "nginx"}}}
        })
    }

    fn compute_for(template: Value) -> Desired {
        compute(
            &deployments(),
            "web",
            Some("demo"),
            &spec(template),
            "member1",
            None,
        )
        .expect("computes")
    }

    #[test]
    fn the_desired_object_takes_type_name_and_namespace_from_the_federated_object() {
        let d = compute_for(nginx());
        assert_eq!(
            d.object,
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": "web",
                    "namespace": "demo",
                    "labels": {"app": "nginx", "kubefed.io/managed": "true"}
                },
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "nginx"}}}
            })
        );
        assert!(!d.dropped_annotations && !d.dropped_finalizers);
    }

    #[test]
    fn the_managed_label_is_added_even_without_template_labels() {
        let d = compute_for(json!({"spec": {}}));
        assert_eq!(
            d.object["metadata"]["labels"],
            json!({"kubefed.io/managed": "true"})
        );
    }

    #[test]
    fn a_template_managed_label_of_false_is_overwritten() {
        let d = compute_for(json!({"metadata": {"labels": {"kubefed.io/managed": "false"}}}));
        assert_eq!(
            d.object["metadata"]["labels"]["kubefed.io/managed"],
            json!("true")
        );
    }

    #[test]
    fn template_name_and_namespace_are_ignored() {
        let d = compute_for(json!({"metadata": {"name": "other", "namespace": "elsewhere"}}));
        assert_eq!(d.object["metadata"]["name"], json!("web"));
        assert_eq!(d.object["metadata"]["namespace"], json!("demo"));
    }

    #[test]
    fn an_absent_or_null_template_is_an_empty_object() {
        let d = compute_for(Value::Null);
        assert_eq!(
            d.object,
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "demo", "labels": {"kubefed.io/managed": "true"}}
            })
        );
    }

    #[test]
    fn a_template_that_is_not_an_object_is_a_template_error() {
        let err = compute(
            &deployments(),
            "web",
            Some("demo"),
            &spec(json!([1, 2])),
            "member1",
            None,
        )
        .expect_err("array template");
        assert_eq!(err.reason(), ClusterReason::ComputeResourceFailed);
        assert_eq!(
            err.to_string(),
            "spec.template must be an object, not an array"
        );
    }

    #[test]
    fn template_metadata_that_is_not_an_object_is_a_template_error() {
        let err = compute(
            &deployments(),
            "web",
            Some("demo"),
            &spec(json!({"metadata": "x"})),
            "member1",
            None,
        )
        .expect_err("bad metadata");
        assert!(matches!(
            err,
            DesiredError::Template(TemplateError::MetadataNotAnObject { .. })
        ));
    }

    #[test]
    fn labels_that_are_not_strings_are_a_template_error() {
        let err = compute(
            &deployments(),
            "web",
            Some("demo"),
            &spec(json!({"metadata": {"labels": {"replicas": 3}}})),
            "member1",
            None,
        )
        .expect_err("bad labels");
        assert_eq!(err, DesiredError::Template(TemplateError::LabelsNotStrings));
    }

    #[test]
    fn a_template_of_another_kind_is_a_template_error() {
        let err = compute(
            &deployments(),
            "web",
            Some("demo"),
            &spec(json!({"kind": "Service"})),
            "member1",
            None,
        )
        .expect_err("kind mismatch");
        assert_eq!(
            err.to_string(),
            "spec.template.kind is \"Service\" but this federated type propagates \"Deployment\""
        );
    }

    #[test]
    fn the_template_api_version_is_replaced_by_the_target_version() {
        let d = compute_for(json!({"apiVersion": "apps/v1beta1", "kind": "Deployment"}));
        assert_eq!(d.object["apiVersion"], json!("apps/v1"));
        assert_eq!(d.object["kind"], json!("Deployment"));
    }

    #[test]
    fn template_annotations_are_dropped_and_reported() {
        let d = compute_for(json!({"metadata": {"annotations": {"a": "b"}}}));
        assert!(d.dropped_annotations);
        assert!(!d.dropped_finalizers);
        assert_eq!(d.object["metadata"].get("annotations"), None);
    }

    #[test]
    fn empty_template_annotations_are_not_reported() {
        let d = compute_for(json!({"metadata": {"annotations": {}, "finalizers": []}}));
        assert!(!d.dropped_annotations && !d.dropped_finalizers);
    }

    #[test]
    fn template_finalizers_are_dropped_and_reported() {
        let d = compute_for(json!({"metadata": {"finalizers": ["example.com/keep"]}}));
        assert!(d.dropped_finalizers);
        assert_eq!(d.object["metadata"].get("finalizers"), None);
    }

    #[test]
    fn server_set_fields_and_status_are_dropped() {
        let d = compute_for(json!({
            "metadata": {
                "resourceVersion": "12", "uid": "u", "creationTimestamp": "2024-01-01T00:00:00Z",
                "managedFields": [{}], "generation": 3, "selfLink": "/x",
                "ownerReferences": [{"kind": "X"}], "generateName": "web-"
            },
            "spec": {"replicas": 1},
            "status": {"replicas": 1}
        }));
        assert_eq!(
            d.object["metadata"],
            json!({"name": "web", "namespace": "demo", "labels": {"kubefed.io/managed": "true"}})
        );
        assert_eq!(d.object.get("status"), None);
        assert_eq!(d.object["spec"], json!({"replicas": 1}));
    }

    #[test]
    fn a_cluster_scoped_target_has_no_namespace() {
        let roles = api(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            Scope::Cluster,
        );
        let d = compute(
            &roles,
            "reader",
            None,
            &spec(json!({"rules": []})),
            "member1",
            None,
        )
        .expect("computes");
        assert_eq!(
            d.object["metadata"],
            json!({"name": "reader", "labels": {"kubefed.io/managed": "true"}})
        );
        assert_eq!(
            d.object["apiVersion"],
            json!("rbac.authorization.k8s.io/v1")
        );
    }

    #[test]
    fn a_federated_namespace_propagates_a_namespace_named_after_its_namespace() {
        let namespaces = api("", "v1", "Namespace", "namespaces", Scope::Cluster);
        let d = compute(
            &namespaces,
            "demo",
            Some("demo"),
            &FederatedSpec::default(),
            "member1",
            None,
        )
        .expect("computes");
        assert_eq!(
            d.object,
            json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "demo", "labels": {"kubefed.io/managed": "true"}}
            })
        );
    }

    #[test]
    fn a_federated_namespace_without_a_namespace_is_a_template_error() {
        let namespaces = api("", "v1", "Namespace", "namespaces", Scope::Cluster);
        let err = compute(
            &namespaces,
            "demo",
            None,
            &FederatedSpec::default(),
            "member1",
            None,
        )
        .expect_err("no namespace");
        assert!(matches!(
            err,
            DesiredError::Template(TemplateError::MissingNamespace { .. })
        ));
    }

    #[test]
    fn a_namespaced_target_without_a_namespace_is_a_template_error() {
        let err = compute(&deployments(), "web", None, &spec(nginx()), "member1", None)
            .expect_err("no namespace");
        assert_eq!(
            err.to_string(),
            "a federated Deployment must be namespaced, but the federated object has no namespace"
        );
    }

    #[test]
    fn overrides_apply_after_the_template_rules() {
        let ops = [
            ClusterOverride {
                op: None,
                path: "/spec/replicas".into(),
                value: Some(json!(5)),
            },
            ClusterOverride {
                op: Some(OverrideOp::Add),
                path: "/metadata/annotations".into(),
                value: Some(json!({"team": "a"})),
            },
        ];
        let d = compute(
            &deployments(),
            "web",
            Some("demo"),
            &spec(nginx()),
            "member2",
            Some(&ops),
        )
        .expect("computes");
        assert_eq!(d.object["spec"]["replicas"], json!(5));
        assert_eq!(d.object["metadata"]["annotations"], json!({"team": "a"}));
    }

    #[test]
    fn an_override_replacing_the_labels_keeps_the_managed_label() {
        let ops = [ClusterOverride {
            op: None,
            path: "/metadata/labels".into(),
            value: Some(json!({"app": "other"})),
        }];
        let d = compute(
            &deployments(),
            "web",
            Some("demo"),
            &spec(nginx()),
            "member1",
            Some(&ops),
        )
        .expect("computes");
        assert_eq!(
            d.object["metadata"]["labels"],
            json!({"app": "other", "kubefed.io/managed": "true"})
        );
    }

    #[test]
    fn a_failing_override_is_an_overrides_error() {
        let ops = [ClusterOverride {
            op: None,
            path: "/spec/replicaz".into(),
            value: Some(json!(5)),
        }];
        let err = compute(
            &deployments(),
            "web",
            Some("demo"),
            &spec(nginx()),
            "member2",
            Some(&ops),
        )
        .expect_err("bad path");
        assert_eq!(err.reason(), ClusterReason::ApplyOverridesFailed);
        assert_eq!(
            err.to_string(),
            "cluster \"member2\": override replace /spec/replicaz: path does not exist"
        );
    }

    #[test]
    fn retain_replicas_still_carries_the_overridden_replicas_for_creation() {
        let mut s = spec(nginx());
        s.retain_replicas = true;
        let ops = [ClusterOverride {
            op: None,
            path: "/spec/replicas".into(),
            value: Some(json!(5)),
        }];
        let d = compute(
            &deployments(),
            "web",
            Some("demo"),
            &s,
            "member1",
            Some(&ops),
        )
        .expect("an override of replicas still applies");
        assert_eq!(d.object["spec"]["replicas"], json!(5));
        assert_eq!(
            d.object["spec"]["selector"],
            json!({"matchLabels": {"app": "nginx"}})
        );
    }

    #[test]
    fn without_retain_replicas_replicas_are_propagated() {
        assert_eq!(compute_for(nginx()).object["spec"]["replicas"], json!(3));
    }
}
