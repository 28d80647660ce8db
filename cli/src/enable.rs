//! `flotilla enable` and `flotilla disable`: kubefedctl's commands for the federated types.
//!
//! `enable` resolves the target through discovery, takes the template schema from the
//! target's CRD when it is one (built-in types get a free-form template, as in Flotilla's
//! generated default CRDs), then applies the Federated CRD and the FederatedTypeConfig.
//! `disable` stops propagation, waits until the controller reports it stopped, and deletes
//! the FederatedTypeConfig (and with `--delete-crd` the Federated CRD). The opt-in APIs
//! (`--kubefed-alpha`, `--admiralty-imports`, with or without a type) are
//! [`super::optional_apis`]'s.

use std::time::Duration;

use anyhow::Context as _;
use flotilla_api::{
    CORE_GROUP, FederatedTypeConfig, SCHEDULING_GROUP, TYPES_GROUP,
    core::ApiResource,
    crdgen::{self, OptionalApi, TargetType},
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::{Value, json};

use super::{Context, GlobalArgs, access, optional_apis, parse_duration, resolve};

/// Examples of `flotilla enable --help`.
pub const ENABLE_EXAMPLES: &str = "\
Examples:
  flotilla enable deployments.apps
  flotilla enable configmaps
  # A custom resource: the Federated CRD gets the CRD's schema for its template
  flotilla enable widgets.example.com
  # Print the FederatedWidget CRD and the FederatedTypeConfig instead of applying them
  flotilla enable widgets.example.com -o yaml
  # Also serve kubefed's alpha API (types.kubefed.k8s.io/v1alpha1 FederatedWidget)
  flotilla enable widgets.example.com --kubefed-alpha
  # Serve kubefed's alpha API for every enabled type, and Admiralty's ServiceAccountImport
  flotilla enable --kubefed-alpha --admiralty-imports";

/// Examples of `flotilla disable --help`.
pub const DISABLE_EXAMPLES: &str = "\
Examples:
  flotilla disable widgets.example.com
  # Also delete the FederatedWidget CRD (and with it every FederatedWidget)
  flotilla disable widgets.example.com --delete-crd";

/// Output formats of commands that can print instead of applying.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// YAML documents separated by `---`.
    Yaml,
}

/// Arguments of `flotilla enable`.
#[derive(Debug, Clone, clap::Args)]
pub struct EnableArgs {
    /// The type: `plural.group` (`deployments.apps`, `widgets.example.com`), a plural, a
    /// kind or a short name. May be left out with `--kubefed-alpha` or `--admiralty-imports`.
    #[arg(
        value_name = "TYPE",
        required_unless_present_any = ["kubefed_alpha", "admiralty_imports"]
    )]
    pub type_name: Option<String>,
    /// Print the Federated CRD and the FederatedTypeConfig instead of applying them.
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
    /// How long to wait for the Federated CRD to be established.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
    /// The federated API: group and version of the generated Federated CRD (kubefedctl's
    /// flags).
    #[command(flatten)]
    pub federated: FederatedApi,
    /// Also serve kubefed's alpha API: the Federated CRD in `types.kubefed.k8s.io/v1alpha1`
    /// too, reconciled by the same controller — of TYPE (only with the default
    /// `--federated-group`/`--federated-version`), or without TYPE of every type enabled in
    /// `types.kubefed.io/v1beta1`. Opt-in: its plurals are v1beta1's too, so address each
    /// API fully qualified afterwards (`federatedconfigmaps.types.kubefed.io`).
    #[arg(long = "kubefed-alpha")]
    pub kubefed_alpha: bool,
    /// Also serve Admiralty's `multicluster.admiralty.io/v1alpha1` ServiceAccountImport.
    /// Opt-in: its plural is Flotilla's import's too, so address each fully qualified
    /// afterwards (`serviceaccountimports.multicluster.flotilla.io`, or `saimport`).
    #[arg(long = "admiralty-imports")]
    pub admiralty_imports: bool,
}

/// kubefedctl's `--federated-group` / `--federated-version`: the API group and version of
/// the Federated&lt;Kind&gt; CRD and the FederatedTypeConfig's `federatedType`.
#[derive(Debug, Clone, clap::Args)]
pub struct FederatedApi {
    /// API group of the Federated CRD.
    #[arg(long = "federated-group", default_value = TYPES_GROUP, value_name = "GROUP")]
    pub group: String,
    /// API version of the Federated CRD.
    #[arg(long = "federated-version", default_value = flotilla_api::V1BETA1, value_name = "VERSION")]
    pub version: String,
}

