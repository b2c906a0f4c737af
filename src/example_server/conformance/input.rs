//! Client input for the conformance fixture: the tools (and the prompt)
//! that need sampling, elicitation or roots from the client.
//!
//! Each is a flow of rounds: given the state of the round before and the
//! client's answers, [`step`] either asks for more input or completes. In
//! the modern era a round that asks returns an `InputRequiredResult`, its
//! state sealed into an integrity-protected `requestState`, and the next
//! round is the client's retry carrying `inputResponses`. In a legacy
//! session the fixture sends the same requests to the client itself and
//! waits for the answers. Either way a request needs the matching client
//! capability, or the call fails with -32021.

use std::collections::HashMap;
use std::hash::BuildHasher as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{Fixture, Request, error, text};
use crate::example_server::Server;
use crate::protocol::code;

/// How long a legacy session's client gets to answer a request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// Rounds one legacy call may take before the fixture gives up.
const MAX_ROUNDS: usize = 8;

/// What a round decided.
enum Step {
    /// Ask the client for these requests (key → `{method, params}`), then
    /// resume with `state`.
    Ask {
        requests: Map<String, Value>,
        state: Option<Value>,
    },
    Done(Value),
}

/// Requests the fixture sent to a legacy client, waiting for answers.
#[derive(Default)]
pub(super) struct Outgoing {
    next: AtomicU64,
    waiting: Mutex<HashMap<String, oneshot::Sender<Result<Value, Value>>>>,
    /// Cancelled when the input closes: no answer can arrive any more.
    closed: CancellationToken,
}

impl Outgoing {
    /// Hands a client's response to the request waiting for it.
    pub(super) fn resolve(&self, message: &Map<String, Value>) {
        let Some(id) = message.get("id") else { return };
        let waiter = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id.to_string());
        if let Some(waiter) = waiter {
            let answer = match (message.get("result"), message.get("error")) {
                (Some(result), _) => Ok(result.clone()),
                (None, Some(error)) => Err(error.clone()),
                (None, None) => Err(super::error(code::INTERNAL_ERROR, "empty response")),
            };
            let _ = waiter.send(answer);
        }
    }

    /// Fails every request waiting now or later: no answer can arrive any more.
    pub(super) fn close(&self) {
        self.closed.cancel();
    }

    /// Sends `method` to the client and waits for its answer.
    async fn ask(&self, server: &Server, method: &str, params: Value) -> Result<Value, Value> {
        let id = Value::from(format!(
            "fixture-{}",
            self.next.fetch_add(1, Ordering::Relaxed)
        ));
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), tx);
        server
            .send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        let outcome = tokio::select! {
            outcome = tokio::time::timeout(ANSWER_TIMEOUT, rx) => outcome.ok(),
            () = self.closed.cancelled() => None,
        };
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id.to_string());
        match outcome {
            Some(Ok(answer)) => answer,
            _ => Err(error(
                code::INTERNAL_ERROR,
                format!("the client did not answer {method}"),
            )),
        }
    }
}

/// Seals round state into a `requestState` the client cannot forge: the
/// state's JSON, base64url, and a 128-bit keyed hash of it under keys drawn
/// at start-up.
pub(super) struct Seal {
    keys: [std::collections::hash_map::RandomState; 2],
}

impl Seal {
    pub(super) fn new() -> Self {
        Self {
            keys: [
                std::collections::hash_map::RandomState::new(),
                std::collections::hash_map::RandomState::new(),
            ],
        }
    }

    fn mac(&self, flow: &str, payload: &str) -> String {
        let [a, b] = &self.keys;
        format!(
            "{:016x}{:016x}",
            a.hash_one((flow, payload)),
            b.hash_one((payload, flow))
        )
    }

    fn seal(&self, flow: &str, state: &Value) -> String {
        let payload =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(state.to_string().as_bytes());
        let mac = self.mac(flow, &payload);
        format!("{payload}.{mac}")
    }

