//! The dashboard's HTTP server on hyper: GET only, read-only. `/` (overview), `/object`
//! (one object), `/policies` (propagation and override policies), `?fragment=1` for the
//! live part alone, `/api/overview`, `/api/object` and `/api/policies` (the same view
//! models as JSON), `/events` (server-sent events, [`super::sse`]),
//! `/app.js`, `/app.css`, `/healthz`. A strict Content-Security-Policy; on a loopback
//! address, requests naming another host are refused (DNS rebinding). With a [`Guard`] (a
//! non-loopback address), every other path needs a bearer token of the host cluster, and
//! pages show only what its RBAC lets the caller read ([`super::access`]).

use std::{collections::BTreeSet, convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::query::query_pairs;

use super::{
    access::{self, CheckKey},
    html, sse,
    state::{ObjectKey, Shared, State},
    view::{object::object_view, overview, policies::policies},
};
use flotilla_multicluster::http::auth::{Authenticator, Denial};

/// The authentication of a dashboard reachable from elsewhere.
#[derive(Clone)]
pub struct Guard {
    /// Reviews tokens and reads against the host API server.
    pub auth: Arc<Authenticator>,
    /// The control-plane namespace (where the KubeFedClusters are).
    pub kubefed_ns: String,
}

/// How long a client may take to send its request head.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
const HTML: &str = "text/html; charset=utf-8";
const JSON: &str = "application/json";
const CSP: &str = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// An answer other than the event stream.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: StatusCode,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

fn ok(content_type: &'static str, body: String) -> Response {
    Response {
        status: StatusCode::OK,
        content_type,
        body,
    }
}

fn json(value: &impl serde::Serialize) -> Response {
    match serde_json::to_string(value) {
        Ok(body) => ok(JSON, body),
        Err(e) => Response {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            content_type: "text/plain; charset=utf-8",
            body: format!("cannot encode: {e}\n"),
        },
    }
}

fn object_key(query: &str) -> ObjectKey {
    let mut key = ObjectKey {
        namespace: String::new(),
        kind: String::new(),
        name: String::new(),
    };
    for (k, v) in query_pairs(query) {
        match k.as_str() {
            "ns" => key.namespace = v,
            "kind" => key.kind = v,
            "name" => key.name = v,
            _ => {}
        }
    }
    key
}

/// Answers `path?query` from the current state (every path but `/events`).
pub fn respond(shared: &Shared, path: &str, query: &str) -> Response {
    let version = shared.version();
    respond_in(&shared.read(), version, path, query)
}

/// Answers `path?query` from `state` (the whole state, or what one caller may see).
pub fn respond_in(state: &State, version: u64, path: &str, query: &str) -> Response {
    let fragment = query_pairs(query)
        .iter()
        .any(|(k, v)| k == "fragment" && v == "1");
    match path {
        "/" | "/api/overview" => {
            let o = overview::overview(state, &overview::Filter::from_query(query));
            match (path, fragment) {
                ("/api/overview", _) => json(&o),
                (_, true) => ok(HTML, html::overview::fragment(&o)),
                _ => ok(
                    HTML,
                    html::page(
                        "Flotilla",
                        version,
                        &html::overview::filters(&o),
                        &html::overview::fragment(&o),
                    ),
                ),
            }
        }
        "/object" | "/api/object" => {
            let key = object_key(query);
            let Some(v) = object_view(state, &key) else {
                let what = format!(
                    "No federated object {} {}/{}.",
                    key.kind, key.namespace, key.name
                );
                return Response {
                    status: StatusCode::NOT_FOUND,
                    content_type: HTML,
                    body: if fragment {
                        format!("<p>{}</p>", html::escape(&what))
                    } else {
                        html::not_found(version, &what)
                    },
                };
            };
            match (path, fragment) {
                ("/api/object", _) => json(&v),
                (_, true) => ok(HTML, html::object::fragment(&v)),
                _ => {
                    let title = format!("{} {}/{} — Flotilla", v.kind, v.namespace, v.name);
                    ok(
                        HTML,
                        html::page(&title, version, "", &html::object::fragment(&v)),
                    )
                }
            }
        }
        "/policies" | "/api/policies" => {
            let v = policies(state);
            match (path, fragment) {
                ("/api/policies", _) => json(&v),
                (_, true) => ok(HTML, html::policies::fragment(&v)),
                _ => ok(
                    HTML,
                    html::page(
                        "Policies — Flotilla",
                        version,
                        "",
                        &html::policies::fragment(&v),
                    ),
                ),
            }
        }
        "/app.js" => ok("text/javascript; charset=utf-8", html::SCRIPT.to_owned()),
        "/app.css" => ok("text/css; charset=utf-8", html::STYLE.to_owned()),
        "/healthz" => ok("text/plain; charset=utf-8", "ok\n".to_owned()),
        _ => Response {
            status: StatusCode::NOT_FOUND,
            content_type: HTML,
            body: html::not_found(version, &format!("No page {path}.")),
        },
    }
}

/// Whether a request with this `Host` may be answered by a server bound to `local`: on
/// loopback only loopback names (a page elsewhere cannot rebind a name to it).
pub fn host_allowed(local: &SocketAddr, host: Option<&str>) -> bool {
    if !local.ip().is_loopback() {
        return true;
    }
    let Some(host) = host else { return false };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if !name.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    matches!(name, "localhost" | "127.0.0.1" | "[::1]") || name.starts_with("127.")
}

type Body = UnsyncBoxBody<Bytes, Infallible>;

fn with_headers(
    mut response: http::Response<Body>,
    content_type: &'static str,
) -> http::Response<Body> {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// Paths anyone who reaches the server may fetch: no data in them.
fn public(path: &str) -> bool {
    matches!(path, "/app.js" | "/app.css" | "/healthz")
}

/// The state `request`'s caller may see, after authenticating it; `None` for `/events` (it
/// carries only a version number: authentication is enough).
async fn authorised(
    shared: &Shared,
    guard: &Guard,
    request: &Request<hyper::body::Incoming>,
) -> Result<Option<State>, Denial> {
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok());
    let user = guard.auth.authenticate(header).await?;
    let path = request.uri().path();
    let (checks, first_required) = {
        let state = shared.read();
        match path {
            "/events" => return Ok(None),
            "/object" | "/api/object" => {
                let key = object_key(request.uri().query().unwrap_or_default());
                match access::page_checks(&state, &key, &guard.kubefed_ns) {
                    Some(checks) => (checks, true),
                    None => (Vec::new(), false),
                }
            }
            "/policies" | "/api/policies" => (
                access::policies_checks(&state, &guard.kubefed_ns)
                    .into_iter()
                    .map(|k| k.0)
                    .collect(),
                false,
            ),
            _ => (
                access::overview_checks(&state, &guard.kubefed_ns)
                    .into_iter()
                    .map(|k| k.0)
                    .collect(),
                false,
            ),
        }
    };
    if first_required && let Some(object) = checks.first() {
        guard.auth.require(&user, object).await?;
    }
    let answers = futures::future::join_all(checks.iter().map(|c| guard.auth.allowed(&user, c)));
    let mut allowed = BTreeSet::new();
    for (check, answer) in checks.iter().zip(answers.await) {
        if answer? {
            allowed.insert(CheckKey(check.clone()));
        }
    }
    Ok(Some(access::visible(
        &shared.read(),
        &guard.kubefed_ns,
        &allowed,
    )))
}

fn refusal(denial: &Denial) -> http::Response<Body> {
    let body = Full::new(Bytes::from(denial.message())).boxed_unsync();
    let mut r = http::Response::new(body);
    *r.status_mut() = denial.status();
    if denial.status() == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"flotilla-dashboard\""),
        );
    }
    with_headers(r, "text/plain; charset=utf-8")
}

