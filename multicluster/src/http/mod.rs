//! `/metrics`, `/healthz` (and `/livez`) and `/readyz` over HTTP/1.1 on hyper: GET or HEAD,
//! one request per connection (`Connection: close`). Enough for Prometheus and kubelet
//! probes without a web framework; shared by the controller-manager, the dashboard and the
//! pull agent. What each path answers is decided by [`respond`]; this module owns no
//! metric (the caller's [`MetricsText`] renders them) and no readiness decision of its own. On a non-loopback address
//! `/metrics` needs a bearer token allowed `get` on the non-resource URL `/metrics` (as
//! Kubernetes' own components and kube-rbac-proxy ask); the probes stay open, since the
//! kubelet sends no token.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Empty, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

pub mod auth;

use self::auth::{Authenticator, Check, Denial};

/// How long a client may take to send its request head.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Content type of the OpenMetrics text format.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of every other answer.
const TEXT: &str = "text/plain; charset=utf-8";

/// Renders the metrics page (OpenMetrics text, ending in `# EOF`).
pub trait MetricsText: Send + Sync {
    /// The page served at `/metrics`.
    fn encode(&self) -> String;
}

/// What the probes report.
#[derive(Debug, Default)]
pub struct Health {
    ready: AtomicBool,
    leading: AtomicBool,
    /// No leader election: `/readyz` names no role.
    solo: bool,
    problem: Mutex<Option<String>>,
}

impl Health {
    /// Health of a process that runs without leader election (`/readyz` answers `ok`).
    pub fn solo() -> Self {
        Health {
            solo: true,
            ..Health::default()
        }
    }

    /// Records whether this instance runs the controllers (holds the Lease) or stands by;
    /// `/readyz` says which.
    pub fn set_leading(&self, leading: bool) {
        self.leading.store(leading, Ordering::Release);
    }

