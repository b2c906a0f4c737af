//! Several replicas of the gateway with one config, as a load balancer
//! without stickiness sees them: 2026-07-28 clients send each request to
//! another replica (cursors, calls, listen streams, sealed request state);
//! session-based clients behind a real HAProxy stick to the replica their
//! session id names and start again after losing it; tasks made through
//! one replica are their creator's on every replica.

mod haproxy;
pub(crate) mod redis;
mod tasks;

use serde_json::{Value, json};

use crate::input_rounds::{call, message, refusal};
use crate::support::gateway::{fixture_upstream, with_auth_off};
use crate::support::interop::run_python;
use crate::support::peer::HttpPeer;
use crate::support::served::Served;
use crate::support::{tempdir, within};

/// The `request_state.key` the replicas share (as a Kubernetes Secret would).
const SHARED_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A port nothing listens on now: bound on port 0, then released.
pub(crate) fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// One `mcpmux serve` child and its MCP endpoint.
pub(crate) struct Replica {
    pub served: Served,
    pub url: String,
    pub base: String,
}

impl Replica {
    /// Starts `mcpmux serve` on 127.0.0.1:0 with the config file at `path`
    /// and waits until `upstreams` upstreams are ready.
    pub(crate) async fn start(path: &std::path::Path, upstreams: usize) -> Replica {
        let mut served = Served::start(&["--config", path.to_str().unwrap()]);
        let addr = served.listening_addr().await;
        served.wait_for("upstream ready", upstreams).await;
        Replica {
            served,
            url: format!("http://{addr}/mcp"),
            base: format!("http://{addr}"),
        }
    }
}

/// A config with the py server over HTTP (shared by the replicas), the
/// legacy conformance fixture (one child per replica), pages of 2 tools
/// and the shared sealing key.
fn shared_config(py: &HttpPeer) -> std::path::PathBuf {
    let path = tempdir().join("mcpmux.yaml");
    let yaml = format!(
        "upstreams:\n  py:\n    url: {:?}\n    era: legacy\n{}page_size: 2\nrequest_state:\n  key: {SHARED_KEY:?}\n",
        py.url("/mcp"),
        fixture_upstream("fixture", &["--conformance", "--legacy-only"]),
    );
    std::fs::write(&path, with_auth_off(&yaml)).unwrap();
    path
}

/// A 2026-07-28 `tools/list` on `url` from `cursor`.
async fn list_page(url: &str, cursor: Option<&str>) -> Value {
    let mut params = json!({ "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    } });
    if let Some(cursor) = cursor {
        params["cursor"] = json!(cursor);
    }
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params });
    let raw = crate::support::client::post(
        &reqwest::Client::new(),
        url,
        None,
        &body.to_string(),
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
        ],
    )
    .await;
    message(&raw)
}

