//! Member capacity as the control plane sees it: one watch of Nodes and one of Pods per
//! Ready member (the library's [`MemberWatch`], each object cut to what capacity needs —
//! no list is ever repeated), over which [`flotilla_core::capacity`] computes a member's
//! summary, the replicas of a pod template that fit it, and kubefed's capacity estimate.
//! [`publish`] writes the summaries into the KubeFedClusters' `status.resources`.
//! It decides nothing about placement: the RSP scheduler asks, and decides.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use flotilla_api::{
    FIELD_MANAGER, KubeFedCluster, core::ClusterResources, federated::LabelSelector,
    selector::matches_selector,
};
use flotilla_core::capacity::{self, Estimate};
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::multicluster::{ClusterSet, MemberEvent, MemberWatch, member_watch::WatchOptions};

/// How often [`publish`] compares the summaries with what it wrote.
const PUBLISH_PERIOD: Duration = Duration::from_secs(10);

/// The Nodes and Pods of every Ready member, cached from watches.
pub struct MemberResources {
    nodes: MemberWatch<Node>,
    pods: MemberWatch<Pod>,
}

/// Keeps of a Node what capacity reads: labels, taints, `unschedulable`, allocatable and
/// the Ready condition.
pub fn shrink_node(n: &mut Node) {
    n.metadata.annotations = None;
    if let Some(s) = n.status.as_mut() {
        s.images = None;
        s.node_info = None;
        s.addresses = None;
        s.volumes_attached = None;
        s.volumes_in_use = None;
        s.daemon_endpoints = None;
        s.capacity = None;
        if let Some(cs) = s.conditions.as_mut() {
            cs.retain(|c| c.type_ == "Ready");
        }
    }
}

/// Keeps of a Pod what capacity reads: labels, node, requests (containers, init
/// containers, overhead), phase and the `PodScheduled` condition.
pub fn shrink_pod(p: &mut Pod) {
    p.metadata.annotations = None;
    p.metadata.owner_references = None;
    if let Some(spec) = p.spec.as_mut() {
        let keep = |c: &mut k8s_openapi::api::core::v1::Container| {
            *c = k8s_openapi::api::core::v1::Container {
                name: std::mem::take(&mut c.name),
                resources: c.resources.take(),
                ..Default::default()
            }
        };
        spec.containers.iter_mut().for_each(keep);
        spec.init_containers.iter_mut().flatten().for_each(keep);
        spec.volumes = None;
        spec.tolerations = None;
        spec.affinity = None;
    }
    if let Some(s) = p.status.as_mut() {
        s.container_statuses = None;
        s.init_container_statuses = None;
        if let Some(cs) = s.conditions.as_mut() {
            cs.retain(|c| c.type_ == "PodScheduled");
        }
    }
}

impl MemberResources {
    /// Starts the watches in every Ready member of `clusters`; each change is sent to
    /// `events`.
    pub fn start(clusters: ClusterSet, events: mpsc::UnboundedSender<MemberEvent>) -> Self {
        let nodes = MemberWatch::start_with_events(
            clusters.clone(),
            (),
            WatchOptions {
                shrink: shrink_node,
                ..WatchOptions::all()
            },
            events.clone(),
        );
        let pods = MemberWatch::start_with_events(
            clusters,
            (),
            WatchOptions {
                shrink: shrink_pod,
                ..WatchOptions::all()
            },
            events,
        );
        MemberResources { nodes, pods }
    }

    fn synced(&self, cluster: &str) -> bool {
        self.nodes.is_synced(cluster) && self.pods.is_synced(cluster)
    }

    /// The summary of `cluster`; `None` until both caches are complete.
    pub fn summary(&self, cluster: &str) -> Option<ClusterResources> {
        if !self.synced(cluster) {
            return None;
        }
        let (nodes, pods) = (self.nodes.list(cluster), self.pods.list(cluster));
        Some(capacity::summary(
            nodes.iter().map(|n| &**n),
            pods.iter().map(|p| &**p),
        ))
    }

