//! The `mcpmux` binary: the embedded demo, `check`, config errors, signals.

use tokio::process::Command;

use crate::support::gateway::with_auth_off;
use crate::support::served::Served;
use crate::support::{McpClient, exe, process_exists, tempdir, within};

#[tokio::test]
async fn demo_config_serves_two_prefixed_upstreams_and_sigterm_leaves_no_child() {
    let mut served = Served::start(&[]);
    let listening = served
        .wait_for("mcpmux listening; MCP endpoint at /mcp", 1)
        .await;
    let url = format!("http://{}/mcp", listening[0]["addr"].as_str().unwrap());
    let started = served.wait_for("started upstream child", 2).await;
    let pids: Vec<u32> = started
        .iter()
        .map(|f| f["pid"].as_u64().unwrap() as u32)
        .collect();
    served.wait_for("upstream ready", 2).await;

    let client = McpClient::connect(&url).await;
    let (tools, _) = client.list_all("tools/list", "tools").await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(
        names.contains(&"notes__echo") && names.contains(&"weather__echo"),
        "{names:?}"
    );
    let (prompts, _) = client.list_all("prompts/list", "prompts").await;
    assert!(prompts.len() >= 2);
    let (templates, _) = client
        .list_all("resources/templates/list", "resourceTemplates")
        .await;
    assert!(templates.len() >= 2);

    assert!(pids.iter().all(|p| process_exists(*p)));
    served.signal(nix::sys::signal::Signal::SIGTERM);
    let status = within("mcpmux to exit after SIGTERM", served.child.wait())
        .await
        .unwrap();
    assert!(status.success(), "exit status {status}");
    for pid in pids {
        assert!(
            !process_exists(pid),
            "upstream child {pid} outlived the gateway"
        );
    }
}

async fn check(yaml: &str) -> (i32, String, String) {
    check_as(yaml, &["check", "--config"]).await
}

/// `mcpmux` with `args` and then the path of a file holding `yaml`.
async fn check_as(yaml: &str, args: &[&str]) -> (i32, String, String) {
    let path = tempdir().join("mcpmux.yaml");
    std::fs::write(&path, with_auth_off(yaml)).unwrap();
    let out = Command::new(exe())
        .args(args)
        .arg(&path)
        .env_remove("MCPMUX_TEST_UNSET")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        out.status.code().unwrap_or(-1),
        stdout,
        stderr.replace(path.to_str().unwrap(), "FILE"),
    )
}

#[tokio::test]
async fn config_errors_exit_64_with_one_line_naming_line_and_column() {
    let cases = [
        (
            "upstreams:\n  a:\n    command: x\n    colour: blue\n",
            "FILE:4:5:",
            "colour",
        ),
        (
            "upstreams:\n  Bad_Name:\n    command: x\n",
            "FILE:2:3:",
            "Bad_Name",
        ),
        (
            "upstreams:\n  a:\n    command: x\n    env:\n      K: ${MCPMUX_TEST_UNSET}\n",
            "FILE:5:10:",
            "MCPMUX_TEST_UNSET",
        ),
        (
            "upstreams:\n  a:\n    command: x\n    isolation: per-session\n    max_instances: 0\n",
            "FILE:5:20:",
            "max_instances",
        ),
        (
            "upstreams:\n  a:\n    command: x\n    isolation: per-user\n",
            "FILE:4:16:",
            "per-user",
        ),
    ];
    for (yaml, location, mention) in cases {
        let (code, _, stderr) = check(yaml).await;
        assert_eq!(code, 64, "{stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {stderr}");
        assert!(lines[0].contains(location), "{location} in {stderr}");
        assert!(lines[0].contains(mention), "{mention} in {stderr}");
    }
}

#[tokio::test]
async fn check_validates_without_serving() {
    // The command does not exist: `check` must not try to start it.
    let (code, stdout, stderr) =
        check("upstreams:\n  a:\n    command: /nonexistent/server\n").await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("ok (1 upstreams)"), "{stdout}");
}

