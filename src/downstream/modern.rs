//! The 2026-07-28 (stateless) era on the downstream side.
//!
//! Era is chosen per request: a request whose `MCP-Protocol-Version` header
//! is not a legacy version, or whose `_meta` carries a protocol version, or
//! that asks for `server/discover` or `subscriptions/listen`, is served
//! here without a session. Every such request is validated as the spec
//! demands before anything else happens: `_meta` fields (-32602), the
//! mirrored headers `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name`
//! (-32020, with Base64 sentinel decoding), and the version itself
//! (-32022 with the supported list). Methods the modern era removed
//! (`initialize`, `ping`, `logging/setLevel`, `resources/(un)subscribe`)
//! and unknown ones get 404 with -32601.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;

use super::AppState;
use super::wire::{Refusal, RequestHeaders, VERSION_HEADER, json_response as json, page_response};
use crate::notify::LogLevel;
use crate::protocol::{
    self, Envelope, Era, MessageKind, Method, ParamsError, Raw, Request, RpcError, code, meta,
    method,
};
use crate::router::{Ended, Reply, RequestContext};

/// Methods a modern client may call on the gateway.
const METHODS: &[&str] = &[
    method::DISCOVER,
    method::LISTEN,
    method::TOOLS_LIST,
    method::PROMPTS_LIST,
    method::RESOURCES_LIST,
    method::TEMPLATES_LIST,
    method::TOOLS_CALL,
    method::PROMPTS_GET,
    method::RESOURCES_READ,
    method::COMPLETE,
    method::TASKS_GET,
    method::TASKS_UPDATE,
    method::TASKS_CANCEL,
];

/// Whether a message belongs to the modern era: its `_meta` names a
/// protocol version, or it is a method only the modern era has, or it
/// carries no session and a version header that is not a legacy one. A
/// request's params are read through `request`, so the parse is the one
/// every later layer uses.
pub(crate) fn is_modern(
    headers: RequestHeaders<'_>,
    envelope: &Envelope<'_>,
    request: Option<&mut Request<'_>>,
) -> bool {
    let names_version = match (envelope.params, request) {
        (None, _) => false,
        // A request's members are found once for every later layer (the
        // router reads its name or URI there), so looking up `_meta` among
        // them costs less than searching the whole text first.
        (Some(_), Some(request)) => request
            .params()
            .is_ok_and(|p| p.meta(meta::PROTOCOL_VERSION).is_some()),
        (Some(raw), None) => names_a_version(raw),
    };
    if names_version {
        return true;
    }
    let method = envelope.method.as_deref().unwrap_or_default();
    if method == method::DISCOVER || method == method::LISTEN {
        return true;
    }
    headers.session.is_none()
        && headers
            .version
            .and_then(|v| v.to_str().ok())
            .is_some_and(|version| !protocol::is_supported_downstream(version))
}

/// Whether `params` is an object whose `_meta` object has the protocol
/// version member (whatever its value: [`validate`] judges that). Only
/// these two levels are read; everything else is skipped unparsed.
fn names_a_version(params: Raw<'_>) -> bool {
    #[derive(Deserialize)]
    struct Params {
        #[serde(rename = "_meta", default)]
        meta: Option<MetaMembers>,
    }
    #[derive(Deserialize)]
    struct MetaMembers {
        #[serde(
            rename = "io.modelcontextprotocol/protocolVersion",
            default,
            deserialize_with = "present"
        )]
        version: bool,
    }
    /// True for any value, `null` included.
    fn present<'de, D: serde::Deserializer<'de>>(value: D) -> Result<bool, D::Error> {
        serde::de::IgnoredAny::deserialize(value).map(|_| true)
    }
    let text = params.get();
    if !might_name_a_version(text) {
        return false;
    }
    #[cfg(test)]
    crate::protocol::params::note_parse();
    // Serde would also read a struct from an array, member by member.
    text.trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
        && serde_json::from_str::<Params>(text).is_ok_and(|p| p.meta.is_some_and(|m| m.version))
}

/// Whether params text could hold the protocol version member: without
/// the key's text and without an escape that could spell it, it cannot,
/// and most requests end here, unparsed.
fn might_name_a_version(text: &str) -> bool {
    // The searcher is built once; building it costs more than a short search.
    static PROTOCOL_VERSION: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"protocolVersion"));
    memchr::memchr(b'\\', text.as_bytes()).is_some()
        || PROTOCOL_VERSION.find(text.as_bytes()).is_some()
}

/// What a valid modern request carries besides its method.
pub(crate) struct Validated {
    pub log_level: Option<LogLevel>,
}

