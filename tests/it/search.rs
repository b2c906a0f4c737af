//! Progressive tool listing over a few thousand generated tools of a real
//! server (on the Python SDK): the endpoint lists its pinned tools and the
//! gateway's two, a search built from a tool's description finds that tool
//! in the top 3, a tool the caller's policy hides is never found nor
//! callable, a call through `call_tool` reaches the upstream, and a tool
//! added upstream is found once `list_changed` said so.

use serde_json::{Value, json};

use crate::support::interop::python_upstream;
use crate::support::{McpClient, TestGateway};

const ALICE: &str = "Bearer alice-key-0123456789";
const BOB: &str = "Bearer bob-key-0123456789";

fn config() -> String {
    format!(
        r#"auth:
  mode: on
  api_keys:
    - client: alice
      key: alice-key-0123456789
    - client: bob
      key: bob-key-0123456789
policy:
  default: allow
  clients:
    bob: {{ deny: ["big__stripe_*"] }}
endpoints:
  find:
    search: {{ mode: progressive, pinned: ["big__add_tool"], results: 5 }}
upstreams:
{}"#,
        python_upstream("big", "many_tools_server.py", &["3000"])
    )
}

/// The names `search_tools` found for `query`, best first.
async fn search(client: &McpClient, query: &str, limit: u64) -> Vec<String> {
    let result = client
        .result(
            "tools/call",
            json!({ "name": "search_tools", "arguments": { "query": query, "limit": limit } }),
        )
        .await;
    let tools = result["structuredContent"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {result}"));
    // The text holds the same tools, full schemas and all, for models.
    let text = result["content"][0]["text"].as_str().unwrap();
    if !tools.is_empty() {
        let parsed: Vec<Value> = serde_json::from_str(text).unwrap();
        assert_eq!(&parsed, tools);
    }
    tools
        .iter()
        .map(|t| {
            assert!(t["inputSchema"].is_object(), "{t}");
            t["name"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// Arguments a tool's input schema accepts: each required property with a
/// value of its type.
fn arguments_for(tool: &Value) -> Value {
    let schema = &tool["inputSchema"];
    let mut arguments = serde_json::Map::new();
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap();
        let value = match schema["properties"][name]["type"].as_str() {
            Some("integer" | "number") => json!(1),
            Some("boolean") => json!(true),
            Some("array") => json!([]),
            Some("object") => json!({}),
            _ => json!("x"),
        };
        arguments.insert(name.to_owned(), value);
    }
    Value::Object(arguments)
}

#[tokio::test]
async fn a_progressive_endpoint_finds_the_right_tool_and_never_a_hidden_one() {
    let gw = TestGateway::start(&config()).await;
    let find = format!("{}/find", gw.url);
    let alice = McpClient::connect_with(&find, &[("authorization", ALICE)]).await;
    let bob = McpClient::connect_with(&find, &[("authorization", BOB)]).await;
    let whole = McpClient::connect_with(&gw.url, &[("authorization", ALICE)]).await;

    let (listed, _) = alice.list_all("tools/list", "tools").await;
    let listed: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(listed, ["big__add_tool", "search_tools", "call_tool"]);

    // Queries built from the descriptions of a sample of the tools.
    let (all, _) = whole.list_all("tools/list", "tools").await;
    assert_eq!(all.len(), 3001);
    let sample: Vec<&Value> = all.iter().step_by(25).collect();
    let mut misses = Vec::new();
    for tool in &sample {
        let name = tool["name"].as_str().unwrap();
        let description = tool["description"].as_str().unwrap();
        let found = search(&alice, description, 3).await;
        if !found.iter().any(|f| f == name) {
            misses.push(format!("{name}: {description:?} found {found:?}"));
        }
    }
    assert!(
        misses.is_empty(),
        "{} of {} not in the top 3:\n{}",
        misses.len(),
        sample.len(),
        misses.join("\n")
    );

    // What bob's policy hides is never found, nor callable either way.
    let stripe: Vec<&Value> = all
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with("big__stripe_"))
        .take(10)
        .collect();
    assert!(!stripe.is_empty());
    for tool in &stripe {
        let description = tool["description"].as_str().unwrap();
        let for_alice = search(&alice, description, 5).await;
        assert!(for_alice.iter().any(|n| n.starts_with("big__stripe_")));
        let for_bob = search(&bob, description, 50).await;
        assert!(
            for_bob.iter().all(|n| !n.starts_with("big__stripe_")),
            "{for_bob:?}"
        );
    }
    let hidden = stripe[0]["name"].as_str().unwrap();
    let via_gateway = bob
        .request(
            "tools/call",
            json!({ "name": "call_tool", "arguments": { "name": hidden, "arguments": {} } }),
        )
        .await;
    let direct = bob
        .request("tools/call", json!({ "name": hidden, "arguments": {} }))
        .await;
    assert_eq!(via_gateway["error"]["code"], -32602, "{via_gateway}");
    assert_eq!(via_gateway["error"], direct["error"]);

    // A found tool called through call_tool reaches the upstream.
    let target = sample[3]["name"].as_str().unwrap();
    let called = alice
        .call_tool(
            "call_tool",
            json!({ "name": target, "arguments": arguments_for(sample[3]) }),
        )
        .await;
    assert_ne!(called["result"]["isError"], true, "{called}");
    let original = target.strip_prefix("big__").unwrap();
    assert!(called.to_string().contains(original), "{called}");
    let bad = alice
        .request(
            "tools/call",
            json!({ "name": "search_tools", "arguments": { "limit": 3 } }),
        )
        .await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");

    // A tool added upstream is found after list_changed.
    let mut events = alice.listen(None).await;
    alice
        .call_tool(
            "call_tool",
            json!({ "name": "big__add_tool", "arguments": {
                "name": "quantum_flux_calibrate",
                "description": "Calibrates the quantum flux capacitor of the time machine" } }),
        )
        .await;
    assert_eq!(
        events.next().await.unwrap()["method"],
        "notifications/tools/list_changed"
    );
    let found = search(&alice, "calibrate the flux capacitor", 3).await;
    assert_eq!(found[0], "big__quantum_flux_calibrate", "{found:?}");
    gw.stop().await;
}
