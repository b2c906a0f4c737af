//! Request params and result bodies rewritten between the exposed view and
//! an upstream's own names and URIs.
//!
//! Params are split into top-level members with raw values, so only the
//! members that change (`name`, `uri`, `ref`, `_meta.progressToken`) are
//! touched. Results are scanned for `"uri"` first; a body without one (the
//! common `tools/call` result) is forwarded byte for byte.

use std::borrow::Cow;

use indexmap::IndexMap;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::catalog::naming;

/// Why a request's params are not what its method needs: read here, or
/// checked by the router, which answers "invalid params: " and this.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ParamsError {
    #[error("params must be an object")]
    NotAnObject,
    #[error("_meta must be an object")]
    MetaNotAnObject,
    /// Holds the member's key.
    #[error("missing {0:?}")]
    Missing(String),
    #[error("{0:?} must be a string")]
    NotAString(String),
    #[error("{0:?} must be an object")]
    MemberNotAnObject(String),
    /// `logging/setLevel` with a level MCP does not define.
    #[error("unknown log level {0:?}")]
    UnknownLogLevel(String),
    /// A completion `ref` of another type (or none).
    #[error("ref.type must be \"ref/prompt\" or \"ref/resource\", not {0:?}")]
    RefType(Option<String>),
    /// Anything else wrong with the params, said in full.
    #[error("{0}")]
    Invalid(String),
}

/// A request's params, member by member.
pub(crate) struct Params<'a> {
    members: IndexMap<String, &'a RawValue>,
    meta: Option<Map<String, Value>>,
}

