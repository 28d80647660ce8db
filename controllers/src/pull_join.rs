//! Registering a Pull cluster (`flotilla join --mode pull`): everything happens in the host
//! — the cluster's namespace `flotilla-cluster-<name>`, the agent's ServiceAccount there
//! with a Role that reads only that namespace's Works, writes their status, renews its
//! own Lease and requests tokens of itself only, a bound token for it (TokenRequest, which
//! the agent renews: `flotilla_agent::host_credential`), and the KubeFedCluster with
//! `mode: Pull` (no endpoint, CA or token of the member). What comes back is the agent's kubeconfig for the host and the
//! manifests to apply in the member ([`agent_manifests`]); no credential of the member is
//! ever read or stored.

use std::{collections::BTreeMap, time::Duration};

use base64::Engine;
use flotilla_api::{
    KubeFedCluster,
    work::{AGENT_LEASE, cluster_namespace},
};
use flotilla_core::agent_role::{
    AGENT_ROLE, AGENT_ROLE_ANNOTATION, agent_all_rules, agent_member_rules,
};
use k8s_openapi::api::{
    core::v1::{Namespace, ServiceAccount},
    rbac::v1::{PolicyRule, Role, RoleBinding},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};
use tracing::info;

use crate::join::JoinError;

/// Name of the agent's ServiceAccount (and Role, RoleBinding) in the cluster's namespace.
pub const AGENT_ACCOUNT: &str = "flotilla-agent";
/// Key of the member Secret holding the agent's kubeconfig for the host.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Name of that member Secret.
pub const KUBECONFIG_SECRET: &str = "flotilla-agent-host";

/// What to register.
#[derive(Clone, Debug)]
pub struct PullJoinOptions {
    /// Name of the KubeFedCluster.
    pub cluster_name: String,
    /// Control-plane namespace of the host.
    pub namespace: String,
    /// The host API server's address as the agent reaches it.
    pub host_server: String,
    /// PEM CA bundle of the host's serving certificate (`None`: the one the host puts
    /// beside the token).
    pub host_ca_pem: Option<String>,
    /// Labels of the KubeFedCluster.
    pub labels: BTreeMap<String, String>,
    /// How long to wait for the host's CA to be published in the cluster's namespace (when
    /// `host_ca_pem` is `None`).
    pub token_timeout: Duration,
    /// Lifetime of the agent's bound host token (the agent renews it two thirds in).
    pub token_lifetime: Duration,
}

impl PullJoinOptions {
    /// Options with defaults for the rest.
    pub fn new(cluster_name: &str, host_server: &str) -> Self {
        PullJoinOptions {
            cluster_name: cluster_name.into(),
            namespace: flotilla_api::DEFAULT_NAMESPACE.into(),
            host_server: host_server.into(),
            host_ca_pem: None,
            labels: BTreeMap::new(),
            token_timeout: Duration::from_secs(60),
            token_lifetime: flotilla_core::credential::DEFAULT_LIFETIME,
        }
    }
}

/// A registered Pull cluster.
pub struct PullJoin {
    /// The KubeFedCluster written to the host.
    pub cluster: KubeFedCluster,
    /// The agent's kubeconfig for the host (holds its scoped token: handle as a secret).
    pub kubeconfig: String,
    /// The agent's bearer token (the same as in `kubeconfig`).
    pub token: String,
    /// The host CA the kubeconfig trusts.
    pub host_ca_pem: Option<String>,
    /// The rules of the types enabled at the join (also published to the agent, see
    /// [`crate::pull_rbac`]).
    pub type_rules: Vec<PolicyRule>,
}

/// The agent's member ClusterRole, as `join --mode pull --member-role` chose it.
#[derive(Clone, Debug, PartialEq)]
pub enum MemberRole {
    /// The enabled types' rules (kept in step by the agent), and the agent's own.
    Types(Vec<PolicyRule>),
    /// Every resource (never narrowed), and the agent's own rules.
    All,
}

impl MemberRole {
    /// The ClusterRole object.
    pub fn cluster_role(&self) -> Value {
        let (rules, kind) = match self {
            MemberRole::Types(types) => (agent_member_rules(types, AGENT_ROLE), "types"),
            MemberRole::All => (agent_all_rules(AGENT_ROLE), "all"),
        };
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": AGENT_ROLE, "annotations": {AGENT_ROLE_ANNOTATION: kind}},
               "rules": rules})
    }
}

fn err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> JoinError {
    let action = action.into();
    move |source| JoinError::Api {
        action,
        side: "host",
        source,
    }
}

async fn apply<K>(api: &Api<K>, name: &str, body: &Value) -> Result<K, JoinError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let pp = PatchParams::apply(flotilla_api::FIELD_MANAGER).force();
    api.patch(name, &pp, &Patch::Apply(body))
        .await
        .map_err(err(format!("writing {name}")))
}

