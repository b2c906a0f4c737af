//! Unit tests of relaying an upstream's requests for a client (sampling,
//! elicitation, roots): which call's client is asked, the refusals, and
//! that the upstream always gets an answer under its own id, on tokio's
//! paused clock. The hub is played by the test's `Recorder`.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::*;
use crate::protocol::code;
use crate::upstream::AskRefused;
use crate::upstream::test_support::{FakeUpstream, frame_of, within};

/// A client call of `session` in flight on `up`, whose reply can carry
/// requests for its client: its upstream id and its stream.
async fn call_of(up: &FakeUpstream, session: Option<u64>) -> (u64, mpsc::Receiver<String>) {
    call_with_stream(up, session, mpsc::channel(8)).await
}

async fn call_with_stream(
    up: &FakeUpstream,
    session: Option<u64>,
    (sink, stream): (mpsc::Sender<String>, mpsc::Receiver<String>),
) -> (u64, mpsc::Receiver<String>) {
    let id = call_with_asks(up, session, CallStream::Open(sink), None).await;
    (id, stream)
}

/// A session's call as the router makes one that nothing has been sent
/// on yet: its stream opens when the first request for its client does.
async fn lazy_call_of(up: &FakeUpstream, session: u64) -> (u64, CallStream) {
    let stream = CallStream::lazy(8);
    (
        call_with_asks(up, Some(session), stream.clone(), None).await,
        stream,
    )
}

/// A stateless call whose client is asked through its reply: its upstream
/// id and where the requests for its client arrive.
async fn stateless_call(up: &FakeUpstream) -> (u64, mpsc::Receiver<crate::upstream::InputAsk>) {
    let (asks, asked) = mpsc::channel(4);
    let id = call_with_asks(up, None, CallStream::open(8).0, Some(asks)).await;
    (id, asked)
}

