//! A 2025-era upstream asking a 2026-07-28 (stateless) client for input.
//!
//! The client has no session to carry `elicitation/create`,
//! `sampling/createMessage` or `roots/list`, so its call answers with an
//! `input_required` result instead: the requests as `inputRequests`, and
//! a sealed `requestState` (see [`crate::seal`]). The call itself is
//! parked: the upstream request and the upstream's question stay open,
//! held by one task on the gateway's tracker. The client's retry (the same
//! call with `inputResponses` and that `requestState`) delivers the answers
//! upstream and takes the call back, to its result or to the next round.
//!
//! The state names the parked call, the input keys, the client (its
//! authenticated identity), what it called and when it expires; a client
//! can neither read nor forge it. A parked call waits at most the
//! upstream's `timeout`; then the upstream is told there is no answer and
//! its request is cancelled. Parked calls live in this process: a retry
//! reaches them only on the replica that parked them. The state names that
//! process (a random `origin`), so a retry sent to another replica sharing
//! the key is refused as parked elsewhere, never matched with a call of the
//! same number parked there.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::protocol::{self, RpcError, code};
use crate::router::{Frame, Reply};
use crate::seal::{SealError, Sealer};
use crate::upstream::{InputAsk, check_declared};

/// Calls parked at once in the gateway. Beyond it, an upstream's further
/// requests for stateless clients are refused (the upstream gets an
/// error), and nothing already parked is disturbed.
const MAX_PARKED: usize = 4096;

/// Input requests one round carries: the upstream's concurrent questions.
const MAX_ASKS_PER_ROUND: usize = 16;

/// What the sealed state is for (its associated data).
const PURPOSE: &str = "mcpmux/requestState";

/// Why a retry's `requestState` is refused. Each is `-32602`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum StateError {
    #[error("requestState must be a string")]
    NotAString,
    #[error("requestState is not valid: {0}")]
    Unsealed(#[from] SealError),
    #[error("requestState has expired; call again without it")]
    Expired,
    #[error("requestState was issued for another call or client")]
    Mismatch,
    #[error("inputResponses must be an object with an answer for {0:?}")]
    MissingResponse(String),
    #[error(
        "the call this requestState continues is parked on another replica of the gateway; send the retry there, or call again without it"
    )]
    Elsewhere,
    #[error(
        "the call this requestState continues is no longer waiting (it ended, timed out or was already continued); call again without it"
    )]
    Gone,
}

impl StateError {
    fn to_frame(&self, id: &str) -> Frame {
        let text = protocol::error_frame(
            Some(id),
            &RpcError::new(code::INVALID_PARAMS, self.to_string()),
        );
        Frame::error(text, code::INVALID_PARAMS, None)
    }
}

/// What the client holds between rounds, sealed.
#[derive(Serialize, Deserialize)]
struct State {
    /// The process that parked the call ([`Parking::origin`]).
    origin: u64,
    /// The parked call.
    call: u64,
    /// The input keys the retry must answer.
    keys: Vec<String>,
    /// Expiry, milliseconds since the Unix epoch.
    expires: u64,
    /// The authenticated client that got it.
    client: Option<String>,
    /// What it called (tool or prompt name, or URI, as the client named it).
    item: String,
}

/// The parked calls, and the key that seals their state.
pub(crate) struct Parking {
    sealer: Arc<Sealer>,
    /// Random per gateway: names this process in the state it seals.
    origin: u64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Resume>>>,
    next: AtomicU64,
}

impl Parking {
    pub(crate) fn new(sealer: Arc<Sealer>) -> Self {
        Self {
            sealer,
            origin: rand::random(),
            waiting: Mutex::default(),
            next: AtomicU64::new(1),
        }
    }

    /// Calls parked now.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Resume>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn remove(&self, call: u64) -> Option<oneshot::Sender<Resume>> {
        self.lock().remove(&call)
    }
}

/// The client's retry, handed to its parked call.
struct Resume {
    responses: Map<String, Value>,
    /// Takes the call back, to drive it for the retry.
    back: oneshot::Sender<Driver>,
}

/// One call to a 2025-era upstream on behalf of a stateless client: its
/// result, the frames streamed before it, and the upstream's requests
/// for the client.
pub(super) struct Driver {
    pub(super) finishing: Pin<Box<dyn Future<Output = Frame> + Send>>,
    pub(super) frames: mpsc::Receiver<String>,
    pub(super) asks: mpsc::Receiver<InputAsk>,
    /// What the client declared it can answer (its first request's `_meta`).
    pub(super) capabilities: Option<Map<String, Value>>,
    /// The request id the call's result is built with (the first request's).
    pub(super) first_id: String,
    /// The request the call answers now (the latest retry's).
    pub(super) answering: String,
    pub(super) client: Option<Arc<str>>,
    pub(super) item: String,
    /// How long a round waits for the retry: the upstream's `timeout`.
    pub(super) timeout: Duration,
    /// The call's progress clock: waiting for the client counts as progress.
    pub(super) last_progress: Arc<AtomicU64>,
    pub(super) started: Instant,
}

