//! JSON-RPC 2.0 envelope handling and MCP protocol constants.
//!
//! The gateway's data path works on raw JSON: [`Envelope`] parses only the
//! envelope and leaves `params`, `result` and `error` as borrowed
//! [`RawValue`]s, so bodies the gateway does not rewrite pass through
//! untouched. The frame builders below write outgoing messages by string
//! concatenation of already-serialized pieces.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

/// `Mcp-Session-Id`: a 2025-era session's id, on both sides. A
/// `HeaderName` built once, so a lookup does not parse the name again.
pub(crate) static SESSION_HEADER: axum::http::HeaderName =
    axum::http::HeaderName::from_static("mcp-session-id");
/// `MCP-Protocol-Version`, on both sides.
pub(crate) static VERSION_HEADER: axum::http::HeaderName =
    axum::http::HeaderName::from_static("mcp-protocol-version");

/// Legacy-era versions the gateway serves downstream, newest first
/// (2024-11-05 for hosts on the HTTP+SSE transport).
pub(crate) const DOWNSTREAM_VERSIONS: &[&str] =
    &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// Legacy-era versions the gateway accepts from an upstream's `initialize`.
pub(crate) const UPSTREAM_VERSIONS: &[&str] =
    &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The version the gateway asks upstreams for, and offers clients that ask for
/// one it does not support.
pub(crate) const LATEST_VERSION: &str = "2025-11-25";

/// The stateless (modern) protocol revision the gateway serves.
pub(crate) const MODERN_VERSION: &str = "2026-07-28";

/// Every version the gateway serves downstream, newest first.
pub(crate) const ALL_VERSIONS: &[&str] = &[
    "2026-07-28",
    "2025-11-25",
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
];

/// `_meta` keys of the modern era.
pub(crate) mod meta {
    pub(crate) const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    pub(crate) const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    pub(crate) const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    pub(crate) const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    pub(crate) const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    pub(crate) const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
    /// The 2026-07-28 tasks extension's id (a capability key, not `_meta`).
    pub(crate) const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
    /// MCP Apps: interactive tool UIs (`ui://` resources).
    pub(crate) const UI_EXTENSION: &str = "io.modelcontextprotocol/ui";
    /// The MIME type of an MCP App's HTML.
    pub(crate) const APP_MIME_TYPE: &str = "text/html;profile=mcp-app";
}

/// Standard JSON-RPC and MCP error codes the gateway produces itself.
pub(crate) mod code {
    pub(crate) const PARSE_ERROR: i64 = -32700;
    pub(crate) const INVALID_REQUEST: i64 = -32600;
    pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
    pub(crate) const INVALID_PARAMS: i64 = -32602;
    pub(crate) const INTERNAL_ERROR: i64 = -32603;
    /// MCP: the requested resource does not exist (2025 era).
    pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;
    /// MCP 2026-07-28: an HTTP header does not match the body.
    pub(crate) const HEADER_MISMATCH: i64 = -32020;
    /// MCP 2026-07-28: the request needs a capability the client did not declare.
    pub(crate) const MISSING_CLIENT_CAPABILITY: i64 = -32021;
    /// MCP 2026-07-28: the requested protocol version is not supported.
    pub(crate) const UNSUPPORTED_VERSION: i64 = -32022;
    /// MCP 2025-11-25: the request needs the user to finish a URL-mode
    /// elicitation first (`data.elicitations` says where).
    pub(crate) const URL_ELICITATION_REQUIRED: i64 = -32042;
    /// The request was cancelled by the client before an answer arrived.
    pub(crate) const REQUEST_CANCELLED: i64 = -32800;
    /// mcpmux: the upstream that owns the item is not connected.
    pub(crate) const UPSTREAM_UNAVAILABLE: i64 = -32050;
    /// mcpmux: the upstream did not answer within its configured timeout.
    pub(crate) const UPSTREAM_TIMEOUT: i64 = -32051;
    /// mcpmux: the upstream answered with something that is not valid MCP.
    pub(crate) const UPSTREAM_PROTOCOL: i64 = -32052;
    /// mcpmux: the upstream's concurrency cap and wait queue are full.
    pub(crate) const UPSTREAM_SATURATED: i64 = -32053;
    /// mcpmux: the upstream's circuit breaker is open or half-open.
    pub(crate) const UPSTREAM_CIRCUIT_OPEN: i64 = -32054;
}

