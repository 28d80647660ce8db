//! The pull agent's member ClusterRole, as host and agent agree on it. The host publishes
//! the rules of the enabled federated types in a ConfigMap of the cluster's inventory
//! namespace ([`AGENT_TYPES_CONFIGMAP`], key [`AGENT_TYPES_KEY`]: a JSON list of RBAC
//! rules); the agent sets its ClusterRole to those rules plus [`agent_own_rules`] — what it
//! needs whatever the types. A role annotated [`AGENT_ROLE_ANNOTATION`]`: all` (joined with
//! `--member-role all`) is left as it is.

use k8s_openapi::api::rbac::v1::PolicyRule;

/// ConfigMap in `flotilla-cluster-NAME` holding the rules of the enabled types.
pub const AGENT_TYPES_CONFIGMAP: &str = "flotilla-agent-types";
/// Its key: a JSON list of RBAC `PolicyRule`s.
pub const AGENT_TYPES_KEY: &str = "rules";
/// Annotation of the agent's member ClusterRole: `types` (kept in step with the enabled
/// types by the agent) or `all` (every resource; never narrowed).
pub const AGENT_ROLE_ANNOTATION: &str = "flotilla.io/agent-role";
/// Default name of the agent's member ClusterRole.
pub const AGENT_ROLE: &str = "flotilla-agent";

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources.iter().map(|s| (*s).to_owned()).collect()),
        verbs: verbs.iter().map(|s| (*s).to_owned()).collect(),
        ..PolicyRule::default()
    }
}

/// What the agent needs in its member whatever the types: its AppliedWork records,
/// Multi-Cluster Services (reading exports, Services and EndpointSlices, writing export
/// status, ServiceImports and EndpointSlices), the reviews that authenticate `/metrics`,
/// and updating its own ClusterRole `role` (with
/// `escalate`, so it can add the rules of a type enabled later — as push mode's member
/// credential does; see docs/pull-mode.md).
pub fn agent_own_rules(role: &str) -> Vec<PolicyRule> {
    let all = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let mut own = rule(
        "rbac.authorization.k8s.io",
        &["clusterroles"],
        &["get", "patch", "update", "escalate"],
    );
    own.resource_names = Some(vec![role.to_owned()]);
    vec![
        rule(
            "multicluster.x-k8s.io",
            &["appliedworks", "appliedworks/status"],
            &all,
        ),
        // Multi-Cluster Services: the exports it reports (and their conditions), the
        // Services and Kubernetes' own slices it reads, and the imports and imported slices
        // its Works carry.
        rule(
            "multicluster.x-k8s.io",
            &["serviceexports"],
            &["get", "list", "watch"],
        ),
        rule(
            "multicluster.x-k8s.io",
            &["serviceexports/status"],
            &["get", "patch", "update"],
        ),
        rule("", &["services"], &["get", "list", "watch"]),
        rule("multicluster.x-k8s.io", &["serviceimports"], &all),
        rule("discovery.k8s.io", &["endpointslices"], &all),
        rule("authentication.k8s.io", &["tokenreviews"], &["create"]),
        rule(
            "authorization.k8s.io",
            &["subjectaccessreviews"],
            &["create"],
        ),
        own,
    ]
}

/// The agent's member rules: the enabled types' rules, then its own.
pub fn agent_member_rules(type_rules: &[PolicyRule], role: &str) -> Vec<PolicyRule> {
    let mut rules = type_rules.to_vec();
    rules.extend(agent_own_rules(role));
    rules
}

/// Every resource (`--member-role all`), and the agent's own rules.
pub fn agent_all_rules(role: &str) -> Vec<PolicyRule> {
    let all = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    agent_member_rules(&[rule("*", &["*"], &all)], role)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_may_update_only_its_own_role() {
        let rules = agent_member_rules(&[rule("", &["configmaps"], &["get"])], "r1");
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["configmaps".to_owned()][..])
        );
        let own = rules
            .iter()
            .find(|r| r.resources.as_deref() == Some(&["clusterroles".to_owned()][..]))
            .expect("its own role");
        assert_eq!(own.resource_names.as_deref(), Some(&["r1".to_owned()][..]));
        assert!(own.verbs.contains(&"escalate".to_owned()));
        assert!(!own.verbs.contains(&"create".to_owned()));
    }

    #[test]
    fn the_agent_reads_exports_and_services_but_writes_only_export_status() {
        let rules = agent_own_rules("r1");
        let verbs = |resource: &str| -> Vec<String> {
            rules
                .iter()
                .filter(|r| r.resources.iter().flatten().any(|x| x == resource))
                .flat_map(|r| r.verbs.clone())
                .collect()
        };
        assert_eq!(verbs("serviceexports"), ["get", "list", "watch"]);
        assert_eq!(verbs("services"), ["get", "list", "watch"]);
        assert!(verbs("serviceexports/status").contains(&"patch".to_owned()));
        assert!(verbs("serviceimports").contains(&"delete".to_owned()));
        assert!(verbs("endpointslices").contains(&"create".to_owned()));
    }
}
