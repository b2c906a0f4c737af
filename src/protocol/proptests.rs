//! Property tests for the JSON-RPC envelope reader ([`Envelope::parse`] and
//! [`Envelope::kind`]): arbitrary text and arbitrary JSON never panic, and
//! every message is classified as JSON-RPC 2.0 says; and where the one-pass
//! read of an answer finds its result's own hint members, and the result
//! edited there, are what serde finds and what setting them in the parsed
//! result gives. The JSON strategies here are shared with the HTTP
//! endpoint's property tests.

use proptest::prelude::*;
use serde_json::{Map, Value};

use super::*;

/// Strings that are likely to mean something to the envelope reader.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("2.0".to_owned()),
        Just("1.0".to_owned()),
        Just("ping".to_owned()),
        Just("tools/call".to_owned()),
        Just(String::new()),
        chars(8),
    ]
}

/// Up to `max` arbitrary characters (cheaper than a regex strategy).
pub(crate) fn chars(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..=max).prop_map(String::from_iter)
}

/// Object keys: mostly the envelope's own members, and a result's.
fn key() -> impl Strategy<Value = String> {
    const KEYS: [&str; 10] = [
        "jsonrpc",
        "id",
        "method",
        "params",
        "result",
        "error",
        "uri",
        "resultType",
        "ttlMs",
        "cacheScope",
    ];
    prop_oneof![
        3 => prop::sample::select(&KEYS[..]).prop_map(str::to_owned),
        1 => chars(6),
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| {
            serde_json::Number::from_f64(f).map(Value::Number)
        }),
    ]
}

/// Any JSON value, nested a few levels deep.
pub(crate) fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

/// A JSON object near a JSON-RPC message: each envelope member is absent,
/// well typed or badly typed, in any order, among unrelated members.
pub(crate) fn message() -> impl Strategy<Value = Value> {
    let jsonrpc = prop_oneof![
        4 => Just(Value::from("2.0")),
        1 => json(),
    ];
    let id = prop_oneof![
        2 => any::<i64>().prop_map(Value::from),
        2 => text().prop_map(Value::String),
        1 => json(),
    ];
    let method = prop_oneof![
        4 => text().prop_map(Value::String),
        1 => json(),
    ];
    let member = |name: &'static str, present: f64, value: BoxedStrategy<Value>| {
        prop::option::weighted(present, value).prop_map(move |v| v.map(|v| (name.to_owned(), v)))
    };
    (
        member("jsonrpc", 0.9, jsonrpc.boxed()),
        member("id", 0.6, id.boxed()),
        member("method", 0.5, method.boxed()),
        member("params", 0.4, json().boxed()),
        member("result", 0.3, json().boxed()),
        member("error", 0.3, json().boxed()),
        prop::collection::vec((chars(6), json()), 0..3),
    )
        .prop_flat_map(|(a, b, c, d, e, f, extra)| {
            let mut members: Vec<(String, Value)> =
                [a, b, c, d, e, f].into_iter().flatten().collect();
            members.extend(extra);
            Just(members).prop_shuffle()
        })
        .prop_map(|members| {
            // Later duplicates of a name replace earlier ones, as in any map.
            let mut object = Map::new();
            for (k, v) in members {
                object.insert(k, v);
            }
            Value::Object(object)
        })
}

/// What the envelope reader should make of a JSON value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expected {
    /// Not an object, or a member with the wrong JSON type.
    Unparseable,
    Kind(Result<MessageKind, ExpectedError>),
}

/// [`EnvelopeError`] is not `Clone`; this mirrors it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExpectedError {
    Version,
    IdType,
    Shape,
}

impl From<&EnvelopeError> for ExpectedError {
    fn from(e: &EnvelopeError) -> Self {
        match e {
            EnvelopeError::Version => Self::Version,
            EnvelopeError::IdType => Self::IdType,
            EnvelopeError::Shape => Self::Shape,
        }
    }
}

/// The JSON-RPC 2.0 rules, written from the specification rather than the
/// reader: `null` `method` is no method; `id` may be a string, a number, or
/// `null` in a response; a response has a `result` (any value, `null`
/// included) or a non-null `error`.
pub(crate) fn expected(value: &Value) -> Expected {
    let Value::Object(object) = value else {
        return Expected::Unparseable;
    };
    let string_or_null = |name| {
        matches!(
            object.get(name),
            None | Some(Value::Null | Value::String(_))
        )
    };
    if !string_or_null("jsonrpc") || !string_or_null("method") {
        return Expected::Unparseable;
    }
    let method = object.get("method").is_some_and(Value::is_string);
    let id = object.get("id");
    let id_ok = match id {
        None | Some(Value::String(_) | Value::Number(_)) => true,
        // Responses to requests that could not be read carry a null id.
        Some(Value::Null) => !method,
        Some(_) => false,
    };
    Expected::Kind(if object.get("jsonrpc") != Some(&Value::from("2.0")) {
        Err(ExpectedError::Version)
    } else if !id_ok {
        Err(ExpectedError::IdType)
    } else if method {
        Ok(if id.is_some() {
            MessageKind::Request
        } else {
            MessageKind::Notification
        })
    } else if id.is_some()
        && (object.contains_key("result") || object.get("error").is_some_and(|e| !e.is_null()))
    {
        Ok(MessageKind::Response)
    } else {
        Err(ExpectedError::Shape)
    })
}

