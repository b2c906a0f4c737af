//! What a new user meets first: `mcpmux import` of the three host config
//! shapes (Claude Desktop, Cursor, VS Code), the config's JSON Schema
//! against every example in config/, and a host that never pages seeing
//! every tool.

use std::path::{Path, PathBuf};

use serde_json::json;
use tokio::process::Command;

use crate::support::{McpClient, TestGateway, exe, fixture_exe, tempdir, within};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `mcpmux ARGS` with `env`: exit code, stdout, stderr.
async fn mcpmux(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    crate::support::run_mcpmux(args, env).await
}

/// Imports `host` (written to a file named `name`) and checks the YAML
/// with `env` set: the YAML and the notes.
async fn import(name: &str, host: &str, env: &[(&str, &str)]) -> (String, String) {
    let dir = tempdir();
    let file = dir.join(name);
    std::fs::write(&file, host).unwrap();
    let (code, yaml, notes) = mcpmux(&["import", file.to_str().unwrap()], &[]).await;
    assert_eq!(code, 0, "{notes}");
    let imported = dir.join("imported.yaml");
    std::fs::write(&imported, &yaml).unwrap();
    let (code, ok, errors) = mcpmux(&["check", imported.to_str().unwrap()], env).await;
    assert_eq!(
        code, 0,
        "the imported YAML does not check:\n{yaml}\n{errors}"
    );
    assert!(ok.contains("ok ("), "{ok}");
    (yaml, notes)
}

#[tokio::test]
async fn claude_desktops_servers_become_upstreams_without_their_secrets() {
    let host = json!({
        "mcpServers": {
            "filesystem": {
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/ada/Desktop", "/Users/ada/Downloads"]
            },
            "GitHub": {
                "command": "docker",
                "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
                "env": { "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_exampleexampleexample" }
            },
            "old thing": { "command": "old-server", "disabled": true }
        },
        "globalShortcut": "Ctrl+Space"
    });
    let (yaml, notes) = import(
        "claude_desktop_config.json",
        &host.to_string(),
        &[("GITHUB_PERSONAL_ACCESS_TOKEN", "from-the-environment")],
    )
    .await;
    assert!(
        yaml.contains("  filesystem:\n    command: \"npx\""),
        "{yaml}"
    );
    assert!(yaml.contains("\"/Users/ada/Downloads\"]"), "{yaml}");
    assert!(yaml.contains("  github:\n"), "{yaml}");
    assert!(
        yaml.contains("\"GITHUB_PERSONAL_ACCESS_TOKEN\": \"${GITHUB_PERSONAL_ACCESS_TOKEN}\""),
        "{yaml}"
    );
    assert!(
        !yaml.contains("ghp_example"),
        "a secret reached the YAML:\n{yaml}"
    );
    assert!(
        !yaml.contains("old"),
        "a disabled server was imported:\n{yaml}"
    );
    for note in [
        "\"GitHub\" is named \"github\"",
        "\"old thing\": disabled",
        "top-level `globalShortcut` ignored",
        "GITHUB_PERSONAL_ACCESS_TOKEN",
    ] {
        assert!(notes.contains(note), "{note} in:\n{notes}");
    }
    assert!(
        !notes.contains("ghp_example"),
        "notes show the secret:\n{notes}"
    );
}

#[tokio::test]
async fn cursors_remote_servers_keep_their_headers_as_variables() {
    let host = json!({
        "mcpServers": {
            "linear": { "url": "https://mcp.linear.app/sse", "type": "sse" },
            "docs": {
                "url": "https://docs.example.com/mcp",
                "headers": { "Authorization": "Bearer sk-live-123" },
                "autoApprove": ["search"]
            },
            "local": { "command": "python", "args": ["-m", "my_server"], "cwd": "/srv/my" }
        }
    });
    let (yaml, notes) = import(
        "mcp.json",
        &host.to_string(),
        &[("DOCS_AUTHORIZATION", "Bearer from-env")],
    )
    .await;
    assert!(
        yaml.contains("  linear:\n    url: \"https://mcp.linear.app/sse\"\n    transport: sse\n"),
        "{yaml}"
    );
    assert!(
        yaml.contains("\"Authorization\": \"${DOCS_AUTHORIZATION}\""),
        "{yaml}"
    );
    assert!(yaml.contains("    cwd: \"/srv/my\""), "{yaml}");
    assert!(!yaml.contains("sk-live"), "{yaml}");
    assert!(
        notes.contains("docs: field `autoApprove` has no mcpmux equivalent"),
        "{notes}"
    );
}

#[tokio::test]
async fn vs_codes_servers_inputs_and_comments_are_read() {
    let host = r#"{
        // .vscode/mcp.json
        "inputs": [
            { "type": "promptString", "id": "perplexity-key", "description": "Perplexity API Key", "password": true }
        ],
        "servers": {
            "Perplexity": {
                "type": "stdio",
                "command": "npx",
                "args": ["-y", "server-perplexity-ask"],
                "env": { "PERPLEXITY_API_KEY": "${input:perplexity-key}" },
                "envFile": "${workspaceFolder}/.env",
            },
            "fetch": { "type": "http", "url": "http://127.0.0.1:3000/mcp" },
        },
    }"#;
    let (yaml, notes) = import("mcp.json", host, &[("PERPLEXITY_API_KEY", "k")]).await;
    assert!(
        yaml.contains("  perplexity:\n    command: \"npx\""),
        "{yaml}"
    );
    assert!(
        yaml.contains(
            "  fetch:\n    url: \"http://127.0.0.1:3000/mcp\"\n    transport: streamable-http\n"
        ),
        "{yaml}"
    );
    for note in [
        "`inputs`",
        "VS Code input `perplexity-key` becomes the variable PERPLEXITY_API_KEY",
        "perplexity: `envFile` is not read",
    ] {
        assert!(notes.contains(note), "{note} in:\n{notes}");
    }
}

