//! `flotilla uninstall --member-objects keep|delete`: releases the federation's hold on
//! everything before its CRDs and controller go. Every federated object of every
//! FederatedTypeConfig is deleted — first marked `kubefed.io/orphan=true` (keep: the member
//! objects stay, only unlabelled) or unmarked (delete: the member objects go) — and the
//! running controller-manager removes or unlabels the member objects and releases each
//! finalizer, as for any deletion. FederatedNamespaces go last, so a deleted member
//! namespace never takes objects that were to be kept with it.
//!
//! With `--no-controller` (the controller-manager is gone), only `keep` is possible: the
//! finalizers are removed directly and member objects stay as they are, still labelled
//! `kubefed.io/managed=true`. What to do per object is [`plan`] (pure).

use std::time::Duration;

use anyhow::{Context as _, bail};
use flotilla_api::{FederatedTypeConfig, ORPHAN_ANNOTATION, SYNC_FINALIZER};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams},
    core::ApiResource,
};
use serde_json::json;

use super::{Context, GlobalArgs, access};

/// Examples of `flotilla uninstall --help`.
pub const EXAMPLES: &str = "\
Examples:
  # Remove every federated object but keep what it created in the members
  flotilla uninstall --member-objects keep

  # Remove every federated object and what it created in the members
  flotilla uninstall --member-objects delete --timeout 5m

  # The controller-manager is already gone: release the finalizers, leave members alone
  flotilla uninstall --member-objects keep --no-controller

Then: flotilla unjoin each member, and kubectl delete -k config/ (docs/operations.md).";

/// What happens to the member objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MemberObjects {
    /// Keep them (unlabelled: no longer managed).
    Keep,
    /// Delete them.
    Delete,
}

/// Arguments of `flotilla uninstall`.
#[derive(Debug, Clone, clap::Args)]
pub struct UninstallArgs {
    /// Keep or delete the objects the federation created in member clusters.
    #[arg(long, value_enum)]
    pub member_objects: MemberObjects,
    /// How long to wait for the controller-manager to release every finalizer.
    #[arg(long, default_value = "2m", value_parser = super::parse_duration)]
    pub timeout: Duration,
    /// The controller-manager is not running: remove the finalizers directly (only with
    /// `--member-objects keep`; member objects stay as they are).
    #[arg(long)]
    pub no_controller: bool,
}

/// A federated object as the plan sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// Its federated kind (`FederatedConfigMap`).
    pub kind: String,
    /// Namespace, `None` for cluster-scoped ones.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// The value of `kubefed.io/orphan`, if any.
    pub orphan: Option<String>,
    /// Whether it still carries the sync finalizer.
    pub finalized: bool,
    /// Whether it is already being deleted.
    pub deleting: bool,
}

/// One step of the uninstall for one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Set `kubefed.io/orphan=true`.
    MarkOrphan,
    /// Remove `kubefed.io/orphan`.
    UnmarkOrphan,
    /// Delete the object (the controller does the rest).
    Delete,
    /// Remove the sync finalizer directly (no controller).
    ReleaseFinalizer,
}

/// What to do to `held` for the choice, in order. The orphan mark is set or cleared before
/// the deletion, since the controller reads it when it handles the deletion.
pub fn plan(held: &Held, choice: MemberObjects, no_controller: bool) -> Vec<Step> {
    let orphaned = held.orphan.as_deref() == Some("true");
    let mut steps = Vec::new();
    match choice {
        MemberObjects::Keep if !orphaned => steps.push(Step::MarkOrphan),
        MemberObjects::Delete if held.orphan.is_some() => steps.push(Step::UnmarkOrphan),
        _ => {}
    }
    if !held.deleting {
        steps.push(Step::Delete);
    }
    if no_controller && held.finalized {
        steps.push(Step::ReleaseFinalizer);
    }
    steps
}

