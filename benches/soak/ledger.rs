//! The verifier's book: every request the load sent and how it ended,
//! every subscription period and the updates it saw, every touch, and
//! anything a session saw that was not its own. [`Ledger::verify`] turns
//! it into the findings of the report.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;

use serde_json::Value;

use crate::record::{Fault, Finding};

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// A JSON-RPC error with this code.
    Rpc(i64),
    /// An HTTP status with no JSON-RPC answer (or a refusal expected as such).
    Http(u16),
    /// The connection broke.
    Transport(String),
    /// No answer within the client's wait.
    Lost,
}

impl Outcome {
    /// The connection broke, or HAProxy answered for a replica that did
    /// not (502 to 504: the gateway itself refuses with other statuses or
    /// with JSON-RPC errors).
    fn broke(&self) -> bool {
        matches!(self, Outcome::Transport(_) | Outcome::Http(502..=504))
    }

    fn label(&self) -> String {
        match self {
            Outcome::Ok => "ok".into(),
            Outcome::Rpc(code) => format!("rpc {code}"),
            Outcome::Http(status) => format!("http {status}"),
            Outcome::Transport(_) => "transport".into(),
            Outcome::Lost => "lost".into(),
        }
    }
}

/// One request sent.
#[derive(Debug, Clone)]
pub struct Sent {
    pub kind: &'static str,
    /// The upstream a non-retryable call went to (`fx`, `fy`), whose record is checked.
    pub recorded_at: Option<&'static str>,
    pub token: String,
    pub at_s: f64,
    pub outcome: Outcome,
    pub took_us: u64,
    /// The replica id (the session id's prefix) of the session it was sent
    /// in; `None` for a stateless request, which HAProxy balances alone.
    pub replica: Option<String>,
}

/// A subscription held over one open stream.
#[derive(Debug, Clone)]
pub struct Period {
    pub replica: String,
    pub from_s: f64,
    pub until_s: f64,
    /// The stream ended or broke before the load stopped.
    pub broken: bool,
    pub updates: Vec<f64>,
}

/// A touch of the subscribed resource through one replica's fixture.
#[derive(Debug, Clone)]
pub struct Touch {
    pub replica: String,
    pub sent_s: f64,
    pub answered_s: f64,
}

#[derive(Default)]
struct Book {
    sent: Vec<Sent>,
    periods: Vec<Period>,
    touches: Vec<Touch>,
    /// (check, what was seen)
    wrong: Vec<(&'static str, String)>,
    /// Elicited calls answered `ok` whose result does not show the name
    /// the client gave: (second sent, whether the gateway refused the
    /// client's answer, what was seen).
    asks_failed: Vec<(f64, bool, String)>,
}

/// Shared by every simulated client.
pub struct Ledger {
    started: Instant,
    book: Mutex<Book>,
}

/// A token: `t` + 4 digits of the client + `x` + 6 digits of its request.
pub fn token(client: usize, n: u64) -> String {
    format!("t{client:04}x{n:06}")
}

/// Every token in `text`.
pub fn tokens_in(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    (0..bytes.len().saturating_sub(11))
        .filter(|&i| {
            bytes[i] == b't'
                && bytes[i + 5] == b'x'
                && bytes[i + 1..i + 5].iter().all(u8::is_ascii_digit)
                && bytes[i + 6..i + 12].iter().all(u8::is_ascii_digit)
        })
        .map(|i| &text[i..i + 12])
        .collect()
}

impl Ledger {
    pub fn new(started: Instant) -> Ledger {
        Ledger {
            started,
            book: Mutex::new(Book::default()),
        }
    }

    /// Seconds since the load started.
    pub fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn sent(&self, sent: Sent) {
        self.book().sent.push(sent);
    }

    pub fn period(&self, period: Period) {
        self.book().periods.push(period);
    }

    pub fn touch(&self, touch: Touch) {
        self.book().touches.push(touch);
    }

    /// Something a session saw that breaks `check`.
    pub fn wrong(&self, check: &'static str, what: String) {
        self.book().wrong.push((check, what));
    }

    /// An elicited call sent at `at_s` whose result does not show the
    /// client's answer (`refused`: the POST of that answer was not
    /// accepted); judged with the faults (see [`Ledger::verify`]).
    pub fn ask_failed(&self, at_s: f64, refused: bool, what: String) {
        self.book().asks_failed.push((at_s, refused, what));
    }

    /// Checks that a message a client got names no token but `own`.
    pub fn check_own(&self, message: &Value, own: &[&str]) {
        let text = message.to_string();
        for found in tokens_in(&text) {
            if !own.contains(&found) {
                self.wrong(
                    "no session saw another session's result, notification or elicitation",
                    format!("a client owning {own:?} got {found}: {}", clip(&text)),
                );
            }
        }
    }

