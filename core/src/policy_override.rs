//! Override policies → per-cluster overrides. The overriders of every applicable policy
//! (cluster-scoped ones first, then namespaced ones, each by name; within a policy its
//! rules in order; within a rule images, labels, annotations, then plaintext) are applied
//! to the object the sync controller would build for the cluster, and the difference is
//! written as JSON patch operations: a Federated&lt;Kind&gt;'s `spec.overrides` entry.
//! So what a policy changes is visible on the Federated object, and the sync controller's
//! one override path applies it. Pure.

use std::collections::BTreeMap;

use json_patch::PatchOperation;
use serde_json::{Map, Value};

use crate::overrides;
use crate::policy_select::{ObjectView, PolicyScope, selector_matches};
use flotilla_api::federated::{ClusterOverride, OverrideOp};
use flotilla_api::policy::{
    ClusterTarget, ImageComponent, ImageOverrider, MapOverrider, OverrideRule, ResourceSelector,
};
use flotilla_api::selector::matches_selector;

/// One override policy as the computation sees it.
#[derive(Debug, Clone, Copy)]
pub struct OverrideSource<'a> {
    /// Scope of the policy.
    pub scope: PolicyScope,
    /// Its namespace (`None` for a ClusterOverridePolicy).
    pub namespace: Option<&'a str>,
    /// Its name.
    pub name: &'a str,
    /// `spec.resourceSelectors` (empty: every object within reach).
    pub selectors: &'a [ResourceSelector],
    /// `spec.overrideRules`.
    pub rules: &'a [OverrideRule],
}

impl OverrideSource<'_> {
    /// `Kind/namespace/name` or `Kind/name`, for messages.
    pub fn display(&self) -> String {
        match (self.scope, self.namespace) {
            (PolicyScope::Namespaced, Some(ns)) => format!("OverridePolicy {ns}/{}", self.name),
            _ => format!("ClusterOverridePolicy {}", self.name),
        }
    }
}

/// A member cluster as an override target sees it.
#[derive(Debug, Clone, Copy)]
pub struct ClusterView<'a> {
    /// KubeFedCluster name.
    pub name: &'a str,
    /// KubeFedCluster labels.
    pub labels: &'a BTreeMap<String, String>,
}

/// An override that cannot be applied to an object in a cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{policy}: overrideRules[{rule}] in cluster {cluster:?}: {message}")]
pub struct OverriderError {
    /// The policy, as [`OverrideSource::display`] writes it.
    pub policy: String,
    /// Index of the rule.
    pub rule: usize,
    /// The cluster.
    pub cluster: String,
    /// What is wrong.
    pub message: String,
}

/// The override policies that apply to `obj`, in the order they are applied: cluster-scoped
/// first, then namespaced, each by name.
pub fn applicable<'a>(
    policies: &[OverrideSource<'a>],
    obj: &ObjectView<'_>,
) -> Vec<OverrideSource<'a>> {
    let mut out: Vec<_> = policies
        .iter()
        .filter(|p| applies(p, obj))
        .copied()
        .collect();
    out.sort_by(|a, b| {
        b.scope
            .cmp(&a.scope)
            .then(a.namespace.cmp(&b.namespace))
            .then(a.name.cmp(b.name))
    });
    out
}

fn applies(p: &OverrideSource<'_>, obj: &ObjectView<'_>) -> bool {
    if p.selectors.is_empty() {
        return match p.scope {
            PolicyScope::Cluster => true,
            PolicyScope::Namespaced => obj.namespace.is_some() && obj.namespace == p.namespace,
        };
    }
    p.selectors
        .iter()
        .any(|s| selector_matches(p.scope, p.namespace, s, obj).is_some())
}

