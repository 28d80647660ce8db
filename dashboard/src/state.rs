//! What the dashboard knows about the host: the registered clusters, the enabled types,
//! every federated object (its spec and status decoded once, when it changes), the
//! ReplicaSchedulingPreferences and recent Events about federated objects. The watches
//! ([`super::feed`]) write it; every page reads it. Each change bumps a version number that
//! the live pages follow ([`Shared::subscribe`]). No I/O here.

use std::{
    collections::BTreeMap,
    sync::{Arc, RwLock, RwLockReadGuard},
};

use flotilla_api::{
    FederatedSpec, FederatedStatus, FederatedTypeConfig, KubeFedCluster,
    scheduling::ReplicaSchedulingPreferenceSpec,
};
use k8s_openapi::api::core::v1::Event;
use kube::{ResourceExt, api::DynamicObject};
use tokio::sync::watch;

/// A federated object's identity; the grid is sorted by it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// Namespace (empty for cluster-scoped types).
    pub namespace: String,
    /// Federated kind (`FederatedDeployment`).
    pub kind: String,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// The key of a federated object of `kind`.
    pub fn of(kind: &str, obj: &DynamicObject) -> Self {
        ObjectKey {
            namespace: obj.namespace().unwrap_or_default(),
            kind: kind.to_owned(),
            name: obj.name_any(),
        }
    }
}

/// One federated object, decoded.
#[derive(Clone, Debug)]
pub struct FedObject {
    /// Name of its FederatedTypeConfig (`deployments.apps`).
    pub type_name: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// The spec, or why it could not be read.
    pub spec: Result<FederatedSpec, String>,
    /// The status (empty when missing or unreadable).
    pub status: FederatedStatus,
}

impl FedObject {
    /// Decodes a federated object of the type `type_name`.
    pub fn from_dynamic(type_name: &str, obj: &DynamicObject) -> Self {
        FedObject {
            type_name: type_name.to_owned(),
            generation: obj.metadata.generation.unwrap_or(0),
            spec: FederatedSpec::from_dynamic(obj).map_err(|e| e.to_string()),
            status: FederatedStatus::from_dynamic(obj),
        }
    }

    /// Whether the controllers have not reported on the current generation yet.
    pub fn stale(&self) -> bool {
        self.status.observed_generation < self.generation || self.status.propagation().is_none()
    }
}

/// One Event about a federated object, as the object view lists it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct EventRecord {
    /// Namespace of the object the Event is about.
    pub namespace: String,
    /// Kind of that object.
    pub kind: String,
    /// Name of that object.
    pub name: String,
    /// `Normal` or `Warning`.
    pub type_: String,
    /// The Event's reason.
    pub reason: String,
    /// The Event's message.
    pub message: String,
    /// How many times it happened.
    pub count: i32,
    /// When it last happened (RFC 3339), for ordering.
    pub last_seen: String,
}

impl EventRecord {
    /// The record of a core/v1 Event.
    pub fn from_event(e: &Event) -> Self {
        let last_seen = e
            .last_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
            .or_else(|| {
                e.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
            })
            .unwrap_or_default();
        EventRecord {
            namespace: e.involved_object.namespace.clone().unwrap_or_default(),
            kind: e.involved_object.kind.clone().unwrap_or_default(),
            name: e.involved_object.name.clone().unwrap_or_default(),
            type_: e.type_.clone().unwrap_or_default(),
            reason: e.reason.clone().unwrap_or_default(),
            message: e.message.clone().unwrap_or_default(),
            count: e.count.unwrap_or(1),
            last_seen,
        }
    }
}

/// Everything the pages are made from.
#[derive(Clone, Debug, Default)]
pub struct State {
    /// KubeFedClusters by name.
    pub clusters: BTreeMap<String, KubeFedCluster>,
    /// FederatedTypeConfigs by name.
    pub types: BTreeMap<String, FederatedTypeConfig>,
    /// Federated objects.
    pub objects: BTreeMap<ObjectKey, FedObject>,
    /// ReplicaSchedulingPreference specs by (namespace, name).
    pub rsps: BTreeMap<(String, String), ReplicaSchedulingPreferenceSpec>,
    /// Events about federated objects, by the Event's own namespace/name.
    pub events: BTreeMap<(String, String), EventRecord>,
    /// Whether every watch has listed once (before that, pages say "loading").
    pub synced: bool,
}