#[tokio::test]
async fn serve_with_a_bad_config_exits_64() {
    let path = tempdir().join("bad.yaml");
    std::fs::write(
        &path,
        with_auth_off("listen: nowhere\nupstreams:\n  a:\n    command: x\n"),
    )
    .unwrap();
    let out = Command::new(exe())
        .args(["serve", "--config", path.to_str().unwrap()])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(":1:9:") && stderr.contains("listen"),
        "{stderr}"
    );
}

#[tokio::test]
async fn header_secrets_reach_the_upstream_and_never_the_logs() {
    let secret = format!("tok-{:x}", std::process::id() as u64 * 7919 + 12345);
    let py = crate::support::peer::HttpPeer::python("streamable-http", 0).await;
    let path = tempdir().join("remote.yaml");
    let yaml = format!(
        "upstreams:\n  py:\n    url: {:?}\n    headers:\n      Authorization: \"Bearer ${{MCPMUX_TEST_TOKEN}}\"\n",
        py.url("/mcp")
    );
    std::fs::write(&path, with_auth_off(&yaml)).unwrap();
    let mut served = Served::start_with_env(
        &["--config", path.to_str().unwrap()],
        &[("MCPMUX_TEST_TOKEN", &secret), ("RUST_LOG", "trace")],
    );
    let listening = served
        .wait_for("mcpmux listening; MCP endpoint at /mcp", 1)
        .await;
    served.wait_for("upstream ready", 1).await;
    let url = format!("http://{}/mcp", listening[0]["addr"].as_str().unwrap());
    let client = McpClient::connect(&url).await;
    let whoami = client.call_tool("py__whoami", serde_json::json!({})).await;
    assert_eq!(
        whoami["result"]["content"][0]["text"],
        format!("Bearer {secret}"),
        "{whoami}"
    );

    served.signal(nix::sys::signal::Signal::SIGTERM);
    let (status, log) = served.finish().await;
    assert!(status.success(), "{status}");
    // Nothing of ours logs at TRACE; DEBUG lines show the filter let
    // everything through.
    assert!(
        log.contains(r#""level":"DEBUG""#),
        "trace logging was on: {log}"
    );
    let leaked: Vec<&str> = log.lines().filter(|l| l.contains(&secret)).collect();
    assert!(
        leaked.is_empty(),
        "the secret leaked into the log: {leaked:?}"
    );
}

#[tokio::test]
async fn check_takes_the_file_as_an_argument_too() {
    let yaml = "upstreams:\n  a:\n    command: /nonexistent/server\n";
    let (code, stdout, stderr) = check_as(yaml, &["check"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("ok (1 upstreams)"), "{stdout}");
    let (code, _, stderr) = check_as("upstreams:\n  a:\n    colour: x\n", &["check"]).await;
    assert_eq!(code, 64, "{stderr}");
    assert!(stderr.contains("FILE:3:5:"), "{stderr}");
    // Both at once is a usage error, not a guess.
    let (code, _, stderr) = check_as(yaml, &["check", "other.yaml", "--config"]).await;
    assert_eq!(code, 2, "{stderr}");
}

#[tokio::test]
async fn listen_takes_a_host_name() {
    let mut served = Served::start(&["--listen", "localhost:0"]);
    let listening = served
        .wait_for("mcpmux listening; MCP endpoint at /mcp", 1)
        .await;
    let addr: std::net::SocketAddr = listening[0]["addr"].as_str().unwrap().parse().unwrap();
    assert!(addr.ip().is_loopback(), "{addr}");
    let client = McpClient::connect(&format!("http://{addr}/mcp")).await;
    let (tools, _) = client.list_all("tools/list", "tools").await;
    assert!(!tools.is_empty());
    served.signal(nix::sys::signal::Signal::SIGTERM);
    let status = within("mcpmux to exit", served.child.wait()).await.unwrap();
    assert!(status.success(), "{status}");
}

/// Runs `mcpmux ARGS`: its exit code, stdout and stderr.
async fn run(args: &[&str]) -> (i32, String, String) {
    crate::support::run_mcpmux(args, &[]).await
}

#[tokio::test]
async fn help_completions_and_man_page_come_from_the_cli_itself() {
    let (code, help, _) = run(&["serve", "--help"]).await;
    assert_eq!(code, 0);
    for needle in ["127.0.0.1:8080", "RUST_LOG", "SIGHUP", "Reload", "64"] {
        assert!(help.contains(needle), "{needle} in serve --help:\n{help}");
    }
    let (code, bash, _) = run(&["completions", "bash"]).await;
    assert_eq!(code, 0);
    assert!(
        bash.contains("complete") && bash.contains("import"),
        "{bash}"
    );
    let (code, man, _) = run(&["man"]).await;
    assert_eq!(code, 0);
    assert!(
        man.starts_with(".ie") || man.contains(".TH mcpmux"),
        "{man}"
    );
    assert!(man.contains("serve"), "{man}");
}

/// A config whose upstream `crm` lets users connect their accounts, with
/// the token file in `dir` (the URL is never called by these tests).
fn user_mode_yaml(dir: &std::path::Path) -> String {
    format!(
        "auth:\n  mode: on\n  api_keys:\n    - client: alice\n      key: alice-key-5b0e7c19a2d3\ncredentials:\n  key: MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n  path: {}\nupstreams:\n  crm:\n    url: http://127.0.0.1:9/mcp\n    auth:\n      mode: user\n      client_id: mcpmux\n      client_secret: s3cret\n  notes:\n    command: /nonexistent/server\n",
        dir.join("tokens.json").display()
    )
}

#[tokio::test]
async fn connections_of_an_empty_store_list_nothing_and_revoke_nothing() {
    let dir = tempdir();
    let config = dir.join("gateway.yaml");
    std::fs::write(&config, user_mode_yaml(&dir)).unwrap();
    let config = config.to_str().unwrap();

    // No token file yet: nothing listed, and a note that names the path.
    let (code, stdout, stderr) = run(&["connections", "list", "--config", config]).await;
    assert_eq!((code, stdout.as_str()), (0, ""), "{stderr}");
    assert!(stderr.contains("tokens.json"), "{stderr}");
    assert!(!dir.join("tokens.json").exists(), "listing creates no file");

    std::fs::write(dir.join("tokens.json"), "{\"version\":1,\"grants\":[]}\n").unwrap();
    let (code, stdout, stderr) = run(&["connections", "list", "--config", config]).await;
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "", ""));
    let (code, stdout, stderr) = run(&[
        "connections",
        "list",
        "--config",
        config,
        "--json",
        "--upstream",
        "crm",
        "--client",
        "alice",
    ])
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim(), "[]");

    let revoke = [
        "connections",
        "revoke",
        "--config",
        config,
        "--upstream",
        "crm",
        "--client",
        "alice",
    ];
    let (code, stdout, stderr) = run(&revoke).await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert_eq!(stdout, "");
    assert_eq!(
        stderr, "mcpmux: `alice` has no grant at upstream `crm`\n",
        "one clear line"
    );
}

