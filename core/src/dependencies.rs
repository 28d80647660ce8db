//! Dependencies that follow a workload (`spec.propagateDependencies: true` or the
//! `flotilla.io/propagate-dependencies: "true"` annotation): which ConfigMaps, Secrets,
//! ServiceAccounts and PersistentVolumeClaims a pod template references, what their member
//! copies look like, and what to do with a member copy when a workload lands on a cluster
//! or leaves it. Pure: no I/O; the sync controller reads, writes and reports.
//!
//! A member copy carries [`DEPENDENCY_LABEL`] and names the workloads it is kept for in
//! [`OWNERS_ANNOTATION`] (`FederatedDeployment/web,FederatedJob/migrate`); it is deleted
//! when the last of them lets go. An object without the label (the user's own, or one a
//! Federated&lt;Kind&gt; manages) is never touched.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use flotilla_api::MANAGED_LABEL;
use flotilla_api::hash::content_hash;

/// Label on every member copy of a dependency (`"true"`).
pub const DEPENDENCY_LABEL: &str = "flotilla.io/dependency";
/// Annotation on a member copy: the workloads (`<FederatedKind>/<name>`, comma-separated,
/// sorted) it is kept for.
pub const OWNERS_ANNOTATION: &str = "flotilla.io/dependency-of";
/// Annotation on a member copy: the content hash of what was copied from the host.
pub const DEPENDENCY_HASH_ANNOTATION: &str = "flotilla.io/dependency-hash";
/// Annotation turning dependency propagation on for a federated object whose CRD schema
/// has no `spec.propagateDependencies` (kubefed's own CRDs prune unknown spec fields).
pub const PROPAGATE_DEPENDENCIES_ANNOTATION: &str = "flotilla.io/propagate-dependencies";
/// ServiceAccount every namespace of every cluster has: never propagated.
const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// The kinds a pod template can depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DependencyKind {
    /// `v1/ConfigMap`.
    ConfigMap,
    /// `v1/Secret`.
    Secret,
    /// `v1/ServiceAccount`.
    ServiceAccount,
    /// `v1/PersistentVolumeClaim`.
    PersistentVolumeClaim,
}

impl DependencyKind {
    /// Every kind, in the order reported.
    pub const ALL: [DependencyKind; 4] = [
        DependencyKind::ConfigMap,
        DependencyKind::Secret,
        DependencyKind::ServiceAccount,
        DependencyKind::PersistentVolumeClaim,
    ];

    /// The Kubernetes kind.
    pub fn as_str(self) -> &'static str {
        match self {
            DependencyKind::ConfigMap => "ConfigMap",
            DependencyKind::Secret => "Secret",
            DependencyKind::ServiceAccount => "ServiceAccount",
            DependencyKind::PersistentVolumeClaim => "PersistentVolumeClaim",
        }
    }

    /// The kind by its name.
    pub fn parse(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// The resource (plural) of the core `v1` API (GA kinds: no version to discover).
    pub fn plural(self) -> &'static str {
        match self {
            DependencyKind::ConfigMap => "configmaps",
            DependencyKind::Secret => "secrets",
            DependencyKind::ServiceAccount => "serviceaccounts",
            DependencyKind::PersistentVolumeClaim => "persistentvolumeclaims",
        }
    }

    /// The fields copied from the host object (never its status or server-set fields).
    fn content(self, host: &Value) -> Map<String, Value> {
        let keys: &[&str] = match self {
            DependencyKind::ConfigMap => &["data", "binaryData", "immutable"],
            DependencyKind::Secret => &["type", "data", "immutable"],
            DependencyKind::ServiceAccount => &["imagePullSecrets", "automountServiceAccountToken"],
            DependencyKind::PersistentVolumeClaim => &["spec"],
        };
        let mut out = Map::new();
        for k in keys {
            if let Some(v) = host.get(*k).filter(|v| !v.is_null()) {
                out.insert((*k).to_string(), v.clone());
            }
        }
        if let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) {
            // Bound by each cluster's own binder.
            spec.remove("volumeName");
        }
        out
    }
}

/// One object a workload depends on, in the workload's namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dependency {
    /// Its kind.
    pub kind: DependencyKind,
    /// Its name.
    pub name: String,
}

impl Dependency {
    fn new(kind: DependencyKind, name: &str) -> Self {
        Dependency {
            kind,
            name: name.to_string(),
        }
    }
}

/// Whether a federated object asks for its dependencies to follow it.
pub fn enabled(spec: &Value, annotations: &BTreeMap<String, String>) -> bool {
    spec.get("propagateDependencies").and_then(Value::as_bool) == Some(true)
        || annotations
            .get(PROPAGATE_DEPENDENCIES_ANNOTATION)
            .is_some_and(|v| v == "true")
}

