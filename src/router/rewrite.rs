//! Request params and result bodies rewritten between the exposed view and
//! an upstream's own names and URIs.
//!
//! Params are split into top-level members with raw values, so only the
//! members that change (`name`, `uri`, `ref`, `_meta.progressToken`) are
//! touched. Results are scanned for `"uri"` first; a body without one (the
//! common `tools/call` result) is forwarded byte for byte.

use std::borrow::Cow;
use std::sync::LazyLock;

use indexmap::IndexMap;
use memchr::memmem::Finder;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::catalog::naming;

/// JSON text of a string.
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    crate::protocol::push_json_string(&mut out, s);
    out
}

/// The result with every upstream URI namespaced under `upstream`.
pub(crate) fn namespace_result<'r>(method: &str, upstream: &str, text: &'r str) -> Cow<'r, str> {
    // A fast pre-check, not a parse: a body that cannot hold a "uri" key is
    // passed through without being parsed. Escaped keys could spell "uri"
    // without the literal bytes; treat them as possible.
    // The searcher is built once; building it costs more than a search.
    // Backslashes are found by the one-byte search, which is the cheaper,
    // and only a `\u` among them counts.
    static URI_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"uri\""));
    let bytes = text.as_bytes();
    let unicode_escape =
        || memchr::memchr_iter(b'\\', bytes).any(|at| bytes.get(at + 1) == Some(&b'u'));
    if URI_KEY.find(bytes).is_none() && !unicode_escape() {
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
    // A second read of an answer's result (tests count it as one).
    #[cfg(test)]
    crate::protocol::note_envelope_parse();
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

/// [`modern_result`] of a result object known to have none of the members
/// it adds (`Json::has_no_result_hints`): they are spliced in front of its
/// members, and the rest of its text is kept as it came, not parsed again.
/// Anything but an object is kept as it is, as `modern_result` keeps it.
pub(crate) fn modern_result_without_hints(method: &str, body: &str) -> String {
    let Some(rest) = body.strip_prefix('{') else {
        return body.to_owned();
    };
    let mut out = match method {
        crate::protocol::method::RESOURCES_READ => hinted_opening(rest, 0, "private"),
        _ => format!("{{\"resultType\":\"complete\"{}", separator(rest)),
    };
    out.push_str(rest);
    out
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
    format!(
        "{{\"resultType\":\"complete\",\"ttlMs\":{ttl_ms},\"cacheScope\":\"{scope}\"{}",
        separator(rest)
    )
}

/// What goes between members spliced in front of an object's members and
/// `rest`, the object's text after its `{`: a comma unless it has none.
fn separator(rest: &str) -> &'static str {
    if rest.trim_start().starts_with('}') {
        ""
    } else {
        ","
    }
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

    /// Splicing the hints in front of a result known to have none gives
    /// what parsing it does, member for member.
    #[test]
    fn hints_spliced_in_front_match_the_parsed_rewrite() {
        for method in ["tools/call", "resources/read", "prompts/get"] {
            for body in [
                r#"{"content":[{"type":"text","text":"hi"}],"isError":false}"#,
                "{}",
                "{ }",
                r#"{ "a" : {"resultType":"nested"} }"#,
                "[1,2]",
                "5",
            ] {
                let spliced = modern_result_without_hints(method, body);
                let parsed = modern_result(method, body);
                let as_value = |text: &str| serde_json::from_str::<Value>(text).unwrap();
                assert_eq!(as_value(&spliced), as_value(&parsed), "{method} {body}");
            }
        }
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
    fn namespaces_links_and_embedded_resources() {
        let result = raw(
            r#"{"content":[{"type":"text","text":"hi"},{"type":"resource_link","uri":"file:///a","name":"a"},{"type":"resource","resource":{"uri":"mem://b","text":"b"}}]}"#,
        );
        let out: Value =
            serde_json::from_str(&namespace_result("tools/call", "fs", result.get())).unwrap();
        assert_eq!(out["content"][1]["uri"], "fs+file:///a");
        assert_eq!(out["content"][2]["resource"]["uri"], "fs+mem://b");

        let plain = raw(r#"{"content":[{"type":"text","text":"no links"}]}"#);
        assert!(matches!(
            namespace_result("tools/call", "fs", plain.get()),
            Cow::Borrowed(_)
        ));

        let read = raw(r#"{"contents":[{"uri":"file:///a","text":"x"}]}"#);
        let out: Value =
            serde_json::from_str(&namespace_result("resources/read", "fs", read.get())).unwrap();
        assert_eq!(out["contents"][0]["uri"], "fs+file:///a");

        let prompt = raw(
            r#"{"messages":[{"role":"user","content":{"type":"resource","resource":{"uri":"x://1","text":""}}}]}"#,
        );
        let out: Value =
            serde_json::from_str(&namespace_result("prompts/get", "p", prompt.get())).unwrap();
        assert_eq!(out["messages"][0]["content"]["resource"]["uri"], "p+x://1");
    }
}