#[tokio::test]
async fn connections_need_an_upstream_users_connect_to() {
    let dir = tempdir();
    let config = dir.join("gateway.yaml");
    std::fs::write(&config, user_mode_yaml(&dir)).unwrap();
    let config = config.to_str().unwrap();
    let wrong = [
        (
            vec!["revoke", "--upstream", "notes", "--client", "alice"],
            "notes",
        ),
        (
            vec!["revoke", "--upstream", "nope", "--client", "alice"],
            "nope",
        ),
        (vec!["list", "--upstream", "nope"], "nope"),
    ];
    for (args, mention) in wrong {
        let mut all = vec!["connections", args[0], "--config", config];
        all.extend_from_slice(&args[1..]);
        let (code, _, stderr) = run(&all).await;
        assert_eq!(code, 64, "{all:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(mention), "{mention} in {stderr}");
    }

    // No upstream lets users connect: there is no store to read.
    let (code, _, stderr) = check_as(
        "upstreams:\n  a:\n    command: /nonexistent/server\n",
        &["connections", "list", "--config"],
    )
    .await;
    assert_eq!(code, 64, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("auth.mode: user"), "{stderr}");
    // A config that does not load: its errors, as `check` gives them.
    let (code, _, stderr) = check_as(
        "upstreams:\n  a:\n    colour: x\n",
        &["connections", "list", "--config"],
    )
    .await;
    assert_eq!(code, 64, "{stderr}");
    assert!(stderr.contains("FILE:3:5:"), "{stderr}");
}
