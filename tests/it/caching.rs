//! The result cache with real peers: server-everything (2025 era, a
//! configured `cache.ttl`) read by 50 clients at once, and evicted by its
//! own `resources/updated`; the Python SDK (2026-07-28) sending `ttlMs` and
//! `cacheScope: private`, read by two authenticated clients.

use serde_json::{Value, json};

use crate::support::interop::{everything_documents, everything_js, node};
use crate::support::peer::HttpPeer;
use crate::support::{McpClient, TestGateway, tempdir, within};

/// How many `resources/read` of `uri` the record of what server-everything
/// received holds.
fn reads_received(record: &std::path::Path, uri: &str) -> usize {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["method"] == "resources/read" && m["params"]["uri"] == uri)
        .count()
}

/// Waits until `tee` has written everything sent so far: it writes to
/// server-everything before the file, so an answer can come before its
/// request is recorded. A marker echo, once recorded, follows them all.
async fn settled(client: &McpClient, record: &std::path::Path, marker: &str) {
    client
        .call_tool("everything__echo", json!({ "message": marker }))
        .await;
    within("the record to catch up", async {
        while !std::fs::read_to_string(record)
            .unwrap_or_default()
            .contains(marker)
        {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn fifty_concurrent_reads_of_a_server_everything_resource_reach_it_once_until_it_changes() {
    // server-everything behind `tee`, which records every line it receives.
    let record = tempdir().join("everything-stdin.jsonl");
    let args = serde_json::to_string(&[
        "-c",
        "tee -a \"$0\" | exec \"$1\" \"$2\" stdio",
        record.to_str().unwrap(),
        &node().display().to_string(),
        &everything_js().display().to_string(),
    ])
    .unwrap();
    let yaml = format!(
        "upstreams:\n  everything:\n    command: /bin/sh\n    args: {args}\n    cache: {{ ttl: 10m }}\n"
    );
    let gw = TestGateway::start(&yaml).await;
    let watcher = McpClient::connect(&gw.url).await;
    let docs = everything_documents(&watcher).await;
    assert!(docs.len() >= 2, "{docs:?}");
    let (watched, other) = (&docs[0], &docs[1]);
    let original = |uri: &str| uri.trim_start_matches("everything+").to_owned();

    let mut clients = Vec::new();
    for _ in 0..50 {
        clients.push(McpClient::connect(&gw.url).await);
    }
    let reads = clients
        .iter()
        .map(|c| c.result("resources/read", json!({ "uri": watched })));
    let results = within("50 reads", futures_util::future::join_all(reads)).await;
    assert!(
        results[0]["contents"][0]["uri"] == watched.as_str(),
        "{}",
        results[0]
    );
    assert!(
        results.iter().all(|r| r == &results[0]),
        "every client got the same answer"
    );
    watcher
        .result("resources/read", json!({ "uri": other }))
        .await;
    settled(&watcher, &record, "marker-1").await;
    assert_eq!(reads_received(&record, &original(watched)), 1);
    assert_eq!(reads_received(&record, &original(other)), 1);

    // A resources/updated for the watched URI evicts it, and only it.
    let mut events = watcher.listen(None).await;
    watcher.subscribe(watched).await;
    let toggled = watcher
        .call_tool("everything__toggle-subscriber-updates", json!({}))
        .await;
    assert!(toggled.get("error").is_none(), "{toggled}");
    let update = within("the update", events.next_skipping_list_changed())
        .await
        .unwrap();
    assert_eq!(update["params"]["uri"], watched.as_str(), "{update}");
    // No more updates (one comes every 5 s while they are on).
    watcher
        .call_tool("everything__toggle-subscriber-updates", json!({}))
        .await;
    for client in &clients[..3] {
        client
            .result("resources/read", json!({ "uri": watched }))
            .await;
        client
            .result("resources/read", json!({ "uri": other }))
            .await;
    }
    settled(&watcher, &record, "marker-2").await;
    assert_eq!(reads_received(&record, &original(watched)), 2);
    assert_eq!(reads_received(&record, &original(other)), 1);

    let metrics = reqwest::get(gw.url.replace("/mcp", "/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let hits = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mcpmux_cache_lookups_total{outcome=\"hit\"} "))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(hits.parse::<f64>().unwrap() >= 49.0 + 5.0, "{hits}");
    gw.stop().await;
}

#[tokio::test]
async fn private_results_are_kept_per_identity_and_never_served_to_another() {
    let py =
        HttpPeer::python_with("streamable-http", 0, &["--private-read-ttl-ms", "600000"]).await;
    let yaml = format!(
        "auth:\n  mode: on\n  api_keys:\n    - client: alice\n      key: alice-key-5b1e0c9d\n    - client: bob\n      key: bob-key-8c2f4a7e\nupstreams:\n  py:\n    url: {}\n",
        py.url("/mcp")
    );
    let gw = TestGateway::start(&yaml).await;
    let alice =
        McpClient::connect_with(&gw.url, &[("authorization", "Bearer alice-key-5b1e0c9d")]).await;
    let bob =
        McpClient::connect_with(&gw.url, &[("authorization", "Bearer bob-key-8c2f4a7e")]).await;
    let read = async |client: &McpClient| -> String {
        let result = client
            .result("resources/read", json!({ "uri": "py+py://counted" }))
            .await;
        result["contents"][0]["text"].as_str().unwrap().to_owned()
    };
    // Each upstream read answers with a new number: a repeated number is
    // a cached answer.
    let first = read(&alice).await;
    assert_eq!(
        read(&alice).await,
        first,
        "alice's result is kept for alice"
    );
    let bobs = read(&bob).await;
    assert_ne!(bobs, first, "bob never gets alice's private result");
    assert_eq!(read(&bob).await, bobs);
    assert_eq!(read(&alice).await, first);

    // A 2026-07-28 request of bob's gets bob's entry, with the time it has
    // left and its scope.
    let body = json!({ "jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {
        "uri": "py+py://counted",
        "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } } });
    let modern = crate::support::client::post(
        &reqwest::Client::new(),
        &gw.url,
        None,
        &body.to_string(),
        &[
            ("authorization", "Bearer bob-key-8c2f4a7e"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "resources/read"),
            ("mcp-name", "py+py://counted"),
        ],
    )
    .await;
    let result = &modern.json()["result"];
    assert_eq!(result["contents"][0]["text"], bobs.as_str(), "{result}");
    assert_eq!(result["cacheScope"], "private", "{result}");
    let ttl = result["ttlMs"].as_u64().unwrap();
    assert!(ttl > 0 && ttl <= 600_000, "{result}");
    gw.stop().await;
    drop(py);
}
