//! Least privilege for Pull clusters. The host holds no credential of a Pull member, so it
//! cannot write the agent's member ClusterRole as it does a push member's; it publishes the
//! rules of the enabled types in the cluster's inventory namespace instead — ConfigMap
//! [`AGENT_TYPES_CONFIGMAP`], which the agent's host Role may read — and the agent sets
//! its own ClusterRole from it (see `flotilla_agent::rbac`). Called by the member-RBAC pass
//! for every Pull cluster, and by `join --mode pull` before the agent starts.

use std::collections::{BTreeSet, HashMap};

use flotilla_api::{FIELD_MANAGER, FederatedTypeConfig, work::cluster_namespace};
use flotilla_core::agent_role::{AGENT_TYPES_CONFIGMAP, AGENT_TYPES_KEY};
use k8s_openapi::api::{core::v1::ConfigMap, rbac::v1::PolicyRule};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::member_rbac::rules::{agent_dependency_rules, enabled_types, type_rules};

/// The ConfigMap publishing `rules` to the agent of `cluster`.
pub fn types_configmap(cluster: &str, rules: &[PolicyRule]) -> Value {
    let text = serde_json::to_string(rules).unwrap_or_else(|_| "[]".into());
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": AGENT_TYPES_CONFIGMAP, "namespace": cluster_namespace(cluster)},
        "data": {AGENT_TYPES_KEY: text},
    })
}

/// The rules of the types enabled in the host now (read from its type configs), with the
/// dependency copies' when a workload type is enabled.
pub async fn enabled_type_rules(
    host: &Client,
    namespace: &str,
) -> Result<Vec<PolicyRule>, kube::Error> {
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(host.clone(), namespace);
    let list = ftcs.list(&ListParams::default()).await?;
    Ok(agent_rules(&enabled_types(&list.items)))
}

/// The rules published to an agent: the types', and the dependency copies' when a workload
/// type is among them.
fn agent_rules(types: &BTreeSet<(String, String)>) -> Vec<PolicyRule> {
    let mut rules = type_rules(types);
    rules.extend(agent_dependency_rules(types));
    rules
}

/// Writes the ConfigMap of `cluster` when its rules differ from `rules`.
pub async fn publish(
    host: &Client,
    cluster: &str,
    rules: &[PolicyRule],
) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(host.clone(), &cluster_namespace(cluster));
    let body = types_configmap(cluster, rules);
    let current = api.get_opt(AGENT_TYPES_CONFIGMAP).await?;
    let wanted = body["data"][AGENT_TYPES_KEY].as_str();
    if current
        .as_ref()
        .and_then(|c| c.data.as_ref())
        .and_then(|d| d.get(AGENT_TYPES_KEY))
        .map(String::as_str)
        == wanted
    {
        debug!(%cluster, "the agent's types are up to date");
        return Ok(());
    }
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(AGENT_TYPES_CONFIGMAP, &pp, &Patch::Apply(&body))
        .await?;
    info!(%cluster, "published the enabled types to the cluster's agent");
    Ok(())
}

/// One member-RBAC pass over a Pull cluster: publishes the types' rules unless `applied`
/// says they already were.
pub async fn reconcile(
    host: &Client,
    cluster: &str,
    types: &BTreeSet<(String, String)>,
    applied: &mut HashMap<String, Vec<PolicyRule>>,
) {
    let rules = agent_rules(types);
    if applied.get(cluster) == Some(&rules) {
        return;
    }
    match publish(host, cluster, &rules).await {
        Ok(()) => {
            applied.insert(cluster.to_owned(), rules);
        }
        Err(e) => {
            warn!(%cluster, error = %e, "publishing the enabled types to the agent failed; retrying on the next change");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configmap_lives_in_the_inventory_and_holds_the_rules() {
        let types = BTreeSet::from([(String::new(), "configmaps".to_owned())]);
        let cm = types_configmap("edge", &type_rules(&types));
        assert_eq!(cm["metadata"]["namespace"], "flotilla-cluster-edge");
        let rules: Vec<PolicyRule> =
            serde_json::from_str(cm["data"][AGENT_TYPES_KEY].as_str().expect("text"))
                .expect("rules");
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["configmaps".to_owned()][..])
        );
    }
}