    /// The pods of `namespace` in `cluster` that `selector` matches.
    fn workload_pods(
        &self,
        cluster: &str,
        namespace: &str,
        selector: &LabelSelector,
    ) -> Vec<Arc<Pod>> {
        self.pods
            .list(cluster)
            .into_iter()
            .filter(|p| p.namespace().as_deref() == Some(namespace))
            .filter(|p| matches_selector(selector, p.labels()).unwrap_or(false))
            .collect()
    }

    /// How many replicas of `template` fit `cluster`, the workload's own pods (those of
    /// `namespace` that `selector` matches) counted as room; `None` until both caches are
    /// complete.
    pub fn available(
        &self,
        cluster: &str,
        namespace: &str,
        selector: &LabelSelector,
        template: &PodSpec,
    ) -> Option<i64> {
        if !self.synced(cluster) {
            return None;
        }
        let (nodes, pods) = (self.nodes.list(cluster), self.pods.list(cluster));
        let own = |p: &Pod| {
            p.namespace().as_deref() == Some(namespace)
                && matches_selector(selector, p.labels()).unwrap_or(false)
        };
        Some(capacity::available_replicas(
            nodes.iter().map(|n| &**n),
            pods.iter().map(|p| &**p),
            template,
            own,
        ))
    }

    /// kubefed's capacity estimate of `cluster` for the workload whose pods `selector`
    /// matches in `namespace`.
    pub fn estimate(
        &self,
        cluster: &str,
        namespace: &str,
        selector: &LabelSelector,
        now: Timestamp,
        threshold: Duration,
    ) -> Estimate {
        let pods = self.workload_pods(cluster, namespace, selector);
        capacity::estimated_capacity(pods.iter().map(|p| &**p), now, threshold)
    }
}

/// Writes every member's summary into its KubeFedCluster's `status.resources` (a merge
/// patch of that field alone), when it differs from what was last written (at first, what
/// the KubeFedCluster shows: read once per cluster and process); looks every
/// [`PUBLISH_PERIOD`]. Runs until aborted.
pub async fn publish(
    host: Client,
    namespace: String,
    clusters: ClusterSet,
    resources: Arc<MemberResources>,
) {
    let api: Api<KubeFedCluster> = Api::namespaced(host, &namespace);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let mut written: BTreeMap<String, ClusterResources> = BTreeMap::new();
    let mut tick = tokio::time::interval(PUBLISH_PERIOD);
    loop {
        tick.tick().await;
        for state in clusters.snapshot() {
            let Some(summary) = resources.summary(&state.name) else {
                continue;
            };
            if !written.contains_key(&state.name) {
                // First look in this process: what the KubeFedCluster already shows (a
                // restart, a new leader or an upgrade finding it unchanged writes nothing).
                let shown = api
                    .get_opt(&state.name)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|c| c.status.and_then(|s| s.resources).map(|r| *r));
                if let Some(shown) = shown {
                    written.insert(state.name.clone(), shown);
                }
            }
            if written.get(&state.name) == Some(&summary) {
                continue;
            }
            let patch = json!({"status": {"resources": summary}});
            match api
                .patch_status(&state.name, &params, &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    debug!(cluster = %state.name, "resource summary written");
                    written.insert(state.name.clone(), summary);
                }
                Err(e) => {
                    warn!(cluster = %state.name, error = %e, "writing the resource summary failed")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_pod_keeps_what_capacity_reads_and_nothing_else() {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": {"app": "web"}, "annotations": {"big": "x"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "nginx",
                "env": [{"name": "A", "value": "b"}],
                "resources": {"requests": {"cpu": "250m"}}}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}
        }))
        .expect("a pod");
        shrink_pod(&mut p);
        assert!(p.metadata.annotations.is_none());
        let spec = p.spec.as_ref().expect("a spec");
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert!(spec.containers[0].image.is_none() && spec.containers[0].env.is_none());
        let req = spec.containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref());
        assert!(req.is_some_and(|r| r.contains_key("cpu")));
        let conds = p.status.as_ref().and_then(|s| s.conditions.as_ref());
        assert_eq!(conds.map(Vec::len), Some(1));
        assert_eq!(capacity::summary([], [&p]).requested["cpu"], "250m");
    }
}
