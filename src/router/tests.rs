//! Unit tests of the router and of `forward`: a call's routing to its
//! upstream and the mapping between client and upstream request ids, the
//! refusal of an id already in flight and of unknown names, cancellation
//! (by the client, by a modern client closing its stream, on timeout), the
//! deadline and its restart on progress (on tokio's paused clock), and the
//! one retry after an upstream forgot its session, and stateless calls
//! parked for their client's input.
//!
//! The upstreams are [`FakeUpstream`]s behind [`UpstreamHandle::for_test`]:
//! the test reads what the router sends each one and feeds it answers. No
//! process, socket or supervisor is involved. `reads_tests` counts the
//! reads of a call with the same helpers.

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;

use super::*;
use crate::catalog::{UpstreamLists, UpstreamView};
use crate::protocol::code;
use crate::upstream::test_support::{FakeUpstream, frame_of, within};
use crate::upstream::{Interest, Origin, UpstreamHandle};

/// The deadline of most tests: long enough never to matter.
pub(super) const PATIENT: Duration = Duration::from_secs(60);

/// A router over two upstreams, `alpha` and `beta`, each offering the tool
/// `echo` (exposed as `alpha__echo` and `beta__echo`), the prompt `p` and
/// `file:///a`.
pub(super) struct Gateway {
    pub router: Arc<Router>,
    pub alpha: FakeUpstream,
    pub beta: FakeUpstream,
}

pub(super) fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

pub(super) fn gateway(timeout: Duration) -> Gateway {
    let catalog = Arc::new(CatalogStore::new([
        ("alpha".into(), "alpha".to_owned(), None),
        ("beta".into(), "beta".to_owned(), None),
    ]));
    let upstreams = Arc::new(UpstreamSet::default());
    let (alpha, beta) = (FakeUpstream::new("alpha"), FakeUpstream::new("beta"));
    for (name, fake) in [("alpha", &alpha), ("beta", &beta)] {
        upstreams.insert(UpstreamHandle::for_test(
            name,
            timeout,
            Some(fake.conn.clone()),
        ));
        let view = UpstreamView {
            lists: UpstreamLists {
                tools: vec![
                    object(json!({ "name": "echo", "inputSchema": { "type": "object" } })),
                    object(json!({ "name": "peek", "inputSchema": { "type": "object" },
                        "annotations": { "readOnlyHint": true, "idempotentHint": true } })),
                ],
                resources: vec![object(json!({ "uri": "file:///a", "name": "a" }))],
                prompts: vec![object(json!({ "name": "p" }))],
                ..UpstreamLists::default()
            },
            instructions: None,
        };
        catalog.publish(name, Some(Arc::new(view)));
    }
    let hub = Arc::new(NotifyHub::new(Arc::new(Interest::new(upstreams.clone()))));
    let router = Router::new(
        catalog,
        upstreams,
        hub,
        Arc::default(),
        crate::config::PageSizes::uniform(100),
    );
    Gateway {
        router: Arc::new(router),
        alpha,
        beta,
    }
}

/// A legacy session's context; `can_stream` as asked.
fn session(router: &Router, can_stream: bool) -> Arc<RequestContext> {
    session_in(router, can_stream, Era::Legacy)
}

/// [`session`] of a client of `era`.
pub(super) fn session_in(router: &Router, can_stream: bool, era: Era) -> Arc<RequestContext> {
    Arc::new(RequestContext {
        inflight: Arc::default(),
        subscriber: Some(router.hub().register()),
        can_stream,
        era,
        log_level: None,
        identity: None,
        session_id: None,
        endpoint: None,
    })
}

fn raw(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).unwrap()
}

/// Starts a request `id` (raw JSON) on its own task, as a transport does.
pub(super) fn call(
    router: &Arc<Router>,
    ctx: &Arc<RequestContext>,
    id: &str,
    method: &'static str,
    params: Value,
) -> JoinHandle<Reply> {
    let (router, ctx) = (router.clone(), ctx.clone());
    let id = raw(id);
    let params = serde_json::value::to_raw_value(&params).unwrap();
    tokio::spawn(async move {
        let mut request = Request::new(
            &id,
            Method::from_name(method),
            Some(crate::protocol::Raw::from(&*params)),
        );
        router.request(&ctx, &mut request).await
    })
}

