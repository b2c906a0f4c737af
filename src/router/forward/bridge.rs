//! A 2026-07-28 upstream asking a 2025-era client for input: its
//! `input_required` result becomes requests on the client's session
//! (`elicitation/create`, `sampling/createMessage`, `roots/list`, on the
//! call's stream), and the answers go back as the retry's
//! `inputResponses`, with the upstream's `requestState`, for as many
//! rounds as the upstream needs (up to [`MAX_ROUNDS`]).
//!
//! The session's client capabilities travel in the request's `_meta`, so
//! the upstream asks only for what the client can answer.

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use std::sync::Arc;
use std::time::Duration;

use super::{CallGuard, Exchange};
use crate::notify::NotifyHub;
use crate::protocol::{self, Json, Method};
use crate::router::RouteError;
use crate::upstream::{
    CallStream, ClientAnswer, Connection, Payload, UpstreamError, UpstreamEvents,
};

/// Asks one 2025-era session's client on behalf of a modern upstream.
pub(super) struct Asker {
    pub(super) hub: Arc<NotifyHub>,
    /// The session's subscriber id.
    pub(super) session: u64,
}

impl Asker {
    /// Sends `method` to the client on `sink` (its call's stream) and waits
    /// for its answer; or says why there is none.
    async fn ask(
        &self,
        method: &Method,
        params: Option<&RawValue>,
        sink: &CallStream,
        timeout: Duration,
    ) -> Result<ClientAnswer, String> {
        let ask = self
            .hub
            .ask_client(self.session, method, params)
            .map_err(|e| e.to_string())?;
        let frame = protocol::request_frame_with_id(&ask.id, method.name(), params);
        // One deadline for sending and answering alike. The first request
        // opens the call's stream.
        let sink = sink.sender();
        let exchange = async {
            if sink.send(frame).await.is_err() {
                return Err("the client's stream for the call closed");
            }
            tokio::select! {
                answer = ask.answer => answer.map_err(|_| "the client's session ended"),
                () = sink.closed() => Err("the call ended"),
            }
        };
        let outcome = tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err("the client did not answer in time"))
            .map_err(str::to_owned);
        if outcome.is_err() {
            self.hub.forget_ask(self.session, &ask.id);
        }
        outcome
    }
}

/// Rounds of input one call may take before the gateway gives up.
pub(super) const MAX_ROUNDS: usize = 8;

/// Why a round of input could not be completed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum BridgeError {
    #[error("the upstream's input_required result is malformed: {0}")]
    Malformed(&'static str),
    #[error("the upstream asked for input {0} times; mcpmux gives up after {MAX_ROUNDS}")]
    TooManyRounds(usize),
    #[error("the client cannot answer the upstream's {method} request: {why}")]
    Unanswerable { method: String, why: String },
    #[error("the client answered the upstream's {method} request with an error: {error}")]
    ClientError { method: String, error: String },
}

impl Exchange {
    /// Whether `result` may start input rounds: the call's client can be
    /// asked and the result names `input_required`. Anything else is
    /// returned as it is, without [`Exchange::bridge_input`]'s future.
    pub(super) fn may_ask_input(&self, result: &Json) -> bool {
        self.asker.is_some() && self.progress.is_some() && mentions_input_required(result)
    }

    /// Runs input rounds while the upstream answers `input_required` and
    /// the call's client can be asked; any other answer is returned as is.
    pub(super) async fn bridge_input(
        &self,
        guard: &CallGuard,
        conn: &Connection,
        mut result: Json,
    ) -> Result<Json, RouteError> {
        let Some(asker) = &self.asker else {
            return Ok(result);
        };
        let Some((_, sink)) = &self.progress else {
            return Ok(result);
        };
        let mut round = 0;
        loop {
            let Some((requests, state)) = input_required(&result)? else {
                return Ok(result);
            };
            round += 1;
            if round > MAX_ROUNDS {
                return Err(BridgeError::TooManyRounds(round - 1).into());
            }
            let mut responses = Map::new();
            for (key, request) in requests {
                let method = request
                    .get("method")
                    .and_then(Value::as_str)
                    .ok_or(BridgeError::Malformed("an input request has no method"))?;
                let params = request
                    .get("params")
                    .and_then(|p| serde_json::value::to_raw_value(p).ok());
                self.touch();
                let answer = asker
                    .ask(
                        &Method::from_name(method),
                        params.as_deref(),
                        sink,
                        self.handle.timeout(),
                    )
                    .await;
                self.touch();
                let answer = answer.map_err(|why| BridgeError::Unanswerable {
                    method: method.to_owned(),
                    why,
                })?;
                let answer = answer.map_err(|error| BridgeError::ClientError {
                    method: method.to_owned(),
                    error: error.get().to_owned(),
                })?;
                let answer: Value = serde_json::from_str(answer.get()).unwrap_or(Value::Null);
                responses.insert(key, answer);
            }
            let params = with_input(self.params.params(), responses, state);
            let upstream_id = conn.next_id();
            guard.retarget_here(conn, upstream_id);
            let rx = self
                .send(
                    conn,
                    upstream_id,
                    Payload::Params(Some(&params)),
                    self.route(),
                )
                .await;
            result = self.answer(conn, upstream_id, rx).await?;
        }
    }

