//! A canary by replica share (`spec.rollout.strategy: Canary`) on real clusters, with pods
//! that get ready in appearance (the simulated kubelet; images `fail:*` never get ready).
//! Two members; a ReplicaSchedulingPreference splits 10 replicas 6/4. A new image runs as
//! `web-canary` beside `web` in each member at 10 %, 50 % and 100 % of the replicas, counted
//! in every member at every step (each cluster keeps its split), then is promoted: `web`
//! on the new image with its full split, no canary left. A canary that never gets ready
//! with `onFailure: Rollback` is removed and `web` gets its full split back (`RolledBack`,
//! naming the cluster and the member's reason). A canary running when the federated object
//! is deleted goes with it. A canary on a Deployment without replicas is `InvalidSpec`,
//! and the Deployment is propagated as without one.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::federated::FederatedStatus;
use flotilla_core::rollout::canary::CANARY_LABEL;
use flotilla_tests::{
    federation::{Federation, apply, federated_namespace, federation_with_pods},
    host::FederatedRef,
    member::{deployments, first_image, replicas},
    objects::FederatedObject,
    objects::rsp_resource,
    wait::wait_namespace_in,
    wait_for,
};
use kube::api::{Patch, PatchParams};
use serde_json::json;

const NS: &str = "canary";
const NAME: &str = "web";
const CANARY: &str = "web-canary";
/// The split the ReplicaSchedulingPreference computes: member1 6, member2 4.
const SPLIT: [i32; 2] = [6, 4];
/// Pods scheduled, made ready and counted available on a loaded machine.
const STEP_TIMEOUT: Duration = Duration::from_secs(240);

#[tokio::test]
async fn a_canary_steps_through_its_shares_promotes_and_a_failing_one_rolls_back()
-> anyhow::Result<()> {
    let fed = federation_with_pods(2).await?;
    federated_namespace(&fed, NS).await?;
    wait_namespace_in(&fed.members, NS).await?;

    a_canary_without_replicas_is_invalid_and_still_propagates(&fed).await?;

    apply(&fed.host, &rsp_resource(), Some(NS), &rsp()).await?;
    let web = deploy(&fed, "nginx:1").await?;
    wait_for(
        STEP_TIMEOUT,
        "the 6/4 split on nginx:1, complete",
        || async {
            let status = web.status().await?;
            let c = status.rollout_condition().context("no Rollout condition")?;
            ensure!(
                c.reason == "Complete",
                "Rollout {}: {}",
                c.reason,
                c.message
            );
            let counts = counts(&fed).await?;
            ensure!(counts == [(SPLIT[0], None), (SPLIT[1], None)], "{counts:?}");
            Ok(())
        },
    )
    .await?;

    set_image(&web, "nginx:2").await?;
    // (step, canary replicas per member): 10 % of 10 = 1, 50 % = 5, 100 % = 10.
    for (step, canary) in [(1, [1, 0]), (2, [3, 2]), (3, [6, 4])] {
        the_step_is_counted_in_every_member(&fed, &web, step, canary).await?;
    }
    let status = web.wait_rollout("Complete", STEP_TIMEOUT).await?;
    assert_eq!(status.rollout.and_then(|r| r.canary), None);
    wait_for(
        STEP_TIMEOUT,
        "promoted: web on nginx:2, no canary",
        || async {
            let counts = counts(&fed).await?;
            ensure!(counts == [(SPLIT[0], None), (SPLIT[1], None)], "{counts:?}");
            ensure!(images(&fed).await? == [Some("nginx:2".to_string()), Some("nginx:2".into())]);
            Ok(())
        },
    )
    .await?;

    a_failing_canary_rolls_back(&fed, &web).await?;
    canaries_go_with_the_federated_object(&fed, &web).await?;
    Ok(())
}

