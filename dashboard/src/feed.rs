//! The dashboard's watches on the host, feeding [`State`]: KubeFedClusters and
//! FederatedTypeConfigs in the control-plane namespace, each enabled federated type (as
//! `DynamicObject`, started and stopped as types are enabled and disabled), the four kinds
//! of propagation and override policies, ReplicaSchedulingPreferences, and Events about
//! `types.kubefed.io` objects. Read-only:
//! it lists and watches, nothing else. A relist replaces what it lists in one update, so a
//! page never sees half a list.

use std::{collections::BTreeMap, fmt::Debug};

use flotilla_api::{
    FederatedTypeConfig, KubeFedCluster, ReplicaSchedulingPreference, TYPES_GROUP, V1BETA1,
    core::PropagationMode,
    policy::{ClusterOverridePolicy, ClusterPropagationPolicy, OverridePolicy, PropagationPolicy},
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Event;
use kube::{
    Api, Client, ResourceExt,
    api::DynamicObject,
    runtime::{WatchStreamExt, watcher},
};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use flotilla_controllers::watch::is_expected_relist;

use super::state::{
    EventRecord, FedObject, ObjectKey, PolicyKey, PolicyKind, PolicyRecord, Shared, State,
};

/// A change one watched object makes to the state.
type Change<K> = Box<dyn Fn(&mut State, &K) + Send + Sync>;

/// A relist's whole change, prepared outside the state's lock.
pub(super) type Prepared = Box<dyn FnOnce(&mut State) + Send>;

/// Prepares a relist's change from the listed objects (the costly decoding happens here,
/// while pages can still read the state).
type Relist<K> = Box<dyn Fn(&[K]) -> Prepared + Send + Sync>;

/// What one watch does to the state.
struct Sink<K> {
    /// What the watch is of, for logs.
    what: String,
    /// An object was added or changed.
    apply: Change<K>,
    /// An object was deleted.
    delete: Change<K>,
    /// A relist begins to replace everything this watch put in the state.
    clear: Box<dyn Fn(&mut State) + Send + Sync>,
    /// A relist prepared outside the lock; without it, `clear` then `apply` each object.
    relist: Option<Relist<K>>,
}

/// Runs one watch into the state until `cancel` fires.
async fn watch_into<K>(
    api: Api<K>,
    config: watcher::Config,
    shared: Shared,
    sink: Sink<K>,
    cancel: CancellationToken,
) where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let mut stream = watcher(api, config).default_backoff().boxed();
    let mut relist: Vec<K> = Vec::new();
    loop {
        let event = tokio::select! {
            _ = cancel.cancelled() => return,
            event = stream.try_next() => event,
        };
        match event {
            Ok(Some(watcher::Event::Init)) => relist.clear(),
            Ok(Some(watcher::Event::InitApply(obj))) => relist.push(obj),
            Ok(Some(watcher::Event::InitDone)) => {
                let listed = std::mem::take(&mut relist);
                match &sink.relist {
                    Some(prepare) => shared.update(prepare(&listed)),
                    None => shared.update(|s| {
                        (sink.clear)(s);
                        for obj in &listed {
                            (sink.apply)(s, obj);
                        }
                    }),
                }
                debug!(what = %sink.what, objects = listed.len(), "dashboard watch listed");
            }
            Ok(Some(watcher::Event::Apply(obj))) => shared.update(|s| (sink.apply)(s, &obj)),
            Ok(Some(watcher::Event::Delete(obj))) => shared.update(|s| (sink.delete)(s, &obj)),
            Ok(None) => return,
            Err(error) if is_expected_relist(&error) => {
                debug!(what = %sink.what, %error, "dashboard watch expired; relisting")
            }
            Err(error) => warn!(what = %sink.what, %error, "dashboard watch failed; retrying"),
        }
    }
}

