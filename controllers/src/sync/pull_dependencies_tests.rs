use super::*;
use flotilla_api::work::{Condition, ManifestCondition, WorkSpec, WorkStatus};

fn host_secret(password: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "demo", "uid": "u1", "resourceVersion": "7",
                     "labels": {"app": "web"}, "annotations": {"note": "host only"}},
        "type": "Opaque",
        "data": {"password": password},
    })
}

fn owners_of(manifest: &Value) -> String {
    manifest["metadata"]["annotations"][OWNERS_ANNOTATION]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_pull_copy_is_push_modes_copy_labelled_managed_and_hashed() {
    let owners = BTreeSet::from(["FederatedDeployment/web".to_string()]);
    let copy =
        pull_copy(DependencyKind::Secret, &host_secret("cGFzcw=="), &owners).expect("a copy");
    assert_eq!(copy["data"]["password"], "cGFzcw==");
    assert_eq!(copy["type"], "Opaque");
    assert_eq!(copy["metadata"]["labels"][DEPENDENCY_LABEL], "true");
    assert_eq!(copy["metadata"]["labels"][MANAGED_LABEL], "true");
    assert_eq!(copy["metadata"]["labels"]["app"], "web");
    assert_eq!(copy["metadata"].get("uid"), None, "no server-set field");
    assert_eq!(copy["metadata"]["annotations"].get("note"), None);
    assert_eq!(owners_of(&copy), "FederatedDeployment/web");
    // The hash covers the content: the same copy hashes the same, an edit differently.
    let again = pull_copy(DependencyKind::Secret, &host_secret("cGFzcw=="), &owners);
    assert_eq!(again.as_ref(), Some(&copy));
    let edited = pull_copy(DependencyKind::Secret, &host_secret("bmV3"), &owners).expect("a copy");
    assert_ne!(desired_hash(&edited), desired_hash(&copy));
    assert!(desired_hash(&copy).is_some());
    assert_eq!(
        pull_copy(DependencyKind::Secret, &host_secret("x"), &BTreeSet::new()),
        None
    );
}

#[test]
fn a_copy_kept_by_two_workloads_leaves_the_bundle_with_the_last_of_them() {
    let mut slot = Slot::default();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "settings", "namespace": "demo"}, "data": {"a": "1"}});
    let first = ensure_slot(
        &mut slot,
        DependencyKind::ConfigMap,
        &cm,
        "FederatedDeployment/web",
    )
    .expect("a copy");
    let both = ensure_slot(
        &mut slot,
        DependencyKind::ConfigMap,
        &cm,
        "FederatedJob/migrate",
    )
    .expect("a copy");
    assert_eq!(owners_of(&first), "FederatedDeployment/web");
    assert_eq!(
        owners_of(&both),
        "FederatedDeployment/web,FederatedJob/migrate"
    );
    assert_ne!(desired_hash(&first), desired_hash(&both));
    // One lets go: the copy stays for the other, with its own hash again.
    let Released::Keep(kept) = release_slot(&mut slot, "FederatedDeployment/web") else {
        panic!("kept for the job");
    };
    assert_eq!(owners_of(&kept), "FederatedJob/migrate");
    assert_eq!(kept["data"], json!({"a": "1"}));
    // A workload that held nothing changes nothing; the last one removes the copy.
    assert_eq!(
        release_slot(&mut slot, "FederatedDeployment/web"),
        Released::Nothing
    );
    assert_eq!(
        release_slot(&mut slot, "FederatedJob/migrate"),
        Released::Remove
    );
    assert_eq!(
        release_slot(&mut slot, "FederatedJob/migrate"),
        Released::Remove
    );
}

#[test]
fn a_restarted_control_plane_takes_the_owners_from_the_bundle() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "settings", "namespace": "demo"}, "data": {"a": "1"}});
    let mut before = Slot::default();
    ensure_slot(
        &mut before,
        DependencyKind::ConfigMap,
        &cm,
        "FederatedJob/migrate",
    );
    let held = ensure_slot(
        &mut before,
        DependencyKind::ConfigMap,
        &cm,
        "FederatedDeployment/web",
    );
    let mut after = seed(held.clone());
    assert_eq!(after, before);
    // The same workload again: the same manifest, so the bundler writes nothing.
    let again = ensure_slot(
        &mut after,
        DependencyKind::ConfigMap,
        &cm,
        "FederatedDeployment/web",
    );
    assert_eq!(again, held);
    assert_eq!(seed(None), Slot::default());
}

