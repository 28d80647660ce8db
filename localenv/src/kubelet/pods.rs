//! What the simulated kubelet does with a pod, decided without I/O: finish the deletion of
//! a pod being deleted, report a bound pod Running (Ready unless one of its images is meant
//! to stay unready), or leave it alone. Also the pod status it writes.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The node IP every simulated node reports (nothing listens there for pods).
pub(crate) const HOST_IP: &str = "127.0.0.1";

/// The simulated kubelet's answer for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PodAction {
    /// Not bound to one of this kubelet's nodes, or finished: nothing to do.
    Ignore,
    /// Being deleted: finish the deletion (grace period 0), as a kubelet does once its
    /// containers have stopped.
    Delete,
    /// Report it Running, with `ready` as its readiness.
    Run {
        /// Whether the pod and its containers are Ready.
        ready: bool,
    },
    /// Already reported as it should be.
    UpToDate,
}

/// Decides what to do with `pod`, given this kubelet's `nodes` and the image prefixes
/// whose pods stay unready.
pub(crate) fn decide(
    pod: &Pod,
    nodes: &BTreeSet<String>,
    unready_prefixes: &[String],
) -> PodAction {
    let bound_here = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some_and(|n| nodes.contains(n));
    if !bound_here {
        return PodAction::Ignore;
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return PodAction::Delete;
    }
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return PodAction::Ignore;
    }
    let ready = wants_ready(pod, unready_prefixes);
    let reported_ready = condition(pod, "Ready").map(|c| c == "True");
    let has_ip = status.and_then(|s| s.pod_ip.as_ref()).is_some();
    if phase == Some("Running") && has_ip && reported_ready == Some(ready) {
        PodAction::UpToDate
    } else {
        PodAction::Run { ready }
    }
}

/// Whether the pod should be Ready: none of its containers' images starts with one of
/// `unready_prefixes` (e.g. `fail:` keeps `image: fail:x` unready).
pub(crate) fn wants_ready(pod: &Pod, unready_prefixes: &[String]) -> bool {
    let images = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| c.image.as_deref());
    !images.into_iter().any(|image| {
        unready_prefixes
            .iter()
            .any(|p| image.starts_with(p.as_str()))
    })
}

fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

/// The pod versions this kubelet already wrote a status for, by namespace and name. The
/// store a decision reads lags behind the kubelet's own writes (it handles pods one at a
/// time and reads events between them), so without this a pod would be written again on
/// every look until its event arrives: at 1,000 pods per member every pod was written
/// about seven times, and a tick could take longer than the period.
#[derive(Debug, Default)]
pub(crate) struct Written(std::collections::HashMap<(String, String), String>);

impl Written {
    /// Whether a status was already written from exactly this version of the pod.
    pub(crate) fn covers(&self, namespace: &str, name: &str, version: Option<&str>) -> bool {
        let key = (namespace.to_owned(), name.to_owned());
        version.is_some_and(|v| self.0.get(&key).is_some_and(|w| w == v))
    }

    /// Records a status written from `version` of the pod.
    pub(crate) fn record(&mut self, namespace: &str, name: &str, version: Option<&str>) {
        if let Some(v) = version {
            self.0
                .insert((namespace.to_owned(), name.to_owned()), v.to_owned());
        }
    }

    /// Forgets a pod that is gone.
    pub(crate) fn forget(&mut self, namespace: &str, name: &str) {
        self.0.remove(&(namespace.to_owned(), name.to_owned()));
    }
}

/// The pod's IP if it already has one.
pub(crate) fn pod_ip(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.pod_ip.as_deref()
}

