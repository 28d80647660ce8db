//! The one pipeline from a federated object to its member objects: kubefed's placement,
//! intersected with the FederatedNamespace's placement, the constraint scheduler's decision
//! for a scheduled placement, then the desired object per selected cluster. The sync
//! controller and `flotilla diff` both call [`run`], so a preview cannot disagree with what
//! the controller does. Pure: the callers gather the inputs (caches, or the host and a
//! manifest) and act on the result.

use std::collections::BTreeSet;

use flotilla_api::{
    AggregateReason, Placement,
    core::ApiResource,
    federated::{FederatedSpec, FederatedStatus},
};
use flotilla_core::{
    placement::{self, ClusterInfo},
    schedule::Decision,
};

use super::{DesiredSet, decision, desired_objects};
use crate::multicluster::ClusterState;

/// An object-level placement failure: (reason, message). Nothing is selected, except that
/// a scheduling failure keeps the stored decision's clusters.
pub type PlacementFailure = (AggregateReason, String);

/// What the namespace placement contributes for one object.
#[derive(Clone, Debug, PartialEq)]
pub enum NamespacePlacement {
    /// Not applied: a cluster-scoped target, a Namespace itself, or a federation scoped to
    /// one namespace (KubeFedConfig `scope: Namespaced`).
    NotApplied,
    /// The placement of the FederatedNamespace of the object's namespace.
    Federated(Placement),
    /// The object's namespace has no FederatedNamespace: placed nowhere.
    Missing(String),
    /// The FederatedNamespace's spec cannot be read.
    Malformed(String),
}

impl NamespacePlacement {
    /// The namespace whose FederatedNamespace placement applies to an object of
    /// `namespace`, if one does: namespaced targets other than Namespace, unless the
    /// federation is scoped to one namespace. Both callers read the FederatedNamespace only
    /// then.
    pub fn applies<'n>(
        needs_ns_placement: bool,
        federation_scope: &str,
        namespace: Option<&'n str>,
    ) -> Option<&'n str> {
        namespace.filter(|_| needs_ns_placement && federation_scope != "Namespaced")
    }

    /// The rule both callers apply: [`NamespacePlacement::applies`], then what the
    /// FederatedNamespace says (`fns`: its spec if there is one, `Err` when malformed).
    pub fn of(
        needs_ns_placement: bool,
        federation_scope: &str,
        namespace: Option<&str>,
        fns: Option<Result<FederatedSpec, String>>,
    ) -> Self {
        let Some(ns) = Self::applies(needs_ns_placement, federation_scope, namespace) else {
            return NamespacePlacement::NotApplied;
        };
        match fns {
            None => NamespacePlacement::Missing(ns.to_string()),
            Some(Ok(spec)) => NamespacePlacement::Federated(spec.placement),
            Some(Err(e)) => NamespacePlacement::Malformed(e),
        }
    }
}

/// Everything the pipeline reads for one federated object.
#[derive(Clone, Copy)]
pub struct Input<'a> {
    /// The target type (what the members get).
    pub target: &'a ApiResource,
    /// Name of the federated object.
    pub name: &'a str,
    /// Its namespace.
    pub namespace: Option<&'a str>,
    /// Its spec.
    pub spec: &'a FederatedSpec,
    /// Its status: the stored scheduling decision and where it is propagated.
    pub previous: &'a FederatedStatus,
    /// The registered clusters, one snapshot.
    pub clusters: &'a [ClusterState],
    /// The namespace placement ([`NamespacePlacement::of`]).
    pub namespace_placement: &'a NamespacePlacement,
    /// Status collection is on (the scheduler then waits for availability).
    pub collect_status: bool,
    /// KubeFedConfig's default unreachable toleration, in seconds.
    pub default_unreachable_seconds: i64,
}

/// What the pipeline decided.
#[derive(Debug)]
pub struct Outcome {
    /// The clusters that must hold the object.
    pub selected: BTreeSet<String>,
    /// The scheduler's decision, for a scheduled placement that could be decided.
    pub decision: Option<Decision>,
    /// Why the object could not be placed as asked, if it could not.
    pub failure: Option<PlacementFailure>,
    /// The desired object per selected cluster.
    pub desired: DesiredSet,
}

