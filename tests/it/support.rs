//! Test support: a gateway harness on port 0, an MCP client over real HTTP,
//! and the locations of the third-party peers installed by
//! `scripts/setup-interop.sh`.

pub mod client;
pub mod gateway;
pub mod interop;
pub mod matrix;
pub mod oauth;
pub mod peer;
pub mod served;

pub use client::McpClient;
pub use gateway::{TestGateway, example_upstream, fixture_upstream};

use std::time::Duration;

/// Upper bound for any single wait in a test; a hang fails instead of stalling CI.
pub const WAIT: Duration = Duration::from_secs(30);

/// The `mcpmux` binary built for this test run.
pub fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_mcpmux")
}

/// The `mcpmux-fixture` binary built for this test run: the demo server
/// plus the test knobs and controls, or the conformance fixture.
pub fn fixture_exe() -> &'static str {
    env!("CARGO_BIN_EXE_mcpmux-fixture")
}

/// Where a test leaves a file for people to look at (a screenshot): the
/// cargo target directory.
pub fn artifact_path(name: &str) -> std::path::PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
        std::path::PathBuf::from,
    );
    std::fs::create_dir_all(&target).unwrap();
    target.join(name)
}

/// `GET url`, its body parsed as JSON.
pub async fn get_json(url: &str) -> serde_json::Value {
    let response = within(url, reqwest::get(url)).await.unwrap();
    let text = response.text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {text}"))
}

/// `GET url`, its body as text.
pub async fn get_text(url: &str) -> String {
    let response = within(url, reqwest::get(url)).await.unwrap();
    within(url, response.text()).await.unwrap()
}

/// Runs `fut` with the test-wide deadline.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

/// Runs `fut`, which drives a real browser through a login, with a
/// deadline that holds on a loaded 2-core machine.
pub async fn within_a_login<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    const LOGIN: std::time::Duration = std::time::Duration::from_secs(120);
    match tokio::time::timeout(LOGIN, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {LOGIN:?} waiting for {what}"),
    }
}

/// Runs `mcpmux ARGS` with `env` to the end: its exit code, stdout and stderr.
pub async fn run_mcpmux(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = within(
        "mcpmux",
        tokio::process::Command::new(exe())
            .args(args)
            .envs(env.iter().copied())
            .output(),
    )
    .await
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether process `pid` still exists (a zombie counts as gone for us only
/// once reaped, so this is true for zombies too).
pub fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A fresh directory under the system temp dir for one test's files.
pub fn tempdir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("mcpmux-it-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every JSON line of a file written by the fixture's `--record`.
pub fn read_jsonl(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
