//! `flotilla federate`: builds a Federated&lt;Kind&gt; from a live resource, like
//! `kubefedctl federate`. The template is the object with only `metadata.labels` kept and
//! `status` and server-set fields dropped; the placement selects every cluster
//! (`clusterSelector: {}`). `--contents` on a namespace also federates the namespace's
//! objects of every enabled namespaced type.

use std::path::PathBuf;

use anyhow::Context as _;
use flotilla_api::{FederatedTypeConfig, FederatedTypeConfigSpec, MANAGED_LABEL};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, ListParams},
};
use serde_json::{Value, json};

use super::enable::{self, FederatedApi, OutputFormat};
use super::{Context, GlobalArgs, access, resolve};

/// Examples of `flotilla federate --help`.
pub const EXAMPLES: &str = "\
Examples:
  # Federate an existing ConfigMap to every member cluster
  flotilla federate configmap web-config -n demo

  # Only print the FederatedConfigMap
  flotilla federate configmap web-config -n demo -o yaml

  # Federate a namespace and everything in it of an enabled type
  flotilla federate namespace demo --contents

  # Enable the type first if it is not enabled yet (kubefedctl --enable-type)
  flotilla federate secrets db-password -n demo --enable-type

  # Federated objects for every resource of a file, printed (kubefedctl federate -f)
  flotilla federate -f app.yaml > federated-app.yaml
  # ... or applied to the host
  flotilla federate -f app.yaml --apply";

