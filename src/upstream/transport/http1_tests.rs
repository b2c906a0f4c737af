//! The HTTP/1.1 exchange against scripted servers on 127.0.0.1:0 that
//! answer with exactly the bytes a case needs (framings hyper's server
//! would never produce, written a piece at a time), through the pool, as
//! the gateway uses it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::http;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;

use super::{FixedFields, Post, WireError};
use crate::upstream::transport::pool::{Pool, PoolError, PooledBody};

/// One scripted answer: the pieces written one after the other (each
/// flushed alone), and whether the server closes the connection after.
struct Answer {
    pieces: Vec<Vec<u8>>,
    close: bool,
}

fn answer(text: &str) -> Answer {
    Answer {
        pieces: vec![text.as_bytes().to_vec()],
        close: false,
    }
}

/// Every byte of `text` in a piece of its own.
fn bytewise(text: &str, close: bool) -> Answer {
    Answer {
        pieces: text.bytes().map(|b| vec![b]).collect(),
        close,
    }
}

fn closing(text: &str) -> Answer {
    Answer {
        close: true,
        ..answer(text)
    }
}

/// What a scripted server saw.
struct Server {
    pool: Pool,
    accepted: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<String>>>,
    /// One message each time the server closed a connection.
    closed: mpsc::UnboundedReceiver<()>,
}

/// A server that answers each request it reads (on whichever connection)
/// with the next of `answers`, and closes a connection after an answer
/// that says so, or once the answers run out.
async fn scripted(answers: Vec<Answer>) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (closed_tx, closed) = mpsc::unbounded_channel();
    let queue = Arc::new(Mutex::new(
        answers
            .into_iter()
            .collect::<std::collections::VecDeque<_>>(),
    ));
    let (counter, seen) = (accepted.clone(), requests.clone());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let (queue, seen, closed_tx) = (queue.clone(), seen.clone(), closed_tx.clone());
            tokio::spawn(async move {
                while let Some(request) = read_request(&mut stream).await {
                    seen.lock().unwrap().push(request);
                    let Some(next) = queue.lock().unwrap().pop_front() else {
                        break;
                    };
                    for piece in &next.pieces {
                        if stream.write_all(piece).await.is_err() {
                            break;
                        }
                        let _ = stream.flush().await;
                    }
                    if next.close {
                        break;
                    }
                }
                drop(stream);
                let _ = closed_tx.send(());
            });
        }
    });
    let uri: http::Uri = format!("http://{addr}/mcp").parse().expect("uri");
    Server {
        pool: Pool::new(&uri, Duration::from_secs(5), Duration::from_secs(60)).expect("authority"),
        accepted,
        requests,
        closed,
    }
}

/// One request, head and body, as text; none once the client closed.
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut bytes = Vec::new();
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(head)) = request.parse(&bytes) {
            let length: usize = request
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map_or(0, |h| {
                    std::str::from_utf8(h.value).unwrap().parse().unwrap()
                });
            if bytes.len() >= head + length {
                return Some(String::from_utf8(bytes).expect("text"));
            }
        }
        let mut buffer = [0u8; 4096];
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => bytes.extend_from_slice(&buffer[..n]),
        }
    }
}

fn post(body: &'static str) -> http::Request<Bytes> {
    let mut request = http::Request::new(Bytes::from_static(body.as_bytes()));
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = "/mcp?x=1".parse().expect("path");
    request
}

/// `request` through the pool: its fields as the link's fixed ones.
async fn send(
    pool: &Pool,
    request: &http::Request<Bytes>,
) -> Result<http::Response<PooledBody>, PoolError> {
    send_with(pool, request, &http::HeaderMap::new()).await
}

/// `request` with `extra` as its own fields.
async fn send_with(
    pool: &Pool,
    request: &http::Request<Bytes>,
    extra: &http::HeaderMap,
) -> Result<http::Response<PooledBody>, PoolError> {
    let fixed = FixedFields::new(request.headers());
    let target = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let post = Post {
        method: request.method(),
        target,
        fixed: &fixed,
        extra,
        body: request.body(),
    };
    pool.send(post).await
}

