//! A string that never shows itself in `Debug` or `Display` output, and
//! the SHA-256 digest secrets are kept and compared as.

use std::fmt;

/// A config value that may hold a credential. Formatting prints a mask;
/// only [`Secret::expose`] gives the value, at the point it is used.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn new(value: String) -> Self {
        Self(value)
    }

    /// The value itself, for handing to a child process or a request header.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// The key that seals the state mcpmux hands clients between rounds of
/// input (`request_state.key`): 32 bytes, written in base64.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct StateKey([u8; 32]);

impl StateKey {
    /// Decodes standard or URL-safe base64, padded or not.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        use base64::Engine as _;
        use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
        let text = text.trim().trim_end_matches('=');
        let bytes = STANDARD_NO_PAD
            .decode(text)
            .or_else(|_| URL_SAFE_NO_PAD.decode(text))
            .map_err(|_| "is not base64".to_owned())?;
        let len = bytes.len();
        bytes
            .try_into()
            .map(Self)
            .map_err(|_| format!("is {len} bytes; it must be 32"))
    }

    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for StateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StateKey(***)")
    }
}

/// The SHA-256 digest of `text`.
pub(crate) fn sha256(text: &[u8]) -> [u8; 32] {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}
