//! The watch cache: the ServiceImports and the imported EndpointSlices (those labelled
//! `multicluster.kubernetes.io/service-name`, at the EndpointSlice version the cluster
//! prefers) of the cluster served, turned into a [`Zone`] again on every change.

use std::{
    net::IpAddr,
    ops::ControlFlow,
    sync::{
        Arc, RwLock,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use flotilla_api::mcs::{
    SERVICE_NAME_LABEL, SOURCE_CLUSTER_ID_ANNOTATION, SOURCE_CLUSTER_LABEL, ServiceImport,
    ServiceImportType,
};
use flotilla_multicluster::watch::{Change, WatchParams, watch_into};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject},
    runtime::reflector::{self, Store},
};
use serde_json::Value;
use tokio::{sync::Notify, task::JoinHandle};
use tracing::{debug, info};

use crate::{
    server::SharedZone,
    zone::{ImportedEndpoint, ImportedService, Zone},
};

/// Changes this close together make one new zone.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// What the zone is read from, as a ServiceImport says it.
pub fn imported_service(i: &ServiceImport) -> ImportedService {
    ImportedService {
        namespace: i.namespace().unwrap_or_default(),
        name: i.name_any(),
        headless: i.spec.type_ == ServiceImportType::Headless,
        ips: i.spec.ips.iter().filter_map(|ip| ip.parse().ok()).collect(),
        ports: i
            .spec
            .ports
            .iter()
            .filter_map(|p| {
                let port = u16::try_from(p.port).ok()?;
                let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
                Some((p.name.clone(), protocol, port))
            })
            .collect(),
    }
}

/// The ready endpoints of an imported EndpointSlice (`ready` unset counts as ready, as the
/// API says); its cluster id from Flotilla's annotation, else the source-cluster label.
pub fn imported_endpoints(slice: &DynamicObject) -> Vec<ImportedEndpoint> {
    let Some(service) = slice.labels().get(SERVICE_NAME_LABEL) else {
        return Vec::new();
    };
    let cluster_id = slice
        .annotations()
        .get(SOURCE_CLUSTER_ID_ANNOTATION)
        .or_else(|| slice.labels().get(SOURCE_CLUSTER_LABEL))
        .cloned()
        .unwrap_or_default();
    let endpoints = slice.data.get("endpoints").and_then(Value::as_array);
    endpoints
        .into_iter()
        .flatten()
        .filter(|e| e["conditions"]["ready"].as_bool() != Some(false))
        .map(|e| ImportedEndpoint {
            namespace: slice.namespace().unwrap_or_default(),
            service: service.clone(),
            cluster_id: cluster_id.clone(),
            addresses: e["addresses"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str()?.parse::<IpAddr>().ok())
                .collect(),
            hostname: e["hostname"].as_str().map(str::to_owned),
        })
        .collect()
}