/// Starts every watch; they stop when `cancel` fires.
pub fn start(host: Client, kubefed_ns: &str, shared: Shared, cancel: CancellationToken) {
    let clusters: Api<KubeFedCluster> = Api::namespaced(host.clone(), kubefed_ns);
    tokio::spawn(watch_into(
        clusters,
        watcher::Config::default(),
        shared.clone(),
        Sink {
            what: "KubeFedClusters".into(),
            apply: Box::new(|s, c: &KubeFedCluster| {
                s.clusters.insert(c.name_any(), c.clone());
            }),
            delete: Box::new(|s, c| {
                s.clusters.remove(&c.name_any());
            }),
            clear: Box::new(|s| s.clusters.clear()),
            relist: None,
        },
        cancel.clone(),
    ));
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(host.clone(), kubefed_ns);
    tokio::spawn(watch_into(
        ftcs,
        watcher::Config::default(),
        shared.clone(),
        Sink {
            what: "FederatedTypeConfigs".into(),
            apply: Box::new(|s, f: &FederatedTypeConfig| {
                s.types.insert(f.name_any(), f.clone());
                s.synced = true;
            }),
            delete: Box::new(|s, f| {
                s.types.remove(&f.name_any());
            }),
            clear: Box::new(|s| {
                s.types.clear();
                s.synced = true;
            }),
            relist: None,
        },
        cancel.clone(),
    ));
    start_rsps_and_events(&host, &shared, &cancel);
    start_policies(&host, &shared, &cancel);
    tokio::spawn(follow_types(host, shared, cancel));
}

/// One watch per policy kind. A host without the policy CRDs (or credentials that may not
/// read them) only logs the watch's failures: the other pages are unaffected.
fn start_policies(host: &Client, shared: &Shared, cancel: &CancellationToken) {
    watch_policies::<PropagationPolicy>(host, shared, cancel, PolicyKind::PropagationPolicy, |p| {
        PolicyRecord {
            priority: Some(p.spec.priority),
            generation: p.metadata.generation.unwrap_or(0),
            status: p.status.clone().unwrap_or_default(),
        }
    });
    watch_policies::<ClusterPropagationPolicy>(
        host,
        shared,
        cancel,
        PolicyKind::ClusterPropagationPolicy,
        |p| PolicyRecord {
            priority: Some(p.spec.spec.priority),
            generation: p.metadata.generation.unwrap_or(0),
            status: p.status.clone().unwrap_or_default(),
        },
    );
    watch_policies::<OverridePolicy>(host, shared, cancel, PolicyKind::OverridePolicy, |p| {
        PolicyRecord {
            priority: None,
            generation: p.metadata.generation.unwrap_or(0),
            status: p.status.clone().unwrap_or_default(),
        }
    });
    watch_policies::<ClusterOverridePolicy>(
        host,
        shared,
        cancel,
        PolicyKind::ClusterOverridePolicy,
        |p| PolicyRecord {
            priority: None,
            generation: p.metadata.generation.unwrap_or(0),
            status: p.status.clone().unwrap_or_default(),
        },
    );
}

fn watch_policies<K>(
    host: &Client,
    shared: &Shared,
    cancel: &CancellationToken,
    kind: PolicyKind,
    record: fn(&K) -> PolicyRecord,
) where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let key = move |p: &K| PolicyKey {
        kind,
        namespace: p.namespace().unwrap_or_default(),
        name: p.name_any(),
    };
    tokio::spawn(watch_into(
        Api::<K>::all(host.clone()),
        watcher::Config::default(),
        shared.clone(),
        Sink {
            what: kind.as_str().into(),
            apply: Box::new(move |s, p| {
                s.policies.insert(key(p), record(p));
            }),
            delete: Box::new(move |s, p| {
                s.policies.remove(&key(p));
            }),
            clear: Box::new(move |s| s.policies.retain(|k, _| k.kind != kind)),
            relist: None,
        },
        cancel.clone(),
    ));
}

