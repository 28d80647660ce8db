//! The host's credential for a member may touch only what Flotilla propagates: Secrets are
//! forbidden to it while Secrets are not federated and allowed once they are enabled — on
//! a member joined before the change — and it never could read what no type config names.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::{DEFAULT_NAMESPACE, FederatedTypeConfig};
use flotilla_tests::{
    federation::{Federation, federation},
    init_tracing, wait_for,
};
use k8s_openapi::api::{
    core::v1::{Event, PersistentVolume, Secret},
    rbac::v1::ClusterRole,
};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

const T: Duration = Duration::from_secs(60);

/// A client of member `index` (0-based) with the token `flotilla join` stored in the host.
async fn member_credential(fed: &Federation, index: usize) -> anyhow::Result<Client> {
    let secrets: Api<Secret> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    let token = secrets
        .get(&format!("member{}-token", index + 1))
        .await?
        .data
        .and_then(|d| d.get("token").cloned())
        .context("no token in the host secret")?;
    let member = &fed.env.members()[index];
    let mut config = member.kube_config();
    config.auth_info = kube::config::AuthInfo {
        token: Some(String::from_utf8(token.0)?.into()),
        ..Default::default()
    };
    Ok(Client::try_from(config)?)
}

async fn can_list_secrets(client: &Client) -> anyhow::Result<bool> {
    let api: Api<Secret> = Api::all(client.clone());
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

async fn set_secrets_propagation(fed: &Federation, mode: &str) -> anyhow::Result<()> {
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    ftcs.patch(
        "secrets",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"propagation": mode}})),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn the_member_credential_follows_the_enabled_types_and_nothing_more() -> anyhow::Result<()> {
    init_tracing();
    let fed = federation(2).await?;
    let member = member_credential(&fed, 0).await?;
    // Every default type is enabled, Secrets included.
    wait_for(T, "secrets allowed while federated", || async {
        ensure!(can_list_secrets(&member).await?, "forbidden");
        Ok(())
    })
    .await?;
    let pvs: Api<PersistentVolume> = Api::all(member.clone());
    let denied =
        matches!(pvs.list(&ListParams::default()).await, Err(kube::Error::Api(s)) if s.code == 403);
    ensure!(denied, "a type no config names must be forbidden");

    set_secrets_propagation(&fed, "Disabled").await?;
    wait_for(T, "secrets forbidden once not federated", || async {
        ensure!(!can_list_secrets(&member).await?, "still allowed");
        Ok(())
    })
    .await?;

    set_secrets_propagation(&fed, "Enabled").await?;
    wait_for(T, "secrets allowed again once enabled", || async {
        ensure!(can_list_secrets(&member).await?, "still forbidden");
        Ok(())
    })
    .await?;
    a_role_the_credential_cannot_update_is_reported_and_the_other_member_keeps_working(&fed).await
}

/// An administrator strips member1's role of its self-management rule: the next change of
/// the enabled types cannot reach it. A Warning names the failure on its KubeFedCluster,
/// and member2's role still follows.
async fn a_role_the_credential_cannot_update_is_reported_and_the_other_member_keeps_working(
    fed: &Federation,
) -> anyhow::Result<()> {
    let roles: Api<ClusterRole> = Api::all(fed.members[0].clone());
    let role = "kubefed-controller-manager:member1-host";
    roles
        .patch(
            role,
            &PatchParams::default(),
            &Patch::Merge(json!({"rules": [{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]})),
        )
        .await?;
    set_secrets_propagation(fed, "Disabled").await?;
    let other = member_credential(fed, 1).await?;
    wait_for(
        T,
        "member2's role still follows the enabled types",
        || async {
            ensure!(!can_list_secrets(&other).await?, "member2 still allowed");
            Ok(())
        },
    )
    .await?;
    let events: Api<Event> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    wait_for(T, "a MemberRoleUpdateFailed Warning on member1", || async {
        let found = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .any(|e| {
                e.reason.as_deref() == Some("MemberRoleUpdateFailed")
                    && e.involved_object.name.as_deref() == Some("member1")
            });
        ensure!(found, "no such Event yet");
        Ok(())
    })
    .await
}
