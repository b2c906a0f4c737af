//! A request's params, member by member: the one parse of a client's
//! params. Each member keeps its raw JSON, so only the members the gateway
//! changes (`name`, `uri`, `ref`, `_meta`) are touched and the rest
//! (`arguments` above all) are written back as they came, unparsed. The
//! members are found in text already known to be valid ([`members`]), so
//! their values are not read by serde again.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::{Map, Value};

use super::Raw;
use super::checked::Member;

mod members;

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

/// The members, in the order the client sent them, each key once (see
/// [`Members::new`]). Keys are borrowed from the request's text unless the
/// client escaped a character in them. A request has a few members, so a
/// key is looked up by a scan: a map would cost more to build than the
/// few lookups it saves.
struct Members<'a>(Vec<Member<'a>>);

/// Up to this many members, a repeated key is found by comparing with
/// those before it; above, by a map (a scan would be quadratic).
const FEW_MEMBERS: usize = 16;

impl<'a> Members<'a> {
    /// The members as found; a key sent twice keeps its first place and
    /// takes its last value, as a map reading the object would.
    fn new(mut found: Vec<Member<'a>>) -> Self {
        // (where a key came first, where it came again), by the latter.
        let mut again = Vec::new();
        if found.len() <= FEW_MEMBERS {
            for (at, (key, _)) in found.iter().enumerate() {
                if let Some(first) = found[..at].iter().position(|(k, _)| k == key) {
                    again.push((first, at));
                }
            }
        } else {
            let mut first_at = HashMap::with_capacity_and_hasher(
                found.len(),
                crate::hashing::RandomState::default(),
            );
            for (at, (key, _)) in found.iter().enumerate() {
                let first = *first_at.entry(key.as_ref()).or_insert(at);
                if first != at {
                    again.push((first, at));
                }
            }
        }
        if again.is_empty() {
            return Members(found);
        }
        let mut keep = vec![true; found.len()];
        for (first, at) in again {
            found[first].1 = found[at].1;
            keep[at] = false;
        }
        let mut keep = keep.into_iter();
        found.retain(|_| keep.next().unwrap_or(true));
        Members(found)
    }

    fn get(&self, key: &str) -> Option<&Raw<'a>> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, raw)| raw)
    }

    fn shift_remove(&mut self, key: &str) -> Option<Raw<'a>> {
        let at = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(at).1)
    }
}

/// A request's params, member by member.
pub(crate) struct Params<'a> {
    members: Members<'a>,
    meta: Option<Map<String, Value>>,
}

impl<'a> Params<'a> {
    /// Parses an object of params; absent params are an empty object.
    pub(crate) fn parse(raw: Option<super::Raw<'a>>) -> Result<Self, ParamsError> {
        Self::parse_found(raw, None)
    }

    /// [`Params::parse`], with the members already `found` in `raw` by the
    /// message's one-pass read, when it found them.
    pub(crate) fn parse_found(
        raw: Option<super::Raw<'a>>,
        found: Option<Vec<Member<'a>>>,
    ) -> Result<Self, ParamsError> {
        #[cfg(test)]
        note_parse();
        let found = match (found, raw) {
            (Some(found), _) => found,
            // The text is valid JSON already: only its members are found.
            (None, Some(raw)) => members::members(raw.get()).ok_or(ParamsError::NotAnObject)?,
            (None, None) => Vec::new(),
        };
        let mut members = Members::new(found);
        let meta = match members.shift_remove("_meta") {
            None => None,
            Some(raw) => {
                Some(serde_json::from_str(raw.get()).map_err(|_| ParamsError::MetaNotAnObject)?)
            }
        };
        Ok(Self { members, meta })
    }

