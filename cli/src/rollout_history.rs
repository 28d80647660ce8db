//! `flotilla rollout history|undo TYPE/NAME`: the revisions a progressive rollout recorded
//! (its ControllerRevisions), and a manual rollback that writes one of them back into the
//! federated object's template and overrides, so that the normal rollout follows. Which
//! revision `undo` takes is [`flotilla_core::rollout::rollback::undo_target`] (pure); the
//! listing's text is [`render`] (pure); the rest is thin I/O.

use anyhow::Context as _;
use flotilla_api::federated::{FederatedSpec, FederatedStatus};
use flotilla_controllers::sync::{revision_of, revisions_selector};
use flotilla_core::rollout::rollback::{RecordedRevision, undo_target};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

use super::{Context, GlobalArgs, rollout::TargetArgs};

/// Arguments of `flotilla rollout undo`.
#[derive(Debug, Clone, clap::Args)]
pub struct UndoArgs {
    #[command(flatten)]
    pub object: TargetArgs,
    /// The revision to go back to (a number from `flotilla rollout history`); default: the
    /// last revision that reached every cluster before the current one.
    #[arg(long, value_name = "N")]
    pub to_revision: Option<i64>,
}

/// One recorded revision with its content.
struct Recorded {
    revision: RecordedRevision,
    content: Value,
}

/// The recorded revisions of a federated object, oldest first.
async fn recorded(
    host: &Client,
    global: &GlobalArgs,
    obj: &DynamicObject,
    kind: &str,
) -> anyhow::Result<Vec<Recorded>> {
    let ns = obj
        .namespace()
        .unwrap_or_else(|| global.kubefed_namespace.clone());
    let api: Api<ControllerRevision> = Api::namespaced(host.clone(), &ns);
    let selector = revisions_selector(kind, &obj.name_any());
    let uid = obj.uid().unwrap_or_default();
    let list = api
        .list(&ListParams::default().labels(&selector))
        .await
        .context("listing the rollout's ControllerRevisions")?;
    let mut out: Vec<Recorded> = list
        .items
        .into_iter()
        .filter(|r| r.owner_references().iter().any(|o| o.uid == uid))
        .filter_map(|r| {
            let hash = r.name_any().rsplit('-').next()?.to_string();
            Some(Recorded {
                revision: RecordedRevision {
                    number: r.revision,
                    hash,
                },
                content: r.data.map(|d| d.0).unwrap_or(Value::Null),
            })
        })
        .collect();
    out.sort_by_key(|r| r.revision.number);
    Ok(out)
}

/// The revisions as text: number, hash, and which is the template's and the stable one.
pub fn render(
    what: &str,
    recorded: &[RecordedRevision],
    current: &str,
    stable: Option<&str>,
) -> String {
    if recorded.is_empty() {
        return format!("{what}: no revision recorded (a progressive rollout records them)\n");
    }
    let mut out = format!("{what}\n{:<10}{:<18}NOTE\n", "REVISION", "HASH");
    for r in recorded {
        let mut notes = Vec::new();
        if r.hash == current {
            notes.push("template");
        }
        if Some(r.hash.as_str()) == stable {
            notes.push("stable");
        }
        let line = format!("{:<10}{:<18}{}", r.number, r.hash, notes.join(", "));
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The JSON patch that sets the template and overrides to a revision's content, on the
/// object's resource version (a concurrent change makes it fail, nothing written).
pub fn undo_patch(content: &Value, resource_version: &str, has_overrides: bool) -> Value {
    let mut ops = vec![
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}),
        json!({"op": "add", "path": "/spec/template",
            "value": content.get("template").cloned().unwrap_or(json!({}))}),
    ];
    match content.get("overrides") {
        Some(o) if o.as_array().is_some_and(|a| !a.is_empty()) => {
            ops.push(json!({"op": "add", "path": "/spec/overrides", "value": o}));
        }
        _ if has_overrides => ops.push(json!({"op": "remove", "path": "/spec/overrides"})),
        _ => {}
    }
    Value::Array(ops)
}

/// The object, its spec and status, for a command that needs its progressive rollout.
async fn read(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
) -> anyhow::Result<(DynamicObject, FederatedSpec, FederatedStatus)> {
    let obj = api
        .get(name)
        .await
        .with_context(|| format!("reading {what}"))?;
    let spec = FederatedSpec::from_dynamic(&obj)?;
    anyhow::ensure!(
        spec.rollout
            .as_ref()
            .is_some_and(|r| r.is_progressive() || r.is_canary()),
        "{what} has no progressive rollout (spec.rollout.strategy: Progressive or Canary): no revision is recorded"
    );
    let status = FederatedStatus::from_dynamic(&obj);
    Ok((obj, spec, status))
}