async fn answer(
    shared: &Shared,
    local: &SocketAddr,
    request: &Request<hyper::body::Incoming>,
    cancel: &CancellationToken,
    guard: Option<&Guard>,
) -> http::Response<Body> {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    let refused = |status: StatusCode, text: &'static str| {
        let mut r =
            http::Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed_unsync());
        *r.status_mut() = status;
        with_headers(r, "text/plain; charset=utf-8")
    };
    if !host_allowed(local, host) {
        return refused(
            StatusCode::FORBIDDEN,
            "this dashboard answers only to localhost\n",
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return refused(StatusCode::METHOD_NOT_ALLOWED, "read-only: GET only\n");
    }
    let path = request.uri().path();
    let seen = match guard.filter(|_| !public(path)) {
        None => None,
        Some(guard) => match authorised(shared, guard, request).await {
            Ok(seen) => seen,
            Err(denial) => return refusal(&denial),
        },
    };
    if path == "/events" {
        let body = StreamBody::new(sse::stream(shared.subscribe(), cancel.clone())).boxed_unsync();
        let mut response = with_headers(http::Response::new(body), "text/event-stream");
        response
            .headers_mut()
            .insert("x-accel-buffering", HeaderValue::from_static("no"));
        return response;
    }
    let query = request.uri().query().unwrap_or_default();
    let r = match &seen {
        Some(state) => respond_in(state, shared.version(), path, query),
        None => respond(shared, path, query),
    };
    let mut response = http::Response::new(Full::new(Bytes::from(r.body)).boxed_unsync());
    *response.status_mut() = r.status;
    with_headers(response, r.content_type)
}

