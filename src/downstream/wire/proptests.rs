//! Property tests for [`parse_message`], the reader of one POSTed JSON-RPC
//! message (Streamable HTTP and legacy SSE): arbitrary bodies never panic,
//! and every refusal is HTTP 400 with a JSON-RPC error whose code says why
//! (-32700 for bodies that are not JSON, -32600 for batches and invalid
//! messages).

use axum::http::header;
use futures_util::FutureExt as _;
use proptest::prelude::*;
use serde_json::Value;

use super::*;
use crate::protocol::proptests::{Expected, expected, json, message};

/// The `id` of a JSON-RPC message as written, `null` included (floats may
/// not round-trip through [`Value`]).
fn raw_id(text: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(text).ok()?;
    Envelope::parse(text).ok()?.id.map(|id| id.get().to_owned())
}

/// The body of a refusal. The `id` stays raw: it is the message's own, as
/// written, and may be a number no `f64` holds.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Refusal<'a> {
    jsonrpc: String,
    #[serde(borrow)]
    id: &'a RawValue,
    error: RefusalError,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RefusalError {
    code: i64,
    message: String,
}

/// Checks that `response` is a well-formed refusal; returns its JSON-RPC
/// error code and raw id.
fn refused_with(response: Response) -> Result<(i64, String), TestCaseError> {
    prop_assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let content_type = response.headers().get(header::CONTENT_TYPE);
    prop_assert_eq!(
        content_type.and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    // A body built from a string is complete: reading it never waits.
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .now_or_never()
        .expect("an in-memory body")
        .expect("a readable body");
    let body: Refusal<'_> = match serde_json::from_slice(&bytes) {
        Ok(body) => body,
        Err(e) => {
            let body = String::from_utf8_lossy(&bytes);
            return Err(TestCaseError::fail(format!("{e}: {body}")));
        }
    };
    prop_assert_eq!(&body.jsonrpc, "2.0");
    prop_assert!(!body.error.message.is_empty(), "{:?}", body);
    Ok((body.error.code, body.id.get().to_owned()))
}

/// Whether `text` is an object that names an envelope member twice: a
/// [`Value`] keeps one of them, the envelope reader refuses the message.
fn repeats_a_member(text: &str) -> bool {
    struct Members;
    impl<'de> serde::de::Visitor<'de> for Members {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
            let mut seen = std::collections::HashSet::new();
            let mut repeated = false;
            while let Some((name, _)) = map.next_entry::<String, serde::de::IgnoredAny>()? {
                let envelope = ["jsonrpc", "id", "method", "params", "result", "error"];
                repeated |= envelope.contains(&name.as_str()) && !seen.insert(name);
            }
            Ok(repeated)
        }
    }
    use serde::Deserializer as _;
    serde_json::Deserializer::from_str(text)
        .deserialize_map(Members)
        .unwrap_or(false)
}

