//! What the dashboard knows about the host: the registered clusters, the enabled types,
//! every federated object (its spec and status decoded once, when it changes, and the
//! policy that made it, if one did), the propagation and override policies with their
//! status, the ReplicaSchedulingPreferences and recent Events about federated objects. The watches
//! ([`super::feed`]) write it; every page reads it. Each change bumps a version number that
//! the live pages follow ([`Shared::subscribe`]). No I/O here.

use std::{
    collections::BTreeMap,
    sync::{Arc, RwLock, RwLockReadGuard},
};

use flotilla_api::{
    FederatedSpec, FederatedStatus, FederatedTypeConfig, KubeFedCluster,
    policy::{MATERIALIZED_LABEL, POLICY_ANNOTATION, PolicyStatus},
    scheduling::{ReplicaSchedulingPreferenceSpec, ReplicaSchedulingPreferenceStatus},
};
use flotilla_core::{policy_materialize::policy_ref, policy_select::PolicyScope};
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
    /// The policy controller's annotation naming the policy that made this object
    /// (`PropagationPolicy/<ns>/<name>`, …), when the policy controller made it.
    pub policy: Option<String>,
}

impl FedObject {
    /// Decodes a federated object of the type `type_name`.
    pub fn from_dynamic(type_name: &str, obj: &DynamicObject) -> Self {
        FedObject {
            type_name: type_name.to_owned(),
            generation: obj.metadata.generation.unwrap_or(0),
            spec: FederatedSpec::from_dynamic(obj).map_err(|e| e.to_string()),
            status: FederatedStatus::from_dynamic(obj),
            policy: obj
                .labels()
                .get(MATERIALIZED_LABEL)
                .filter(|v| v.as_str() == "true")
                .and_then(|_| obj.annotations().get(POLICY_ANNOTATION).cloned()),
        }
    }

    /// Whether the controllers have not reported on the current generation yet.
    pub fn stale(&self) -> bool {
        self.status.observed_generation < self.generation || self.status.propagation().is_none()
    }
}

/// The four kinds of `policy.flotilla.io`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum PolicyKind {
    /// Namespaced, propagates objects of its namespace.
    PropagationPolicy,
    /// Cluster-scoped, propagates objects of any namespace.
    ClusterPropagationPolicy,
    /// Namespaced, overrides objects of its namespace per cluster.
    OverridePolicy,
    /// Cluster-scoped, overrides objects of any namespace per cluster.
    ClusterOverridePolicy,
}

impl PolicyKind {
    /// Every kind, propagation first.
    pub const ALL: [PolicyKind; 4] = [
        PolicyKind::PropagationPolicy,
        PolicyKind::ClusterPropagationPolicy,
        PolicyKind::OverridePolicy,
        PolicyKind::ClusterOverridePolicy,
    ];

    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::PropagationPolicy => "PropagationPolicy",
            PolicyKind::ClusterPropagationPolicy => "ClusterPropagationPolicy",
            PolicyKind::OverridePolicy => "OverridePolicy",
            PolicyKind::ClusterOverridePolicy => "ClusterOverridePolicy",
        }
    }

    /// The resource's plural name (what RBAC names).
    pub fn plural(self) -> &'static str {
        match self {
            PolicyKind::PropagationPolicy => "propagationpolicies",
            PolicyKind::ClusterPropagationPolicy => "clusterpropagationpolicies",
            PolicyKind::OverridePolicy => "overridepolicies",
            PolicyKind::ClusterOverridePolicy => "clusteroverridepolicies",
        }
    }

    /// Whether it propagates objects (rather than overriding them).
    pub fn propagates(self) -> bool {
        matches!(
            self,
            PolicyKind::PropagationPolicy | PolicyKind::ClusterPropagationPolicy
        )
    }

    /// The namespaces its selectors reach.
    pub fn scope(self) -> PolicyScope {
        match self {
            PolicyKind::PropagationPolicy | PolicyKind::OverridePolicy => PolicyScope::Namespaced,
            _ => PolicyScope::Cluster,
        }
    }
}

