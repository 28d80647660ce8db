//! Which clusters a federated object would be placed on and the object each would get,
//! decided by the sync controller's own pipeline ([`crate::sync::plan::pipeline`]:
//! placement, namespace placement, the constraint scheduler, desired objects), after the
//! ReplicaSchedulingPreference scheduler's write to the spec that the RSP controller would
//! make ([`crate::scheduling::schedule`]). Pure: it only assembles those functions.

use flotilla_api::{
    FederatedSpec,
    scheduling::{
        ClusterDivision, ReplicaSchedulingPreferenceSpec, ReplicaSchedulingPreferenceStatus,
        WeightPreference,
    },
};
use flotilla_core::replica_division::current_replicas;

use crate::sync::plan::pipeline;

/// Everything the controllers would look at for one federated object.
pub struct Inputs<'a> {
    /// What the sync controller's pipeline reads, with the object's spec as written (before
    /// the RSP scheduler's write) and its status (the stored scheduling decision is sticky).
    pub object: pipeline::Input<'a>,
    /// Kind of the federated type (`FederatedDeployment`), which an RSP targets.
    pub federated_kind: &'a str,
    /// The ReplicaSchedulingPreference of the same namespace and name, if any.
    pub rsp: Option<&'a ReplicaSchedulingPreferenceSpec>,
    /// Its status: the capacity its last division read (the preview sees no member pods).
    pub rsp_status: Option<&'a ReplicaSchedulingPreferenceStatus>,
}

/// What the sync controller would decide, or why the RSP scheduler could not run.
pub fn desired(inputs: &Inputs<'_>) -> Result<pipeline::Outcome, String> {
    let spec = scheduled_spec(inputs)?;
    Ok(pipeline::run(&pipeline::Input {
        spec: &spec,
        ..inputs.object
    }))
}

/// The RSP scheduler's division of this object's replicas, per cluster with its reason,
/// as the RSP controller would record it; `None` when no RSP divides it.
pub fn division(inputs: &Inputs<'_>) -> Result<Option<Vec<ClusterDivision>>, String> {
    Ok(schedule(inputs)?.map(|(s, capacity)| {
        crate::scheduling::why::divisions(
            &s.plan,
            inputs.object.clusters,
            &capacity,
            &inputs.object.spec.placement,
        )
    }))
}

/// What the RSP scheduler would write, with the capacity it read (the preview sees no
/// member pods: that of the RSP's last recorded division).
fn schedule(
    inputs: &Inputs<'_>,
) -> Result<
    Option<(
        crate::scheduling::Schedule,
        crate::scheduling::CapacityInputs,
    )>,
    String,
> {
    let o = &inputs.object;
    let Some(rsp) = inputs
        .rsp
        .filter(|r| r.target_kind == inputs.federated_kind)
    else {
        return Ok(None);
    };
    let key = (
        o.namespace.unwrap_or_default().to_owned(),
        o.name.to_owned(),
    );
    let capacity = crate::scheduling::why::recorded_capacity(
        inputs.rsp_status,
        rsp.weight_preference == Some(WeightPreference::AvailableReplicas),
        &current_replicas(o.spec),
    );
    let scheduled =
        crate::scheduling::schedule(rsp, o.spec, o.previous, o.clusters, &key, &capacity)
            .map_err(|e| format!("ReplicaSchedulingPreference: {e}"))?;
    Ok(scheduled.map(|s| (s, capacity)))
}

