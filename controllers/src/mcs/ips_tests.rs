use super::*;

fn key(name: &str) -> ServiceKey {
    ServiceKey::new("demo", name)
}

fn ranges(cidrs: &[&str]) -> Ranges {
    Ranges::parse(&cidrs.iter().map(|c| c.to_string()).collect::<Vec<_>>())
}

fn fresh(names: &[&str]) -> BTreeMap<ServiceKey, (Vec<String>, Held)> {
    names
        .iter()
        .map(|n| (key(n), (Vec::new(), Held::default())))
        .collect()
}

fn assigned(a: &Allocation) -> Vec<IpAddr> {
    match a {
        Allocation::Assigned(ips) => ips.clone(),
        other => panic!("not assigned: {other:?}"),
    }
}

#[test]
fn ranges_parse_both_families_and_report_bad_entries() {
    let r = ranges(&[
        "10.9.0.0/24",
        "fd00::/120",
        "nonsense",
        "10.10.0.0/24",
        "1.2.3.4/40",
    ]);
    assert_eq!(
        r.ranges.iter().map(Range::family).collect::<Vec<_>>(),
        [IPV4, IPV6]
    );
    assert_eq!(r.errors.len(), 3, "{:?}", r.errors);
    assert!(r.errors[1].contains("only one IPv4 range"));
    // The network and broadcast addresses of an IPv4 range are not used.
    let small = Range::parse("10.9.0.0/30").expect("valid");
    assert_eq!(small.count, 2);
    assert!(!small.contains("10.9.0.0".parse().expect("ip")));
    assert!(small.contains("10.9.0.1".parse().expect("ip")));
    assert!(!small.contains("10.9.0.3".parse().expect("ip")));
}

