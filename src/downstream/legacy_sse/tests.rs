//! Unit tests of `POST /message`: the per-session cap on request tasks, and
//! that notifications pass the cap. The handler is called directly, over an
//! `AppState` with no upstreams (`ping` is answered by the gateway itself).

use std::sync::atomic::AtomicBool;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::*;
use crate::catalog::CatalogStore;
use crate::config::{Config, Lookup};
use crate::notify::NotifyHub;
use crate::router::Router;
use crate::upstream::UpstreamSet;

fn state() -> Arc<AppState> {
    // The upstream is only there to make the config valid; nothing starts it.
    let text = "upstreams:\n  unused:\n    command: srv\nauth: { mode: off }\n";
    let config = Config::parse(text, "test.yaml", &Lookup::from_pairs([("UNUSED", "")]))
        .expect("a valid config");
    let upstreams = Arc::new(UpstreamSet::default());
    let interest = Arc::new(crate::upstream::Interest::new(upstreams.clone()));
    let hub = Arc::new(NotifyHub::new(interest));
    let catalog = Arc::new(CatalogStore::new([]));
    Arc::new(AppState {
        router: Router::new(
            catalog,
            upstreams,
            hub.clone(),
            Arc::default(),
            crate::config::PageSizes::uniform(100),
        ),
        sessions: Arc::new(SessionTable::new(hub, &config.sessions)),
        http: config.http.clone(),
        shutdown: CancellationToken::new(),
        drain_grace: config.shutdown_grace,
        loopback_listener: AtomicBool::new(true),
        auth: arc_swap::ArcSwapOption::empty(),
        throttle: arc_swap::ArcSwapOption::empty(),
        connections: std::sync::OnceLock::new(),
        oauth_server: arc_swap::ArcSwapOption::empty(),
        listen_addr: std::sync::OnceLock::new(),
        connector: Arc::new(crate::credentials::Connector::new(None, None)),
        tracker: TaskTracker::new(),
        ui: crate::downstream::ui::UiState::new(&config),
        endpoints: arc_swap::ArcSwap::default(),
    })
}

async fn post(state: &Arc<AppState>, session_id: &str, body: &str) -> Response {
    let query = SessionQuery {
        session_id: Some(session_id.to_owned()),
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    message(
        State(state.clone()),
        crate::downstream::endpoint::Caller {
            at: crate::downstream::endpoint::At(None),
            identity: None,
        },
        Query(query),
        headers,
        Body::from(body.to_owned()),
    )
    .await
}

async fn json_body(response: Response) -> Value {
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("a readable body");
    serde_json::from_slice(&bytes).expect("a JSON body")
}

#[tokio::test(start_paused = true)]
async fn a_session_at_its_request_task_limit_gets_429_but_may_still_notify() {
    let state = state();
    let (replies, mut answers) = mpsc::channel(REPLY_CAPACITY);
    let session = state
        .sessions
        .create(None, Some(replies), None, None, None)
        .expect("room for a session");
    // Every permit taken, as by that many requests still running.
    let running: Vec<_> = (0..MAX_REQUEST_TASKS)
        .map(|_| session.request_tasks.clone().try_acquire_owned().unwrap())
        .collect();

    let refused = post(
        &state,
        &session.id,
        r#"{"jsonrpc":"2.0","id":"over","method":"ping"}"#,
    )
    .await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
    let body = json_body(refused).await;
    assert_eq!(body["id"], "over");
    assert_eq!(body["error"]["code"], code::INTERNAL_ERROR);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&MAX_REQUEST_TASKS.to_string())
    );

    // A cancellation is no request: it needs no task and passes the cap.
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#;
    assert_eq!(
        post(&state, &session.id, cancel).await.status(),
        StatusCode::ACCEPTED
    );
    assert!(
        answers.try_recv().is_err(),
        "nothing is answered on the stream"
    );

    // One request finishes: the next one is taken, answered on the stream,
    // and gives its permit back when done.
    drop(running);
    let accepted = post(
        &state,
        &session.id,
        r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#,
    )
    .await;
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
    let answer: Value = serde_json::from_str(&answers.recv().await.unwrap()).unwrap();
    assert_eq!(answer["id"], 7);
    assert!(answer.get("result").is_some(), "{answer}");
    state.tracker.close();
    state.tracker.wait().await;
    assert_eq!(session.request_tasks.available_permits(), MAX_REQUEST_TASKS);
}

#[tokio::test(start_paused = true)]
async fn a_body_that_does_not_parse_is_refused_before_any_task() {
    let state = state();
    let (replies, _answers) = mpsc::channel(REPLY_CAPACITY);
    let session = state
        .sessions
        .create(None, Some(replies), None, None, None)
        .expect("room for a session");
    let refused = post(&state, &session.id, "{not json").await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(json_body(refused).await["error"]["code"], code::PARSE_ERROR);
    assert!(state.tracker.is_empty(), "no task was spawned");
    assert_eq!(session.request_tasks.available_permits(), MAX_REQUEST_TASKS);
}
