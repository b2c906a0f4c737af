//! The load: a few hundred simulated clients of both eras through HAProxy,
//! each a loop of sessions that come and go. A session-based client
//! initializes, may hold an open stream with a subscription (some read it
//! slowly), calls tools of every upstream (some with progress, some
//! cancelled), walks lists, sends an oversized or a malformed request now
//! and then, and ends with DELETE or just goes away. A stateless client
//! sends each request on its own. Every request and what came back goes
//! into the [`Ledger`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng as _;
use serde_json::{Value, json};

use crate::ledger::{Ledger, Outcome, Period, Sent, Touch, token};
use crate::wire::{self, Answer, Failed};

/// The resource the subscribers hold, as the fixture `fx` names it (the
/// touches name it so).
pub const WATCHED: &str = "demo://fx/status";

/// What the load is told.
pub struct Plan {
    pub url: String,
    pub clients: usize,
    pub until: Instant,
    /// [`WATCHED`] as the gateway lists it (namespaced or not).
    pub watched: String,
}

/// [`WATCHED`] as the gateway at `url` lists it, from a stateless walk of
/// `resources/list`.
pub async fn listed_uri(url: &str) -> crate::Res<String> {
    let http = reqwest::Client::new();
    let mut cursor: Option<String> = None;
    for id in 1..50 {
        let mut params = json!({ "_meta": wire::modern_meta() });
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let body =
            json!({ "jsonrpc": "2.0", "id": id, "method": "resources/list", "params": params });
        let answer = wire::post(
            &http,
            url,
            None,
            Some(("resources/list", None)),
            body.to_string(),
        )
        .await
        .map_err(|e| crate::fail(format!("resources/list: {e:?}")))?;
        let result = answer
            .response(id)
            .0
            .map(|r| r["result"].clone())
            .unwrap_or_default();
        let found = result["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["uri"].as_str())
            .find(|u| u.ends_with("://fx/status"));
        if let Some(uri) = found {
            return Ok(uri.to_owned());
        }
        cursor = result["nextCursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    Err(crate::fail(format!(
        "the gateway lists no resource like {WATCHED}"
    )))
}

/// Runs every client until `plan.until`; returns when all have ended.
pub async fn run(plan: Arc<Plan>, ledger: Arc<Ledger>) {
    let mut clients = tokio::task::JoinSet::new();
    for index in 0..plan.clients {
        let (plan, ledger) = (plan.clone(), ledger.clone());
        clients.spawn(async move {
            // Started over a second, not all at once.
            tokio::time::sleep(Duration::from_millis(
                (index as u64 * 1000) / plan.clients as u64,
            ))
            .await;
            let mut client = Client::new(index, plan, ledger);
            match index % 4 {
                3 => client.stateless().await,
                _ => client.sessions().await,
            }
        });
    }
    while clients.join_next().await.is_some() {}
}

/// One simulated client.
struct Client {
    index: usize,
    plan: Arc<Plan>,
    ledger: Arc<Ledger>,
    http: reqwest::Client,
    next: u64,
    /// The replica id of the session being run, for the ledger.
    replica: Option<String>,
}

/// What a session-based client does besides calls.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Holds an open stream with a subscription.
    Subscriber,
    /// The same, reading its stream slowly.
    SlowReader,
    /// Touches the watched resource now and then.
    Toucher,
    Plain,
}

impl Client {
    fn new(index: usize, plan: Arc<Plan>, ledger: Arc<Ledger>) -> Client {
        Client {
            index,
            plan,
            ledger,
            // Idle connections are let go well before HAProxy's
            // `timeout http-keep-alive` (10 s) closes them: a request sent
            // on a connection the proxy is closing at that moment fails
            // with nothing read, the client's own race, not the gateway's.
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(2)
                .pool_idle_timeout(Duration::from_secs(4))
                .build()
                .expect("a reqwest client"),
            next: 0,
            replica: None,
        }
    }

    fn done(&self) -> bool {
        Instant::now() >= self.plan.until
    }

    fn next_id(&mut self) -> (u64, String) {
        self.next += 1;
        (self.next, token(self.index, self.next))
    }

