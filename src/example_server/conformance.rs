//! `example-server --conformance`: the fixture the official MCP conformance
//! suite (`@modelcontextprotocol/conformance`) expects of a server under
//! test — its `test_*` tools, prompts, resources, resource template and
//! completions — served in both protocol eras.
//!
//! A request is modern (2026-07-28) when its `_meta` carries
//! `io.modelcontextprotocol/protocolVersion`: the client's capabilities and
//! log level then come from that `_meta`, and every result carries
//! `resultType` (and caching hints where the spec asks for them). Otherwise
//! the request belongs to the legacy session opened by `initialize`.
//!
//! The flows that need client input (sampling, elicitation, roots) live in
//! [`input`]; `subscriptions/listen` streams and the fan-out of list changes
//! in [`listen`].

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::Server;
use crate::protocol::{UPSTREAM_VERSIONS, code, meta};

mod input;
mod listen;

/// The versions `server/discover` offers, newest first.
const SUPPORTED_VERSIONS: &[&str] = &["2026-07-28", "2025-11-25"];

/// A 1x1 red PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// Log levels, least to most severe.
const LEVELS: &[&str] = &[
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// The fixture's state: what the trigger tools added, the legacy session,
/// open listen streams, requests sent to the client, and the state key.
pub struct Fixture {
    /// Refuse `initialize`: the fixture is a 2026-07-28-only server.
    modern_only: bool,
    added_tools: Mutex<Vec<String>>,
    added_prompts: Mutex<Vec<String>>,
    legacy: Mutex<LegacySession>,
    listens: listen::Listens,
    outgoing: input::Outgoing,
    seal: input::Seal,
}

/// What a legacy (`initialize`) session told the fixture.
#[derive(Default)]
struct LegacySession {
    initialized: bool,
    capabilities: Value,
    log_level: Option<String>,
    subscribed: HashSet<String>,
}

/// One request as the handlers see it.
struct Request<'a> {
    params: &'a Value,
    /// Carries the 2026-07-28 `_meta`.
    modern: bool,
    /// The client's declared capabilities (per request, or the session's).
    capabilities: Value,
    /// The log level the client asked for; `None` means no log messages.
    log_level: Option<String>,
}

