//! OpenTelemetry traces: a test OTLP/HTTP receiver (protobuf, decoded with
//! the `opentelemetry-proto` definitions) collects the spans of calls made
//! with a `traceparent` (in `_meta`, and as an HTTP header); the spans carry
//! the client's trace id, the right parents and the MCP attributes, and the
//! upstream (the fixture, recording what it receives) got the same trace id.

use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::{Value, json};

use crate::support::{McpClient, TestGateway, fixture_upstream, read_jsonl, tempdir};

const TRACE_META: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_META: &str = "00f067aa0ba902b7";
const TRACE_HEADER: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT_HEADER: &str = "b7ad6b7169203331";

/// Every span the receiver got, with its service name.
pub(crate) type Received = Arc<Mutex<Vec<(String, Span)>>>;

/// An OTLP/HTTP trace receiver on 127.0.0.1:0.
pub(crate) async fn receiver() -> (String, Received) {
    let received: Received = Arc::default();
    let sink = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let sink = sink.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                let mut sink = sink.lock().unwrap();
                for resource in request.resource_spans {
                    let service = resource
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|a| a.key == "service.name")
                        .and_then(|a| a.value.as_ref()?.value.as_ref())
                        .map(|v| match v {
                            Any::StringValue(s) => s.clone(),
                            other => format!("{other:?}"),
                        })
                        .unwrap_or_default();
                    for scope in resource.scope_spans {
                        for span in scope.spans {
                            sink.push((service.clone(), span));
                        }
                    }
                }
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), received)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<Value> {
    let value = span
        .attributes
        .iter()
        .find(|a| a.key == key)?
        .value
        .as_ref()?;
    Some(match value.value.as_ref()? {
        Any::StringValue(s) => json!(s),
        Any::IntValue(i) => json!(i),
        Any::BoolValue(b) => json!(b),
        other => json!(format!("{other:?}")),
    })
}