/// The status of a running pod: phase Running, `ip`, its conditions and one running status
/// per container, Ready as `ready` says. The start time is kept when the pod has one.
pub(crate) fn running_status(pod: &Pod, ip: &str, ready: bool, now: Timestamp) -> PodStatus {
    let now = Time(now);
    let start = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.clone())
        .unwrap_or_else(|| now.clone());
    let containers: Vec<(String, String)> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect();
    let (flag, reason, message) = if ready {
        ("True", None, None)
    } else {
        let names: Vec<&str> = containers.iter().map(|(n, _)| n.as_str()).collect();
        (
            "False",
            Some("ContainersNotReady".to_owned()),
            Some(format!(
                "containers with unready status: [{}]",
                names.join(" ")
            )),
        )
    };
    let cond = |type_: &str, status: &str, unready: bool| PodCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        last_transition_time: Some(now.clone()),
        reason: if unready { reason.clone() } else { None },
        message: if unready { message.clone() } else { None },
        ..PodCondition::default()
    };
    PodStatus {
        phase: Some("Running".to_owned()),
        host_ip: Some(HOST_IP.to_owned()),
        pod_ip: Some(ip.to_owned()),
        pod_ips: Some(vec![PodIP { ip: ip.to_owned() }]),
        start_time: Some(start.clone()),
        conditions: Some(vec![
            cond("Initialized", "True", false),
            cond("Ready", flag, !ready),
            cond("ContainersReady", flag, !ready),
            cond("PodScheduled", "True", false),
        ]),
        container_statuses: Some(
            containers
                .into_iter()
                .map(|(name, image)| ContainerStatus {
                    image_id: format!("simulated://{image}"),
                    name,
                    image,
                    ready,
                    started: Some(true),
                    restart_count: 0,
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: Some(start.clone()),
                        }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                })
                .collect(),
        ),
        ..PodStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_written_from_a_version_covers_that_version_only() {
        let mut w = Written::default();
        assert!(!w.covers("ns", "p", Some("7")));
        w.record("ns", "p", Some("7"));
        assert!(w.covers("ns", "p", Some("7")));
        assert!(!w.covers("ns", "p", Some("8")) && !w.covers("ns", "q", Some("7")));
        assert!(!w.covers("ns", "p", None));
        w.forget("ns", "p");
        assert!(!w.covers("ns", "p", Some("7")));
    }
    use serde_json::json;

    fn pod(node: Option<&str>, image: &str, status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": image}]},
            "status": status,
        }))
        .expect("a pod")
    }

    fn nodes() -> BTreeSet<String> {
        BTreeSet::from(["member1-node1".to_string()])
    }

    fn unready() -> Vec<String> {
        vec!["fail:".to_string()]
    }

    #[test]
    fn a_pod_not_bound_to_one_of_our_nodes_is_ignored() {
        let pending = pod(None, "nginx", json!({"phase": "Pending"}));
        assert_eq!(decide(&pending, &nodes(), &unready()), PodAction::Ignore);
        let elsewhere = pod(Some("other"), "nginx", json!({"phase": "Pending"}));
        assert_eq!(decide(&elsewhere, &nodes(), &unready()), PodAction::Ignore);
    }

    #[test]
    fn a_bound_pending_pod_is_run_and_ready() {
        let p = pod(Some("member1-node1"), "nginx", json!({"phase": "Pending"}));
        assert_eq!(
            decide(&p, &nodes(), &unready()),
            PodAction::Run { ready: true }
        );
    }

    #[test]
    fn a_pod_of_a_failing_image_runs_but_stays_unready() {
        let p = pod(Some("member1-node1"), "fail:x", json!({"phase": "Pending"}));
        assert_eq!(
            decide(&p, &nodes(), &unready()),
            PodAction::Run { ready: false }
        );
    }

    #[test]
    fn a_pod_already_reported_is_up_to_date() {
        let p = pod(Some("member1-node1"), "nginx", json!({"phase": "Pending"}));
        let status = running_status(&p, "10.65.0.1", true, Timestamp::UNIX_EPOCH);
        let running = Pod {
            status: Some(status),
            ..p
        };
        assert_eq!(decide(&running, &nodes(), &unready()), PodAction::UpToDate);
    }

    #[test]
    fn a_running_pod_whose_readiness_is_wrong_is_reported_again() {
        let p = pod(
            Some("member1-node1"),
            "fail:x",
            json!({"phase": "Running", "podIP": "10.65.0.1",
                   "conditions": [{"type": "Ready", "status": "True"}]}),
        );
        assert_eq!(
            decide(&p, &nodes(), &unready()),
            PodAction::Run { ready: false }
        );
    }

    #[test]
    fn a_pod_being_deleted_is_deleted_for_good() {
        let mut p = pod(Some("member1-node1"), "nginx", json!({"phase": "Running"}));
        p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert_eq!(decide(&p, &nodes(), &unready()), PodAction::Delete);
    }

    #[test]
    fn a_finished_pod_is_left_alone() {
        let p = pod(
            Some("member1-node1"),
            "nginx",
            json!({"phase": "Succeeded"}),
        );
        assert_eq!(decide(&p, &nodes(), &unready()), PodAction::Ignore);
    }

    #[test]
    fn the_running_status_carries_the_ip_and_one_running_container() {
        let p = pod(Some("member1-node1"), "nginx", json!({}));
        let s = running_status(&p, "10.65.0.7", true, Timestamp::UNIX_EPOCH);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.65.0.7"));
        let containers = s.container_statuses.expect("container statuses");
        assert_eq!(containers.len(), 1);
        assert!(containers[0].ready);
        assert!(
            containers[0]
                .state
                .as_ref()
                .is_some_and(|st| st.running.is_some())
        );
    }

    #[test]
    fn an_unready_status_says_which_containers_are_not_ready() {
        let p = pod(Some("member1-node1"), "fail:x", json!({}));
        let s = running_status(&p, "10.65.0.7", false, Timestamp::UNIX_EPOCH);
        let ready = s
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .expect("a Ready condition");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
        assert!(ready.message.as_deref().is_some_and(|m| m.contains("app")));
    }
}
