//! The wire details every downstream HTTP route shares: the MCP header
//! names, JSON-RPC error answers, and reading and parsing one POSTed
//! message within the configured limits.
//!
//! A leaf: it imports no other downstream module, so every route may use it.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::value::RawValue;

use crate::config::HttpConfig;
use crate::protocol::{self, Envelope, MessageKind, RpcError, code};
use crate::router::PageFrame;

pub(crate) use crate::protocol::{SESSION_HEADER, VERSION_HEADER};

/// The headers the steps of a POST read (`Mcp-Session-Id`,
/// `MCP-Protocol-Version`, `Accept`, `Content-Type`, `Content-Length`),
/// found in one pass over its headers: each lookup by name hashes the name,
/// and one that is not a standard name hashes its bytes. Each is the first
/// value of its name, as `HeaderMap::get` gives.
#[derive(Clone, Copy, Default)]
pub(crate) struct RequestHeaders<'h> {
    pub(crate) session: Option<&'h HeaderValue>,
    pub(crate) version: Option<&'h HeaderValue>,
    pub(crate) accept: Option<&'h HeaderValue>,
    pub(crate) content_type: Option<&'h HeaderValue>,
    pub(crate) content_length: Option<&'h HeaderValue>,
}

impl<'h> RequestHeaders<'h> {
    pub(crate) fn of(headers: &'h HeaderMap) -> Self {
        let mut found = RequestHeaders::default();
        for (name, value) in headers {
            let slot = match name {
                n if *n == header::CONTENT_TYPE => &mut found.content_type,
                n if *n == header::CONTENT_LENGTH => &mut found.content_length,
                n if *n == header::ACCEPT => &mut found.accept,
                n if *n == SESSION_HEADER => &mut found.session,
                n if *n == VERSION_HEADER => &mut found.version,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        found
    }
}

/// A request the HTTP edge refuses: the HTTP status, the JSON-RPC error,
/// the id of the request it answers (none: `null`) and any header the
/// refusal carries (a challenge, `Retry-After`). Every refusal of a route
/// is one of these and answers through its one `IntoResponse`; the router's
/// own errors are `RouteError`s, which become frames.
#[derive(Debug)]
pub(crate) struct Refusal {
    status: StatusCode,
    id: Option<String>,
    error: RpcError,
    headers: HeaderMap,
}

impl Refusal {
    /// A refusal with `status` and a JSON-RPC error of `code`.
    pub(crate) fn new(status: StatusCode, code: i64, message: impl Into<String>) -> Refusal {
        Refusal::of(status, RpcError::new(code, message))
    }

    /// A refusal with `status` and `error` as it is (with its `data`).
    pub(crate) fn of(status: StatusCode, error: RpcError) -> Refusal {
        Refusal {
            status,
            id: None,
            error,
            headers: HeaderMap::new(),
        }
    }

    /// The refusal answers the request with this id (raw JSON).
    pub(crate) fn answering(mut self, id: Option<&str>) -> Refusal {
        self.id = id.map(str::to_owned);
        self
    }

    /// The refusal carries `value` in header `name`.
    pub(crate) fn with_header(
        mut self,
        name: axum::http::HeaderName,
        value: axum::http::HeaderValue,
    ) -> Refusal {
        self.headers.insert(name, value);
        self
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = protocol::error_frame(self.id.as_deref(), &self.error);
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        response.headers_mut().extend(self.headers);
        response
    }
}

/// A JSON-RPC frame as an `application/json` answer.
pub(crate) fn json_response(frame: String) -> Response {
    // Built as it goes out: a `String`'s own response would first say
    // `text/plain`, which the JSON type then replaces.
    let mut response = Response::new(Body::from(frame));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A list page's frame as an `application/json` answer: its pieces go out
/// as they are, the shared page uncopied, with a `Content-Length`.
pub(crate) fn page_response(page: PageFrame) -> Response {
    let body = Body::new(Pieces::new(page.into_pieces()));
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A body of a few byte pieces whose whole length is known up front.
struct Pieces {
    pieces: std::collections::VecDeque<Bytes>,
    remaining: u64,
}

impl Pieces {
    fn new(pieces: impl IntoIterator<Item = Bytes>) -> Pieces {
        let pieces: std::collections::VecDeque<Bytes> =
            pieces.into_iter().filter(|p| !p.is_empty()).collect();
        let remaining = pieces.iter().map(|p| p.len() as u64).sum();
        Pieces { pieces, remaining }
    }
}

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let next = self.pieces.pop_front();
        if let Some(piece) = &next {
            self.remaining -= piece.len() as u64;
        }
        std::task::Poll::Ready(next.map(|piece| Ok(http_body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

/// The `Mcp-Session-Id` header, or the 400 its absence gets.
#[allow(clippy::result_large_err)]
pub(crate) fn session_header(headers: &HeaderMap) -> Result<&str, Response> {
    headers
        .get(&SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            Refusal::new(
                StatusCode::BAD_REQUEST,
                code::INVALID_REQUEST,
                "missing Mcp-Session-Id header",
            )
            .into_response()
        })
}

/// The media type a message body must have.
const JSON_TYPE: &str = "application/json";

/// Checks the content type and reads the body within `http.max_body_bytes`
/// and `http.body_read_timeout`.
#[allow(clippy::result_large_err)]
pub(crate) async fn read_body(
    http: &HttpConfig,
    headers: &HeaderMap,
    body: Body,
) -> Result<bytes::Bytes, Response> {
    read_found_body(http, RequestHeaders::of(headers), headers, body).await
}

/// [`read_body`] with the request's headers already found.
#[allow(clippy::result_large_err)]
pub(crate) async fn read_found_body(
    http: &HttpConfig,
    found: RequestHeaders<'_>,
    headers: &HeaderMap,
    body: Body,
) -> Result<bytes::Bytes, Response> {
    if let Some(ct) = found.content_type.and_then(|v| v.to_str().ok())
        && !ct
            .trim_start()
            .get(..JSON_TYPE.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(JSON_TYPE))
    {
        return Err(Refusal::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code::INVALID_REQUEST,
            format!("Content-Type must be application/json, not {ct:?}"),
        )
        .into_response());
    }
    let limit = http.max_body_bytes;
    let too_large = || {
        Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            code::INVALID_REQUEST,
            format!("request body exceeds the limit of {limit} bytes"),
        )
        .into_response()
    };
    // A declared length over the limit is refused before the body is read
    // (and before `100 Continue` invites the client to send it).
    let declared = found
        .content_length
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let timeout = http.body_read_timeout;
    if let Some(declared) = declared.filter(|n| *n > limit as u64) {
        let waits_for_continue = headers
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        if !waits_for_continue && declared <= limit as u64 + DRAIN_BYTES {
            drain(body, declared).await;
        }
        return Err(too_large());
    }
    // A body that is all there when the request is (the usual small POST)
    // is read without a timer: setting one up reads the clock and the
    // runtime's handle for a deadline nothing waits on.
    let mut collecting = std::pin::pin!(collect(body, limit));
    let read = match futures_util::poll!(collecting.as_mut()) {
        std::task::Poll::Ready(read) => Ok(read),
        std::task::Poll::Pending => tokio::time::timeout(timeout, collecting).await,
    };
    match read {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(Unread::TooLarge(rest))) => {
            drain(rest, DRAIN_BYTES).await;
            Err(too_large())
        }
        Ok(Err(Unread::Broken(e))) => Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            code::INVALID_REQUEST,
            format!("the request body could not be read: {e}"),
        )
        .into_response()),
        Err(_) => Err(Refusal::new(
            StatusCode::REQUEST_TIMEOUT,
            code::INVALID_REQUEST,
            format!(
                "the request body did not arrive within {} (http.body_read_timeout)",
                humantime::format_duration(timeout)
            ),
        )
        .into_response()),
    }
}

/// Bytes of a body over the limit that are read and dropped before the
/// 413 is sent. A client that sends its body without waiting (no `Expect:
/// 100-continue`) is still writing when the refusal comes; answering and
/// closing then (hyper closes a connection whose body is not all there)
/// resets it, and a client behind a proxy may see the reset instead of the
/// 413 (the soak saw it, docs/soak.md). Reading what is still coming,
/// within [`DRAIN_WAIT`], lets it read the answer and keep its connection;
/// a larger body is refused at once.
const DRAIN_BYTES: u64 = 1 << 20;
/// How long a refused body is read at most before the 413 is sent anyway.
const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Why a body was not read whole.
enum Unread {
    /// Over the limit: the rest of it, still to come.
    TooLarge(Body),
    /// The connection broke or the body was malformed.
    Broken(String),
}

/// The whole body within `limit` bytes; one frame is passed on uncopied.
async fn collect(mut body: Body, limit: usize) -> Result<Bytes, Unread> {
    use http_body_util::BodyExt as _;
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Unread::Broken(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total += data.len();
        if total > limit {
            return Err(Unread::TooLarge(body));
        }
        chunks.push(data);
    }
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => chunks.concat().into(),
    })
}

