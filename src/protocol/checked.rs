//! JSON text checked in one pass, as serde_json checks a value it skips,
//! and what an upstream answered carried as that checked text.
//!
//! serde_json reads a string a byte (or an eight-byte word) at a time to
//! find its end and any control character in it; on a 2 KB tool answer
//! that was the largest part of the gateway's own work per call. Here a
//! string's end is found by `memchr` and its control characters by a pass
//! the compiler vectorizes. The grammar is serde_json's for a value it
//! skips (`IgnoredAny`, `RawValue`): any nesting depth, any `\u` escape
//! (a lone surrogate included), numbers as JSON spells them. A test holds
//! the two to the same verdict on generated and broken texts.
//!
//! [`response`] reads the common answer (`jsonrpc`, a numeric `id`, a
//! `result`) in that pass, noting whether the result may have a `uri` key
//! to rewrite, and [`envelope`] a client's message (its params' members
//! found on the way, their values handed on unread, as [`Raw`]); anything
//! else is left to serde, which then reads and judges it as before.

use std::borrow::Cow;

use serde_json::value::RawValue;

use super::hints::{Hint, HintSpans};
use super::{Envelope, skip_space};

/// JSON text of one value, checked: by serde (taken from a `RawValue`) or
/// by [`value_end`]. What an upstream answered travels as this, so an
/// answer checked once is not checked again on its way to the client.
#[derive(Clone)]
pub(crate) struct Json {
    text: Box<str>,
    /// Known to have no member named `uri` anywhere in it (no key is
    /// `uri` and none has an escape that could spell it): learned on the
    /// way by the one-pass check, so the URI rewrite need not search.
    no_uri_key: bool,
    /// Where the members a 2026-07-28 result carries (`resultType`,
    /// `ttlMs`, `cacheScope`) are at its own top level, if known: learned
    /// on the way by the one-pass check, so neither a modern client's
    /// result nor the cache reads the result again for them.
    hints: Option<HintSpans>,
}

impl Json {
    /// The text, as it came.
    pub(crate) fn get(&self) -> &str {
        &self.text
    }

    /// Whether the text is known to have no member named `uri` at any
    /// depth; `false` says only that it was not checked for one.
    pub(crate) fn has_no_uri_key(&self) -> bool {
        self.no_uri_key
    }

    /// Where the text's own `resultType`, `ttlMs` and `cacheScope`
    /// members are, if it was checked for them; `None` says only that it
    /// was not.
    pub(crate) fn hints(&self) -> Option<&HintSpans> {
        self.hints.as_ref()
    }
}

impl PartialEq for Json {
    fn eq(&self, other: &Json) -> bool {
        self.text == other.text
    }
}

impl Eq for Json {}

impl From<&RawValue> for Json {
    fn from(raw: &RawValue) -> Json {
        Json {
            text: raw.get().into(),
            no_uri_key: false,
            hints: None,
        }
    }
}

impl From<Box<RawValue>> for Json {
    fn from(raw: Box<RawValue>) -> Json {
        Json {
            text: raw.into(),
            no_uri_key: false,
            hints: None,
        }
    }
}

impl std::fmt::Debug for Json {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Json").field(&self.get()).finish()
    }
}

/// A value's JSON text inside a message, checked: by serde (a message's
/// `params` as [`super::Envelope::parse`] reads them) or by [`value_end`],
/// or a member found in such text (`params::Params`). A `RawValue` would
/// be checked by serde however it was found; this is what lets the
/// one-pass read hand a large value on unread.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Raw<'a>(pub(super) &'a str);

impl<'a> Raw<'a> {
    /// The text, as it came.
    pub(crate) fn get(self) -> &'a str {
        self.0
    }
}

impl<'a> From<&'a RawValue> for Raw<'a> {
    fn from(raw: &'a RawValue) -> Raw<'a> {
        Raw(raw.get())
    }
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Raw<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <&'de RawValue>::deserialize(deserializer).map(Raw::from)
    }
}

impl std::fmt::Debug for Raw<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Raw").field(&self.0).finish()
    }
}

/// A response read by [`response`]: its numeric id and its result.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Answered {
    pub id: u64,
    pub result: Json,
}

