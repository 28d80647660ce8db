//! The replicas a ReplicaSchedulingPreference divides, as written into a Federated
//! object: a `/spec/replicas` override per placed cluster (the object's other overrides
//! kept) and, unless the object's placement is scheduled, `placement.clusters`. Shared by
//! the RSP controller, which writes them, and the policy controller, which keeps them when
//! it rewrites a Federated object an RSP divides ([`keep_division`]).

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::federated::{ClusterOverride, ClusterOverrides, ClusterReference, FederatedSpec};
use serde_json::json;

/// `desired` (a spec the policy controller builds) with the division an RSP wrote into
/// `current` kept: the same replica overrides, and the same `placement.clusters` when the
/// placement is not scheduled — exactly what the RSP controller would write over
/// `desired`, so the two controllers agree and neither writes again. `desired` as it is
/// while `current` holds no division yet (the RSP controller has not written).
pub fn keep_division(desired: FederatedSpec, current: &FederatedSpec) -> FederatedSpec {
    let plan = current_replicas(current);
    if plan.is_empty() {
        return desired;
    }
    let composed = desired.placement.is_scheduled();
    let (placed, overrides) = apply_plan(&desired, &plan, composed);
    let mut out = desired;
    out.overrides = overrides;
    if !composed {
        out.placement.clusters = Some(placed);
    }
    out
}

/// Whether the target already has the placement and overrides of the plan.
pub fn is_scheduled(
    spec: &FederatedSpec,
    placement_clusters: &[ClusterReference],
    overrides: &[ClusterOverrides],
) -> bool {
    let current_clusters: Option<BTreeSet<&String>> = spec
        .placement
        .clusters
        .as_ref()
        .map(|l| l.iter().map(|c| &c.name).collect());
    let wanted_clusters: BTreeSet<&String> = placement_clusters.iter().map(|c| &c.name).collect();
    current_clusters.as_ref() == Some(&wanted_clusters) && overrides == spec.overrides
}

/// The replicas per cluster the target's overrides set now.
pub fn current_replicas(spec: &FederatedSpec) -> BTreeMap<String, i64> {
    spec.overrides
        .iter()
        .filter_map(|o| {
            let v = o
                .cluster_overrides
                .iter()
                .find(|op| op.path == "/spec/replicas")?
                .value
                .as_ref()?
                .as_i64()?;
            Some((o.cluster_name.clone(), v))
        })
        .collect()
}

