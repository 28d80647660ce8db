//! SIG-Multicluster's PlacementDecision API (KEP-5313), `multicluster.x-k8s.io/v1alpha1`:
//! a data-only, namespaced list of the clusters a scheduler chose, each a reference to a
//! ClusterProfile, so consumers follow placement without knowing the scheduler. The object
//! has no `spec`: `decisions` and `schedulerName` sit at the top level, as the published
//! schema has them. Types and the pure "what should it say" only, no I/O.

use std::borrow::Cow;

use k8s_openapi::{
    NamespaceResourceScope,
    api::core::v1::ObjectReference,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
        CustomResourceDefinitionVersion, CustomResourceValidation,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::inventory::INVENTORY_GROUP;

/// Version of the PlacementDecision API.
pub const VERSION: &str = "v1alpha1";
/// Kind of the API.
pub const KIND: &str = "PlacementDecision";
/// Plural of the API.
pub const PLURAL: &str = "placementdecisions";
/// Most decisions one object (slice) may hold.
pub const MAX_DECISIONS: usize = 100;
/// Same value on every slice of one decision.
pub const DECISION_KEY_LABEL: &str = "multicluster.x-k8s.io/decision-key";
/// Position of a slice, from 0.
pub const DECISION_INDEX_LABEL: &str = "multicluster.x-k8s.io/decision-index";
/// Links a decision to the workload it places.
pub const PLACEMENT_KEY_LABEL: &str = "multicluster.x-k8s.io/placement-key";
/// `schedulerName` of Flotilla's decisions.
pub const SCHEDULER_NAME: &str = "flotilla";

/// The clusters a scheduler chose for one workload, at one point in time.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlacementDecision {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The chosen clusters (at most [`MAX_DECISIONS`] per object).
    #[serde(default)]
    pub decisions: Vec<ClusterDecision>,
    /// The scheduler that made the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
}

/// One chosen cluster.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDecision {
    /// The chosen cluster's ClusterProfile.
    pub cluster_profile_ref: ProfileRef,
    /// Why the cluster was chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The fields of a core `ObjectReference` a decision uses.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProfileRef {
    /// `multicluster.x-k8s.io/v1alpha1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `ClusterProfile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The profile's name (the cluster's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The profile's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl ProfileRef {
    /// A reference to the ClusterProfile `name` in `namespace`.
    pub fn profile(namespace: &str, name: &str) -> Self {
        ProfileRef {
            api_version: Some(format!("{INVENTORY_GROUP}/{VERSION}")),
            kind: Some("ClusterProfile".into()),
            name: Some(name.into()),
            namespace: Some(namespace.into()),
        }
    }
}

impl kube::Resource for PlacementDecision {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        INVENTORY_GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The CRD, from the published v1alpha1 schema (top-level `decisions`, at most 100).
pub fn crd() -> CustomResourceDefinition {
    let decision = crate::crdgen::federated::schema_of::<ClusterDecision>();
    let schema = json!({
        "description": "PlacementDecision publishes the clusters a scheduler chose for a \
            workload: a data-only list of ClusterProfile references.",
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "decisions": {
                "description": "The chosen clusters, at most 100 per object.",
                "type": "array", "maxItems": MAX_DECISIONS, "items": decision,
            },
            "schedulerName": {
                "description": "The scheduler that made the decision.",
                "type": "string",
            },
        },
        "required": ["decisions"],
    });
    // Invariant: the schema is assembled above from Flotilla's own types.
    #[allow(clippy::expect_used)]
    let schema = serde_json::from_value(schema).expect("a valid OpenAPI schema");
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("{PLURAL}.{INVENTORY_GROUP}")),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: INVENTORY_GROUP.into(),
            names: CustomResourceDefinitionNames {
                kind: KIND.into(),
                list_kind: Some(format!("{KIND}List")),
                plural: PLURAL.into(),
                singular: Some("placementdecision".into()),
                categories: Some(vec!["multicluster".into()]),
                ..Default::default()
            },
            scope: "Namespaced".into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: VERSION.into(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(schema),
                }),
                additional_printer_columns: Some(vec![
                    column("Scheduler", "string", ".schedulerName"),
                    column("Age", "date", ".metadata.creationTimestamp"),
                ]),
                ..Default::default()
            }],
            ..Default::default()
        },
        status: None,
    }
}

fn column(
    name: &str,
    type_: &str,
    path: &str,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition{
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition {
        name: name.into(),
        type_: type_.into(),
        json_path: path.into(),
        ..Default::default()
    }
}

/// The ObjectReference type is what the published schema names; Flotilla fills only the
/// fields above, which keeps the object free of a `uid` that changes when a profile is recreated.
pub fn as_object_reference(r: &ProfileRef) -> ObjectReference {
    ObjectReference {
        api_version: r.api_version.clone(),
        kind: r.kind.clone(),
        name: r.name.clone(),
        namespace: r.namespace.clone(),
        ..Default::default()
    }
}