impl Request<'_> {
    fn args(&self) -> Value {
        self.params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}))
    }

    fn arg(&self, key: &str) -> Option<String> {
        self.params
            .pointer(&format!("/arguments/{key}"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
}

/// A JSON-RPC error object.
fn error(code: i64, message: impl Into<String>) -> Value {
    json!({ "code": code, "message": message.into() })
}

fn text(s: impl Into<String>) -> Value {
    json!({ "content": [{ "type": "text", "text": s.into() }] })
}

/// A tiny WAV file: 8 kHz, 8-bit mono, 80 samples of silence.
fn wav() -> String {
    let samples = [128u8; 80];
    let mut bytes = Vec::with_capacity(44 + samples.len());
    let len = |n: usize| u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes();
    bytes.extend_from_slice(b"RIFF");
    bytes.extend_from_slice(&len(36 + samples.len()));
    bytes.extend_from_slice(b"WAVEfmt ");
    bytes.extend_from_slice(&16u32.to_le_bytes());
    bytes.extend_from_slice(&1u16.to_le_bytes()); // PCM
    bytes.extend_from_slice(&1u16.to_le_bytes()); // mono
    bytes.extend_from_slice(&8000u32.to_le_bytes());
    bytes.extend_from_slice(&8000u32.to_le_bytes());
    bytes.extend_from_slice(&1u16.to_le_bytes());
    bytes.extend_from_slice(&8u16.to_le_bytes());
    bytes.extend_from_slice(b"data");
    bytes.extend_from_slice(&len(samples.len()));
    bytes.extend_from_slice(&samples);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn level_rank(level: &str) -> Option<usize> {
    LEVELS.iter().position(|l| *l == level)
}

impl Fixture {
    pub fn new(modern_only: bool) -> Self {
        Self {
            modern_only,
            added_tools: Mutex::new(Vec::new()),
            added_prompts: Mutex::new(Vec::new()),
            legacy: Mutex::new(LegacySession::default()),
            listens: listen::Listens::default(),
            outgoing: input::Outgoing::default(),
            seal: input::Seal::new(),
        }
    }

    fn legacy(&self) -> std::sync::MutexGuard<'_, LegacySession> {
        self.legacy.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends every listen stream and stops waiting for client answers: the
    /// input closed.
    pub fn close(&self) {
        self.listens.close();
        self.outgoing.close();
    }

    /// A response from the client to a request the fixture sent.
    pub fn on_response(&self, message: &Map<String, Value>) {
        self.outgoing.resolve(message);
    }

    fn request<'a>(&self, params: &'a Value) -> Request<'a> {
        let meta = params.get("_meta");
        let modern = meta
            .and_then(|m| m.get(meta::PROTOCOL_VERSION))
            .is_some_and(Value::is_string);
        if modern {
            let meta = meta.unwrap_or(&Value::Null);
            Request {
                params,
                modern,
                capabilities: meta
                    .get(meta::CLIENT_CAPABILITIES)
                    .cloned()
                    .unwrap_or_else(|| json!({})),
                log_level: meta
                    .get(meta::LOG_LEVEL)
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            }
        } else {
            let legacy = self.legacy();
            Request {
                params,
                modern,
                capabilities: legacy.capabilities.clone(),
                // Before `logging/setLevel` a legacy server may send what it likes.
                log_level: Some(legacy.log_level.clone().unwrap_or_else(|| "debug".into())),
            }
        }
    }

    /// Answers one request; `Err` is a JSON-RPC error object.
    pub async fn dispatch(
        &self,
        server: &Server,
        method: &str,
        params: &Value,
        id: &Value,
    ) -> Result<Value, Value> {
        let req = self.request(params);
        let result = match method {
            "server/discover" => self.discover(&req)?,
            "initialize" if self.modern_only => {
                return Err(
                    json!({ "code": code::METHOD_NOT_FOUND, "message": "this server speaks 2026-07-28 only; initialize is not supported" }),
                );
            }
            "initialize" => self.initialize(params),
            "ping" => return Ok(json!({})),
            "tools/list" => json!({ "tools": self.tools() }),
            "prompts/list" => json!({ "prompts": self.prompts() }),
            "resources/list" => json!({ "resources": resources() }),
            "resources/templates/list" => json!({ "resourceTemplates": templates() }),
            "resources/read" => read(&req)?,
            "prompts/get" => self.get_prompt(server, &req).await?,
            "tools/call" => self.call_tool(server, &req).await?,
            "completion/complete" => complete(params),
            "logging/setLevel" => {
                let level = params.get("level").and_then(Value::as_str).unwrap_or("");
                if level_rank(level).is_none() {
                    return Err(error(
                        code::INVALID_PARAMS,
                        format!("unknown log level {level:?}"),
                    ));
                }
                self.legacy().log_level = Some(level.to_owned());
                json!({})
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
                let mut legacy = self.legacy();
                if method == "resources/subscribe" {
                    legacy.subscribed.insert(uri.to_owned());
                } else {
                    legacy.subscribed.remove(uri);
                }
                json!({})
            }
            "subscriptions/listen" => return self.listens.listen(server, id, params).await,
            _ => {
                return Err(error(
                    code::METHOD_NOT_FOUND,
                    format!("method not found: {method}"),
                ));
            }
        };
        Ok(if req.modern {
            stamp(method, result)
        } else {
            result
        })
    }

    fn capabilities() -> Value {
        json!({
            "tools": { "listChanged": true },
            "prompts": { "listChanged": true },
            "resources": { "subscribe": true, "listChanged": true },
            "completions": {},
            "logging": {},
        })
    }

    fn server_info() -> Value {
        json!({ "name": "mcpmux-conformance-fixture", "version": env!("CARGO_PKG_VERSION") })
    }

    fn discover(&self, req: &Request<'_>) -> Result<Value, Value> {
        let requested = req
            .params
            .pointer(&format!(
                "/_meta/{}",
                meta::PROTOCOL_VERSION.replace('/', "~1")
            ))
            .and_then(Value::as_str);
        if let Some(requested) = requested.filter(|v| !SUPPORTED_VERSIONS.contains(v)) {
            let mut e = error(
                code::UNSUPPORTED_VERSION,
                format!("unsupported protocol version {requested:?}"),
            );
            e["data"] = json!({ "supported": SUPPORTED_VERSIONS, "requested": requested });
            return Err(e);
        }
        Ok(json!({
            "resultType": "complete",
            "supportedVersions": SUPPORTED_VERSIONS,
            "capabilities": Self::capabilities(),
            "instructions": "The MCP conformance suite's fixture server (mcpmux example-server --conformance).",
            "_meta": { (meta::SERVER_INFO): Self::server_info() },
        }))
    }

    fn initialize(&self, params: &Value) -> Value {
        let requested = params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let version = if UPSTREAM_VERSIONS.contains(&requested) {
            requested
        } else {
            UPSTREAM_VERSIONS[0]
        };
        let mut legacy = self.legacy();
        legacy.initialized = true;
        legacy.capabilities = params
            .get("capabilities")
            .cloned()
            .unwrap_or_else(|| json!({}));
        json!({
            "protocolVersion": version,
            "capabilities": Self::capabilities(),
            "serverInfo": Self::server_info(),
            "instructions": "The MCP conformance suite's fixture server (mcpmux example-server --conformance).",
        })
    }

    fn tools(&self) -> Vec<Value> {
        let none = json!({ "type": "object", "properties": {} });
        let tool = |name: &str, description: &str| json!({ "name": name, "description": description, "inputSchema": none });
        let with = |name: &str, description: &str, arg: &str, about: &str| {
            json!({ "name": name, "description": description, "inputSchema": {
                "type": "object",
                "properties": { arg: { "type": "string", "description": about } },
                "required": [arg],
            } })
        };
        let mut tools = vec![
            tool("test_simple_text", "Returns simple text content."),
            tool("test_image_content", "Returns a PNG image."),
            tool("test_audio_content", "Returns a WAV clip."),
            tool(
                "test_embedded_resource",
                "Returns an embedded text resource.",
            ),
            tool(
                "test_multiple_content_types",
                "Returns text, an image and a resource.",
            ),
            tool(
                "test_tool_with_logging",
                "Sends three info log messages while it runs.",
            ),
            tool("test_error_handling", "Always fails with isError: true."),
            tool(
                "test_tool_with_progress",
                "Reports progress 0, 50 and 100 of 100.",
            ),
            with(
                "test_sampling",
                "Asks the client's LLM for a completion.",
                "prompt",
                "The prompt to send to the LLM",
            ),
            with(
                "test_elicitation",
                "Asks the user for a username and an email.",
                "message",
                "The message to show the user",
            ),
            tool(
                "test_elicitation_sep1034_defaults",
                "Elicits a form whose fields all have defaults (SEP-1034).",
            ),
            tool(
                "test_elicitation_sep1330_enums",
                "Elicits a form with every enum variant (SEP-1330).",
            ),
            tool(
                "test_missing_capability",
                "Needs the client's sampling capability.",
            ),
            tool(
                "test_streaming_elicitation",
                "Asks the user to confirm, as an input request.",
            ),
            tool(
                "test_logging_tool",
                "Logs at info, only when the request set a log level.",
            ),
            tool(
                "test_trigger_tool_change",
                "Adds a tool and announces tools/list_changed.",
            ),
            tool(
                "test_trigger_prompt_change",
                "Adds a prompt and announces prompts/list_changed.",
            ),
            tool(
                "touch_resource",
                "Fixture helper: announces notifications/resources/updated for `uri`.",
            ),
            tool(
                "test_input_required_result_elicitation",
                "Asks for the user's name (elicitation).",
            ),
            tool(
                "test_input_required_result_sampling",
                "Asks the LLM a question (sampling).",
            ),
            tool(
                "test_input_required_result_list_roots",
                "Asks for the client's roots.",
            ),
            tool(
                "test_input_required_result_request_state",
                "Asks for confirmation, carrying requestState.",
            ),
            tool(
                "test_input_required_result_multiple_inputs",
                "Asks for elicitation, sampling and roots at once.",
            ),
            tool(
                "test_input_required_result_multi_round",
                "Asks two questions in two rounds.",
            ),
            tool(
                "test_input_required_result_tampered_state",
                "Asks for confirmation with integrity-protected state.",
            ),
            tool(
                "test_input_required_result_capabilities",
                "Asks only for what the client declared.",
            ),
            json!({ "name": "test_custom_header", "description": "Echoes `region`, which clients also send as the Mcp-Param-Region header (SEP-2243).",
                    "inputSchema": { "type": "object",
                        "properties": { "region": { "type": "string", "description": "A region name", "x-mcp-header": "Region" } },
                        "required": ["region"] } }),
            json!({ "name": "json_schema_2020_12_tool", "description": "Tool with JSON Schema 2020-12 features",
                    "inputSchema": {
                        "$schema": "https://json-schema.org/draft/2020-12/schema",
                        "type": "object",
                        "$defs": { "address": { "$anchor": "addressDef", "type": "object",
                            "properties": { "street": { "type": "string" }, "city": { "type": "string" } } } },
                        "properties": {
                            "name": { "type": "string" },
                            "address": { "$ref": "#/$defs/address" },
                            "contactMethod": { "type": "string", "enum": ["phone", "email"] },
                            "phone": { "type": "string" },
                            "email": { "type": "string" },
                        },
                        "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
                        "if": { "properties": { "contactMethod": { "const": "phone" } }, "required": ["contactMethod"] },
                        "then": { "required": ["phone"] },
                        "else": { "required": ["email"] },
                        "additionalProperties": false,
                    } }),
        ];
        let added = self.added_tools.lock().unwrap_or_else(|e| e.into_inner());
        tools.extend(
            added
                .iter()
                .map(|name| tool(name, "Added by test_trigger_tool_change.")),
        );
        tools
    }

    fn prompts(&self) -> Vec<Value> {
        let mut prompts = vec![
            json!({ "name": "test_simple_prompt", "description": "A simple prompt without arguments." }),
            json!({ "name": "test_prompt_with_arguments", "description": "A prompt with two arguments.",
                    "arguments": [
                        { "name": "arg1", "description": "First test argument", "required": true },
                        { "name": "arg2", "description": "Second test argument", "required": true },
                    ] }),
            json!({ "name": "test_prompt_with_embedded_resource", "description": "A prompt embedding a resource.",
                    "arguments": [{ "name": "resourceUri", "description": "URI of the resource to embed", "required": true }] }),
            json!({ "name": "test_prompt_with_image", "description": "A prompt with an image." }),
            json!({ "name": "test_input_required_result_prompt", "description": "A prompt that asks the user for context first." }),
        ];
        let added = self.added_prompts.lock().unwrap_or_else(|e| e.into_inner());
        prompts.extend(added.iter().map(
            |name| json!({ "name": name, "description": "Added by test_trigger_prompt_change." }),
        ));
        prompts
    }

    async fn get_prompt(&self, server: &Server, req: &Request<'_>) -> Result<Value, Value> {
        let name = req
            .params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let arg = |key: &str| {
            req.params
                .pointer(&format!("/arguments/{key}"))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| error(code::INVALID_PARAMS, format!("missing argument {key:?}")))
        };
        let user = |content: Value| json!({ "role": "user", "content": content });
        let user_text = |s: &str| user(json!({ "type": "text", "text": s }));
        Ok(match name {
            "test_simple_prompt" => {
                json!({ "messages": [user_text("This is a simple prompt for testing.")] })
            }
            "test_prompt_with_arguments" => {
                let (a, b) = (arg("arg1")?, arg("arg2")?);
                json!({ "messages": [user_text(&format!("Prompt with arguments: arg1='{a}', arg2='{b}'"))] })
            }
            "test_prompt_with_embedded_resource" => {
                let uri = arg("resourceUri")?;
                json!({ "messages": [
                    user(json!({ "type": "resource", "resource": {
                        "uri": uri, "mimeType": "text/plain", "text": "Embedded resource content for testing." } })),
                    user_text("Please process the embedded resource above."),
                ] })
            }
            "test_prompt_with_image" => json!({ "messages": [
                user(json!({ "type": "image", "data": PNG, "mimeType": "image/png" })),
                user_text("Please analyze the image above."),
            ] }),
            "test_input_required_result_prompt" => {
                return input::run(self, server, req, name).await;
            }
            other
                if self
                    .added_prompts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .any(|p| p == other) =>
            {
                json!({ "messages": [user_text(&format!("The dynamically added prompt {other}."))] })
            }
            other => {
                return Err(error(
                    code::INVALID_PARAMS,
                    format!("Unknown prompt: {other}"),
                ));
            }
        })
    }

    async fn call_tool(&self, server: &Server, req: &Request<'_>) -> Result<Value, Value> {
        let name = req
            .params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !self.tools().iter().any(|t| t["name"] == name) {
            return Err(error(code::INVALID_PARAMS, format!("Unknown tool: {name}")));
        }
        Ok(match name {
            "test_simple_text" => text("This is a simple text response for testing."),
            "test_image_content" => {
                json!({ "content": [{ "type": "image", "data": PNG, "mimeType": "image/png" }] })
            }
            "test_audio_content" => {
                json!({ "content": [{ "type": "audio", "data": wav(), "mimeType": "audio/wav" }] })
            }
            "test_embedded_resource" => json!({ "content": [{ "type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain",
                "text": "This is an embedded resource content." } }] }),
            "test_multiple_content_types" => json!({ "content": [
                { "type": "text", "text": "Multiple content types test:" },
                { "type": "image", "data": PNG, "mimeType": "image/png" },
                { "type": "resource", "resource": { "uri": "test://mixed-content-resource",
                    "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}" } },
            ] }),
            "test_tool_with_logging" => {
                for (i, message) in [
                    "Tool execution started",
                    "Tool processing data",
                    "Tool execution completed",
                ]
                .into_iter()
                .enumerate()
                {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    self.log(server, req, "info", message).await;
                }
                text("Tool with logging executed successfully")
            }
            "test_logging_tool" => {
                self.log(server, req, "info", "test_logging_tool ran").await;
                text("Logged at info (if the request asked for logs)")
            }
            "test_error_handling" => json!({ "isError": true, "content": [
                { "type": "text", "text": "This tool intentionally returns an error for testing" },
            ] }),
            "test_tool_with_progress" => {
                let token = req.params.pointer("/_meta/progressToken").cloned();
                for (i, progress) in [0, 50, 100].into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    if let Some(token) = &token {
                        server
                            .notify("notifications/progress", json!({ "progressToken": token, "progress": progress, "total": 100 }))
                            .await;
                    }
                }
                text("Tool with progress executed successfully")
            }
            "test_trigger_tool_change" => {
                let added = {
                    let mut tools = self.added_tools.lock().unwrap_or_else(|e| e.into_inner());
                    let name = format!("test_dynamic_tool_{}", tools.len() + 1);
                    tools.push(name.clone());
                    name
                };
                self.listens
                    .broadcast(self, server, listen::Change::Tools)
                    .await;
                text(format!("Added tool {added}"))
            }
            "test_trigger_prompt_change" => {
                let added = {
                    let mut prompts = self.added_prompts.lock().unwrap_or_else(|e| e.into_inner());
                    let name = format!("test_dynamic_prompt_{}", prompts.len() + 1);
                    prompts.push(name.clone());
                    name
                };
                self.listens
                    .broadcast(self, server, listen::Change::Prompts)
                    .await;
                text(format!("Added prompt {added}"))
            }
            "touch_resource" => {
                let uri = req.arg("uri").unwrap_or_default();
                self.listens.resource_updated(self, server, &uri).await;
                text(format!("Touched {uri}"))
            }
            "json_schema_2020_12_tool" => text(format!("Received {}", req.args())),
            "test_custom_header" => {
                text(format!("Region: {}", req.arg("region").unwrap_or_default()))
            }
            name if name.starts_with("test_dynamic_tool_") => text(format!("{name} ran")),
            name => return input::run(self, server, req, name).await,
        })
    }

    /// Sends a log message if the request's (or session's) level admits it.
    async fn log(&self, server: &Server, req: &Request<'_>, level: &str, data: &str) {
        let admitted = req
            .log_level
            .as_deref()
            .and_then(level_rank)
            .is_some_and(|wanted| level_rank(level).is_some_and(|l| l >= wanted));
        if admitted {
            server
                .notify(
                    "notifications/message",
                    json!({ "level": level, "logger": "conformance-fixture", "data": data }),
                )
                .await;
        }
    }
}