/// The two wire eras of MCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// `initialize`, sessions, server-to-client requests (2024-11-05 to 2025-11-25).
    Legacy,
    /// Stateless, per-request `_meta` (2026-07-28).
    Modern,
}

/// Whether `version` is one the gateway serves to downstream clients.
pub(crate) fn is_supported_downstream(version: &str) -> bool {
    DOWNSTREAM_VERSIONS.contains(&version)
}

/// The `code` of a JSON-RPC error object (-32603 when it has none that
/// fits an integer). Read once, where an answer enters the gateway.
pub(crate) fn error_code(error: &RawValue) -> i64 {
    #[derive(Deserialize)]
    struct Code {
        code: Option<serde_json::Number>,
    }
    serde_json::from_str::<Code>(error.get())
        .ok()
        .and_then(|c| c.code?.as_i64())
        .unwrap_or(code::INTERNAL_ERROR)
}

#[cfg(test)]
thread_local! {
    /// Messages parsed on this thread, by [`Envelope::parse`] or by
    /// [`checked::response`] (tests count them: [`envelopes_parsed`]).
    static ENVELOPES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts one more read of a whole message on this thread (tests only):
/// for a step outside this module that reads one.
#[cfg(test)]
pub(crate) fn note_envelope_parse() {
    ENVELOPES.with(|n| n.set(n.get() + 1));
}

/// How many envelopes this thread has parsed so far (tests only).
#[cfg(test)]
pub(crate) fn envelopes_parsed() -> usize {
    ENVELOPES.with(std::cell::Cell::get)
}

/// Deepest nesting of arrays and objects accepted in a client's message.
/// Deeper messages are refused before they reach any upstream (some
/// servers drop them silently, leaving the client waiting).
pub(crate) const MAX_NESTING: usize = 128;

/// Whether JSON `text` nests arrays and objects deeper than `max`. One pass
/// over the bytes, aware of strings and escapes; it does not validate.
pub(crate) fn nesting_exceeds(text: &str, max: usize) -> bool {
    let bytes = text.as_bytes();
    // Each level opens with a bracket, so a text with no more brackets
    // than `max` (inside strings or not) cannot exceed it; counting them
    // is a fraction of the walk below, and most messages end here.
    if memchr::memchr2_iter(b'[', b'{', bytes)
        .take(max + 1)
        .count()
        <= max
    {
        return false;
    }
    let mut depth = 0usize;
    let mut at = 0;
    // Only brackets and quotes matter outside strings; inside one, only its
    // closing quote and escapes, so string contents are skipped by memchr.
    while let Some(offset) = memchr::memchr3(b'"', b'[', b'{', &bytes[at..]) {
        let found = at + offset;
        // Closing brackets between `at` and `found` lower the depth.
        depth = depth.saturating_sub(count_closing(&bytes[at..found]));
        match bytes[found] {
            b'"' => match string_end(bytes, found + 1) {
                Some(end) => at = end + 1,
                None => return false,
            },
            _ => {
                depth += 1;
                if depth > max {
                    return true;
                }
                at = found + 1;
            }
        }
    }
    false
}

/// Closing brackets in a stretch with no string in it.
fn count_closing(stretch: &[u8]) -> usize {
    memchr::memchr2_iter(b']', b'}', stretch).count()
}

/// The first byte at or after `at` that is not JSON whitespace.
fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// The index of the quote that closes the string whose contents start at
/// `from`, skipping escaped characters; `None` if it never closes.
fn string_end(bytes: &[u8], mut from: usize) -> Option<usize> {
    loop {
        let i = from + memchr::memchr2(b'"', b'\\', &bytes[from..])?;
        if bytes[i] == b'"' {
            return Some(i);
        }
        // A backslash escapes the next byte, whatever it is.
        from = i + 2;
        if from > bytes.len() {
            return None;
        }
    }
}

/// The error for a message [`nesting_exceeds`] refuses.
pub(crate) fn too_deep() -> RpcError {
    RpcError::new(
        code::INVALID_REQUEST,
        format!("the message nests JSON arrays and objects deeper than {MAX_NESTING} levels"),
    )
}

/// The envelope of one JSON-RPC message, with every body left raw: the
/// params as `P`, by default a checked [`Raw`] span (what a client sends
/// travels so, and the one-pass read makes it), or a serde `RawValue`
/// ([`RawEnvelope`], what the upstream's own messages are read into, whose
/// params go on to the hub as they are).
#[derive(Debug, Deserialize)]
#[serde(bound(deserialize = "P: Deserialize<'de>"))]
pub(crate) struct Envelope<'a, P = Raw<'a>> {
    #[serde(borrow, default)]
    pub jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "raw_including_null")]
    pub id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub method: Option<Cow<'a, str>>,
    #[serde(default)]
    pub params: Option<P>,
    #[serde(borrow, default, deserialize_with = "raw_including_null")]
    pub result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub error: Option<&'a RawValue>,
    /// The params' members, when the one-pass read found them on its way
    /// ([`checked::envelope`]), so they are not looked for again; `None`
    /// when serde read the message.
    #[serde(skip)]
    pub param_members: Option<Vec<checked::Member<'a>>>,
}

