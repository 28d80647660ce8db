//! Which propagation policy propagates a native object: selector matching, validation of a
//! policy's selectors against the enabled types, and the choice among several matching
//! policies (priority, then the most specific selector, then the oldest). Pure: the policy
//! controller and `flotilla diff` both ask here.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::policy::{PROPAGATE_ANNOTATION, ResourceSelector};
use flotilla_api::selector::{PlacementError, matches_selector};

/// The scope of a policy, which decides which namespaces its selectors may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyScope {
    /// A PropagationPolicy or OverridePolicy: only objects of its own namespace.
    Namespaced,
    /// A ClusterPropagationPolicy or ClusterOverridePolicy: any object.
    Cluster,
}

impl PolicyScope {
    /// The kind of a propagation policy of this scope.
    pub fn propagation_kind(self) -> &'static str {
        match self {
            PolicyScope::Namespaced => "PropagationPolicy",
            PolicyScope::Cluster => "ClusterPropagationPolicy",
        }
    }
}

/// How precisely a selector names an object; more specific wins among equal priorities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Specificity {
    /// Every object of a kind (in a namespace).
    Kind,
    /// Objects by label selector.
    Labels,
    /// One object by name.
    Name,
}

/// What the selection looks at of a native object.
#[derive(Debug, Clone, Copy)]
pub struct ObjectView<'a> {
    /// API group (`""` for the core group).
    pub group: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Namespace, `None` for a cluster-scoped object.
    pub namespace: Option<&'a str>,
    /// Name.
    pub name: &'a str,
    /// Labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Annotations (only [`PROPAGATE_ANNOTATION`] is read).
    pub annotations: &'a BTreeMap<String, String>,
}

/// A policy as the choice sees it.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    /// Scope of the policy.
    pub scope: PolicyScope,
    /// The policy's namespace (`None` for a cluster-scoped policy).
    pub namespace: Option<&'a str>,
    /// The policy's name.
    pub name: &'a str,
    /// `spec.priority`.
    pub priority: i32,
    /// `metadata.creationTimestamp` as RFC 3339 (compares in time order as a string).
    pub created: &'a str,
    /// `spec.resourceSelectors`.
    pub selectors: &'a [ResourceSelector],
}

/// A selector that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// `apiVersion` or `kind` is empty.
    #[error("resourceSelectors[{index}]: apiVersion and kind are required")]
    MissingType {
        /// Index of the selector.
        index: usize,
    },
    /// A namespaced policy names another namespace.
    #[error(
        "resourceSelectors[{index}]: a namespaced policy selects only in its own namespace {own:?}, not {other:?}"
    )]
    ForeignNamespace {
        /// Index of the selector.
        index: usize,
        /// The policy's namespace.
        own: String,
        /// The namespace the selector names.
        other: String,
    },
    /// The label selector is malformed.
    #[error("resourceSelectors[{index}].labelSelector: {source}")]
    Labels {
        /// Index of the selector.
        index: usize,
        /// What is wrong.
        #[source]
        source: PlacementError,
    },
    /// The kind is not the target of any enabled FederatedTypeConfig.
    #[error(
        "resourceSelectors[{index}]: {kind} in group {group:?} is not an enabled federated type (enable it with `flotilla enable`)"
    )]
    UnknownKind {
        /// Index of the selector.
        index: usize,
        /// The group.
        group: String,
        /// The kind.
        kind: String,
    },
}

impl SelectorError {
    /// The condition reason this error is reported with.
    pub fn reason(&self) -> &'static str {
        match self {
            SelectorError::UnknownKind { .. } => "UnknownKind",
            _ => "InvalidSelector",
        }
    }
}

/// The group of an `apiVersion` (`apps/v1` → `apps`, `v1` → `""`).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Checks every selector of a policy: types present and enabled (`enabled` holds
/// `(group, kind)` of every enabled target type), namespaces within reach, label
/// selectors well formed. Returns every problem, in selector order.
pub fn validate(
    scope: PolicyScope,
    policy_namespace: Option<&str>,
    selectors: &[ResourceSelector],
    enabled: &BTreeSet<(String, String)>,
) -> Vec<SelectorError> {
    let mut out = Vec::new();
    for (index, s) in selectors.iter().enumerate() {
        if s.api_version.is_empty() || s.kind.is_empty() {
            out.push(SelectorError::MissingType { index });
            continue;
        }
        let group = group_of(&s.api_version).to_string();
        if !enabled.contains(&(group.clone(), s.kind.clone())) {
            out.push(SelectorError::UnknownKind {
                index,
                group,
                kind: s.kind.clone(),
            });
        }
        if let (PolicyScope::Namespaced, Some(other), Some(own)) =
            (scope, s.namespace.as_deref(), policy_namespace)
            && other != own
        {
            out.push(SelectorError::ForeignNamespace {
                index,
                own: own.into(),
                other: other.into(),
            });
        }
        if let Some(sel) = &s.label_selector
            && let Err(source) = matches_selector(sel, &BTreeMap::new())
        {
            out.push(SelectorError::Labels { index, source });
        }
    }
    out
}