/// Arguments of `flotilla federate`.
#[derive(Debug, Clone, clap::Args)]
pub struct FederateArgs {
    /// The type of the resource (`configmap`, `deployments.apps`, `namespace`, ...); it must
    /// be enabled (`flotilla enable TYPE`) unless `--enable-type` is given.
    #[arg(value_name = "TYPE", required_unless_present = "filename")]
    pub type_name: Option<String>,
    /// Name of the resource.
    #[arg(required_unless_present = "filename")]
    pub name: Option<String>,
    /// Federate the resources of this file (YAML or JSON, `-` for stdin) instead of a live
    /// one; like kubefedctl, the federated objects are printed unless `--apply` is given.
    #[arg(short = 'f', long = "filename", value_name = "FILE", conflicts_with_all = ["type_name", "contents"])]
    pub filename: Option<PathBuf>,
    /// With `-f`: apply the federated objects to the host instead of printing them.
    #[arg(long, requires = "filename")]
    pub apply: bool,
    /// Enable the resource's type first when it is not enabled (as `flotilla enable`).
    /// With `-f` and without `--apply`, nothing is written: the type's configuration is
    /// only computed.
    #[arg(long)]
    pub enable_type: bool,
    /// The federated API used by `--enable-type`.
    #[command(flatten)]
    pub federated: FederatedApi,
    /// For a namespace: also federate its objects of every enabled namespaced type.
    #[arg(long)]
    pub contents: bool,
    /// Print the federated objects instead of applying them.
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

fn is_namespace(spec: &FederatedTypeConfigSpec) -> bool {
    spec.target_type.group.is_empty() && spec.target_type.kind == "Namespace"
}

/// The template of a federated object made from `obj`: no `apiVersion`, `kind`, `status`
/// or metadata other than labels, and none of the fields the server or a controller sets
/// (a Namespace's finalizers, a ServiceAccount's token secrets, a Service's cluster IPs).
pub fn template_from(kind: &str, obj: &Value) -> Value {
    let mut template = obj.as_object().cloned().unwrap_or_default();
    for key in ["apiVersion", "kind", "status", "metadata"] {
        template.remove(key);
    }
    let labels = obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .filter(|l| !l.is_empty());
    if let Some(labels) = labels {
        template.insert("metadata".into(), json!({ "labels": labels }));
    }
    flotilla_core::policy_materialize::drop_server_fields(kind, &mut template);
    Value::Object(template)
}

/// The Federated&lt;Kind&gt; of `obj` for the type configured by `spec`, placed in every
/// cluster. A FederatedNamespace is named after and lives in its namespace.
pub fn federated_from(spec: &FederatedTypeConfigSpec, obj: &Value) -> anyhow::Result<Value> {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .context("the resource has no name")?;
    let namespace = if is_namespace(spec) {
        Some(name)
    } else {
        obj.pointer("/metadata/namespace").and_then(Value::as_str)
    };
    let mut metadata = json!({ "name": name });
    if spec.federated_type.namespaced()
        && let Some(ns) = namespace
    {
        metadata["namespace"] = json!(ns);
    }
    Ok(json!({
        "apiVersion": spec.federated_type.api_version(),
        "kind": spec.federated_type.kind,
        "metadata": metadata,
        "spec": {
            "template": template_from(&spec.target_type.kind, obj),
            "placement": { "clusterSelector": {} },
        }
    }))
}

/// Whether an object found in a namespace (for `--contents`) should be left alone: one a
/// controller owns (ReplicaSets of a Deployment), one Kubernetes creates in every namespace
/// (the `default` ServiceAccount, its token Secrets, `kube-root-ca.crt`), or one Flotilla
/// itself propagated into this cluster.
pub fn skip_content(kind: &str, obj: &Value) -> bool {
    let meta = &obj["metadata"];
    let owned = meta["ownerReferences"]
        .as_array()
        .is_some_and(|o| !o.is_empty());
    let managed = meta["labels"][MANAGED_LABEL].as_str() == Some("true");
    let name = meta["name"].as_str().unwrap_or("");
    let built_in = match kind {
        "ServiceAccount" => name == "default",
        "Secret" => obj["type"].as_str() == Some("kubernetes.io/service-account-token"),
        "ConfigMap" => name == "kube-root-ca.crt",
        _ => false,
    };
    owned || managed || built_in
}

fn target_api(
    client: &Client,
    spec: &FederatedTypeConfigSpec,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let ar = spec.target_type.to_kube();
    match ns {
        Some(ns) if spec.target_type.namespaced() => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    }
}

/// Runs `flotilla federate`.
pub async fn run(global: &GlobalArgs, args: FederateArgs, ctx: &Context) -> anyhow::Result<()> {
    let access = access::host(global).await?;
    let host = access.client()?;
    let ns = access::namespace(global, &access);
    let objects = match &args.filename {
        Some(file) => from_file(&host, global, &args, file, &ns, ctx).await?,
        None => from_live(&host, global, &args, &ns, ctx).await?,
    };
    let print = match &args.filename {
        Some(_) => !args.apply,
        None => args.output == Some(OutputFormat::Yaml),
    };
    if print {
        let docs = objects
            .iter()
            .map(serde_saphyr::to_string)
            .collect::<Result<Vec<_>, _>>()
            .context("rendering YAML")?;
        ctx.out.write(docs.join("---\n"));
        return Ok(());
    }
    for fed in &objects {
        apply(&host, fed).await?;
        ctx.out.line(format!(
            "{} {} applied",
            fed["kind"].as_str().unwrap_or("").to_lowercase(),
            display_name(fed)
        ));
    }
    Ok(())
}

/// The type's configuration: the enabled one, else (with `--enable-type`) the type enabled
/// now, or only computed when `dry` (nothing may be written).
async fn type_config(
    host: &Client,
    global: &GlobalArgs,
    args: &FederateArgs,
    type_name: &str,
    dry: bool,
    ctx: &Context,
) -> anyhow::Result<FederatedTypeConfig> {
    let ns = &global.kubefed_namespace;
    match resolve::ftc_for(host, ns, type_name).await {
        Ok(ftc) => Ok(ftc),
        Err(_) if args.enable_type && dry => {
            Ok(enable::objects_for(host, ns, type_name, &args.federated)
                .await?
                .1)
        }
        Err(_) if args.enable_type => {
            enable::enable_type(host, ns, type_name, &args.federated, ctx).await
        }
        Err(e) => Err(e.context("pass --enable-type to enable it")),
    }
}

/// The federated objects of one live resource (and with `--contents` of its namespace).
async fn from_live(
    host: &Client,
    global: &GlobalArgs,
    args: &FederateArgs,
    ns: &str,
    ctx: &Context,
) -> anyhow::Result<Vec<Value>> {
    let (Some(type_name), Some(name)) = (&args.type_name, &args.name) else {
        anyhow::bail!("give TYPE NAME or -f FILE");
    };
    let dry = args.output == Some(OutputFormat::Yaml);
    let ftc = type_config(host, global, args, type_name, dry, ctx).await?;
    let kind = ftc.spec.target_type.kind.clone();
    if args.contents && !is_namespace(&ftc.spec) {
        anyhow::bail!("--contents only applies to namespaces");
    }
    let obj = target_api(host, &ftc.spec, Some(ns))
        .get(name)
        .await
        .with_context(|| format!("reading {kind} {name}"))?;
    let mut objects = vec![federated_from(&ftc.spec, &serde_json::to_value(&obj)?)?];
    if args.contents {
        objects.extend(contents(host, &global.kubefed_namespace, name).await?);
    }
    Ok(objects)
}

/// The federated objects of every resource in a file; a namespaced resource without a
/// namespace is placed in `ns`, as `kubectl apply -f` would.
async fn from_file(
    host: &Client,
    global: &GlobalArgs,
    args: &FederateArgs,
    file: &std::path::Path,
    ns: &str,
    ctx: &Context,
) -> anyhow::Result<Vec<Value>> {
    let text = super::diff::input::read_manifest(file)?;
    let docs = super::diff::input::parse_manifest(&text)?;
    let mut out = Vec::new();
    for doc in docs {
        let type_name = type_of(&doc)?;
        let ftc = type_config(host, global, args, &type_name, !args.apply, ctx).await?;
        let mut doc = doc;
        if ftc.spec.target_type.namespaced() && doc.pointer("/metadata/namespace").is_none() {
            doc["metadata"]["namespace"] = Value::String(ns.to_owned());
        }
        out.push(federated_from(&ftc.spec, &doc)?);
    }
    Ok(out)
}

/// `Kind.group` of a manifest document (`Kind` for the core group), which both the enabled
/// types and discovery resolve.
pub fn type_of(doc: &Value) -> anyhow::Result<String> {
    let kind = doc["kind"]
        .as_str()
        .filter(|k| !k.is_empty())
        .context("a document has no kind")?;
    let api_version = doc["apiVersion"].as_str().unwrap_or("v1");
    Ok(match api_version.split_once('/') {
        Some((group, _)) => format!("{kind}.{group}"),
        None => kind.to_owned(),
    })
}

fn display_name(obj: &Value) -> String {
    match (
        obj.pointer("/metadata/namespace").and_then(Value::as_str),
        obj.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or(""),
    ) {
        (Some(ns), name) => format!("{ns}/{name}"),
        (None, name) => name.to_owned(),
    }
}

/// The federated objects of everything in namespace `ns` of an enabled namespaced type.
async fn contents(host: &Client, kubefed_ns: &str, ns: &str) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    let mut ftcs: Vec<FederatedTypeConfig> = resolve::list_ftcs(host, kubefed_ns).await?;
    ftcs.sort_by_key(|f| f.name_any());
    for ftc in ftcs {
        let spec = &ftc.spec;
        if !spec.target_type.namespaced() || is_namespace(spec) {
            continue;
        }
        let list = target_api(host, spec, Some(ns))
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing {} in {ns}", spec.target_type.plural_name))?;
        for item in list.items {
            let value = serde_json::to_value(&item)?;
            if !skip_content(&spec.target_type.kind, &value) {
                out.push(federated_from(spec, &value)?);
            }
        }
    }
    Ok(out)
}

