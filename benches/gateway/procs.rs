//! The child processes (floor servers and the gateway: spawned with
//! `kill_on_drop`, stopped and reaped by `stop`) and what `/proc` says of
//! them: CPU time, context switches, resident memory, children.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

use crate::client::Conn;
use crate::{Res, fail};

/// How long a child may take to say where it listens.
const ADDRESS_WAIT: Duration = Duration::from_secs(30);
/// How long a stopped child may take to exit after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// `/proc/<pid>/stat` counts CPU time in USER_HZ ticks, 100 per second on Linux.
const TICKS_PER_SECOND: u64 = 100;

/// A child process: killed when dropped (a panic or an error), stopped with
/// SIGTERM and reaped by [`Proc::stop`].
pub struct Proc {
    child: Child,
    pub pid: u32,
    pub name: String,
    /// Kept open so the child sees EOF when the benchmark goes away.
    _stdin: Option<tokio::process::ChildStdin>,
}

impl Proc {
    fn spawn(name: &str, mut cmd: Command) -> Res<Proc> {
        cmd.stdin(Stdio::piped()).kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| fail(format!("cannot start {name}: {e}")))?;
        let pid = child
            .id()
            .ok_or_else(|| fail(format!("{name} exited at once")))?;
        let stdin = child.stdin.take();
        Ok(Proc {
            child,
            pid,
            name: name.to_owned(),
            _stdin: stdin,
        })
    }

    /// SIGTERM, then SIGKILL after a grace period; reaps the child.
    pub async fn stop(mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        if let Ok(pid) = i32::try_from(self.pid) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        if tokio::time::timeout(STOP_GRACE, self.child.wait())
            .await
            .is_err()
        {
            eprintln!("{} did not stop on SIGTERM; killing it", self.name);
            let _ = self.child.kill().await;
        }
    }
}

/// Starts `exe floor http --tools N --threads T`; it prints its address on stdout.
pub async fn floor_http(exe: &Path, tools: usize, threads: usize) -> Res<(Proc, SocketAddr)> {
    floor_http_with(exe, tools, threads, &[]).await
}

/// [`floor_http`] with more arguments (`--stall`).
pub async fn floor_http_with(
    exe: &Path,
    tools: usize,
    threads: usize,
    more: &[&str],
) -> Res<(Proc, SocketAddr)> {
    let mut cmd = Command::new(exe);
    cmd.args(["floor", "http", "--tools", &tools.to_string()])
        .args(["--threads", &threads.to_string()])
        .args(more)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    listening("floor", cmd).await
}

/// The bare proxy (`gateway proxy`) in front of the floor at `upstream`,
/// on tokio's default multi-thread runtime, as the gateway runs.
pub async fn proxy(exe: &Path, upstream: SocketAddr) -> Res<(Proc, SocketAddr)> {
    let mut cmd = Command::new(exe);
    cmd.args(["proxy", "--upstream", &upstream.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    listening("proxy", cmd).await
}

/// Spawns `cmd` and reads the `listening ADDR` line it prints first.
async fn listening(name: &'static str, cmd: Command) -> Res<(Proc, SocketAddr)> {
    let mut proc = Proc::spawn(name, cmd)?;
    let stdout = proc.child.stdout.take().expect("stdout is piped");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(ADDRESS_WAIT, lines.next_line())
        .await
        .map_err(|_| fail(format!("the {name} did not say where it listens")))??
        .ok_or_else(|| fail(format!("the {name} exited before listening")))?;
    let addr = line
        .strip_prefix("listening ")
        .ok_or_else(|| fail(format!("unexpected {name} output: {line}")))?
        .parse()?;
    Ok((proc, addr))
}

/// A running gateway and where it listens.
pub struct Gateway {
    pub proc: Proc,
    pub addr: SocketAddr,
    /// When the process was spawned.
    pub spawned: Instant,
}

/// Starts `mcpmux serve --config FILE --listen 127.0.0.1:0 --log-format json`
/// and reads its address from the "mcpmux listening" log line; the rest of
/// its log is read and dropped by a task.
pub async fn gateway(mcpmux: &Path, config: &Path) -> Res<Gateway> {
    let mut cmd = Command::new(mcpmux);
    cmd.arg("serve")
        .arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0", "--log-format", "json"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let spawned = Instant::now();
    let mut proc = Proc::spawn("mcpmux", cmd)?;
    let stderr = proc.child.stderr.take().expect("stderr is piped");
    let (found, address) = oneshot::channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        let mut found = Some(found);
        let mut last = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            if found.is_none() {
                continue;
            }
            if line.contains("mcpmux listening") {
                let addr = serde_json::from_str::<serde_json::Value>(&line)
                    .ok()
                    .and_then(|v| v.pointer("/fields/addr")?.as_str()?.parse().ok());
                if let (Some(tx), Some(addr)) = (found.take(), addr) {
                    let _ = tx.send(Ok(addr));
                }
            } else if last.len() < 20 {
                last.push(line);
            }
        }
        if let Some(tx) = found {
            let _ = tx.send(Err(last.join("\n")));
        }
    });
    let addr = match tokio::time::timeout(ADDRESS_WAIT, address).await {
        Ok(Ok(Ok(addr))) => addr,
        Ok(Ok(Err(log))) => return Err(fail(format!("mcpmux exited before listening:\n{log}"))),
        _ => return Err(fail("mcpmux did not log its address")),
    };
    Ok(Gateway {
        proc,
        addr,
        spawned,
    })
}

