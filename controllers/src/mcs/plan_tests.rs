use super::*;
use crate::mcs::slice::Endpoint;

fn port(name: &str, port: i32) -> ServicePort {
    ServicePort {
        name: name.into(),
        protocol: Some("TCP".into()),
        app_protocol: None,
        port,
    }
}

fn service(kind: ServiceKind, ports: Vec<ServicePort>) -> ServiceView {
    ServiceView {
        kind,
        ports,
        session_affinity: "None".into(),
        session_affinity_config: None,
        ip_families: Vec::new(),
        internal_traffic_policy: None,
        traffic_distribution: None,
    }
}

fn slice(ip: &str) -> Slice {
    Slice {
        address_type: "IPv4".into(),
        endpoints: vec![Endpoint {
            addresses: vec![ip.into()],
            ready: Some(true),
            ..Endpoint::default()
        }],
        ports: Vec::new(),
    }
}

fn web() -> ServiceKey {
    ServiceKey::new("demo", "web")
}

/// An available member exporting demo/web (created at `created`) backed by `svc`, with one
/// local slice holding `ip`.
fn exporter(name: &str, created: &str, svc: ServiceView, ip: &str) -> MemberView {
    MemberView {
        name: name.into(),
        availability: Availability::Available,
        exports: vec![ExportView {
            key: web(),
            created: created.into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        }],
        services: BTreeMap::from([(web(), svc)]),
        slices: BTreeMap::from([(web(), vec![(format!("web-{name}"), slice(ip))])]),
        imports: BTreeMap::new(),
    }
}

fn bystander(name: &str) -> MemberView {
    MemberView {
        name: name.into(),
        availability: Availability::Available,
        exports: Vec::new(),
        services: BTreeMap::new(),
        slices: BTreeMap::new(),
        imports: BTreeMap::new(),
    }
}

fn conditions<'a>(plan: &'a Plan, cluster: &str) -> &'a [WantedCondition] {
    &plan
        .exports
        .iter()
        .find(|v| v.cluster == cluster && v.key == web())
        .expect("a verdict")
        .conditions
}

fn condition_of<'a>(plan: &'a Plan, cluster: &str, type_: &str) -> &'a WantedCondition {
    conditions(plan, cluster)
        .iter()
        .find(|c| c.type_ == type_)
        .expect("the condition")
}

const T1: &str = "2026-11-22T10:00:00Z";
const T2: &str = "2026-11-22T11:00:00Z";

#[test]
fn two_clusters_exporting_one_name_make_one_import_with_both_clusters_endpoints() {
    let members = [
        exporter(
            "m1",
            T1,
            service(ServiceKind::ClusterIp, vec![port("http", 80)]),
            "10.64.0.1",
        ),
        exporter(
            "m2",
            T2,
            service(ServiceKind::ClusterIp, vec![port("http", 80)]),
            "10.65.0.1",
        ),
        bystander("m3"),
    ];
    let plan = plan(&members);
    let merged = &plan.services[&web()];
    assert_eq!(merged.spec.type_, ServiceImportType::ClusterSetIP);
    assert_eq!(merged.spec.ports, vec![port("http", 80)]);
    assert_eq!(merged.clusters, vec!["m1", "m2"]);
    let sources: Vec<(&str, &str)> = merged
        .slices
        .iter()
        .map(|s| {
            (
                s.cluster.as_str(),
                s.slice.endpoints[0].addresses[0].as_str(),
            )
        })
        .collect();
    assert_eq!(sources, vec![("m1", "10.64.0.1"), ("m2", "10.65.0.1")]);
    for m in ["m1", "m2"] {
        let c = conditions(&plan, m);
        let summary: Vec<(&str, bool, &str)> = c
            .iter()
            .map(|c| (c.type_, c.status, c.reason.as_str()))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("Valid", true, "Valid"),
                ("Ready", true, "Exported"),
                ("Conflict", false, "NoConflicts")
            ]
        );
    }
    assert!(plan.held.is_empty());
}

