use super::*;
use serde_json::json;

fn node(name: &str, cpu: &str, memory: &str, extra: serde_json::Value) -> Node {
    let mut n = json!({
        "metadata": {"name": name, "labels": {"disk": "ssd"}},
        "spec": {},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    });
    json_patch::merge(&mut n, &extra);
    serde_json::from_value(n).expect("a node")
}

fn pod(name: &str, node: Option<&str>, cpu: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "demo", "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}]},
        "status": {"phase": if node.is_some() { "Running" } else { "Pending" }}
    }))
    .expect("a pod")
}

fn template(cpu: &str, extra: serde_json::Value) -> PodSpec {
    let mut t = json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]});
    json_patch::merge(&mut t, &extra);
    serde_json::from_value(t).expect("a pod spec")
}

fn unschedulable(name: &str, since: Timestamp) -> Pod {
    let mut p = pod(name, None, "500m", json!({"app": "web"}));
    p.status = serde_json::from_value(json!({"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "lastTransitionTime": since.to_string()}]}))
    .expect("a status");
    p
}

#[test]
fn quantities_are_read_in_thousandths_of_their_unit() {
    let cases = [
        ("1", 1000),
        ("500m", 500),
        ("1.5", 1500),
        ("2k", 2_000_000),
        ("1Ki", 1_024_000),
        ("1Gi", 1_073_741_824_000),
        ("1e3", 1_000_000),
        ("100n", 1),
        ("0", 0),
    ];
    for (q, want) in cases {
        assert_eq!(quantity_millis(q), Some(want), "{q}");
    }
    for bad in ["", "abc", "1x", "1.2.3"] {
        assert_eq!(quantity_millis(bad), None, "{bad}");
    }
}

#[test]
fn a_summary_adds_what_nodes_offer_and_bound_pods_request() {
    let nodes = [
        node("a", "2", "4Gi", json!({})),
        node(
            "b",
            "1500m",
            "2Gi",
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        ),
    ];
    let pods = [
        pod("p1", Some("a"), "500m", json!({})),
        pod("p2", Some("b"), "250m", json!({})),
        pod("pending", None, "4", json!({})),
    ];
    let s = summary(&nodes, &pods);
    assert_eq!((s.nodes, s.ready_nodes, s.pods), (2, 1, 3));
    assert_eq!(s.allocatable["cpu"], "3500m");
    assert_eq!(s.allocatable["memory"], "6Gi");
    assert_eq!(s.allocatable["pods"], "220");
    assert_eq!(s.requested["cpu"], "750m", "a pending pod holds no room");
    assert_eq!(s.requested["memory"], "200Mi");
    assert_eq!(s.requested["pods"], "2");
}

#[test]
fn an_init_container_larger_than_the_containers_sets_the_request() {
    let spec = template(
        "100m",
        json!({"initContainers": [{"name": "i",
        "resources": {"requests": {"cpu": "1"}}}]}),
    );
    assert_eq!(pod_requests(&spec).cpu_millis, 1000);
}

#[test]
fn available_replicas_count_per_node_what_fits_beside_other_pods() {
    let nodes = [
        node("a", "2", "4Gi", json!({})),
        node("b", "1", "4Gi", json!({})),
    ];
    // a: 2 CPUs − 1 used by another workload = 1 CPU free → 2 of 500m; b: 1 CPU → 2.
    let pods = [pod("other", Some("a"), "1", json!({"app": "other"}))];
    let n = available_replicas(&nodes, &pods, &template("500m", json!({})), |_| false);
    assert_eq!(n, 4);
}

#[test]
fn the_workloads_own_pods_count_as_room() {
    let nodes = [node("a", "2", "4Gi", json!({}))];
    let pods = [
        pod("web-1", Some("a"), "500m", json!({"app": "web"})),
        pod("web-2", Some("a"), "500m", json!({"app": "web"})),
    ];
    let own = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.get("app").map(String::as_str) == Some("web"))
    };
    let t = template("500m", json!({}));
    assert_eq!(available_replicas(&nodes, &pods, &t, own), 4);
    assert_eq!(available_replicas(&nodes, &pods, &t, |_| false), 2);
}

#[test]
fn unready_cordoned_unselected_and_tainted_nodes_hold_no_replicas() {
    let nodes = [
        node("ready", "1", "4Gi", json!({})),
        node(
            "notready",
            "1",
            "4Gi",
            json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}),
        ),
        node(
            "cordoned",
            "1",
            "4Gi",
            json!({"spec": {"unschedulable": true}}),
        ),
        node(
            "hdd",
            "1",
            "4Gi",
            json!({"metadata": {"labels": {"disk": "hdd"}}}),
        ),
        node(
            "tainted",
            "1",
            "4Gi",
            json!({"spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]}}),
        ),
        node(
            "preferred",
            "1",
            "4Gi",
            json!({"spec": {"taints": [{"key": "spot", "effect": "PreferNoSchedule"}]}}),
        ),
    ];
    let on_ssd = template("1", json!({"nodeSelector": {"disk": "ssd"}}));
    assert_eq!(
        available_replicas(&nodes, [], &on_ssd, |_| false),
        2,
        "ready and preferred"
    );
    let tolerating = template(
        "1",
        json!({"nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "gpu", "operator": "Equal", "value": "yes"}]}),
    );
    assert_eq!(available_replicas(&nodes, [], &tolerating, |_| false), 3);
}

#[test]
fn a_template_requesting_nothing_is_limited_by_the_pod_count() {
    let nodes = [node("a", "1", "1Gi", json!({}))];
    assert_eq!(
        available_replicas(&nodes, [], &template("0", json!({})), |_| false),
        110
    );
}

#[test]
fn requests_that_fit_nowhere_give_no_replicas_and_no_nodes_none() {
    let nodes = [node("a", "1", "1Gi", json!({}))];
    assert_eq!(
        available_replicas(&nodes, [], &template("2", json!({})), |_| false),
        0
    );
    assert_eq!(
        available_replicas([], [], &template("1", json!({})), |_| false),
        0
    );
}

#[test]
fn capacity_is_estimated_only_from_pods_unschedulable_past_the_threshold() {
    let now: Timestamp = "2026-01-01T00:01:00Z".parse().expect("a time");
    let minute = Duration::from_secs(60);
    let old = unschedulable("old", "2025-12-31T23:59:00Z".parse().expect("a time"));
    let fresh = unschedulable("fresh", "2026-01-01T00:00:30Z".parse().expect("a time"));
    let running = [
        pod("r1", Some("a"), "500m", json!({"app": "web"})),
        pod("r2", Some("a"), "500m", json!({"app": "web"})),
    ];
    let e = estimated_capacity(running.iter().chain([&old, &fresh]), now, minute);
    assert_eq!(e.capacity, Some(2), "two run, one waited two minutes");
    assert_eq!(e.unschedulable, 1);
    let e = estimated_capacity(running.iter().chain([&fresh]), now, minute);
    assert_eq!(e.capacity, None, "30 s is below kubefed's 60 s");
    let left = e.recheck_in.expect("a recheck");
    assert!(
        left > Duration::from_secs(29) && left < Duration::from_secs(31),
        "{left:?}"
    );
}

#[test]
fn pods_being_deleted_do_not_count() {
    let now: Timestamp = "2026-01-01T00:05:00Z".parse().expect("a time");
    let mut old = unschedulable("old", "2026-01-01T00:00:00Z".parse().expect("a time"));
    old.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    let e = estimated_capacity([&old], now, Duration::from_secs(60));
    assert_eq!(e, Estimate::default());
}
