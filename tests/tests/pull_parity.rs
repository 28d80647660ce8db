//! Pull mode on par with push, end to end on a mixed federation (member1 joined in push
//! mode, member2 in pull mode, its agent in this process with the scoped host token
//! `join_pull` issued): drift in the Pull member is repaired or reported and named in the
//! federated object's `status.drift`, Events and `flotilla_drift_total` as for a Push
//! member, and a progressive rollout goes through both kinds of member, stops on a failing
//! wave and is fixed, paused and resumed; a canary by replica share runs its canary
//! Deployment in both members and is promoted. The two drift scenarios share one federation,
//! each in its own namespace. The agent's resync is longer than any test: everything it does
//! here starts from a watch event.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_agent::{Agent, AgentOptions};
use flotilla_api::{DEFAULT_NAMESPACE, KubeFedCluster, crdgen, federated::FederatedStatus};
use flotilla_controllers::manager::ControlPlane;
use flotilla_core::drift::{IGNORE_ANNOTATION, POLICY_ANNOTATION};
use flotilla_tests::{
    EnvOptions,
    assert::events_about,
    drift::{managers, paths, scale_to, wait_drift, wait_event, write_as},
    federation::{apply, bootstrap, install_host, seeded_env},
    host::FederatedRef,
    member::{deployments, first_image, replicas},
    mixed::{Mixed, PULL, join_mixed},
    objects::{FederatedObject, create_namespace},
    scenario,
    scenarios::run_concurrently,
    wait::wait_namespace_in,
    wait_for,
};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

const T: Duration = Duration::from_secs(60);
const PUSH: &str = "member1";
/// Longer than any test: repairs and reports come from the agent's watch events.
const RESYNC: Duration = Duration::from_secs(600);

/// The mixed federation, its agent and control plane (stopped before the clusters).
struct Parity {
    control_plane: Option<ControlPlane>,
    agent: Option<Agent>,
    fed: Mixed,
}

impl Drop for Parity {
    fn drop(&mut self) {
        self.agent.take();
        self.control_plane.take();
    }
}

/// A mixed federation with each of `namespaces` in both members; with `pods`, pods get
/// ready in appearance and the workload types' status is collected (the agent reports it).
async fn parity(namespaces: &[&str], pods: bool) -> anyhow::Result<Parity> {
    let mut options = EnvOptions::with_members(2);
    if pods {
        options = options.with_pods();
    }
    let mut boot = bootstrap();
    boot.collect_workload_status = pods;
    let env = seeded_env(options, &boot).await;
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let fed = join_mixed(env, host, &boot, crdgen::applied_work_crd()).await?;
    let mut opts = AgentOptions::new(PULL, fed.agent_host.clone(), fed.pull.clone());
    opts.resync = RESYNC;
    opts.lease_duration = Duration::from_secs(3);
    let agent = Agent::start(opts);
    let control_plane = boot.start_control_plane(&fed.host, 2).await?;
    for ns in namespaces {
        create_namespace(&fed.host, ns).await?;
        FederatedObject::namespace(ns).apply(&fed.host).await?;
    }
    for ns in namespaces {
        wait_namespace_in(&fed.members(), ns).await?;
    }
    Ok(Parity {
        control_plane: Some(control_plane),
        agent: Some(agent),
        fed,
    })
}

/// Waits until Deployment `name` in `member` has `want` replicas.
async fn wait_replicas(member: &Client, ns: &str, name: &str, want: i32) -> anyhow::Result<()> {
    wait_for(T, "replicas", || async {
        let dep = deployments(member, ns).get(name).await?;
        ensure!(
            replicas(&dep) == Some(want),
            "replicas {:?}",
            replicas(&dep)
        );
        Ok(())
    })
    .await
}

/// The two drift scenarios share one mixed federation (without pods or status collection,
/// as each had alone), each in its namespace with its own objects and field managers, so
/// each counts only its own drift in `flotilla_drift_total`. The rollout keeps a
/// federation of its own: it labels the Pull member and needs pods and status collection,
/// and with all three on such a federation the drift scenario saw its own scale and edit
/// counted twice in `flotilla_drift_total` (cause not yet found).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drift_in_a_pull_member_is_repaired_reported_ignored_or_fought_as_in_a_push_member()
-> anyhow::Result<()> {
    let p = parity(&[DRIFT_NS, FIGHT_NS], false).await?;
    run_concurrently(vec![
        scenario!(drift_in_a_pull_member_is_repaired_or_reported_and_named_as_in_a_push_member(&p)),
        scenario!(
            in_a_pull_member_an_ignored_field_is_left_alone_and_a_fight_stops_the_repairs(&p)
        ),
    ])
    .await;
    Ok(())
}