    /// The state sealed for `flow`, or `None` if it was altered or belongs
    /// to another flow.
    fn open(&self, flow: &str, sealed: &str) -> Option<Value> {
        let (payload, mac) = sealed.split_once('.')?;
        if self.mac(flow, payload) != mac {
            return None;
        }
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// Runs flow `name` for one request, in the request's era.
pub(super) async fn run(
    fixture: &Fixture,
    server: &Server,
    req: &Request<'_>,
    name: &str,
) -> Result<Value, Value> {
    if req.modern {
        run_modern(fixture, req, name)
    } else {
        run_legacy(fixture, server, req, name).await
    }
}

fn run_modern(fixture: &Fixture, req: &Request<'_>, name: &str) -> Result<Value, Value> {
    let answers = match req.params.get("inputResponses") {
        None => Map::new(),
        Some(Value::Object(answers)) => answers.clone(),
        Some(_) => {
            return Err(error(
                code::INVALID_PARAMS,
                "inputResponses must be an object",
            ));
        }
    };
    let state = match req.params.get("requestState") {
        None | Some(Value::Null) => None,
        Some(Value::String(sealed)) => Some(fixture.seal.open(name, sealed).ok_or_else(|| {
            error(
                code::INVALID_PARAMS,
                "requestState failed integrity verification",
            )
        })?),
        Some(_) => return Err(error(code::INVALID_PARAMS, "requestState must be a string")),
    };
    match step(name, req, state.as_ref(), &answers)? {
        Step::Done(result) => Ok(result),
        Step::Ask { requests, state } => {
            require_capabilities(&req.capabilities, &requests)?;
            let mut result = json!({ "resultType": "input_required", "inputRequests": requests });
            if let Some(state) = state {
                result["requestState"] = Value::from(fixture.seal.seal(name, &state));
            }
            Ok(result)
        }
    }
}

async fn run_legacy(
    fixture: &Fixture,
    server: &Server,
    req: &Request<'_>,
    name: &str,
) -> Result<Value, Value> {
    let mut state = None;
    let mut answers = Map::new();
    for _ in 0..MAX_ROUNDS {
        match step(name, req, state.as_ref(), &answers)? {
            Step::Done(result) => return Ok(result),
            Step::Ask {
                requests,
                state: next,
            } => {
                require_capabilities(&req.capabilities, &requests)?;
                answers = Map::new();
                for (key, request) in requests {
                    let method = request["method"].as_str().unwrap_or_default();
                    let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
                    let answer = fixture.outgoing.ask(server, method, params).await?;
                    answers.insert(key, answer);
                }
                state = next;
            }
        }
    }
    Err(error(
        code::INTERNAL_ERROR,
        "the flow did not finish in time",
    ))
}

/// The client capability a request method needs.
fn capability_of(method: &str) -> &'static str {
    match method {
        "sampling/createMessage" => "sampling",
        "elicitation/create" => "elicitation",
        _ => "roots",
    }
}

fn declared(capabilities: &Value, capability: &str) -> bool {
    capabilities
        .get(capability)
        .is_some_and(|c| !c.is_null() && c != &Value::Bool(false))
}

/// -32021 naming every capability the requests need and the client lacks.
fn require_capabilities(capabilities: &Value, requests: &Map<String, Value>) -> Result<(), Value> {
    let mut missing = Map::new();
    for request in requests.values() {
        let capability = capability_of(request["method"].as_str().unwrap_or_default());
        if !declared(capabilities, capability) {
            missing.insert(capability.to_owned(), json!({}));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.keys().map(String::as_str).collect();
    let mut e = error(
        code::MISSING_CLIENT_CAPABILITY,
        format!(
            "this request needs the client capabilities: {}",
            names.join(", ")
        ),
    );
    e["data"] = json!({ "requiredCapabilities": missing });
    Err(e)
}

fn elicit(message: &str, properties: Value, required: &[&str]) -> Value {
    json!({ "method": "elicitation/create", "params": {
        "mode": "form",
        "message": message,
        "requestedSchema": { "type": "object", "properties": properties, "required": required },
    } })
}

fn sample(prompt: &str, max_tokens: u64) -> Value {
    json!({ "method": "sampling/createMessage", "params": {
        "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
        "maxTokens": max_tokens,
    } })
}

fn roots() -> Value {
    json!({ "method": "roots/list", "params": {} })
}

fn ask(requests: Vec<(&str, Value)>, state: Option<Value>) -> Result<Step, Value> {
    Ok(Step::Ask {
        requests: requests
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        state,
    })
}

/// The client's answer to request `key`, checked against the shape its
/// method returns: `None` if it was not given, an error if it is malformed.
fn answer<'a>(
    answers: &'a Map<String, Value>,
    key: &str,
    method: &str,
) -> Result<Option<&'a Value>, Value> {
    let Some(value) = answers.get(key) else {
        return Ok(None);
    };
    let valid = match method {
        "elicitation/create" => value
            .get("action")
            .and_then(Value::as_str)
            .is_some_and(|a| matches!(a, "accept" | "decline" | "cancel")),
        "sampling/createMessage" => value.get("content").is_some_and(Value::is_object),
        _ => value.get("roots").is_some_and(Value::is_array),
    };
    if valid {
        Ok(Some(value))
    } else {
        Err(error(
            code::INVALID_PARAMS,
            format!("inputResponses[{key:?}] is not a valid {method} result"),
        ))
    }
}

fn sampled_text(answer: &Value) -> String {
    answer
        .pointer("/content/text")
        .and_then(Value::as_str)
        .unwrap_or("(no text)")
        .to_owned()
}

fn accepted<'a>(answer: &'a Value, field: &str) -> Option<&'a str> {
    (answer["action"] == "accept")
        .then(|| answer.pointer(&format!("/content/{field}")))
        .flatten()
        .and_then(Value::as_str)
}