impl State {
    /// Replaces (or adds) an object of the type `type_name`, whose federated kind is `kind`.
    pub fn apply_object(&mut self, type_name: &str, kind: &str, obj: &DynamicObject) {
        self.objects.insert(
            ObjectKey::of(kind, obj),
            FedObject::from_dynamic(type_name, obj),
        );
    }

    /// Removes the objects of `kind` that `keep` rejects (a relist drops those not listed
    /// again; a disabled type drops all of its objects).
    pub fn retain_kind(&mut self, kind: &str, keep: impl Fn(&ObjectKey) -> bool) {
        self.objects.retain(|k, _| k.kind != kind || keep(k));
    }

    /// Events about the object `key`, most recent first.
    pub fn events_about(&self, key: &ObjectKey) -> Vec<&EventRecord> {
        let mut found: Vec<&EventRecord> = self
            .events
            .values()
            .filter(|e| e.namespace == key.namespace && e.kind == key.kind && e.name == key.name)
            .collect();
        found.sort_by(|a, b| b.last_seen.cmp(&a.last_seen));
        found
    }
}

/// The state shared by the watches and the server, with its version counter.
#[derive(Clone)]
pub struct Shared {
    state: Arc<RwLock<State>>,
    version: Arc<watch::Sender<u64>>,
}

impl Default for Shared {
    fn default() -> Self {
        Self::new(State::default())
    }
}

impl Shared {
    /// Shares `state` (version 0).
    pub fn new(state: State) -> Self {
        Shared {
            state: Arc::new(RwLock::new(state)),
            version: Arc::new(watch::channel(0).0),
        }
    }

    /// Reads the state. Never held across an await (it is a blocking lock).
    pub fn read(&self) -> RwLockReadGuard<'_, State> {
        // A writer that panicked left a state that is still consistent map by map.
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the state and bumps the version.
    pub fn update(&self, change: impl FnOnce(&mut State)) {
        {
            let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
            change(&mut state);
        }
        self.version.send_modify(|v| *v += 1);
    }

    /// The current version.
    pub fn version(&self) -> u64 {
        *self.version.borrow()
    }

    /// Follows the version.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{ApiResource, GroupVersionKind};
    use serde_json::json;

    fn fed_cm(name: &str, generation: i64) -> DynamicObject {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "types.kubefed.io",
            "v1beta1",
            "FederatedConfigMap",
        ));
        let mut obj = DynamicObject::new(name, &ar).within("demo").data(json!({
            "spec": {"template": {"data": {"a": "1"}}, "placement": {"clusterSelector": {}}},
            "status": {"observedGeneration": 1, "conditions": [{"type": "Propagation", "status": "True"}]}
        }));
        obj.metadata.generation = Some(generation);
        obj
    }

    #[test]
    fn an_object_is_decoded_once_and_known_by_namespace_kind_and_name() {
        let mut state = State::default();
        state.apply_object("configmaps", "FederatedConfigMap", &fed_cm("a", 1));
        let key = ObjectKey {
            namespace: "demo".into(),
            kind: "FederatedConfigMap".into(),
            name: "a".into(),
        };
        let obj = &state.objects[&key];
        assert!(obj.spec.is_ok());
        assert!(!obj.stale());
        state.apply_object("configmaps", "FederatedConfigMap", &fed_cm("a", 2));
        assert!(
            state.objects[&key].stale(),
            "generation 2 is not reconciled yet"
        );
    }

    #[test]
    fn a_relist_drops_the_objects_of_its_kind_that_are_gone() {
        let mut state = State::default();
        state.apply_object("configmaps", "FederatedConfigMap", &fed_cm("a", 1));
        state.apply_object("configmaps", "FederatedConfigMap", &fed_cm("b", 1));
        state.retain_kind("FederatedConfigMap", |k| k.name == "b");
        let names: Vec<&str> = state.objects.keys().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["b"]);
    }

    #[test]
    fn every_update_bumps_the_version_its_followers_see() {
        let shared = Shared::default();
        let mut rx = shared.subscribe();
        shared.update(|s| s.synced = true);
        assert_eq!(shared.version(), 1);
        assert!(rx.has_changed().expect("open"));
        assert!(rx.borrow_and_update().eq(&1));
    }
}
