//! Session setup with an upstream: `initialize`, `notifications/initialized`,
//! and fetching its complete lists.
//!
//! Every `nextCursor` page is walked; a list is never cut short. The four
//! lists are fetched concurrently, and a cursor that repeats is an error
//! rather than an endless loop.

use std::collections::HashSet;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::UpstreamError;
use super::connection::Connection;
use crate::catalog::{ListKind, UpstreamLists};
use crate::protocol::{self, LATEST_VERSION, UPSTREAM_VERSIONS};

/// Pages fetched for one list at most; an upstream paging forever is broken.
const MAX_PAGES: usize = 10_000;

/// What the upstream said about itself in `initialize` or `server/discover`.
#[derive(Debug, Clone)]
pub(crate) struct ServerHello {
    pub protocol_version: String,
    /// The upstream speaks the stateless 2026-07-28 era.
    pub modern: bool,
    pub capabilities: Map<String, Value>,
    pub instructions: Option<String>,
    pub server_name: Option<String>,
}

impl ServerHello {
    /// Whether the upstream declared capability `name` (e.g. "tools").
    pub(crate) fn has(&self, name: &str) -> bool {
        self.capabilities.get(name).is_some_and(|v| !v.is_null())
    }

    /// Whether the upstream supports `resources/subscribe`.
    pub(crate) fn can_subscribe(&self) -> bool {
        self.capabilities
            .get("resources")
            .and_then(|r| r.get("subscribe"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeResult {
    protocol_version: String,
    #[serde(default)]
    capabilities: Map<String, Value>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    server_info: Option<Map<String, Value>>,
}

/// Runs the legacy-era handshake on a fresh connection.
pub(crate) async fn initialize(
    conn: &Connection,
    timeout: Duration,
) -> Result<ServerHello, UpstreamError> {
    let params = serde_json::json!({
        "protocolVersion": LATEST_VERSION,
        // Relayed to the client whose call caused them (see `connection::ask`).
        "capabilities": client_capabilities(),
        "clientInfo": { "name": "mcpmux", "version": env!("CARGO_PKG_VERSION") },
    })
    .to_string();
    let raw = conn
        .request(protocol::Method::Initialize, Some(&params), timeout)
        .await?;
    let result: InitializeResult =
        serde_json::from_str(raw.get()).map_err(|e| UpstreamError::Protocol {
            upstream: conn.upstream().to_string(),
            detail: format!("invalid initialize result: {e}"),
        })?;
    if !UPSTREAM_VERSIONS.contains(&result.protocol_version.as_str()) {
        return Err(UpstreamError::Protocol {
            upstream: conn.upstream().to_string(),
            detail: format!(
                "it speaks protocol version {:?}; mcpmux supports {}",
                result.protocol_version,
                UPSTREAM_VERSIONS.join(", ")
            ),
        });
    }
    conn.notify(protocol::Method::Initialized, None).await?;
    Ok(ServerHello {
        protocol_version: result.protocol_version,
        modern: false,
        capabilities: result.capabilities,
        instructions: result.instructions,
        server_name: result
            .server_info
            .and_then(|i| i.get("name").and_then(Value::as_str).map(str::to_owned)),
    })
}

/// What the gateway declares in `initialize`: the requests it relays to
/// the client whose call caused them (see `connection::ask`), and MCP Apps,
/// so servers that check it offer their UI tools (hosts that render no
/// apps ignore a tool's `_meta.ui`).
fn client_capabilities() -> Value {
    serde_json::json!({
        "sampling": {},
        "elicitation": { "form": {}, "url": {} },
        "roots": {},
        "extensions": ui_extension(),
    })
}

/// `{"io.modelcontextprotocol/ui": {"mimeTypes": [...]}}`.
fn ui_extension() -> Value {
    serde_json::json!({
        protocol::meta::UI_EXTENSION: { "mimeTypes": [protocol::meta::APP_MIME_TYPE] },
    })
}

/// The `_meta` the gateway sends on every request to a modern upstream.
pub(crate) fn modern_meta() -> Map<String, Value> {
    let meta = serde_json::json!({
        protocol::meta::PROTOCOL_VERSION: protocol::MODERN_VERSION,
        protocol::meta::CLIENT_CAPABILITIES: { "extensions": ui_extension() },
        protocol::meta::CLIENT_INFO: { "name": "mcpmux", "version": env!("CARGO_PKG_VERSION") },
    });
    match meta {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DiscoverResult {
    #[serde(default)]
    supported_versions: Vec<String>,
    #[serde(default)]
    capabilities: Map<String, Value>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default, rename = "_meta")]
    meta: Option<Map<String, Value>>,
}

/// Probes for the modern era with `server/discover`. `None` means the
/// upstream answered with anything but a 2026-07-28 discovery (an error,
/// a timeout, another version): fall back to `initialize`.
pub(crate) async fn discover(conn: &Connection, timeout: Duration) -> Option<ServerHello> {
    let params = Value::Object(Map::from_iter([(
        "_meta".to_owned(),
        Value::Object(modern_meta()),
    )]))
    .to_string();
    let raw = match conn
        .request(protocol::Method::Discover, Some(&params), timeout)
        .await
    {
        Ok(raw) => raw,
        Err(e) => {
            tracing::debug!(error = %e, "server/discover probe failed; using initialize");
            return None;
        }
    };
    let result: DiscoverResult = serde_json::from_str(raw.get()).ok()?;
    if !result
        .supported_versions
        .iter()
        .any(|v| v == protocol::MODERN_VERSION)
    {
        return None;
    }
    Some(ServerHello {
        protocol_version: protocol::MODERN_VERSION.to_owned(),
        modern: true,
        capabilities: result.capabilities,
        instructions: result.instructions,
        server_name: result
            .meta
            .as_ref()
            .and_then(|m| m.get(protocol::meta::SERVER_INFO))
            .and_then(|i| i.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

/// Fetches every list the upstream declared, all pages, concurrently.
pub(crate) async fn fetch_lists(
    conn: &Connection,
    hello: &ServerHello,
    timeout: Duration,
) -> Result<UpstreamLists, UpstreamError> {
    let wanted = |kind: ListKind| hello.has(kind.capability());
    let fetch = |kind: ListKind| async move {
        if wanted(kind) {
            fetch_list(conn, kind, timeout).await
        } else {
            Ok(Vec::new())
        }
    };
    let (tools, prompts, resources, templates) = tokio::try_join!(
        fetch(ListKind::Tools),
        fetch(ListKind::Prompts),
        fetch(ListKind::Resources),
        fetch(ListKind::Templates),
    )?;
    Ok(UpstreamLists {
        tools,
        prompts,
        resources,
        templates,
    })
}

/// Walks every page of one list.
pub(crate) async fn fetch_list(
    conn: &Connection,
    kind: ListKind,
    timeout: Duration,
) -> Result<Vec<Map<String, Value>>, UpstreamError> {
    let protocol_error = |detail: String| UpstreamError::Protocol {
        upstream: conn.upstream().to_string(),
        detail,
    };
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = HashSet::new();
    for _ in 0..MAX_PAGES {
        let params = cursor
            .as_ref()
            .map(|c| serde_json::json!({ "cursor": c }).to_string());
        let raw = conn
            .request(
                protocol::Method::from_name(kind.method()),
                params.as_deref(),
                timeout,
            )
            .await?;
        let mut page: Map<String, Value> = serde_json::from_str(raw.get())
            .map_err(|e| protocol_error(format!("invalid {} result: {e}", kind.method())))?;
        match page.remove(kind.result_key()) {
            Some(Value::Array(list)) => {
                items.extend(list.into_iter().filter_map(|v| match v {
                    Value::Object(m) => Some(m),
                    _ => None,
                }));
            }
            Some(Value::Null) | None => {}
            Some(_) => {
                return Err(protocol_error(format!(
                    "{} is not an array",
                    kind.result_key()
                )));
            }
        }
        match page.remove("nextCursor") {
            Some(Value::String(next)) if !next.is_empty() => {
                if !seen.insert(next.clone()) {
                    return Err(protocol_error(format!(
                        "{} repeated cursor {next:?}",
                        kind.method()
                    )));
                }
                cursor = Some(next);
            }
            _ => return Ok(items),
        }
    }
    Err(protocol_error(format!(
        "{} has more than {MAX_PAGES} pages",
        kind.method()
    )))
}