/// `flotilla rollout history`.
pub async fn history(
    global: &GlobalArgs,
    host: &Client,
    ns: &str,
    target: &TargetArgs,
    ctx: &Context,
) -> anyhow::Result<()> {
    let (api, name, what, kind) = super::rollout::object_api(global, host, ns, target).await?;
    let (obj, spec, status) = read(&api, &name, &what).await?;
    let list = recorded(host, global, &obj, &kind).await?;
    let revisions: Vec<RecordedRevision> = list.into_iter().map(|r| r.revision).collect();
    let stable = status
        .rollout
        .as_ref()
        .and_then(|r| r.stable_revision.as_deref());
    ctx.out
        .write(render(&what, &revisions, &revision_of(&spec).0, stable));
    Ok(())
}

/// `flotilla rollout undo`.
pub async fn undo(
    global: &GlobalArgs,
    host: &Client,
    ns: &str,
    args: &UndoArgs,
    ctx: &Context,
) -> anyhow::Result<()> {
    let (api, name, what, kind) =
        super::rollout::object_api(global, host, ns, &args.object).await?;
    let (obj, spec, status) = read(&api, &name, &what).await?;
    let list = recorded(host, global, &obj, &kind).await?;
    let revisions: Vec<RecordedRevision> = list.iter().map(|r| r.revision.clone()).collect();
    let current = revision_of(&spec).0;
    let stable = status
        .rollout
        .as_ref()
        .and_then(|r| r.stable_revision.as_deref());
    let chosen = undo_target(&revisions, &current, stable, args.to_revision)
        .map_err(|e| anyhow::anyhow!("{what}: {e}; nothing changed"))?;
    if chosen.hash == current {
        ctx.out.line(format!(
            "{what}: the template is revision {} already; nothing changed",
            chosen.number
        ));
        return Ok(());
    }
    let content = list
        .iter()
        .find(|r| r.revision == *chosen)
        .map(|r| &r.content)
        .context("the chosen revision vanished")?;
    let patch = undo_patch(
        content,
        &obj.resource_version().unwrap_or_default(),
        !spec.overrides.is_empty(),
    );
    let patch: json_patch::Patch =
        serde_json::from_value(patch).context("building the JSON patch")?;
    api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .with_context(|| format!("writing revision {} into {what}", chosen.number))?;
    ctx.out.line(format!(
        "{what} rolled back to revision {} ({}); the rollout follows",
        chosen.number, chosen.hash
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_replaces_the_template_and_drops_overrides_the_revision_had_not() {
        let content = json!({"template": {"spec": {"replicas": 2}}, "overrides": []});
        let ops = undo_patch(&content, "42", true);
        assert_eq!(
            ops,
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "add", "path": "/spec/template", "value": {"spec": {"replicas": 2}}},
                {"op": "remove", "path": "/spec/overrides"},
            ])
        );
        let without = undo_patch(&content, "42", false);
        assert_eq!(without.as_array().map(Vec::len), Some(2));
        let with = json!({"template": {}, "overrides": [{"clusterName": "m1"}]});
        let ops = undo_patch(&with, "7", false);
        assert_eq!(
            ops[2],
            json!({"op": "add", "path": "/spec/overrides", "value": [{"clusterName": "m1"}]})
        );
    }

    #[test]
    fn the_history_marks_the_template_and_the_stable_revision() {
        let revisions: Vec<RecordedRevision> = [(1, "aaa"), (3, "bbb"), (5, "ccc")]
            .iter()
            .map(|(n, h)| RecordedRevision {
                number: *n,
                hash: h.to_string(),
            })
            .collect();
        let text = render("federateddeployment/web", &revisions, "ccc", Some("aaa"));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "federateddeployment/web");
        assert!(
            lines[2].starts_with("1") && lines[2].ends_with("stable"),
            "{text}"
        );
        assert!(lines[3].ends_with("bbb"), "{text}");
        assert!(lines[4].ends_with("template"), "{text}");
        assert!(render("x", &[], "a", None).contains("no revision recorded"));
    }
}
