//! Who sees what on a dashboard that authenticates (bound to a non-loopback address): the
//! reads a page needs reviewed, and the state cut down to what the caller may read — the
//! federated objects of each type and namespace the caller may `get`, their Events where
//! the caller may `list` Events, the member clusters if the caller may `list`
//! KubeFedClusters, and the policies of each kind and namespace the caller may `list`
//! (`list` on `propagationpolicies.policy.flotilla.io` …; the cluster-scoped kinds
//! cluster-wide). The same verbs `kubectl` would need, so RBAC alone decides: a caller who
//! may not read policies sees none, and no error. Pure.

use std::collections::BTreeSet;

use flotilla_api::{CORE_GROUP, TYPES_GROUP, policy::POLICY_GROUP};

use super::state::{ObjectKey, PolicyKey, State};
use flotilla_multicluster::http::auth::Check;

/// The read of objects of the type `type_name` (an FTC name) in `namespace`; `None` when the
/// type is not enabled (nothing of it is shown then).
fn object_check(state: &State, type_name: &str, namespace: &str) -> Option<Check> {
    let ftc = state.types.get(type_name)?;
    Some(Check::Resource {
        verb: "get",
        group: TYPES_GROUP.to_owned(),
        resource: ftc.spec.federated_type.plural_name.clone(),
        namespace: Some(namespace.to_owned()).filter(|ns| !ns.is_empty()),
    })
}

fn events_check(namespace: &str) -> Check {
    Check::Resource {
        verb: "list",
        group: String::new(),
        resource: "events".into(),
        namespace: Some(namespace.to_owned()).filter(|ns| !ns.is_empty()),
    }
}

fn clusters_check(kubefed_ns: &str) -> Check {
    Check::Resource {
        verb: "list",
        group: CORE_GROUP.to_owned(),
        resource: "kubefedclusters".into(),
        namespace: Some(kubefed_ns.to_owned()),
    }
}

fn policy_check(key: &PolicyKey) -> Check {
    Check::Resource {
        verb: "list",
        group: POLICY_GROUP.to_owned(),
        resource: key.kind.plural().to_owned(),
        namespace: Some(key.namespace.clone()).filter(|ns| !ns.is_empty()),
    }
}

/// Every read the policies page needs reviewed: the overview's (the selected objects link
/// to the federated objects the caller may read), and each policy kind × namespace.
pub fn policies_checks(state: &State, kubefed_ns: &str) -> BTreeSet<CheckKey> {
    let mut checks = overview_checks(state, kubefed_ns);
    checks.extend(state.policies.keys().map(|k| CheckKey(policy_check(k))));
    checks
}

/// Every read the overview needs reviewed: the clusters, and each type × namespace holding
/// objects.
pub fn overview_checks(state: &State, kubefed_ns: &str) -> BTreeSet<CheckKey> {
    let mut checks: BTreeSet<CheckKey> = state
        .objects
        .iter()
        .filter_map(|(k, o)| object_check(state, &o.type_name, &k.namespace))
        .map(CheckKey)
        .collect();
    checks.insert(CheckKey(clusters_check(kubefed_ns)));
    checks
}

/// The reads one object's page needs: the object itself first (without it the page is
/// refused), then its Events and the clusters. `None`: no such object.
pub fn page_checks(state: &State, key: &ObjectKey, kubefed_ns: &str) -> Option<Vec<Check>> {
    let object = state.objects.get(key)?;
    Some(vec![
        object_check(state, &object.type_name, &key.namespace)?,
        events_check(&key.namespace),
        clusters_check(kubefed_ns),
    ])
}

/// `state` as a caller sees it who may do exactly `allowed`.
pub fn visible(state: &State, kubefed_ns: &str, allowed: &BTreeSet<CheckKey>) -> State {
    let may = |check: Option<Check>| check.is_some_and(|c| allowed.contains(&CheckKey(c)));
    let clusters = if may(Some(clusters_check(kubefed_ns))) {
        state.clusters.clone()
    } else {
        Default::default()
    };
    State {
        clusters,
        types: state.types.clone(),
        objects: state
            .objects
            .iter()
            .filter(|(k, o)| may(object_check(state, &o.type_name, &k.namespace)))
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect(),
        policies: state
            .policies
            .iter()
            .filter(|(k, _)| allowed.contains(&CheckKey(policy_check(k))))
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect(),
        rsps: state.rsps.clone(),
        events: state
            .events
            .iter()
            .filter(|(_, e)| may(Some(events_check(&e.namespace))))
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect(),
        synced: state.synced,
    }
}

/// A [`Check`] with an order, so sets of them are deterministic.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CheckKey(pub Check);

impl CheckKey {
    fn sort_key(&self) -> (u8, &str, &str, &str, &str) {
        match &self.0 {
            Check::Resource {
                verb,
                group,
                resource,
                namespace,
            } => (0, verb, group, resource, namespace.as_deref().unwrap_or("")),
            Check::Path { verb, path } => (1, verb, path, "", ""),
        }
    }
}

