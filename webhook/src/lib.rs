//! The ServiceAccountImport auto-mount webhook: a mutating admission webhook served by the
//! controller-manager over TLS. In namespaces labelled
//! `multicluster.flotilla.io/service-account-import=enabled` (the
//! MutatingWebhookConfiguration's namespace selector), a Pod annotated
//! `multicluster.flotilla.io/service-account-import.name: a,b` gets each named import's
//! Secret mounted read-only at `/var/run/secrets/flotilla.io/serviceaccountimports/<name>/`;
//! an unknown import name rejects the Pod.
//!
//! [`certs`] keeps the certificates in a Secret, [`rotation`] decides when they change and
//! which CAs the configuration trusts (pure), [`renew`] carries that out, [`server`] serves,
//! [`patch`] decides the Pod patch (pure), [`local`] wires it for `flotilla dev up`,
//! [`expiry`] exports when the certificate being served expires.

pub mod certs;
pub mod expiry;
pub mod local;
pub mod patch;
pub mod renew;
pub mod rotation;
pub mod server;

use std::net::SocketAddr;

use flotilla_multicluster::tasks::AbortOnDrop;
use kube::Client;
use tokio::sync::watch;
use tracing::{info, warn};

/// Label a namespace needs for its Pods to pass through the webhook.
pub const NAMESPACE_LABEL: &str = "multicluster.flotilla.io/service-account-import";
/// Its value.
pub const NAMESPACE_LABEL_VALUE: &str = "enabled";
/// Default name of the MutatingWebhookConfiguration (see `config/webhook/`).
pub const DEFAULT_CONFIGURATION: &str = "flotilla-serviceaccountimport";
/// Default name of the Secret holding the serving certificate.
pub const DEFAULT_CERT_SECRET: &str = "flotilla-webhook-serving-cert";

/// Failures of the webhook.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A host API call failed.
    #[error("host API call failed: {0}")]
    Kube(#[from] kube::Error),
    /// Generating the certificate failed.
    #[error("generating the serving certificate failed: {0}")]
    Certificate(#[from] rcgen::Error),
    /// The TLS configuration or a patch could not be built.
    #[error("{0}")]
    Config(String),
    /// The listening socket could not be opened.
    #[error("binding the webhook address failed: {0}")]
    Bind(#[source] std::io::Error),
}

/// Where and as what the webhook serves.
#[derive(Clone, Debug)]
pub struct WebhookOptions {
    /// Address to listen on.
    pub bind: SocketAddr,
    /// DNS names and IP addresses the serving certificate is made for (the Service's
    /// `<name>.<namespace>.svc`, or the IP the API server calls).
    pub names: Vec<String>,
    /// The MutatingWebhookConfiguration whose CA bundle is kept.
    pub configuration: String,
    /// The Secret (in the control-plane namespace) holding the certificate.
    pub cert_secret: String,
    /// The control-plane namespace.
    pub namespace: String,
    /// Certificate lifetimes and rotation waits.
    pub rotation: rotation::Policy,
    /// Where the served certificate's expiry is reported (the controller-manager's
    /// `/metrics`); `None` reports nothing.
    pub metrics: Option<expiry::WebhookMetrics>,
}

/// Makes sure of the certificate and the configuration's CA bundle, then serves, and keeps
/// rotating them (see [`rotation`]). Returns the bound address and the task serving and
/// rotating (abort it to stop both).
pub async fn start(
    host: Client,
    options: &WebhookOptions,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), Error> {
    options.rotation.check().map_err(Error::Config)?;
    let renewer = renew::Renewer {
        host: host.clone(),
        namespace: options.namespace.clone(),
        secret: options.cert_secret.clone(),
        configuration: options.configuration.clone(),
        names: options.names.clone(),
        policy: options.rotation,
    };
    let cert = renewer.once().await?;
    let (tls, serving_tls) = watch::channel(server::tls_config(&cert)?);
    let metrics = options.metrics.clone().unwrap_or_default();
    metrics.serving(&cert);
    let (addr, serving) = server::serve(options.bind, serving_tls, host).await?;
    let rotating = tokio::spawn(renewer.run(move |cert| match server::tls_config(cert) {
        Ok(config) => {
            info!(validity = ?cert.validity, "webhook serving a renewed certificate");
            tls.send_replace(config);
            metrics.serving(cert);
        }
        Err(error) => {
            warn!(%error, "a renewed webhook certificate is unusable; serving the previous one")
        }
    }));
    let both = AbortOnDrop::from([serving, rotating]);
    let task = tokio::spawn(async move {
        // Held until this task is aborted, which aborts both.
        let _both = both;
        std::future::pending::<()>().await;
    });
    info!(%addr, configuration = %options.configuration, "service-account-import webhook serving");
    Ok((addr, task))
}