async fn call_with_asks(
    up: &FakeUpstream,
    session: Option<u64>,
    sink: CallStream,
    asks: Option<mpsc::Sender<crate::upstream::InputAsk>>,
) -> u64 {
    let id = up.conn.next_id();
    let request = Request {
        method: Method::ToolsCall,
        params: Payload::Params(Some(r#"{"name":"ask"}"#)),
        target: None,
        origin: Origin::Client {
            session,
            request: "c-1".into(),
        },
        progress: Some(ProgressRoute {
            client_token: None,
            sink,
            last_progress: Arc::new(AtomicU64::new(0)),
            started: Instant::now(),
            asks,
        }),
        prepared: None,
    };
    let _answer = up.conn.send_request(id, request).await.unwrap();
    std::mem::forget(_answer);
    id
}

const ELICIT: &str = r#"{"jsonrpc":"2.0","id":41,"method":"elicitation/create","params":{"message":"Name?","requestedSchema":{"type":"object"}}}"#;

/// The next frame the gateway sends upstream that is not the call itself.
async fn next_reply(up: &mut FakeUpstream) -> Value {
    loop {
        let message = up.next_sent().await;
        if message.method.is_none() {
            return frame_of(&message);
        }
    }
}

/// The upstream's request is not answered before the 60 s timeout; then
/// it is, with an error saying the client did not answer in time.
async fn answered_only_at_the_timeout(up: &mut FakeUpstream) {
    tokio::time::sleep(Duration::from_secs(59)).await;
    while let Some(sent) = up.try_sent() {
        assert!(
            sent.method.is_some(),
            "still waiting, yet answered: {sent:?}"
        );
    }
    let late = next_reply(up).await;
    assert!(
        late["error"]["message"]
            .as_str()
            .unwrap()
            .contains("in time"),
        "{late}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_on_a_calls_stream_goes_to_that_calls_client_and_back() {
    let mut up = FakeUpstream::new("alpha");
    let (_other, other_stream) = lazy_call_of(&up, 8).await;
    let (call, stream) = lazy_call_of(&up, 7).await;
    assert!(!stream.is_open(), "nothing has been sent on the call yet");
    up.conn.dispatch_from(ELICIT, Some(call)).await;

    // The request opened the call's stream, and is its first frame.
    let mut frames = within(stream.opened()).await;
    let relayed: Value = serde_json::from_str(&within(frames.recv()).await.unwrap()).unwrap();
    assert_eq!(relayed["method"], "elicitation/create");
    assert_eq!(relayed["id"], "ask-1", "the client sees the gateway's id");
    assert_eq!(relayed["params"]["message"], "Name?");
    assert!(
        !other_stream.is_open(),
        "the other session hears nothing: its stream was never opened"
    );
    let (session, method, _, reply) = up.events.asked.lock().unwrap().pop().unwrap();
    assert_eq!((session, method), (7, Method::Elicit));

    let answer = serde_json::value::to_raw_value(&json!({ "action": "accept" })).unwrap();
    reply.send(Ok(answer)).unwrap();
    let back = next_reply(&mut up).await;
    assert_eq!(back["id"], 41, "the upstream gets its own id back");
    assert_eq!(back["result"], json!({ "action": "accept" }));
}

#[tokio::test(start_paused = true)]
async fn without_a_stream_the_one_session_in_flight_is_asked_and_two_are_refused() {
    let mut up = FakeUpstream::new("alpha");
    let (_a, mut a_stream) = call_of(&up, Some(7)).await;
    let (_b, mut b_stream) = call_of(&up, Some(7)).await;
    up.conn.dispatch(ELICIT).await;
    let relayed = within(b_stream.recv()).await.unwrap();
    assert!(
        relayed.contains("elicitation/create"),
        "the newest call carries it"
    );
    assert!(a_stream.try_recv().is_err());

    // A second session's call makes the origin ambiguous: refused, never guessed.
    let (_c, mut c_stream) = call_of(&up, Some(9)).await;
    up.conn.dispatch(ELICIT).await;
    let refused = next_reply(&mut up).await;
    assert_eq!(refused["id"], 41);
    assert_eq!(refused["error"]["code"], code::INTERNAL_ERROR);
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("several sessions"), "{message}");
    assert!(c_stream.try_recv().is_err() && b_stream.try_recv().is_err());
    assert_eq!(
        up.events.asked.lock().unwrap().len(),
        1,
        "only the first was asked"
    );
}

#[tokio::test(start_paused = true)]
async fn refusals_are_answered_at_once_with_why() {
    let mut up = FakeUpstream::new("alpha");
    // No call in flight: roots are an empty list, anything else an error.
    up.conn
        .dispatch(r#"{"jsonrpc":"2.0","id":1,"method":"roots/list"}"#)
        .await;
    assert_eq!(next_reply(&mut up).await["result"], json!({ "roots": [] }));
    up.conn.dispatch(ELICIT).await;
    let none = next_reply(&mut up).await;
    assert!(
        none["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no client call")
    );

    // A stateless call without a way to ask its client (no reply to carry it).
    let (call, _stream) = call_of(&up, None).await;
    up.conn.dispatch_from(ELICIT, Some(call)).await;
    let stateless = next_reply(&mut up).await;
    assert!(
        stateless["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no event stream")
    );

    // A client without the capability: -32601, as the client would say.
    let (call, mut stream) = call_of(&up, Some(7)).await;
    *up.events.refuse.lock().unwrap() = Some(AskRefused::MissingCapability("elicitation"));
    up.conn.dispatch_from(ELICIT, Some(call)).await;
    let missing = next_reply(&mut up).await;
    assert_eq!(missing["error"]["code"], code::METHOD_NOT_FOUND);
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not support elicitation")
    );
    assert!(stream.try_recv().is_err(), "nothing reached the client");
}

#[tokio::test(start_paused = true)]
async fn the_upstream_hears_when_no_answer_will_come() {
    let mut up = FakeUpstream::new("alpha");

    // The client's session ends (the hub drops its table).
    let (call, _stream) = call_of(&up, Some(7)).await;
    up.conn.dispatch_from(ELICIT, Some(call)).await;
    drop(up.events.asked.lock().unwrap().pop());
    let ended = next_reply(&mut up).await;
    assert!(
        ended["error"]["message"]
            .as_str()
            .unwrap()
            .contains("session ended")
    );

    // The call's stream goes away (the call ended or its client left).
    let (call, stream) = call_of(&up, Some(7)).await;
    up.conn.dispatch_from(ELICIT, Some(call)).await;
    tokio::task::yield_now().await;
    drop(stream);
    let gone = next_reply(&mut up).await;
    assert!(
        gone["error"]["message"].as_str().unwrap().contains("ended"),
        "{gone}"
    );

    // Nobody answers: the timeout (60 s by default) ends it.
    let (call, _stream) = call_of(&up, Some(7)).await;
    up.conn.dispatch_from(ELICIT, Some(call)).await;
    answered_only_at_the_timeout(&mut up).await;
    let forgotten = up.events.forgotten.lock().unwrap().clone();
    assert_eq!(
        forgotten.len(),
        3,
        "every abandoned request leaves the table: {forgotten:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_that_never_reads_its_stream_is_timed_out_too() {
    let mut up = FakeUpstream::new("alpha");
    let (sink, stream) = mpsc::channel(1);
    sink.try_send("a frame the client never reads".into())
        .unwrap();
    let (call, _stream) = call_with_stream(&up, Some(7), (sink, stream)).await;
    up.conn.dispatch_from(ELICIT, Some(call)).await;
    answered_only_at_the_timeout(&mut up).await;
    assert_eq!(up.events.forgotten.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_stateless_calls_client_is_asked_through_the_call_itself() {
    let mut up = FakeUpstream::new("alpha");
    let (call, mut asked) = stateless_call(&up).await;
    up.conn.dispatch_from(ELICIT, Some(call)).await;
    let ask = within(asked.recv()).await.unwrap();
    assert_eq!(ask.method, Method::Elicit);
    assert!(ask.params.unwrap().get().contains("Name?"));
    assert!(
        up.events.asked.lock().unwrap().is_empty(),
        "no session is involved"
    );
    let answer = serde_json::value::to_raw_value(&json!({ "action": "decline" })).unwrap();
    ask.answer.send(Ok(answer)).unwrap();
    let back = next_reply(&mut up).await;
    assert_eq!(back["id"], 41);
    assert_eq!(back["result"], json!({ "action": "decline" }));

    // The call drops the request (it was not continued): the upstream hears so.
    up.conn.dispatch_from(ELICIT, Some(call)).await;
    drop(within(asked.recv()).await.unwrap());
    let dropped = next_reply(&mut up).await;
    assert!(
        dropped["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not send the answer back"),
        "{dropped}"
    );

    // Two stateless calls in flight on stdio are two clients: refused.
    let (_other, _) = stateless_call(&up).await;
    up.conn.dispatch(ELICIT).await;
    let ambiguous = next_reply(&mut up).await;
    assert!(
        ambiguous["error"]["message"]
            .as_str()
            .unwrap()
            .contains("several")
    );
}

#[tokio::test(start_paused = true)]
async fn roots_come_from_the_sessions_cache_or_the_config_without_asking() {
    let (outbound, sent) = mpsc::channel(64);
    let mut up = FakeUpstream::new("alpha");
    // A connection whose config gives it roots.
    let conn = Connection::new(
        "alpha".into(),
        outbound,
        mpsc::channel(4).0,
        up.events.clone(),
        Default::default(),
    )
    .with_asks(
        tokio_util::task::TaskTracker::new(),
        Duration::from_secs(5),
        r#"{"roots":[{"uri":"file:///srv"}]}"#.into(),
    );
    up.conn = Arc::new(conn);
    up.sent = sent;
    const ROOTS: &str = r#"{"jsonrpc":"2.0","id":5,"method":"roots/list"}"#;

    // Outside any call: the config's roots.
    up.conn.dispatch(ROOTS).await;
    assert_eq!(
        next_reply(&mut up).await["result"],
        json!({ "roots": [{ "uri": "file:///srv" }] })
    );

    // In a session's call: the client is asked, and its answer remembered.
    let (call, mut stream) = call_of(&up, Some(7)).await;
    up.conn.dispatch_from(ROOTS, Some(call)).await;
    assert!(within(stream.recv()).await.unwrap().contains("roots/list"));
    let (_, _, _, reply) = up.events.asked.lock().unwrap().pop().unwrap();
    let roots = json!({ "roots": [{ "uri": "file:///home/ada" }] });
    reply
        .send(Ok(serde_json::value::to_raw_value(&roots).unwrap()))
        .unwrap();
    assert_eq!(next_reply(&mut up).await["result"], roots);
    assert_eq!(
        up.events.roots.lock().unwrap().get(&7).map(String::as_str),
        Some(r#"{"roots":[{"uri":"file:///home/ada"}]}"#)
    );

    // Asked again while the roots hold: answered from the cache.
    up.conn.dispatch_from(ROOTS, Some(call)).await;
    assert_eq!(next_reply(&mut up).await["result"], roots);
    assert!(stream.try_recv().is_err(), "the client is not asked again");
    assert!(up.events.asked.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_url_elicitations_completion_reaches_only_the_session_shown_it() {
    let mut up = FakeUpstream::new("alpha");
    let (call, mut stream) = call_of(&up, Some(7)).await;
    let url = r#"{"jsonrpc":"2.0","id":42,"method":"elicitation/create","params":{"mode":"url","elicitationId":"e-1","url":"https://example.com/login","message":"Sign in"}}"#;
    up.conn.dispatch_from(url, Some(call)).await;
    assert!(within(stream.recv()).await.unwrap().contains("e-1"));
    let (_, _, _, reply) = up.events.asked.lock().unwrap().pop().unwrap();
    reply
        .send(Ok(serde_json::value::to_raw_value(
            &json!({ "action": "accept" }),
        )
        .unwrap()))
        .unwrap();
    let _ = next_reply(&mut up).await;

    let complete = |id: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/elicitation/complete","params":{{"elicitationId":"{id}"}}}}"#
        )
    };
    up.conn.dispatch(&complete("e-unknown")).await;
    up.conn.dispatch(&complete("e-1")).await;
    // Once only: a repeat is as unknown as a made-up id.
    up.conn.dispatch(&complete("e-1")).await;
    let completed = up.events.completed.lock().unwrap().clone();
    assert_eq!(
        completed,
        vec![(7, Some(r#"{"elicitationId":"e-1"}"#.to_owned()))]
    );
}
