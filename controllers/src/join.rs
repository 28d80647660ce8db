//! Joining a member cluster the way `kubefedctl join` does, and unjoining it.
//!
//! In the member: the control-plane namespace, a ServiceAccount `<cluster>-<host>`, a
//! `kubernetes.io/service-account-token` Secret for it (required on Kubernetes ≥ 1.24,
//! where token Secrets are no longer created automatically), and a ClusterRole +
//! ClusterRoleBinding with what the controller needs there: read/write of the enabled
//! types only, `/healthz`, `/version`, and updates of that one role (the control plane
//! widens or narrows it as types are enabled or disabled); and the Multi-Cluster Services
//! CRDs when the member has none. In the host: a Secret with the token and the
//! KubeFedCluster. Every object is written with server-side apply, so joining again is safe.

use std::{collections::BTreeMap, time::Duration};

use base64::Engine;
use flotilla_api::{
    FederatedTypeConfig, KubeFedCluster, KubeFedClusterSpec, MEMBER_ROLE_ANNOTATION,
    core::LocalSecretReference,
};
use k8s_openapi::{
    api::{
        core::v1::{Namespace, Secret, ServiceAccount},
        rbac::v1::{ClusterRole, ClusterRoleBinding},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::json;
use tracing::{info, warn};

use crate::{install, member_rbac};

/// Joining or unjoining failed.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// A request to one of the clusters failed.
    #[error("{action} in the {side} cluster failed: {source}")]
    Api {
        /// What was being done.
        action: String,
        /// `host` or `member`.
        side: &'static str,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// The cluster is already joined and `error_on_existing` was set.
    #[error("cluster {0} is already joined (KubeFedCluster exists)")]
    AlreadyJoined(String),
    /// A Pull cluster's name does not make a valid namespace `flotilla-cluster-<name>`.
    #[error(
        "cluster name {0:?} cannot be a Pull cluster: flotilla-cluster-<name> must be a DNS label (lowercase letters, digits, '-'; at most 63 characters)"
    )]
    InvalidPullName(String),
    /// The member never filled in the service account token.
    #[error(
        "the member did not issue a token for service account {0} within {1:?}; is its kube-controller-manager running?"
    )]
    NoToken(String, Duration),
}

/// What to join.
#[derive(Clone, Debug)]
pub struct JoinOptions {
    /// Name of the KubeFedCluster.
    pub cluster_name: String,
    /// Name of the host cluster (used in the service account name).
    pub host_name: String,
    /// Control-plane namespace, in the host and the member.
    pub namespace: String,
    /// The member's API endpoint as the controller will reach it.
    pub api_endpoint: String,
    /// PEM CA bundle for the member's serving certificate; `None` takes the CA the member
    /// puts into the service account Secret (`ca.crt`).
    pub ca_pem: Option<String>,
    /// Labels of the KubeFedCluster (placement selectors match them).
    pub labels: BTreeMap<String, String>,
    /// Name of the host Secret holding the member token; `None` for `<cluster>-token`.
    pub secret_name: Option<String>,
    /// Fail when the cluster is already joined.
    pub error_on_existing: bool,
    /// How long to wait for the member to issue the token.
    pub token_timeout: Duration,
    /// A bearer token the member already accepts (say, a local test cluster's static admin
    /// token), stored in the host instead of a ServiceAccount token: no ServiceAccount,
    /// binding or token Secret is made in the member, so a member without a
    /// kube-controller-manager (no token controller) can join. A secret: never logged.
    pub token: Option<String>,
}

impl JoinOptions {
    /// Options with kubefed's defaults for the rest.
    pub fn new(cluster_name: &str, api_endpoint: &str) -> Self {
        JoinOptions {
            cluster_name: cluster_name.into(),
            host_name: "host".into(),
            namespace: flotilla_api::DEFAULT_NAMESPACE.into(),
            api_endpoint: api_endpoint.into(),
            ca_pem: None,
            labels: BTreeMap::new(),
            secret_name: None,
            error_on_existing: false,
            token_timeout: Duration::from_secs(60),
            token: None,
        }
    }