/// Placement and overrides for a plan: clusters with replicas (or, with `keep_zero`, every
/// planned cluster — the scheduler places the object there anyway) are placed, each with a
/// `/spec/replicas` override; the target's other overrides are kept as they are.
pub fn apply_plan(
    spec: &FederatedSpec,
    plan: &BTreeMap<String, i64>,
    keep_zero: bool,
) -> (Vec<ClusterReference>, Vec<ClusterOverrides>) {
    let placed: Vec<ClusterReference> = plan
        .iter()
        .filter(|(_, n)| **n > 0 || keep_zero)
        .map(|(c, _)| ClusterReference { name: c.clone() })
        .collect();
    let mut overrides: Vec<ClusterOverrides> = spec
        .overrides
        .iter()
        .map(|o| ClusterOverrides {
            cluster_name: o.cluster_name.clone(),
            cluster_overrides: o
                .cluster_overrides
                .iter()
                .filter(|op| op.path != "/spec/replicas")
                .cloned()
                .collect(),
        })
        .collect();
    for c in &placed {
        let n = plan.get(&c.name).copied().unwrap_or(0);
        let op = ClusterOverride {
            op: None,
            path: "/spec/replicas".into(),
            value: Some(json!(n)),
        };
        match overrides.iter_mut().find(|o| o.cluster_name == c.name) {
            Some(o) => o.cluster_overrides.insert(0, op),
            None => overrides.push(ClusterOverrides {
                cluster_name: c.name.clone(),
                cluster_overrides: vec![op],
            }),
        }
    }
    overrides.retain(|o| !o.cluster_overrides.is_empty());
    overrides.sort_by(|a, b| a.cluster_name.cmp(&b.cluster_name));
    (placed, overrides)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_sets_placement_and_replica_overrides_keeping_other_overrides() {
        let spec: FederatedSpec = serde_json::from_value(json!({
            "template": {},
            "overrides": [
                {"clusterName": "b", "clusterOverrides": [{"path": "/spec/replicas", "value": 1}, {"path": "/metadata/labels/x", "value": "y"}]},
                {"clusterName": "gone", "clusterOverrides": [{"path": "/spec/replicas", "value": 4}]}
            ]
        }))
        .expect("valid spec");
        let plan = BTreeMap::from([
            ("a".to_string(), 6),
            ("b".to_string(), 3),
            ("c".to_string(), 0),
        ]);
        let (placed, overrides) = apply_plan(&spec, &plan, false);
        assert_eq!(
            placed.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            vec!["a", "b"]
        );
        let by: BTreeMap<_, _> = overrides
            .iter()
            .map(|o| (o.cluster_name.as_str(), o))
            .collect();
        assert_eq!(by["a"].cluster_overrides[0].value, Some(json!(6)));
        assert_eq!(
            by["b"].cluster_overrides.len(),
            2,
            "the label override is kept"
        );
        assert_eq!(by["b"].cluster_overrides[0].value, Some(json!(3)));
        assert!(
            !by.contains_key("gone"),
            "a cluster left with no override is dropped"
        );
    }

    #[test]
    fn current_replicas_are_read_from_the_overrides() {
        let spec: FederatedSpec = serde_json::from_value(json!({
            "overrides": [{"clusterName": "a", "clusterOverrides": [{"path": "/spec/replicas", "value": 2}]}]
        }))
        .expect("valid spec");
        assert_eq!(
            current_replicas(&spec),
            BTreeMap::from([("a".to_string(), 2)])
        );
    }

    #[test]
    fn a_target_with_the_planned_placement_and_overrides_is_already_scheduled() {
        let spec: FederatedSpec = serde_json::from_value(json!({
            "placement": {"clusters": [{"name": "a"}]},
            "overrides": [{"clusterName": "a", "clusterOverrides": [{"path": "/spec/replicas", "value": 2}]}]
        }))
        .expect("valid spec");
        let (placed, overrides) = apply_plan(&spec, &BTreeMap::from([("a".to_string(), 2)]), false);
        assert!(is_scheduled(&spec, &placed, &overrides));
        let (placed, overrides) = apply_plan(&spec, &BTreeMap::from([("a".to_string(), 3)]), false);
        assert!(!is_scheduled(&spec, &placed, &overrides));
    }
    #[test]
    fn the_policy_keeps_the_division_an_rsp_wrote() {
        let current: FederatedSpec = serde_json::from_value(json!({
            "placement": {"clusters": [{"name": "a"}, {"name": "b"}]},
            "overrides": [
                {"clusterName": "a", "clusterOverrides": [{"path": "/spec/replicas", "value": 4}]},
                {"clusterName": "b", "clusterOverrides": [{"path": "/spec/replicas", "value": 2}]}
            ]
        }))
        .expect("valid spec");
        let desired: FederatedSpec = serde_json::from_value(json!({
            "placement": {"clusterSelector": {}},
            "overrides": [{"clusterName": "b", "clusterOverrides": [
                {"path": "/spec/replicas", "value": 9},
                {"path": "/spec/template/spec/containers/0/image", "value": "web:2"}
            ]}]
        }))
        .expect("valid spec");
        let kept = keep_division(desired, &current);
        assert_eq!(current_replicas(&kept), current_replicas(&current));
        let names: Vec<_> = kept
            .placement
            .clusters
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            kept.overrides[1].cluster_overrides.len(),
            2,
            "the image override stays"
        );
        assert!(
            is_scheduled(
                &kept,
                kept.placement.clusters.as_deref().unwrap_or_default(),
                &kept.overrides
            ),
            "the RSP controller finds nothing to write"
        );
    }

    #[test]
    fn before_the_rsp_writes_the_policy_spec_is_kept_as_it_is() {
        let desired: FederatedSpec = serde_json::from_value(json!({
            "placement": {"clusterSelector": {}},
            "overrides": [{"clusterName": "b", "clusterOverrides": [{"path": "/spec/replicas", "value": 9}]}]
        }))
        .expect("valid spec");
        assert_eq!(
            keep_division(desired.clone(), &FederatedSpec::default()),
            desired
        );
    }
}