/// Whether a rule's target selects `cluster` (no target: every cluster). A malformed
/// label selector selects nothing and is reported by [`cluster_overrides`].
fn targets(target: Option<&ClusterTarget>, cluster: &ClusterView<'_>) -> Result<bool, String> {
    let Some(t) = target else { return Ok(true) };
    if t.cluster_names.iter().any(|n| n == cluster.name) {
        return Ok(true);
    }
    match &t.label_selector {
        Some(sel) => matches_selector(sel, cluster.labels).map_err(|e| e.to_string()),
        None => Ok(false),
    }
}

/// The overrides for `cluster`: `base` is the object the sync controller builds before
/// overrides (`desired::compute` without overrides); the result, applied to it, gives the
/// object with every applicable policy's overriders.
pub fn cluster_overrides(
    base: &Value,
    policies: &[OverrideSource<'_>],
    cluster: &ClusterView<'_>,
) -> Result<Vec<ClusterOverride>, OverriderError> {
    let mut work = base.clone();
    for p in policies {
        for (rule, r) in p.rules.iter().enumerate() {
            let fail = |message: String| OverriderError {
                policy: p.display(),
                rule,
                cluster: cluster.name.into(),
                message,
            };
            if !targets(r.target_cluster.as_ref(), cluster).map_err(fail)? {
                continue;
            }
            apply_rule(&mut work, r, cluster.name).map_err(fail)?;
        }
    }
    Ok(json_patch::diff(base, &work)
        .0
        .into_iter()
        .filter_map(to_override)
        .collect())
}

fn to_override(op: PatchOperation) -> Option<ClusterOverride> {
    let (op, path, value) = match op {
        PatchOperation::Add(a) => (OverrideOp::Add, a.path, Some(a.value)),
        PatchOperation::Remove(r) => (OverrideOp::Remove, r.path, None),
        PatchOperation::Replace(r) => (OverrideOp::Replace, r.path, Some(r.value)),
        // `diff` writes only add, remove and replace.
        _ => return None,
    };
    Some(ClusterOverride {
        op: Some(op),
        path: path.to_string(),
        value,
    })
}

fn apply_rule(work: &mut Value, rule: &OverrideRule, cluster: &str) -> Result<(), String> {
    let o = &rule.overriders;
    for img in &o.image_overrider {
        apply_image(work, img)?;
    }
    for m in &o.labels_overrider {
        apply_map(work, "labels", m);
    }
    for m in &o.annotations_overrider {
        apply_map(work, "annotations", m);
    }
    let ops: Vec<ClusterOverride> = o
        .plaintext
        .iter()
        .map(|p| ClusterOverride {
            op: p.operator,
            path: p.path.clone(),
            value: p.value.clone(),
        })
        .collect();
    // One operation at a time: the sync controller's override check refuses the same path
    // twice in one list, which two plaintext entries of one rule may well write.
    for op in ops {
        overrides::apply(work, cluster, std::slice::from_ref(&op)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn apply_map(work: &mut Value, field: &str, m: &MapOverrider) {
    let Some(meta) = work.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let entry = meta
        .entry(field.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(map) = entry.as_object_mut() else {
        return;
    };
    for (k, v) in &m.value {
        match m.operator.unwrap_or_default() {
            OverrideOp::Remove => {
                map.remove(k);
            }
            OverrideOp::Add | OverrideOp::Replace => {
                map.insert(k.clone(), Value::String(v.clone()));
            }
        }
    }
    if map.is_empty() && field == "annotations" {
        meta.remove(field);
    }
}

/// Where a kind keeps its pod spec, as a JSON pointer.
fn pod_spec_pointer(kind: &str) -> Option<&'static str> {
    match kind {
        "Pod" => Some("/spec"),
        "Deployment"
        | "ReplicaSet"
        | "StatefulSet"
        | "DaemonSet"
        | "Job"
        | "ReplicationController" => Some("/spec/template/spec"),
        "CronJob" => Some("/spec/jobTemplate/spec/template/spec"),
        _ => None,
    }
}

/// The JSON pointers of the images an image overrider changes.
fn image_pointers(work: &Value, img: &ImageOverrider) -> Result<Vec<String>, String> {
    if let Some(path) = &img.path {
        let pointer = crate::override_path::to_pointer(path).map_err(|e| e.to_string())?;
        return match work.pointer(&pointer) {
            Some(Value::String(_)) => Ok(vec![pointer]),
            _ => Err(format!(
                "imageOverrider path {path:?} is not an image string in the object"
            )),
        };
    }
    let kind = work.get("kind").and_then(Value::as_str).unwrap_or_default();
    let Some(spec) = pod_spec_pointer(kind) else {
        return Err(format!(
            "imageOverrider without a path needs a pod template, and a {kind} has none"
        ));
    };
    let mut out = Vec::new();
    for list in ["initContainers", "containers"] {
        let at = format!("{spec}/{list}");
        if let Some(Value::Array(cs)) = work.pointer(&at) {
            for (i, c) in cs.iter().enumerate() {
                if c.get("image").is_some_and(Value::is_string) {
                    out.push(format!("{at}/{i}/image"));
                }
            }
        }
    }
    Ok(out)
}

fn apply_image(work: &mut Value, img: &ImageOverrider) -> Result<(), String> {
    for pointer in image_pointers(work, img)? {
        if let Some(Value::String(image)) = work.pointer_mut(&pointer) {
            *image = override_image(image, img)?;
        }
    }
    Ok(())
}

/// An image reference split into `[registry/]repository[:tag][@digest]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageRef {
    /// The registry host, if the reference names one.
    pub registry: Option<String>,
    /// The repository path.
    pub repository: String,
    /// The tag.
    pub tag: Option<String>,
    /// The digest, with its algorithm (`sha256:…`).
    pub digest: Option<String>,
}

impl ImageRef {
    /// Parses a reference as container runtimes read it: the first path component is a
    /// registry when it has a `.` or a `:` or is `localhost`.
    pub fn parse(image: &str) -> ImageRef {
        let (rest, digest) = match image.split_once('@') {
            Some((r, d)) => (r, Some(d.to_string())),
            None => (image, None),
        };
        let (registry, path) = match rest.split_once('/') {
            Some((first, tail))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (Some(first.to_string()), tail)
            }
            _ => (None, rest),
        };
        let last_slash = path.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match path[last_slash..].rfind(':') {
            Some(i) => (
                path[..last_slash + i].to_string(),
                Some(path[last_slash + i + 1..].to_string()),
            ),
            None => (path.to_string(), None),
        };
        ImageRef {
            registry,
            repository,
            tag,
            digest,
        }
    }
}

impl std::fmt::Display for ImageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(r) = &self.registry {
            write!(f, "{r}/")?;
        }
        write!(f, "{}", self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// One image overrider applied to one image reference.
pub fn override_image(image: &str, img: &ImageOverrider) -> Result<String, String> {
    let mut r = ImageRef::parse(image);
    let op = img.operator.unwrap_or_default();
    let value = || {
        img.value.clone().filter(|v| !v.is_empty()).ok_or_else(|| {
            format!(
                "imageOverrider {:?} {:?} needs a value",
                overrides::op_name(Some(op)),
                img.component
            )
        })
    };
    let slot = match img.component {
        ImageComponent::Registry => &mut r.registry,
        ImageComponent::Tag => &mut r.tag,
        ImageComponent::Repository => {
            if op == OverrideOp::Remove {
                return Err("imageOverrider cannot remove an image's repository".into());
            }
            r.repository = value()?;
            return Ok(r.to_string());
        }
    };
    match op {
        OverrideOp::Remove => *slot = None,
        OverrideOp::Replace => *slot = Some(value()?),
        OverrideOp::Add => {
            if slot.is_none() {
                *slot = Some(value()?);
            }
        }
    }
    Ok(r.to_string())
}

#[cfg(test)]
#[path = "policy_override_tests.rs"]
mod tests;