/// The spans of trace `trace`, waiting (bounded) until `count` arrived.
async fn spans_of(received: &Received, trace: &str, count: usize) -> Vec<Span> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let spans: Vec<Span> = received
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, s)| hex(&s.trace_id) == trace)
            .map(|(_, s)| s.clone())
            .collect();
        if spans.len() >= count {
            return spans;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {count} spans of trace {trace} arrived: {:#?}",
            spans.len(),
            received.lock().unwrap()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_call_with_a_traceparent_gives_linked_gateway_and_upstream_spans() {
    let (collector, received) = receiver().await;
    let dir = tempdir();
    let record = dir.join("rec.jsonl");
    let yaml = format!(
        "tracing:\n  otlp_endpoint: {collector}\n  service_name: mcpmux-it\nupstreams:\n{}",
        fixture_upstream("rec", &["--record", record.to_str().unwrap()])
    );
    let gw = TestGateway::start(&yaml).await;
    let client = McpClient::connect(&gw.url).await;

    // Trace context in params._meta, as MCP clients send it.
    let traceparent = format!("00-{TRACE_META}-{PARENT_META}-01");
    let call = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": { "name": "rec__echo", "arguments": { "message": "traced" }, "_meta": { "traceparent": traceparent } } });
    let answer = client.post_raw(&call.to_string(), &[]).await;
    assert_eq!(
        answer.json()["result"]["content"][0]["text"],
        "traced",
        "{}",
        answer.body
    );

    // Trace context in the HTTP header.
    let header = format!("00-{TRACE_HEADER}-{PARENT_HEADER}-01");
    let call = json!({ "jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": { "name": "rec__echo", "arguments": { "message": "by header" } } });
    let answer = client
        .post_raw(&call.to_string(), &[("traceparent", &header)])
        .await;
    assert_eq!(
        answer.json()["result"]["content"][0]["text"],
        "by header",
        "{}",
        answer.body
    );

    // An error answered by the gateway itself is recorded on its span.
    let unknown = json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": { "name": "rec__nope", "arguments": {}, "_meta": { "traceparent": format!("00-{}-{PARENT_META}-01", "1".repeat(32)) } } });
    let answer = client.post_raw(&unknown.to_string(), &[]).await;
    assert_eq!(answer.json()["error"]["code"], -32602, "{}", answer.body);

    // Shutdown flushes the exporter's queue.
    gw.stop().await;

    let spans = spans_of(&received, TRACE_META, 2).await;
    let server = spans
        .iter()
        .find(|s| s.kind == 2)
        .unwrap_or_else(|| panic!("no server span: {spans:#?}"));
    let upstream = spans
        .iter()
        .find(|s| s.kind == 3)
        .unwrap_or_else(|| panic!("no client span: {spans:#?}"));
    assert_eq!(
        hex(&server.parent_span_id),
        PARENT_META,
        "the client's span is the parent"
    );
    assert_eq!(server.name, "tools/call rec__echo");
    assert_eq!(
        attribute(server, "mcp.method.name"),
        Some(json!("tools/call"))
    );
    assert_eq!(
        attribute(server, "gen_ai.tool.name"),
        Some(json!("rec__echo"))
    );
    assert_eq!(
        attribute(server, "mcp.session.id"),
        Some(json!(client.session))
    );
    assert_eq!(attribute(server, "rpc.jsonrpc.error_code"), None);
    assert_eq!(
        upstream.parent_span_id, server.span_id,
        "the upstream span is the server span's child"
    );
    assert_eq!(upstream.name, "tools/call echo");
    assert_eq!(
        attribute(upstream, "mcp.method.name"),
        Some(json!("tools/call"))
    );
    assert_eq!(attribute(upstream, "gen_ai.tool.name"), Some(json!("echo")));
    assert_eq!(
        attribute(upstream, "mcpmux.upstream.name"),
        Some(json!("rec"))
    );
    let service = received.lock().unwrap()[0].0.clone();
    assert_eq!(service, "mcpmux-it");

    // The upstream received the same trace, with the gateway's span as parent.
    let seen = read_jsonl(&record);
    let sent: Vec<&Value> = seen
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .collect();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    let expected = format!("00-{TRACE_META}-{}-01", hex(&upstream.span_id));
    assert_eq!(sent[0]["params"]["_meta"]["traceparent"], expected.as_str());

    // The header's trace runs through the gateway to the upstream too.
    let by_header = spans_of(&received, TRACE_HEADER, 2).await;
    let server = by_header.iter().find(|s| s.kind == 2).unwrap();
    assert_eq!(hex(&server.parent_span_id), PARENT_HEADER);
    let upstream = by_header.iter().find(|s| s.kind == 3).unwrap();
    assert_eq!(upstream.parent_span_id, server.span_id);
    let forwarded = sent[1]["params"]["_meta"]["traceparent"].as_str().unwrap();
    assert!(forwarded.contains(TRACE_HEADER), "{forwarded}");

    let failed = spans_of(&received, &"1".repeat(32), 1).await;
    assert_eq!(
        attribute(&failed[0], "rpc.jsonrpc.error_code"),
        Some(json!(-32602))
    );
    assert_eq!(attribute(&failed[0], "error.type"), Some(json!("-32602")));
    assert_eq!(failed[0].status.as_ref().map(|s| s.code), Some(2));
}

/// A minimal Streamable HTTP MCP server (2025-06-18, JSON answers) with one
/// tool, `echo`, that keeps the `traceparent` header of every `tools/call`.
async fn header_recording_upstream() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let keep = seen.clone();
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let keep = keep.clone();
                async move {
                    use axum::response::IntoResponse as _;
                    let message: Value = serde_json::from_slice(&body).unwrap();
                    let method = message["method"].as_str().unwrap_or_default();
                    let result = match method {
                        "initialize" => json!({ "protocolVersion": "2025-06-18",
                            "capabilities": { "tools": {} }, "serverInfo": { "name": "headers", "version": "0" } }),
                        "tools/list" => json!({ "tools": [{ "name": "echo", "inputSchema": { "type": "object" } }] }),
                        "tools/call" => {
                            if let Some(tp) = headers.get("traceparent") {
                                keep.lock().unwrap().push(tp.to_str().unwrap().to_owned());
                            }
                            json!({ "content": [{ "type": "text", "text": "ok" }] })
                        }
                        _ if message.get("id").is_none() => {
                            return axum::http::StatusCode::ACCEPTED.into_response();
                        }
                        _ => json!({}),
                    };
                    let answer = json!({ "jsonrpc": "2.0", "id": message["id"], "result": result });
                    (
                        [("content-type", "application/json"), ("mcp-session-id", "s1")],
                        answer.to_string(),
                    )
                        .into_response()
                }
            },
        )
        .get(|| async { axum::http::StatusCode::METHOD_NOT_ALLOWED })
        .delete(|| async { axum::http::StatusCode::OK }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/mcp"), seen)
}

