//! The official MCP conformance suite (`@modelcontextprotocol/conformance`)
//! run against the gateway in front of the test fixture's conformance
//! fixture (`mcpmux-fixture --conformance`), for the 2026-07-28 and
//! 2025-11-25 requirement sets. Failures the gateway knowingly has are
//! listed, with reasons, in tests/conformance/expected-failures.yaml.

use crate::support::interop::{dir, node};
use crate::support::{TestGateway, fixture_exe, tempdir, within};

async fn run_suite(url: &str, requirements: &str) {
    run_cli(url, &["--requirements", requirements], requirements).await;
}

async fn run_cli(url: &str, selection: &[&str], what: &str) {
    let suite = dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    assert!(
        suite.exists(),
        "conformance suite missing: run scripts/setup-interop.sh"
    );
    let baseline = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/conformance/expected-failures.yaml");
    let output = tokio::process::Command::new(node())
        .arg(&suite)
        .args(["server", "--url", url])
        .args(selection)
        .arg("--expected-failures")
        .arg(&baseline)
        .arg("-o")
        .arg(tempdir())
        .kill_on_drop(true)
        .output();
    let output = within(&format!("conformance {what}"), output)
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "conformance {what} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("Passed") || stdout.contains("passed"),
        "no results printed:\n{stdout}"
    );
}

#[tokio::test]
async fn conformance_requirements_pass_through_the_gateway() {
    let yaml = format!(
        "upstreams:\n  fixture:\n    command: {exe:?}\n    args: [\"--name\", \"fixture\", \"--conformance\"]\n    prefix: \"\"\n    namespace_uris: false\n",
        exe = fixture_exe()
    );
    let gw = TestGateway::start(&yaml).await;
    run_suite(&gw.url, "2026-07-28").await;
    run_suite(&gw.url, "2025-11-25").await;
    // Not required by 2026-07-28, but the gateway processes the body, so it
    // must validate Mcp-Param-* headers of x-mcp-header tools.
    let custom = [
        "--scenario",
        "http-custom-header-server-validation",
        "--spec-version",
        "2026-07-28",
    ];
    run_cli(&gw.url, &custom, "http-custom-header-server-validation").await;
    gw.stop().await;
}
