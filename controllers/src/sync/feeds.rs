//! What feeds one type's sync controller: the host reflectors (federated objects,
//! FederatedNamespaces, Works — the stores [`super::host::HostCaches`] reads), the member
//! watch, and the followers that turn their changes, cluster-set changes, the periodic
//! resync and late-landing writes into keys on the work queue. Must not: reconcile,
//! decide or write anything; each task gets only the handles it feeds or reads.

use std::{sync::Arc, time::Duration};

use flotilla_api::MANAGED_LABEL;
use flotilla_multicluster::{WatchOptions, index::Indexer, packed};
use kube::{
    Api, Client, ResourceExt,
    core::{ApiResource, DynamicObject},
    runtime::{
        reflector::{self, Store},
        watcher,
    },
};
use tokio::sync::{broadcast::error::RecvError, mpsc};
use tracing::debug;

use super::{
    Key, SyncShared, dependencies, federated_namespace_ar, host, key_of, memory, observe, pull,
    registry_wait, twins, type_info,
};
use crate::{
    multicluster::{ClusterEvent, ClusterSet, MemberEvent, MemberWatch},
    watch::{Change, reflect, reflect_shrunk},
    workqueue::WorkQueue,
};

/// Full resync period: every federated object is rechecked this often even without events.
const RESYNC_PERIOD: Duration = Duration::from_secs(300);

/// What feeds one controller's caches and queue: the host reflectors' writers, the twin
/// API's (kubefed's alpha), the member watch's events, the writes that landed late.
pub(super) struct Feeds {
    /// The host events' spans (when traced), opened by the host watch.
    pub origins: Arc<super::origin::Origins>,
    pub host_writer: reflector::store::Writer<DynamicObject>,
    pub fns_writer: reflector::store::Writer<DynamicObject>,
    pub work_writer: reflector::store::Writer<flotilla_api::work::Work>,
    /// The bundler of the type's Works, which hears of each of their watch events.
    pub bundler: Arc<super::bundles::Bundler>,
    pub alpha: twins::AlphaWiring,
    pub member_rx: mpsc::UnboundedReceiver<MemberEvent>,
    pub landed: mpsc::UnboundedReceiver<Key>,
}

impl Feeds {
    /// Starts the watches and followers that fill the caches `all` reads and the queue;
    /// `recent` learns when a member cache moves.
    pub fn spawn(
        self,
        shared: &Arc<SyncShared>,
        all: AllKeys,
        recent: Arc<memory::RecentWrites>,
        queue: &Arc<WorkQueue<Key>>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let (client, federated) = (&shared.host, &all.host.federated);
        let (target, kind) = (all.ty.target_ar.clone(), all.ty.fed_ar.kind.clone());
        let fns_needed = all.ty.needs_ns_placement;
        let mut tasks = vec![
            tokio::spawn(watch_federated(
                client.clone(),
                federated.clone(),
                self.host_writer,
                queue.clone(),
                self.origins.clone(),
            )),
            tokio::spawn(follow_members(
                all.clone(),
                recent,
                self.member_rx,
                queue.clone(),
            )),
            tokio::spawn(follow_clusters(
                shared.clusters.clone(),
                all.clone(),
                queue.clone(),
            )),
            tokio::spawn(follow_landed_writes(self.landed, queue.clone())),
            tokio::spawn(pull::watch_works(
                client.clone(),
                target,
                all.clone(),
                self.work_writer,
                self.bundler,
                queue.clone(),
            )),
            tokio::spawn(dependencies::follow_host_changes(
                shared.clone(),
                kind,
                all.clone(),
                queue.clone(),
            )),
        ];
        if fns_needed {
            tasks.push(tokio::spawn(watch_federated_namespaces(
                client.clone(),
                federated_namespace_ar(),
                federated.store.clone(),
                self.fns_writer,
                queue.clone(),
            )));
        }
        tasks.extend(self.alpha.spawn(client, &federated.store, queue));
        tasks
    }
}

/// The target kind in every Ready member.
pub(super) fn member_watch(
    shared: &SyncShared,
    target_ar: &ApiResource,
    collect_status: bool,
    events: mpsc::UnboundedSender<MemberEvent>,
) -> Arc<MemberWatch<DynamicObject>> {
    // `managed=false` objects too: knowing them spares a read before each create.
    let config = watcher::Config::default().labels(&format!("{MANAGED_LABEL} in (true,false)"));
    let options = WatchOptions {
        shrink: if collect_status {
            observe::cache_form
        } else {
            observe::cache_form_without_status
        },
        ..WatchOptions::all().with_config(config)
    }
    // Stray detection looks up the managed objects of a cluster by this index.
    .index(Indexer::label(MANAGED_LABEL));
    Arc::new(MemberWatch::<DynamicObject>::start_with_events(
        shared.clusters.clone(),
        target_ar.clone(),
        options,
        events,
    ))
}

