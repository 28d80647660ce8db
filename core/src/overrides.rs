//! Per-cluster overrides: validating `spec.overrides` and applying one cluster's
//! operations to its desired object as JSON Patch (RFC 6902; kubefed's `util/overrides.go`).
//!
//! Validation ([`by_cluster`], and again in [`apply`]) rejects, with a message naming the
//! cluster and the path:
//! - a cluster listed twice, or an empty cluster name;
//! - within one cluster, the same path twice;
//! - a path that is neither a JSON pointer (starts with `/`; `~` only as `~0` / `~1`) nor
//!   kubefed alpha's dotted field path (`spec.replicas`, converted to the pointer by
//!   [`crate::override_path`]);
//! - the paths kubefed forbids, `/metadata/name`, `/metadata/namespace`,
//!   `/metadata/generateName` and `/kind`, and also `/apiVersion` and `/metadata` as a
//!   whole: the identity and type of a propagated object come from the federated object and
//!   its FederatedTypeConfig, and an override must not be able to rename or retype it;
//! - `add` or `replace` without a `value` (a JSON `null` value reads as no value).
//!
//! `op` defaults to `replace`. Operations of one cluster apply in order; if one fails, the
//! object is left as it was.

use std::collections::{BTreeMap, BTreeSet};

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::Value;

use crate::override_path::to_pointer;
use flotilla_api::federated::{ClusterOverride, ClusterOverrides, OverrideOp};

/// Paths no override may touch.
pub const FORBIDDEN_PATHS: &[&str] = &[
    "/metadata/name",
    "/metadata/namespace",
    "/metadata/generateName",
    "/kind",
    "/apiVersion",
    "/metadata",
];

/// An invalid override, or one that could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    /// An entry of `spec.overrides` has an empty `clusterName`.
    #[error("overrides: an entry has an empty clusterName")]
    EmptyClusterName,
    /// Two entries of `spec.overrides` name the same cluster.
    #[error("cluster {cluster:?} is listed more than once in overrides")]
    DuplicateCluster {
        /// The cluster.
        cluster: String,
    },
    /// Two operations of one cluster have the same path.
    #[error("cluster {cluster:?}: override path {path} is listed more than once")]
    DuplicatePath {
        /// The cluster.
        cluster: String,
        /// The path.
        path: String,
    },
    /// The path is one that must not be overridden.
    #[error(
        "cluster {cluster:?}: override {op} {path}: this path may not be overridden (name, namespace, kind and apiVersion come from the federated object)"
    )]
    ForbiddenPath {
        /// The cluster.
        cluster: String,
        /// The operation.
        op: &'static str,
        /// The path.
        path: String,
    },
    /// The path is not a JSON pointer.
    #[error("cluster {cluster:?}: override {op} {path:?}: invalid path: {reason}")]
    InvalidPath {
        /// The cluster.
        cluster: String,
        /// The operation.
        op: &'static str,
        /// The path as written.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `add` or `replace` without a value.
    #[error("cluster {cluster:?}: override {op} {path}: a value is required")]
    MissingValue {
        /// The cluster.
        cluster: String,
        /// The operation.
        op: &'static str,
        /// The path.
        path: String,
    },
    /// The operation does not fit the object.
    #[error("cluster {cluster:?}: override {op} {path}: {reason}")]
    Failed {
        /// The cluster.
        cluster: String,
        /// The operation.
        op: &'static str,
        /// The path.
        path: String,
        /// Why it does not apply, for humans.
        reason: String,
    },
}

/// The JSON patch name of an override operation (`replace` when unset).
pub fn op_name(op: Option<OverrideOp>) -> &'static str {
    match op.unwrap_or_default() {
        OverrideOp::Add => "add",
        OverrideOp::Remove => "remove",
        OverrideOp::Replace => "replace",
    }
}

/// Validates `spec.overrides` and groups the operations by cluster name.
pub fn by_cluster(
    overrides: &[ClusterOverrides],
) -> Result<BTreeMap<String, Vec<ClusterOverride>>, OverrideError> {
    let mut out = BTreeMap::new();
    for entry in overrides {
        if entry.cluster_name.is_empty() {
            return Err(OverrideError::EmptyClusterName);
        }
        if out.contains_key(&entry.cluster_name) {
            return Err(OverrideError::DuplicateCluster {
                cluster: entry.cluster_name.clone(),
            });
        }
        validate(&entry.cluster_name, &entry.cluster_overrides)?;
        out.insert(entry.cluster_name.clone(), entry.cluster_overrides.clone());
    }
    Ok(out)
}

