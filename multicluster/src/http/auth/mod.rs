//! Authentication and authorisation of HTTP endpoints that are reachable from elsewhere (the
//! dashboard, `/metrics`), delegated to an API server as kube-rbac-proxy and the Kubernetes
//! components do — the host's for the controller-manager and the dashboard, the member's for
//! the pull agent: the caller's bearer token is checked with a `TokenReview`, and each read
//! with a `SubjectAccessReview`, so who may see what is decided by that cluster's RBAC. Answers are cached briefly ([`decide::REVIEW_TTL`]), keyed by a hash of the token,
//! never the token itself; no token is ever logged.
//!
//! [`decide`] holds the pure decisions; this module only asks the API server.

pub mod decide;

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::Instant,
};

use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec},
    authorization::v1::{
        NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    },
};
use kube::{Api, Client, api::PostParams};
use sha2::{Digest, Sha256};
use tracing::{debug, warn};

pub use self::decide::{Denial, Exposure, bearer, exposure};

/// An authenticated caller, as the host's TokenReview named it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct User {
    /// User name (`system:serviceaccount:ns:name` for a ServiceAccount).
    pub name: String,
    /// UID, when the authenticator gives one.
    pub uid: Option<String>,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes (scopes and the like), passed on to the access reviews.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a request asks to read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Check {
    /// `verb` on a resource (`namespace` `None`: in every namespace, or cluster-scoped).
    Resource {
        /// `get`, `list`, ...
        verb: &'static str,
        /// API group.
        group: String,
        /// Plural resource name.
        resource: String,
        /// Namespace.
        namespace: Option<String>,
    },
    /// `verb` on a non-resource URL such as `/metrics`.
    Path {
        /// `get`.
        verb: &'static str,
        /// The URL path.
        path: &'static str,
    },
}

impl Check {
    /// "get federatedsecrets.types.kubefed.io in demo", for refusals.
    pub fn describe(&self) -> String {
        match self {
            Check::Resource {
                verb,
                group,
                resource,
                namespace,
            } => {
                let resource = match group.as_str() {
                    "" => resource.clone(),
                    g => format!("{resource}.{g}"),
                };
                match namespace {
                    Some(ns) => format!("{verb} {resource} in namespace {ns}"),
                    None => format!("{verb} {resource}"),
                }
            }
            Check::Path { verb, path } => format!("{verb} {path}"),
        }
    }
}

type Cache<K, V> = Mutex<HashMap<K, (Instant, V)>>;

/// Reviews requests against the host API server, with a short cache.
pub struct Authenticator {
    host: Client,
    users: Cache<[u8; 32], Option<User>>,
    decisions: Cache<(User, Check), bool>,
}

fn cached<K: Eq + std::hash::Hash, V: Clone>(cache: &Cache<K, V>, key: &K) -> Option<V> {
    let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    cache
        .get(key)
        .filter(|(at, _)| decide::fresh(*at, Instant::now()))
        .map(|(_, v)| v.clone())
}

fn remember<K: Eq + std::hash::Hash, V>(cache: &Cache<K, V>, key: K, value: V) {
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= decide::CACHE_LIMIT {
        cache.clear();
    }
    cache.insert(key, (Instant::now(), value));
}

impl Authenticator {
    /// Reviews with `host` (which may create TokenReviews and SubjectAccessReviews).
    pub fn new(host: Client) -> Arc<Self> {
        Arc::new(Authenticator {
            host,
            users: Mutex::default(),
            decisions: Mutex::default(),
        })
    }

    /// The caller of a request with this `Authorization` header.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<User, Denial> {
        let token = bearer(authorization).ok_or(Denial::MissingToken)?;
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let user = match cached(&self.users, &key) {
            Some(user) => user,
            None => {
                let user = self.review_token(token).await?;
                remember(&self.users, key, user.clone());
                user
            }
        };
        user.ok_or(Denial::InvalidToken)
    }

    async fn review_token(&self, token: &str) -> Result<Option<User>, Denial> {
        let review = TokenReview {
            metadata: Default::default(),
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            status: None,
        };
        let api: Api<TokenReview> = Api::all(self.host.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|error| {
                warn!(%error, "a TokenReview failed; refusing the request");
                Denial::ReviewFailed
            })?;
        let status = answer.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            debug!(error = ?status.error, "a bearer token was not authenticated");
            return Ok(None);
        }
        let info = status.user.unwrap_or_default();
        Ok(Some(User {
            name: info.username.unwrap_or_default(),
            uid: info.uid,
            groups: info.groups.unwrap_or_default(),
            extra: info.extra.unwrap_or_default(),
        }))
    }

    /// Whether `user` may do `check`.
    pub async fn allowed(&self, user: &User, check: &Check) -> Result<bool, Denial> {
        let key = (user.clone(), check.clone());
        if let Some(allowed) = cached(&self.decisions, &key) {
            return Ok(allowed);
        }
        let allowed = self.review_access(user, check).await?;
        remember(&self.decisions, key, allowed);
        Ok(allowed)
    }

    /// [`Authenticator::allowed`], as a refusal when not.
    pub async fn require(&self, user: &User, check: &Check) -> Result<(), Denial> {
        match self.allowed(user, check).await? {
            true => Ok(()),
            false => Err(Denial::Forbidden(format!(
                "{} may not {}",
                user.name,
                check.describe()
            ))),
        }
    }

    async fn review_access(&self, user: &User, check: &Check) -> Result<bool, Denial> {
        let mut spec = SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: user.uid.clone(),
            groups: Some(user.groups.clone()),
            extra: Some(user.extra.clone()),
            ..Default::default()
        };
        match check {
            Check::Resource {
                verb,
                group,
                resource,
                namespace,
            } => {
                spec.resource_attributes = Some(ResourceAttributes {
                    verb: Some((*verb).to_owned()),
                    group: Some(group.clone()),
                    resource: Some(resource.clone()),
                    namespace: namespace.clone(),
                    ..Default::default()
                })
            }
            Check::Path { verb, path } => {
                spec.non_resource_attributes = Some(NonResourceAttributes {
                    verb: Some((*verb).to_owned()),
                    path: Some((*path).to_owned()),
                })
            }
        }
        let review = SubjectAccessReview {
            metadata: Default::default(),
            spec,
            status: None,
        };
        let api: Api<SubjectAccessReview> = Api::all(self.host.clone());
        match api.create(&PostParams::default(), &review).await {
            Ok(answer) => Ok(answer.status.is_some_and(|s| s.allowed)),
            Err(error) => {
                warn!(%error, "a SubjectAccessReview failed; refusing the request");
                Err(Denial::ReviewFailed)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_is_described_as_rbac_would_name_it() {
        let get = Check::Resource {
            verb: "get",
            group: "types.kubefed.io".into(),
            resource: "federatedsecrets".into(),
            namespace: Some("demo".into()),
        };
        assert_eq!(
            get.describe(),
            "get federatedsecrets.types.kubefed.io in namespace demo"
        );
        let core = Check::Resource {
            verb: "list",
            group: String::new(),
            resource: "events".into(),
            namespace: None,
        };
        assert_eq!(core.describe(), "list events");
        let metrics = Check::Path {
            verb: "get",
            path: "/metrics",
        };
        assert_eq!(metrics.describe(), "get /metrics");
    }
}
