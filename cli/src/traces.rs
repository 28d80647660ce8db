//! Propagation traces: with an OTLP endpoint configured, the `tracing` spans of the
//! controller-manager (a reconcile, each member write, the status write) are also exported
//! as OpenTelemetry spans over OTLP/HTTP (protobuf), in batches from a background thread.
//! Without one no OpenTelemetry layer is installed at all: the spans cost what they cost
//! the log lines (docs/operations.md, "Traces"). It owns the exporter set-up only; which
//! spans exist is the controllers' business.

use anyhow::Context as _;
use opentelemetry::{KeyValue, trace::TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetryLayer;

/// The service name of the exported spans.
const SERVICE: &str = "flotilla-controller-manager";

/// The OTLP/HTTP traces URL of an endpoint given as OTLP's base URL
/// (`http://collector:4318`, as in `OTEL_EXPORTER_OTLP_ENDPOINT`); a URL that already names
/// the traces path is kept.
pub fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

/// The exporter of a running process; flushes what is still batched when shut down.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Starts exporting to `endpoint` (OTLP's base URL); the layer that feeds the exporter.
    pub fn start<S>(endpoint: &str) -> anyhow::Result<(Self, OpenTelemetryLayer<S, Tracer>)>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        let url = traces_url(endpoint);
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(&url)
            .build()
            .with_context(|| format!("the OTLP exporter to {url}"))?;
        let resource = Resource::builder()
            .with_attributes([KeyValue::new("service.name", SERVICE)])
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("flotilla");
        let layer = tracing_opentelemetry::layer().with_tracer(tracer);
        Ok((Traces { provider }, layer))
    }

    /// Sends the spans still batched and stops the exporter. It blocks (the exporter's
    /// thread answers), so async callers run it with `spawn_blocking`.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("warning: flushing the last traces failed: {e}");
        }
    }
}

/// The tracer type of the exporting layer.
pub type Tracer = opentelemetry_sdk::trace::Tracer;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_endpoint_gets_the_traces_path_and_a_full_one_is_kept() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/v1/traces"),
            "http://collector:4318/v1/traces"
        );
    }
}