const DRIFT_NS: &str = "pull-drift";

async fn drift_in_a_pull_member_is_repaired_or_reported_and_named_as_in_a_push_member(
    p: &Parity,
) -> anyhow::Result<()> {
    const NS: &str = DRIFT_NS;
    let (host, pull) = (&p.fed.host, &p.fed.pull);
    let object = FederatedObject::deployment(NS, "web", 2, "nginx:1").on_clusters(&[PULL]);
    let r = object.apply(host).await?;
    r.wait_propagated().await?;
    wait_replicas(pull, NS, "web", 2).await?;

    // A scale in the Pull member: repaired on the watch event, named in status and Event.
    write_as(pull, NS, "web", "kubectl-scale", scale_to(5)).await?;
    let d = wait_drift(&r, PULL, "the scale reported", |d| {
        ensure!(
            d.state == "Repaired" && paths(d) == ["spec.replicas"],
            "{d:?}"
        );
        Ok(())
    })
    .await?;
    assert_eq!(managers(&d), ["kubectl-scale"]);
    assert_eq!(
        (d.fields[0].desired.as_str(), d.fields[0].live.as_str()),
        ("2", "5")
    );
    assert!(d.repaired_at.is_some());
    wait_replicas(pull, NS, "web", 2).await?;
    wait_event(
        host,
        NS,
        "web",
        "DriftRepaired",
        &[PULL, "spec.replicas", "kubectl-scale"],
    )
    .await?;

    // An edit of the image by another manager: the same.
    let image = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "web", "image": "nginx:2"}]}}}});
    write_as(pull, NS, "web", "kubectl-edit", image).await?;
    let d = wait_drift(&r, PULL, "the edit reported", |d| {
        ensure!(
            paths(d) == ["spec.template.spec.containers[0].image"],
            "{d:?}"
        );
        Ok(())
    })
    .await?;
    assert_eq!(managers(&d), ["kubectl-edit"]);
    wait_for(T, "image repaired", || async {
        let dep = deployments(pull, NS).get("web").await?;
        ensure!(
            first_image(&dep) == Some("nginx:1"),
            "{:?}",
            first_image(&dep)
        );
        Ok(())
    })
    .await?;
    wait_event(
        host,
        NS,
        "web",
        "DriftRepaired",
        &[PULL, "containers[0].image", "kubectl-edit"],
    )
    .await?;
    r.wait_propagated().await?;
    let metrics = p
        .control_plane
        .as_ref()
        .map(|cp| cp.metrics.encode())
        .unwrap_or_default();
    for manager in ["kubectl-scale", "kubectl-edit"] {
        let series = format!("flotilla_drift_total{{cluster=\"{PULL}\",manager=\"{manager}\"}} 1");
        assert!(metrics.contains(&series), "{series} missing:\n{metrics}");
    }

    // The policy turns to Report: it reaches the agent through the manifest's config in
    // its bundle Work (a spec change: the Work's generation moves); a scale stays. The
    // agent reads the Work from its own watch: the scale waits until the agent reports on
    // the manifest at the Work's new generation.
    object
        .annotate(POLICY_ANNOTATION, "Report")
        .apply(host)
        .await?;
    wait_for(T, "the agent holds the manifest's new policy", || async {
        let works: Api<flotilla_api::work::Work> =
            Api::namespaced(host.clone(), &flotilla_api::work::cluster_namespace(PULL));
        let list = works.list(&Default::default()).await?;
        let held = list.items.iter().any(|w| {
            (0..w.spec.workload.manifests.len()).any(|i| {
                let carried = w.manifest_config(i).is_some_and(|c| {
                    c.source_name == "web"
                        && c.drift.get(POLICY_ANNOTATION).map(String::as_str) == Some("Report")
                });
                let reported = w.manifest_report(i).is_some_and(|m| {
                    m.conditions.iter().any(|c| {
                        c.type_ == flotilla_api::work::APPLIED
                            && c.observed_generation == w.metadata.generation
                    })
                });
                carried && reported
            })
        });
        ensure!(
            held,
            "no bundle carries the policy with the agent's report on it"
        );
        Ok(())
    })
    .await?;
    write_as(pull, NS, "web", "kubectl-scale", scale_to(4)).await?;
    let d = wait_drift(&r, PULL, "the scale reported, not repaired", |d| {
        ensure!(
            d.state == "Detected" && paths(d) == ["spec.replicas"],
            "{d:?}"
        );
        Ok(())
    })
    .await?;
    assert_eq!(managers(&d), ["kubectl-scale"]);
    assert_eq!(d.repaired_at, None);
    r.wait_cluster_reasons(&[(PULL, "Drifted")]).await?;
    r.wait_not_propagated("CheckClusters").await?;
    wait_event(
        host,
        NS,
        "web",
        "DriftDetected",
        &[PULL, "spec.replicas", "kubectl-scale"],
    )
    .await?;
    let dep = deployments(pull, NS).get("web").await?;
    assert_eq!(replicas(&dep), Some(4), "Report leaves the change in place");

    // Back to the desired value: the report is resolved, Propagation True again.
    write_as(pull, NS, "web", "kubectl-scale", scale_to(2)).await?;
    wait_for(T, "the report resolved", || async {
        let status = r.status().await?;
        ensure!(
            status.drift.iter().all(|d| d.state != "Detected"),
            "{:?}",
            status.drift
        );
        Ok(())
    })
    .await?;
    r.wait_propagated().await?;
    Ok(())
}

