//! The 2024-11-05 HTTP+SSE transport, as a client: GET the SSE endpoint,
//! wait for its `endpoint` event, then POST every message to that URL while
//! answers and notifications arrive on the SSE stream.
//!
//! The endpoint must have the configured URL's origin, so configured
//! credentials never go to another host. The reader task ends the link when
//! the stream closes; the supervisor then reconnects with backoff.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use reqwest::Url;
use reqwest::header;
use tokio::sync::oneshot;

use super::remote::RemoteSession;
use crate::sse::SseParser;
use crate::upstream::UpstreamError;

/// How long the server has to name its message endpoint.
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the legacy transport could not connect.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(super) enum SseConnectError {
    #[error("cannot open the SSE stream: {0}")]
    Open(reqwest::Error),
    #[error("the SSE stream was refused: HTTP {0}")]
    Refused(reqwest::StatusCode),
    #[error("the SSE stream closed before naming its endpoint")]
    ClosedEarly,
    #[error("no endpoint event within {ENDPOINT_TIMEOUT:?}")]
    NoEndpoint,
    /// The link ended meanwhile, for this reason.
    #[error("{0}")]
    Ended(String),
    #[error("invalid endpoint {endpoint:?}: {detail}")]
    InvalidEndpoint { endpoint: String, detail: String },
    #[error("the endpoint {0} is on another origin; refusing to send credentials there")]
    OtherOrigin(Url),
}

/// Opens the SSE stream and returns the endpoint to POST to. The stream
/// keeps being read by a task until it or the link ends.
pub(super) async fn open(shared: Arc<RemoteSession>) -> Result<Url, SseConnectError> {
    let mut headers = shared.headers.clone();
    shared
        .authorize(&mut headers)
        .await
        .map_err(|e| SseConnectError::Ended(e.cause()))?;
    let response = shared
        .client
        .get(shared.url.clone())
        .headers(headers)
        .header(header::ACCEPT, "text/event-stream")
        .send()
        .await
        .map_err(|e| SseConnectError::Open(e.without_url()))?;
    if !response.status().is_success() {
        return Err(SseConnectError::Refused(response.status()));
    }
    let (endpoint_tx, endpoint_rx) = oneshot::channel();
    shared.spawn(read_stream(shared.clone(), response, endpoint_tx));
    let endpoint = tokio::select! {
        endpoint = tokio::time::timeout(ENDPOINT_TIMEOUT, endpoint_rx) => match endpoint {
            Ok(Ok(endpoint)) => endpoint,
            Ok(Err(_)) => return Err(SseConnectError::ClosedEarly),
            Err(_) => return Err(SseConnectError::NoEndpoint),
        },
        () = shared.ended.cancelled() => return Err(SseConnectError::Ended(shared.reason())),
    };
    let url = shared
        .url
        .join(endpoint.trim())
        .map_err(|e| SseConnectError::InvalidEndpoint {
            endpoint: endpoint.clone(),
            detail: e.to_string(),
        })?;
    if url.origin() != shared.url.origin() {
        return Err(SseConnectError::OtherOrigin(url));
    }
    tracing::info!(upstream = %shared.upstream, "connected with the legacy HTTP+SSE transport");
    Ok(url)
}

async fn read_stream(
    shared: Arc<RemoteSession>,
    response: reqwest::Response,
    endpoint_tx: oneshot::Sender<String>,
) {
    let mut endpoint_tx = Some(endpoint_tx);
    let mut parser = SseParser::default();
    let mut body = response.bytes_stream();
    let reason = loop {
        let chunk = tokio::select! {
            () = shared.ended.cancelled() => return,
            chunk = body.next() => chunk,
        };
        let chunk = match chunk {
            Some(Ok(c)) => c,
            Some(Err(e)) => break format!("the SSE stream broke: {}", e.without_url()),
            None => break "the SSE stream closed".to_owned(),
        };
        let events = match parser.push(&chunk) {
            Ok(events) => events,
            Err(e) => break e.to_string(),
        };
        for event in events {
            match event.event.as_deref() {
                Some("endpoint") => {
                    if let Some(tx) = endpoint_tx.take() {
                        let _ = tx.send(event.data);
                    }
                }
                None | Some("message") if !event.data.trim().is_empty() => {
                    shared.deliver(&event.data, None).await
                }
                _ => {}
            }
        }
    };
    shared.end(reason);
}

/// POSTs one message to the endpoint; the answer comes on the stream.
pub(super) async fn post(
    shared: &RemoteSession,
    post_url: &Url,
    frame: bytes::Bytes,
) -> Result<(), UpstreamError> {
    let mut headers = shared.headers.clone();
    shared.authorize(&mut headers).await?;
    let response = shared
        .client
        .post(post_url.clone())
        .headers(headers)
        .header(header::CONTENT_TYPE, "application/json")
        .body(frame)
        .send()
        .await
        .map_err(|e| shared.unavailable(format!("request failed: {}", e.without_url())))?;
    if response.status().is_success() {
        return Ok(());
    }
    let status = response.status();
    let body: String = response
        .text()
        .await
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect();
    Err(UpstreamError::Protocol {
        upstream: shared.upstream.to_string(),
        detail: format!("HTTP {status}: {body}"),
    })
}
