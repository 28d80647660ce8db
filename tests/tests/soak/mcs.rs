//! The Multi-Cluster Services invariant: for every Service exported from some push members,
//! every push member holds its ServiceImport listing exactly the exporting clusters, and
//! imported EndpointSlices whose addresses per source cluster are those of the source's own
//! EndpointSlices of the Service; the host mirrors the import; exports are Valid. For a
//! Service exported nowhere: no ServiceImport and no imported slice anywhere.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::mcs::{
    K8S_SERVICE_NAME_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL,
    ServiceExport, ServiceImport,
};
use flotilla_controllers::mcs::slice::SliceVersion;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams},
};

use super::setup::NS;
use super::workload::SERVICES;

/// ServiceExports in [`NS`], read dynamically (written without `spec`, as users do).
pub fn exports(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::erase::<ServiceExport>(&()),
    )
}

/// The member's EndpointSlice API in [`NS`], at the version Flotilla discovers.
async fn slices(client: &Client) -> anyhow::Result<Api<DynamicObject>> {
    let groups = client.list_api_groups().await?;
    let served = groups
        .groups
        .iter()
        .filter(|g| g.name == "discovery.k8s.io")
        .flat_map(|g| g.versions.iter().map(|v| v.version.as_str()));
    let version = SliceVersion::preferred(served)
        .ok_or_else(|| anyhow::anyhow!("no EndpointSlice version served"))?;
    Ok(Api::namespaced_with(
        client.clone(),
        NS,
        &version.api_resource(),
    ))
}

fn addresses(slice: &DynamicObject) -> impl Iterator<Item = String> + '_ {
    slice.data["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["addresses"].as_array().into_iter().flatten())
        .filter_map(|a| a.as_str().map(str::to_owned))
}

/// Addresses per source cluster (clusters with none left out).
type Endpoints = BTreeMap<String, BTreeSet<String>>;

/// One push member's view: the exported Services (with a Valid condition not `True`
/// reported) and its own endpoints of each Service.
struct Local {
    exported: BTreeSet<String>,
    invalid: Vec<String>,
    own: BTreeMap<String, BTreeSet<String>>,
}

async fn local(cluster: &str, client: &Client) -> anyhow::Result<Local> {
    let mut out = Local {
        exported: BTreeSet::new(),
        invalid: Vec::new(),
        own: BTreeMap::new(),
    };
    for e in exports(client).list(&ListParams::default()).await? {
        if e.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let valid = e.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Valid")
            .is_some_and(|c| c["status"] == "True");
        if !valid {
            out.invalid
                .push(format!("{cluster}/{}: export not Valid", e.name_any()));
        }
        out.exported.insert(e.name_any());
    }
    for s in slices(client).await?.list(&ListParams::default()).await? {
        let labels = s.labels();
        if labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY) {
            continue;
        }
        if let Some(service) = labels.get(K8S_SERVICE_NAME_LABEL) {
            let own = out.own.entry(service.clone()).or_default();
            own.extend(addresses(&s));
        }
    }
    Ok(out)
}

/// The imported slices of `client` per Service: addresses per source cluster.
async fn imported(client: &Client) -> anyhow::Result<BTreeMap<String, Endpoints>> {
    let managed = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let mut out: BTreeMap<String, Endpoints> = BTreeMap::new();
    for s in slices(client).await?.list(&managed).await? {
        let labels = s.labels();
        let service = labels.get(SERVICE_NAME_LABEL).cloned().unwrap_or_default();
        let source = labels
            .get(SOURCE_CLUSTER_LABEL)
            .cloned()
            .unwrap_or_default();
        let set = out.entry(service).or_default().entry(source).or_default();
        set.extend(addresses(&s));
    }
    for endpoints in out.values_mut() {
        endpoints.retain(|_, set| !set.is_empty());
    }
    Ok(out)
}

fn clusters_of(i: &ServiceImport) -> Vec<String> {
    i.status
        .iter()
        .flat_map(|s| s.clusters.iter().map(|c| c.cluster.clone()))
        .collect()
}

/// Everything that keeps Multi-Cluster Services from having converged, as readable lines.
pub async fn violations(host: &Client, push: &[(String, Client)]) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let mut locals = BTreeMap::new();
    for (cluster, client) in push {
        let l = local(cluster, client).await?;
        found.extend(l.invalid.iter().cloned());
        locals.insert(cluster.clone(), l);
    }
    let mut readers: Vec<(String, Client)> = push.to_vec();
    readers.push(("host".to_owned(), host.clone()));
    for service in (0..SERVICES).map(|i| format!("svc-{i}")) {
        let exporters: Vec<String> = locals
            .iter()
            .filter(|(_, l)| l.exported.contains(&service))
            .map(|(c, _)| c.clone())
            .collect();
        let mut want: Endpoints = BTreeMap::new();
        for c in &exporters {
            let own = locals[c].own.get(&service).cloned().unwrap_or_default();
            if !own.is_empty() {
                want.insert(c.clone(), own);
            }
        }
        for (reader, client) in &readers {
            let import = Api::<ServiceImport>::namespaced(client.clone(), NS)
                .get_opt(&service)
                .await?;
            match (&import, exporters.is_empty()) {
                (Some(_), true) => found.push(format!("{reader}/{service}: stray import")),
                (None, false) => found.push(format!("{reader}/{service}: import missing")),
                (Some(i), false) if clusters_of(i) != exporters => found.push(format!(
                    "{reader}/{service}: import lists {:?}, exported from {exporters:?}",
                    clusters_of(i)
                )),
                _ => {}
            }
            if reader == "host" {
                continue;
            }
            let got = imported(client).await?.remove(&service).unwrap_or_default();
            if got != want {
                found.push(format!(
                    "{reader}/{service}: imported endpoints {got:?}, want {want:?}"
                ));
            }
        }
    }
    Ok(found)
}