/// Keeps an explicit `"id": null` or `"result": null` as a raw `null`
/// instead of folding it into `None`.
fn raw_including_null<'de, D>(deserializer: D) -> Result<Option<&'de RawValue>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    <&RawValue>::deserialize(deserializer).map(Some)
}

/// What kind of message an [`Envelope`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MessageKind {
    Request,
    Notification,
    Response,
}

/// Why an envelope is not a valid JSON-RPC 2.0 message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum EnvelopeError {
    #[error("the \"jsonrpc\" member must be exactly \"2.0\"")]
    Version,
    #[error("a request id must be a string or a number")]
    IdType,
    #[error("a message needs a \"method\", or a \"result\" or \"error\" with an \"id\"")]
    Shape,
}

/// An envelope whose params stay a serde `RawValue`.
pub(crate) type RawEnvelope<'a> = Envelope<'a, &'a RawValue>;

impl<'a> Envelope<'a> {
    /// Parses one message's envelope; the bodies stay borrowed from `text`.
    pub(crate) fn parse(text: &'a str) -> Result<Self, serde_json::Error> {
        // The one-pass read takes the common message; serde the rest.
        match Self::parse_common(text, usize::MAX) {
            Some(envelope) => Ok(envelope),
            None => Self::read(text),
        }
    }

    /// The common message (see [`checked::envelope`]) if `text` is one
    /// that nests at most `max_depth` deep, read and checked in one pass;
    /// `None` for any other text, which [`Envelope::parse`] then reads.
    pub(crate) fn parse_common(text: &'a str, max_depth: usize) -> Option<Self> {
        let envelope = checked::envelope(text, max_depth)?;
        #[cfg(test)]
        ENVELOPES.with(|n| n.set(n.get() + 1));
        Some(envelope)
    }
}

impl<'a> RawEnvelope<'a> {
    /// [`Envelope::parse`], the params kept as a serde `RawValue`.
    pub(crate) fn parse_raw(text: &'a str) -> Result<Self, serde_json::Error> {
        Self::read(text)
    }
}

