//! A policy's `replicaScheduling` → the ReplicaSchedulingPreference the policy controller
//! keeps for a selected Deployment or ReplicaSet, so that one scheduler (with kubefed's
//! capacity estimate, `AvailableReplicas`, reasons in status and `flotilla rebalance`)
//! divides replicas for both resource models. Pure.

use std::collections::BTreeMap;

use flotilla_api::{
    policy::{MATERIALIZED_LABEL, POLICY_ANNOTATION, PropagationSpec},
    scheduling::{ClusterPreferences, ReplicaSchedulingPreferenceSpec},
};
use serde_json::{Value, json};

use crate::policy_materialize::NativeOwner;

/// Why a policy's `replicaScheduling` divides nothing for an object it propagates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ignored {
    /// The policy also asks to keep each member's replicas (`retainReplicas`).
    RetainReplicas,
    /// The placement names no cluster (`clusters: []`).
    NoCluster,
}

impl Ignored {
    /// For the Event on the object.
    pub fn message(self) -> &'static str {
        match self {
            Ignored::RetainReplicas => {
                "replicaScheduling is ignored: the policy sets retainReplicas (the members own their replicas)"
            }
            Ignored::NoCluster => {
                "replicaScheduling divides nothing: the placement names no cluster"
            }
        }
    }
}

/// The RSP spec for `native` (of Federated kind `fed_kind`) under `policy`: `Ok(None)`
/// when the policy has no `replicaScheduling` or the kind has no replicas to divide.
/// `totalReplicas` is the object's `spec.replicas` (default 1). A placement naming its
/// clusters gives the RSP exactly those clusters (their own entry, else `*`); a
/// `clusterSelector` is intersected; a scheduled placement (maxClusters, spread, …) is
/// divided over its decision by the scheduler itself.
pub fn rsp_spec(
    fed_kind: &str,
    native: &Value,
    policy: &PropagationSpec,
) -> Result<Option<ReplicaSchedulingPreferenceSpec>, Ignored> {
    let Some(rs) = &policy.replica_scheduling else {
        return Ok(None);
    };
    if !matches!(fed_kind, "FederatedDeployment" | "FederatedReplicaSet") {
        return Ok(None);
    }
    if policy.retain_replicas {
        return Err(Ignored::RetainReplicas);
    }
    let total = native
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .clamp(0, i64::from(i32::MAX));
    let placement = &policy.placement;
    let (clusters, intersect) = match &placement.clusters {
        Some(names) if !placement.is_scheduled() => {
            let named = named_clusters(&rs.clusters, names.iter().map(|c| c.name.as_str()));
            if named.is_empty() {
                return Err(Ignored::NoCluster);
            }
            (named, false)
        }
        _ => (rs.clusters.clone(), placement.cluster_selector.is_some()),
    };
    Ok(Some(ReplicaSchedulingPreferenceSpec {
        target_kind: fed_kind.to_owned(),
        total_replicas: i32::try_from(total).unwrap_or(i32::MAX),
        clusters,
        rebalance: rs.rebalance,
        intersect_with_cluster_selector: intersect,
        weight_preference: rs.weight_preference,
    }))
}

/// The preferences of the named clusters only: each its own entry, else `*`, else (no
/// preferences at all) weight 1.
fn named_clusters<'a>(
    prefs: &BTreeMap<String, ClusterPreferences>,
    names: impl Iterator<Item = &'a str>,
) -> BTreeMap<String, ClusterPreferences> {
    let even = ClusterPreferences {
        weight: 1,
        ..ClusterPreferences::default()
    };
    names
        .filter_map(|n| {
            let p = prefs.get(n).or_else(|| prefs.get("*")).cloned();
            let p = if prefs.is_empty() {
                Some(even.clone())
            } else {
                p
            };
            p.map(|p| (n.to_owned(), p))
        })
        .collect()
}