/// Reads and drops up to `at_most` bytes of `body`, within [`DRAIN_WAIT`].
async fn drain(mut body: Body, at_most: u64) {
    use http_body_util::BodyExt as _;
    let _ = tokio::time::timeout(DRAIN_WAIT, async {
        let mut read = 0u64;
        while read <= at_most {
            match body.frame().await {
                Some(Ok(frame)) => {
                    read += frame.data_ref().map_or(0, |d| d.len() as u64);
                }
                _ => return,
            }
        }
    })
    .await;
}

/// Parses one JSON-RPC message (batches are refused) and checks its shape.
#[allow(clippy::result_large_err)]
pub(crate) fn parse_message(bytes: &[u8]) -> Result<(Envelope<'_>, MessageKind), Response> {
    let bad = |code, message: String, id: Option<&str>| {
        Refusal::new(StatusCode::BAD_REQUEST, code, message)
            .answering(id)
            .into_response()
    };
    // The whole body is checked at once, with the CPU's vector units
    // where it has them; serde then reads it as the `str` it is.
    let text = simdutf8::basic::from_utf8(bytes)
        .map_err(|_| bad(code::PARSE_ERROR, "body is not valid UTF-8".into(), None))?;
    // The common message, read in one pass that also bounds its depth;
    // anything else is judged step by step below.
    let envelope = match Envelope::parse_common(text, protocol::MAX_NESTING) {
        Some(envelope) => envelope,
        None => parse_uncommon(text, &bad)?,
    };
    match envelope.kind() {
        Ok(kind) => Ok((envelope, kind)),
        Err(e) => Err(bad(
            code::INVALID_REQUEST,
            e.to_string(),
            envelope.id.map(RawValue::get),
        )),
    }
}

