//! One local cluster's identity and credentials, and clients for it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::Error;

/// One cluster of a [`crate::LocalEnv`]: its name, API server URL, CA and admin token.
///
/// Cheap to clone; it holds no process.
#[derive(Clone)]
pub struct Cluster {
    name: String,
    port: u16,
    server: String,
    ca_pem: String,
    ca_der: Vec<u8>,
    admin_token: String,
    dir: PathBuf,
}

impl Cluster {
    pub(crate) fn new(
        name: String,
        port: u16,
        ca_pem: String,
        ca_der: Vec<u8>,
        admin_token: String,
        dir: PathBuf,
    ) -> Self {
        Self {
            server: server_url(port),
            name,
            port,
            ca_pem,
            ca_der,
            admin_token,
            dir,
        }
    }

    /// The cluster's name: `host`, `member1`, `member2`, …; also its kubeconfig context.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The API server URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The API server's loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The PEM certificate of the CA that signed the API server's serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The static bearer token of `admin` (group `system:masters`). A secret: never log it.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The directory holding this cluster's certificates, keys and process logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A client configuration for the cluster admin: TLS verified against the cluster's CA,
    /// bearer-token authentication, default namespace `default`.
    pub fn kube_config(&self) -> kube::Config {
        // The URL is built by `server_url` from a port number and is always valid.
        #[allow(clippy::unwrap_used)] // invariant stated above
        let url: http::Uri = self.server.parse().unwrap();
        let mut config = kube::Config::new(url);
        config.root_cert = Some(vec![self.ca_der.clone()]);
        config.auth_info.token = Some(self.admin_token.clone().into());
        config.connect_timeout = Some(Duration::from_secs(5));
        config
    }

    /// A client for the cluster admin (see [`Cluster::kube_config`]).
    pub async fn client(&self) -> Result<kube::Client, Error> {
        kube::Client::try_from(self.kube_config()).map_err(|source| Error::Client {
            cluster: self.name.clone(),
            source,
        })
    }

    pub(crate) fn set_port(&mut self, port: u16) {
        self.port = port;
        self.server = server_url(port);
    }
}

fn server_url(port: u16) -> String {
    format!("https://127.0.0.1:{port}")
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.name)
            .field("server", &self.server)
            .field("dir", &self.dir)
            .field("admin_token", &"<redacted>")
            .finish_non_exhaustive()
    }
}
