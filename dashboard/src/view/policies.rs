//! The policies page's model: every propagation and override policy in the state (the
//! caller's share of it), with its priority, its `Ready` condition, how many objects it
//! selects, those objects — from the policy's `status.selected` and from the Federated
//! objects the policy controller annotated with the policy's name — linked to their
//! federated objects, and the objects it lost to another policy or to an explicit
//! Federated object, each with the reason. No selector or overrider is shown (an
//! overrider's value may be a Secret's). Pure.

use std::collections::BTreeMap;

use flotilla_api::{core::condition, policy::ObjectRef};
use serde::Serialize;

use crate::state::{ObjectKey, PolicyKey, PolicyKind, PolicyRecord, State};

/// A policy's state, from its `Ready` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Readiness {
    /// Ready=True for the current generation.
    Ready,
    /// No status for the current generation yet.
    Pending,
    /// Ready=False (or Unknown): the reason says why.
    NotReady,
}

impl Readiness {
    /// The word shown when the condition gives no reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Readiness::Ready => "Ready",
            Readiness::Pending => "Pending",
            Readiness::NotReady => "NotReady",
        }
    }

    /// The class of the state, for styling and icons.
    pub fn class(self) -> &'static str {
        match self {
            Readiness::Ready => "ok",
            Readiness::Pending => "pending",
            Readiness::NotReady => "fail",
        }
    }
}

/// A federated object's page, to link to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct FederatedLink {
    /// Namespace (empty for cluster-scoped types).
    pub namespace: String,
    /// Federated kind.
    pub kind: String,
    /// Name.
    pub name: String,
}

/// An object a policy names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Selected {
    /// The native kind (`Deployment`).
    pub kind: String,
    /// Namespace (empty for a cluster-scoped object).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its Federated object, when the dashboard holds it (and the caller may read it).
    pub federated: Option<FederatedLink>,
}

/// An object a policy's selectors match but the policy does not propagate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Conflict {
    /// The object.
    pub object: Selected,
    /// `LostToPolicy`, `ExplicitFederatedObject`, `HostRunsWorkload`.
    pub reason: String,
    /// Who won, for humans.
    pub message: String,
}

/// One policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyRow {
    /// Its kind.
    pub kind: PolicyKind,
    /// Namespace (empty for the cluster-scoped kinds).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// How Federated objects name it (`PropagationPolicy/<ns>/<name>`); the row's anchor.
    pub reference: String,
    /// `spec.priority` (propagation policies).
    pub priority: Option<i32>,
    /// Its state.
    pub readiness: Readiness,
    /// The condition's reason (`Applied`, `InvalidSelector`, …).
    pub reason: String,
    /// The condition's message.
    pub message: String,
    /// `status.selectedCount`.
    pub selected_count: i64,
    /// The objects it propagates (or overrides), sorted.
    pub selected: Vec<Selected>,
    /// The objects it matches but does not propagate, with the reasons.
    pub conflicts: Vec<Conflict>,
}

/// The policies page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Policies {
    /// Every policy: propagation policies first, then override policies.
    pub rows: Vec<PolicyRow>,
    /// Whether the first lists have arrived.
    pub synced: bool,
}

/// The policies page of `state`.
pub fn policies(state: &State) -> Policies {
    let mut rows: Vec<PolicyRow> = state
        .policies
        .iter()
        .map(|(key, record)| row(state, key, record))
        .collect();
    rows.sort_by_key(|r| {
        (
            !r.kind.propagates(),
            r.namespace.clone(),
            r.name.clone(),
            r.kind,
        )
    });
    Policies {
        rows,
        synced: state.synced,
    }
}

