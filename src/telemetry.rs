//! OpenTelemetry traces: one server span per downstream MCP request and one
//! client span per upstream exchange, named and attributed after the
//! OpenTelemetry MCP semantic conventions, exported over OTLP
//! (HTTP/protobuf) by the `opentelemetry-otlp` batch exporter.
//!
//! Trace context comes from the client: `params._meta.traceparent` (and
//! `tracestate`), as MCP clients send it, or else the W3C `traceparent`
//! HTTP header, which the downstream edge puts in a task-local for the
//! request ([`Incoming::scope`]). The upstream span's context goes upstream
//! in `_meta.traceparent`, and in the HTTP `traceparent` header to remote
//! upstreams.
//!
//! Off by default. When off, no [`Telemetry`] exists: the router's server
//! span is one `Option` branch, and [`UpstreamSpan::start`] one relaxed
//! atomic load ([`ACTIVE`]); no span is built and no context is read.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::{
    SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use serde_json::Value;

use crate::config::TracingConfig;

/// The W3C trace context keys, in `_meta` and as HTTP headers.
pub(crate) const TRACEPARENT: &str = "traceparent";
pub(crate) const TRACESTATE: &str = "tracestate";

/// Live [`Telemetry`] instances in the process: zero means no span is ever
/// started, whatever the request.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TelemetryError {
    #[error("cannot build the OTLP trace exporter: {0}")]
    Exporter(String),
}

/// The tracer of a gateway that exports traces.
pub(crate) struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

/// What the downstream edge learnt of a request from its HTTP headers.
#[derive(Clone, Default)]
pub(crate) struct Incoming {
    /// The remote parent from the `traceparent` header, if valid.
    parent: Option<Context>,
    /// The `Mcp-Session-Id` header.
    session: Option<Box<str>>,
}

tokio::task_local! {
    static INCOMING: Incoming;
}

/// A `traceparent` and `tracestate` pair to extract from.
struct Carrier<'a> {
    traceparent: Option<&'a str>,
    tracestate: Option<&'a str>,
}

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            TRACEPARENT => self.traceparent,
            TRACESTATE => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT, TRACESTATE]
    }
}

