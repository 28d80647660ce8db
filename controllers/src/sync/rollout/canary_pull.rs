//! The canary Deployments of Pull clusters. The host cannot write them in the member, so
//! each is carried in a side bundle of its own ([`SideWorks`], type label
//! `<plural>.canary.<group>.flotilla.io`, one bundle per namespace and Pull cluster, the
//! agent reporting each member object's status), read back as the stable Deployments of
//! Pull clusters are — the manifest with the agent's status feedback and generation, on
//! the content it applied ([`crate::sync::pull::observed_of`]) — and dropped from the
//! bundle when the canary ends, its cluster leaves the placement or the federated object is
//! deleted (the agent prunes it). No owner reference: the stable Deployment's UID is the
//! member's, which the host never reads; the bundle entry is what ties the two.

use std::sync::Arc;

use flotilla_api::work::{ManifestConfig, Work, identify};
use kube::{Client, core::ApiResource};
use serde_json::Value;

use crate::{
    sync::{
        Key,
        bundles::{Change, Entry},
        plan::Observed,
        pull::observed_of,
        side_works::{SideWorks, side_resource, sources},
    },
    workqueue::WorkQueue,
};

/// The canary Deployments of one Deployment type in every Pull cluster.
pub(crate) struct PullCanaries {
    side: SideWorks,
}

impl PullCanaries {
    /// Canaries of `target`; a change of one requeues its federated object in `queue`.
    pub(crate) fn new(host: Client, target: &ApiResource, queue: Arc<WorkQueue<Key>>) -> Self {
        let qualifier = match target.group.as_str() {
            "" => "canary".to_owned(),
            group => format!("canary.{group}"),
        };
        let side = side_resource(&qualifier, &target.kind, &target.plural);
        let requeue = Arc::new(move |w: &Work| sources(w).for_each(|k| queue.add(k)));
        PullCanaries {
            side: SideWorks::new(host, side, true, requeue),
        }
    }

    /// Whether the canaries can be read and written (their cache has listed).
    pub(crate) async fn ready(&self) -> bool {
        self.side.ready().await.is_some()
    }

    /// The canary of `key` in `cluster` as the agent last reported it.
    pub(crate) fn observe(&self, cluster: &str, key: &Key) -> Observed {
        match self.side.find(cluster, key) {
            Some((work, ordinal)) => Observed::Present(observed_of(&work, ordinal)),
            None => Observed::Absent,
        }
    }

    /// Carries `canary` to `cluster` for `key` (`None`: the canary leaves it).
    pub(crate) async fn set(&self, cluster: &str, key: &Key, canary: Option<Value>) {
        let Some(bundler) = self.side.ready().await else {
            return;
        };
        let change = match canary {
            Some(manifest) => Change::Upsert(Box::new(entry(key, manifest))),
            None => Change::Remove,
        };
        bundler.change(cluster, key, change, None);
    }

    /// The federated object leaves `cluster`: so does its canary, if it has one there.
    pub(crate) async fn forget(&self, cluster: &str, key: &Key) {
        if self.ready().await && self.side.find(cluster, key).is_some() {
            self.set(cluster, key, None).await;
        }
    }
}

/// The canary's entry in its bundle: its source is the federated object.
fn entry(key: &Key, manifest: Value) -> Entry {
    Entry {
        config: ManifestConfig {
            identifier: identify(0, &manifest),
            source_namespace: key.0.clone(),
            source_name: key.1.clone(),
            ..ManifestConfig::default()
        },
        manifest,
    }
}
