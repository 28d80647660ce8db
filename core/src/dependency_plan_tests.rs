use super::*;

fn dep(kind: DependencyKind, name: &str) -> Dependency {
    Dependency {
        kind,
        name: name.into(),
    }
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn held(kind: &str, name: &str, clusters: &[&str]) -> DependencyStatus {
    DependencyStatus {
        kind: kind.into(),
        name: name.into(),
        state: "Propagated".into(),
        clusters: clusters.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn pairs(list: &[Pair]) -> Vec<(&str, &str)> {
    list.iter()
        .map(|(d, c)| (d.name.as_str(), c.as_str()))
        .collect()
}

#[test]
fn found_dependencies_go_where_the_workload_lands_and_leave_where_it_left() {
    let cm = dep(DependencyKind::ConfigMap, "settings");
    let wanted = BTreeMap::from([(cm.clone(), Lookup::Found)]);
    let previous = vec![held("ConfigMap", "settings", &["member1"])];
    let p = plan(&previous, &wanted, &set(&["member2"]));
    assert_eq!(pairs(&p.ensure), vec![("settings", "member2")]);
    assert_eq!(pairs(&p.release), vec![("settings", "member1")]);
}

#[test]
fn a_dependency_the_template_dropped_is_let_go_of_everywhere() {
    let previous = vec![held("Secret", "old", &["member1", "member2"])];
    let p = plan(&previous, &BTreeMap::new(), &set(&["member1", "member2"]));
    assert!(p.ensure.is_empty());
    assert_eq!(
        pairs(&p.release),
        vec![("old", "member1"), ("old", "member2")]
    );
}

#[test]
fn copies_of_a_dependency_gone_from_the_host_stay_where_the_workload_is() {
    let cm = dep(DependencyKind::ConfigMap, "settings");
    let wanted = BTreeMap::from([(cm, Lookup::NotFound)]);
    let previous = vec![held("ConfigMap", "settings", &["member1", "member2"])];
    let clusters = set(&["member1"]);
    let p = plan(&previous, &wanted, &clusters);
    assert!(p.ensure.is_empty());
    assert_eq!(pairs(&p.release), vec![("settings", "member2")]);
    let outcomes = BTreeMap::new();
    let status = report("demo", &previous, &wanted, &clusters, &outcomes);
    assert_eq!(status[0].state, "NotFound");
    assert_eq!(status[0].reason, "DependencyNotFound");
    assert_eq!(status[0].clusters, vec!["member1".to_string()]);
    assert_eq!(
        status[0].message,
        "ConfigMap settings does not exist in namespace demo"
    );
}

#[test]
fn an_explicitly_federated_dependency_is_never_written_nor_removed() {
    let cm = dep(DependencyKind::ConfigMap, "shared");
    let wanted = BTreeMap::from([(cm, Lookup::Explicit)]);
    let previous = vec![held("ConfigMap", "shared", &["member1"])];
    let p = plan(&previous, &wanted, &set(&["member2"]));
    assert_eq!(p, Plan::default());
    let status = report(
        "demo",
        &previous,
        &wanted,
        &set(&["member2"]),
        &BTreeMap::new(),
    );
    assert_eq!(
        (status[0].state.as_str(), status[0].reason.as_str()),
        ("Explicit", "FederatedExplicitly")
    );
    assert!(status[0].clusters.is_empty());
}

#[test]
fn the_report_lists_held_clusters_and_every_failure() {
    let sa = dep(DependencyKind::ServiceAccount, "runner");
    let wanted = BTreeMap::from([(sa.clone(), Lookup::Found)]);
    let clusters = set(&["member1", "member2", "member3"]);
    let previous = vec![held("ServiceAccount", "runner", &["member2"])];
    let outcomes = BTreeMap::from([
        ((sa.clone(), "member1".to_string()), PairOutcome::Placed),
        (
            (sa.clone(), "member2".to_string()),
            PairOutcome::Failed("denied".into()),
        ),
        (
            (sa.clone(), "member3".to_string()),
            PairOutcome::Refused(Holder::Foreign),
        ),
    ]);
    let status = report("demo", &previous, &wanted, &clusters, &outcomes);
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].state, "Failed");
    assert_eq!(status[0].reason, "WriteFailed");
    assert_eq!(
        status[0].clusters,
        vec!["member1".to_string(), "member2".to_string()]
    );
    assert!(status[0].message.contains("member2: denied"));
    assert!(
        status[0]
            .message
            .contains("member3: an object not made by Flotilla")
    );
    let placed = BTreeMap::from([((sa.clone(), "member1".to_string()), PairOutcome::Placed)]);
    let ok = report("demo", &[], &wanted, &set(&["member1"]), &placed);
    assert_eq!(
        (ok[0].state.as_str(), ok[0].reason.as_str()),
        ("Propagated", "")
    );
}

#[test]
fn a_failed_removal_is_reported_and_tried_again() {
    let old = dep(DependencyKind::Secret, "old");
    let previous = vec![held("Secret", "old", &["member1"])];
    let outcomes = BTreeMap::from([(
        (old.clone(), "member1".to_string()),
        PairOutcome::ReleaseFailed("timeout".into()),
    )]);
    let status = report("demo", &previous, &BTreeMap::new(), &set(&[]), &outcomes);
    assert_eq!(status[0].state, "Removing");
    assert_eq!(status[0].reason, "RemovalFailed");
    assert_eq!(status[0].clusters, vec!["member1".to_string()]);
    let again = plan(&status, &BTreeMap::new(), &set(&[]));
    assert_eq!(pairs(&again.release), vec![("old", "member1")]);
}

#[test]
fn a_problem_is_announced_once_and_an_explicit_dependency_never() {
    let cm = dep(DependencyKind::ConfigMap, "settings");
    let shared = dep(DependencyKind::ConfigMap, "shared");
    let wanted = BTreeMap::from([(cm, Lookup::NotFound), (shared, Lookup::Explicit)]);
    let first = report("demo", &[], &wanted, &set(&["member1"]), &BTreeMap::new());
    let announced: Vec<&str> = new_problems(&[], &first)
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(announced, vec!["settings"]);
    assert!(new_problems(&first, &first).is_empty());
}
