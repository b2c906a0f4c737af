//! One HTTP/1.1 exchange on a kept upstream connection, for `pool`.
//!
//! The request goes out whole (its head, built here, and its body in one
//! vectored write); the answer's head is parsed with httparse, and its
//! body is framed as RFC 9112 §6.3 says for an answer to a POST: none for
//! 204 and 304, chunked when `Transfer-Encoding` ends in `chunked` (which
//! overrides any `Content-Length`), else the length every
//! `Content-Length` value agrees on, else until the server closes.
//! Interim 1xx answers are skipped; 101 was never asked for and is an
//! error. A connection may be used again only when its answer was framed
//! by a length or by chunks, neither side asked to close, no
//! `Content-Length` came with chunks, and nothing follows the body.
//!
//! The exchange runs in the caller's task on the socket it owns: no
//! connection task, no channel between them, and the answer's head and
//! body are slices of one read buffer (see docs/benchmark.md for what
//! hyper's client connection cost per call on the same path).

use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf as _, Bytes, BytesMut};
use hyper::http::{self, HeaderMap, HeaderName, HeaderValue, StatusCode, Version, header};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

/// The most header fields an answer's head may have.
const MAX_HEADERS: usize = 100;
/// The largest answer head (status line and fields) read.
const MAX_HEAD: usize = 64 * 1024;
/// The longest chunk-size line or trailer field.
const MAX_LINE: usize = 16 * 1024;
/// Room made in the read buffer before each read: at least this much...
const READ_AT_LEAST: usize = 8 * 1024;
/// ...and at most this much, for a body whose length is known.
const READ_AT_MOST: usize = 64 * 1024;

/// Why an exchange, or the reading of its answer's body, failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum WireError {
    #[error("the upstream closed the connection before answering")]
    ClosedBeforeAnswer,
    #[error("the upstream closed the connection in the middle of its answer")]
    Truncated,
    #[error("the upstream's answer is not HTTP/1.x: {0}")]
    Head(#[from] httparse::Error),
    #[error("the upstream's answer head is larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("the upstream's answer is framed badly: {0}")]
    Framing(&'static str),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A failed write, and whether not one byte of the request went out (so
/// it may be sent on another connection as it is).
#[derive(Debug)]
pub(super) struct WriteFailed {
    pub(super) error: WireError,
    pub(super) untouched: bool,
}

/// An open connection to the upstream and what was read from it and not
/// yet handed on.
pub(super) struct Connection {
    io: TcpStream,
    read: BytesMut,
    /// The request head being written, kept for the next one.
    head: Vec<u8>,
}

/// An answer's status line and fields, and how its body is framed.
pub(super) struct Head {
    pub(super) status: StatusCode,
    pub(super) version: Version,
    pub(super) headers: HeaderMap,
    pub(super) framing: Framing,
    /// Whether the connection may carry another request once the body
    /// has been read to its end.
    pub(super) reusable: bool,
}

/// Where an answer's body ends, and how far it has been read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Framing {
    /// This many bytes are left.
    Length(u64),
    Chunked(Chunk),
    /// The body ends when the server closes the connection.
    UntilClose,
    /// Read to its end.
    Ended,
}

/// What one step through a chunked body's framing did.
enum Step {
    Moved,
    NeedMore,
    /// Past the last chunk and the trailer section.
    End,
}

/// Where a chunked body's reading stands.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Chunk {
    /// At a chunk-size line.
    Size,
    /// In a chunk's data: this many bytes are left.
    Data(u64),
    /// At the CRLF after a chunk's data.
    DataEnd,
    /// In the trailer section: this many fields have been skipped.
    Trailers(usize),
}

impl Framing {
    /// Whether nothing of the body is left to read.
    pub(super) fn is_end(&self) -> bool {
        matches!(self, Framing::Length(0) | Framing::Ended)
    }

    /// The exact length left, where the head said it.
    pub(super) fn exact(&self) -> Option<u64> {
        match self {
            Framing::Length(left) => Some(*left),
            Framing::Ended => Some(0),
            _ => None,
        }
    }
}

impl Connection {
    pub(super) fn new(io: TcpStream) -> Connection {
        Connection {
            io,
            read: BytesMut::new(),
            head: Vec::new(),
        }
    }

