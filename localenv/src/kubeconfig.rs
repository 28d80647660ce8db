//! Kubeconfig files: one for users with a context per cluster, one per controller-manager.

use base64::Engine as _;
use serde_json::json;

use crate::cluster::Cluster;
use crate::error::Error;

/// A kubeconfig (YAML) with a cluster, a token user and a context per cluster, all named
/// after the cluster; the current context is the first cluster's.
pub(crate) fn render(clusters: &[Cluster]) -> Result<String, Error> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters.iter().map(|c| json!({
            "name": c.name(),
            "cluster": {
                "server": c.server(),
                "certificate-authority-data": b64.encode(c.ca_pem()),
            },
        })).collect::<Vec<_>>(),
        "users": clusters.iter().map(|c| json!({
            "name": c.name(),
            "user": { "token": c.admin_token() },
        })).collect::<Vec<_>>(),
        "contexts": clusters.iter().map(|c| json!({
            "name": c.name(),
            "context": { "cluster": c.name(), "user": c.name() },
        })).collect::<Vec<_>>(),
        "current-context": clusters.first().map(Cluster::name),
        "preferences": {},
    });
    serde_saphyr::to_string(&config).map_err(Error::Kubeconfig)
}