/// Host: the federated objects. Objects deleted while we were not watching are found
/// through the member caches (stray cleanup) on their Synced events.
async fn watch_federated(
    host: Client,
    federated: host::ApiStore,
    writer: reflector::store::Writer<DynamicObject>,
    queue: Arc<WorkQueue<Key>>,
    origins: Arc<super::origin::Origins>,
) {
    let api: Api<DynamicObject> = Api::all_with(host, &federated.ar);
    let store = federated.store;
    reflect_shrunk(
        api,
        writer,
        "federated object",
        packed::pack,
        move |c| match c {
            Change::Object(o) => {
                let key = key_of(o);
                origins.event(&key);
                queue.add(key);
            }
            // Queued at the list's end, from the cache that shows it: a reconcile taken
            // now would read the object as it was before the list, and could write that
            // older version back to the members.
            Change::Listing | Change::Listed(_) => {}
            Change::Synced => {
                for o in store.state() {
                    queue.add(key_of(&o));
                }
            }
        },
    )
    .await;
}

/// Host: FederatedNamespaces (of `ar`), for namespace placement: a change requeues every
/// federated object of that namespace (`store`: the federated objects).
pub(super) async fn watch_federated_namespaces(
    host: Client,
    ar: ApiResource,
    store: Store<DynamicObject>,
    writer: reflector::store::Writer<DynamicObject>,
    queue: Arc<WorkQueue<Key>>,
) {
    let api: Api<DynamicObject> = Api::all_with(host, &ar);
    reflect(api, writer, "federated namespace", move |c| match c {
        Change::Object(o) | Change::Listed(o) => {
            let ns = o.namespace();
            for fed in store.state() {
                if fed.namespace() == ns {
                    queue.add(key_of(&fed));
                }
            }
        }
        Change::Listing | Change::Synced => {}
    })
    .await;
}

/// Members: managed objects map back to their federated object; `recent` learns that
/// the cache moved.
async fn follow_members(
    all: AllKeys,
    recent: Arc<memory::RecentWrites>,
    mut events: mpsc::UnboundedReceiver<MemberEvent>,
    queue: Arc<WorkQueue<Key>>,
) {
    while let Some(ev) = events.recv().await {
        match ev {
            MemberEvent::Object {
                cluster,
                namespace,
                name,
            } => {
                // A canary Deployment's change is its stable one's federated object's.
                if let Some(stable) = flotilla_core::rollout::canary::stable_name(&name) {
                    queue.add(all.ty.key_of_member(namespace.clone(), stable.to_string()));
                }
                let cached = all.members.get(&cluster, namespace.as_deref(), &name);
                let key = all.ty.key_of_member(namespace, name);
                let version = cached
                    .as_ref()
                    .and_then(|o| o.metadata.resource_version.as_deref());
                recent.cache_moved(&cluster, &key, version);
                queue.add(key);
            }
            MemberEvent::Synced { cluster } => {
                debug!(%cluster, "member cache synced; rechecking every object");
                all.requeue(&queue);
            }
        }
    }
}

/// A member write that went on after its reconcile landed: its object is looked at again.
async fn follow_landed_writes(
    mut landed: mpsc::UnboundedReceiver<Key>,
    queue: Arc<WorkQueue<Key>>,
) {
    while let Some(key) = landed.recv().await {
        queue.add(key);
    }
}

/// Cluster readiness changes and the periodic resync requeue everything.
async fn follow_clusters(clusters: ClusterSet, all: AllKeys, queue: Arc<WorkQueue<Key>>) {
    let mut events = clusters.subscribe();
    let mut resync = tokio::time::interval(RESYNC_PERIOD);
    resync.tick().await;
    loop {
        tokio::select! {
            ev = events.recv() => match ev {
                // Objects are requeued when the member cache has synced; a Pull cluster has
                // no member cache (its Works are cached from the start).
                Ok(ClusterEvent::Ready(name)) => {
                    if clusters.get(&name).is_some_and(|c| c.pull) {
                        all.requeue(&queue);
                    }
                }
                Ok(_) | Err(RecvError::Lagged(_)) => all.requeue(&queue),
                Err(RecvError::Closed) => return,
            },
            _ = resync.tick() => all.requeue(&queue),
        }
    }
}

/// What lists every key a type's controller may have work for: the federated objects,
/// the managed member objects and the Works (a stray's federated object is gone).
#[derive(Clone)]
pub(super) struct AllKeys {
    pub ty: Arc<type_info::TypeInfo>,
    pub host: Arc<host::HostCaches>,
    pub members: Arc<MemberWatch<DynamicObject>>,
}

impl AllKeys {
    /// Every federated object and every managed member object (a stray whose federated
    /// object is gone) as keys.
    pub fn requeue(&self, queue: &WorkQueue<Key>) {
        let members = observe::managed_keys(&self.members, &self.ty);
        let keys = (self.host.federated_keys())
            .chain(members)
            .chain(self.host.work_keys());
        for key in keys {
            queue.add(key);
        }
    }
}

/// Until both host caches are complete, an object would look deleted (a stray) or its
/// namespace unfederated (placed nowhere), and its member copies would be deleted. Until
/// the registry knows every cluster (each registered cluster probed once), a deletion would
/// not wait for the clusters it lacks. Awaited by one task: a store's readiness wakes only
/// its last waiter (see [`Gate`]).
pub(super) async fn ready(
    shared: Arc<SyncShared>,
    host: Arc<host::HostCaches>,
    fns_needed: bool,
) -> bool {
    registry_wait::wait_for_registry(shared).await;
    host.ready(fns_needed).await
}
