//! The stdio transport: an upstream MCP server run as a child process.
//!
//! The child runs in its own process group, so stopping it also stops what
//! it started (`npx` starts `node`). Three tasks serve one child: the writer
//! drains the connection's outbound queue into stdin, the reader hands each
//! stdout line to [`Connection::dispatch`], and the stderr drain logs every
//! line, so a child that writes megabytes of logs never blocks. Stopping is
//! close stdin, then SIGTERM, then SIGKILL, each after a grace period, and
//! always ends with the child reaped.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use crate::config::StdioConfig;
use crate::upstream::connection::Connection;
use crate::upstream::message::Outgoing;
use crate::upstream::noise::NoiseFilter;

/// Longest JSON-RPC line accepted from a child; longer ones are skipped.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// Longest stderr line logged as is; the rest of the line is cut.
const MAX_STDERR_LINE: usize = 4096;
/// How long a child gets to exit after stdin closes, and after SIGTERM.
const STDIN_CLOSE_GRACE: Duration = Duration::from_millis(500);
const TERM_GRACE: Duration = Duration::from_secs(3);
/// How long to wait for an exit status once stdout has closed.
const EXIT_AFTER_EOF: Duration = Duration::from_millis(250);

/// A running upstream child and the signal that its stdout has ended.
pub(crate) struct StdioChild {
    upstream: Arc<str>,
    child: Child,
    pid: Option<Pid>,
    /// Cancelled to make the writer task drop the child's stdin.
    close_stdin: CancellationToken,
    /// Cancelled by the reader task when stdout reaches end of file.
    stdout_done: CancellationToken,
    /// Cancelled once the child is reaped (or dropped): the readers stop
    /// even if a grandchild outside the group holds the pipes open.
    reaped: CancellationToken,
}

impl StdioChild {
    /// Starts the child and its I/O tasks. Messages from it go to `conn`;
    /// frames from `outbound` go to its stdin.
    pub(crate) fn spawn(
        upstream: Arc<str>,
        cfg: &StdioConfig,
        conn: Arc<Connection>,
        outbound: mpsc::Receiver<Outgoing>,
        noise: Arc<NoiseFilter>,
        tasks: &TaskTracker,
    ) -> io::Result<Self> {
        let mut cmd = Command::new(&cfg.command);
        // A cleared environment: a secret meant for one upstream (or for
        // the gateway itself) never reaches another child.
        let inherited = std::env::vars_os()
            .filter(|(name, _)| name.to_str().is_some_and(|n| cfg.inherit_env.admits(n)));
        cmd.env_clear()
            .envs(inherited)
            .args(&cfg.args)
            .envs(cfg.env.iter().map(|(k, v)| (k, v.expose())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(cwd) = &cfg.cwd {
            cmd.current_dir(cwd);
        }
        let mut child = cmd.spawn()?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .map(Pid::from_raw);
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| io::Error::other("child has no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("child has no stdout"))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| io::Error::other("child has no stderr"))?;
        tracing::info!(upstream = %upstream, command = %cfg.command, args = cfg.args.len(), pid = child.id().unwrap_or(0), "started upstream child");

        let close_stdin = CancellationToken::new();
        let stdout_done = CancellationToken::new();
        let reaped = CancellationToken::new();
        // The three I/O tasks run in the supervisor's span, on its tracker.
        let span = tracing::Span::current();
        tasks.spawn(
            write_stdin(upstream.clone(), stdin, outbound, close_stdin.clone())
                .instrument(span.clone()),
        );
        tasks.spawn(
            read_stdout(
                upstream.clone(),
                stdout,
                conn,
                stdout_done.clone(),
                reaped.clone(),
            )
            .instrument(span.clone()),
        );
        tasks.spawn(drain_stderr(upstream.clone(), stderr, noise, reaped.clone()).instrument(span));
        Ok(Self {
            upstream,
            child,
            pid,
            close_stdin,
            stdout_done,
            reaped,
        })
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.pid.map(|p| p.as_raw() as u32)
    }

    /// Waits until the child exits or closes its stdout, and says why.
    pub(crate) async fn wait_ended(&mut self) -> String {
        tokio::select! {
            status = self.child.wait() => describe(status),
            () = self.stdout_done.cancelled() => {
                // A dying child closes stdout just before it is reaped; its
                // exit status says more than the closed pipe does.
                match tokio::time::timeout(EXIT_AFTER_EOF, self.child.wait()).await {
                    Ok(status) => describe(status),
                    Err(_) => "closed its stdout".into(),
                }
            }
        }
    }

    /// Stops the child (close stdin, SIGTERM, SIGKILL) and reaps it.
    pub(crate) async fn stop(&mut self) -> String {
        let status = self.terminate().await;
        self.reaped.cancel();
        status
    }

    async fn terminate(&mut self) -> String {
        self.close_stdin.cancel();
        if let Ok(status) = tokio::time::timeout(STDIN_CLOSE_GRACE, self.child.wait()).await {
            return describe(status);
        }
        self.signal(Signal::SIGTERM);
        if let Ok(status) = tokio::time::timeout(TERM_GRACE, self.child.wait()).await {
            return describe(status);
        }
        tracing::warn!(upstream = %self.upstream, "child ignored SIGTERM; sending SIGKILL");
        self.signal(Signal::SIGKILL);
        describe(self.child.wait().await)
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid
            && let Err(e) = killpg(pid, signal)
        {
            tracing::debug!(upstream = %self.upstream, %signal, error = %e, "could not signal child group");
        }
    }
}

impl Drop for StdioChild {
    fn drop(&mut self) {
        // Normal paths call `stop`; this covers a supervisor task that was
        // aborted. The group kill also reaches grandchildren.
        if matches!(self.child.try_wait(), Ok(None)) {
            self.signal(Signal::SIGKILL);
        }
        self.reaped.cancel();
    }
}

fn describe(status: io::Result<ExitStatus>) -> String {
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(sig)) => {
                let name = Signal::try_from(sig)
                    .map(|s| s.as_str())
                    .unwrap_or("unknown");
                format!("was killed by signal {sig} ({name})")
            }
            _ => "exited".into(),
        },
        Err(e) => format!("could not be waited for: {e}"),
    }
}