impl Default for FederatedApi {
    fn default() -> Self {
        FederatedApi {
            group: TYPES_GROUP.into(),
            version: flotilla_api::V1BETA1.into(),
        }
    }
}

/// Arguments of `flotilla disable`.
#[derive(Debug, Clone, clap::Args)]
pub struct DisableArgs {
    /// The type, as for `enable`, or its federated type (`federatedwidgets`).
    #[arg(value_name = "TYPE")]
    pub type_name: String,
    /// Also delete the Federated CRD, and with it every federated object of the type.
    #[arg(long)]
    pub delete_crd: bool,
    /// How long to wait for the controller to stop propagating.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
}

/// Builds what `enable` applies: the Federated CRD and the FederatedTypeConfig, in the
/// federated API group and version `federated`.
pub fn enable_objects(
    target: &TargetType,
    template_schema: Option<Value>,
    namespace: &str,
    federated: &FederatedApi,
) -> (CustomResourceDefinition, FederatedTypeConfig) {
    let mut crd = crdgen::federated_crd(target, template_schema);
    let mut ftc = crdgen::federated_type_config(target, namespace);
    ftc.spec.federated_type.group = federated.group.clone();
    ftc.spec.federated_type.version = federated.version.clone();
    crd.metadata.name = Some(ftc.spec.federated_type.qualified_name());
    crd.spec.group = federated.group.clone();
    for v in &mut crd.spec.versions {
        v.name = federated.version.clone();
    }
    (crd, ftc)
}

/// The OpenAPI v3 schema of `version` in a CRD.
pub fn crd_schema(crd: &CustomResourceDefinition, version: &str) -> Option<Value> {
    crd.spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
}

/// Runs `flotilla enable`.
pub async fn enable(global: &GlobalArgs, args: EnableArgs, ctx: &Context) -> anyhow::Result<()> {
    let host = access::host(global).await?.client()?;
    let ns = &global.kubefed_namespace;
    let typed = match &args.type_name {
        Some(t) => Some(objects_for(&host, ns, t, &args.federated).await?),
        None => None,
    };
    let optional = optional_apis::wanted(
        &host,
        ns,
        args.kubefed_alpha,
        args.admiralty_imports,
        typed.as_ref().map(|(crd, _, _)| crd),
    )
    .await?;
    if args.output == Some(OutputFormat::Yaml) {
        let mut docs = Vec::new();
        for c in optional.iter().map(|o| &o.crd) {
            docs.push(serde_saphyr::to_string(c).context("rendering a CRD")?);
        }
        if let Some((crd, ftc, _)) = &typed {
            docs.push(serde_saphyr::to_string(crd).context("rendering the CRD")?);
            docs.push(serde_saphyr::to_string(ftc).context("rendering the FederatedTypeConfig")?);
        }
        ctx.out.write(docs.join("---\n"));
        return Ok(());
    }
    // The alpha CRD first: the controller looks for it when the FederatedTypeConfig changes.
    for o in &optional {
        apply_crd(&host, &o.crd, args.timeout).await?;
        ctx.out.line(format!(
            "customresourcedefinition {} applied ({})",
            o.crd.name_any(),
            optional_apis::label(o.api)
        ));
    }
    if let Some((crd, ftc, schema)) = &typed {
        apply_objects(&host, crd, ftc, *schema, args.timeout, ctx).await?;
    }
    for api in OptionalApi::ALL {
        if optional.iter().any(|o| o.api == api) {
            ctx.out.line(optional_apis::note(api));
        }
    }
    Ok(())
}

async fn apply_crd(
    host: &Client,
    crd: &CustomResourceDefinition,
    timeout: Duration,
) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(host.clone());
    let crd_name = crd.name_any();
    super::apply(&crds, &crd_name, crd)
        .await
        .with_context(|| format!("applying CRD {crd_name}"))?;
    flotilla_controllers::install::wait_established(&crds, &crd_name, timeout).await?;
    Ok(())
}

/// Enables `type_name` on the host (as `flotilla enable` does) and returns its
/// FederatedTypeConfig; used by `federate --enable-type`.
pub async fn enable_type(
    host: &Client,
    kubefed_ns: &str,
    type_name: &str,
    federated: &FederatedApi,
    ctx: &Context,
) -> anyhow::Result<FederatedTypeConfig> {
    let (crd, ftc, schema) = objects_for(host, kubefed_ns, type_name, federated).await?;
    apply_objects(host, &crd, &ftc, schema, Duration::from_secs(60), ctx).await?;
    Ok(ftc)
}

