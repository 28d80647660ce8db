//! What stands between a starting controller-manager and a working one: its credentials
//! (kubeconfig, or the in-cluster token, CA and namespace files), the host's answer through
//! them (TLS verified, token accepted) and the RBAC of `config/rbac/`. Each failure is one
//! [`Problem`] with a reason, for `/readyz` and the log. This module only checks and
//! decides; it neither retries nor serves (the manager's start-up loop does).

use std::fmt;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::{Api, Client, api::PostParams};

/// Why the controller-manager cannot work yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// No client configuration could be loaded or built: no kubeconfig and no in-cluster
    /// environment, or a token, CA or namespace file missing or unreadable.
    Credentials(String),
    /// The host's serving certificate did not verify against the trusted CA.
    Certificate(String),
    /// The host rejected the credential (HTTP 401).
    Unauthorized(String),
    /// The host did not answer.
    Unreachable(String),
    /// The credential is valid but lacks permissions of `config/rbac/`.
    MissingPermissions(Vec<Permission>),
}

impl Problem {
    /// The reason, as `/readyz` and the log show it.
    pub fn reason(&self) -> &'static str {
        match self {
            Problem::Credentials(_) => "CredentialsUnavailable",
            Problem::Certificate(_) => "CertificateNotTrusted",
            Problem::Unauthorized(_) => "Unauthorized",
            Problem::Unreachable(_) => "HostUnreachable",
            Problem::MissingPermissions(_) => "MissingPermissions",
        }
    }

    /// What the operator can do about it.
    fn hint(&self) -> &'static str {
        match self {
            Problem::Credentials(_) => {
                "mount the ServiceAccount token, readable by the container's user (automountServiceAccountToken, fsGroup), or pass --kubeconfig"
            }
            Problem::Certificate(_) => {
                "the CA (ca.crt or the kubeconfig's certificate-authority) must be the one that signed the API server's certificate"
            }
            Problem::Unauthorized(_) => "the token is not (or no longer) valid for this cluster",
            Problem::Unreachable(_) => "retrying",
            Problem::MissingPermissions(_) => {
                "apply config/rbac/ (kubectl apply -k config/) and bind it to this ServiceAccount"
            }
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.reason())?;
        match self {
            Problem::Credentials(m)
            | Problem::Certificate(m)
            | Problem::Unauthorized(m)
            | Problem::Unreachable(m) => write!(f, "{m}")?,
            Problem::MissingPermissions(missing) if missing.is_empty() => {
                write!(f, "the host answered 403 Forbidden")?;
            }
            Problem::MissingPermissions(missing) => {
                let list: Vec<String> = missing.iter().map(ToString::to_string).collect();
                write!(f, "not allowed to {}", list.join(", "))?;
            }
        }
        write!(f, " ({})", self.hint())
    }
}

/// The messages of an error chain, `: `-joined, leaving out a message the text already
/// holds (kube's errors repeat their source in their own message).
pub fn messages<'a>(
    chain: impl IntoIterator<Item = &'a (dyn std::error::Error + 'static)>,
) -> String {
    let mut text = String::new();
    for e in chain {
        let next = e.to_string();
        if text.contains(&next) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&next);
    }
    text
}

/// The message of an error and all its sources, as [`messages`] joins them.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    messages(std::iter::successors(Some(error), |e| e.source()))
}

/// The problem behind a failed request to the host: its HTTP status when it answered,
/// else its error chain (a certificate that did not verify shows up there).
pub fn classify_request_error(status: Option<u16>, chain: &str) -> Problem {
    match status {
        Some(401) => return Problem::Unauthorized(chain.to_owned()),
        Some(403) => return Problem::MissingPermissions(Vec::new()),
        _ => {}
    }
    let lower = chain.to_lowercase();
    if lower.contains("certificate") || lower.contains("unknownissuer") {
        Problem::Certificate(chain.to_owned())
    } else if lower.contains("token") && (lower.contains("file") || lower.contains("auth")) {
        Problem::Credentials(chain.to_owned())
    } else {
        Problem::Unreachable(chain.to_owned())
    }
}

