//! The object page's model: one federated object's template, placement (and the scheduler's
//! decision), overrides per cluster, state per cluster with reason, message and collected
//! remote status, its recent Events, and the object each cluster gets — computed by the
//! same pure functions `flotilla diff` uses ([`flotilla_controllers::preview::desired`],
//! [`flotilla_controllers::preview::render`]), from the watched state, without asking any member;
//! and the Replicas section ([`super::replicas`]) when a ReplicaSchedulingPreference divides it. Pure.

use std::collections::BTreeSet;

use flotilla_api::{
    FederatedSpec, Placement, core::StatusCollectionMode, federated::PlacementStatus,
    kubefed_config::DEFAULT_UNREACHABLE_TOLERATION_SECONDS, policy::NAMESPACE_FOR_OBJECTS,
    workload::AggregatedStatus,
};
use flotilla_core::redact;
use kube::ResourceExt;
use serde::Serialize;
use serde_json::Value;

use super::{
    Cell, Health, Overall,
    replicas::{Replicas, replicas},
};
use crate::state::{EventRecord, FedObject, ObjectKey, PolicyKey, State};
use flotilla_controllers::{
    multicluster::ClusterState,
    preview::{desired, render},
    sync::plan::{
        DesiredFor,
        pipeline::{self, NamespacePlacement},
    },
};

/// How many Events the page lists.
pub const EVENTS_SHOWN: usize = 20;

/// One override of one cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OverrideRow {
    /// `add`, `remove` or `replace`.
    pub op: String,
    /// JSON pointer.
    pub path: String,
    /// The value as JSON (empty for `remove`).
    pub value: String,
}

/// What one cluster gets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "text", rename_all = "camelCase")]
pub enum Rendered {
    /// The object the controllers apply there, as YAML.
    Object(String),
    /// It cannot be computed: why.
    Failed(String),
    /// The object is not placed there.
    NotPlaced,
}

/// The object in one cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClusterDetail {
    /// Cluster name.
    pub name: String,
    /// The cluster's health (`None`: not registered).
    pub health: Option<Health>,
    /// The object's state there.
    pub cell: Cell,
    /// Its overrides there.
    pub overrides: Vec<OverrideRow>,
    /// The collected member status, as YAML.
    pub remote_status: Option<String>,
    /// What the controllers apply there.
    pub rendered: Rendered,
}

/// The policy controller made this object for a policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MadeBy {
    /// The policy (`PropagationPolicy/<ns>/<name>`), the anchor of its row on the policies
    /// page; `None` when the object is a namespace made for the objects policies propagate.
    pub policy: Option<String>,
    /// What is shown.
    pub text: String,
}

impl MadeBy {
    /// What the policy controller's annotation `value` says.
    fn of(value: &str) -> MadeBy {
        match PolicyKey::from_annotation(value) {
            Some(key) => MadeBy {
                text: match key.namespace.as_str() {
                    "" => format!("{} {}", key.kind.as_str(), key.name),
                    ns => format!("{} {ns}/{}", key.kind.as_str(), key.name),
                },
                policy: Some(key.reference()),
            },
            None if value == NAMESPACE_FOR_OBJECTS => MadeBy {
                policy: None,
                text: "the policy controller, for the objects policies propagate in this namespace"
                    .into(),
            },
            None => MadeBy {
                policy: None,
                text: value.to_owned(),
            },
        }
    }
}

/// The object page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ObjectView {
    /// Namespace (empty for cluster-scoped).
    pub namespace: String,
    /// Federated kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Target `apiVersion kind` (what members get).
    pub target: String,
    /// `metadata.generation` / `status.observedGeneration`.
    pub generation: (i64, i64),
    /// Overall state.
    pub overall: Overall,
    /// The Propagation condition: status, reason, message.
    pub condition: Option<(String, String, String)>,
    /// A malformed spec's error.
    pub spec_error: Option<String>,
    /// The template, as YAML.
    pub template: String,
    /// The placement, as YAML.
    pub placement: String,
    /// The scheduler's decision (`status.placement`): clusters, and moves described.
    pub decision: Option<(Vec<String>, Vec<String>)>,
    /// The aggregated workload status, described (`6/6 ready in 2/2 clusters`).
    pub aggregated: Option<String>,
    /// Registered clusters and any other the status names.
    pub clusters: Vec<ClusterDetail>,
    /// `status.drift` per cluster, described (fields, desired → live, writers, times).
    pub drift: Vec<String>,
    /// Recent Events, most recent first.
    pub events: Vec<EventRecord>,
    /// The policy that made it, when the policy controller did.
    pub made_by: Option<MadeBy>,
    /// Replicas per cluster and why, when a ReplicaSchedulingPreference divides it.
    pub replicas: Option<Replicas>,
}

