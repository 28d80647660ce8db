//! What `flotilla diff` compares: federated objects from a manifest (`-f`, not yet
//! applied) or from the host (`TYPE/NAME`), each with its enabled type, and the objects
//! the controllers would read beside it — its FederatedNamespace, a
//! ReplicaSchedulingPreference of the same name and the KubeFedConfig — taken from the manifest when it has
//! them (they would be applied together), else from the host.

use anyhow::Context as _;
use flotilla_api::{
    FederatedSpec, FederatedStatus, FederatedTypeConfig, KUBEFED_CONFIG_NAME, KubeFedConfig,
    ReplicaSchedulingPreference, SCHEDULING_GROUP,
    core::EffectiveConfig,
    crdgen,
    scheduling::{ReplicaSchedulingPreferenceSpec, ReplicaSchedulingPreferenceStatus},
};
use kube::{Api, Client, api::DynamicObject};
use serde_json::Value;

use crate::resolve;

/// One federated object to diff.
pub struct Federated {
    /// Its enabled type.
    pub ftc: FederatedTypeConfig,
    /// The object (apiVersion, kind, metadata, spec).
    pub object: Value,
}

impl Federated {
    /// Its name.
    pub fn name(&self) -> &str {
        self.object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// Its namespace.
    pub fn namespace(&self) -> Option<&str> {
        self.object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
    }

    /// `federateddeployment demo/web`.
    pub fn display(&self) -> String {
        let kind = self.ftc.spec.federated_type.kind.to_lowercase();
        match self.namespace() {
            Some(ns) => format!("{kind} {ns}/{}", self.name()),
            None => format!("{kind} {}", self.name()),
        }
    }

    /// Its status, as the host holds it (empty for a manifest).
    pub fn status(&self) -> FederatedStatus {
        self.object
            .get("status")
            .cloned()
            .and_then(|s| serde_json::from_value(s).ok())
            .unwrap_or_default()
    }

    /// Its drift policy (`flotilla.io/drift-*` annotations; the default when unreadable,
    /// as in the controller).
    pub fn drift_policy(&self) -> flotilla_core::drift::Policy {
        let annotations = self
            .object
            .pointer("/metadata/annotations")
            .cloned()
            .and_then(|a| serde_json::from_value(a).ok())
            .unwrap_or_default();
        flotilla_core::drift::Policy::from_annotations(&annotations).unwrap_or_default()
    }

    /// Its spec.
    pub fn spec(&self) -> anyhow::Result<FederatedSpec> {
        serde_json::from_value(self.object.get("spec").cloned().unwrap_or(Value::Null))
            .with_context(|| format!("{}: malformed spec", self.display()))
    }
}

/// The text of a manifest file; `-` is stdin.
pub fn read_manifest(file: &std::path::Path) -> anyhow::Result<String> {
    if file.as_os_str() == "-" {
        return std::io::read_to_string(std::io::stdin()).context("reading stdin");
    }
    std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))
}

/// The documents of a manifest (YAML or JSON, `---` separated; empty documents skipped).
pub fn parse_manifest(text: &str) -> anyhow::Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).context("parsing the manifest")?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Whether `doc` is a `group/version` `kind` object named `name` in `namespace`.
fn is_object(doc: &Value, api_version: &str, kind: &str, namespace: &str, name: &str) -> bool {
    doc["apiVersion"].as_str() == Some(api_version)
        && doc["kind"].as_str() == Some(kind)
        && doc.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
        && doc
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .is_none_or(|ns| ns == namespace)
}

/// The federated objects of a manifest, each matched to its enabled type; documents of
/// other kinds (a FederatedNamespace's Namespace, an RSP) are skipped. A namespaced object
/// without a namespace gets `default_ns`, as `kubectl apply -f` would.
pub fn federated_in(
    docs: &[Value],
    ftcs: &[FederatedTypeConfig],
    default_ns: &str,
) -> Vec<Federated> {
    let mut out = Vec::new();
    for doc in docs {
        // kubefed's alpha objects belong to the same type: one desired-object function.
        let Some(ftc) = ftcs.iter().find(|f| {
            resolve::served_apis(f).iter().any(|(t, _)| {
                doc["apiVersion"].as_str() == Some(t.api_version().as_str())
                    && doc["kind"].as_str() == Some(t.kind.as_str())
            })
        }) else {
            continue;
        };
        let mut object = doc.clone();
        if ftc.spec.federated_type.namespaced() && doc.pointer("/metadata/namespace").is_none() {
            object["metadata"]["namespace"] = Value::String(default_ns.to_owned());
        }
        out.push(Federated {
            ftc: ftc.clone(),
            object,
        });
    }
    out
}

