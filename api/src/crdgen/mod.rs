//! CustomResourceDefinitions: the derived core CRDs (KubeFedCluster, KubeFedConfig,
//! FederatedTypeConfig, ReplicaSchedulingPreference, ServiceAccountImport, ClusterProfile), the generated Federated&lt;Kind&gt; CRDs
//! and their FederatedTypeConfigs, and their YAML rendering for `config/` (written and
//! drift-checked by the `crdgen` binary).
//!
//! Federated&lt;Kind&gt; CRDs follow `kubefedctl enable`: group `types.kubefed.io/v1beta1`,
//! kind `Federated<Kind>`, plural `federated<plural>`, short names `f<short>`, the target's
//! scope except that FederatedNamespace is namespaced. Beyond kubefed they require
//! `spec.template` (so a manifest missing it is rejected by the API server, naming the
//! field), have printer columns for the `Propagation` condition (workload types: first
//! the clusters and pods ready, from `status.aggregated`; every type: a progressive
//! rollout's progress, from `status.rollout`), and belong to the
//! categories `federated` and `kubefed` (`kubectl get federated`).
//!
//! Schemas are generated with the settings `kube`'s derive uses (inline subschemas,
//! structural rewrites), so every CRD here is a structural schema for `apiextensions.k8s.io/v1`.

mod error;
pub(crate) mod federated;
mod optional;

pub use self::error::CrdGenError;
pub(crate) use self::federated::polish;
pub use self::federated::{
    TargetType, default_target_types, federated_api_resource, federated_crd, federated_type_config,
    schema_of, try_federated_crd,
};
pub use self::optional::{KUSTOMIZATION_FILE, OptionalApi};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

use crate::DEFAULT_NAMESPACE;
use crate::about::{API_APPROVAL, API_APPROVED_ANNOTATION, ClusterProperty};
use crate::core::{FederatedTypeConfig, KubeFedCluster, KubeFedConfig};
use crate::inventory::ClusterProfile;
use crate::multicluster::ServiceAccountImport;
use crate::scheduling::ReplicaSchedulingPreference;
use crate::work::{AppliedWork, Work};

/// The CRDs of the control plane itself: KubeFedCluster, KubeFedConfig,
/// FederatedTypeConfig, ReplicaSchedulingPreference, ServiceAccountImport (Flotilla's group;
/// Admiralty's is [`OptionalApi::Admiralty`]), the Cluster
/// Inventory API's ClusterProfile and PlacementDecision, the Multi-Cluster Services API's
/// ServiceExport and ServiceImport (which members need too: `flotilla join` installs them
/// there), the Work API's Work and AppliedWork (pull mode) and the ServiceExportReport
/// (Multi-Cluster Services across Pull clusters).
pub fn core_crds() -> Vec<CustomResourceDefinition> {
    vec![
        polish(KubeFedCluster::crd()),
        polish(KubeFedConfig::crd()),
        polish(FederatedTypeConfig::crd()),
        polish(ReplicaSchedulingPreference::crd()),
        polish(ServiceAccountImport::crd()),
        polish(ClusterProfile::crd()),
        crate::placement_decision::crd(),
        polish(Work::crd()),
        polish(crate::mcs_report::ServiceExportReport::crd()),
        applied_work_crd(),
    ]
    .into_iter()
    .chain(policy_crds())
    .chain(mcs_crds())
    .collect()
}

/// Flotilla's propagation and override policies (`policy.flotilla.io`): the second
/// resource model, plain manifests selected by policies.
pub fn policy_crds() -> Vec<CustomResourceDefinition> {
    use crate::policy::{
        ClusterOverridePolicy, ClusterPropagationPolicy, OverridePolicy, PropagationPolicy,
    };
    vec![
        polish(PropagationPolicy::crd()),
        polish(ClusterPropagationPolicy::crd()),
        polish(OverridePolicy::crd()),
        polish(ClusterOverridePolicy::crd()),
    ]
}

/// The Multi-Cluster Services API's CRDs (ServiceExport, ServiceImport; v1beta1 stored,
/// v1alpha1 served), as installed into the host and every member.
pub fn mcs_crds() -> Vec<CustomResourceDefinition> {
    crate::mcs::mcs_crds().into_iter().map(polish).collect()
}