/// An error for request `id` with an HTTP status.
fn reject(status: StatusCode, id: Option<&RawValue>, error: RpcError) -> Response {
    Refusal::of(status, error)
        .answering(Some(id.map_or("null", RawValue::get)))
        .into_response()
}

fn mismatch(id: Option<&RawValue>, message: String) -> Response {
    reject(
        StatusCode::BAD_REQUEST,
        id,
        RpcError::new(code::HEADER_MISMATCH, format!("Header mismatch: {message}")),
    )
}

/// Checks `_meta` and the mirrored headers of a modern request.
#[allow(clippy::result_large_err)]
pub(crate) fn validate(
    headers: &HeaderMap,
    request: &mut Request<'_>,
) -> Result<Validated, Response> {
    let id = Some(request.id);
    let method = request.method.name().to_owned();
    let invalid = |message: &str| {
        reject(
            StatusCode::BAD_REQUEST,
            id,
            RpcError::new(code::INVALID_PARAMS, message),
        )
    };
    let params = match request.params() {
        Ok(params) => params,
        Err(ParamsError::MetaNotAnObject) => {
            return Err(invalid(
                "missing params._meta (every 2026-07-28 request carries it)",
            ));
        }
        Err(_) => return Err(invalid("params must be an object")),
    };
    let Some(meta) = params.meta_object() else {
        return Err(invalid(
            "missing params._meta (every 2026-07-28 request carries it)",
        ));
    };
    let Some(version) = meta.get(meta::PROTOCOL_VERSION).and_then(Value::as_str) else {
        return Err(invalid(
            "missing _meta[\"io.modelcontextprotocol/protocolVersion\"]",
        ));
    };
    let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    match header(VERSION_HEADER.as_str()) {
        None => {
            return Err(mismatch(
                id,
                "the MCP-Protocol-Version header is missing".into(),
            ));
        }
        Some(h) if h != version => {
            return Err(mismatch(
                id,
                format!(
                    "MCP-Protocol-Version header {h:?} does not match body version {version:?}"
                ),
            ));
        }
        Some(_) => {}
    }
    if version != protocol::MODERN_VERSION {
        let error = RpcError::new(code::UNSUPPORTED_VERSION, "Unsupported protocol version")
            .with_data(json!({ "supported": protocol::ALL_VERSIONS, "requested": version }));
        return Err(reject(StatusCode::BAD_REQUEST, id, error));
    }
    if !meta
        .get(meta::CLIENT_CAPABILITIES)
        .is_some_and(Value::is_object)
    {
        return Err(invalid(
            "missing _meta[\"io.modelcontextprotocol/clientCapabilities\"]",
        ));
    }
    check_method_headers(headers, id, &method, params)?;
    let log_level = match meta.get(meta::LOG_LEVEL) {
        None => None,
        Some(level) => Some(level.as_str().and_then(LogLevel::parse).ok_or_else(|| {
            invalid("_meta[\"io.modelcontextprotocol/logLevel\"] is not a log level")
        })?),
    };
    Ok(Validated { log_level })
}

/// Checks the `Mcp-Method` header, and `Mcp-Name` for a method that names
/// its target, against the body.
#[allow(clippy::result_large_err)]
fn check_method_headers(
    headers: &HeaderMap,
    id: Option<&RawValue>,
    method: &str,
    params: &crate::protocol::Params<'_>,
) -> Result<(), Response> {
    let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    match header("mcp-method").map(str::trim) {
        None => return Err(mismatch(id, "the Mcp-Method header is missing".into())),
        Some(h) if h != method => {
            return Err(mismatch(
                id,
                format!("Mcp-Method header {h:?} does not match body method {method:?}"),
            ));
        }
        Some(_) => {}
    }
    let name_member = match method {
        method::TOOLS_CALL | method::PROMPTS_GET => Some("name"),
        method::RESOURCES_READ => Some("uri"),
        // The tasks extension routes by task (SEP-2663).
        method::TASKS_GET | method::TASKS_UPDATE | method::TASKS_CANCEL => Some("taskId"),
        _ => None,
    };
    if let Some(member) = name_member {
        let body_value = params
            .optional_string(member)
            .ok()
            .flatten()
            .unwrap_or_default();
        match header("mcp-name").map(|h| crate::xheader::decode(h.trim())) {
            None => return Err(mismatch(id, "the Mcp-Name header is missing".into())),
            Some(None) => {
                return Err(mismatch(
                    id,
                    "the Mcp-Name header is not valid Base64 UTF-8".into(),
                ));
            }
            Some(Some(h)) if h != body_value => {
                return Err(mismatch(
                    id,
                    format!("Mcp-Name header value {h:?} does not match body value {body_value:?}"),
                ));
            }
            Some(Some(_)) => {}
        }
    }
    Ok(())
}

