//! A tiny HTTP/1.1 responder for `/metrics`, `/healthz` and `/readyz`: one request per
//! connection, GET or HEAD, `Connection: close`. Enough for Prometheus and kubelet probes
//! without a web framework.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::metrics::Metrics;

/// Largest request head accepted.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Content type of the OpenMetrics text format.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the probes report.
#[derive(Debug, Default)]
pub struct Health {
    ready: AtomicBool,
}

impl Health {
    /// Marks the process ready (or not) for `/readyz`.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

/// A response: status code, content type, body.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

fn text(status: u16, body: &str) -> Response {
    Response {
        status,
        content_type: "text/plain; charset=utf-8",
        body: body.to_owned(),
    }
}

/// Answers one request line (`GET /metrics HTTP/1.1`).
pub fn respond(request_line: &str, metrics: &Metrics, health: &Health) -> Response {
    let mut parts = request_line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return text(400, "bad request\n");
    };
    if method != "GET" && method != "HEAD" {
        return text(405, "method not allowed\n");
    }
    let path = target.split('?').next().unwrap_or(target);
    match path {
        "/metrics" => Response {
            status: 200,
            content_type: OPENMETRICS,
            body: metrics.encode(),
        },
        "/healthz" | "/livez" => text(200, "ok\n"),
        "/readyz" if health.is_ready() => text(200, "ok\n"),
        "/readyz" => text(503, "not ready\n"),
        _ => text(404, "not found\n"),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

async fn handle(mut stream: TcpStream, metrics: Arc<Metrics>, health: Arc<Health>) {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(READ_TIMEOUT, async {
        loop {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
            if head.windows(4).any(|w| w == b"\r\n\r\n") || head.len() > MAX_HEAD {
                break;
            }
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
    if !matches!(read, Ok(Ok(()))) {
        return;
    }
    let head = String::from_utf8_lossy(&head);
    let line = head.lines().next().unwrap_or("");
    let response = respond(line, &metrics, &health);
    let is_head = line.starts_with("HEAD ");
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    )
    .into_bytes();
    if !is_head {
        out.extend_from_slice(response.body.as_bytes());
    }
    if let Err(error) = stream.write_all(&out).await {
        debug!(%error, "writing an HTTP response failed");
    }
    let _ = stream.shutdown().await;
}

/// Binds `addr` and serves until `cancel` fires. Returns the bound address (useful with
/// port 0) once listening.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    cancel: CancellationToken,
) -> std::io::Result<SocketAddr> {
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
                    tokio::spawn(handle(stream, metrics.clone(), health.clone()));
                }
                Err(error) => {
                    warn!(%error, "accepting a metrics/health connection failed");
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
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_and_metrics_answer_by_path() {
        let metrics = Metrics::new();
        let health = Health::default();
        assert_eq!(
            respond("GET /healthz HTTP/1.1", &metrics, &health).status,
            200
        );
        assert_eq!(
            respond("GET /readyz HTTP/1.1", &metrics, &health).status,
            503
        );
        health.set_ready(true);
        assert_eq!(
            respond("GET /readyz?verbose HTTP/1.1", &metrics, &health).status,
            200
        );
        let m = respond("GET /metrics HTTP/1.1", &metrics, &health);
        assert_eq!(m.status, 200);
        assert!(m.body.contains("flotilla_clusters"), "{}", m.body);
        assert_eq!(respond("GET /nope HTTP/1.1", &metrics, &health).status, 404);
        assert_eq!(
            respond("POST /metrics HTTP/1.1", &metrics, &health).status,
            405
        );
        assert_eq!(respond("", &metrics, &health).status, 400);
    }

    #[tokio::test]
    async fn the_server_answers_over_tcp_and_stops_when_cancelled() {
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(Health::default());
        health.set_ready(true);
        let cancel = CancellationToken::new();
        let addr = serve(
            "127.0.0.1:0".parse().expect("an address"),
            metrics,
            health,
            cancel.clone(),
        )
        .await
        .expect("binds");
        let (status, body) = get(addr, "/readyz").await.expect("answers");
        assert_eq!((status, body.as_str()), (200, "ok\n"));
        let (status, body) = get(addr, "/metrics").await.expect("answers");
        assert_eq!(status, 200);
        assert!(body.contains("# EOF"), "{body}");
        cancel.cancel();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(get(addr, "/healthz").await.is_err());
    }
}