#[test]
fn conflicts_are_resolved_for_the_oldest_export() {
    struct Case {
        what: &'static str,
        m1: ServiceView,
        m2: ServiceView,
        m2_created: &'static str,
        reason: &'static str,
        winner: &'static str,
        ports: Vec<ServicePort>,
        type_: ServiceImportType,
    }
    let cases = [
        Case {
            what: "a port name used with another number: the older m2's number, and the union of names",
            m1: service(
                ServiceKind::ClusterIp,
                vec![port("http", 80), port("metrics", 9090)],
            ),
            m2: service(ServiceKind::ClusterIp, vec![port("http", 8080)]),
            m2_created: "2026-11-22T09:00:00Z",
            reason: "PortConflict",
            winner: "m2",
            ports: vec![port("http", 8080), port("metrics", 9090)],
            type_: ServiceImportType::ClusterSetIP,
        },
        Case {
            what: "same creation time: the cluster name that sorts first wins",
            m1: service(ServiceKind::ClusterIp, vec![port("http", 80)]),
            m2: service(ServiceKind::ClusterIp, vec![port("http", 81)]),
            m2_created: T1,
            reason: "PortConflict",
            winner: "m1",
            ports: vec![port("http", 80)],
            type_: ServiceImportType::ClusterSetIP,
        },
        Case {
            what: "headless in the older cluster only",
            m1: service(ServiceKind::Headless, vec![port("http", 80)]),
            m2: service(ServiceKind::ClusterIp, vec![port("http", 80)]),
            m2_created: T2,
            reason: "TypeConflict",
            winner: "m1",
            ports: vec![port("http", 80)],
            type_: ServiceImportType::Headless,
        },
        Case {
            what: "session affinity differs",
            m1: service(ServiceKind::ClusterIp, vec![port("http", 80)]),
            m2: ServiceView {
                session_affinity: "ClientIP".into(),
                ..service(ServiceKind::ClusterIp, vec![port("http", 80)])
            },
            m2_created: T2,
            reason: "SessionAffinityConflict",
            winner: "m1",
            ports: vec![port("http", 80)],
            type_: ServiceImportType::ClusterSetIP,
        },
        Case {
            what: "internal traffic policy differs",
            m1: service(ServiceKind::ClusterIp, vec![port("http", 80)]),
            m2: ServiceView {
                internal_traffic_policy: Some("Local".into()),
                traffic_distribution: Some("PreferClose".into()),
                ..service(ServiceKind::ClusterIp, vec![port("http", 80)])
            },
            m2_created: T2,
            reason: "InternalTrafficPolicyConflict,TrafficDistributionConflict",
            winner: "m1",
            ports: vec![port("http", 80)],
            type_: ServiceImportType::ClusterSetIP,
        },
    ];
    for case in cases {
        let members = [
            exporter("m1", T1, case.m1, "10.64.0.1"),
            exporter("m2", case.m2_created, case.m2, "10.65.0.1"),
        ];
        let plan = plan(&members);
        let merged = &plan.services[&web()];
        assert_eq!(merged.spec.ports, case.ports, "{}", case.what);
        assert_eq!(merged.spec.type_, case.type_, "{}", case.what);
        for m in ["m1", "m2"] {
            let c = condition_of(&plan, m, "Conflict");
            assert!(c.status, "{}: {m}", case.what);
            assert_eq!(c.reason, case.reason, "{}", case.what);
            assert!(
                c.message
                    .contains(&format!("cluster {} (the oldest export)", case.winner)),
                "{}: {}",
                case.what,
                c.message
            );
        }
        assert_eq!(
            merged.slices.len(),
            2,
            "every export's endpoints stay: {}",
            case.what
        );
    }
}

#[test]
fn an_export_without_a_usable_service_is_invalid_and_imports_nothing() {
    let mut missing = exporter(
        "m1",
        T1,
        service(ServiceKind::ClusterIp, vec![]),
        "10.64.0.1",
    );
    missing.services.clear();
    let external = exporter(
        "m2",
        T1,
        service(ServiceKind::ExternalName, vec![]),
        "10.65.0.1",
    );
    let plan = plan(&[missing, external]);
    assert!(plan.services.is_empty());
    for (m, reason) in [("m1", "NoService"), ("m2", "InvalidServiceType")] {
        let valid = condition_of(&plan, m, "Valid");
        assert_eq!((valid.status, valid.reason.as_str()), (false, reason));
        let ready = condition_of(&plan, m, "Ready");
        assert_eq!((ready.status, ready.reason.as_str()), (false, "Failed"));
    }
}

#[test]
fn no_export_left_means_no_import() {
    assert_eq!(plan(&[bystander("m1"), bystander("m2")]), Plan::default());
}

/// m1 exports; m2 exported too and is now down or unknown; m3 holds the import listing both.
fn with_m2(availability: Availability, m1_exports: bool) -> Plan {
    let svc = service(ServiceKind::ClusterIp, vec![port("http", 80)]);
    let mut m1 = exporter("m1", T1, svc, "10.64.0.1");
    if !m1_exports {
        m1.exports.clear();
    }
    let mut m2 = exporter(
        "m2",
        T1,
        service(ServiceKind::ClusterIp, vec![]),
        "10.65.0.1",
    );
    m2.availability = availability;
    let mut m3 = bystander("m3");
    let old_spec = ServiceImportSpec {
        ports: vec![port("grpc", 9000)],
        ..ServiceImportSpec::default()
    };
    m3.imports.insert(
        web(),
        ExistingImport {
            spec: old_spec,
            clusters: vec!["m1".into(), "m2".into()],
            clusterset_ips: None,
        },
    );
    plan(&[m1, m2, m3])
}

