//! Multi-Cluster Services across a Pull member, on real clusters: member1 joined in push
//! mode, member2 in pull mode (its agent runs here with the scoped host token `join_pull`
//! issued; the host holds no credential of member2). A Service exported in the Pull member
//! reaches the host as a ServiceExportReport and is imported by the push member; one
//! exported by the push member reaches the Pull member as a Work; an export conflict between
//! them is a Conflict on both sides; un-exporting removes the imports; a malformed report
//! and a report in no cluster's inventory are answered with a reason while the rest flows.
//! The endpoints are EndpointSlices written here (selector-less Services), so no pod runs.

use std::{collections::BTreeSet, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_agent::{Agent, AgentOptions};
use flotilla_api::{
    crdgen,
    mcs::{SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL, ServiceImport},
    mcs_report::{MCS_WORK_LABEL, ServiceExportReport},
    work::{Work, cluster_namespace},
};
use flotilla_controllers::{install, manager::ControlPlane, mcs::slice::SliceVersion};
use flotilla_tests::{
    EnvOptions,
    federation::{bootstrap, install_host, seeded_env},
    mcs::{MANAGER, apply},
    mixed::{Mixed, PULL, join_mixed},
    objects::create_namespace,
    wait_for,
};
use k8s_openapi::api::core::v1::Service;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams},
};
use serde_json::json;

const NS: &str = "mcs";
const T: Duration = Duration::from_secs(60);
const PUSH: &str = "member1";

struct Fed {
    control_plane: Option<ControlPlane>,
    agent: Option<Agent>,
    fed: Mixed,
}

impl Drop for Fed {
    fn drop(&mut self) {
        self.agent.take();
        self.control_plane.take();
    }
}

async fn start() -> anyhow::Result<Fed> {
    let boot = bootstrap();
    let env = seeded_env(EnvOptions::with_members(2), &boot).await;
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let fed = join_mixed(env, host, &boot, crdgen::applied_work_crd()).await?;
    // `join --mode pull` cannot reach the member: its MCS CRDs are the operator's to install.
    install::install_crds(&fed.pull, &crdgen::mcs_crds(), MANAGER, T).await?;
    let mut opts = AgentOptions::new(PULL, fed.agent_host.clone(), fed.pull.clone());
    opts.lease_duration = Duration::from_secs(3);
    let agent = Agent::start(opts);
    let control_plane = boot.start_control_plane(&fed.host, 2).await?;
    for c in [&fed.host, &fed.push, &fed.pull] {
        create_namespace(c, NS).await?;
    }
    Ok(Fed {
        control_plane: Some(control_plane),
        agent: Some(agent),
        fed,
    })
}

/// The EndpointSlice version the member serves, as Flotilla discovers it.
async fn slice_version(client: &Client) -> anyhow::Result<SliceVersion> {
    let groups = client.list_api_groups().await?;
    let served = groups
        .groups
        .iter()
        .filter(|g| g.name == "discovery.k8s.io")
        .flat_map(|g| g.versions.iter().map(|v| v.version.as_str()));
    SliceVersion::preferred(served).context("no EndpointSlice version")
}

async fn slice_api(client: &Client) -> anyhow::Result<Api<DynamicObject>> {
    let version = slice_version(client).await?;
    Ok(Api::namespaced_with(
        client.clone(),
        NS,
        &version.api_resource(),
    ))
}

