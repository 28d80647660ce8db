//! A progressive rollout whose template goes back to an earlier revision while a wave is
//! in progress, on the soak's federation (member1 push, member2 push behind a proxy,
//! member3 pull; pods ready in appearance): nginx:1 rolled out, a new image started
//! (`fail:3`, whose pods never get ready, holds member1's wave), then nginx:1 again — from
//! a held wave, while paused, mid-wave, and across a control-plane restart; and once
//! member1's nodes were marked `Unknown` (a heartbeat gap). Every time the rollout must
//! complete with every member on the template's image, annotated with its revision (the
//! soak's rollout invariant, `soak::checks::rollouts`).

use std::time::Duration;

use anyhow::ensure;
use flotilla_tests::{
    federation::{apply, federated},
    host::FederatedRef,
    member::{deployments, first_image},
    objects::FederatedObject,
    wait_for,
};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

use crate::fault_harness::start_control_plane;
use crate::soak::{
    checks,
    setup::{NS, Soak, soak_federation},
    workload::fd_api,
};

const NAME: &str = "web";
/// Pods scheduled, made ready and counted available on a loaded machine.
const STEP: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_template_back_at_an_earlier_revision_mid_rollout_completes_on_push_and_pull()
-> anyhow::Result<()> {
    let mut soak = soak_federation().await?;
    deploy(&soak, "nginx:1", false).await?;
    converged(&soak, "nginx:1 everywhere").await?;

    // member1 on an image whose pods never get ready (its wave holds), then nginx:1 again.
    deploy(&soak, "fail:3", false).await?;
    wait_image(&soak, 0, "fail:3").await?;
    wait_reason(&soak.fed.host, "Progressing").await?;
    deploy(&soak, "nginx:1", false).await?;
    converged(&soak, "back to nginx:1 from a wave that holds").await?;

    // The same, paused: the clusters still on nginx:1 are done at once, member1 waits for
    // the rollout to resume.
    deploy(&soak, "fail:3", false).await?;
    wait_image(&soak, 0, "fail:3").await?;
    deploy(&soak, "fail:3", true).await?;
    wait_reason(&soak.fed.host, "Paused").await?;
    deploy(&soak, "nginx:1", true).await?;
    wait_reason(&soak.fed.host, "Paused").await?;
    deploy(&soak, "nginx:1", false).await?;
    converged(&soak, "back to nginx:1 after a pause").await?;

    // Mid-wave: member1 and member2 on nginx:3 (member3 perhaps too); back to nginx:1.
    deploy(&soak, "nginx:3", false).await?;
    wait_image(&soak, 1, "nginx:3").await?;
    deploy(&soak, "nginx:1", false).await?;
    converged(&soak, "back to nginx:1 mid-wave").await?;

    // Across a control-plane restart: killed while member1 holds the wave, the template
    // reverted while it is down.
    deploy(&soak, "fail:3", false).await?;
    wait_image(&soak, 0, "fail:3").await?;
    drop(soak.fed.control_plane.take());
    deploy(&soak, "nginx:1", false).await?;
    soak.fed.control_plane = Some(start_control_plane(&soak.fed.host));
    converged(&soak, "back to nginx:1 across a restart").await?;

    // member1's nodes marked Unknown, as the node lifecycle controller does after a
    // heartbeat gap: the simulated kubelet reports them Ready again, so pods are scheduled
    // there and the next rollout completes.
    mark_nodes_unknown(&soak.fed.members[0]).await?;
    deploy(&soak, "nginx:2", false).await?;
    converged(
        &soak,
        "nginx:2 everywhere after member1's nodes were marked Unknown",
    )
    .await?;
    Ok(())
}

/// Sets every node's conditions of `member` to `Unknown`, as the node lifecycle controller
/// does when a node's heartbeat is late.
async fn mark_nodes_unknown(member: &Client) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(member.clone());
    for node in api.list(&ListParams::default()).await? {
        let conditions: Vec<_> = node
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .map(|c| {
                json!({"type": c.type_, "status": "Unknown", "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status."})
            })
            .collect();
        let patch = json!({"status": {"conditions": conditions}});
        api.patch_status(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    Ok(())
}

/// Applies the FederatedDeployment with `image` and the soak's progressive rollout.
async fn deploy(soak: &Soak, image: &str, paused: bool) -> anyhow::Result<()> {
    let mut manifest = FederatedObject::deployment(NS, NAME, 1, image).to_json();
    manifest["spec"]["rollout"] = json!({
        "strategy": "Progressive",
        "maxConcurrency": 1,
        "minSuccessSeconds": 1,
        "progressDeadlineSeconds": 600,
        "maxFailures": 0,
        "paused": paused,
    });
    let ar = federated("Deployment", "deployments");
    apply(&soak.fed.host, &ar, Some(NS), &manifest).await?;
    Ok(())
}

/// Waits until the member at `index` runs `image`.
async fn wait_image(soak: &Soak, index: usize, image: &str) -> anyhow::Result<()> {
    let member = soak.fed.members[index].clone();
    wait_for(STEP, &format!("member{} on {image}", index + 1), || {
        let member = member.clone();
        async move {
            let d = deployments(&member, NS).get_opt(NAME).await?;
            let got = d.as_ref().and_then(first_image).map(str::to_owned);
            ensure!(got.as_deref() == Some(image), "{got:?}");
            Ok(())
        }
    })
    .await
}

/// Waits until the `Rollout` condition of the current generation has `reason`.
async fn wait_reason(host: &Client, reason: &str) -> anyhow::Result<()> {
    let web = FederatedRef {
        api: fd_api(host),
        name: NAME.into(),
    };
    web.wait_rollout(reason, STEP).await.map(|_| ())
}

/// Waits until the soak's rollout invariant holds: `Rollout=True` for the generation, the
/// target's ControllerRevision owned by the object, every member on the template's image
/// annotated with the target revision.
async fn converged(soak: &Soak, what: &str) -> anyhow::Result<()> {
    let (host, members) = (soak.fed.host.clone(), soak.member_clients());
    wait_for(STEP, what, || {
        let (host, members) = (host.clone(), members.clone());
        async move {
            let found = checks::rollouts(&host, &members).await?;
            ensure!(found.is_empty(), "{found:#?}");
            Ok(())
        }
    })
    .await
}
