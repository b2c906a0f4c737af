//! What a soak run records, shared by the parts that fill it (the sampler,
//! the load, the fault schedule, the verifier) and the report that writes
//! it out.

use std::collections::BTreeMap;

/// One reading of one replica's process, once a second.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Seconds since the load started (negative while idle before it).
    pub at_s: f64,
    /// Which replica slot (0 or 1); a restarted replica keeps its slot.
    pub replica: usize,
    pub pid: u32,
    /// Resident set size, from /proc/PID/status (VmRSS).
    pub rss_kb: u64,
    /// Open file descriptors, from /proc/PID/fd.
    pub fds: u64,
    /// Live tokio tasks, from the replica's `mcpmux_tasks` gauge.
    pub tasks: Option<u64>,
    /// Live sessions, from `mcpmux_sessions`.
    pub sessions: Option<u64>,
    /// Child processes (stdio upstreams), from /proc.
    pub children: u64,
    /// Open downstream HTTP connections, from `mcpmux_http_connections`.
    pub connections: Option<u64>,
}

/// Call latency over one minute of the run.
#[derive(Debug, Clone)]
pub struct LatencyMinute {
    pub minute: u32,
    pub calls: u64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// A fault as it was injected.
#[derive(Debug, Clone)]
pub struct Fault {
    pub at_s: f64,
    pub what: String,
}

/// One check of the verifier and what it found.
#[derive(Debug, Clone)]
pub struct Finding {
    pub check: String,
    pub passed: bool,
    /// Counts and, when it failed, the first offending cases.
    pub detail: String,
}

/// The whole run, as the report shows it.
#[derive(Debug, Clone, Default)]
pub struct Run {
    pub minutes: f64,
    /// The machine, one line per fact (CPU, memory, kernel).
    pub machine: Vec<String>,
    /// Requests sent, by kind (`call`, `list`, `subscribe`, ...).
    pub sent: BTreeMap<String, u64>,
    /// Outcomes: `ok`, `rpc <code>`, `http <status>`, `transport`.
    pub outcomes: BTreeMap<String, u64>,
    pub faults: Vec<Fault>,
    pub samples: Vec<Sample>,
    pub latency: Vec<LatencyMinute>,
    /// The same per replica slot of the sessions (`replica 0`, ...), then
    /// for the stateless calls (`stateless`).
    pub latency_by: Vec<(String, Vec<LatencyMinute>)>,
    pub findings: Vec<Finding>,
    /// Idle figures per replica, before the load and after it: (what, before, after).
    pub idle: Vec<(String, u64, u64)>,
}

impl Run {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        !self.findings.is_empty() && self.findings.iter().all(|f| f.passed)
    }
}

/// The samples as CSV with a header line, for reading them again.
pub fn samples_csv(samples: &[Sample]) -> String {
    let mut out = String::from("at_s,replica,pid,rss_kb,fds,connections,tasks,sessions,children\n");
    let or_empty = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    for s in samples {
        out.push_str(&format!(
            "{:.1},{},{},{},{},{},{},{},{}\n",
            s.at_s,
            s.replica,
            s.pid,
            s.rss_kb,
            s.fds,
            or_empty(s.connections),
            or_empty(s.tasks),
            or_empty(s.sessions),
            s.children
        ));
    }
    out
}
