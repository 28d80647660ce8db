//! Multi-Cluster Services with one member black-holed (through the fault proxy) when the
//! control plane starts: the other members still get their ServiceImports — the controller
//! waits for each member only until it is judged (the registry's health verdict; once
//! Ready, the library's per-cluster sync timeout on its caches), not for every member —
//! and the black-holed member is reported with a reason (in the cluster set, and on its
//! KubeFedCluster). Healed, it gets its import too: nothing is missed.
//!
//! How long the import took after the start is printed (`--nocapture`), not asserted.

use std::time::{Duration, Instant};

use crate::fault_harness::{proxied_federation, start_control_plane, wait_cluster_ready};
use anyhow::ensure;
use flotilla_api::{DEFAULT_NAMESPACE, KubeFedCluster, mcs::ServiceImport};
use flotilla_localenv::FaultMode;
use flotilla_tests::{init_tracing, mcs::apply, objects::create_namespace, wait_for};
use k8s_openapi::api::core::v1::Service;
use kube::{Api, Client};
use serde_json::json;

const NS: &str = "mcs-faults";
const T: Duration = Duration::from_secs(90);

/// A selector-less Service `name` with one port, exported from `client`'s cluster.
async fn export_service(client: &Client, name: &str) -> anyhow::Result<()> {
    apply(
        &Api::<Service>::namespaced(client.clone(), NS),
        name,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": NS},
               "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}),
    )
    .await?;
    flotilla_tests::mcs::export(client, NS, name).await
}

/// The exporting clusters of import `name` in a member, once it exists.
async fn imported_from(client: &Client, name: &str) -> anyhow::Result<Option<Vec<String>>> {
    let import = Api::<ServiceImport>::namespaced(client.clone(), NS)
        .get_opt(name)
        .await?;
    Ok(import.map(|i| {
        i.status
            .map(|s| s.clusters)
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.cluster)
            .collect()
    }))
}

async fn wait_imported(client: &Client, member: &str, name: &str) -> anyhow::Result<()> {
    wait_for(T, &format!("import {name} in {member}"), || async {
        let from = imported_from(client, name).await?;
        ensure!(
            from == Some(vec!["member1".to_owned()]),
            "exported from {from:?}"
        );
        Ok(())
    })
    .await
}

/// The Ready condition's (status, reason) of a KubeFedCluster.
async fn ready_condition(host: &Client, name: &str) -> anyhow::Result<Option<(String, String)>> {
    let cluster = Api::<KubeFedCluster>::namespaced(host.clone(), DEFAULT_NAMESPACE)
        .get(name)
        .await?;
    Ok(cluster.status.and_then(|s| {
        let c = s.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        Some((c.status, c.reason.unwrap_or_default()))
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_black_holed_at_start_neither_stalls_the_others_imports_nor_goes_unreported()
-> anyhow::Result<()> {
    init_tracing();
    let mut pf = proxied_federation(3, 3).await?;
    for member in &pf.fed.members {
        create_namespace(member, NS).await?;
    }
    // The control plane stops; member3 goes silent; a Service is exported meanwhile.
    if let Some(cp) = pf.fed.control_plane.take() {
        cp.shutdown().await;
    }
    pf.proxy.set_mode(FaultMode::BlackHole);
    let (m1, m2, m3) = (
        pf.fed.members[0].clone(),
        pf.fed.members[1].clone(),
        pf.fed.members[2].clone(),
    );
    export_service(&m1, "web").await?;

    let started = Instant::now();
    pf.fed.control_plane = Some(start_control_plane(&pf.fed.host));
    wait_imported(&m1, "member1", "web").await?;
    wait_imported(&m2, "member2", "web").await?;
    println!(
        "imports in member1 and member2 {:.1} s after the start, member3 black-holed",
        started.elapsed().as_secs_f64()
    );

    // member3 is reported with a reason, not waited for.
    let cp = pf.fed.control_plane.as_ref().expect("started above");
    let reason = cp.clusters.problems().get("member3").cloned();
    ensure!(
        reason
            .as_deref()
            .is_some_and(|r| r.contains("not reachable")),
        "member3 not reported as unreachable: {reason:?}"
    );
    ensure!(
        cp.clusters.problems().keys().all(|c| c == "member3"),
        "others reported: {:?}",
        cp.clusters.problems()
    );
    let ready = ready_condition(&pf.fed.host, "member3").await?;
    ensure!(
        ready.as_ref().is_some_and(|(status, _)| status == "False"),
        "member3's Ready condition: {ready:?}"
    );
    println!("member3 reported: {reason:?}, Ready condition {ready:?}");

    // Healed, member3 gets the import too, and its report is cleared.
    pf.proxy.set_mode(FaultMode::PassThrough);
    wait_cluster_ready(&pf.fed.host, "member3", T).await?;
    wait_imported(&m3, "member3", "web").await?;
    let cp = pf.fed.control_plane.as_ref().expect("started above");
    wait_for(T, "member3's report cleared", || async {
        let problems = cp.clusters.problems();
        ensure!(problems.is_empty(), "still reported: {problems:?}");
        Ok(())
    })
    .await?;
    Ok(())
}