#[tokio::test]
async fn a_modern_client_may_send_every_request_to_another_replica() {
    let py = HttpPeer::python("streamable-http", 0).await;
    let path = shared_config(&py);
    let a = Replica::start(&path, 2).await;
    let b = Replica::start(&path, 2).await;

    // The Python SDK in 2026-07-28 mode, alternating on every request.
    let out = run_python("replicas_client.py", &[&a.url, &b.url]).await;
    assert_eq!(
        out["protocol_versions"],
        json!(["2026-07-28", "2026-07-28"]),
        "{out}"
    );
    let whole = list_page(&a.url, None).await;
    assert!(whole["result"]["nextCursor"].is_string(), "{whole}");
    let tools = out["tools"].as_array().unwrap();
    assert!(out["pages"].as_u64().unwrap() >= 3, "{out}");
    let mut unique: Vec<&str> = tools.iter().map(|t| t.as_str().unwrap()).collect();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), tools.len(), "each tool once: {out}");
    assert!(
        unique.contains(&"py__echo") && unique.contains(&"py__touch_all"),
        "{out}"
    );
    assert_eq!(out["echoes"], json!(["hop 0", "hop 1", "hop 2", "hop 3"]));
    assert_eq!(out["read"], "ok", "{out}");
    assert_eq!(out["honored_resources"], json!([out["uri"]]), "{out}");
    assert_eq!(out["told"], "told 1", "{out}");
    assert_eq!(out["updated"], out["uri"], "{out}");

    // B's cursor pages on A; once py gains a tool (told to A's upstream
    // session, so A's catalog changes), A calls the same cursor stale.
    let first = list_page(&b.url, None).await;
    let cursor = first["result"]["nextCursor"].as_str().unwrap().to_owned();
    assert!(list_page(&a.url, Some(&cursor)).await["result"]["tools"].is_array());
    let add = json!({ "arguments": { "name": "late" } });
    let added = message(&call(&a.url, "py__add_tool", add).await);
    assert_eq!(
        added["result"]["content"][0]["text"], "added late",
        "{added}"
    );
    within("A to see the new tool", async {
        loop {
            let page = list_page(&a.url, Some(&cursor)).await;
            if page["error"]["code"] == -32602 {
                assert!(
                    page["error"]["message"]
                        .as_str()
                        .unwrap()
                        .starts_with("stale cursor"),
                    "{page}"
                );
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;

    // Sealed request state opens on every replica with the key; the parked
    // call it continues lives on the replica that parked it.
    let tool = "fixture__test_input_required_result_elicitation";
    let first = message(&call(&a.url, tool, json!({})).await);
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let (key, _) = result["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    let state = result["requestState"].as_str().unwrap().to_owned();
    let answer = json!({ key.clone(): { "action": "accept", "content": { "name": "Ada" } } });
    let retry = json!({ "requestState": state, "inputResponses": answer });
    let on_b = call(&b.url, tool, retry.clone()).await;
    assert!(
        refusal(&on_b).contains("parked on another replica"),
        "{}",
        on_b.body
    );
    let on_a = message(&call(&a.url, tool, retry).await);
    assert_eq!(on_a["result"]["isError"], json!(null), "{on_a}");
    assert!(on_a["result"]["content"].is_array(), "{on_a}");
}

/// `deploy/kubernetes/overlays/replicas/` (the Redis variant with the HPA;
/// schema validation and rendering are in `deploy::kubernetes`): its config
/// is the base's plus `session_store` and passes `mcpmux check`, its Secret
/// is what the Deployment and the config use, and the HPA scales the
/// Deployment.
#[tokio::test]
async fn the_redis_overlay_config_checks_and_its_objects_agree() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    let read = |path: &str| -> Value {
        let text = std::fs::read_to_string(dir.join(path)).unwrap();
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let config = |path: &str| {
        read(path)["data"]["config.yaml"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let base = config("base/configmap.yaml");
    let overlay = config("overlays/replicas/configmap-patch.yaml");
    let added: Vec<&str> = overlay
        .lines()
        .filter(|l| !base.lines().any(|b| b == *l))
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .collect();
    assert_eq!(added, [r#"session_store: "${MCPMUX_SESSION_STORE}""#]);
    assert!(
        base.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .all(|l| overlay.lines().any(|o| o == l))
    );

    let secret = read("overlays/replicas/session-store-secret.yaml");
    let name = secret["metadata"]["name"].as_str().unwrap();
    let placeholder = secret["stringData"]["MCPMUX_SESSION_STORE"]
        .as_str()
        .unwrap();
    let patch = read("overlays/replicas/deployment-patch.yaml");
    let env = &patch["spec"]["template"]["spec"]["containers"][0]["env"][0];
    assert_eq!(env["name"], "MCPMUX_SESSION_STORE");
    assert_eq!(env["valueFrom"]["secretKeyRef"]["name"], name);
    assert_eq!(
        env["valueFrom"]["secretKeyRef"]["key"],
        "MCPMUX_SESSION_STORE"
    );
    let hpa = read("overlays/replicas/hpa.yaml");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["name"],
        read("base/deployment.yaml")["metadata"]["name"]
    );
    assert!(hpa["spec"]["minReplicas"].as_u64().unwrap() >= 2);

    let file = tempdir().join("config.yaml");
    std::fs::write(&file, &overlay).unwrap();
    let env = [
        ("MCPMUX_API_KEY", "a-real-looking-value-for-the-check-0123"),
        (
            "MCPMUX_ADMIN_KEY",
            "another-real-looking-value-for-the-check",
        ),
        ("MCPMUX_SESSION_STORE", placeholder),
    ];
    let (code, out, err) =
        crate::support::run_mcpmux(&["check", "--config", file.to_str().unwrap()], &env).await;
    assert_eq!(code, 0, "{out}{err}");
}