/// `text` as a response with `"jsonrpc": "2.0"`, an unsigned integer `id`
/// and a `result`, every byte of it checked; `None` for anything else (a
/// method, an error, an escaped key, a repeated member, broken JSON),
/// which the full parse then reads and judges.
pub(crate) fn response(text: &str) -> Option<Answered> {
    let (mut version, mut id, mut result) = (false, None, None);
    let mut keys = NestedKeys::default();
    each_member(text, usize::MAX, &mut keys, None, |key, value| {
        match key {
            b"jsonrpc" if !version && value == "\"2.0\"" => version = true,
            b"id" if id.is_none() => id = Some(value.parse::<u64>().ok()?),
            b"result" if result.is_none() => result = Some(value),
            b"jsonrpc" | b"id" | b"result" | b"error" | b"method" | b"params" => return None,
            _ => {}
        }
        Some(())
    })?;
    let (id, result) = (id.filter(|_| version)?, result?);
    // This read is the message's one parse, as `Envelope::parse` would be.
    #[cfg(test)]
    super::ENVELOPES.with(|n| n.set(n.get() + 1));
    // The spans were noted in the whole message: the result's own are the
    // ones inside it (a hint member of another member's object makes them
    // all unknown, as a repeated one does).
    let offset = result.as_ptr() as usize - text.as_ptr() as usize;
    let hints = match keys.hints_unknown {
        true => None,
        false => keys.hints.within(offset, result.len()),
    };
    Some(Answered {
        id,
        result: Json {
            text: result.into(),
            // Only the result nests keys: `id` is a number and `jsonrpc`
            // a string (any other member only makes this cautious).
            no_uri_key: !keys.maybe_uri,
            hints,
        },
    })
}

/// `text` as the envelope serde would read from it, when its `jsonrpc`
/// and `method` are plain strings (no escape), it has no `result` or
/// `error`, no member comes twice and it nests arrays and objects at most
/// `max_depth` deep (the message's own object counts): every byte
/// checked, the params' members found (`param_members`) and their values
/// handed on unread. `None` for anything else, which serde then reads
/// (and the depth check judges).
pub(crate) fn envelope(text: &str, max_depth: usize) -> Option<Envelope<'_>> {
    let mut envelope = Envelope {
        jsonrpc: None,
        id: None,
        method: None,
        params: None,
        result: None,
        error: None,
        param_members: None,
    };
    let (mut id, mut params) = (false, false);
    let mut members = None;
    let found = Some(&mut members);
    each_member(
        text,
        max_depth,
        &mut NestedKeys::default(),
        found,
        |key, value| {
            match key {
                b"jsonrpc" if envelope.jsonrpc.is_none() => {
                    envelope.jsonrpc = Some(Cow::Borrowed(plain_string(value)?));
                }
                b"method" if envelope.method.is_none() => {
                    envelope.method = Some(Cow::Borrowed(plain_string(value)?));
                }
                // An id is short: serde makes its `RawValue` (`null` kept).
                b"id" if !std::mem::replace(&mut id, true) => {
                    envelope.id = Some(serde_json::from_str(value).ok()?);
                }
                // An explicit `null` is no params, as serde reads it.
                b"params" if !std::mem::replace(&mut params, true) => {
                    envelope.params = (value != "null").then_some(Raw(value));
                }
                b"jsonrpc" | b"method" | b"id" | b"params" | b"result" | b"error" => return None,
                _ => {}
            }
            Some(())
        },
    )?;
    envelope.param_members = members;
    Some(envelope)
}

/// The contents of `value` if it is a string with no escape in it.
pub(super) fn plain_string(value: &str) -> Option<&str> {
    let inner = value.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('\\')).then_some(inner)
}

