//! Propagation traces received on a real OTLP endpoint: the test starts an OTLP/HTTP
//! receiver on a loopback port (it decodes the protobuf export requests with the
//! opentelemetry-proto messages and answers as a collector does), runs the real
//! `flotilla controller-manager` with `--otlp-endpoint` pointing at it, propagates one
//! FederatedConfigMap to two real member clusters, and finds one trace holding the
//! reconcile span and a member-write span per member, each naming the object, under the
//! host watch event that queued the reconcile (the trace's root); the trace id is in the
//! controller-manager's log lines.

use std::{
    net::SocketAddr,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context as _, ensure};
use bytes::Bytes;
use flotilla_tests::{
    flotilla_binary, init_tracing, member::config_map_data, objects::FederatedObject,
    setup::federation_with_namespace, wait_for,
};
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::{
    collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse},
    common::v1::{AnyValue, KeyValue, any_value},
    trace::v1::Span,
};
use prost::Message as _;
use serde_json::json;
use tokio::net::TcpListener;

const NS: &str = "traced";
const NAME: &str = "settings";
const T: Duration = Duration::from_secs(60);

/// Every span received, with the service name of its resource.
type Received = Arc<Mutex<Vec<(String, Span)>>>;

/// An OTLP/HTTP (protobuf) traces receiver on a loopback port.
struct Receiver {
    addr: SocketAddr,
    spans: Received,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let spans = Received::default();
        let store = spans.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let store = store.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| export(store.clone(), req));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Receiver { addr, spans, task })
    }

    fn spans(&self) -> Vec<(String, Span)> {
        self.spans.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One OTLP export request: `POST /v1/traces` with an `ExportTraceServiceRequest`.
async fn export(
    store: Received,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let reply = |status: u16, body: Vec<u8>| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or_default();
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/x-protobuf"),
        );
        r
    };
    if req.method() != http::Method::POST || req.uri().path() != "/v1/traces" {
        return Ok(reply(404, Vec::new()));
    }
    let body = req.into_body().collect().await?.to_bytes();
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return Ok(reply(400, Vec::new()));
    };
    if let Ok(mut spans) = store.lock() {
        for resource in request.resource_spans {
            let attributes = resource.resource.map(|r| r.attributes).unwrap_or_default();
            let service = string_attribute(&attributes, "service.name").unwrap_or_default();
            for scope in resource.scope_spans {
                spans.extend(scope.spans.into_iter().map(|s| (service.clone(), s)));
            }
        }
    }
    Ok(reply(
        200,
        ExportTraceServiceResponse::default().encode_to_vec(),
    ))
}

fn string_attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match &kv.value {
            Some(AnyValue {
                value: Some(any_value::Value::StringValue(s)),
            }) => Some(s.clone()),
            _ => None,
        })
}

fn attr(span: &Span, key: &str) -> Option<String> {
    string_attribute(&span.attributes, key)
}