/// Polls `GET /readyz` until 200; the time since `since`.
pub async fn wait_ready(addr: SocketAddr, since: Instant, bound: Duration) -> Res<Duration> {
    let deadline = since + bound;
    while Instant::now() < deadline {
        if let Ok(mut conn) = Conn::connect(addr).await {
            // Several polls per connection; a new one if it breaks.
            for _ in 0..1000 {
                match conn.get_status("/readyz").await {
                    Ok(s) if s.is_success() => return Ok(since.elapsed()),
                    Ok(_) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    _ => break,
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Err(fail(format!(
        "mcpmux at {addr} not ready within {}s",
        bound.as_secs()
    )))
}

/// The fewest ticks of utime + stime that [`Usage::user_cpu_us`] splits.
const SPLIT_TICKS: u64 = 20;

/// A process's CPU time and context switches at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// The sum of its live threads' run time (`/proc/<pid>/task/*/schedstat`,
    /// in nanoseconds), in µs.
    pub cpu_us: u64,
    /// utime + stime of `/proc/<pid>/stat` (all threads, exited ones
    /// included, in 10 ms ticks), in µs: the cross-check of `cpu_us`.
    pub ticks_us: u64,
    /// utime alone (the same ticks), in µs: the user-space part of
    /// `ticks_us`, the rest being the kernel's work for the process.
    pub user_ticks_us: u64,
    /// Voluntary and involuntary context switches of its live threads.
    pub switches: u64,
}

impl Usage {
    pub fn of(pid: u32) -> Res<Usage> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .ok_or_else(|| fail("malformed stat"))?
            .1
            .split_whitespace()
            .collect();
        // Fields 14 and 15 of proc_pid_stat(5), counted from the state (field 3).
        let user: u64 = fields[11].parse()?;
        let ticks: u64 = user + fields[12].parse::<u64>()?;
        let (mut run_ns, mut switches) = (0, 0);
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let task = task?.path();
            // A thread that ended meanwhile has neither file.
            if let Ok(schedstat) = std::fs::read_to_string(task.join("schedstat")) {
                run_ns += schedstat
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
            }
            if let Ok(status) = std::fs::read_to_string(task.join("status")) {
                switches += status
                    .lines()
                    .filter(|l| l.contains("ctxt_switches:"))
                    .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                    .sum::<u64>();
            }
        }
        Ok(Usage {
            cpu_us: run_ns / 1000,
            ticks_us: ticks * 1_000_000 / TICKS_PER_SECOND,
            user_ticks_us: user * 1_000_000 / TICKS_PER_SECOND,
            switches,
        })
    }

    /// What was used since `earlier`; says so on stderr when the two CPU
    /// counters disagree by more than their resolution allows.
    pub fn since(self, earlier: Usage) -> Usage {
        let used = Usage {
            cpu_us: self.cpu_us.saturating_sub(earlier.cpu_us),
            ticks_us: self.ticks_us.saturating_sub(earlier.ticks_us),
            user_ticks_us: self.user_ticks_us.saturating_sub(earlier.user_ticks_us),
            switches: self.switches.saturating_sub(earlier.switches),
        };
        let slack = 30_000 + used.cpu_us / 10;
        if used.cpu_us.abs_diff(used.ticks_us) > slack {
            eprintln!(
                "note: threads' run time {} µs but stat's utime+stime {} µs (threads that ended are missing from the first)",
                used.cpu_us, used.ticks_us
            );
        }
        used
    }

    /// `cpu_us`'s user-space part: its share of utime in utime + stime;
    /// none over fewer than [`SPLIT_TICKS`] ticks, where one tick more or
    /// less would move the share by more than a few percent (a `--quick`
    /// run's windows are that short).
    pub fn user_cpu_us(&self) -> Option<f64> {
        (self.ticks_us >= SPLIT_TICKS * 1_000_000 / TICKS_PER_SECOND)
            .then(|| self.cpu_us as f64 * self.user_ticks_us as f64 / self.ticks_us as f64)
    }
}

/// The calling thread's run time so far, in ns (`/proc/thread-self/schedstat`).
pub fn thread_cpu_ns() -> Res<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")?
        .split_whitespace()
        .next()
        .and_then(|ns| ns.parse().ok())
        .ok_or_else(|| fail("unreadable /proc/thread-self/schedstat"))
}

