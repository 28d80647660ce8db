//! The webhook's HTTPS endpoint: TLS with the serving certificate of [`super::certs`],
//! `POST /mutate-pods` answering AdmissionReviews. It reads the named imports from the
//! host (to find their Secrets) and leaves every decision to [`super::patch`].

use std::{collections::BTreeMap, convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use flotilla_api::admiralty::{AnyImport, ImportGroup};
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use kube::{Api, Client};
use serde_json::Value;
use tokio::{net::TcpListener, sync::watch};
use tokio_rustls::{
    TlsAcceptor,
    rustls::{
        ServerConfig,
        crypto::ring,
        pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    },
};
use tracing::{debug, warn};

use super::{Error, certs::ServingCert, patch};

/// Path the MutatingWebhookConfiguration calls.
pub const MUTATE_PATH: &str = "/mutate-pods";
/// The largest AdmissionReview accepted (the API server's own request limit is 3 MiB).
const BODY_LIMIT: usize = 3 * 1024 * 1024;
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS configuration serving `cert`.
pub fn tls_config(cert: &ServingCert) -> Result<Arc<ServerConfig>, Error> {
    let tls = |e: &dyn std::fmt::Display| Error::Config(format!("the serving certificate: {e}"));
    let chain = CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls(&e))?;
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).map_err(|e| tls(&e))?;
    let config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(&e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| tls(&e))?;
    Ok(Arc::new(config))
}

/// Binds `addr` and serves until the task is aborted; returns the bound address. Each
/// connection is served with the TLS configuration `tls` holds when it is accepted, so a
/// renewed certificate applies to the next handshake and open connections keep theirs.
pub async fn serve(
    addr: SocketAddr,
    tls: watch::Receiver<Arc<ServerConfig>>,
    host: Client,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), Error> {
    let listener = TcpListener::bind(addr).await.map_err(Error::Bind)?;
    let local = listener.local_addr().map_err(Error::Bind)?;
    let task = tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(a) => a,
                Err(e) => {
                    warn!(error = %e, "accepting a webhook connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let acceptor = TlsAcceptor::from(tls.borrow().clone());
            let host = host.clone();
            tokio::spawn(async move {
                match acceptor.accept(stream).await {
                    Ok(tls) => connection(TokioIo::new(tls), host).await,
                    Err(e) => debug!(%peer, error = %e, "webhook TLS handshake failed"),
                }
            });
        }
    });
    Ok((local, task))
}

async fn connection<S>(io: TokioIo<S>, host: Client)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
        let host = host.clone();
        async move { Ok::<_, Infallible>(handle(request, host).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .serve_connection(io, service)
        .await;
    if let Err(error) = served {
        debug!(%error, "serving a webhook connection failed");
    }
}

fn reply(status: StatusCode, body: String) -> http::Response<Full<Bytes>> {
    let mut response = http::Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

async fn handle(
    request: Request<hyper::body::Incoming>,
    host: Client,
) -> http::Response<Full<Bytes>> {
    if request.method() != Method::POST || request.uri().path() != MUTATE_PATH {
        return reply(StatusCode::NOT_FOUND, "{}".into());
    }
    let body = match Limited::new(request.into_body(), BODY_LIMIT)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return reply(
                StatusCode::BAD_REQUEST,
                format!("{{\"error\": {:?}}}", e.to_string()),
            );
        }
    };
    let Ok(review) = serde_json::from_slice::<Value>(&body) else {
        return reply(StatusCode::BAD_REQUEST, "{\"error\": \"not JSON\"}".into());
    };
    let request = &review["request"];
    let uid = request["uid"].as_str().unwrap_or_default();
    let namespace = request["namespace"].as_str().unwrap_or_default();
    let pod = &request["object"];
    let result = mount(&host, namespace, pod).await;
    if let Err(message) = &result {
        debug!(%namespace, %message, "pod rejected");
    }
    reply(
        StatusCode::OK,
        patch::review_response(uid, &result).to_string(),
    )
}

/// The patch of every convention whose annotation the Pod has (Flotilla's, Admiralty's),
/// each built on the Pod as the previous one left it.
async fn mount(host: &Client, namespace: &str, pod: &Value) -> Result<Vec<Value>, String> {
    let mut pod = pod.clone();
    let mut ops = Vec::new();
    for convention in &patch::CONVENTIONS {
        let Some(annotation) = pod["metadata"]["annotations"][convention.annotation].as_str()
        else {
            continue;
        };
        let names = patch::import_names(annotation);
        let secrets = secrets_of(host, namespace, &names, convention.groups)
            .await
            .map_err(|e| format!("looking up the ServiceAccountImports failed: {e}"))?;
        let more = patch::mount_patch_with(convention, &pod, namespace, &names, &secrets)?;
        pod = patch::applied(&pod, &more)?;
        ops.extend(more);
    }
    Ok(ops)
}

/// The Secret name of each named import that exists in one of `groups` (first match):
/// its status's, or the default `<import>-kubeconfig` before its first token.
async fn secrets_of(
    host: &Client,
    namespace: &str,
    names: &[String],
    groups: &[ImportGroup],
) -> Result<BTreeMap<String, String>, kube::Error> {
    let mut secrets = BTreeMap::new();
    for name in names {
        for group in groups {
            let api: Api<AnyImport> =
                Api::namespaced_with(host.clone(), namespace, &group.api_resource());
            let found = match api.get_opt(name).await {
                Ok(found) => found,
                // Admiralty's CRD need not be installed.
                Err(kube::Error::Api(s)) if s.code == 404 => None,
                Err(e) => return Err(e),
            };
            if let Some(import) = found {
                let secret = import
                    .status
                    .and_then(|s| s.secret_name)
                    .unwrap_or_else(|| format!("{name}-kubeconfig"));
                secrets.insert(name.clone(), secret);
                break;
            }
        }
    }
    Ok(secrets)
}
