//! Sealed tokens: state the gateway hands a client and must get back
//! unchanged (the `requestState` of an `input_required` result it makes).
//!
//! A token is AES-256-GCM (aws-lc-rs) over the payload, with a random
//! nonce, a purpose string as associated data, and a version prefix:
//! `mcpmux.v1.` followed by base64url(nonce ‖ ciphertext ‖ tag). A client
//! can neither read nor change it; a token sealed for one purpose does not
//! open for another. The key comes from the config (`request_state.key`),
//! so replicas sharing it accept each other's tokens, or is made at random
//! when the process starts.

use aws_lc_rs::aead::{AES_256_GCM, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// What every sealed token starts with.
pub(crate) const PREFIX: &str = "mcpmux.v1.";

/// Bytes in a key.
pub(crate) const KEY_LEN: usize = 32;

/// Why a token did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SealError {
    #[error("it was not issued by this gateway")]
    Foreign,
    #[error("it was altered, or sealed with another key")]
    Tampered,
}

/// Seals and opens tokens with one key.
pub(crate) struct Sealer {
    key: RandomizedNonceKey,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(***)")
    }
}

impl Sealer {
    /// A sealer with `key` (exactly [`KEY_LEN`] bytes).
    pub(crate) fn new(key: &[u8; KEY_LEN]) -> Self {
        let key = RandomizedNonceKey::new(&AES_256_GCM, key)
            .expect("an AES-256 key is 32 bytes, which the type guarantees");
        Self { key }
    }

    /// A sealer with a key made at random, good for this process only.
    pub(crate) fn random() -> Self {
        let mut key = [0u8; KEY_LEN];
        aws_lc_rs::rand::fill(&mut key).expect("the system random generator works");
        Self::new(&key)
    }

    /// `payload` sealed for `purpose`.
    pub(crate) fn seal(&self, purpose: &str, payload: &[u8]) -> String {
        let mut in_out = payload.to_vec();
        let nonce = self
            .key
            .seal_in_place_append_tag(Aad::from(purpose.as_bytes()), &mut in_out)
            .expect("sealing into a growable buffer does not fail");
        let mut raw = Vec::with_capacity(NONCE_LEN + in_out.len());
        raw.extend_from_slice(nonce.as_ref());
        raw.extend_from_slice(&in_out);
        let mut token = String::from(PREFIX);
        URL_SAFE_NO_PAD.encode_string(raw, &mut token);
        token
    }

    /// The payload of a token sealed for `purpose` with this key.
    pub(crate) fn open(&self, purpose: &str, token: &str) -> Result<Vec<u8>, SealError> {
        let body = token.strip_prefix(PREFIX).ok_or(SealError::Foreign)?;
        let raw = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| SealError::Tampered)?;
        if raw.len() < NONCE_LEN {
            return Err(SealError::Tampered);
        }
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Tampered)?;
        let mut in_out = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(purpose.as_bytes()), &mut in_out)
            .map_err(|_| SealError::Tampered)?;
        Ok(plain.to_vec())
    }
}

/// `len` random bytes in base64url: an unguessable id or token.
pub(crate) fn random_token(len: usize) -> String {
    let mut bytes = vec![0u8; len];
    aws_lc_rs::rand::fill(&mut bytes).expect("the system random generator works");
    URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_opens_only_unchanged_with_its_key_and_purpose() {
        let sealer = Sealer::new(&[7; KEY_LEN]);
        let token = sealer.seal("state", b"hello");
        assert!(token.starts_with(PREFIX));
        assert!(!token.contains("hello"));
        assert_eq!(sealer.open("state", &token).unwrap(), b"hello");
        // Same payload, fresh nonce: tokens differ.
        assert_ne!(token, sealer.seal("state", b"hello"));

        assert_eq!(sealer.open("other", &token), Err(SealError::Tampered));
        assert_eq!(
            Sealer::new(&[8; KEY_LEN]).open("state", &token),
            Err(SealError::Tampered)
        );
        assert_eq!(sealer.open("state", "opaque"), Err(SealError::Foreign));
        assert_eq!(
            sealer.open("state", &format!("{PREFIX}!!")),
            Err(SealError::Tampered)
        );
        assert_eq!(
            sealer.open("state", &format!("{PREFIX}AAAA")),
            Err(SealError::Tampered)
        );
        // Flip one bit anywhere in the body.
        let body = token.strip_prefix(PREFIX).unwrap();
        let mut raw = URL_SAFE_NO_PAD.decode(body).unwrap();
        for i in 0..raw.len() {
            raw[i] ^= 1;
            let forged = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&raw));
            assert_eq!(sealer.open("state", &forged), Err(SealError::Tampered));
            raw[i] ^= 1;
        }
    }

    #[test]
    fn random_keys_differ() {
        let token = Sealer::random().seal("state", b"x");
        assert_eq!(
            Sealer::random().open("state", &token),
            Err(SealError::Tampered)
        );
    }
}
