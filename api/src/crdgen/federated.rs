//! The Federated&lt;Kind&gt; CRDs and FederatedTypeConfigs of target types, and the schema
//! generation every hand-assembled CRD of this crate shares ([`schema_of`], `polish`).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresourceStatus,
    CustomResourceSubresources, CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use crate::core::{
    ApiResource, FederatedTypeConfig, FederatedTypeConfigSpec, PropagationMode, Scope,
};
use crate::federated::{FederatedSpec, FederatedStatus};
use crate::schema_edit::{
    push_required, relax_template_schema, strip_empty_defaults, strip_keyword,
    unescape_descriptions,
};
use crate::workload::WorkloadKind;
use crate::{TYPES_GROUP, V1BETA1};

use super::error::CrdGenError;

/// A type that can be federated: its API resource and the short names its users know it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetType {
    /// The target type (what is propagated into members).
    pub api: ApiResource,
    /// Short names of the target (`deploy`); the federated type gets `f<short>` (`fdeploy`).
    pub short_names: Vec<String>,
}

impl TargetType {
    pub(crate) fn new(group: &str, version: &str, kind: &str, plural: &str, scope: Scope) -> Self {
        TargetType {
            api: ApiResource {
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
                plural_name: plural.into(),
                scope,
            },
            short_names: Vec::new(),
        }
    }

    fn short(mut self, name: &str) -> Self {
        self.short_names.push(name.into());
        self
    }
}

/// The types Flotilla federates out of the box (kubefed's default set, at the API versions
/// a v1.20 member serves).
pub fn default_target_types() -> Vec<TargetType> {
    use Scope::{Cluster, Namespaced};
    vec![
        TargetType::new("", "v1", "Namespace", "namespaces", Cluster).short("ns"),
        TargetType::new("", "v1", "ConfigMap", "configmaps", Namespaced).short("cm"),
        TargetType::new("", "v1", "Secret", "secrets", Namespaced),
        TargetType::new("", "v1", "ServiceAccount", "serviceaccounts", Namespaced).short("sa"),
        TargetType::new("", "v1", "Service", "services", Namespaced).short("svc"),
        TargetType::new("apps", "v1", "Deployment", "deployments", Namespaced).short("deploy"),
        TargetType::new("apps", "v1", "ReplicaSet", "replicasets", Namespaced).short("rs"),
        TargetType::new("batch", "v1", "Job", "jobs", Namespaced),
        TargetType::new(
            "networking.k8s.io",
            "v1",
            "Ingress",
            "ingresses",
            Namespaced,
        )
        .short("ing"),
        TargetType::new(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            Cluster,
        ),
    ]
}

fn is_namespace(target: &ApiResource) -> bool {
    target.group.is_empty() && target.kind == "Namespace"
}

/// The Federated&lt;Kind&gt; type of a target type: `types.kubefed.io/v1beta1`,
/// `Federated<Kind>`, `federated<plural>`, the target's scope (FederatedNamespace: namespaced).
pub fn federated_api_resource(target: &ApiResource) -> ApiResource {
    ApiResource {
        group: TYPES_GROUP.into(),
        version: V1BETA1.into(),
        kind: format!("Federated{}", target.kind),
        plural_name: format!("federated{}", target.plural_name),
        scope: if is_namespace(target) {
            Scope::Namespaced
        } else {
            target.scope
        },
    }
}

/// The FederatedTypeConfig enabling propagation of `target`, named `<plural>.<group>`
/// (`<plural>` for the core group), in `namespace`.
pub fn federated_type_config(target: &TargetType, namespace: &str) -> FederatedTypeConfig {
    let mut ftc = FederatedTypeConfig::new(
        &target.api.qualified_name(),
        FederatedTypeConfigSpec {
            target_type: target.api.clone(),
            propagation: PropagationMode::Enabled,
            federated_type: federated_api_resource(&target.api),
            status_type: None,
            status_collection: None,
            health: None,
        },
    );
    ftc.metadata.namespace = Some(namespace.into());
    ftc
}

/// The schema generator `kube`'s `#[derive(CustomResource)]` uses, so hand-assembled CRDs
/// get the same structural rewrites as derived ones.
pub fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube::core::schema::StructuralSchemaRewriter)
        .with_transform(kube::core::schema::OptionalEnum)
        .with_transform(kube::core::schema::OptionalIntOrString)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("title");
    }
    schema
}

fn federated_schema(target: &ApiResource, template_schema: Option<Value>) -> Value {
    let mut spec = schema_of::<FederatedSpec>();
    // Defaults would be written into every stored object, and kubefed's CRDs have none;
    // a null `op` or `clusters` means the same as an absent one.
    strip_keyword(&mut spec, "default");
    strip_keyword(&mut spec, "nullable");
    // kubefed's FederatedNamespace manifests usually carry no template (the namespace has
    // nothing to template), so it stays optional there; every other type requires one.
    if !is_namespace(target) {
        push_required(&mut spec, "template");
    }
    if let Some(template) = template_schema {
        let mut template = relax_template_schema(template);
        if let (Some(t), Some(old)) = (
            template.as_object_mut(),
            spec.pointer("/properties/template/description").cloned(),
        ) {
            t.entry("description").or_insert(old);
        }
        if let Some(slot) = spec.pointer_mut("/properties/template") {
            *slot = template;
        }
    }
    let status = schema_of::<FederatedStatus>();
    let kind = format!("Federated{}", target.kind);
    json!({
        "description": format!(
            "{kind} propagates {} objects from this host cluster to member clusters: a \
             template, a placement and per-cluster overrides.",
            target.kind
        ),
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "required": ["spec"],
    })
}