async fn write_stdin(
    upstream: Arc<str>,
    mut stdin: tokio::process::ChildStdin,
    mut outbound: mpsc::Receiver<Outgoing>,
    close: CancellationToken,
) {
    loop {
        let frame = tokio::select! {
            () = close.cancelled() => break,
            frame = outbound.recv() => match frame {
                Some(f) => f,
                None => break,
            },
        };
        // Frame and newline in one writev (a pipe needs no flush).
        let mut line = bytes::Buf::chain(frame.frame, &b"\n"[..]);
        let write = stdin.write_all_buf(&mut line);
        if let Err(e) = write.await {
            tracing::debug!(upstream = %upstream, error = %e, "child stdin closed");
            break;
        }
    }
    // Dropping stdin closes the child's end of the pipe.
}

async fn read_stdout(
    upstream: Arc<str>,
    stdout: tokio::process::ChildStdout,
    conn: Arc<Connection>,
    done: CancellationToken,
    reaped: CancellationToken,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line = Vec::new();
    loop {
        let read = tokio::select! {
            read = read_line_capped(&mut reader, &mut line, MAX_MESSAGE_BYTES) => read,
            () = reaped.cancelled() => break,
        };
        match read {
            Ok(None) => break,
            Ok(Some(true)) => {
                tracing::warn!(upstream = %upstream, limit = MAX_MESSAGE_BYTES, "message from child exceeds the size limit; skipped");
            }
            Ok(Some(false)) => match std::str::from_utf8(&line) {
                Ok(text) if text.trim().is_empty() => {}
                Ok(text) => conn.dispatch(text.trim_end_matches('\r')).await,
                Err(_) => {
                    tracing::warn!(upstream = %upstream, "child wrote a line that is not UTF-8; skipped")
                }
            },
            Err(e) => {
                tracing::debug!(upstream = %upstream, error = %e, "child stdout read failed");
                break;
            }
        }
    }
    done.cancel();
}

/// Logs the child's stderr within its [`NoiseFilter`] quota; the rest is
/// read and dropped, so a flood never holds the child back.
async fn drain_stderr(
    upstream: Arc<str>,
    stderr: tokio::process::ChildStderr,
    noise: Arc<NoiseFilter>,
    reaped: CancellationToken,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stderr);
    let mut line = Vec::new();
    loop {
        let read = tokio::select! {
            read = read_line_capped(&mut reader, &mut line, MAX_STDERR_LINE) => read,
            () = reaped.cancelled() => break,
        };
        if !matches!(read, Ok(Some(_))) {
            break;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Some(suppressed) = noise.admit() else {
            continue;
        };
        if suppressed > 0 {
            tracing::warn!(target: "mcpmux::upstream::stderr", upstream = %upstream, suppressed, "{suppressed} lines suppressed (log rate limit)");
        }
        let text = String::from_utf8_lossy(&line);
        tracing::info!(target: "mcpmux::upstream::stderr", upstream = %upstream, "{}", text.trim_end());
    }
}

/// Reads one `\n`-terminated line into `buf` (without the newline), keeping
/// at most `max` bytes and discarding the rest of an over-long line. Returns
/// `None` at end of input, or whether the line was cut.
pub(crate) async fn read_line_capped<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Option<bool>> {
    buf.clear();
    let mut cut = false;
    let mut any = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(any.then_some(cut));
        }
        any = true;
        let (chunk, found) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..i], Some(i)),
            None => (available, None),
        };
        let room = max.saturating_sub(buf.len());
        if chunk.len() > room {
            cut = true;
        }
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let consumed = found.map_or(available.len(), |i| i + 1);
        reader.consume(consumed);
        if found.is_some() {
            return Ok(Some(cut));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn capped_lines_cut_and_resume() {
        let input: &[u8] = b"short\nthis line is too long\nok";
        let mut reader = BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        assert_eq!(
            read_line_capped(&mut reader, &mut buf, 8).await.unwrap(),
            Some(false)
        );
        assert_eq!(buf, b"short");
        assert_eq!(
            read_line_capped(&mut reader, &mut buf, 8).await.unwrap(),
            Some(true)
        );
        assert_eq!(buf, b"this lin");
        assert_eq!(
            read_line_capped(&mut reader, &mut buf, 8).await.unwrap(),
            Some(false)
        );
        assert_eq!(buf, b"ok");
        assert_eq!(
            read_line_capped(&mut reader, &mut buf, 8).await.unwrap(),
            None
        );
    }
}
