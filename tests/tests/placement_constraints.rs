//! Scheduling by constraints, taints and graceful failover on real clusters: four members
//! labelled with regions (member1 and member2 share region `a`; member3 is `b`, member4
//! `c`). Each test starts its own federation: the failover test stops an apiserver.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, ensure};
use flotilla_api::{DEFAULT_NAMESPACE, KubeFedCluster, federated::PlacementStatus};
use flotilla_tests::{
    assert::events_about,
    federation::{Federation, apply},
    host::FederatedRef,
    member::{config_maps, deployments, replicas},
    objects::FederatedObject,
    setup::federation_with_namespace,
    wait::{TIMEOUT, wait_absent, wait_present},
    wait_for,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

const NS: &str = "sched";
const REGIONS: [(&str, &str); 4] = [
    ("member1", "a"),
    ("member2", "a"),
    ("member3", "b"),
    ("member4", "c"),
];

/// A federation of four members labelled `region=<a|a|b|c>`.
async fn regional_federation() -> anyhow::Result<Federation> {
    let fed = federation_with_namespace(4, NS).await?;
    let clusters: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    for (name, region) in REGIONS {
        let patch = json!({"metadata": {"labels": {"region": region}}});
        clusters
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(fed)
}

/// Replaces member `name`'s `spec.taints`.
async fn set_taints(host: &Client, name: &str, taints: Value) -> anyhow::Result<()> {
    let clusters: Api<KubeFedCluster> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    let patch = json!({"spec": {"taints": taints}});
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn member(fed: &Federation, name: &str) -> Client {
    let i: usize = name.trim_start_matches("member").parse().expect("memberN");
    fed.members[i - 1].clone()
}

async fn holds(client: &Client, name: &str) -> anyhow::Result<bool> {
    Ok(config_maps(client, NS).get_opt(name).await?.is_some())
}

fn decided(p: &PlacementStatus) -> Vec<&str> {
    p.clusters.iter().map(|c| c.name.as_str()).collect()
}

/// Waits until the stored decision is `want` and the `Scheduled` condition has `status`.
async fn wait_decision(
    obj: &FederatedRef,
    want: &[&str],
    status: &str,
) -> anyhow::Result<PlacementStatus> {
    wait_for(
        TIMEOUT,
        &format!("{} decided on {want:?}", obj.name),
        || async {
            let st = obj.status().await?;
            let p = st.placement.clone().context("no status.placement")?;
            let cond = st.scheduled().context("no Scheduled condition")?;
            ensure!(decided(&p) == want, "decided {:?}", decided(&p));
            ensure!(cond.status == status, "Scheduled {cond:?}");
            Ok(p)
        },
    )
    .await
}

/// Polls `from` (first) and `to` until stopped, and says whether a poll ever found neither
/// holding the object. Polling `from` first means a copy moving from `from` to `to` is
/// never mistaken for a gap.
fn watch_for_gap(
    from: Client,
    to: Client,
    name: &'static str,
) -> (Arc<AtomicBool>, JoinHandle<bool>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let task = tokio::spawn(async move {
        let mut gap = false;
        while !flag.load(Ordering::Relaxed) {
            let a = holds(&from, name).await.unwrap_or(true);
            let b = holds(&to, name).await.unwrap_or(true);
            gap |= !a && !b;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        gap
    });
    (stop, task)
}

/// The replicas of Deployment `sched/app` in a member (`None` when absent).
async fn app_replicas(client: &Client) -> anyhow::Result<Option<i32>> {
    let app = deployments(client, NS).get_opt("app").await?;
    Ok(app.as_ref().and_then(replicas))
}

/// A FederatedDeployment `app` on one cluster of region `a`, tolerating unreachability
/// for 4 s, with an RSP of 3 replicas.
async fn scheduled_deployment_with_rsp(host: &Client) -> anyhow::Result<()> {
    FederatedObject::deployment(NS, "app", 1, "nginx:1.25")
        .placement(json!({
            "clusterSelector": {"matchLabels": {"region": "a"}},
            "maxClusters": 1,
            "tolerations": [{"key": "flotilla.io/unreachable", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 4}]
        }))
        .apply(host)
        .await?;
    let rsp = flotilla_tests::objects::rsp_resource();
    apply(
        host,
        &rsp,
        Some(NS),
        &json!({
            "apiVersion": "scheduling.kubefed.io/v1alpha1", "kind": "ReplicaSchedulingPreference",
            "metadata": {"name": "app", "namespace": NS},
            "spec": {"targetKind": "FederatedDeployment", "totalReplicas": 3, "rebalance": true}
        }),
    )
    .await?;
    Ok(())
}

fn spread_object(name: &str) -> FederatedObject {
    FederatedObject::config_map(NS, name, json!({"k": "v"})).placement(json!({
        "clusterSelector": {},
        "maxClusters": 3,
        "spreadConstraints": [{"topologyKey": "region", "minGroups": 3}]
    }))
}

#[tokio::test]
async fn spread_taints_and_graceful_moves() -> anyhow::Result<()> {
    let fed = regional_federation().await?;

    // maxClusters 3 + region spread: one per region, member1 before member2 by name.
    let spread = spread_object("spread").apply(&fed.host).await?;
    wait_decision(&spread, &["member1", "member3", "member4"], "True").await?;
    for m in ["member1", "member3", "member4"] {
        wait_present(TIMEOUT, &config_maps(&member(&fed, m), NS), "spread").await?;
    }
    ensure!(
        !holds(&member(&fed, "member2"), "spread").await?,
        "member2 got a copy"
    );

    // A NoSchedule taint keeps new objects off member1; the spread object stays there.
    set_taints(
        &fed.host,
        "member1",
        json!([{"key": "cordon", "effect": "NoSchedule"}]),
    )
    .await?;
    let one_in_a = FederatedObject::config_map(NS, "one-in-a", json!({"k": "v"}))
        .placement(json!({"clusterSelector": {"matchLabels": {"region": "a"}}, "maxClusters": 1}))
        .apply(&fed.host)
        .await?;
    wait_decision(&one_in_a, &["member2"], "True").await?;
    wait_present(
        TIMEOUT,
        &config_maps(&member(&fed, "member2"), NS),
        "one-in-a",
    )
    .await?;
    ensure!(
        !holds(&member(&fed, "member1"), "one-in-a").await?,
        "member1 got a new object"
    );
    ensure!(
        holds(&member(&fed, "member1"), "spread").await?,
        "NoSchedule evicted"
    );

    // A NoExecute taint moves the spread object from member1 to member2, gracefully.
    let (stop, gap) = watch_for_gap(member(&fed, "member1"), member(&fed, "member2"), "spread");
    set_taints(
        &fed.host,
        "member1",
        json!([{"key": "drain", "effect": "NoExecute"}]),
    )
    .await?;
    let moved = wait_decision(&spread, &["member3", "member4", "member2"], "True").await?;
    wait_absent(
        TIMEOUT,
        &config_maps(&member(&fed, "member1"), NS),
        "spread",
    )
    .await?;
    stop.store(true, Ordering::Relaxed);
    ensure!(!gap.await?, "a moment with no copy in member1 nor member2");
    ensure!(
        holds(&member(&fed, "member2"), "spread").await?,
        "member2 lost its copy"
    );
    let status = spread.status().await?.placement.context("placement")?;
    let m = status.moves.first().context("no move recorded")?;
    ensure!(
        (
            m.cluster.as_str(),
            m.reason.as_str(),
            m.replacement.as_deref()
        ) == ("member1", "Replaced", Some("member2")),
        "move {m:?} (decided {:?})",
        decided(&moved)
    );

    // No fitting replacement: member3 (the only b) is drained; its copy is kept.
    set_taints(
        &fed.host,
        "member3",
        json!([{"key": "drain", "effect": "NoExecute"}]),
    )
    .await?;
    let blocked = wait_decision(&spread, &["member4", "member2"], "False").await?;
    ensure!(
        blocked
            .moves
            .iter()
            .any(|m| m.cluster == "member3" && m.reason == "Evicted" && m.replacement.is_none()),
        "moves {:?}",
        blocked.moves
    );
    let cond = spread
        .status()
        .await?
        .scheduled()
        .cloned()
        .context("condition")?;
    ensure!(
        cond.reason == "Unschedulable"
            && cond.message.contains("need 3 distinct region, 2 available"),
        "{cond:?}"
    );
    for _ in 0..10 {
        ensure!(
            holds(&member(&fed, "member3"), "spread").await?,
            "member3's copy was removed"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    for reason in ["Scheduled", "Evicted", "FailoverBlocked"] {
        wait_for(TIMEOUT, &format!("a {reason} Event on spread"), || async {
            let found = events_about(&fed.host, NS, "spread", reason).await?;
            ensure!(!found.is_empty(), "none yet");
            Ok(())
        })
        .await?;
    }

    // The taint is lifted: member3 simply stays, and the object is scheduled again.
    set_taints(&fed.host, "member3", Value::Null).await?;
    wait_decision(&spread, &["member4", "member2", "member3"], "True").await?;
    ensure!(
        holds(&member(&fed, "member3"), "spread").await?,
        "member3's copy was removed"
    );
    Ok(())
}

#[tokio::test]
async fn an_unreachable_member_fails_over_without_a_gap_its_replicas_follow_and_it_does_not_churn_back()
-> anyhow::Result<()> {
    let fed = regional_federation().await?;
    let web = FederatedObject::config_map(NS, "web", json!({"k": "v"}))
        .placement(json!({
            "clusterSelector": {"matchLabels": {"region": "a"}},
            "maxClusters": 1,
            "tolerations": [{"key": "flotilla.io/unreachable", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 4}]
        }))
        .apply(&fed.host)
        .await?;
    wait_decision(&web, &["member1"], "True").await?;
    wait_present(TIMEOUT, &config_maps(&member(&fed, "member1"), NS), "web").await?;
    scheduled_deployment_with_rsp(&fed.host).await?;
    wait_for(TIMEOUT, "3 replicas of app in member1", || async {
        let r = app_replicas(&member(&fed, "member1")).await?;
        ensure!(r == Some(3), "member1 has {r:?}");
        Ok(())
    })
    .await?;

    fed.env.stop_apiserver("member1").await?;
    // member2 takes over once the toleration has run out; member1's copy cannot be removed
    // while it is down, so the move completes on member2's report alone.
    wait_present(
        Duration::from_secs(60),
        &config_maps(&member(&fed, "member2"), NS),
        "web",
    )
    .await?;
    let placement = wait_for(TIMEOUT, "the move to complete", || async {
        let p = web.status().await?.placement.context("placement")?;
        ensure!(decided(&p) == ["member2"], "decided {:?}", decided(&p));
        ensure!(
            p.moves
                .iter()
                .any(|m| m.cluster == "member1" && m.reason == "Replaced"),
            "moves {:?}",
            p.moves
        );
        Ok(p)
    })
    .await?;
    // The RSP's replicas follow the failover of their target.
    wait_for(TIMEOUT, "3 replicas of app in member2", || async {
        let r = app_replicas(&member(&fed, "member2")).await?;
        ensure!(r == Some(3), "member2 has {r:?}");
        Ok(())
    })
    .await?;
    let clusters: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    let m1 = clusters.get("member1").await?;
    ensure!(
        m1.spec
            .taints
            .iter()
            .any(|t| t.key == "flotilla.io/unreachable"),
        "no unreachable taint on member1: {:?}",
        m1.spec.taints
    );

    // member1 comes back: its stale copy goes, member2's stays, and the decision does not
    // move back (member1 would sort first).
    let (stop, gap) = watch_for_gap(member(&fed, "member1"), member(&fed, "member2"), "web");
    fed.env.start_apiserver("member1").await?;
    wait_for(TIMEOUT, "member1's taint lifted", || async {
        let m1 = clusters.get("member1").await?;
        ensure!(m1.spec.taints.is_empty(), "taints {:?}", m1.spec.taints);
        Ok(())
    })
    .await?;
    wait_absent(TIMEOUT, &config_maps(&member(&fed, "member1"), NS), "web").await?;
    for _ in 0..10 {
        let p = web.status().await?.placement.context("placement")?;
        ensure!(
            decided(&p) == ["member2"],
            "churned back: {:?}",
            decided(&p)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stop.store(true, Ordering::Relaxed);
    ensure!(!gap.await?, "a moment with no copy in member1 nor member2");
    ensure!(decided(&placement) == ["member2"]);
    Ok(())
}