/// What happened next in a call.
enum Event {
    Finished(Frame),
    Frame(Option<String>),
    Asked(InputAsk),
}

/// One round of input: the upstream's requests, by input key.
type Round = Vec<(String, InputAsk)>;

impl Driver {
    async fn next(&mut self, frames_open: bool) -> Event {
        tokio::select! {
            frame = &mut self.finishing => Event::Finished(frame),
            Some(ask) = self.asks.recv() => Event::Asked(ask),
            frame = self.frames.recv(), if frames_open => Event::Frame(frame),
        }
    }

    /// The call's result, as the answer to the request now being served.
    fn answer(&self, frame: Frame) -> Frame {
        if self.first_id == self.answering {
            return frame;
        }
        let head = format!(r#"{{"jsonrpc":"2.0","id":{},"#, self.first_id);
        frame.map_text(|text| match text.strip_prefix(&head) {
            Some(rest) => format!(r#"{{"jsonrpc":"2.0","id":{},{rest}"#, self.answering),
            None => text,
        })
    }

    /// Notes progress now, so waiting for the client does not time the call out.
    fn touch(&self) {
        let elapsed = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_progress.store(elapsed, Ordering::Relaxed);
    }

    /// The round `first` opens, with any other request already waiting;
    /// requests the client did not declare it can answer are refused at
    /// once. None when none is left.
    fn round(&mut self, first: InputAsk, parking: &Parking) -> Option<Round> {
        let mut asks = vec![first];
        while asks.len() < MAX_ASKS_PER_ROUND {
            match self.asks.try_recv() {
                Ok(ask) => asks.push(ask),
                Err(_) => break,
            }
        }
        let round: Round = asks
            .into_iter()
            .filter_map(|ask| {
                match check_declared(
                    self.capabilities.as_ref(),
                    &ask.method,
                    ask.params.as_deref(),
                ) {
                    Ok(()) => {
                        let key =
                            format!("mcpmux-{}", parking.next.fetch_add(1, Ordering::Relaxed));
                        Some((key, ask))
                    }
                    Err(why) => {
                        refuse(ask, code::METHOD_NOT_FOUND, &why.to_string());
                        None
                    }
                }
            })
            .collect();
        (!round.is_empty()).then_some(round)
    }
}

/// Answers an upstream's request with an error.
fn refuse(ask: InputAsk, code: i64, why: &str) {
    let message = format!("mcpmux cannot relay {}: {why}", ask.method.name());
    let error = RpcError::new(code, message).to_json();
    let error = RawValue::from_string(error).unwrap_or_else(|_| RawValue::NULL.to_owned());
    let _ = ask.answer.send(Err(error));
}

/// Runs the call for the request being served: its result, a stream of
/// its frames, or, when the upstream asks the client something, an
/// `input_required` result (the call is then parked). With `stream`, the
/// reply is a stream from the start (the client asked for progress, and
/// the stream's keep-alives hold the connection open while it waits).
pub(super) async fn drive(
    mut driver: Driver,
    parking: &Arc<Parking>,
    tasks: &tokio_util::task::TaskTracker,
    stream: bool,
) -> Reply {
    let first = match stream {
        true => None,
        false => loop {
            match driver.next(true).await {
                Event::Finished(frame) => return Reply::Ready(driver.answer(frame)),
                Event::Asked(ask) => {
                    if let Some(round) = driver.round(ask, parking) {
                        return Reply::Ready(Frame::result(park(driver, round, parking, tasks)));
                    }
                }
                Event::Frame(frame) => break frame,
            }
        },
    };
    // Something streams before the result: the reply is a stream, fed by a
    // task until the call ends or parks.
    let (out, reply) = mpsc::channel(super::STREAM_CAPACITY);
    if let Some(first) = first {
        let _ = out.try_send(first);
    }
    let parking = parking.clone();
    let tracker = tasks.clone();
    let feed = async move {
        let mut frames_open = true;
        loop {
            match driver.next(frames_open).await {
                Event::Finished(frame) => {
                    // Progress and log messages queued before the answer go first.
                    while let Ok(earlier) = driver.frames.try_recv() {
                        if out.send(earlier).await.is_err() {
                            return;
                        }
                    }
                    let _ = out.send(driver.answer(frame).into_text()).await;
                    return;
                }
                Event::Frame(Some(frame)) => {
                    // The client is gone: dropping the call cancels it upstream.
                    if out.send(frame).await.is_err() {
                        return;
                    }
                }
                Event::Frame(None) => frames_open = false,
                Event::Asked(ask) => {
                    if let Some(round) = driver.round(ask, &parking) {
                        let frame = park(driver, round, &parking, &tracker);
                        let _ = out.send(frame).await;
                        return;
                    }
                }
            }
        }
    };
    tasks.spawn(tracing::Instrument::instrument(
        feed,
        tracing::debug_span!("stateless call"),
    ));
    Reply::Streaming(reply)
}

/// Parks the call until the client's retry, and gives the
/// `input_required` result that asks the client for `round`.
fn park(
    driver: Driver,
    round: Round,
    parking: &Arc<Parking>,
    tasks: &tokio_util::task::TaskTracker,
) -> String {
    let call = parking.next.fetch_add(1, Ordering::Relaxed);
    let (resume, resumed) = oneshot::channel();
    {
        let mut waiting = parking.lock();
        if waiting.len() >= MAX_PARKED {
            drop(waiting);
            let why = format!("{MAX_PARKED} calls already wait for their clients' input");
            for (_, ask) in round {
                refuse(ask, code::INTERNAL_ERROR, &why);
            }
            // The call cannot wait: it ends, cancelled upstream.
            let error = RpcError::new(
                code::INTERNAL_ERROR,
                format!("the upstream asked for input, but {why}; try again later"),
            );
            return protocol::error_frame(Some(&driver.answering), &error);
        }
        waiting.insert(call, resume);
    }
    let expires = SystemTime::now() + driver.timeout;
    let state = State {
        origin: parking.origin,
        call,
        keys: round.iter().map(|(key, _)| key.clone()).collect(),
        expires: millis(expires),
        client: driver.client.as_deref().map(str::to_owned),
        item: driver.item.clone(),
    };
    let state = serde_json::to_vec(&state).expect("the state serializes");
    let state = parking.sealer.seal(PURPOSE, &state);
    let requests: Map<String, Value> = round
        .iter()
        .map(|(key, ask)| {
            let params = ask
                .params
                .as_deref()
                .and_then(|p| serde_json::from_str::<Value>(p.get()).ok());
            let mut request = json!({ "method": ask.method.name() });
            if let Some(params) = params {
                request["params"] = params;
            }
            (key.clone(), request)
        })
        .collect();
    let result = json!({
        "resultType": "input_required",
        "inputRequests": requests,
        "requestState": state,
    });
    let frame = protocol::response_frame(&driver.answering, &result.to_string());
    driver.touch();

    let timeout = driver.timeout;
    let parking = parking.clone();
    let mut driver = driver;
    let wait = async move {
        // The call can also end while parked: its upstream went away (or
        // the gateway is shutting down), or its own deadline passed. Its
        // answer then has nobody to go to.
        let resumed = tokio::select! {
            resumed = tokio::time::timeout(timeout, resumed) => resumed.ok().and_then(Result::ok),
            _ended = &mut driver.finishing => None,
        };
        match resumed {
            Some(Resume { responses, back }) => {
                driver.touch();
                for (key, ask) in round {
                    let answer = responses
                        .get(&key)
                        .and_then(|v| serde_json::value::to_raw_value(v).ok());
                    match answer {
                        Some(answer) => {
                            let _ = ask.answer.send(Ok(answer));
                        }
                        None => refuse(ask, code::INTERNAL_ERROR, "the client did not answer it"),
                    }
                }
                // A retry that went away meanwhile drops the call: cancelled.
                let _ = back.send(driver);
            }
            // Not continued in time, or the call ended: dropping the call
            // cancels it upstream (if still running), and dropping its
            // requests tells the upstream there is no answer.
            None => {
                parking.remove(call);
                tracing::info!(call, "a parked call ended without being continued");
            }
        }
    };
    tasks.spawn(tracing::Instrument::instrument(
        wait,
        tracing::debug_span!("parked call", call),
    ));
    frame
}

/// Continues a parked call with the client's retry: `state` is its
/// `requestState`, `responses` its `inputResponses`.
pub(super) async fn resume(
    parking: &Arc<Parking>,
    tasks: &tokio_util::task::TaskTracker,
    id: &RawValue,
    client: Option<&str>,
    item: &str,
    state: &str,
    responses: Option<&str>,
) -> Reply {
    match take_back(parking, id, client, item, state, responses).await {
        Ok(driver) => drive(driver, parking, tasks, false).await,
        Err(e) => Reply::Ready(e.to_frame(id.get())),
    }
}

async fn take_back(
    parking: &Parking,
    id: &RawValue,
    client: Option<&str>,
    item: &str,
    state: &str,
    responses: Option<&str>,
) -> Result<Driver, StateError> {
    let token: String = serde_json::from_str(state).map_err(|_| StateError::NotAString)?;
    let state = parking.sealer.open(PURPOSE, &token)?;
    let state: State = serde_json::from_slice(&state).map_err(|_| SealError::Tampered)?;
    if state.expires <= millis(SystemTime::now()) {
        return Err(StateError::Expired);
    }
    if state.client.as_deref() != client || state.item != item {
        return Err(StateError::Mismatch);
    }
    if state.origin != parking.origin {
        return Err(StateError::Elsewhere);
    }
    let responses: Map<String, Value> = responses
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default();
    if let Some(missing) = state.keys.iter().find(|k| !responses.contains_key(*k)) {
        return Err(StateError::MissingResponse(missing.clone()));
    }
    let resume = parking.remove(state.call).ok_or(StateError::Gone)?;
    let (back, taken) = oneshot::channel();
    resume
        .send(Resume { responses, back })
        .map_err(|_| StateError::Gone)?;
    let mut driver = taken.await.map_err(|_| StateError::Gone)?;
    driver.answering = id.get().to_owned();
    Ok(driver)
}

fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parking() -> Parking {
        let mut parking = Parking::new(Arc::new(Sealer::new(&[3; 32])));
        parking.origin = 0;
        parking
    }

    /// A retry of `item` by `client` carrying `state`, answered.
    async fn retry(
        parking: &Parking,
        client: Option<&str>,
        item: &str,
        state: &State,
    ) -> Result<Driver, StateError> {
        let token = parking
            .sealer
            .seal(PURPOSE, &serde_json::to_vec(state).unwrap());
        let token = serde_json::value::to_raw_value(&token).unwrap();
        let responses = serde_json::value::to_raw_value(&json!({ "k": {} })).unwrap();
        take_back(
            parking,
            &serde_json::value::to_raw_value(&1).unwrap(),
            client,
            item,
            token.get(),
            Some(responses.get()),
        )
        .await
    }

    fn state(expires: SystemTime) -> State {
        State {
            origin: 0,
            call: 1,
            keys: vec!["k".into()],
            expires: millis(expires),
            client: Some("alice".into()),
            item: "tool".into(),
        }
    }

    #[tokio::test]
    async fn state_of_another_client_or_item_or_past_its_time_is_refused() {
        let parking = parking();
        let later = SystemTime::now() + Duration::from_secs(60);
        let earlier = SystemTime::now() - Duration::from_secs(1);
        let refused = |r: Result<Driver, StateError>| r.err().map(|e| e.to_string());
        assert_eq!(
            refused(retry(&parking, Some("bob"), "tool", &state(later)).await),
            Some(StateError::Mismatch.to_string())
        );
        assert_eq!(
            refused(retry(&parking, None, "tool", &state(later)).await),
            Some(StateError::Mismatch.to_string())
        );
        assert_eq!(
            refused(retry(&parking, Some("alice"), "other", &state(later)).await),
            Some(StateError::Mismatch.to_string())
        );
        assert_eq!(
            refused(retry(&parking, Some("alice"), "tool", &state(earlier)).await),
            Some(StateError::Expired.to_string())
        );
        // Valid in every respect, but nothing is parked under it.
        assert_eq!(
            refused(retry(&parking, Some("alice"), "tool", &state(later)).await),
            Some(StateError::Gone.to_string())
        );
        // Another replica with the same key parked it: not this one's call 1.
        let replica = Parking::new(Arc::new(Sealer::new(&[3; 32])));
        let token = replica.sealer.seal(
            PURPOSE,
            &serde_json::to_vec(&State {
                origin: replica.origin,
                ..state(later)
            })
            .unwrap(),
        );
        let token = serde_json::value::to_raw_value(&token).unwrap();
        let id = serde_json::value::to_raw_value(&1).unwrap();
        assert!(matches!(
            take_back(&parking, &id, Some("alice"), "tool", token.get(), None).await,
            Err(StateError::Elsewhere)
        ));
        // Sealed with another key: altered, as far as this gateway knows.
        let foreign = Parking::new(Arc::new(Sealer::new(&[4; 32])));
        let token = foreign
            .sealer
            .seal(PURPOSE, &serde_json::to_vec(&state(later)).unwrap());
        let token = serde_json::value::to_raw_value(&token).unwrap();
        let id = serde_json::value::to_raw_value(&1).unwrap();
        assert!(matches!(
            take_back(&parking, &id, Some("alice"), "tool", token.get(), None).await,
            Err(StateError::Unsealed(SealError::Tampered))
        ));
    }
}