/// A policy's identity; the policies page is sorted by it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyKey {
    /// Its kind.
    pub kind: PolicyKind,
    /// Namespace (empty for the cluster-scoped kinds).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl PolicyKey {
    /// How the policy is named where it is referred to: for the propagation kinds exactly
    /// what the policy controller writes in [`POLICY_ANNOTATION`]
    /// (`PropagationPolicy/<ns>/<name>`, `ClusterPropagationPolicy/<name>`).
    pub fn reference(&self) -> String {
        let ns = Some(self.namespace.as_str()).filter(|ns| !ns.is_empty());
        if self.kind.propagates() {
            return policy_ref(self.kind.scope(), ns, &self.name);
        }
        match ns {
            Some(ns) => format!("{}/{ns}/{}", self.kind.as_str(), self.name),
            None => format!("{}/{}", self.kind.as_str(), self.name),
        }
    }

    /// The propagation policy a [`POLICY_ANNOTATION`] names; `None` for any other value
    /// (such as the FederatedNamespace the policy controller makes for a namespace).
    pub fn from_annotation(value: &str) -> Option<PolicyKey> {
        let parts: Vec<&str> = value.split('/').collect();
        let (kind, namespace, name) = match parts.as_slice() {
            ["PropagationPolicy", ns, name] => (PolicyKind::PropagationPolicy, *ns, *name),
            ["ClusterPropagationPolicy", name] => (PolicyKind::ClusterPropagationPolicy, "", *name),
            _ => return None,
        };
        Some(PolicyKey {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }
}

/// One policy, as the policies page shows it (its selectors and overriders are not kept:
/// an overrider's value may be a Secret's).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyRecord {
    /// `spec.priority` of a propagation policy.
    pub priority: Option<i32>,
    /// `metadata.generation`.
    pub generation: i64,
    /// Its status (empty until the policy controller writes one).
    pub status: PolicyStatus,
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
    /// Propagation and override policies.
    pub policies: BTreeMap<PolicyKey, PolicyRecord>,
    /// ReplicaSchedulingPreferences (spec, and status: the last division and the capacity
    /// it read) by (namespace, name).
    pub rsps: BTreeMap<
        (String, String),
        (
            ReplicaSchedulingPreferenceSpec,
            Option<ReplicaSchedulingPreferenceStatus>,
        ),
    >,
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
    fn a_policy_reference_is_what_the_policy_controller_writes_and_reads_back() {
        let pp = PolicyKey {
            kind: PolicyKind::PropagationPolicy,
            namespace: "demo".into(),
            name: "web".into(),
        };
        assert_eq!(pp.reference(), "PropagationPolicy/demo/web");
        assert_eq!(PolicyKey::from_annotation(&pp.reference()), Some(pp));
        let cpp = PolicyKey {
            kind: PolicyKind::ClusterPropagationPolicy,
            namespace: String::new(),
            name: "all".into(),
        };
        assert_eq!(cpp.reference(), "ClusterPropagationPolicy/all");
        assert_eq!(PolicyKey::from_annotation(&cpp.reference()), Some(cpp));
        assert_eq!(
            PolicyKey::from_annotation(flotilla_api::policy::NAMESPACE_FOR_OBJECTS),
            None
        );
        let op = PolicyKey {
            kind: PolicyKind::OverridePolicy,
            namespace: "demo".into(),
            name: "m2".into(),
        };
        assert_eq!(op.reference(), "OverridePolicy/demo/m2");
    }

    #[test]
    fn a_materialized_object_remembers_its_policy_and_an_explicit_one_has_none() {
        let mut made = fed_cm("a", 1);
        made.metadata.labels = Some(BTreeMap::from([(
            MATERIALIZED_LABEL.to_owned(),
            "true".to_owned(),
        )]));
        made.metadata.annotations = Some(BTreeMap::from([(
            POLICY_ANNOTATION.to_owned(),
            "PropagationPolicy/demo/web".to_owned(),
        )]));
        let policy = FedObject::from_dynamic("configmaps", &made).policy;
        assert_eq!(policy.as_deref(), Some("PropagationPolicy/demo/web"));
        // The annotation alone, without the label, is not the policy controller's.
        made.metadata.labels = None;
        assert_eq!(FedObject::from_dynamic("configmaps", &made).policy, None);
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
