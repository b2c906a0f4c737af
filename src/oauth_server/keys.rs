//! The keys the authorization server signs its access tokens with, and
//! publishes at `/jwks.json`. The JOSE work is `jsonwebtoken`'s and key
//! generation `aws-lc-rs`'s; this file only chooses keys and keeps them.
//!
//! Keys come from the config (`signing_keys`: the first signs, the others
//! are still published and accepted, which is how an operator rotates) or
//! are generated: an ES256 key, stored sealed with `credentials.key` in the
//! state store so every replica signs with the same one, replaced after
//! `key_rotation`; a replaced key stays published until every token it
//! signed has expired.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse, ThumbprintHash};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use serde::{Deserialize, Serialize};

use super::state::{Lifetime, StateError, StateStore, now_ms};
use crate::config::{Secret, StateKey, signing_algorithm};
use crate::seal::Sealer;

/// The least time between key reloads caused by an unknown `kid`.
const RELOAD_COOLDOWN: Duration = Duration::from_secs(5);
/// A retired key is still published this long after the newest key took
/// over, beyond the access token lifetime (clock skew, slow clients).
const RETIRE_MARGIN: Duration = Duration::from_secs(5 * 60);

/// Why signing keys are not available.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum KeyError {
    #[error("auth.oauth_server.signing_keys[{0}] cannot sign")]
    Configured(usize),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("no signing key yet (the state store has not answered)")]
    NoKey,
    #[error("signing failed: {0}")]
    Sign(jsonwebtoken::errors::Error),
}

/// One key: its id (RFC 7638 thumbprint), how it signs and how it verifies.
pub(crate) struct SigningKey {
    pub kid: String,
    pub alg: Algorithm,
    encoding: EncodingKey,
    pub decoding: DecodingKey,
    jwk: Jwk,
    created_ms: u64,
}

impl SigningKey {
    fn new(encoding: EncodingKey, alg: Algorithm, created_ms: u64) -> Option<SigningKey> {
        let mut jwk = Jwk::from_encoding_key(&encoding, alg).ok()?;
        let kid = jwk.thumbprint(ThumbprintHash::SHA256);
        jwk.common.key_id = Some(kid.clone());
        jwk.common.public_key_use = Some(PublicKeyUse::Signature);
        let decoding = DecodingKey::from_jwk(&jwk).ok()?;
        Some(SigningKey {
            kid,
            alg,
            encoding,
            decoding,
            jwk,
            created_ms,
        })
    }

    fn from_pem(pem: &str) -> Option<SigningKey> {
        let alg = signing_algorithm(pem)?;
        let encoding = match alg {
            Algorithm::ES256 => EncodingKey::from_ec_pem(pem.as_bytes()).ok()?,
            _ => EncodingKey::from_rsa_pem(pem.as_bytes()).ok()?,
        };
        SigningKey::new(encoding, alg, 0)
    }

    fn from_pkcs8(der: &[u8], created_ms: u64) -> Option<SigningKey> {
        SigningKey::new(EncodingKey::from_ec_der(der), Algorithm::ES256, created_ms)
    }
}

/// A generated key as stored: its creation time, the PKCS#8 document sealed.
#[derive(Serialize, Deserialize)]
struct StoredKey {
    created_ms: u64,
    sealed: String,
}

/// Generated keys: where they live and what seals them.
struct Generated {
    state: Arc<StateStore>,
    sealer: Sealer,
    previous: Vec<Sealer>,
    rotation: Duration,
    /// How long a replaced key is still published.
    overlap: Duration,
}

/// The signing keys: the first in the list signs, all verify.
pub(crate) struct KeyRing {
    keys: ArcSwap<Vec<Arc<SigningKey>>>,
    generated: Option<Generated>,
    /// When keys were last loaded because of an unknown `kid`.
    reloaded: tokio::sync::Mutex<Option<Instant>>,
}

const PURPOSE: &str = "mcpmux.oauth-signing-key";