impl<'a> Params<'a> {
    /// Parses an object of params; absent params are an empty object.
    pub(crate) fn parse(raw: Option<&'a RawValue>) -> Result<Self, ParamsError> {
        let mut members: IndexMap<String, &'a RawValue> = match raw {
            None => IndexMap::new(),
            Some(raw) => serde_json::from_str(raw.get()).map_err(|_| ParamsError::NotAnObject)?,
        };
        let meta = match members.shift_remove("_meta") {
            None => None,
            Some(raw) => {
                Some(serde_json::from_str(raw.get()).map_err(|_| ParamsError::MetaNotAnObject)?)
            }
        };
        Ok(Self { members, meta })
    }

    /// A string member, or why it is missing.
    pub(crate) fn string(&self, key: &str) -> Result<String, ParamsError> {
        let raw = self
            .members
            .get(key)
            .ok_or_else(|| ParamsError::Missing(key.to_owned()))?;
        serde_json::from_str(raw.get()).map_err(|_| ParamsError::NotAString(key.to_owned()))
    }

    /// A member's raw JSON.
    pub(crate) fn raw(&self, key: &str) -> Option<&'a RawValue> {
        self.members.get(key).copied()
    }

    /// A string member that may be absent or null.
    pub(crate) fn optional_string(&self, key: &str) -> Result<Option<String>, ParamsError> {
        match self.members.get(key) {
            None => Ok(None),
            Some(raw) if raw.get() == "null" => Ok(None),
            Some(raw) => serde_json::from_str(raw.get())
                .map(Some)
                .map_err(|_| ParamsError::NotAString(key.to_owned())),
        }
    }

    /// An object member, parsed.
    pub(crate) fn object(&self, key: &str) -> Result<Map<String, Value>, ParamsError> {
        let raw = self
            .members
            .get(key)
            .ok_or_else(|| ParamsError::Missing(key.to_owned()))?;
        serde_json::from_str(raw.get()).map_err(|_| ParamsError::MemberNotAnObject(key.to_owned()))
    }

    /// Drops every `_meta` member whose key starts with `prefix`.
    pub(crate) fn strip_meta_prefix(&mut self, prefix: &str) {
        if let Some(meta) = &mut self.meta {
            meta.retain(|key, _| !key.starts_with(prefix));
        }
    }

    /// Sets a `_meta` member the client did not set itself.
    pub(crate) fn default_meta(&mut self, key: &str, value: Value) {
        self.meta
            .get_or_insert_with(Map::new)
            .entry(key.to_owned())
            .or_insert(value);
    }

    /// Sets a `_meta` member, replacing the client's.
    pub(crate) fn set_meta(&mut self, key: &str, value: Value) {
        self.meta
            .get_or_insert_with(Map::new)
            .insert(key.to_owned(), value);
    }

    /// Removes a member, giving its raw JSON.
    pub(crate) fn take(&mut self, key: &str) -> Option<&'a RawValue> {
        self.members.shift_remove(key)
    }

    /// A `_meta` member.
    pub(crate) fn meta(&self, key: &str) -> Option<&Value> {
        self.meta.as_ref()?.get(key)
    }

    /// The whole `_meta` object, if the client sent one.
    pub(crate) fn meta_object(&self) -> Option<&Map<String, Value>> {
        self.meta.as_ref()
    }

    /// The client's `_meta.progressToken`, if it asked for progress.
    pub(crate) fn progress_token(&self) -> Option<&Value> {
        self.meta.as_ref()?.get("progressToken")
    }

    /// The params to send upstream: `key` replaced by `value` (JSON text),
    /// and the progress token replaced by `progress` or removed.
    pub(crate) fn build(&self, key: &str, value: &str, progress: Option<u64>) -> String {
        let mut out = String::with_capacity(
            64 + self
                .members
                .values()
                .map(|v| v.get().len() + 16)
                .sum::<usize>(),
        );
        out.push('{');
        let mut first = true;
        let mut member = |out: &mut String, k: &str, v: &str| {
            if !first {
                out.push(',');
            }
            first = false;
            crate::protocol::push_json_string(out, k);
            out.push(':');
            out.push_str(v);
        };
        let mut replaced = false;
        for (k, v) in &self.members {
            if k == key {
                member(&mut out, k, value);
                replaced = true;
            } else {
                member(&mut out, k, v.get());
            }
        }
        if !replaced {
            member(&mut out, key, value);
        }
        if let Some(meta) = &self.meta {
            let mut meta = meta.clone();
            match progress {
                Some(id) if meta.contains_key("progressToken") => {
                    meta.insert("progressToken".into(), Value::from(id));
                }
                _ => {
                    meta.remove("progressToken");
                }
            }
            if !meta.is_empty() {
                member(&mut out, "_meta", &Value::Object(meta).to_string());
            }
        }
        out.push('}');
        out
    }
}

/// JSON text of a string.
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    crate::protocol::push_json_string(&mut out, s);
    out
}

/// The result with every upstream URI namespaced under `upstream`.
pub(crate) fn namespace_result<'r>(
    method: &str,
    upstream: &str,
    result: &'r RawValue,
) -> Cow<'r, str> {
    let text = result.get();
    // A fast pre-check, not a parse: a body that cannot hold a "uri" key is
    // passed through without being parsed. Escaped keys could spell "uri"
    // without the literal bytes; treat them as possible.
    if !text.contains("\"uri\"") && !text.contains("\\u") {
        return Cow::Borrowed(text);
    }
    let Ok(mut value) = serde_json::from_str::<Value>(text) else {
        return Cow::Borrowed(text);
    };
    match method {
        "tools/call" => namespace_blocks(value.get_mut("content"), upstream),
        "prompts/get" => {
            if let Some(Value::Array(messages)) = value.get_mut("messages") {
                for message in messages {
                    namespace_blocks(message.get_mut("content"), upstream);
                }
            }
        }
        "resources/read" => {
            if let Some(Value::Array(contents)) = value.get_mut("contents") {
                for content in contents {
                    namespace_member(content, "uri", upstream);
                }
            }
        }
        _ => {}
    }
    Cow::Owned(value.to_string())
}

