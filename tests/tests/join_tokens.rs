//! Joining where no ServiceAccount token Secret is created automatically (Kubernetes ≥ 1.24):
//! `flotilla join` creates no token Secret at all and stores a bound token from the
//! member's TokenRequest API in the host. The local clusters are v1.20, whose
//! kube-controller-manager still creates a token Secret for every ServiceAccount and cannot
//! be told not to (the 1.24 `LegacyServiceAccountTokenNoAutoGeneration` gate does not exist
//! in 1.20). So the test takes the auto-created Secrets away after joining — their tokens
//! are refused from then on, as a 1.24+ member never had them — and the federation keeps
//! working on the bound token.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::DEFAULT_NAMESPACE;
use flotilla_tests::{
    federation::{Federation, apply, federated, federated_namespace, federation},
    init_tracing, wait_for,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams},
};
use serde_json::json;

const T: Duration = Duration::from_secs(60);
const SA: &str = "member1-host";
const SA_ANNOTATION: &str = "kubernetes.io/service-account.name";
const TOKEN_TYPE: &str = "kubernetes.io/service-account-token";

fn token_of(secret: &Secret) -> Option<String> {
    let token = secret.data.as_ref()?.get("token")?;
    String::from_utf8(token.0.clone()).ok()
}

/// A client of member1 authenticating with `token`.
fn member_client(fed: &Federation, token: &str) -> anyhow::Result<Client> {
    let mut config = fed.env.members()[0].kube_config();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.to_string().into()),
        ..Default::default()
    };
    Ok(Client::try_from(config)?)
}

/// Whether the member accepts `token` (any answer but 401 Unauthorized).
async fn accepted(fed: &Federation, token: &str) -> anyhow::Result<bool> {
    let api: Api<Namespace> = Api::all(member_client(fed, token)?);
    match api.get_opt("default").await {
        Err(kube::Error::Api(s)) if s.code == 401 => Ok(false),
        _ => Ok(true),
    }
}

#[tokio::test]
async fn join_stores_a_bound_token_and_the_federation_works_without_auto_created_token_secrets()
-> anyhow::Result<()> {
    init_tracing();
    let fed = federation(1).await?;
    let member_secrets: Api<Secret> = Api::namespaced(fed.members[0].clone(), DEFAULT_NAMESPACE);
    ensure!(
        member_secrets
            .get_opt(&format!("{SA}-token"))
            .await?
            .is_none(),
        "join created a token Secret"
    );
    let host_secrets: Api<Secret> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    let stored = token_of(&host_secrets.get("member1-token").await?).context("host token")?;

    // What v1.20 created on its own for the ServiceAccount: taken away.
    let mut auto_tokens = Vec::new();
    for s in member_secrets.list(&ListParams::default()).await? {
        let for_sa = s.annotations().get(SA_ANNOTATION).map(String::as_str) == Some(SA);
        if for_sa && s.type_.as_deref() == Some(TOKEN_TYPE) {
            auto_tokens.extend(token_of(&s));
            member_secrets
                .delete(&s.name_any(), &DeleteParams::default())
                .await?;
        }
    }
    eprintln!(
        "auto-created token Secrets of {SA} deleted: {}",
        auto_tokens.len()
    );
    for token in &auto_tokens {
        wait_for(T, "a deleted Secret's token refused", || async {
            ensure!(!accepted(&fed, token).await?, "still accepted");
            Ok(())
        })
        .await?;
    }
    ensure!(
        accepted(&fed, &stored).await?,
        "the joined token is refused"
    );
    ensure!(
        !auto_tokens.contains(&stored),
        "the host holds an auto-created, non-expiring token"
    );

    // The federation works on the joined token alone.
    federated_namespace(&fed, "tokens").await?;
    let obj = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
        "metadata": {"name": "after-cleanup", "namespace": "tokens"},
        "spec": {"template": {"data": {"k": "v"}}, "placement": {"clusterSelector": {}}}
    });
    apply(
        &fed.host,
        &federated("ConfigMap", "configmaps"),
        Some("tokens"),
        &obj,
    )
    .await?;
    let cms: Api<ConfigMap> = Api::namespaced(fed.members[0].clone(), "tokens");
    wait_for(T, "the object propagated to member1", || async {
        cms.get("after-cleanup").await?;
        Ok(())
    })
    .await?;
    Ok(())
}