/// The page of the object `key`, if the state has it.
pub fn object_view(state: &State, key: &ObjectKey) -> Option<ObjectView> {
    let object = state.objects.get(key)?;
    let ftc = state.types.get(&object.type_name);
    let target = ftc
        .map(|f| {
            let t = &f.spec.target_type;
            format!("{} {}", t.api_version(), t.kind)
        })
        .unwrap_or_default();
    // Without its type config, the kind's name is all there is to go by.
    let secret = ftc.map_or(key.kind == "FederatedSecret", |f| {
        let t = &f.spec.target_type;
        redact::is_secret_type(&t.group, &t.kind)
    });
    let spec = object.spec.as_ref().ok();
    let rendered = spec.map(|s| rendered(state, key, object, s, secret));
    let names: BTreeSet<&String> = state
        .clusters
        .keys()
        .chain(object.status.clusters.iter().map(|c| &c.name))
        .collect();
    let clusters = names
        .into_iter()
        .map(|name| ClusterDetail {
            name: name.clone(),
            health: state.clusters.get(name).map(Health::of),
            cell: Cell::of(object, name),
            overrides: spec.map(|s| overrides(s, name, secret)).unwrap_or_default(),
            remote_status: object
                .status
                .clusters
                .iter()
                .find(|c| &c.name == name)
                .and_then(|c| c.remote_status.as_ref())
                .map(yaml),
            rendered: match &rendered {
                None => Rendered::Failed("the spec is malformed".into()),
                Some(Err(e)) => Rendered::Failed(e.clone()),
                Some(Ok(by_cluster)) => by_cluster(name),
            },
        })
        .collect();
    Some(ObjectView {
        namespace: key.namespace.clone(),
        kind: key.kind.clone(),
        name: key.name.clone(),
        target,
        generation: (object.generation, object.status.observed_generation),
        overall: Overall::of(object),
        condition: object
            .status
            .propagation()
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone())),
        spec_error: object.spec.as_ref().err().cloned(),
        template: spec
            .map(|s| template(&s.template, secret))
            .unwrap_or_default(),
        placement: spec
            .map(|s| placement_yaml(&s.placement))
            .unwrap_or_default(),
        decision: object.status.placement.as_ref().map(decision),
        aggregated: object.status.aggregated.as_ref().map(aggregated),
        clusters,
        drift: object
            .status
            .drift
            .iter()
            .map(flotilla_api::drift::ClusterDrift::describe)
            .collect(),
        events: state
            .events_about(key)
            .into_iter()
            .take(EVENTS_SHOWN)
            .cloned()
            .collect(),
        made_by: object.policy.as_deref().map(MadeBy::of),
        replicas: spec.and_then(|s| replicas_section(state, key, object, s)),
    })
}

/// The decided clusters, and each move described.
fn decision(p: &PlacementStatus) -> (Vec<String>, Vec<String>) {
    let chosen = p.clusters.iter().map(|c| c.name.clone()).collect();
    let moves = p
        .moves
        .iter()
        .map(|m| {
            format!(
                "{} {} since {}: {}",
                m.cluster, m.reason, m.since, m.message
            )
        })
        .collect();
    (chosen, moves)
}

/// `6/6 ready in 2/2 clusters`, then each cluster that is not plainly healthy under its
/// type's health rules (`; m2 Failed: phase Failed`).
fn aggregated(a: &AggregatedStatus) -> String {
    let mut text = match a.ready.as_ref().or(a.completions.as_ref()) {
        Some(p) => format!("{p} ready in {} clusters", a.clusters),
        None => format!("{} clusters", a.clusters),
    };
    for h in &a.health {
        text.push_str(&format!("; {} {}: {}", h.cluster, h.state, h.message));
    }
    text
}

