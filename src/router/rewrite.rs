//! Request params and result bodies rewritten between the exposed view and
//! an upstream's own names and URIs.
//!
//! Params are split into top-level members with raw values, so only the
//! members that change (`name`, `uri`, `ref`, `_meta.progressToken`) are
//! touched. Results are scanned for `"uri"` first; a body without one (the
//! common `tools/call` result) is forwarded byte for byte. What a modern
//! client's result carries besides (`resultType`, caching hints) is
//! spliced in where the one-pass check or the URI rewrite found its own
//! members, not by parsing it again.

use std::sync::LazyLock;

use memchr::memmem::Finder;

use serde_json::Value;

use crate::catalog::naming;
use crate::protocol::Method;
use crate::protocol::hints::{self, CacheHints, Hint, HintSpans, Put};

/// JSON text of a string.
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    crate::protocol::push_json_string(&mut out, s);
    out
}

/// The result with every upstream URI namespaced under `upstream`, as
/// the gateway writes it, and where its own hint members are in that
/// text; `None` when it has no URI to rewrite and is kept as it is. This
/// is the one read of a result by the router, for the one rewrite that has
/// to look inside it (tests count it as a parse).
pub(crate) fn namespace_result(
    method: &Method,
    upstream: &str,
    text: &str,
) -> Option<(String, HintSpans)> {
    // A fast pre-check, not a parse: a body that cannot hold a "uri" key is
    // passed through without being parsed. Escaped keys could spell "uri"
    // without the literal bytes; treat them as possible.
    // The searcher is built once; building it costs more than a search.
    // Backslashes are found by the one-byte search, which is the cheaper,
    // and only a `\u` among them counts.
    static URI_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"uri\""));
    // Only these results have URIs where the gateway rewrites them (a
    // task's result is the result of the `tools/call` that created it).
    let places = match method {
        Method::ToolsCall | Method::TasksResult => UriPlaces::Blocks,
        Method::PromptsGet => UriPlaces::Messages,
        Method::ResourcesRead => UriPlaces::Contents,
        _ => return None,
    };
    let bytes = text.as_bytes();
    let unicode_escape =
        || memchr::memchr_iter(b'\\', bytes).any(|at| bytes.get(at + 1) == Some(&b'u'));
    if URI_KEY.find(bytes).is_none() && !unicode_escape() {
        return None;
    }
    #[cfg(test)]
    crate::protocol::note_envelope_parse();
    let Ok(Value::Object(mut value)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    match places {
        UriPlaces::Blocks => namespace_blocks(value.get_mut("content"), upstream),
        UriPlaces::Messages => {
            if let Some(Value::Array(messages)) = value.get_mut("messages") {
                for message in messages {
                    namespace_blocks(message.get_mut("content"), upstream);
                }
            }
        }
        UriPlaces::Contents => {
            if let Some(Value::Array(contents)) = value.get_mut("contents") {
                for content in contents {
                    namespace_member(content, "uri", upstream);
                }
            }
        }
    }
    Some(hints::write_object(&value))
}

/// Where a result holds the URIs [`namespace_result`] rewrites.
enum UriPlaces {
    /// Its `content` blocks (a tool's result).
    Blocks,
    /// The content blocks of its `messages` (a prompt).
    Messages,
    /// Its `contents` (a read resource).
    Contents,
}

