//! The bare proxy: the least any HTTP gateway does per call, as a reference
//! for the gateway's own cost. It is an HTTP/1.1 pass-through in hyper 1.x
//! on a multi-thread tokio runtime (as the gateway runs), with one upstream
//! connection per downstream connection, and nothing of MCP: each request's
//! method, path, headers and body go to the floor as they are, and the
//! floor's answer comes back as it is. It runs as a child process of the
//! benchmark (`gateway proxy --upstream ADDR [--threads N]`), so its CPU is
//! read apart, and stops when stdin closes.
//!
//! Whatever it spends per call on this machine (two HTTP exchanges, the
//! wake-ups between them) is spent by any gateway built on these parts
//! before it reads a byte of JSON; the report puts the two side by side.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::Mutex;

use crate::Res;

/// `proxy`: serves on 127.0.0.1:0, prints `listening ADDR` on stdout, and
/// forwards every request to `upstream`. `threads` 0 is tokio's default
/// (one worker per CPU, as the gateway), 1 a current-thread runtime.
pub fn run(upstream: SocketAddr, threads: usize) -> Res<()> {
    let runtime = match threads {
        1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
        0 => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build()?,
    };
    runtime.block_on(crate::floor::serve_until_stdin_closes(|stream| {
        tokio::spawn(serve_connection(stream, upstream));
    }))
}

/// One downstream connection and the upstream connection it opens on its
/// first request.
async fn serve_connection(stream: tokio::net::TcpStream, upstream: SocketAddr) {
    let sender: Arc<Mutex<Option<SendRequest<Full<Bytes>>>>> = Arc::new(Mutex::new(None));
    let service = hyper::service::service_fn(move |req| forward(sender.clone(), upstream, req));
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

async fn forward(
    sender: Arc<Mutex<Option<SendRequest<Full<Bytes>>>>>,
    upstream: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    let mut slot = sender.lock().await;
    if slot.as_ref().is_none_or(SendRequest::is_closed) {
        match connect(upstream).await {
            Ok(s) => *slot = Some(s),
            Err(_) => return Ok(status(StatusCode::BAD_GATEWAY)),
        }
    }
    let Some(send) = slot.as_mut() else {
        return Ok(status(StatusCode::BAD_GATEWAY));
    };
    let answer = send
        .send_request(Request::from_parts(parts, Full::new(body)))
        .await?;
    let (parts, body) = answer.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Response::from_parts(parts, Full::new(body)))
}

async fn connect(upstream: SocketAddr) -> Res<SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(upstream).await?;
    stream.set_nodelay(true)?;
    let (send, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(send)
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
}