/// Walks the members of the object that is all of `text` (whitespace
/// around it allowed, arrays and objects at most `max_depth` deep, the
/// object itself one of them), checking each value on the way; `visit`
/// gets each key (as it is: one with an escape ends the walk with `None`)
/// and its value's text, and ends the walk with `None`. Keys nested in the
/// values are noted in `keys`; when `params` is given, the members of an
/// object under the `params` key are found on the way and put there.
fn each_member<'t>(
    text: &'t str,
    max_depth: usize,
    keys: &mut NestedKeys,
    mut params: Option<&mut Option<Vec<Member<'t>>>>,
    mut visit: impl FnMut(&[u8], &'t str) -> Option<()>,
) -> Option<()> {
    let depth = max_depth.checked_sub(1)?;
    let bytes = text.as_bytes();
    let at = skip_space(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    let end = walk_object(bytes, at, |key, start| {
        if key.escaped {
            return None;
        }
        let key = &bytes[key.inner];
        let end = match params.as_deref_mut() {
            Some(found) if key == b"params" && bytes.get(start) == Some(&b'{') => {
                let (end, members) = object_members(text, start, depth, keys)?;
                *found = Some(members);
                end
            }
            _ => value_end_within(bytes, start, depth, keys)?,
        };
        visit(key, &text[start..end])?;
        Some(end)
    })?;
    (skip_space(bytes, end) == bytes.len()).then_some(())
}

/// One member of an object: its key (unescaped) and its value's text.
pub(crate) type Member<'t> = (Cow<'t, str>, Raw<'t>);

/// The members of the object whose `{` is at `at` (nesting at most
/// `max_depth` deep, itself one level), each value checked, and just past
/// its closing `}`.
fn object_members<'t>(
    text: &'t str,
    at: usize,
    max_depth: usize,
    keys: &mut NestedKeys,
) -> Option<(usize, Vec<Member<'t>>)> {
    let depth = max_depth.checked_sub(1)?;
    let bytes = text.as_bytes();
    let mut members = Vec::new();
    let end = walk_object(bytes, at, |key, start| {
        let end = value_end_within(bytes, start, depth, keys)?;
        let key = match key.escaped {
            false => Cow::Borrowed(&text[key.inner]),
            true => unescaped_key(text, key.inner)?,
        };
        members.push((key, Raw(&text[start..end])));
        Some(end)
    })?;
    Some((end, members))
}

/// Where a key's text is between its quotes, and whether it has an escape.
struct Key {
    inner: std::ops::Range<usize>,
    escaped: bool,
}

/// Walks the object whose `{` is at `at`: `member` gets each key (checked
/// as a string) and where its value starts, and gives back where that
/// value ends, or `None` to end the walk. Just past the closing `}`.
fn walk_object(
    bytes: &[u8],
    at: usize,
    mut member: impl FnMut(Key, usize) -> Option<usize>,
) -> Option<usize> {
    let mut at = skip_space(bytes, at + 1);
    if bytes.get(at) == Some(&b'}') {
        return Some(at + 1);
    }
    loop {
        if bytes.get(at) != Some(&b'"') {
            return None;
        }
        let (key_end, escaped) = key_end(bytes, at + 1)?;
        let key = Key {
            inner: at + 1..key_end,
            escaped,
        };
        at = skip_space(bytes, key_end + 1);
        if bytes.get(at) != Some(&b':') {
            return None;
        }
        let end = member(key, skip_space(bytes, at + 1))?;
        at = skip_space(bytes, end);
        match bytes.get(at)? {
            b',' => at = skip_space(bytes, at + 1),
            b'}' => return Some(at + 1),
            _ => return None,
        }
    }
}

/// The key between the quotes around `inner` (checked string text):
/// borrowed as it is, or unescaped by serde when it holds a backslash.
pub(crate) fn key_of(text: &str, inner: std::ops::Range<usize>) -> Option<Cow<'_, str>> {
    let plain = &text[inner.clone()];
    if memchr::memchr(b'\\', plain.as_bytes()).is_none() {
        return Some(Cow::Borrowed(plain));
    }
    unescaped_key(text, inner)
}

/// The escaped key between the quotes around `inner`, unescaped by serde.
fn unescaped_key(text: &str, inner: std::ops::Range<usize>) -> Option<Cow<'_, str>> {
    serde_json::from_str::<String>(&text[inner.start - 1..=inner.end])
        .ok()
        .map(Cow::Owned)
}

/// Just past the one JSON value that starts at `start` (no whitespace
/// before it), or `None` if the text there is not one.
#[cfg(test)]
pub(crate) fn value_end(bytes: &[u8], start: usize) -> Option<usize> {
    value_end_within(bytes, start, usize::MAX, &mut NestedKeys::default())
}