fn start_rsps_and_events(host: &Client, shared: &Shared, cancel: &CancellationToken) {
    let rsps: Api<ReplicaSchedulingPreference> = Api::all(host.clone());
    let key = |r: &ReplicaSchedulingPreference| (r.namespace().unwrap_or_default(), r.name_any());
    tokio::spawn(watch_into(
        rsps,
        watcher::Config::default(),
        shared.clone(),
        Sink {
            what: "ReplicaSchedulingPreferences".into(),
            apply: Box::new(move |s, r| {
                s.rsps.insert(key(r), (r.spec.clone(), r.status.clone()));
            }),
            delete: Box::new(move |s, r| {
                s.rsps.remove(&key(r));
            }),
            clear: Box::new(|s| s.rsps.clear()),
            relist: None,
        },
        cancel.clone(),
    ));
    // Only Events about federated objects of kubefed's group: the host may hold many others.
    let events: Api<Event> = Api::all(host.clone());
    let selector = format!("involvedObject.apiVersion={TYPES_GROUP}/{V1BETA1}");
    let key = |e: &Event| (e.namespace().unwrap_or_default(), e.name_any());
    tokio::spawn(watch_into(
        events,
        watcher::Config::default().fields(&selector),
        shared.clone(),
        Sink {
            what: "Events".into(),
            apply: Box::new(move |s, e| {
                s.events.insert(key(e), EventRecord::from_event(e));
            }),
            delete: Box::new(move |s, e| {
                s.events.remove(&key(e));
            }),
            clear: Box::new(|s| s.events.clear()),
            relist: None,
        },
        cancel.clone(),
    ));
}

/// The federated types whose objects are watched: name → (kind, the API resource).
fn enabled_types(state: &State) -> BTreeMap<String, kube::core::ApiResource> {
    state
        .types
        .iter()
        .filter(|(_, f)| f.spec.propagation == PropagationMode::Enabled)
        .map(|(name, f)| (name.clone(), f.spec.federated_type.to_kube()))
        .collect()
}

/// Starts a watch per enabled federated type, restarts it when its type changes, stops it
/// (and forgets its objects) when the type is disabled or removed.
async fn follow_types(host: Client, shared: Shared, cancel: CancellationToken) {
    let mut running: BTreeMap<String, (kube::core::ApiResource, JoinHandle<()>)> = BTreeMap::new();
    let mut changes = shared.subscribe();
    loop {
        let wanted = enabled_types(&shared.read());
        let stale: Vec<String> = running
            .iter()
            .filter(|(name, (ar, _))| wanted.get(*name) != Some(ar))
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            if let Some((ar, task)) = running.remove(&name) {
                task.abort();
                shared.update(|s| s.retain_kind(&ar.kind, |_| false));
            }
        }
        for (name, ar) in wanted {
            if running.contains_key(&name) {
                continue;
            }
            let task = tokio::spawn(watch_into(
                Api::all_with(host.clone(), &ar),
                watcher::Config::default(),
                shared.clone(),
                type_sink(&name, &ar),
                cancel.clone(),
            ));
            running.insert(name, (ar, task));
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            changed = changes.changed() => if changed.is_err() { break },
        }
    }
    for (_, (_, task)) in running {
        task.abort();
    }
}

fn type_sink(type_name: &str, ar: &kube::core::ApiResource) -> Sink<DynamicObject> {
    let name = type_name.to_owned();
    let kind = ar.kind.clone();
    let kind_of_apply = ar.kind.clone();
    let kind_of_delete = ar.kind.clone();
    let kind_of_relist = ar.kind.clone();
    let name_of_relist = type_name.to_owned();
    Sink {
        what: ar.kind.clone(),
        apply: Box::new(move |s, o| s.apply_object(&name, &kind_of_apply, o)),
        delete: Box::new(move |s, o| {
            s.objects.remove(&ObjectKey::of(&kind_of_delete, o));
        }),
        clear: Box::new(move |s| s.retain_kind(&kind, |_| false)),
        relist: Some(Box::new(move |listed: &[DynamicObject]| {
            prepare_relist(&name_of_relist, &kind_of_relist, listed)
        })),
    }
}

/// A relist of the federated type `type_name` (kind `kind`): every object decoded now, and
/// the change that swaps them in for the type's previous objects.
pub(super) fn prepare_relist(type_name: &str, kind: &str, listed: &[DynamicObject]) -> Prepared {
    let decoded: Vec<(ObjectKey, FedObject)> = listed
        .iter()
        .map(|o| {
            (
                ObjectKey::of(kind, o),
                FedObject::from_dynamic(type_name, o),
            )
        })
        .collect();
    let kind = kind.to_owned();
    Box::new(move |s: &mut State| {
        s.retain_kind(&kind, |_| false);
        s.objects.extend(decoded);
    })
}
