//! Objects as a Flotilla version wrote them, kept in a file and written back into fresh
//! clusters: what the upgrade test (`tests/tests/upgrade.rs`) starts a new binary on.
//!
//! A [`Fixture`] holds, per cluster, groups of objects of one resource. Capturing keeps
//! what the writer decided (metadata labels, annotations, finalizers, spec, data, status)
//! and drops what the API server assigns (uid, resourceVersion, timestamps, managedFields,
//! a Service's cluster IPs); restoring creates each object and then writes its status
//! through the status subresource, as the controller did.

use std::collections::BTreeMap;

use anyhow::{Context as _, ensure};
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Objects of one resource.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Group {
    /// API group (`""` for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name.
    pub plural: String,
    /// Whether the status is written through the status subresource after creation.
    pub status_subresource: bool,
    /// The objects, as captured.
    pub objects: Vec<Value>,
}

impl Group {
    /// The kube API resource of the group.
    pub fn api_resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&self.group, &self.version, &self.kind),
            &self.plural,
        )
    }
}

/// Objects of a federation, per cluster (`host`, `member1`, ...), in restore order.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Fixture {
    /// Where the objects come from (the commit and version that wrote them).
    pub captured_from: String,
    /// Per cluster, groups of objects in the order they are restored.
    pub clusters: BTreeMap<String, Vec<Group>>,
}

/// Metadata fields the writer decided; everything else in `metadata` is the server's.
const KEPT_METADATA: &[&str] = &[
    "name",
    "namespace",
    "labels",
    "annotations",
    "finalizers",
    "generation",
];

/// An object as its writer decided it: server-assigned fields dropped. `generation` stays
/// so that restoring can check the new object has the generation the status speaks of.
pub fn strip(object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, _| KEPT_METADATA.contains(&k.as_str()));
    }
    if out.get("kind").and_then(Value::as_str) == Some("Service")
        && let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut)
    {
        // Allocated by the member; another cluster may have given the address away.
        spec.remove("clusterIP");
        spec.remove("clusterIPs");
    }
    out
}

fn api(client: &Client, ar: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// Captures the objects of `group` (its identity fields filled in) in `namespace` (or
/// cluster-wide) matching `labels`, sorted by name.
pub async fn capture(
    client: &Client,
    mut group: Group,
    namespace: Option<&str>,
    labels: Option<&str>,
) -> anyhow::Result<Group> {
    let ar = group.api_resource();
    let mut lp = ListParams::default();
    if let Some(l) = labels {
        lp = lp.labels(l);
    }
    let mut objects = Vec::new();
    for o in api(client, &ar, namespace).list(&lp).await? {
        let mut v = serde_json::to_value(&o)?;
        v["apiVersion"] = json!(ar.api_version);
        v["kind"] = json!(ar.kind);
        let mut v = strip(&v);
        if !group.status_subresource
            && let Some(o) = v.as_object_mut()
        {
            // Written by the cluster's own controllers, never by the writer captured.
            o.remove("status");
        }
        objects.push(v);
    }
    objects.sort_by_key(|o| o["metadata"]["name"].as_str().map(str::to_string));
    group.objects = objects;
    Ok(group)
}

/// Creates every object of `group` in `client`'s cluster, then writes its status (when the
/// group has a status subresource and the object a status). Fails when a created object's
/// generation differs from the captured one (its status would speak of another spec).
pub async fn restore(client: &Client, group: &Group) -> anyhow::Result<()> {
    let ar = group.api_resource();
    for object in &group.objects {
        let name = object["metadata"]["name"].as_str().context("no name")?;
        let ns = object["metadata"]["namespace"].as_str();
        let api = api(client, &ar, ns);
        let mut body = object.clone();
        let captured_generation = body["metadata"]
            .as_object_mut()
            .and_then(|m| m.remove("generation"));
        let obj: DynamicObject = serde_json::from_value(body.clone())?;
        let created = api
            .create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating {} {name}", group.kind))?;
        if let Some(g) = captured_generation.and_then(|g| g.as_i64()) {
            ensure!(
                created.metadata.generation == Some(g),
                "{} {name}: generation {:?}, captured {g}",
                group.kind,
                created.metadata.generation
            );
        }
        let Some(status) = body.get("status").filter(|_| group.status_subresource) else {
            continue;
        };
        let mut with_status = serde_json::to_value(&created)?;
        with_status["status"] = status.clone();
        api.replace_status(
            name,
            &PostParams::default(),
            &serde_json::from_value::<DynamicObject>(with_status)?,
        )
        .await
        .with_context(|| format!("writing the status of {} {name}", group.kind))?;
    }
    Ok(())
}

/// Writes the captured status of each object of `group` onto the object of that name that
/// already exists (KubeFedClusters: created by joining, their status by the old version).
pub async fn restore_statuses(client: &Client, group: &Group) -> anyhow::Result<()> {
    let ar = group.api_resource();
    for object in &group.objects {
        let name = object["metadata"]["name"].as_str().context("no name")?;
        let api = api(client, &ar, object["metadata"]["namespace"].as_str());
        let mut live = serde_json::to_value(api.get(name).await?)?;
        live["status"] = object["status"].clone();
        api.replace_status(
            name,
            &PostParams::default(),
            &serde_json::from_value::<DynamicObject>(live)?,
        )
        .await
        .with_context(|| format!("writing the status of {} {name}", group.kind))?;
    }
    Ok(())
}

/// Points the AppliedWork records of `group` at the objects restored in this cluster: each
/// `status.appliedResources[]` entry names its object by UID, which a fresh cluster gave
/// anew to the same object (same resource, namespace and name).
pub async fn remap_applied_uids(client: &Client, group: &mut Group) -> anyhow::Result<()> {
    for object in &mut group.objects {
        let Some(applied) = object
            .pointer_mut("/status/appliedResources")
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for entry in applied {
            let field = |k: &str| entry[k].as_str().unwrap_or_default().to_string();
            let gvk = GroupVersionKind::gvk(&field("group"), &field("version"), &field("kind"));
            let ar = ApiResource::from_gvk_with_plural(&gvk, &field("resource"));
            let ns = field("namespace");
            let live = api(
                client,
                &ar,
                Some(&ns).filter(|n| !n.is_empty()).map(String::as_str),
            )
            .get(&field("name"))
            .await
            .with_context(|| format!("reading applied {} {}", field("kind"), field("name")))?;
            entry["uid"] = json!(live.metadata.uid);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripping_keeps_what_the_writer_decided_and_drops_what_the_server_assigned() {
        let live = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "creationTimestamp": "t", "managedFields": [], "generation": 1,
                "labels": {"kubefed.io/managed": "true"}, "annotations": {"a": "b"},
                "finalizers": ["f"]},
            "spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "ports": [{"port": 80}]},
            "status": {"loadBalancer": {}}
        });
        assert_eq!(
            strip(&live),
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": "ns", "generation": 1,
                    "labels": {"kubefed.io/managed": "true"}, "annotations": {"a": "b"},
                    "finalizers": ["f"]},
                "spec": {"ports": [{"port": 80}]},
                "status": {"loadBalancer": {}}
            })
        );
    }
}
