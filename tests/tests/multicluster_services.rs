//! Multi-Cluster Services on real clusters (three members with a simulated kubelet, so pods
//! get IPs and Kubernetes' EndpointSlice controller makes real slices): a Service exported
//! from two members is imported into all three with the endpoints of both (readable at
//! v1beta1 and v1alpha1), kept current as pods come and go; an export without a Service is
//! not Valid; an import someone else wrote is left alone; a conflicting port gets the Conflict condition with the oldest export
//! winning; un-exporting cleans the imports and slices; a stopped member's endpoints leave
//! and come back with it; and a quiet ClusterSet writes nothing, also across a restart of the
//! control plane.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_api::DEFAULT_NAMESPACE;
use flotilla_api::mcs::{
    SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL, ServiceImport, ServiceImportType,
};
use flotilla_controllers::{manager::ControlPlane, mcs::slice::SliceVersion, metrics::Metrics};
use flotilla_tests::{
    federation::{Federation, federation_with_pods},
    init_tracing,
    mcs::apply,
    objects::create_namespace,
    requests::writes,
    wait_for,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Pod, Service},
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams},
};
use serde_json::json;

const NS: &str = "mcs";
const T: Duration = Duration::from_secs(90);
const MEMBERS: [&str; 3] = ["member1", "member2", "member3"];
/// The kinds Flotilla writes for MCS, as the API servers' request metrics name them.
const MCS_RESOURCES: [&str; 3] = ["serviceimports", "endpointslices", "serviceexports"];

/// A Deployment of `replicas` pods labelled `app=<name>` and a Service selecting them with
/// one port named `http`.
async fn deploy(client: &Client, name: &str, replicas: i32, port: i32) -> anyhow::Result<()> {
    let labels = json!({"app": name});
    apply(
        &Api::<Deployment>::namespaced(client.clone(), NS),
        name,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
        }),
    )
    .await?;
    apply(
        &Api::<Service>::namespaced(client.clone(), NS),
        name,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": labels,
                "ports": [{"name": "http", "port": port, "targetPort": 8080, "protocol": "TCP"}]}
        }),
    )
    .await
}

async fn export(client: &Client, name: &str) -> anyhow::Result<()> {
    flotilla_tests::mcs::export(client, NS, name).await
}

/// The addresses of the Ready pods of `app` in a member.
async fn pod_ips(client: &Client, app: &str) -> anyhow::Result<BTreeSet<String>> {
    let pods = Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?;
    Ok(pods
        .items
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect())
}

/// The member's EndpointSlice version, as Flotilla discovers it.
async fn slice_api(client: &Client) -> anyhow::Result<Api<DynamicObject>> {
    let groups = client.list_api_groups().await?;
    let served = groups
        .groups
        .iter()
        .filter(|g| g.name == "discovery.k8s.io")
        .flat_map(|g| g.versions.iter().map(|v| v.version.as_str()));
    let version = SliceVersion::preferred(served).context("no EndpointSlice version")?;
    Ok(Api::namespaced_with(
        client.clone(),
        NS,
        &version.api_resource(),
    ))
}

