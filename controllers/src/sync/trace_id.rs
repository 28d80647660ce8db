//! The trace id of a reconcile in its log lines. With traces exported (the binary's
//! `--otlp-endpoint`), every `tracing` span also has an OpenTelemetry span; the reconcile
//! span's `trace_id` field carries its trace's id, so each log line of the reconcile names
//! the trace to look up. It reads the id only; the exporter is the binary's.

use opentelemetry::trace::TraceContextExt as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Records the trace id of `span` in its `trace_id` field. Without an exporting layer the
/// span has no OpenTelemetry context (one failed downcast) and nothing is recorded.
pub(super) fn record(span: &tracing::Span) {
    let cx = span.context();
    let otel = cx.span();
    let ids = otel.span_context();
    if ids.is_valid() {
        span.record("trace_id", tracing::field::display(ids.trace_id()));
    }
}