async fn handle(
    stream: TcpStream,
    local: SocketAddr,
    shared: Shared,
    cancel: CancellationToken,
    guard: Option<Guard>,
) {
    let stop = cancel.clone();
    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
        let (shared, cancel, guard) = (shared.clone(), cancel.clone(), guard.clone());
        async move {
            let response = answer(&shared, &local, &request, &cancel, guard.as_ref()).await;
            Ok::<_, Infallible>(response)
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        served = connection => if let Err(error) = served {
            debug!(%error, "serving a dashboard connection failed");
        },
        _ = stop.cancelled() => {}
    }
}

/// Binds `addr` and serves `shared` until `cancel` fires (authenticating every request
/// with `guard` when there is one); returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    shared: Shared,
    cancel: CancellationToken,
    guard: Option<Guard>,
) -> std::io::Result<SocketAddr> {
    let stop = cancel.clone();
    flotilla_multicluster::http::listen(addr, "dashboard", cancel, move |stream, local| {
        handle(stream, local, shared.clone(), stop.clone(), guard.clone())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::overview::tests::state;

    #[test]
    fn pages_fragments_and_json_come_from_the_same_view() {
        let shared = Shared::new(state(2));
        let page = respond(&shared, "/", "");
        assert_eq!(page.status, StatusCode::OK);
        assert!(page.body.starts_with("<!doctype html>"));
        let fragment = respond(&shared, "/", "problems=1&fragment=1");
        assert!(!fragment.body.contains("<!doctype"));
        assert!(fragment.body.contains("ApplyOverridesFailed"));
        let api = respond(&shared, "/api/overview", "problems=1");
        let doc: serde_json::Value = serde_json::from_str(&api.body).expect("json");
        assert_eq!(doc["matched"], 1);
        assert_eq!(doc["rows"][0]["cells"][1]["reason"], "ApplyOverridesFailed");
        let missing = respond(&shared, "/object", "ns=x&kind=Y&name=z");
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
        assert!(missing.body.contains("No federated object Y x/z."));
    }

    #[test]
    fn the_policies_page_its_fragment_and_json_come_from_one_view() {
        let shared = Shared::new(crate::view::policies::tests::state());
        let page = respond(&shared, "/policies", "");
        assert_eq!(page.status, StatusCode::OK);
        assert!(page.body.starts_with("<!doctype html>"));
        assert!(page.body.contains("LostToPolicy"));
        let fragment = respond(&shared, "/policies", "fragment=1");
        assert!(!fragment.body.contains("<!doctype"));
        let api = respond(&shared, "/api/policies", "");
        let doc: serde_json::Value = serde_json::from_str(&api.body).expect("json");
        assert_eq!(doc["rows"][1]["reference"], "PropagationPolicy/shop/web");
        assert_eq!(doc["rows"][1]["selected_count"], 2);
    }

    #[test]
    fn a_loopback_server_answers_only_to_loopback_names() {
        let local: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
        assert!(host_allowed(&local, Some("127.0.0.1:8080")));
        assert!(host_allowed(&local, Some("localhost:8080")));
        assert!(host_allowed(&local, Some("[::1]:8080")));
        assert!(!host_allowed(&local, Some("evil.example:8080")));
        assert!(!host_allowed(&local, None));
        let any: SocketAddr = "0.0.0.0:8080".parse().expect("addr");
        assert!(host_allowed(&any, Some("dashboard.internal")));
    }
}
