//! `flotilla rollout status|pause|resume TYPE/NAME`: where a progressive rollout
//! (`spec.rollout.strategy: Progressive`) stands, optionally waiting for it to complete;
//! and stopping or continuing it through `spec.rollout.paused` (`history` and `undo`:
//! [`super::rollout_history`]). Reading and patching is
//! thin I/O; what the status means ([`verdict`]) and how it reads ([`render`]) are pure.

use std::time::Duration;

use anyhow::Context as _;
use flotilla_api::{
    federated::{FederatedSpec, FederatedStatus},
    rollout::RolloutReason,
};
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams},
};
use serde_json::json;

use super::{Context, GlobalArgs, access, parse_duration, resolve};

/// Examples of `flotilla rollout --help`.
pub const EXAMPLES: &str = "\
Examples:
  # Where the rollout of a federated Deployment stands, per cluster
  flotilla rollout status deployment/web -n demo

  # In a script: wait until every cluster runs the new template; fail when it stops
  flotilla rollout status deployment/web -n demo --wait --timeout 15m

  # Stop it where it is, and continue later
  flotilla rollout pause deployment/web -n demo
  flotilla rollout resume deployment/web -n demo

  # The recorded revisions, and back to the last one that reached every cluster (or to N)
  flotilla rollout history deployment/web -n demo
  flotilla rollout undo deployment/web -n demo [--to-revision 3]";

/// How often `--wait` looks again.
const POLL: Duration = Duration::from_secs(1);

/// The `rollout` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum RolloutCommand {
    /// Show where a progressive rollout stands; with --wait, wait for it to complete.
    Status(StatusArgs),
    /// Stop a progressive rollout where it is (sets spec.rollout.paused).
    Pause(TargetArgs),
    /// Continue a paused rollout (clears spec.rollout.paused).
    Resume(TargetArgs),
    /// List the revisions a progressive rollout recorded.
    History(TargetArgs),
    /// Write an earlier revision back into the template (default: the last one that
    /// reached every cluster); the rollout follows.
    Undo(super::rollout_history::UndoArgs),
}

/// The object a rollout command works on.
#[derive(Debug, Clone, clap::Args)]
pub struct TargetArgs {
    /// `TYPE/NAME`, the type in any spelling (`deployment`, `federateddeployments`, `fdeploy`).
    #[arg(value_name = "TYPE/NAME")]
    pub target: String,
}

/// Arguments of `flotilla rollout status`.
#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub object: TargetArgs,
    /// Wait until the rollout completes; exit non-zero when it stops on failures, or on
    /// timeout.
    #[arg(long)]
    pub wait: bool,
    /// How long `--wait` waits.
    #[arg(long, default_value = "10m", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
}

/// What a rollout's status means for `--wait`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every cluster runs the current template.
    Complete,
    /// Still going (or paused, or not yet seen by the controller).
    Pending(String),
    /// Stopped on failures: the condition's message.
    Failed(String),
}

/// The verdict on an object's rollout; `generation` is the object's, so a status written
/// before the controller saw the latest change is not taken for the answer.
pub fn verdict(generation: i64, status: &FederatedStatus) -> Verdict {
    let Some(c) = status.rollout_condition() else {
        return Verdict::Pending("the controller has not reported the rollout yet".into());
    };
    if status.observed_generation < generation {
        return Verdict::Pending("the controller has not seen the latest change yet".into());
    }
    match c.reason.as_str() {
        r if r == RolloutReason::Complete.as_str() => Verdict::Complete,
        r if r == RolloutReason::Failed.as_str()
            || r == RolloutReason::RolledBack.as_str()
            || r == RolloutReason::InvalidSpec.as_str() =>
        {
            Verdict::Failed(c.message.clone())
        }
        _ => Verdict::Pending(c.message.clone()),
    }
}

/// The rollout as text: a headline, the condition, and a row per cluster.
pub fn render(what: &str, status: &FederatedStatus) -> String {
    let Some(r) = &status.rollout else {
        let note = status
            .rollout_condition()
            .map(|c| format!(": {} {}", c.reason, c.message))
            .unwrap_or_default();
        return format!("{what}: no rollout status{note}\n");
    };
    let revision = &r.target_revision;
    let mut out = format!(
        "{what}: revision {revision} (generation {}), {} clusters done, wave {}/{}\n",
        r.target_generation, r.progress, r.current_wave, r.waves
    );
    if let Some(c) = status.rollout_condition() {
        out.push_str(&format!(
            "Rollout {}: {} — {}\n",
            c.status, c.reason, c.message
        ));
    }
    let rows: Vec<[String; 5]> = r
        .clusters
        .iter()
        .map(|c| {
            [
                c.name.clone(),
                c.wave.to_string(),
                c.state.as_str().to_string(),
                c.since.clone(),
                c.message.clone(),
            ]
        })
        .collect();
    out.push_str(&columns(
        ["CLUSTER", "WAVE", "STATE", "SINCE", "MESSAGE"],
        &rows,
    ));
    out
}