    /// Whether an idle connection can take a request: the server has not
    /// closed it and sent nothing since its last answer. Free unless the
    /// socket was reported readable since (then one non-blocking read
    /// tells a close or stray bytes from readiness left over).
    pub(super) fn is_usable(&mut self) -> bool {
        if !self.read.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self.io.poll_read_ready(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            Poll::Ready(Ok(())) => {
                let mut probe = [0u8; 1];
                matches!(self.io.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            }
        }
    }

    /// Writes `post` whole, head and body, under `host`.
    pub(super) async fn write_request(
        &mut self,
        post: &Post<'_>,
        host: &HeaderValue,
    ) -> Result<(), WriteFailed> {
        encode_head(&mut self.head, post, host);
        let body = post.body;
        let (mut head_at, mut body_at) = (0, 0);
        while head_at < self.head.len() || body_at < body.len() {
            let parts = [
                IoSlice::new(&self.head[head_at..]),
                IoSlice::new(&body[body_at..]),
            ];
            let untouched = head_at == 0;
            let written = match self.io.write_vectored(&parts).await {
                Ok(0) => Err(std::io::Error::from(std::io::ErrorKind::WriteZero)),
                other => other,
            }
            .map_err(|e| WriteFailed {
                error: e.into(),
                untouched,
            })?;
            let from_head = written.min(self.head.len() - head_at);
            head_at += from_head;
            body_at += written - from_head;
        }
        Ok(())
    }

    /// Reads the answer's head, past any interim (1xx) answers.
    pub(super) async fn read_head(&mut self) -> Result<Head, WireError> {
        let mut read_any = !self.read.is_empty();
        loop {
            if let Some(head) = self.parse_head()? {
                return Ok(head);
            }
            if self.read.len() >= MAX_HEAD {
                return Err(WireError::HeadTooLarge);
            }
            let read = std::future::poll_fn(|cx| self.poll_fill(cx, READ_AT_LEAST)).await?;
            if read == 0 {
                return Err(match read_any {
                    false => WireError::ClosedBeforeAnswer,
                    true => WireError::Truncated,
                });
            }
            read_any = true;
        }
    }

    /// The next piece of a body framed by `framing` (which records how
    /// far it has been read): `None` at its end.
    pub(super) fn poll_body(
        &mut self,
        framing: &mut Framing,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, WireError>>> {
        loop {
            let wanted = match framing {
                Framing::Ended => return Poll::Ready(None),
                Framing::Length(0) => {
                    *framing = Framing::Ended;
                    return Poll::Ready(None);
                }
                Framing::Length(left) | Framing::Chunked(Chunk::Data(left)) => {
                    let left_now = usize::try_from(*left).unwrap_or(usize::MAX);
                    if !self.read.is_empty() {
                        let take = left_now.min(self.read.len());
                        *left -= take as u64;
                        if *framing == Framing::Chunked(Chunk::Data(0)) {
                            *framing = Framing::Chunked(Chunk::DataEnd);
                        }
                        return Poll::Ready(Some(Ok(self.read.split_to(take).freeze())));
                    }
                    left_now
                }
                Framing::Chunked(chunk) => match self.step_chunked(chunk) {
                    Err(e) => return Poll::Ready(Some(Err(e))),
                    Ok(Step::Moved) => continue,
                    Ok(Step::End) => {
                        *framing = Framing::Ended;
                        return Poll::Ready(None);
                    }
                    Ok(Step::NeedMore) => READ_AT_LEAST,
                },
                Framing::UntilClose => {
                    if !self.read.is_empty() {
                        return Poll::Ready(Some(Ok(self.read.split().freeze())));
                    }
                    READ_AT_LEAST
                }
            };
            match ready!(self.poll_fill(cx, wanted)) {
                Err(e) => return Poll::Ready(Some(Err(e.into()))),
                Ok(0) if *framing == Framing::UntilClose => {
                    *framing = Framing::Ended;
                    return Poll::Ready(None);
                }
                Ok(0) => return Poll::Ready(Some(Err(WireError::Truncated))),
                Ok(_) => {}
            }
        }
    }

    /// Takes what the read buffer holds of a chunked body's framing: a
    /// size line, the CRLF after a chunk's data, a trailer field.
    fn step_chunked(&mut self, chunk: &mut Chunk) -> Result<Step, WireError> {
        match chunk {
            Chunk::Size => match httparse::parse_chunk_size(&self.read) {
                Ok(httparse::Status::Complete((used, size))) => {
                    self.read.advance(used);
                    *chunk = match size {
                        0 => Chunk::Trailers(0),
                        _ => Chunk::Data(size),
                    };
                    Ok(Step::Moved)
                }
                Ok(httparse::Status::Partial) if self.read.len() > MAX_LINE => {
                    Err(WireError::Framing("a chunk-size line is too long"))
                }
                Ok(httparse::Status::Partial) => Ok(Step::NeedMore),
                Err(_) => Err(WireError::Framing("a chunk size is not hexadecimal")),
            },
            Chunk::DataEnd => match self.read.get(..2) {
                Some(b"\r\n") => {
                    self.read.advance(2);
                    *chunk = Chunk::Size;
                    Ok(Step::Moved)
                }
                None if self.read.first().is_none_or(|b| *b == b'\r') => Ok(Step::NeedMore),
                _ => Err(WireError::Framing("a chunk's data does not end in CRLF")),
            },
            Chunk::Trailers(fields) => {
                let Some(end) = memchr::memmem::find(&self.read, b"\r\n") else {
                    return match self.read.len() > MAX_LINE {
                        true => Err(WireError::Framing("a trailer field is too long")),
                        false => Ok(Step::NeedMore),
                    };
                };
                self.read.advance(end + 2);
                if end == 0 {
                    return Ok(Step::End);
                }
                // Trailer fields are read past: nothing here uses them.
                *fields += 1;
                match *fields > MAX_HEADERS {
                    true => Err(WireError::Framing("too many trailer fields")),
                    false => Ok(Step::Moved),
                }
            }
            // Data is taken by `poll_body` itself, never stepped over.
            Chunk::Data(_) => Ok(Step::NeedMore),
        }
    }

    /// Reads once into the buffer, with room for `wanted` bytes (within
    /// the bounds above); the count read, 0 at the end of the stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>, wanted: usize) -> Poll<std::io::Result<usize>> {
        let room = wanted.clamp(READ_AT_LEAST, READ_AT_MOST);
        if self.read.capacity() - self.read.len() < room / 2 {
            self.read.reserve(room);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.read)
    }

    /// The answer's head, once the buffer holds it whole; interim answers
    /// are taken out of the buffer and passed over.
    fn parse_head(&mut self) -> Result<Option<Head>, WireError> {
        loop {
            if self.read.is_empty() {
                return Ok(None);
            }
            let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
            let mut answer = httparse::Response::new(&mut []);
            let length = match httparse::ParserConfig::default()
                .parse_response_with_uninit_headers(&mut answer, &self.read, &mut fields)?
            {
                httparse::Status::Complete(length) => length,
                httparse::Status::Partial => return Ok(None),
            };
            let code = answer.code.unwrap_or_default();
            if (100..200).contains(&code) {
                if code == 101 {
                    return Err(WireError::Framing("the upstream switched protocols"));
                }
                self.read.advance(length);
                continue;
            }
            let status = StatusCode::from_u16(code)
                .map_err(|_| WireError::Framing("the status code is out of range"))?;
            let version = match answer.version {
                Some(0) => Version::HTTP_10,
                _ => Version::HTTP_11,
            };
            let mut reading = Fields::default();
            let mut headers = HeaderMap::with_capacity(answer.headers.len());
            for field in answer.headers.iter() {
                let name = match common_name(field.name) {
                    Some(name) => name,
                    None => HeaderName::from_bytes(field.name.as_bytes())
                        .map_err(|_| WireError::Framing("a field name is not a token"))?,
                };
                let value = HeaderValue::from_bytes(field.value)
                    .map_err(|_| WireError::Framing("a field value has a control character"))?;
                reading.note(&name, &value)?;
                headers.append(name, value);
            }
            let (framing, reusable) = reading.framing(status, version)?;
            self.read.advance(length);
            return Ok(Some(Head {
                status,
                version,
                headers,
                framing,
                reusable,
            }));
        }
    }
}

/// The fields nearly every answer of an MCP server has, each found by
/// its length and a case-blind compare: `HeaderName::from_bytes` lowers
/// each name into a buffer and then matches it against every standard
/// name, which cost more than the rest of the head's parse.
static COMMON_NAMES: [&HeaderName; 8] = [
    &header::CONTENT_TYPE,
    &header::CONTENT_LENGTH,
    &header::DATE,
    &header::TRANSFER_ENCODING,
    &header::CONNECTION,
    &header::CACHE_CONTROL,
    &header::SERVER,
    &crate::protocol::SESSION_HEADER,
];

/// `name` as one of [`COMMON_NAMES`], spelled in any case; `None` for
/// another (which [`HeaderName::from_bytes`] then checks and names).
fn common_name(name: &str) -> Option<HeaderName> {
    COMMON_NAMES
        .iter()
        .find(|common| {
            let common = common.as_str();
            common.len() == name.len() && common.eq_ignore_ascii_case(name)
        })
        .map(|&common| common.clone())
}

/// What an answer's fields say of its framing and of the connection.
#[derive(Default)]
struct Fields {
    length: Option<u64>,
    /// Some when `Transfer-Encoding` came: whether its last coding is
    /// `chunked`.
    chunked: Option<bool>,
    close: bool,
    keep_alive: bool,
}

impl Fields {
    fn note(&mut self, name: &HeaderName, value: &HeaderValue) -> Result<(), WireError> {
        let text = || {
            value
                .to_str()
                .map_err(|_| WireError::Framing("a framing field is not ASCII"))
        };
        if name == header::CONTENT_LENGTH {
            for part in text()?.split(',') {
                let part = part.trim();
                if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(WireError::Framing("Content-Length is not a number"));
                }
                let length = part
                    .parse::<u64>()
                    .map_err(|_| WireError::Framing("Content-Length is too large"))?;
                if self.length.is_some_and(|earlier| earlier != length) {
                    return Err(WireError::Framing("Content-Length values disagree"));
                }
                self.length = Some(length);
            }
        } else if name == header::TRANSFER_ENCODING {
            if let Some(last) = text()?.split(',').map(str::trim).rfind(|c| !c.is_empty()) {
                self.chunked = Some(last.eq_ignore_ascii_case("chunked"));
            }
        } else if name == header::CONNECTION {
            for option in text()?.split(',').map(str::trim) {
                self.close |= option.eq_ignore_ascii_case("close");
                self.keep_alive |= option.eq_ignore_ascii_case("keep-alive");
            }
        }
        Ok(())
    }