/// How specifically one selector matches `obj`, or `None`. A malformed label selector
/// matches nothing ([`validate`] reports it).
pub fn selector_matches(
    scope: PolicyScope,
    policy_namespace: Option<&str>,
    sel: &ResourceSelector,
    obj: &ObjectView<'_>,
) -> Option<Specificity> {
    if group_of(&sel.api_version) != obj.group || sel.kind != obj.kind {
        return None;
    }
    let wanted_ns = match scope {
        PolicyScope::Namespaced => policy_namespace,
        PolicyScope::Cluster => sel.namespace.as_deref(),
    };
    if let (PolicyScope::Namespaced, Some(other)) = (scope, sel.namespace.as_deref())
        && Some(other) != policy_namespace
    {
        return None;
    }
    match (wanted_ns, obj.namespace) {
        (Some(w), Some(o)) if w != o => return None,
        // A namespaced policy never reaches a cluster-scoped object.
        (_, None) if scope == PolicyScope::Namespaced => return None,
        _ => {}
    }
    if let Some(name) = &sel.name {
        return (name == obj.name).then_some(Specificity::Name);
    }
    match &sel.label_selector {
        Some(ls) => matches_selector(ls, obj.labels)
            .ok()?
            .then_some(Specificity::Labels),
        None => Some(Specificity::Kind),
    }
}

/// The most specific way any of a policy's selectors matches `obj`, or `None`. An object
/// annotated `policy.flotilla.io/propagate: "false"` matches no policy.
pub fn policy_matches(c: &Candidate<'_>, obj: &ObjectView<'_>) -> Option<Specificity> {
    if obj
        .annotations
        .get(PROPAGATE_ANNOTATION)
        .map(String::as_str)
        == Some("false")
    {
        return None;
    }
    c.selectors
        .iter()
        .filter_map(|s| selector_matches(c.scope, c.namespace, s, obj))
        .max()
}

/// The winner's index among `candidates` for `obj`, with the indexes of the other
/// matching policies (the losers, which say so in their status). Order: the highest
/// priority, then the most specific selector, then the oldest policy, then a namespaced
/// policy before a cluster-scoped one, then by name.
pub fn choose(candidates: &[Candidate<'_>], obj: &ObjectView<'_>) -> Option<(usize, Vec<usize>)> {
    let mut matching: Vec<(usize, Specificity)> = candidates
        .iter()
        .enumerate()
        .filter_map(|(i, c)| policy_matches(c, obj).map(|s| (i, s)))
        .collect();
    matching.sort_by(|(a, sa), (b, sb)| rank(&candidates[*a], *sa, &candidates[*b], *sb));
    let (winner, _) = *matching.first()?;
    Some((winner, matching[1..].iter().map(|(i, _)| *i).collect()))
}

fn rank(a: &Candidate<'_>, sa: Specificity, b: &Candidate<'_>, sb: Specificity) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then(sb.cmp(&sa))
        .then(a.created.cmp(b.created))
        .then(a.scope.cmp(&b.scope))
        .then(a.namespace.cmp(&b.namespace))
        .then(a.name.cmp(b.name))
}

