use super::*;
use flotilla_api::{
    KubeFedClusterSpec, KubeFedClusterStatus,
    core::{ClusterCondition, LocalSecretReference},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const CREATED: &str = "2026-11-22T10:00:00Z";

fn kfc(name: &str) -> KubeFedCluster {
    let mut kfc = KubeFedCluster::new(
        name,
        KubeFedClusterSpec {
            api_endpoint: "https://127.0.0.1:6443".into(),
            ca_bundle: Some("Q0E=".into()),
            secret_ref: LocalSecretReference {
                name: format!("{name}-token"),
            },
            ..Default::default()
        },
    );
    kfc.metadata.namespace = Some("kube-federation-system".into());
    kfc.metadata.uid = Some(format!("uid-{name}"));
    kfc.metadata.creation_timestamp =
        Some(serde_json::from_value(CREATED.into()).expect("present in the test data"));
    kfc
}

fn with_ready(mut kfc: KubeFedCluster, status: &str, reason: &str, at: &str) -> KubeFedCluster {
    kfc.status = Some(KubeFedClusterStatus {
        conditions: vec![ClusterCondition {
            type_: "Ready".into(),
            status: status.into(),
            last_probe_time: "2026-11-22T12:00:00Z".into(),
            last_transition_time: Some(at.into()),
            reason: Some(reason.into()),
            message: Some(format!("{reason} message")),
        }],
        kubernetes_version: Some("v1.20.2".into()),
        ..Default::default()
    });
    kfc
}

const NAMESPACE: &str = "kube-federation-system";

fn inputs(properties: &BTreeMap<String, Vec<Property>>) -> Inputs<'_> {
    Inputs {
        namespace: NAMESPACE,
        properties,
    }
}

fn profile_of(kfc: &KubeFedCluster) -> ClusterProfile {
    desired_profile(kfc, inputs(&BTreeMap::new()), None).expect("present in the test data")
}

fn healthy(profile: &ClusterProfile) -> ProfileCondition {
    profile
        .status
        .as_ref()
        .and_then(|s| s.condition(condition::CONTROL_PLANE_HEALTHY))
        .cloned()
        .expect("present in the test data")
}

#[test]
fn a_ready_cluster_has_a_healthy_profile_with_its_version() {
    let kfc = with_ready(
        kfc("member1"),
        "True",
        "ClusterReady",
        "2026-11-22T11:00:00Z",
    );
    let profile = profile_of(&kfc);
    assert_eq!(profile.spec.cluster_manager.name, "flotilla");
    assert_eq!(profile.spec.display_name.as_deref(), Some("member1"));
    assert_eq!(
        profile
            .labels()
            .get(CLUSTER_MANAGER_LABEL)
            .map(String::as_str),
        Some("flotilla")
    );
    assert_eq!(
        profile.namespace().as_deref(),
        Some("kube-federation-system")
    );
    let c = healthy(&profile);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "ClusterReady")
    );
    assert_eq!(c.last_transition_time, "2026-11-22T11:00:00Z");
    let status = profile.status.expect("present in the test data");
    assert_eq!(
        status.version.and_then(|v| v.kubernetes).as_deref(),
        Some("v1.20.2")
    );
    let joined = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Joined")
        .expect("present in the test data");
    assert_eq!(
        (joined.status.as_str(), joined.last_transition_time.as_str()),
        ("True", CREATED)
    );
}

#[test]
fn an_unreachable_cluster_is_unhealthy_with_the_registrys_reason() {
    let kfc = with_ready(
        kfc("member1"),
        "False",
        "ClusterNotReachable",
        "2026-11-22T11:30:00Z",
    );
    let c = healthy(&profile_of(&kfc));
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ClusterNotReachable")
    );
    assert_eq!(c.message, "ClusterNotReachable message");
}

#[test]
fn a_cluster_not_probed_yet_is_of_unknown_health_since_it_joined() {
    let c = healthy(&profile_of(&kfc("member1")));
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("Unknown", REASON_NOT_PROBED)
    );
    assert_eq!(c.last_transition_time, CREATED);
}

#[test]
fn a_new_probe_without_a_transition_changes_nothing() {
    let before = with_ready(
        kfc("member1"),
        "True",
        "ClusterReady",
        "2026-11-22T11:00:00Z",
    );
    let mut after = before.clone();
    if let Some(s) = after.status.as_mut() {
        s.conditions[0].last_probe_time = "2026-11-22T12:05:00Z".into();
    }
    assert_eq!(profile_of(&before), profile_of(&after));
}

#[test]
fn the_profile_names_the_server_and_ca_but_never_the_token_secret() {
    let profile = profile_of(&kfc("member1"));
    let access = &profile
        .status
        .as_ref()
        .expect("present in the test data")
        .access_providers;
    assert_eq!(access.len(), 1);
    assert_eq!(access[0].name, ACCESS_PROVIDER_NAME);
    assert_eq!(access[0].cluster.server, "https://127.0.0.1:6443");
    assert_eq!(
        access[0].cluster.certificate_authority_data.as_deref(),
        Some("Q0E=")
    );
    let json = serde_json::to_string(&profile).expect("present in the test data");
    assert!(!json.contains("member1-token"), "{json}");
    assert!(!json.to_lowercase().contains("token"), "{json}");
}