/// Placement → namespace placement → scheduling → desired objects.
pub fn run(input: &Input<'_>) -> Outcome {
    let (selected, decision, failure) = targets(input);
    let desired = desired_objects(
        input.target,
        input.name,
        input.namespace,
        input.spec,
        &selected,
    );
    Outcome {
        selected,
        decision,
        failure,
        desired,
    }
}

type Targets = (BTreeSet<String>, Option<Decision>, Option<PlacementFailure>);

/// The clusters [`run`] would select, without computing the desired objects.
pub fn selected(input: &Input<'_>) -> BTreeSet<String> {
    targets(input).0
}

fn targets(input: &Input<'_>) -> Targets {
    let selected = match placed(input) {
        Ok(s) => s,
        Err(failure) => return (BTreeSet::new(), None, Some(failure)),
    };
    if !input.spec.placement.is_scheduled() {
        return (selected, None, None);
    }
    match decision::decide(
        input.spec,
        &selected,
        input.clusters,
        input.previous,
        input.collect_status,
        input.default_unreachable_seconds,
    ) {
        Ok(d) => (d.targets(), Some(d), None),
        // A preference that cannot be evaluated must not remove copies: the stored
        // decision holds until it is fixed.
        Err(e) => (
            decision::stored_targets(input.previous),
            None,
            Some((
                AggregateReason::ComputePlacementFailed,
                format!("preferences: {e}"),
            )),
        ),
    }
}

