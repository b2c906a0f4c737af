//! Unit tests of [`Connection`], the client state of one upstream transport
//! life: request ids and the pending table, answers and errors, timeouts
//! and cancellation (on tokio's paused clock), close, the dispatch of what
//! an upstream sends (progress, resource updates, log messages,
//! `list_changed`, server-to-client requests), and the modern `_meta` merge
//! with the fields the transports read off each [`Outgoing`] message.
//!
//! The upstream is played by the test: it reads the outbound queue and
//! feeds lines to [`Connection::dispatch`]; no process or socket is used.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::*;
use crate::protocol::{MODERN_VERSION, code, meta};
use crate::upstream::test_support::{FakeUpstream, frame_of, within};
use crate::xheader::HeaderParam;

/// The params of a frame the gateway sent.
fn params_of(message: &Outgoing) -> Value {
    frame_of(message)["params"].clone()
}

/// A client's request, as the router sends it.
fn client_origin(session: u64, request: &str) -> Origin {
    Origin::Client {
        session: Some(session),
        request: request.into(),
    }
}

/// The error code of an `Rpc` answer.
fn rpc_code(answer: &Answer) -> i64 {
    match answer {
        Err(UpstreamError::Rpc { error, .. }) => serde_json::from_str::<Value>(error.get())
            .unwrap()["code"]
            .as_i64()
            .unwrap(),
        other => panic!("expected an Rpc error, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn each_request_gets_a_fresh_id_and_its_own_answer() {
    let mut up = FakeUpstream::new("alpha");
    let (first, second) = (up.conn.next_id(), up.conn.next_id());
    assert_ne!(first, second);
    let rx_first = up
        .conn
        .send_request(first, Request::new(Method::Ping, None))
        .await
        .unwrap();
    let rx_second = up
        .conn
        .send_request(second, Request::new(Method::ToolsList, Some("{}")))
        .await
        .unwrap();
    let sent_first = up.next_sent().await;
    let sent_second = up.next_sent().await;
    assert_eq!((sent_first.id, sent_second.id), (Some(first), Some(second)));
    assert_eq!(frame_of(&sent_first)["id"], json!(first));
    assert_eq!(frame_of(&sent_second)["method"], "tools/list");
    assert!(sent_second.is(&Method::ToolsList));
    assert_eq!(up.conn.pending_len(), 2);

    // Answered out of order, each waiter gets its own answer.
    up.answer(second, r#"{"tools":[]}"#).await;
    up.answer(first, r#"{"pong":1}"#).await;
    assert_eq!(
        within(rx_second).await.unwrap().unwrap().get(),
        r#"{"tools":[]}"#
    );
    assert_eq!(
        within(rx_first).await.unwrap().unwrap().get(),
        r#"{"pong":1}"#
    );
    assert_eq!(up.conn.pending_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_error_answer_becomes_an_rpc_error() {
    let up = FakeUpstream::new("alpha");
    let id = up.conn.next_id();
    let rx = up
        .conn
        .send_request(id, Request::new(Method::ToolsCall, Some("{}")))
        .await
        .unwrap();
    let line =
        format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32602,"message":"bad"}}}}"#);
    up.conn.dispatch(&line).await;
    let answer = within(rx).await.unwrap();
    assert_eq!(rpc_code(&answer), code::INVALID_PARAMS);
    assert!(matches!(&answer, Err(UpstreamError::Rpc { upstream, .. }) if upstream == "alpha"));
}

#[tokio::test(start_paused = true)]
async fn late_unknown_and_foreign_answers_are_ignored() {
    let mut up = FakeUpstream::new("alpha");
    let id = up.conn.next_id();
    let mut rx = up
        .conn
        .send_request(id, Request::new(Method::Ping, None))
        .await
        .unwrap();
    let _ = up.next_sent().await;
    // An id never sent, an id that is not ours, and a line that is not JSON.
    up.answer(id + 100, r#""stray""#).await;
    up.conn
        .dispatch(r#"{"jsonrpc":"2.0","id":"abc","result":{}}"#)
        .await;
    up.conn.dispatch("not json at all").await;
    // Neither result nor error: not a response at all.
    up.conn
        .dispatch(&format!(r#"{{"jsonrpc":"2.0","id":{id}}}"#))
        .await;
    assert!(rx.try_recv().is_err(), "nothing answered our request yet");
    assert!(up.conn.is_pending(id));

    up.answer(id, r#""ours""#).await;
    assert_eq!(within(rx).await.unwrap().unwrap().get(), r#""ours""#);
    // A second answer to the same id finds nobody waiting.
    up.answer(id, r#""again""#).await;
    assert_eq!(up.conn.pending_len(), 0);
    assert!(up.try_sent().is_none(), "answers are never echoed upstream");
}

#[tokio::test(start_paused = true)]
async fn a_request_that_times_out_is_cancelled_upstream() {
    let mut up = FakeUpstream::new("alpha");
    let conn = up.conn.clone();
    let timeout = Duration::from_secs(5);
    let asked = tokio::time::Instant::now();
    let call = tokio::spawn(async move { conn.request(Method::Ping, None, timeout).await });
    let request = up.next_sent().await;
    let id = request.id.expect("a request has an id");

    tokio::time::advance(Duration::from_millis(4_900)).await;
    assert!(
        up.try_sent().is_none(),
        "no cancellation before the deadline"
    );
    assert!(up.conn.is_pending(id));

    let answer = within(call).await.unwrap();
    assert!(asked.elapsed() >= timeout);
    match answer {
        Err(UpstreamError::Timeout {
            upstream,
            timeout: waited,
        }) => assert_eq!((upstream.as_str(), waited), ("alpha", timeout)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    let cancel = up.next_sent().await;
    assert!(cancel.is(&Method::Cancelled));
    assert_eq!(cancel.cancels, Some(id));
    assert_eq!(cancel.id, None, "a notification has no id");
    assert_eq!(params_of(&cancel)["requestId"], json!(id));
    assert!(!up.conn.is_pending(id));
    // The answer that comes after all is dropped.
    up.answer(id, "{}").await;
    assert_eq!(up.conn.pending_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn cancel_answers_the_waiter_and_tells_the_upstream_once() {
    let mut up = FakeUpstream::new("alpha");
    let id = up.conn.next_id();
    let origin = client_origin(3, r#""a""#);
    let request = Request {
        origin: origin.clone(),
        ..Request::new(Method::ToolsCall, Some(r#"{"name":"echo"}"#))
    };
    let rx = up.conn.send_request(id, request).await.unwrap();
    let sent = up.next_sent().await;
    assert_eq!(sent.origin, origin, "the request carries its origin");

    assert!(up.conn.cancel(id, "bye"));
    match within(rx).await.unwrap() {
        Err(UpstreamError::Cancelled { upstream, reason }) => {
            assert_eq!((upstream.as_str(), reason.as_str()), ("alpha", "bye"));
        }
        other => panic!("expected a cancellation, got {other:?}"),
    }
    let cancel = up.next_sent().await;
    assert!(cancel.is(&Method::Cancelled));
    assert_eq!(cancel.cancels, Some(id));
    assert_eq!(cancel.origin, origin, "the cancellation keeps the origin");
    assert_eq!(
        params_of(&cancel),
        json!({ "requestId": id, "reason": "bye" })
    );

    assert!(!up.conn.cancel(id, "twice"), "already finished");
    assert!(
        up.try_sent().is_none(),
        "nothing sent for a finished request"
    );
}

#[tokio::test(start_paused = true)]
async fn close_fails_every_pending_request_and_later_ones() {
    let up = FakeUpstream::new("alpha");
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let id = up.conn.next_id();
        waiting.push(
            up.conn
                .send_request(id, Request::new(Method::Ping, None))
                .await
                .unwrap(),
        );
    }
    up.conn.close("the child exited");
    assert!(up.conn.is_closed());
    assert_eq!(up.conn.pending_len(), 0);
    for rx in waiting {
        match within(rx).await.unwrap() {
            Err(UpstreamError::Unavailable { reason, .. }) => {
                assert_eq!(reason, "the child exited");
            }
            other => panic!("expected unavailable, got {other:?}"),
        }
    }
    let id = up.conn.next_id();
    let late = up
        .conn
        .send_request(id, Request::new(Method::Ping, None))
        .await;
    assert!(matches!(late, Err(UpstreamError::Unavailable { .. })));
    assert!(!up.conn.is_pending(id));

    // Once the server forgot the session, failures say so (and may be retried).
    up.conn.mark_session_expired();
    let id = up.conn.next_id();
    let expired = up
        .conn
        .send_request(id, Request::new(Method::Ping, None))
        .await;
    assert!(matches!(expired, Err(UpstreamError::SessionExpired { .. })));
}

#[tokio::test(start_paused = true)]
async fn progress_goes_to_the_calls_stream_under_the_clients_token() {
    let up = FakeUpstream::new("alpha");
    let (sink, mut frames) = mpsc::channel::<String>(4);
    let last_progress = Arc::new(AtomicU64::new(0));
    let started = Instant::now()
        .checked_sub(Duration::from_secs(3))
        .unwrap_or_else(Instant::now);
    let id = up.conn.next_id();
    let request = Request {
        progress: Some(ProgressRoute {
            client_token: Some(serde_json::value::to_raw_value("client-token").unwrap()),
            sink: CallStream::Open(sink),
            last_progress: last_progress.clone(),
            started,
            asks: None,
        }),
        ..Request::new(Method::ToolsCall, Some("{}"))
    };
    let _rx = up.conn.send_request(id, request).await.unwrap();

    up.notify(
        "notifications/progress",
        json!({ "progressToken": id, "progress": 5, "total": 10 }),
    )
    .await;
    let frame: Value = serde_json::from_str(&frames.try_recv().unwrap()).unwrap();
    assert_eq!(frame["method"], "notifications/progress");
    assert_eq!(
        frame["params"],
        json!({ "progressToken": "client-token", "progress": 5, "total": 10 })
    );
    let elapsed = started.elapsed().as_millis() as u64;
    let noted = last_progress.load(Ordering::Relaxed);
    assert!(
        (3_000..=elapsed).contains(&noted),
        "progress time {noted} ms"
    );

    // Progress for a token that is not in flight goes nowhere.
    up.notify(
        "notifications/progress",
        json!({ "progressToken": id + 1, "progress": 6 }),
    )
    .await;
    assert!(frames.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn resource_updates_and_log_messages_reach_the_events() {
    let up = FakeUpstream::new("alpha");
    up.notify(
        "notifications/resources/updated",
        json!({ "uri": "file:///a" }),
    )
    .await;
    // No URI: nothing to tell.
    up.notify("notifications/resources/updated", json!({}))
        .await;
    up.notify(
        "notifications/message",
        json!({ "level": "info", "data": "hello" }),
    )
    .await;
    assert_eq!(
        *up.events.updated.lock().unwrap(),
        [("alpha".to_owned(), "file:///a".to_owned())]
    );
    let logs = up.events.logs.lock().unwrap().clone();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].0, "alpha");
    let params: Value = serde_json::from_str(logs[0].1.as_deref().unwrap()).unwrap();
    assert_eq!(params, json!({ "level": "info", "data": "hello" }));
    assert!(up.events.lists.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn list_changed_notifications_queue_the_lists_to_refetch() {
    let mut up = FakeUpstream::new("alpha");
    for method in [
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/something/else",
    ] {
        up.notify(method, json!({})).await;
    }
    let mut queued = Vec::new();
    while let Ok(change) = up.list_changes.try_recv() {
        queued.push(change);
    }
    assert_eq!(
        queued,
        [
            ListsChanged(&[ListKind::Tools]),
            ListsChanged(&[ListKind::Prompts]),
            ListsChanged(&[ListKind::Resources, ListKind::Templates]),
        ]
    );
    assert!(up.try_sent().is_none());
}

#[tokio::test(start_paused = true)]
async fn server_requests_are_answered_or_refused() {
    let mut up = FakeUpstream::new("alpha");
    up.conn
        .dispatch(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#)
        .await;
    up.conn
        .dispatch(r#"{"jsonrpc":"2.0","id":8,"method":"roots/list"}"#)
        .await;
    up.conn
        .dispatch(r#"{"jsonrpc":"2.0","id":"s","method":"experimental/thing","params":{}}"#)
        .await;

    let pong = up.next_sent().await;
    assert_eq!(pong.method, None, "a response has no method");
    assert_eq!(frame_of(&pong)["id"], 7);
    assert_eq!(frame_of(&pong)["result"], json!({}));
    let roots = up.next_sent().await;
    assert_eq!(frame_of(&roots)["result"], json!({ "roots": [] }));
    let refused = frame_of(&up.next_sent().await);
    assert_eq!(refused["id"], "s");
    assert_eq!(refused["error"]["code"], code::METHOD_NOT_FOUND);
    assert!(refused.get("result").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_legacy_connection_sends_params_as_given() {
    let mut up = FakeUpstream::new("alpha");
    assert!(!up.conn.is_modern());
    let id = up.conn.next_id();
    let params = r#"{"name":"echo","arguments":{"region":"eu"}}"#;
    let _rx = up
        .conn
        .send_request(id, Request::new(Method::ToolsCall, Some(params)))
        .await
        .unwrap();
    let sent = up.next_sent().await;
    assert_eq!(
        params_of(&sent),
        serde_json::from_str::<Value>(params).unwrap()
    );
    assert_eq!(sent.version, None);
    assert_eq!(sent.target, None);
    assert!(sent.mirrored.is_empty());
    assert_eq!(sent.origin, Origin::Gateway);

    // The discover probe alone speaks the modern version.
    assert!(up.conn.send_detached(Method::Discover, Some("{}")));
    assert_eq!(
        up.next_sent().await.version.as_deref(),
        Some(MODERN_VERSION)
    );
}

#[tokio::test(start_paused = true)]
async fn a_modern_connection_merges_its_meta_target_and_mirrored_headers() {
    let mut up = FakeUpstream::new("alpha");
    let gateway_meta = json!({
        meta::PROTOCOL_VERSION: MODERN_VERSION,
        meta::CLIENT_INFO: { "name": "mcpmux" },
    });
    up.conn
        .set_modern(gateway_meta.as_object().unwrap().clone());
    assert!(up.conn.is_modern());
    let region: Arc<[HeaderParam]> = Arc::from(vec![HeaderParam {
        name: "Region".into(),
        path: vec!["region".into()],
    }]);
    up.conn
        .set_tool_headers([("echo".to_owned(), region)].into_iter().collect());

    let id = up.conn.next_id();
    let origin = client_origin(9, "1");
    let request = Request {
        origin: origin.clone(),
        ..Request::new(
            Method::ToolsCall,
            Some(
                r#"{"name":"echo","arguments":{"region":"eu west","n":1},"_meta":{"progressToken":4}}"#,
            ),
        )
    };
    let _rx = up.conn.send_request(id, request).await.unwrap();
    let sent = up.next_sent().await;
    assert_eq!(sent.version.as_deref(), Some(MODERN_VERSION));
    assert_eq!(sent.target.as_deref(), Some("echo"));
    assert_eq!(
        sent.mirrored,
        [("mcp-param-Region".to_owned(), "eu west".to_owned())]
    );
    assert_eq!(sent.origin, origin);
    let params = params_of(&sent);
    assert_eq!(
        params["_meta"]["progressToken"], 4,
        "the caller's keys stay"
    );
    assert_eq!(params["_meta"][meta::CLIENT_INFO]["name"], "mcpmux");
    assert_eq!(params["arguments"]["region"], "eu west");

    // A key the request sets itself wins over the gateway's.
    let id = up.conn.next_id();
    let own = format!(
        r#"{{"uri":"file:///a","_meta":{{"{}":"2099-01-01"}}}}"#,
        meta::PROTOCOL_VERSION
    );
    let _rx = up
        .conn
        .send_request(id, Request::new(Method::ResourcesRead, Some(&own)))
        .await
        .unwrap();
    let sent = up.next_sent().await;
    assert_eq!(sent.version.as_deref(), Some("2099-01-01"));
    assert_eq!(sent.target.as_deref(), Some("file:///a"));
    assert!(
        sent.mirrored.is_empty(),
        "only tool calls mirror parameters"
    );

    // Notifications carry the `_meta` too; an explicit target wins.
    up.conn.notify(Method::Initialized, None).await.unwrap();
    let note = up.next_sent().await;
    assert_eq!(
        params_of(&note)["_meta"][meta::PROTOCOL_VERSION],
        MODERN_VERSION
    );
    let id = up.conn.next_id();
    let request = Request {
        target: Some("renamed".into()),
        ..Request::new(Method::PromptsGet, Some(r#"{"name":"p"}"#))
    };
    let _rx = up.conn.send_request(id, request).await.unwrap();
    assert_eq!(up.next_sent().await.target.as_deref(), Some("renamed"));
}

/// A frame the router built around the params for this request's id and
/// this connection's era goes out as it is: the same bytes, not a copy.
/// Under another id, or built for the other era, the connection builds
/// its own from the params inside it.
#[tokio::test(start_paused = true)]
async fn a_frame_built_for_the_request_goes_out_as_it_is() {
    let text = serde_json::value::RawValue::from_string(
        r#"{"name":"a__echo","arguments":{"n":1}}"#.to_owned(),
    )
    .unwrap();
    let params = protocol::Params::parse(Some(protocol::Raw::from(&*text))).unwrap();
    let mut up = FakeUpstream::new("alpha");
    let id = up.conn.next_id();
    let head = protocol::params::RequestHead {
        id,
        method: Method::ToolsCall.name(),
    };
    let built = params.build_request(head, "name", r#""echo""#, None);
    let send = |id| {
        let request = Request {
            params: Payload::Frame(&built),
            ..Request::new(Method::ToolsCall, None)
        };
        up.conn.send_request(id, request)
    };
    let _first = send(id).await.unwrap();
    let _second = send(id + 1).await.unwrap();
    let sent = up.next_sent().await;
    let frame = built.frame_for(id).unwrap();
    assert_eq!(sent.frame, frame);
    assert_eq!(sent.frame.as_ptr(), frame.as_ptr(), "shared, not copied");
    assert_eq!(sent.id, Some(id));
    let again = up.next_sent().await;
    assert_eq!(frame_of(&again)["id"], id + 1);
    assert_eq!(params_of(&again), params_of(&sent));
    assert_eq!(params_of(&again)["name"], "echo");

    // Built for a session-based upstream, it is not what a modern one gets.
    up.conn.set_modern(
        json!({ meta::PROTOCOL_VERSION: MODERN_VERSION })
            .as_object()
            .unwrap()
            .clone(),
    );
    let request = Request {
        params: Payload::Frame(&built),
        ..Request::new(Method::ToolsCall, None)
    };
    let _third = up.conn.send_request(id, request).await.unwrap();
    let modern = up.next_sent().await;
    assert_ne!(modern.frame, frame);
    assert_eq!(
        params_of(&modern)["_meta"][meta::PROTOCOL_VERSION],
        MODERN_VERSION
    );
    assert_eq!(params_of(&modern)["arguments"]["n"], 1);
}