impl KeyRing {
    /// Keys from the config, which never change.
    pub(crate) fn configured(pems: &[Secret]) -> Result<KeyRing, KeyError> {
        let keys = pems
            .iter()
            .enumerate()
            .map(|(i, pem)| {
                SigningKey::from_pem(pem.expose())
                    .map(Arc::new)
                    .ok_or(KeyError::Configured(i))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(KeyRing {
            keys: ArcSwap::from_pointee(keys),
            generated: None,
            reloaded: tokio::sync::Mutex::new(None),
        })
    }

    /// Generated keys kept in `state`; none are loaded until [`Self::refresh`].
    pub(crate) fn generated(
        state: Arc<StateStore>,
        key: &StateKey,
        previous: &[StateKey],
        rotation: Duration,
        access_ttl: Duration,
    ) -> KeyRing {
        KeyRing {
            keys: ArcSwap::from_pointee(Vec::new()),
            generated: Some(Generated {
                state,
                sealer: Sealer::new(key.bytes()),
                previous: previous.iter().map(|k| Sealer::new(k.bytes())).collect(),
                rotation,
                overlap: access_ttl + RETIRE_MARGIN,
            }),
            reloaded: tokio::sync::Mutex::new(None),
        }
    }

    /// How often [`Self::refresh`] should run: never for configured keys.
    pub(crate) fn refresh_every(&self) -> Option<Duration> {
        self.generated
            .as_ref()
            .map(|g| (g.rotation / 8).clamp(Duration::from_secs(60), Duration::from_secs(3600)))
    }

    /// Loads the generated keys, makes a new one when there is none or the
    /// newest is due for rotation, and forgets retired ones.
    pub(crate) async fn refresh(&self) -> Result<(), KeyError> {
        let Some(generated) = &self.generated else {
            return Ok(());
        };
        let mut keys = self.load(generated).await?;
        let now = now_ms();
        let due = keys.first().is_none_or(|newest| {
            now.saturating_sub(newest.created_ms) >= millis(generated.rotation)
        });
        if due {
            let rng = aws_lc_rs::rand::SystemRandom::new();
            let document = aws_lc_rs::signature::EcdsaKeyPair::generate_pkcs8(
                &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                &rng,
            )
            .expect("the system random generator works");
            let key = SigningKey::from_pkcs8(document.as_ref(), now)
                .expect("a generated P-256 key signs");
            let stored = StoredKey {
                created_ms: now,
                sealed: generated
                    .sealer
                    .seal(&format!("{PURPOSE}\n{}", key.kid), document.as_ref()),
            };
            let value = serde_json::to_string(&stored).expect("a key serializes");
            generated
                .state
                .put_new(
                    &format!("sigkey:{now:016}:{}", key.kid),
                    &value,
                    Lifetime::Long(None),
                )
                .await?;
            tracing::info!(kid = %key.kid, "oauth_server: a new signing key was generated");
            keys = self.load(generated).await?;
        }
        self.keys.store(Arc::new(keys));
        Ok(())
    }

    /// The stored keys, newest first, without retired ones (which are
    /// deleted).
    async fn load(&self, generated: &Generated) -> Result<Vec<Arc<SigningKey>>, KeyError> {
        let mut stored: Vec<(String, StoredKey)> = generated
            .state
            .scan("sigkey:")
            .await?
            .into_iter()
            .filter_map(|(k, v)| Some((k, serde_json::from_str(&v).ok()?)))
            .collect();
        stored.sort_by_key(|(_, s)| std::cmp::Reverse(s.created_ms));
        let now = now_ms();
        let mut keys = Vec::new();
        let mut newer: Option<u64> = None;
        for (name, key) in stored {
            // Retired: a newer key took over longer ago than any token lives.
            if newer.is_some_and(|t| now.saturating_sub(t) > millis(generated.overlap)) {
                let _ = generated.state.delete(&name).await;
                continue;
            }
            newer = Some(key.created_ms);
            let kid = name.rsplit(':').next().unwrap_or_default();
            let purpose = format!("{PURPOSE}\n{kid}");
            let opened = std::iter::once(&generated.sealer)
                .chain(&generated.previous)
                .find_map(|s| s.open(&purpose, &key.sealed).ok());
            match opened.and_then(|der| SigningKey::from_pkcs8(&der, key.created_ms)) {
                Some(k) => keys.push(Arc::new(k)),
                None => tracing::warn!(
                    kid = %kid,
                    "oauth_server: a stored signing key does not open with credentials.key; it is ignored"
                ),
            }
        }
        Ok(keys)
    }

    /// Signs `claims` with the current key, as an RFC 9068 access token.
    pub(crate) fn sign(&self, claims: &impl Serialize) -> Result<String, KeyError> {
        let keys = self.keys.load();
        let key = keys.first().ok_or(KeyError::NoKey)?;
        let mut header = Header::new(key.alg);
        header.kid = Some(key.kid.clone());
        header.typ = Some("at+jwt".into());
        jsonwebtoken::encode(&header, claims, &key.encoding).map_err(KeyError::Sign)
    }

    /// The key with `kid`; an unknown one makes generated keys load again
    /// (at most once per cool-down), since another replica may have rotated.
    pub(crate) async fn find(&self, kid: &str) -> Option<Arc<SigningKey>> {
        if let Some(key) = self.keys.load().iter().find(|k| k.kid == kid) {
            return Some(key.clone());
        }
        self.generated.as_ref()?;
        {
            let mut last = self.reloaded.lock().await;
            if last.is_some_and(|t| t.elapsed() < RELOAD_COOLDOWN) {
                return None;
            }
            *last = Some(Instant::now());
            if let Err(e) = self.refresh().await {
                tracing::warn!(error = %e, "oauth_server: signing keys could not be loaded");
            }
        }
        self.keys.load().iter().find(|k| k.kid == kid).cloned()
    }

    /// Whether `kid` names one of these keys (without loading).
    pub(crate) fn knows(&self, kid: &str) -> bool {
        self.keys.load().iter().any(|k| k.kid == kid)
    }

    /// The public keys, for `/jwks.json`.
    pub(crate) fn jwks(&self) -> JwkSet {
        JwkSet {
            keys: self.keys.load().iter().map(|k| k.jwk.clone()).collect(),
        }
    }

    /// The algorithms keys sign with, for the metadata.
    pub(crate) fn algorithms(&self) -> Vec<Algorithm> {
        let mut algs: Vec<Algorithm> = self.keys.load().iter().map(|k| k.alg).collect();
        if algs.is_empty() {
            algs.push(Algorithm::ES256);
        }
        algs.dedup();
        algs
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{KeyRing, PURPOSE, StoredKey};
    use crate::config::StateKey;
    use crate::oauth_server::state::{Lifetime, StateStore, now_ms};

    fn key() -> StateKey {
        StateKey::parse("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY=").unwrap()
    }

    async fn store_key(state: &StateStore, created_ms: u64) -> String {
        let document = aws_lc_rs::signature::EcdsaKeyPair::generate_pkcs8(
            &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &aws_lc_rs::rand::SystemRandom::new(),
        )
        .unwrap();
        let signing = super::SigningKey::from_pkcs8(document.as_ref(), created_ms).unwrap();
        let sealer = crate::seal::Sealer::new(key().bytes());
        let stored = StoredKey {
            created_ms,
            sealed: sealer.seal(&format!("{PURPOSE}\n{}", signing.kid), document.as_ref()),
        };
        state
            .put(
                &format!("sigkey:{created_ms:016}:{}", signing.kid),
                &serde_json::to_string(&stored).unwrap(),
                Lifetime::Long(None),
            )
            .await
            .unwrap();
        signing.kid
    }

    #[tokio::test]
    async fn a_due_key_is_replaced_and_stays_published_until_its_tokens_expired() {
        let path = crate::oauth_server::state::tests::temp_path("keys");
        let state = Arc::new(StateStore::file(&path).unwrap());
        let day = 24 * 3600 * 1000;
        // Retired long ago (a newer key took over more than the overlap ago).
        let ancient = store_key(&state, now_ms() - 40 * day).await;
        // Due for rotation (30 days), still the newest.
        let due = store_key(&state, now_ms() - 31 * day).await;
        let ring = KeyRing::generated(
            state.clone(),
            &key(),
            &[],
            Duration::from_secs(30 * 24 * 3600),
            Duration::from_secs(300),
        );
        ring.refresh().await.unwrap();
        let jwks = ring.jwks();
        let kids: Vec<String> = jwks
            .keys
            .iter()
            .filter_map(|k| k.common.key_id.clone())
            .collect();
        assert_eq!(kids.len(), 2, "{kids:?}");
        assert!(kids.contains(&due), "the replaced key is still published");
        assert!(!kids.contains(&ancient), "the retired key is gone");
        assert_eq!(state.scan("sigkey:").await.unwrap().len(), 2);
        // The new key signs, and a token verifies with the key its kid names.
        let token = ring
            .sign(&serde_json::json!({"sub": "a", "exp": 4_000_000_000u64}))
            .unwrap();
        let kid = jsonwebtoken::decode_header(&token).unwrap().kid.unwrap();
        assert_ne!(kid, due);
        let found = ring.find(&kid).await.unwrap();
        let mut validation = jsonwebtoken::Validation::new(found.alg);
        validation.required_spec_claims.clear();
        jsonwebtoken::decode::<serde_json::Value>(&token, &found.decoding, &validation).unwrap();
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