    /// The service account the member creates for the control plane.
    pub fn service_account(&self) -> String {
        format!("{}-{}", self.cluster_name, self.host_name)
    }

    /// The host Secret holding the member token.
    pub fn host_secret(&self) -> String {
        self.secret_name
            .clone()
            .unwrap_or_else(|| format!("{}-token", self.cluster_name))
    }

    fn role_name(&self) -> String {
        format!("kubefed-controller-manager:{}", self.service_account())
    }
}

fn api_err(action: impl Into<String>, side: &'static str) -> impl FnOnce(kube::Error) -> JoinError {
    let action = action.into();
    move |source| JoinError::Api {
        action,
        side,
        source,
    }
}

fn apply_params() -> PatchParams {
    PatchParams::apply(flotilla_api::FIELD_MANAGER).force()
}

/// The member ClusterRole: the target types of the host's enabled FederatedTypeConfigs
/// (none yet when no type is enabled), health endpoints, and updates of itself — the
/// control plane keeps it in step as types are enabled (see [`crate::member_rbac`]).
async fn create_member_role(
    host: &Client,
    member: &Client,
    ns: &str,
    role: &str,
) -> Result<(), JoinError> {
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(host.clone(), ns);
    let enabled = match ftcs.list(&Default::default()).await {
        Ok(list) => member_rbac::rules::enabled_types(&list.items),
        // No FederatedTypeConfig CRD yet: nothing is enabled.
        Err(kube::Error::Api(s)) if s.code == 404 => Default::default(),
        Err(e) => return Err(api_err("listing FederatedTypeConfigs", "host")(e)),
    };
    let roles: Api<ClusterRole> = Api::all(member.clone());
    let body = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": role},
        "rules": member_rbac::rules::member_rules(&enabled, role),
    });
    apply_object(&roles, role, &body, "cluster role", "member").await?;
    Ok(())
}

/// Applies one object (server-side apply, Flotilla's field manager), naming it in errors.
async fn apply_object<K>(
    api: &Api<K>,
    name: &str,
    body: &serde_json::Value,
    what: &str,
    side: &'static str,
) -> Result<K, JoinError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &apply_params(), &Patch::Apply(body))
        .await
        .map_err(api_err(format!("writing {what} {name}"), side))
}

/// Joins a member cluster: returns the KubeFedCluster written to the host.
pub async fn join(
    host: &Client,
    member: &Client,
    opts: &JoinOptions,
) -> Result<KubeFedCluster, JoinError> {
    let ns = &opts.namespace;
    let kfc_api: Api<KubeFedCluster> = Api::namespaced(host.clone(), ns);
    if opts.error_on_existing
        && kfc_api
            .get_opt(&opts.cluster_name)
            .await
            .map_err(api_err("reading the KubeFedCluster", "host"))?
            .is_some()
    {
        return Err(JoinError::AlreadyJoined(opts.cluster_name.clone()));
    }
    for (client, side) in [(member, "member"), (host, "host")] {
        let nss: Api<Namespace> = Api::all(client.clone());
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        apply_object(&nss, ns, &body, "namespace", side).await?;
    }
    ensure_mcs_crds(member, &opts.cluster_name).await;
    let (token, member_ca) = member_identity(host, member, opts).await?;
    let secret_name = store_token(host, opts, token).await?;
    let ca = opts.ca_pem.clone().or(member_ca);
    let spec = KubeFedClusterSpec {
        api_endpoint: opts.api_endpoint.clone(),
        ca_bundle: ca.map(|pem| base64::engine::general_purpose::STANDARD.encode(pem)),
        secret_ref: LocalSecretReference { name: secret_name },
        disabled_tls_validations: Vec::new(),
        proxy_url: None,
        taints: Vec::new(),
        mode: None,
    };
    let body = json!({
        "apiVersion": format!("{}/{}", flotilla_api::CORE_GROUP, flotilla_api::V1BETA1),
        "kind": "KubeFedCluster",
        "metadata": {
            "name": opts.cluster_name, "namespace": ns, "labels": opts.labels,
            "annotations": {MEMBER_ROLE_ANNOTATION: opts.role_name()},
        },
        "spec": spec,
    });
    let kfc = apply_object(
        &kfc_api,
        &opts.cluster_name,
        &body,
        "KubeFedCluster",
        "host",
    )
    .await?;
    // Best effort: an id is a convenience for About API consumers, never a reason to fail.
    if let Err(e) = crate::cluster_id::ensure_cluster_id(member).await {
        warn!(cluster = %opts.cluster_name, error = %e, "declaring the member's cluster id failed");
    }
    info!(cluster = %opts.cluster_name, endpoint = %opts.api_endpoint, "cluster joined");
    Ok(kfc)
}

