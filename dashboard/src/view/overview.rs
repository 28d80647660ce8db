//! The overview page's model: the clusters with their health and how many objects each
//! holds, and one page of the objects × clusters grid after the filters (namespace, type,
//! only problems). Pure.

use std::collections::BTreeSet;

use serde::Serialize;

use super::{Cell, Health, Overall};
use crate::state::{ObjectKey, State};

/// Rows per page of the grid.
pub const PAGE_SIZE: usize = 100;

/// What the grid shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Filter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this federated kind.
    pub kind: Option<String>,
    /// Only objects that are not propagated everywhere they should be.
    pub problems: bool,
    /// The page (from 0).
    pub page: usize,
}

impl Filter {
    /// The filter of a query string (`ns=demo&type=FederatedDeployment&problems=1&page=2`;
    /// pages count from 1 there); unknown keys are ignored, empty values mean "all".
    pub fn from_query(query: &str) -> Filter {
        let mut filter = Filter::default();
        for (key, value) in crate::query::query_pairs(query) {
            match key.as_str() {
                "ns" if !value.is_empty() => filter.namespace = Some(value),
                "type" if !value.is_empty() => filter.kind = Some(value),
                "problems" => filter.problems = value == "1" || value == "on",
                "page" => filter.page = value.parse::<usize>().unwrap_or(1).saturating_sub(1),
                _ => {}
            }
        }
        filter
    }

    fn admits(&self, key: &ObjectKey) -> bool {
        self.namespace
            .as_ref()
            .is_none_or(|ns| *ns == key.namespace)
            && self.kind.as_ref().is_none_or(|k| *k == key.kind)
    }
}

/// One member cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClusterRow {
    /// Name.
    pub name: String,
    /// Health.
    pub health: Health,
    /// The Ready condition's message, when not Ready.
    pub message: String,
    /// `status.kubernetesVersion`.
    pub version: String,
    /// `key=value` labels.
    pub labels: Vec<String>,
    /// Taints, described.
    pub taints: Vec<String>,
    /// Its resource summary (`status.resources`), described; `None` before one is kept.
    pub capacity: Option<String>,
    /// Federated objects placed there.
    pub placed: usize,
    /// Of which propagated.
    pub propagated: usize,
    /// Of which failing.
    pub failing: usize,
}

/// One federated object of the grid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ObjectRow {
    /// Its identity.
    pub namespace: String,
    /// Federated kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Overall state.
    pub overall: Overall,
    /// One cell per cluster, in the order of [`Overview::clusters`].
    pub cells: Vec<Cell>,
}

/// Counts over every object (before the filters).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Federated objects.
    pub objects: usize,
    /// Propagated.
    pub propagated: usize,
    /// Pending.
    pub pending: usize,
    /// Failing.
    pub failing: usize,
}

/// The overview page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Overview {
    /// The clusters (the grid's columns, in this order).
    pub clusters: Vec<ClusterRow>,
    /// Counts over every object.
    pub counts: Counts,
    /// This page of the grid.
    pub rows: Vec<ObjectRow>,
    /// Objects after the filters.
    pub matched: usize,
    /// The filter applied (page clamped to the pages there are).
    pub filter: Filter,
    /// Pages after the filters (at least 1).
    pub pages: usize,
    /// Namespaces with federated objects (for the filter's choices).
    pub namespaces: Vec<String>,
    /// Enabled federated kinds (for the filter's choices).
    pub kinds: Vec<String>,
    /// Whether the first lists have arrived.
    pub synced: bool,
}