#[tokio::test]
async fn an_imported_config_serves_the_hosts_server_and_bad_input_is_refused() {
    let host = json!({
        "mcpServers": { "Example": { "command": exe(), "args": ["example-server", "--name", "example"] } }
    });
    let file = tempdir().join("claude_desktop_config.json");
    std::fs::write(&file, host.to_string()).unwrap();
    let (code, yaml, _) = mcpmux(&["import", file.to_str().unwrap()], &[]).await;
    assert_eq!(code, 0);
    let gw = TestGateway::start(&yaml).await;
    let client = McpClient::connect(&gw.url).await;
    let (tools, _) = client.list_all("tools/list", "tools").await;
    assert!(
        tools.iter().any(|t| t["name"] == "example__echo"),
        "{tools:?}"
    );
    gw.stop().await;

    for (text, why) in [
        ("not json", "not JSON"),
        ("{\"servers\": 3}", "no `mcpServers` or `servers`"),
        ("{\"mcpServers\": {}}", "no servers to import"),
    ] {
        std::fs::write(&file, text).unwrap();
        let (code, out, err) = mcpmux(&["import", file.to_str().unwrap()], &[]).await;
        assert_eq!(code, 64, "{err}");
        assert!(out.is_empty(), "{out}");
        assert!(err.contains(why), "{why} in {err}");
    }
}

/// check-jsonschema (from the test venv) on `files` against the schema.
async fn validate(schema: &Path, files: &[PathBuf]) -> (bool, String) {
    let tool = crate::support::interop::dir().join(".venv/bin/check-jsonschema");
    assert!(tool.exists(), "run scripts/setup-interop.sh first");
    let out = within(
        "check-jsonschema",
        Command::new(tool)
            .arg("--schemafile")
            .arg(schema)
            .args(files)
            .output(),
    )
    .await
    .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test]
async fn every_example_config_validates_against_the_schema_mcpmux_prints() {
    let (code, printed, _) = mcpmux(&["schema"], &[]).await;
    assert_eq!(code, 0);
    let documented = std::fs::read_to_string(repo().join("docs/config.schema.json")).unwrap();
    assert_eq!(
        printed, documented,
        "mcpmux schema is docs/config.schema.json"
    );
    let schema = tempdir().join("schema.json");
    std::fs::write(&schema, &printed).unwrap();

    let mut examples: Vec<PathBuf> = std::fs::read_dir(repo().join("config"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    examples.push(repo().join("src/config/demo.yaml"));
    assert!(examples.len() >= 6, "{examples:?}");
    let (ok, report) = validate(&schema, &examples).await;
    assert!(ok, "{report}");

    // An unknown key, anywhere, is refused, as mcpmux itself refuses it.
    for yaml in [
        "auth: { mode: off }\nupstreams:\n  a:\n    command: x\n    colour: blue\n",
        "auth: { mode: off }\nlisen: 127.0.0.1:80\nupstreams:\n  a:\n    command: x\n",
        "auth: { mode: off }\nupstreams:\n  a:\n    command: x\n    health: { ping_every: 1s }\n",
    ] {
        let bad = tempdir().join("bad.yaml");
        std::fs::write(&bad, yaml).unwrap();
        let (ok, report) = validate(&schema, std::slice::from_ref(&bad)).await;
        assert!(!ok, "the schema accepted:\n{yaml}\n{report}");
        let (code, _, _) = mcpmux(&["check", bad.to_str().unwrap()], &[]).await;
        assert_eq!(code, 64, "mcpmux accepted:\n{yaml}");
    }
}

#[tokio::test]
async fn a_host_that_never_pages_sees_all_300_tools_in_one_answer() {
    let mut yaml = String::from("upstreams:\n");
    for name in ["one", "two", "three"] {
        yaml.push_str(&format!(
            "  {name}:\n    command: {exe:?}\n    args: [\"--name\", \"{name}\", \"--tools\", \"100\", \"--page-size\", \"7\"]\n",
            exe = fixture_exe()
        ));
    }
    let gw = TestGateway::start(&yaml).await;
    let client = McpClient::connect(&gw.url).await;
    let first = client.result("tools/list", json!({})).await;
    let tools = first["tools"].as_array().unwrap();
    // The fixture's generated tools, plus each upstream's own few.
    let generated = tools
        .iter()
        .filter(|t| t["name"].as_str().unwrap().contains("__gen_"))
        .count();
    assert_eq!(generated, 300, "{} tools in the first answer", tools.len());
    assert!(first.get("nextCursor").is_none(), "{first}");
    gw.stop().await;
}