/// The Federated CRD and FederatedTypeConfig of a type found by discovery on the host, and
/// whether the template schema came from the target's CRD.
pub async fn objects_for(
    host: &Client,
    kubefed_ns: &str,
    type_name: &str,
    federated: &FederatedApi,
) -> anyhow::Result<(CustomResourceDefinition, FederatedTypeConfig, bool)> {
    let found = resolve::discover(host, type_name).await?;
    if [CORE_GROUP, SCHEDULING_GROUP, federated.group.as_str()].contains(&found.api.group.as_str())
        || found.api.group == TYPES_GROUP
    {
        anyhow::bail!(
            "{} is a Flotilla type itself and cannot be federated",
            found.api.qualified_name()
        );
    }
    let schema = target_schema(host, &found.api).await?;
    let target = TargetType {
        api: found.api.clone(),
        short_names: found.short_names.clone(),
    };
    let has_schema = schema.is_some();
    let (crd, ftc) = enable_objects(&target, schema, kubefed_ns, federated);
    Ok((crd, ftc, has_schema))
}

/// The template schema of a target type: its CRD's schema of its version, `None` for a
/// built-in type (or a CRD without one).
pub async fn target_schema(host: &Client, target: &ApiResource) -> anyhow::Result<Option<Value>> {
    if target.group.is_empty() {
        return Ok(None);
    }
    let crds: Api<CustomResourceDefinition> = Api::all(host.clone());
    Ok(crds
        .get_opt(&target.qualified_name())
        .await
        .context("reading the target's CRD")?
        .and_then(|crd| crd_schema(&crd, &target.version)))
}

async fn apply_objects(
    host: &Client,
    crd: &CustomResourceDefinition,
    ftc: &FederatedTypeConfig,
    schema: bool,
    timeout: Duration,
    ctx: &Context,
) -> anyhow::Result<()> {
    let crd_name = crd.name_any();
    apply_crd(host, crd, timeout).await?;
    ctx.out.line(format!(
        "customresourcedefinition {crd_name} applied ({})",
        if schema {
            "template schema from the target CRD"
        } else {
            "free-form template"
        }
    ));
    let ns = ftc.metadata.namespace.clone().unwrap_or_default();
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(host.clone(), &ns);
    let ftc_name = ftc.name_any();
    super::apply(&ftcs, &ftc_name, ftc)
        .await
        .with_context(|| format!("applying FederatedTypeConfig {ftc_name}"))?;
    let fed = &ftc.spec.federated_type;
    let api = if fed.group == TYPES_GROUP && fed.version == flotilla_api::V1BETA1 {
        String::new()
    } else {
        format!(" ({})", fed.api_version())
    };
    ctx.out.line(format!(
        "federatedtypeconfig {ns}/{ftc_name} applied: {} is federated as {}{api}",
        ftc.spec.target_type.kind, fed.kind
    ));
    Ok(())
}

/// Runs `flotilla disable`.
pub async fn disable(global: &GlobalArgs, args: DisableArgs, ctx: &Context) -> anyhow::Result<()> {
    let host = access::host(global).await?.client()?;
    let ns = &global.kubefed_namespace;
    let ftc = resolve::ftc_for(&host, ns, &args.type_name).await?;
    let name = ftc.name_any();
    let api: Api<FederatedTypeConfig> = Api::namespaced(host.clone(), ns);
    let patched = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"propagation": "Disabled"}})),
        )
        .await
        .with_context(|| format!("disabling propagation in FederatedTypeConfig {name}"))?;
    ctx.out.line(format!(
        "federatedtypeconfig {ns}/{name}: propagation Disabled"
    ));
    wait_not_running(
        &api,
        &name,
        patched.metadata.generation.unwrap_or(0),
        args.timeout,
    )
    .await?;
    ctx.out.line(format!(
        "federatedtypeconfig {ns}/{name}: propagation controller NotRunning"
    ));
    delete_ignoring_missing(&host, &api, &name, args.delete_crd, &ftc, ctx).await
}

