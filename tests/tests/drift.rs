//! Drift you can see, end to end on real clusters: another writer changes a propagated
//! Deployment in a member (`kubectl scale`- and `kubectl edit`-like writes with their field
//! managers) and the federated object's `status.drift`, its Events and
//! `flotilla_drift_total` name the cluster, the fields and the writer — repaired by
//! default, left in place under `Report`, left alone under `drift-ignore`, and no longer
//! fought over once the writer keeps undoing the repair.
//!
//! All four scenarios share one federation, each in its own namespace
//! (`repair_report_ignore_and_fight_on_one_federation`). The first counts
//! `flotilla_drift_total`, which every drift in the federation moves (the others write as
//! the same managers), so it runs alone before the other three run together.

use std::time::Duration;

use anyhow::ensure;
use flotilla_core::drift::{IGNORE_ANNOTATION, POLICY_ANNOTATION};
use flotilla_tests::{
    assert::events_about,
    drift::{managers, paths, scale_to, wait_drift, wait_event, write_as},
    federation::{Federation, federation},
    host::FederatedRef,
    member::{deployments, first_image, replicas},
    objects::FederatedObject,
    scenario,
    scenarios::run_all,
    wait_for,
};
use kube::Api;
use serde_json::json;

const T: Duration = Duration::from_secs(60);
const NS: &str = "drift";

/// `web` (2 replicas of nginx:1) in member1 only, in `ns`, with the given annotations.
async fn web(
    fed: &Federation,
    ns: &str,
    annotations: &[(&str, &str)],
) -> anyhow::Result<FederatedRef> {
    let mut obj = FederatedObject::deployment(ns, "web", 2, "nginx:1").on_clusters(&["member1"]);
    for (k, v) in annotations {
        obj = obj.annotate(k, v);
    }
    let r = obj.apply(&fed.host).await?;
    r.wait_propagated().await?;
    Ok(r)
}

/// A member write to `web` in `ns` as `kubectl` sends it: a merge patch under `manager`'s
/// name.
fn image(image: &str) -> serde_json::Value {
    json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}}})
}

