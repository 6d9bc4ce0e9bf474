//! An in-process OTLP/gRPC trace receiver: every span the controller and
//! sidecars export, with the `service.name` of the process that sent it.

use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
pub use opentelemetry_proto::tonic::trace::v1::Span;

/// Every span received, with its process's `service.name`.
#[derive(Clone, Default)]
pub struct Collector(Arc<Mutex<Vec<(String, Span)>>>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut all = self.0.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            let service = rs.resource.as_ref().and_then(|r| attr(&r.attributes, "service.name"));
            for ss in rs.scope_spans {
                for span in ss.spans {
                    all.push((service.clone().unwrap_or_default(), span));
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

/// A receiver listening on loopback; it stops when dropped.
pub struct Receiver {
    pub collector: Collector,
    /// For `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: String,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Starts a receiver on a free loopback port.
pub async fn receive() -> Receiver {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    Receiver { collector, endpoint, server }
}

/// A string attribute's value (other kinds in their debug form).
pub fn attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        other => Some(format!("{other:?}")),
    })
}

/// Trace and span ids as W3C `traceparent` writes them.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Collector {
    /// The first span named `name`, from any process.
    pub fn named(&self, name: &str) -> Option<Span> {
        self.0.lock().unwrap().iter().find(|(_, s)| s.name == name).map(|(_, s)| s.clone())
    }

    /// The first span of `service` named `name`.
    pub fn of(&self, service: &str, name: &str) -> Option<Span> {
        let all = self.0.lock().unwrap();
        all.iter().find(|(svc, s)| svc == service && s.name == name).map(|(_, s)| s.clone())
    }

    /// Names of the spans of `service` whose parent is `parent`.
    pub fn children(&self, service: &str, parent: &Span) -> Vec<String> {
        let all = self.0.lock().unwrap();
        let mut names: Vec<String> = all
            .iter()
            .filter(|(svc, s)| svc == service && s.parent_span_id == parent.span_id)
            .map(|(_, s)| s.name.clone())
            .collect();
        names.sort();
        names
    }

    /// Every span of the trace `trace` (hex), with its service.
    pub fn in_trace(&self, trace: &str) -> Vec<(String, Span)> {
        let all = self.0.lock().unwrap();
        all.iter().filter(|(_, s)| hex(&s.trace_id) == trace).cloned().collect()
    }

    /// The spans of `trace` naming a parent that was never exported, as
    /// `service: name (parent id)`: empty for a complete tree.
    pub fn orphans(&self, trace: &str) -> Vec<String> {
        let spans = self.in_trace(trace);
        let ids: std::collections::HashSet<String> = spans.iter().map(|(_, s)| hex(&s.span_id)).collect();
        spans
            .iter()
            .filter(|(_, s)| !s.parent_span_id.is_empty() && !ids.contains(&hex(&s.parent_span_id)))
            .map(|(svc, s)| format!("{svc}: {} (parent {})", s.name, hex(&s.parent_span_id)))
            .collect()
    }

    /// Names of the spans of `trace` without a parent.
    pub fn roots(&self, trace: &str) -> Vec<String> {
        let spans = self.in_trace(trace);
        spans.iter().filter(|(_, s)| s.parent_span_id.is_empty()).map(|(_, s)| s.name.clone()).collect()
    }

    /// Trace ids (hex) of every span of `service` named `name`.
    pub fn traces_of(&self, service: &str, name: &str) -> Vec<String> {
        let all = self.0.lock().unwrap();
        all.iter()
            .filter(|(svc, s)| svc == service && s.name == name)
            .map(|(_, s)| hex(&s.trace_id))
            .collect()
    }

    /// The span `name` of `service` whose `attempt` attribute is `attempt`.
    pub fn find(&self, service: &str, name: &str, attempt: &str) -> Option<Span> {
        let all = self.0.lock().unwrap();
        all.iter()
            .find(|(svc, s)| {
                svc == service && s.name == name && attr(&s.attributes, "attempt").as_deref() == Some(attempt)
            })
            .map(|(_, s)| s.clone())
    }
}
