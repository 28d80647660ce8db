//! `spec.rollout.onFailure: Rollback` and `flotilla rollout undo` on real clusters, with
//! pods that get ready in appearance (the simulated kubelet; images `fail:*` never get
//! ready). Three members, one at a time by name. A template whose pods never get ready
//! fails on member1, which goes back to the previous revision while the federated template
//! stays as written and member2 and member3 are never touched; a new template rolls out
//! normally; `rollout undo` writes an earlier revision back into the template and every
//! cluster follows; an unknown revision is refused with nothing changed. The object's name
//! is longer than a label value may be (63 characters), as a Deployment's may be: its
//! revisions are recorded, listed, undone to and removed all the same.

use anyhow::{Context as _, ensure};
use flotilla_api::{federated::FederatedStatus, rollout::REVISION_ANNOTATION};
use flotilla_controllers::sync::{NAME_LABEL, name_label};
use flotilla_tests::{
    assert::events_about,
    federation::{Federation, apply, federated_namespace, federation_with_pods},
    host::FederatedRef,
    member::{deployments, first_image},
    objects::FederatedObject,
    wait::wait_namespace_in,
    wait_for,
};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::{Api, api::ListParams};
use serde_json::json;
use std::time::Duration;

const NS: &str = "rollback";
/// Longer than a label value may be (63): the revisions' name label holds a cut form of it.
const NAME: &str = "web-with-a-name-longer-than-the-sixty-three-characters-of-a-label-value";
/// `deployment/NAME`, as the CLI takes it.
const TARGET: &str =
    "deployment/web-with-a-name-longer-than-the-sixty-three-characters-of-a-label-value";
const DEADLINE_SECONDS: u64 = 30;
/// Pods scheduled, made ready and counted available on a loaded machine.
const STEP_TIMEOUT: Duration = Duration::from_secs(180);

#[tokio::test]
async fn a_failed_wave_goes_back_to_the_stable_revision_and_undo_returns_every_cluster()
-> anyhow::Result<()> {
    let fed = federation_with_pods(3).await?;
    federated_namespace(&fed, NS).await?;
    wait_namespace_in(&fed.members, NS).await?;
    let web = deploy(&fed, "nginx:1").await?;
    wait_reason(&web, "Complete", "nginx:1 everywhere").await?;

    the_failed_cluster_goes_back_and_the_others_stay(&fed, &web).await?;
    deploy(&fed, "nginx:2").await?;
    wait_reason(&web, "Complete", "a new template after the rollback").await?;
    assert_eq!(images(&fed).await?, vec![Some("nginx:2".to_string()); 3]);

    an_unknown_revision_is_refused_and_nothing_changes(&fed, &web).await?;
    undo_returns_every_cluster(&fed, &web).await?;
    deleting_it_removes_its_revisions(&fed, &web).await?;
    Ok(())
}

/// The controller removes the object's revisions before it drops its finalizer, so none is
/// left once the object is gone — without the host's garbage collector, which is held
/// (its kube-controller-manager stopped with SIGSTOP) for the deletion.
async fn deleting_it_removes_its_revisions(
    fed: &Federation,
    web: &FederatedRef,
) -> anyhow::Result<()> {
    assert!(
        revision_count(fed).await? >= 2,
        "revisions before the deletion"
    );
    let collector = HeldProcess::hold(host_controller_manager(fed)?)?;
    web.delete().await?;
    web.wait_gone(STEP_TIMEOUT).await?;
    let left = revision_count(fed).await?;
    drop(collector);
    assert_eq!(left, 0, "revisions left once it is gone");
    Ok(())
}

/// The pid of the host's kube-controller-manager (the one reading the host's kubeconfig).
fn host_controller_manager(fed: &Federation) -> anyhow::Result<u32> {
    let config = fed.env.host().dir().join("controller-manager.kubeconfig");
    let config = config.display().to_string();
    fed.env
        .pids()
        .into_iter()
        .find(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            cmdline.contains("kube-controller-manager") && cmdline.contains(&config)
        })
        .context("the host's kube-controller-manager")
}

/// A process stopped with SIGSTOP until this is dropped (SIGCONT).
struct HeldProcess(u32);

