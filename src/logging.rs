//! The process's log: tracing to stderr through a lossy, non-blocking writer.
//!
//! Request handling never waits for the log. Lines go to a bounded queue
//! that one writer thread drains into stderr; when stderr is slow or
//! blocked (a pipe nobody reads), the queue fills and further lines are
//! dropped and counted (exported as `mcpmux_log_lines_dropped_total`)
//! instead of stalling the gateway.

use std::sync::OnceLock;

use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};

/// Lines queued for the writer thread before new ones are dropped.
pub(crate) const QUEUED_LINES: usize = 4096;

/// The writer's drop counter, once logging is set up.
static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// Keeps the writer thread running; dropping it flushes what is queued.
#[must_use = "logging stops when the guard is dropped"]
pub struct LogGuard {
    _worker: WorkerGuard,
}

/// Sets up the global subscriber: `RUST_LOG` (default `info`), `format`.
pub fn init(format: Format) -> LogGuard {
    let (writer, worker) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(QUEUED_LINES)
        .thread_name("mcpmux-log")
        .finish(std::io::stderr());
    let _ = DROPPED.set(writer.error_counter());
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        Format::Text => builder.init(),
        Format::Json => builder.json().init(),
    }
    LogGuard { _worker: worker }
}

/// Log lines dropped because stderr could not keep up.
pub(crate) fn dropped_lines() -> u64 {
    DROPPED
        .get()
        .map_or(0, |counter| counter.dropped_lines() as u64)
}
