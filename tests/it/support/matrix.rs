//! The fault matrix's harness: `mcpmux serve` as a child process (so its
//! file descriptors, memory and children can be read from `/proc`), a
//! bystander session on another upstream, and the checks every row ends
//! with: the bystander is still served, and nothing leaked.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use super::served::Served;
use super::{McpClient, tempdir, within};

/// Extra file descriptors a row may leave behind for a moment (sockets the
/// kernel has not finished closing, a log file rotation).
const FD_SLACK: usize = 6;

/// A gateway process under test.
pub struct Subject {
    pub served: Served,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// `{base}/mcp`
    pub url: String,
    /// The config file it serves (rewrite it to test reloads).
    pub config: PathBuf,
    bystander: McpClient,
    _bystander_stream: super::client::SseReader,
    bystander_tool: String,
    baseline: Baseline,
}

/// What the gateway looked like before the rows ran.
#[derive(Debug, Clone, Copy)]
pub struct Baseline {
    pub fds: usize,
    pub rss_kb: u64,
    pub children: usize,
}

impl Subject {
    /// Serves `yaml` (written to a fresh config file) with `env`, waits for
    /// `/readyz`, opens the bystander session and records the baseline.
    /// `bystander_tool` is the echo tool the bystander calls after each row
    /// (`b__echo`): it must belong to an upstream the rows leave alone.
    pub async fn start(yaml: &str, env: &[(&str, &str)], bystander_tool: &str) -> Subject {
        let config = tempdir().join("mcpmux.yaml");
        std::fs::write(&config, super::gateway::with_auth_off(yaml)).unwrap();
        let mut served = Served::start_with_env(&["--config", config.to_str().unwrap()], env);
        let listening = served
            .wait_for("mcpmux listening; MCP endpoint at /mcp", 1)
            .await;
        let base = format!("http://{}", listening[0]["addr"].as_str().unwrap());
        let url = format!("{base}/mcp");
        within("the gateway to be ready", async {
            let http = reqwest::Client::new();
            loop {
                let ready = http.get(format!("{base}/readyz")).send().await;
                if ready.is_ok_and(|r| r.status().is_success()) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        let bystander = McpClient::connect(&url).await;
        // An open notification stream keeps the bystander's session from
        // idling out or being evicted while rows run.
        let stream = bystander.listen(None).await;
        let mut subject = Subject {
            baseline: Baseline {
                fds: 0,
                rss_kb: 0,
                children: 0,
            },
            served,
            base,
            url,
            config,
            bystander,
            _bystander_stream: stream,
            bystander_tool: bystander_tool.to_owned(),
        };
        subject.assert_bystander_served("start").await;
        subject.baseline = subject.measure();
        subject
    }

    pub fn pid(&self) -> u32 {
        self.served.pid()
    }

    /// The gateway's open file descriptors, memory and child processes now.
    pub fn measure(&self) -> Baseline {
        Baseline {
            fds: fd_count(self.pid()),
            rss_kb: rss_kb(self.pid()),
            children: children_of(self.pid()).len(),
        }
    }

    pub fn baseline(&self) -> Baseline {
        self.baseline
    }

    /// Takes the baseline again (after a warm-up row).
    pub fn rebaseline(&mut self) {
        self.baseline = self.measure();
    }

    /// `/metrics` as text.
    pub async fn metrics(&self) -> String {
        let response = reqwest::get(format!("{}/metrics", self.base))
            .await
            .unwrap();
        response.text().await.unwrap()
    }

    /// The value of one metric line (`name{labels}`), 0 when absent.
    pub async fn metric(&self, series: &str) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }

    /// Polls `/status` until `upstream` satisfies `ready`, within the test deadline.
    pub async fn wait_upstream(
        &self,
        upstream: &str,
        what: &str,
        mut ready: impl FnMut(&Value) -> bool,
    ) -> Value {
        within(what, async {
            loop {
                let status = self.upstream_status(upstream).await;
                if ready(&status) {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    }

    /// Ends a row: the bystander is served, the row's clients end their
    /// sessions (DELETE) and go, and nothing leaked (see
    /// [`Self::assert_nothing_leaked`]).
    pub async fn end_row(&self, row: &str, clients: Vec<McpClient>, rss_slack_kb: u64) {
        self.assert_bystander_served(row).await;
        for client in clients {
            let deleted = client.delete().await;
            assert_eq!(deleted, reqwest::StatusCode::OK, "{row}: DELETE");
        }
        self.assert_nothing_leaked(row, 1, rss_slack_kb).await;
    }

    /// SIGTERM, then the gateway must exit 0 and leave no child behind.
    pub async fn stop(self) {
        let children = children_of(self.pid());
        self.served.signal(nix::sys::signal::Signal::SIGTERM);
        let (status, log) = self.served.finish().await;
        assert!(status.success(), "exit status {status}\n{log}");
        for child in children {
            assert!(
                !super::process_exists(child),
                "child {child} outlived the gateway"
            );
        }
    }

    /// `/status` as JSON.
    pub async fn status(&self) -> Value {
        let response = reqwest::get(format!("{}/status", self.base)).await.unwrap();
        serde_json::from_str(&response.text().await.unwrap()).unwrap()
    }

    /// One upstream's entry in `/status`.
    pub async fn upstream_status(&self, name: &str) -> Value {
        let status = self.status().await;
        status["upstreams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no upstream {name} in {status}"))
    }

    /// Row check: the bystander session's call to its upstream succeeds.
    pub async fn assert_bystander_served(&self, row: &str) {
        let text = format!("still here after {row}");
        let result = self
            .bystander
            .request(
                "tools/call",
                json!({ "name": self.bystander_tool, "arguments": { "message": text } }),
            )
            .await;
        let answered = result["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains(&text));
        assert!(answered, "{row}: the bystander was not served: {result}");
    }

    /// Row check: within the test deadline, the gateway is back to its
    /// baseline: as many children, at most a few more descriptors, RSS
    /// within `rss_slack_kb` of the baseline, and `sessions` sessions in
    /// `/status` (the bystander's included).
    pub async fn assert_nothing_leaked(&self, row: &str, sessions: u64, rss_slack_kb: u64) {
        let base = self.baseline;
        let mut last = (self.measure(), Value::Null);
        let settled = tokio::time::timeout(super::WAIT, async {
            loop {
                let now = self.measure();
                let status = self.status().await;
                last = (now, status["sessions"].clone());
                if now.children == base.children
                    && now.fds <= base.fds + FD_SLACK
                    && now.rss_kb <= base.rss_kb + rss_slack_kb
                    && status["sessions"] == sessions
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(
            settled.is_ok(),
            "{row}: the gateway did not return to its baseline {base:?} (+{FD_SLACK} fds, +{rss_slack_kb} KiB, {sessions} sessions): now {:?}, sessions {}",
            last.0,
            last.1
        );
    }
}

/// Open file descriptors of process `pid`.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Resident memory of process `pid` in KiB.
pub fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Live (not zombie) direct children of process `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            // "pid (comm) state ppid ...": comm may hold spaces, so split after ')'.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next().unwrap_or("Z");
            let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
            ppid == Some(pid) && state != "Z"
        })
        .collect()
}