#[test]
fn the_agents_refusal_counts_only_for_the_current_content_and_generation() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "settings", "namespace": "demo"}});
    let report = |status: &str, generation: i64, hash: &str| ManifestCondition {
        identifier: identify(0, &cm),
        conditions: vec![Condition {
            type_: APPLIED.into(),
            status: status.into(),
            observed_generation: Some(generation),
            last_transition_time: "2026-01-01T00:00:00Z".into(),
            reason: ClusterReason::CreationFailed.as_str().into(),
            message: "configmaps \"settings\" is forbidden".into(),
        }],
        hash: Some(hash.into()),
        ..ManifestCondition::default()
    };
    let work = |m: ManifestCondition| {
        let mut w = Work::new("w", WorkSpec::default());
        w.spec.workload.manifests.push(cm.clone());
        w.metadata.generation = Some(3);
        w.status = Some(WorkStatus {
            manifest_conditions: vec![m],
            ..WorkStatus::default()
        });
        w
    };
    let refused = work(report("False", 3, "h1"));
    assert_eq!(
        refusal(&refused, 0, Some("h1")),
        Some(PairOutcome::Failed(
            "configmaps \"settings\" is forbidden".into()
        ))
    );
    // A user's own object of the copy's name, left alone by the agent: push mode's
    // refusal (`ExistsInMember` in the dependency's status), not a failure.
    let mut taken = report("False", 3, "h1");
    taken.conditions[0].reason = ClusterReason::AlreadyExists.as_str().into();
    assert_eq!(
        refusal(&work(taken), 0, Some("h1")),
        Some(PairOutcome::Refused(Holder::Foreign))
    );
    assert_eq!(
        refusal(&refused, 0, Some("h2")),
        None,
        "about older content"
    );
    assert_eq!(
        refusal(&work(report("False", 2, "h1")), 0, Some("h1")),
        None
    );
    assert_eq!(refusal(&work(report("True", 3, "h1")), 0, Some("h1")), None);
}

#[test]
fn a_copy_is_handed_over_by_a_release_and_then_dropped() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "settings", "namespace": "demo"}});
    assert_eq!(hand_over_step(None), HandOver::Done);
    let mut work = Work::new("w", WorkSpec::default());
    work.metadata.generation = Some(4);
    work.spec.workload.manifests.push(cm.clone());
    work.spec
        .manifest_configs
        .push(entry(&(Some("demo".into()), "settings".into()), cm.clone()).config);
    // The agent writes over no member object but a copy (a user's own is left alone).
    assert_eq!(
        work.spec.manifest_configs[0].adopt_label.as_deref(),
        Some(DEPENDENCY_LABEL)
    );
    // Held: marked for release, the manifest as it is.
    let HandOver::Release(marked) = hand_over_step(Some((&work, 0))) else {
        panic!("a release first");
    };
    assert!(marked.config.orphan);
    assert_eq!(marked.manifest, cm);
    // Marked: waits for the agent's report on this generation, then drops it.
    work.spec.manifest_configs[0].orphan = true;
    assert_eq!(hand_over_step(Some((&work, 0))), HandOver::Waiting);
    let released = |generation: i64| WorkStatus {
        manifest_conditions: vec![ManifestCondition {
            identifier: identify(0, &cm),
            conditions: vec![Condition {
                type_: APPLIED.into(),
                status: "True".into(),
                observed_generation: Some(generation),
                last_transition_time: "2026-01-01T00:00:00Z".into(),
                reason: RELEASED.into(),
                message: String::new(),
            }],
            ..ManifestCondition::default()
        }],
        ..WorkStatus::default()
    };
    work.status = Some(released(3));
    assert_eq!(
        hand_over_step(Some((&work, 0))),
        HandOver::Waiting,
        "an older report"
    );
    work.status = Some(released(4));
    assert_eq!(hand_over_step(Some((&work, 0))), HandOver::Drop);
}