impl Ord for CheckKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.sort_key().cmp(&other.sort_key())
    }
}

impl PartialOrd for CheckKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::crdgen::{default_target_types, federated_type_config};
    use kube::ResourceExt;

    const NS: &str = "kube-federation-system";

    /// The overview's test state (ConfigMaps in `demo`, a Deployment in `prod`) with the
    /// default types enabled and each object of its type.
    fn state(n: usize) -> State {
        let mut state = crate::view::overview::tests::state(n);
        for t in default_target_types() {
            let ftc = federated_type_config(&t, NS);
            state.types.insert(ftc.name_any(), ftc);
        }
        for (key, object) in state.objects.iter_mut() {
            object.type_name = match key.kind.as_str() {
                "FederatedDeployment" => "deployments.apps".into(),
                _ => "configmaps".into(),
            };
        }
        state
    }

    fn get(resource: &str, namespace: &str) -> CheckKey {
        CheckKey(Check::Resource {
            verb: "get",
            group: TYPES_GROUP.into(),
            resource: resource.into(),
            namespace: Some(namespace.into()),
        })
    }

    #[test]
    fn the_overview_needs_one_review_per_type_and_namespace_and_one_for_the_clusters() {
        let s = state(3);
        let checks = overview_checks(&s, NS);
        assert_eq!(
            checks,
            BTreeSet::from([
                CheckKey(clusters_check(NS)),
                get("federatedconfigmaps", "demo"),
                get("federateddeployments", "prod"),
            ])
        );
    }

    #[test]
    fn a_caller_sees_only_the_types_and_namespaces_it_may_read() {
        let s = state(3);
        let nothing = visible(&s, NS, &BTreeSet::new());
        assert!(nothing.objects.is_empty() && nothing.clusters.is_empty());
        assert!(nothing.events.is_empty());
        let allowed = BTreeSet::from([get("federateddeployments", "prod")]);
        let some = visible(&s, NS, &allowed);
        let shown: Vec<&str> = some.objects.keys().map(|k| k.name.as_str()).collect();
        assert_eq!(shown, ["web"]);
        assert!(
            some.clusters.is_empty(),
            "clusters need their own permission"
        );
        let with_clusters = BTreeSet::from([
            get("federatedconfigmaps", "prod"),
            CheckKey(clusters_check(NS)),
        ]);
        let other = visible(&s, NS, &with_clusters);
        assert!(
            other.objects.is_empty(),
            "the ConfigMaps are in demo, not prod"
        );
        assert_eq!(other.clusters.len(), s.clusters.len());
    }

    #[test]
    fn a_caller_sees_the_policies_of_the_kinds_and_namespaces_it_may_list() {
        use crate::state::{PolicyKind, PolicyRecord};
        let mut s = state(1);
        let key = |kind, ns: &str, name: &str| PolicyKey {
            kind,
            namespace: ns.into(),
            name: name.into(),
        };
        for k in [
            key(PolicyKind::PropagationPolicy, "demo", "web"),
            key(PolicyKind::PropagationPolicy, "prod", "web"),
            key(PolicyKind::OverridePolicy, "demo", "m2"),
            key(PolicyKind::ClusterPropagationPolicy, "", "all"),
        ] {
            s.policies.insert(k, PolicyRecord::default());
        }
        let checks = policies_checks(&s, NS);
        let list = |resource: &str, ns: Option<&str>| {
            CheckKey(Check::Resource {
                verb: "list",
                group: POLICY_GROUP.into(),
                resource: resource.into(),
                namespace: ns.map(str::to_owned),
            })
        };
        assert!(checks.contains(&list("clusterpropagationpolicies", None)));
        assert!(checks.contains(&list("overridepolicies", Some("demo"))));
        assert!(
            !overview_checks(&s, NS).contains(&list("propagationpolicies", Some("demo"))),
            "the overview shows no policy, so it reviews none"
        );
        assert!(visible(&s, NS, &BTreeSet::new()).policies.is_empty());
        let allowed = BTreeSet::from([list("propagationpolicies", Some("demo"))]);
        let seen: Vec<String> = visible(&s, NS, &allowed)
            .policies
            .keys()
            .map(PolicyKey::reference)
            .collect();
        assert_eq!(seen, ["PropagationPolicy/demo/web"]);
    }

    #[test]
    fn an_object_page_is_reviewed_for_the_object_first() {
        let s = state(1);
        let key = s.objects.keys().next().expect("an object").clone();
        let checks = page_checks(&s, &key, NS).expect("checks");
        assert_eq!(checks[0].describe().split(' ').next(), Some("get"));
        assert_eq!(checks.len(), 3);
        let missing = ObjectKey {
            namespace: "x".into(),
            kind: "Y".into(),
            name: "z".into(),
        };
        assert!(page_checks(&s, &missing, NS).is_none());
    }
}