/// The pod spec inside a target object (`spec.template`'s value): a Pod's `spec`, a
/// CronJob's `spec.jobTemplate.spec.template.spec`, every other workload's
/// `spec.template.spec`.
pub fn pod_spec<'a>(target_kind: &str, template: &'a Value) -> Option<&'a Value> {
    let pointer = match target_kind {
        "Pod" => "/spec",
        "CronJob" => "/spec/jobTemplate/spec/template/spec",
        _ => "/spec/template/spec",
    };
    template.pointer(pointer).filter(|v| v.is_object())
}

/// Every ConfigMap, Secret, ServiceAccount and PersistentVolumeClaim a pod spec
/// references: volumes (also projected sources), `env[].valueFrom`, `envFrom`, the
/// ServiceAccount (not `default`) and `imagePullSecrets`.
pub fn references(pod_spec: &Value) -> BTreeSet<Dependency> {
    use DependencyKind::*;
    let mut out = BTreeSet::new();
    let mut add = |kind, name: Option<&Value>| {
        if let Some(n) = name.and_then(Value::as_str).filter(|n| !n.is_empty()) {
            out.insert(Dependency::new(kind, n));
        }
    };
    for v in items(pod_spec, "volumes") {
        add(ConfigMap, v.pointer("/configMap/name"));
        add(Secret, v.pointer("/secret/secretName"));
        add(
            PersistentVolumeClaim,
            v.pointer("/persistentVolumeClaim/claimName"),
        );
        for s in v
            .pointer("/projected/sources")
            .map(list)
            .unwrap_or_default()
        {
            add(ConfigMap, s.pointer("/configMap/name"));
            add(Secret, s.pointer("/secret/name"));
        }
    }
    let containers = ["initContainers", "containers", "ephemeralContainers"];
    for c in containers.iter().flat_map(|k| items(pod_spec, k)) {
        for e in items(c, "env") {
            add(ConfigMap, e.pointer("/valueFrom/configMapKeyRef/name"));
            add(Secret, e.pointer("/valueFrom/secretKeyRef/name"));
        }
        for e in items(c, "envFrom") {
            add(ConfigMap, e.pointer("/configMapRef/name"));
            add(Secret, e.pointer("/secretRef/name"));
        }
    }
    for s in items(pod_spec, "imagePullSecrets") {
        add(Secret, s.get("name"));
    }
    let sa = (pod_spec.get("serviceAccountName"))
        .or_else(|| pod_spec.get("serviceAccount"))
        .filter(|v| v.as_str() != Some(DEFAULT_SERVICE_ACCOUNT));
    add(ServiceAccount, sa);
    out
}

fn items<'a>(v: &'a Value, key: &str) -> Vec<&'a Value> {
    v.get(key).map(list).unwrap_or_default()
}

fn list(v: &Value) -> Vec<&Value> {
    v.as_array().map(|a| a.iter().collect()).unwrap_or_default()
}

/// How a workload names itself in [`OWNERS_ANNOTATION`].
pub fn owner_id(federated_kind: &str, name: &str) -> String {
    format!("{federated_kind}/{name}")
}

/// Who a member object belongs to, for dependency propagation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// A dependency copy Flotilla made.
    Dependency,
    /// A Federated&lt;Kind&gt; propagates it (`kubefed.io/managed=true`).
    Federated,
    /// Someone else's object.
    Foreign,
}

/// Who holds a member object.
pub fn holder(member: &Value) -> Holder {
    let label = |k: &str| member.pointer("/metadata/labels").and_then(|l| l.get(k));
    if label(MANAGED_LABEL).and_then(Value::as_str) == Some("true") {
        Holder::Federated
    } else if label(DEPENDENCY_LABEL).and_then(Value::as_str) == Some("true") {
        Holder::Dependency
    } else {
        Holder::Foreign
    }
}