fn row(state: &State, key: &PolicyKey, record: &PolicyRecord) -> PolicyRow {
    let reference = key.reference();
    let status = &record.status;
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == condition::READY);
    let readiness = match ready {
        _ if status.observed_generation < record.generation => Readiness::Pending,
        None => Readiness::Pending,
        Some(c) if c.status == "True" => Readiness::Ready,
        Some(_) => Readiness::NotReady,
    };
    let mut selected: BTreeMap<(String, String, String), Selected> = status
        .selected
        .iter()
        .map(|r| named(state, r))
        .map(|s| ((s.kind.clone(), s.namespace.clone(), s.name.clone()), s))
        .collect();
    if key.kind.propagates() {
        // The status lists at most 100 and lags behind; the objects themselves say it too.
        for (k, _) in state
            .objects
            .iter()
            .filter(|(_, o)| o.policy.as_deref() == Some(reference.as_str()))
        {
            let s = made(state, k);
            selected
                .entry((s.kind.clone(), s.namespace.clone(), s.name.clone()))
                .or_insert(s);
        }
    }
    PolicyRow {
        kind: key.kind,
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        reference,
        priority: record.priority,
        readiness,
        reason: ready.map(|c| c.reason.clone()).unwrap_or_default(),
        message: ready.map(|c| c.message.clone()).unwrap_or_default(),
        selected_count: status.selected_count,
        selected: selected.into_values().collect(),
        conflicts: status
            .conflicts
            .iter()
            .map(|c| Conflict {
                object: named(state, &c.object),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect(),
    }
}

/// An object a policy's status names, with its Federated object if the state has it.
fn named(state: &State, r: &ObjectRef) -> Selected {
    let group = r.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let namespace = r.namespace.clone().unwrap_or_default();
    let federated = state
        .types
        .values()
        .find(|f| f.spec.target_type.group == group && f.spec.target_type.kind == r.kind)
        .map(|f| ObjectKey {
            // A FederatedNamespace lives in the namespace it federates.
            namespace: if r.kind == "Namespace" {
                r.name.clone()
            } else {
                namespace.clone()
            },
            kind: f.spec.federated_type.kind.clone(),
            name: r.name.clone(),
        })
        .filter(|k| state.objects.contains_key(k))
        .map(link);
    Selected {
        kind: r.kind.clone(),
        namespace,
        name: r.name.clone(),
        federated,
    }
}

/// The native object behind a Federated object the policy controller made.
fn made(state: &State, key: &ObjectKey) -> Selected {
    let target = state
        .objects
        .get(key)
        .and_then(|o| state.types.get(&o.type_name))
        .map(|f| f.spec.target_type.kind.clone());
    let kind = target.unwrap_or_else(|| key.kind.trim_start_matches("Federated").to_owned());
    Selected {
        namespace: if kind == "Namespace" {
            String::new()
        } else {
            key.namespace.clone()
        },
        kind,
        name: key.name.clone(),
        federated: Some(link(key.clone())),
    }
}

fn link(key: ObjectKey) -> FederatedLink {
    FederatedLink {
        namespace: key.namespace,
        kind: key.kind,
        name: key.name,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flotilla_api::{
        crdgen::{default_target_types, federated_type_config},
        policy::PolicyStatus,
    };
    use kube::ResourceExt;
    use serde_json::json;

    fn pp(ns: &str, name: &str) -> PolicyKey {
        PolicyKey {
            kind: PolicyKind::PropagationPolicy,
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn fed_key(kind: &str, name: &str) -> ObjectKey {
        ObjectKey {
            namespace: "shop".into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    /// The default types; a high-priority policy `web` that made a FederatedDeployment and
    /// a FederatedConfigMap, and a low-priority `fallback` that lost the ConfigMap to it.
    pub(crate) fn state() -> State {
        let mut state = State {
            synced: true,
            ..State::default()
        };
        for t in default_target_types() {
            let ftc = federated_type_config(&t, "kube-federation-system");
            state.types.insert(ftc.name_any(), ftc);
        }
        for (kind, type_name, name) in [
            ("FederatedDeployment", "deployments.apps", "web"),
            ("FederatedConfigMap", "configmaps", "settings"),
        ] {
            let mut o = crate::view::tests::object(1, json!({}));
            o.type_name = type_name.into();
            o.policy = Some("PropagationPolicy/shop/web".into());
            state.objects.insert(fed_key(kind, name), o);
        }
        let status =
            |v: serde_json::Value| -> PolicyStatus { serde_json::from_value(v).expect("status") };
        state.policies.insert(
            pp("shop", "web"),
            PolicyRecord {
                priority: Some(10),
                generation: 1,
                status: status(json!({
                    "observedGeneration": 1, "selectedCount": 2,
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Applied"}],
                    "selected": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                  "namespace": "shop", "name": "web"}]})),
            },
        );
        state.policies.insert(
            pp("shop", "fallback"),
            PolicyRecord {
                priority: Some(1),
                generation: 2,
                status: status(json!({
                    "observedGeneration": 2,
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Applied"}],
                    "conflicts": [{"object": {"apiVersion": "v1", "kind": "ConfigMap",
                                              "namespace": "shop", "name": "settings"},
                                   "reason": "LostToPolicy",
                                   "message": "PropagationPolicy/shop/web wins"}]})),
            },
        );
        state
    }

    #[test]
    fn a_policy_lists_what_it_selects_linked_to_the_federated_objects() {
        let v = policies(&state());
        let web = v.rows.iter().find(|r| r.name == "web").expect("web");
        assert_eq!(web.readiness, Readiness::Ready);
        assert_eq!((web.priority, web.selected_count), (Some(10), 2));
        // One from the status, one only from the Federated object's annotation.
        let names: Vec<(&str, Option<&str>)> = web
            .selected
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.federated.as_ref().map(|f| f.kind.as_str()),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("settings", Some("FederatedConfigMap")),
                ("web", Some("FederatedDeployment"))
            ]
        );
        assert_eq!(web.selected[0].kind, "ConfigMap");
    }

    #[test]
    fn a_losing_policy_shows_its_conflict_with_the_reason_and_a_link() {
        let v = policies(&state());
        let low = v.rows.iter().find(|r| r.name == "fallback").expect("row");
        assert!(low.selected.is_empty());
        let c = &low.conflicts[0];
        assert_eq!(c.reason, "LostToPolicy");
        assert_eq!(
            c.object.federated.as_ref().map(|f| f.kind.as_str()),
            Some("FederatedConfigMap")
        );
    }

    #[test]
    fn a_policy_not_yet_seen_at_its_generation_is_pending_and_a_false_condition_is_not_ready() {
        let mut s = state();
        let web = s.policies.get_mut(&pp("shop", "web")).expect("web");
        web.generation = 2;
        assert_eq!(policies(&s).rows[1].readiness, Readiness::Pending);
        let web = s.policies.get_mut(&pp("shop", "web")).expect("web");
        web.status = serde_json::from_value(json!({"observedGeneration": 2,
            "conditions": [{"type": "Ready", "status": "False", "reason": "UnknownKind",
                            "message": "no type Gadget"}]}))
        .expect("status");
        let row = policies(&s)
            .rows
            .into_iter()
            .find(|r| r.name == "web")
            .expect("row");
        assert_eq!(row.readiness, Readiness::NotReady);
        assert_eq!(row.reason, "UnknownKind");
    }

    #[test]
    fn an_object_the_caller_may_not_read_is_named_without_a_link() {
        let mut s = state();
        s.objects.clear();
        let v = policies(&s);
        let web = v.rows.iter().find(|r| r.name == "web").expect("web");
        assert_eq!(web.selected.len(), 1, "from the status alone");
        assert_eq!(web.selected[0].federated, None);
    }
}
