//! What the control plane may do in a member cluster, as RBAC rules: read and write the
//! target types of the enabled FederatedTypeConfigs, call the health and version
//! endpoints, request tokens of the ServiceAccounts that ServiceAccountImports name in that
//! member, by name (`serviceaccounts/token` create — no read of ServiceAccounts or their
//! Secrets; its own token is renewed through a Role of [`crate::member_token`]), and keep
//! its own ClusterRole in step with the enabled types, and what Multi-Cluster Services need
//! ([`mcs_rules`]), reading Nodes and Pods (member capacity), and with a workload type
//! enabled, the copies of the dependencies that
//! follow workloads ([`dependency_rules`]) — nothing else.
//! (kubefedctl gave the host `*` on every resource of every group in every member.)

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::{FederatedTypeConfig, core::PropagationMode, mcs::MCS_GROUP};
use k8s_openapi::api::rbac::v1::PolicyRule;

/// Verbs on every propagated type: what sync, status collection and deletion use.
pub const TYPE_VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// Endpoints the health checks and version reads call.
pub const HEALTH_URLS: [&str; 4] = ["/healthz", "/readyz", "/livez", "/version"];

/// The one permission ServiceAccountImports need in a member: creating TokenRequests.
pub const TOKEN_REQUEST_RESOURCE: &str = "serviceaccounts/token";

/// Target types (group, plural) of the FederatedTypeConfigs whose propagation is enabled.
pub fn enabled_types<'a>(
    ftcs: impl IntoIterator<Item = &'a FederatedTypeConfig>,
) -> BTreeSet<(String, String)> {
    ftcs.into_iter()
        .filter(|f| f.spec.propagation == PropagationMode::Enabled)
        .map(|f| {
            let t = &f.spec.target_type;
            (t.group.clone(), t.plural_name.clone())
        })
        .collect()
}

/// What Multi-Cluster Services need in every member: read ServiceExports (and write their
/// conditions), Services and namespaces; write ServiceImports and EndpointSlices.
pub fn mcs_rules() -> Vec<PolicyRule> {
    let rule = |group: &str, resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..PolicyRule::default()
    };
    let read = ["get", "list", "watch"];
    let status = ["get", "patch", "update"];
    vec![
        rule(MCS_GROUP, &["serviceexports"], &read),
        rule(
            MCS_GROUP,
            &["serviceexports/status", "serviceimports/status"],
            &status,
        ),
        rule(MCS_GROUP, &["serviceimports"], &TYPE_VERBS),
        rule("discovery.k8s.io", &["endpointslices"], &TYPE_VERBS),
        rule("", &["services", "namespaces"], &read),
    ]
}

/// Workload types (group, plural) whose pod templates may name dependencies that follow
/// them (`spec.propagateDependencies`).
const WORKLOAD_TYPES: [(&str, &str); 7] = [
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
    ("", "pods"),
];

/// A Pull cluster's agent's rules for the dependency copies the control plane carries to it
/// in Works, when a workload type is enabled: push mode's [`dependency_rules`] plus `patch`
/// (the agent applies server-side). Neither `list` nor `watch`: a kind not federated itself
/// stays unlistable (the agent then reads those copies live instead of from a watch cache).
pub fn agent_dependency_rules(types: &BTreeSet<(String, String)>) -> Vec<PolicyRule> {
    let mut rules = dependency_rules(types);
    for r in &mut rules {
        r.verbs.push("patch".into());
    }
    rules
}

/// The core resources of the dependencies that follow workloads.
const DEPENDENCY_RESOURCES: [&str; 4] = [
    "configmaps",
    "secrets",
    "serviceaccounts",
    "persistentvolumeclaims",
];

/// When a workload type is enabled: the copies of its dependencies are read, created,
/// replaced and deleted in members (ConfigMaps, Secrets, ServiceAccounts, PVCs).
pub fn dependency_rules(types: &BTreeSet<(String, String)>) -> Vec<PolicyRule> {
    let workloads = (types.iter()).any(|(g, p)| WORKLOAD_TYPES.contains(&(g.as_str(), p.as_str())));
    if !workloads {
        return Vec::new();
    }
    vec![PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(DEPENDENCY_RESOURCES.iter().map(|s| s.to_string()).collect()),
        verbs: ["get", "create", "update", "delete"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..PolicyRule::default()
    }]
}

