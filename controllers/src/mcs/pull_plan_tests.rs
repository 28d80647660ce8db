use super::*;
use crate::mcs::plan::{ServiceKind, plan};
use flotilla_api::mcs::condition;
use serde_json::json;

fn report(name: &str, created: &str, port: i32, ip: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "multicluster.flotilla.io/v1alpha1", "kind": "ServiceExportReport",
        "metadata": {"name": name, "namespace": "flotilla-cluster-m2"},
        "spec": {
            "namespace": "demo", "name": "web", "created": created, "generation": 1,
            "service": {"clusterIP": "10.0.0.1", "ports": [{"name": "http", "port": port}]},
            "endpointSlices": [{"name": "web-x", "content": {
                "addressType": "IPv4", "endpoints": [{"addresses": [ip]}],
                "ports": [{"name": "http", "port": 8080}]}}],
        },
    }))
    .expect("a report")
}

fn push_exporter(created: &str, port: i32) -> MemberView {
    let r = read_report(&report("demo.web", created, port, "10.9.0.1")).expect("readable");
    let mut v = report_view("m1", Availability::Available, &[&r]);
    v.name = "m1".into();
    v
}

#[test]
fn a_pull_members_reports_are_planned_like_a_push_members_caches() {
    let r =
        read_report(&report("demo.web", "2026-01-02T00:00:00Z", 80, "10.2.0.5")).expect("readable");
    let pull = report_view("m2", Availability::Available, &[&r]);
    let key = ServiceKey::new("demo", "web");
    assert_eq!(pull.services[&key].kind, ServiceKind::ClusterIp);
    assert_eq!(pull.slices[&key][0].1.endpoints[0].addresses, ["10.2.0.5"]);
    // An older push export with another port number: both conflict, the push one wins.
    let p = plan(&[push_exporter("2026-01-01T00:00:00Z", 81), pull]);
    let conflicts: Vec<(&str, bool)> = p
        .exports
        .iter()
        .map(|v| {
            let c = v.conditions.iter().find(|c| c.type_ == condition::CONFLICT);
            (v.cluster.as_str(), c.is_some_and(|c| c.status))
        })
        .collect();
    assert_eq!(conflicts, [("m1", true), ("m2", true)]);
    assert_eq!(p.services[&key].spec.ports[0].port, 81);
    assert_eq!(p.services[&key].clusters, ["m1", "m2"]);
}

#[test]
fn a_pull_member_gets_one_work_per_service_with_managed_hashed_manifests() {
    let r =
        read_report(&report("demo.web", "2026-01-02T00:00:00Z", 80, "10.2.0.5")).expect("readable");
    let p = plan(&[
        push_exporter("2026-01-01T00:00:00Z", 80),
        report_view("m2", Availability::Available, &[&r]),
    ]);
    let works = member_works(&p, "m2", SliceVersion::V1);
    assert_eq!(works.len(), 1);
    let (name, work) = works.iter().next().expect("one work");
    assert_eq!(name, &mcs_work_name(&ServiceKey::new("demo", "web")));
    assert_eq!(work["metadata"]["namespace"], "flotilla-cluster-m2");
    assert_eq!(work["metadata"]["labels"][MCS_WORK_LABEL], "demo.web");
    let manifests = work["spec"]["workload"]["manifests"]
        .as_array()
        .expect("manifests");
    let kinds: Vec<&str> = manifests
        .iter()
        .filter_map(|m| m["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["ServiceImport", "EndpointSlice", "EndpointSlice"]);
    for m in manifests {
        assert_eq!(m["metadata"]["labels"][MANAGED_LABEL], "true");
        assert_eq!(
            m["metadata"]["annotations"][DESIRED_HASH],
            m["metadata"]["annotations"][HASH_ANNOTATION]
        );
        assert!(m["metadata"]["annotations"][DESIRED_HASH].is_string());
    }
    assert_eq!(manifests[1]["apiVersion"], "discovery.k8s.io/v1");
    // Held as written: no write; one held that is no longer wanted: deleted.
    let hash = work["metadata"]["annotations"][HASH_ANNOTATION]
        .as_str()
        .map(str::to_owned);
    let held = BTreeMap::from([(name.clone(), hash), ("old".to_string(), None)]);
    let ops = work_ops(works.clone(), &held);
    assert!(ops.apply.is_empty());
    assert_eq!(ops.delete, ["old"]);
    let ops = work_ops(works, &BTreeMap::new());
    assert_eq!(ops.apply.len(), 1);
}

#[test]
fn a_report_with_a_bad_time_or_a_foreign_name_is_rejected_with_its_reason() {
    let bad_time = read_report(&report("demo.web", "yesterday", 80, "10.2.0.5"));
    assert_eq!(
        bad_time.map(|_| ()).map_err(|e| e.as_str()),
        Err("MalformedReport")
    );
    let wrong = read_report(&report("other.svc", "2026-01-02T00:00:00Z", 80, "10.2.0.5"));
    let e = wrong.expect_err("rejected");
    assert_eq!(e.as_str(), "ReportNameMismatch");
    assert!(e.message().contains("demo.web"), "{}", e.message());
    let unparsable: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "multicluster.flotilla.io/v1alpha1", "kind": "ServiceExportReport",
        "metadata": {"name": "demo.web", "namespace": "flotilla-cluster-m2"},
        "spec": {"namespace": "demo", "name": "web", "endpointSlices": "many"},
    }))
    .expect("an object");
    assert_eq!(
        read_report(&unparsable).map(|_| ()).map_err(|e| e.as_str()),
        Err("MalformedReport")
    );
}
