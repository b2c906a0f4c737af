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
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(LineSink(buffer.clone()))
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        Format::Text => builder.init(),
        Format::Json => builder.json().init(),
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
}
