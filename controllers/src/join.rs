//! Joining a member cluster the way `kubefedctl join` does, and unjoining it.
//!
//! In the member: the control-plane namespace, a ServiceAccount `<cluster>-<host>`, a
//! ClusterRole + ClusterRoleBinding with what the controller needs there: read/write of
//! the enabled types only, `/healthz`, `/version`, and updates of that one role (the
//! control plane widens or narrows it as types are enabled or disabled), a Role letting it
//! request tokens of its own ServiceAccount only ([`crate::member_token`]); and the
//! Multi-Cluster Services CRDs when the member has none. In the host: a Secret with a
//! bound token of that ServiceAccount (TokenRequest, [`JoinOptions::token_lifetime`]),
//! which the control plane renews before it expires, and the KubeFedCluster. No
//! non-expiring token is made. Every object is written with server-side apply, so joining
//! again is safe; [`rotate_credentials`] moves a cluster joined with a long-lived token to
//! rotation without touching anything else.

use std::{collections::BTreeMap, time::Duration};

use base64::Engine;
use flotilla_api::{
    FederatedTypeConfig, KubeFedCluster, KubeFedClusterSpec, MEMBER_ROLE_ANNOTATION,
    core::LocalSecretReference,
};
use k8s_openapi::{
    api::{
        core::v1::{Namespace, Secret, ServiceAccount},
        rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
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

use crate::{install, member_rbac, member_token};
use flotilla_core::credential::Rotation;

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
    /// The member never filled in the service account token (a Pull cluster's agent token).
    #[error(
        "the member did not issue a token for service account {0} within {1:?}; is its kube-controller-manager running?"
    )]
    NoToken(String, Duration),
    /// The requested token lifetime is shorter than the TokenRequest API grants.
    #[error(
        "a token lifetime of {0:?} is too short: the TokenRequest API grants 10 minutes or more"
    )]
    LifetimeTooShort(Duration),
    /// The cluster to migrate is not a joined push cluster.
    #[error("cluster {0} is not joined as a push cluster (no KubeFedCluster with a token Secret)")]
    NotJoined(String),
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
    /// Lifetime of each member token; the control plane renews it two thirds in.
    pub token_lifetime: Duration,
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
            token_lifetime: flotilla_core::credential::DEFAULT_LIFETIME,
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
        // Tokens of imported ServiceAccounts are granted by the control plane as imports
        // name them.
        "rules": member_rbac::rules::member_rules(&enabled, role, &Default::default()),
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
    let secret_name = match token {
        Credential::Static(token) => store_token(host, opts, token).await?,
        Credential::Bound(token, rotation) => {
            let name = opts.host_secret();
            member_token::store(host, ns, &name, &token, &rotation)
                .await
                .map_err(api_err(format!("writing secret {name}"), "host"))?;
            name
        }
    };
    let ca = opts.ca_pem.clone().or(member_ca);
    let spec = KubeFedClusterSpec {
        api_endpoint: opts.api_endpoint.clone(),
        ca_bundle: ca.map(|pem| base64::engine::general_purpose::STANDARD.encode(pem)),
        secret_ref: LocalSecretReference { name: secret_name },
        disabled_tls_validations: Vec::new(),
        proxy_url: None,
        taints: Vec::new(),
        mode: None,
        exec: None,
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

/// The credential the host gets: a token the member already accepts, or a bound token of
/// the control plane's ServiceAccount with its rotation.
enum Credential {
    Static(String),
    Bound(member_token::Token, Rotation),
}

/// In the member: the control plane's ServiceAccount, its scoped ClusterRole and binding,
/// the Role to renew its own token, and a bound token; returns it with the member's CA.
/// With [`JoinOptions::token`], only the ClusterRole (kept in step by
/// [`crate::member_rbac`]) and that token.
async fn member_identity(
    host: &Client,
    member: &Client,
    opts: &JoinOptions,
) -> Result<(Credential, Option<String>), JoinError> {
    let ns = &opts.namespace;
    let sa = opts.service_account();
    let role = opts.role_name();
    if opts.token.is_none() && opts.token_lifetime < flotilla_core::credential::MIN_LIFETIME {
        return Err(JoinError::LifetimeTooShort(opts.token_lifetime));
    }
    create_member_role(host, member, ns, &role).await?;
    if let Some(token) = &opts.token {
        // Credentials the member already accepts: nothing to issue.
        return Ok((Credential::Static(token.clone()), None));
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
    let (token, rotation) = bound_token(member, opts).await?;
    let ca = member_token::member_ca(member, ns)
        .await
        .map_err(api_err("reading the member's root CA", "member"))?;
    Ok((Credential::Bound(token, rotation), ca))
}

/// The renewal Role, then a bound token of the control plane's ServiceAccount.
async fn bound_token(
    member: &Client,
    opts: &JoinOptions,
) -> Result<(member_token::Token, Rotation), JoinError> {
    let (ns, sa) = (&opts.namespace, opts.service_account());
    member_token::ensure_renewal_role(member, ns, &sa)
        .await
        .map_err(api_err(
            format!("writing the token renewal role of {sa}"),
            "member",
        ))?;
    member_token::request(member, ns, &sa, opts.token_lifetime)
        .await
        .map_err(api_err(
            format!("requesting a token of service account {sa}"),
            "member",
        ))
}

/// What [`rotate_credentials`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotated {
    /// The host Secret now holding a bound token.
    pub secret: String,
    /// When that token expires.
    pub expires_at: k8s_openapi::jiff::Timestamp,
    /// Whether the long-lived token Secret `flotilla join` used to create was deleted
    /// (its token is refused from then on).
    pub legacy_secret_deleted: bool,
}

/// Moves a push cluster joined with a long-lived token to a bound, rotating one: in the
/// member the ServiceAccount and the renewal Role (nothing else), in the host the token
/// Secret the KubeFedCluster names; then the long-lived token Secret `<sa>-token` of an
/// earlier `flotilla join` is deleted, which revokes its token. No propagated object and
/// no other member object is written.
pub async fn rotate_credentials(
    host: &Client,
    member: &Client,
    opts: &JoinOptions,
) -> Result<Rotated, JoinError> {
    let ns = &opts.namespace;
    if opts.token_lifetime < flotilla_core::credential::MIN_LIFETIME {
        return Err(JoinError::LifetimeTooShort(opts.token_lifetime));
    }
    let kfcs: Api<KubeFedCluster> = Api::namespaced(host.clone(), ns);
    let kfc = kfcs
        .get_opt(&opts.cluster_name)
        .await
        .map_err(api_err("reading the KubeFedCluster", "host"))?
        .filter(|k| !k.spec.is_pull())
        .ok_or_else(|| JoinError::NotJoined(opts.cluster_name.clone()))?;
    let sa = opts.service_account();
    let sas: Api<ServiceAccount> = Api::namespaced(member.clone(), ns);
    let body = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}});
    apply_object(&sas, &sa, &body, "service account", "member").await?;
    let (token, rotation) = bound_token(member, opts).await?;
    let secret = kfc.spec.secret_ref.name.clone();
    member_token::store(host, ns, &secret, &token, &rotation)
        .await
        .map_err(api_err(format!("writing secret {secret}"), "host"))?;
    let legacy: Api<Secret> = Api::namespaced(member.clone(), ns);
    let legacy_name = format!("{sa}-token");
    let legacy_secret_deleted = match legacy.get_opt(&legacy_name).await {
        Ok(Some(s)) if is_token_secret_of(&s, &sa) => {
            legacy
                .delete(&legacy_name, &DeleteParams::default())
                .await
                .map_err(api_err(format!("deleting secret {legacy_name}"), "member"))?;
            true
        }
        Ok(_) => false,
        Err(e) => {
            return Err(api_err(format!("reading secret {legacy_name}"), "member")(
                e,
            ));
        }
    };
    info!(cluster = %opts.cluster_name, expires_at = %rotation.expires_at, "member credential moved to rotation");
    Ok(Rotated {
        secret,
        expires_at: rotation.expires_at,
        legacy_secret_deleted,
    })
}

/// Whether `secret` is a `kubernetes.io/service-account-token` Secret of `sa`.
fn is_token_secret_of(secret: &Secret, sa: &str) -> bool {
    use kube::ResourceExt as _;
    secret.type_.as_deref() == Some("kubernetes.io/service-account-token")
        && secret
            .annotations()
            .get("kubernetes.io/service-account.name")
            .is_some_and(|n| n == sa)
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
        let renewal = member_token::renewal_role(&sa);
        let role_bindings: Api<RoleBinding> = Api::namespaced(member.clone(), ns);
        ignore_missing(role_bindings.delete(&renewal, &dp).await.map(|_| ())).map_err(api_err(
            format!("deleting role binding {renewal}"),
            "member",
        ))?;
        let renewal_roles: Api<Role> = Api::namespaced(member.clone(), ns);
        ignore_missing(renewal_roles.delete(&renewal, &dp).await.map(|_| ()))
            .map_err(api_err(format!("deleting role {renewal}"), "member"))?;
        // The long-lived token Secret of a cluster joined before rotation.
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