/// The body read to its end.
async fn read(answer: http::Response<PooledBody>) -> Result<String, WireError> {
    let body = answer.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8(body.to_vec()).expect("utf-8"))
}

async fn exchange(server: &Server, body: &'static str) -> Result<String, String> {
    let answer = send(&server.pool, &post(body))
        .await
        .map_err(|e| e.to_string())?;
    read(answer).await.map_err(|e| e.to_string())
}

#[tokio::test]
async fn the_request_is_one_head_with_the_pools_host_and_the_bodys_length() {
    let server = scripted(vec![answer(
        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
    )])
    .await;
    let mut request = post("{\"a\":1}");
    let headers = request.headers_mut();
    headers.insert("mcp-session-id", "s-1".parse().unwrap());
    headers.insert(http::header::HOST, "elsewhere".parse().unwrap());
    headers.insert(http::header::CONTENT_LENGTH, "999".parse().unwrap());
    headers.insert(http::header::TRANSFER_ENCODING, "chunked".parse().unwrap());
    headers.insert("x-replaced", "fixed".parse().unwrap());
    let mut extra = http::HeaderMap::new();
    extra.insert("x-replaced", "extra".parse().unwrap());
    extra.insert("x-added", "yes".parse().unwrap());
    let answer = send_with(&server.pool, &request, &extra)
        .await
        .expect("answer");
    assert_eq!(answer.status(), http::StatusCode::OK);
    assert_eq!(read(answer).await.expect("body"), "ok");
    let seen = server.requests.lock().unwrap()[0].clone();
    let (head, body) = seen.split_once("\r\n\r\n").expect("a head");
    let mut lines = head.split("\r\n");
    assert_eq!(lines.next(), Some("POST /mcp?x=1 HTTP/1.1"));
    let fields: Vec<&str> = lines.collect();
    assert_eq!(
        fields.iter().filter(|f| f.starts_with("host: ")).count(),
        1,
        "{fields:?}"
    );
    assert!(fields[0].starts_with("host: 127.0.0.1:"), "{fields:?}");
    assert!(fields.contains(&"mcp-session-id: s-1"), "{fields:?}");
    assert!(fields.contains(&"content-length: 7"), "{fields:?}");
    assert!(fields.contains(&"x-replaced: extra"), "{fields:?}");
    assert!(fields.contains(&"x-added: yes"), "{fields:?}");
    assert!(!fields.contains(&"x-replaced: fixed"), "{fields:?}");
    assert!(
        !fields
            .iter()
            .any(|f| f.contains("999") || f.starts_with("transfer-encoding")),
        "{fields:?}"
    );
    assert_eq!(body, "{\"a\":1}");
}