fn yaml(value: &Value) -> String {
    serde_saphyr::to_string(value).unwrap_or_else(|e| format!("(cannot show: {e})"))
}

/// The template as YAML, a Secret's values redacted.
fn template(template: &Value, secret: bool) -> String {
    if !secret {
        return yaml(template);
    }
    let mut shown = template.clone();
    redact::redact_secret(&mut shown);
    yaml(&shown)
}

fn placement_yaml(placement: &Placement) -> String {
    serde_json::to_value(placement)
        .map(|v| yaml(&v))
        .unwrap_or_else(|e| format!("(cannot show: {e})"))
}

/// One cluster's overrides; for a Secret, values that land in its data redacted.
fn overrides(spec: &FederatedSpec, cluster: &str, secret: bool) -> Vec<OverrideRow> {
    spec.overrides
        .iter()
        .filter(|o| o.cluster_name == cluster)
        .flat_map(|o| &o.cluster_overrides)
        .map(|o| OverrideRow {
            op: serde_json::to_value(o.op.unwrap_or_default())
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            path: o.path.clone(),
            value: o
                .value
                .as_ref()
                .map(|v| match secret {
                    true => redact::redact_override_value(&o.path, v).to_string(),
                    false => v.to_string(),
                })
                .unwrap_or_default(),
        })
        .collect()
}

/// The clusters as the controllers see them (no clients: nothing is asked of members).
fn cluster_states(state: &State) -> Vec<ClusterState> {
    state
        .clusters
        .values()
        .map(|c| ClusterState {
            name: c.name_any(),
            labels: c.labels().clone(),
            taints: c.spec.taints.clone(),
            ready: Health::of(c) == Health::Ready,
            client: None,
            client_generation: 0,
            pull: c.spec.is_pull(),
        })
        .collect()
}

/// What each cluster gets, or why placement failed.
fn rendered(
    state: &State,
    key: &ObjectKey,
    object: &FedObject,
    spec: &FederatedSpec,
    secret: bool,
) -> Result<impl Fn(&str) -> Rendered, String> {
    let set = preview(state, key, object, spec, |i| {
        Ok(desired::desired(i)?.desired)
    })?;
    Ok(move |cluster: &str| match set.by_cluster.get(cluster) {
        None => Rendered::NotPlaced,
        Some(DesiredFor::Failed(reason, message)) => {
            Rendered::Failed(format!("{}: {message}", reason.as_str()))
        }
        Some(DesiredFor::Object { object, .. }) => match render::yaml(&shown(object, secret)) {
            Ok(text) => Rendered::Object(text),
            Err(e) => Rendered::Failed(format!("cannot show: {e}")),
        },
    })
}

/// The Replicas section, when an RSP of the object's name targets its kind: the division
/// recorded in the RSP's status, and the one the RSP scheduler would make now (by the same
/// function as `flotilla diff`).
fn replicas_section(
    state: &State,
    key: &ObjectKey,
    object: &FedObject,
    spec: &FederatedSpec,
) -> Option<Replicas> {
    let (rsp, status) = state
        .rsps
        .get(&(key.namespace.clone(), key.name.clone()))
        .filter(|(rsp, _)| rsp.target_kind == key.kind)?;
    let preview = preview(state, key, object, spec, desired::division);
    Some(replicas(
        &format!("{}/{}", key.namespace, key.name),
        rsp,
        status.as_ref(),
        preview,
    ))
}