/// The trace of the reconcile that wrote `NAME` to both members: its reconcile span and
/// its member-write spans, by cluster.
fn propagation_trace(spans: &[(String, Span)]) -> anyhow::Result<(Span, Vec<Span>)> {
    let reconciles = spans
        .iter()
        .filter(|(_, s)| s.name == "reconcile" && attr(s, "name").as_deref() == Some(NAME));
    for (_, reconcile) in reconciles {
        let writes: Vec<Span> = spans
            .iter()
            .map(|(_, s)| s)
            .filter(|s| s.trace_id == reconcile.trace_id && s.name == "member_write")
            .cloned()
            .collect();
        let clusters: Vec<String> = writes.iter().filter_map(|s| attr(s, "cluster")).collect();
        if clusters.iter().any(|c| c == "member1") && clusters.iter().any(|c| c == "member2") {
            return Ok((reconcile.clone(), writes));
        }
    }
    let names: Vec<(String, Option<String>)> = spans
        .iter()
        .map(|(_, s)| (s.name.clone(), attr(s, "name")))
        .collect();
    anyhow::bail!(
        "no trace with a reconcile of {NAME} and a write to each member; spans: {names:?}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_propagation_is_one_trace_with_a_reconcile_and_a_member_write_per_member()
-> anyhow::Result<()> {
    init_tracing();
    let receiver = Receiver::start().await?;
    let mut fed = federation_with_namespace(2, NS).await?;
    if let Some(cp) = fed.control_plane.take() {
        cp.shutdown().await;
    }
    let log_path = fed.env.dir().join("controller-manager.log");
    let log = std::fs::File::create(&log_path)?;
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let mut manager = tokio::process::Command::new(flotilla_binary()?)
        .arg("--kubeconfig")
        .arg(fed.env.kubeconfig_path())
        .args(["--context", "host", "controller-manager"])
        .args(["--metrics-addr", &metrics.to_string()])
        .args(["--otlp-endpoint", &format!("http://{}", receiver.addr)])
        .args(["--identity", "traces-test", "--lease-duration", "4s"])
        .args(["--renew-deadline", "3s", "--retry-period", "1s"])
        // The status write logs at debug inside the reconcile span: a line with its trace id.
        .env("RUST_LOG", "info,flotilla_controllers::sync::status=debug")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("starting the controller-manager")?;
    let result = scenario(&fed, &receiver, &log_path).await;
    if result.is_err() {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        eprintln!("controller-manager log:\n{text}");
    }
    manager.kill().await.ok();
    result
}

/// Applies a FederatedConfigMap `name` on both members and waits for both copies.
async fn propagate(fed: &flotilla_tests::federation::Federation, name: &str) -> anyhow::Result<()> {
    FederatedObject::config_map(NS, name, json!({"k": "v"}))
        .on_clusters(&["member1", "member2"])
        .apply(&fed.host)
        .await?;
    for member in &fed.members {
        wait_for(T, &format!("ConfigMap {name} in each member"), || async {
            let data = config_map_data(member, NS, name).await?;
            ensure!(data.is_some_and(|d| d.get("k").is_some_and(|v| v == "v")));
            Ok(())
        })
        .await?;
    }
    Ok(())
}

async fn scenario(
    fed: &flotilla_tests::federation::Federation,
    receiver: &Receiver,
    log_path: &std::path::Path,
) -> anyhow::Result<()> {
    flotilla_tests::host::wait_lease_holder(T, &fed.host, "traces-test").await?;
    // A first object warms the member caches: while a member's cache still lists, a
    // reconcile writes to the others only and the listing member's write comes in a later
    // reconcile (a trace of its own).
    propagate(fed, "warm-up").await?;
    propagate(fed, NAME).await?;
    // The batch exporter sends every few seconds.
    let (reconcile, writes) = wait_for(T, "the propagation's trace", || async {
        propagation_trace(&receiver.spans())
    })
    .await?;
    let spans = receiver.spans();
    let services: Vec<&String> = spans.iter().map(|(service, _)| service).collect();
    ensure!(
        services.iter().all(|s| *s == "flotilla-controller-manager"),
        "{services:?}"
    );
    ensure!(attr(&reconcile, "namespace").as_deref() == Some(NS));
    ensure!(attr(&reconcile, "kind").as_deref() == Some("FederatedConfigMap"));
    for write in &writes {
        ensure!(write.parent_span_id == reconcile.span_id, "{write:?}");
        ensure!(attr(write, "name").as_deref() == Some(NAME), "{write:?}");
        ensure!(
            attr(write, "operation").as_deref() == Some("create"),
            "{write:?}"
        );
    }
    // The reconcile's parent is the host watch event that queued it, the trace's root.
    wait_for(T, "the host event at the root of the trace", || async {
        let spans = receiver.spans();
        let event = spans
            .iter()
            .map(|(_, s)| s)
            .find(|s| s.span_id == reconcile.parent_span_id)
            .context("no span is the reconcile's parent yet")?;
        ensure!(event.name == "host_event", "{event:?}");
        ensure!(event.trace_id == reconcile.trace_id, "{event:?}");
        ensure!(event.parent_span_id.is_empty(), "not a root: {event:?}");
        ensure!(attr(event, "name").as_deref() == Some(NAME), "{event:?}");
        ensure!(
            attr(event, "kind").as_deref() == Some("FederatedConfigMap"),
            "{event:?}"
        );
        ensure!(event.start_time_unix_nano <= reconcile.start_time_unix_nano);
        Ok(())
    })
    .await?;
    wait_for(T, "a status write of the object", || async {
        let spans = receiver.spans();
        let status = spans
            .iter()
            .map(|(_, s)| s)
            .find(|s| s.name == "status_write" && attr(s, "name").as_deref() == Some(NAME));
        let status = status.context("no status_write span yet")?;
        let parent = spans
            .iter()
            .map(|(_, s)| s)
            .find(|s| s.span_id == status.parent_span_id);
        ensure!(parent.is_some_and(|p| p.name == "reconcile"), "{status:?}");
        Ok(())
    })
    .await?;
    let trace_id = hex::encode(&reconcile.trace_id);
    wait_for(T, "the trace id in the log lines", || async {
        let text = std::fs::read_to_string(log_path)?;
        ensure!(
            text.contains(&format!("trace_id={trace_id}")),
            "{trace_id} not logged"
        );
        Ok(())
    })
    .await?;
    Ok(())
}
