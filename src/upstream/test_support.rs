//! Test doubles for unit tests of the upstream layer and of the modules
//! that use it: a [`Connection`] driven by the test (what the gateway sends
//! is read from its outbound queue, what the upstream says is fed to
//! [`Connection::dispatch`]), an [`UpstreamHandle`] around such a
//! connection with no supervisor, and an [`UpstreamEvents`] that records
//! every call. No process, socket or task is started.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};

use super::message::Outgoing;
use super::noise::NoiseFilter;
use super::{
    AskRefused, ClientAnswer, ClientAsk, Connection, ListsChanged, Shared, UpstreamEvents,
    UpstreamHandle, UpstreamState,
};
use crate::catalog::ListKind;
use crate::protocol::Method;

/// Room in the fake's queues: far more than any test sends.
const QUEUE: usize = 64;

/// A request for a client: the session, the method, the gateway-issued id
/// and where its answer goes.
pub(crate) type Asked = (u64, Method, Arc<str>, oneshot::Sender<ClientAnswer>);

/// Every call an upstream made on its [`UpstreamEvents`], in order.
#[derive(Default)]
pub(crate) struct Recorder {
    /// `(upstream, original URI)` of each `resource_updated`.
    pub(crate) updated: Mutex<Vec<(String, String)>>,
    /// `(upstream, params JSON)` of each `log_message`.
    pub(crate) logs: Mutex<Vec<(String, Option<String>)>>,
    /// The kinds of each `lists_changed`.
    pub(crate) lists: Mutex<Vec<Vec<ListKind>>>,
    /// Each request for a client: the session, the method, the
    /// gateway-issued id and where its answer goes.
    pub(crate) asked: Mutex<Vec<Asked>>,
    /// Forgotten requests: `(session, id)`.
    pub(crate) forgotten: Mutex<Vec<(u64, String)>>,
    /// When set, every request for a client is refused with this.
    pub(crate) refuse: Mutex<Option<AskRefused>>,
    /// Roots remembered per session (what `cached_roots` answers).
    pub(crate) roots: Mutex<std::collections::HashMap<u64, String>>,
    /// `(session, params JSON)` of each `elicitation_complete`.
    pub(crate) completed: Mutex<Vec<(u64, Option<String>)>>,
    /// Sessions that ended (`session_alive` says false for them).
    pub(crate) ended: Mutex<Vec<u64>>,
    /// Each call meant for one session: `(session, what)`.
    pub(crate) scoped: Mutex<Vec<(u64, String)>>,
}

impl UpstreamEvents for Recorder {
    fn resource_updated(&self, upstream: &str, original_uri: &str) {
        self.updated
            .lock()
            .unwrap()
            .push((upstream.to_owned(), original_uri.to_owned()));
    }

    fn log_message(&self, upstream: &str, params: Option<&serde_json::value::RawValue>) {
        self.logs
            .lock()
            .unwrap()
            .push((upstream.to_owned(), params.map(|p| p.get().to_owned())));
    }

    fn lists_changed(&self, kinds: &[ListKind]) {
        self.lists.lock().unwrap().push(kinds.to_vec());
    }

    fn ask_client(
        &self,
        session: u64,
        method: &Method,
        _params: Option<&serde_json::value::RawValue>,
    ) -> Result<ClientAsk, AskRefused> {
        if let Some(refused) = self.refuse.lock().unwrap().clone() {
            return Err(refused);
        }
        let mut asked = self.asked.lock().unwrap();
        let id: Arc<str> = format!("ask-{}", asked.len() + 1).into();
        let (tx, answer) = oneshot::channel();
        asked.push((session, method.clone(), id.clone(), tx));
        Ok(ClientAsk { id, answer })
    }

    fn forget_ask(&self, session: u64, id: &str) {
        self.forgotten
            .lock()
            .unwrap()
            .push((session, id.to_owned()));
    }

    fn cached_roots(&self, session: u64) -> Option<Box<serde_json::value::RawValue>> {
        let roots = self.roots.lock().unwrap().get(&session).cloned()?;
        serde_json::value::RawValue::from_string(roots).ok()
    }

    fn remember_roots(&self, session: u64, result: &serde_json::value::RawValue) {
        self.roots
            .lock()
            .unwrap()
            .insert(session, result.get().to_owned());
    }

    fn elicitation_complete(&self, session: u64, params: Option<&serde_json::value::RawValue>) {
        self.completed
            .lock()
            .unwrap()
            .push((session, params.map(|p| p.get().to_owned())));
    }

    fn session_alive(&self, session: u64) -> bool {
        !self.ended.lock().unwrap().contains(&session)
    }

    fn resource_updated_for(&self, session: u64, upstream: &str, original_uri: &str) {
        self.scoped
            .lock()
            .unwrap()
            .push((session, format!("updated {upstream} {original_uri}")));
    }