#[test]
fn a_copy_no_plan_touched_is_looked_for_in_every_pull_cluster_but_held_ensured_or_explicit_ones() {
    let dep = |name: &str| Dependency {
        kind: DependencyKind::ConfigMap,
        name: name.into(),
    };
    let status = |name: &str, clusters: &[&str]| DependencyStatus {
        kind: "ConfigMap".into(),
        name: name.into(),
        state: "Failed".into(),
        clusters: clusters.iter().map(|c| (*c).to_owned()).collect(),
        ..DependencyStatus::default()
    };
    // `settings` refused in p1 (never held), held in p2; `old` no longer named, refused;
    // `fed` now explicitly federated (handed over, not swept).
    let previous = [
        status("settings", &["p2"]),
        status("old", &[]),
        status("fed", &[]),
    ];
    let wanted = BTreeMap::from([
        (dep("settings"), Lookup::Found),
        (dep("fed"), Lookup::Explicit),
    ]);
    let done = BTreeSet::from([(dep("settings"), "p3".to_owned())]);
    let pairs = unplanned(&previous, &wanted, &["p1", "p2", "p3"], &done);
    let names: Vec<(&str, &str)> = (pairs.iter())
        .map(|(d, c)| (d.name.as_str(), c.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("old", "p1"),
            ("old", "p2"),
            ("old", "p3"),
            ("settings", "p1")
        ]
    );
    // A deleted workload: every dependency it named, in every Pull cluster not held.
    let gone = unplanned(&previous, &BTreeMap::new(), &["p1"], &BTreeSet::new());
    assert_eq!(gone.len(), 3);
    assert!(unplanned(&previous, &wanted, &[], &done).is_empty());
}

#[test]
fn a_new_report_of_a_copy_requeues_its_owners_once() {
    let owners = BTreeSet::from([
        "FederatedDeployment/web".to_string(),
        "FederatedJob/migrate".to_string(),
    ]);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "settings", "namespace": "demo"}});
    let copy = pull_copy(DependencyKind::ConfigMap, &cm, &owners).expect("a copy");
    let key: Key = (Some("demo".into()), "settings".into());
    let mut work = Work::new("dep-1", WorkSpec::default());
    work.metadata.namespace = Some("flotilla-cluster-member2".into());
    work.metadata.generation = Some(1);
    work.spec.workload.manifests.push(copy.clone());
    work.spec
        .manifest_configs
        .push(entry(&key, copy.clone()).config);
    let reported = |w: &Work, status: &str, reason: ClusterReason| {
        let mut w = w.clone();
        w.status = Some(WorkStatus {
            manifest_conditions: vec![ManifestCondition {
                identifier: identify(0, &copy),
                conditions: vec![Condition {
                    type_: APPLIED.into(),
                    status: status.into(),
                    observed_generation: Some(1),
                    last_transition_time: "2026-01-01T00:00:00Z".into(),
                    reason: reason.as_str().into(),
                    message: String::new(),
                }],
                hash: desired_hash(&copy),
                ..ManifestCondition::default()
            }],
            ..WorkStatus::default()
        });
        w
    };
    let mut seen = Reports::default();
    assert_eq!(news(&mut seen, &work), vec![], "nothing reported yet");
    let refused = reported(&work, "False", ClusterReason::AlreadyExists);
    let web = (
        "FederatedDeployment".to_string(),
        (key.0.clone(), "web".into()),
    );
    let migrate = (
        "FederatedJob".to_string(),
        (key.0.clone(), "migrate".into()),
    );
    assert_eq!(news(&mut seen, &refused), vec![web.clone(), migrate]);
    assert_eq!(news(&mut seen, &refused), vec![], "the same report again");
    let applied = reported(&work, "True", ClusterReason::AlreadyExists);
    assert_eq!(news(&mut seen, &applied).first(), Some(&web));
    // Applied: a rewrite of the bundle for another copy (a new generation the report is
    // not on yet), then the agent's report of it, are no news for this copy's workloads.
    let plain = |generation: i64| {
        let mut w = reported(&work, "True", ClusterReason::AlreadyExists);
        w.metadata.generation = Some(generation);
        if let Some(c) = (w.status.as_mut()).and_then(|s| s.manifest_conditions.first_mut()) {
            c.conditions[0].reason = APPLIED.into();
            c.conditions[0].observed_generation = Some(1);
        }
        w
    };
    assert_eq!(
        news(&mut seen, &plain(1)).len(),
        2,
        "applied, after refused"
    );
    assert_eq!(
        news(&mut seen, &plain(2)),
        vec![],
        "rewritten for another copy"
    );
    let mut reported_again = plain(2);
    if let Some(s) = reported_again.status.as_mut() {
        s.manifest_conditions[0].conditions[0].observed_generation = Some(2);
    }
    assert_eq!(
        news(&mut seen, &reported_again),
        vec![],
        "its report on the new generation"
    );
    // Another Work's report is its own: a first sight is news.
    let mut other = applied.clone();
    other.metadata.name = Some("dep-2".into());
    assert_eq!(news(&mut seen, &other).len(), 2);
}