/// A canary running when the federated object is deleted goes with it (the member's
/// garbage collector follows its owner reference to the stable Deployment).
async fn canaries_go_with_the_federated_object(
    fed: &Federation,
    web: &FederatedRef,
) -> anyhow::Result<()> {
    set_image(web, "nginx:3").await?;
    wait_for(
        STEP_TIMEOUT,
        "the first step's canary in member1",
        || async {
            let c = deployments(&fed.members[0], NS).get_opt(CANARY).await?;
            ensure!(c.as_ref().and_then(replicas) == Some(1), "{c:?}");
            Ok(())
        },
    )
    .await?;
    web.delete().await?;
    wait_for(
        STEP_TIMEOUT,
        "no web and no web-canary in any member",
        || async {
            for m in &fed.members {
                let api = deployments(m, NS);
                let (stable, canary) = (api.get_opt(NAME).await?, api.get_opt(CANARY).await?);
                ensure!(stable.is_none() && canary.is_none(), "left");
            }
            Ok(())
        },
    )
    .await?;
    Ok(())
}

/// Each member's canary holds its share of the step and its stable Deployment the rest of
/// its split: the sum is the total.
async fn the_step_is_counted_in_every_member(
    fed: &Federation,
    web: &FederatedRef,
    step: u32,
    canary: [i32; 2],
) -> anyhow::Result<()> {
    let what = format!("canary step {step}: {canary:?} canary replicas");
    let counted = wait_for(STEP_TIMEOUT, &what, || async {
        let status = web.status().await?;
        let at = status.rollout.as_ref().and_then(|r| r.canary.as_ref());
        ensure!(at.is_some_and(|c| c.step == step), "at {at:?}");
        let counts = counts(fed).await?;
        let want = [
            (SPLIT[0] - canary[0], Some(canary[0])),
            (SPLIT[1] - canary[1], Some(canary[1])),
        ];
        ensure!(counts == want, "{counts:?}, want {want:?}");
        Ok(counts)
    })
    .await?;
    let total: i32 = counted.iter().map(|(s, c)| s + c.unwrap_or(0)).sum();
    assert_eq!(total, SPLIT.iter().sum::<i32>(), "step {step}: {counted:?}");
    for m in &fed.members {
        let c = deployments(m, NS).get(CANARY).await?;
        assert_eq!(first_image(&c), Some("nginx:2"));
        let labelled = |l: Option<&std::collections::BTreeMap<String, String>>| {
            l.and_then(|l| l.get(CANARY_LABEL)).map(String::as_str) == Some("true")
        };
        let spec = c.spec.as_ref().context("spec")?;
        assert!(labelled(c.metadata.labels.as_ref()), "labelled canary");
        assert!(
            labelled(spec.selector.match_labels.as_ref()),
            "in its selector"
        );
        assert!(labelled(
            spec.template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.as_ref())
        ));
        let stable = deployments(m, NS).get(NAME).await?;
        assert_eq!(
            first_image(&stable),
            Some("nginx:1"),
            "stable keeps the old image"
        );
    }
    Ok(())
}

/// `fail:never-ready` with `onFailure: Rollback`: member1's canary (the 10 % step's one
/// replica) never gets ready; at the deadline the canaries go and `web` gets its full
/// split back on nginx:2.
async fn a_failing_canary_rolls_back(fed: &Federation, web: &FederatedRef) -> anyhow::Result<()> {
    set_image_within(web, "fail:never-ready", Some(FAILING_DEADLINE_SECONDS)).await?;
    let status = web.wait_rollout("RolledBack", STEP_TIMEOUT).await?;
    let c = status.rollout_condition().context("condition")?;
    assert!(
        c.message.contains("cluster member1 failed") && c.message.contains("ready"),
        "the failed cluster and the member's reason: {}",
        c.message
    );
    let rollout = status.rollout.context("status.rollout")?;
    assert!(rollout.rolled_back_to.is_some());
    assert_eq!(rollout.rolled_back_to, rollout.stable_revision);
    wait_for(
        STEP_TIMEOUT,
        "no canary, web with its full split",
        || async {
            let counts = counts(fed).await?;
            ensure!(counts == [(SPLIT[0], None), (SPLIT[1], None)], "{counts:?}");
            ensure!(images(fed).await? == [Some("nginx:2".to_string()), Some("nginx:2".into())]);
            Ok(())
        },
    )
    .await?;
    Ok(())
}