/// The agent's Role in its cluster's namespace: its Works (read) and their status, its
/// own Lease, Events about its Works (a manifest the member refused), the ConfigMaps
/// there (the enabled types' rules, [`crate::pull_rbac`]), and its ServiceExportReports
/// (its member's exports, read by the MCS controller; their status is not its to write). `create` cannot be limited to
/// one name, so it is granted on Leases and Events in this namespace only.
pub fn agent_role_rules() -> Value {
    json!([
        {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["works"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["works/status"], "verbs": ["get", "patch", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [AGENT_LEASE], "verbs": ["get", "patch", "update"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["multicluster.flotilla.io"], "resources": ["serviceexportreports"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "resourceNames": [AGENT_ACCOUNT], "verbs": ["create"]},
    ])
}

/// Registers a Pull cluster in the host.
pub async fn join_pull(host: &Client, opts: &PullJoinOptions) -> Result<PullJoin, JoinError> {
    let ns = cluster_namespace(&opts.cluster_name);
    if !is_dns_label(&ns) {
        return Err(JoinError::InvalidPullName(opts.cluster_name.clone()));
    }
    let nss: Api<Namespace> = Api::all(host.clone());
    for n in [&opts.namespace, &ns] {
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}});
        apply(&nss, n, &body).await?;
    }
    let sas: Api<ServiceAccount> = Api::namespaced(host.clone(), &ns);
    let body =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": AGENT_ACCOUNT}});
    apply(&sas, AGENT_ACCOUNT, &body).await?;
    let roles: Api<Role> = Api::namespaced(host.clone(), &ns);
    let body = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": AGENT_ACCOUNT}, "rules": agent_role_rules(),
    });
    apply(&roles, AGENT_ACCOUNT, &body).await?;
    let bindings: Api<RoleBinding> = Api::namespaced(host.clone(), &ns);
    let body = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": AGENT_ACCOUNT},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AGENT_ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": AGENT_ACCOUNT, "namespace": ns}],
    });
    apply(&bindings, AGENT_ACCOUNT, &body).await?;
    let type_rules = crate::pull_rbac::enabled_type_rules(host, &opts.namespace)
        .await
        .map_err(err("reading the enabled types"))?;
    crate::pull_rbac::publish(host, &opts.cluster_name, &type_rules)
        .await
        .map_err(err("publishing the enabled types"))?;
    if opts.token_lifetime < flotilla_core::credential::MIN_LIFETIME {
        return Err(JoinError::LifetimeTooShort(opts.token_lifetime));
    }
    let (token, _) = crate::member_token::request(host, &ns, AGENT_ACCOUNT, opts.token_lifetime)
        .await
        .map_err(err(format!("requesting a token of {ns}/{AGENT_ACCOUNT}")))?;
    let token = token.expose().to_owned();
    let ca = match &opts.host_ca_pem {
        Some(_) => None,
        None => host_ca(host, &ns, opts.token_timeout).await?,
    };
    let kfcs: Api<KubeFedCluster> = Api::namespaced(host.clone(), &opts.namespace);
    let body = json!({
        "apiVersion": format!("{}/{}", flotilla_api::CORE_GROUP, flotilla_api::V1BETA1),
        "kind": "KubeFedCluster",
        "metadata": {"name": opts.cluster_name, "namespace": opts.namespace, "labels": opts.labels},
        "spec": {"mode": "Pull"},
    });
    let cluster = apply(&kfcs, &opts.cluster_name, &body).await?;
    let host_ca_pem = opts.host_ca_pem.clone().or(ca);
    let kubeconfig = kubeconfig(&opts.host_server, host_ca_pem.as_deref(), &token, &ns);
    info!(cluster = %opts.cluster_name, namespace = %ns, "pull cluster registered");
    Ok(PullJoin {
        cluster,
        kubeconfig,
        token,
        host_ca_pem,
        type_rules,
    })
}