/// Checks one cluster's operations; returns them as JSON Patch operations.
fn validate(cluster: &str, ops: &[ClusterOverride]) -> Result<Vec<PatchOperation>, OverrideError> {
    let mut seen = BTreeSet::new();
    let mut patch = Vec::with_capacity(ops.len());
    for o in ops {
        let op = op_name(o.op);
        let invalid = |reason: String| OverrideError::InvalidPath {
            cluster: cluster.into(),
            op,
            path: o.path.clone(),
            reason,
        };
        // kubefed's alpha wrote `spec.replicas`; from here on only the pointer counts, so
        // the two spellings of one path are one path.
        let converted = to_pointer(&o.path).map_err(|e| invalid(e.to_string()))?;
        let pointer = PointerBuf::parse(&converted).map_err(|e| invalid(e.to_string()))?;
        let path = pointer.as_str().to_string();
        let path = path.as_str();
        if FORBIDDEN_PATHS.contains(&path) {
            return Err(OverrideError::ForbiddenPath {
                cluster: cluster.into(),
                op,
                path: path.into(),
            });
        }
        if !seen.insert(path.to_string()) {
            return Err(OverrideError::DuplicatePath {
                cluster: cluster.into(),
                path: path.into(),
            });
        }
        let value = || {
            o.value.clone().ok_or_else(|| OverrideError::MissingValue {
                cluster: cluster.into(),
                op,
                path: path.into(),
            })
        };
        patch.push(match o.op.unwrap_or_default() {
            OverrideOp::Add => PatchOperation::Add(AddOperation {
                path: pointer,
                value: value()?,
            }),
            OverrideOp::Replace => PatchOperation::Replace(ReplaceOperation {
                path: pointer,
                value: value()?,
            }),
            OverrideOp::Remove => PatchOperation::Remove(RemoveOperation { path: pointer }),
        });
    }
    Ok(patch)
}

/// Applies one cluster's override operations to `obj`, in order. On error `obj` is unchanged.
pub fn apply(obj: &mut Value, cluster: &str, ops: &[ClusterOverride]) -> Result<(), OverrideError> {
    let patch = validate(cluster, ops)?;
    if patch.is_empty() {
        return Ok(());
    }
    let mut work = obj.clone();
    for (o, p) in ops.iter().zip(&patch) {
        if json_patch::patch(&mut work, std::slice::from_ref(p)).is_err() {
            return Err(OverrideError::Failed {
                cluster: cluster.into(),
                op: op_name(o.op),
                path: o.path.clone(),
                reason: explain(&work, p),
            });
        }
    }
    *obj = work;
    Ok(())
}

