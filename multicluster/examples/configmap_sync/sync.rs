//! The ConfigMap sync controller: one ConfigMap of a hub cluster kept, as a copy of the same
//! name and namespace, in every cluster of a ClusterProfile set. A copy that drifts is
//! restored, a deleted one recreated, a cluster that joins gets one, an unreachable cluster
//! catches up when it returns and never holds up the others; when the source is deleted,
//! the copies are collected through cross-cluster owner references.

use std::{sync::Arc, time::Duration};

use flotilla_multicluster::{
    Action, Cache, ClusterSet, Context, Controller, DeletionPolicy, MultiClusterOwner, ObjectKey,
    WatchOptions,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::{
    Api, Resource, ResourceExt,
    api::{ObjectMeta, Patch, PatchParams},
    runtime::watcher,
};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

/// The controller's name: field manager, finalizer prefix, Events.
pub const CONTROLLER: &str = "configmap-sync";
/// The finalizer on the source.
pub const FINALIZER: &str = "configmap-sync.flotilla.io/copies";
/// Annotation on a copy: the hash of what was last applied (no write when unchanged).
pub const HASH_ANNOTATION: &str = "configmap-sync.flotilla.io/hash";
/// Label on a copy: the cluster of its source.
pub const SOURCE_LABEL: &str = "configmap-sync.flotilla.io/source-cluster";
/// How often the copies are checked even when nothing changed.
const RESYNC: Duration = Duration::from_secs(300);
/// A namespace every cluster has: its listing in a cluster that joins requests a sync.
const ALWAYS_THERE: &str = "kube-system";

/// What the reconciler reads.
pub struct Data {
    /// The hub cluster's name.
    pub hub: String,
    /// The copies in the member clusters.
    pub copies: Cache<ConfigMap>,
}

/// A reconcile failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The library failed (finalizer, owner reference, clean-up).
    #[error(transparent)]
    Library(#[from] flotilla_multicluster::Error),
    /// The source has no owner reference (no name or uid).
    #[error(transparent)]
    Owner(#[from] flotilla_multicluster::ownership::OwnerRefError),
    /// Some clusters could not be brought in line (they are retried).
    #[error("copies not written in: {0}")]
    Clusters(String),
}

/// The copy of `source` to keep in a member: data, binary data, the source's labels and
/// the owner reference; annotated with its own hash.
pub fn desired_copy(source: &ConfigMap, owner: &MultiClusterOwner, hub: &str) -> ConfigMap {
    let mut labels = source.labels().clone();
    labels.insert(SOURCE_LABEL.into(), hub.into());
    let mut copy = ConfigMap {
        metadata: ObjectMeta {
            name: source.metadata.name.clone(),
            namespace: source.metadata.namespace.clone(),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        data: source.data.clone(),
        binary_data: source.binary_data.clone(),
        immutable: None,
    };
    owner.set_on(&mut copy.metadata);
    let hash = hex::encode(Sha256::digest(
        serde_json::to_vec(&copy).unwrap_or_default(),
    ));
    copy.annotations_mut().insert(HASH_ANNOTATION.into(), hash);
    copy
}

/// Whether the member's copy differs from the desired one.
pub fn needs_apply(current: Option<&ConfigMap>, desired: &ConfigMap) -> bool {
    current.is_none_or(|c| {
        c.annotations().get(HASH_ANNOTATION) != desired.annotations().get(HASH_ANNOTATION)
            || c.data != desired.data
            || c.binary_data != desired.binary_data
    })
}

/// Brings the copy in `cluster` in line with `desired`, creating its namespace if needed.
async fn apply_copy(ctx: &Context<Data>, cluster: &str, desired: &ConfigMap) -> anyhow::Result<()> {
    let client = ctx.client_of(cluster)?;
    let params = PatchParams::apply(CONTROLLER).force();
    let ns = desired.namespace().unwrap_or_default();
    let namespace =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    Api::<Namespace>::all(client.clone())
        .patch(&ns, &params, &Patch::Apply(namespace))
        .await?;
    let mut copy = serde_json::to_value(desired)?;
    copy["apiVersion"] = "v1".into();
    copy["kind"] = "ConfigMap".into();
    Api::<ConfigMap>::namespaced(client, &ns)
        .patch(&desired.name_any(), &params, &Patch::Apply(copy))
        .await?;
    Ok(())
}

/// Reconciles the source.
pub async fn reconcile(source: Arc<ConfigMap>, ctx: Context<Data>) -> Result<Action, Error> {
    if source.meta().deletion_timestamp.is_some() {
        return Ok(ctx
            .finalize(source.as_ref(), DeletionPolicy::Background)
            .await?);
    }
    ctx.ensure_finalizer(source.as_ref()).await?;
    let hub = ctx.data().hub.clone();
    let desired = desired_copy(&source, &ctx.owner_ref(source.as_ref())?, &hub);
    let (ns, name) = (desired.namespace(), desired.name_any());
    let mut failed = Vec::new();
    for cluster in ctx.clusters().ready().into_iter().filter(|c| c.name != hub) {
        let current = ctx.data().copies.get(&cluster.name, ns.as_deref(), &name);
        if !needs_apply(current.as_deref(), &desired) {
            continue;
        }
        match apply_copy(&ctx, &cluster.name, &desired).await {
            Ok(()) => info!(cluster = %cluster.name, copy = %name, "copy written"),
            Err(e) => {
                warn!(cluster = %cluster.name, error = %e, "writing the copy failed");
                failed.push(cluster.name);
            }
        }
    }
    if !failed.is_empty() {
        return Err(Error::Clusters(failed.join(", ")));
    }
    Ok(Action::requeue(RESYNC))
}

/// On error: back off (the clusters that succeeded are not written again: their copies
/// match).
pub fn error_policy(_: Arc<ConfigMap>, _: &Error, _: &Context<Data>) -> Action {
    Action::backoff()
}

/// The controller for ConfigMap `namespace/name` of cluster `hub`, copied into every other
/// cluster of `set`.
pub fn controller(
    set: ClusterSet,
    hub: &str,
    namespace: &str,
    name: &str,
) -> (Controller<ConfigMap>, Cache<ConfigMap>) {
    let only_source = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let primary = WatchOptions::all()
        .in_cluster(hub)
        .in_namespace(namespace)
        .with_config(only_source);
    let mut controller =
        Controller::<ConfigMap>::new(CONTROLLER, set, primary).finalizer(FINALIZER);
    let copies = controller.owns::<ConfigMap>(
        (),
        WatchOptions::all()
            .except_cluster(hub)
            .in_namespace(namespace),
    );
    let source = ObjectKey {
        cluster: hub.to_owned(),
        namespace: Some(namespace.to_owned()),
        name: name.to_owned(),
    };
    let marker = watcher::Config::default().fields(&format!("metadata.name={ALWAYS_THERE}"));
    // A cluster that joins lists its namespaces: that requests the source's reconcile.
    controller.watches::<Namespace, _>(
        (),
        WatchOptions::all().except_cluster(hub).with_config(marker),
        move |_, _| vec![source.clone()],
    );
    (controller, copies)
}

/// Runs the controller until the future is dropped.
pub async fn run(set: ClusterSet, hub: &str, namespace: &str, name: &str) {
    let (controller, copies) = controller(set, hub, namespace, name);
    let data = Arc::new(Data {
        hub: hub.to_owned(),
        copies,
    });
    controller.run(reconcile, error_policy, data).await;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn source(data: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("shared".into()),
                namespace: Some("apps".into()),
                uid: Some("u1".into()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([("k".to_string(), data.to_string())])),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_copy_is_written_only_when_it_differs() {
        let owner = MultiClusterOwner::of("hub", &source("1"), &()).expect("an owner");
        let desired = desired_copy(&source("1"), &owner, "hub");
        assert!(needs_apply(None, &desired));
        assert!(!needs_apply(Some(&desired), &desired));
        let mut drifted = desired.clone();
        drifted.data = Some(BTreeMap::from([("k".to_string(), "edited".to_string())]));
        assert!(needs_apply(Some(&drifted), &desired));
        let changed = desired_copy(&source("2"), &owner, "hub");
        assert!(needs_apply(Some(&desired), &changed));
    }

    #[test]
    fn a_copy_names_its_source_as_owner_and_keeps_name_and_namespace() {
        let owner = MultiClusterOwner::of("hub", &source("1"), &()).expect("an owner");
        let copy = desired_copy(&source("1"), &owner, "hub");
        assert_eq!(
            (copy.namespace().as_deref(), copy.name_any().as_str()),
            (Some("apps"), "shared")
        );
        let named = flotilla_multicluster::ownership::owner_of(&copy).expect("a valid reference");
        assert_eq!(named.map(|o| o.uid), Some("u1".into()));
        assert_eq!(
            copy.labels().get(SOURCE_LABEL).map(String::as_str),
            Some("hub")
        );
    }
}
