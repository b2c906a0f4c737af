//! Where a result object's own `resultType`, `ttlMs` and `cacheScope`
//! members are in its text, so they can be read and set without parsing
//! the result again.
//!
//! The spans are learned where the text is read or written anyway: by the
//! one-pass check of an upstream's answer (`checked::response`), or by
//! [`write_object`] when the gateway writes a result it has rewritten.
//! [`HintSpans::edit`] then sets or adds members by splicing, the rest of
//! the text kept as it is.

use std::ops::Range;

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A member a 2026-07-28 result carries at its own top level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hint {
    ResultType,
    TtlMs,
    CacheScope,
}

impl Hint {
    #[cfg(test)]
    pub(crate) const ALL: [Hint; 3] = [Hint::ResultType, Hint::TtlMs, Hint::CacheScope];

    /// The hint a member key names, if any.
    pub(crate) fn of(key: &[u8]) -> Option<Hint> {
        match key {
            b"resultType" => Some(Hint::ResultType),
            b"ttlMs" => Some(Hint::TtlMs),
            b"cacheScope" => Some(Hint::CacheScope),
            _ => None,
        }
    }

    fn key(self) -> &'static str {
        match self {
            Hint::ResultType => "resultType",
            Hint::TtlMs => "ttlMs",
            Hint::CacheScope => "cacheScope",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The caching hints a 2026-07-28 result carries, as the gateway sets
/// them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CacheHints<'a> {
    pub ttl_ms: u64,
    pub scope: &'a str,
}

/// The byte ranges of a result object's own hint members' values in its
/// text (none: it has no such member).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HintSpans {
    at: [Option<Range<usize>>; 3],
}

/// One member [`HintSpans::edit`] puts in a result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Put<'a> {
    pub hint: Hint,
    /// The value's JSON text.
    pub value: &'a str,
    /// Whether it replaces the result's own member; else it is added only
    /// where the result has none.
    pub replace: bool,
}

impl HintSpans {
    /// The spans of a result with none of the members.
    pub(crate) const fn none() -> HintSpans {
        HintSpans {
            at: [None, None, None],
        }
    }

    /// Whether the result has none of the members.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.at.iter().all(Option::is_none)
    }

    /// Whether the result has `hint` as a member.
    pub(crate) fn has(&self, hint: Hint) -> bool {
        self.at[hint.index()].is_some()
    }

    /// The JSON text of `hint`'s value in `text`, the result these spans
    /// were found in.
    pub(crate) fn value<'t>(&self, text: &'t str, hint: Hint) -> Option<&'t str> {
        self.at[hint.index()]
            .clone()
            .and_then(|span| text.get(span))
    }

    /// Notes `hint`'s value at `span`; false if it was noted already (a
    /// repeated member, whose value serde would take from the last).
    pub(super) fn note(&mut self, hint: Hint, span: Range<usize>) -> bool {
        let slot = &mut self.at[hint.index()];
        if slot.is_some() {
            return false;
        }
        *slot = Some(span);
        true
    }

    /// The spans moved back by `by` bytes (found in a larger text that
    /// the result starts `by` bytes into), if they all lie in the `len`
    /// bytes of the result.
    pub(super) fn within(self, by: usize, len: usize) -> Option<HintSpans> {
        let mut moved = HintSpans::default();
        for (slot, span) in moved.at.iter_mut().zip(self.at) {
            if let Some(span) = span {
                if span.start < by || span.end > by + len {
                    return None;
                }
                *slot = Some(span.start - by..span.end - by);
            }
        }
        Some(moved)
    }

    /// `text`, the result object these spans were found in, with `puts`:
    /// members replaced in place, and members it lacks added in front of
    /// its own. Anything but an object is kept as it is.
    #[cfg(test)]
    pub(crate) fn edit(&self, text: &str, puts: &[Put<'_>]) -> String {
        let mut out = String::new();
        self.edit_into(&mut out, text, puts);
        out
    }

    /// [`HintSpans::edit`], written at the end of `out`.
    pub(crate) fn edit_into(&self, out: &mut String, text: &str, puts: &[Put<'_>]) {
        let Some(rest) = text.strip_prefix('{') else {
            out.push_str(text);
            return;
        };
        out.reserve(text.len() + 80);
        out.push('{');
        let mut added = false;
        let mut replaced: [Option<(Range<usize>, &str)>; 3] = Default::default();
        for put in puts {
            match &self.at[put.hint.index()] {
                None => {
                    if std::mem::replace(&mut added, true) {
                        out.push(',');
                    }
                    super::push_json_string(out, put.hint.key());
                    out.push(':');
                    out.push_str(put.value);
                }
                Some(span) if put.replace => {
                    replaced[put.hint.index()] = Some((span.clone(), put.value));
                }
                Some(_) => {}
            }
        }
        if added && !rest.trim_start().starts_with('}') {
            out.push(',');
        }
        let mut replaced: Vec<_> = replaced.into_iter().flatten().collect();
        replaced.sort_by_key(|(span, _)| span.start);
        let mut from = 1;
        for (span, value) in replaced {
            out.push_str(&text[from..span.start]);
            out.push_str(value);
            from = span.end;
        }
        out.push_str(&text[from..]);
    }
}

/// The JSON text of an object, as `serde_json` writes it, and where its
/// hint members' values are in it.
pub(crate) fn write_object(members: &Map<String, Value>) -> (String, HintSpans) {
    write_members(members.iter())
}

/// [`write_object`] of members in order, each value as it serializes (a
/// `RawValue` as its text).
fn write_members<'m, V: Serialize + 'm>(
    members: impl Iterator<Item = (&'m String, &'m V)>,
) -> (String, HintSpans) {
    let mut out = Vec::with_capacity(256);
    let mut spans = HintSpans::default();
    out.push(b'{');
    for (n, (key, value)) in members.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, key).expect("a string writes to memory");
        out.push(b':');
        let start = out.len();
        serde_json::to_writer(&mut out, value).expect("a value writes to memory");
        if let Some(hint) = Hint::of(key.as_bytes()) {
            spans.note(hint, start..out.len());
        }
    }
    out.push(b'}');
    let text = String::from_utf8(out).expect("serde_json writes UTF-8");
    (text, spans)
}

