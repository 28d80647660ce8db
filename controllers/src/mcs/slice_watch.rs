//! EndpointSlices watched in every Ready member at the version that member serves: per
//! cluster, discovery first (`discovery.k8s.io`: v1, else v1beta1), then one watch into
//! its own cache of dynamic objects. The generic [`crate::multicluster::MemberWatch`] uses
//! one version for every member, which EndpointSlices cannot (v1.20 members serve only
//! v1beta1, members from v1.25 only v1). Changes are reported as
//! [`MemberEvent`]s; it decides nothing.

use std::{
    collections::HashMap,
    ops::ControlFlow,
    sync::{Arc, RwLock},
    time::Duration,
};

use futures::FutureExt;
use kube::{
    Api, Client,
    api::DynamicObject,
    runtime::reflector::{self, Store},
};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::slice::SliceVersion;
use crate::{
    multicluster::{ClusterSet, MemberEvent},
    watch::{Change, WatchParams, watch_into},
};
use flotilla_multicluster::{SyncState, sync_state::sync_state};

/// The discovery group of EndpointSlices.
const GROUP: &str = "discovery.k8s.io";
/// How long to wait before asking a member again which version it serves.
const DISCOVERY_RETRY: Duration = Duration::from_secs(10);

/// One member's slice cache, once discovery has picked its version.
#[derive(Clone)]
struct Cache {
    version: SliceVersion,
    store: Store<DynamicObject>,
}

struct Running {
    generation: u64,
    /// When the watch started, for its sync timeout.
    started: std::time::Instant,
    cache: Arc<RwLock<Option<Cache>>>,
    task: tokio::task::JoinHandle<()>,
}

type Watches = Arc<RwLock<HashMap<String, Running>>>;

/// EndpointSlices of every Ready member, each at its own version.
pub struct SliceWatch {
    watches: Watches,
    supervisor: tokio::task::JoinHandle<()>,
}

impl Drop for SliceWatch {
    fn drop(&mut self) {
        self.supervisor.abort();
        for w in self
            .watches
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            w.task.abort();
        }
    }
}

impl SliceWatch {
    /// Starts watching EndpointSlices in every Ready member of `set`; changes go to
    /// `events`.
    pub fn start(set: ClusterSet, events: mpsc::UnboundedSender<MemberEvent>) -> Self {
        let watches: Watches = Arc::default();
        let supervisor = tokio::spawn(supervise(set, events, watches.clone()));
        SliceWatch {
            watches,
            supervisor,
        }
    }

    fn cache(&self, cluster: &str) -> Option<Cache> {
        let watches = self.watches.read().unwrap_or_else(|e| e.into_inner());
        let running = watches.get(cluster)?;
        let cache = running.cache.read().unwrap_or_else(|e| e.into_inner());
        cache.clone()
    }

    /// The version the member serves EndpointSlices at, once discovered.
    pub fn version(&self, cluster: &str) -> Option<SliceVersion> {
        self.cache(cluster).map(|c| c.version)
    }

    /// Every cached slice of the member.
    pub fn list(&self, cluster: &str) -> Vec<Arc<DynamicObject>> {
        self.cache(cluster)
            .map(|c| c.store.state())
            .unwrap_or_default()
    }

    /// Whether the member's version is known and its first list has completed.
    pub fn is_synced(&self, cluster: &str) -> bool {
        self.cache(cluster)
            .is_some_and(|c| matches!(c.store.wait_until_ready().now_or_never(), Some(Ok(()))))
    }

    /// Where the member's cache stands against `timeout` (the library's decision); `None`
    /// when the member is not watched.
    pub fn sync_state(&self, cluster: &str, timeout: Duration) -> Option<SyncState> {
        let started = {
            let watches = self.watches.read().unwrap_or_else(|e| e.into_inner());
            watches.get(cluster)?.started
        };
        let synced = self.is_synced(cluster);
        Some(sync_state(synced, started.elapsed(), Some(timeout), None))
    }
}

async fn supervise(set: ClusterSet, events: mpsc::UnboundedSender<MemberEvent>, watches: Watches) {
    let mut changes = set.changes();
    loop {
        let ready = set.ready();
        {
            let mut running = watches.write().unwrap_or_else(|e| e.into_inner());
            running.retain(|name, w| {
                let keep = ready
                    .iter()
                    .any(|c| &c.name == name && c.client_generation == w.generation);
                if !keep {
                    w.task.abort();
                    info!(cluster = %name, "stopped member EndpointSlice watch");
                }
                keep
            });
            for c in ready {
                if running.contains_key(&c.name) {
                    continue;
                }
                let cache: Arc<RwLock<Option<Cache>>> = Arc::default();
                let task = tokio::spawn(run_member(
                    c.name.clone(),
                    c.client.clone(),
                    cache.clone(),
                    events.clone(),
                ));
                running.insert(
                    c.name.clone(),
                    Running {
                        generation: c.client_generation,
                        started: std::time::Instant::now(),
                        cache,
                        task,
                    },
                );
            }
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// The version the member serves, asking until it answers.
async fn discover(cluster: &str, client: &Client) -> SliceVersion {
    loop {
        match client.list_api_groups().await {
            Ok(list) => {
                let served = list
                    .groups
                    .iter()
                    .filter(|g| g.name == GROUP)
                    .flat_map(|g| g.versions.iter().map(|v| v.version.as_str()));
                if let Some(version) = SliceVersion::preferred(served) {
                    return version;
                }
                warn!(%cluster, "the member serves no EndpointSlice version Flotilla knows (discovery.k8s.io v1 or v1beta1)");
            }
            Err(error) => {
                warn!(%cluster, %error, "discovering the member's EndpointSlice version failed")
            }
        }
        tokio::time::sleep(DISCOVERY_RETRY).await;
    }
}

async fn run_member(
    cluster: String,
    client: Client,
    cache: Arc<RwLock<Option<Cache>>>,
    events: mpsc::UnboundedSender<MemberEvent>,
) {
    let version = discover(&cluster, &client).await;
    let ar = version.api_resource();
    let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
    *cache.write().unwrap_or_else(|e| e.into_inner()) = Some(Cache {
        version,
        store: writer.as_reader(),
    });
    info!(%cluster, version = version.as_str(), "started member EndpointSlice watch");
    let params = WatchParams::member(cluster.clone(), Default::default());
    watch_into(
        Api::all_with(client, &ar),
        writer,
        params,
        |_| {},
        |change| {
            let event = match change {
                Change::Object(o) | Change::Listed(o) => MemberEvent::Object {
                    cluster: cluster.clone(),
                    namespace: o.metadata.namespace.clone(),
                    name: o.metadata.name.clone().unwrap_or_default(),
                },
                Change::Synced => MemberEvent::Synced {
                    cluster: cluster.clone(),
                },
                Change::Listing => return ControlFlow::Continue(()),
            };
            match events.send(event) {
                Ok(()) => ControlFlow::Continue(()),
                Err(_) => ControlFlow::Break(()),
            }
        },
    )
    .await
}