/// A result as a modern (2026-07-28) client expects it: with `resultType`
/// (legacy upstreams send none), and for `resources/read` with caching
/// hints. Without hints from the upstream a read is `private` and
/// immediately stale: the gateway cannot know who may share it.
pub(crate) fn modern_result(method: &str, body: &str) -> String {
    let Ok(mut members) = serde_json::from_str::<IndexMap<String, Box<RawValue>>>(body) else {
        return body.to_owned();
    };
    let raw = |s: &str| RawValue::from_string(s.to_owned()).expect("valid JSON literal");
    if !members.contains_key("resultType") {
        members.shift_insert(0, "resultType".into(), raw("\"complete\""));
    }
    if method == "resources/read" {
        members.entry("ttlMs".into()).or_insert_with(|| raw("0"));
        members
            .entry("cacheScope".into())
            .or_insert_with(|| raw("\"private\""));
    }
    serde_json::to_string(&members).unwrap_or_else(|_| body.to_owned())
}

/// A gateway-built result object with `resultType` and caching hints
/// spliced in front of its members.
pub(crate) fn cacheable(result: &str, ttl_ms: u64, scope: &str) -> String {
    let rest = result.strip_prefix('{').unwrap_or(result);
    let mut out = hinted_opening(rest, ttl_ms, scope);
    out.push_str(rest);
    out
}

/// What goes in front of `rest`, a result object's text after its `{`, to
/// make it that result with `resultType` and caching hints first.
pub(crate) fn hinted_opening(rest: &str, ttl_ms: u64, scope: &str) -> String {
    let separator = if rest.trim_start().starts_with('}') {
        ""
    } else {
        ","
    };
    format!(
        "{{\"resultType\":\"complete\",\"ttlMs\":{ttl_ms},\"cacheScope\":\"{scope}\"{separator}"
    )
}

/// Namespaces `resource_link` and embedded `resource` blocks, given one
/// content block or an array of them.
fn namespace_blocks(content: Option<&mut Value>, upstream: &str) {
    match content {
        Some(Value::Array(blocks)) => blocks.iter_mut().for_each(|b| namespace_block(b, upstream)),
        Some(block @ Value::Object(_)) => namespace_block(block, upstream),
        _ => {}
    }
}

fn namespace_block(block: &mut Value, upstream: &str) {
    match block.get("type").and_then(Value::as_str) {
        Some("resource_link") => namespace_member(block, "uri", upstream),
        Some("resource") => {
            if let Some(resource) = block.get_mut("resource") {
                namespace_member(resource, "uri", upstream);
            }
        }
        _ => {}
    }
}