/// The overview of `state` under `filter`.
pub fn overview(state: &State, filter: &Filter) -> Overview {
    let names: Vec<&String> = state.clusters.keys().collect();
    let mut clusters: Vec<ClusterRow> = state.clusters.values().map(cluster_row).collect();
    let mut counts = Counts::default();
    let mut matched = Vec::new();
    for (key, object) in &state.objects {
        let overall = Overall::of(object);
        counts.objects += 1;
        match overall {
            Overall::Propagated => counts.propagated += 1,
            Overall::Pending => counts.pending += 1,
            Overall::Failing => counts.failing += 1,
        }
        if filter.admits(key) && (!filter.problems || overall != Overall::Propagated) {
            matched.push((key, object, overall));
        }
    }
    for row in &mut clusters {
        for object in state.objects.values() {
            match Cell::of(object, &row.name) {
                Cell::NotPlaced => continue,
                Cell::Propagated => row.propagated += 1,
                Cell::Failing { .. } => row.failing += 1,
                Cell::Pending { .. } => {}
            }
            row.placed += 1;
        }
    }
    let pages = matched.len().div_ceil(PAGE_SIZE).max(1);
    let mut filter = filter.clone();
    filter.page = filter.page.min(pages - 1);
    let rows = matched
        .iter()
        .skip(filter.page * PAGE_SIZE)
        .take(PAGE_SIZE)
        .map(|(key, object, overall)| ObjectRow {
            namespace: key.namespace.clone(),
            kind: key.kind.clone(),
            name: key.name.clone(),
            overall: *overall,
            cells: names.iter().map(|c| Cell::of(object, c)).collect(),
        })
        .collect();
    let namespaces: BTreeSet<&String> = state.objects.keys().map(|k| &k.namespace).collect();
    let kinds: BTreeSet<&String> = state
        .types
        .values()
        .map(|t| &t.spec.federated_type.kind)
        .collect();
    Overview {
        clusters,
        counts,
        rows,
        matched: matched.len(),
        filter,
        pages,
        namespaces: namespaces
            .into_iter()
            .filter(|n| !n.is_empty())
            .cloned()
            .collect(),
        kinds: kinds.into_iter().cloned().collect(),
        synced: state.synced,
    }
}

fn cluster_row(cluster: &flotilla_api::KubeFedCluster) -> ClusterRow {
    use kube::ResourceExt;
    let health = Health::of(cluster);
    let status = cluster.status.as_ref();
    let message = status
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.status == "True" && c.type_ != "Ready")
                .or_else(|| s.condition("Ready").filter(|c| c.status != "True"))
        })
        .and_then(|c| c.message.clone())
        .unwrap_or_default();
    ClusterRow {
        name: cluster.name_any(),
        health,
        message,
        version: status
            .and_then(|s| s.kubernetes_version.clone())
            .unwrap_or_default(),
        labels: cluster
            .labels()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
        taints: cluster.spec.taints.iter().map(|t| t.describe()).collect(),
        capacity: status.and_then(|s| s.resources.as_deref()).map(capacity),
        placed: 0,
        propagated: 0,
        failing: 0,
    }
}

