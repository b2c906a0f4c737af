//! The one-pass check against serde_json's: the same verdict on every
//! text, written by hand at the edges and generated around them; and the
//! fast response reader against the full envelope parse.

use proptest::prelude::*;

use super::*;
use crate::protocol::proptests::{json, message};
use crate::protocol::{Envelope, MessageKind};

/// The verdict of the check here on a whole text (one value, whitespace
/// around it allowed).
fn ours(text: &str) -> bool {
    let bytes = text.as_bytes();
    let start = skip_space(bytes, 0);
    value_end(bytes, start).is_some_and(|end| skip_space(bytes, end) == bytes.len())
}

/// serde_json's verdict on the same text, skipping the value as the
/// envelope's raw members are skipped.
fn serdes(text: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// A string's end is found a word at a time in its first sixteen bytes
/// and by a vector search after: a stop (quote, escape, control
/// character) at every place, among one-byte and multi-byte characters,
/// gets serde's verdict, and a string that ends is read to its quote.
#[test]
fn every_place_in_a_string_gets_serdes_verdict() {
    for filler in ["x", "é", "☃"] {
        for at in 0..40 {
            for stop in [
                "\"", "\\n", "\u{1}", "\u{1f}", "\\u00e9", "\\q", "\u{7f}", " ",
            ] {
                let head = filler.repeat(at);
                let text = format!("[\"{head}{stop}{head}\",1]");
                assert_eq!(ours(&text), serdes(&text), "{text:?}");
                let key = format!("{{\"{head}{stop}{head}\":[\"{head}\"]}}");
                assert_eq!(ours(&key), serdes(&key), "{key:?}");
            }
        }
    }
}

#[test]
fn edge_cases_get_serdes_verdict() {
    let texts = [
        "0",
        "-0",
        "01",
        "-",
        "1.",
        "1.5",
        ".5",
        "1e",
        "1e+",
        "1E-7",
        "1e5x",
        "-01",
        "1.0e+10",
        "2 3",
        "true",
        "tru",
        "truex",
        "nul",
        "null ",
        " \t\r\nnull",
        "\u{b}null",
        "\"\"",
        "\"a",
        "\"\\\"",
        "\"\\u12\"",
        "\"\\u12g4\"",
        "\"\\uD800\"",
        "\"\\uDFFF\\uD800\"",
        "\"\\x\"",
        "\"\\/\\b\\f\\n\\r\\t\"",
        "\"tab\there\"",
        "\"nl\nhere\"",
        "\"\u{1f}\"",
        "\"\u{7f}\u{80}é😀\"",
        "[]",
        "[ ]",
        "[,]",
        "[1,]",
        "[1 2]",
        "[[[]]]",
        "[[]",
        "[]]",
        "{}",
        "{ }",
        "{,}",
        "{\"a\"}",
        "{\"a\":}",
        "{\"a\":1,}",
        "{\"a\" : 1 , \"b\":[2]}",
        "{1:2}",
        "{\"a\":1 \"b\":2}",
        "{\"a\":1}}",
        "{\"\\u0061\":1}",
        "{\"a\\\"\":1}",
        "[{\"a\":[{\"b\":{}}]},\"x\",-1.25e-3,null,false]",
        "",
        " ",
        "[\"a\\",
        "{\"a\":\"\\",
    ];
    for text in texts {
        assert_eq!(ours(text), serdes(text), "{text:?}");
    }
}

#[test]
fn depth_is_not_limited_as_serde_does_not_limit_a_skipped_value() {
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(ours(&deep));
    assert_eq!(ours(&deep), serdes(&deep));
    assert!(!ours(&deep[..deep.len() - 1]));
    // Objects and arrays in turn, past the levels kept in place: each
    // closing bracket must match its own opening one.
    let (mut open, mut close) = (String::new(), String::new());
    for level in 0..300 {
        match level % 3 {
            0 => (open.push_str(r#"{"k":"#), close.insert(0, '}')),
            _ => (open.push('['), close.insert(0, ']')),
        };
    }
    let mixed = format!("{open}1{close}");
    assert!(ours(&mixed));
    assert_eq!(ours(&mixed), serdes(&mixed));
    for at in [close.len() - 1, close.len() - 250, 50, 3] {
        let mut wrong = close.clone().into_bytes();
        wrong[at] = if wrong[at] == b']' { b'}' } else { b']' };
        let wrong = format!("{open}1{}", String::from_utf8(wrong).unwrap());
        assert!(
            !ours(&wrong),
            "a bracket that closes the wrong kind at {at}"
        );
        assert_eq!(ours(&wrong), serdes(&wrong));
    }
}

#[test]
fn a_plain_response_is_read_in_the_one_pass() {
    let text =
        r#" {"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":"a\nb"}]}} "#;
    let answered = response(text).expect("the common answer");
    assert_eq!(answered.id, 42);
    assert_eq!(
        answered.result.get(),
        r#"{"content":[{"type":"text","text":"a\nb"}]}"#
    );
    // Members in any order, unknown ones checked and skipped.
    let text = r#"{"result":null,"x":[1,{"y":"z"}],"id":7,"jsonrpc":"2.0"}"#;
    assert_eq!(response(text).map(|a| a.id), Some(7));
}

/// Whether a member named `uri` is anywhere in `value`.
fn names_uri(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Object(members) => members
            .iter()
            .any(|(key, value)| key == "uri" || names_uri(value)),
        serde_json::Value::Array(items) => items.iter().any(names_uri),
        _ => false,
    }
}

/// The result of a plain answer whose result is `result`, as read by the
/// one pass.
fn answered(result: &str) -> Json {
    let text = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{result}}}"#);
    response(&text).expect("a plain answer").result
}