/// One permission the controller-manager needs, as a SelfSubjectAccessReview asks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    /// The verb.
    pub verb: &'static str,
    /// The API group (`""` for the core group).
    pub group: &'static str,
    /// The resource (with `/subresource` when one).
    pub resource: &'static str,
    /// The namespace; `None` cluster-wide.
    pub namespace: Option<String>,
    /// The object's name, for rules limited by `resourceNames`.
    pub name: Option<String>,
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (resource, subresource) = match self.resource.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (self.resource, None),
        };
        write!(f, "{} {resource}", self.verb)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(subresource) = subresource {
            write!(f, "/{subresource}")?;
        }
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in {ns}"),
            None => write!(f, " cluster-wide"),
        }
    }
}

/// A sample of `config/rbac/` that the control plane needs at start under either
/// federation scope: the registry, the type configs and Secrets in the control-plane
/// namespace, the CRDs, and the leader Lease `lease` when electing. (What a `Cluster`
/// scope adds — federated objects, namespaces and Events everywhere — is left out, so a
/// `Namespaced` federation with narrower roles still starts.)
pub fn required_permissions(namespace: &str, lease: Option<&str>) -> Vec<Permission> {
    let ns = |verb, group, resource| Permission {
        verb,
        group,
        resource,
        namespace: Some(namespace.to_owned()),
        name: None,
    };
    let cluster = |verb, group, resource| Permission {
        verb,
        group,
        resource,
        namespace: None,
        name: None,
    };
    let mut wanted = vec![
        ns("list", "core.kubefed.io", "kubefedclusters"),
        ns("watch", "core.kubefed.io", "kubefedclusters"),
        ns("update", "core.kubefed.io", "kubefedclusters/status"),
        ns("list", "core.kubefed.io", "federatedtypeconfigs"),
        ns("get", "core.kubefed.io", "kubefedconfigs"),
        ns("list", "", "secrets"),
        cluster("list", "apiextensions.k8s.io", "customresourcedefinitions"),
    ];
    if let Some(lease) = lease {
        wanted.push(ns("create", "coordination.k8s.io", "leases"));
        let mut update = ns("update", "coordination.k8s.io", "leases");
        update.name = Some(lease.to_owned());
        wanted.push(update);
    }
    wanted
}

/// The review asking whether the caller may do `p`.
fn review(p: &Permission) -> SelfSubjectAccessReview {
    let (resource, subresource) = match p.resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_owned())),
        None => (p.resource, None),
    };
    SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(p.verb.to_owned()),
                group: Some(p.group.to_owned()),
                resource: Some(resource.to_owned()),
                subresource,
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    }
}

/// Asks the host which of `wanted` the caller lacks (every authenticated user may ask).
pub async fn missing_permissions(
    client: &Client,
    wanted: Vec<Permission>,
) -> Result<Vec<Permission>, kube::Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for p in wanted {
        let answer = api.create(&PostParams::default(), &review(&p)).await?;
        if !answer.status.is_some_and(|s| s.allowed) {
            missing.push(p);
        }
    }
    Ok(missing)
}

/// The problem of a failed request to the host. A local credential error (a token no
/// header can carry, a token file that cannot be read, a failed exec plugin) is a
/// credentials problem whatever its text says: the host was never asked.
pub fn request_problem(error: &kube::Error) -> Problem {
    if flotilla_multicluster::credentials::is_credential_error(error) {
        return Problem::Credentials(chain(error));
    }
    let status = match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    };
    classify_request_error(status, &chain(error))
}

