//! Multi-Cluster Services DNS on real clusters: two members with a simulated kubelet (pods
//! get IPs, Kubernetes' EndpointSlice controller makes real slices), the control plane
//! allocating ClusterSet IPs from a deliberately small range, and `flotilla dns` serving
//! member2's view on loopback, asked real DNS questions over UDP and TCP:
//! a ClusterSetIP service resolves to its ClusterSet IP; a headless one to every ready
//! endpoint and `<hostname>.<clusterid>.…` to one; named ports have SRV records; a stopped
//! member's endpoints leave the answers and come back; an exhausted range and a type
//! conflict are reported on the conditions while everything else still resolves;
//! un-exporting makes the name NXDOMAIN, as is a name in a namespace with no import.

use std::{collections::BTreeSet, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_api::{
    DEFAULT_NAMESPACE, KubeFedConfig, crdgen,
    mcs::{CLUSTERSET_IPS_ANNOTATION, ServiceImport, ServiceImportType},
};
use flotilla_controllers::cluster_id::{ClusterId, ensure_cluster_id};
use flotilla_dns::{
    Dns,
    client::{Transport, query},
    routes::RouteHelper,
};
use flotilla_tests::{
    assert::events_about,
    federation::{Federation, federation_with_pods},
    init_tracing,
    mcs::{MANAGER, apply},
    objects::create_namespace,
    wait_for,
};
use hickory_proto::{
    op::{Message, ResponseCode},
    rr::RecordType,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Pod, Service},
};
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

const NS: &str = "dns";
const T: Duration = Duration::from_secs(90);
/// Two usable addresses: `web` and one of `extra-a`/`extra-b` get one, the other is told
/// the range is exhausted.
const RANGE: &str = "10.250.0.0/30";
const BOTH: [Transport; 2] = [Transport::Udp, Transport::Tcp];

/// A Deployment of one pod labelled `app=<name>` (with `hostname`, as a StatefulSet's pods
/// have, when `headless`) and its Service with a port named `http`.
async fn deploy(client: &Client, name: &str, headless: bool) -> anyhow::Result<()> {
    let labels = json!({"app": name});
    let mut pod_spec = json!({"containers": [{"name": "c", "image": "nginx"}]});
    if headless {
        pod_spec["hostname"] = json!(format!("{name}-host"));
        pod_spec["subdomain"] = json!(name);
    }
    apply(
        &Api::<Deployment>::namespaced(client.clone(), NS),
        name,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod_spec}}
        }),
    )
    .await?;
    let mut spec = json!({"selector": labels,
        "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]});
    if headless {
        spec["clusterIP"] = json!("None");
    }
    apply(
        &Api::<Service>::namespaced(client.clone(), NS),
        name,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": NS}, "spec": spec}),
    )
    .await
}

fn exports(client: &Client) -> Api<DynamicObject> {
    flotilla_tests::mcs::exports(client, NS)
}

async fn export(client: &Client, name: &str) -> anyhow::Result<()> {
    flotilla_tests::mcs::export(client, NS, name).await
}

/// The IP of the one running pod of `app`.
async fn pod_ip(client: &Client, app: &str) -> anyhow::Result<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    wait_for(T, &format!("a pod of {app} with an IP"), || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await?;
        let ips: Vec<String> = list
            .items
            .iter()
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
            .collect();
        ensure!(ips.len() == 1, "{ips:?}");
        Ok(ips[0].clone())
    })
    .await
}

/// (rcode, sorted answer data) of one question.
async fn ask(
    dns: &Dns,
    transport: Transport,
    name: &str,
    type_: RecordType,
) -> anyhow::Result<(ResponseCode, Vec<String>)> {
    let m: Message = query(dns.addr, transport, name, type_).await?;
    let mut data: Vec<String> = m.answers.iter().map(|r| r.data.to_string()).collect();
    data.sort();
    Ok((m.metadata.response_code, data))
}

/// Waits until `name` answers `want` over UDP and TCP.
async fn expect(
    dns: &Dns,
    name: &str,
    type_: RecordType,
    want: (ResponseCode, Vec<String>),
) -> anyhow::Result<()> {
    let mut want = want;
    want.1.sort();
    for transport in BOTH {
        wait_for(T, &format!("{name} {type_} over {transport:?}"), || async {
            let got = ask(dns, transport, name, type_).await?;
            ensure!(got == want, "got {got:?}, want {want:?}");
            Ok(())
        })
        .await?;
    }
    Ok(())
}

fn ok(data: &[&str]) -> (ResponseCode, Vec<String>) {
    (
        ResponseCode::NoError,
        data.iter().map(|s| s.to_string()).collect(),
    )
}

