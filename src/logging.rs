//! The process's log: tracing to stderr through a lossy, batching writer.
//!
//! Request handling never waits for the log and never wakes a thread for
//! it. A line is appended to a shared buffer (under a lock held only for
//! the copy); one writer thread takes the whole buffer every
//! [`FLUSH_EVERY`], or at once when it passes [`FLUSH_AT`] bytes, and
//! writes it to stderr in one go. So a busy gateway pays one `write` per
//! batch instead of a wake-up and a `write` per line (its audit line per
//! call among them). When stderr is slow or blocked (a pipe nobody reads),
//! the buffer fills to [`QUEUED_LINES`] lines and further lines are dropped
//! and counted (exported as `mcpmux_log_lines_dropped_total`) instead of
//! stalling the gateway. Dropping the [`LogGuard`] writes what is left.
//!
//! JSON lines are tracing-subscriber's own format. The gateway's own events
//! outside any span (the audit line of every call among them) are built by
//! [`JsonLines`] in one buffer with the same serializer calls, instead of
//! going to the formatter piece by piece through `fmt::Write`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

/// Lines buffered for the writer thread before new ones are dropped.
pub(crate) const QUEUED_LINES: usize = 4096;
/// Bytes buffered before new lines are dropped, whatever their count.
const QUEUED_BYTES: usize = 4 << 20;
/// How often the writer thread writes what was logged.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(20);
/// Buffered bytes that make the writer thread write at once.
const FLUSH_AT: usize = 64 << 10;

/// The writer's drop counter, once logging is set up.
static DROPPED: OnceLock<Arc<Buffer>> = OnceLock::new();

/// Where [`CallAudit::write_directly`] writes: set when the log is JSON
/// lines and its filter has no span or field directive (which only
/// tracing's own dispatch would apply).
static DIRECT: OnceLock<Arc<Buffer>> = OnceLock::new();

/// The target of the gateway's audit events.
pub(crate) const AUDIT_TARGET: &str = "mcpmux::audit";

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// How long dropping the [`LogGuard`] waits for the last lines to be
/// written; a blocked stderr must not keep the process from exiting.
const FINAL_WRITE_WAIT: Duration = Duration::from_secs(1);

/// Keeps the writer thread running; dropping it writes what is buffered
/// (waiting at most [`FINAL_WRITE_WAIT`]).
#[must_use = "logging stops when the guard is dropped"]
pub struct LogGuard {
    buffer: Arc<Buffer>,
    /// Disconnected when the writer thread has written everything and ended.
    finished: Option<std::sync::mpsc::Receiver<()>>,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        self.buffer.closed.store(true, Ordering::Release);
        self.buffer.wake.notify_one();
        if let Some(finished) = self.finished.take() {
            let _ = finished.recv_timeout(FINAL_WRITE_WAIT);
        }
    }
}

/// Sets up the global subscriber: `RUST_LOG` (default `info`), `format`.
pub fn init(format: Format) -> LogGuard {
    let buffer = Arc::new(Buffer::default());
    let _ = DROPPED.set(buffer.clone());
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let writer = {
        let buffer = buffer.clone();
        std::thread::Builder::new()
            .name("mcpmux-log".into())
            .spawn(move || {
                buffer.drain_into(std::io::stderr());
                drop(done);
            })
    };
    let directives = std::env::var(tracing_subscriber::EnvFilter::DEFAULT_ENV).ok();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if format == Format::Json && !directives.is_some_and(|d| d.contains('[')) {
        let _ = DIRECT.set(buffer.clone());
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(LineSink(buffer.clone()))
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        Format::Text => builder.init(),
        Format::Json => builder
            .json()
            .event_format(JsonLines(tracing_subscriber::fmt::format().json()))
            .init(),
    }
    LogGuard {
        buffer,
        finished: writer.ok().map(|_| finished),
    }
}

/// Log lines dropped because stderr could not keep up.
pub(crate) fn dropped_lines() -> u64 {
    DROPPED
        .get()
        .map_or(0, |buffer| buffer.dropped.load(Ordering::Relaxed))
}

/// Lines waiting for the writer thread.
#[derive(Default)]
struct Buffer {
    pending: Mutex<Pending>,
    /// Wakes the writer early (a full batch, or the end).
    wake: Condvar,
    closed: AtomicBool,
    dropped: AtomicU64,
}

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    lines: usize,
}