/// Like [`federated_crd`], but fails when `template_schema` is not a valid schema instead
/// of falling back to a free-form template.
pub fn try_federated_crd(
    target: &TargetType,
    template_schema: Option<Value>,
) -> Result<CustomResourceDefinition, CrdGenError> {
    try_federated_crd_as(
        target,
        &federated_api_resource(&target.api),
        template_schema,
    )
}

/// [`try_federated_crd`] served as `fed` (kubefed's alpha group, [`crate::alpha`]).
fn try_federated_crd_as(
    target: &TargetType,
    fed: &ApiResource,
    template_schema: Option<Value>,
) -> Result<CustomResourceDefinition, CrdGenError> {
    let mut schema = federated_schema(&target.api, template_schema);
    unescape_descriptions(&mut schema);
    let schema: JSONSchemaProps =
        serde_json::from_value(schema).map_err(|source| CrdGenError::Schema {
            what: fed.kind.clone(),
            source,
        })?;
    Ok(CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(fed.qualified_name()),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: fed.group.clone(),
            names: CustomResourceDefinitionNames {
                kind: fed.kind.clone(),
                list_kind: Some(format!("{}List", fed.kind)),
                plural: fed.plural_name.clone(),
                singular: Some(fed.kind.to_lowercase()),
                short_names: Some(target.short_names.iter().map(|s| format!("f{s}")).collect())
                    .filter(|names: &Vec<String>| !names.is_empty()),
                categories: Some(vec!["federated".into(), "kubefed".into()]),
            },
            scope: match fed.scope {
                Scope::Namespaced => "Namespaced".into(),
                Scope::Cluster => "Cluster".into(),
            },
            versions: vec![CustomResourceDefinitionVersion {
                name: fed.version.clone(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(schema),
                }),
                subresources: Some(CustomResourceSubresources {
                    status: Some(CustomResourceSubresourceStatus(json!({}))),
                    scale: None,
                }),
                additional_printer_columns: Some(printer_columns(target)),
                ..Default::default()
            }],
            ..Default::default()
        },
        status: None,
    })
}

/// `kubectl get` columns of a Federated&lt;Kind&gt;: the `Propagation` condition (READY,
/// REASON) and the age; workload types answer "is my app running" first, from
/// `status.aggregated` (CLUSTERS 2/2, READY 9/9), and show the condition as PROPAGATED.
fn printer_columns(target: &TargetType) -> Vec<CustomResourceColumnDefinition> {
    let condition = |field: &str| format!(".status.conditions[?(@.type=='Propagation')].{field}");
    let column = |name: &str, type_: &str, json_path: String| CustomResourceColumnDefinition {
        name: name.into(),
        type_: type_.into(),
        json_path,
        ..Default::default()
    };
    let age = column("Age", "date", ".metadata.creationTimestamp".into());
    let reason = column("Reason", "string", condition("reason"));
    // Clusters succeeded of the placed ones while `spec.rollout` is progressive (3/5).
    let rollout = column("Rollout", "string", ".status.rollout.progress".into());
    match WorkloadKind::of(&target.api) {
        None => vec![
            column("Ready", "string", condition("status")),
            reason,
            rollout,
            age,
        ],
        Some(kind) => {
            let (pods, path) = kind.pods_column();
            vec![
                column("Clusters", "string", ".status.aggregated.clusters".into()),
                column(pods, "string", path.into()),
                column("Propagated", "string", condition("status")),
                reason,
                rollout,
                age,
            ]
        }
    }
}

/// The Federated&lt;Kind&gt; CRD of a target type. `template_schema` is the target's own
/// OpenAPI v3 schema (e.g. from its CRD), used for `spec.template` with `metadata`,
/// `apiVersion` and `kind` relaxed; without it, or when it is not a valid schema, the
/// template is a free-form object.
pub fn federated_crd(
    target: &TargetType,
    template_schema: Option<Value>,
) -> CustomResourceDefinition {
    federated_crd_as(
        target,
        &federated_api_resource(&target.api),
        template_schema,
    )
}

/// [`federated_crd`] served as `fed` (kubefed's alpha group, [`crate::alpha`]).
pub(crate) fn federated_crd_as(
    target: &TargetType,
    fed: &ApiResource,
    template_schema: Option<Value>,
) -> CustomResourceDefinition {
    if template_schema.is_some()
        && let Ok(crd) = try_federated_crd_as(target, fed, template_schema)
    {
        return crd;
    }
    // Invariant: without a template schema the CRD is built only from Flotilla's own types,
    // which `crdgen::tests` check turn into valid structural schemas.
    #[allow(clippy::expect_used)]
    try_federated_crd_as(target, fed, None).expect("the built-in federated schema is valid")
}

/// Polishes a derived CRD: readable descriptions, and a root description saying what the
/// type is rather than how it was generated.
pub(crate) fn polish(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        if schema
            .description
            .as_deref()
            .is_some_and(|d| d.starts_with("Auto-generated derived type"))
        {
            schema.description = schema
                .properties
                .as_ref()
                .and_then(|p| p.get("spec"))
                .and_then(|s| s.description.clone());
        }
        let polished = serde_json::to_value(&*schema)
            .map(|mut v| {
                unescape_descriptions(&mut v);
                strip_empty_defaults(&mut v);
                v
            })
            .and_then(serde_json::from_value);
        if let Ok(polished) = polished {
            *schema = polished;
        }
    }
    crd
}