/// What a check learned of the keys nested in the values it walked.
#[derive(Default)]
struct NestedKeys {
    /// A key was `uri`, or had an escape (which could spell it).
    maybe_uri: bool,
    /// Where the values of the walked values' own (top-level, not nested
    /// deeper) `resultType`, `ttlMs` and `cacheScope` members are.
    hints: HintSpans,
    /// One of those came twice, or a top-level key had an escape (which
    /// could spell one): `hints` cannot be trusted.
    hints_unknown: bool,
    /// A top-level hint member whose value is being walked, and where its
    /// value starts.
    open_hint: Option<(Hint, usize)>,
}

/// [`value_end`] of a value that nests arrays and objects at most
/// `max_depth` deep (itself one of them, if it is one); `None` for a
/// deeper one too. Each key on the way is noted in `keys`.
fn value_end_within(
    bytes: &[u8],
    start: usize,
    max_depth: usize,
    keys: &mut NestedKeys,
) -> Option<usize> {
    let mut open = Open::default();
    let mut at = start;
    loop {
        if matches!(bytes.get(at), Some(b'{' | b'[')) && open.len() >= max_depth {
            return None;
        }
        // A value.
        at = match *bytes.get(at)? {
            b'"' => string_end(bytes, at + 1)? + 1,
            b'{' => {
                at = skip_space(bytes, at + 1);
                if bytes.get(at) == Some(&b'}') {
                    at + 1
                } else {
                    open.push(true);
                    at = member_value(bytes, at, open.len() == 1, keys)?;
                    continue;
                }
            }
            b'[' => {
                at = skip_space(bytes, at + 1);
                if bytes.get(at) == Some(&b']') {
                    at + 1
                } else {
                    open.push(false);
                    continue;
                }
            }
            b't' => literal(bytes, at, b"true")?,
            b'f' => literal(bytes, at, b"false")?,
            b'n' => literal(bytes, at, b"null")?,
            b'-' | b'0'..=b'9' => number_end(bytes, at)?,
            _ => return None,
        };
        // After a value: the next one in the innermost container, or its end.
        loop {
            let Some(object) = open.last() else {
                return Some(at);
            };
            // A value just ended at the top level: a hint member's, if one
            // was open.
            if keys.open_hint.is_some()
                && open.len() == 1
                && let Some((hint, start)) = keys.open_hint.take()
            {
                keys.hints_unknown |= !keys.hints.note(hint, start..at);
            }
            at = skip_space(bytes, at);
            match (*bytes.get(at)?, object) {
                (b',', true) => {
                    let top = open.len() == 1;
                    at = member_value(bytes, skip_space(bytes, at + 1), top, keys)?;
                    break;
                }
                (b',', false) => {
                    at = skip_space(bytes, at + 1);
                    break;
                }
                (b'}', true) | (b']', false) => {
                    open.pop();
                    at += 1;
                }
                _ => return None,
            }
        }
    }
}

/// The arrays and objects open around a value, innermost last: `true`
/// for an object. The first 128 levels are bits in place (a message
/// nests far less), so a check allocates nothing.
#[derive(Default)]
struct Open {
    bits: u128,
    len: usize,
    /// Levels beyond the first 128, innermost last.
    deeper: Vec<bool>,
}

impl Open {
    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, object: bool) {
        match self.len {
            0..128 => self.bits = (self.bits & !(1 << self.len)) | (u128::from(object) << self.len),
            _ => self.deeper.push(object),
        }
        self.len += 1;
    }

    fn last(&self) -> Option<bool> {
        match self.len {
            0 => None,
            1..=128 => Some(self.bits >> (self.len - 1) & 1 == 1),
            _ => self.deeper.last().copied(),
        }
    }

    fn pop(&mut self) {
        if self.len > 128 {
            self.deeper.pop();
        }
        self.len = self.len.saturating_sub(1);
    }
}

/// At a member's key: where its value starts. The key is noted in `keys`
/// (`top`: as one of the checked value's own members).
fn member_value(bytes: &[u8], at: usize, top: bool, keys: &mut NestedKeys) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let (end, escaped) = key_end(bytes, at + 1)?;
    let key = &bytes[at + 1..end];
    keys.maybe_uri |= escaped || key == b"uri";
    let hint = match top {
        true => Hint::of(key),
        false => None,
    };
    keys.hints_unknown |= top && escaped;
    let at = skip_space(bytes, end + 1);
    if bytes.get(at) != Some(&b':') {
        return None;
    }
    let start = skip_space(bytes, at + 1);
    if let Some(hint) = hint {
        keys.open_hint = Some((hint, start));
    }
    Some(start)
}