/// Serves one modern message; `request` is it as a typed request, when the
/// edge built it already.
#[allow(clippy::too_many_arguments, clippy::manual_async_fn)] // held once: see `in_place`
pub(crate) fn handle(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    envelope: &Envelope<'_>,
    kind: MessageKind,
    can_stream: bool,
    identity: Option<Arc<crate::auth::Identity>>,
    endpoint: Option<Arc<str>>,
    request: Option<Request<'_>>,
) -> impl Future<Output = Response> {
    async move {
        // The modern HTTP transport has no client notifications; accept and ignore.
        if kind != MessageKind::Request {
            return StatusCode::ACCEPTED.into_response();
        }
        let Some(id) = envelope.id else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let method = envelope.method.as_deref().unwrap_or_default();
        let mut request =
            request.unwrap_or_else(|| Request::new(id, Method::from_name(method), envelope.params));
        let validated = match validate(headers, &mut request) {
            Ok(v) => v,
            Err(rejected) => return rejected,
        };
        if !METHODS.contains(&method) {
            let error = RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("method not found: {method} (not part of 2026-07-28)"),
            );
            return reject(StatusCode::NOT_FOUND, Some(id), error);
        }
        if method == method::TOOLS_CALL
            && let Err(rejected) = check_param_headers(
                state,
                headers,
                &mut request,
                endpoint.as_deref(),
                identity.as_deref(),
            )
        {
            return rejected;
        }
        match method {
            method::DISCOVER => json(protocol::response_frame(
                id.get(),
                &discover(state, endpoint.as_deref(), identity.as_deref()),
            )),
            method::LISTEN => {
                super::listen::open(state, identity, endpoint, id, envelope.params).await
            }
            _ => {
                let ctx = RequestContext {
                    inflight: Arc::default(),
                    subscriber: None,
                    can_stream,
                    era: Era::Modern,
                    log_level: validated.log_level,
                    identity,
                    session_id: None,
                    endpoint,
                };
                match state.router.request(&ctx, &mut request).await {
                    Reply::Ready(frame) => match frame.ended() {
                        Ended::Result => json(frame.into_text()),
                        Ended::Error {
                            code,
                            retry_after_ms,
                        } => match retry_after(code, retry_after_ms) {
                            Some(secs) => (
                                StatusCode::SERVICE_UNAVAILABLE,
                                [(axum::http::header::RETRY_AFTER, secs.to_string())],
                                json(frame.into_text()),
                            )
                                .into_response(),
                            None => (status_of(code), json(frame.into_text())).into_response(),
                        },
                    },
                    Reply::Page(page) => page_response(page),
                    Reply::Streaming(frames) => sse_response(ReceiverStream::new(frames)),
                }
            }
        }
    }
}

/// The HTTP status for a modern answer: the spec pins 400 on errors that
/// say the request itself was unacceptable, also when an upstream said so.
fn status_of(code: i64) -> StatusCode {
    match code {
        code::HEADER_MISMATCH | code::MISSING_CLIENT_CAPABILITY | code::UNSUPPORTED_VERSION => {
            StatusCode::BAD_REQUEST
        }
        _ => StatusCode::OK,
    }
}

/// For an upstream refused by its protection (saturated, circuit open):
/// the whole seconds of its `Retry-After` (HTTP 503), from the error's
/// `data.retryAfterMs`.
fn retry_after(code: i64, retry_after_ms: Option<u64>) -> Option<u64> {
    if !matches!(code, code::UPSTREAM_SATURATED | code::UPSTREAM_CIRCUIT_OPEN) {
        return None;
    }
    let ms = retry_after_ms.unwrap_or(1000);
    Some(ms.div_ceil(1000).max(1))
}

