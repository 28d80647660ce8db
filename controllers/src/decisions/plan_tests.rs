use super::*;
use flotilla_api::federated::{ClusterReference, PlacementMove};

fn subject(name: &str) -> Subject {
    Subject {
        api_version: "types.kubefed.io/v1beta1".into(),
        kind: "FederatedDeployment".into(),
        name: name.into(),
        uid: "uid-1".into(),
        namespace: "demo".into(),
    }
}

fn placed(clusters: &[&str]) -> PlacementStatus {
    PlacementStatus {
        clusters: clusters
            .iter()
            .map(|c| ClusterReference {
                name: c.to_string(),
            })
            .collect(),
        moves: Vec::new(),
    }
}

fn names(pd: &PlacementDecision) -> Vec<String> {
    pd.decisions
        .iter()
        .filter_map(|d| d.cluster_profile_ref.name.clone())
        .collect()
}

#[test]
fn a_decision_lists_the_chosen_clusters_as_profile_references() {
    let pds = desired(
        &subject("web"),
        &placed(&["member2", "member1"]),
        "kube-federation-system",
    );
    assert_eq!(pds.len(), 1);
    let pd = &pds[0];
    assert_eq!(pd.metadata.name.as_deref(), Some("web-federateddeployment"));
    assert_eq!(pd.metadata.namespace.as_deref(), Some("demo"));
    assert_eq!(
        names(pd),
        ["member2", "member1"],
        "in the scheduler's order"
    );
    let r = &pd.decisions[0].cluster_profile_ref;
    assert_eq!(r.kind.as_deref(), Some("ClusterProfile"));
    assert_eq!(r.namespace.as_deref(), Some("kube-federation-system"));
    assert_eq!(pd.scheduler_name.as_deref(), Some("flotilla"));
    let labels = pd.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get(PLACEMENT_KEY_LABEL).map(String::as_str),
        Some("federateddeployment.web")
    );
    assert_eq!(
        labels.get(DECISION_INDEX_LABEL).map(String::as_str),
        Some("0")
    );
    let owner = &pd.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("FederatedDeployment", "uid-1")
    );
}

#[test]
fn a_replacement_says_which_cluster_it_replaces() {
    let mut placement = placed(&["member1", "member3"]);
    placement.moves.push(PlacementMove {
        cluster: "member2".into(),
        reason: "Replaced".into(),
        replacement: Some("member3".into()),
        since: "2026-11-22T10:00:00Z".into(),
        message: String::new(),
    });
    let pd = &desired(&subject("web"), &placement, "ns")[0];
    assert_eq!(
        pd.decisions[1].reason.as_deref(),
        Some("replaces cluster member2")
    );
    assert_eq!(
        names(pd),
        ["member1", "member3"],
        "a cluster left is not a decision"
    );
}

#[test]
fn more_than_a_hundred_clusters_are_sliced_with_one_decision_key() {
    let clusters: Vec<String> = (0..150).map(|i| format!("c{i}")).collect();
    let refs: Vec<&str> = clusters.iter().map(String::as_str).collect();
    let pds = desired(&subject("web"), &placed(&refs), "ns");
    assert_eq!(pds.len(), 2);
    assert_eq!(pds[0].decisions.len(), 100);
    assert_eq!(
        pds[1].metadata.name.as_deref(),
        Some("web-federateddeployment-1")
    );
    let key = |pd: &PlacementDecision| {
        pd.metadata.labels.clone().unwrap_or_default()[DECISION_KEY_LABEL].clone()
    };
    assert_eq!(key(&pds[0]), key(&pds[1]));
}

#[test]
fn long_names_stay_valid_and_distinct() {
    let a = subject(&"a".repeat(250));
    let mut b = a.clone();
    b.name.push('b');
    assert!(a.base_name().len() <= 240);
    assert!(a.placement_key().len() <= 63);
    assert_ne!(a.placement_key(), b.placement_key());
    assert!(
        a.placement_key()
            .ends_with(|c: char| c.is_ascii_alphanumeric())
    );
}

#[test]
fn nothing_is_written_when_the_decision_is_published_and_changes_are() {
    let want = desired(&subject("web"), &placed(&["member1"]), "ns");
    let have = want[0].clone();
    assert_eq!(plan(&want, &[Some(&have)]), vec![]);
    let moved = desired(&subject("web"), &placed(&["member2"]), "ns");
    assert_eq!(
        plan(&moved, &[Some(&have)]),
        vec![Op::Apply(Box::new(moved[0].clone()))]
    );
    assert_eq!(
        plan(&want, &[None]),
        vec![Op::Apply(Box::new(want[0].clone()))]
    );
}

#[test]
fn slices_no_longer_needed_are_deleted() {
    let two = desired(
        &subject("web"),
        &placed(
            &(0..150)
                .map(|i| format!("c{i}"))
                .collect::<Vec<_>>()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        ),
        "ns",
    );
    let one = desired(&subject("web"), &placed(&["c0"]), "ns");
    let ops = plan(&one, &[Some(&two[0]), Some(&two[1])]);
    assert_eq!(ops.len(), 2);
    assert_eq!(ops[1], Op::Delete("web-federateddeployment-1".into()));
    assert_eq!(
        plan(&[], &[Some(&one[0])]),
        vec![Op::Delete("web-federateddeployment".into())]
    );
}