/// Checks that `client` reaches the host, that the host accepts it, and that it holds
/// `wanted`; returns the host's version.
pub async fn check_host(
    client: &Client,
    wanted: Vec<Permission>,
) -> Result<k8s_openapi::apimachinery::pkg::version::Info, Problem> {
    let version = client
        .apiserver_version()
        .await
        .map_err(|e| request_problem(&e))?;
    let missing = missing_permissions(client, wanted)
        .await
        .map_err(|e| request_problem(&e))?;
    if missing.is_empty() {
        Ok(version)
    } else {
        Err(Problem::MissingPermissions(missing))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_issuer_is_a_certificate_problem() {
        let p = classify_request_error(
            None,
            "ServiceError: client error (Connect): invalid peer certificate: UnknownIssuer",
        );
        assert_eq!(p.reason(), "CertificateNotTrusted");
        assert!(p.to_string().contains("UnknownIssuer"), "{p}");
    }

    #[test]
    fn a_rejected_token_is_unauthorized() {
        let p = classify_request_error(Some(401), "ApiError: Unauthorized");
        assert_eq!(p.reason(), "Unauthorized");
    }

    #[test]
    fn a_refused_connection_is_unreachable() {
        let p = classify_request_error(None, "client error (Connect): Connection refused");
        assert_eq!(p.reason(), "HostUnreachable");
    }

    #[test]
    fn a_token_no_header_can_carry_is_a_credentials_problem_not_an_unreachable_host() {
        // What kube reports for a token file ending in a newline, on every request.
        let header = http::HeaderValue::try_from("Bearer t\n").expect_err("no header value");
        let auth = kube::client::AuthError::InvalidBearerToken(header);
        let error = kube::Error::Service(Box::new(auth));
        let p = request_problem(&error);
        assert_eq!(p.reason(), "CredentialsUnavailable", "{p}");
        assert!(p.to_string().contains("invalid bearer token"), "{p}");
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let p = request_problem(&kube::Error::Service(Box::new(refused)));
        assert_eq!(p.reason(), "HostUnreachable", "{p}");
    }

    #[test]
    fn a_token_file_that_cannot_be_read_is_a_credentials_problem() {
        let p = classify_request_error(None, "failed to read token file \"/x\": denied");
        assert_eq!(p.reason(), "CredentialsUnavailable");
    }

    #[test]
    fn missing_permissions_are_listed_with_their_scope_and_the_fix() {
        let wanted = required_permissions("kube-federation-system", Some("lease-a"));
        let missing = vec![
            wanted[0].clone(),
            wanted.last().cloned().expect("a lease permission"),
        ];
        let text = Problem::MissingPermissions(missing).to_string();
        assert!(
            text.starts_with("MissingPermissions: not allowed to list kubefedclusters.core.kubefed.io in kube-federation-system, update leases.coordination.k8s.io lease-a in kube-federation-system"),
            "{text}"
        );
        assert!(text.contains("config/rbac/"), "{text}");
    }

    #[test]
    fn the_lease_is_checked_only_when_electing() {
        let with = required_permissions("ns", Some("l"));
        let without = required_permissions("ns", None);
        assert_eq!(with.len(), without.len() + 2);
        assert!(without.iter().all(|p| p.resource != "leases"));
    }

    #[test]
    fn a_subresource_is_reviewed_as_one() {
        let p = &required_permissions("ns", None)[2];
        let attrs = review(p)
            .spec
            .resource_attributes
            .expect("resource attributes");
        assert_eq!(attrs.resource.as_deref(), Some("kubefedclusters"));
        assert_eq!(attrs.subresource.as_deref(), Some("status"));
        assert_eq!(attrs.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn a_subresource_is_shown_after_the_group() {
        let p = &required_permissions("ns", None)[2];
        assert_eq!(
            p.to_string(),
            "update kubefedclusters.core.kubefed.io/status in ns"
        );
    }

    #[test]
    fn an_error_chain_keeps_every_distinct_message_once() {
        let e = anyhow::anyhow!("no such file")
            .context("reading the token")
            .context("building a client");
        assert_eq!(
            messages(e.chain()),
            "building a client: reading the token: no such file"
        );
        let repeated = anyhow::anyhow!("no such file").context("auth error: no such file");
        assert_eq!(messages(repeated.chain()), "auth error: no such file");
    }
}