/// The whole property: what `parse_message` must do with `bytes`.
fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    let outcome = parse_message(bytes);
    let Ok(text) = std::str::from_utf8(bytes) else {
        let Err(response) = outcome else {
            return Err(TestCaseError::fail("accepted invalid UTF-8"));
        };
        prop_assert_eq!(refused_with(response)?.0, code::PARSE_ERROR);
        return Ok(());
    };
    if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() {
        let Err(response) = outcome else {
            return Err(TestCaseError::fail("accepted a body that is not JSON"));
        };
        prop_assert_eq!(refused_with(response)?.0, code::PARSE_ERROR);
        return Ok(());
    }
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        // JSON that a `Value` cannot hold (such as a number beyond `f64`):
        // no expectation to compare with, but a refusal still has its shape.
        if let Err(response) = outcome {
            let code = refused_with(response)?.0;
            prop_assert!(code == code::PARSE_ERROR || code == code::INVALID_REQUEST);
        }
        return Ok(());
    };
    let want = if repeats_a_member(text) {
        Expected::Unparseable
    } else {
        expected(&value)
    };
    match (outcome, want) {
        (Ok((envelope, kind)), Expected::Kind(Ok(want))) => {
            prop_assert_eq!(kind, want);
            prop_assert_eq!(envelope.kind(), Ok(kind));
        }
        (Ok((_, kind)), want) => {
            return Err(TestCaseError::fail(format!(
                "accepted as {kind:?}, expected {want:?}: {text}"
            )));
        }
        (Err(response), want) => {
            let (code, id) = refused_with(response)?;
            match want {
                _ if value.is_array() => prop_assert_eq!(code, code::INVALID_REQUEST),
                // A JSON value that is not a message object (or one whose
                // `jsonrpc` or `method` is not a string) fails the envelope
                // parse and is reported as a parse error; JSON-RPC would
                // prefer -32600 for valid JSON, so either is allowed here.
                Expected::Unparseable => prop_assert!(
                    code == code::PARSE_ERROR || code == code::INVALID_REQUEST,
                    "code {} for {}",
                    code,
                    text
                ),
                Expected::Kind(Err(_)) => {
                    prop_assert_eq!(code, code::INVALID_REQUEST);
                    // The refusal answers the message's own id, if it had one.
                    let own = raw_id(bytes).unwrap_or_else(|| "null".to_owned());
                    prop_assert_eq!(id, own);
                }
                Expected::Kind(Ok(kind)) => {
                    return Err(TestCaseError::fail(format!(
                        "refused a valid {kind:?} with {code}: {text}"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// JSON text, possibly damaged: cut short, a byte changed, a byte put in,
/// a `[` in front, or (in an object) a member written twice.
fn damaged(value: Value, edit: u8, at: prop::sample::Index, byte: u8) -> Vec<u8> {
    let mut bytes = value.to_string().into_bytes();
    let i = at.index(bytes.len() + 1);
    match edit % 6 {
        0 => bytes.truncate(i),
        1 if i < bytes.len() => bytes[i] = byte,
        2 => bytes.insert(i, byte),
        3 => bytes.insert(0, b'['),
        4 => {
            if let Some((name, member)) = value.as_object().and_then(|o| o.iter().next()) {
                let again = format!("{}:{member},", Value::from(name.as_str()));
                bytes.splice(1..1, again.into_bytes());
            }
        }
        _ => {}
    }
    bytes
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    let json_byte = prop::sample::select(&b"[]{}\",:0123456789-.eE \t\r\ntrufalsn\\\xff"[..]);
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        prop::collection::vec(json_byte, 0..64),
        (
            prop_oneof![json(), message()],
            any::<u8>(),
            any::<prop::sample::Index>(),
            any::<u8>()
        )
            .prop_map(|(value, edit, at, byte)| damaged(value, edit, at, byte)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bodies_get_the_documented_answer(bytes in body()) {
        check(&bytes)?;
    }

    #[test]
    fn arbitrary_json_gets_the_documented_answer(value in json()) {
        check(value.to_string().as_bytes())?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn near_messages_get_the_documented_answer(value in message(), pretty in any::<bool>()) {
        let text = if pretty {
            serde_json::to_string_pretty(&value).unwrap()
        } else {
            value.to_string()
        };
        check(text.as_bytes())?;
    }

    #[test]
    fn any_array_is_a_refused_batch(
        items in prop::collection::vec(prop_oneof![json(), message()], 0..4),
    ) {
        let text = format!(" \n{}", Value::Array(items));
        let Err(response) = parse_message(text.as_bytes()) else {
            return Err(TestCaseError::fail("accepted a batch"));
        };
        prop_assert_eq!(refused_with(response)?.0, code::INVALID_REQUEST);
    }
}

// Cases the properties above found, kept as plain tests.

#[test]
fn broken_json_that_starts_like_a_batch_is_a_parse_error() {
    for body in ["[", " [{\"jsonrpc\":\"2.0\"", "[1,]"] {
        let Err(response) = parse_message(body.as_bytes()) else {
            panic!("accepted {body:?}");
        };
        assert_eq!(
            refused_with(response).unwrap().0,
            code::PARSE_ERROR,
            "{body:?}"
        );
    }
}

#[test]
fn a_number_id_beyond_f64_is_echoed_as_written() {
    let body = br#"{"id":1e750,"method":"ping"}"#;
    let Err(response) = parse_message(body) else {
        panic!("accepted a message without jsonrpc");
    };
    let (code, id) = refused_with(response).unwrap();
    assert_eq!((code, id.as_str()), (code::INVALID_REQUEST, "1e750"));
}