/// Applies a federated object built here (server-side apply, field manager `flotilla`).
pub async fn apply(host: &Client, fed: &Value) -> anyhow::Result<DynamicObject> {
    let api_version = fed["apiVersion"].as_str().unwrap_or_default();
    let kind = fed["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = kube::discovery::pinned_kind(host, &gvk)
        .await
        .with_context(|| format!("discovering {kind}; is its type enabled?"))?;
    let name = fed
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let api: Api<DynamicObject> = match fed.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) if caps.scope == kube::discovery::Scope::Namespaced => {
            Api::namespaced_with(host.clone(), ns, &ar)
        }
        _ => Api::all_with(host.clone(), &ar),
    };
    super::apply(&api, name, fed)
        .await
        .with_context(|| format!("applying {kind} {}", display_name(fed)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flotilla_api::crdgen::{default_target_types, federated_type_config};

    /// The spec of the default type of target plural `plural`.
    pub(crate) fn spec_of(plural: &str) -> FederatedTypeConfigSpec {
        default_target_types()
            .iter()
            .map(|t| federated_type_config(t, "kube-federation-system").spec)
            .find(|s| s.target_type.plural_name == plural)
            .expect("a default type")
    }

    #[test]
    fn a_configmap_becomes_a_federated_configmap_for_every_cluster() {
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "web", "namespace": "demo", "uid": "1", "resourceVersion": "7",
                "labels": {"app": "web"}, "annotations": {"a": "b"},
                "managedFields": [{}], "creationTimestamp": "2024-01-01T00:00:00Z"
            },
            "data": {"k": "v"}
        });
        let fed = federated_from(&spec_of("configmaps"), &cm).expect("builds");
        assert_eq!(
            fed,
            json!({
                "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
                "metadata": {"name": "web", "namespace": "demo"},
                "spec": {
                    "template": {"metadata": {"labels": {"app": "web"}}, "data": {"k": "v"}},
                    "placement": {"clusterSelector": {}}
                }
            })
        );
    }

    #[test]
    fn a_namespace_becomes_a_federated_namespace_inside_itself_without_finalizers() {
        let ns = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "demo"},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"}
        });
        let fed = federated_from(&spec_of("namespaces"), &ns).expect("builds");
        assert_eq!(fed["kind"], "FederatedNamespace");
        assert_eq!(
            fed["metadata"],
            json!({"name": "demo", "namespace": "demo"})
        );
        assert_eq!(fed["spec"]["template"], json!({}));
    }

    #[test]
    fn server_set_fields_of_services_and_service_accounts_are_dropped() {
        let svc = json!({
            "kind": "Service", "metadata": {"name": "s"},
            "spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "ports": [{"port": 80}]}
        });
        assert_eq!(
            template_from("Service", &svc),
            json!({"spec": {"ports": [{"port": 80}]}})
        );
        let headless = json!({"kind": "Service", "spec": {"clusterIP": "None"}});
        assert_eq!(
            template_from("Service", &headless),
            json!({"spec": {"clusterIP": "None"}})
        );
        let sa = json!({"kind": "ServiceAccount", "secrets": [{"name": "t"}]});
        assert_eq!(template_from("ServiceAccount", &sa), json!({}));
    }

    #[test]
    fn namespace_contents_skip_owned_and_built_in_objects() {
        let owned = json!({"metadata": {"name": "rs", "ownerReferences": [{"uid": "1"}]}});
        assert!(skip_content("ReplicaSet", &owned));
        assert!(skip_content(
            "ServiceAccount",
            &json!({"metadata": {"name": "default"}})
        ));
        assert!(skip_content(
            "Secret",
            &json!({"metadata": {"name": "t"}, "type": "kubernetes.io/service-account-token"})
        ));
        assert!(skip_content(
            "ConfigMap",
            &json!({"metadata": {"name": "kube-root-ca.crt"}})
        ));
        assert!(skip_content(
            "ConfigMap",
            &json!({"metadata": {"name": "x", "labels": {"kubefed.io/managed": "true"}}})
        ));
        assert!(!skip_content(
            "ConfigMap",
            &json!({"metadata": {"name": "web"}})
        ));
    }
}