/// A modern result: `resultType`, and caching hints on lists and reads.
fn stamp(method: &str, result: Value) -> Value {
    let Value::Object(mut members) = result else {
        return result;
    };
    members
        .entry("resultType")
        .or_insert_with(|| Value::from("complete"));
    if matches!(
        method,
        "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
    ) {
        members.entry("ttlMs").or_insert_with(|| Value::from(0));
        members
            .entry("cacheScope")
            .or_insert_with(|| Value::from("private"));
    }
    Value::Object(members)
}

fn resources() -> Vec<Value> {
    vec![
        json!({ "uri": "test://static-text", "name": "static-text", "description": "A static text resource.", "mimeType": "text/plain" }),
        json!({ "uri": "test://static-binary", "name": "static-binary", "description": "A static PNG image.", "mimeType": "image/png" }),
        json!({ "uri": "test://watched-resource", "name": "watched-resource", "description": "A resource to subscribe to.", "mimeType": "text/plain" }),
    ]
}

fn templates() -> Vec<Value> {
    vec![
        json!({ "uriTemplate": "test://template/{id}/data", "name": "template-data",
                 "description": "Data for an id.", "mimeType": "application/json" }),
    ]
}

fn read(req: &Request<'_>) -> Result<Value, Value> {
    let uri = req
        .params
        .get("uri")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let content = match uri {
        "test://static-text" => json!({ "uri": uri, "mimeType": "text/plain",
                                        "text": "This is the content of the static text resource." }),
        "test://static-binary" => json!({ "uri": uri, "mimeType": "image/png", "blob": PNG }),
        "test://watched-resource" => json!({ "uri": uri, "mimeType": "text/plain",
                                             "text": "The content of the watched resource." }),
        _ => match uri
            .strip_prefix("test://template/")
            .and_then(|rest| rest.strip_suffix("/data"))
            .filter(|id| !id.is_empty() && !id.contains('/'))
        {
            Some(id) => json!({ "uri": uri, "mimeType": "application/json",
                "text": json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") }).to_string() }),
            None => {
                // SEP-2164 settles on -32602; the 2025 era used -32002.
                let code = if req.modern {
                    code::INVALID_PARAMS
                } else {
                    code::RESOURCE_NOT_FOUND
                };
                let mut e = error(code, "Resource not found");
                e["data"] = json!({ "uri": uri });
                return Err(e);
            }
        },
    };
    Ok(json!({ "contents": [content] }))
}

/// Completions for `test_prompt_with_arguments` and the template's `id`.
fn complete(params: &Value) -> Value {
    let prefix = params
        .pointer("/argument/value")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let candidates: &[&str] = match params.pointer("/ref/type").and_then(Value::as_str) {
        Some("ref/prompt") => &["paris", "park", "party", "test", "testValue1"],
        Some("ref/resource") => &["1", "2", "3", "123"],
        _ => &[],
    };
    let values: Vec<&str> = candidates
        .iter()
        .copied()
        .filter(|c| c.starts_with(prefix))
        .collect();
    json!({ "completion": { "values": values, "total": values.len(), "hasMore": false } })
}