    /// A string member, or why it is missing; borrowed from the text
    /// unless it has an escape.
    pub(crate) fn string(&self, key: &str) -> Result<Cow<'a, str>, ParamsError> {
        let raw = self
            .members
            .get(key)
            .ok_or_else(|| ParamsError::Missing(key.to_owned()))?;
        string_of(*raw).ok_or_else(|| ParamsError::NotAString(key.to_owned()))
    }

    /// A member's raw JSON.
    pub(crate) fn raw(&self, key: &str) -> Option<Raw<'a>> {
        self.members.get(key).copied()
    }

    /// A string member that may be absent or null.
    pub(crate) fn optional_string(&self, key: &str) -> Result<Option<Cow<'a, str>>, ParamsError> {
        match self.members.get(key) {
            None => Ok(None),
            Some(raw) if raw.get() == "null" => Ok(None),
            Some(raw) => string_of(*raw)
                .map(Some)
                .ok_or_else(|| ParamsError::NotAString(key.to_owned())),
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
    pub(crate) fn take(&mut self, key: &str) -> Option<Raw<'a>> {
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
    pub(crate) fn build_text(&self, key: &str, value: &str, progress: Option<u64>) -> String {
        let mut out = String::with_capacity(self.built_len());
        self.write(&mut out, key, value, progress);
        out
    }

    /// [`Params::build_text`] inside the whole request frame that `head`
    /// begins, built once: the frame goes out as it is, and a retry (a new
    /// id, a new token) takes the params from it.
    pub(crate) fn build_request(
        &self,
        head: RequestHead<'_>,
        key: &str,
        value: &str,
        progress: Option<u64>,
    ) -> Built {
        let mut out = String::with_capacity(self.built_len() + 48 + head.method.len());
        super::push_request_head(&mut out, head.id, head.method);
        out.push_str(r#","params":"#);
        let start = out.len();
        let token = self.write(&mut out, key, value, progress);
        let params = start..out.len();
        out.push('}');
        Built {
            frame: bytes::Bytes::from(out),
            id: head.id,
            params,
            token,
        }
    }

    /// Room for the built params: each member's text and some.
    fn built_len(&self) -> usize {
        64 + self
            .members
            .0
            .iter()
            .map(|(_, v)| v.get().len() + 16)
            .sum::<usize>()
    }

    /// Appends the built params to `out`; where the progress token's digits
    /// are in `out`, if it has one.
    fn write(
        &self,
        out: &mut String,
        key: &str,
        value: &str,
        progress: Option<u64>,
    ) -> Option<std::ops::Range<usize>> {
        out.push('{');
        let mut first = true;
        let mut member = |out: &mut String, k: &str| {
            if !first {
                out.push(',');
            }
            first = false;
            crate::protocol::push_json_string(out, k);
            out.push(':');
        };
        let mut replaced = false;
        for (k, v) in &self.members.0 {
            let k: &str = k;
            member(out, k);
            if k == key {
                out.push_str(value);
                replaced = true;
            } else {
                out.push_str(v.get());
            }
        }
        if !replaced {
            member(out, key);
            out.push_str(value);
        }
        let mut token = None;
        if let Some(meta) = &self.meta {
            let progress = progress.filter(|_| meta.contains_key("progressToken"));
            let others = meta.iter().filter(|(k, _)| k.as_str() != "progressToken");
            if progress.is_some() || meta.keys().any(|k| k != "progressToken") {
                member(out, "_meta");
                out.push('{');
                let mut inner = true;
                if let Some(id) = progress {
                    out.push_str(r#""progressToken":"#);
                    let at = out.len();
                    out.push_str(itoa::Buffer::new().format(id));
                    token = Some(at..out.len());
                    inner = false;
                }
                for (k, v) in others {
                    if !inner {
                        out.push(',');
                    }
                    inner = false;
                    crate::protocol::push_json_string(out, k);
                    out.push(':');
                    out.push_str(&v.to_string());
                }
                out.push('}');
            }
        }
        out.push('}');
        token
    }
}

/// What a request frame names before its params: the id it goes out
/// under and its method.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestHead<'m> {
    pub(crate) id: u64,
    pub(crate) method: &'m str,
}

/// A request frame as built for an upstream, and where its params and the
/// progress token's digits are in it, so a retry can send the same params
/// with a new id and token without reading them again.
#[derive(Debug, Clone)]
pub(crate) struct Built {
    /// `{"jsonrpc":"2.0","id":ID,"method":M,"params":P}`, ready to write.
    frame: bytes::Bytes,
    /// The id the frame carries.
    id: u64,
    params: std::ops::Range<usize>,
    token: Option<std::ops::Range<usize>>,
}

/// A member's text as the string it is: borrowed when it has no escape
/// (checked text has no control character either), else unescaped by
/// serde; `None` for a member that is not a string.
fn string_of(raw: Raw<'_>) -> Option<Cow<'_, str>> {
    match super::checked::plain_string(raw.get()) {
        Some(plain) => Some(Cow::Borrowed(plain)),
        None => serde_json::from_str::<String>(raw.get())
            .ok()
            .map(Cow::Owned),
    }
}

impl Built {
    /// The frame, when it is to go out under `id` (the id it was built with).
    pub(crate) fn frame_for(&self, id: u64) -> Option<bytes::Bytes> {
        (id == self.id).then(|| self.frame.clone())
    }

    /// The params as they were built (with the first token).
    pub(crate) fn params(&self) -> &str {
        // Written as a `String` and cut next to ASCII punctuation.
        std::str::from_utf8(&self.frame[self.params.clone()]).expect("params are built as text")
    }

    /// The same params with the progress token (if any) set to `id`.
    pub(crate) fn with_token(&self, id: u64) -> String {
        let params = self.params();
        match &self.token {
            Some(at) => {
                let at = at.start - self.params.start..at.end - self.params.start;
                let mut text = String::with_capacity(params.len() + 8);
                text.push_str(&params[..at.start]);
                text.push_str(itoa::Buffer::new().format(id));
                text.push_str(&params[at.end..]);
                text
            }
            None => params.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<serde_json::value::RawValue> {
        serde_json::value::RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn replaces_name_and_progress_token() {
        let input = raw(
            r#"{"name":"a__echo","arguments":{"x":[1,2]},"_meta":{"progressToken":"tok","k":1}}"#,
        );
        let params = Params::parse(Some(crate::protocol::Raw::from(&*input))).unwrap();
        assert_eq!(params.string("name").unwrap(), "a__echo");
        assert_eq!(params.progress_token(), Some(&Value::from("tok")));
        let built: Value =
            serde_json::from_str(&params.build_text("name", r#""echo""#, Some(42))).unwrap();
        assert_eq!(built["name"], "echo");
        assert_eq!(built["arguments"]["x"][1], 2);
        assert_eq!(built["_meta"]["progressToken"], 42);
        assert_eq!(built["_meta"]["k"], 1);
        let stripped: Value =
            serde_json::from_str(&params.build_text("name", "\"echo\"", None)).unwrap();
        assert!(stripped["_meta"].get("progressToken").is_none());
        // The frame is built around the same params, under its id.
        let head = RequestHead {
            id: 42,
            method: "tools/call",
        };
        let first = params.build_request(head, "name", r#""echo""#, Some(42));
        let frame = first.frame_for(42).expect("the frame's own id");
        let frame: Value = serde_json::from_slice(&frame).unwrap();
        assert_eq!(frame["jsonrpc"], "2.0");
        assert_eq!(frame["id"], 42);
        assert_eq!(frame["method"], "tools/call");
        assert_eq!(frame["params"], built);
        assert!(
            first.frame_for(43).is_none(),
            "another id needs another frame"
        );
        // A retry sends the same params with a new token, read nowhere.
        let again: Value = serde_json::from_str(&first.with_token(43)).unwrap();
        assert_eq!(again["_meta"]["progressToken"], 43);
        assert_eq!(again["arguments"], built["arguments"]);
        assert_eq!(first.with_token(42), first.params());
        assert_eq!(
            first.params(),
            params.build_text("name", r#""echo""#, Some(42))
        );
        // Without a token there is nothing to change.
        let plain = raw(r#"{"name":"x"}"#);
        let plain = Params::parse(Some(crate::protocol::Raw::from(&*plain))).unwrap();
        let built = plain.build_request(head, "name", r#""y""#, Some(7));
        assert_eq!(built.with_token(8), r#"{"name":"y"}"#);
    }

    /// A key is borrowed from the text as it came, or unescaped when the
    /// client escaped it; either way it is found, and written back plainly.
    #[test]
    fn escaped_and_plain_keys_are_found_alike() {
        let members = raw(r#"{"na\u006de":"tool","arguments":{"a":1}}"#);
        let params = Params::parse(Some(crate::protocol::Raw::from(&*members))).unwrap();
        assert_eq!(params.string("name").unwrap(), "tool");
        assert_eq!(params.raw("arguments").unwrap().get(), r#"{"a":1}"#);
        assert_eq!(
            params.build_text("name", r#""up""#, None),
            r#"{"name":"up","arguments":{"a":1}}"#
        );
    }

    /// A key sent twice keeps its first place and takes its last value,
    /// among a few members (compared in turn) and among many (a map).
    #[test]
    fn a_repeated_key_is_read_as_a_map_reads_it() {
        let few = raw(r#"{"name":"a","arguments":{},"name":"b","x":1,"x":2,"name":"c"}"#);
        let params = Params::parse(Some(crate::protocol::Raw::from(&*few))).unwrap();
        assert_eq!(params.string("name").unwrap(), "c");
        assert_eq!(
            params.build_text("y", "0", None),
            r#"{"name":"c","arguments":{},"x":2,"y":0}"#
        );
        let mut members: Vec<String> = (0..40).map(|n| format!(r#""k{n}":{n}"#)).collect();
        members.insert(3, r#""k30":"early""#.into());
        members.push(r#""k5":"late""#.into());
        let many = raw(&format!("{{{}}}", members.join(",")));
        let params = Params::parse(Some(crate::protocol::Raw::from(&*many))).unwrap();
        let built: Vec<(String, Value)> =
            serde_json::from_str::<indexmap::IndexMap<String, Value>>(
                &params.build_text("name", r#""t""#, None),
            )
            .unwrap()
            .into_iter()
            .collect();
        let by_serde: Vec<(String, Value)> =
            serde_json::from_str::<indexmap::IndexMap<String, Value>>(many.get())
                .unwrap()
                .into_iter()
                .chain([("name".to_owned(), Value::from("t"))])
                .collect();
        assert_eq!(built, by_serde);
        assert_eq!(params.raw("k5").unwrap().get(), r#""late""#);
        assert_eq!(params.raw("k30").unwrap().get(), "30");
    }

    #[test]
    fn rejects_non_object_params() {
        assert!(Params::parse(Some(crate::protocol::Raw::from(&*raw("[1]")))).is_err());
        assert!(Params::parse(Some(crate::protocol::Raw::from(&*raw(r#"{"_meta":3}"#)))).is_err());
        assert!(Params::parse(None).unwrap().string("name").is_err());
    }

    #[test]
    fn params_errors_read_as_they_always_have() {
        let why = |e: ParamsError| e.to_string();
        assert_eq!(
            why(
                Params::parse(Some(crate::protocol::Raw::from(&*raw("[1]"))))
                    .err()
                    .unwrap()
            ),
            "params must be an object"
        );
        assert_eq!(
            why(
                Params::parse(Some(crate::protocol::Raw::from(&*raw(r#"{"_meta":3}"#))))
                    .err()
                    .unwrap()
            ),
            "_meta must be an object"
        );
        let members = raw(r#"{"n":1,"ref":"x"}"#);
        let params = Params::parse(Some(crate::protocol::Raw::from(&*members))).unwrap();
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
}

#[cfg(test)]
thread_local! {
    /// Params parsed on this thread (tests count them: see [`parses`]).
    static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts one read of a request's params on this thread (tests only):
/// `Params::parse`, and any other step that reads params text.
#[cfg(test)]
pub(crate) fn note_parse() {
    PARSES.with(|n| n.set(n.get() + 1));
}

/// How many params this thread has parsed so far (tests only).
#[cfg(test)]
pub(crate) fn parses() -> usize {
    PARSES.with(std::cell::Cell::get)
}