/// (status, reason) of a condition in an object's `status.conditions`.
fn condition(status: &Value, type_: &str) -> Option<(String, String)> {
    let c = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str()?.to_string(),
    ))
}

/// Declares each member's cluster id (the About CRD installed, then Flotilla's own
/// `ensure_cluster_id`, as `flotilla join` does) and returns them.
async fn cluster_ids(fed: &Federation) -> anyhow::Result<Vec<String>> {
    let mut ids = Vec::new();
    for m in &fed.members {
        flotilla_controllers::install::install_crds(m, &crdgen::member_crds(), MANAGER, T).await?;
        let id = match ensure_cluster_id(m).await? {
            ClusterId::Created(id) | ClusterId::Declared(id) => id,
            ClusterId::NotServed => anyhow::bail!("the About API is not served"),
        };
        ids.push(id);
    }
    Ok(ids)
}

/// The ClusterSet IP range of the federation's config (followed live by the control plane).
async fn set_range(fed: &Federation, range: &str) -> anyhow::Result<()> {
    let configs: Api<KubeFedConfig> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    configs
        .patch(
            "kubefed",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"multiClusterServices": {"clusterSetIPRanges": [range]}}}),
            ),
        )
        .await?;
    Ok(())
}

/// The ClusterSet IP of `name`'s import in member2, once allocated.
async fn clusterset_ip(fed: &Federation, name: &str) -> anyhow::Result<String> {
    let imports = Api::<ServiceImport>::namespaced(fed.members[1].clone(), NS);
    wait_for(T, &format!("{name}'s ClusterSet IP"), || async {
        let i = imports.get(name).await?;
        ensure!(i.spec.ips.len() == 1, "{:?}", i.spec);
        let ours = i.metadata.annotations.unwrap_or_default();
        ensure!(ours.get(CLUSTERSET_IPS_ANNOTATION) == Some(&i.spec.ips[0]));
        Ok(i.spec.ips[0].clone())
    })
    .await
}

/// Two more ClusterSetIP services for one free address: one gets it, the other's import
/// and export say RangeExhausted; `web` still resolves.
async fn check_exhausted_range(fed: &Federation, dns: &Dns, web_ip: &str) -> anyhow::Result<()> {
    let m1 = &fed.members[0];
    for name in ["extra-a", "extra-b"] {
        deploy(m1, name, false).await?;
        export(m1, name).await?;
    }
    let imports = Api::<ServiceImport>::namespaced(fed.members[1].clone(), NS);
    let api = exports(m1);
    let (exhausted, allocated) = wait_for(T, "one extra allocated, one exhausted", || async {
        let mut reasons = Vec::new();
        for name in ["extra-a", "extra-b"] {
            let i = imports.get(name).await?;
            let status = serde_json::to_value(&i.status)?;
            let c = condition(&status, "ClusterSetIPAllocated").context("no condition")?;
            let e = api.get(name).await?;
            let on_export = condition(&e.data["status"], "ClusterSetIPAllocated");
            ensure!(
                on_export.as_ref() == Some(&c),
                "export {on_export:?}, import {c:?}"
            );
            reasons.push((name, c, i.spec.ips.clone()));
        }
        let failed: Vec<_> = reasons.iter().filter(|r| r.1.0 == "False").collect();
        let fine: Vec<_> = reasons.iter().filter(|r| r.1.0 == "True").collect();
        ensure!(failed.len() == 1 && fine.len() == 1, "{reasons:?}");
        ensure!(failed[0].1.1 == "RangeExhausted" && failed[0].2.is_empty());
        Ok((failed[0].0, fine[0].2[0].clone()))
    })
    .await?;
    let svc = |n: &str| format!("{n}.{NS}.svc.clusterset.local");
    expect(
        dns,
        &svc(allocated_name(exhausted)),
        RecordType::A,
        ok(&[&allocated]),
    )
    .await?;
    // The exhausted one exists without an address: NODATA.
    expect(dns, &svc(exhausted), RecordType::A, ok(&[])).await?;
    expect(dns, &svc("web"), RecordType::A, ok(&[web_ip])).await?;
    Ok(())
}

fn allocated_name(exhausted: &str) -> &'static str {
    if exhausted == "extra-a" {
        "extra-b"
    } else {
        "extra-a"
    }
}