/// Why `p` could not be applied to `doc`, in words (json-patch only says "path is invalid").
fn explain(doc: &Value, p: &PatchOperation) -> String {
    let path = p.path();
    let Some((parent, last)) = path.split_back() else {
        return "the path is invalid".into();
    };
    let describe_parent = |parent_value: &Value| match parent_value {
        Value::Array(a) => format!(
            "{:?} is not a valid index into an array of {} element(s)",
            last.decoded(),
            a.len()
        ),
        Value::Object(_) => "path does not exist".into(),
        other => format!("{} is a {}, not an object or array", parent, kind(other)),
    };
    match doc.pointer(parent.as_str()) {
        None => match p {
            PatchOperation::Add(_) => format!("parent {parent} does not exist"),
            _ => "path does not exist".into(),
        },
        Some(v) => describe_parent(v),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(op: Option<OverrideOp>, path: &str, value: Option<Value>) -> ClusterOverride {
        ClusterOverride {
            op,
            path: path.into(),
            value,
        }
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [
                {"name": "web", "image": "nginx:1.25"}
            ]}}}
        })
    }

    fn entry(cluster: &str, ops: Vec<ClusterOverride>) -> ClusterOverrides {
        ClusterOverrides {
            cluster_name: cluster.into(),
            cluster_overrides: ops,
        }
    }

    #[test]
    fn replace_is_the_default_operation() {
        let mut obj = deployment();
        apply(
            &mut obj,
            "member2",
            &[op(None, "/spec/replicas", Some(json!(5)))],
        )
        .expect("applies");
        assert_eq!(obj["spec"]["replicas"], json!(5));
    }

    #[test]
    fn explicit_replace_replaces_the_value() {
        let mut obj = deployment();
        let ops = [op(
            Some(OverrideOp::Replace),
            "/spec/template/spec/containers/0/image",
            Some(json!("nginx:1.26")),
        )];
        apply(&mut obj, "member1", &ops).expect("applies");
        assert_eq!(
            obj["spec"]["template"]["spec"]["containers"][0]["image"],
            json!("nginx:1.26")
        );
    }

    #[test]
    fn add_creates_a_new_field() {
        let mut obj = deployment();
        let ops = [op(
            Some(OverrideOp::Add),
            "/metadata/labels/env",
            Some(json!("prod")),
        )];
        apply(&mut obj, "member1", &ops).expect("applies");
        assert_eq!(obj["metadata"]["labels"]["env"], json!("prod"));
    }

    #[test]
    fn add_with_a_dash_appends_to_an_array() {
        let mut obj = deployment();
        let ops = [op(
            Some(OverrideOp::Add),
            "/spec/template/spec/containers/-",
            Some(json!({"name": "sidecar", "image": "busybox"})),
        )];
        apply(&mut obj, "member1", &ops).expect("applies");
        assert_eq!(
            obj["spec"]["template"]["spec"]["containers"][1]["name"],
            json!("sidecar")
        );
    }

    #[test]
    fn remove_deletes_the_field() {
        let mut obj = deployment();
        apply(
            &mut obj,
            "member1",
            &[op(Some(OverrideOp::Remove), "/metadata/labels/app", None)],
        )
        .expect("applies");
        assert_eq!(obj["metadata"]["labels"], json!({}));
    }

    #[test]
    fn operations_apply_in_order() {
        let mut obj = deployment();
        let ops = [
            op(
                Some(OverrideOp::Add),
                "/metadata/annotations",
                Some(json!({})),
            ),
            op(
                Some(OverrideOp::Add),
                "/metadata/annotations/team",
                Some(json!("a")),
            ),
        ];
        apply(&mut obj, "member1", &ops).expect("applies");
        assert_eq!(obj["metadata"]["annotations"], json!({"team": "a"}));
    }

    #[test]
    fn path_segments_are_unescaped() {
        let mut obj = deployment();
        let ops = [op(
            Some(OverrideOp::Add),
            "/metadata/labels/example.com~1tier",
            Some(json!("gold")),
        )];
        apply(&mut obj, "member1", &ops).expect("applies");
        assert_eq!(obj["metadata"]["labels"]["example.com/tier"], json!("gold"));
    }

    #[test]
    fn replacing_a_missing_path_fails_naming_cluster_op_path_and_reason() {
        let mut obj = deployment();
        let err = apply(
            &mut obj,
            "member2",
            &[op(None, "/spec/replicaz", Some(json!(5)))],
        )
        .expect_err("missing path");
        assert_eq!(
            err.to_string(),
            "cluster \"member2\": override replace /spec/replicaz: path does not exist"
        );
    }

    #[test]
    fn removing_a_missing_path_fails() {
        let mut obj = deployment();
        let err = apply(
            &mut obj,
            "member1",
            &[op(Some(OverrideOp::Remove), "/spec/paused", None)],
        )
        .expect_err("missing path");
        assert_eq!(
            err.to_string(),
            "cluster \"member1\": override remove /spec/paused: path does not exist"
        );
    }

    #[test]
    fn adding_under_a_missing_parent_fails_naming_the_parent() {
        let mut obj = deployment();
        let err = apply(
            &mut obj,
            "member1",
            &[op(
                Some(OverrideOp::Add),
                "/metadata/annotations/team",
                Some(json!("a")),
            )],
        )
        .expect_err("no annotations map");
        assert_eq!(
            err.to_string(),
            "cluster \"member1\": override add /metadata/annotations/team: parent /metadata/annotations does not exist"
        );
    }

    #[test]
    fn an_index_out_of_range_is_explained() {
        let mut obj = deployment();
        let err = apply(
            &mut obj,
            "member1",
            &[op(
                None,
                "/spec/template/spec/containers/4/image",
                Some(json!("x")),
            )],
        )
        .expect_err("out of range");
        let msg = err.to_string();
        assert!(msg.contains("path does not exist"), "{msg}");
        let err = apply(
            &mut obj,
            "member1",
            &[op(
                Some(OverrideOp::Add),
                "/spec/template/spec/containers/7",
                Some(json!({})),
            )],
        )
        .expect_err("out of range");
        let msg = err.to_string();
        assert!(
            msg.contains("\"7\" is not a valid index into an array of 1 element(s)"),
            "{msg}"
        );
    }

    #[test]
    fn a_path_through_a_scalar_is_explained() {
        let mut obj = deployment();
        let err = apply(
            &mut obj,
            "member1",
            &[op(
                Some(OverrideOp::Add),
                "/spec/replicas/x",
                Some(json!(1)),
            )],
        )
        .expect_err("scalar parent");
        assert!(
            err.to_string()
                .ends_with("/spec/replicas is a number, not an object or array"),
            "{err}"
        );
    }

    #[test]
    fn a_failed_operation_leaves_the_object_unchanged() {
        let mut obj = deployment();
        let before = obj.clone();
        let ops = [
            op(None, "/spec/replicas", Some(json!(9))),
            op(None, "/spec/nope", Some(json!(1))),
        ];
        apply(&mut obj, "member1", &ops).expect_err("second op fails");
        assert_eq!(obj, before);
    }

    #[test]
    fn overrides_are_grouped_by_cluster() {
        let grouped = by_cluster(&[
            entry("member1", vec![op(None, "/spec/replicas", Some(json!(1)))]),
            entry("member2", vec![]),
        ])
        .expect("valid");
        assert_eq!(
            grouped.keys().map(String::as_str).collect::<Vec<_>>(),
            ["member1", "member2"]
        );
        assert_eq!(grouped["member1"].len(), 1);
    }

    #[test]
    fn a_cluster_listed_twice_is_rejected() {
        let err = by_cluster(&[entry("member1", vec![]), entry("member1", vec![])])
            .expect_err("duplicate");
        assert_eq!(
            err.to_string(),
            "cluster \"member1\" is listed more than once in overrides"
        );
    }

    #[test]
    fn an_empty_cluster_name_is_rejected() {
        let err = by_cluster(&[entry("", vec![])]).expect_err("empty");
        assert_eq!(err, OverrideError::EmptyClusterName);
    }

    #[test]
    fn a_duplicate_path_within_a_cluster_is_rejected() {
        let err = by_cluster(&[entry(
            "member1",
            vec![
                op(None, "/spec/replicas", Some(json!(1))),
                op(Some(OverrideOp::Remove), "/spec/replicas", None),
            ],
        )])
        .expect_err("duplicate");
        assert_eq!(
            err.to_string(),
            "cluster \"member1\": override path /spec/replicas is listed more than once"
        );
    }

    #[test]
    fn the_same_path_in_two_clusters_is_fine() {
        let ops = vec![op(None, "/spec/replicas", Some(json!(1)))];
        by_cluster(&[entry("member1", ops.clone()), entry("member2", ops)]).expect("valid");
    }

    #[test]
    fn identity_and_type_paths_are_forbidden() {
        for path in FORBIDDEN_PATHS {
            let err = by_cluster(&[entry("member1", vec![op(None, path, Some(json!("x")))])])
                .expect_err("forbidden");
            assert!(matches!(err, OverrideError::ForbiddenPath { .. }), "{path}");
            let msg = err.to_string();
            assert!(
                msg.starts_with(&format!("cluster \"member1\": override replace {path}: ")),
                "{msg}"
            );
            assert!(msg.contains("may not be overridden"), "{msg}");
        }
    }

    #[test]
    fn labels_and_annotations_under_metadata_are_allowed() {
        by_cluster(&[entry(
            "member1",
            vec![
                op(None, "/metadata/labels", Some(json!({}))),
                op(
                    Some(OverrideOp::Add),
                    "/metadata/annotations",
                    Some(json!({})),
                ),
            ],
        )])
        .expect("valid");
    }

    #[test]
    fn a_dotted_path_applies_like_its_json_pointer() {
        let mut obj = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"image": "a"}]}}}});
        let ops = vec![
            op(None, "spec.replicas", Some(json!(5))),
            op(
                None,
                "spec.template.spec.containers[0].image",
                Some(json!("b")),
            ),
        ];
        apply(&mut obj, "cluster2", &ops).expect("applies");
        assert_eq!(obj["spec"]["replicas"], json!(5));
        assert_eq!(
            obj["spec"]["template"]["spec"]["containers"][0]["image"],
            json!("b")
        );
    }

    #[test]
    fn a_dotted_and_a_pointer_spelling_of_one_path_are_a_duplicate() {
        let err = by_cluster(&[entry(
            "cluster2",
            vec![
                op(None, "spec.replicas", Some(json!(5))),
                op(None, "/spec/replicas", Some(json!(6))),
            ],
        )])
        .expect_err("duplicate");
        assert!(matches!(err, OverrideError::DuplicatePath { .. }), "{err}");
    }

    #[test]
    fn a_dotted_path_into_a_missing_field_fails_and_leaves_the_object() {
        let mut obj = json!({"spec": {"replicas": 3}});
        let before = obj.clone();
        let err = apply(
            &mut obj,
            "cluster2",
            &[op(None, "spec.strategy.type", Some(json!("Recreate")))],
        )
        .expect_err("missing");
        assert!(
            err.to_string()
                .starts_with("cluster \"cluster2\": override replace spec.strategy.type:"),
            "{err}"
        );
        assert_eq!(obj, before);
    }

    #[test]
    fn a_dotted_path_to_the_name_is_forbidden() {
        let err = by_cluster(&[entry(
            "c",
            vec![op(None, "metadata.name", Some(json!("x")))],
        )])
        .expect_err("forbidden");
        assert!(matches!(err, OverrideError::ForbiddenPath { .. }), "{err}");
    }

    #[test]
    fn a_path_that_is_neither_a_pointer_nor_dotted_is_rejected() {
        let err = by_cluster(&[entry(
            "member1",
            vec![op(None, "spec/replicas", Some(json!(1)))],
        )])
        .expect_err("relative");
        let msg = err.to_string();
        assert!(
            msg.starts_with(
                "cluster \"member1\": override replace \"spec/replicas\": invalid path"
            ),
            "{msg}"
        );
        assert!(msg.contains("JSON pointer starting with '/'"), "{msg}");
    }

    #[test]
    fn a_path_with_a_bad_escape_is_rejected() {
        let err = by_cluster(&[entry(
            "member1",
            vec![op(None, "/metadata/labels/a~2b", Some(json!("x")))],
        )])
        .expect_err("bad escape");
        assert!(matches!(err, OverrideError::InvalidPath { .. }), "{err}");
    }

    #[test]
    fn add_and_replace_without_a_value_are_rejected() {
        for o in [Some(OverrideOp::Add), Some(OverrideOp::Replace), None] {
            let err = by_cluster(&[entry("member2", vec![op(o, "/spec/replicas", None)])])
                .expect_err("no value");
            assert_eq!(
                err.to_string(),
                format!(
                    "cluster \"member2\": override {} /spec/replicas: a value is required",
                    op_name(o)
                )
            );
        }
    }

    #[test]
    fn remove_needs_no_value() {
        by_cluster(&[entry(
            "member1",
            vec![op(Some(OverrideOp::Remove), "/spec/replicas", None)],
        )])
        .expect("valid");
    }

    #[test]
    fn apply_validates_too() {
        let mut obj = deployment();
        let err = apply(
            &mut obj,
            "member1",
            &[op(None, "/metadata/name", Some(json!("other")))],
        )
        .expect_err("forbidden");
        assert!(matches!(err, OverrideError::ForbiddenPath { .. }));
        assert_eq!(obj, deployment());
    }

    #[test]
    fn no_operations_leave_the_object_as_it_is() {
        let mut obj = deployment();
        apply(&mut obj, "member1", &[]).expect("nothing to do");
        assert_eq!(obj, deployment());
    }
}