const FIGHT_NS: &str = "pull-fight";

async fn in_a_pull_member_an_ignored_field_is_left_alone_and_a_fight_stops_the_repairs(
    p: &Parity,
) -> anyhow::Result<()> {
    const NS: &str = FIGHT_NS;
    let (host, pull) = (&p.fed.host, &p.fed.pull);
    let ignoring = FederatedObject::deployment(NS, "hpa", 2, "nginx:1")
        .on_clusters(&[PULL])
        .annotate(POLICY_ANNOTATION, "Ignore")
        .annotate(IGNORE_ANNOTATION, "spec.replicas");
    let ignored = ignoring.apply(host).await?;
    let fought = FederatedObject::deployment(NS, "web", 2, "nginx:1").on_clusters(&[PULL]);
    let web = fought.apply(host).await?;
    ignored.wait_propagated().await?;
    web.wait_propagated().await?;
    // Propagated once the Work is written (the agent has not reported on it yet): the
    // member object may still be on its way.
    wait_replicas(pull, NS, "hpa", 2).await?;

    // Another controller owns replicas of `hpa`; an edit of its image is still repaired,
    // and that repair keeps the other controller's replicas.
    write_as(pull, NS, "hpa", "autoscaler", scale_to(6)).await?;
    let image = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "hpa", "image": "nginx:3"}]}}}});
    write_as(pull, NS, "hpa", "kubectl-patch", image).await?;
    let d = wait_drift(&ignored, PULL, "the edit repaired", |d| {
        ensure!(d.state == "Repaired", "{d:?}");
        Ok(())
    })
    .await?;
    assert_eq!(paths(&d), ["spec.template.spec.containers[0].image"]);
    assert_eq!(managers(&d), ["kubectl-patch"]);
    wait_for(T, "image repaired", || async {
        let dep = deployments(pull, NS).get("hpa").await?;
        ensure!(
            first_image(&dep) == Some("nginx:1"),
            "{:?}",
            first_image(&dep)
        );
        Ok(())
    })
    .await?;
    let dep = deployments(pull, NS).get("hpa").await?;
    assert_eq!(
        replicas(&dep),
        Some(6),
        "the ignored field keeps its writer's value"
    );
    let events = events_about(host, NS, "hpa", "DriftRepaired").await?;
    assert!(
        events
            .iter()
            .filter_map(|e| e.note.as_deref())
            .all(|n| !n.contains("replicas") && !n.contains("autoscaler")),
        "{events:?}"
    );

    // A writer that undoes every repair of `web`: a fight, then the repairs stop.
    let writer_client = pull.clone();
    let writer = tokio::spawn(async move {
        loop {
            let _ = write_as(&writer_client, NS, "web", "autoscaler", scale_to(7)).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let fight = wait_drift(&web, PULL, "a fight", |d| {
        ensure!(d.state == "Fight", "{d:?}");
        Ok(())
    })
    .await;
    writer.abort();
    let d = fight?;
    assert_eq!(paths(&d), ["spec.replicas"]);
    assert_eq!(managers(&d), ["autoscaler"]);
    web.wait_cluster_reasons(&[(PULL, "DriftFight")]).await?;
    wait_event(
        host,
        NS,
        "web",
        "DriftFight",
        &[PULL, "spec.replicas", "autoscaler"],
    )
    .await?;
    let api = deployments(pull, NS);
    let before = api.get("web").await?;
    assert_eq!(replicas(&before), Some(7));
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        write_as(pull, NS, "web", "autoscaler", scale_to(7)).await?;
    }
    let after = api.get("web").await?;
    assert_eq!(
        after.metadata.generation, before.metadata.generation,
        "no repair in between"
    );
    Ok(())
}

/// Rollout across both kinds of member: see the rollout module of the tests for the
/// same scenario on push members only.
mod rollout {
    use super::*;

    pub const NS: &str = "pull-rollout";
    pub const NAME: &str = "web";
    /// Pods scheduled, made ready and counted available on a loaded machine.
    pub const STEP: Duration = Duration::from_secs(180);

    /// Applies the FederatedDeployment with `image` and a progressive rollout, one
    /// cluster at a time, the canary group first.
    pub async fn deploy(host: &Client, image: &str) -> anyhow::Result<FederatedRef> {
        let object = FederatedObject::deployment(NS, NAME, 1, image);
        let mut manifest = object.to_json();
        manifest["spec"]["rollout"] = json!({
            "strategy": "Progressive",
            "maxConcurrency": 1,
            "groups": [{"selector": {"matchLabels": {"stage": "canary"}}}],
            "minSuccessSeconds": 2,
            "progressDeadlineSeconds": 25,
            "maxFailures": 0,
        });
        apply(host, &object.api_resource(), Some(NS), &manifest).await?;
        Ok(object.in_host(host))
    }

    /// The image in each member: the Pull canary first, then the Push member.
    pub async fn images(p: &Parity) -> anyhow::Result<Vec<Option<String>>> {
        let mut out = Vec::new();
        for member in [&p.fed.pull, &p.fed.push] {
            let d = deployments(member, NS).get_opt(NAME).await?;
            out.push(d.as_ref().and_then(first_image).map(str::to_string));
        }
        Ok(out)
    }

    /// Waits until the `Rollout` condition has `reason` for the current generation.
    pub async fn wait_reason(web: &FederatedRef, reason: &str) -> anyhow::Result<FederatedStatus> {
        web.wait_rollout(reason, STEP).await
    }

    /// Applies `image` and watches the members: it reaches them in order — the Push
    /// member only once the Pull canary has it (and its agent reported it healthy) — and
    /// the rollout completes.
    pub async fn in_order(p: &Parity, web: &FederatedRef, image: &str) -> anyhow::Result<()> {
        let before = images(p).await?;
        deploy(&p.fed.host, image).await?;
        wait_for(STEP, "every member reached in order", || async {
            let now = images(p).await?;
            let has_new: Vec<bool> = now.iter().map(|m| m.as_deref() == Some(image)).collect();
            if has_new[1] {
                ensure!(has_new[0], "{PUSH} got {image} before {PULL}: {now:?}");
            } else {
                ensure!(
                    now[1] == before[1],
                    "{PUSH} changed before its turn: {now:?}"
                );
            }
            ensure!(has_new.iter().all(|n| *n), "{now:?}");
            Ok(())
        })
        .await?;
        let status = wait_reason(web, "Complete").await?;
        let rollout = status.rollout.context("no status.rollout")?;
        assert_eq!(rollout.progress, "2/2");
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollout_goes_through_a_pull_and_a_push_member_stops_on_failure_and_pauses()
-> anyhow::Result<()> {
    use rollout::*;
    let p = &parity(&[NS], true).await?;
    let host = &p.fed.host;
    let clusters: Api<KubeFedCluster> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    let label = json!({"metadata": {"labels": {"stage": "canary"}}});
    clusters
        .patch(PULL, &PatchParams::default(), &Patch::Merge(&label))
        .await?;
    let web = deploy(host, "nginx:1").await?;
    wait_reason(&web, "Complete").await?;
    assert_eq!(images(p).await?, vec![Some("nginx:1".to_string()); 2]);

    in_order(p, &web, "nginx:2").await?;

    // A template whose pods never get ready stops on the Pull canary, with its reason from
    // the agent's report; the Push member keeps the previous image.
    deploy(host, "fail:never-ready").await?;
    let status = wait_reason(&web, "Failed").await?;
    let c = status.rollout_condition().context("condition")?;
    assert!(
        c.message.contains(&format!("cluster {PULL} failed")),
        "{}",
        c.message
    );
    assert!(
        c.message.contains("ready"),
        "the member's reason: {}",
        c.message
    );
    let now = images(p).await?;
    assert_eq!(now[0].as_deref(), Some("fail:never-ready"));
    assert_eq!(now[1].as_deref(), Some("nginx:2"), "{PUSH} untouched");
    let failed = events_about(host, NS, NAME, "RolloutFailed").await?;
    assert_eq!(failed.len(), 1, "one RolloutFailed Event");

    // The fix rolls out in order again.
    in_order(p, &web, "nginx:3").await?;

    // Paused once the Pull canary has the next image: the Push member waits; resumed, done.
    deploy(host, "nginx:4").await?;
    wait_for(STEP, "the canary on nginx:4", || async {
        let now = images(p).await?;
        ensure!(now[0].as_deref() == Some("nginx:4"), "{now:?}");
        Ok(())
    })
    .await?;
    let paused = json!({"spec": {"rollout": {"paused": true}}});
    web_patch(&web, host, paused).await?;
    wait_reason(&web, "Paused").await?;
    let held = images(p).await?;
    assert_eq!(held[1].as_deref(), Some("nginx:3"), "{PUSH} comes last");
    let resumed = json!({"spec": {"rollout": {"paused": false}}});
    web_patch(&web, host, resumed).await?;
    let status = wait_reason(&web, "Complete").await?;
    assert_eq!(images(p).await?, vec![Some("nginx:4".to_string()); 2]);
    assert_eq!(status.rollout.context("status.rollout")?.progress, "2/2");
    // Every template rolled out is recorded as a revision in the host.
    let revisions: Api<ControllerRevision> = Api::namespaced(host.clone(), NS);
    let listed = revisions
        .list(&ListParams::default().labels(&format!("flotilla.io/federated-name={NAME}")))
        .await?;
    ensure!(listed.items.len() >= 4, "{} revisions", listed.items.len());
    Ok(())
}

/// A merge patch of the federated object.
async fn web_patch(
    web: &FederatedRef,
    host: &Client,
    patch: serde_json::Value,
) -> anyhow::Result<()> {
    let obj = web.get().await?;
    let ar = FederatedObject::deployment(rollout::NS, rollout::NAME, 1, "x").api_resource();
    let api: Api<kube::core::DynamicObject> = Api::namespaced_with(host.clone(), rollout::NS, &ar);
    api.patch(
        &kube::ResourceExt::name_any(&obj),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// A canary by replica share through the Pull member: a ReplicaSchedulingPreference splits
/// 10 replicas 6/4 (member1 Push, member2 Pull); a new image runs as `web-canary` beside
/// `web` in both members at 50 % and 100 % of each member's split — in the Pull member
/// carried in a Work, its health read from the agent's report — then is promoted (`web` on
/// the new image with its full split, the Pull member's canary pruned); a canary that never
/// gets ready is rolled back (the agent's report says why). A canary running when the
/// federated object is deleted leaves the Pull member with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_canary_by_replica_share_goes_through_a_pull_member_and_is_promoted() -> anyhow::Result<()>
{
    use canary::*;
    let p = &parity(&[NS], true).await?;
    let host = &p.fed.host;
    apply(host, &rsp_resource(), Some(NS), &rsp()).await?;
    let web = deploy(host, "nginx:1").await?;
    web.wait_rollout("Complete", STEP).await?;
    wait_counts(p, [(SPLIT[0], None), (SPLIT[1], None)], "the 6/4 split").await?;

    set_image(&web, "nginx:2").await?;
    // (step, canary replicas per member): 50 % of 10 = 5 as 3/2, 100 % as 6/4.
    for (step, canary) in [(1, [3, 2]), (2, [6, 4])] {
        let want = [
            (SPLIT[0] - canary[0], Some(canary[0])),
            (SPLIT[1] - canary[1], Some(canary[1])),
        ];
        wait_counts(p, want, &format!("canary step {step}")).await?;
        let c = deployments(&p.fed.pull, NS).get(CANARY).await?;
        assert_eq!(first_image(&c), Some("nginx:2"), "the Pull member's canary");
        let stable = deployments(&p.fed.pull, NS).get(NAME).await?;
        assert_eq!(
            first_image(&stable),
            Some("nginx:1"),
            "stable keeps the old image"
        );
    }
    let status = web.wait_rollout("Complete", STEP).await?;
    assert_eq!(status.rollout.and_then(|r| r.canary), None);
    wait_counts(p, [(SPLIT[0], None), (SPLIT[1], None)], "promoted").await?;
    for member in [&p.fed.push, &p.fed.pull] {
        let d = deployments(member, NS).get(NAME).await?;
        assert_eq!(first_image(&d), Some("nginx:2"));
    }

    // A canary that never gets ready rolls back: the canaries go, `web` keeps nginx:2.
    set_image(&web, "fail:never-ready").await?;
    let status = web.wait_rollout("RolledBack", STEP).await?;
    let c = status.rollout_condition().context("condition")?;
    assert!(
        c.message.contains("ready"),
        "the member's reason: {}",
        c.message
    );
    wait_counts(p, [(SPLIT[0], None), (SPLIT[1], None)], "rolled back").await?;
    for member in [&p.fed.push, &p.fed.pull] {
        let d = deployments(member, NS).get(NAME).await?;
        assert_eq!(first_image(&d), Some("nginx:2"));
    }

    // A canary running when the federated object is deleted goes with it.
    set_image(&web, "nginx:3").await?;
    wait_for(
        STEP,
        "the first step's canary in the Pull member",
        || async {
            let c = deployments(&p.fed.pull, NS).get_opt(CANARY).await?;
            ensure!(c.as_ref().and_then(replicas) == Some(SPLIT[1] / 2), "{c:?}");
            Ok(())
        },
    )
    .await?;
    web.delete().await?;
    wait_for(STEP, "no web and no web-canary in any member", || async {
        for member in [&p.fed.push, &p.fed.pull] {
            let api = deployments(member, NS);
            let (stable, canary) = (api.get_opt(NAME).await?, api.get_opt(CANARY).await?);
            ensure!(stable.is_none() && canary.is_none(), "left");
        }
        Ok(())
    })
    .await?;
    Ok(())
}

mod canary {
    use super::*;

    pub const NS: &str = "pull-canary";
    pub const NAME: &str = "web";
    pub const CANARY: &str = "web-canary";
    /// The split the ReplicaSchedulingPreference computes: member1 (Push) 6, member2 (Pull) 4.
    pub const SPLIT: [i32; 2] = [6, 4];
    /// Pods scheduled, made ready and counted available on a loaded machine.
    pub const STEP: Duration = Duration::from_secs(240);

    /// Applies the FederatedDeployment `web` with `image` and a canary rollout.
    pub async fn deploy(host: &Client, image: &str) -> anyhow::Result<FederatedRef> {
        let object = FederatedObject::deployment(NS, NAME, 1, image);
        let mut manifest = object.to_json();
        manifest["spec"]["rollout"] = json!({
            "strategy": "Canary",
            "canary": {"steps": [50, 100], "minSuccessSeconds": 5},
            "progressDeadlineSeconds": 40,
            "onFailure": "Rollback",
        });
        apply(host, &object.api_resource(), Some(NS), &manifest).await?;
        Ok(object.in_host(host))
    }

    /// Changes only the template's image (the RSP's overrides stay as they are).
    pub async fn set_image(web: &FederatedRef, image: &str) -> anyhow::Result<()> {
        let patch = json!([{"op": "replace",
            "path": "/spec/template/spec/template/spec/containers/0/image", "value": image}]);
        let patch: json_patch::Patch = serde_json::from_value(patch)?;
        web.api
            .patch(
                &web.name,
                &PatchParams::default(),
                &Patch::Json::<()>(patch),
            )
            .await?;
        Ok(())
    }

    /// Waits until each member (Push, then Pull) holds `want`: the stable Deployment's
    /// replicas and the canary's (`None`: no canary).
    pub async fn wait_counts(
        p: &Parity,
        want: [(i32, Option<i32>); 2],
        what: &str,
    ) -> anyhow::Result<()> {
        wait_for(STEP, what, || async {
            let mut counts = Vec::new();
            for member in [&p.fed.push, &p.fed.pull] {
                let api = deployments(member, NS);
                let stable = api.get_opt(NAME).await?;
                let stable = stable
                    .as_ref()
                    .and_then(replicas)
                    .context("no stable web")?;
                let canary = api.get_opt(CANARY).await?;
                counts.push((stable, canary.as_ref().and_then(replicas)));
            }
            ensure!(counts == want, "{counts:?}, want {want:?}");
            Ok(())
        })
        .await
    }

    pub use flotilla_tests::objects::rsp_resource;

    pub fn rsp() -> serde_json::Value {
        json!({
            "apiVersion": "scheduling.kubefed.io/v1alpha1", "kind": "ReplicaSchedulingPreference",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"targetKind": "FederatedDeployment", "totalReplicas": 10,
                "clusters": {"member1": {"weight": 3}, "member2": {"weight": 2}}}
        })
    }
}