fn root_uris(answer: &Value) -> String {
    let uris: Vec<&str> = answer["roots"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uri").and_then(Value::as_str))
        .collect();
    uris.join(", ")
}

fn elicited(answer: &Value) -> String {
    format!(
        "action={}, content={}",
        answer["action"].as_str().unwrap_or_default(),
        answer.get("content").cloned().unwrap_or_else(|| json!({}))
    )
}

/// One round of flow `name`.
fn step(
    name: &str,
    req: &Request<'_>,
    state: Option<&Value>,
    answers: &Map<String, Value>,
) -> Result<Step, Value> {
    const ELICIT: &str = "elicitation/create";
    const SAMPLE: &str = "sampling/createMessage";
    const ROOTS: &str = "roots/list";
    let name_schema = json!({ "name": { "type": "string" } });
    let stage = state.and_then(|s| s.get("stage")).and_then(Value::as_str);
    match name {
        "test_input_required_result_elicitation" => match answer(answers, "user_name", ELICIT)? {
            Some(a) => Ok(Step::Done(text(format!(
                "Hello, {}!",
                accepted(a, "name").unwrap_or("stranger")
            )))),
            None => ask(
                vec![(
                    "user_name",
                    elicit("What is your name?", name_schema, &["name"]),
                )],
                None,
            ),
        },
        "test_input_required_result_sampling" => match answer(answers, "capital_question", SAMPLE)?
        {
            Some(a) => Ok(Step::Done(text(format!(
                "The LLM said: {}",
                sampled_text(a)
            )))),
            None => ask(
                vec![(
                    "capital_question",
                    sample("What is the capital of France?", 100),
                )],
                None,
            ),
        },
        "test_input_required_result_list_roots" => match answer(answers, "client_roots", ROOTS)? {
            Some(a) => Ok(Step::Done(text(format!("Client roots: {}", root_uris(a))))),
            None => ask(vec![("client_roots", roots())], None),
        },
        "test_input_required_result_request_state"
        | "test_input_required_result_tampered_state" => {
            let confirm = elicit(
                "Please confirm",
                json!({ "ok": { "type": "boolean" } }),
                &["ok"],
            );
            match (stage, answer(answers, "confirm", ELICIT)?) {
                (Some("confirm"), Some(a)) => Ok(Step::Done(text(format!(
                    "state-ok: requestState verified, {}",
                    elicited(a)
                )))),
                _ => ask(
                    vec![("confirm", confirm)],
                    Some(json!({ "stage": "confirm" })),
                ),
            }
        }
        "test_input_required_result_multiple_inputs" => {
            let wanted = [
                ("user_name", ELICIT),
                ("greeting", SAMPLE),
                ("client_roots", ROOTS),
            ];
            let mut got = Vec::new();
            for (key, method) in wanted {
                got.push(answer(answers, key, method)?);
            }
            if let (Some("all"), [Some(user), Some(greeting), Some(roots)]) =
                (stage, got.as_slice())
            {
                return Ok(Step::Done(text(format!(
                    "name={}, greeting={}, roots={}",
                    accepted(user, "name").unwrap_or("stranger"),
                    sampled_text(greeting),
                    root_uris(roots)
                ))));
            }
            ask(
                vec![
                    (
                        "user_name",
                        elicit("What is your name?", name_schema, &["name"]),
                    ),
                    ("greeting", sample("Generate a greeting", 50)),
                    ("client_roots", roots()),
                ],
                Some(json!({ "stage": "all" })),
            )
        }
        "test_input_required_result_multi_round" => {
            let step2 = answer(answers, "step2", ELICIT)?;
            let step1 = answer(answers, "step1", ELICIT)?;
            match (stage, step1, step2) {
                (Some("step2"), _, Some(a)) => {
                    let who = state
                        .and_then(|s| s.get("name"))
                        .and_then(Value::as_str)
                        .unwrap_or("stranger");
                    Ok(Step::Done(text(format!(
                        "{who}'s favorite color is {}",
                        accepted(a, "color").unwrap_or("unknown")
                    ))))
                }
                (Some("step1"), Some(a), _) => ask(
                    vec![(
                        "step2",
                        elicit(
                            "Step 2: What is your favorite color?",
                            json!({ "color": { "type": "string" } }),
                            &["color"],
                        ),
                    )],
                    Some(
                        json!({ "stage": "step2", "name": accepted(a, "name").unwrap_or("stranger") }),
                    ),
                ),
                _ => ask(
                    vec![(
                        "step1",
                        elicit("Step 1: What is your name?", name_schema, &["name"]),
                    )],
                    Some(json!({ "stage": "step1" })),
                ),
            }
        }
        "test_input_required_result_capabilities" => {
            let offer = [
                ("sampling", "capability_sampling", SAMPLE),
                ("elicitation", "capability_elicitation", ELICIT),
                ("roots", "capability_roots", ROOTS),
            ];
            let asked: Vec<String> = state
                .and_then(|s| s.get("asked"))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            if stage == Some("asked") {
                let mut done = Vec::new();
                for (_, key, method) in offer
                    .iter()
                    .filter(|(_, k, _)| asked.iter().any(|a| a == k))
                {
                    if answer(answers, key, method)?.is_some() {
                        done.push(*key);
                    }
                }
                if done.len() == asked.len() {
                    return Ok(Step::Done(text(format!("Received: {}", done.join(", ")))));
                }
            }
            let mut requests = Vec::new();
            for (capability, key, method) in offer {
                if declared(&req.capabilities, capability) {
                    let request = match method {
                        SAMPLE => sample("Say something", 50),
                        ELICIT => elicit(
                            "Say something",
                            json!({ "text": { "type": "string" } }),
                            &[],
                        ),
                        _ => roots(),
                    };
                    requests.push((key, request));
                }
            }
            if requests.is_empty() {
                // Needs at least one; sampling is the one to ask for.
                requests.push(("capability_sampling", sample("Say something", 50)));
            }
            let keys: Vec<&str> = requests.iter().map(|(k, _)| *k).collect();
            let state = json!({ "stage": "asked", "asked": keys });
            ask(requests, Some(state))
        }
        "test_input_required_result_prompt" => match answer(answers, "user_context", ELICIT)? {
            Some(a) => {
                let context = accepted(a, "context").unwrap_or("no context");
                Ok(Step::Done(
                    json!({ "description": "A prompt built from the user's context", "messages": [
                    { "role": "user", "content": { "type": "text", "text": format!("Use this context: {context}") } },
                ] }),
                ))
            }
            None => ask(
                vec![(
                    "user_context",
                    elicit(
                        "What context should the prompt use?",
                        json!({ "context": { "type": "string" } }),
                        &["context"],
                    ),
                )],
                None,
            ),
        },
        "test_sampling" | "test_missing_capability" => match answer(answers, "sampling", SAMPLE)? {
            Some(a) => Ok(Step::Done(text(format!(
                "LLM response: {}",
                sampled_text(a)
            )))),
            None => {
                let prompt = req.arg("prompt").unwrap_or_else(|| "Say hello".into());
                ask(vec![("sampling", sample(&prompt, 100))], None)
            }
        },
        "test_elicitation" => match answer(answers, "elicitation", ELICIT)? {
            Some(a) => Ok(Step::Done(text(format!("User response: {}", elicited(a))))),
            None => {
                let message = req
                    .arg("message")
                    .unwrap_or_else(|| "Please provide your information".into());
                let properties = json!({
                    "username": { "type": "string", "description": "User's response" },
                    "email": { "type": "string", "description": "User's email address" },
                });
                ask(
                    vec![(
                        "elicitation",
                        elicit(&message, properties, &["username", "email"]),
                    )],
                    None,
                )
            }
        },
        "test_elicitation_sep1034_defaults" => match answer(answers, "elicitation", ELICIT)? {
            Some(a) => Ok(Step::Done(text(format!(
                "Elicitation completed: {}",
                elicited(a)
            )))),
            None => {
                let properties = json!({
                    "name": { "type": "string", "default": "John Doe" },
                    "age": { "type": "integer", "default": 30 },
                    "score": { "type": "number", "default": 95.5 },
                    "status": { "type": "string", "enum": ["active", "inactive", "pending"], "default": "active" },
                    "verified": { "type": "boolean", "default": true },
                });
                ask(
                    vec![(
                        "elicitation",
                        elicit("Please review your details", properties, &[]),
                    )],
                    None,
                )
            }
        },
        "test_elicitation_sep1330_enums" => match answer(answers, "elicitation", ELICIT)? {
            Some(a) => Ok(Step::Done(text(format!(
                "Elicitation completed: {}",
                elicited(a)
            )))),
            None => {
                let properties = json!({
                    "untitledSingle": { "type": "string", "enum": ["option1", "option2", "option3"] },
                    "titledSingle": { "type": "string", "oneOf": [
                        { "const": "value1", "title": "First Option" },
                        { "const": "value2", "title": "Second Option" },
                        { "const": "value3", "title": "Third Option" },
                    ] },
                    "legacyEnum": { "type": "string", "enum": ["opt1", "opt2", "opt3"],
                                    "enumNames": ["Option One", "Option Two", "Option Three"] },
                    "untitledMulti": { "type": "array", "items": { "type": "string", "enum": ["option1", "option2", "option3"] } },
                    "titledMulti": { "type": "array", "items": { "anyOf": [
                        { "const": "value1", "title": "First Choice" },
                        { "const": "value2", "title": "Second Choice" },
                        { "const": "value3", "title": "Third Choice" },
                    ] } },
                });
                ask(
                    vec![(
                        "elicitation",
                        elicit("Please choose your options", properties, &[]),
                    )],
                    None,
                )
            }
        },
        "test_streaming_elicitation" => match answer(answers, "confirm", ELICIT)? {
            Some(a) => Ok(Step::Done(text(format!(
                "Streaming elicitation completed: {}",
                elicited(a)
            )))),
            None => ask(
                vec![(
                    "confirm",
                    elicit(
                        "Please confirm to continue",
                        json!({ "confirmed": { "type": "boolean" } }),
                        &["confirmed"],
                    ),
                )],
                None,
            ),
        },
        other => Err(error(
            code::INVALID_PARAMS,
            format!("Unknown tool: {other}"),
        )),
    }
}
