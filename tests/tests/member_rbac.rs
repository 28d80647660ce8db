//! The host's credential for a member may touch only what Flotilla propagates: Secrets are
//! forbidden to it while Secrets are not federated and allowed once they are enabled — on
//! a member joined before the change — and it never could read what no type config names.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_crds::{DEFAULT_NAMESPACE, FederatedTypeConfig};
use flotilla_tests::{
    federation::{Federation, federation},
    init_tracing, wait_for,
};
use k8s_openapi::api::core::v1::{PersistentVolume, Secret};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

const T: Duration = Duration::from_secs(60);

/// A client of member1 with the token `flotilla join` stored in the host.
async fn member_credential(fed: &Federation) -> anyhow::Result<Client> {
    let secrets: Api<Secret> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    let token = secrets
        .get("member1-token")
        .await?
        .data
        .and_then(|d| d.get("token").cloned())
        .context("no token in the host secret")?;
    let member = &fed.env.members()[0];
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
    let member = member_credential(&fed).await?;
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
    Ok(())
}