impl HeldProcess {
    fn hold(pid: u32) -> anyhow::Result<Self> {
        signal(pid, "-STOP")?;
        Ok(HeldProcess(pid))
    }
}

impl Drop for HeldProcess {
    fn drop(&mut self) {
        let _ = signal(self.0, "-CONT");
    }
}

fn signal(pid: u32, which: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .args([which, &pid.to_string()])
        .status()?;
    anyhow::ensure!(status.success(), "kill {which} {pid}: {status}");
    Ok(())
}

async fn revision_count(fed: &Federation) -> anyhow::Result<usize> {
    let api: Api<ControllerRevision> = Api::namespaced(fed.host.clone(), NS);
    let selector = format!("{NAME_LABEL}={}", name_label(NAME));
    Ok(api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .len())
}

/// `fail:never-ready` with `onFailure: Rollback`: member1 fails at the deadline and goes
/// back to nginx:1; `RolledBack` names it with the member's reason; the template stays.
async fn the_failed_cluster_goes_back_and_the_others_stay(
    fed: &Federation,
    web: &FederatedRef,
) -> anyhow::Result<()> {
    deploy(fed, "fail:never-ready").await?;
    let status = wait_reason(web, "RolledBack", "the failed wave rolled back").await?;
    let c = status.rollout_condition().context("condition")?;
    assert_eq!(c.status, "False");
    assert!(
        c.message.contains("cluster member1 failed") && c.message.contains("ready"),
        "the failed cluster and the member's reason: {}",
        c.message
    );
    let rollout = status.rollout.context("status.rollout")?;
    assert!(rollout.rolled_back_to.is_some());
    assert_eq!(rollout.rolled_back_to, rollout.stable_revision);
    let states: Vec<(&str, &str)> = rollout
        .clusters
        .iter()
        .map(|c| (c.name.as_str(), c.state.as_str()))
        .collect();
    assert_eq!(
        states,
        [
            ("member1", "Failed"),
            ("member2", "Pending"),
            ("member3", "Pending")
        ]
    );
    let stable = rollout.stable_revision.clone().unwrap_or_default();
    wait_for(STEP_TIMEOUT, "member1 back on nginx:1", || async {
        let d = deployments(&fed.members[0], NS).get(NAME).await?;
        let revision = d
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REVISION_ANNOTATION));
        ensure!(
            first_image(&d) == Some("nginx:1") && revision == Some(&stable),
            "{:?} at {revision:?}",
            first_image(&d)
        );
        Ok(())
    })
    .await?;
    assert_eq!(images(fed).await?, vec![Some("nginx:1".to_string()); 3]);
    assert_eq!(
        template_image(web).await?.as_deref(),
        Some("fail:never-ready"),
        "the federated template is not rewritten"
    );
    let warned = events_about(&fed.host, NS, NAME, "RolloutRolledBack").await?;
    assert_eq!(warned.len(), 1, "one RolloutRolledBack Event");
    let err = flotilla(
        fed,
        &["rollout", "status", TARGET, "--wait", "--timeout", "30s"],
    )
    .await
    .expect_err("--wait fails on a rolled-back rollout");
    assert!(format!("{err:#}").contains("member1"), "{err:#}");
    Ok(())
}

async fn an_unknown_revision_is_refused_and_nothing_changes(
    fed: &Federation,
    web: &FederatedRef,
) -> anyhow::Result<()> {
    let before = web.get().await?.metadata.generation;
    let err = flotilla(fed, &["rollout", "undo", TARGET, "--to-revision", "999"])
        .await
        .expect_err("an unknown revision");
    let text = format!("{err:#}");
    assert!(
        text.contains("revision 999 is not recorded") && text.contains("nothing changed"),
        "{text}"
    );
    assert_eq!(web.get().await?.metadata.generation, before);
    Ok(())
}