#[tokio::test]
async fn a_remote_upstream_gets_the_trace_in_the_traceparent_header() {
    let (collector, received) = receiver().await;
    let (url, seen) = header_recording_upstream().await;
    let yaml = format!(
        "tracing:\n  otlp_endpoint: {collector}\nupstreams:\n  web:\n    url: {url:?}\n    era: legacy\n    transport: streamable-http\n"
    );
    let gw = TestGateway::start(&yaml).await;
    let client = McpClient::connect(&gw.url).await;
    let header = format!("00-{TRACE_HEADER}-{PARENT_HEADER}-01");
    let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "web__echo", "arguments": {} } });
    let answer = client
        .post_raw(&call.to_string(), &[("traceparent", &header)])
        .await;
    assert_eq!(
        answer.json()["result"]["content"][0]["text"],
        "ok",
        "{}",
        answer.body
    );
    gw.stop().await;

    let spans = spans_of(&received, TRACE_HEADER, 2).await;
    let upstream = spans.iter().find(|s| s.kind == 3).unwrap();
    assert_eq!(
        attribute(upstream, "mcpmux.upstream.name"),
        Some(json!("web"))
    );
    let expected = format!("00-{TRACE_HEADER}-{}-01", hex(&upstream.span_id));
    assert_eq!(*seen.lock().unwrap(), vec![expected]);
}

#[tokio::test]
async fn the_standard_otel_variables_turn_tracing_on_and_name_the_service() {
    let (collector, received) = receiver().await;
    let path = tempdir().join("mcpmux.yaml");
    let yaml = crate::support::gateway::with_auth_off(&format!(
        "upstreams:\n{}",
        fixture_upstream("rec", &[])
    ));
    std::fs::write(&path, yaml).unwrap();
    let mut served = crate::support::served::Served::start_with_env(
        &["--config", path.to_str().unwrap()],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector),
            ("OTEL_SERVICE_NAME", "from-env"),
        ],
    );
    let addr = served.listening_addr().await;
    served.first("upstream ready").await;
    let client = McpClient::connect(&format!("http://{addr}/mcp")).await;
    let header = format!("00-{TRACE_HEADER}-{PARENT_HEADER}-01");
    let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "rec__echo", "arguments": { "message": "env" } } });
    let answer = client
        .post_raw(&call.to_string(), &[("traceparent", &header)])
        .await;
    assert_eq!(
        answer.json()["result"]["content"][0]["text"],
        "env",
        "{}",
        answer.body
    );
    served.signal(nix::sys::signal::Signal::SIGTERM);
    let (status, _) = served.finish().await;
    assert!(status.success(), "{status}");
    let spans = spans_of(&received, TRACE_HEADER, 2).await;
    assert!(
        spans
            .iter()
            .any(|s| s.kind == 2 && hex(&s.parent_span_id) == PARENT_HEADER)
    );
    let services: Vec<String> = received
        .lock()
        .unwrap()
        .iter()
        .map(|(s, _)| s.clone())
        .collect();
    assert!(services.iter().all(|s| s == "from-env"), "{services:?}");
}