/// The remote parent in a carrier; none when it holds no valid context.
fn extract(carrier: &Carrier<'_>) -> Option<Context> {
    carrier.traceparent?;
    let cx = TraceContextPropagator::new().extract(carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// The collector URL for traces: `/v1/traces` added to a base URL.
fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

impl Telemetry {
    /// Starts exporting when `config` names an endpoint or the standard
    /// `OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT` variables do (and
    /// `OTEL_SDK_DISABLED` is not `true`); `None` otherwise.
    pub(crate) fn start(config: &TracingConfig) -> Result<Option<Arc<Telemetry>>, TelemetryError> {
        let disabled =
            std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let from_env =
            env_set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") || env_set("OTEL_EXPORTER_OTLP_ENDPOINT");
        if disabled || (config.otlp_endpoint.is_none() && !from_env) {
            return Ok(None);
        }
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary);
        if let Some(endpoint) = &config.otlp_endpoint {
            exporter = exporter.with_endpoint(traces_url(endpoint));
        }
        let exporter = exporter
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let mut resource = opentelemetry_sdk::Resource::builder();
        let named_by_env = env_set("OTEL_SERVICE_NAME")
            || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| a.contains("service.name="));
        match &config.service_name {
            Some(name) => resource = resource.with_service_name(name.clone()),
            None if !named_by_env => resource = resource.with_service_name("mcpmux"),
            None => {}
        }
        let mut provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build());
        if let Some(ratio) = config.sample_ratio {
            provider = provider.with_sampler(Sampler::ParentBased(Box::new(
                Sampler::TraceIdRatioBased(ratio),
            )));
        }
        let provider = provider.build();
        let tracer = provider.tracer("mcpmux");
        ACTIVE.fetch_add(1, Ordering::Relaxed);
        tracing::info!(endpoint = ?config.otlp_endpoint.as_deref().map(traces_url), "exporting OpenTelemetry traces over OTLP/HTTP");
        Ok(Some(Arc::new(Telemetry { provider, tracer })))
    }

    /// Exports what is pending and stops the exporter. Blocks: call it
    /// from a blocking task.
    pub(crate) fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "the trace exporter did not shut down cleanly");
        }
    }

    /// Starts the server span of one downstream request. Its parent is the
    /// client's `_meta.traceparent`, else the request's `traceparent` header.
    pub(crate) fn server_span(
        &self,
        method: &str,
        id: &str,
        params: Option<&crate::protocol::Params<'_>>,
    ) -> Context {
        let meta = params.and_then(|p| p.meta_object());
        let incoming = INCOMING.try_with(Clone::clone).unwrap_or_default();
        let from_meta = meta.and_then(|m| {
            extract(&Carrier {
                traceparent: m.get(TRACEPARENT).and_then(Value::as_str),
                tracestate: m.get(TRACESTATE).and_then(Value::as_str),
            })
        });
        let parent = from_meta.or(incoming.parent).unwrap_or_default();
        let target = params.and_then(|p| {
            p.optional_string("name")
                .ok()
                .flatten()
                .or_else(|| p.optional_string("uri").ok().flatten())
        });
        let mut attributes = vec![
            KeyValue::new("mcp.method.name", method.to_owned()),
            KeyValue::new("jsonrpc.request.id", id.trim_matches('"').to_owned()),
            KeyValue::new("network.transport", "tcp"),
        ];
        if let Some(session) = incoming.session {
            attributes.push(KeyValue::new("mcp.session.id", session.to_string()));
        }
        attributes.extend(target_attributes(method, target.as_deref()));
        let span = self
            .tracer
            .span_builder(span_name(method, target.as_deref()))
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        parent
            .with_span(span)
            .with_value(Active(self.tracer.clone()))
    }

    /// Ends a server span with the answer's JSON-RPC error code, if any.
    pub(crate) fn end_server(cx: &Context, error_code: Option<i64>) {
        let span = cx.span();
        if let Some(code) = error_code {
            mark_error(&span, code);
        }
        span.end();
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The tracer, carried in a request's context so the upstream span can be
/// started below the router without another handle.
#[derive(Clone)]
struct Active(SdkTracer);

/// `{mcp.method.name} {target}` as the conventions name spans.
fn span_name(method: &str, target: Option<&str>) -> String {
    match target {
        Some(target) => format!("{method} {target}"),
        None => method.to_owned(),
    }
}

fn target_attributes(method: &str, target: Option<&str>) -> Vec<KeyValue> {
    let Some(target) = target else {
        return Vec::new();
    };
    match method {
        "tools/call" => vec![
            KeyValue::new("gen_ai.tool.name", target.to_owned()),
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
        ],
        "prompts/get" => vec![KeyValue::new("gen_ai.prompt.name", target.to_owned())],
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            vec![KeyValue::new("mcp.resource.uri", target.to_owned())]
        }
        _ => Vec::new(),
    }
}

/// Marks a span failed with JSON-RPC error `code`.
fn mark_error(span: &opentelemetry::trace::SpanRef<'_>, code: i64) {
    span.set_attribute(KeyValue::new("rpc.jsonrpc.error_code", code));
    span.set_attribute(KeyValue::new("error.type", code.to_string()));
    span.set_status(Status::error(format!("JSON-RPC error {code}")));
}

impl Incoming {
    /// What a request's `traceparent`, `tracestate` and `Mcp-Session-Id`
    /// headers say.
    pub(crate) fn from_headers(headers: &axum::http::HeaderMap) -> Incoming {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        Incoming {
            parent: extract(&Carrier {
                traceparent: header(TRACEPARENT),
                tracestate: header(TRACESTATE),
            }),
            session: header("mcp-session-id").map(Into::into),
        }
    }

