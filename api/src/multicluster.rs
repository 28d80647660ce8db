//! `multicluster.flotilla.io/v1alpha1`: ServiceAccountImport — declarative credentials for a
//! ServiceAccount of a member cluster, delivered as a kubeconfig Secret in the host — and
//! the reasons its Ready condition reports. Types and names only; no I/O.

use std::str::FromStr;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of Flotilla's multi-cluster extensions (beyond kubefed).
pub const MULTICLUSTER_GROUP: &str = "multicluster.flotilla.io";
/// The shortest token lifetime a member's TokenRequest API accepts (10 minutes).
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The token lifetime requested when an import does not set one (1 hour).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// Label (value `"true"`) on every Secret written for an import, so the controller watches
/// only those; the owning import is the Secret's controller ownerReference.
pub const SECRET_LABEL: &str = "multicluster.flotilla.io/import-secret";
/// Annotation on an import's Secret: when its token expires (RFC 3339).
pub const EXPIRATION_ANNOTATION: &str = "multicluster.flotilla.io/token-expiration";
/// Annotation on an import's Secret: when its token was issued (RFC 3339).
pub const ISSUED_ANNOTATION: &str = "multicluster.flotilla.io/token-issued";
/// Annotation on an import's Secret: a hash of everything the Secret was built from
/// except the token (cluster endpoint, CA, remote namespace and name, lifetime), so a
/// changed input means a new token.
pub const SOURCE_ANNOTATION: &str = "multicluster.flotilla.io/source-hash";
/// Annotation on a ServiceAccountImport, **for testing**: the fraction of the token's
/// lifetime after which it is refreshed (default 0.8), e.g. `"0.01"` to see a refresh
/// within seconds. Values outside (0, 1] are ignored.
pub const REFRESH_FRACTION_ANNOTATION: &str = "multicluster.flotilla.io/refresh-fraction";
/// Type of the import's condition.
pub const READY_CONDITION: &str = "Ready";

/// Credentials for a ServiceAccount of a member cluster: the control plane requests a
/// bounded token for it through the member's TokenRequest API and keeps a kubeconfig
/// Secret in this namespace up to date, refreshing the token before it expires.
// clippy reads each `printcolumn(type_ = ..)` as a repeat of one attribute; they are distinct columns.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.flotilla.io",
    version = "v1alpha1",
    kind = "ServiceAccountImport",
    plural = "serviceaccountimports",
    namespaced,
    status = "ServiceAccountImportStatus",
    shortname = "saimport",
    category = "kubefed",
    category = "flotilla",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterName"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    ),
    printcolumn(name = "Secret", type_ = "string", json_path = ".status.secretName"),
    printcolumn(
        name = "Expires",
        type_ = "date",
        json_path = ".status.expirationTimestamp"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountImportSpec {
    /// Name of the KubeFedCluster (member cluster) the ServiceAccount lives in.
    pub cluster_name: String,
    /// Namespace of the ServiceAccount in the member cluster.
    pub namespace: String,
    /// Name of the ServiceAccount in the member cluster.
    pub name: String,
    /// Lifetime of each token in seconds (at least 600; default 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 600))]
    pub expiration_seconds: Option<i64>,
}

impl ServiceAccountImportSpec {
    /// The token lifetime to request: the spec's, never under the API's minimum.
    pub fn lifetime_seconds(&self) -> i64 {
        self.expiration_seconds
            .unwrap_or(DEFAULT_EXPIRATION_SECONDS)
            .max(MIN_EXPIRATION_SECONDS)
    }
}

/// Observed state of a ServiceAccountImport.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountImportStatus {
    /// `Ready`: whether the Secret holds a current token of the remote ServiceAccount.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ImportCondition>,
    /// The Secret in this namespace holding the kubeconfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// When the Secret's token expires (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_timestamp: Option<String>,
}

/// A condition of a ServiceAccountImport.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImportCondition {
    /// `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A machine-readable CamelCase reason ([`ImportReason`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the status last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