/// A streamed answer (progress, then the response) as `text/event-stream`.
fn sse_response(frames: ReceiverStream<String>) -> Response {
    let events =
        frames.map(|frame| Ok::<_, std::convert::Infallible>(Event::default().data(frame)));
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Checks `Mcp-Param-*` headers against the arguments of a call to a tool
/// with `x-mcp-header` parameters.
#[allow(clippy::result_large_err)]
fn check_param_headers(
    state: &AppState,
    headers: &HeaderMap,
    request: &mut Request<'_>,
    endpoint: Option<&str>,
    identity: Option<&crate::auth::Identity>,
) -> Result<(), Response> {
    let id = request.id;
    let Ok(params) = request.params() else {
        // Invalid params are the router's to answer.
        return Ok(());
    };
    let name = params
        .optional_string("name")
        .ok()
        .flatten()
        .unwrap_or_default();
    let name = &*name;
    if !state.router.allows(endpoint, identity, name) {
        // A hidden tool is answered like an unknown one, by the router.
        return Ok(());
    }
    let catalog = state.router.catalog().load_view(endpoint);
    let Some(header_params) = catalog.tool_headers(name) else {
        return Ok(());
    };
    let lookup = |h: &str| {
        headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    // The arguments are read only for a tool that mirrors some into headers.
    let arguments =
        crate::xheader::arguments(params.raw("arguments").map(crate::protocol::Raw::get));
    crate::xheader::validate(header_params, &arguments, lookup)
        .map_err(|why| mismatch(Some(id), why.to_string()))
}

/// The `server/discover` result: the merged view's capabilities and every
/// version the gateway serves.
fn discover(
    state: &AppState,
    endpoint: Option<&str>,
    identity: Option<&crate::auth::Identity>,
) -> String {
    let mut result = json!({
        "resultType": "complete",
        "supportedVersions": protocol::ALL_VERSIONS,
        "capabilities": state.router.capabilities_for(Era::Modern, endpoint),
        "_meta": { meta::SERVER_INFO: { "name": "mcpmux", "version": env!("CARGO_PKG_VERSION") } },
        "ttlMs": crate::router::LIST_TTL_MS,
        "cacheScope": if state.router.filters(endpoint, identity) { "private" } else { "public" },
    });
    if let Some(text) = state.router.instructions(endpoint, identity) {
        result["instructions"] = Value::from(text);
    }
    result.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn only_the_meta_member_names_the_era() {
        for modern in [
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#,
            r#"{"name":"x","_meta":{"a":1,"io.modelcontextprotocol/protocolVersion":7}}"#,
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":null}}"#,
            // The key spelled with escapes is the same key.
            r#"{"_meta":{"io.modelcontextprotocol\/protocol\u0056ersion":"2026-07-28"}}"#,
        ] {
            assert!(names_a_version(Raw::from(&*raw(modern))), "{modern}");
        }
        for legacy in [
            r#"{}"#,
            r#"{"_meta":{"progressToken":1}}"#,
            r#"{"_meta":null}"#,
            r#"{"_meta":"io.modelcontextprotocol/protocolVersion"}"#,
            r#"{"arguments":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#,
            r#"{"arguments":{"_meta":{"io.modelcontextprotocol/protocolVersion":"x"}}}"#,
            r#"{"name":"io.modelcontextprotocol/protocolVersion"}"#,
            r#"[{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}]"#,
        ] {
            assert!(!names_a_version(Raw::from(&*raw(legacy))), "{legacy}");
        }
    }

    #[test]
    fn the_era_probe_of_a_request_is_the_one_parse_of_its_params() {
        for (text, modern) in [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"text":"a\nb"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
                true,
            ),
            // A legacy request with an escape in its arguments.
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"text":"a\nb"}}}"#,
                false,
            ),
        ] {
            let envelope = Envelope::parse(text).unwrap();
            let id = envelope.id.unwrap();
            let mut request = Request::new(id, Method::ToolsCall, envelope.params);
            let before = crate::protocol::params::parses();
            assert_eq!(
                is_modern(RequestHeaders::default(), &envelope, Some(&mut request)),
                modern
            );
            if modern {
                assert!(
                    validate(&HeaderMap::new(), &mut request).is_err(),
                    "no headers"
                );
            }
            assert_eq!(request.take_params().unwrap().string("name").unwrap(), "t");
            assert_eq!(crate::protocol::params::parses() - before, 1, "{text}");
        }
    }

    #[test]
    fn only_a_request_refusal_is_a_400() {
        assert_eq!(status_of(code::HEADER_MISMATCH), StatusCode::BAD_REQUEST);
        assert_eq!(
            status_of(code::UNSUPPORTED_VERSION),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            status_of(code::MISSING_CLIENT_CAPABILITY),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(status_of(code::INTERNAL_ERROR), StatusCode::OK);
        assert_eq!(status_of(code::UPSTREAM_SATURATED), StatusCode::OK);
    }

    #[test]
    fn a_refusal_by_protection_waits_the_whole_seconds_it_names() {
        let saturated = code::UPSTREAM_SATURATED;
        assert_eq!(retry_after(saturated, Some(1500)), Some(2));
        assert_eq!(retry_after(saturated, Some(0)), Some(1));
        assert_eq!(retry_after(code::UPSTREAM_CIRCUIT_OPEN, None), Some(1));
        assert_eq!(retry_after(code::INTERNAL_ERROR, Some(1500)), None);
    }
}