    /// Runs `fut` (one HTTP request's handling) with this at hand for the
    /// request's server span. Only installed when tracing is on.
    pub(crate) async fn scope<F: std::future::Future>(self, fut: F) -> F::Output {
        INCOMING.scope(self, fut).await
    }
}

/// The current span's W3C `traceparent`, while an exchange's request is
/// being sent ([`UpstreamSpan::in_scope`]); none when tracing is off.
pub(crate) fn current_traceparent() -> Option<String> {
    if ACTIVE.load(Ordering::Relaxed) == 0 {
        return None;
    }
    Context::map_current(|cx| {
        let span = cx.span();
        let context = span.span_context();
        context.is_valid().then(|| {
            format!(
                "00-{}-{}-{:02x}",
                context.trace_id(),
                context.span_id(),
                context.trace_flags().to_u8()
            )
        })
    })
}

/// The client span of one upstream exchange; empty when tracing is off or
/// the request has no server span.
#[derive(Default)]
pub(crate) struct UpstreamSpan(Option<Context>);

impl UpstreamSpan {
    /// Starts the span below the current request's server span, for
    /// `method` on `target` at `upstream`.
    pub(crate) fn start(method: &str, target: Option<&str>, upstream: &str) -> UpstreamSpan {
        if ACTIVE.load(Ordering::Relaxed) == 0 {
            return UpstreamSpan(None);
        }
        let parent = Context::current();
        let Some(Active(tracer)) = parent.get::<Active>().cloned() else {
            return UpstreamSpan(None);
        };
        let mut attributes = vec![
            KeyValue::new("mcp.method.name", method.to_owned()),
            KeyValue::new("mcpmux.upstream.name", upstream.to_owned()),
            KeyValue::new("server.address", upstream.to_owned()),
        ];
        attributes.extend(target_attributes(method, target));
        let span = tracer
            .span_builder(span_name(method, target))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&tracer, &parent);
        UpstreamSpan(Some(parent.with_span(span)))
    }

    /// The span's `traceparent` and `tracestate`, to send upstream.
    pub(crate) fn carrier(&self) -> Option<HashMap<String, String>> {
        let cx = self.0.as_ref()?;
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(cx, &mut carrier);
        Some(carrier)
    }

    /// Runs `fut` (the sending of the exchange's request) with the span
    /// current, so the transport can read its [`current_traceparent`].
    pub(crate) fn in_scope<F: std::future::Future>(
        &self,
        fut: F,
    ) -> futures_util::future::Either<opentelemetry::context::WithContext<F>, F> {
        use futures_util::future::Either;
        match &self.0 {
            Some(cx) => Either::Left(opentelemetry::context::FutureExt::with_context(
                fut,
                cx.clone(),
            )),
            None => Either::Right(fut),
        }
    }

    /// Ends the span: with the upstream's JSON-RPC error code, or the
    /// gateway's own error, when the exchange failed.
    pub(crate) fn end(&self, error: Option<i64>) {
        if let Some(cx) = &self.0 {
            let span = cx.span();
            if let Some(code) = error {
                mark_error(&span, code);
            }
            span.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_is_a_remote_parent_and_junk_is_none() {
        let good = Carrier {
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            tracestate: None,
        };
        let cx = extract(&good).expect("a parent");
        let span = cx.span();
        let parent = span.span_context();
        assert_eq!(
            parent.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(parent.is_remote());
        for junk in [
            "",
            "00-zz-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            let carrier = Carrier {
                traceparent: Some(junk),
                tracestate: None,
            };
            assert!(extract(&carrier).is_none(), "{junk}");
        }
    }

    #[test]
    fn endpoints_get_the_traces_path_once() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
    }

    #[test]
    fn without_telemetry_no_upstream_span_starts() {
        let span = UpstreamSpan::start("tools/call", Some("echo"), "a");
        assert!(span.carrier().is_none());
        span.end(None);
    }
}