/// The closing quote of the string whose contents start at `from`: no
/// control character in it, every escape one JSON has.
fn string_end(bytes: &[u8], from: usize) -> Option<usize> {
    key_end(bytes, from).map(|(end, _)| end)
}

/// [`string_end`], and whether the string has an escape (as a key with
/// one may need unescaping to be known).
fn key_end(bytes: &[u8], mut from: usize) -> Option<(usize, bool)> {
    let mut escaped = false;
    loop {
        let at = from + string_stop(bytes.get(from..)?)?;
        if bytes[at] == b'"' {
            return Some((at, escaped));
        }
        escaped = true;
        from = at + 1 + escape_len(bytes.get(at + 1..)?)?;
    }
}

/// Where the string text `rest` stops: its first quote or backslash, with
/// no control character before it; `None` if one comes first, or neither.
fn string_stop(rest: &[u8]) -> Option<usize> {
    // The first sixteen bytes a word at a time: most strings (keys, names,
    // short values) stop there, sooner than a vector search is set up.
    for (n, word) in rest.chunks_exact(8).take(2).enumerate() {
        let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        let stops = super::bytes_below(word, 0x20)
            | super::bytes_equal(word, b'"')
            | super::bytes_equal(word, b'\\');
        if stops != 0 {
            let at = n * 8 + (stops.trailing_zeros() / 8) as usize;
            return (rest[at] >= 0x20).then_some(at);
        }
    }
    let from = (rest.len() / 8).min(2) * 8;
    let found = from + memchr::memchr2(b'"', b'\\', &rest[from..])?;
    (!has_control(&rest[from..found])).then_some(found)
}

/// Whether `bytes` holds a control character (below 0x20): whether their
/// least byte is one. A minimum with no early exit is vectorized (one
/// `pminub` per 16 bytes). The minimum is kept per lane of a 32-byte
/// block, a loop of fixed length that the compiler turns into vector
/// instructions whatever it guesses of the outer loop's length: a plain
/// fold over the bytes was vectorized or not depending on the trip counts
/// a profile-guided build's training happened to record (short keys
/// against 2 KB texts), and ran a byte at a time when it was not.
fn has_control(bytes: &[u8]) -> bool {
    const LANES: usize = 32;
    let mut blocks = bytes.chunks_exact(LANES);
    let mut least = [u8::MAX; LANES];
    for block in &mut blocks {
        for (lane, &b) in least.iter_mut().zip(block) {
            *lane = (*lane).min(b);
        }
    }
    least
        .iter()
        .chain(blocks.remainder())
        .fold(u8::MAX, |all, &b| all.min(b))
        < 0x20
}

/// The length of the escape after a backslash (its letter, and the four
/// hex digits of a `\u`), if it is one JSON has.
fn escape_len(after: &[u8]) -> Option<usize> {
    match *after.first()? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(1),
        b'u' => after
            .get(1..5)?
            .iter()
            .all(u8::is_ascii_hexdigit)
            .then_some(5),
        _ => None,
    }
}

/// Just past `word` at `at`.
fn literal(bytes: &[u8], at: usize, word: &[u8]) -> Option<usize> {
    let end = at + word.len();
    (bytes.get(at..end)? == word).then_some(end)
}

/// Just past the number at `at`: `-`, then `0` or digits not starting
/// with `0`, then an optional fraction and exponent, each with digits.
fn number_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    let digits = |from: usize| {
        let n = bytes.get(from..).map_or(0, |rest| {
            rest.iter().take_while(|b| b.is_ascii_digit()).count()
        });
        (n > 0).then_some(from + n)
    };
    if bytes.get(at) == Some(&b'-') {
        at += 1;
    }
    at = match bytes.get(at)? {
        b'0' => at + 1,
        b'1'..=b'9' => digits(at)?,
        _ => return None,
    };
    if bytes.get(at) == Some(&b'.') {
        at = digits(at + 1)?;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        at = digits(at)?;
    }
    Some(at)
}

#[cfg(test)]
#[path = "checked_tests.rs"]
mod tests;