/// kubefed's placement, intersected with the namespace placement.
fn placed(input: &Input<'_>) -> Result<BTreeSet<String>, PlacementFailure> {
    let infos: Vec<ClusterInfo<'_>> = input
        .clusters
        .iter()
        .map(|c| ClusterInfo {
            name: &c.name,
            labels: &c.labels,
        })
        .collect();
    let failed = |e: String| (AggregateReason::ComputePlacementFailed, e);
    let selected =
        placement::select(&input.spec.placement, &infos).map_err(|e| failed(e.to_string()))?;
    match input.namespace_placement {
        NamespacePlacement::NotApplied => Ok(selected),
        NamespacePlacement::Federated(p) => {
            let ns_selected = placement::select(p, &infos)
                .map_err(|e| failed(format!("namespace placement: {e}")))?;
            Ok(placement::intersect(&selected, &ns_selected))
        }
        NamespacePlacement::Missing(ns) => Err((
            AggregateReason::NamespaceNotFederated,
            format!(
                "namespace {ns} is not federated: create a FederatedNamespace named {ns} in it"
            ),
        )),
        NamespacePlacement::Malformed(e) => Err(failed(e.clone())),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use flotilla_api::core::Scope;
    use serde_json::{Value, json};

    use super::*;

    fn cluster(name: &str) -> ClusterState {
        ClusterState {
            name: name.into(),
            labels: BTreeMap::from([("name".to_string(), name.to_string())]),
            ready: true,
            taints: Vec::new(),
            client: None,
            client_generation: 0,
            pull: false,
        }
    }

    fn target() -> ApiResource {
        ApiResource {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            plural_name: "configmaps".into(),
            scope: Scope::Namespaced,
        }
    }

    fn spec(v: Value) -> FederatedSpec {
        serde_json::from_value(v).expect("spec")
    }

    fn status(v: Value) -> FederatedStatus {
        serde_json::from_value(v).expect("status")
    }

    fn run_with(
        spec: &FederatedSpec,
        previous: &FederatedStatus,
        ns: &NamespacePlacement,
    ) -> Outcome {
        let clusters = [cluster("m1"), cluster("m2"), cluster("m3")];
        run(&Input {
            target: &target(),
            name: "cm",
            namespace: Some("demo"),
            spec,
            previous,
            clusters: &clusters,
            namespace_placement: ns,
            collect_status: false,
            default_unreachable_seconds: 300,
        })
    }

    fn names(set: &BTreeSet<String>) -> Vec<&str> {
        set.iter().map(String::as_str).collect()
    }

    #[test]
    fn the_namespace_placement_applies_only_to_namespaced_objects_of_a_cluster_scoped_federation() {
        let fns = || {
            Some(Ok(spec(
                json!({"placement": {"clusters": [{"name": "m1"}]}}),
            )))
        };
        assert_eq!(
            NamespacePlacement::of(false, "Cluster", Some("demo"), fns()),
            NamespacePlacement::NotApplied
        );
        assert_eq!(
            NamespacePlacement::of(true, "Namespaced", Some("demo"), fns()),
            NamespacePlacement::NotApplied
        );
        assert_eq!(
            NamespacePlacement::of(true, "Cluster", None, fns()),
            NamespacePlacement::NotApplied
        );
        assert!(matches!(
            NamespacePlacement::of(true, "Cluster", Some("demo"), fns()),
            NamespacePlacement::Federated(_)
        ));
        assert_eq!(
            NamespacePlacement::of(true, "Cluster", Some("demo"), None),
            NamespacePlacement::Missing("demo".into())
        );
        assert_eq!(
            NamespacePlacement::of(true, "Cluster", Some("demo"), Some(Err("bad".into()))),
            NamespacePlacement::Malformed("bad".into())
        );
    }

    #[test]
    fn placement_is_intersected_with_the_namespace_placement() {
        let s = spec(json!({"template": {"data": {}}, "placement": {"clusterSelector": {}}}));
        let ns = NamespacePlacement::Federated(
            spec(json!({"placement": {"clusters": [{"name": "m2"}, {"name": "m3"}]}})).placement,
        );
        let out = run_with(&s, &FederatedStatus::default(), &ns);
        assert_eq!(names(&out.selected), ["m2", "m3"]);
        assert_eq!(out.desired.by_cluster.len(), 2);
        assert!(out.failure.is_none());
        let clusters = [cluster("m1"), cluster("m2"), cluster("m3")];
        let input = Input {
            target: &target(),
            name: "cm",
            namespace: Some("demo"),
            spec: &s,
            previous: &FederatedStatus::default(),
            clusters: &clusters,
            namespace_placement: &ns,
            collect_status: false,
            default_unreachable_seconds: 300,
        };
        assert_eq!(
            selected(&input),
            out.selected,
            "selected() is run()'s selection"
        );
    }

    #[test]
    fn an_unfederated_or_malformed_namespace_selects_nothing_and_says_why() {
        let s = spec(json!({"template": {"data": {}}, "placement": {"clusterSelector": {}}}));
        let out = run_with(
            &s,
            &FederatedStatus::default(),
            &NamespacePlacement::Missing("demo".into()),
        );
        assert!(out.selected.is_empty() && out.desired.by_cluster.is_empty());
        assert_eq!(
            out.failure.map(|f| f.0),
            Some(AggregateReason::NamespaceNotFederated)
        );
        let out = run_with(
            &s,
            &FederatedStatus::default(),
            &NamespacePlacement::Malformed("x".into()),
        );
        assert!(out.selected.is_empty());
        assert_eq!(
            out.failure.map(|f| f.0),
            Some(AggregateReason::ComputePlacementFailed)
        );
    }

    #[test]
    fn a_failing_schedule_keeps_the_stored_decisions_clusters() {
        let s = spec(json!({
            "template": {"data": {}},
            "placement": {
                "clusterSelector": {},
                "maxClusters": 1,
                "preferences": [{"weight": 1, "selector": {"matchExpressions": [{"key": "name", "operator": "Near", "values": ["m1"]}]}}]
            }
        }));
        let previous = status(json!({"placement": {"clusters": [{"name": "m3"}]}}));
        let out = run_with(&s, &previous, &NamespacePlacement::NotApplied);
        assert_eq!(names(&out.selected), ["m3"], "the stored decision holds");
        assert!(out.decision.is_none());
        assert_eq!(
            out.failure.map(|f| f.0),
            Some(AggregateReason::ComputePlacementFailed)
        );
        assert!(out.desired.by_cluster.contains_key("m3"));
    }

    #[test]
    fn a_scheduled_placement_goes_where_the_scheduler_decides() {
        let s = spec(
            json!({"template": {"data": {}}, "placement": {"clusterSelector": {}, "maxClusters": 2}}),
        );
        let out = run_with(
            &s,
            &FederatedStatus::default(),
            &NamespacePlacement::NotApplied,
        );
        assert_eq!(out.selected.len(), 2);
        let decided = out.decision.as_ref().map(Decision::targets);
        assert_eq!(decided.as_ref(), Some(&out.selected));
    }
}