/// Addresses of the imported slices of `service` in a member, by source cluster.
async fn imported_addresses(
    client: &Client,
    service: &str,
) -> anyhow::Result<Vec<(String, BTreeSet<String>)>> {
    let slices = slice_api(client)
        .await?
        .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={service}")))
        .await?;
    let mut out: Vec<(String, BTreeSet<String>)> = Vec::new();
    for s in slices.items {
        let source = s
            .labels()
            .get(SOURCE_CLUSTER_LABEL)
            .cloned()
            .unwrap_or_default();
        let addresses = s.data["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|e| e["addresses"].as_array().into_iter().flatten())
            .filter_map(|a| a.as_str().map(str::to_owned));
        match out.iter_mut().find(|(c, _)| *c == source) {
            Some((_, set)) => set.extend(addresses),
            None => out.push((source, addresses.collect())),
        }
    }
    out.sort();
    Ok(out)
}

/// ServiceExports read dynamically: an export written without `spec` (as users write them)
/// does not fit the typed struct.
fn exports(client: &Client) -> Api<DynamicObject> {
    flotilla_tests::mcs::exports(client, NS)
}

/// (status, reason, message) of an export's condition.
fn condition(e: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    let c = e.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

fn clusters_of(i: &ServiceImport) -> Vec<String> {
    i.status
        .iter()
        .flat_map(|s| s.clusters.iter().map(|c| c.cluster.clone()))
        .collect()
}

/// Waits until every member holds `service`'s import listing `clusters` and slices holding
/// `expected` (per source cluster).
async fn wait_imported(
    fed: &Federation,
    service: &str,
    clusters: &[&str],
    expected: &[(String, BTreeSet<String>)],
) -> anyhow::Result<()> {
    for (i, member) in fed.members.iter().enumerate() {
        let imports = Api::<ServiceImport>::namespaced(member.clone(), NS);
        wait_for(
            T,
            &format!("{service} imported into {}", MEMBERS[i]),
            || async {
                let import = imports.get(service).await?;
                ensure!(
                    clusters_of(&import) == clusters,
                    "clusters {:?}",
                    clusters_of(&import)
                );
                let got = imported_addresses(member, service).await?;
                ensure!(got == expected, "slices {got:?}, want {expected:?}");
                Ok(())
            },
        )
        .await?;
    }
    Ok(())
}

async fn ready_ips(client: &Client, app: &str, n: usize) -> anyhow::Result<BTreeSet<String>> {
    wait_for(T, &format!("{n} pods of {app} with IPs"), || async {
        let ips = pod_ips(client, app).await?;
        ensure!(ips.len() == n, "{ips:?}");
        Ok(ips)
    })
    .await
}

/// member1 and member2 export `web`; all three members import it with both clusters'
/// endpoints; the exports are Valid, Ready and without conflict; the host mirrors the import.
async fn check_export_from_two(
    fed: &Federation,
) -> anyhow::Result<Vec<(String, BTreeSet<String>)>> {
    let (m1, m2) = (&fed.members[0], &fed.members[1]);
    deploy(m1, "web", 2, 80).await?;
    deploy(m2, "web", 1, 80).await?;
    let ips1 = ready_ips(m1, "web", 2).await?;
    let ips2 = ready_ips(m2, "web", 1).await?;
    export(m1, "web").await?;
    export(m2, "web").await?;
    let expected = vec![("member1".to_string(), ips1), ("member2".to_string(), ips2)];
    wait_imported(fed, "web", &["member1", "member2"], &expected).await?;
    let import = Api::<ServiceImport>::namespaced(fed.members[2].clone(), NS)
        .get("web")
        .await?;
    assert_eq!(import.spec.type_, ServiceImportType::ClusterSetIP);
    assert_eq!(import.spec.ports.len(), 1);
    assert_eq!(
        (
            import.spec.ports[0].name.as_str(),
            import.spec.ports[0].port
        ),
        ("http", 80)
    );
    for (i, m) in [m1, m2].into_iter().enumerate() {
        let exports = exports(m);
        wait_for(
            T,
            &format!("export conditions in member{}", i + 1),
            || async {
                let e = exports.get("web").await?;
                let status = &e.data["status"];
                ensure!(
                    condition(&e, "Valid").is_some_and(|c| c.0 == "True"),
                    "{status}"
                );
                ensure!(
                    condition(&e, "Ready").is_some_and(|c| c.1 == "Exported"),
                    "{status}"
                );
                ensure!(
                    condition(&e, "Conflict").is_some_and(|c| c.1 == "NoConflicts"),
                    "{status}"
                );
                Ok(())
            },
        )
        .await?;
    }
    let host = Api::<ServiceImport>::namespaced(fed.host.clone(), NS);
    wait_for(T, "the host's mirror of the import", || async {
        let i = host.get("web").await?;
        ensure!(clusters_of(&i) == ["member1", "member2"], "{:?}", i.status);
        Ok(())
    })
    .await?;
    Ok(expected)
}

/// An export without a Service is not Valid (NoService) and imports nothing; the import
/// of `web` is also served at v1alpha1.
async fn check_invalid_export_and_v1alpha1(fed: &Federation) -> anyhow::Result<()> {
    let m3 = &fed.members[2];
    export(m3, "ghost").await?;
    let api = exports(m3);
    wait_for(T, "ghost's export marked invalid", || async {
        let e = api.get("ghost").await?;
        let valid = condition(&e, "Valid").context("no Valid condition")?;
        ensure!(valid.0 == "False" && valid.1 == "NoService", "{valid:?}");
        let ready = condition(&e, "Ready").context("no Ready condition")?;
        ensure!(ready.0 == "False", "{ready:?}");
        Ok(())
    })
    .await?;
    for m in &fed.members {
        let imports = Api::<ServiceImport>::namespaced(m.clone(), NS);
        ensure!(imports.get_opt("ghost").await?.is_none(), "ghost imported");
    }
    api.delete("ghost", &DeleteParams::default()).await?;

    let alpha = ApiResource {
        version: "v1alpha1".into(),
        api_version: "multicluster.x-k8s.io/v1alpha1".into(),
        ..ApiResource::erase::<ServiceImport>(&())
    };
    let old = Api::<DynamicObject>::namespaced_with(m3.clone(), NS, &alpha)
        .get("web")
        .await?;
    assert_eq!(old.data["spec"]["type"], "ClusterSetIP");
    assert_eq!(old.data["spec"]["ports"][0]["port"], 80);
    Ok(())
}

/// A ServiceImport someone else wrote (no managed-by label) is never overwritten: the
/// export says why it is not Ready, and the other members still get their import.
async fn check_foreign_import_left_alone(fed: &Federation) -> anyhow::Result<()> {
    let (m1, m2, m3) = (&fed.members[0], &fed.members[1], &fed.members[2]);
    let foreign = Api::<ServiceImport>::namespaced(m3.clone(), NS);
    apply(
        &foreign,
        "solo",
        json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
               "metadata": {"name": "solo", "namespace": NS},
               "spec": {"type": "ClusterSetIP", "ports": [{"port": 1, "protocol": "TCP"}]}}),
    )
    .await?;
    apply(
        &Api::<Service>::namespaced(m1.clone(), NS),
        "solo",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "solo", "namespace": NS},
               "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}),
    )
    .await?;
    export(m1, "solo").await?;
    let api = exports(m1);
    wait_for(
        T,
        "solo's export not Ready because of the foreign import",
        || async {
            let e = api.get("solo").await?;
            let ready = condition(&e, "Ready").context("no Ready condition")?;
            ensure!(
                ready.0 == "False" && ready.2.contains("not managed by Flotilla"),
                "{ready:?}"
            );
            Ok(())
        },
    )
    .await?;
    let imports2 = Api::<ServiceImport>::namespaced(m2.clone(), NS);
    wait_for(T, "solo imported into member2", || async {
        ensure!(imports2.get_opt("solo").await?.is_some(), "not yet");
        Ok(())
    })
    .await?;
    let left = foreign.get("solo").await?;
    assert_eq!(left.spec.ports[0].port, 1, "the foreign import was changed");
    assert!(
        left.status.is_none(),
        "the foreign import's status was written"
    );
    api.delete("solo", &DeleteParams::default()).await?;
    wait_for(T, "solo's import gone from member2", || async {
        ensure!(imports2.get_opt("solo").await?.is_none(), "still there");
        Ok(())
    })
    .await?;
    ensure!(
        foreign.get_opt("solo").await?.is_some(),
        "the foreign import was deleted"
    );
    foreign.delete("solo", &DeleteParams::default()).await?;
    Ok(())
}

