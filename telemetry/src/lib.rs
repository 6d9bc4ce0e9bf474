//! Logging and tracing for the swarm binaries: `fmt` logs (pretty or JSON,
//! filtered by `RUST_LOG`), OTLP/gRPC span export when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, and W3C `traceparent` strings for
//! carrying a span's context across processes (the Assign message, the
//! worker's `TRACEPARENT`).
//!
//! Without the variable no OpenTelemetry layer is installed, nothing is
//! exported, and [`traceparent`] returns `None`.

use std::collections::HashMap;
use std::time::SystemTime;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

pub const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// Flushes and stops the exporter (if any) when shut down or dropped.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// Installs the global subscriber for `service` (`service.name`). Call from
/// within a Tokio runtime: the gRPC exporter's channel lives on it.
pub fn init(service: &'static str, json: bool) -> Result<Telemetry, String> {
    // Colour only for a person at a terminal: redirected to a file (local
    // mode's sidecar logs, a service manager's journal) escape codes are noise.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    install(service, json, std::io::stderr, ansi)
}

/// Like [`init`], with logs going to `writer` (a log file: no colours).
pub fn init_with_writer<W>(service: &'static str, json: bool, writer: W) -> Result<Telemetry, String>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    install(service, json, writer, false)
}

fn install<W>(service: &'static str, json: bool, writer: W, ansi: bool) -> Result<Telemetry, String>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let provider = match std::env::var(ENDPOINT_VAR) {
        Ok(v) if !v.trim().is_empty() => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .build()
                .map_err(|e| format!("OTLP exporter: {e}"))?;
            let resource = opentelemetry_sdk::Resource::builder().with_service_name(service).build();
            Some(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build())
        }
        _ => None,
    };
    if let Some(p) = &provider {
        // For the spans built directly (a swarm's root, its tasks), which
        // need the ids their children already name.
        opentelemetry::global::set_tracer_provider(p.clone());
    }
    let otel = provider.as_ref().map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer(service)));
    let fmt = tracing_subscriber::fmt::layer().with_writer(writer).with_ansi(ansi);
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    if json { registry.with(fmt.json()).try_init() } else { registry.with(fmt).try_init() }
        .map_err(|e| format!("installing the tracing subscriber: {e}"))?;
    Ok(Telemetry { provider })
}