/// A Deployment without replicas and without a ReplicaSchedulingPreference: `InvalidSpec`
/// with the reason, and the Deployment in every member all the same.
async fn a_canary_without_replicas_is_invalid_and_still_propagates(
    fed: &Federation,
) -> anyhow::Result<()> {
    let object = FederatedObject::deployment(NS, "single", 1, "nginx:1");
    let mut manifest = object.to_json();
    manifest["spec"]["template"]["spec"]
        .as_object_mut()
        .context("template spec")?
        .remove("replicas");
    manifest["spec"]["rollout"] = canary_rollout();
    apply(&fed.host, &object.api_resource(), Some(NS), &manifest).await?;
    let single = object.in_host(&fed.host);
    let status: FederatedStatus = single.wait_rollout("InvalidSpec", STEP_TIMEOUT).await?;
    let c = status.rollout_condition().context("condition")?;
    assert!(c.message.contains("needs replicas"), "{}", c.message);
    wait_for(STEP_TIMEOUT, "single in every member", || async {
        for m in &fed.members {
            let d = deployments(m, NS).get_opt("single").await?;
            ensure!(d.as_ref().and_then(first_image) == Some("nginx:1"), "{d:?}");
            let canary = deployments(m, NS).get_opt("single-canary").await?;
            ensure!(canary.is_none(), "no canary");
        }
        Ok(())
    })
    .await?;
    Ok(())
}

fn canary_rollout() -> serde_json::Value {
    json!({
        "strategy": "Canary",
        "canary": {"steps": [10, 50, 100], "minSuccessSeconds": 10},
        // Generous: a member turning unready for a while under load (as in a full suite
        // run) must not roll a healthy canary back; the failing canary gets 40 s.
        "progressDeadlineSeconds": 120,
        "onFailure": "Rollback",
    })
}

/// Applies the FederatedDeployment `web` with `image` and a canary rollout.
async fn deploy(fed: &Federation, image: &str) -> anyhow::Result<FederatedRef> {
    let object = FederatedObject::deployment(NS, NAME, 1, image);
    let mut manifest = object.to_json();
    manifest["spec"]["rollout"] = canary_rollout();
    apply(&fed.host, &object.api_resource(), Some(NS), &manifest).await?;
    Ok(object.in_host(&fed.host))
}

/// Changes only the template's image (the RSP's overrides stay as they are).
async fn set_image(web: &FederatedRef, image: &str) -> anyhow::Result<()> {
    set_image_within(web, image, None).await
}

/// How long the failing canary has to make progress before it is rolled back.
const FAILING_DEADLINE_SECONDS: u64 = 40;

/// Sets the image, and the rollout's progress deadline with it when given.
async fn set_image_within(
    web: &FederatedRef,
    image: &str,
    deadline: Option<u64>,
) -> anyhow::Result<()> {
    let mut ops = vec![json!({"op": "replace",
        "path": "/spec/template/spec/template/spec/containers/0/image", "value": image})];
    ops.extend(deadline.map(
        |d| json!({"op": "replace", "path": "/spec/rollout/progressDeadlineSeconds", "value": d}),
    ));
    let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))?;
    web.api
        .patch(
            &web.name,
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await?;
    Ok(())
}

/// Per member: the stable Deployment's replicas and the canary's (None: no canary).
async fn counts(fed: &Federation) -> anyhow::Result<Vec<(i32, Option<i32>)>> {
    let mut out = Vec::new();
    for m in &fed.members {
        let stable = deployments(m, NS).get_opt(NAME).await?;
        let stable = stable
            .as_ref()
            .and_then(replicas)
            .context("no stable web")?;
        let canary = deployments(m, NS).get_opt(CANARY).await?;
        out.push((stable, canary.as_ref().and_then(replicas)));
    }
    Ok(out)
}

/// The stable Deployment's image in each member.
async fn images(fed: &Federation) -> anyhow::Result<Vec<Option<String>>> {
    let mut out = Vec::new();
    for m in &fed.members {
        let d = deployments(m, NS).get_opt(NAME).await?;
        out.push(d.as_ref().and_then(first_image).map(str::to_string));
    }
    Ok(out)
}

fn rsp() -> serde_json::Value {
    json!({
        "apiVersion": "scheduling.kubefed.io/v1alpha1", "kind": "ReplicaSchedulingPreference",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {"targetKind": "FederatedDeployment", "totalReplicas": 10,
            "clusters": {"member1": {"weight": 3}, "member2": {"weight": 2}}}
    })
}