    async fn think(&self) {
        let ms = rand::rng().random_range(150..700);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    /// Session after session, each living 10 to 40 seconds.
    async fn sessions(&mut self) {
        let role = match self.index % 4 {
            0 if self.index.is_multiple_of(16) => Role::SlowReader,
            0 => Role::Subscriber,
            1 if self.index % 8 == 1 => Role::Toucher,
            _ => Role::Plain,
        };
        while !self.done() {
            let life = Duration::from_secs(rand::rng().random_range(10..40));
            if self.session(role, Instant::now() + life).await.is_err() {
                // Could not initialize (a replica going down): try again soon.
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }

    /// One session: initialize, its role, calls until `ends`, then DELETE
    /// (or, one time in four, nothing: it is left to expire).
    async fn session(&mut self, role: Role, ends: Instant) -> Result<(), ()> {
        let session = self.initialize().await?;
        self.replica = Some(replica_of(&session));
        let listener = match role {
            Role::Subscriber | Role::SlowReader => Some(self.subscribe(&session, role).await),
            _ => None,
        };
        while !self.done() && Instant::now() < ends {
            self.think().await;
            match self.action(Some(&session), role).await {
                Next::Go => {}
                Next::Gone => break,
            }
        }
        if let Some(listener) = listener {
            listener.abort();
        }
        if rand::rng().random_range(0..4) != 0 {
            let _ = self
                .http
                .delete(&self.plan.url)
                .header("mcp-session-id", &session)
                .header("mcp-protocol-version", wire::LEGACY_VERSION)
                .send()
                .await;
        }
        self.replica = None;
        Ok(())
    }

    async fn initialize(&mut self) -> Result<String, ()> {
        let (id, token) = self.next_id();
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": wire::LEGACY_VERSION, "capabilities": { "elicitation": {} },
            "clientInfo": { "name": format!("soak-{}", self.index), "version": "1" } } });
        let (answer, at_s, started) = self.timed_post(None, None, body.to_string()).await;
        let (outcome, session) = match &answer {
            Ok(a) => (self.outcome_of(a, id), a.session.clone()),
            Err(f) => (failed(f), None),
        };
        self.record("initialize", None, token, at_s, started, outcome);
        let session = session.ok_or(())?;
        let note = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        let _ = wire::post(
            &self.http,
            &self.plan.url,
            Some(&session),
            None,
            note.to_string(),
        )
        .await;
        Ok(session)
    }

