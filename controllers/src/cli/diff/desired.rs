//! Which clusters a federated object would be placed on and the object each would get,
//! decided exactly as the controllers decide it: the ReplicaSchedulingPreference
//! scheduler's placement and replica overrides ([`crate::scheduling::schedule`]), the
//! placement intersected with the FederatedNamespace's
//! ([`flotilla_crds::placement`]), then the sync controller's desired objects
//! ([`crate::sync::plan::desired_objects`]). Pure: it only assembles those functions.

use std::collections::BTreeSet;

use flotilla_crds::{
    FederatedSpec, FederatedStatus, Placement, core::ApiResource, placement, schedule,
    scheduling::ReplicaSchedulingPreferenceSpec,
};

use crate::{
    multicluster::ClusterState,
    sync::plan::{DesiredSet, desired_objects},
};

/// Everything the controllers would look at for one federated object.
pub struct Inputs<'a> {
    /// The target type (what the member gets).
    pub target: &'a ApiResource,
    /// Kind of the federated type (`FederatedDeployment`).
    pub federated_kind: &'a str,
    /// Name of the federated object.
    pub name: &'a str,
    /// Namespace of the federated object.
    pub namespace: Option<&'a str>,
    /// Its spec.
    pub spec: &'a FederatedSpec,
    /// Its status in the host (empty for a manifest not applied yet): the constraint
    /// scheduler's previous decision is sticky.
    pub status: &'a FederatedStatus,
    /// The registered member clusters.
    pub clusters: &'a [ClusterState],
    /// The FederatedNamespace's placement, for namespaced targets other than Namespace.
    pub namespace_placement: Option<&'a Placement>,
    /// The ReplicaSchedulingPreference of the same namespace and name, if any.
    pub rsp: Option<&'a ReplicaSchedulingPreferenceSpec>,
}

/// The selected clusters and the desired object of each, or why placement failed.
pub fn desired(inputs: &Inputs<'_>) -> Result<(BTreeSet<String>, DesiredSet), String> {
    let spec = scheduled_spec(inputs)?;
    let infos: Vec<placement::ClusterInfo<'_>> = inputs
        .clusters
        .iter()
        .map(|c| placement::ClusterInfo {
            name: &c.name,
            labels: &c.labels,
        })
        .collect();
    let mut selected = placement::select(&spec.placement, &infos).map_err(|e| e.to_string())?;
    if let Some(ns_placement) = inputs.namespace_placement {
        let ns_selected = placement::select(ns_placement, &infos)
            .map_err(|e| format!("namespace placement: {e}"))?;
        selected = placement::intersect(&selected, &ns_selected);
    }
    if spec.placement.is_scheduled() {
        selected = decided(inputs, &spec, &selected)?;
    }
    let set = desired_objects(
        inputs.target,
        inputs.name,
        inputs.namespace,
        &spec,
        &selected,
    );
    Ok((selected, set))
}

/// For a placement with scheduling fields, the constraint scheduler's decision among the
/// `candidates` kubefed's placement selects — as the sync controller decides it.
fn decided(
    inputs: &Inputs<'_>,
    spec: &FederatedSpec,
    candidates: &BTreeSet<String>,
) -> Result<BTreeSet<String>, String> {
    let decision = crate::sync::scheduled::decide(
        spec,
        candidates,
        inputs.clusters,
        inputs.status,
        false,
        schedule::DEFAULT_UNREACHABLE_TOLERATION_SECONDS,
    )
    .map_err(|e| format!("scheduling: {e}"))?;
    Ok(decision.targets())
}

/// The spec after the RSP scheduler's write, when an RSP targets this object.
fn scheduled_spec(inputs: &Inputs<'_>) -> Result<FederatedSpec, String> {
    let mut spec = inputs.spec.clone();
    let Some(rsp) = inputs
        .rsp
        .filter(|r| r.target_kind == inputs.federated_kind)
    else {
        return Ok(spec);
    };
    let key = (
        inputs.namespace.unwrap_or_default().to_owned(),
        inputs.name.to_owned(),
    );
    let scheduled = crate::scheduling::schedule(rsp, &spec, inputs.status, inputs.clusters, &key)
        .map_err(|e| format!("ReplicaSchedulingPreference: {e}"))?;
    let Some(scheduled) = scheduled else {
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
    use super::*;
    use crate::sync::plan::DesiredFor;

    static NO_STATUS: FederatedStatus = FederatedStatus {
        observed_generation: 0,
        conditions: Vec::new(),
        clusters: Vec::new(),
        aggregated: None,
        placement: None,
        rollout: None,
    };
    use flotilla_crds::core::Scope;
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
        let (selected, _) = desired(&inputs(&s, &clusters, &t)).expect("placed");
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
            target,
            federated_kind: "FederatedDeployment",
            name: "web",
            namespace: Some("demo"),
            spec,
            status: &NO_STATUS,
            clusters,
            namespace_placement: None,
            rsp: None,
        }
    }

    #[test]
    fn placement_is_intersected_with_the_namespace_placement() {
        let clusters = [cluster("m1"), cluster("m2")];
        let s = spec(json!({"template": {}, "placement": {"clusterSelector": {}}}));
        let ns = Placement {
            clusters: Some(vec![flotilla_crds::federated::ClusterReference {
                name: "m2".into(),
            }]),
            cluster_selector: None,
            ..Placement::default()
        };
        let t = target();
        let mut i = inputs(&s, &clusters, &t);
        i.namespace_placement = Some(&ns);
        let (selected, set) = desired(&i).expect("placed");
        assert_eq!(selected, BTreeSet::from(["m2".to_string()]));
        assert_eq!(set.by_cluster.len(), 1);
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
        let (_, set) = desired(&inputs(&s, &clusters, &t)).expect("placed");
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
        let (selected, set) = desired(&i).expect("placed");
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
        let (selected, _) = desired(&i).expect("placed");
        assert_eq!(selected, BTreeSet::from(["m1".to_string()]));
    }
}
