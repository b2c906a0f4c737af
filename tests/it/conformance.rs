//! The official MCP conformance suite (`@modelcontextprotocol/conformance`)
//! run against the gateway in front of the test fixture's conformance
//! fixture (`mcpmux-fixture --conformance`), for the 2026-07-28 and
//! 2025-11-25 requirement sets. The suite's exit status leaves out some
//! scenarios (the tasks extension's), so the test also reads the result
//! file the suite writes for every scenario (`-o DIR`:
//! `DIR/<scenario>-<time>/checks.json`) and fails on any check with status
//! `FAILURE`, naming the scenario, the check and its message.
//! tests/conformance/expected-failures.yaml stays empty.

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
    let results = tempdir();
    let output = tokio::process::Command::new(node())
        .arg(&suite)
        .args(["server", "--url", url])
        .args(selection)
        .arg("--expected-failures")
        .arg(&baseline)
        .arg("-o")
        .arg(&results)
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
    let (scenarios, checks, failures) = read_results(&results);
    assert!(
        scenarios > 0 && checks > 0,
        "conformance {what}: no scenario results under {}",
        results.display()
    );
    assert!(
        failures.is_empty(),
        "conformance {what}: {} failing checks:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("conformance {what}: {scenarios} scenarios, {checks} checks, none failed");
}

/// Every scenario's `checks.json` under `dir`: how many scenarios and
/// checks there were, and each failing check as `scenario: id: message`.
fn read_results(dir: &std::path::Path) -> (usize, usize, Vec<String>) {
    let (mut scenarios, mut checks, mut failures) = (0, 0, Vec::new());
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path().join("checks.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let scenario = path
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let list: Vec<serde_json::Value> = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not a list of checks: {e}", path.display()));
        scenarios += 1;
        for check in list {
            checks += 1;
            if check["status"] == "FAILURE" {
                failures.push(format!(
                    "{scenario}: {}: {}",
                    check["id"].as_str().unwrap_or("?"),
                    check["errorMessage"].as_str().unwrap_or("(no message)")
                ));
            }
        }
    }
    (scenarios, checks, failures)
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
