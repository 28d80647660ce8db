//! Progressive rollout on real clusters (`spec.rollout`), with pods that get ready in
//! appearance (the simulated kubelet; images `fail:*` never get ready). One federation of
//! four members serves every step, in order, on one FederatedDeployment: member3 is the
//! canary (KubeFedCluster label `stage=canary`), the rest follow by name, one at a time.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, ensure};
use flotilla_api::{
    DEFAULT_NAMESPACE, KubeFedCluster, federated::FederatedStatus, rollout::RolloutStatus,
};
use flotilla_controllers::{manager::ControlPlane, metrics::Metrics};
use flotilla_tests::{
    assert::events_about,
    federation::{Federation, apply, federated_namespace, federation_with_pods},
    host::FederatedRef,
    member::{config_map_data, deployments, first_image},
    objects::FederatedObject,
    wait::wait_namespace_in,
    wait_for,
};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

const NS: &str = "rollout";
const NAME: &str = "web";
/// The rollout order: the canary group, then the clusters in no group by name.
const ORDER: [&str; 4] = ["member3", "member1", "member2", "member4"];
const MIN_SUCCESS_SECONDS: u64 = 2;
const DEADLINE_SECONDS: u64 = 25;
/// Pods scheduled, made ready and counted available on a loaded machine.
const STEP_TIMEOUT: Duration = Duration::from_secs(180);

#[tokio::test]
async fn a_progressive_rollout_goes_wave_by_wave_stops_on_failure_and_pauses() -> anyhow::Result<()>
{
    let mut fed = setup().await?;
    let web = deploy(&fed, "nginx:1").await?;
    wait_complete(&web, "the first version everywhere").await?;
    assert_eq!(images(&fed).await?, vec![Some("nginx:1".to_string()); 4]);

    an_invalid_rollout_is_reported_and_moves_nothing(&fed).await?;
    one_cluster_at_a_time_in_order(&fed, &web, "nginx:2").await?;
    nothing_is_written_once_complete(&fed, &web).await?;
    a_failing_template_stops_after_the_canary(&fed, &web).await?;
    one_cluster_at_a_time_in_order(&fed, &web, "nginx:3").await?;
    pause_stops_midway_and_survives_a_restart(&mut fed, &web).await?;
    a_member_down_fails_at_the_deadline(&fed, &web).await?;
    Ok(())
}

async fn setup() -> anyhow::Result<Federation> {
    let fed = federation_with_pods(4).await?;
    let clusters: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    let label = json!({"metadata": {"labels": {"stage": "canary"}}});
    clusters
        .patch("member3", &PatchParams::default(), &Patch::Merge(&label))
        .await?;
    federated_namespace(&fed, NS).await?;
    wait_namespace_in(&fed.members, NS).await?;
    Ok(fed)
}

/// Applies the FederatedDeployment with `image` and the progressive rollout.
async fn deploy(fed: &Federation, image: &str) -> anyhow::Result<FederatedRef> {
    let object = FederatedObject::deployment(NS, NAME, 1, image);
    let mut manifest = object.to_json();
    manifest["spec"]["rollout"] = json!({
        "strategy": "Progressive",
        "maxConcurrency": 1,
        "groups": [{"selector": {"matchLabels": {"stage": "canary"}}}],
        "minSuccessSeconds": MIN_SUCCESS_SECONDS,
        "progressDeadlineSeconds": DEADLINE_SECONDS,
        "maxFailures": 0,
    });
    apply(&fed.host, &object.api_resource(), Some(NS), &manifest).await?;
    Ok(object.in_host(&fed.host))
}

/// The image of the member Deployment in each member (None: no Deployment).
async fn images(fed: &Federation) -> anyhow::Result<Vec<Option<String>>> {
    let mut out = Vec::new();
    for i in 0..fed.members.len() {
        out.push(image(fed, i).await?);
    }
    Ok(out)
}

/// The image of the member Deployment in the member at `index` (0: member1).
async fn image(fed: &Federation, index: usize) -> anyhow::Result<Option<String>> {
    let d = deployments(&fed.members[index], NS).get_opt(NAME).await?;
    Ok(d.as_ref().and_then(first_image).map(str::to_string))
}

