//! The host side of dependencies that follow workloads: caches of the host's ConfigMaps,
//! Secrets, ServiceAccounts and PersistentVolumeClaims (started the first time a workload
//! asks for its dependencies, so a federation that never does watches none of them), and
//! the index of which workloads reference which object, so that an edit in the host
//! requeues exactly those workloads. It never writes, and never logs an object's content.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use flotilla_core::dependencies::{Dependency, DependencyKind};
use kube::{
    Api, Client, ResourceExt,
    core::{ApiResource, DynamicObject, GroupVersionKind},
    runtime::reflector::{self, ObjectRef, Store},
};
use tokio::sync::broadcast;

use super::Key;
use crate::watch::reflect;

/// How long a reconcile waits for a freshly started cache to list.
const READY_WAIT: Duration = Duration::from_secs(30);

/// A workload that references a dependency: its federated kind and key.
pub(crate) type Referrer = (String, Key);

/// An object of a dependency kind in the host: kind, namespace, name.
type HostRef = (DependencyKind, String, String);

/// Which workloads reference which host object.
#[derive(Default)]
struct Index {
    by_object: HashMap<HostRef, BTreeSet<Referrer>>,
    by_referrer: HashMap<Referrer, Vec<HostRef>>,
}

/// The host caches of the dependency kinds and the index of referrers.
pub(crate) struct DependencyHosts {
    host: Client,
    stores: OnceLock<HashMap<DependencyKind, Store<DynamicObject>>>,
    index: Arc<Mutex<Index>>,
    changes: broadcast::Sender<Referrer>,
}

/// The core `v1` API resource of a dependency kind.
pub(crate) fn api_resource(kind: DependencyKind) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", kind.as_str()),
        kind.plural(),
    )
}

impl DependencyHosts {
    pub(crate) fn new(host: Client) -> Self {
        DependencyHosts {
            host,
            stores: OnceLock::new(),
            index: Arc::default(),
            changes: broadcast::channel(1024).0,
        }
    }

    /// Workloads to requeue because a host object they reference changed.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Referrer> {
        self.changes.subscribe()
    }

    /// Where news that requeues workloads is sent (their kind's controllers hear it).
    pub(crate) fn sender(&self) -> broadcast::Sender<Referrer> {
        self.changes.clone()
    }

    /// Records what a workload references now (empty: nothing any more).
    pub(crate) fn record(&self, referrer: Referrer, namespace: &str, deps: &BTreeSet<Dependency>) {
        let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = index.by_referrer.remove(&referrer) {
            for r in old {
                if let Some(set) = index.by_object.get_mut(&r) {
                    set.remove(&referrer);
                    if set.is_empty() {
                        index.by_object.remove(&r);
                    }
                }
            }
        }
        if deps.is_empty() {
            return;
        }
        let refs: Vec<HostRef> = (deps.iter())
            .map(|d| (d.kind, namespace.to_string(), d.name.clone()))
            .collect();
        for r in &refs {
            index
                .by_object
                .entry(r.clone())
                .or_default()
                .insert(referrer.clone());
        }
        index.by_referrer.insert(referrer, refs);
    }

    /// The host object of a dependency (`None`: it does not exist), once the caches have
    /// listed; `Err(())` while they have not.
    pub(crate) async fn get(
        &self,
        namespace: &str,
        dep: &Dependency,
    ) -> Result<Option<Arc<DynamicObject>>, ()> {
        let store = self.stores().get(&dep.kind).cloned().ok_or(())?;
        if tokio::time::timeout(READY_WAIT, store.wait_until_ready())
            .await
            .is_err()
        {
            return Err(());
        }
        let r = ObjectRef::new_with(&dep.name, api_resource(dep.kind)).within(namespace);
        Ok(store.get(&r))
    }

    /// The stores, started on first use.
    fn stores(&self) -> &HashMap<DependencyKind, Store<DynamicObject>> {
        self.stores.get_or_init(|| {
            (DependencyKind::ALL.into_iter())
                .map(|kind| (kind, self.start(kind)))
                .collect()
        })
    }

    fn start(&self, kind: DependencyKind) -> Store<DynamicObject> {
        let ar = api_resource(kind);
        let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
        let store = writer.as_reader();
        let api: Api<DynamicObject> = Api::all_with(self.host.clone(), &ar);
        let (index, changes) = (self.index.clone(), self.changes.clone());
        tokio::spawn(reflect(api, writer, "dependency", move |c| {
            if let Some(o) = c.object() {
                let r = (kind, o.namespace().unwrap_or_default(), o.name_any());
                let index = index.lock().unwrap_or_else(|e| e.into_inner());
                for referrer in index.by_object.get(&r).into_iter().flatten() {
                    let _ = changes.send(referrer.clone());
                }
            }
        }));
        store
    }
}