/// Whether an object is Kubernetes' or the control plane's own and never propagated by a
/// policy, whatever its selectors say: anything in a `kube-*` namespace or the control
/// plane's, each namespace's `kube-root-ca.crt` ConfigMap and `default` ServiceAccount,
/// ServiceAccount token Secrets, and objects a controller owns (a Deployment's
/// ReplicaSets, a Service's Endpoints …), which follow their owner instead.
pub fn is_system_object(obj: &serde_json::Value, control_plane_namespace: &str) -> bool {
    let s = |p: &str| {
        obj.pointer(p)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
    };
    let (kind, ns, name) = (s("/kind"), s("/metadata/namespace"), s("/metadata/name"));
    let controlled = obj
        .pointer("/metadata/ownerReferences")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|o| {
            o.iter()
                .any(|r| r.get("controller") == Some(&serde_json::Value::Bool(true)))
        });
    ns.starts_with("kube-")
        || (kind == "Namespace" && (name.starts_with("kube-") || name == control_plane_namespace))
        || (!ns.is_empty() && ns == control_plane_namespace)
        || (kind == "ConfigMap" && name == "kube-root-ca.crt")
        || (kind == "ServiceAccount" && name == "default")
        || (kind == "Secret" && s("/type") == "kubernetes.io/service-account-token")
        || controlled
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::selector::LabelSelector;

    fn sel(api: &str, kind: &str) -> ResourceSelector {
        ResourceSelector {
            api_version: api.into(),
            kind: kind.into(),
            ..Default::default()
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn web<'a>(l: &'a BTreeMap<String, String>, a: &'a BTreeMap<String, String>) -> ObjectView<'a> {
        ObjectView {
            group: "apps",
            kind: "Deployment",
            namespace: Some("demo"),
            name: "web",
            labels: l,
            annotations: a,
        }
    }

    fn pp<'a>(
        name: &'a str,
        priority: i32,
        created: &'a str,
        s: &'a [ResourceSelector],
    ) -> Candidate<'a> {
        Candidate {
            scope: PolicyScope::Namespaced,
            namespace: Some("demo"),
            name,
            priority,
            created,
            selectors: s,
        }
    }

    #[test]
    fn a_kind_selector_matches_every_object_of_the_kind_in_the_policy_namespace() {
        let (l, a) = (labels(&[]), labels(&[]));
        let s = [sel("apps/v1", "Deployment")];
        assert_eq!(
            policy_matches(&pp("p", 0, "t", &s), &web(&l, &a)),
            Some(Specificity::Kind)
        );
        let other = ObjectView {
            namespace: Some("other"),
            ..web(&l, &a)
        };
        assert_eq!(policy_matches(&pp("p", 0, "t", &s), &other), None);
    }

    #[test]
    fn the_version_is_not_compared_but_the_group_is() {
        let (l, a) = (labels(&[]), labels(&[]));
        let s = [sel("apps/v1beta2", "Deployment")];
        assert!(policy_matches(&pp("p", 0, "t", &s), &web(&l, &a)).is_some());
        let s = [sel("extensions/v1beta1", "Deployment")];
        assert!(policy_matches(&pp("p", 0, "t", &s), &web(&l, &a)).is_none());
    }

    #[test]
    fn a_cluster_policy_reaches_every_namespace_unless_its_selector_names_one() {
        let (l, a) = (labels(&[]), labels(&[]));
        let s = [sel("apps/v1", "Deployment")];
        let c = Candidate {
            scope: PolicyScope::Cluster,
            namespace: None,
            ..pp("c", 0, "t", &s)
        };
        assert!(policy_matches(&c, &web(&l, &a)).is_some());
        let s2 = [ResourceSelector {
            namespace: Some("prod".into()),
            ..sel("apps/v1", "Deployment")
        }];
        let c2 = Candidate {
            selectors: &s2,
            ..c
        };
        assert!(policy_matches(&c2, &web(&l, &a)).is_none());
    }

    #[test]
    fn a_namespaced_policy_never_selects_a_cluster_scoped_object() {
        let (l, a) = (labels(&[]), labels(&[]));
        let s = [sel("rbac.authorization.k8s.io/v1", "ClusterRole")];
        let role = ObjectView {
            group: "rbac.authorization.k8s.io",
            kind: "ClusterRole",
            namespace: None,
            ..web(&l, &a)
        };
        assert!(policy_matches(&pp("p", 0, "t", &s), &role).is_none());
    }

    #[test]
    fn the_propagate_false_annotation_keeps_every_policy_away() {
        let (l, a) = (labels(&[]), labels(&[(PROPAGATE_ANNOTATION, "false")]));
        let s = [sel("apps/v1", "Deployment")];
        assert!(policy_matches(&pp("p", 0, "t", &s), &web(&l, &a)).is_none());
    }

    #[test]
    fn the_highest_priority_wins_whatever_the_selector() {
        let (l, a) = (labels(&[("app", "web")]), labels(&[]));
        let by_name = [ResourceSelector {
            name: Some("web".into()),
            ..sel("apps/v1", "Deployment")
        }];
        let by_kind = [sel("apps/v1", "Deployment")];
        let c = [
            pp("named", 0, "2026-01-01T00:00:00Z", &by_name),
            pp("urgent", 5, "2026-02-01T00:00:00Z", &by_kind),
        ];
        assert_eq!(choose(&c, &web(&l, &a)), Some((1, vec![0])));
    }

    #[test]
    fn among_equal_priorities_name_beats_labels_beats_kind() {
        let (l, a) = (labels(&[("app", "web")]), labels(&[]));
        let by_kind = [sel("apps/v1", "Deployment")];
        let by_labels = [ResourceSelector {
            label_selector: Some(LabelSelector {
                match_labels: labels(&[("app", "web")]),
                ..Default::default()
            }),
            ..sel("apps/v1", "Deployment")
        }];
        let by_name = [ResourceSelector {
            name: Some("web".into()),
            ..sel("apps/v1", "Deployment")
        }];
        let c = [
            pp("kind", 0, "2020-01-01T00:00:00Z", &by_kind),
            pp("labels", 0, "2021-01-01T00:00:00Z", &by_labels),
            pp("name", 0, "2022-01-01T00:00:00Z", &by_name),
        ];
        assert_eq!(choose(&c, &web(&l, &a)), Some((2, vec![1, 0])));
    }

    #[test]
    fn among_equals_the_oldest_policy_wins() {
        let (l, a) = (labels(&[]), labels(&[]));
        let s = [sel("apps/v1", "Deployment")];
        let c = [
            pp("new", 0, "2026-03-01T00:00:00Z", &s),
            pp("old", 0, "2026-01-01T00:00:00Z", &s),
        ];
        assert_eq!(choose(&c, &web(&l, &a)), Some((1, vec![0])));
    }

    #[test]
    fn no_matching_policy_chooses_nothing() {
        let (l, a) = (labels(&[]), labels(&[]));
        let s = [sel("v1", "ConfigMap")];
        assert_eq!(choose(&[pp("p", 0, "t", &s)], &web(&l, &a)), None);
    }

    #[test]
    fn validation_reports_every_bad_selector_with_its_reason() {
        let enabled: BTreeSet<(String, String)> =
            [("apps".to_string(), "Deployment".to_string())].into();
        let bad_labels = ResourceSelector {
            label_selector: Some(LabelSelector {
                match_expressions: vec![flotilla_api::selector::LabelSelectorRequirement {
                    key: "app".into(),
                    operator: "Near".into(),
                    values: vec![],
                }],
                ..Default::default()
            }),
            ..sel("apps/v1", "Deployment")
        };
        let foreign = ResourceSelector {
            namespace: Some("prod".into()),
            ..sel("apps/v1", "Deployment")
        };
        let errs = validate(
            PolicyScope::Namespaced,
            Some("demo"),
            &[
                sel("", ""),
                sel("example.com/v1", "Widget"),
                foreign,
                bad_labels,
            ],
            &enabled,
        );
        let reasons: Vec<_> = errs.iter().map(|e| (e.reason(), e.to_string())).collect();
        assert_eq!(reasons.len(), 4, "{reasons:?}");
        assert_eq!(reasons[0].0, "InvalidSelector");
        assert_eq!(reasons[1].0, "UnknownKind");
        assert!(reasons[1].1.contains("Widget"));
        assert!(reasons[2].1.contains("own namespace"));
        assert!(reasons[3].1.contains("Near"));
    }

    #[test]
    fn kubernetes_own_objects_are_never_propagated() {
        use serde_json::json;
        let cp = "kube-federation-system";
        let yes = [
            json!({"kind": "ConfigMap", "metadata": {"namespace": "demo", "name": "kube-root-ca.crt"}}),
            json!({"kind": "ServiceAccount", "metadata": {"namespace": "demo", "name": "default"}}),
            json!({"kind": "Secret", "type": "kubernetes.io/service-account-token", "metadata": {"namespace": "demo", "name": "t"}}),
            json!({"kind": "ConfigMap", "metadata": {"namespace": "kube-system", "name": "x"}}),
            json!({"kind": "ConfigMap", "metadata": {"namespace": cp, "name": "x"}}),
            json!({"kind": "Namespace", "metadata": {"name": "kube-public"}}),
            json!({"kind": "ReplicaSet", "metadata": {"namespace": "demo", "name": "web-1", "ownerReferences": [{"controller": true}]}}),
        ];
        for o in &yes {
            assert!(is_system_object(o, cp), "{o}");
        }
        let no = [
            json!({"kind": "ConfigMap", "metadata": {"namespace": "demo", "name": "settings"}}),
            json!({"kind": "Namespace", "metadata": {"name": "demo"}}),
            json!({"kind": "ClusterRole", "metadata": {"name": "reader"}}),
        ];
        for o in &no {
            assert!(!is_system_object(o, cp), "{o}");
        }
    }

    #[test]
    fn a_valid_policy_has_no_problems() {
        let enabled: BTreeSet<(String, String)> =
            [("".to_string(), "ConfigMap".to_string())].into();
        assert!(
            validate(
                PolicyScope::Cluster,
                None,
                &[sel("v1", "ConfigMap")],
                &enabled
            )
            .is_empty()
        );
    }
}