    /// Notes progress now, so waiting for the client does not time the call out.
    fn touch(&self) {
        let elapsed = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_progress
            .store(elapsed, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What an `input_required` result asks: its input requests by key, and
/// the upstream's `requestState` to send back.
type InputRound = (Map<String, Value>, Option<Value>);

/// Whether the result's text names `input_required` at all.
fn mentions_input_required(result: &Json) -> bool {
    result.get().contains("input_required")
}

/// The round an `input_required` result asks for; none for any other result.
fn input_required(result: &Json) -> Result<Option<InputRound>, BridgeError> {
    // Most results are complete: look before parsing.
    if !mentions_input_required(result) {
        return Ok(None);
    }
    let Ok(mut object) = serde_json::from_str::<Map<String, Value>>(result.get()) else {
        return Ok(None);
    };
    if object.get("resultType").and_then(Value::as_str) != Some("input_required") {
        return Ok(None);
    }
    let requests = match object.remove("inputRequests") {
        Some(Value::Object(requests)) => requests,
        _ => return Err(BridgeError::Malformed("inputRequests is not an object")),
    };
    Ok(Some((requests, object.remove("requestState"))))
}

/// The original params with the client's answers and the upstream's state.
fn with_input(params: &str, responses: Map<String, Value>, state: Option<Value>) -> String {
    let mut object: Map<String, Value> = serde_json::from_str(params).unwrap_or_default();
    object.insert("inputResponses".into(), Value::Object(responses));
    match state {
        Some(state) => object.insert("requestState".into(), state),
        None => object.remove("requestState"),
    };
    Value::Object(object).to_string()
}

impl From<BridgeError> for RouteError {
    fn from(e: BridgeError) -> Self {
        RouteError::Upstream(UpstreamError::Protocol {
            upstream: "mcpmux".into(),
            detail: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn raw(value: Value) -> Json {
        Json::from(serde_json::value::to_raw_value(&value).unwrap())
    }

    #[test]
    fn only_input_required_results_are_rounds() {
        let complete = raw(json!({ "content": [], "resultType": "complete" }));
        assert!(input_required(&complete).unwrap().is_none());
        let asked = raw(json!({
            "resultType": "input_required",
            "inputRequests": { "name": { "method": "elicitation/create", "params": {} } },
            "requestState": "sealed"
        }));
        let (requests, state) = input_required(&asked).unwrap().unwrap();
        assert_eq!(requests.len(), 1);
        assert_eq!(state, Some(json!("sealed")));
        let broken = raw(json!({ "resultType": "input_required", "inputRequests": [] }));
        assert!(input_required(&broken).is_err());
    }

    #[test]
    fn the_retry_carries_the_answers_and_the_latest_state() {
        let mut answers = Map::new();
        answers.insert("name".into(), json!({ "action": "accept" }));
        let retry = with_input(
            r#"{"name":"tool","requestState":"old"}"#,
            answers,
            Some(json!("new")),
        );
        let retry: Value = serde_json::from_str(&retry).unwrap();
        assert_eq!(retry["name"], "tool");
        assert_eq!(retry["requestState"], "new");
        assert_eq!(retry["inputResponses"]["name"]["action"], "accept");
        let without = with_input(r#"{"requestState":"old"}"#, Map::new(), None);
        assert!(!without.contains("requestState"), "{without}");
    }
}