/// How long each Multi-Cluster Services CRD may take to become Established in a member.
const MCS_CRD_TIMEOUT: Duration = Duration::from_secs(30);

/// Installs the Multi-Cluster Services CRDs into the member when it has none; a member that
/// already has them (say, from another MCS implementation) keeps its own. A failure only
/// warns: the member still joins, and its ServiceExports are not seen until the CRDs are
/// installed (`kubectl apply -f config/crds/multicluster.x-k8s.io_service*.yaml`).
async fn ensure_mcs_crds(member: &Client, cluster: &str) {
    let api: Api<CustomResourceDefinition> = Api::all(member.clone());
    let mut missing = Vec::new();
    for crd in flotilla_api::crdgen::mcs_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api.get_opt(&name).await {
            Ok(Some(_)) => {}
            Ok(None) => missing.push(crd),
            Err(e) => {
                warn!(%cluster, crd = %name, error = %e, "cannot check the Multi-Cluster Services CRD");
                return;
            }
        }
    }
    if missing.is_empty() {
        return;
    }
    let installed = install::install_crds(
        member,
        &missing,
        flotilla_api::FIELD_MANAGER,
        MCS_CRD_TIMEOUT,
    )
    .await;
    match installed {
        Ok(()) => info!(%cluster, crds = missing.len(), "Multi-Cluster Services CRDs installed"),
        Err(e) => warn!(%cluster, error = %e, "installing the Multi-Cluster Services CRDs failed"),
    }
}

/// In the member: the control plane's ServiceAccount, its scoped ClusterRole and binding,
/// and a token Secret; returns the token and the CA the member put beside it. With
/// [`JoinOptions::token`], only the ClusterRole (kept in step by [`crate::member_rbac`])
/// and that token.
async fn member_identity(
    host: &Client,
    member: &Client,
    opts: &JoinOptions,
) -> Result<(String, Option<String>), JoinError> {
    let ns = &opts.namespace;
    let sa = opts.service_account();
    let role = opts.role_name();
    create_member_role(host, member, ns, &role).await?;
    if let Some(token) = &opts.token {
        // Credentials the member already accepts: nothing to issue.
        return Ok((token.clone(), None));
    }
    let sas: Api<ServiceAccount> = Api::namespaced(member.clone(), ns);
    let body = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}});
    apply_object(&sas, &sa, &body, "service account", "member").await?;
    let bindings: Api<ClusterRoleBinding> = Api::all(member.clone());
    let body = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
    });
    apply_object(&bindings, &role, &body, "cluster role binding", "member").await?;
    // Token Secrets are no longer created automatically from Kubernetes 1.24 on; one
    // created explicitly is still filled in by the member's token controller.
    let member_secrets: Api<Secret> = Api::namespaced(member.clone(), ns);
    let token_secret = format!("{sa}-token");
    let body = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": token_secret, "annotations": {"kubernetes.io/service-account.name": sa}}
    });
    apply_object(
        &member_secrets,
        &token_secret,
        &body,
        "token secret",
        "member",
    )
    .await?;
    wait_for_token(&member_secrets, &token_secret, opts.token_timeout)
        .await?
        .ok_or_else(|| JoinError::NoToken(sa.clone(), opts.token_timeout))
}