impl Buffer {
    /// Appends one formatted event, or counts it as dropped when full.
    fn push(&self, line: &[u8]) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.lines >= QUEUED_LINES || pending.bytes.len() + line.len() > QUEUED_BYTES {
            drop(pending);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let before = pending.bytes.len();
        pending.bytes.extend_from_slice(line);
        pending.lines += 1;
        let crossed = before < FLUSH_AT && pending.bytes.len() >= FLUSH_AT;
        drop(pending);
        if crossed {
            self.wake.notify_one();
        }
    }

    /// The writer thread: takes the buffer every [`FLUSH_EVERY`] (sooner
    /// when woken) and writes it; returns once closed and drained.
    fn drain_into(&self, mut out: impl std::io::Write) {
        let mut batch = Vec::new();
        loop {
            let closed = {
                let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                let (mut pending, _) = self
                    .wake
                    .wait_timeout_while(pending, FLUSH_EVERY, |p| {
                        p.bytes.len() < FLUSH_AT && !self.closed.load(Ordering::Acquire)
                    })
                    .unwrap_or_else(|e| e.into_inner());
                std::mem::swap(&mut batch, &mut pending.bytes);
                pending.lines = 0;
                self.closed.load(Ordering::Acquire)
            };
            if !batch.is_empty() {
                // Nobody to tell if stderr is gone; the lines are lost.
                let _ = out.write_all(&batch).and_then(|()| out.flush());
                batch.clear();
            }
            if closed {
                return;
            }
        }
    }
}

/// The subscriber's writer: each event arrives formatted in one `write`.
#[derive(Clone)]
struct LineSink(Arc<Buffer>);

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LineSink {
    type Writer = LineSink;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl std::io::Write for LineSink {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        self.0.push(line);
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The target prefix of the events [`JsonLines`] may format itself: the
/// gateway's own, never a `log` record (whose metadata the library
/// normalizes first).
const OWN_TARGET_PREFIX: &str = "mcpmux";

/// tracing-subscriber's JSON line format. An event of the gateway's own
/// outside any span is written here, member for member and value for value
/// as the library's formatter writes it (timestamp, level, fields, target;
/// no span entries, as there is no span), into one buffer written at once;
/// every other event goes to the library's formatter. The timestamp is the
/// library's format (RFC 3339, UTC, microseconds) written by humantime. The test below holds
/// the two to the same bytes but for the timestamp, and both timestamps to
/// that format.
struct JsonLines(tracing_subscriber::fmt::format::Format<tracing_subscriber::fmt::format::Json>);

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for JsonLines
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        let in_span =
            event.parent().and_then(|id| ctx.span(id)).is_some() || ctx.lookup_current().is_some();
        if in_span || !meta.target().starts_with(OWN_TARGET_PREFIX) {
            return self.0.format_event(ctx, writer, event);
        }
        let line = own_line(event);
        #[cfg(test)]
        tests::OWN_LINES.with(|n| n.set(n.get() + 1));
        writer.write_str(&line)
    }
}

/// One event outside any span as the library's JSON format writes it:
/// the same members in the same order, each value as serde_json writes
/// it, built in one buffer without a serializer per field.
fn own_line(event: &tracing::Event<'_>) -> String {
    let meta = event.metadata();
    let mut fields = JsonFields::start(meta.level());
    event.record(&mut fields);
    fields.end(meta.target())
}

/// The audit line of one call, as `tracing::info!(target: AUDIT_TARGET,
/// message = "call", client, method, upstream, item, outcome, duration_ms,
/// request_id)` writes it.
pub(crate) struct CallAudit<'a> {
    pub client: &'a str,
    pub method: &'a str,
    pub upstream: &'a str,
    pub item: &'a str,
    pub outcome: &'a str,
    pub duration_ms: f64,
    pub request_id: &'a str,
}