/// CRDs Flotilla reads in member clusters, for users to install there (`config/member-crds/`):
/// the About API's ClusterProperty.
pub fn member_crds() -> Vec<CustomResourceDefinition> {
    let mut about = polish(ClusterProperty::crd());
    about.metadata.annotations = Some(
        [(
            API_APPROVED_ANNOTATION.to_string(),
            API_APPROVAL.to_string(),
        )]
        .into_iter()
        .collect(),
    );
    vec![about]
}

/// The AppliedWork CRD, for a Pull member cluster (its agent's records).
pub fn applied_work_crd() -> CustomResourceDefinition {
    polish(AppliedWork::crd())
}

/// What `config/` installs (`config/crds/`): the core CRDs and the
/// `types.kubefed.io/v1beta1` Federated&lt;Kind&gt; CRDs of [`default_target_types`]. No two
/// of them answer to one kubectl name (`crate::kubectl_names`).
pub fn default_crds() -> Vec<CustomResourceDefinition> {
    let mut crds = core_crds();
    crds.extend(
        default_target_types()
            .iter()
            .map(|t| federated_crd(t, None)),
    );
    crds
}

/// Every CRD Flotilla serves in the host: [`default_crds`] and those of every
/// [`OptionalApi`] (kubefed's alpha twins of the default types, Admiralty's
/// ServiceAccountImport).
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    let mut crds = default_crds();
    crds.extend(OptionalApi::ALL.into_iter().flat_map(OptionalApi::crds));
    crds
}

/// A file under `config/` that `crdgen` writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedFile {
    /// Path relative to the repository root, with `/` separators.
    pub path: String,
    /// The file's contents.
    pub contents: String,
}

/// Directory of the CRD files, relative to the repository root.
pub const CRDS_DIR: &str = "config/crds";
/// Directory of the CRDs for member clusters, relative to the repository root.
pub const MEMBER_CRDS_DIR: &str = "config/member-crds";
/// Directory of the default FederatedTypeConfigs, relative to the repository root.
pub const DEFAULT_TYPES_DIR: &str = "config/default-types";

/// Every directory `crdgen` writes into (and owns every YAML file of).
pub fn generated_dirs() -> Vec<&'static str> {
    [CRDS_DIR, MEMBER_CRDS_DIR, DEFAULT_TYPES_DIR]
        .into_iter()
        .chain(OptionalApi::ALL.map(OptionalApi::dir))
        .collect()
}

/// The directories of generated CRD files: [`CRDS_DIR`], [`MEMBER_CRDS_DIR`] and each
/// [`OptionalApi`]'s (whose [`KUSTOMIZATION_FILE`] is not a CRD).
pub fn crd_dirs() -> Vec<&'static str> {
    [CRDS_DIR, MEMBER_CRDS_DIR]
        .into_iter()
        .chain(OptionalApi::ALL.map(OptionalApi::dir))
        .collect()
}

const HEADER: &str = "# Generated by `cargo run -p flotilla-api --bin crdgen`; do not edit.\n";

fn yaml<T: serde::Serialize>(path: &str, value: &T) -> Result<GeneratedFile, CrdGenError> {
    yaml_with_comment(path, "", value)
}

/// `value` as YAML under the generated-file header and `comment` (whole `#` lines).
fn yaml_with_comment<T: serde::Serialize>(
    path: &str,
    comment: &str,
    value: &T,
) -> Result<GeneratedFile, CrdGenError> {
    let body = serde_saphyr::to_string(value).map_err(|source| CrdGenError::Yaml {
        path: path.into(),
        source,
    })?;
    Ok(GeneratedFile {
        path: path.into(),
        contents: format!("{HEADER}{comment}{body}"),
    })
}

/// The file name of a CRD under `config/crds/`: `<group>_<plural>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// Everything `crdgen` writes: one file per CRD of [`default_crds`] in `config/crds/`, the
/// kustomize component of each [`OptionalApi`] (its CRDs and `kustomization.yaml`) in its
/// directory, and one FederatedTypeConfig per default target type (namespace
/// `kube-federation-system`) in `config/default-types/`. `config/crds/` deliberately has no
/// `kustomization.yaml`: `kubectl apply -f config/crds/` would try to apply it as a resource
/// and fail.
pub fn generated_files() -> Result<Vec<GeneratedFile>, CrdGenError> {
    let mut files = Vec::new();
    for crd in default_crds() {
        files.push(yaml(&format!("{CRDS_DIR}/{}", crd_file_name(&crd)), &crd)?);
    }
    for api in OptionalApi::ALL {
        files.extend(api.component_files()?);
    }
    for crd in member_crds() {
        files.push(yaml(
            &format!("{MEMBER_CRDS_DIR}/{}", crd_file_name(&crd)),
            &crd,
        )?);
    }
    for target in default_target_types() {
        let ftc = federated_type_config(&target, DEFAULT_NAMESPACE);
        files.push(yaml(
            &format!("{DEFAULT_TYPES_DIR}/{}.yaml", target.api.qualified_name()),
            &ftc,
        )?);
    }
    Ok(files)
}