    fn log_message_for(
        &self,
        session: u64,
        upstream: &str,
        _params: Option<&serde_json::value::RawValue>,
    ) {
        self.scoped
            .lock()
            .unwrap()
            .push((session, format!("log {upstream}")));
    }

    fn lists_changed_for(&self, session: u64, kinds: &[ListKind]) {
        self.scoped
            .lock()
            .unwrap()
            .push((session, format!("lists {kinds:?}")));
    }
}

/// One upstream as the test plays it: the gateway's [`Connection`] and the
/// other ends of its queues.
pub(crate) struct FakeUpstream {
    pub(crate) conn: Arc<Connection>,
    /// What the gateway sends the upstream.
    pub(crate) sent: mpsc::Receiver<Outgoing>,
    /// The list changes the connection queues for the supervisor.
    pub(crate) list_changes: mpsc::Receiver<ListsChanged>,
    pub(crate) events: Arc<Recorder>,
}

impl FakeUpstream {
    /// A fresh, open connection to an upstream called `name`.
    pub(crate) fn new(name: &str) -> Self {
        let (outbound, sent) = mpsc::channel(QUEUE);
        let (changes, list_changes) = mpsc::channel(QUEUE);
        let events = Arc::new(Recorder::default());
        let conn = Arc::new(Connection::new(
            name.into(),
            outbound,
            changes,
            events.clone(),
            Arc::new(NoiseFilter::default()),
        ));
        Self {
            conn,
            sent,
            list_changes,
            events,
        }
    }

    /// The next message the gateway sends (it must send one, within an
    /// hour of tokio's clock).
    pub(crate) async fn next_sent(&mut self) -> Outgoing {
        within(self.sent.recv())
            .await
            .expect("the connection is alive")
    }

    /// A message already queued, if any.
    pub(crate) fn try_sent(&mut self) -> Option<Outgoing> {
        self.sent.try_recv().ok()
    }

    /// Answers request `id` with `result` (JSON text).
    pub(crate) async fn answer(&self, id: u64, result: &str) {
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#);
        self.conn.dispatch(&line).await;
    }

    /// Sends the gateway a notification.
    pub(crate) async fn notify(&self, method: &str, params: Value) {
        let line = serde_json::json!({ "jsonrpc": "2.0", "method": method, "params": params });
        self.conn.dispatch(&line.to_string()).await;
    }
}

/// Awaits `future` for at most an hour of tokio's clock: a test whose
/// expectation is broken fails (under a paused clock, at once) instead of
/// hanging.
pub(crate) async fn within<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(3_600), future)
        .await
        .expect("nothing happened within an hour")
}

/// A message's frame as JSON.
pub(crate) fn frame_of(message: &Outgoing) -> Value {
    serde_json::from_slice(&message.frame).expect("frames are JSON")
}

impl UpstreamHandle {
    /// A ready upstream with no supervisor: calls go to `conn` (none: it is
    /// down) and wait at most `timeout`.
    pub(crate) fn for_test(name: &str, timeout: Duration, conn: Option<Arc<Connection>>) -> Self {
        let handle = UpstreamHandle {
            shared: Arc::new(Shared {
                name: name.into(),
                timeout,
                start_wait: timeout,
                created: std::time::Instant::now(),
                settled_once: AtomicBool::new(true),
                call_timeouts: AtomicU32::new(0),
                call_timeouts_limit: 3,
                ping_now: tokio::sync::Notify::new(),
                noise: Arc::default(),
                conn: ArcSwapOption::empty(),
                hello: ArcSwapOption::empty(),
                state: watch::Sender::new(UpstreamState::Ready),
                restarts: AtomicU64::new(0),
                pid: AtomicU32::new(0),
                listen_changed: tokio::sync::Notify::new(),
                listen_generation: watch::Sender::new(0),
                reconnect_now: tokio::sync::Notify::new(),
                remote: false,
                uri_forms: Arc::default(),
                required: false,
                transport: "stdio",
                counts: Default::default(),
                instances: None,
                identities: None,
                credentials: None,
                identity_lists: Arc::default(),
                protect: super::protect::Protection::new(
                    name.into(),
                    &crate::config::ProtectConfig::default(),
                ),
                journal: Default::default(),
            }),
        };
        handle.replace_connection(conn);
        handle
    }

    /// Says what the upstream answered to its handshake, as the supervisor
    /// does once it is connected.
    pub(crate) fn set_hello(&self, hello: super::handshake::ServerHello) {
        self.shared.hello.store(Some(Arc::new(hello)));
    }

    /// Swaps the live connection, as the supervisor does after a restart,
    /// and says the upstream is ready again (or down without one).
    pub(crate) fn replace_connection(&self, conn: Option<Arc<Connection>>) {
        let state = match conn {
            Some(_) => UpstreamState::Ready,
            None => UpstreamState::Down {
                reason: "stopped by the test".into(),
                retry_at: None,
            },
        };
        self.shared.conn.store(conn);
        self.set_state(state);
    }
}