    /// The body's framing, and whether the connection may be reused.
    fn framing(self, status: StatusCode, version: Version) -> Result<(Framing, bool), WireError> {
        let persistent = match version {
            Version::HTTP_10 => self.keep_alive && !self.close,
            _ => !self.close,
        };
        if status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
            return Ok((Framing::Length(0), persistent));
        }
        match (self.chunked, self.length) {
            (Some(_), _) if version == Version::HTTP_10 => Err(WireError::Framing(
                "an HTTP/1.0 answer has Transfer-Encoding",
            )),
            (Some(true), length) => Ok((
                Framing::Chunked(Chunk::Size),
                persistent && length.is_none(),
            )),
            (Some(false), _) => Ok((Framing::UntilClose, false)),
            (None, Some(length)) => Ok((Framing::Length(length), persistent)),
            (None, None) => Ok((Framing::UntilClose, false)),
        }
    }
}

/// A request for [`Connection::write_request`].
pub(super) struct Post<'a> {
    pub(super) method: &'a http::Method,
    /// The request target: the URL's path and query.
    pub(super) target: &'a str,
    /// The fields every request of the link carries, encoded once.
    pub(super) fixed: &'a FixedFields,
    /// This request's own fields; one named like a fixed field replaces it.
    pub(super) extra: &'a HeaderMap,
    pub(super) body: &'a [u8],
}