/// `1/1 nodes Ready; cpu 1500m/2, memory 0/1Gi requested of allocatable; 3 pods`: what
/// capacity-aware division reads of a member, as `flotilla status --clusters` shows it.
fn capacity(r: &flotilla_api::core::ClusterResources) -> String {
    let pair = |k: &str| {
        let get = |m: &std::collections::BTreeMap<String, String>| {
            m.get(k).cloned().unwrap_or_else(|| "?".into())
        };
        format!("{k} {}/{}", get(&r.requested), get(&r.allocatable))
    };
    format!(
        "{}/{} nodes Ready; {}, {} requested of allocatable; {} pods",
        r.ready_nodes,
        r.nodes,
        pair("cpu"),
        pair("memory"),
        r.pods
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{state::FedObject, view::tests::object};
    use flotilla_api::{
        KubeFedCluster, KubeFedClusterSpec,
        core::{ClusterCondition, KubeFedClusterStatus},
    };
    use serde_json::json;

    pub(crate) fn ready_cluster(name: &str) -> KubeFedCluster {
        let mut c = KubeFedCluster::new(name, KubeFedClusterSpec::default());
        c.status = Some(KubeFedClusterStatus {
            conditions: vec![ClusterCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..ClusterCondition::default()
            }],
            kubernetes_version: Some("v1.20.2".into()),
            ..KubeFedClusterStatus::default()
        });
        c
    }

    fn key(ns: &str, kind: &str, name: &str) -> ObjectKey {
        ObjectKey {
            namespace: ns.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    fn propagated() -> FedObject {
        object(
            1,
            json!({"observedGeneration": 1, "conditions": [{"type": "Propagation", "status": "True"}],
                   "clusters": [{"name": "m1"}, {"name": "m2"}]}),
        )
    }

    fn failing_on_m2() -> FedObject {
        object(
            1,
            json!({"observedGeneration": 1,
                   "conditions": [{"type": "Propagation", "status": "False", "reason": "CheckClusters"}],
                   "clusters": [{"name": "m1"}, {"name": "m2", "status": "ApplyOverridesFailed", "message": "no path"}]}),
        )
    }

    /// Two Ready clusters; `n` propagated ConfigMaps in `demo` and one failing Deployment
    /// in `prod`.
    pub(crate) fn state(n: usize) -> State {
        let mut state = State {
            synced: true,
            ..State::default()
        };
        for c in ["m1", "m2"] {
            state.clusters.insert(c.into(), ready_cluster(c));
        }
        for i in 0..n {
            state.objects.insert(
                key("demo", "FederatedConfigMap", &format!("cm-{i:05}")),
                propagated(),
            );
        }
        state
            .objects
            .insert(key("prod", "FederatedDeployment", "web"), failing_on_m2());
        state
    }

    #[test]
    fn clusters_count_the_objects_placed_propagated_and_failing_there() {
        let o = overview(&state(3), &Filter::default());
        let m2 = &o.clusters[1];
        assert_eq!((m2.name.as_str(), m2.health), ("m2", Health::Ready));
        assert_eq!((m2.placed, m2.propagated, m2.failing), (4, 3, 1));
        assert_eq!(o.clusters[0].failing, 0);
        assert_eq!(
            o.counts,
            Counts {
                objects: 4,
                propagated: 3,
                pending: 0,
                failing: 1
            }
        );
    }

    #[test]
    fn only_problems_shows_the_failing_object_failing_on_exactly_its_cluster() {
        let filter = Filter::from_query("problems=1");
        let o = overview(&state(3), &filter);
        assert_eq!(o.matched, 1);
        let row = &o.rows[0];
        assert_eq!(
            (row.kind.as_str(), row.name.as_str()),
            ("FederatedDeployment", "web")
        );
        assert_eq!(row.cells[0], Cell::Propagated);
        assert_eq!(row.cells[1].label(), "ApplyOverridesFailed");
    }

    #[test]
    fn namespace_and_type_filters_narrow_the_grid() {
        let s = state(3);
        assert_eq!(overview(&s, &Filter::from_query("ns=prod")).matched, 1);
        assert_eq!(
            overview(&s, &Filter::from_query("type=FederatedConfigMap")).matched,
            3
        );
        assert_eq!(overview(&s, &Filter::from_query("ns=&type=")).matched, 4);
        assert_eq!(
            overview(&s, &Filter::default()).namespaces,
            ["demo", "prod"]
        );
    }

    #[test]
    fn the_grid_is_paged_and_a_page_past_the_end_shows_the_last() {
        let s = state(250);
        let first = overview(&s, &Filter::default());
        assert_eq!(
            (first.rows.len(), first.pages, first.matched),
            (PAGE_SIZE, 3, 251)
        );
        let last = overview(&s, &Filter::from_query("page=9"));
        assert_eq!(last.filter.page, 2);
        assert_eq!(last.rows.len(), 51);
        assert_eq!(last.rows[50].name, "web");
    }

    #[test]
    fn a_cluster_with_a_resource_summary_shows_requested_of_allocatable() {
        let mut s = state(0);
        let resources: flotilla_api::core::ClusterResources = serde_json::from_value(json!({
            "nodes": 2, "readyNodes": 1, "pods": 7,
            "allocatable": {"cpu": "2", "memory": "1Gi"},
            "requested": {"cpu": "1500m"}}))
        .expect("summary");
        if let Some(status) = s.clusters.get_mut("m1").and_then(|c| c.status.as_mut()) {
            status.resources = Some(Box::new(resources));
        }
        let o = overview(&s, &Filter::default());
        assert_eq!(
            o.clusters[0].capacity.as_deref(),
            Some("1/2 nodes Ready; cpu 1500m/2, memory ?/1Gi requested of allocatable; 7 pods")
        );
        assert_eq!(o.clusters[1].capacity, None, "no summary");
    }
}