/// Resident memory (`VmRSS`) in bytes.
pub fn rss(pid: u32) -> Res<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .ok_or_else(|| fail("no VmRSS"))?;
    Ok(kb * 1024)
}

/// The processes whose parent is `pid`.
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse()
                        .ok()
                })
                == Some(pid)
        })
        .collect()
}

/// Raises this process's open-file limit to the hard limit; the new limit.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(_) => soft,
        },
        Ok((soft, _)) => soft,
        Err(_) => 1024,
    }
}

/// A scratch directory for generated configs, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new() -> Res<Scratch> {
        let dir = std::env::temp_dir().join(format!("mcpmux-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }

    /// Writes `text` to `name` in the directory; its path.
    pub fn write(&self, name: &str, text: &str) -> Res<PathBuf> {
        let path = self.0.join(name);
        std::fs::write(&path, text)?;
        Ok(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The machine, for the report's header: (what, value) pairs.
pub fn machine(mcpmux: &Path) -> Vec<(String, String)> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
        .map_or("unknown".to_owned(), |(_, m)| m.trim().to_owned());
    let cpus = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let kb: u64 = m
                .lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some(format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0))
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or("unknown".to_owned(), |k| k.trim().to_owned());
    vec![
        ("CPU".to_owned(), format!("{model} × {cpus}")),
        ("memory".to_owned(), memory),
        ("kernel".to_owned(), format!("Linux {kernel}")),
        ("rustc".to_owned(), output_of("rustc", &["--version"])),
        ("mcpmux".to_owned(), output_of(mcpmux, &["--version"])),
        // scripts/bench.sh says which build it measures.
        (
            "gateway build".to_owned(),
            std::env::var("MCPMUX_BUILD")
                .unwrap_or_else(|_| "not named (not run by scripts/bench.sh)".to_owned()),
        ),
        (
            "commit".to_owned(),
            output_of("git", &["describe", "--always", "--dirty", "--abbrev=10"]),
        ),
        ("date".to_owned(), utc_now()),
        ("load average at start".to_owned(), load_average()),
    ]
}

/// The 1, 5 and 15 minute load averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn output_of(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or("unknown".to_owned(), |o| {
            String::from_utf8_lossy(&o.stdout).trim().to_owned()
        })
}

/// The current time as `YYYY-MM-DD HH:MM UTC`.
fn utc_now() -> String {
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    // `YYYY-MM-DDTHH:MM:SSZ` -> `YYYY-MM-DD HH:MM UTC`
    format!("{} {} UTC", &stamp[..10], &stamp[11..16])
}
