//! Per-upstream shaping over real HTTP, the same for every client: denied
//! tools are gone (and answer like unknown ones), a renamed tool reaches the
//! upstream under its own name, overrides show in the list, hidden
//! resources are neither listed nor readable, and a reload that changes
//! only shaping applies without restarting the upstream.

use serde_json::{Value, json};

use mcpmux::{Config, Lookup};

use crate::support::{
    McpClient, TestGateway, example_upstream, fixture_upstream, read_jsonl, tempdir, within,
};

const SHAPED: &str = r#"    tools:
      deny: ["add", "crash"]
      rename: { echo: say }
      override:
        echo:
          description: "Says it back."
          annotations: { readOnlyHint: true }
"#;

const RESHAPED: &str = r#"    tools:
      override: { add: { title: "Addition" } }
"#;

fn config(record: &str, weather_shape: &str, notes_resources: bool) -> String {
    format!(
        "upstreams:\n{}{weather_shape}{}    resources: {notes_resources}\n",
        fixture_upstream("weather", &["--test-controls", "--record", record]),
        example_upstream("notes", &[]),
    )
}

fn names(items: &[Value], key: &str) -> Vec<String> {
    items
        .iter()
        .map(|i| i[key].as_str().unwrap().to_owned())
        .collect()
}

/// An error with `name` replaced, so errors about different names compare.
fn shape(error: &Value, name: &str) -> String {
    error.to_string().replace(name, "<NAME>")
}

#[tokio::test]
async fn shaping_applies_to_everyone_and_reloads_without_a_restart() {
    let record = tempdir().join("weather.jsonl");
    let record_path = record.to_str().unwrap();
    let gw = TestGateway::start(&config(record_path, SHAPED, false)).await;
    let client = McpClient::connect(&gw.url).await;
    let mut events = client.listen(None).await;

    let (tools, _) = client.list_all("tools/list", "tools").await;
    let tool_names = names(&tools, "name");
    assert!(
        tool_names.contains(&"weather__say".to_owned()),
        "{tool_names:?}"
    );
    for gone in ["weather__echo", "weather__add", "weather__crash"] {
        assert!(
            !tool_names.contains(&gone.to_owned()),
            "{gone}: {tool_names:?}"
        );
    }
    assert!(
        tool_names.contains(&"notes__add".to_owned()),
        "other upstreams untouched"
    );
    let say = tools.iter().find(|t| t["name"] == "weather__say").unwrap();
    assert_eq!(say["description"], "Says it back.");
    assert_eq!(say["annotations"]["readOnlyHint"], true);

    // The renamed tool reaches the upstream under its own name.
    let said = client
        .call_tool("weather__say", json!({ "message": "hi" }))
        .await;
    assert_eq!(said["result"]["content"][0]["text"], "hi", "{said}");
    let calls: Vec<Value> = read_jsonl(&record)
        .into_iter()
        .filter(|m| m["method"] == "tools/call")
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["params"]["name"], "echo");

    // Hidden things answer like unknown ones.
    let denied = client
        .call_tool("weather__add", json!({ "a": 1, "b": 2 }))
        .await;
    let unknown = client
        .call_tool("weather__nosuch", json!({ "a": 1, "b": 2 }))
        .await;
    assert_eq!(
        shape(&denied["error"], "weather__add"),
        shape(&unknown["error"], "weather__nosuch")
    );
    let (resources, _) = client.list_all("resources/list", "resources").await;
    let uris = names(&resources, "uri");
    assert!(uris.iter().any(|u| u.starts_with("weather+")), "{uris:?}");
    assert!(!uris.iter().any(|u| u.starts_with("notes+")), "{uris:?}");
    let (templates, _) = client
        .list_all("resources/templates/list", "resourceTemplates")
        .await;
    assert!(
        names(&templates, "uriTemplate")
            .iter()
            .all(|t| t.starts_with("weather+"))
    );
    let hidden = client
        .request(
            "resources/read",
            json!({ "uri": "notes+demo://notes/readme" }),
        )
        .await;
    let unknown = client
        .request(
            "resources/read",
            json!({ "uri": "nosuch+demo://notes/readme" }),
        )
        .await;
    assert_eq!(hidden["error"]["code"], -32002, "{hidden}");
    assert_eq!(
        shape(&hidden["error"], "notes+demo://notes/readme"),
        shape(&unknown["error"], "nosuch+demo://notes/readme")
    );

    // A reload that changes only shaping restarts nothing.
    let reshaped = Config::parse(
        &crate::support::gateway::with_auth_off(&config(record_path, RESHAPED, true)),
        "reload.yaml",
        &Lookup::from_process(),
    )
    .unwrap();
    let diff = within("reload", gw.gateway().reload(&reshaped)).await;
    assert_eq!(diff.reshaped, ["weather", "notes"], "{diff:?}");
    assert!(diff.changed.is_empty() && diff.added.is_empty(), "{diff:?}");
    let announced = within("list_changed", async {
        loop {
            let event = events.next().await.unwrap();
            if event["method"] == "notifications/tools/list_changed" {
                return event;
            }
        }
    })
    .await;
    assert_eq!(announced["method"], "notifications/tools/list_changed");
    let (tools, _) = client.list_all("tools/list", "tools").await;
    let add = tools
        .iter()
        .find(|t| t["name"] == "weather__add")
        .expect("add is back");
    assert_eq!(add["title"], "Addition");
    assert!(tools.iter().any(|t| t["name"] == "weather__echo"));
    let echoed = client
        .call_tool("weather__echo", json!({ "message": "again" }))
        .await;
    assert_eq!(echoed["result"]["content"][0]["text"], "again", "{echoed}");
    let (resources, _) = client.list_all("resources/list", "resources").await;
    assert!(
        names(&resources, "uri")
            .iter()
            .any(|u| u.starts_with("notes+"))
    );
    let log = read_jsonl(&record);
    assert_eq!(
        log.iter().filter(|m| m["method"] == "initialize").count(),
        1,
        "the upstream was not restarted"
    );
    gw.stop().await;
}