/// Whether a committed file says the same as a generated one: equal bytes, or equal
/// parsed YAML (so re-indenting or re-quoting by hand is not drift; a changed value is).
pub fn same_content(committed: &str, generated: &str) -> bool {
    if committed == generated {
        return true;
    }
    let parse = |s: &str| serde_saphyr::from_str::<Value>(s).ok();
    matches!((parse(committed), parse(generated)), (Some(a), Some(b)) if a == b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{ApiResource, PropagationMode, Scope};
    use serde_json::{Value, json};

    fn schema_value(crd: &CustomResourceDefinition) -> Value {
        let schema = crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("schema");
        serde_json::to_value(schema).expect("serializes")
    }

    fn target(kind: &str) -> TargetType {
        default_target_types()
            .into_iter()
            .find(|t| t.api.kind == kind)
            .expect("a default type")
    }

    /// The structural-schema rules of apiextensions v1 that schemars output can break
    /// (see `k8s.io/apiextensions-apiserver/pkg/apiserver/schema/validation.go`).
    fn structural_problems(schema: &Value, at: &str, out: &mut Vec<String>) {
        let Some(obj) = schema.as_object() else {
            out.push(format!("{at}: not an object"));
            return;
        };
        for banned in [
            "$ref",
            "definitions",
            "$defs",
            "$schema",
            "oneOf",
            "anyOf",
            "allOf",
            "not",
        ] {
            if obj.contains_key(banned) {
                out.push(format!("{at}: uses {banned}"));
            }
        }
        let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
        let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&json!(true));
        let type_ = obj.get("type").and_then(Value::as_str);
        if type_.is_none() && !preserve && !int_or_string {
            out.push(format!("{at}: has no type"));
        }
        if let Some(values) = obj.get("enum") {
            if type_ != Some("string") {
                out.push(format!("{at}: enum without type string"));
            }
            if !values
                .as_array()
                .is_some_and(|v| v.iter().all(Value::is_string))
            {
                out.push(format!("{at}: enum values are not all strings"));
            }
        }
        if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
            out.push(format!("{at}: both properties and additionalProperties"));
        }
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            if type_ != Some("object") {
                out.push(format!("{at}: properties on a non-object"));
            }
            for (name, prop) in props {
                structural_problems(prop, &format!("{at}.{name}"), out);
            }
            for required in obj
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if !required.as_str().is_some_and(|r| props.contains_key(r)) {
                    out.push(format!("{at}: requires unknown field {required}"));
                }
            }
        }
        if let Some(items) = obj.get("items") {
            if type_ != Some("array") {
                out.push(format!("{at}: items on a non-array"));
            }
            structural_problems(items, &format!("{at}[]"), out);
        } else if type_ == Some("array") {
            out.push(format!("{at}: array without items"));
        }
        if let Some(extra) = obj.get("additionalProperties")
            && extra.is_object()
        {
            structural_problems(extra, &format!("{at}{{}}"), out);
        }
    }

    #[test]
    fn every_crd_has_a_structural_schema() {
        for crd in all_crds() {
            let mut problems = Vec::new();
            structural_problems(&schema_value(&crd), "", &mut problems);
            assert!(
                problems.is_empty(),
                "{}: {problems:#?}",
                crd.metadata.name.unwrap_or_default()
            );
        }
    }

    #[test]
    fn every_crd_has_short_names_or_categories_and_printer_columns() {
        for crd in all_crds() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            // A standard API's CRD keeps its own category (`multicluster`).
            let category = if crd.spec.group == crate::inventory::INVENTORY_GROUP {
                "multicluster"
            } else {
                "kubefed"
            };
            assert!(
                crd.spec
                    .names
                    .categories
                    .as_ref()
                    .is_some_and(|c| c.contains(&category.to_string())),
                "{name}"
            );
            let columns = crd.spec.versions[0]
                .additional_printer_columns
                .clone()
                .unwrap_or_default();
            assert!(columns.iter().any(|c| c.name == "Age"), "{name}");
        }
    }

    #[test]
    fn enums_are_strings_with_their_values() {
        let by_name = |name: &str| {
            core_crds()
                .into_iter()
                .find(|c| c.spec.names.kind == name)
                .map(|c| schema_value(&c))
                .expect("crd")
        };
        let kfc = by_name("KubeFedCluster");
        assert_eq!(
            kfc.pointer("/properties/spec/properties/disabledTLSValidations/items/enum"),
            Some(&json!(["*", "SubjectName", "ValidityPeriod"]))
        );
        let ftc = by_name("FederatedTypeConfig");
        let spec = ftc.pointer("/properties/spec/properties").expect("spec");
        assert_eq!(spec.pointer("/propagation/type"), Some(&json!("string")));
        assert_eq!(
            spec.pointer("/propagation/enum"),
            Some(&json!(["Enabled", "Disabled"]))
        );
        assert_eq!(
            spec.pointer("/targetType/properties/scope/enum"),
            Some(&json!(["Namespaced", "Cluster"]))
        );
        let fed = schema_value(&federated_crd(&target("Deployment"), None));
        let op = fed
            .pointer("/properties/spec/properties/overrides/items/properties/clusterOverrides/items/properties/op")
            .expect("op");
        assert_eq!(op["type"], json!("string"));
        assert_eq!(op["enum"], json!(["add", "remove", "replace"]));
        assert_eq!(op.get("nullable"), None);
    }

    #[test]
    fn federated_api_resources_follow_kubefed_naming() {
        let fed = federated_api_resource(&target("Deployment").api);
        assert_eq!(
            fed,
            ApiResource {
                group: "types.kubefed.io".into(),
                version: "v1beta1".into(),
                kind: "FederatedDeployment".into(),
                plural_name: "federateddeployments".into(),
                scope: Scope::Namespaced,
            }
        );
        assert_eq!(
            fed.qualified_name(),
            "federateddeployments.types.kubefed.io"
        );
    }

    #[test]
    fn a_federated_namespace_is_namespaced_although_namespaces_are_not() {
        let ns = target("Namespace");
        assert_eq!(ns.api.scope, Scope::Cluster);
        assert_eq!(federated_api_resource(&ns.api).scope, Scope::Namespaced);
        assert_eq!(federated_crd(&ns, None).spec.scope, "Namespaced");
    }

    #[test]
    fn a_federated_cluster_role_is_cluster_scoped() {
        let crd = federated_crd(&target("ClusterRole"), None);
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, None);
    }

    #[test]
    fn federated_crds_have_kubefed_names_short_names_and_categories() {
        let crd = federated_crd(&target("Deployment"), None);
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("federateddeployments.types.kubefed.io")
        );
        let names = &crd.spec.names;
        assert_eq!(names.kind, "FederatedDeployment");
        assert_eq!(names.list_kind.as_deref(), Some("FederatedDeploymentList"));
        assert_eq!(names.singular.as_deref(), Some("federateddeployment"));
        assert_eq!(names.short_names, Some(vec!["fdeploy".to_string()]));
        assert_eq!(
            names.categories,
            Some(vec!["federated".to_string(), "kubefed".to_string()])
        );
    }

    #[test]
    fn federated_crds_show_the_propagation_condition() {
        let crd = federated_crd(&target("ConfigMap"), None);
        let version = &crd.spec.versions[0];
        let columns: Vec<(String, String)> = version
            .additional_printer_columns
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.name, c.json_path))
            .collect();
        assert_eq!(
            columns,
            [
                (
                    "Ready".to_string(),
                    ".status.conditions[?(@.type=='Propagation')].status".to_string()
                ),
                (
                    "Reason".to_string(),
                    ".status.conditions[?(@.type=='Propagation')].reason".to_string()
                ),
                (
                    "Rollout".to_string(),
                    ".status.rollout.progress".to_string()
                ),
                ("Age".to_string(), ".metadata.creationTimestamp".to_string()),
            ]
        );
        assert!(
            version
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some())
        );
    }

    #[test]
    fn workload_crds_show_clusters_and_ready_pods_first() {
        let columns = |kind: &str| -> Vec<(String, String)> {
            federated_crd(&target(kind), None).spec.versions[0]
                .additional_printer_columns
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|c| (c.name, c.json_path))
                .collect()
        };
        let deployment = columns("Deployment");
        assert_eq!(
            deployment[..3],
            [
                (
                    "Clusters".to_string(),
                    ".status.aggregated.clusters".to_string()
                ),
                ("Ready".to_string(), ".status.aggregated.ready".to_string()),
                (
                    "Propagated".to_string(),
                    ".status.conditions[?(@.type=='Propagation')].status".to_string()
                ),
            ]
        );
        assert_eq!(
            columns("Job")[1],
            (
                "Completions".to_string(),
                ".status.aggregated.completions".to_string()
            )
        );
        assert_eq!(columns("ConfigMap")[0].0, "Ready");
    }

    #[test]
    fn the_federated_schema_requires_spec_and_template_and_preserves_the_template() {
        let schema = schema_value(&federated_crd(&target("Deployment"), None));
        assert_eq!(schema.pointer("/required"), Some(&json!(["spec"])));
        let spec = schema.pointer("/properties/spec").expect("spec");
        assert_eq!(spec.pointer("/required"), Some(&json!(["template"])));
        let template = spec.pointer("/properties/template").expect("template");
        assert_eq!(template["type"], json!("object"));
        assert_eq!(
            template["x-kubernetes-preserve-unknown-fields"],
            json!(true)
        );
        assert_eq!(
            spec.pointer("/properties/placement/properties/clusters/items/required"),
            Some(&json!(["name"]))
        );
        assert_eq!(
            spec.pointer(
                "/properties/placement/properties/clusterSelector/properties/matchExpressions/items/required"
            ),
            Some(&json!(["key", "operator"]))
        );
        let overrides = spec
            .pointer("/properties/overrides/items")
            .expect("overrides");
        assert_eq!(overrides["required"], json!(["clusterName"]));
        assert_eq!(
            overrides.pointer("/properties/clusterOverrides/items/required"),
            Some(&json!(["path"]))
        );
        assert_eq!(
            overrides.pointer("/properties/clusterOverrides/items/properties/value"),
            Some(&json!({
                "description": "The value for `add` and `replace`.",
                "x-kubernetes-preserve-unknown-fields": true
            }))
        );
        assert_eq!(
            spec.pointer("/properties/retainReplicas/type"),
            Some(&json!("boolean"))
        );
    }

    #[test]
    fn the_federated_schema_has_no_defaults() {
        let schema = schema_value(&federated_crd(&target("Deployment"), None));
        assert!(!schema.to_string().contains("\"default\""));
    }

    #[test]
    fn the_federated_status_schema_comes_from_the_status_type() {
        let schema = schema_value(&federated_crd(&target("Deployment"), None));
        let status = schema
            .pointer("/properties/status/properties")
            .expect("status");
        assert_eq!(
            status.pointer("/observedGeneration/format"),
            Some(&json!("int64"))
        );
        assert_eq!(
            status.pointer("/conditions/items/required"),
            Some(&json!(["status", "type"]))
        );
        assert_eq!(
            status.pointer(
                "/clusters/items/properties/remoteStatus/x-kubernetes-preserve-unknown-fields"
            ),
            Some(&json!(true))
        );
    }

    #[test]
    fn a_target_schema_is_used_for_the_template_with_identity_fields_relaxed() {
        let target_schema = json!({
            "type": "object",
            "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {
                "apiVersion": {"type": "string", "enum": ["example.com/v1"]},
                "kind": {"type": "string"},
                "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                "status": {"type": "object"}
            }
        });
        let t = TargetType::new("example.com", "v1", "Widget", "widgets", Scope::Namespaced);
        let crd = try_federated_crd(&t, Some(target_schema)).expect("valid");
        let schema = schema_value(&crd);
        let template = schema
            .pointer("/properties/spec/properties/template")
            .expect("template");
        assert_eq!(template["required"], json!(["spec"]));
        assert_eq!(
            template.pointer("/properties/metadata"),
            Some(&json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}))
        );
        assert_eq!(
            template.pointer("/properties/apiVersion"),
            Some(&json!({"type": "string"}))
        );
        assert_eq!(template.pointer("/properties/status"), None);
        assert_eq!(
            template.pointer("/properties/spec/properties/size/type"),
            Some(&json!("integer"))
        );
        let mut problems = Vec::new();
        structural_problems(&schema, "", &mut problems);
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn an_invalid_target_schema_falls_back_to_a_free_form_template() {
        let t = target("ConfigMap");
        let bad = json!({"properties": {"size": {"type": 5}}});
        assert!(matches!(
            try_federated_crd(&t, Some(bad.clone())),
            Err(CrdGenError::Schema { .. })
        ));
        assert_eq!(federated_crd(&t, Some(bad)), federated_crd(&t, None));
    }

    #[test]
    fn type_configs_are_named_plural_dot_group_and_enabled() {
        let ftc = federated_type_config(&target("Deployment"), "kube-federation-system");
        assert_eq!(ftc.metadata.name.as_deref(), Some("deployments.apps"));
        assert_eq!(
            ftc.metadata.namespace.as_deref(),
            Some("kube-federation-system")
        );
        assert_eq!(ftc.spec.propagation, PropagationMode::Enabled);
        assert_eq!(ftc.spec.federated_type.kind, "FederatedDeployment");
        let ns = federated_type_config(&target("Namespace"), "fed");
        assert_eq!(ns.metadata.name.as_deref(), Some("namespaces"));
        let json = serde_json::to_value(&ns).expect("serializes");
        assert_eq!(json["apiVersion"], json!("core.kubefed.io/v1beta1"));
        assert_eq!(json["kind"], json!("FederatedTypeConfig"));
        assert_eq!(
            json["spec"]["targetType"],
            json!({"version": "v1", "kind": "Namespace", "pluralName": "namespaces", "scope": "Cluster"})
        );
    }

    #[test]
    fn the_default_types_are_kubefeds_set() {
        let names: Vec<String> = default_target_types()
            .iter()
            .map(|t| t.api.qualified_name())
            .collect();
        assert_eq!(
            names,
            [
                "namespaces",
                "configmaps",
                "secrets",
                "serviceaccounts",
                "services",
                "deployments.apps",
                "replicasets.apps",
                "jobs.batch",
                "ingresses.networking.k8s.io",
                "clusterroles.rbac.authorization.k8s.io",
            ]
        );
    }

    #[test]
    fn all_crds_are_the_core_ones_then_one_per_default_type_then_the_optional_ones() {
        let crds = all_crds();
        assert_eq!(
            crds.len(),
            core_crds().len() + 2 * default_target_types().len() + 1,
            "v1beta1, alpha and Admiralty's import"
        );
        assert_eq!(
            default_crds().len(),
            core_crds().len() + default_target_types().len()
        );
        let mut names: Vec<_> = crds
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), crds.len(), "CRD names are unique");
    }

    #[test]
    fn no_crd_has_an_empty_string_or_null_default() {
        // apiextensions v1.20 rejects `default: ""` as "must be of type string: null".
        let all = serde_json::to_string(&all_crds()).expect("serializes");
        assert!(!all.contains(r#""default":"""#), "an empty-string default");
        assert!(!all.contains(r#""default":null"#), "a null default");
    }

    #[test]
    fn descriptions_are_readable() {
        let all = serde_json::to_string(&all_crds()).expect("serializes");
        assert!(!all.contains("&lt;") && !all.contains("&gt;"));
        assert!(!all.contains("Auto-generated derived type"));
    }

    #[test]
    fn generated_yaml_parses_back_to_the_same_resources() {
        let files = generated_files().expect("renders");
        let placed = default_crds().into_iter().map(|c| (CRDS_DIR, c)).chain(
            OptionalApi::ALL
                .into_iter()
                .flat_map(|api| api.crds().into_iter().map(move |c| (api.dir(), c))),
        );
        for (dir, crd) in placed {
            let path = format!("{dir}/{}", crd_file_name(&crd));
            let file = files.iter().find(|f| f.path == path).expect("file");
            let parsed: Value = serde_saphyr::from_str(&file.contents).expect("yaml");
            assert_eq!(parsed, serde_json::to_value(&crd).expect("json"), "{path}");
        }
        assert_eq!(
            files.len(),
            all_crds().len()
                + OptionalApi::ALL.len()
                + member_crds().len()
                + default_target_types().len(),
            "CRDs, the components' kustomizations and type configs"
        );
    }

    #[test]
    fn formatting_is_not_drift_but_a_changed_value_is() {
        let generated = "a: 1\nb:\n  - x\n";
        assert!(same_content(generated, generated));
        assert!(same_content("b: [\"x\"]\na: 1\n", generated));
        assert!(!same_content("a: 2\nb: [x]\n", generated));
        assert!(!same_content("a: [", generated));
    }
}