fn namespace_member(object: &mut Value, key: &str, upstream: &str) {
    if let Some(Value::String(uri)) = object.get_mut(key) {
        *uri = naming::namespaced_uri(upstream, uri);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn replaces_name_and_progress_token() {
        let input = raw(
            r#"{"name":"a__echo","arguments":{"x":[1,2]},"_meta":{"progressToken":"tok","k":1}}"#,
        );
        let params = Params::parse(Some(&input)).unwrap();
        assert_eq!(params.string("name").unwrap(), "a__echo");
        assert_eq!(params.progress_token(), Some(&Value::from("tok")));
        let built: Value =
            serde_json::from_str(&params.build("name", &json_string("echo"), Some(42))).unwrap();
        assert_eq!(built["name"], "echo");
        assert_eq!(built["arguments"]["x"][1], 2);
        assert_eq!(built["_meta"]["progressToken"], 42);
        assert_eq!(built["_meta"]["k"], 1);
        let stripped: Value =
            serde_json::from_str(&params.build("name", "\"echo\"", None)).unwrap();
        assert!(stripped["_meta"].get("progressToken").is_none());
    }

    #[test]
    fn modern_results_get_result_type_and_read_hints() {
        let out: Value =
            serde_json::from_str(&modern_result("tools/call", r#"{"content":[]}"#)).unwrap();
        assert_eq!(out["resultType"], "complete");
        let kept: Value = serde_json::from_str(&modern_result(
            "tools/call",
            r#"{"resultType":"input_required","requestState":"s"}"#,
        ))
        .unwrap();
        assert_eq!(kept["resultType"], "input_required");
        assert_eq!(kept["requestState"], "s");
        let read: Value = serde_json::from_str(&modern_result(
            "resources/read",
            r#"{"contents":[],"ttlMs":5}"#,
        ))
        .unwrap();
        assert_eq!(
            (read["ttlMs"].as_u64(), read["cacheScope"].as_str()),
            (Some(5), Some("private"))
        );
    }

    #[test]
    fn cacheable_results_stay_valid_json() {
        let list: Value =
            serde_json::from_str(&cacheable(r#"{"tools":[]}"#, 60, "public")).unwrap();
        assert_eq!(
            (
                list["ttlMs"].as_u64(),
                list["tools"].as_array().map(Vec::len)
            ),
            (Some(60), Some(0))
        );
        let empty: Value = serde_json::from_str(&cacheable("{}", 0, "private")).unwrap();
        assert_eq!(empty["cacheScope"], "private");
    }

    #[test]
    fn rejects_non_object_params() {
        assert!(Params::parse(Some(&raw("[1]"))).is_err());
        assert!(Params::parse(Some(&raw(r#"{"_meta":3}"#))).is_err());
        assert!(Params::parse(None).unwrap().string("name").is_err());
    }

    #[test]
    fn params_errors_read_as_they_always_have() {
        let why = |e: ParamsError| e.to_string();
        assert_eq!(
            why(Params::parse(Some(&raw("[1]"))).err().unwrap()),
            "params must be an object"
        );
        assert_eq!(
            why(Params::parse(Some(&raw(r#"{"_meta":3}"#))).err().unwrap()),
            "_meta must be an object"
        );
        let members = raw(r#"{"n":1,"ref":"x"}"#);
        let params = Params::parse(Some(&members)).unwrap();
        assert_eq!(why(params.string("name").unwrap_err()), r#"missing "name""#);
        assert_eq!(
            why(params.string("n").unwrap_err()),
            r#""n" must be a string"#
        );
        assert_eq!(
            why(params.optional_string("n").unwrap_err()),
            r#""n" must be a string"#
        );
        assert_eq!(
            why(params.object("ref").unwrap_err()),
            r#""ref" must be an object"#
        );
        assert_eq!(
            why(ParamsError::UnknownLogLevel("loud".into())),
            r#"unknown log level "loud""#
        );
        assert_eq!(
            why(ParamsError::RefType(None)),
            r#"ref.type must be "ref/prompt" or "ref/resource", not None"#
        );
    }

    #[test]
    fn namespaces_links_and_embedded_resources() {
        let result = raw(
            r#"{"content":[{"type":"text","text":"hi"},{"type":"resource_link","uri":"file:///a","name":"a"},{"type":"resource","resource":{"uri":"mem://b","text":"b"}}]}"#,
        );
        let out: Value =
            serde_json::from_str(&namespace_result("tools/call", "fs", &result)).unwrap();
        assert_eq!(out["content"][1]["uri"], "fs+file:///a");
        assert_eq!(out["content"][2]["resource"]["uri"], "fs+mem://b");

        let plain = raw(r#"{"content":[{"type":"text","text":"no links"}]}"#);
        assert!(matches!(
            namespace_result("tools/call", "fs", &plain),
            Cow::Borrowed(_)
        ));

        let read = raw(r#"{"contents":[{"uri":"file:///a","text":"x"}]}"#);
        let out: Value =
            serde_json::from_str(&namespace_result("resources/read", "fs", &read)).unwrap();
        assert_eq!(out["contents"][0]["uri"], "fs+file:///a");

        let prompt = raw(
            r#"{"messages":[{"role":"user","content":{"type":"resource","resource":{"uri":"x://1","text":""}}}]}"#,
        );
        let out: Value =
            serde_json::from_str(&namespace_result("prompts/get", "p", &prompt)).unwrap();
        assert_eq!(out["messages"][0]["content"]["resource"]["uri"], "p+x://1");
    }
}