fn member_index(name: &str) -> usize {
    name.trim_start_matches("member")
        .parse::<usize>()
        .unwrap_or(1)
        - 1
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

async fn wait_complete(web: &FederatedRef, what: &str) -> anyhow::Result<FederatedStatus> {
    wait_reason(web, "Complete", what).await
}

/// `flotilla ... ARGS` against the host, in-process; its output.
async fn flotilla(fed: &Federation, args: &[&str]) -> anyhow::Result<String> {
    let mut in_ns = vec!["-n", NS];
    in_ns.extend_from_slice(args);
    flotilla_tests::cli::run_ok(fed, &in_ns).await
}

/// The ROLLOUT column of `kubectl get federateddeployments` for the object.
fn rollout_column(fed: &Federation) -> anyhow::Result<String> {
    let output = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(fed.env.kubeconfig_path())
        .args([
            "--context",
            "host",
            "get",
            "federateddeployments",
            "-n",
            NS,
            NAME,
        ])
        .output()
        .context("running kubectl")?;
    ensure!(
        output.status.success(),
        "kubectl: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut lines = text.lines();
    let header = lines.next().context("no header")?;
    let row = lines.next().context("no row")?;
    let at = header.find("ROLLOUT").context("no ROLLOUT column")?;
    let cell = row.get(at..).unwrap_or_default().split_whitespace().next();
    Ok(cell.unwrap_or_default().to_string())
}

/// As the rollout recorded it: each cluster (in [`ORDER`]) succeeded at least
/// minSuccessSeconds after the one before (RFC 3339 times of second precision: 1 s slack).
fn succeeded_min_success_apart(rollout: &RolloutStatus) -> anyhow::Result<()> {
    let mut times = Vec::new();
    for name in ORDER {
        let c = rollout
            .clusters
            .iter()
            .find(|c| c.name == name)
            .context("cluster missing")?;
        let at: k8s_openapi::jiff::Timestamp = c
            .since
            .parse()
            .with_context(|| format!("{name}: since {:?}", c.since))?;
        times.push((name, at.as_second()));
    }
    for pair in times.windows(2) {
        let gap = pair[1].1 - pair[0].1;
        ensure!(
            gap >= MIN_SUCCESS_SECONDS as i64 - 1,
            "{} succeeded {gap} s after {}: {times:?}",
            pair[1].0,
            pair[0].0
        );
    }
    Ok(())
}

/// Applies `image` and watches the members: the image reaches them in [`ORDER`], one at a
/// time, each at least minSuccessSeconds after the one before, while the others keep the
/// previous image.
async fn one_cluster_at_a_time_in_order(
    fed: &Federation,
    web: &FederatedRef,
    image: &str,
) -> anyhow::Result<()> {
    let before = images(fed).await?;
    deploy(fed, image).await?;
    let started = Instant::now();
    let mut reached: Vec<(&str, Duration)> = Vec::new();
    while reached.len() < ORDER.len() {
        ensure!(started.elapsed() < STEP_TIMEOUT, "reached only {reached:?}");
        let now = images(fed).await?;
        for (i, name) in ORDER.iter().enumerate() {
            let has_new = now[member_index(name)].as_deref() == Some(image);
            if i < reached.len() {
                ensure!(has_new, "{name} lost {image}: {now:?}");
            } else if has_new {
                ensure!(
                    i == reached.len(),
                    "{name} got {image} out of turn: {now:?}"
                );
                reached.push((name, started.elapsed()));
            } else {
                let kept = &now[member_index(name)];
                ensure!(
                    kept == &before[member_index(name)],
                    "{name} changed to {kept:?} before its turn"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = wait_complete(web, "the rollout complete").await?;
    let rollout = status.rollout.context("no status.rollout")?;
    assert_eq!(rollout.progress, "4/4");
    succeeded_min_success_apart(&rollout)?;
    let text = flotilla(
        fed,
        &[
            "rollout",
            "status",
            "deployment/web",
            "--wait",
            "--timeout",
            "30s",
        ],
    )
    .await?;
    assert!(text.contains("4/4 clusters done"), "{text}");
    assert_eq!(
        rollout_column(fed)?,
        "4/4",
        "kubectl get shows the progress"
    );
    let waves = events_about(&fed.host, NS, NAME, "WaveStarted").await?;
    assert!(!waves.is_empty(), "WaveStarted Events");
    Ok(())
}

/// A FederatedConfigMap whose `spec.rollout` is invalid: the `Rollout` condition and a
/// Warning name the field, and a template change reaches no member.
async fn an_invalid_rollout_is_reported_and_moves_nothing(fed: &Federation) -> anyhow::Result<()> {
    let apply_data = |value: &'static str| async move {
        let object = FederatedObject::config_map(NS, "bad", json!({"k": value}));
        let mut manifest = object.to_json();
        manifest["spec"]["rollout"] = json!({"strategy": "Progressive", "maxConcurrency": "150%"});
        apply(&fed.host, &object.api_resource(), Some(NS), &manifest).await?;
        anyhow::Ok(object.in_host(&fed.host))
    };
    let bad = apply_data("v1").await?;
    let status = wait_reason(&bad, "InvalidSpec", "the invalid rollout reported").await?;
    let c = status.rollout_condition().context("condition")?;
    assert!(
        c.message.contains("spec.rollout.maxConcurrency"),
        "{}",
        c.message
    );
    let warned = events_about(&fed.host, NS, "bad", "RolloutInvalid").await?;
    assert_eq!(warned.len(), 1, "one RolloutInvalid Event");
    let data = |fed: &Federation| {
        let members = fed.members.clone();
        async move {
            let mut out = Vec::new();
            for m in &members {
                out.push(
                    config_map_data(m, NS, "bad")
                        .await?
                        .map(|d| d.get("k").cloned()),
                );
            }
            anyhow::Ok(out)
        }
    };
    wait_for(
        STEP_TIMEOUT,
        "the first data created everywhere",
        || async {
            let now = data(fed).await?;
            ensure!(
                now.iter().all(|d| d == &Some(Some("v1".to_string()))),
                "{now:?}"
            );
            Ok(())
        },
    )
    .await?;
    apply_data("v2").await?;
    wait_reason(&bad, "InvalidSpec", "the change seen").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let now = data(fed).await?;
    assert!(
        now.iter().all(|d| d == &Some(Some("v1".to_string()))),
        "members kept v1: {now:?}"
    );
    Ok(())
}

/// Once complete, neither the member Deployments' specs nor the host status change.
async fn nothing_is_written_once_complete(
    fed: &Federation,
    web: &FederatedRef,
) -> anyhow::Result<()> {
    let generations = |fed: &Federation| {
        let members = fed.members.clone();
        async move {
            let mut out = Vec::new();
            for m in &members {
                out.push(deployments(m, NS).get(NAME).await?.metadata.generation);
            }
            anyhow::Ok(out)
        }
    };
    let before = generations(fed).await?;
    let host_before = web.get().await?.metadata.resource_version;
    tokio::time::sleep(Duration::from_secs(MIN_SUCCESS_SECONDS + 3)).await;
    assert_eq!(
        generations(fed).await?,
        before,
        "member Deployments rewritten"
    );
    assert_eq!(
        web.get().await?.metadata.resource_version,
        host_before,
        "host status rewritten"
    );
    Ok(())
}

/// An image whose pods never get ready stops the rollout after the canary, with the
/// member's reason, and the other clusters keep the previous image.
async fn a_failing_template_stops_after_the_canary(
    fed: &Federation,
    web: &FederatedRef,
) -> anyhow::Result<()> {
    deploy(fed, "fail:never-ready").await?;
    let status = wait_reason(web, "Failed", "the rollout stopped on the canary").await?;
    let c = status.rollout_condition().context("condition")?;
    assert_eq!(c.status, "False");
    assert!(
        c.message.contains("cluster member3 failed"),
        "{}",
        c.message
    );
    assert!(
        c.message.contains("ready"),
        "the member's reason: {}",
        c.message
    );
    let now = images(fed).await?;
    assert_eq!(now[2].as_deref(), Some("fail:never-ready"));
    for i in [0, 1, 3] {
        assert_eq!(
            now[i].as_deref(),
            Some("nginx:2"),
            "member{} untouched",
            i + 1
        );
    }
    let err = flotilla(
        fed,
        &[
            "rollout",
            "status",
            "deployment/web",
            "--wait",
            "--timeout",
            "30s",
        ],
    )
    .await
    .expect_err("--wait fails on a stopped rollout");
    assert!(format!("{err:#}").contains("member3"), "{err:#}");
    let failed = events_about(&fed.host, NS, NAME, "RolloutFailed").await?;
    assert_eq!(failed.len(), 1, "one RolloutFailed Event");
    Ok(())
}

/// Pausing after the canary stops the rollout; across a restart of the control plane a
/// cluster not reached yet is still rendered from the previous template (a member-side
/// edit there is repaired back to it, not to the new one); resuming finishes the rollout.
async fn pause_stops_midway_and_survives_a_restart(
    fed: &mut Federation,
    web: &FederatedRef,
) -> anyhow::Result<()> {
    let held = pause_after_the_canary(fed, web).await?;
    if let Some(cp) = fed.control_plane.take() {
        cp.shutdown().await;
    }
    let drift = json!({"spec": {"template": {"spec": {"containers": [
        {"name": NAME, "image": "drift:1"}]}}}});
    deployments(&fed.members[3], NS)
        .patch(NAME, &PatchParams::default(), &Patch::Merge(&drift))
        .await?;
    fed.control_plane = Some(ControlPlane::start(
        fed.host.clone(),
        DEFAULT_NAMESPACE,
        Arc::new(Metrics::new()),
    ));
    let fed: &Federation = fed;
    wait_for(
        STEP_TIMEOUT,
        "member4 repaired to the previous template",
        || async {
            let now = images(fed).await?;
            ensure!(now[3].as_deref() == Some("nginx:3"), "{now:?}");
            Ok(())
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(MIN_SUCCESS_SECONDS + 2)).await;
    assert_eq!(
        images(fed).await?,
        held,
        "nothing moved while paused, across a restart"
    );
    flotilla(fed, &["rollout", "resume", "deployment/web"]).await?;
    wait_complete(web, "the resumed rollout complete").await?;
    assert_eq!(images(fed).await?, vec![Some("nginx:4".to_string()); 4]);
    Ok(())
}

/// Rolls out nginx:4 and pauses once the canary has it; the images then.
async fn pause_after_the_canary(
    fed: &Federation,
    web: &FederatedRef,
) -> anyhow::Result<Vec<Option<String>>> {
    deploy(fed, "nginx:4").await?;
    wait_for(STEP_TIMEOUT, "the canary on nginx:4", || async {
        let now = images(fed).await?;
        ensure!(now[2].as_deref() == Some("nginx:4"), "{now:?}");
        Ok(())
    })
    .await?;
    flotilla(fed, &["rollout", "pause", "deployment/web"]).await?;
    wait_reason(web, "Paused", "the rollout paused").await?;
    let held = images(fed).await?;
    assert_eq!(held[3].as_deref(), Some("nginx:3"), "member4 comes last");
    Ok(held)
}

/// A member that is down when its turn comes counts as failed at the deadline.
async fn a_member_down_fails_at_the_deadline(
    fed: &Federation,
    web: &FederatedRef,
) -> anyhow::Result<()> {
    fed.env.stop_apiserver("member1").await?;
    let clusters: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    wait_for(STEP_TIMEOUT, "member1 not ready", || async {
        let c = clusters.get("member1").await?;
        let ready = c
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ensure!(!ready, "member1 still ready");
        Ok(())
    })
    .await?;
    deploy(fed, "nginx:5").await?;
    let status = wait_reason(web, "Failed", "the rollout stopped on member1").await?;
    let c = status.rollout_condition().context("condition")?;
    assert!(
        c.message.contains("cluster member1 failed"),
        "{}",
        c.message
    );
    assert!(c.message.contains("not ready"), "{}", c.message);
    let rollout = status.rollout.context("status.rollout")?;
    let state = |n: &str| {
        rollout
            .clusters
            .iter()
            .find(|c| c.name == n)
            .map(|c| c.state.as_str())
    };
    assert_eq!(state("member3"), Some("Succeeded"));
    assert_eq!(state("member2"), Some("Pending"));
    assert_eq!(image(fed, 2).await?.as_deref(), Some("nginx:5"));
    assert_eq!(
        image(fed, 1).await?.as_deref(),
        Some("nginx:4"),
        "member2 untouched"
    );
    assert_eq!(
        image(fed, 3).await?.as_deref(),
        Some("nginx:4"),
        "member4 untouched"
    );
    Ok(())
}
