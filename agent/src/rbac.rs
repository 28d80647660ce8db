//! The agent's member ClusterRole follows the enabled types: the host publishes their rules
//! in ConfigMap `flotilla-agent-types` of the cluster's namespace (the host has no member
//! credential to write the role itself); the agent watches it and sets its ClusterRole to
//! those rules plus its own ([`flotilla_core::agent_role`]) — only a role annotated
//! `flotilla.io/agent-role: types`, never one joined with `--member-role all`, and only when
//! the rules differ. A ConfigMap it cannot read as rules is reported and the role kept.

use std::ops::ControlFlow;

use flotilla_api::work::AGENT_FIELD_MANAGER;
use flotilla_core::agent_role::{
    AGENT_ROLE_ANNOTATION, AGENT_TYPES_CONFIGMAP, AGENT_TYPES_KEY, agent_member_rules,
};
use flotilla_multicluster::watch::{WatchParams, watch_into};
use k8s_openapi::api::{
    core::v1::ConfigMap,
    rbac::v1::{ClusterRole, PolicyRule},
};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
    runtime::reflector::{self, ObjectRef},
};
use serde_json::json;
use tracing::{debug, info, warn};

/// What to do with the agent's ClusterRole.
#[derive(Debug, PartialEq)]
pub enum RoleAction {
    /// Set its rules to these.
    Update(Vec<PolicyRule>),
    /// Leave it (why).
    Leave(String),
}

/// The decision for the published rules (`published`: the ConfigMap's text) and the role
/// as it is (`None`: absent).
pub fn decide(published: &str, current: Option<&ClusterRole>, role: &str) -> RoleAction {
    let Some(current) = current else {
        return RoleAction::Leave(format!("ClusterRole {role} does not exist"));
    };
    match current
        .annotations()
        .get(AGENT_ROLE_ANNOTATION)
        .map(String::as_str)
    {
        Some("types") => {}
        other => {
            return RoleAction::Leave(format!(
                "ClusterRole {role} is not kept in step with the types ({AGENT_ROLE_ANNOTATION}: {})",
                other.unwrap_or("unset")
            ));
        }
    }
    let types: Vec<PolicyRule> = match serde_json::from_str(published) {
        Ok(t) => t,
        Err(e) => return RoleAction::Leave(format!("the published types are not RBAC rules: {e}")),
    };
    let wanted = agent_member_rules(&types, role);
    if current.rules.as_deref() == Some(&wanted[..]) {
        return RoleAction::Leave("up to date".into());
    }
    RoleAction::Update(wanted)
}

/// Watches the published types and keeps ClusterRole `role` in step, until aborted.
pub async fn keep_role(published: Api<ConfigMap>, member: Client, role: String) {
    let writer = reflector::store::Writer::<ConfigMap>::default();
    let store = writer.as_reader();
    let mut params = WatchParams::host("agent types");
    params.config = params
        .config
        .fields(&format!("metadata.name={AGENT_TYPES_CONFIGMAP}"));
    let roles: Api<ClusterRole> = Api::all(member);
    let namespace = published.namespace().unwrap_or_default().to_owned();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
    // Every change, a list's objects and its end included, applies the published types.
    let watch = watch_into(published, writer, params, keep, move |_| {
        let _ = tx.try_send(());
        ControlFlow::Continue(())
    });
    let apply = async move {
        while rx.recv().await.is_some() {
            let key = ObjectRef::new(AGENT_TYPES_CONFIGMAP).within(&namespace);
            let Some(cm) = store.get(&key) else { continue };
            let text = cm
                .data
                .as_ref()
                .and_then(|d| d.get(AGENT_TYPES_KEY))
                .cloned()
                .unwrap_or_default();
            if let Err(e) = sync_role(&roles, &role, &text).await {
                warn!(%role, error = %e, "updating the agent's ClusterRole failed");
            }
        }
    };
    tokio::join!(watch, apply);
}

fn keep(_: &mut ConfigMap) {}

async fn sync_role(
    roles: &Api<ClusterRole>,
    role: &str,
    published: &str,
) -> Result<(), kube::Error> {
    let current = roles.get_opt(role).await?;
    match decide(published, current.as_ref(), role) {
        RoleAction::Leave(why) => debug!(%role, %why, "the agent's ClusterRole is left as it is"),
        RoleAction::Update(rules) => {
            let pp = PatchParams {
                field_manager: Some(AGENT_FIELD_MANAGER.into()),
                ..PatchParams::default()
            };
            roles
                .patch(role, &pp, &Patch::Merge(json!({"rules": rules})))
                .await?;
            info!(%role, "the agent's ClusterRole follows the enabled types");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn role(kind: Option<&str>, rules: Vec<PolicyRule>) -> ClusterRole {
        let mut r = ClusterRole::default();
        r.metadata.name = Some("flotilla-agent".into());
        if let Some(k) = kind {
            r.metadata.annotations =
                Some(BTreeMap::from([(AGENT_ROLE_ANNOTATION.into(), k.into())]));
        }
        r.rules = Some(rules);
        r
    }

    const SECRETS: &str = r#"[{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}]"#;

    #[test]
    fn a_types_role_follows_the_published_rules_and_then_rests() {
        let current = role(Some("types"), vec![]);
        let RoleAction::Update(rules) = decide(SECRETS, Some(&current), "flotilla-agent") else {
            panic!("an update");
        };
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["secrets".to_owned()][..])
        );
        let updated = role(Some("types"), rules);
        assert_eq!(
            decide(SECRETS, Some(&updated), "flotilla-agent"),
            RoleAction::Leave("up to date".into())
        );
    }

    #[test]
    fn an_all_role_a_missing_role_and_bad_rules_are_left_alone() {
        let all = role(Some("all"), vec![]);
        assert!(matches!(
            decide(SECRETS, Some(&all), "r"),
            RoleAction::Leave(_)
        ));
        assert!(matches!(decide(SECRETS, None, "r"), RoleAction::Leave(_)));
        let types = role(Some("types"), vec![]);
        let RoleAction::Leave(why) = decide("not json", Some(&types), "r") else {
            panic!("left alone");
        };
        assert!(why.contains("not RBAC rules"), "{why}");
    }
}