/// The spec after the RSP scheduler's write, when an RSP targets this object.
fn scheduled_spec(inputs: &Inputs<'_>) -> Result<FederatedSpec, String> {
    let mut spec = inputs.object.spec.clone();
    let Some((scheduled, _)) = schedule(inputs)? else {
        return Ok(spec);
    };
    if !scheduled.composed {
        spec.placement.clusters = Some(scheduled.placement);
    }
    spec.overrides = scheduled.overrides;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::{
        multicluster::ClusterState,
        sync::plan::{DesiredFor, DesiredSet, pipeline::NamespacePlacement},
    };
    use flotilla_api::{AggregateReason, Placement};
    use flotilla_api::{FederatedStatus, core::ApiResource};

    static NO_STATUS: FederatedStatus = FederatedStatus {
        observed_generation: 0,
        conditions: Vec::new(),
        clusters: Vec::new(),
        aggregated: None,
        placement: None,
        rollout: None,
        drift: Vec::new(),
        dependencies: Vec::new(),
    };
    use flotilla_api::core::Scope;
    use serde_json::{Value, json};
    use std::collections::BTreeMap;

    fn target() -> ApiResource {
        ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            plural_name: "deployments".into(),
            scope: Scope::Namespaced,
        }
    }

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

    #[test]
    fn a_placement_with_scheduling_fields_goes_where_the_scheduler_decides() {
        let clusters = [cluster("m1"), cluster("m2")];
        let s =
            spec(json!({"template": {}, "placement": {"clusterSelector": {}, "maxClusters": 1}}));
        let t = target();
        let selected = desired(&inputs(&s, &clusters, &t))
            .expect("placed")
            .selected;
        assert_eq!(selected, BTreeSet::from(["m1".to_string()]));
    }

    fn spec(v: Value) -> FederatedSpec {
        serde_json::from_value(v).expect("spec")
    }

    fn replicas(set: &DesiredSet, cluster: &str) -> Option<i64> {
        match set.by_cluster.get(cluster) {
            Some(DesiredFor::Object { object, .. }) => object.pointer("/spec/replicas")?.as_i64(),
            _ => None,
        }
    }

    fn inputs<'a>(
        spec: &'a FederatedSpec,
        clusters: &'a [ClusterState],
        target: &'a ApiResource,
    ) -> Inputs<'a> {
        Inputs {
            object: pipeline::Input {
                target,
                name: "web",
                namespace: Some("demo"),
                spec,
                previous: &NO_STATUS,
                clusters,
                namespace_placement: &NOT_APPLIED,
                collect_status: false,
                default_unreachable_seconds: 300,
            },
            federated_kind: "FederatedDeployment",
            rsp: None,
            rsp_status: None,
        }
    }

    #[test]
    fn placement_is_intersected_with_the_namespace_placement() {
        let clusters = [cluster("m1"), cluster("m2")];
        let s = spec(json!({"template": {}, "placement": {"clusterSelector": {}}}));
        let ns = Placement {
            clusters: Some(vec![flotilla_api::federated::ClusterReference {
                name: "m2".into(),
            }]),
            cluster_selector: None,
            ..Placement::default()
        };
        let t = target();
        let mut i = inputs(&s, &clusters, &t);
        let ns = NamespacePlacement::Federated(ns);
        i.object.namespace_placement = &ns;
        let out = desired(&i).expect("placed");
        assert_eq!(out.selected, BTreeSet::from(["m2".to_string()]));
        assert_eq!(out.desired.by_cluster.len(), 1);
    }

    #[test]
    fn an_unfederated_namespace_places_nothing_as_the_controller_does() {
        let clusters = [cluster("m1"), cluster("m2")];
        let s = spec(json!({"template": {}, "placement": {"clusterSelector": {}}}));
        let t = target();
        let mut i = inputs(&s, &clusters, &t);
        let ns = NamespacePlacement::Missing("demo".into());
        i.object.namespace_placement = &ns;
        let out = desired(&i).expect("no RSP");
        assert!(out.selected.is_empty());
        let reason = out.failure.map(|(r, _)| r);
        assert_eq!(reason, Some(AggregateReason::NamespaceNotFederated));
    }

    #[test]
    fn overrides_change_only_their_cluster() {
        let clusters = [cluster("m1"), cluster("m2")];
        let s = spec(json!({
            "template": {"spec": {"replicas": 1}},
            "placement": {"clusterSelector": {}},
            "overrides": [{"clusterName": "m2", "clusterOverrides": [{"path": "/spec/replicas", "value": 5}]}]
        }));
        let t = target();
        let set = desired(&inputs(&s, &clusters, &t)).expect("placed").desired;
        assert_eq!(replicas(&set, "m1"), Some(1));
        assert_eq!(replicas(&set, "m2"), Some(5));
    }

    #[test]
    fn a_replica_scheduling_preference_places_and_splits_the_replicas() {
        let clusters = [cluster("m1"), cluster("m2"), cluster("m3")];
        let s = spec(
            json!({"template": {"spec": {"replicas": 1}}, "placement": {"clusters": [{"name": "m1"}]}}),
        );
        let rsp: ReplicaSchedulingPreferenceSpec = serde_json::from_value(json!({
            "targetKind": "FederatedDeployment", "totalReplicas": 4,
            "clusters": {"m1": {"weight": 1}, "m2": {"weight": 1}}
        }))
        .expect("rsp");
        let t = target();
        let mut i = inputs(&s, &clusters, &t);
        i.rsp = Some(&rsp);
        let out = desired(&i).expect("placed");
        let (selected, set) = (out.selected, out.desired);
        assert_eq!(selected, BTreeSet::from(["m1".into(), "m2".into()]));
        assert_eq!(replicas(&set, "m1"), Some(2));
        assert_eq!(replicas(&set, "m2"), Some(2));
    }

    #[test]
    fn an_rsp_for_another_kind_is_ignored() {
        let clusters = [cluster("m1"), cluster("m2")];
        let s = spec(json!({"template": {}, "placement": {"clusters": [{"name": "m1"}]}}));
        let rsp: ReplicaSchedulingPreferenceSpec = serde_json::from_value(
            json!({"targetKind": "FederatedReplicaSet", "totalReplicas": 4}),
        )
        .expect("rsp");
        let t = target();
        let mut i = inputs(&s, &clusters, &t);
        i.rsp = Some(&rsp);
        let selected = desired(&i).expect("placed").selected;
        assert_eq!(selected, BTreeSet::from(["m1".to_string()]));
    }

    static NOT_APPLIED: NamespacePlacement = NamespacePlacement::NotApplied;
}
