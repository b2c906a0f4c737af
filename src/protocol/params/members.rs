//! The members of a params object, found in text that is already known to
//! be valid JSON (a `RawValue` the envelope's parse checked), without
//! checking it a second time: for a message serde read, or params built
//! by the gateway. The one-pass read finds a message's members on its way
//! (`checked::envelope`), so the common request does not come here.
//!
//! serde would check every byte of every member again, `arguments` above
//! all, only to hand back the same slices. Here strings are skipped with
//! `memchr` (a quote or a backslash), and nested values by counting their
//! brackets outside strings, which valid JSON makes enough. A key is
//! borrowed unless the client escaped a character in it; only then is it
//! read by serde.

use crate::protocol::checked::{Member, key_of};
use crate::protocol::{Raw, skip_space, string_end};

/// The members of `text`, a valid JSON value; `None` if it is not an
/// object.
pub(super) fn members(text: &str) -> Option<Vec<Member<'_>>> {
    let bytes = text.as_bytes();
    let mut at = skip_space(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    let mut members = Vec::new();
    at = skip_space(bytes, at + 1);
    if bytes.get(at) == Some(&b'}') {
        return Some(members);
    }
    loop {
        // `"key"`, then `:`, then the value.
        let key_end = string_end(bytes, at + 1)?;
        let key = key_of(text, at + 1..key_end)?;
        at = skip_space(bytes, key_end + 1);
        debug_assert_eq!(bytes.get(at), Some(&b':'));
        let start = skip_space(bytes, at + 1);
        let end = value_end(bytes, start)?;
        members.push((key, Raw(&text[start..end])));
        at = skip_space(bytes, end);
        match bytes.get(at)? {
            b',' => at = skip_space(bytes, at + 1),
            b'}' => return Some(members),
            _ => return None,
        }
    }
}

/// Just past the value that starts at `start`.
fn value_end(bytes: &[u8], start: usize) -> Option<usize> {
    match bytes.get(start)? {
        b'"' => string_end(bytes, start + 1).map(|end| end + 1),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut at = start;
            loop {
                match bytes.get(at)? {
                    b'"' => at = string_end(bytes, at + 1)?,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
        }
        // A number, `true`, `false` or `null`: up to what follows it.
        _ => Some(
            bytes[start..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .map_or(bytes.len(), |n| start + n),
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::value::RawValue;

    use super::*;

    /// What serde reads as the members of `text`, as (key, raw value) pairs.
    fn by_serde(text: &str) -> Option<Vec<(String, String)>> {
        let map: Vec<(String, Box<RawValue>)> =
            serde_json::from_str::<indexmap::IndexMap<String, Box<RawValue>>>(text)
                .ok()?
                .into_iter()
                .collect();
        Some(
            map.into_iter()
                .map(|(k, v)| (k, v.get().to_owned()))
                .collect(),
        )
    }

    fn by_split(text: &str) -> Option<Vec<(String, String)>> {
        let mut seen = indexmap::IndexMap::new();
        for (key, value) in members(text)? {
            seen.insert(key.into_owned(), value.get().to_owned());
        }
        Some(seen.into_iter().collect())
    }

    #[test]
    fn members_are_found_as_serde_finds_them() {
        for text in [
            r#"{}"#,
            r#" { } "#,
            r#"{"name":"t","arguments":{"text":"a \"quoted\" }{ ]["}}"#,
            r#"{ "a" : [1, {"b": [true, null]}, "x\\"] , "c":-1.5e3,"d":false }"#,
            r#"{"na\u006de":"x","n\"q":1,"e\\":2}"#,
            r#"{"dup":1,"other":2,"dup":3}"#,
            "{\n\t\"k\"\r\n:\n\"v\"\n}",
            r#"{"s":"\\","t":"\\\"","u":"é☃"}"#,
        ] {
            assert_eq!(by_split(text), by_serde(text), "{text}");
        }
        for not_an_object in ["[1]", "\"s\"", "3", "null", " [ ] "] {
            assert!(members(not_an_object).is_none(), "{not_an_object}");
        }
    }

    /// JSON values with strings that need escapes and brackets in them.
    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let text = r#"[a-z"\\{}\[\]\n\x01é ]{0,12}"#;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            (-1e9f64..1e9).prop_map(serde_json::Value::from),
            text.prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                proptest::collection::vec((text, inner), 0..6).prop_map(|members| {
                    serde_json::Value::Object(members.into_iter().collect())
                }),
            ]
        })
    }

    proptest::proptest! {
        /// Any JSON object serde can read, written compactly or spaced out.
        #[test]
        fn any_object_splits_as_serde_reads_it(
            members in proptest::collection::vec((r#"[a-z"\\é]{0,6}"#, json_value()), 0..8),
            pretty in proptest::bool::ANY,
        ) {
            let value = serde_json::Value::Object(members.into_iter().collect());
            let text = if pretty {
                serde_json::to_string_pretty(&value).unwrap()
            } else {
                serde_json::to_string(&value).unwrap()
            };
            proptest::prop_assert_eq!(by_split(&text), by_serde(&text));
        }
    }
}
