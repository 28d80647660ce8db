//! A simulated kubelet for one local cluster: it registers a few Ready Nodes, renews their
//! heartbeat Leases (and reports a node Ready again once the node lifecycle controller has
//! marked it otherwise, after a heartbeat gap), reports every pod the scheduler binds to
//! them as Running (and Ready, unless an image is meant to stay unready) with a pod IP, and
//! finishes the deletion of pods being deleted. **No container runs**: pods only look like
//! running pods, so Deployments, ReplicaSets, StatefulSets, DaemonSets and Jobs report real
//! status.
//!
//! This module is the I/O: watches (kube-runtime's watcher + reflector) and writes. What
//! to do with a pod is decided in [`pods`], node objects are built in [`nodes`], pod IPs
//! come from [`ips`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt as _};
use serde_json::json;
use tokio::task::JoinHandle;
use tracing::{debug, info};

use ips::IpPool;
use pods::{PodAction, Written};

mod ips;
mod nodes;
mod pods;

pub use nodes::NodeCapacity;

/// Field manager of the simulated kubelet's writes.
const MANAGER: &str = "flotilla-simulated-kubelet";
/// How often Leases are renewed and every known pod is looked at again (which also retries
/// a write that failed).
const TICK: Duration = Duration::from_secs(10);

/// How the simulated kubelets of an environment behave.
#[derive(Clone, Debug)]
pub struct PodSimulation {
    /// Nodes registered per member cluster (default 3).
    pub nodes: usize,
    /// Pods with a container whose image starts with one of these stay Running but never
    /// become Ready (default `["fail:"]`, so `image: fail:x` is an app that never gets
    /// ready), for tests of rollouts and of status aggregation.
    pub unready_image_prefixes: Vec<String>,
    /// What each node offers the scheduler (default [`NodeCapacity::default`]: 8 CPUs,
    /// 16 GiB, 110 pods: room for anything a test starts).
    pub capacity: NodeCapacity,
    /// Per member (by name, e.g. `member2`): its node count and capacity instead of
    /// [`PodSimulation::nodes`] and [`PodSimulation::capacity`], so that members differ
    /// and pods beyond a member's room stay Pending (`PodScheduled=False/Unschedulable`).
    pub members: BTreeMap<String, (usize, NodeCapacity)>,
}

impl Default for PodSimulation {
    fn default() -> Self {
        PodSimulation {
            nodes: 3,
            unready_image_prefixes: vec!["fail:".to_owned()],
            capacity: NodeCapacity::default(),
            members: BTreeMap::new(),
        }
    }
}

impl PodSimulation {
    /// These options with member `name` given `nodes` nodes of `capacity` each.
    pub fn with_member(mut self, name: &str, nodes: usize, capacity: NodeCapacity) -> Self {
        self.members.insert(name.to_owned(), (nodes, capacity));
        self
    }

    /// The node count and capacity of member `name`.
    fn of(&self, name: &str) -> (usize, NodeCapacity) {
        self.members
            .get(name)
            .cloned()
            .unwrap_or_else(|| (self.nodes, self.capacity.clone()))
    }
}

/// Starts the simulated kubelet of the cluster `name` (at `index` in the environment) on
/// the current runtime. It runs until the handle is aborted, and rides out an apiserver
/// that is stopped for a while (its watch backs off and resumes).
pub(crate) fn spawn(
    client: Client,
    name: String,
    index: usize,
    options: PodSimulation,
) -> JoinHandle<()> {
    let (count, capacity) = options.of(&name);
    let kubelet = Kubelet {
        nodes: nodes::names(&name, count),
        capacity,
        client,
        ips: IpPool::new(index),
        unready: options.unready_image_prefixes,
        registered: false,
        cluster: name,
        written: Written::default(),
    };
    tokio::spawn(kubelet.run())
}

struct Kubelet {
    cluster: String,
    client: Client,
    nodes: Vec<String>,
    capacity: NodeCapacity,
    unready: Vec<String>,
    ips: IpPool,
    registered: bool,
    written: Written,
}