/// FederatedNamespaces last: deleting one deletes the member namespace and its contents.
fn rank(kind: &str) -> u8 {
    u8::from(kind == "FederatedNamespace")
}

fn held_of(kind: &str, o: &DynamicObject) -> Held {
    Held {
        kind: kind.to_string(),
        namespace: o.namespace(),
        name: o.name_any(),
        orphan: o.annotations().get(ORPHAN_ANNOTATION).cloned(),
        finalized: o.finalizers().iter().any(|f| f == SYNC_FINALIZER),
        deleting: o.metadata.deletion_timestamp.is_some(),
    }
}

/// Every federated type enabled in the host: (kind, API resource), whose CRD is installed.
async fn federated_types(host: &Client, ns: &str) -> anyhow::Result<Vec<(String, ApiResource)>> {
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(host.clone(), ns);
    let mut types: Vec<(String, ApiResource)> = ftcs
        .list(&ListParams::default())
        .await
        .context("listing FederatedTypeConfigs")?
        .into_iter()
        .flat_map(|f| {
            let fed = f.spec.federated_type;
            // kubefed's alpha twin holds objects with the same finalizer.
            let twin = flotilla_api::alpha::alpha_twin(&fed);
            std::iter::once(fed).chain(twin)
        })
        .map(|fed| (fed.kind.clone(), fed.to_kube()))
        .collect();
    types.sort_by_key(|(kind, _)| (rank(kind), kind.clone()));
    Ok(types)
}

/// The objects of one federated type still holding the sync finalizer; `None` when its CRD
/// is not installed.
async fn held(host: &Client, kind: &str, ar: &ApiResource) -> anyhow::Result<Option<Vec<Held>>> {
    let api: Api<DynamicObject> = Api::all_with(host.clone(), ar);
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(Some(list.iter().map(|o| held_of(kind, o)).collect())),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e).with_context(|| format!("listing {kind}")),
    }
}

async fn apply_step(api: &Api<DynamicObject>, held: &Held, step: &Step) -> anyhow::Result<()> {
    let pp = PatchParams::default();
    let what = || format!("{} {}", held.kind, held.name);
    match step {
        Step::MarkOrphan | Step::UnmarkOrphan => {
            let value = (*step == Step::MarkOrphan).then_some("true");
            let patch = json!({"metadata": {"annotations": {ORPHAN_ANNOTATION: value}}});
            api.patch(&held.name, &pp, &Patch::Merge(&patch))
                .await
                .with_context(what)?;
        }
        Step::Delete => match api.delete(&held.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e).with_context(what),
        },
        Step::ReleaseFinalizer => {
            let live = match api.get_opt(&held.name).await.with_context(what)? {
                Some(o) => o,
                None => return Ok(()),
            };
            let rest: Vec<String> = live
                .finalizers()
                .iter()
                .filter(|f| *f != SYNC_FINALIZER)
                .cloned()
                .collect();
            // The resourceVersion makes it a guarded patch: another writer's change fails it.
            let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": live.resource_version()}});
            match api.patch(&held.name, &pp, &Patch::Merge(&patch)).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e).with_context(what),
            }
        }
    }
    Ok(())
}

/// Runs `flotilla uninstall`.
pub async fn run(global: &GlobalArgs, args: UninstallArgs, ctx: &Context) -> anyhow::Result<()> {
    if args.no_controller && args.member_objects == MemberObjects::Delete {
        bail!(
            "--no-controller cannot delete member objects (the controller-manager does that); \
             use --member-objects keep, or start the controller-manager"
        );
    }
    let access = access::host(global).await?;
    let host = access.client()?;
    let types = federated_types(&host, &global.kubefed_namespace).await?;
    for (kind, ar) in &types {
        let Some(objects) = held(&host, kind, ar).await? else {
            continue;
        };
        for h in &objects {
            let api: Api<DynamicObject> = match &h.namespace {
                Some(ns) => Api::namespaced_with(host.clone(), ns, ar),
                None => Api::all_with(host.clone(), ar),
            };
            for step in plan(h, args.member_objects, args.no_controller) {
                apply_step(&api, h, &step).await?;
            }
        }
        wait_gone(&host, kind, ar, args.timeout).await?;
        ctx.out.line(format!(
            "{kind} ({}): {} removed",
            ar.api_version,
            objects.len()
        ));
    }
    let kept = match args.member_objects {
        MemberObjects::Keep if args.no_controller => "kept as they were (still labelled)",
        MemberObjects::Keep => "kept (unlabelled)",
        MemberObjects::Delete => "deleted",
    };
    ctx.out.line(format!(
        "every federated object removed; member objects {kept}. Next: flotilla unjoin each \
         member, then kubectl delete -k config/"
    ));
    Ok(())
}