/// The workloads a member copy is kept for.
pub fn owners(member: &Value) -> BTreeSet<String> {
    (member.pointer("/metadata/annotations"))
        .and_then(|a| a.get(OWNERS_ANNOTATION))
        .and_then(Value::as_str)
        .map(|s| {
            s.split(',')
                .filter(|o| !o.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The hash of what a copy of `host` carries: the kind's content and the host's labels.
pub fn copy_hash(kind: DependencyKind, host: &Value) -> String {
    let labels = host.pointer("/metadata/labels").cloned();
    content_hash(&json!({"content": kind.content(host), "labels": labels}))
}

/// What to do in a member so that it holds `host`'s copy for `owner`.
#[derive(Clone, Debug, PartialEq)]
pub enum EnsureOp {
    /// The copy is there, current, and names the owner.
    Nothing,
    /// Create this object.
    Create(Value),
    /// Replace the member object with this one (it carries the read resourceVersion).
    Replace(Value),
    /// The member object is not Flotilla's dependency copy: left alone.
    Refuse(Holder),
}

/// The operation that makes a member hold `host`'s copy for `owner`; `existing`: the
/// member object of that name, if any.
pub fn ensure_op(
    kind: DependencyKind,
    host: &Value,
    existing: Option<&Value>,
    owner: &str,
) -> EnsureOp {
    let hash = copy_hash(kind, host);
    let Some(existing) = existing else {
        let owners = BTreeSet::from([owner.to_string()]);
        let base = json!({
            "apiVersion": "v1",
            "kind": kind.as_str(),
            "metadata": {
                "name": host.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
                "namespace": host.pointer("/metadata/namespace").cloned().unwrap_or(Value::Null),
            },
        });
        return EnsureOp::Create(copy(kind, host, base, &owners, &hash, true));
    };
    match holder(existing) {
        Holder::Dependency => {}
        other => return EnsureOp::Refuse(other),
    }
    let mut owners = owners(existing);
    let had_owner = !owners.insert(owner.to_string());
    let current = existing
        .pointer(&format!(
            "/metadata/annotations/{}",
            escape(DEPENDENCY_HASH_ANNOTATION)
        ))
        .and_then(Value::as_str);
    if had_owner && current == Some(hash.as_str()) {
        return EnsureOp::Nothing;
    }
    EnsureOp::Replace(copy(kind, host, existing.clone(), &owners, &hash, false))
}

/// `base` with `host`'s content, labels and the dependency metadata. A PVC's spec is
/// immutable but for its requests, so only those are replaced in an existing claim.
fn copy(
    kind: DependencyKind,
    host: &Value,
    mut base: Value,
    owners: &BTreeSet<String>,
    hash: &str,
    create: bool,
) -> Value {
    let content = kind.content(host);
    let Some(obj) = base.as_object_mut() else {
        return base;
    };
    for k in [
        "data",
        "binaryData",
        "immutable",
        "imagePullSecrets",
        "automountServiceAccountToken",
    ] {
        obj.remove(k);
    }
    for (k, v) in content {
        if k == "spec" && !create {
            let requests = v.pointer("/resources/requests").cloned();
            if let (Some(r), Some(spec)) = (requests, obj.get_mut("spec")) {
                spec["resources"]["requests"] = r;
            }
            continue;
        }
        obj.insert(k, v);
    }
    let mut labels = host
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or(json!({}));
    labels[DEPENDENCY_LABEL] = json!("true");
    let meta = obj.entry("metadata").or_insert(json!({}));
    meta["labels"] = labels;
    if !meta.get("annotations").is_some_and(Value::is_object) {
        meta["annotations"] = json!({});
    }
    let owners: Vec<&str> = owners.iter().map(String::as_str).collect();
    meta["annotations"][OWNERS_ANNOTATION] = json!(owners.join(","));
    meta["annotations"][DEPENDENCY_HASH_ANNOTATION] = json!(hash);
    base
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// What to do in a member so that it no longer holds a copy for `owner`.
#[derive(Clone, Debug, PartialEq)]
pub enum ReleaseOp {
    /// Nothing of the owner's is there (or the object is not a dependency copy).
    Nothing,
    /// The owner was the last: delete, on condition that the object is still this one.
    Delete {
        /// The read object's UID.
        uid: Option<String>,
        /// The read object's resourceVersion.
        resource_version: Option<String>,
    },
    /// Others still need it: replace it with the owner left out of the annotation.
    Replace(Value),
}

/// The operation that lets `owner` go of a member object (`existing`).
pub fn release_op(existing: Option<&Value>, owner: &str) -> ReleaseOp {
    let Some(existing) = existing.filter(|e| holder(e) == Holder::Dependency) else {
        return ReleaseOp::Nothing;
    };
    let mut owners = owners(existing);
    let had = owners.remove(owner);
    if owners.is_empty() {
        let meta = |k: &str| {
            existing
                .pointer(&format!("/metadata/{k}"))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        return ReleaseOp::Delete {
            uid: meta("uid"),
            resource_version: meta("resourceVersion"),
        };
    }
    if !had {
        return ReleaseOp::Nothing;
    }
    let mut next = existing.clone();
    let owners: Vec<&str> = owners.iter().map(String::as_str).collect();
    next["metadata"]["annotations"][OWNERS_ANNOTATION] = json!(owners.join(","));
    ReleaseOp::Replace(next)
}

#[cfg(test)]
#[path = "dependencies_tests.rs"]
mod tests;