/// A member's total MCS writes.
async fn mcs_writes(fed: &Federation) -> anyhow::Result<u64> {
    let mut total = writes(&fed.host, &MCS_RESOURCES).await?;
    for m in &fed.members {
        total += writes(m, &MCS_RESOURCES).await?;
    }
    Ok(total)
}

/// Scaling member1's Deployment changes its endpoints everywhere; then nothing more is
/// written while nothing changes.
async fn check_pods_come_and_go(fed: &Federation) -> anyhow::Result<()> {
    let m1 = &fed.members[0];
    let api = Api::<Deployment>::namespaced(m1.clone(), NS);
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await?;
    let ips1 = ready_ips(m1, "web", 3).await?;
    let ips2 = pod_ips(&fed.members[1], "web").await?;
    let expected = vec![("member1".to_string(), ips1), ("member2".to_string(), ips2)];
    wait_imported(fed, "web", &["member1", "member2"], &expected).await?;

    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = mcs_writes(fed).await?;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = mcs_writes(fed).await?;
    assert_eq!(before, after, "MCS writes in a quiet ClusterSet");
    let metrics = fed
        .control_plane
        .as_ref()
        .context("control plane running")?
        .metrics
        .encode();
    for op in [
        "apply_import",
        "import_status",
        "apply_slice",
        "export_status",
    ] {
        let series = format!("flotilla_mcs_writes_total{{op=\"{op}\",result=\"success\"}}");
        assert!(metrics.contains(&series), "{series} missing:\n{metrics}");
    }
    // Only the writes refused on purpose (the foreign import) failed.
    for op in [
        "apply_slice",
        "delete_slice",
        "delete_import",
        "export_status",
    ] {
        let series = format!("flotilla_mcs_writes_total{{op=\"{op}\",result=\"failure\"}}");
        assert!(!metrics.contains(&series), "{series}:\n{metrics}");
    }
    Ok(())
}