/// The host's CA as the cluster's namespace publishes it (`kube-root-ca.crt`, written by
/// the host's controller-manager shortly after the namespace is created).
async fn host_ca(host: &Client, ns: &str, timeout: Duration) -> Result<Option<String>, JoinError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let ca = crate::member_token::member_ca(host, ns)
            .await
            .map_err(err(format!("reading {ns}/kube-root-ca.crt")))?;
        if ca.is_some() || tokio::time::Instant::now() >= deadline {
            return Ok(ca);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A kubeconfig for the agent: the host's address and CA, the agent's token, and its
/// namespace as the default.
pub fn kubeconfig(server: &str, ca_pem: Option<&str>, token: &str, namespace: &str) -> String {
    let mut cluster = json!({"server": server});
    if let Some(ca) = ca_pem {
        cluster["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    let config = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "host",
        "clusters": [{"name": "host", "cluster": cluster}],
        "users": [{"name": AGENT_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "host", "context": {"cluster": "host", "user": AGENT_ACCOUNT, "namespace": namespace}}],
    });
    // JSON is YAML; a kubeconfig reader takes either.
    serde_json::to_string_pretty(&config).unwrap_or_default()
}

/// The member side: the agent's namespace, the Secret with its host kubeconfig, its
/// ServiceAccount with the rights to apply objects in the member (`role`), the AppliedWork
/// CRD and the Deployment — as one list, for `kubectl apply -f -` in the member.
pub fn agent_manifests(
    cluster: &str,
    namespace: &str,
    image: &str,
    kubeconfig: &str,
    role: &MemberRole,
) -> Value {
    let crd = serde_json::to_value(flotilla_api::crdgen::applied_work_crd()).unwrap_or_default();
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        crd,
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": KUBECONFIG_SECRET, "namespace": namespace},
         "stringData": {KUBECONFIG_KEY: kubeconfig}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": AGENT_ACCOUNT, "namespace": namespace}},
        // The agent keeps its renewed host token in its kubeconfig Secret.
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": KUBECONFIG_SECRET, "namespace": namespace},
         "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [KUBECONFIG_SECRET], "verbs": ["get", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": KUBECONFIG_SECRET, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": KUBECONFIG_SECRET},
         "subjects": [{"kind": "ServiceAccount", "name": AGENT_ACCOUNT, "namespace": namespace}]},
        role.cluster_role(),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": AGENT_ACCOUNT},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGENT_ROLE},
         "subjects": [{"kind": "ServiceAccount", "name": AGENT_ACCOUNT, "namespace": namespace}]},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": AGENT_ACCOUNT, "namespace": namespace, "labels": {"app.kubernetes.io/name": AGENT_ACCOUNT}},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": AGENT_ACCOUNT}},
          "template": {"metadata": {"labels": {"app.kubernetes.io/name": AGENT_ACCOUNT}},
           "spec": {"serviceAccountName": AGENT_ACCOUNT,
            "securityContext": {"runAsNonRoot": true},
            "containers": [{"name": "agent", "image": image,
              "args": ["agent", "--cluster-name", cluster, "--host-kubeconfig", "/etc/flotilla/host/kubeconfig", "--agent-namespace", namespace, "--metrics-addr", "0.0.0.0:8080", "--host-token-file", "/var/run/flotilla/host-token"],
              "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
              "ports": [{"name": "metrics", "containerPort": 8080}],
              "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10},
              "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 5},
              "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
              "volumeMounts": [{"name": "host", "mountPath": "/etc/flotilla/host", "readOnly": true},
                               {"name": "token", "mountPath": "/var/run/flotilla"}]}],
            "volumes": [{"name": "host", "secret": {"secretName": KUBECONFIG_SECRET}},
                        {"name": "token", "emptyDir": {"medium": "Memory"}}]}}}},
    ]})
}

/// Whether `name` is a DNS label (RFC 1123), as a namespace name must be.
pub fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_cluster_needs_a_name_that_makes_a_namespace() {
        assert!(is_dns_label(&cluster_namespace("edge-1")));
        assert!(!is_dns_label(&cluster_namespace("edge.1")));
        assert!(!is_dns_label(&cluster_namespace(&"a".repeat(47))));
        assert!(!is_dns_label(&cluster_namespace("Edge")));
    }

    #[test]
    fn the_agents_kubeconfig_names_its_namespace_and_carries_the_ca() {
        let text = kubeconfig("https://h:6443", Some("PEM"), "tok", "flotilla-cluster-m1");
        let v: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(
            v["contexts"][0]["context"]["namespace"],
            "flotilla-cluster-m1"
        );
        assert_eq!(v["users"][0]["user"]["token"], "tok");
        assert!(v["clusters"][0]["cluster"]["certificate-authority-data"].is_string());
    }

    #[test]
    fn the_agents_host_role_reads_works_and_writes_only_their_status_and_its_lease() {
        let rules = agent_role_rules();
        let verbs = |resource: &str| -> Vec<String> {
            rules
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| r["resources"][0] == resource)
                .flat_map(|r| r["verbs"].as_array().cloned().unwrap_or_default())
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        };
        assert_eq!(verbs("works"), ["get", "list", "watch"]);
        assert!(!verbs("works/status").contains(&"delete".to_string()));
        assert!(verbs("secrets").is_empty());
        assert_eq!(verbs("events"), ["create", "patch"]);
    }

    #[test]
    fn the_member_role_is_the_enabled_types_unless_all_is_asked() {
        let types = vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        }];
        let narrow = MemberRole::Types(types).cluster_role();
        assert_eq!(
            narrow["metadata"]["annotations"][AGENT_ROLE_ANNOTATION],
            "types"
        );
        let text = narrow["rules"].to_string();
        assert!(
            text.contains("configmaps") && !text.contains("\"*\""),
            "{text}"
        );
        let all = MemberRole::All.cluster_role();
        assert_eq!(all["metadata"]["annotations"][AGENT_ROLE_ANNOTATION], "all");
        assert_eq!(all["rules"][0]["resources"][0], "*");
        let list = agent_manifests("c", "ns", "img", "kc", &MemberRole::All);
        assert!(list["items"].as_array().expect("items").contains(&all));
    }
}