#[test]
fn every_service_gets_a_distinct_address_in_range_and_the_same_on_a_second_run() {
    let r = ranges(&["10.9.0.0/24"]);
    let names: Vec<String> = (0..200).map(|i| format!("svc{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let first = allocate(&r, &fresh(&refs));
    let ips: BTreeSet<IpAddr> = first.values().flat_map(assigned).collect();
    assert_eq!(ips.len(), 200, "unique");
    assert!(ips.iter().all(|ip| r.ranges[0].contains(*ip)));
    // Derived from the names only: another process (or order) allocates the same.
    assert_eq!(allocate(&r, &fresh(&refs)), first);
}

#[test]
fn held_addresses_are_kept_and_new_services_avoid_them() {
    let r = ranges(&["10.9.0.0/24"]);
    let mut services = fresh(&["new"]);
    let fresh_ip = assigned(&allocate(&r, &services)[&key("new")])[0];
    // An older service already holds the address the new one would have got.
    services.insert(
        key("old"),
        (
            Vec::new(),
            Held {
                ours: vec![fresh_ip],
                foreign: Vec::new(),
            },
        ),
    );
    let out = allocate(&r, &services);
    assert_eq!(assigned(&out[&key("old")]), vec![fresh_ip]);
    assert_ne!(assigned(&out[&key("new")]), vec![fresh_ip]);
}

#[test]
fn an_address_out_of_range_or_taken_twice_is_replaced() {
    let r = ranges(&["10.9.0.0/24"]);
    let ip: IpAddr = "10.9.0.7".parse().expect("ip");
    let out_of_range: IpAddr = "192.168.0.1".parse().expect("ip");
    let mut services = BTreeMap::new();
    for (name, ours) in [("a", ip), ("b", ip), ("c", out_of_range)] {
        services.insert(
            key(name),
            (
                Vec::new(),
                Held {
                    ours: vec![ours],
                    foreign: Vec::new(),
                },
            ),
        );
    }
    let out = allocate(&r, &services);
    assert_eq!(
        assigned(&out[&key("a")]),
        vec![ip],
        "the first by name keeps it"
    );
    assert_ne!(assigned(&out[&key("b")]), vec![ip]);
    assert!(r.ranges[0].contains(assigned(&out[&key("c")])[0]));
}

#[test]
fn another_managers_ips_are_kept_and_reserved() {
    let r = ranges(&["10.9.0.0/30"]);
    let mut services = fresh(&["mine"]);
    services.insert(
        key("theirs"),
        (
            Vec::new(),
            Held {
                ours: Vec::new(),
                foreign: vec!["10.9.0.1".into()],
            },
        ),
    );
    let out = allocate(&r, &services);
    assert_eq!(
        out[&key("theirs")],
        Allocation::Foreign(vec!["10.9.0.1".into()])
    );
    assert_eq!(
        assigned(&out[&key("mine")]),
        vec!["10.9.0.2".parse::<IpAddr>().expect("ip")]
    );
}

#[test]
fn an_exhausted_range_fails_only_the_services_that_do_not_fit() {
    // /30: two usable addresses for three services.
    let r = ranges(&["10.9.0.0/30"]);
    let out = allocate(&r, &fresh(&["a", "b", "c"]));
    let failed: Vec<&ServiceKey> = out
        .iter()
        .filter(|(_, a)| matches!(a, Allocation::Failed(condition::REASON_RANGE_EXHAUSTED, _)))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        out.values()
            .filter(|a| matches!(a, Allocation::Assigned(_)))
            .count(),
        2
    );
}

#[test]
fn dual_stack_gets_one_address_per_family_and_a_missing_family_is_reported() {
    let both = ranges(&["10.9.0.0/24", "fd00:9::/112"]);
    let mut services = BTreeMap::new();
    services.insert(
        key("dual"),
        (vec![IPV6.to_string(), IPV4.to_string()], Held::default()),
    );
    let ips = assigned(&allocate(&both, &services)[&key("dual")]);
    assert!(ips[0].is_ipv6() && ips[1].is_ipv4(), "{ips:?}");
    let v4_only = ranges(&["10.9.0.0/24", "bad/range"]);
    match &allocate(&v4_only, &services)[&key("dual")] {
        Allocation::Failed(reason, message) => {
            assert_eq!(*reason, condition::REASON_NO_RANGE);
            assert!(
                message.contains("IPv6") && message.contains("bad/range"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    // No family named: IPv4 when there is an IPv4 range, else the range there is.
    let v6_only = ranges(&["fd00:9::/112"]);
    assert!(assigned(&allocate(&v6_only, &fresh(&["x"]))[&key("x")])[0].is_ipv6());
}

#[test]
fn no_range_at_all_turns_allocation_off() {
    assert!(allocate(&ranges(&[]), &fresh(&["a"])).is_empty());
    // A range that does not parse is not "off": it is reported.
    assert!(matches!(
        allocate(&ranges(&["nonsense"]), &fresh(&["a"]))[&key("a")],
        Allocation::Failed(condition::REASON_NO_RANGE, _)
    ));
}

mod assign {
    use super::*;
    use crate::mcs::plan::{Availability, ExistingImport, ExportVerdict, Exported, MergedService};
    use flotilla_api::mcs::ServiceImportSpec;

    fn planned(type_: ServiceImportType) -> MergedService {
        MergedService {
            spec: ServiceImportSpec {
                type_,
                ..ServiceImportSpec::default()
            },
            clusters: vec!["m1".into()],
            slices: Vec::new(),
            exported: Exported::default(),
            clusterset_ips: None,
            import_conditions: Vec::new(),
        }
    }

    fn plan_of(services: &[(&str, ServiceImportType)]) -> Plan {
        let mut plan = Plan::default();
        for (name, type_) in services {
            plan.services.insert(key(name), planned(*type_));
            plan.exports.push(ExportVerdict {
                cluster: "m1".into(),
                key: key(name),
                conditions: vec![WantedCondition {
                    type_: condition::VALID,
                    status: true,
                    reason: condition::REASON_VALID.into(),
                    message: String::new(),
                }],
            });
        }
        plan
    }

    /// An import in a member: its name, `spec.ips`, and Flotilla's annotation.
    type ImportRow<'a> = (&'a str, Vec<&'a str>, Option<Vec<&'a str>>);

    fn member(imports: &[ImportRow<'_>]) -> MemberView {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        MemberView {
            name: "m1".into(),
            availability: Availability::Available,
            exports: Vec::new(),
            services: BTreeMap::new(),
            slices: BTreeMap::new(),
            imports: imports
                .iter()
                .map(|(name, ips, ours)| {
                    let import = ExistingImport {
                        spec: ServiceImportSpec {
                            ips: strings(ips),
                            ..ServiceImportSpec::default()
                        },
                        clusters: vec!["m1".into()],
                        clusterset_ips: ours.as_deref().map(strings),
                    };
                    (key(name), import)
                })
                .collect(),
        }
    }

    #[test]
    fn imports_keep_flotillas_ips_leave_anothers_and_headless_get_none() {
        let mut plan = plan_of(&[
            ("mine", ServiceImportType::ClusterSetIP),
            ("theirs", ServiceImportType::ClusterSetIP),
            ("headless", ServiceImportType::Headless),
        ]);
        let members = [member(&[
            ("mine", vec!["10.9.0.77"], Some(vec!["10.9.0.77"])),
            // Annotated by Flotilla once, since overwritten by someone else.
            ("theirs", vec!["10.9.0.5"], Some(vec!["10.9.0.6"])),
        ])];
        assign(&mut plan, &members, &ranges(&["10.9.0.0/24"]));
        let mine = &plan.services[&key("mine")];
        assert_eq!(mine.spec.ips, ["10.9.0.77"]);
        assert_eq!(
            mine.clusterset_ips.as_deref(),
            Some(&["10.9.0.77".to_string()][..])
        );
        assert_eq!(
            mine.import_conditions[0].reason,
            condition::REASON_ALLOCATED
        );
        let theirs = &plan.services[&key("theirs")];
        assert!(theirs.spec.ips.is_empty(), "not written: left as it is");
        assert_eq!(theirs.clusterset_ips, None);
        let c = &theirs.import_conditions[0];
        assert_eq!(
            (c.status, c.reason.as_str()),
            (false, condition::REASON_IPS_OF_ANOTHER_MANAGER)
        );
        let headless = &plan.services[&key("headless")];
        assert!(headless.spec.ips.is_empty() && headless.import_conditions.is_empty());
        // Each valid export carries its import's condition.
        for v in &plan.exports {
            let n = v
                .conditions
                .iter()
                .filter(|c| c.type_ == condition::IPS_ALLOCATED)
                .count();
            assert_eq!(n, usize::from(v.key != key("headless")), "{}", v.key);
        }
    }
}