/// Waits until no object of the type is left; names what is left on timeout.
async fn wait_gone(
    host: &Client,
    kind: &str,
    ar: &ApiResource,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let left = held(host, kind, ar).await?.unwrap_or_default();
        if left.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let names: Vec<String> = left
                .iter()
                .take(5)
                .map(|h| match &h.namespace {
                    Some(ns) => format!("{ns}/{}", h.name),
                    None => h.name.clone(),
                })
                .collect();
            bail!(
                "{} {kind} still hold the finalizer {SYNC_FINALIZER} after {timeout:?} ({}{}): \
                 is the controller-manager running? Without one, use --no-controller",
                left.len(),
                names.join(", "),
                if left.len() > 5 { ", …" } else { "" }
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(orphan: Option<&str>, deleting: bool) -> Held {
        Held {
            kind: "FederatedConfigMap".into(),
            namespace: Some("demo".into()),
            name: "cm".into(),
            orphan: orphan.map(str::to_string),
            finalized: true,
            deleting,
        }
    }

    #[test]
    fn keeping_marks_the_object_orphaned_before_deleting_it() {
        assert_eq!(
            plan(&held(None, false), MemberObjects::Keep, false),
            [Step::MarkOrphan, Step::Delete]
        );
        assert_eq!(
            plan(&held(Some("false"), false), MemberObjects::Keep, false),
            [Step::MarkOrphan, Step::Delete]
        );
        assert_eq!(
            plan(&held(Some("true"), false), MemberObjects::Keep, false),
            [Step::Delete]
        );
    }

    #[test]
    fn deleting_clears_an_orphan_mark_before_deleting() {
        assert_eq!(
            plan(&held(Some("true"), false), MemberObjects::Delete, false),
            [Step::UnmarkOrphan, Step::Delete]
        );
        assert_eq!(
            plan(&held(None, false), MemberObjects::Delete, false),
            [Step::Delete]
        );
    }

    #[test]
    fn an_object_already_being_deleted_is_not_deleted_again() {
        assert_eq!(
            plan(&held(Some("true"), true), MemberObjects::Keep, false),
            []
        );
        assert_eq!(
            plan(&held(None, true), MemberObjects::Keep, false),
            [Step::MarkOrphan]
        );
    }

    #[test]
    fn without_a_controller_the_finalizer_is_released_directly() {
        assert_eq!(
            plan(&held(None, false), MemberObjects::Keep, true),
            [Step::MarkOrphan, Step::Delete, Step::ReleaseFinalizer]
        );
        let mut unfinalized = held(None, true);
        unfinalized.finalized = false;
        assert_eq!(
            plan(&unfinalized, MemberObjects::Keep, true),
            [Step::MarkOrphan]
        );
    }

    #[test]
    fn federated_namespaces_go_last() {
        let mut kinds = vec![
            "FederatedNamespace",
            "FederatedSecret",
            "FederatedConfigMap",
        ];
        kinds.sort_by_key(|k| (rank(k), k.to_string()));
        assert_eq!(
            kinds,
            [
                "FederatedConfigMap",
                "FederatedSecret",
                "FederatedNamespace"
            ]
        );
    }
}