/// The whole RSP object: the native object's name and namespace, the label and policy
/// annotation of a policy-made object, and the native object as its owner (deleted with
/// it).
pub fn rsp_object(
    namespace: &str,
    owner: &NativeOwner<'_>,
    policy_ref: &str,
    spec: &ReplicaSchedulingPreferenceSpec,
) -> Value {
    json!({
        "apiVersion": "scheduling.kubefed.io/v1alpha1",
        "kind": "ReplicaSchedulingPreference",
        "metadata": {
            "name": owner.name,
            "namespace": namespace,
            "labels": {MATERIALIZED_LABEL: "true"},
            "annotations": {POLICY_ANNOTATION: policy_ref},
            "ownerReferences": [{
                "apiVersion": owner.api_version,
                "kind": owner.kind,
                "name": owner.name,
                "uid": owner.uid,
            }],
        },
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use flotilla_api::{
        federated::{ClusterReference, LabelSelector, Placement},
        policy::ReplicaScheduling,
        scheduling::WeightPreference,
    };

    use super::*;

    fn policy(placement: Placement, prefs: &[(&str, i64, i64)]) -> PropagationSpec {
        PropagationSpec {
            placement,
            replica_scheduling: Some(ReplicaScheduling {
                weight_preference: Some(WeightPreference::AvailableReplicas),
                clusters: prefs
                    .iter()
                    .map(|(c, min, weight)| {
                        let p = ClusterPreferences {
                            min_replicas: *min,
                            max_replicas: None,
                            weight: *weight,
                        };
                        (c.to_string(), p)
                    })
                    .collect(),
                rebalance: true,
            }),
            ..PropagationSpec::default()
        }
    }

    fn named(names: &[&str]) -> Placement {
        Placement {
            clusters: Some(
                names
                    .iter()
                    .map(|n| ClusterReference {
                        name: n.to_string(),
                    })
                    .collect(),
            ),
            ..Placement::default()
        }
    }

    #[test]
    fn a_selector_placement_divides_the_objects_replicas_over_the_selected_clusters() {
        let p = policy(
            Placement {
                cluster_selector: Some(LabelSelector::default()),
                ..Placement::default()
            },
            &[("*", 0, 1), ("a", 2, 3)],
        );
        let native = json!({"spec": {"replicas": 7}});
        let spec = rsp_spec("FederatedDeployment", &native, &p)
            .expect("divided")
            .expect("an RSP");
        assert_eq!(spec.total_replicas, 7);
        assert!(spec.intersect_with_cluster_selector && spec.rebalance);
        assert_eq!(
            spec.weight_preference,
            Some(WeightPreference::AvailableReplicas)
        );
        assert_eq!(spec.clusters["a"].min_replicas, 2);
        assert_eq!(spec.clusters.len(), 2, "the * entry stays");
    }

    #[test]
    fn named_clusters_get_their_own_entry_or_the_star_and_no_others() {
        let p = policy(named(&["a", "b"]), &[("*", 0, 1), ("a", 1, 2), ("c", 0, 5)]);
        let spec = rsp_spec("FederatedReplicaSet", &json!({}), &p)
            .expect("divided")
            .expect("an RSP");
        assert_eq!(spec.total_replicas, 1, "no spec.replicas: 1");
        let names: Vec<_> = spec.clusters.keys().map(String::as_str).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            (spec.clusters["a"].weight, spec.clusters["b"].weight),
            (2, 1)
        );
        let even = policy(named(&["a", "b"]), &[]);
        let spec = rsp_spec("FederatedDeployment", &json!({}), &even)
            .expect("divided")
            .expect("an RSP");
        assert_eq!(spec.clusters["b"].weight, 1, "no preferences: even");
    }

    #[test]
    fn kinds_without_replicas_and_policies_without_the_field_make_no_rsp() {
        let p = policy(named(&["a"]), &[]);
        assert_eq!(rsp_spec("FederatedConfigMap", &json!({}), &p), Ok(None));
        let plain = PropagationSpec::default();
        assert_eq!(
            rsp_spec("FederatedDeployment", &json!({}), &plain),
            Ok(None)
        );
    }

    #[test]
    fn retained_replicas_or_no_named_cluster_are_reported() {
        let mut p = policy(named(&["a"]), &[]);
        p.retain_replicas = true;
        assert_eq!(
            rsp_spec("FederatedDeployment", &json!({}), &p),
            Err(Ignored::RetainReplicas)
        );
        let none = policy(named(&[]), &[]);
        assert_eq!(
            rsp_spec("FederatedDeployment", &json!({}), &none),
            Err(Ignored::NoCluster)
        );
        let only_b = policy(named(&["a"]), &[("b", 0, 1)]);
        assert_eq!(
            rsp_spec("FederatedDeployment", &json!({}), &only_b),
            Err(Ignored::NoCluster),
            "no entry for a and no *"
        );
    }

    #[test]
    fn the_rsp_is_labelled_annotated_and_owned_like_a_policy_made_object() {
        let owner = NativeOwner {
            api_version: "apps/v1",
            kind: "Deployment",
            name: "web",
            uid: "u-1",
        };
        let spec = ReplicaSchedulingPreferenceSpec {
            target_kind: "FederatedDeployment".into(),
            total_replicas: 3,
            ..Default::default()
        };
        let o = rsp_object("demo", &owner, "PropagationPolicy/demo/web", &spec);
        assert_eq!(o["metadata"]["labels"][MATERIALIZED_LABEL], "true");
        assert_eq!(
            o["metadata"]["annotations"][POLICY_ANNOTATION],
            "PropagationPolicy/demo/web"
        );
        assert_eq!(o["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(o["spec"]["totalReplicas"], 3);
    }
}
