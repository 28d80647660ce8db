//! The simulated nodes of one cluster, built without I/O: their names, the Node object with
//! a capacity the scheduler can bind pods to, its Ready status, and the heartbeat Lease the
//! node lifecycle controller watches (a node whose Lease is not renewed turns NotReady
//! after 40 s and its pods get evicted).

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::pods::HOST_IP;

/// Namespace of the node heartbeat Leases (created by the apiserver itself).
pub(crate) const LEASE_NAMESPACE: &str = "kube-node-lease";
/// Label on every simulated node.
pub(crate) const SIMULATED_LABEL: &str = "flotilla.io/simulated-node";
/// How long a node Lease is valid; the kubelet's default.
const LEASE_SECONDS: i32 = 40;

/// The node names of cluster `cluster`: `<cluster>-node1` … `<cluster>-node<count>`.
pub(crate) fn names(cluster: &str, count: usize) -> Vec<String> {
    (1..=count).map(|i| format!("{cluster}-node{i}")).collect()
}

/// The Node object (metadata and spec; the status is written through its subresource).
pub(crate) fn node(name: &str) -> Node {
    let labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), name.to_owned()),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
        (SIMULATED_LABEL.to_owned(), "true".to_owned()),
    ]);
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ..Node::default()
    }
}

/// What one simulated node offers the scheduler: its capacity, all of it allocatable.
/// Quantities in Kubernetes' notation (`"2"`, `"500m"`, `"4Gi"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCapacity {
    /// CPUs (default `"8"`).
    pub cpu: String,
    /// Memory (default `"16Gi"`).
    pub memory: String,
    /// Pods (default `"110"`, a kubelet's default).
    pub pods: String,
}

impl Default for NodeCapacity {
    fn default() -> Self {
        NodeCapacity {
            cpu: "8".to_owned(),
            memory: "16Gi".to_owned(),
            pods: "110".to_owned(),
        }
    }
}

/// A Ready status offering `capacity`, all of it allocatable.
pub(crate) fn ready_status(name: &str, capacity: &NodeCapacity, now: Timestamp) -> NodeStatus {
    let resources = BTreeMap::from([
        ("cpu".to_owned(), Quantity(capacity.cpu.clone())),
        ("memory".to_owned(), Quantity(capacity.memory.clone())),
        ("pods".to_owned(), Quantity(capacity.pods.clone())),
        ("ephemeral-storage".to_owned(), Quantity("100Gi".to_owned())),
    ]);
    let condition = |type_: &str, status: &str, reason: &str| NodeCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some("simulated by flotilla-localenv: no containers run".to_owned()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    };
    NodeStatus {
        capacity: Some(resources.clone()),
        allocatable: Some(resources),
        conditions: Some(vec![
            condition("Ready", "True", "KubeletReady"),
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID"),
        ]),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".to_owned(),
                address: HOST_IP.to_owned(),
            },
            NodeAddress {
                type_: "Hostname".to_owned(),
                address: name.to_owned(),
            },
        ]),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".to_owned(),
            operating_system: "linux".to_owned(),
            kubelet_version: crate::KUBE_VERSION.to_owned(),
            kube_proxy_version: crate::KUBE_VERSION.to_owned(),
            container_runtime_version: "simulated://0".to_owned(),
            ..NodeSystemInfo::default()
        }),
        ..NodeStatus::default()
    }
}

/// Whether a node must be reported Ready again: its `Ready` condition is not `True`. The
/// node lifecycle controller sets it `Unknown` after a heartbeat gap longer than the Lease
/// (the apiserver or etcd down, a loaded machine), and only a kubelet sets it back — as a
/// real kubelet does on its next status update. Until then the node is tainted unreachable:
/// no pod is scheduled there and its pods are evicted.
pub(crate) fn needs_ready_report(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    ready.is_none_or(|c| c.status != "True")
}

/// The node's heartbeat Lease, renewed at `now`.
pub(crate) fn lease(name: &str, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(LEASE_NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.to_owned()),
            lease_duration_seconds: Some(LEASE_SECONDS),
            renew_time: Some(MicroTime(now)),
            ..LeaseSpec::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_named_after_their_cluster() {
        assert_eq!(
            names("member1", 2),
            vec!["member1-node1".to_string(), "member1-node2".to_string()]
        );
    }

    #[test]
    fn a_node_is_ready_with_room_for_pods() {
        let status = ready_status(
            "member1-node1",
            &NodeCapacity::default(),
            Timestamp::UNIX_EPOCH,
        );
        let ready = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .expect("a Ready condition");
        assert_eq!(ready.status, "True");
        let pods = status.allocatable.as_ref().and_then(|a| a.get("pods"));
        assert_eq!(pods, Some(&Quantity("110".to_owned())));
    }

    #[test]
    fn a_node_offers_the_capacity_it_is_given() {
        let small = NodeCapacity {
            cpu: "2".to_owned(),
            memory: "1Gi".to_owned(),
            pods: "10".to_owned(),
        };
        let status = ready_status("member1-node1", &small, Timestamp::UNIX_EPOCH);
        let allocatable = status.allocatable.unwrap_or_default();
        assert_eq!(allocatable.get("cpu"), Some(&Quantity("2".to_owned())));
        assert_eq!(allocatable.get("memory"), Some(&Quantity("1Gi".to_owned())));
        assert_eq!(allocatable.get("pods"), Some(&Quantity("10".to_owned())));
    }

    #[test]
    fn a_node_marked_unknown_or_without_a_ready_condition_is_reported_ready_again() {
        let mut n = node("member1-node1");
        assert!(needs_ready_report(&n), "no status");
        n.status = Some(ready_status(
            "member1-node1",
            &NodeCapacity::default(),
            Timestamp::UNIX_EPOCH,
        ));
        assert!(!needs_ready_report(&n), "Ready");
        let conditions = n.status.as_mut().and_then(|s| s.conditions.as_mut());
        for c in conditions.into_iter().flatten() {
            c.status = "Unknown".to_owned();
            c.reason = Some("NodeStatusUnknown".to_owned());
        }
        assert!(
            needs_ready_report(&n),
            "marked Unknown by the node lifecycle controller"
        );
    }

    #[test]
    fn a_lease_is_held_by_its_node_in_the_node_lease_namespace() {
        let l = lease("member1-node1", Timestamp::UNIX_EPOCH);
        assert_eq!(l.metadata.namespace.as_deref(), Some(LEASE_NAMESPACE));
        let spec = l.spec.expect("a spec");
        assert_eq!(spec.holder_identity.as_deref(), Some("member1-node1"));
        assert!(spec.renew_time.is_some());
    }
}
