//! Builders of the objects the integration tests create: federated objects with placement,
//! overrides and annotations, plain namespaces and ConfigMaps, and the `Widget` custom
//! resource type. Pure values only: nothing here talks to a cluster except
//! [`FederatedObject::apply`] and [`create_namespace`], which write what was built.

use std::collections::BTreeMap;

use anyhow::Context as _;
use k8s_openapi::{
    api::core::v1::{ConfigMap, Namespace},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
    core::ApiResource,
};
use serde_json::{Map, Value, json};

use crate::{
    federation::{apply, federated},
    host::FederatedRef,
};

/// A `Federated<Kind>` under construction. Placed in every cluster
/// (`clusterSelector: {}`) until told otherwise; no template, overrides or annotations.
#[derive(Clone, Debug)]
pub struct FederatedObject {
    kind: String,
    plural: String,
    namespace: String,
    name: String,
    annotations: Map<String, Value>,
    template: Option<Value>,
    placement: Value,
    overrides: Option<Vec<Value>>,
}

impl FederatedObject {
    /// A federated object of the target `kind` (plural `plural`, e.g. `configmaps`).
    pub fn new(kind: &str, plural: &str, namespace: &str, name: &str) -> Self {
        FederatedObject {
            kind: kind.into(),
            plural: plural.into(),
            namespace: namespace.into(),
            name: name.into(),
            annotations: Map::new(),
            template: None,
            placement: json!({"clusterSelector": {}}),
            overrides: None,
        }
    }

    /// A FederatedConfigMap whose template carries `data`.
    pub fn config_map(namespace: &str, name: &str, data: Value) -> Self {
        Self::new("ConfigMap", "configmaps", namespace, name).template(json!({ "data": data }))
    }

    /// A FederatedDeployment of `replicas` pods labelled `app=<name>`, one container
    /// `<name>` running `image`.
    pub fn deployment(namespace: &str, name: &str, replicas: i32, image: &str) -> Self {
        Self::new("Deployment", "deployments", namespace, name).template(json!({"spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, "image": image}]}}
        }}))
    }

    /// A FederatedNamespace for namespace `name` (it lives in that namespace), without a
    /// template, as kubefed manifests often write it.
    pub fn namespace(name: &str) -> Self {
        Self::new("Namespace", "namespaces", name, name)
    }

    /// Sets `spec.template`.
    pub fn template(mut self, template: Value) -> Self {
        self.template = Some(template);
        self
    }

    /// Places the object in exactly these clusters (`placement.clusters`).
    pub fn on_clusters(mut self, clusters: &[&str]) -> Self {
        let clusters: Vec<Value> = clusters.iter().map(|c| json!({ "name": c })).collect();
        self.placement = json!({ "clusters": clusters });
        self
    }

    /// Sets `spec.placement` as given (e.g. with Flotilla's scheduling fields).
    pub fn placement(mut self, placement: Value) -> Self {
        self.placement = placement;
        self
    }

    /// Adds an override for `cluster` setting `path` to `value` (the default op).
    pub fn override_path(self, cluster: &str, path: &str, value: Value) -> Self {
        self.cluster_override(cluster, json!({"path": path, "value": value}))
    }

    /// Adds an override for `cluster` with an explicit `op` (`add`, `replace`, `remove`).
    pub fn override_op(self, cluster: &str, op: &str, path: &str, value: Value) -> Self {
        self.cluster_override(cluster, json!({"op": op, "path": path, "value": value}))
    }

    fn cluster_override(mut self, cluster: &str, op: Value) -> Self {
        self.overrides
            .get_or_insert_with(Vec::new)
            .push(json!({"clusterName": cluster, "clusterOverrides": [op]}));
        self
    }

    /// Writes `overrides: []`, so that applying it clears the overrides applied before.
    pub fn without_overrides(mut self) -> Self {
        self.overrides = Some(Vec::new());
        self
    }

    /// Adds a `metadata.annotations` entry.
    pub fn annotate(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// The object as JSON, ready for server-side apply.
    pub fn to_json(&self) -> Value {
        let mut metadata = json!({"name": self.name, "namespace": self.namespace});
        if !self.annotations.is_empty() {
            metadata["annotations"] = Value::Object(self.annotations.clone());
        }
        let mut spec = Map::new();
        if let Some(template) = &self.template {
            spec.insert("template".into(), template.clone());
        }
        spec.insert("placement".into(), self.placement.clone());
        if let Some(overrides) = &self.overrides {
            spec.insert("overrides".into(), Value::Array(overrides.clone()));
        }
        json!({
            "apiVersion": "types.kubefed.io/v1beta1",
            "kind": format!("Federated{}", self.kind),
            "metadata": metadata,
            "spec": spec,
        })
    }

    /// The federated type's API resource.
    pub fn api_resource(&self) -> ApiResource {
        federated(&self.kind, &self.plural)
    }

    /// A handle on this object in the host, without writing it.
    pub fn in_host(&self, host: &Client) -> FederatedRef {
        FederatedRef::new(host, &self.api_resource(), &self.namespace, &self.name)
    }

    /// Server-side applies the object to the host; returns a handle on it.
    pub async fn apply(&self, host: &Client) -> anyhow::Result<FederatedRef> {
        apply(
            host,
            &self.api_resource(),
            Some(&self.namespace),
            &self.to_json(),
        )
        .await
        .with_context(|| format!("applying Federated{} {}", self.kind, self.name))?;
        Ok(self.in_host(host))
    }
}

/// Object metadata with a name and, for namespaced objects, a namespace.
pub fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        ..ObjectMeta::default()
    }
}

/// A string map from pairs (labels, ConfigMap data).
pub fn string_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A plain ConfigMap `name` (namespace taken from the API it is created through).
pub fn config_map(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            labels: (!labels.is_empty()).then(|| string_map(labels)),
            ..meta(name, None)
        },
        data: (!data.is_empty()).then(|| string_map(data)),
        ..ConfigMap::default()
    }
}

/// Creates namespace `name`; one that already exists is fine.
pub async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let namespace = Namespace {
        metadata: meta(name, None),
        ..Namespace::default()
    };
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
    }
}

/// The `widgets.example.com` CRD (`Widget`, v1, `spec.size` integer and `spec.color`
/// string), with these short names.
pub fn widget_crd(short_names: &[&str]) -> anyhow::Result<CustomResourceDefinition> {
    let mut names = json!({"plural": "widgets", "singular": "widget", "kind": "Widget"});
    if !short_names.is_empty() {
        names["shortNames"] = json!(short_names);
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": names,
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                    "type": "object",
                    "properties": {"size": {"type": "integer"}, "color": {"type": "string"}}}}}}}]}
    }))?)
}

/// kubefed's ReplicaSchedulingPreference (`scheduling.kubefed.io/v1alpha1`), as served.
pub fn rsp_resource() -> ApiResource {
    ApiResource::erase::<flotilla_api::scheduling::ReplicaSchedulingPreference>(&())
}

/// The API resource of `Widget` objects in a member.
pub fn widget_resource() -> ApiResource {
    ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}