/// Runs `f` on the inputs the controllers would read for the object.
fn preview<R>(
    state: &State,
    key: &ObjectKey,
    object: &FedObject,
    spec: &FederatedSpec,
    f: impl FnOnce(&desired::Inputs<'_>) -> Result<R, String>,
) -> Result<R, String> {
    let ftc = state
        .types
        .get(&object.type_name)
        .ok_or_else(|| format!("its type {} is not enabled", object.type_name))?;
    let target = &ftc.spec.target_type;
    let is_namespace = target.group.is_empty() && target.kind == "Namespace";
    let namespace = Some(key.namespace.as_str()).filter(|ns| !ns.is_empty());
    let ns_placement = match namespace {
        Some(ns) if target.namespaced() && !is_namespace => {
            NamespacePlacement::Federated(namespace_placement(state, ns)?)
        }
        _ => NamespacePlacement::NotApplied,
    };
    let rsp = state.rsps.get(&(key.namespace.clone(), key.name.clone()));
    let clusters = cluster_states(state);
    let inputs = desired::Inputs {
        object: pipeline::Input {
            target,
            name: &key.name,
            namespace,
            spec,
            previous: &object.status,
            clusters: &clusters,
            namespace_placement: &ns_placement,
            collect_status: ftc.spec.status_collection == Some(StatusCollectionMode::Enabled),
            default_unreachable_seconds: DEFAULT_UNREACHABLE_TOLERATION_SECONDS,
        },
        federated_kind: &ftc.spec.federated_type.kind,
        rsp: rsp.map(|(spec, _)| spec),
        rsp_status: rsp.and_then(|(_, status)| status.as_ref()),
    };
    f(&inputs)
}

/// The object as it may be shown: a Secret's values redacted (by its type, or by its own
/// `kind`, whichever says Secret).
fn shown(object: &Value, secret: bool) -> Value {
    let mut shown = object.clone();
    match secret {
        true => redact::redact_secret(&mut shown),
        false => redact::redact_object(&mut shown),
    }
    shown
}

/// The placement of the FederatedNamespace of `namespace`.
fn namespace_placement(state: &State, namespace: &str) -> Result<Placement, String> {
    let kind = state
        .types
        .values()
        .find(|f| f.spec.target_type.group.is_empty() && f.spec.target_type.kind == "Namespace")
        .map(|f| f.spec.federated_type.kind.clone())
        .ok_or("namespaces are not enabled for federation")?;
    let key = ObjectKey {
        namespace: namespace.to_owned(),
        kind,
        name: namespace.to_owned(),
    };
    match state.objects.get(&key).map(|o| &o.spec) {
        Some(Ok(spec)) => Ok(spec.placement.clone()),
        Some(Err(e)) => Err(format!("its FederatedNamespace is malformed: {e}")),
        None => Err(format!(
            "namespace {namespace} is not federated: create a FederatedNamespace named {namespace} in it"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::overview::tests::ready_cluster;
    use flotilla_api::crdgen::{default_target_types, federated_type_config};
    use serde_json::json;

    fn fed(spec: Value, status: Value, type_name: &str) -> FedObject {
        FedObject {
            type_name: type_name.into(),
            generation: 1,
            spec: serde_json::from_value(spec).map_err(|e| e.to_string()),
            status: serde_json::from_value(status).expect("status"),
            policy: None,
        }
    }

    fn key(ns: &str, kind: &str, name: &str) -> ObjectKey {
        ObjectKey {
            namespace: ns.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    fn state() -> State {
        let mut state = State::default();
        for t in default_target_types() {
            let ftc = federated_type_config(&t, "kube-federation-system");
            state.types.insert(ftc.name_any(), ftc);
        }
        for c in ["m1", "m2"] {
            state.clusters.insert(c.into(), ready_cluster(c));
        }
        state.objects.insert(
            key("demo", "FederatedNamespace", "demo"),
            fed(
                json!({"placement": {"clusterSelector": {}}}),
                json!({}),
                "namespaces",
            ),
        );
        state.objects.insert(
            key("demo", "FederatedConfigMap", "web"),
            fed(
                json!({"template": {"data": {"color": "blue"}},
                       "placement": {"clusterSelector": {}},
                       "overrides": [{"clusterName": "m2", "clusterOverrides": [{"path": "/data/color", "value": "green"}]}]}),
                json!({"observedGeneration": 1,
                       "conditions": [{"type": "Propagation", "status": "True"}],
                       "clusters": [{"name": "m1"}, {"name": "m2", "remoteStatus": {"replicas": 2}}]}),
                "configmaps",
            ),
        );
        state.events.insert(
            ("demo".into(), "e1".into()),
            EventRecord {
                namespace: "demo".into(),
                kind: "FederatedConfigMap".into(),
                name: "web".into(),
                type_: "Warning".into(),
                reason: "ApplyOverridesFailed".into(),
                message: "m2: bad".into(),
                count: 2,
                last_seen: "2026-01-01T00:00:00Z".into(),
            },
        );
        state
    }

    fn rendered_text(view: &ObjectView, cluster: &str) -> String {
        match &view
            .clusters
            .iter()
            .find(|c| c.name == cluster)
            .expect("cluster")
            .rendered
        {
            Rendered::Object(text) => text.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_object_a_policy_made_names_the_policy_and_links_to_its_row() {
        let pp = MadeBy::of("PropagationPolicy/shop/web");
        assert_eq!(pp.text, "PropagationPolicy shop/web");
        assert_eq!(pp.policy.as_deref(), Some("PropagationPolicy/shop/web"));
        let cpp = MadeBy::of("ClusterPropagationPolicy/all");
        assert_eq!(cpp.text, "ClusterPropagationPolicy all");
        let ns = MadeBy::of(NAMESPACE_FOR_OBJECTS);
        assert_eq!(ns.policy, None);
        assert!(ns.text.contains("policy controller"), "{}", ns.text);
    }

    #[test]
    fn each_cluster_shows_the_object_it_gets_with_its_overrides() {
        let view = object_view(&state(), &key("demo", "FederatedConfigMap", "web")).expect("view");
        assert_eq!(view.target, "v1 ConfigMap");
        assert!(rendered_text(&view, "m1").contains("color: blue"));
        assert!(rendered_text(&view, "m2").contains("color: green"));
        let m2 = &view.clusters[1];
        assert_eq!(m2.overrides[0].path, "/data/color");
        assert_eq!(m2.overrides[0].value, "\"green\"");
        assert_eq!(m2.remote_status.as_deref(), Some("replicas: 2\n"));
        assert_eq!(view.events.len(), 1);
        assert!(view.template.contains("color: blue"));
    }

    #[test]
    fn the_scheduling_decision_and_the_workload_figures_are_shown_when_present() {
        let mut s = state();
        s.objects.insert(
            key("demo", "FederatedDeployment", "api"),
            fed(
                json!({"template": {"spec": {"replicas": 3}},
                       "placement": {"clusterSelector": {}, "maxClusters": 1}}),
                json!({"observedGeneration": 1,
                       "conditions": [{"type": "Propagation", "status": "True"}],
                       "clusters": [{"name": "m1"}],
                       "aggregated": {"clusters": "1/1", "ready": "3/3",
                                      "health": [{"cluster": "m2", "state": "Failed",
                                                  "message": "phase Failed"}]},
                       "placement": {"clusters": [{"name": "m1"}],
                                     "moves": [{"cluster": "m2", "reason": "Replaced",
                                                "since": "2026-01-01T00:00:00Z", "message": "not ready"}]}}),
                "deployments.apps",
            ),
        );
        let view = object_view(&s, &key("demo", "FederatedDeployment", "api")).expect("view");
        let (chosen, moves) = view.decision.expect("a decision");
        assert_eq!(chosen, ["m1"]);
        assert_eq!(moves, ["m2 Replaced since 2026-01-01T00:00:00Z: not ready"]);
        assert_eq!(
            view.aggregated.as_deref(),
            Some("3/3 ready in 1/1 clusters; m2 Failed: phase Failed")
        );
        assert_eq!(view.clusters[1].cell, Cell::NotPlaced);
        assert!(
            view.placement.contains("maxClusters: 1"),
            "{}",
            view.placement
        );
    }

    #[test]
    fn without_a_federated_namespace_the_rendering_says_why() {
        let mut s = state();
        s.objects.remove(&key("demo", "FederatedNamespace", "demo"));
        let view = object_view(&s, &key("demo", "FederatedConfigMap", "web")).expect("view");
        match &view.clusters[0].rendered {
            Rendered::Failed(why) => assert!(why.contains("not federated"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_federated_secret_shows_no_value_in_its_template_overrides_or_objects() {
        let mut s = state();
        s.objects.insert(
            key("demo", "FederatedSecret", "db"),
            fed(
                json!({"template": {"stringData": {"password": "hunter2-template"},
                                    "data": {"key": "aHVudGVyMi1kYXRh"}},
                       "placement": {"clusterSelector": {}},
                       "overrides": [{"clusterName": "m2", "clusterOverrides": [
                           {"path": "/stringData/password", "value": "hunter2-override"},
                           {"path": "/data", "value": {"key": "aHVudGVyMi13aG9sZQ=="}}]}]}),
                json!({}),
                "secrets",
            ),
        );
        let view = object_view(&s, &key("demo", "FederatedSecret", "db")).expect("view");
        let json = serde_json::to_string(&view).expect("serialises");
        for value in ["hunter2", "aHVudGVyMi"] {
            assert!(!json.contains(value), "{value} shown: {json}");
        }
        assert!(
            view.template.contains("<redacted: 16 bytes>"),
            "{}",
            view.template
        );
        let m2 = &view.clusters[1];
        assert_eq!(m2.overrides[0].value, "\"<redacted: 16 bytes>\"");
        assert_eq!(m2.overrides[1].value, r#"{"key":"<redacted: 13 bytes>"}"#);
        assert!(rendered_text(&view, "m2").contains("<redacted: 13 bytes>"));
        assert!(rendered_text(&view, "m1").contains("<redacted: 12 bytes>"));
    }

    #[test]
    fn a_malformed_spec_is_shown_as_such() {
        let mut s = state();
        s.objects.insert(
            key("demo", "FederatedConfigMap", "bad"),
            fed(json!({"placement": 7}), json!({}), "configmaps"),
        );
        let view = object_view(&s, &key("demo", "FederatedConfigMap", "bad")).expect("view");
        assert!(view.spec_error.is_some());
        assert_eq!(view.overall, Overall::Failing);
        assert!(object_view(&s, &key("demo", "FederatedConfigMap", "nope")).is_none());
    }

    /// A FederatedDeployment `api` of demo on every cluster, divided by an RSP of 4
    /// replicas by equal weights, whose status records `recorded` (if any).
    fn divided(recorded: Option<Value>, target_kind: &str) -> State {
        let mut s = state();
        s.objects.insert(
            key("demo", "FederatedDeployment", "api"),
            fed(
                json!({"template": {"spec": {"replicas": 1}},
                       "placement": {"clusterSelector": {}}}),
                json!({}),
                "deployments.apps",
            ),
        );
        let spec = serde_json::from_value(json!({"targetKind": target_kind,
            "totalReplicas": 4, "clusters": {"*": {"weight": 1}}}))
        .expect("rsp");
        let status = recorded
            .map(|clusters| serde_json::from_value(json!({"clusters": clusters})).expect("status"));
        s.rsps.insert(("demo".into(), "api".into()), (spec, status));
        s
    }

    fn replicas_of(s: &State) -> Option<Replicas> {
        object_view(s, &key("demo", "FederatedDeployment", "api"))
            .expect("view")
            .replicas
    }

    #[test]
    fn an_rsp_divided_object_shows_the_recorded_division_and_the_scheduler_s_next_one() {
        let preview = replicas_of(&divided(None, "FederatedDeployment")).expect("a section");
        assert!(!preview.recorded);
        let shares: Vec<_> = preview
            .rows
            .iter()
            .map(|r| (r.division.name.as_str(), r.division.replicas))
            .collect();
        assert_eq!(shares, [("m1", 2), ("m2", 2)], "the scheduler's preview");
        assert_eq!(preview.rows[0].preference, "weight 1 (\"*\")");

        let stale = json!([{"name": "m1", "replicas": 3, "reason": "Weight"},
                           {"name": "m2", "replicas": 1, "reason": "Weight"}]);
        let r = replicas_of(&divided(Some(stale), "FederatedDeployment")).expect("a section");
        assert!(r.recorded);
        assert_eq!(r.rows[0].division.replicas, 3, "the recorded division");
        let next: Vec<_> = r.next.iter().map(|d| d.replicas).collect();
        assert_eq!(next, [2, 2], "the one the scheduler would now write");

        let current =
            serde_json::to_value(preview.rows.iter().map(|r| &r.division).collect::<Vec<_>>())
                .expect("json");
        let r = replicas_of(&divided(Some(current), "FederatedDeployment")).expect("a section");
        assert!(r.recorded && r.next.is_empty(), "{r:?}");

        assert_eq!(replicas_of(&divided(None, "FederatedReplicaSet")), None);
    }
}
