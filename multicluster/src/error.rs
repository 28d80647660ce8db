//! The library's one error type, and the `: `-joined error chains used in logs and
//! conditions.

use crate::kubefed::client::ClientError;

/// Errors of the library's own operations (sources, garbage collection, Events).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to a cluster failed.
    #[error("{action} in cluster {cluster} failed")]
    Kube {
        /// What was being done.
        action: &'static str,
        /// The cluster the request went to.
        cluster: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// A kubeconfig could not be read or a context of it could not be used.
    #[error("kubeconfig context {context:?} is unusable")]
    Kubeconfig {
        /// The context.
        context: String,
        /// kube's error.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The in-cluster configuration is unavailable (not running in a pod).
    #[error("no in-cluster configuration")]
    InCluster {
        /// kube's error.
        #[source]
        source: kube::config::InClusterError,
    },
    /// A client could not be built from a configuration.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// An object has no name or uid yet, so no owner reference can name it.
    #[error(transparent)]
    Owner(#[from] crate::ownership::OwnerRefError),
    /// The cluster is not registered or not Ready, so nothing can be sent to it.
    #[error("cluster {0} is not Ready")]
    ClusterNotReady(String),
    /// A bearer token is empty or not printable ASCII once its surrounding whitespace is
    /// trimmed (the token itself is never shown).
    #[error("the bearer token {origin} is not usable (empty or not printable ASCII once trimmed)")]
    InvalidToken {
        /// Where it was read: a file, or the kubeconfig's inline token.
        origin: String,
    },
    /// A token file cannot be read.
    #[error("the token file {} cannot be read", path.display())]
    TokenFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// A bounded label for metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Error::Kube { .. } => "kube",
            Error::Kubeconfig { .. } => "kubeconfig",
            Error::InCluster { .. } => "in_cluster",
            Error::Client(_) => "client",
            Error::Owner(_) => "owner",
            Error::ClusterNotReady(_) => "cluster_not_ready",
            Error::InvalidToken { .. } => "invalid_token",
            Error::TokenFile { .. } => "token_file",
        }
    }
}

/// An error and its sources, joined with `: ` — the form used in conditions and logs.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