/// [`parse_message`] of a message the one-pass read does not take: too
/// deep, a batch, broken, or one serde reads.
#[allow(clippy::result_large_err)]
fn parse_uncommon<'t>(
    text: &'t str,
    bad: &impl Fn(i64, String, Option<&str>) -> Response,
) -> Result<Envelope<'t>, Response> {
    if protocol::nesting_exceeds(text, protocol::MAX_NESTING) {
        let error = protocol::too_deep();
        let id = Envelope::parse(text)
            .ok()
            .and_then(|e| e.id)
            .map(RawValue::get);
        return Err(bad(error.code, error.message, id));
    }
    // Only valid JSON is a batch; broken JSON is a parse error like any other.
    if text.trim_start().starts_with('[')
        && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    {
        return Err(bad(
            code::INVALID_REQUEST,
            "JSON-RPC batches are not supported; send one message per request".into(),
            None,
        ));
    }
    Envelope::parse(text).map_err(|e| bad(code::PARSE_ERROR, format!("parse error: {e}"), None))
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Page;
    use http_body::Body as _;
    use http_body_util::BodyExt as _;
    use std::time::Duration;
    use tokio_stream::StreamExt as _;

    /// The one pass finds what `HeaderMap::get` finds: the first value of
    /// each name, whatever case the client wrote it in, among others.
    #[test]
    fn request_headers_are_the_first_of_their_names() {
        let mut headers = HeaderMap::new();
        assert!(RequestHeaders::of(&headers).session.is_none());
        headers.insert(header::HOST, HeaderValue::from_static("h"));
        headers.append("Mcp-Session-Id", HeaderValue::from_static("first"));
        headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        headers.append("mcp-session-id", HeaderValue::from_static("second"));
        headers.append(
            "MCP-Protocol-Version",
            HeaderValue::from_static("2025-11-25"),
        );
        let found = RequestHeaders::of(&headers);
        assert_eq!(found.session, headers.get(&SESSION_HEADER));
        assert_eq!(found.session.unwrap(), "first");
        assert_eq!(found.version, headers.get(&VERSION_HEADER));
        assert_eq!(found.accept.unwrap(), "*/*");
        assert!(found.content_type.is_none() && found.content_length.is_none());
        headers.remove(&VERSION_HEADER);
        assert!(RequestHeaders::of(&headers).version.is_none());
        // The standard names too: the first value, as `get` gives.
        headers.append(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.append(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        headers.append(header::CONTENT_LENGTH, HeaderValue::from_static("12"));
        headers.append(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        let found = RequestHeaders::of(&headers);
        assert_eq!(found.content_type, headers.get(header::CONTENT_TYPE));
        assert_eq!(found.content_type.unwrap(), "application/json");
        assert_eq!(found.content_length, headers.get(header::CONTENT_LENGTH));
        assert_eq!(found.accept, headers.get(header::ACCEPT));
        assert_eq!(found.accept.unwrap(), "*/*");
    }

    #[tokio::test]
    async fn a_page_answer_has_its_exact_length_and_the_whole_frame() {
        let page = Page::from(r#"{"tools":[{"name":"a"}]}"#.to_owned());
        let response = page_response(PageFrame::new("3", page, None));
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body = response.into_body();
        let expected = r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"a"}]}}"#;
        assert_eq!(body.size_hint().exact(), Some(expected.len() as u64));
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(std::str::from_utf8(&bytes).unwrap(), expected);
    }

    fn http(limit: usize) -> HttpConfig {
        HttpConfig {
            max_body_bytes: limit,
            allowed_origins: Vec::new(),
            sse_keepalive: Duration::from_secs(15),
            allowed_hosts: Vec::new(),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 16,
        }
    }

    /// A body whose chunks the test sends, and the headers declaring `length`.
    fn arriving(length: Option<usize>) -> (tokio::sync::mpsc::Sender<Bytes>, HeaderMap, Body) {
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        let stream =
            tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, std::convert::Infallible>);
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        if let Some(length) = length {
            headers.insert(header::CONTENT_LENGTH, length.to_string().parse().unwrap());
        }
        (tx, headers, Body::from_stream(stream))
    }

    /// Found by the soak: a body over the limit that is still arriving is
    /// read to its end before the 413, so the client (or the proxy in
    /// between) is not reset while it writes.
    #[tokio::test(start_paused = true)]
    async fn a_body_over_the_limit_is_read_to_its_end_before_the_413() {
        for declared in [Some(3000), None] {
            let (tx, headers, body) = arriving(declared);
            let config = http(1024);
            let mut refused = std::pin::pin!(read_body(&config, &headers, body));
            tx.send(Bytes::from(vec![b'x'; 2000])).await.unwrap();
            assert!(
                futures_util::FutureExt::now_or_never(refused.as_mut()).is_none(),
                "answered while the body ({declared:?}) was still arriving"
            );
            tx.send(Bytes::from(vec![b'x'; 1000])).await.unwrap();
            drop(tx);
            let answer = refused.await.unwrap_err();
            assert_eq!(answer.status(), StatusCode::PAYLOAD_TOO_LARGE);
        }
    }

    /// A client that waits for `100 Continue`, or declares far more than
    /// the limit, is refused at once, without a byte read.
    #[tokio::test(start_paused = true)]
    async fn a_body_far_over_the_limit_or_awaiting_continue_is_refused_at_once() {
        let config = http(1024);
        let (_tx, headers, body) = arriving(Some(64 << 20));
        let answer = futures_util::FutureExt::now_or_never(read_body(&config, &headers, body));
        assert_eq!(
            answer.unwrap().unwrap_err().status(),
            StatusCode::PAYLOAD_TOO_LARGE
        );
        let (_tx, mut headers, body) = arriving(Some(3000));
        headers.insert(header::EXPECT, "100-continue".parse().unwrap());
        let answer = futures_util::FutureExt::now_or_never(read_body(&config, &headers, body));
        assert_eq!(
            answer.unwrap().unwrap_err().status(),
            StatusCode::PAYLOAD_TOO_LARGE
        );
    }

    /// A client that stops sending a refused body gets its 413 after
    /// [`DRAIN_WAIT`], not after `http.body_read_timeout`.
    #[tokio::test(start_paused = true)]
    async fn a_refused_body_that_stops_arriving_is_answered_after_the_drain_wait() {
        let config = http(1024);
        let (tx, headers, body) = arriving(Some(3000));
        let started = tokio::time::Instant::now();
        let answer = read_body(&config, &headers, body).await.unwrap_err();
        assert_eq!(answer.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(started.elapsed() < config.body_read_timeout);
        drop(tx);
    }

    /// A body that stops arriving is answered 408 once
    /// `http.body_read_timeout` has passed since it was first read.
    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_arriving_is_answered_408_at_the_read_timeout() {
        let config = http(1024);
        let (tx, headers, body) = arriving(Some(100));
        tx.send(Bytes::from_static(b"{\"a\":")).await.unwrap();
        let started = tokio::time::Instant::now();
        let answer = read_body(&config, &headers, body).await.unwrap_err();
        assert_eq!(answer.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(started.elapsed(), config.body_read_timeout);
        let text = answer.into_body().collect().await.unwrap().to_bytes();
        assert!(
            String::from_utf8_lossy(&text).contains("http.body_read_timeout"),
            "{text:?}"
        );
        drop(tx);
    }

    /// A body not all there at first is read whole when the rest comes
    /// within the timeout, however late in it.
    #[tokio::test(start_paused = true)]
    async fn a_body_whose_rest_comes_within_the_timeout_is_read_whole() {
        let config = http(1024);
        let (tx, headers, body) = arriving(None);
        tx.send(Bytes::from_static(b"{\"a\":")).await.unwrap();
        let mut reading = std::pin::pin!(read_body(&config, &headers, body));
        assert!(futures_util::FutureExt::now_or_never(reading.as_mut()).is_none());
        tokio::time::advance(config.body_read_timeout - Duration::from_millis(1)).await;
        tx.send(Bytes::from_static(b"1}")).await.unwrap();
        drop(tx);
        assert_eq!(&reading.await.unwrap()[..], b"{\"a\":1}");
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_read_whole() {
        let config = http(1024);
        let (tx, headers, body) = arriving(None);
        tx.send(Bytes::from_static(b"{\"a\":")).await.unwrap();
        tx.send(Bytes::from_static(b"1}")).await.unwrap();
        drop(tx);
        let bytes = read_body(&config, &headers, body).await.unwrap();
        assert_eq!(&bytes[..], b"{\"a\":1}");
    }
}