/// member2 exports `api` with another port than member1's older export: both exports say
/// Conflict (PortConflict, member1 wins), and the import uses member1's port. Un-exporting
/// removes the import and its slices everywhere.
async fn check_conflict_then_unexport(fed: &Federation) -> anyhow::Result<()> {
    let (m1, m2) = (&fed.members[0], &fed.members[1]);
    deploy(m1, "api", 1, 80).await?;
    deploy(m2, "api", 1, 8080).await?;
    ready_ips(m1, "api", 1).await?;
    ready_ips(m2, "api", 1).await?;
    export(m1, "api").await?;
    // creationTimestamp has one-second precision: make member2's export clearly newer.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    export(m2, "api").await?;
    for (i, m) in [m1, m2].into_iter().enumerate() {
        let exports = exports(m);
        wait_for(
            T,
            &format!("Conflict on member{}'s export", i + 1),
            || async {
                let e = exports.get("api").await?;
                let c = condition(&e, "Conflict").context("no Conflict condition")?;
                ensure!(c.0 == "True" && c.1 == "PortConflict", "{c:?}");
                ensure!(c.2.contains("cluster member1"), "{c:?}");
                Ok(())
            },
        )
        .await?;
    }
    let imports = Api::<ServiceImport>::namespaced(fed.members[2].clone(), NS);
    wait_for(T, "api imported with member1's port", || async {
        let i = imports.get("api").await?;
        ensure!(
            i.spec.ports.iter().map(|p| p.port).collect::<Vec<_>>() == [80],
            "{:?}",
            i.spec
        );
        ensure!(clusters_of(&i) == ["member1", "member2"]);
        Ok(())
    })
    .await?;

    for m in [m1, m2] {
        exports(m).delete("api", &DeleteParams::default()).await?;
    }
    for (i, m) in fed.members.iter().chain([&fed.host]).enumerate() {
        let imports = Api::<ServiceImport>::namespaced(m.clone(), NS);
        wait_for(
            T,
            &format!("api's import gone from cluster {i}"),
            || async {
                ensure!(imports.get_opt("api").await?.is_none(), "still there");
                Ok(())
            },
        )
        .await?;
        if i < fed.members.len() {
            wait_for(T, "api's slices gone", || async {
                let left = imported_addresses(m, "api").await?;
                ensure!(left.is_empty(), "{left:?}");
                Ok(())
            })
            .await?;
        }
    }
    Ok(())
}

/// member2 stops: its endpoints leave member1 and member3 (it stays listed as an exporting
/// cluster); it comes back: they return.
async fn check_member_down_and_back(
    fed: &Federation,
    expected: &[(String, BTreeSet<String>)],
) -> anyhow::Result<()> {
    fed.env.stop_apiserver("member2").await?;
    let only_member1: Vec<_> = expected
        .iter()
        .filter(|(c, _)| c == "member1")
        .cloned()
        .collect();
    for i in [0, 2] {
        let member = &fed.members[i];
        wait_for(
            T,
            &format!("member2's endpoints gone from {}", MEMBERS[i]),
            || async {
                let got = imported_addresses(member, "web").await?;
                ensure!(got == only_member1, "{got:?}");
                let import = Api::<ServiceImport>::namespaced(member.clone(), NS)
                    .get("web")
                    .await?;
                ensure!(
                    clusters_of(&import) == ["member1", "member2"],
                    "{:?}",
                    import.status
                );
                Ok(())
            },
        )
        .await?;
    }
    fed.env.start_apiserver("member2").await?;
    wait_imported(fed, "web", &["member1", "member2"], expected).await
}

/// A restarted control plane writes nothing for MCS when nothing changed.
async fn check_restart_writes_nothing(fed: &mut Federation) -> anyhow::Result<()> {
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = mcs_writes(fed).await?;
    if let Some(cp) = fed.control_plane.take() {
        cp.shutdown().await;
    }
    fed.control_plane = Some(ControlPlane::start(
        fed.host.clone(),
        DEFAULT_NAMESPACE,
        Arc::new(Metrics::new()),
    ));
    // Long enough for the first probes, every member's caches and several passes.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = mcs_writes(fed).await?;
    assert_eq!(before, after, "MCS writes after a restart");
    Ok(())
}

#[tokio::test]
async fn services_exported_from_two_members_are_imported_everywhere_and_kept_current()
-> anyhow::Result<()> {
    init_tracing();
    let mut fed = federation_with_pods(3).await?;
    for c in fed.members.iter().chain([&fed.host]) {
        create_namespace(c, NS).await?;
    }
    check_export_from_two(&fed).await?;
    check_invalid_export_and_v1alpha1(&fed).await?;
    check_foreign_import_left_alone(&fed).await?;
    check_pods_come_and_go(&fed).await?;
    check_conflict_then_unexport(&fed).await?;
    let ips1 = pod_ips(&fed.members[0], "web").await?;
    let ips2 = pod_ips(&fed.members[1], "web").await?;
    let expected = vec![("member1".to_string(), ips1), ("member2".to_string(), ips2)];
    check_member_down_and_back(&fed, &expected).await?;
    check_restart_writes_nothing(&mut fed).await?;
    Ok(())
}
