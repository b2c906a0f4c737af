//! `mcpmux serve` as a child process, with its JSON log lines read as they
//! come, for tests of the binary: the demo config, signals, reload.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::{exe, within};

/// A running `mcpmux serve` whose JSON log lines are read as they come.
pub struct Served {
    pub child: Child,
    logs: mpsc::UnboundedReceiver<(String, Option<Value>)>,
    /// Set to stop reading the gateway's stderr while keeping the pipe
    /// open: the gateway then writes to a pipe nobody reads.
    stop_reading: tokio::sync::watch::Sender<bool>,
    /// Every log line read so far, in order, raw and parsed.
    seen: Vec<(String, Option<Value>)>,
}

impl Served {
    pub fn start(args: &[&str]) -> Served {
        Self::start_with_env(args, &[])
    }

    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Served {
        // Port 0 on loopback unless the test names its own address.
        let listen: &[&str] = match args.contains(&"--listen") {
            true => &[],
            false => &["--listen", "127.0.0.1:0"],
        };
        let mut child = Command::new(exe())
            .args(["serve", "--log-format", "json"])
            .args(listen)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, logs) = mpsc::unbounded_channel();
        let (stop_reading, mut stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            loop {
                let line = tokio::select! {
                    line = lines.next_line() => line,
                    _ = stopped.wait_for(|stop| *stop) => break,
                };
                let Ok(Some(line)) = line else { return };
                let parsed = serde_json::from_str::<Value>(&line).ok();
                let _ = tx.send((line, parsed));
            }
            // Holds the pipe open, unread, until the test ends.
            std::future::pending::<()>().await;
            drop(lines);
        });
        Served {
            child,
            logs,
            stop_reading,
            seen: Vec::new(),
        }
    }

    /// Stops reading the gateway's stderr; the pipe stays open and fills.
    pub fn stop_reading_logs(&self) {
        self.stop_reading.send_replace(true);
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the gateway is running")
    }

    /// Reads log lines until `n` have `message`; returns their fields.
    pub async fn wait_for(&mut self, message: &str, n: usize) -> Vec<Value> {
        within(message, async {
            loop {
                let found: Vec<Value> = self
                    .seen
                    .iter()
                    .filter_map(|(_, parsed)| parsed.as_ref())
                    .filter(|l| l["fields"]["message"] == message)
                    .map(|l| l["fields"].clone())
                    .collect();
                if found.len() >= n {
                    return found;
                }
                let line = self
                    .logs
                    .recv()
                    .await
                    .unwrap_or_else(|| panic!("log ended before {message:?}"));
                self.seen.push(line);
            }
        })
        .await
    }

    /// Waits for the process to exit and returns every line it logged.
    pub async fn finish(mut self) -> (std::process::ExitStatus, String) {
        let status = within("mcpmux to exit", self.child.wait()).await.unwrap();
        // A log nobody read since `stop_reading_logs` never ends.
        let reading = !*self.stop_reading.borrow();
        while reading && let Some(line) = within("the rest of the log", self.logs.recv()).await {
            self.seen.push(line);
        }
        let text = self
            .seen
            .iter()
            .map(|(raw, _)| raw.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        (status, text)
    }

    /// The address the gateway logged it listens on (`host:port`).
    pub async fn listening_addr(&mut self) -> String {
        self.first("mcpmux listening; MCP endpoint at /mcp").await["addr"]
            .as_str()
            .expect("the listening line names its address")
            .to_owned()
    }

    /// The fields of the first log line with `message`.
    pub async fn first(&mut self, message: &str) -> Value {
        self.wait_for(message, 1).await.remove(0)
    }

    /// Sends `signal` to the gateway process.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
    }
}