    /// Requests sent, by kind, and outcomes.
    pub fn tallies(&self) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
        let book = self.book();
        let mut kinds = BTreeMap::new();
        let mut outcomes = BTreeMap::new();
        for s in &book.sent {
            *kinds.entry(s.kind.to_owned()).or_default() += 1;
            *outcomes.entry(s.outcome.label()).or_default() += 1;
        }
        (kinds, outcomes)
    }

    /// (second, µs) of every call answered `ok` for which `keep` holds
    /// of its replica id (`None`: stateless).
    pub fn latencies(&self, keep: impl Fn(Option<&str>) -> bool) -> Vec<(f64, u64)> {
        self.book()
            .sent
            .iter()
            .filter(|s| s.outcome == Outcome::Ok && s.kind.starts_with("call"))
            .filter(|s| keep(s.replica.as_deref()))
            .map(|s| (s.at_s, s.took_us))
            .collect()
    }

    /// The findings over the whole run. `records` maps an upstream name
    /// to the tokens its fixture children received in `tools/call`s;
    /// `faults` excuse what a killed replica or Redis took with it.
    pub fn verify(
        &self,
        records: &HashMap<&'static str, HashMap<String, u64>>,
        faults: &[Fault],
    ) -> Vec<Finding> {
        let book = self.book();
        let mut findings = Vec::new();
        // Broken connections are precise only while a replica is down.
        let excused = |at: f64| {
            faults
                .iter()
                .filter(|f| f.what.starts_with("replica"))
                .any(|f| at >= f.at_s - 2.0 && at <= f.at_s + 15.0)
        };
        let lost: Vec<&Sent> = book
            .sent
            .iter()
            .filter(|s| s.outcome == Outcome::Lost)
            .collect();
        findings.push(finding(
            "every request got an answer or an error (none lost)",
            &lost,
            book.sent.len(),
            |s| format!("{} {} at {:.1}s", s.kind, s.token, s.at_s),
        ));
        let broken: Vec<&Sent> = book
            .sent
            .iter()
            .filter(|s| s.outcome.broke() && !excused(s.at_s))
            .collect();
        findings.push(finding(
            "no connection broke (and HAProxy answered no 502 to 504) except while a replica was down",
            &broken,
            book.sent.len(),
            |s| format!("{} {} at {:.1}s: {:?}", s.kind, s.token, s.at_s, s.outcome),
        ));
        for (check, list) in group(&book.wrong) {
            findings.push(Finding {
                check: check.to_owned(),
                passed: false,
                detail: summarize(&list),
            });
        }
        for check in [
            "no session saw another session's result, notification or elicitation",
            "each request was answered once (no duplicates)",
        ] {
            if !book.wrong.iter().any(|(c, _)| *c == check) {
                findings.push(Finding {
                    check: check.into(),
                    passed: true,
                    detail: format!("{} requests checked", book.sent.len()),
                });
            }
        }
        // A session's answer to a question goes back through HAProxy, which
        // sends it to the replica its stick table names: right after a
        // replica kill, that can be the other replica than the one that
        // asked, which sends it on (found by the soak; it did not). Only an
        // answer the gateway did not accept at all (the replica it reached
        // was down) may go missing, and only around a replica kill.
        let answered = book
            .sent
            .iter()
            .filter(|s| s.kind == "elicited call" && s.outcome == Outcome::Ok)
            .count();
        let (near_kill, away): (Vec<_>, Vec<_>) = book
            .asks_failed
            .iter()
            .partition(|(at, refused, _)| *refused && excused(*at));
        let cases = |list: &[&(f64, bool, String)]| {
            summarize(&list.iter().map(|(_, _, w)| w.clone()).collect::<Vec<_>>())
        };
        findings.push(Finding {
            check: "each elicitation reached the session whose call asked it, once, and its answer came back".into(),
            passed: answered > 0 && away.is_empty(),
            detail: match away.is_empty() {
                true => format!(
                    "{answered} elicited calls answered, {} showing the name their session gave; {} not, their answer refused within seconds of a replica kill: {}",
                    answered - near_kill.len(),
                    near_kill.len(),
                    cases(&near_kill)
                ),
                false => format!(
                    "{} of {answered} elicited calls did not show the name their session gave, though the gateway accepted their answer or no replica was killed near them: {}",
                    away.len(),
                    cases(&away)
                ),
            },
        });
        findings.push(tools_known(&book.sent, faults, &excused));
        findings.push(at_most_once(&book.sent, records));
        findings.push(deliveries(&book.periods, &book.touches, &excused));
        findings
    }
}