impl<'a, P: Deserialize<'a>> Envelope<'a, P> {
    fn read(text: &'a str) -> Result<Self, serde_json::Error> {
        #[cfg(test)]
        ENVELOPES.with(|n| n.set(n.get() + 1));
        let envelope = serde_json::from_str(text)?;
        // serde also reads a struct from an array, member by member.
        if text
            .trim_start_matches([' ', '\t', '\n', '\r'])
            .starts_with('[')
        {
            return Err(serde::de::Error::invalid_type(
                serde::de::Unexpected::Seq,
                &"a JSON-RPC message object",
            ));
        }
        Ok(envelope)
    }
}

impl<P> Envelope<'_, P> {
    /// Checks the JSON-RPC 2.0 rules and says what kind of message this is.
    pub(crate) fn kind(&self) -> Result<MessageKind, EnvelopeError> {
        if self.jsonrpc.as_deref() != Some("2.0") {
            return Err(EnvelopeError::Version);
        }
        if let Some(id) = self.id {
            let first = id.get().as_bytes().first().copied();
            let valid = matches!(first, Some(b'"' | b'-' | b'0'..=b'9'));
            // Responses to unparseable requests carry `"id": null`.
            let null_response_id = self.method.is_none() && id.get() == "null";
            if !(valid || null_response_id) {
                return Err(EnvelopeError::IdType);
            }
        }
        match (&self.method, self.id) {
            (Some(_), Some(_)) => Ok(MessageKind::Request),
            (Some(_), None) => Ok(MessageKind::Notification),
            (None, Some(_)) if self.result.is_some() || self.error.is_some() => {
                Ok(MessageKind::Response)
            }
            _ => Err(EnvelopeError::Shape),
        }
    }
}

/// A JSON-RPC error object the gateway builds itself.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<serde_json::Value>,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub(crate) fn with_data(mut self, data: serde_json::Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The error object as JSON text.
    pub(crate) fn to_json(&self) -> String {
        let mut object = serde_json::json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            object["data"] = data.clone();
        }
        object.to_string()
    }
}

/// `{"jsonrpc":"2.0","id":ID,"result":RESULT}`
pub(crate) fn response_frame(id: &str, result: &str) -> String {
    let mut out = response_head(id, result.len() + 1);
    out.push_str(result);
    out.push('}');
    out
}