/// The response frame to request `id` (raw JSON) of a modern (2026-07-28)
/// client whose result is `text`, with `spans` where its own hint members
/// are: with `resultType` (legacy upstreams send none), and with `cache`
/// hints set, or for `resources/read` without them its own or defaults.
/// Without hints from the upstream a read is `private` and immediately
/// stale: the gateway cannot know who may share it. The members are
/// spliced in; the result is not parsed again.
pub(crate) fn modern_frame(
    id: &str,
    method: &Method,
    text: &str,
    spans: &HintSpans,
    cache: Option<CacheHints<'_>>,
) -> String {
    let ttl_ms;
    let scope;
    let complete = Put {
        hint: Hint::ResultType,
        value: "\"complete\"",
        replace: false,
    };
    let (ttl_value, scope_value, replace) = match cache {
        Some(cache) => {
            ttl_ms = cache.ttl_ms.to_string();
            scope = json_string(cache.scope);
            (ttl_ms.as_str(), scope.as_str(), true)
        }
        None => ("0", "\"private\"", false),
    };
    let hinted = [
        complete,
        Put {
            hint: Hint::TtlMs,
            value: ttl_value,
            replace,
        },
        Put {
            hint: Hint::CacheScope,
            value: scope_value,
            replace,
        },
    ];
    let puts = match replace || *method == Method::ResourcesRead {
        true => &hinted[..],
        false => &hinted[..1],
    };
    let mut out = crate::protocol::response_head(id, text.len() + 96);
    spans.edit_into(&mut out, text, puts);
    out.push('}');
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
    use serde_json::json;
    use serde_json::value::RawValue;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    /// A modern frame of `body` (spans learned by parsing it) as a value.
    fn modern(method: &str, body: &str, cache: Option<CacheHints<'_>>) -> Value {
        let (text, spans) = hints::learn(body);
        let frame: Value = serde_json::from_str(&modern_frame(
            "7",
            &Method::from_name(method),
            &text,
            &spans,
            cache,
        ))
        .unwrap();
        assert_eq!(frame["id"], 7);
        frame["result"].clone()
    }

    #[test]
    fn modern_results_get_result_type_and_read_hints() {
        let call = modern("tools/call", r#"{"content":[]}"#, None);
        assert_eq!(call, json!({"resultType":"complete","content":[]}));
        let kept = modern(
            "tools/call",
            r#"{"resultType":"input_required","requestState":"s"}"#,
            None,
        );
        assert_eq!(
            kept,
            json!({"resultType":"input_required","requestState":"s"})
        );
        let read = modern("resources/read", r#"{"contents":[],"ttlMs":5}"#, None);
        assert_eq!(
            read,
            json!({"resultType":"complete","contents":[],"ttlMs":5,"cacheScope":"private"})
        );
        let empty = modern("resources/read", "{ }", None);
        assert_eq!(
            empty,
            json!({"resultType":"complete","ttlMs":0,"cacheScope":"private"})
        );
        assert_eq!(modern("tools/call", "[1,2]", None), json!([1, 2]));
    }

    /// Hints from the cache replace the result's own.
    #[test]
    fn cache_hints_replace_the_results_own() {
        let hints = || CacheHints {
            ttl_ms: 1200,
            scope: "public",
        };
        let read = modern(
            "resources/read",
            r#"{"contents":[],"ttlMs":30000,"cacheScope":"private"}"#,
            Some(hints()),
        );
        assert_eq!(
            read,
            json!({"resultType":"complete","contents":[],"ttlMs":1200,"cacheScope":"public"})
        );
        let prompt = modern("prompts/get", r#"{"messages":[]}"#, Some(hints()));
        assert_eq!(prompt["ttlMs"], 1200);
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

    /// The namespaced result, checked to have its hint spans right.
    fn namespaced(method: &str, upstream: &str, text: &str) -> Value {
        let (out, spans) =
            namespace_result(&Method::from_name(method), upstream, text).expect("rewritten");
        let value: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            spans
                .value(&out, Hint::TtlMs)
                .map(|v| v.parse::<u64>().unwrap()),
            value["ttlMs"].as_u64()
        );
        value
    }

    #[test]
    fn namespaces_links_and_embedded_resources() {
        let result = raw(
            r#"{"content":[{"type":"text","text":"hi"},{"type":"resource_link","uri":"file:///a","name":"a"},{"type":"resource","resource":{"uri":"mem://b","text":"b"}}]}"#,
        );
        let out = namespaced("tools/call", "fs", result.get());
        assert_eq!(out["content"][1]["uri"], "fs+file:///a");
        assert_eq!(out["content"][2]["resource"]["uri"], "fs+mem://b");

        let plain = raw(r#"{"content":[{"type":"text","text":"no links"}]}"#);
        assert!(namespace_result(&Method::ToolsCall, "fs", plain.get()).is_none());
        // A result of another method is not read: nothing in it is rewritten.
        let parses = crate::protocol::envelopes_parsed();
        assert!(namespace_result(&Method::TasksGet, "fs", result.get()).is_none());
        assert_eq!(crate::protocol::envelopes_parsed(), parses);
        // A task's result is its tool call's.
        let out = namespaced("tasks/result", "fs", result.get());
        assert_eq!(out["content"][1]["uri"], "fs+file:///a");

        let read = raw(r#"{"contents":[{"uri":"file:///a","text":"x"}],"ttlMs":9}"#);
        let out = namespaced("resources/read", "fs", read.get());
        assert_eq!(out["contents"][0]["uri"], "fs+file:///a");

        let prompt = raw(
            r#"{"messages":[{"role":"user","content":{"type":"resource","resource":{"uri":"x://1","text":""}}}]}"#,
        );
        let out = namespaced("prompts/get", "p", prompt.get());
        assert_eq!(out["messages"][0]["content"]["resource"]["uri"], "p+x://1");
    }
}