async fn wait_not_running(
    api: &Api<FederatedTypeConfig>,
    name: &str,
    generation: i64,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let ftc = api
            .get(name)
            .await
            .with_context(|| format!("reading FederatedTypeConfig {name}"))?;
        let stopped = ftc.status.as_ref().is_some_and(|s| {
            s.observed_generation >= generation
                && s.propagation_controller.as_deref() == Some("NotRunning")
        });
        if stopped {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "the propagation controller of {name} did not report NotRunning within {timeout:?} (is `flotilla controller-manager` running?); the FederatedTypeConfig was kept"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn delete_ignoring_missing(
    host: &Client,
    api: &Api<FederatedTypeConfig>,
    name: &str,
    delete_crd: bool,
    ftc: &FederatedTypeConfig,
    ctx: &Context,
) -> anyhow::Result<()> {
    let gone = |r: Result<(), kube::Error>| match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    };
    gone(api.delete(name, &DeleteParams::default()).await.map(|_| ()))
        .with_context(|| format!("deleting FederatedTypeConfig {name}"))?;
    ctx.out.line(format!("federatedtypeconfig {name} deleted"));
    if delete_crd {
        let crd_name = ftc.spec.federated_type.qualified_name();
        let crds: Api<CustomResourceDefinition> = Api::all(host.clone());
        gone(
            crds.delete(&crd_name, &DeleteParams::default())
                .await
                .map(|_| ()),
        )
        .with_context(|| format!("deleting CRD {crd_name}"))?;
        ctx.out
            .line(format!("customresourcedefinition {crd_name} deleted"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::core::{ApiResource, Scope};

    fn widget() -> TargetType {
        TargetType {
            api: ApiResource {
                group: "example.com".into(),
                version: "v1".into(),
                kind: "Widget".into(),
                plural_name: "widgets".into(),
                scope: Scope::Namespaced,
            },
            short_names: vec!["wd".into()],
        }
    }

    #[test]
    fn enabling_a_crd_type_uses_its_schema_for_the_template() {
        let schema = json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                "status": {"type": "object"}
            }
        });
        let (crd, ftc) = enable_objects(
            &widget(),
            Some(schema),
            "kube-federation-system",
            &FederatedApi::default(),
        );
        assert_eq!(crd.name_any(), "federatedwidgets.types.kubefed.io");
        assert_eq!(crd.spec.names.short_names, Some(vec!["fwd".to_string()]));
        let rendered = serde_json::to_value(&crd).expect("serializes");
        let template = &rendered["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["spec"]["properties"]["template"];
        assert_eq!(
            template["properties"]["spec"]["properties"]["size"]["type"],
            "integer"
        );
        assert!(template["properties"].get("status").is_none());
        assert_eq!(ftc.name_any(), "widgets.example.com");
        assert_eq!(
            ftc.metadata.namespace.as_deref(),
            Some("kube-federation-system")
        );
        assert_eq!(ftc.spec.federated_type.kind, "FederatedWidget");
    }

    #[test]
    fn the_federated_group_and_version_are_those_asked_for() {
        let api = FederatedApi {
            group: "x.example.io".into(),
            version: "v1alpha1".into(),
        };
        let (crd, ftc) = enable_objects(&widget(), None, "kube-federation-system", &api);
        assert_eq!(crd.name_any(), "federatedwidgets.x.example.io");
        assert_eq!(crd.spec.group, "x.example.io");
        assert_eq!(crd.spec.versions[0].name, "v1alpha1");
        assert_eq!(ftc.name_any(), "widgets.example.com");
        assert_eq!(ftc.spec.federated_type.group, "x.example.io");
        assert_eq!(
            ftc.spec.federated_type.api_version(),
            "x.example.io/v1alpha1"
        );
    }

    fn parse_enable(args: &[&str]) -> Result<EnableArgs, clap::Error> {
        use clap::Parser as _;
        let argv = ["flotilla", "enable"].iter().chain(args);
        match crate::Cli::try_parse_from(argv)?.command {
            crate::Command::Enable(args) => Ok(args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn the_type_may_be_left_out_only_to_install_an_optional_api() {
        assert!(parse_enable(&[]).is_err(), "nothing to enable");
        let alpha = parse_enable(&["--kubefed-alpha"]).expect("parses");
        assert_eq!(alpha.type_name, None);
        assert!(alpha.kubefed_alpha && !alpha.admiralty_imports);
        let admiralty = parse_enable(&["--admiralty-imports"]).expect("parses");
        assert!(admiralty.admiralty_imports && !admiralty.kubefed_alpha);
        let typed = parse_enable(&["configmaps", "--kubefed-alpha"]).expect("parses");
        assert_eq!(typed.type_name.as_deref(), Some("configmaps"));
    }

    #[test]
    fn a_crd_schema_is_taken_from_the_matching_version() {
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"plural": "widgets", "kind": "Widget"},
                "scope": "Namespaced",
                "versions": [
                    {"name": "v1alpha1", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object", "description": "old"}}},
                    {"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object", "description": "new"}}}
                ]
            }
        }))
        .expect("parses");
        assert_eq!(
            crd_schema(&crd, "v1").expect("schema")["description"],
            "new"
        );
        assert!(crd_schema(&crd, "v2").is_none());
    }
}