impl Telemetry {
    /// Exports what is buffered and stops the exporter. Blocks: call it
    /// where blocking is fine (e.g. `spawn_blocking`).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(p) = self.provider.take()
            && let Err(e) = p.shutdown()
        {
            eprintln!("telemetry: flushing spans failed: {e}");
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The W3C `traceparent` of `span`, when spans are being exported.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove("traceparent")
}

/// Makes `span` (not yet entered) a child of the remote span in
/// `traceparent`; false if the string is not a valid traceparent or spans
/// are not exported.
pub fn set_parent(span: &tracing::Span, traceparent: &str) -> bool {
    let carrier = HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid() && span.set_parent(cx).is_ok()
}

/// The `traceparent` of a span that continues the swarm's trace: one swarm
/// is one trace (its id derived from the swarm id), and `span` becomes a
/// child of a span id derived from `parent_key` (e.g. the task id), so all
/// attempts of a task share a parent. When spans are not exported the
/// string still names the swarm's trace, with a span id derived from
/// `span_key`.
pub fn continue_swarm_trace(span: &tracing::Span, swarm: &str, parent_key: &str, span_key: &str) -> String {
    join_swarm_trace(span, swarm, parent_key);
    traceparent(span).unwrap_or_else(|| {
        format!("00-{}-{}-01", swarm_trace_id(swarm), SpanId::from_bytes(fnv1a(span_key, FNV_OFFSET)))
    })
}

/// [`continue_swarm_trace`] for work of the swarm as a whole (a merge
/// queue's verification of several tasks): `span` becomes a child of the
/// swarm's root span.
pub fn continue_swarm_root_trace(span: &tracing::Span, swarm: &str, span_key: &str) -> String {
    continue_swarm_trace(span, swarm, &root_key(swarm), span_key)
}

/// Puts `span` (not yet entered) into the swarm's trace as a child of the
/// span id derived from `parent_key`; a no-op when spans are not exported.
pub fn join_swarm_trace(span: &tracing::Span, swarm: &str, parent_key: &str) {
    let parent = SpanContext::new(
        swarm_trace_id(swarm),
        SpanId::from_bytes(fnv1a(parent_key, FNV_OFFSET)),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let _ = span.set_parent(Context::new().with_remote_span_context(parent));
}

/// Exports the span that stands for a task in its swarm's trace, from its
/// creation to its end: the parent its attempts' and merges' spans already
/// name (by an id derived from the task's full id), and a child of the
/// swarm's root. Called once, when the task reaches its end state; a no-op
/// when spans are not exported.
pub fn export_task_span(swarm: &str, task_key: &str, start: SystemTime, end: SystemTime, state: &str) {
    let root = SpanContext::new(
        swarm_trace_id(swarm),
        SpanId::from_bytes(fnv1a(&root_key(swarm), FNV_OFFSET)),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let attrs = vec![
        KeyValue::new("swarm.swarm", swarm.to_string()),
        KeyValue::new("swarm.task", task_key.to_string()),
    ];
    build_span(
        format!("task {task_key}"),
        Context::new().with_remote_span_context(root),
        None,
        task_key,
        start,
        end,
        state,
        attrs,
    );
}

/// Exports the swarm's root span, from its creation to its end: the one
/// span of the swarm's trace without a parent. Called once, when the swarm
/// ends; a no-op when spans are not exported.
pub fn export_swarm_span(swarm: &str, start: SystemTime, end: SystemTime, state: &str) {
    let attrs = vec![KeyValue::new("swarm.swarm", swarm.to_string())];
    let trace = Some(swarm_trace_id(swarm));
    // A child swarm (`app/auth`) is a child of its parent task's span, whose
    // id is derived from the same text (the task `app/auth`).
    let parent = if swarm.contains('/') {
        let task = SpanContext::new(
            swarm_trace_id(swarm),
            SpanId::from_bytes(fnv1a(swarm, FNV_OFFSET)),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        Context::new().with_remote_span_context(task)
    } else {
        Context::new()
    };
    build_span(format!("swarm {swarm}"), parent, trace, &root_key(swarm), start, end, state, attrs);
}

#[allow(clippy::too_many_arguments)] // one private builder behind two small public calls
fn build_span(
    name: String,
    parent: Context,
    trace_id: Option<TraceId>,
    key: &str,
    start: SystemTime,
    end: SystemTime,
    state: &str,
    mut attrs: Vec<KeyValue>,
) {
    use opentelemetry::trace::{Span as _, Tracer as _};
    let tracer = opentelemetry::global::tracer("swarm");
    attrs.push(KeyValue::new("swarm.state", state.to_string()));
    let mut builder = tracer.span_builder(name);
    builder.trace_id = trace_id;
    builder.span_id = Some(SpanId::from_bytes(fnv1a(key, FNV_OFFSET)));
    builder.start_time = Some(start);
    builder.attributes = Some(attrs);
    let mut span = tracer.build_with_context(builder, &parent);
    span.end_with_timestamp(end.max(start));
}

/// What the swarm's root span id is derived from: not a task id (those
/// contain a `/` after the swarm id; this a `:`).
fn root_key(swarm: &str) -> String {
    format!("swarm:{swarm}")
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// One trace per root swarm: a child swarm (`app/auth`) is part of its
/// root's (`app`).
fn swarm_trace_id(swarm: &str) -> TraceId {
    let swarm = swarm.split('/').next().unwrap_or(swarm);
    let [hi, lo] = [fnv1a(swarm, FNV_OFFSET), fnv1a(swarm, FNV_OFFSET.rotate_left(32))];
    TraceId::from_bytes(std::array::from_fn(|i| if i < 8 { hi[i] } else { lo[i - 8] }))
}

/// FNV-1a, 64 bits, never zero (a zero id is invalid in W3C trace context).
fn fnv1a(s: &str, offset: u64) -> [u8; 8] {
    let h = s.bytes().fold(offset, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    h.max(1).to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_swarm_shares_its_roots_trace() {
        assert_eq!(swarm_trace_id("app/auth/login"), swarm_trace_id("app"));
        assert_ne!(swarm_trace_id("app"), swarm_trace_id("other"));
    }

    #[test]
    fn swarm_trace_is_stable_and_valid_without_export() {
        let a = continue_swarm_trace(&tracing::Span::none(), "auth", "auth/api", "auth/api#2");
        let b = continue_swarm_trace(&tracing::Span::none(), "auth", "auth/api", "auth/api#3");
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(parts.len(), 4, "{a}");
        assert_eq!((parts[0], parts[1].len(), parts[2].len(), parts[3]), ("00", 32, 16, "01"));
        assert_eq!(a[..35], b[..35], "one swarm, one trace");
        assert_ne!(a, b, "each attempt its own span id");
        assert!(!set_parent(&tracing::Span::none(), "garbage"));
    }
}
