use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

fn zone() -> Zone {
    let services = vec![
        ImportedService {
            namespace: "demo".into(),
            name: "web".into(),
            headless: false,
            ips: vec![ip("244.0.0.9"), ip("fd00:244::9")],
            ports: vec![
                ("http".into(), "TCP".into(), 80),
                (String::new(), "TCP".into(), 81),
            ],
        },
        ImportedService {
            namespace: "demo".into(),
            name: "db".into(),
            headless: true,
            ips: Vec::new(),
            ports: vec![("sql".into(), "TCP".into(), 5432)],
        },
    ];
    let endpoints = vec![
        ImportedEndpoint {
            namespace: "demo".into(),
            service: "db".into(),
            cluster_id: "c1".into(),
            addresses: vec![ip("10.1.0.5")],
            hostname: Some("db-0".into()),
        },
        ImportedEndpoint {
            namespace: "demo".into(),
            service: "db".into(),
            cluster_id: "c2".into(),
            addresses: vec![ip("10.2.0.7")],
            hostname: None,
        },
        // Of a service with no import: ignored.
        ImportedEndpoint {
            namespace: "demo".into(),
            service: "gone".into(),
            cluster_id: "c1".into(),
            addresses: vec![ip("10.1.0.9")],
            hostname: None,
        },
    ];
    Zone::build(&services, &endpoints, 5, 42)
}

fn data(a: &Answer) -> Vec<String> {
    a.answers.iter().map(|r| r.data.to_string()).collect()
}

#[test]
fn a_clusterset_ip_service_resolves_to_its_ips_by_family() {
    let z = zone();
    let a = z.answer("Web.Demo.svc.clusterset.local.", RecordType::A);
    assert_eq!(a.code, ResponseCode::NoError);
    assert_eq!(data(&a), ["244.0.0.9"]);
    assert_eq!(a.answers[0].ttl, 5);
    let aaaa = z.answer("web.demo.svc.clusterset.local", RecordType::AAAA);
    assert_eq!(data(&aaaa), ["fd00:244::9"]);
}

#[test]
fn a_headless_service_resolves_to_every_ready_endpoint_and_each_hostname() {
    let z = zone();
    let a = z.answer("db.demo.svc.clusterset.local", RecordType::A);
    assert_eq!(data(&a), ["10.1.0.5", "10.2.0.7"]);
    let host = z.answer("db-0.c1.db.demo.svc.clusterset.local", RecordType::A);
    assert_eq!(data(&host), ["10.1.0.5"]);
    // The cluster level exists (NODATA); a hostname in another cluster does not.
    let cluster = z.answer("c1.db.demo.svc.clusterset.local", RecordType::A);
    assert_eq!(
        (cluster.code, cluster.answers.len()),
        (ResponseCode::NoError, 0)
    );
    let other = z.answer("db-0.c2.db.demo.svc.clusterset.local", RecordType::A);
    assert_eq!(other.code, ResponseCode::NXDomain);
}

#[test]
fn named_ports_have_srv_records_with_target_addresses() {
    let z = zone();
    let srv = z.answer("_http._tcp.web.demo.svc.clusterset.local", RecordType::SRV);
    assert_eq!(data(&srv), ["0 100 80 web.demo.svc.clusterset.local."]);
    assert_eq!(srv.additionals.len(), 2, "A and AAAA of the target");
    let srv = z.answer("_sql._tcp.db.demo.svc.clusterset.local", RecordType::SRV);
    assert_eq!(
        data(&srv),
        ["0 100 5432 db-0.c1.db.demo.svc.clusterset.local."]
    );
    // An unnamed port has no SRV name.
    let unnamed = z.answer("_._tcp.web.demo.svc.clusterset.local", RecordType::SRV);
    assert_eq!(unnamed.code, ResponseCode::NXDomain);
}

#[test]
fn nodata_and_nxdomain_as_the_spec_says() {
    let z = zone();
    // An existing name without the type: NODATA with the SOA.
    for (name, t) in [
        ("web.demo.svc.clusterset.local", RecordType::TXT),
        ("web.demo.svc.clusterset.local", RecordType::SRV),
        ("demo.svc.clusterset.local", RecordType::A),
        ("svc.clusterset.local", RecordType::A),
        ("_tcp.web.demo.svc.clusterset.local", RecordType::SRV),
    ] {
        let a = z.answer(name, t);
        assert_eq!(
            (a.code, a.answers.len()),
            (ResponseCode::NoError, 0),
            "{name}"
        );
        assert_eq!(a.authorities[0].record_type(), RecordType::SOA, "{name}");
    }
    // Unknown names, and names in a namespace with no import: NXDOMAIN.
    for name in [
        "nope.demo.svc.clusterset.local",
        "web.other.svc.clusterset.local",
        "other.svc.clusterset.local",
        "gone.demo.svc.clusterset.local",
    ] {
        let a = z.answer(name, RecordType::A);
        assert_eq!(a.code, ResponseCode::NXDomain, "{name}");
        assert_eq!(a.authorities[0].record_type(), RecordType::SOA);
    }
    assert_eq!(
        z.answer("web.demo.svc.cluster.local", RecordType::A).code,
        ResponseCode::Refused
    );
    let soa = z.answer("clusterset.local", RecordType::SOA);
    assert_eq!(soa.answers[0].record_type(), RecordType::SOA);
}