/// `mixed` is ClusterSetIP in member1 (older) and headless in member2: both exports and the
/// import say TypeConflict, the import is member1's type, and the other names still resolve.
async fn check_type_conflict(fed: &Federation, dns: &Dns, web_ip: &str) -> anyhow::Result<()> {
    let (m1, m2) = (&fed.members[0], &fed.members[1]);
    deploy(m1, "mixed", false).await?;
    export(m1, "mixed").await?;
    // creationTimestamp has one-second precision: member2's export is clearly newer.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    deploy(m2, "mixed", true).await?;
    export(m2, "mixed").await?;
    for m in [m1, m2] {
        let api = exports(m);
        wait_for(T, "TypeConflict on mixed's exports", || async {
            let e = api.get("mixed").await?;
            let c = condition(&e.data["status"], "Conflict").context("no Conflict")?;
            ensure!(c == ("True".into(), "TypeConflict".into()), "{c:?}");
            Ok(())
        })
        .await?;
    }
    let imports = Api::<ServiceImport>::namespaced(m2.clone(), NS);
    wait_for(T, "TypeConflict on mixed's import", || async {
        let i = imports.get("mixed").await?;
        let status = serde_json::to_value(&i.status)?;
        let c = condition(&status, "Conflict").context("no Conflict")?;
        ensure!(c == ("True".into(), "TypeConflict".into()), "{c:?}");
        ensure!(
            i.spec.type_ == ServiceImportType::ClusterSetIP,
            "{:?}",
            i.spec
        );
        Ok(())
    })
    .await?;
    let svc = |n: &str| format!("{n}.{NS}.svc.clusterset.local");
    expect(dns, &svc("web"), RecordType::A, ok(&[web_ip])).await?;
    Ok(())
}

/// The slices of the route Service `svc`-clusterset in `client`'s cluster: their ready addresses.
async fn routed_addresses(client: &Client, svc: &str) -> anyhow::Result<Vec<String>> {
    // The version the cluster serves (discovery.k8s.io/v1beta1 on 1.20, v1 later).
    let group = kube::discovery::group(client, "discovery.k8s.io").await?;
    let (ar, _) = group
        .recommended_kind("EndpointSlice")
        .context("no EndpointSlice")?;
    let slices = Api::<DynamicObject>::namespaced_with(client.clone(), NS, &ar);
    let selector = format!("kubernetes.io/service-name={svc}-clusterset");
    let mut addresses: Vec<String> = slices
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .iter()
        .flat_map(|s| s.data["endpoints"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["conditions"]["ready"].as_bool() != Some(false))
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    addresses.sort();
    Ok(addresses)
}

/// A user's own Service named `web-clusterset` in member1, before any route exists there.
async fn user_service_in_the_way(m1: &Client) -> anyhow::Result<()> {
    apply(
        &Api::<Service>::namespaced(m1.clone(), NS),
        "web-clusterset",
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web-clusterset", "namespace": NS},
               "spec": {"selector": {"app": "mine"}, "ports": [{"port": 81, "protocol": "TCP"}]}}),
    )
    .await
}

/// `flotilla clusterset-routes` in both members: member2 gets `web-clusterset` on the
/// ClusterSet IP with both members' endpoints; in member1 the user's Service of that name
/// is left alone and the import says why with a RouteConflict Event.
async fn check_routes(fed: &Federation, web_ip: &str) -> anyhow::Result<()> {
    let (m1, m2) = (&fed.members[0], &fed.members[1]);
    let mut want = vec![pod_ip(m1, "web").await?, pod_ip(m2, "web").await?];
    want.sort();
    let services = Api::<Service>::namespaced(m2.clone(), NS);
    wait_for(T, "web's route in member2", || async {
        let svc = services.get("web-clusterset").await?;
        let spec = svc.spec.context("no spec")?;
        ensure!(spec.selector.is_none(), "{:?}", spec.selector);
        ensure!(
            spec.external_ips == Some(vec![web_ip.to_string()]),
            "{:?}",
            spec.external_ips
        );
        let ports: Vec<_> = spec
            .ports
            .unwrap_or_default()
            .iter()
            .map(|p| (p.name.clone(), p.port))
            .collect();
        ensure!(ports == [(Some("http".into()), 80)], "{ports:?}");
        let got = routed_addresses(m2, "web").await?;
        ensure!(got == want, "routed {got:?}, want {want:?}");
        Ok(())
    })
    .await?;
    wait_for(T, "RouteConflict on web's import in member1", || async {
        let events = events_about(m1, NS, "web", "RouteConflict").await?;
        ensure!(!events.is_empty(), "no RouteConflict Event");
        Ok(())
    })
    .await?;
    let mine = Api::<Service>::namespaced(m1.clone(), NS)
        .get("web-clusterset")
        .await?;
    let spec = mine.spec.context("no spec")?;
    ensure!(
        spec.external_ips.is_none() && spec.selector.is_some(),
        "the user's Service was changed: {spec:?}"
    );
    Ok(())
}