/// A result's text and its hint spans, for a text whose spans are not
/// known (read by serde, not by the one-pass check): its top-level members
/// parsed once (tests count it), their values kept as they came, and
/// written again with the spans. A repeated member keeps its first place
/// and its last value, as serde keeps it; a text that is not an object
/// has no members, and is kept as it is.
pub(crate) fn learn(text: &str) -> (String, HintSpans) {
    #[cfg(test)]
    super::note_envelope_parse();
    match serde_json::from_str::<IndexMap<String, Box<RawValue>>>(text) {
        Ok(members) => write_members(members.iter()),
        Err(_) => (text.to_owned(), HintSpans::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Value {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    #[test]
    fn spans_of_a_written_object_point_at_its_hint_values() {
        let Value::Object(members) = parsed(
            r#"{"a":{"ttlMs":1},"ttlMs":30000,"cacheScope":"public","resultType":"complete"}"#,
        ) else {
            unreachable!()
        };
        let (text, spans) = write_object(&members);
        assert_eq!(parsed(&text), Value::Object(members));
        assert_eq!(spans.value(&text, Hint::TtlMs), Some("30000"));
        assert_eq!(spans.value(&text, Hint::CacheScope), Some("\"public\""));
        assert_eq!(spans.value(&text, Hint::ResultType), Some("\"complete\""));
        let (plain, none) = write_object(&Map::new());
        assert_eq!((plain.as_str(), none.is_empty()), ("{}", true));
    }

    /// Whatever members a result has, editing it gives what setting them
    /// in its parsed form gives.
    #[test]
    fn edits_match_setting_the_members_of_the_parsed_result() {
        let puts = [
            Put {
                hint: Hint::ResultType,
                value: "\"complete\"",
                replace: false,
            },
            Put {
                hint: Hint::TtlMs,
                value: "1200",
                replace: true,
            },
            Put {
                hint: Hint::CacheScope,
                value: "\"private\"",
                replace: true,
            },
        ];
        for body in [
            r#"{"contents":[]}"#,
            "{}",
            "{ }",
            r#"{"cacheScope":"public","contents":[],"ttlMs":30000}"#,
            r#"{"ttlMs":5,"resultType":"input_required","x":{"ttlMs":9}}"#,
            r#"{"resultType":"complete","ttlMs":1,"cacheScope":"public"}"#,
        ] {
            let (text, spans) = learn(body);
            let edited = parsed(&spans.edit(&text, &puts));
            let mut expected = parsed(body);
            let members = expected.as_object_mut().unwrap();
            for put in puts {
                if put.replace || !members.contains_key(put.hint.key()) {
                    members.insert(put.hint.key().into(), parsed(put.value));
                }
            }
            assert_eq!(edited, expected, "{body}");
        }
        assert_eq!(HintSpans::default().edit("[1]", &puts), "[1]");
    }

    /// A result serde took is written again with its values as they came:
    /// a number too large for any integer type keeps its digits.
    #[test]
    fn learning_a_results_spans_keeps_its_values_as_they_came() {
        let body = r#"{ "big" : 123456789012345678901234567890, "x":1.0e5, "ttlMs" : 5 }"#;
        let (text, spans) = learn(body);
        assert_eq!(
            text,
            r#"{"big":123456789012345678901234567890,"x":1.0e5,"ttlMs":5}"#
        );
        assert_eq!(spans.value(&text, Hint::TtlMs), Some("5"));
        assert_eq!(learn("[1, 2]"), ("[1, 2]".to_owned(), HintSpans::none()));
    }

    #[test]
    fn spans_outside_the_result_are_not_its_own() {
        let mut spans = HintSpans::default();
        assert!(spans.note(Hint::TtlMs, 12..14));
        assert!(!spans.note(Hint::TtlMs, 20..22), "a repeated member");
        let moved = spans.clone().within(10, 10).unwrap();
        assert_eq!(moved.value("xx42yyyyyy", Hint::TtlMs), Some("42"));
        assert_eq!(spans.within(13, 10), None);
    }
}
