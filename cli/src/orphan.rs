//! `flotilla orphaning-deletion enable|disable|status`: the `kubefed.io/orphan=true`
//! annotation, which keeps member objects (only unlabelled) when the federated object is
//! deleted.

use anyhow::Context as _;
use flotilla_api::ORPHAN_ANNOTATION;
use kube::{
    ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::json;

use super::{Context, GlobalArgs, access, resolve};

/// Examples of `flotilla orphaning-deletion --help`.
pub const EXAMPLES: &str = "\
Examples:
  # Keep the member Deployments when the FederatedDeployment is deleted
  flotilla orphaning-deletion enable deployments.apps web -n demo
  flotilla orphaning-deletion status federateddeployment web -n demo
  flotilla orphaning-deletion disable deployments.apps web -n demo";

/// What to do with the annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OrphanAction {
    /// Set `kubefed.io/orphan=true`.
    Enable,
    /// Remove the annotation.
    Disable,
    /// Print whether it is set.
    Status,
}

/// Arguments of `flotilla orphaning-deletion`.
#[derive(Debug, Clone, clap::Args)]
pub struct OrphanArgs {
    /// enable, disable or status.
    #[arg(value_enum)]
    pub action: OrphanAction,
    /// The type (target or federated, e.g. `deployments.apps` or `federateddeployment`).
    #[arg(value_name = "TYPE")]
    pub type_name: String,
    /// Name of the federated object.
    pub name: String,
}

/// Runs `flotilla orphaning-deletion`.
pub async fn run(global: &GlobalArgs, args: OrphanArgs, ctx: &Context) -> anyhow::Result<()> {
    let access = access::host(global).await?;
    let host = access.client()?;
    let ftc = resolve::ftc_for(&host, &global.kubefed_namespace, &args.type_name).await?;
    let fed = &ftc.spec.federated_type;
    let ns = access::namespace(global, &access);
    let api = resolve::federated_api(&host, fed, &ns);
    let shown = if fed.namespaced() {
        format!("{} {ns}/{}", fed.kind, args.name)
    } else {
        format!("{} {}", fed.kind, args.name)
    };
    let value = match args.action {
        OrphanAction::Enable => Some("true"),
        OrphanAction::Disable => None,
        OrphanAction::Status => {
            let obj = api
                .get(&args.name)
                .await
                .with_context(|| format!("reading {shown}"))?;
            let enabled = obj
                .annotations()
                .get(ORPHAN_ANNOTATION)
                .is_some_and(|v| v == "true");
            ctx.out.line(format!(
                "orphaning deletion of {shown} is {}",
                if enabled { "enabled" } else { "disabled" }
            ));
            return Ok(());
        }
    };
    let patch = json!({"metadata": {"annotations": {ORPHAN_ANNOTATION: value}}});
    api.patch(&args.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("annotating {shown}"))?;
    ctx.out.line(format!(
        "orphaning deletion of {shown} {}",
        if value.is_some() {
            "enabled"
        } else {
            "disabled"
        }
    ));
    Ok(())
}