    /// Whether this instance runs the controllers.
    pub fn is_leading(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    /// Marks the process ready (or not) for `/readyz`.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Records why the process is not ready (`None`: no known reason); `/readyz` shows it.
    pub fn set_problem(&self, problem: Option<String>) {
        *self.problem.lock().unwrap_or_else(|e| e.into_inner()) = problem;
    }

    /// Why the process is not ready, when known.
    pub fn problem(&self) -> Option<String> {
        self.problem
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Who may read `/metrics`.
#[derive(Clone)]
pub enum MetricsAccess {
    /// Anyone (loopback, or authentication turned off).
    Open,
    /// Callers the host's authenticator allows; until it is set (the host not reached yet)
    /// `/metrics` answers 503.
    Authenticated(Arc<OnceLock<Arc<Authenticator>>>),
}

/// A response: status code, content type, body.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    /// HTTP status code.
    pub status: StatusCode,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

fn text(status: StatusCode, body: &str) -> Response {
    Response {
        status,
        content_type: TEXT,
        body: body.to_owned(),
    }
}

/// Answers a request for `path` (without its query).
pub fn respond(
    method: &Method,
    path: &str,
    metrics: &dyn MetricsText,
    health: &Health,
) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    match path {
        "/metrics" => Response {
            status: StatusCode::OK,
            content_type: OPENMETRICS,
            body: metrics.encode(),
        },
        "/healthz" | "/livez" => text(StatusCode::OK, "ok\n"),
        "/readyz" if health.is_ready() && health.solo => text(StatusCode::OK, "ok\n"),
        // Both roles are ready (a standby must stay in the Service to take over); the body
        // says which one this instance plays.
        "/readyz" if health.is_ready() && health.is_leading() => {
            text(StatusCode::OK, "ok: leader\n")
        }
        "/readyz" if health.is_ready() => text(StatusCode::OK, "ok: standby\n"),
        "/readyz" => match health.problem() {
            Some(problem) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("not ready: {problem}\n"),
            ),
            None => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

impl Response {
    /// The hyper response (hyper leaves the body out for HEAD).
    fn into_http(self) -> http::Response<Full<Bytes>> {
        let mut response = http::Response::new(Full::new(Bytes::from(self.body)));
        *response.status_mut() = self.status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(self.content_type),
        );
        response
    }
}

/// `/metrics` on a server that authenticates: the caller's token must allow `get /metrics`.
async fn metrics_allowed(
    auth: &Authenticator,
    request: &Request<hyper::body::Incoming>,
) -> Result<(), Denial> {
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok());
    let user = auth.authenticate(header).await?;
    let check = Check::Path {
        verb: "get",
        path: "/metrics",
    };
    auth.require(&user, &check).await
}

async fn handle(
    stream: TcpStream,
    metrics: Arc<dyn MetricsText>,
    health: Arc<Health>,
    access: MetricsAccess,
) {
    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
        let (metrics, health, access) = (metrics.clone(), health.clone(), access.clone());
        async move {
            if let MetricsAccess::Authenticated(slot) = access
                && request.uri().path() == "/metrics"
            {
                let refused = match slot.get() {
                    None => Some(text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "not ready: /metrics is authenticated by the host, which is not reached yet\n",
                    )),
                    Some(auth) => metrics_allowed(auth, &request)
                        .await
                        .err()
                        .map(|denial| text(denial.status(), &denial.message())),
                };
                if let Some(refused) = refused {
                    return Ok::<_, Infallible>(refused.into_http());
                }
            }
            let response = respond(
                request.method(),
                request.uri().path(),
                metrics.as_ref(),
                &health,
            );
            Ok::<_, Infallible>(response.into_http())
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(error) = served {
        debug!(%error, "serving an HTTP connection failed");
    }
}

/// Binds `addr` and serves until `cancel` fires; `/metrics` is open to whom `access`
/// says. Returns the bound address (useful with port 0) once listening.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<dyn MetricsText>,
    health: Arc<Health>,
    access: MetricsAccess,
    cancel: CancellationToken,
) -> std::io::Result<SocketAddr> {
    listen(addr, "metrics/health", cancel, move |stream, _| {
        handle(stream, metrics.clone(), health.clone(), access.clone())
    })
    .await
}

/// Binds `addr` and, until `cancel` fires, hands every accepted connection (with the bound
/// address) to `serve_connection` on a task of its own; an accept error is logged as a
/// `what` connection and retried shortly. Returns the bound address (useful with port 0).
pub async fn listen<F, Fut>(
    addr: SocketAddr,
    what: &'static str,
    cancel: CancellationToken,
    serve_connection: F,
) -> std::io::Result<SocketAddr>
where
    F: Fn(TcpStream, SocketAddr) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = cancel.cancelled() => return,
                a = listener.accept() => a,
            };
            match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(serve_connection(stream, local));
                }
                Err(error) => {
                    warn!(%error, "accepting a {what} connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    Ok(local)
}

/// A minimal HTTP GET client for the endpoints above (used by tests and `dev`): returns
/// the status code and body.
pub async fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    request(addr, Method::GET, path)
        .await
        .map(|(status, _, body)| (status, body))
}