impl CallAudit<'_> {
    /// Logs the line: written directly where it can be, else as the
    /// tracing event it always was.
    pub(crate) fn log(&self) {
        if !self.write_directly() {
            self.event();
        }
    }

    /// The line as a tracing event. The message is a field like the
    /// others (the line is the same): as a `&str` it is written as it is,
    /// where a format string would be formatted into a buffer first.
    fn event(&self) {
        tracing::info!(
            target: AUDIT_TARGET,
            message = "call",
            client = self.client,
            method = self.method,
            upstream = self.upstream,
            item = self.item,
            outcome = self.outcome,
            duration_ms = self.duration_ms,
            request_id = self.request_id,
        );
    }

    /// Writes the line straight to the log, as the JSON format would,
    /// without tracing's dispatch and its visit of each field; false when
    /// it must go through tracing instead: the log is not JSON lines, its
    /// filter has span or field directives or leaves the audit out, or a
    /// span is current (its fields would be part of the line).
    fn write_directly(&self) -> bool {
        let Some(buffer) = DIRECT.get() else {
            return false;
        };
        if !Self::direct_applies() {
            return false;
        }
        buffer.push(self.line().as_bytes());
        true
    }

    /// Whether the subscriber in force logs the audit and no span is
    /// current.
    fn direct_applies() -> bool {
        tracing::enabled!(target: AUDIT_TARGET, tracing::Level::INFO)
            && tracing::dispatcher::get_default(|d| d.current_span().id().is_none())
    }

    fn line(&self) -> String {
        let mut fields = JsonFields::start(&tracing::Level::INFO);
        // The keys are plain words, written as they are.
        fields.out.push_str(r#""message":"call","client":"#);
        crate::protocol::push_json_string(&mut fields.out, self.client);
        fields.out.push_str(r#","method":"#);
        crate::protocol::push_json_string(&mut fields.out, self.method);
        fields.out.push_str(r#","upstream":"#);
        crate::protocol::push_json_string(&mut fields.out, self.upstream);
        fields.out.push_str(r#","item":"#);
        crate::protocol::push_json_string(&mut fields.out, self.item);
        fields.out.push_str(r#","outcome":"#);
        crate::protocol::push_json_string(&mut fields.out, self.outcome);
        fields.first = false;
        fields.f64_field("duration_ms", self.duration_ms);
        fields.str_field("request_id", self.request_id);
        fields.end(AUDIT_TARGET)
    }
}

/// `time` in the library's format, RFC 3339 in UTC to the microsecond
/// (humantime's `format_rfc3339_micros`). The date and time of day are
/// formatted once a second per thread and kept; each line adds only its
/// microseconds.
fn push_timestamp(out: &mut String, time: std::time::SystemTime) {
    /// `YYYY-MM-DDTHH:MM:SS` of the second last formatted on this thread.
    struct Second {
        unix: u64,
        text: String,
    }
    thread_local! {
        static SECOND: std::cell::RefCell<Second> = const {
            std::cell::RefCell::new(Second { unix: u64::MAX, text: String::new() })
        };
    }
    let Ok(since) = time.duration_since(std::time::UNIX_EPOCH) else {
        // Before 1970: humantime's own (it writes the epoch).
        let _ = write!(out, "{}", humantime::format_rfc3339_micros(time));
        return;
    };
    let unix = since.as_secs();
    SECOND.with_borrow_mut(|second| {
        if second.unix != unix {
            let whole = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix);
            second.text.clear();
            let _ = write!(second.text, "{}", humantime::format_rfc3339_seconds(whole));
            // The seconds format ends with `Z`; the microseconds go before it.
            second.text.pop();
            second.unix = unix;
        }
        out.push_str(&second.text);
    });
    let micros = since.subsec_micros();
    let mut digits = [b'.', b'0', b'0', b'0', b'0', b'0', b'0', b'Z'];
    let mut rest = micros;
    for digit in digits[1..7].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    out.push_str(std::str::from_utf8(&digits).expect("ASCII digits"));
}

/// An event's fields as the members of a JSON object, each value as
/// tracing-serde has serde_json write it: strings and `Debug` values as
/// escaped strings, numbers as serde_json prints them (a float that is
/// not finite as `null`). What the visitor does not implement (errors,
/// 128-bit integers, bytes) reaches `record_debug`, as it does there.
struct JsonFields {
    out: String,
    first: bool,
}

impl JsonFields {
    /// A line up to its fields: the timestamp (now) and `level`.
    fn start(level: &tracing::Level) -> JsonFields {
        let mut out = String::with_capacity(384);
        out.push_str(r#"{"timestamp":""#);
        push_timestamp(&mut out, std::time::SystemTime::now());
        out.push_str(r#"","level":""#);
        out.push_str(level.as_str());
        out.push_str(r#"","fields":{"#);
        JsonFields { out, first: true }
    }

    /// The line, ended with its `target`.
    fn end(self, target: &str) -> String {
        let mut line = self.out;
        line.push_str(r#"},"target":"#);
        crate::protocol::push_json_string(&mut line, target);
        line.push_str("}\n");
        line
    }

    fn key(&mut self, name: &str) {
        if !std::mem::take(&mut self.first) {
            self.out.push(',');
        }
        crate::protocol::push_json_string(&mut self.out, name);
        self.out.push(':');
    }

    fn str_field(&mut self, name: &str, value: &str) {
        self.key(name);
        crate::protocol::push_json_string(&mut self.out, value);
    }

    fn f64_field(&mut self, name: &str, value: f64) {
        self.key(name);
        // serde_json's own float format (zmij's shortest digits, which
        // serde_json writes), and `null` for NaN or infinity.
        match value.is_finite() {
            true => self.out.push_str(zmij::Buffer::new().format_finite(value)),
            false => self.out.push_str("null"),
        }
    }
}

impl tracing::field::Visit for JsonFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.str_field(field.name(), &format!("{value:?}"));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.str_field(field.name(), value);
    }

    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.key(field.name());
        self.out.push_str(if value { "true" } else { "false" });
    }

    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.key(field.name());
        self.out.push_str(itoa::Buffer::new().format(value));
    }

    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.key(field.name());
        self.out.push_str(itoa::Buffer::new().format(value));
    }

    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        self.f64_field(field.name(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that records what it was given, for the drain loop.
    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Recorded {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_beyond_the_bound_are_dropped_and_counted() {
        let buffer = Buffer::default();
        for _ in 0..QUEUED_LINES + 10 {
            buffer.push(b"line\n");
        }
        assert_eq!(buffer.dropped.load(Ordering::Relaxed), 10);
        assert_eq!(buffer.pending.lock().unwrap().lines, QUEUED_LINES);
    }

    #[test]
    fn closing_writes_every_buffered_line_in_order() {
        let buffer = Arc::new(Buffer::default());
        let out = Recorded::default();
        let writer = {
            let (buffer, out) = (buffer.clone(), out.clone());
            std::thread::spawn(move || buffer.drain_into(out))
        };
        for i in 0..100 {
            buffer.push(format!("line {i}\n").as_bytes());
        }
        buffer.closed.store(true, Ordering::Release);
        buffer.wake.notify_one();
        writer.join().unwrap();
        let written = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let expected: String = (0..100).map(|i| format!("line {i}\n")).collect();
        assert_eq!(written, expected);
    }

    thread_local! {
        /// Lines [`JsonLines`] built itself on this thread.
        pub(super) static OWN_LINES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// Runs `emit` under a JSON subscriber, the library's formatter or
    /// [`JsonLines`]; the lines written, each timestamp blanked.
    fn json_lines(own: bool, emit: impl Fn()) -> Vec<String> {
        let out = Recorded::default();
        let writer = {
            let out = out.clone();
            move || out.clone()
        };
        let builder = tracing_subscriber::fmt()
            .with_writer(writer)
            .with_max_level(tracing::Level::DEBUG)
            .json();
        if own {
            let format = JsonLines(tracing_subscriber::fmt::format().json());
            tracing::subscriber::with_default(builder.event_format(format).finish(), emit);
        } else {
            tracing::subscriber::with_default(builder.finish(), emit);
        }
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line).unwrap();
                let stamp = value["timestamp"].as_str().unwrap().to_owned();
                // RFC 3339 in UTC to the microsecond, whoever wrote it.
                assert!(
                    stamp.len() == "2026-01-02T03:04:05.678901Z".len()
                        && humantime::parse_rfc3339(&stamp).is_ok(),
                    "timestamp {stamp}"
                );
                line.replacen(&stamp, "T", 1)
            })
            .collect()
    }

    /// A call's audit line written directly is the line tracing's JSON
    /// format writes for the same event, byte for byte (but the time).
    #[test]
    fn a_direct_call_line_is_the_librarys_line() {
        let calls = [
            CallAudit {
                client: "alice",
                method: "tools/call",
                upstream: "floor",
                item: "floor__echo",
                outcome: "ok",
                duration_ms: 0.123_456,
                request_id: "7",
            },
            CallAudit {
                client: "a \"quoted\"\nclient\u{1}",
                method: "prompts/get",
                upstream: "émoji ☃",
                item: "",
                outcome: "upstream_error",
                duration_ms: 1500.0,
                request_id: "\"req\\1\"",
            },
            CallAudit {
                client: "-",
                method: "resources/read",
                upstream: "u",
                item: "file:///a b",
                outcome: "timeout",
                duration_ms: f64::NAN,
                request_id: "null",
            },
        ];
        let library = json_lines(false, || calls.iter().for_each(CallAudit::event));
        let direct: Vec<String> = calls
            .iter()
            .map(|call| {
                let line = call.line();
                let value: serde_json::Value = serde_json::from_str(&line).unwrap();
                let stamp = value["timestamp"].as_str().unwrap();
                line.trim_end().replacen(stamp, "T", 1)
            })
            .collect();
        assert_eq!(direct, library);
    }

    /// The direct line is written only where tracing's JSON format would
    /// write the same: the audit enabled and no span current.
    #[test]
    fn the_direct_line_is_written_only_outside_spans_and_when_enabled() {
        let subscriber = |filter: &str| {
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::sink)
                .json()
                .finish()
        };
        tracing::subscriber::with_default(subscriber("info"), || {
            assert!(CallAudit::direct_applies());
            let span = tracing::info_span!("session", session = "s1");
            span.in_scope(|| assert!(!CallAudit::direct_applies(), "inside a span"));
            // A span the filter leaves out is no span at all.
            let hidden = tracing::debug_span!("call");
            hidden.in_scope(|| assert!(CallAudit::direct_applies(), "inside a disabled span"));
        });
        tracing::subscriber::with_default(subscriber("info,mcpmux::audit=warn"), || {
            assert!(!CallAudit::direct_applies(), "the audit filtered out");
        });
    }

    /// The kept second and the written microseconds are humantime's
    /// format, across second, minute, day and year boundaries, on one
    /// thread one after the other as a busy gateway logs.
    #[test]
    fn timestamps_are_humantimes_rfc3339_micros() {
        let base = [
            0_u64,
            1_700_000_000,
            1_735_689_599, // 2024-12-31T23:59:59
            1_709_164_799, // 2024-02-28T23:59:59, before a leap day
            4_102_444_799, // 2099-12-31T23:59:59
        ];
        let offsets_us = [
            0_u64, 1, 9, 10, 999_999, 1_000_000, 1_000_001, 59_999_999, 60_000_000,
        ];
        for unix in base {
            for offset in offsets_us {
                let time = std::time::UNIX_EPOCH
                    + std::time::Duration::from_secs(unix)
                    + std::time::Duration::from_micros(offset)
                    + std::time::Duration::from_nanos(999);
                let mut ours = String::new();
                push_timestamp(&mut ours, time);
                let theirs = humantime::format_rfc3339_micros(time).to_string();
                assert_eq!(ours, theirs, "{unix} + {offset} µs");
            }
        }
    }

    #[test]
    fn own_json_lines_are_the_librarys_bytes() {
        #[derive(Debug)]
        #[allow(dead_code)]
        enum Outcome {
            Ok,
        }
        let emit = || {
            tracing::info!(
                target: "mcpmux::audit",
                client = "a \"quoted\"\nclient\u{1}",
                method = "tools/call",
                item = "émoji ☃",
                outcome = ?Outcome::Ok,
                duration_ms = 0.25_f64,
                whole = 3.0_f64,
                count = 7_u64,
                delta = -2_i64,
                flag = true,
                not_a_number = f64::NAN,
                big = 1_u128 << 100,
                "call"
            );
            tracing::warn!(target: "mcpmux::upstream", error = %"it broke", "no message escape {}", 1);
            tracing::debug!(target: "other::crate", value = 1, "not ours");
            let span = tracing::info_span!("session", session = "s1");
            span.in_scope(|| tracing::info!(target: "mcpmux::audit", n = 2, "inside a span"));
            tracing::info!(target: "mcpmux::audit", parent: &span, n = 3, "with a parent");
        };
        let before = OWN_LINES.with(std::cell::Cell::get);
        let own = json_lines(true, emit);
        assert_eq!(OWN_LINES.with(std::cell::Cell::get) - before, 2);
        let library = json_lines(false, emit);
        assert_eq!(own.len(), 5, "{own:#?}");
        assert_eq!(own, library);
    }
}