/// Header fields encoded once (`name: value` and CRLF each), for every
/// request of a link. `Host` and the framing fields are left out: the
/// pool and the body's length supply those.
pub(super) struct FixedFields(Vec<(HeaderName, Box<[u8]>)>);

impl FixedFields {
    pub(super) fn new(headers: &HeaderMap) -> FixedFields {
        let fields = headers
            .iter()
            .filter(|(name, _)| !is_ours(name))
            .map(|(name, value)| {
                let mut line = Vec::with_capacity(name.as_str().len() + value.len() + 4);
                push_field(&mut line, name, value);
                (name.clone(), line.into_boxed_slice())
            })
            .collect();
        FixedFields(fields)
    }
}

/// Fields this exchange writes itself, whatever a caller put in.
fn is_ours(name: &HeaderName) -> bool {
    name == header::HOST || name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING
}

fn push_field(out: &mut Vec<u8>, name: &HeaderName, value: &HeaderValue) {
    out.extend_from_slice(name.as_str().as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The head of `post` under `host`, into `out`.
fn encode_head(out: &mut Vec<u8>, post: &Post<'_>, host: &HeaderValue) {
    out.clear();
    out.extend_from_slice(post.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(post.target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, line) in &post.fixed.0 {
        if !post.extra.contains_key(name) {
            out.extend_from_slice(line);
        }
    }
    for (name, value) in post.extra {
        if !is_ours(name) {
            push_field(out, name, value);
        }
    }
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(post.body.len()).as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
}

#[cfg(test)]
#[path = "http1_tests.rs"]
mod tests;