    /// Opens the session's stream, then subscribes; the stream's task
    /// records the subscription period when the stream ends.
    async fn subscribe(&mut self, session: &str, role: Role) -> tokio::task::AbortHandle {
        let (opened_tx, opened_rx) = tokio::sync::oneshot::channel::<()>();
        let period = Arc::new(std::sync::Mutex::new(None::<Period>));
        let task = {
            let (http, url, session) =
                (self.http.clone(), self.plan.url.clone(), session.to_owned());
            let (ledger, period) = (self.ledger.clone(), period.clone());
            let pause = (role == Role::SlowReader).then_some(Duration::from_secs(3));
            tokio::spawn(async move {
                let mut opened = Some(opened_tx);
                let seen_ledger = ledger.clone();
                let seen_period = period.clone();
                let mut guard = PeriodGuard {
                    ledger: ledger.clone(),
                    period: period.clone(),
                    slow: pause.is_some(),
                    broken: false,
                };
                let _ = wire::listen(&http, &url, &session, pause, move |message| {
                    if let Some(opened) = opened.take() {
                        let _ = opened.send(());
                    }
                    seen_ledger.check_own(&message, &[]);
                    if message["method"] == "notifications/resources/updated"
                        && let Some(p) = seen_period
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .as_mut()
                    {
                        p.updates.push(seen_ledger.now());
                    }
                    if message.get("id").is_some() && message.get("method").is_some() {
                        seen_ledger.wrong(
                            "no session was asked for input it did not cause",
                            format!("a request on a stream of a session that made none: {message}"),
                        );
                    }
                })
                .await;
                // The stream ended before the session let it go.
                guard.broken = true;
            })
        };
        // The gateway sends a priming event when the stream opens, so the
        // subscription below is made on a stream known to be open.
        let _ = tokio::time::timeout(Duration::from_secs(5), opened_rx).await;
        let (id, token) = self.next_id();
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "resources/subscribe", "params": { "uri": self.plan.watched } });
        let (answer, at_s, started) = self.timed_post(Some(session), None, body.to_string()).await;
        let outcome = match &answer {
            Ok(a) => self.outcome_of(a, id),
            Err(f) => failed(f),
        };
        if outcome == Outcome::Ok && !task.is_finished() {
            *period.lock().unwrap_or_else(|e| e.into_inner()) = Some(Period {
                replica: replica_of(session),
                from_s: self.ledger.now(),
                until_s: f64::MAX,
                broken: false,
                updates: Vec::new(),
            });
        }
        self.record("subscribe", None, token, at_s, started, outcome);
        task.abort_handle()
    }

    /// Stateless requests, one after another, until the end.
    async fn stateless(&mut self) {
        while !self.done() {
            self.think().await;
            let _ = self.action(None, Role::Plain).await;
        }
    }

    /// One request of the mix; `session` is None for a stateless client.
    async fn action(&mut self, session: Option<&str>, role: Role) -> Next {
        let roll = rand::rng().random_range(0..100);
        if role == Role::Toucher && roll < 50 {
            return self.touch(session).await;
        }
        let (tool, upstream): (&str, Option<&'static str>) = match roll {
            0..35 => ("fx__echo", Some("fx")),
            35..45 => ("fy__echo", Some("fy")),
            45..60 => ("web__echo", None),
            60..66 => ("legacy__echo", None),
            66..72 => ("py__echo", None),
            72..82 if session.is_some() => return self.slow(session, false).await,
            82..86 if session.is_some() => return self.slow(session, true).await,
            86..88 if let Some(session) = session => return self.elicited(session).await,
            72..88 => return self.list(session).await,
            88..94 => return self.list(session).await,
            94..97 => return self.oversized(session).await,
            _ => return self.malformed(session).await,
        };
        let (id, token) = self.next_id();
        let arguments = json!({ "message": token });
        self.call("call", session, id, token, tool, arguments, None, upstream)
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn call(
        &mut self,
        kind: &'static str,
        session: Option<&str>,
        id: u64,
        token: String,
        tool: &str,
        arguments: Value,
        progress: Option<&str>,
        recorded_at: Option<&'static str>,
    ) -> Next {
        let mut params = json!({ "name": tool, "arguments": arguments });
        if let Some(progress) = progress {
            params["_meta"] = json!({ "progressToken": progress });
        }
        if session.is_none() {
            params["_meta"] = wire::modern_meta();
        }
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params });
        let modern = session.is_none().then_some(("tools/call", Some(tool)));
        let (answer, at_s, started) = self.timed_post(session, modern, body.to_string()).await;
        let outcome = match &answer {
            Ok(a) => {
                let (outcome, result) = self.answered(a, id, &token);
                if let Some(text) = result.filter(|_| kind == "call")
                    && !text.contains(&token)
                {
                    self.ledger.wrong(
                        "no session saw another session's result, notification or elicitation",
                        format!("{token}'s echo came back as {}", crate::ledger::clip(&text)),
                    );
                }
                outcome
            }
            Err(f) => failed(f),
        };
        let gone = matches!(outcome, Outcome::Http(404));
        self.record(kind, recorded_at, token, at_s, started, outcome);
        if gone { Next::Gone } else { Next::Go }
    }

    /// `fx__slow` with progress; `cancel` sends `notifications/cancelled`
    /// while it runs.
    async fn slow(&mut self, session: Option<&str>, cancel: bool) -> Next {
        let (id, token) = self.next_id();
        let (kind, arguments) = match cancel {
            true => ("cancelled call", json!({ "steps": 40, "interval_ms": 50 })),
            false => (
                "call with progress",
                json!({ "steps": 3, "interval_ms": 20 }),
            ),
        };
        // The cancellation goes out while the call runs, on its own POST.
        let canceller = cancel.then(|| {
            let note = json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": id, "reason": "soak" } });
            let (http, url) = (self.http.clone(), self.plan.url.clone());
            let session = session.map(str::to_owned);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let _ = wire::post(&http, &url, session.as_deref(), None, note.to_string()).await;
            })
        });
        let next = self
            .call(
                kind,
                session,
                id,
                token.clone(),
                "fx__slow",
                arguments,
                Some(&token),
                None,
            )
            .await;
        if let Some(canceller) = canceller {
            let _ = canceller.await;
        }
        next
    }

    /// `web__trigger-elicitation-request`: server-everything asks the
    /// caller for its name (`elicitation/create`, relayed by the gateway on
    /// the call's stream), the client answers with its token, and the
    /// result must show that token. The request asked must be the gateway's
    /// for this call alone: a question shown to the wrong session would
    /// put another client's token in a result (or leave a call unasked).
    async fn elicited(&mut self, session: &str) -> Next {
        let (id, token) = self.next_id();
        const TOOL: &str = "web__trigger-elicitation-request";
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": TOOL, "arguments": {} } });
        let asked = std::sync::atomic::AtomicU32::new(0);
        let reply = |request: &Value| {
            (request["method"] == "elicitation/create").then(|| {
                asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                json!({ "action": "accept", "content": { "name": token, "check": true } })
            })
        };
        let (at_s, started) = (self.ledger.now(), Instant::now());
        let answer = wire::post_answering(
            &self.http,
            &self.plan.url,
            Some(session),
            None,
            body.to_string(),
            &reply,
        )
        .await;
        let outcome = match &answer {
            Ok(a) => {
                let (outcome, result) = self.answered(a, id, &token);
                let asked = asked.into_inner();
                if let Some(text) = result
                    && (asked != 1 || !text.contains(&format!("Name: {token}")))
                {
                    self.ledger.ask_failed(
                        at_s,
                        a.answers_refused > 0,
                        format!(
                            "{token} was asked {asked} time(s) and its result was {}",
                            crate::ledger::clip(&text)
                        ),
                    );
                }
                outcome
            }
            Err(f) => failed(f),
        };
        let gone = matches!(outcome, Outcome::Http(404));
        self.record("elicited call", None, token, at_s, started, outcome);
        if gone { Next::Gone } else { Next::Go }
    }

    /// Every page of `tools/list`.
    async fn list(&mut self, session: Option<&str>) -> Next {
        let mut cursor: Option<String> = None;
        for _ in 0..20 {
            let (id, token) = self.next_id();
            let mut params = json!({});
            if let Some(c) = &cursor {
                params["cursor"] = json!(c);
            }
            if session.is_none() {
                params["_meta"] = wire::modern_meta();
            }
            let body =
                json!({ "jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params });
            let modern = session.is_none().then_some(("tools/list", None));
            let (answer, at_s, started) = self.timed_post(session, modern, body.to_string()).await;
            let (outcome, next) = match &answer {
                Ok(a) => (
                    self.outcome_of(a, id),
                    a.response(id)
                        .0
                        .and_then(|r| r["result"]["nextCursor"].as_str())
                        .map(str::to_owned),
                ),
                Err(f) => (failed(f), None),
            };
            let gone = matches!(outcome, Outcome::Http(404));
            self.record("list page", None, token, at_s, started, outcome);
            if gone {
                return Next::Gone;
            }
            cursor = next;
            if cursor.is_none() {
                break;
            }
        }
        Next::Go
    }

    /// Touches the watched resource through the session's replica.
    async fn touch(&mut self, session: Option<&str>) -> Next {
        let (id, token) = self.next_id();
        let sent_s = self.ledger.now();
        let next = self
            .call(
                "touch",
                session,
                id,
                token,
                "fx__touch",
                json!({ "uri": WATCHED }),
                None,
                None,
            )
            .await;
        if let Some(session) = session {
            self.ledger.touch(Touch {
                replica: replica_of(session),
                sent_s,
                answered_s: self.ledger.now(),
            });
        }
        next
    }

    /// A body over the limit: HTTP 413 is the precise answer.
    async fn oversized(&mut self, session: Option<&str>) -> Next {
        let (id, token) = self.next_id();
        let big = "x".repeat(70 * 1024);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": "fx__echo", "arguments": { "message": big } } });
        self.refused("oversized", session, token, body.to_string(), 413)
            .await
    }

    /// Not JSON: HTTP 400 with a parse error is the precise answer.
    async fn malformed(&mut self, session: Option<&str>) -> Next {
        let (_, token) = self.next_id();
        self.refused(
            "malformed",
            session,
            token,
            "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ".into(),
            400,
        )
        .await
    }

    async fn refused(
        &mut self,
        kind: &'static str,
        session: Option<&str>,
        token: String,
        body: String,
        status: u16,
    ) -> Next {
        let modern = session
            .is_none()
            .then_some(("tools/call", Some("fx__echo")));
        let (answer, at_s, started) = self.timed_post(session, modern, body).await;
        let outcome = match &answer {
            Ok(a) if a.status == status => Outcome::Http(status),
            Ok(a) => {
                self.ledger.wrong(
                    "bad input got its precise refusal",
                    format!("{kind} got HTTP {} {:?}", a.status, a.messages),
                );
                Outcome::Http(a.status)
            }
            Err(f) => failed(f),
        };
        self.record(kind, None, token, at_s, started, outcome);
        Next::Go
    }

    /// POSTs `body` (see [`wire::post`]) and says when it was sent: the
    /// second of the run and the instant its latency counts from.
    async fn timed_post(
        &self,
        session: Option<&str>,
        modern: Option<(&str, Option<&str>)>,
        body: String,
    ) -> (Result<Answer, Failed>, f64, Instant) {
        let (at_s, started) = (self.ledger.now(), Instant::now());
        let answer = wire::post(&self.http, &self.plan.url, session, modern, body).await;
        (answer, at_s, started)
    }

    /// Checks every message of `answer` for other clients' tokens, and
    /// gives the outcome of request `id` with, when it is `ok`, its result
    /// as text.
    fn answered(&self, answer: &Answer, id: u64, token: &str) -> (Outcome, Option<String>) {
        for m in &answer.messages {
            self.ledger.check_own(m, &[token]);
        }
        let outcome = self.outcome_of(answer, id);
        let result = (outcome == Outcome::Ok).then(|| {
            answer
                .response(id)
                .0
                .map(|r| r["result"].to_string())
                .unwrap_or_default()
        });
        (outcome, result)
    }

    /// The outcome of request `id` from its answer; a second response to
    /// the same id is a duplicate.
    fn outcome_of(&self, answer: &Answer, id: u64) -> Outcome {
        let (response, count) = answer.response(id);
        if count > 1 {
            self.ledger.wrong(
                "each request was answered once (no duplicates)",
                format!(
                    "request {id} of client {} answered {count} times",
                    self.index
                ),
            );
        }
        match response {
            Some(r) if r.get("result").is_some() => Outcome::Ok,
            Some(r) => Outcome::Rpc(r["error"]["code"].as_i64().unwrap_or(0)),
            None => Outcome::Http(answer.status),
        }
    }

    fn record(
        &self,
        kind: &'static str,
        recorded_at: Option<&'static str>,
        token: String,
        at_s: f64,
        started: Instant,
        outcome: Outcome,
    ) {
        self.ledger.sent(Sent {
            kind,
            recorded_at,
            token,
            at_s,
            outcome,
            took_us: started.elapsed().as_micros() as u64,
            replica: self.replica.clone(),
        });
    }
}

/// Whether the session goes on.
enum Next {
    Go,
    /// The session is gone (404): start a new one.
    Gone,
}

fn failed(f: &Failed) -> Outcome {
    match f {
        Failed::Transport(e) => Outcome::Transport(e.clone()),
        Failed::Lost => Outcome::Lost,
    }
}

/// The replica a session id names (its first part).
fn replica_of(session: &str) -> String {
    session.split('-').next().unwrap_or_default().to_owned()
}

/// Records a subscription period when its stream's task ends or is aborted.
struct PeriodGuard {
    ledger: Arc<Ledger>,
    period: Arc<std::sync::Mutex<Option<Period>>>,
    slow: bool,
    broken: bool,
}

impl Drop for PeriodGuard {
    fn drop(&mut self) {
        let taken = self.period.lock().unwrap_or_else(|e| e.into_inner()).take();
        // A slow reader's updates arrive late by design: not checked.
        if let Some(mut period) = taken.filter(|_| !self.slow) {
            period.until_s = self.ledger.now();
            period.broken = self.broken;
            self.ledger.period(period);
        }
    }
}