/// Sends one request; returns the status code, `Content-Type` and body.
async fn request(
    addr: SocketAddr,
    method: Method,
    path: &str,
) -> std::io::Result<(u16, String, String)> {
    let stream = TcpStream::connect(addr).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    let connection = tokio::spawn(connection);
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(std::io::Error::other)?;
    let response = sender
        .send_request(request)
        .await
        .map_err(std::io::Error::other)?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(std::io::Error::other)?
        .to_bytes();
    connection.abort();
    Ok((
        status,
        content_type,
        String::from_utf8_lossy(&body).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A fixed page.
    struct Page;

    impl MetricsText for Page {
        fn encode(&self) -> String {
            "# TYPE flotilla_clusters gauge\nflotilla_clusters 1\n# EOF\n".to_owned()
        }
    }

    async fn start(ready: bool) -> (SocketAddr, CancellationToken) {
        let health = Arc::new(Health::default());
        health.set_ready(ready);
        let cancel = CancellationToken::new();
        let addr = serve(
            "127.0.0.1:0".parse().expect("an address"),
            Arc::new(Page),
            health,
            MetricsAccess::Open,
            cancel.clone(),
        )
        .await
        .expect("binds");
        (addr, cancel)
    }

    /// Sends raw bytes and reads the whole answer (the server closes the connection).
    async fn raw(addr: SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.expect("connects");
        stream.write_all(request.as_bytes()).await.expect("writes");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("reads");
        answer
    }

    #[tokio::test]
    async fn probes_answer_ok_and_readyz_follows_health() {
        let (addr, _cancel) = start(false).await;
        let get = |path| request(addr, Method::GET, path);
        let ok = (200, TEXT.to_owned(), "ok\n".to_owned());
        assert_eq!(get("/healthz").await.expect("answers"), ok);
        assert_eq!(get("/livez").await.expect("answers"), ok);
        let not_ready = (503, TEXT.to_owned(), "not ready\n".to_owned());
        assert_eq!(get("/readyz").await.expect("answers"), not_ready);
        let (addr, _cancel) = start(true).await;
        let ready = request(addr, Method::GET, "/readyz?verbose").await;
        let standby = (200, TEXT.to_owned(), "ok: standby\n".to_owned());
        assert_eq!(ready.expect("answers"), standby);
    }

    #[test]
    fn readyz_says_whether_the_instance_leads_or_stands_by() {
        let metrics = Page;
        let health = Health::default();
        health.set_ready(true);
        let body = |h: &Health| respond(&Method::GET, "/readyz", &metrics, h).body;
        assert_eq!(body(&health), "ok: standby\n");
        health.set_leading(true);
        assert_eq!(body(&health), "ok: leader\n");
        let solo = Health::solo();
        solo.set_ready(true);
        assert_eq!(body(&solo), "ok\n");
    }

    #[test]
    fn readyz_says_why_the_instance_is_not_ready() {
        let metrics = Page;
        let health = Health::default();
        health.set_problem(Some("CertificateNotTrusted: UnknownIssuer".into()));
        let answer = respond(&Method::GET, "/readyz", &metrics, &health);
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            answer.body,
            "not ready: CertificateNotTrusted: UnknownIssuer\n"
        );
    }

    #[tokio::test]
    async fn authenticated_metrics_wait_for_the_host() {
        let cancel = CancellationToken::new();
        let access = MetricsAccess::Authenticated(Arc::default());
        let addr = serve(
            "127.0.0.1:0".parse().expect("an address"),
            Arc::new(Page),
            Arc::new(Health::default()),
            access,
            cancel.clone(),
        )
        .await
        .expect("binds");
        let (status, _, body) = request(addr, Method::GET, "/metrics")
            .await
            .expect("answers");
        assert_eq!(status, 503, "{body}");
        let (status, _, _) = request(addr, Method::GET, "/healthz")
            .await
            .expect("answers");
        assert_eq!(status, 200);
    }

    #[tokio::test]
    async fn metrics_are_served_in_the_openmetrics_format() {
        let (addr, _cancel) = start(true).await;
        let (status, content_type, body) = request(addr, Method::GET, "/metrics")
            .await
            .expect("answers");
        assert_eq!((status, content_type.as_str()), (200, OPENMETRICS));
        assert!(body.contains("flotilla_clusters"), "{body}");
        assert!(body.ends_with("# EOF\n"), "{body}");
    }

    #[tokio::test]
    async fn unknown_paths_and_other_methods_are_refused() {
        let (addr, _cancel) = start(true).await;
        let nope = request(addr, Method::GET, "/nope").await.expect("answers");
        assert_eq!(nope, (404, TEXT.to_owned(), "not found\n".to_owned()));
        let post = request(addr, Method::POST, "/metrics")
            .await
            .expect("answers");
        assert_eq!(
            post,
            (405, TEXT.to_owned(), "method not allowed\n".to_owned())
        );
    }

    #[tokio::test]
    async fn head_gets_the_headers_without_a_body_and_the_connection_closes() {
        let (addr, _cancel) = start(true).await;
        let answer = raw(addr, "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        let head = head.to_ascii_lowercase();
        assert!(head.contains("content-length: 3"), "{head}");
        assert!(head.contains("connection: close"), "{head}");
        assert_eq!(body, "");
    }

    #[tokio::test]
    async fn a_malformed_request_gets_400() {
        let (addr, _cancel) = start(true).await;
        let answer = raw(addr, "nonsense\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    }

    #[tokio::test]
    async fn the_server_stops_when_cancelled() {
        let (addr, cancel) = start(true).await;
        assert_eq!(get(addr, "/healthz").await.expect("answers").0, 200);
        cancel.cancel();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(get(addr, "/healthz").await.is_err());
    }
}