/// [`TYPE_VERBS`] on the given target types, one rule per API group (also what a Pull
/// cluster's agent is given, see [`crate::pull_rbac`]).
pub fn type_rules(types: &BTreeSet<(String, String)>) -> Vec<PolicyRule> {
    let mut by_group: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (group, plural) in types {
        by_group.entry(group).or_default().push(plural.clone());
    }
    by_group
        .into_iter()
        .map(|(group, resources)| PolicyRule {
            api_groups: Some(vec![group.to_string()]),
            resources: Some(resources),
            verbs: TYPE_VERBS.iter().map(|s| s.to_string()).collect(),
            ..PolicyRule::default()
        })
        .collect()
}

/// The rules of the member ClusterRole named `role`, for the given target types and the
/// ServiceAccounts (by name) that ServiceAccountImports of this member name: with none,
/// the credential may request no token but its own (a Role beside the ServiceAccount).
///
/// The last rule lets the credential update this one ClusterRole — with `escalate`, so it
/// can add the rules of a type enabled later without an administrator. That keeps types
/// enabled after the join working; the cost is that whoever holds the token could widen
/// its own role (an auditable change to one named object). See docs/operations.md.
pub fn member_rules(
    types: &BTreeSet<(String, String)>,
    role: &str,
    imported: &BTreeSet<String>,
) -> Vec<PolicyRule> {
    let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut rules = type_rules(types);
    // The About API: the properties a member declares reach its ClusterProfile.
    rules.push(PolicyRule {
        api_groups: Some(vec![flotilla_api::about::ABOUT_GROUP.into()]),
        resources: Some(vec!["clusterproperties".into()]),
        verbs: strings(&["get", "list", "watch"]),
        ..PolicyRule::default()
    });
    // Capacity: the Nodes and Pods the RSP scheduler and the resource summary read.
    rules.push(PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(strings(&["nodes", "pods"])),
        verbs: strings(&["get", "list", "watch"]),
        ..PolicyRule::default()
    });
    rules.extend(mcs_rules());
    rules.extend(dependency_rules(types));
    rules.push(PolicyRule {
        non_resource_urls: Some(strings(&HEALTH_URLS)),
        verbs: vec!["get".into()],
        ..PolicyRule::default()
    });
    if !imported.is_empty() {
        rules.push(PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec![TOKEN_REQUEST_RESOURCE.into()]),
            resource_names: Some(imported.iter().cloned().collect()),
            verbs: vec!["create".into()],
            ..PolicyRule::default()
        });
    }
    rules.push(PolicyRule {
        api_groups: Some(vec!["rbac.authorization.k8s.io".into()]),
        resources: Some(vec!["clusterroles".into()]),
        resource_names: Some(vec![role.to_string()]),
        verbs: strings(&["get", "patch", "update", "escalate"]),
        ..PolicyRule::default()
    });
    rules
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::{FederatedTypeConfigSpec, core::ApiResource};

    fn ftc(group: &str, plural: &str, propagation: PropagationMode) -> FederatedTypeConfig {
        let target = ApiResource {
            group: group.into(),
            version: "v1".into(),
            kind: "K".into(),
            plural_name: plural.into(),
            scope: flotilla_api::core::Scope::Namespaced,
        };
        FederatedTypeConfig::new(
            &format!("{plural}.{group}"),
            FederatedTypeConfigSpec {
                target_type: target.clone(),
                propagation,
                federated_type: target,
                status_type: None,
                status_collection: None,
                health: None,
            },
        )
    }

    #[test]
    fn only_enabled_types_are_granted() {
        let ftcs = [
            ftc("", "configmaps", PropagationMode::Enabled),
            ftc("", "secrets", PropagationMode::Disabled),
            ftc("apps", "deployments", PropagationMode::Enabled),
        ];
        let types = enabled_types(&ftcs);
        assert_eq!(
            types,
            BTreeSet::from([
                (String::new(), "configmaps".to_string()),
                ("apps".to_string(), "deployments".to_string())
            ])
        );
    }

    #[test]
    fn rules_group_resources_by_api_group_and_never_grant_wildcards() {
        let types = BTreeSet::from([
            (String::new(), "configmaps".to_string()),
            (String::new(), "services".to_string()),
            ("apps".to_string(), "deployments".to_string()),
        ]);
        let rules = member_rules(
            &types,
            "kubefed-controller-manager:m1-host",
            &BTreeSet::from(["imported".to_string()]),
        );
        assert_eq!(rules[0].api_groups, Some(vec![String::new()]));
        assert_eq!(
            rules[0].resources,
            Some(vec!["configmaps".to_string(), "services".to_string()])
        );
        assert_eq!(rules[1].api_groups, Some(vec!["apps".to_string()]));
        for r in &rules {
            for list in [&r.api_groups, &r.resources, &r.non_resource_urls] {
                assert!(!list.iter().flatten().any(|s| s == "*"), "{r:?}");
            }
            assert!(
                !r.verbs
                    .iter()
                    .any(|v| v == "*" || v == "bind" || v == "impersonate")
            );
        }
    }

    #[test]
    fn tokens_of_imported_service_accounts_only_may_be_requested_and_none_read() {
        assert!(
            !member_rules(&BTreeSet::new(), "role-x", &BTreeSet::new())
                .iter()
                .any(|r| r
                    .resources
                    .iter()
                    .flatten()
                    .any(|s| s.starts_with("serviceaccounts"))),
            "a token rule without imports"
        );
        let imported = BTreeSet::from(["app".to_string()]);
        let rules = member_rules(&BTreeSet::new(), "role-x", &imported);
        let token: Vec<_> = rules
            .iter()
            .filter(|r| {
                r.resources
                    .iter()
                    .flatten()
                    .any(|s| s.starts_with("serviceaccounts"))
            })
            .collect();
        assert_eq!(token.len(), 1);
        assert_eq!(
            token[0].resources,
            Some(vec![TOKEN_REQUEST_RESOURCE.to_string()])
        );
        assert_eq!(token[0].verbs, vec!["create".to_string()]);
        assert_eq!(token[0].resource_names, Some(vec!["app".to_string()]));
        assert_eq!(token[0].api_groups, Some(vec![String::new()]));
    }

    #[test]
    fn dependency_copies_are_granted_only_with_a_workload_type() {
        let config_maps = BTreeSet::from([(String::new(), "configmaps".to_string())]);
        assert!(dependency_rules(&config_maps).is_empty());
        let deployments = BTreeSet::from([("apps".to_string(), "deployments".to_string())]);
        let rules = dependency_rules(&deployments);
        assert_eq!(rules.len(), 1);
        assert!(
            rules[0]
                .resources
                .iter()
                .flatten()
                .any(|r| r == "persistentvolumeclaims")
        );
        assert!(!rules[0].verbs.iter().any(|v| v == "list" || v == "watch"));
    }

    #[test]
    fn a_pull_agent_applies_the_dependency_kinds_only_with_a_workload_type() {
        let config_maps = BTreeSet::from([(String::new(), "configmaps".to_string())]);
        assert!(agent_dependency_rules(&config_maps).is_empty());
        let deployments = BTreeSet::from([("apps".to_string(), "deployments".to_string())]);
        let rules = agent_dependency_rules(&deployments);
        assert_eq!(rules.len(), 1);
        for plural in DEPENDENCY_RESOURCES {
            assert!(
                rules[0].resources.iter().flatten().any(|r| r == plural),
                "{plural}"
            );
        }
        assert!(
            rules[0].verbs.iter().any(|v| v == "patch"),
            "server-side apply"
        );
        assert!(!rules[0].verbs.iter().any(|v| v == "list" || v == "watch"));
    }

    #[test]
    fn the_role_may_only_update_itself() {
        let rules = member_rules(&BTreeSet::new(), "role-x", &BTreeSet::new());
        let own = rules.last().expect("a rule for the role itself");
        assert_eq!(own.resource_names, Some(vec!["role-x".to_string()]));
        assert!(own.verbs.contains(&"escalate".to_string()));
        assert!(!own.verbs.contains(&"create".to_string()));
    }
}
