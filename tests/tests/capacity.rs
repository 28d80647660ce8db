//! Capacity on real clusters: members whose simulated nodes offer different room, their
//! kube-scheduler leaving pods beyond it Pending (`PodScheduled=False/Unschedulable`);
//! ReplicaSchedulingPreference's capacity estimate, overflow, `AvailableReplicas` division
//! and reasons on top.

use std::time::Duration;

use anyhow::ensure;
use flotilla_api::KubeFedCluster;
use flotilla_localenv::{NodeCapacity, PodSimulation};
use flotilla_tests::{
    EnvOptions,
    cli::run_ok,
    env_with,
    federation::{Federation, apply, federated_namespace, federation_of_2_and_8_cpus},
    member::{deployments, replicas},
    objects::FederatedObject,
    objects::rsp_resource,
    wait::wait_namespace_in,
    wait_for,
};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams, Patch, PatchParams},
};
use serde_json::json;

/// One node of 1 CPU, 1 GiB and 10 pods.
fn small_node() -> NodeCapacity {
    NodeCapacity {
        cpu: "1".into(),
        memory: "1Gi".into(),
        pods: "10".into(),
    }
}

/// Creates namespace `ns` and a Deployment `web` of `replicas` pods requesting `cpu` each.
async fn deployment(client: &Client, ns: &str, replicas: i32, cpu: &str) -> anyhow::Result<()> {
    let pp = PatchParams::apply("flotilla-tests");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    namespaces.patch(ns, &pp, &Patch::Apply(body)).await?;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), ns);
    let body = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx",
                    "resources": {"requests": {"cpu": cpu}}}]}}}
    });
    deployments.patch("web", &pp, &Patch::Apply(body)).await?;
    Ok(())
}

/// The `PodScheduled` condition's status and reason of every pod of `ns`.
async fn scheduled(client: &Client, ns: &str) -> anyhow::Result<Vec<(String, String)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods.list(&ListParams::default()).await?;
    Ok(list
        .items
        .iter()
        .map(|p| {
            let c = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
            (
                c.map(|c| c.status.clone()).unwrap_or_default(),
                c.and_then(|c| c.reason.clone()).unwrap_or_default(),
            )
        })
        .collect())
}

#[tokio::test]
async fn pods_beyond_a_members_node_capacity_stay_pending_unschedulable() -> anyhow::Result<()> {
    let mut options = EnvOptions::with_members(1);
    options.pods = Some(PodSimulation::default().with_member("member1", 1, small_node()));
    let env = env_with(options).await;
    let member = env.members()[0].client().await?;
    // 1 CPU holds two pods of 400m; the third stays Pending.
    deployment(&member, "demo", 3, "400m").await?;
    wait_for(
        Duration::from_secs(60),
        "2 pods scheduled and 1 unschedulable",
        || async {
            let s = scheduled(&member, "demo").await?;
            let ok = s.iter().filter(|(st, _)| st == "True").count();
            let unschedulable = s
                .iter()
                .filter(|(st, r)| st == "False" && r == "Unschedulable")
                .count();
            ensure!((ok, unschedulable) == (2, 1), "pods {s:?}");
            Ok(())
        },
    )
    .await?;
    Ok(())
}

/// A FederatedDeployment `web` in `ns` whose pods request 500m CPU each.
fn web(ns: &str) -> FederatedObject {
    FederatedObject::deployment(ns, "web", 1, "nginx").template(requesting("500m"))
}

/// The template of Deployment `web` whose pods request `cpu` each.
fn requesting(cpu: &str) -> serde_json::Value {
    json!({"spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx",
                "resources": {"requests": {"cpu": cpu}}}]}}
    }})
}

/// member1's node (of 2 CPUs) now offers 8.
async fn grow_member1_to_8_cpus(fed: &Federation) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(fed.members[0].clone());
    let room = json!({"status": {"allocatable": {"cpu": "8"}, "capacity": {"cpu": "8"}}});
    nodes
        .patch_status(
            "member1-node1",
            &PatchParams::default(),
            &Patch::Merge(&room),
        )
        .await?;
    Ok(())
}

/// The replicas of Deployment `web` in each member.
async fn member_replicas(fed: &Federation, ns: &str) -> anyhow::Result<Vec<Option<i32>>> {
    let mut out = Vec::new();
    for m in &fed.members {
        let d = deployments(m, ns).get_opt("web").await?;
        out.push(d.as_ref().and_then(replicas));
    }
    Ok(out)
}