/// In the host: the Secret holding the member token; returns its name.
async fn store_token(
    host: &Client,
    opts: &JoinOptions,
    token: String,
) -> Result<String, JoinError> {
    let host_secrets: Api<Secret> = Api::namespaced(host.clone(), &opts.namespace);
    let secret_name = opts.host_secret();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_name.clone()),
            namespace: Some(opts.namespace.clone()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([("token".to_string(), token)])),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    let mut body = serde_json::to_value(&secret).map_err(|e| JoinError::Api {
        action: "encoding the token secret".into(),
        side: "host",
        source: kube::Error::SerdeError(e),
    })?;
    body["apiVersion"] = json!("v1");
    body["kind"] = json!("Secret");
    apply_object(&host_secrets, &secret_name, &body, "secret", "host").await?;
    Ok(secret_name)
}

async fn wait_for_token(
    secrets: &Api<Secret>,
    name: &str,
    timeout: Duration,
) -> Result<Option<(String, Option<String>)>, JoinError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let secret = secrets
            .get_opt(name)
            .await
            .map_err(api_err(format!("reading token secret {name}"), "member"))?;
        if let Some(data) = secret.and_then(|s| s.data)
            && let Some(token) = data
                .get("token")
                .and_then(|t| String::from_utf8(t.0.clone()).ok())
        {
            let ca = data
                .get("ca.crt")
                .and_then(|c| String::from_utf8(c.0.clone()).ok());
            return Ok(Some((token, ca)));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Removes what [`join`] created. `member` is `None` when the member cannot be reached
/// (`unjoin --force`): then only the host side is removed.
pub async fn unjoin(
    host: &Client,
    member: Option<&Client>,
    opts: &JoinOptions,
) -> Result<(), JoinError> {
    let ns = &opts.namespace;
    let dp = DeleteParams::default();
    let ignore_missing = |r: Result<(), kube::Error>| match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    };
    let kfc_api: Api<KubeFedCluster> = Api::namespaced(host.clone(), ns);
    ignore_missing(kfc_api.delete(&opts.cluster_name, &dp).await.map(|_| ())).map_err(api_err(
        format!("deleting KubeFedCluster {}", opts.cluster_name),
        "host",
    ))?;
    let host_secrets: Api<Secret> = Api::namespaced(host.clone(), ns);
    ignore_missing(
        host_secrets
            .delete(&opts.host_secret(), &dp)
            .await
            .map(|_| ()),
    )
    .map_err(api_err(
        format!("deleting secret {}", opts.host_secret()),
        "host",
    ))?;
    if let Some(member) = member {
        let sa = opts.service_account();
        let role = opts.role_name();
        let bindings: Api<ClusterRoleBinding> = Api::all(member.clone());
        ignore_missing(bindings.delete(&role, &dp).await.map(|_| ())).map_err(api_err(
            format!("deleting cluster role binding {role}"),
            "member",
        ))?;
        let roles: Api<ClusterRole> = Api::all(member.clone());
        ignore_missing(roles.delete(&role, &dp).await.map(|_| ()))
            .map_err(api_err(format!("deleting cluster role {role}"), "member"))?;
        let member_secrets: Api<Secret> = Api::namespaced(member.clone(), ns);
        ignore_missing(
            member_secrets
                .delete(&format!("{sa}-token"), &dp)
                .await
                .map(|_| ()),
        )
        .map_err(api_err("deleting the token secret", "member"))?;
        let sas: Api<ServiceAccount> = Api::namespaced(member.clone(), ns);
        ignore_missing(sas.delete(&sa, &dp).await.map(|_| ()))
            .map_err(api_err(format!("deleting service account {sa}"), "member"))?;
    }
    info!(cluster = %opts.cluster_name, "cluster unjoined");
    Ok(())
}