/// An elicited call's tool is server-everything's (`web`): the gateway
/// may call it unknown (`-32602`) only while `web` or a replica restarts.
/// Found by the soak: tools that server-everything adds on
/// `notifications/initialized` were missing from one replica's catalog.
fn tools_known(sent: &[Sent], faults: &[Fault], excused: &dyn Fn(f64) -> bool) -> Finding {
    let web_restarting = |at: f64| {
        faults
            .iter()
            .filter(|f| f.what.contains("upstream Web"))
            .any(|f| at >= f.at_s - 2.0 && at <= f.at_s + 30.0)
    };
    let elicited: Vec<&Sent> = sent.iter().filter(|s| s.kind == "elicited call").collect();
    let unknown: Vec<&Sent> = elicited
        .iter()
        .copied()
        .filter(|s| s.outcome == Outcome::Rpc(-32602))
        .filter(|s| !excused(s.at_s) && !web_restarting(s.at_s))
        .collect();
    finding(
        "no call was refused as an unknown tool that its upstream has (except while it or a replica restarted)",
        &unknown,
        elicited.len(),
        |s| format!("{} {} at {:.1}s", s.kind, s.token, s.at_s),
    )
}

fn at_most_once(sent: &[Sent], records: &HashMap<&'static str, HashMap<String, u64>>) -> Finding {
    let mut problems = Vec::new();
    let mut checked = 0;
    for s in sent {
        let Some(upstream) = s.recorded_at else {
            continue;
        };
        checked += 1;
        let times = records
            .get(upstream)
            .and_then(|r| r.get(&s.token))
            .copied()
            .unwrap_or(0);
        if times > 1 {
            problems.push(format!("{} reached {upstream} {times} times", s.token));
        } else if times == 0 && s.outcome == Outcome::Ok {
            problems.push(format!(
                "{} answered ok but never reached {upstream}",
                s.token
            ));
        }
    }
    Finding {
        check: "a call not safe to retry reached its upstream at most once (and an answered one exactly once)".into(),
        passed: problems.is_empty(),
        detail: format!("{checked} calls checked against the fixtures' records; {}", summarize(&problems)),
    }
}

/// Each subscription live over a touch's whole window, on the replica the
/// touch went through, saw an update within the window (or a grace after it).
fn deliveries(periods: &[Period], touches: &[Touch], excused: &dyn Fn(f64) -> bool) -> Finding {
    const GRACE_S: f64 = 3.0;
    let mut due = 0;
    let mut missed = Vec::new();
    for touch in touches.iter().filter(|t| !excused(t.sent_s)) {
        for period in periods.iter().filter(|p| p.replica == touch.replica) {
            let end = touch.answered_s + GRACE_S;
            if period.from_s > touch.sent_s || period.until_s < end {
                continue;
            }
            due += 1;
            if !period
                .updates
                .iter()
                .any(|u| *u >= touch.sent_s && *u <= end)
            {
                missed.push(format!(
                    "touch at {:.1}s on replica {} not seen by a subscription live {:.1}s..{:.1}s",
                    touch.sent_s, touch.replica, period.from_s, period.until_s
                ));
            }
        }
    }
    Finding {
        check: "every subscription live when its resource was updated was told".into(),
        passed: missed.is_empty() && due > 0,
        detail: format!(
            "{} touches, {} subscription periods, {due} deliveries due; {}",
            touches.len(),
            periods.len(),
            summarize(&missed)
        ),
    }
}

fn finding<T>(check: &str, bad: &[&T], of: usize, show: impl Fn(&T) -> String) -> Finding {
    let shown: Vec<String> = bad.iter().map(|b| show(b)).collect();
    Finding {
        check: check.into(),
        passed: bad.is_empty(),
        detail: format!("{} of {of}; {}", bad.len(), summarize(&shown)),
    }
}

fn group(wrong: &[(&'static str, String)]) -> BTreeMap<&'static str, Vec<String>> {
    let mut out: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for (check, what) in wrong {
        out.entry(check).or_default().push(what.clone());
    }
    out
}

/// The count and the first few cases.
fn summarize(cases: &[String]) -> String {
    if cases.is_empty() {
        return "none wrong".into();
    }
    let first: Vec<&str> = cases.iter().take(5).map(String::as_str).collect();
    format!("{} wrong, first: {}", cases.len(), first.join("; "))
}

pub fn clip(text: &str) -> String {
    text.chars().take(300).collect()
}