#[tokio::test]
async fn clusterset_local_resolves_from_the_imports_of_a_member() -> anyhow::Result<()> {
    init_tracing();
    let fed = federation_with_pods(2).await?;
    for c in fed.members.iter().chain([&fed.host]) {
        create_namespace(c, NS).await?;
    }
    let ids = cluster_ids(&fed).await?;
    set_range(&fed, RANGE).await?;
    let (m1, m2) = (&fed.members[0], &fed.members[1]);
    let dns = Dns::start(m2.clone(), "127.0.0.1:0".parse()?, 5).await?;
    user_service_in_the_way(m1).await?;
    let _routes = (
        RouteHelper::start(m1.clone()).await?,
        RouteHelper::start(m2.clone()).await?,
    );
    let svc = |n: &str| format!("{n}.{NS}.svc.clusterset.local");

    // A ClusterSetIP service exported by both members: A and SRV, over UDP and TCP.
    deploy(m1, "web", false).await?;
    deploy(m2, "web", false).await?;
    export(m1, "web").await?;
    export(m2, "web").await?;
    let web_ip = clusterset_ip(&fed, "web").await?;
    ensure!(web_ip.starts_with("10.250.0."), "{web_ip} out of {RANGE}");
    expect(&dns, &svc("web"), RecordType::A, ok(&[&web_ip])).await?;
    let srv = format!("_http._tcp.{}", svc("web"));
    let target = format!("0 100 80 {}.", svc("web"));
    expect(&dns, &srv, RecordType::SRV, ok(&[&target])).await?;
    expect(&dns, &svc("web"), RecordType::AAAA, ok(&[])).await?;
    check_routes(&fed, &web_ip).await?;

    // A headless service: every ready endpoint, and each hostname under its cluster id.
    deploy(m1, "db", true).await?;
    deploy(m2, "db", true).await?;
    let (ip1, ip2) = (pod_ip(m1, "db").await?, pod_ip(m2, "db").await?);
    export(m1, "db").await?;
    export(m2, "db").await?;
    expect(&dns, &svc("db"), RecordType::A, ok(&[&ip1, &ip2])).await?;
    for (id, ip) in [(&ids[0], &ip1), (&ids[1], &ip2)] {
        let host = format!("db-host.{id}.{}", svc("db"));
        expect(&dns, &host, RecordType::A, ok(&[ip])).await?;
    }
    let targets: BTreeSet<String> = ids
        .iter()
        .map(|id| format!("0 100 80 db-host.{id}.{}.", svc("db")))
        .collect();
    let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
    expect(
        &dns,
        &format!("_http._tcp.{}", svc("db")),
        RecordType::SRV,
        ok(&targets),
    )
    .await?;

    // member1 stops: its endpoint leaves member2's answers; it comes back with it.
    fed.env.stop_apiserver("member1").await?;
    expect(&dns, &svc("db"), RecordType::A, ok(&[&ip2])).await?;
    let host1 = format!("db-host.{}.{}", ids[0], svc("db"));
    expect(
        &dns,
        &host1,
        RecordType::A,
        (ResponseCode::NXDomain, Vec::new()),
    )
    .await?;
    fed.env.start_apiserver("member1").await?;
    expect(&dns, &svc("db"), RecordType::A, ok(&[&ip1, &ip2])).await?;

    // Bad input: an exhausted range and a type conflict, reported; the rest resolves.
    check_exhausted_range(&fed, &dns, &web_ip).await?;
    check_type_conflict(&fed, &dns, &web_ip).await?;

    // A namespace with no import, and an un-exported service: NXDOMAIN.
    let nx = (ResponseCode::NXDomain, Vec::new());
    expect(
        &dns,
        "web.elsewhere.svc.clusterset.local",
        RecordType::A,
        nx.clone(),
    )
    .await?;
    for m in [m1, m2] {
        exports(m).delete("web", &DeleteParams::default()).await?;
    }
    expect(&dns, &svc("web"), RecordType::A, nx.clone()).await?;
    expect(&dns, &srv, RecordType::SRV, nx).await?;
    expect(&dns, &svc("db"), RecordType::A, ok(&[&ip1, &ip2])).await?;
    // Un-exported: the route goes with it; the user's Service in member1 stays.
    let services = Api::<Service>::namespaced(m2.clone(), NS);
    wait_for(T, "web's route removed from member2", || async {
        ensure!(
            services.get_opt("web-clusterset").await?.is_none(),
            "still there"
        );
        ensure!(routed_addresses(m2, "web").await?.is_empty(), "slices left");
        Ok(())
    })
    .await?;
    Api::<Service>::namespaced(m1.clone(), NS)
        .get("web-clusterset")
        .await?;
    Ok(())
}