#[tokio::test]
async fn a_chunked_answer_arriving_byte_by_byte_is_read_whole_and_its_connection_reused() {
    let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                   5;name=value\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nx-digest: abc\r\n\r\n";
    let server = scripted(vec![
        bytewise(chunked, false),
        answer("HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nnext"),
    ])
    .await;
    assert_eq!(exchange(&server, "one").await.as_deref(), Ok("hello world"));
    assert_eq!(exchange(&server, "two").await.as_deref(), Ok("next"));
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn interim_answers_are_passed_over() {
    let server = scripted(vec![answer(
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n\
         HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n",
    )])
    .await;
    let answer = send(&server.pool, &post("x")).await.expect("answer");
    assert_eq!(answer.status(), http::StatusCode::ACCEPTED);
    assert!(answer.headers().get("link").is_none());
    assert_eq!(read(answer).await.expect("body"), "");
}

#[tokio::test]
async fn an_answer_without_a_length_runs_until_close_and_its_connection_is_not_reused() {
    let mut until_close = bytewise(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: 1\n\n",
        true,
    );
    until_close.pieces.push(b"data: 2\n\n".to_vec());
    let server = scripted(vec![
        until_close,
        answer("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n2"),
    ])
    .await;
    assert_eq!(
        exchange(&server, "one").await.as_deref(),
        Ok("data: 1\n\ndata: 2\n\n")
    );
    assert_eq!(exchange(&server, "two").await.as_deref(), Ok("2"));
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn connection_close_and_http_1_0_are_honoured() {
    let server = scripted(vec![
        answer("HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\ncontent-length: 1\r\n\r\na"),
        answer("HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\nb"),
        answer("HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 1\r\n\r\nc"),
        answer("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nd"),
    ])
    .await;
    for expected in ["a", "b", "c", "d"] {
        assert_eq!(exchange(&server, "x").await.as_deref(), Ok(expected));
    }
    // a and b each closed theirs; c (1.0 keep-alive) passed its on to d.
    assert_eq!(server.accepted.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn chunks_with_a_content_length_are_read_as_chunks_on_a_connection_not_reused() {
    let server = scripted(vec![
        answer("HTTP/1.1 200 OK\r\ncontent-length: 100\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"),
        answer("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nz"),
    ])
    .await;
    assert_eq!(exchange(&server, "x").await.as_deref(), Ok("ok"));
    assert_eq!(exchange(&server, "y").await.as_deref(), Ok("z"));
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_204_frees_its_connection_at_once() {
    let server = scripted(vec![
        answer("HTTP/1.1 204 No Content\r\n\r\n"),
        answer("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nz"),
    ])
    .await;
    let answer = send(&server.pool, &post("x")).await.expect("answer");
    assert_eq!(answer.status(), http::StatusCode::NO_CONTENT);
    // The body is not read, yet the connection went back.
    let kept = answer;
    assert_eq!(exchange(&server, "y").await.as_deref(), Ok("z"));
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
    drop(kept);
}

#[tokio::test]
async fn an_idle_connection_the_server_closed_is_replaced_before_anything_is_sent() {
    // The server answers without saying it will close, then closes.
    let mut server = scripted(vec![
        closing("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na"),
        answer("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nb"),
    ])
    .await;
    assert_eq!(exchange(&server, "x").await.as_deref(), Ok("a"));
    server.closed.recv().await.expect("the server closed");
    // Deferred past the runtime's next look at its sockets: the close
    // has been seen.
    tokio::task::yield_now().await;
    assert_eq!(exchange(&server, "y").await.as_deref(), Ok("b"));
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
    assert_eq!(
        server.requests.lock().unwrap().len(),
        2,
        "each request sent once"
    );
}

/// Answers that are errors, and what each is called.
#[tokio::test]
async fn badly_framed_answers_are_errors_naming_the_fault() {
    let cases: [(&str, &str); 8] = [
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd",
            "Content-Length values disagree",
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 3, 4\r\n\r\nabcd",
            "Content-Length values disagree",
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            "Content-Length is not a number",
        ),
        (
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "switched protocols",
        ),
        (
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            "not hexadecimal",
        ),
        (
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nokXX",
            "does not end in CRLF",
        ),
        (
            "HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
            "HTTP/1.0 answer has Transfer-Encoding",
        ),
        ("HTTP/1.1 2000 OK\r\n\r\n", "not HTTP/1.x"),
    ];
    for (text, fault) in cases {
        let server = scripted(vec![closing(text)]).await;
        let outcome = exchange(&server, "x").await;
        assert!(
            outcome.as_ref().is_err_and(|e| e.contains(fault)),
            "{text:?}: {outcome:?}"
        );
    }
}

#[tokio::test]
async fn a_body_cut_short_is_an_error_and_its_connection_is_not_reused() {
    let server = scripted(vec![
        closing("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc"),
        answer("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nz"),
    ])
    .await;
    let outcome = exchange(&server, "x").await;
    assert!(
        outcome
            .as_ref()
            .is_err_and(|e| e.contains("middle of its answer")),
        "{outcome:?}"
    );
    assert_eq!(exchange(&server, "y").await.as_deref(), Ok("z"));
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_server_that_closes_without_answering_is_named_so() {
    let server = scripted(vec![closing("")]).await;
    match send(&server.pool, &post("x")).await {
        Err(PoolError::Exchange(WireError::ClosedBeforeAnswer)) => {}
        Err(other) => panic!("{other}"),
        Ok(answer) => panic!("answered {}", answer.status()),
    }
}

#[tokio::test]
async fn a_head_past_the_limit_is_refused() {
    let endless = format!(
        "HTTP/1.1 200 OK\r\nx-padding: {}",
        "p".repeat(super::MAX_HEAD)
    );
    let server = scripted(vec![Answer {
        pieces: vec![endless.into_bytes()],
        close: false,
    }])
    .await;
    match send(&server.pool, &post("x")).await {
        Err(PoolError::Exchange(WireError::HeadTooLarge)) => {}
        Err(other) => panic!("{other}"),
        Ok(answer) => panic!("answered {}", answer.status()),
    }
}

#[tokio::test]
async fn a_large_body_of_known_length_arrives_whole() {
    let text = "0123456789".repeat(20_000);
    let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", text.len());
    let server = scripted(vec![Answer {
        pieces: vec![head.into_bytes(), text.as_bytes().to_vec()],
        close: false,
    }])
    .await;
    let answer = send(&server.pool, &post("x")).await.expect("answer");
    assert_eq!(
        http_body::Body::size_hint(answer.body()).exact(),
        Some(text.len() as u64)
    );
    assert_eq!(read(answer).await.expect("body"), text);
}

#[test]
fn a_common_field_name_is_named_as_the_full_parse_names_it_in_any_case() {
    for name in [
        "content-type",
        "Content-Type",
        "CONTENT-LENGTH",
        "Date",
        "transfer-encoding",
        "Connection",
        "cache-control",
        "Server",
        "Mcp-Session-Id",
    ] {
        let parsed = http::HeaderName::from_bytes(name.as_bytes()).expect("a token");
        assert_eq!(super::common_name(name), Some(parsed), "{name}");
    }
    // Others (a near miss too) are left to the full parse.
    for name in [
        "x-custom",
        "content-typ",
        "content-types",
        "mcp-session",
        "dat",
    ] {
        assert_eq!(super::common_name(name), None, "{name}");
    }
}

#[tokio::test]
async fn an_answers_fields_are_kept_whatever_their_case() {
    let text = r#"{"ok":true}"#;
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMCP-SESSION-ID: s-1\r\nX-Other: v\r\nContent-Length: {}\r\n\r\n",
        text.len()
    );
    let server = scripted(vec![answer(&format!("{head}{text}"))]).await;
    let answer = send(&server.pool, &post("x")).await.expect("answer");
    let headers = answer.headers();
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers[&crate::protocol::SESSION_HEADER], "s-1");
    assert_eq!(headers["x-other"], "v");
    assert_eq!(headers.len(), 4);
    assert_eq!(read(answer).await.expect("body"), text);
}

#[tokio::test]
async fn a_reused_connection_carries_only_each_requests_own_fields() {
    let server = scripted(vec![
        answer("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na"),
        answer("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nb"),
    ])
    .await;
    for (name, body) in [("x-first", "a"), ("x-second", "b")] {
        let mut extra = http::HeaderMap::new();
        extra.insert(name, "yes".parse().unwrap());
        let answer = send_with(&server.pool, &post("x"), &extra)
            .await
            .expect("answer");
        assert_eq!(read(answer).await.expect("body"), body);
    }
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
    let seen = server.requests.lock().unwrap().clone();
    for (request, name) in seen.iter().zip(["x-first", "x-second"]) {
        let own: Vec<&str> = request
            .lines()
            .filter(|line| line.starts_with("x-"))
            .collect();
        assert_eq!(own, [format!("{name}: yes")], "{request}");
    }
}