/// What the reader actually made of `text`.
fn actual(text: &str) -> Expected {
    match Envelope::parse(text) {
        Err(_) => Expected::Unparseable,
        Ok(envelope) => Expected::Kind(envelope.kind().map_err(|e| ExpectedError::from(&e))),
    }
}

/// JSON text for `value`: compact, pretty, or padded with JSON whitespace.
fn render(value: &Value, style: u8) -> String {
    match style % 3 {
        0 => value.to_string(),
        1 => serde_json::to_string_pretty(value).unwrap(),
        _ => format!(" \t\r\n{value}\n "),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in prop_oneof![".*", "[\\[\\]{}\":,0-9a-z. -]{0,40}"]) {
        if let Ok(envelope) = Envelope::parse(&text) {
            let _ = envelope.kind();
            // Whatever parsed was one JSON value.
            prop_assert!(serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok());
        }
    }

    #[test]
    fn arbitrary_json_is_classified_by_the_rules(value in json(), style in any::<u8>()) {
        prop_assert_eq!(actual(&render(&value, style)), expected(&value), "{}", value);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn near_messages_are_classified_by_the_rules(value in message(), style in any::<u8>()) {
        prop_assert_eq!(actual(&render(&value, style)), expected(&value), "{}", value);
    }

    #[test]
    fn members_keep_their_raw_text(value in message()) {
        let text = value.to_string();
        let Ok(envelope) = Envelope::parse(&text) else {
            return Ok(());
        };
        let raw = |r: Option<&RawValue>| r.map(|r| r.get().to_owned());
        let member = |name| value.get(name).map(Value::to_string);
        prop_assert_eq!(raw(envelope.id), member("id"));
        prop_assert_eq!(raw(envelope.result), member("result"));
        // An explicit `null` params is no params.
        let params = member("params").filter(|p| p != "null");
        prop_assert_eq!(envelope.params.map(|p| p.get().to_owned()), params);
        prop_assert_eq!(envelope.method.as_deref(), value.get("method").and_then(Value::as_str));
    }

    /// A message spelled as a JSON array is not a message.
    #[test]
    fn positional_arrays_are_not_messages(value in message()) {
        let Value::Object(object) = &value else { unreachable!() };
        let members: Vec<Value> = ["jsonrpc", "id", "method", "params", "result", "error"]
            .iter()
            .map(|k| object.get(*k).cloned().unwrap_or(Value::Null))
            .collect();
        let text = Value::Array(members).to_string();
        prop_assert!(Envelope::parse(&text).is_err(), "{}", text);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The one pass finds a result's own `resultType`, `ttlMs` and
    /// `cacheScope` where serde finds them, and an edit there gives what
    /// setting them in the parsed result gives.
    #[test]
    fn hint_spans_agree_with_serde(
        base in json(),
        hints in prop::collection::vec((0..3usize, json()), 0..4),
        style in any::<u8>(),
    ) {
        use super::hints::{Hint, Put};
        const HINTS: [(Hint, &str); 3] = [
            (Hint::ResultType, "resultType"),
            (Hint::TtlMs, "ttlMs"),
            (Hint::CacheScope, "cacheScope"),
        ];
        let mut result = match base {
            Value::Object(members) => members,
            other => Map::from_iter([("v".to_owned(), other)]),
        };
        for (which, value) in hints {
            result.insert(HINTS[which].1.to_owned(), value);
        }
        let result = Value::Object(result);
        let message = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "result": result });
        let text = render(&message, style);
        let answered = checked::response(&text).expect("a plain answer");
        let body = answered.result.get();
        let Some(spans) = answered.result.hints() else {
            // Unknown only when a top-level key is written with an escape.
            let escaped = |key: &String| serde_json::to_string(key).unwrap() != format!("\"{key}\"");
            prop_assert!(result.as_object().unwrap().keys().any(escaped), "{}", body);
            return Ok(());
        };
        // Read back from text, as serde reads floats (not always exactly).
        let reread = |v: &Value| serde_json::from_str::<Value>(&v.to_string()).unwrap();
        for (hint, key) in HINTS {
            let found = spans.value(body, hint).map(|v| serde_json::from_str::<Value>(v).unwrap());
            prop_assert_eq!(found, result.get(key).map(reread), "{} in {}", key, body);
        }
        let puts = [
            Put { hint: Hint::ResultType, value: "\"complete\"", replace: false },
            Put { hint: Hint::TtlMs, value: "7", replace: true },
        ];
        let edited: Value = serde_json::from_str(&spans.edit(body, &puts)).unwrap();
        let mut expected = result.clone();
        let members = expected.as_object_mut().unwrap();
        members.entry("resultType").or_insert("complete".into());
        members.insert("ttlMs".into(), 7.into());
        prop_assert_eq!(edited, reread(&expected));
    }
}

// Cases the properties above found, kept as plain tests.

#[test]
fn a_json_array_is_not_a_message() {
    // serde reads a struct from an array by position; this was a request.
    assert!(Envelope::parse(r#"["2.0", 1, "ping"]"#).is_err());
    assert!(Envelope::parse(" []").is_err());
}

#[test]
fn a_null_result_is_a_response() {
    let envelope = Envelope::parse(r#"{"jsonrpc":"2.0","id":1,"result":null}"#).unwrap();
    assert_eq!(envelope.kind(), Ok(MessageKind::Response));
    assert_eq!(envelope.result.map(RawValue::get), Some("null"));
}