#[test]
fn a_down_exporter_stays_listed_but_its_endpoints_leave() {
    let plan = with_m2(Availability::Down, true);
    let merged = &plan.services[&web()];
    assert_eq!(merged.clusters, vec!["m1", "m2"]);
    assert!(merged.slices.iter().all(|s| s.cluster == "m1"));
    assert_eq!(
        merged.spec.ports,
        vec![port("http", 80)],
        "from the available export"
    );
    assert!(plan.held.is_empty(), "a down cluster's slices are removed");
    assert!(plan.exports.iter().all(|v| v.cluster == "m1"));
}

#[test]
fn an_import_whose_only_exporter_is_down_keeps_its_spec() {
    let plan = with_m2(Availability::Down, false);
    let merged = &plan.services[&web()];
    assert_eq!(merged.clusters, vec!["m2"]);
    assert_eq!(merged.spec.ports, vec![port("grpc", 9000)]);
    assert!(merged.slices.is_empty());
}

#[test]
fn a_cluster_of_unknown_state_is_held() {
    let plan = with_m2(Availability::Unknown, true);
    assert_eq!(plan.held, BTreeSet::from(["m2".to_string()]));
    assert_eq!(plan.services[&web()].clusters, vec!["m1", "m2"]);
}

#[test]
fn an_exporter_that_left_the_federation_is_forgotten() {
    // m2 is no member any more (unjoined): the old import's mention of it is dropped.
    let svc = service(ServiceKind::ClusterIp, vec![port("http", 80)]);
    let mut m1 = exporter("m1", T1, svc, "10.64.0.1");
    m1.imports.insert(
        web(),
        ExistingImport {
            spec: ServiceImportSpec::default(),
            clusters: vec!["m1".into(), "m2".into()],
            clusterset_ips: None,
        },
    );
    let plan = plan(&[m1]);
    assert_eq!(plan.services[&web()].clusters, vec!["m1"]);
}

#[test]
fn the_oldest_exports_labels_annotations_and_traffic_settings_reach_the_import() {
    let explicit = ServiceView {
        ip_families: vec!["IPv4".into()],
        internal_traffic_policy: Some("Cluster".into()),
        traffic_distribution: Some("PreferClose".into()),
        ..service(ServiceKind::ClusterIp, vec![port("http", 80)])
    };
    let mut m1 = exporter("m1", T1, explicit.clone(), "10.64.0.1");
    m1.exports[0].labels = BTreeMap::from([("team".to_string(), "a".to_string())]);
    m1.exports[0].annotations = BTreeMap::from([("note".to_string(), "x".to_string())]);
    // An unset policy is the default (Cluster): no conflict with an explicit Cluster; an
    // unset ipFamilies (an old cluster) is no conflict either.
    let defaults = ServiceView {
        internal_traffic_policy: None,
        ip_families: Vec::new(),
        ..explicit
    };
    let mut m2 = exporter("m2", T2, defaults, "10.65.0.1");
    m2.exports[0].labels = m1.exports[0].labels.clone();
    m2.exports[0].annotations = m1.exports[0].annotations.clone();
    let p = plan(&[m1.clone(), m2.clone()]);
    let merged = &p.services[&web()];
    assert_eq!(merged.exported.labels["team"], "a");
    assert_eq!(merged.exported.annotations["note"], "x");
    assert_eq!(merged.spec.ip_families, vec!["IPv4"]);
    assert_eq!(
        merged.spec.internal_traffic_policy.as_deref(),
        Some("Cluster")
    );
    assert_eq!(
        merged.spec.traffic_distribution.as_deref(),
        Some("PreferClose")
    );
    assert!(!condition_of(&p, "m2", "Conflict").status);
    let on_import = &merged.import_conditions;
    assert_eq!(on_import.len(), 1);
    assert_eq!(
        (on_import[0].type_, on_import[0].reason.as_str()),
        ("Conflict", "NoConflicts")
    );
    // Different labels: a conflict, the oldest export's labels win.
    m2.exports[0].labels.insert("team".into(), "b".into());
    let p = plan(&[m1, m2]);
    assert_eq!(condition_of(&p, "m2", "Conflict").reason, "LabelsConflict");
    assert_eq!(
        p.services[&web()].import_conditions[0].reason,
        "LabelsConflict"
    );
    assert_eq!(p.services[&web()].exported.labels["team"], "a");
}