/// The caches and the task that keeps the zone current. Stops when dropped.
pub struct Cache {
    /// The zone served.
    pub zone: SharedZone,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Cache {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A watch callback that wakes `changed` on every change.
pub(crate) fn notify<K>(
    changed: &Arc<Notify>,
) -> impl FnMut(Change<'_, K>) -> ControlFlow<()> + use<K> {
    let changed = changed.clone();
    move |_| {
        changed.notify_one();
        ControlFlow::Continue(())
    }
}

/// The EndpointSlice resource at the version the cluster prefers.
pub(crate) async fn slice_resource(client: &Client) -> anyhow::Result<ApiResource> {
    let group = kube::discovery::group(client, "discovery.k8s.io").await?;
    let (ar, _) = group
        .recommended_kind("EndpointSlice")
        .ok_or_else(|| anyhow::anyhow!("the cluster serves no EndpointSlice"))?;
    Ok(ar)
}

/// The imported view of a member: its ServiceImports and its imported EndpointSlices
/// (labelled `multicluster.kubernetes.io/service-name`).
pub(crate) struct ImportedView {
    pub imports: Store<ServiceImport>,
    pub slices: Store<DynamicObject>,
}

/// Starts the watches of the imported view (EndpointSlices at `slice_ar`), waking
/// `changed` on every change; the watch tasks are pushed onto `tasks`.
pub(crate) fn watch_imported(
    client: &Client,
    slice_ar: &ApiResource,
    changed: &Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> ImportedView {
    let import_writer = reflector::store::Writer::<ServiceImport>::default();
    let imports = import_writer.as_reader();
    let slice_writer = reflector::store::Writer::<DynamicObject>::new(slice_ar.clone());
    let slices = slice_writer.as_reader();
    tasks.push(tokio::spawn(watch_into(
        Api::<ServiceImport>::all(client.clone()),
        import_writer,
        WatchParams::host("service import"),
        |_| {},
        notify(changed),
    )));
    tasks.push(tokio::spawn(watch_into(
        Api::<DynamicObject>::all_with(client.clone(), slice_ar),
        slice_writer,
        WatchParams {
            label_selector: Some(SERVICE_NAME_LABEL.into()),
            ..WatchParams::host("imported endpoint slice")
        },
        |_| {},
        notify(changed),
    )));
    ImportedView { imports, slices }
}

impl Cache {
    /// Starts the watches; returns once both caches are complete and the first zone is
    /// built, so that nothing is answered from a partial view.
    pub async fn start(client: Client, ttl: u32) -> anyhow::Result<Cache> {
        let ar = slice_resource(&client).await?;
        info!(version = %ar.api_version, "watching imported EndpointSlices");
        let changed = Arc::new(Notify::new());
        let mut tasks = Vec::new();
        let ImportedView { imports, slices } = watch_imported(&client, &ar, &changed, &mut tasks);
        imports.wait_until_ready().await?;
        slices.wait_until_ready().await?;
        let serial = Arc::new(AtomicU32::new(1));
        let zone: SharedZone = Arc::new(RwLock::new(Arc::new(build(
            &imports, &slices, ttl, &serial,
        ))));
        let shared = zone.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                changed.notified().await;
                tokio::time::sleep(DEBOUNCE).await;
                let next = Arc::new(build(&imports, &slices, ttl, &serial));
                debug!(names = next.len(), "zone rebuilt");
                match shared.write() {
                    Ok(mut z) => *z = next,
                    Err(p) => *p.into_inner() = next,
                }
            }
        }));
        Ok(Cache { zone, tasks })
    }
}

fn build(
    imports: &Store<ServiceImport>,
    slices: &Store<DynamicObject>,
    ttl: u32,
    serial: &AtomicU32,
) -> Zone {
    let services: Vec<ImportedService> = imports
        .state()
        .iter()
        .map(|i| imported_service(i))
        .collect();
    let endpoints: Vec<ImportedEndpoint> = slices
        .state()
        .iter()
        .flat_map(|s| imported_endpoints(s))
        .collect();
    Zone::build(
        &services,
        &endpoints,
        ttl,
        serial.fetch_add(1, Ordering::Relaxed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn slices_give_their_ready_endpoints_with_the_source_clusters_id() {
        let slice: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "name": "db-m1-abc", "namespace": "demo",
                "labels": {SERVICE_NAME_LABEL: "db", SOURCE_CLUSTER_LABEL: "m1"},
                "annotations": {SOURCE_CLUSTER_ID_ANNOTATION: "id-1"},
            },
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.1.0.5"], "hostname": "db-0", "conditions": {"ready": true}},
                {"addresses": ["10.1.0.6"], "conditions": {"ready": false, "serving": true}},
                {"addresses": ["10.1.0.7"]},
            ],
        }))
        .expect("a slice");
        let eps = imported_endpoints(&slice);
        let addresses: Vec<String> = eps.iter().map(|e| e.addresses[0].to_string()).collect();
        assert_eq!(addresses, ["10.1.0.5", "10.1.0.7"]);
        assert!(
            eps.iter()
                .all(|e| e.cluster_id == "id-1" && e.service == "db")
        );
        assert_eq!(eps[0].hostname.as_deref(), Some("db-0"));
    }
}