#[test]
fn the_profile_is_owned_by_its_kubefedcluster() {
    let profile = profile_of(&kfc("member1"));
    let owner = &profile.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("KubeFedCluster", "uid-member1")
    );
    assert_eq!(owner.controller, Some(true));
}

#[test]
fn a_cluster_being_deleted_has_no_profile() {
    let mut kfc = kfc("member1");
    kfc.metadata.deletion_timestamp = Some(Time(Default::default()));
    assert_eq!(desired_profile(&kfc, inputs(&BTreeMap::new()), None), None);
}

#[test]
fn a_missing_profile_is_applied() {
    let kfc = kfc("member1");
    let ops = plan([&kfc], &[], &BTreeMap::new(), inputs(&BTreeMap::new()));
    assert_eq!(ops, vec![Op::Apply(Box::new(profile_of(&kfc)), Parts::ALL)]);
}

#[test]
fn an_up_to_date_profile_is_not_written_again() {
    let kfc = with_ready(
        kfc("member1"),
        "True",
        "ClusterReady",
        "2026-11-22T11:00:00Z",
    );
    let mut current = profile_of(&kfc);
    current.metadata.uid = Some("p1".into());
    current
        .labels_mut()
        .insert("someone.else/label".into(), "x".into());
    assert_eq!(
        plan(
            [&kfc],
            &[&current],
            &BTreeMap::new(),
            inputs(&BTreeMap::new())
        ),
        vec![]
    );
    let applied = BTreeMap::from([("member1".to_string(), profile_of(&kfc))]);
    assert_eq!(
        plan([&kfc], &[&current], &applied, inputs(&BTreeMap::new())),
        vec![]
    );
}

#[test]
fn a_health_change_rewrites_the_status_alone() {
    let ready = with_ready(
        kfc("member1"),
        "True",
        "ClusterReady",
        "2026-11-22T11:00:00Z",
    );
    let down = with_ready(
        kfc("member1"),
        "False",
        "ClusterNotReachable",
        "2026-11-22T11:30:00Z",
    );
    let current = profile_of(&ready);
    assert_eq!(
        plan(
            [&down],
            &[&current],
            &BTreeMap::new(),
            inputs(&BTreeMap::new())
        ),
        vec![Op::Apply(
            Box::new(profile_of(&down)),
            Parts {
                spec: false,
                status: true
            }
        )]
    );
}

#[test]
fn a_label_the_cluster_lost_is_removed_from_its_profile_and_its_status_left_alone() {
    let mut labelled = kfc("member1");
    labelled.labels_mut().insert("region".into(), "eu".into());
    let plain = kfc("member1");
    let current = profile_of(&labelled);
    let applied = BTreeMap::from([("member1".to_string(), profile_of(&labelled))]);
    assert_eq!(
        plan([&plain], &[&current], &applied, inputs(&BTreeMap::new())),
        vec![Op::Apply(
            Box::new(profile_of(&plain)),
            Parts {
                spec: true,
                status: false
            }
        )]
    );
}

#[test]
fn the_profile_of_a_cluster_that_left_is_deleted() {
    let kept = kfc("member1");
    let mut gone = profile_of(&kfc("member2"));
    gone.metadata.uid = Some("p2".into());
    let current = profile_of(&kept);
    assert_eq!(
        plan(
            [&kept],
            &[&current, &gone],
            &BTreeMap::new(),
            inputs(&BTreeMap::new())
        ),
        vec![Op::Delete {
            name: "member2".into(),
            uid: Some("p2".into())
        }]
    );
}

#[test]
fn a_profile_of_another_cluster_manager_is_foreign_and_ours_is_not() {
    let ours = profile_of(&kfc("member1"));
    let mut theirs = ours.clone();
    theirs.spec.cluster_manager.name = "open-cluster-management".into();
    assert!(!is_foreign(&ours));
    assert!(is_foreign(&theirs));
}

#[test]
fn known_properties_are_published_and_unknown_ones_kept() {
    let kfc = with_ready(kfc("member1"), "True", "ClusterReady", CREATED);
    let region = Property {
        name: "region".into(),
        value: "eu".into(),
        last_observed_time: None,
    };
    let known = BTreeMap::from([("member1".to_string(), vec![region.clone()])]);
    let with_props = desired_profile(&kfc, inputs(&known), None).expect("a profile");
    let listed = &with_props.status.as_ref().expect("a status").properties;
    assert_eq!(listed, &vec![region.clone()]);
    // The member is unreachable: its properties are unknown, the profile keeps them.
    let kept =
        desired_profile(&kfc, inputs(&BTreeMap::new()), Some(&with_props)).expect("a profile");
    assert_eq!(kept, with_props);
    // Known and gone: removed.
    let none = BTreeMap::from([("member1".to_string(), vec![])]);
    let cleared = desired_profile(&kfc, inputs(&none), Some(&with_props)).expect("a profile");
    assert!(cleared.status.expect("a status").properties.is_empty());
}

#[test]
fn a_profile_outside_the_clusters_namespace_has_no_owner() {
    let kfc = kfc("member1");
    let props = BTreeMap::new();
    let elsewhere = Inputs {
        namespace: "fleet",
        properties: &props,
    };
    let profile = desired_profile(&kfc, elsewhere, None).expect("a profile");
    assert_eq!(profile.namespace().as_deref(), Some("fleet"));
    assert!(profile.owner_references().is_empty());
}