async fn a_scale_and_an_edit_in_a_member_are_repaired_and_named_in_status_events_and_metrics(
    fed: &Federation,
) -> anyhow::Result<()> {
    let r = web(fed, NS, &[]).await?;
    let m1 = &fed.members[0];

    write_as(m1, NS, "web", "kubectl-scale", scale_to(5)).await?;
    let d = wait_drift(&r, "member1", "the scale reported", |d| {
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
    wait_for(T, "replicas repaired", || async {
        let dep = deployments(m1, NS).get("web").await?;
        ensure!(replicas(&dep) == Some(2), "replicas {:?}", replicas(&dep));
        Ok(())
    })
    .await?;
    wait_event(
        &fed.host,
        NS,
        "web",
        "DriftRepaired",
        &["member1", "spec.replicas", "kubectl-scale"],
    )
    .await?;

    write_as(m1, NS, "web", "kubectl-edit", image("nginx:2")).await?;
    let d = wait_drift(&r, "member1", "the edit reported", |d| {
        ensure!(
            paths(d) == ["spec.template.spec.containers[0].image"],
            "{d:?}"
        );
        Ok(())
    })
    .await?;
    assert_eq!(managers(&d), ["kubectl-edit"]);
    assert_eq!(d.fields[0].live, "nginx:2");
    wait_for(T, "image repaired", || async {
        let dep = deployments(m1, NS).get("web").await?;
        ensure!(
            first_image(&dep) == Some("nginx:1"),
            "{:?}",
            first_image(&dep)
        );
        Ok(())
    })
    .await?;
    let note = wait_event(
        &fed.host,
        NS,
        "web",
        "DriftRepaired",
        &["member1", "containers[0].image", "kubectl-edit"],
    )
    .await?;
    assert!(note.contains("repaired"), "{note}");

    // The repaired Propagation stays True; the counter names both writers.
    r.wait_propagated().await?;
    let metrics = fed
        .control_plane
        .as_ref()
        .map(|cp| cp.metrics.encode())
        .unwrap_or_default();
    for manager in ["kubectl-scale", "kubectl-edit"] {
        let series = format!("flotilla_drift_total{{cluster=\"member1\",manager=\"{manager}\"}} 1");
        assert!(metrics.contains(&series), "{series} missing:\n{metrics}");
    }
    Ok(())
}

/// The scenarios that share one federation, each in its own namespace: the one that
/// counts drifts first and alone, then the other three at once.
#[tokio::test]
async fn repair_report_ignore_and_fight_on_one_federation() -> anyhow::Result<()> {
    let fed = federation(1).await?;
    let fed = &fed;
    run_all(
        fed,
        vec![scenario!(
            fed,
            NS => a_scale_and_an_edit_in_a_member_are_repaired_and_named_in_status_events_and_metrics
        )],
    )
    .await;
    run_all(
        fed,
        vec![
            scenario!(
                fed,
                "drift-report",
                report_leaves_the_change_in_place_and_says_the_cluster_differs
            ),
            scenario!(
                fed,
                "drift-ignore",
                an_ignored_field_written_by_another_controller_is_neither_repaired_nor_reported
            ),
            scenario!(
                fed,
                "drift-fight",
                a_writer_that_keeps_undoing_the_repair_gets_a_drift_fight_and_the_repairs_stop
            ),
        ],
    )
    .await;
    Ok(())
}

async fn report_leaves_the_change_in_place_and_says_the_cluster_differs(
    fed: &Federation,
    ns: &str,
) -> anyhow::Result<()> {
    let r = web(fed, ns, &[(POLICY_ANNOTATION, "Report")]).await?;
    let m1 = &fed.members[0];

    write_as(m1, ns, "web", "kubectl-scale", scale_to(4)).await?;
    let d = wait_drift(&r, "member1", "the scale reported", |d| {
        ensure!(
            d.state == "Detected" && paths(d) == ["spec.replicas"],
            "{d:?}"
        );
        Ok(())
    })
    .await?;
    assert_eq!(managers(&d), ["kubectl-scale"]);
    assert_eq!(d.repaired_at, None);
    r.wait_cluster_reasons(&[("member1", "Drifted")]).await?;
    r.wait_not_propagated("CheckClusters").await?;
    wait_event(
        &fed.host,
        ns,
        "web",
        "DriftDetected",
        &["member1", "spec.replicas", "kubectl-scale"],
    )
    .await?;
    // The status says Detected only after the decision not to write: the change is there.
    let dep = deployments(m1, ns).get("web").await?;
    assert_eq!(replicas(&dep), Some(4));

    // Back to the desired value: the report is resolved and Propagation True again.
    write_as(m1, ns, "web", "kubectl-scale", scale_to(2)).await?;
    wait_for(T, "the report resolved", || async {
        let status = r.status().await?;
        ensure!(status.drift.is_empty(), "{:?}", status.drift);
        Ok(())
    })
    .await?;
    r.wait_propagated().await?;
    Ok(())
}

async fn an_ignored_field_written_by_another_controller_is_neither_repaired_nor_reported(
    fed: &Federation,
    ns: &str,
) -> anyhow::Result<()> {
    let r = web(
        fed,
        ns,
        &[
            (POLICY_ANNOTATION, "Ignore"),
            (IGNORE_ANNOTATION, "spec.replicas"),
        ],
    )
    .await?;
    let m1 = &fed.members[0];

    write_as(m1, ns, "web", "autoscaler", scale_to(6)).await?;
    // A second change, to a field Flotilla owns, is repaired — and that repair keeps the
    // autoscaler's replicas: they were seen and left alone.
    write_as(m1, ns, "web", "kubectl-edit", image("nginx:3")).await?;
    let d = wait_drift(&r, "member1", "the edit repaired", |d| {
        ensure!(d.state == "Repaired", "{d:?}");
        Ok(())
    })
    .await?;
    assert_eq!(paths(&d), ["spec.template.spec.containers[0].image"]);
    assert_eq!(managers(&d), ["kubectl-edit"]);
    wait_for(T, "image repaired", || async {
        let dep = deployments(m1, ns).get("web").await?;
        ensure!(
            first_image(&dep) == Some("nginx:1"),
            "{:?}",
            first_image(&dep)
        );
        Ok(())
    })
    .await?;
    let dep = deployments(m1, ns).get("web").await?;
    assert_eq!(
        replicas(&dep),
        Some(6),
        "the ignored field keeps the autoscaler's value"
    );
    let events = events_about(&fed.host, ns, "web", "DriftRepaired").await?;
    assert!(
        events
            .iter()
            .filter_map(|e| e.note.as_deref())
            .all(|n| !n.contains("replicas") && !n.contains("autoscaler")),
        "{events:?}"
    );
    r.wait_propagated().await?;
    Ok(())
}

async fn a_writer_that_keeps_undoing_the_repair_gets_a_drift_fight_and_the_repairs_stop(
    fed: &Federation,
    ns: &str,
) -> anyhow::Result<()> {
    let r = web(fed, ns, &[]).await?;
    let m1 = fed.members[0].clone();
    let writer_ns = ns.to_owned();

    let writer = tokio::spawn(async move {
        loop {
            let _ = write_as(&m1, &writer_ns, "web", "autoscaler", scale_to(7)).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let fight = wait_drift(&r, "member1", "a fight", |d| {
        ensure!(d.state == "Fight", "{d:?}");
        Ok(())
    })
    .await;
    writer.abort();
    let d = fight?;
    assert_eq!(paths(&d), ["spec.replicas"]);
    assert_eq!(managers(&d), ["autoscaler"]);
    r.wait_cluster_reasons(&[("member1", "DriftFight")]).await?;
    wait_event(
        &fed.host,
        ns,
        "web",
        "DriftFight",
        &["member1", "spec.replicas", "autoscaler", "flotilla"],
    )
    .await?;

    // Repairs stopped: the writer's value stays, and writing it again changes nothing (a
    // repair in between would make each write a spec change, a new generation).
    let m1 = &fed.members[0];
    let api: Api<k8s_openapi::api::apps::v1::Deployment> = deployments(m1, ns);
    let before = api.get("web").await?;
    assert_eq!(replicas(&before), Some(7));
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        write_as(m1, ns, "web", "autoscaler", scale_to(7)).await?;
    }
    let after = api.get("web").await?;
    assert_eq!(after.metadata.generation, before.metadata.generation);
    assert_eq!(replicas(&after), Some(7));
    Ok(())
}