/// Left-aligned columns, two spaces apart.
fn columns(header: [&str; 5], rows: &[[String; 5]]) -> String {
    let mut width = header.map(str::len);
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: [&str; 5]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(header);
    for row in rows {
        out.push_str(&line(row.each_ref().map(String::as_str)));
    }
    out
}

/// Runs a `flotilla rollout` subcommand.
pub async fn run(global: &GlobalArgs, cmd: RolloutCommand, ctx: &Context) -> anyhow::Result<()> {
    let access = access::host(global).await?;
    let host = access.client()?;
    let ns = access::namespace(global, &access);
    match cmd {
        RolloutCommand::Status(args) => status(global, &host, &ns, args, ctx).await,
        RolloutCommand::Pause(t) => set_paused(global, &host, &ns, &t, true, ctx).await,
        RolloutCommand::Resume(t) => set_paused(global, &host, &ns, &t, false, ctx).await,
        RolloutCommand::History(t) => {
            super::rollout_history::history(global, &host, &ns, &t, ctx).await
        }
        RolloutCommand::Undo(args) => {
            super::rollout_history::undo(global, &host, &ns, &args, ctx).await
        }
    }
}

/// The federated object's API and name for `TYPE/NAME`, how to call it in messages, and
/// its kind.
pub(crate) async fn object_api(
    global: &GlobalArgs,
    host: &Client,
    ns: &str,
    target: &TargetArgs,
) -> anyhow::Result<(Api<DynamicObject>, String, String, String)> {
    let (type_name, name) = target
        .target
        .split_once('/')
        .filter(|(t, n)| !t.is_empty() && !n.is_empty())
        .context("give the object as TYPE/NAME, e.g. deployment/web")?;
    let ftc = resolve::ftc_for(host, &global.kubefed_namespace, type_name).await?;
    let fed = &ftc.spec.federated_type;
    let api = resolve::federated_api(host, fed, ns);
    let what = format!("{}/{name}", fed.kind.to_lowercase());
    Ok((api, name.to_string(), what, fed.kind.clone()))
}