/// The federated object `type_name`/`name` in `namespace` of the host.
pub async fn from_host(
    host: &Client,
    kubefed_ns: &str,
    type_name: &str,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Federated> {
    let ftc = resolve::ftc_for(host, kubefed_ns, type_name).await?;
    // The v1beta1 object, else kubefed's alpha one of that name.
    for (fed, _) in resolve::served_apis(&ftc) {
        let ar = fed.to_kube();
        let api = resolve::federated_api(host, &fed, namespace);
        match api.get(name).await {
            Ok(obj) => {
                return Ok(Federated {
                    ftc,
                    object: serde_json::to_value(&obj)?,
                });
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("reading {} {name}", ar.kind)),
        }
    }
    let kind = &ftc.spec.federated_type.kind;
    anyhow::bail!(
        "reading {kind} {name}: not found in namespace {namespace} (in any served API version)"
    )
}

/// The spec of the FederatedNamespace of `namespace`, from the manifest or the host:
/// `None` when there is none, `Some(Err)` when its spec cannot be read (the controller then
/// places nothing, and says why).
pub async fn namespace_spec(
    host: &Client,
    docs: &[Value],
    namespace: &str,
) -> anyhow::Result<Option<Result<FederatedSpec, String>>> {
    let beta = crdgen::federated_api_resource(&flotilla_api::core::ApiResource {
        group: String::new(),
        version: "v1".into(),
        kind: "Namespace".into(),
        plural_name: "namespaces".into(),
        scope: flotilla_api::core::Scope::Cluster,
    });
    // kubefed's alpha FederatedNamespace places objects too, as the controller reads it.
    let ars: Vec<_> = [Some(beta.clone()), flotilla_api::alpha::alpha_twin(&beta)]
        .into_iter()
        .flatten()
        .collect();
    let in_manifest = docs
        .iter()
        .find(|d| {
            ars.iter()
                .any(|ar| is_object(d, &ar.api_version(), &ar.kind, namespace, namespace))
        })
        .cloned();
    let mut object = in_manifest;
    for ar in &ars {
        if object.is_some() {
            break;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(host.clone(), namespace, &ar.to_kube());
        match api.get_opt(namespace).await {
            Ok(found) => object = found.map(|f| serde_json::to_value(&f)).transpose()?,
            // kubefed's alpha CRD need not be installed.
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("reading the FederatedNamespace {namespace}"));
            }
        }
    }
    let Some(object) = object else {
        return Ok(None);
    };
    let spec = serde_json::from_value(object.get("spec").cloned().unwrap_or(Value::Null))
        .map_err(|e| format!("malformed FederatedNamespace spec: {e}"));
    Ok(Some(spec))
}

/// The KubeFedConfig's settings (defaults when there is none).
pub async fn config(host: &Client, kubefed_ns: &str) -> anyhow::Result<EffectiveConfig> {
    let api: Api<KubeFedConfig> = Api::namespaced(host.clone(), kubefed_ns);
    let found = api
        .get_opt(KUBEFED_CONFIG_NAME)
        .await
        .context("reading the KubeFedConfig")?;
    Ok(found.map(|c| c.spec.effective()).unwrap_or_default())
}

/// The spec of the ReplicaSchedulingPreference `namespace/name`, from the manifest or the
/// host, and the host's status (the capacity its last division read: member facts, which
/// a manifest cannot change).
pub async fn rsp(
    host: &Client,
    docs: &[Value],
    namespace: &str,
    name: &str,
) -> anyhow::Result<
    Option<(
        ReplicaSchedulingPreferenceSpec,
        Option<ReplicaSchedulingPreferenceStatus>,
    )>,
> {
    let api: Api<ReplicaSchedulingPreference> = Api::namespaced(host.clone(), namespace);
    let found = api
        .get_opt(name)
        .await
        .with_context(|| format!("reading ReplicaSchedulingPreference {namespace}/{name}"))?;
    let status = found.as_ref().and_then(|r| r.status.clone());
    let api_version = format!("{SCHEDULING_GROUP}/v1alpha1");
    if let Some(doc) = docs.iter().find(|d| {
        is_object(
            d,
            &api_version,
            "ReplicaSchedulingPreference",
            namespace,
            name,
        )
    }) {
        let spec = serde_json::from_value(doc.get("spec").cloned().unwrap_or(Value::Null))
            .context("malformed ReplicaSchedulingPreference spec")?;
        return Ok(Some((spec, status)));
    }
    Ok(found.map(|r| (r.spec, status)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::crdgen::{default_target_types, federated_type_config};

    fn ftcs() -> Vec<FederatedTypeConfig> {
        default_target_types()
            .iter()
            .map(|t| federated_type_config(t, "kube-federation-system"))
            .collect()
    }

    #[test]
    fn federated_objects_of_a_manifest_are_matched_to_their_types() {
        let docs = parse_manifest(
            "apiVersion: types.kubefed.io/v1beta1\nkind: FederatedConfigMap\nmetadata:\n  name: a\n\
             ---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\n---\n\
             apiVersion: types.kubefed.io/v1beta1\nkind: FederatedDeployment\nmetadata:\n  name: web\n  namespace: demo\n",
        )
        .expect("parses");
        let found = federated_in(&docs, &ftcs(), "default");
        let names: Vec<String> = found.iter().map(Federated::display).collect();
        assert_eq!(
            names,
            [
                "federatedconfigmap default/a",
                "federateddeployment demo/web"
            ]
        );
    }

    #[test]
    fn manifest_objects_match_by_kind_name_and_namespace() {
        let doc = serde_json::json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a", "namespace": "n"}});
        assert!(is_object(&doc, "v1", "X", "n", "a"));
        assert!(!is_object(&doc, "v1", "X", "other", "a"));
        assert!(!is_object(&doc, "v1", "Y", "n", "a"));
    }
}