impl Kubelet {
    async fn run(mut self) {
        let all: Api<Pod> = Api::all(self.client.clone());
        let (reader, writer) = reflector::store();
        let events = reflector::reflector(writer, watcher::watcher(all, Default::default()))
            .default_backoff();
        let mut events = std::pin::pin!(events);
        let mut tick = tokio::time::interval(TICK);
        // A look at every pod that overran the period is not followed by another at once.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let node_set: BTreeSet<String> = self.nodes.iter().cloned().collect();
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(Event::Apply(pod) | Event::InitApply(pod))) => {
                        self.handle(&pod, &node_set).await;
                    }
                    Some(Ok(Event::Delete(pod))) => {
                        if let Some(ip) = pods::pod_ip(&pod) {
                            self.ips.release(ip);
                        }
                        let namespace = pod.namespace().unwrap_or_default();
                        self.written.forget(&namespace, &pod.name_any());
                    }
                    Some(Ok(Event::Init | Event::InitDone)) => {}
                    Some(Err(e)) => debug!(cluster = %self.cluster, error = %e, "pod watch failed"),
                    None => return,
                },
                _ = tick.tick() => self.heartbeat(&reader, &node_set).await,
            }
        }
    }

    /// Registers the nodes if that has not worked yet (else reports Ready again those the
    /// node lifecycle controller marked otherwise), renews their Leases and looks at every
    /// known pod again.
    async fn heartbeat(&mut self, pods: &Store<Pod>, node_set: &BTreeSet<String>) {
        if !self.registered {
            self.registered = self.register().await;
        } else {
            self.report_ready_again().await;
        }
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), nodes::LEASE_NAMESPACE);
        let pp = PatchParams::apply(MANAGER).force();
        for name in &self.nodes {
            let lease = nodes::lease(name, Timestamp::now());
            if let Err(e) = leases.patch(name, &pp, &Patch::Apply(&lease)).await {
                debug!(cluster = %self.cluster, node = %name, error = %e, "renewing the node lease failed");
            }
        }
        for pod in pods.state() {
            self.handle(&pod, node_set).await;
        }
    }

    /// Creates the nodes and reports them Ready; false when a write failed (retried on the
    /// next tick).
    async fn register(&self) -> bool {
        let api: Api<Node> = Api::all(self.client.clone());
        let pp = PatchParams::apply(MANAGER).force();
        for name in &self.nodes {
            let status =
                json!({"status": nodes::ready_status(name, &self.capacity, Timestamp::now())});
            let written = match api.patch(name, &pp, &Patch::Apply(nodes::node(name))).await {
                Ok(_) => api
                    .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .map(|_| ()),
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                debug!(cluster = %self.cluster, node = %name, error = %e, "registering the node failed");
                return false;
            }
        }
        info!(cluster = %self.cluster, nodes = self.nodes.len(), "simulated nodes registered");
        true
    }

    /// Reports Ready again every node that is not (see [`nodes::needs_ready_report`]).
    async fn report_ready_again(&self) {
        let api: Api<Node> = Api::all(self.client.clone());
        let ours = ListParams::default().labels(&format!("{}=true", nodes::SIMULATED_LABEL));
        let listed = match api.list(&ours).await {
            Ok(l) => l,
            Err(e) => {
                debug!(cluster = %self.cluster, error = %e, "listing the nodes failed");
                return;
            }
        };
        for node in listed.items.iter().filter(|n| nodes::needs_ready_report(n)) {
            let name = node.name_any();
            if !self.nodes.contains(&name) {
                continue;
            }
            let status =
                json!({"status": nodes::ready_status(&name, &self.capacity, Timestamp::now())});
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
            {
                Ok(_) => info!(cluster = %self.cluster, node = %name, "node reported Ready again"),
                Err(e) => {
                    debug!(cluster = %self.cluster, node = %name, error = %e, "reporting the node Ready failed")
                }
            }
        }
    }

    async fn handle(&mut self, pod: &Pod, node_set: &BTreeSet<String>) {
        if let Some(ip) = pods::pod_ip(pod) {
            self.ips.claim(ip);
        }
        let (name, namespace) = (pod.name_any(), pod.namespace().unwrap_or_default());
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let result = match pods::decide(pod, node_set, &self.unready) {
            PodAction::Ignore | PodAction::UpToDate => return,
            PodAction::Delete => {
                let dp = DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                };
                api.delete(&name, &dp).await.map(|_| ())
            }
            PodAction::Run { .. }
                if self
                    .written
                    .covers(&namespace, &name, pod.resource_version().as_deref()) =>
            {
                return;
            }
            PodAction::Run { ready } => {
                let (ip, fresh) = match pods::pod_ip(pod) {
                    Some(ip) => (ip.to_owned(), false),
                    None => match self.ips.allocate() {
                        Some(ip) => (ip, true),
                        None => {
                            debug!(cluster = %self.cluster, "no pod IP left");
                            return;
                        }
                    },
                };
                let status = pods::running_status(pod, &ip, ready, Timestamp::now());
                let patch = json!({"status": status});
                let written = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ());
                if fresh && written.is_err() {
                    // The pod did not get it: free for the next pod (or this one's retry).
                    self.ips.release(&ip);
                }
                if written.is_ok() {
                    let version = pod.resource_version();
                    self.written.record(&namespace, &name, version.as_deref());
                }
                written
            }
        };
        match result {
            Ok(()) => {}
            // Gone meanwhile: nothing left to do for it.
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                debug!(cluster = %self.cluster, pod = %name, %namespace, error = %e, "updating the pod failed")
            }
        }
    }
}