impl ServiceAccountImportStatus {
    /// The Ready condition, if present.
    pub fn ready(&self) -> Option<&ImportCondition> {
        self.conditions.iter().find(|c| c.type_ == READY_CONDITION)
    }
}

/// Why an import is or is not Ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ImportReason {
    /// The Secret holds a current token.
    TokenIssued,
    /// No KubeFedCluster of that name is registered.
    ClusterNotFound,
    /// The cluster is registered but not Ready (or has no usable client).
    ClusterNotReady,
    /// The member answered 404: no such ServiceAccount (or namespace).
    ServiceAccountNotFound,
    /// The member refused the TokenRequest (403): the member credential lacks
    /// `serviceaccounts/token` create.
    TokenRequestForbidden,
    /// The TokenRequest failed otherwise (timeout, server error, malformed answer).
    TokenRequestFailed,
    /// The KubeFedCluster's endpoint or CA cannot be put into a kubeconfig.
    ClusterConfigMalformed,
    /// Writing the Secret in the host failed.
    SecretWriteFailed,
}

impl ImportReason {
    /// Every reason, for metrics and parsing.
    pub const ALL: [ImportReason; 8] = [
        ImportReason::TokenIssued,
        ImportReason::ClusterNotFound,
        ImportReason::ClusterNotReady,
        ImportReason::ServiceAccountNotFound,
        ImportReason::TokenRequestForbidden,
        ImportReason::TokenRequestFailed,
        ImportReason::ClusterConfigMalformed,
        ImportReason::SecretWriteFailed,
    ];

    /// The reason as written in conditions and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            ImportReason::TokenIssued => "TokenIssued",
            ImportReason::ClusterNotFound => "ClusterNotFound",
            ImportReason::ClusterNotReady => "ClusterNotReady",
            ImportReason::ServiceAccountNotFound => "ServiceAccountNotFound",
            ImportReason::TokenRequestForbidden => "TokenRequestForbidden",
            ImportReason::TokenRequestFailed => "TokenRequestFailed",
            ImportReason::ClusterConfigMalformed => "ClusterConfigMalformed",
            ImportReason::SecretWriteFailed => "SecretWriteFailed",
        }
    }

    /// Whether the import is Ready with this reason.
    pub fn is_ready(self) -> bool {
        self == ImportReason::TokenIssued
    }
}

impl FromStr for ImportReason {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ImportReason::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown ServiceAccountImport reason {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_reads_back_from_its_string() {
        for r in ImportReason::ALL {
            assert_eq!(r.as_str().parse::<ImportReason>(), Ok(r));
        }
        assert!("Nope".parse::<ImportReason>().is_err());
        assert!(ImportReason::TokenIssued.is_ready());
        assert!(!ImportReason::ClusterNotFound.is_ready());
    }

    #[test]
    fn the_lifetime_defaults_to_an_hour_and_never_goes_under_the_api_minimum() {
        let mut spec = ServiceAccountImportSpec::default();
        assert_eq!(spec.lifetime_seconds(), 3600);
        spec.expiration_seconds = Some(60);
        assert_eq!(spec.lifetime_seconds(), 600);
        spec.expiration_seconds = Some(7200);
        assert_eq!(spec.lifetime_seconds(), 7200);
    }

    #[test]
    fn the_crd_is_namespaced_with_a_status_subresource_and_a_minimum_lifetime() {
        use kube::CustomResourceExt;
        let crd = ServiceAccountImport::crd();
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.group, MULTICLUSTER_GROUP);
        let v = &crd.spec.versions[0];
        assert!(v.subresources.as_ref().is_some_and(|s| s.status.is_some()));
        let schema = serde_json::to_value(v.schema.as_ref().expect("schema")).expect("json");
        let min = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["expirationSeconds"]
            ["minimum"];
        assert_eq!(min.as_f64(), Some(600.0));
    }
}
