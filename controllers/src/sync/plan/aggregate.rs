//! Pure: the inputs of a workload's aggregated status ([`flotilla_core::workload`]) from
//! one reconcile's results — which clusters the object is placed on (every cluster in the
//! status except those it is being removed from), whether each is propagated, the member's
//! spec (or, when the member is unreachable, the spec Flotilla applies there) and the
//! collected member status.

use std::collections::BTreeMap;

use flotilla_api::workload::AggregatedStatus;
use flotilla_core::{
    health::TypeHealth,
    workload::{ClusterWorkload, aggregate},
};
use serde_json::Value;

use super::{DesiredFor, DesiredSet, Outcome};

/// The member object's `spec` and `metadata.generation`, per cluster that has it.
pub type MemberSpecs = BTreeMap<String, (Value, Option<i64>)>;

/// The member specs of the clusters whose cache holds the object (`objects`: cluster →
/// member object).
pub fn member_specs<'a>(objects: impl IntoIterator<Item = (&'a str, &'a Value)>) -> MemberSpecs {
    objects
        .into_iter()
        .filter_map(|(cluster, obj)| {
            let spec = obj.get("spec")?.clone();
            let generation = obj.pointer("/metadata/generation").and_then(Value::as_i64);
            Some((cluster.to_owned(), (spec, generation)))
        })
        .collect()
}

/// The aggregated status of an object of a type with `health` rules from the per-cluster
/// outcomes.
pub fn aggregated(
    health: &TypeHealth,
    outcomes: &BTreeMap<String, Outcome>,
    members: &MemberSpecs,
    desired: &DesiredSet,
    remote: &BTreeMap<String, Value>,
) -> AggregatedStatus {
    let clusters: Vec<ClusterWorkload<'_>> = outcomes
        .iter()
        .filter(|(_, o)| !matches!(o, Outcome::Gone | Outcome::Removing))
        .map(|(name, o)| {
            let member = members.get(name);
            let desired_spec = match desired.by_cluster.get(name) {
                Some(DesiredFor::Object { object, .. }) => object.get("spec"),
                _ => None,
            };
            ClusterWorkload {
                cluster: name,
                propagated: matches!(o, Outcome::Ok),
                spec: member.map(|(spec, _)| spec).or(desired_spec),
                generation: member.and_then(|(_, generation)| *generation),
                status: remote.get(name),
            }
        })
        .collect();
    aggregate(health, &clusters)
}

/// The aggregated status to write: while a selected cluster's cache is still listing
/// (`waiting`: cluster → selected), its member object's spec and generation are unknown, so
/// the previous summary stands (a restart would otherwise write a summary without them and
/// then the true one again); a new object's summary is the one computed.
pub fn unless_listing(
    computed: AggregatedStatus,
    previous: Option<&AggregatedStatus>,
    waiting: &BTreeMap<String, bool>,
) -> AggregatedStatus {
    match previous {
        Some(previous) if waiting.values().any(|selected| *selected) => previous.clone(),
        _ => computed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::ClusterReason;
    use serde_json::json;

    fn deployment() -> std::sync::Arc<TypeHealth> {
        let target = flotilla_api::core::ApiResource {
            group: "apps".into(),
            kind: "Deployment".into(),
            ..Default::default()
        };
        TypeHealth::of(&target, None)
    }

    fn desired(replicas: i64) -> DesiredSet {
        let mut set = DesiredSet::default();
        for c in ["m1", "m2"] {
            set.by_cluster.insert(
                c.into(),
                DesiredFor::Object {
                    object: json!({"spec": {"replicas": replicas}}),
                    hash: "h".into(),
                },
            );
        }
        set
    }

    fn ready(n: i64) -> Value {
        json!({"observedGeneration": 1, "replicas": n, "readyReplicas": n,
               "availableReplicas": n, "updatedReplicas": n})
    }

    #[test]
    fn an_unreachable_member_counts_the_replicas_flotilla_wants_there() {
        let outcomes = BTreeMap::from([
            ("m1".to_string(), Outcome::Ok),
            (
                "m2".to_string(),
                Outcome::Status(ClusterReason::ClusterNotReady, String::new()),
            ),
        ]);
        let members = member_specs([(
            "m1",
            &json!({"metadata": {"generation": 1}, "spec": {"replicas": 3}}),
        )]);
        let remote = BTreeMap::from([("m1".to_string(), ready(3))]);
        let a = aggregated(&deployment(), &outcomes, &members, &desired(3), &remote);
        assert_eq!(a.clusters, "1/2");
        assert_eq!(a.ready.as_deref(), Some("3/6"));
    }

    #[test]
    fn a_cluster_the_object_leaves_is_not_counted() {
        let outcomes = BTreeMap::from([
            ("m1".to_string(), Outcome::Ok),
            ("m2".to_string(), Outcome::Removing),
            ("m3".to_string(), Outcome::Gone),
        ]);
        let remote = BTreeMap::from([("m1".to_string(), ready(2))]);
        let a = aggregated(
            &deployment(),
            &outcomes,
            &MemberSpecs::new(),
            &desired(2),
            &remote,
        );
        assert_eq!(a.clusters, "1/1");
        assert_eq!(a.ready.as_deref(), Some("2/2"));
    }

    #[test]
    fn the_member_spec_wins_over_the_desired_one() {
        // retainReplicas or an HPA in the member: the member's own replicas are the target.
        let outcomes = BTreeMap::from([("m1".to_string(), Outcome::Ok)]);
        let members = member_specs([("m1", &json!({"spec": {"replicas": 5}}))]);
        let a = aggregated(
            &deployment(),
            &outcomes,
            &members,
            &desired(2),
            &BTreeMap::from([("m1".to_string(), ready(5))]),
        );
        assert_eq!(a.ready.as_deref(), Some("5/5"));
    }

    #[test]
    fn a_listing_cache_keeps_the_previous_summary() {
        let computed = AggregatedStatus {
            clusters: "1/2".into(),
            ..Default::default()
        };
        let previous = AggregatedStatus {
            clusters: "2/2".into(),
            ..Default::default()
        };
        let listing = BTreeMap::from([("m2".to_string(), true)]);
        let deselected = BTreeMap::from([("m2".to_string(), false)]);
        let none = BTreeMap::new();
        let kept = unless_listing(computed.clone(), Some(&previous), &listing);
        assert_eq!(kept, previous);
        let fresh = unless_listing(computed.clone(), None, &listing);
        assert_eq!(fresh, computed);
        let settled = unless_listing(computed.clone(), Some(&previous), &none);
        assert_eq!(settled, computed);
        let other = unless_listing(computed.clone(), Some(&previous), &deselected);
        assert_eq!(other, computed);
    }
}