fn echo(arguments: Value) -> Value {
    json!({ "name": "alpha__echo", "arguments": arguments })
}

/// The frame of a reply that does not stream.
pub(super) fn ready(reply: Reply) -> Value {
    match reply {
        Reply::Ready(frame) => serde_json::from_str(&frame.into_text()).unwrap(),
        Reply::Page(page) => serde_json::from_str(&page.into_text()).unwrap(),
        Reply::Streaming(_) => panic!("expected a complete reply"),
    }
}

fn error_code(frame: &Value) -> i64 {
    frame["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {frame}"))
}

fn cancel(router: &Router, ctx: &RequestContext, request_id: Value) {
    let params = json!({ "requestId": request_id, "reason": "stop" });
    let params = serde_json::value::to_raw_value(&params).unwrap();
    router.notification(
        ctx,
        "notifications/cancelled",
        Some(crate::protocol::Raw::from(&*params)),
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_reaches_its_upstream_under_a_gateway_id_and_returns_under_the_clients() {
    let mut gw = gateway(PATIENT);
    let ctx = session(&gw.router, false);
    let reply = call(
        &gw.router,
        &ctx,
        r#""c-1""#,
        "tools/call",
        echo(json!({ "text": "hi" })),
    );

    let sent = gw.alpha.next_sent().await;
    assert!(sent.is(&Method::ToolsCall));
    let upstream_id = sent.id.expect("a request");
    let frame = frame_of(&sent);
    assert_eq!(frame["id"], json!(upstream_id), "the gateway's own id");
    assert_eq!(
        frame["params"],
        json!({ "name": "echo", "arguments": { "text": "hi" } })
    );
    assert_eq!(sent.target.as_deref(), Some("echo"));
    let subscriber = ctx.subscriber.as_ref().unwrap().id;
    assert_eq!(
        sent.origin,
        Origin::Client {
            session: Some(subscriber),
            request: r#""c-1""#.into()
        }
    );
    assert_eq!(ctx.inflight.len(), 1);

    gw.alpha
        .answer(upstream_id, r#"{"content":[{"type":"text","text":"hi"}]}"#)
        .await;
    let frame = ready(within(reply).await.unwrap());
    assert_eq!(frame["id"], "c-1");
    assert_eq!(frame["result"]["content"][0]["text"], "hi");
    assert!(ctx.inflight.is_empty(), "the call left the in-flight table");
    assert!(gw.beta.try_sent().is_none(), "beta heard nothing");
}

/// A call that reaches the in-flight table after its session ended (it
/// waited in its upstream's queue, say) is refused, not sent: nothing
/// would cancel it any more.
#[tokio::test(start_paused = true)]
async fn a_call_after_its_session_ended_is_refused_not_sent() {
    let mut gw = gateway(PATIENT);
    let ctx = session(&gw.router, false);
    let first = call(&gw.router, &ctx, "1", "tools/call", echo(json!({})));
    let sent = gw.alpha.next_sent().await;
    assert_eq!(ctx.inflight.cancel_all("the session ended"), 1);
    assert_eq!(
        error_code(&ready(within(first).await.unwrap())),
        code::REQUEST_CANCELLED
    );
    let _ = sent;

    let late = call(&gw.router, &ctx, "2", "tools/call", echo(json!({})));
    let frame = ready(within(late).await.unwrap());
    assert_eq!(error_code(&frame), code::INVALID_REQUEST);
    assert!(
        frame["error"]["message"]
            .as_str()
            .unwrap()
            .contains("session ended"),
        "{frame}"
    );
    // The first call's cancellation went up; no second call did.
    while let Some(sent) = gw.alpha.try_sent() {
        assert!(
            sent.is(&Method::Cancelled),
            "only the cancellation: {sent:?}"
        );
    }
    assert!(ctx.inflight.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_resource_read_goes_to_the_upstream_its_uri_names() {
    let mut gw = gateway(PATIENT);
    let ctx = session(&gw.router, false);
    let reply = call(
        &gw.router,
        &ctx,
        "2",
        "resources/read",
        json!({ "uri": "beta+file:///a" }),
    );
    let sent = gw.beta.next_sent().await;
    assert_eq!(frame_of(&sent)["params"], json!({ "uri": "file:///a" }));
    assert_eq!(sent.target.as_deref(), Some("file:///a"));
    gw.beta
        .answer(
            sent.id.unwrap(),
            r#"{"contents":[{"uri":"file:///a","text":"x"}]}"#,
        )
        .await;
    let frame = ready(within(reply).await.unwrap());
    assert_eq!(frame["id"], 2);
    // URIs in the result are namespaced on the way back.
    assert_eq!(frame["result"]["contents"][0]["uri"], "beta+file:///a");
    assert!(gw.alpha.try_sent().is_none());
}

#[tokio::test(start_paused = true)]
async fn two_sessions_using_one_client_id_get_their_own_answers() {
    let mut gw = gateway(PATIENT);
    let (one, two) = (session(&gw.router, false), session(&gw.router, false));
    let reply_one = call(
        &gw.router,
        &one,
        "1",
        "tools/call",
        echo(json!({ "who": "one" })),
    );
    let reply_two = call(
        &gw.router,
        &two,
        "1",
        "tools/call",
        echo(json!({ "who": "two" })),
    );

    let mut upstream_ids = std::collections::HashMap::new();
    for _ in 0..2 {
        let sent = gw.alpha.next_sent().await;
        let who = frame_of(&sent)["params"]["arguments"]["who"]
            .as_str()
            .unwrap()
            .to_owned();
        upstream_ids.insert(who, sent.id.unwrap());
    }
    assert_ne!(upstream_ids["one"], upstream_ids["two"]);
    // Answered in the other order.
    gw.alpha
        .answer(upstream_ids["two"], r#"{"for":"two"}"#)
        .await;
    gw.alpha
        .answer(upstream_ids["one"], r#"{"for":"one"}"#)
        .await;
    let (one_frame, two_frame) = (
        ready(within(reply_one).await.unwrap()),
        ready(within(reply_two).await.unwrap()),
    );
    assert_eq!(
        (&one_frame["id"], &one_frame["result"]["for"]),
        (&json!(1), &json!("one"))
    );
    assert_eq!(
        (&two_frame["id"], &two_frame["result"]["for"]),
        (&json!(1), &json!("two"))
    );
}

#[tokio::test(start_paused = true)]
async fn an_id_already_in_flight_in_the_session_is_refused() {
    let mut gw = gateway(PATIENT);
    let ctx = session(&gw.router, false);
    let first = call(&gw.router, &ctx, r#""a""#, "tools/call", echo(json!({})));
    let sent = gw.alpha.next_sent().await;

    // The same id, spelled with an escape.
    let again = call(
        &gw.router,
        &ctx,
        r#""\u0061""#,
        "tools/call",
        echo(json!({})),
    );
    let refused = ready(within(again).await.unwrap());
    assert_eq!(error_code(&refused), code::INVALID_REQUEST);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already in flight"),
        "{refused}"
    );
    assert!(gw.alpha.try_sent().is_none(), "the duplicate was not sent");
    assert_eq!(ctx.inflight.len(), 1);

    gw.alpha.answer(sent.id.unwrap(), r#"{"n":1}"#).await;
    assert_eq!(ready(within(first).await.unwrap())["result"]["n"], 1);
    // Once it finished, the id may be used again.
    let reused = call(&gw.router, &ctx, r#""a""#, "tools/call", echo(json!({})));
    let sent = gw.alpha.next_sent().await;
    gw.alpha.answer(sent.id.unwrap(), r#"{"n":2}"#).await;
    assert_eq!(ready(within(reused).await.unwrap())["result"]["n"], 2);
}

#[tokio::test(start_paused = true)]
async fn a_client_cancellation_reaches_only_the_owning_upstream() {
    let mut gw = gateway(PATIENT);
    let ctx = session(&gw.router, false);
    let other = session(&gw.router, false);
    let on_alpha = call(&gw.router, &ctx, r#""a""#, "tools/call", echo(json!({})));
    let alpha_id = gw.alpha.next_sent().await.id.unwrap();
    let on_beta = call(
        &gw.router,
        &ctx,
        r#""b""#,
        "tools/call",
        json!({ "name": "beta__echo" }),
    );
    let beta_id = gw.beta.next_sent().await.id.unwrap();

    // Another session's cancellation of the same id, and one of an id
    // nobody uses, change nothing.
    cancel(&gw.router, &other, json!("a"));
    cancel(&gw.router, &ctx, json!("zzz"));
    assert!(gw.alpha.try_sent().is_none() && gw.beta.try_sent().is_none());

    cancel(&gw.router, &ctx, json!("a"));
    let cancelled = gw.alpha.next_sent().await;
    assert!(cancelled.is(&Method::Cancelled));
    assert_eq!(cancelled.cancels, Some(alpha_id));
    assert_eq!(
        frame_of(&cancelled)["params"],
        json!({ "requestId": alpha_id, "reason": "stop" }),
        "the upstream's own id"
    );
    assert!(gw.beta.try_sent().is_none(), "beta heard nothing");
    let frame = ready(within(on_alpha).await.unwrap());
    assert_eq!(frame["id"], "a");
    assert_eq!(error_code(&frame), code::REQUEST_CANCELLED);

    gw.beta.answer(beta_id, r#"{"ok":true}"#).await;
    assert_eq!(ready(within(on_beta).await.unwrap())["result"]["ok"], true);
    assert!(ctx.inflight.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_call_that_times_out_answers_so_and_cancels_upstream() {
    let timeout = Duration::from_secs(5);
    let mut gw = gateway(timeout);
    let ctx = session(&gw.router, false);
    let asked = tokio::time::Instant::now();
    let reply = call(&gw.router, &ctx, "7", "tools/call", echo(json!({})));
    let upstream_id = gw.alpha.next_sent().await.id.unwrap();

    tokio::time::advance(Duration::from_millis(4_500)).await;
    assert!(gw.alpha.try_sent().is_none(), "not cancelled early");
    assert_eq!(ctx.inflight.len(), 1);

    let frame = ready(within(reply).await.unwrap());
    assert!(asked.elapsed() >= timeout);
    assert_eq!(frame["id"], 7);
    assert_eq!(error_code(&frame), code::UPSTREAM_TIMEOUT);
    assert_eq!(frame["error"]["data"]["upstream"], "alpha");
    let cancelled = gw.alpha.next_sent().await;
    assert!(cancelled.is(&Method::Cancelled));
    assert_eq!(cancelled.cancels, Some(upstream_id));
    assert!(ctx.inflight.is_empty());
    assert_eq!(gw.alpha.conn.pending_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn progress_streams_under_the_clients_token_and_restarts_the_deadline() {
    let timeout = Duration::from_millis(200);
    let mut gw = gateway(timeout);
    let ctx = session(&gw.router, true);
    let asked = tokio::time::Instant::now();
    let params = json!({ "name": "alpha__echo", "_meta": { "progressToken": "p-1" } });
    let Reply::Streaming(mut frames) = within(call(&gw.router, &ctx, "9", "tools/call", params))
        .await
        .unwrap()
    else {
        panic!("a call with a progress token streams");
    };
    let sent = gw.alpha.next_sent().await;
    let upstream_id = sent.id.unwrap();
    assert_eq!(
        frame_of(&sent)["params"]["_meta"]["progressToken"],
        json!(upstream_id),
        "the upstream sees its own id as the token"
    );

    // Half the deadline passes (on the paused clock), then progress.
    tokio::time::sleep(timeout / 2).await;
    gw.alpha
        .notify(
            "notifications/progress",
            json!({ "progressToken": upstream_id, "progress": 1 }),
        )
        .await;
    let progress: Value = serde_json::from_str(&within(frames.recv()).await.unwrap()).unwrap();
    assert_eq!(progress["params"]["progressToken"], "p-1");

    // Past the first deadline: still waiting, nothing cancelled.
    tokio::time::sleep(timeout * 9 / 10).await;
    assert!(asked.elapsed() > timeout);
    assert!(frames.try_recv().is_err(), "no answer yet");
    assert!(gw.alpha.try_sent().is_none(), "not cancelled");

    // A full timeout after the progress, the call times out after all.
    let last: Value = serde_json::from_str(&within(frames.recv()).await.unwrap()).unwrap();
    assert!(asked.elapsed() >= timeout * 3 / 2);
    assert_eq!(last["id"], 9);
    assert_eq!(error_code(&last), code::UPSTREAM_TIMEOUT);
    assert_eq!(gw.alpha.next_sent().await.cancels, Some(upstream_id));
    assert!(within(frames.recv()).await.is_none(), "the stream ends");
}

#[tokio::test(start_paused = true)]
async fn a_modern_client_closing_its_stream_cancels_the_call() {
    let mut gw = gateway(PATIENT);
    let ctx = Arc::new(RequestContext {
        inflight: Arc::default(),
        subscriber: None,
        can_stream: true,
        era: Era::Modern,
        log_level: None,
        identity: None,
        session_id: None,
        endpoint: None,
    });
    let params = json!({ "name": "alpha__echo", "_meta": { "progressToken": 1 } });
    let Reply::Streaming(frames) = within(call(&gw.router, &ctx, "3", "tools/call", params))
        .await
        .unwrap()
    else {
        panic!("a call with a progress token streams");
    };
    let sent = gw.alpha.next_sent().await;
    assert_eq!(
        sent.origin,
        Origin::Client {
            session: None,
            request: "3".into()
        }
    );
    drop(frames);
    let cancelled = gw.alpha.next_sent().await;
    assert!(cancelled.is(&Method::Cancelled));
    assert_eq!(cancelled.cancels, sent.id);
    assert!(ctx.inflight.is_empty());
}

#[tokio::test(start_paused = true)]
async fn unknown_names_and_down_upstreams_are_refused_without_sending() {
    let mut gw = gateway(PATIENT);
    let ctx = session(&gw.router, false);
    for name in ["alpha__nope", "nobody__echo", "echo"] {
        let reply = call(&gw.router, &ctx, "1", "tools/call", json!({ "name": name }));
        let frame = ready(within(reply).await.unwrap());
        assert_eq!(error_code(&frame), code::INVALID_PARAMS, "{name}");
        assert_eq!(frame["error"]["data"]["name"], name);
    }
    let reply = call(
        &gw.router,
        &ctx,
        "2",
        "resources/read",
        json!({ "uri": "nobody+file:///a" }),
    );
    let frame = ready(within(reply).await.unwrap());
    assert_eq!(error_code(&frame), code::RESOURCE_NOT_FOUND);
    assert_eq!(frame["error"]["data"]["uri"], "nobody+file:///a");

    let handle = gw.router.upstreams().get("beta").unwrap();
    handle.replace_connection(None);
    let reply = call(
        &gw.router,
        &ctx,
        "3",
        "tools/call",
        json!({ "name": "beta__echo" }),
    );
    let frame = ready(within(reply).await.unwrap());
    assert_eq!(error_code(&frame), code::UPSTREAM_UNAVAILABLE);
    assert_eq!(frame["error"]["data"]["upstream"], "beta");

    assert!(gw.alpha.try_sent().is_none() && gw.beta.try_sent().is_none());
    assert!(ctx.inflight.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_call_is_retried_once_on_a_reinitialized_upstream_and_cancels_there() {
    let mut gw = gateway(PATIENT);
    let ctx = session(&gw.router, false);
    // A read-only, idempotent tool: safe to send again.
    let peek = json!({ "name": "alpha__peek", "arguments": { "n": 1 } });
    let reply = call(&gw.router, &ctx, "5", "tools/call", peek);
    let first = gw.alpha.next_sent().await;

    // The upstream forgot the session; the supervisor brings up a new one.
    gw.alpha.conn.mark_session_expired();
    gw.alpha.conn.close("404");
    let mut fresh = FakeUpstream::new("alpha");
    let handle = gw.router.upstreams().get("alpha").unwrap();
    handle.replace_connection(Some(fresh.conn.clone()));

    let retried = fresh.next_sent().await;
    assert_eq!(
        frame_of(&retried)["params"],
        frame_of(&first)["params"],
        "the same call"
    );
    assert_eq!(ctx.inflight.len(), 1);
    // The in-flight entry follows the retry: cancelling reaches the new one.
    cancel(&gw.router, &ctx, json!(5));
    assert_eq!(fresh.next_sent().await.cancels, retried.id);
    assert!(gw.alpha.try_sent().is_none());
    assert_eq!(
        error_code(&ready(within(reply).await.unwrap())),
        code::REQUEST_CANCELLED
    );
}

/// A stateless (2026-07-28) request's context whose client can answer
/// elicitation.
fn stateless(can_stream: bool) -> Arc<RequestContext> {
    Arc::new(RequestContext {
        inflight: Arc::default(),
        subscriber: None,
        can_stream,
        era: Era::Modern,
        log_level: None,
        identity: None,
        session_id: None,
        endpoint: None,
    })
}

const ELICIT: &str = r#"{"jsonrpc":"2.0","id":41,"method":"elicitation/create","params":{"message":"Name?","requestedSchema":{"type":"object"}}}"#;

/// Starts a stateless call of `alpha__echo` and has the (2025-era) upstream
/// ask its client something: the call's `input_required` answer.
async fn parked_call(gw: &mut Gateway) -> Value {
    let params = json!({
        "name": "alpha__echo",
        "arguments": {},
        "_meta": { "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} } },
    });
    let reply = call(&gw.router, &stateless(false), "5", "tools/call", params);
    let sent = gw.alpha.next_sent().await;
    assert!(sent.is(&Method::ToolsCall));
    gw.alpha.conn.dispatch(ELICIT).await;
    let answer = ready(within(reply).await.unwrap());
    assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
    assert_eq!(gw.router.parked_calls(), 1);
    answer
}

#[tokio::test(start_paused = true)]
async fn a_parked_call_not_continued_in_time_tells_the_upstream_and_is_cancelled() {
    let mut gw = gateway(PATIENT);
    let answer = parked_call(&mut gw).await;
    let requests = answer["result"]["inputRequests"].as_object().unwrap();
    let (_, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "Name?");

    tokio::time::sleep(PATIENT).await;
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(gw.alpha.next_sent().await);
    }
    let refused = seen
        .iter()
        .find(|m| m.method.is_none())
        .expect("an answer to the question");
    let refused = frame_of(refused);
    assert_eq!(refused["id"], 41, "{refused}");
    assert!(refused["error"]["message"].is_string(), "{refused}");
    assert!(
        seen.iter().any(|m| m.is(&Method::Cancelled)),
        "the call is cancelled upstream"
    );
    assert_eq!(gw.router.parked_calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_parked_call_whose_upstream_goes_away_is_forgotten() {
    let mut gw = gateway(PATIENT);
    parked_call(&mut gw).await;
    gw.alpha.conn.close("the upstream exited");
    within(async {
        while gw.router.parked_calls() > 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_call_of_a_tool_without_both_hints_is_not_sent_again() {
    let mut gw = gateway(PATIENT);
    let ctx = session(&gw.router, false);
    let reply = call(&gw.router, &ctx, "5", "tools/call", echo(json!({ "n": 1 })));
    gw.alpha.next_sent().await;
    // The session was lost while the call was in flight: it may have run.
    gw.alpha.conn.mark_session_expired();
    gw.alpha.conn.close("404");
    let mut fresh = FakeUpstream::new("alpha");
    let handle = gw.router.upstreams().get("alpha").unwrap();
    handle.replace_connection(Some(fresh.conn.clone()));
    let frame = ready(within(reply).await.unwrap());
    assert_eq!(error_code(&frame), code::UPSTREAM_UNAVAILABLE);
    let message = frame["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("not retried: it may have run already"),
        "{message}"
    );
    assert!(fresh.try_sent().is_none(), "never sent again");
}

/// A method the gateway does not know is refused and counted under one
/// label whatever its name: a client cannot add series to `/metrics`.
#[tokio::test]
async fn unknown_methods_are_counted_under_one_label() {
    let gw = gateway(PATIENT);
    let ctx = session(&gw.router, false);
    for name in ["no/such/method", "another/made/up/one"] {
        let reply = within(call(&gw.router, &ctx, "1", name, json!({})))
            .await
            .unwrap();
        assert_eq!(error_code(&ready(reply)), code::METHOD_NOT_FOUND);
    }
    let text = gw.router.metrics.exposition();
    assert!(
        text.contains(
            r#"mcpmux_requests_total{mcp_method_name="other",upstream="mcpmux",outcome="error"} 2"#
        ),
        "{text}"
    );
    assert!(!text.contains("no/such/method"), "{text}");
}