/// The one pass notes whether a result may name a URI, so the rewrite of
/// URIs skips the results it knows have none.
#[test]
fn a_result_is_known_to_have_no_uri_key_only_when_it_has_none() {
    let has_none = |result: &str| answered(result).has_no_uri_key();
    assert!(has_none(r#"{"content":[{"type":"text","text":"uri"}]}"#));
    assert!(has_none(r#"{"uris":["\"uri\""],"xuri":{"ur":1}}"#));
    assert!(has_none("[]"));
    assert!(!has_none(r#"{"uri":"file:///a"}"#));
    assert!(!has_none(r#"{"content":[{"resource":{"uri":"x"}}]}"#));
    assert!(!has_none(r#"[{"a":[{"uri":1}]}]"#));
    // An escaped key may spell it.
    assert!(!has_none(r#"{"content":[{"ur\u0069":"x"}]}"#));
    // Taken from serde's text, nothing is known.
    let raw = serde_json::value::RawValue::from_string("{}".into()).unwrap();
    assert!(!Json::from(raw).has_no_uri_key());
}

/// The one pass notes where a result's own members that a modern client's
/// result carries are, so the result is not parsed again to read or set
/// them.
#[test]
fn the_one_pass_notes_where_a_results_own_hints_are() {
    use crate::protocol::hints::Hint;
    // Each hint's value as the spans find it, or `None` when unknown.
    let values = |result: &str| {
        let json = answered(result);
        let spans = json.hints()?.clone();
        let text = json.get();
        Some(Hint::ALL.map(|hint| spans.value(text, hint).map(str::to_owned)))
    };
    let none = Some([None, None, None]);
    assert_eq!(
        values(r#"{"content":[{"type":"text","text":"resultType"}]}"#),
        none
    );
    // Nested deeper, they are another object's members.
    assert_eq!(
        values(r#"{"a":{"resultType":"x"},"b":[{"ttlMs":1}]}"#),
        none
    );
    assert_eq!(values("{}"), none);
    assert_eq!(values("[]"), none);
    assert_eq!(values(r#"[{"ttlMs":1}]"#), none);
    let some = |r: Option<&str>, t: Option<&str>, c: Option<&str>| {
        Some([r, t, c].map(|v| v.map(str::to_owned)))
    };
    assert_eq!(
        values(r#"{"resultType":"input_required"}"#),
        some(Some(r#""input_required""#), None, None)
    );
    assert_eq!(
        values(r#"{"contents":[{"ttlMs":2}],"ttlMs":5}"#),
        some(None, Some("5"), None)
    );
    assert_eq!(
        values(r#"{ "cacheScope" : "public" , "ttlMs" : 3e4 ,"a":{"cacheScope":1}}"#),
        some(None, Some("3e4"), Some(r#""public""#))
    );
    // Values of any kind, ending where they end.
    assert_eq!(
        values(r#"{"ttlMs":{"a":[1,{"b":2}]},"cacheScope":[null],"resultType":null}"#),
        some(Some("null"), Some(r#"{"a":[1,{"b":2}]}"#), Some("[null]"))
    );
    // An escaped key may spell one; a repeated one is read from its last.
    assert_eq!(values(r#"{"result\u0054ype":"x"}"#), None);
    assert_eq!(values(r#"{"a\n":1}"#), None);
    assert_eq!(values(r#"{"ttlMs":1,"ttlMs":2}"#), None);
    // Another member's own keys make it cautious.
    let text = r#"{"jsonrpc":"2.0","id":1,"extra":{"ttlMs":1},"result":{}}"#;
    let answer = response(text).expect("a plain answer");
    assert!(answer.result.hints().is_none());
    // Taken from serde's text, nothing is known.
    let raw = serde_json::value::RawValue::from_string("{}".into()).unwrap();
    assert!(Json::from(raw).hints().is_none());
}

#[test]
fn anything_but_a_plain_response_is_left_to_the_full_parse() {
    for text in [
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{},"error":null}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":"1","result":{}}"#,
        r#"{"jsonrpc":"2.0","id":-1,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1.0,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":18446744073709551616,"result":{}}"#,
        r#"{"jsonrpc":"1.0","id":1,"result":{}}"#,
        r#"{"jsonrpc":"2.0","result":{}}"#,
        r#"{"id":1,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"jsonrpc":"2.0","id":1,"id":2,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{},"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{},"params":{}}"#,
        r#"{"jsonrpc":"2.0","\u0069d":1,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"a":"\u0001"}} x"#,
        r#"{"jsonrpc":"2.0","id":1,"result":["tab	inside"]}"#,
        r#"[{"jsonrpc":"2.0","id":1,"result":{}}]"#,
        "{}",
        "",
    ] {
        assert_eq!(response(text), None, "{text}");
    }
}

#[test]
fn a_plain_message_is_read_in_the_one_pass() {
    let text = r#"{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"t","arguments":{"text":"x\ny"}},"x":[null]}"#;
    let request = envelope(text, usize::MAX).expect("a plain request");
    assert_eq!(request.jsonrpc.as_deref(), Some("2.0"));
    assert_eq!(request.method.as_deref(), Some("tools/call"));
    assert_eq!(request.id.map(RawValue::get), Some(r#""a-1""#));
    assert_eq!(
        request.params.map(Raw::get),
        Some(r#"{"name":"t","arguments":{"text":"x\ny"}}"#)
    );
    let note = envelope(
        r#"{"jsonrpc":"2.0","method":"x","params":null,"id":null}"#,
        usize::MAX,
    )
    .unwrap();
    assert!(note.params.is_none(), "null params are no params");
    assert_eq!(note.id.map(RawValue::get), Some("null"));
    for text in [
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"error":{}}"#,
        r#"{"jsonrpc":"2.\u0030","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"pi\u006eg"}"#,
        r#"{"jsonrpc":2,"id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","method":"a","method":"b"}"#,
        r#"{"jsonrpc":"2.0","method":"a","params":{},"params":{}}"#,
        r#"{"jsonrpc":"2.0","method":"a","params":{"x":""}}"#,
        r#"{"jsonrpc":"2.0","method":"a"} ,"#,
    ] {
        assert!(envelope(text, usize::MAX).is_none(), "{text}");
    }
}

#[test]
fn checked_text_is_kept_as_it_came() {
    let raw = serde_json::value::RawValue::from_string("[1, 2]".into()).unwrap();
    assert_eq!(Json::from(&*raw).get(), "[1, 2]");
    let json = Json::from(raw);
    assert_eq!(json.get(), "[1, 2]");
    assert_eq!(format!("{json:?}"), r#"Json("[1, 2]")"#);
}

/// A text made from generated JSON by a few edits with JSON's own
/// characters (and a control character), so most are broken near the
/// places the grammar is strict.
fn edited() -> impl Strategy<Value = String> {
    edited_from(json())
}

/// [`edited`], from JSON values `base` makes.
fn edited_from(base: impl Strategy<Value = serde_json::Value>) -> impl Strategy<Value = String> {
    let edit = (
        any::<prop::sample::Index>(),
        0u8..3,
        prop::sample::select(
            &[
                "\"", "\\", "{", "}", "[", "]", ":", ",", " ", "0", "1", "-", "+", ".", "e", "E",
                "u", "t", "n", "\u{1}", "\t", "\\u", "\\uD800", "é",
            ][..],
        ),
    );
    (base, 0usize..3, prop::collection::vec(edit, 0..4)).prop_map(|(value, spaced, edits)| {
        let mut text = match spaced {
            0 => value.to_string(),
            _ => serde_json::to_string_pretty(&value).unwrap_or_default(),
        };
        for (at, kind, piece) in edits {
            let boundaries: Vec<usize> = (0..=text.len())
                .filter(|i| text.is_char_boundary(*i))
                .collect();
            let i = boundaries[at.index(boundaries.len())];
            match kind {
                0 => text.insert_str(i, piece),
                1 => {
                    let next = boundaries.iter().copied().find(|j| *j > i);
                    if let Some(j) = next {
                        text.replace_range(i..j, "");
                    }
                }
                _ => {
                    let next = boundaries.iter().copied().find(|j| *j > i);
                    if let Some(j) = next {
                        text.replace_range(i..j, piece);
                    }
                }
            }
        }
        text
    })
}

/// Responses as upstreams send them, and around them.
fn response_text() -> impl Strategy<Value = String> {
    (
        prop::option::of(prop::sample::select(&["\"2.0\"", "\"1.0\"", "null"][..])),
        prop::option::of(prop_oneof![
            any::<u64>().prop_map(|n| n.to_string()),
            Just("\"7\"".to_owned()),
            Just("-3".to_owned()),
        ]),
        prop::option::of(json()),
        prop::option::of(json()),
        any::<bool>(),
    )
        .prop_map(|(version, id, result, extra, shuffled)| {
            let mut members = Vec::new();
            if let Some(v) = version {
                members.push(format!("\"jsonrpc\":{v}"));
            }
            if let Some(id) = id {
                members.push(format!("\"id\":{id}"));
            }
            if let Some(result) = result {
                members.push(format!("\"result\":{result}"));
            }
            if let Some(extra) = extra {
                members.push(format!("\"extra\":{extra}"));
            }
            if shuffled {
                members.reverse();
            }
            format!("{{{}}}", members.join(","))
        })
}

proptest! {
    #[test]
    fn generated_json_gets_serdes_verdict(text in edited()) {
        prop_assert_eq!(ours(&text), serdes(&text), "{:?}", text);
    }

    #[test]
    fn arbitrary_text_gets_serdes_verdict(text in crate::protocol::proptests::chars(24)) {
        prop_assert_eq!(ours(&text), serdes(&text), "{:?}", text);
    }

    #[test]
    fn a_one_pass_envelope_is_what_serde_reads(
        text in prop_oneof![
            message().prop_map(|m| m.to_string()),
            edited_from(message()),
            edited(),
        ]
    ) {
        if let Some(fast) = envelope(&text, usize::MAX) {
            let full = Envelope::read(&text);
            prop_assert!(full.is_ok(), "{:?}", text);
            let full = full.unwrap();
            prop_assert_eq!(&fast.jsonrpc, &full.jsonrpc);
            prop_assert_eq!(&fast.method, &full.method);
            prop_assert_eq!(fast.id.map(RawValue::get), full.id.map(RawValue::get));
            prop_assert_eq!(fast.params.map(Raw::get), full.params.map(Raw::get));
            prop_assert!(fast.result.is_none() && full.result.is_none());
            prop_assert!(fast.error.is_none() && full.error.is_none());
            // The params' members found on the way are serde's (a key
            // sent twice: its first place, its last value).
            let by_serde = fast.params.and_then(|params| {
                serde_json::from_str::<indexmap::IndexMap<String, Box<RawValue>>>(params.get()).ok()
            });
            let by_serde = by_serde.map(|members| {
                members.into_iter().map(|(k, v)| (k, v.get().to_owned())).collect::<Vec<_>>()
            });
            let found = fast.param_members.as_ref().map(|found| {
                let mut seen = indexmap::IndexMap::new();
                for (key, value) in found {
                    seen.insert(key.to_string(), value.get().to_owned());
                }
                seen.into_iter().collect::<Vec<_>>()
            });
            prop_assert_eq!(found, by_serde, "{:?}", text);
        }
    }

    /// The depth bound is the gateway's nesting check: a message the
    /// bounded read takes is not too deep, and one it refuses only for
    /// depth is.
    #[test]
    fn a_bounded_envelope_is_one_no_deeper_than_allowed(
        text in prop_oneof![
            message().prop_map(|m| m.to_string()),
            edited_from(message()),
        ],
        max_depth in 1_usize..6,
    ) {
        let unbounded = envelope(&text, usize::MAX).is_some();
        let bounded = envelope(&text, max_depth).is_some();
        let too_deep = crate::protocol::nesting_exceeds(&text, max_depth);
        prop_assert_eq!(bounded, unbounded && !too_deep, "{:?} at {}", text, max_depth);
    }

    #[test]
    fn a_fast_response_is_what_the_full_parse_reads(
        text in prop_oneof![response_text(), edited()]
    ) {
        if let Some(answered) = response(&text) {
            let envelope = Envelope::parse(&text);
            prop_assert!(envelope.is_ok(), "{:?}", text);
            let envelope = envelope.unwrap();
            prop_assert_eq!(envelope.kind(), Ok(MessageKind::Response));
            prop_assert_eq!(
                envelope.id.and_then(|id| id.get().parse::<u64>().ok()),
                Some(answered.id)
            );
            prop_assert!(envelope.error.is_none());
            prop_assert_eq!(envelope.result.map(RawValue::get), Some(answered.result.get()));
            if answered.result.has_no_uri_key() {
                let result: serde_json::Value = serde_json::from_str(answered.result.get()).unwrap();
                prop_assert!(!names_uri(&result), "{:?}", text);
            }
        }
    }
}