/// `(cluster, replicas, reason)` of the RSP's status.
async fn reasons(fed: &Federation, ns: &str) -> anyhow::Result<Vec<(String, i64, String)>> {
    let api: Api<DynamicObject> = Api::namespaced_with(fed.host.clone(), ns, &rsp_resource());
    let rsp = api.get("web").await?;
    let clusters = rsp.data["status"]["clusters"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(clusters
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_owned(),
                c["replicas"].as_i64().unwrap_or_default(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect())
}

/// Applies the RSP `web` of `ns` with `spec`.
async fn rsp(fed: &Federation, ns: &str, spec: serde_json::Value) -> anyhow::Result<()> {
    apply(
        &fed.host,
        &rsp_resource(),
        Some(ns),
        &json!({
            "apiVersion": "scheduling.kubefed.io/v1alpha1", "kind": "ReplicaSchedulingPreference",
            "metadata": {"name": "web", "namespace": ns}, "spec": spec
        }),
    )
    .await?;
    Ok(())
}

/// Waits until the members run `want` replicas of `web` in `ns` and the RSP's status says
/// `reasons` for member1 and member2.
async fn wait_division(
    fed: &Federation,
    ns: &str,
    want: [i32; 2],
    reasons_wanted: [&str; 2],
) -> anyhow::Result<()> {
    let what = format!("{want:?} replicas for {reasons_wanted:?} in {ns}");
    wait_for(Duration::from_secs(90), &what, || async {
        let r = member_replicas(fed, ns).await?;
        let r: Vec<i32> = r.iter().map(|n| n.unwrap_or(0)).collect();
        ensure!(r == want, "replicas {r:?}");
        let why = reasons(fed, ns).await?;
        let got: Vec<&str> = why.iter().map(|(_, _, r)| r.as_str()).collect();
        ensure!(got == reasons_wanted, "status {why:?}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn replicas_overflow_by_capacity_estimate_and_divide_by_available_replicas()
-> anyhow::Result<()> {
    let fed = federation_of_2_and_8_cpus().await?;
    federated_namespace(&fed, "overflow").await?;
    wait_namespace_in(&fed.members, "overflow").await?;

    // Static weights 2:1 put 7 in member1, which runs 4: 5 s later the 3 others go to
    // member2, and without rebalancing nothing stays Pending in member1.
    web("overflow").apply(&fed.host).await?;
    let spec = |rebalance: bool| {
        json!({"targetKind": "FederatedDeployment", "totalReplicas": 10, "rebalance": rebalance,
            "clusters": {"member1": {"weight": 2}, "member2": {"weight": 1}}})
    };
    rsp(&fed, "overflow", spec(false)).await?;
    wait_division(&fed, "overflow", [4, 6], ["Current", "Current"]).await?;
    ensure!(
        scheduled(&fed.members[0], "overflow")
            .await?
            .iter()
            .all(|(s, _)| s == "True"),
        "no pod left Pending in member1"
    );

    // With rebalance: the weights again (7 in member1), and past the threshold kubefed's
    // overflow: member1 keeps its 3 unschedulable replicas Pending, member2 runs 6.
    rsp(&fed, "overflow", spec(true)).await?;
    wait_division(&fed, "overflow", [7, 6], ["CapacityEstimate", "Weight"]).await?;
    let out = run_ok(&fed, &["status", "rsp/web", "-n", "overflow"]).await?;
    ensure!(
        out.lines()
            .any(|l| l.contains("member1") && l.contains("CapacityEstimate")),
        "flotilla status: {out}"
    );
    // `flotilla diff` divides with the capacity the division read: nothing to change, and
    // each cluster's replicas with its reason.
    let diff =
        flotilla_tests::cli::run(&fed, &["diff", "federateddeployment/web", "-n", "overflow"])
            .await;
    ensure!(
        diff.code == 0
            && diff.out.lines().any(|l| l.contains("member1")
                && l.contains("7")
                && l.contains("CapacityEstimate")),
        "flotilla diff ({}): {}",
        diff.code,
        diff.out
    );

    // member1's summary in its KubeFedCluster: one node of 2 CPUs, all of it requested.
    wait_for(
        Duration::from_secs(30),
        "member1's resource summary",
        || async {
            let kfcs: Api<KubeFedCluster> =
                Api::namespaced(fed.host.clone(), "kube-federation-system");
            let s = kfcs.get("member1").await?.status.and_then(|s| s.resources);
            let s = s.ok_or_else(|| anyhow::anyhow!("no summary yet"))?;
            let cpu = |m: &std::collections::BTreeMap<String, String>| m.get("cpu").cloned();
            ensure!(s.nodes == 1 && s.pods == 7, "{s:?}");
            ensure!(cpu(&s.allocatable).as_deref() == Some("2"), "{s:?}");
            ensure!(cpu(&s.requested).as_deref() == Some("2"), "{s:?}");
            Ok(())
        },
    )
    .await?;
    let out = run_ok(&fed, &["status", "--clusters"]).await?;
    ensure!(
        out.lines()
            .any(|l| l.starts_with("member1") && l.contains("2/2")),
        "flotilla status --clusters: {out}"
    );

    // Room appears in member1 (its node now offers 8 CPUs): the Pending replicas start, the
    // estimate goes, and with rebalance the division returns to the weights.
    grow_member1_to_8_cpus(&fed).await?;
    wait_division(&fed, "overflow", [7, 3], ["Weight", "Weight"]).await?;

    // AvailableReplicas in another namespace. Free: member1 8 − 7 × 0.5 = 4.5 CPUs (9
    // replicas), member2 8 − 3 × 0.5 = 6.5 (13); 11 replicas by 9:13 → 4 and 7.
    federated_namespace(&fed, "fit").await?;
    wait_namespace_in(&fed.members, "fit").await?;
    web("fit").apply(&fed.host).await?;
    rsp(
        &fed,
        "fit",
        json!({"targetKind": "FederatedDeployment", "totalReplicas": 11,
            "weightPreference": "AvailableReplicas", "clusters": {"*": {"weight": 1}}}),
    )
    .await?;
    wait_division(
        &fed,
        "fit",
        [4, 7],
        ["AvailableReplicas", "AvailableReplicas"],
    )
    .await?;
    Ok(())
}

/// The RSP `web` of `ns` as JSON.
async fn rsp_object(fed: &Federation, ns: &str) -> anyhow::Result<serde_json::Value> {
    let api: Api<DynamicObject> = Api::namespaced_with(fed.host.clone(), ns, &rsp_resource());
    Ok(api.get("web").await?.data)
}

#[tokio::test]
async fn a_one_off_rebalance_moves_replicas_to_freed_room_unless_a_rollout_is_under_way()
-> anyhow::Result<()> {
    let fed = federation_of_2_and_8_cpus().await?;
    let ns = "rebalance";
    federated_namespace(&fed, ns).await?;
    wait_namespace_in(&fed.members, ns).await?;

    // Weights 2:1 of 10 without rebalancing: member1 runs the 4 that fit, member2 the rest.
    web(ns).apply(&fed.host).await?;
    rsp(
        &fed,
        ns,
        json!({"targetKind": "FederatedDeployment", "totalReplicas": 10,
            "clusters": {"member1": {"weight": 2}, "member2": {"weight": 1}}}),
    )
    .await?;
    wait_division(&fed, ns, [4, 6], ["Current", "Current"]).await?;

    // member1's node grows to 8 CPUs: the control plane sees it (its summary says so), and
    // with `rebalance: false` nothing moves.
    grow_member1_to_8_cpus(&fed).await?;
    wait_for(Duration::from_secs(30), "member1's 8 CPUs seen", || async {
        let kfcs: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), "kube-federation-system");
        let s = kfcs.get("member1").await?.status.and_then(|s| s.resources);
        let cpu = s.and_then(|s| s.allocatable.get("cpu").cloned());
        ensure!(cpu.as_deref() == Some("8"), "allocatable cpu {cpu:?}");
        Ok(())
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let now = member_replicas(&fed, ns).await?;
    ensure!(
        now == [Some(4), Some(6)],
        "nothing moves by itself: {now:?}"
    );

    // The one-off rebalance divides by the weights again, from the room there is now.
    let out = run_ok(&fed, &["rebalance", "deployment", "web", "-n", ns]).await?;
    ensure!(
        out.contains("Rebalanced: replicas moved: member1 4→7, member2 6→3"),
        "flotilla rebalance: {out}"
    );
    wait_division(&fed, ns, [7, 3], ["Weight", "Weight"]).await?;

    // A rollout held paused: the command refuses before asking, and a request written
    // directly is refused by the scheduler, in status and by an Event; nothing moves.
    let fd = web(ns).api_resource();
    let fds: Api<DynamicObject> = Api::namespaced_with(fed.host.clone(), ns, &fd);
    let held = json!({"spec": {
        "rollout": {"strategy": "Progressive", "maxConcurrency": 1, "paused": true},
        "template": {"spec": {"template": {"spec": {"containers": [{"name": "web",
            "image": "nginx:2", "resources": {"requests": {"cpu": "500m"}}}]}}}}}});
    fds.patch("web", &PatchParams::default(), &Patch::Merge(&held))
        .await?;
    wait_for(Duration::from_secs(60), "the rollout paused", || async {
        let status = flotilla_api::federated::FederatedStatus::from_dynamic(&fds.get("web").await?);
        let reason = status.rollout_condition().map(|c| c.reason.clone());
        ensure!(reason.as_deref() == Some("Paused"), "rollout {reason:?}");
        Ok(())
    })
    .await?;
    let refused = flotilla_tests::cli::run(&fed, &["rebalance", "rsp", "web", "-n", ns]).await;
    ensure!(
        refused.code != 0
            && refused
                .out
                .contains("rebalance refused: the target's rollout is Paused"),
        "flotilla rebalance during a paused rollout ({}): {}",
        refused.code,
        refused.out
    );
    let api: Api<DynamicObject> = Api::namespaced_with(fed.host.clone(), ns, &rsp_resource());
    let ask = json!({"metadata": {"annotations": {"scheduling.flotilla.io/rebalance": "by-hand"}}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(&ask))
        .await?;
    wait_for(Duration::from_secs(30), "the request refused", || async {
        let answer = rsp_object(&fed, ns).await?["status"]["rebalance"].clone();
        ensure!(
            answer["request"] == "by-hand" && answer["outcome"] == "Refused",
            "{answer}"
        );
        Ok(())
    })
    .await?;
    let now = member_replicas(&fed, ns).await?;
    ensure!(now == [Some(7), Some(3)], "nothing moved: {now:?}");
    Ok(())
}

/// `web` of `ns` whose pods each request `cpu`, placed as `placement` says.
fn web_requesting(ns: &str, cpu: &str, placement: serde_json::Value) -> FederatedObject {
    web(ns).template(requesting(cpu)).placement(placement)
}

#[tokio::test]
async fn a_cluster_where_no_pod_fits_or_a_taint_keeps_out_gets_none_and_says_why()
-> anyhow::Result<()> {
    let fed = federation_of_2_and_8_cpus().await?;
    let all = json!({"clusterSelector": {}});
    let available = json!({"targetKind": "FederatedDeployment", "totalReplicas": 2,
        "weightPreference": "AvailableReplicas", "rebalance": true,
        "clusters": {"*": {"weight": 1}}});

    // 3 CPUs a pod: none fits member1's 2-CPU node, two fit member2's 8.
    federated_namespace(&fed, "nofit").await?;
    wait_namespace_in(&fed.members, "nofit").await?;
    web_requesting("nofit", "3", all.clone())
        .apply(&fed.host)
        .await?;
    rsp(&fed, "nofit", available.clone()).await?;
    wait_division(
        &fed,
        "nofit",
        [0, 2],
        ["Unschedulable", "AvailableReplicas"],
    )
    .await?;
    let out = run_ok(&fed, &["status", "rsp/web", "-n", "nofit"]).await?;
    ensure!(
        out.lines()
            .any(|l| l.contains("member1") && l.contains("Unschedulable")),
        "flotilla status: {out}"
    );
    // 64 CPUs a pod fit nowhere: with `rebalance: true` (without it, the 2 running
    // replicas stay where they are) none anywhere, each cluster saying why.
    web_requesting("nofit", "64", all).apply(&fed.host).await?;
    wait_division(&fed, "nofit", [0, 0], ["Unschedulable", "Unschedulable"]).await?;

    // A placement of Flotilla's scheduler that does not tolerate member1's taint: member1
    // gets none and its taint is named.
    let clusters: Api<KubeFedCluster> =
        Api::namespaced(fed.host.clone(), flotilla_api::DEFAULT_NAMESPACE);
    let taint =
        json!({"spec": {"taints": [{"key": "example.com/reserved", "effect": "NoSchedule"}]}});
    clusters
        .patch("member1", &PatchParams::default(), &Patch::Merge(&taint))
        .await?;
    federated_namespace(&fed, "tainted").await?;
    wait_namespace_in(&fed.members, "tainted").await?;
    web_requesting(
        "tainted",
        "100m",
        json!({"clusterSelector": {}, "maxClusters": 2}),
    )
    .apply(&fed.host)
    .await?;
    rsp(
        &fed,
        "tainted",
        json!({"targetKind": "FederatedDeployment", "totalReplicas": 4,
        "clusters": {"*": {"weight": 1}}}),
    )
    .await?;
    wait_division(&fed, "tainted", [0, 4], ["Tainted", "Weight"]).await?;
    let why = reasons(&fed, "tainted").await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(fed.host.clone(), "tainted", &rsp_resource());
    let status = api.get("web").await?.data["status"]["clusters"][0]["message"].clone();
    ensure!(
        status
            .as_str()
            .is_some_and(|m| m.contains("example.com/reserved:NoSchedule")),
        "member1's message names the taint: {status} ({why:?})"
    );
    Ok(())
}