/// A selector-less Service `name` with port `port` (named http) and its EndpointSlice with
/// one ready endpoint at `ip`.
async fn service(client: &Client, name: &str, port: i32, ip: &str) -> anyhow::Result<()> {
    apply(
        &Api::<Service>::namespaced(client.clone(), NS),
        name,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
               "spec": {"ports": [{"name": "http", "port": port, "targetPort": 8080, "protocol": "TCP"}]}}),
    )
    .await?;
    let version = slice_version(client).await?.api_resource().api_version;
    apply(
        &slice_api(client).await?,
        &format!("{name}-manual"),
        json!({"apiVersion": version, "kind": "EndpointSlice",
               "metadata": {"name": format!("{name}-manual"), "namespace": NS,
                            "labels": {"kubernetes.io/service-name": name}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
               "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}),
    )
    .await
}

fn exports(client: &Client) -> Api<DynamicObject> {
    flotilla_tests::mcs::exports(client, NS)
}

async fn export(client: &Client, name: &str) -> anyhow::Result<()> {
    flotilla_tests::mcs::export(client, NS, name).await
}

/// (status, reason) of a condition in `status.conditions` of a dynamic object.
fn condition(o: &DynamicObject, type_: &str) -> Option<(String, String)> {
    let c = o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason")))
}

/// Addresses of the imported slices of `service` in a member, by source cluster.
async fn imported(client: &Client, service: &str) -> anyhow::Result<Vec<(String, Vec<String>)>> {
    let slices = slice_api(client)
        .await?
        .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={service}")))
        .await?;
    let mut out: Vec<(String, Vec<String>)> = slices
        .items
        .iter()
        .map(|s| {
            let source = s
                .labels()
                .get(SOURCE_CLUSTER_LABEL)
                .cloned()
                .unwrap_or_default();
            let addresses: BTreeSet<String> = s.data["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect();
            (source, addresses.into_iter().collect())
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Waits until `client` imports `service` with port `port` and exactly `slices`.
async fn wait_imported(
    client: &Client,
    member: &str,
    service: &str,
    port: i32,
    slices: &[(&str, &str)],
) -> anyhow::Result<()> {
    let want: Vec<(String, Vec<String>)> = slices
        .iter()
        .map(|(c, ip)| (c.to_string(), vec![ip.to_string()]))
        .collect();
    let imports = Api::<ServiceImport>::namespaced(client.clone(), NS);
    wait_for(T, &format!("{service} imported into {member}"), || async {
        let i = imports.get(service).await?;
        let ports: Vec<i32> = i.spec.ports.iter().map(|p| p.port).collect();
        ensure!(ports == [port], "ports {ports:?}");
        let got = imported(client, service).await?;
        ensure!(got == want, "slices {got:?}, want {want:?}");
        Ok(())
    })
    .await
}

async fn wait_export(
    client: &Client,
    member: &str,
    name: &str,
    want: &[(&str, &str, &str)],
) -> anyhow::Result<()> {
    let api = exports(client);
    wait_for(
        T,
        &format!("{name}'s export conditions in {member}"),
        || async {
            let e = api.get(name).await?;
            for (type_, status, reason) in want {
                let got = condition(&e, type_);
                ensure!(
                    got.as_ref()
                        .is_some_and(|(s, r)| s == status && r == reason),
                    "{type_}: {got:?} ({})",
                    e.data["status"]
                );
            }
            Ok(())
        },
    )
    .await
}

async fn wait_gone(client: &Client, member: &str, service: &str) -> anyhow::Result<()> {
    let imports = Api::<ServiceImport>::namespaced(client.clone(), NS);
    wait_for(
        T,
        &format!("{service} un-imported from {member}"),
        || async {
            ensure!(imports.get_opt(service).await?.is_none(), "still imported");
            ensure!(imported(client, service).await?.is_empty(), "slices left");
            Ok(())
        },
    )
    .await
}

/// A report the agent did not write, and its answer's (status, reason) once there.
async fn foreign_report(
    host: &Client,
    ns: &str,
    name: &str,
    created: &str,
) -> anyhow::Result<(String, String)> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        host.clone(),
        ns,
        &ApiResource::erase::<ServiceExportReport>(&()),
    );
    let (namespace, service) = name.split_once('.').context("a report name")?;
    let body: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "multicluster.flotilla.io/v1alpha1", "kind": "ServiceExportReport",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"namespace": namespace, "name": service, "created": created},
    }))?;
    api.create(&PostParams::default(), &body).await?;
    wait_for(T, &format!("the answer to report {ns}/{name}"), || async {
        let r = api.get(name).await?;
        condition(&r, "Valid").context("no answer yet")
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn services_are_exported_and_imported_across_a_pull_member_through_its_inventory()
-> anyhow::Result<()> {
    flotilla_tests::init_tracing();
    let f = start().await?;
    let (host, push, pull) = (&f.fed.host, &f.fed.push, &f.fed.pull);

    // Exported in the Pull member: the push member and the Pull member itself import it.
    service(pull, "web", 80, "10.2.0.5").await?;
    export(pull, "web").await?;
    wait_imported(push, PUSH, "web", 80, &[(PULL, "10.2.0.5")]).await?;
    wait_imported(pull, PULL, "web", 80, &[(PULL, "10.2.0.5")]).await?;
    let import = Api::<ServiceImport>::namespaced(push.clone(), NS)
        .get("web")
        .await?;
    let clusters: Vec<String> = import
        .status
        .iter()
        .flat_map(|s| s.clusters.iter().map(|c| c.cluster.clone()))
        .collect();
    ensure!(clusters == [PULL], "{clusters:?}");
    wait_export(
        pull,
        PULL,
        "web",
        &[
            ("Valid", "True", "Valid"),
            ("Conflict", "False", "NoConflicts"),
        ],
    )
    .await?;
    let works: Api<Work> = Api::namespaced(host.clone(), &cluster_namespace(PULL));
    let mcs_works = works
        .list(&ListParams::default().labels(MCS_WORK_LABEL))
        .await?;
    ensure!(
        mcs_works.items.len() == 1,
        "{} MCS Works",
        mcs_works.items.len()
    );

    // Exported in the push member: the Pull member imports it through a Work.
    service(push, "api", 90, "10.1.0.7").await?;
    export(push, "api").await?;
    wait_imported(pull, PULL, "api", 90, &[(PUSH, "10.1.0.7")]).await?;
    wait_imported(push, PUSH, "api", 90, &[(PUSH, "10.1.0.7")]).await?;

    // The push member exports web too, later and with another port: a conflict on both
    // sides, the Pull member's (older) port kept, both clusters' endpoints imported.
    tokio::time::sleep(Duration::from_millis(1100)).await; // a later creationTimestamp (1 s resolution)
    service(push, "web", 81, "10.1.0.8").await?;
    export(push, "web").await?;
    for (client, member) in [(push, PUSH), (pull, PULL)] {
        wait_export(
            client,
            member,
            "web",
            &[("Conflict", "True", "PortConflict")],
        )
        .await?;
        wait_imported(
            client,
            member,
            "web",
            80,
            &[(PUSH, "10.1.0.8"), (PULL, "10.2.0.5")],
        )
        .await?;
    }

    // Un-exported everywhere: gone from both members, the report and the Work too.
    for client in [push, pull] {
        exports(client)
            .delete("web", &DeleteParams::default())
            .await?;
    }
    for (client, member) in [(push, PUSH), (pull, PULL)] {
        wait_gone(client, member, "web").await?;
    }
    let reports: Api<ServiceExportReport> = Api::namespaced(host.clone(), &cluster_namespace(PULL));
    wait_for(T, "web's report deleted", || async {
        ensure!(reports.get_opt("mcs.web").await?.is_none(), "report left");
        Ok(())
    })
    .await?;

    // Bad input: a malformed report and one in no cluster's inventory get a reason...
    let malformed = foreign_report(host, &cluster_namespace(PULL), "mcs.bad", "yesterday").await?;
    ensure!(
        malformed == ("False".into(), "MalformedReport".into()),
        "{malformed:?}"
    );
    let ghost = cluster_namespace("ghost");
    create_namespace(host, &ghost).await?;
    let unknown = foreign_report(host, &ghost, "mcs.web", "2026-01-01T00:00:00Z").await?;
    ensure!(
        unknown == ("False".into(), "UnknownCluster".into()),
        "{unknown:?}"
    );
    // ...and everything else keeps flowing: a moved endpoint reaches the Pull member.
    service(push, "api", 90, "10.1.0.9").await?;
    wait_imported(pull, PULL, "api", 90, &[(PUSH, "10.1.0.9")]).await?;
    ensure!(
        Api::<ServiceImport>::namespaced(pull.clone(), NS)
            .get_opt("web")
            .await?
            .is_none(),
        "the ghost's report was imported"
    );
    Ok(())
}