/// `{"jsonrpc":"2.0","id":ID,"result":`: a response frame up to its result,
/// with room for `more` bytes after it.
pub(crate) fn response_head(id: &str, more: usize) -> String {
    let mut out = String::with_capacity(40 + id.len() + more);
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    out.push_str(id);
    out.push_str(r#","result":"#);
    out
}

/// `{"jsonrpc":"2.0","id":ID,"error":ERROR}` where `error` is already JSON.
pub(crate) fn error_frame_raw(id: &str, error: &str) -> String {
    let mut out = String::with_capacity(40 + id.len() + error.len());
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    out.push_str(id);
    out.push_str(r#","error":"#);
    out.push_str(error);
    out.push('}');
    out
}

/// An error response built from an [`RpcError`]; `id` is `null` when unknown.
pub(crate) fn error_frame(id: Option<&str>, error: &RpcError) -> String {
    error_frame_raw(id.unwrap_or("null"), &error.to_json())
}

/// `{"jsonrpc":"2.0","id":N,"method":M,"params":P}` with a numeric id.
pub(crate) fn request_frame(id: u64, method: &str, params: Option<&str>) -> String {
    let mut out = String::with_capacity(64 + params.map_or(0, str::len));
    push_request_head(&mut out, id, method);
    if let Some(params) = params {
        out.push_str(r#","params":"#);
        out.push_str(params);
    }
    out.push('}');
    out
}

/// `{"jsonrpc":"2.0","id":ID,"method":M`: a request frame up to its params.
pub(crate) fn push_request_head(out: &mut String, id: u64, method: &str) {
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    out.push_str(itoa::Buffer::new().format(id));
    out.push_str(r#","method":"#);
    push_json_string(out, method);
}

/// `{"jsonrpc":"2.0","id":"ID","method":M,"params":P}`: a request under a
/// string id (the gateway's ids for requests it relays to clients).
pub(crate) fn request_frame_with_id(id: &str, method: &str, params: Option<&RawValue>) -> String {
    let mut out = String::with_capacity(64 + params.map_or(0, |p| p.get().len()));
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    push_json_string(&mut out, id);
    out.push_str(r#","method":"#);
    push_json_string(&mut out, method);
    if let Some(params) = params {
        out.push_str(r#","params":"#);
        out.push_str(params.get());
    }
    out.push('}');
    out
}

/// `{"jsonrpc":"2.0","method":M,"params":P}`
pub(crate) fn notification_frame(method: &str, params: Option<&str>) -> String {
    let mut out = String::with_capacity(48 + params.map_or(0, str::len));
    out.push_str(r#"{"jsonrpc":"2.0","method":"#);
    push_json_string(&mut out, method);
    if let Some(params) = params {
        out.push_str(r#","params":"#);
        out.push_str(params);
    }
    out.push('}');
    out
}

/// The bytes serde_json escapes in a string: a quote, a backslash, a
/// control character. One lookup per byte instead of three comparisons.
static ESCAPED: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Appends `s` as a JSON string literal, as serde_json writes it.
pub(crate) fn push_json_string(out: &mut String, s: &str) {
    // Names and ids almost never hold a byte to escape, and are then
    // copied as they are.
    if !needs_escape(s.as_bytes()) {
        out.reserve(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    // serde_json's escaping cannot fail for a &str.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

const ONES: u64 = u64::from_le_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);

/// The high bit of each byte of `word` (little-endian) that is below `n`
/// (at most 0x80). The lowest bit set is exact: a borrow can mark a byte
/// above a marked one falsely, never one below, and no byte at or above
/// 0x80 is marked.
fn bytes_below(word: u64, n: u8) -> u64 {
    word.wrapping_sub(ONES * u64::from(n)) & !word & HIGHS
}

/// The high bit of each byte of `word` that is `byte`, the lowest exact
/// as in [`bytes_below`].
fn bytes_equal(word: u64, byte: u8) -> u64 {
    bytes_below(word ^ (ONES * u64::from(byte)), 1)
}

/// Whether `bytes` hold one that JSON escapes in a string: eight bytes
/// at a time (the word tests are exact: no byte at or above 0x80 or any
/// other byte makes one true), the rest one by one.
fn needs_escape(bytes: &[u8]) -> bool {
    let mut words = bytes.chunks_exact(8);
    for chunk in &mut words {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        if bytes_below(word, 0x20) | bytes_equal(word, b'"') | bytes_equal(word, b'\\') != 0 {
            return true;
        }
    }
    words
        .remainder()
        .iter()
        .any(|&byte| ESCAPED[usize::from(byte)])
}

/// MCP method names the gateway treats specially.
pub(crate) mod checked;
pub(crate) mod hints;
pub(crate) mod method;
pub(crate) mod params;
mod request;

pub(crate) use checked::{Json, Raw};

pub(crate) use params::{Params, ParamsError};
pub(crate) use request::Request;

pub(crate) use method::Method;

/// MCP log levels, least to most severe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LogLevel {
    Debug = 1,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    const ALL: [LogLevel; 8] = [
        Self::Debug,
        Self::Info,
        Self::Notice,
        Self::Warning,
        Self::Error,
        Self::Critical,
        Self::Alert,
        Self::Emergency,
    ];

    pub(crate) fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == s)
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Notice => "notice",
            Self::Warning => "warning",
            Self::Error => "error",
            Self::Critical => "critical",
            Self::Alert => "alert",
            Self::Emergency => "emergency",
        }
    }

    /// The level stored as `level as u8` (0: none).
    pub(crate) fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|l| *l as u8 == v)
    }
}

#[cfg(test)]
pub(crate) mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    /// The word test finds every byte that needs an escape, at every
    /// place in a word and after every other byte, and nothing else.
    #[test]
    fn the_escape_test_is_the_tables() {
        for wanted in 0..=255_u8 {
            for other in [
                0_u8,
                0x01,
                0x1f,
                0x20,
                b'"' + 1,
                b'a',
                0x7f,
                0x80,
                0xc3,
                0xff,
            ] {
                for at in 0..16 {
                    let mut bytes = [other; 16];
                    bytes[at] = wanted;
                    let table = bytes.iter().any(|&b| ESCAPED[usize::from(b)]);
                    assert_eq!(
                        needs_escape(&bytes),
                        table,
                        "{wanted:#x} at {at} among {other:#x}"
                    );
                }
            }
        }
    }

    proptest::proptest! {
        /// The copy without escapes writes what serde_json writes.
        #[test]
        fn a_json_string_is_written_as_serde_json_writes_it(s in "(\\PC|[\"\\\\\u{0}-\u{1f}\u{7f}])*") {
            let mut out = String::from("x");
            push_json_string(&mut out, &s);
            proptest::prop_assert_eq!(&out[1..], serde_json::to_string(&s).unwrap());
        }
    }

    #[test]
    fn classifies_messages() {
        let req = Envelope::parse(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
        assert_eq!(req.kind(), Ok(MessageKind::Request));
        let note = Envelope::parse(r#"{"jsonrpc":"2.0","method":"x"}"#).unwrap();
        assert_eq!(note.kind(), Ok(MessageKind::Notification));
        let resp = Envelope::parse(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#).unwrap();
        assert_eq!(resp.kind(), Ok(MessageKind::Response));
        let bad = Envelope::parse(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#).unwrap();
        assert_eq!(bad.kind(), Err(EnvelopeError::Version));
        let obj_id = Envelope::parse(r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#).unwrap();
        assert_eq!(obj_id.kind(), Err(EnvelopeError::IdType));
        let nothing = Envelope::parse(r#"{"jsonrpc":"2.0","id":3}"#).unwrap();
        assert_eq!(nothing.kind(), Err(EnvelopeError::Shape));
    }

    #[test]
    fn frames_are_valid_json() {
        let frame = request_frame(7, "tools/call", Some(r#"{"name":"x"}"#));
        let v: serde_json::Value = serde_json::from_str(&frame).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(v["params"]["name"], "x");
        let err = error_frame(None, &RpcError::new(code::PARSE_ERROR, "bad \"json\""));
        let v: serde_json::Value = serde_json::from_str(&err).unwrap();
        assert!(v["id"].is_null());
        assert_eq!(v["error"]["message"], "bad \"json\"");
    }

    #[test]
    fn nesting_is_measured_outside_strings_only() {
        let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        assert!(!nesting_exceeds(&deep(128), 128));
        assert!(nesting_exceeds(&deep(129), 128));
        let object = format!(r#"{{"params":{}}}"#, deep(127));
        assert!(nesting_exceeds(&object, 127));
        assert!(!nesting_exceeds(&object, 128));
        // Brackets inside strings, and escaped quotes, do not count.
        let quoted = format!(r#"{{"a":"{}\"{}"}}"#, "[".repeat(500), "{".repeat(500));
        assert!(!nesting_exceeds(&quoted, 2));
    }

    /// The byte-at-a-time definition that [`nesting_exceeds`] speeds up.
    fn nesting_exceeds_bytewise(text: &str, max: usize) -> bool {
        let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
        for byte in text.bytes() {
            if in_string {
                match (escaped, byte) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
                continue;
            }
            match byte {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > max {
                        return true;
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        false
    }

    proptest::proptest! {
        #[test]
        fn nesting_agrees_with_the_bytewise_definition(
            text in r#"[\[\]{}"\\a,:]{0,64}"#,
            max in 0usize..6,
        ) {
            proptest::prop_assert_eq!(
                nesting_exceeds(&text, max),
                nesting_exceeds_bytewise(&text, max)
            );
        }
    }
}