async fn status(
    global: &GlobalArgs,
    host: &Client,
    ns: &str,
    args: StatusArgs,
    ctx: &Context,
) -> anyhow::Result<()> {
    let (api, name, what, _) = object_api(global, host, ns, &args.object).await?;
    let deadline = tokio::time::Instant::now() + args.timeout;
    loop {
        let obj = api
            .get(&name)
            .await
            .with_context(|| format!("reading {what}"))?;
        let status = FederatedStatus::from_dynamic(&obj);
        let verdict = verdict(obj.metadata.generation.unwrap_or(0), &status);
        if !args.wait {
            ctx.out.write(render(&what, &status));
            return Ok(());
        }
        match verdict {
            Verdict::Complete => {
                ctx.out.write(render(&what, &status));
                return Ok(());
            }
            Verdict::Failed(message) => {
                ctx.out.write(render(&what, &status));
                anyhow::bail!("the rollout of {what} stopped: {message}");
            }
            Verdict::Pending(note) if tokio::time::Instant::now() >= deadline => {
                ctx.out.write(render(&what, &status));
                anyhow::bail!(
                    "the rollout of {what} did not complete within {:?}: {note}",
                    args.timeout
                );
            }
            Verdict::Pending(_) => {}
        }
        tokio::select! {
            _ = ctx.shutdown.cancelled() => anyhow::bail!("interrupted while waiting for the rollout"),
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

async fn set_paused(
    global: &GlobalArgs,
    host: &Client,
    ns: &str,
    target: &TargetArgs,
    paused: bool,
    ctx: &Context,
) -> anyhow::Result<()> {
    let (api, name, what, _) = object_api(global, host, ns, target).await?;
    let obj = api
        .get(&name)
        .await
        .with_context(|| format!("reading {what}"))?;
    if let Some(policy) = made_by_policy(&obj) {
        anyhow::bail!(
            "{what} is made by {policy}, which rewrites its spec: set spec.rollout.paused: {paused} on the policy instead (it applies to every object the policy propagates)"
        );
    }
    let spec = FederatedSpec::from_dynamic(&obj)?;
    anyhow::ensure!(
        spec.rollout
            .as_ref()
            .is_some_and(|r| r.is_progressive() || r.is_canary()),
        "{what} has no progressive rollout (spec.rollout.strategy: Progressive or Canary)"
    );
    let patch = json!({"spec": {"rollout": {"paused": paused}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("patching {what}"))?;
    ctx.out.line(format!(
        "{what} {}",
        if paused { "paused" } else { "resumed" }
    ));
    Ok(())
}

/// The policy that made `obj` (`PropagationPolicy/ns/name`), when a policy did.
fn made_by_policy(obj: &kube::api::DynamicObject) -> Option<String> {
    use flotilla_api::policy::{MATERIALIZED_LABEL, POLICY_ANNOTATION};
    use kube::ResourceExt as _;
    let labelled = obj.labels().get(MATERIALIZED_LABEL).map(String::as_str) == Some("true");
    obj.annotations()
        .get(POLICY_ANNOTATION)
        .filter(|_| labelled)
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::{
        federated::FederatedCondition,
        rollout::{ClusterRollout, ClusterRolloutState, RolloutStatus},
    };

    fn with_condition(generation: i64, reason: &str, message: &str) -> FederatedStatus {
        FederatedStatus {
            observed_generation: generation,
            conditions: vec![FederatedCondition {
                type_: "Rollout".into(),
                status: if reason == "Complete" {
                    "True"
                } else {
                    "False"
                }
                .into(),
                reason: reason.into(),
                message: message.into(),
                ..FederatedCondition::default()
            }],
            ..FederatedStatus::default()
        }
    }

    #[test]
    fn a_policy_made_object_names_its_policy() {
        let obj: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedDeployment",
            "metadata": {"name": "web", "labels": {"policy.flotilla.io/materialized": "true"},
                "annotations": {"policy.flotilla.io/propagation-policy": "PropagationPolicy/shop/web"}}
        }))
        .expect("an object");
        assert_eq!(
            made_by_policy(&obj).as_deref(),
            Some("PropagationPolicy/shop/web")
        );
        let mut mine = obj.clone();
        mine.metadata.labels = None;
        assert_eq!(
            made_by_policy(&mine),
            None,
            "the annotation alone is not enough"
        );
    }

    #[test]
    fn the_verdict_follows_the_rollout_condition_of_the_current_generation() {
        assert_eq!(
            verdict(2, &with_condition(2, "Complete", "")),
            Verdict::Complete
        );
        assert_eq!(
            verdict(2, &with_condition(2, "Failed", "cluster m1 failed: x")),
            Verdict::Failed("cluster m1 failed: x".into())
        );
        assert_eq!(
            verdict(2, &with_condition(2, "RolledBack", "went back")),
            Verdict::Failed("went back".into())
        );
        assert!(matches!(
            verdict(3, &with_condition(2, "Complete", "")),
            Verdict::Pending(_)
        ));
        assert!(matches!(
            verdict(2, &with_condition(2, "Paused", "paused")),
            Verdict::Pending(_)
        ));
        assert!(matches!(
            verdict(1, &FederatedStatus::default()),
            Verdict::Pending(_)
        ));
    }

    #[test]
    fn the_rendering_shows_each_cluster_in_rollout_order() {
        let mut status = with_condition(2, "Progressing", "wave 1/2: updating m3");
        status.rollout = Some(RolloutStatus {
            target_revision: "abc".into(),
            target_generation: 2,
            progress: "0/2".into(),
            current_wave: 1,
            waves: 2,
            clusters: vec![
                ClusterRollout {
                    name: "m3".into(),
                    state: ClusterRolloutState::Progressing,
                    wave: 1,
                    ..ClusterRollout::default()
                },
                ClusterRollout {
                    name: "m1".into(),
                    wave: 2,
                    ..ClusterRollout::default()
                },
            ],
            ..RolloutStatus::default()
        });
        let text = render("federateddeployment/web", &status);
        assert!(
            text.contains("revision abc (generation 2), 0/2 clusters done, wave 1/2"),
            "{text}"
        );
        let m3 = text.find("m3 ").expect("m3 row");
        let m1 = text.find("m1 ").expect("m1 row");
        assert!(m3 < m1, "{text}");
        assert!(text.contains("Progressing"), "{text}");
    }
}