/// `rollout undo` goes back to nginx:1 (the last revision that reached every cluster
/// before nginx:2); `--to-revision` to nginx:2's number goes forward again.
async fn undo_returns_every_cluster(fed: &Federation, web: &FederatedRef) -> anyhow::Result<()> {
    let text = flotilla(fed, &["rollout", "undo", TARGET]).await?;
    assert!(text.contains("rolled back to revision"), "{text}");
    assert_eq!(template_image(web).await?.as_deref(), Some("nginx:1"));
    wait_reason(web, "Complete", "undo: nginx:1 everywhere").await?;
    assert_eq!(images(fed).await?, vec![Some("nginx:1".to_string()); 3]);

    let history = flotilla(fed, &["rollout", "history", TARGET]).await?;
    let number = revision_number(fed, "nginx:2").await?;
    assert!(
        history.lines().any(|l| l.starts_with(&number.to_string())),
        "{history}"
    );
    let n = number.to_string();
    flotilla(fed, &["rollout", "undo", TARGET, "--to-revision", &n]).await?;
    assert_eq!(template_image(web).await?.as_deref(), Some("nginx:2"));
    wait_reason(web, "Complete", "undo --to-revision: nginx:2 everywhere").await?;
    assert_eq!(images(fed).await?, vec![Some("nginx:2".to_string()); 3]);
    Ok(())
}

/// Applies the FederatedDeployment with `image`, one cluster at a time, rolling back.
async fn deploy(fed: &Federation, image: &str) -> anyhow::Result<FederatedRef> {
    let object = FederatedObject::deployment(NS, NAME, 1, image);
    let mut manifest = object.to_json();
    // The name is too long for a label value or a container name: those stay short.
    let spec = &mut manifest["spec"]["template"]["spec"];
    spec["selector"]["matchLabels"]["app"] = json!("web");
    spec["template"]["metadata"]["labels"]["app"] = json!("web");
    spec["template"]["spec"]["containers"][0]["name"] = json!("web");
    manifest["spec"]["rollout"] = json!({
        "strategy": "Progressive",
        "maxConcurrency": 1,
        "progressDeadlineSeconds": DEADLINE_SECONDS,
        "onFailure": "Rollback",
    });
    apply(&fed.host, &object.api_resource(), Some(NS), &manifest).await?;
    Ok(object.in_host(&fed.host))
}

/// The image of the member Deployment in each member (None: no Deployment).
async fn images(fed: &Federation) -> anyhow::Result<Vec<Option<String>>> {
    let mut out = Vec::new();
    for m in &fed.members {
        let d = deployments(m, NS).get_opt(NAME).await?;
        out.push(d.as_ref().and_then(first_image).map(str::to_string));
    }
    Ok(out)
}

/// The image in the federated object's template.
async fn template_image(web: &FederatedRef) -> anyhow::Result<Option<String>> {
    let obj = web.get().await?;
    let image = obj
        .data
        .pointer("/spec/template/spec/template/spec/containers/0/image");
    Ok(image.and_then(|v| v.as_str()).map(str::to_string))
}

/// The number (`ControllerRevision.revision`) of the recorded revision with `image`.
async fn revision_number(fed: &Federation, image: &str) -> anyhow::Result<i64> {
    let api: Api<ControllerRevision> = Api::namespaced(fed.host.clone(), NS);
    let selector = format!("{NAME_LABEL}={}", name_label(NAME));
    let list = api.list(&ListParams::default().labels(&selector)).await?;
    list.items
        .iter()
        .find(|r| {
            r.data
                .as_ref()
                .and_then(|d| {
                    d.0.pointer("/template/spec/template/spec/containers/0/image")
                })
                .and_then(|v| v.as_str())
                == Some(image)
        })
        .map(|r| r.revision)
        .with_context(|| format!("no recorded revision with {image}"))
}

/// Waits until the `Rollout` condition has `reason` for the current generation.
async fn wait_reason(
    web: &FederatedRef,
    reason: &str,
    what: &str,
) -> anyhow::Result<FederatedStatus> {
    web.wait_rollout(reason, STEP_TIMEOUT)
        .await
        .with_context(|| what.to_owned())
}

/// `flotilla ... ARGS` against the host, in-process; its output.
async fn flotilla(fed: &Federation, args: &[&str]) -> anyhow::Result<String> {
    let mut in_ns = vec!["-n", NS];
    in_ns.extend_from_slice(args);
    flotilla_tests::cli::run_ok(fed, &in_ns).await
}
