//! The stdio transport: `mcpmux stdio` speaks MCP on its own stdin and
//! stdout, so desktop hosts can launch the gateway as a command.
//!
//! One session for the life of the process, never idle-expired. The reader
//! handles one line at a time in order (a request's answer is produced by
//! its own task, so slow calls overlap); one writer task owns stdout and
//! writes answers first, then notifications. Both kinds of task run on the
//! gateway's task tracker, in the session's span. Logs go to stderr only.
//!
//! Request tasks are not capped the way a legacy SSE session's are: the
//! one client is the host that launched the gateway as its child, not a
//! remote peer, and each task ends with its call (a call has a timeout).

use std::sync::Arc;

use futures_util::StreamExt as _;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::AppState;
use super::dispatch::{self, Outcome, Outgoing};
use super::session::CloseReason;
use crate::protocol::{self, Envelope, RpcError, code};
use crate::upstream::transport::stdio::read_line_capped;

/// Answers queued before request tasks wait for the writer.
const REPLY_CAPACITY: usize = 256;

/// Serves one MCP session over `input`/`output` until input ends or `stop`.
pub(crate) async fn run<R, W>(
    state: Arc<AppState>,
    input: R,
    mut output: W,
    stop: CancellationToken,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (replies, replies_rx) = mpsc::channel(REPLY_CAPACITY);
    let session = state
        .sessions
        .create(None, Some(replies.clone()), None, None, None)
        .map_err(std::io::Error::other)?;
    let _never_idle = state.sessions.open_stream(&session);
    let writer_stop = stop.child_token();
    let mut outgoing = Box::pin(dispatch::outgoing(
        session.clone(),
        replies_rx,
        writer_stop.clone(),
    ));
    let write = async move {
        while let Some(out) = outgoing.next().await {
            let line = match out {
                Outgoing::Reply(frame) => frame,
                Outgoing::Event((_, frame)) => frame.to_string(),
            };
            if output.write_all(line.as_bytes()).await.is_err()
                || output.write_all(b"\n").await.is_err()
            {
                break;
            }
            let _ = output.flush().await;
        }
    };
    let writer = state.tracker.spawn(write.instrument(session.span.clone()));

    // Request tasks, so calls still in flight when input ends can finish
    // (each is on the gateway's tracker too).
    let requests = tokio_util::task::TaskTracker::new();
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    let limit = state.http.max_body_bytes;
    loop {
        let read = tokio::select! {
            read = read_line_capped(&mut reader, &mut line, limit) => read?,
            () = stop.cancelled() => break,
        };
        match read {
            None => break,
            Some(true) => {
                let error = RpcError::new(
                    code::INVALID_REQUEST,
                    format!("message exceeds the limit of {limit} bytes"),
                );
                let _ = replies.send(protocol::error_frame(None, &error)).await;
            }
            Some(false) if line.iter().all(u8::is_ascii_whitespace) => {}
            Some(false) => {
                handle_line(
                    &state,
                    &session,
                    &replies,
                    &requests,
                    std::mem::take(&mut line),
                )
                .await
            }
        }
    }
    // A host that pipes requests and closes its input still gets every answer.
    requests.close();
    if tokio::time::timeout(state.drain_grace, requests.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            "input closed with calls still running after the grace period; cancelling them"
        );
    }
    state.sessions.close(&session.id, CloseReason::Disconnected);
    // Let answers already queued reach the host before the writer stops.
    drop(replies);
    writer_stop.cancel();
    let _ = writer.await;
    Ok(())
}

async fn handle_line(
    state: &Arc<AppState>,
    session: &Arc<super::session::Session>,
    replies: &mpsc::Sender<String>,
    requests: &tokio_util::task::TaskTracker,
    line: Vec<u8>,
) {
    let text = match String::from_utf8(line) {
        Ok(t) => t,
        Err(_) => {
            let error = RpcError::new(code::PARSE_ERROR, "message is not valid UTF-8");
            let _ = replies.send(protocol::error_frame(None, &error)).await;
            return;
        }
    };
    if protocol::nesting_exceeds(&text, protocol::MAX_NESTING) {
        let id = Envelope::parse(&text)
            .ok()
            .and_then(|e| e.id)
            .map(|i| i.get().to_owned());
        let _ = replies
            .send(protocol::error_frame(id.as_deref(), &protocol::too_deep()))
            .await;
        return;
    }
    let kind = {
        let envelope = match Envelope::parse(&text) {
            Ok(e) => e,
            Err(e) => {
                let error = RpcError::new(code::PARSE_ERROR, format!("parse error: {e}"));
                let _ = replies.send(protocol::error_frame(None, &error)).await;
                return;
            }
        };
        match envelope.kind() {
            Ok(kind) => kind,
            Err(e) => {
                let id = envelope.id.map(|i| i.get());
                let error = RpcError::new(code::INVALID_REQUEST, e.to_string());
                let _ = replies.send(protocol::error_frame(id, &error)).await;
                return;
            }
        }
    };
    // Notifications are handled in line order; a request runs in its own
    // task (which parses its own copy of the line), so the reader can take
    // the next line, a cancellation say, while the call is in flight.
    let (tracker, span) = (state.tracker.clone(), session.span.clone());
    let (state, session, replies) = (state.clone(), session.clone(), replies.clone());
    let task = async move {
        let Ok(envelope) = Envelope::parse(&text) else {
            return;
        };
        if let Outcome::Reply(reply) =
            dispatch::handle(&state, &session, None, &envelope, kind, true, None).await
        {
            dispatch::send_reply(&replies, reply).await;
        }
    };
    if kind == protocol::MessageKind::Request {
        requests.spawn(tracker.track_future(task.instrument(span)));
    } else {
        task.await;
    }
}
