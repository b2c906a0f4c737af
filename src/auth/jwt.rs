//! JWT bearer tokens: verification keys (a JWKS fetched and refreshed, or
//! PEM keys from the config) and the checks on a token. The JOSE work is
//! the `jsonwebtoken` crate's; this file only picks keys and reads claims.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde_json::{Map, Value};

use super::{AuthError, Identity};
use crate::config::{JwtConfig, JwtKeys};

/// How long one JWKS fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a JWT verifier cannot be built from its config. Config validation
/// reads the same keys, so this is rare.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SetupError {
    /// An `algorithms` entry `jsonwebtoken` does not know.
    #[error("{algorithm}: {reason}")]
    Algorithm {
        algorithm: String,
        reason: jsonwebtoken::errors::Error,
    },
    /// A `public_keys` entry (by index) that is no supported PEM key.
    #[error("auth.jwt.public_keys[{0}] is not an RSA, EC or Ed25519 public key in PEM")]
    PemKey(usize),
    /// The HTTP client for JWKS fetches cannot be built.
    #[error(transparent)]
    HttpClient(reqwest::Error),
}

/// Why a JWKS fetch failed; the keys already held are kept.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    /// No response (the URL is left out: it may carry a secret).
    #[error(transparent)]
    Request(reqwest::Error),
    #[error("HTTP {0}")]
    Status(reqwest::StatusCode),
    /// The body could not be read.
    #[error(transparent)]
    Body(reqwest::Error),
    #[error("not a JWKS: {0}")]
    NotJwks(serde_json::Error),
}

/// One verification key.
struct Key {
    kid: Option<String>,
    key: DecodingKey,
}

/// Verifies JWTs for one configured issuer.
pub(crate) struct JwtVerifier {
    cfg: JwtConfig,
    algorithms: Vec<Algorithm>,
    keys: ArcSwap<Vec<Key>>,
    /// When keys were last fetched (None: never), held while fetching so
    /// concurrent requests with an unknown `kid` share one fetch.
    fetched: tokio::sync::Mutex<Option<Instant>>,
    http: reqwest::Client,
}

impl JwtVerifier {
    /// PEM keys are read now (an error says which); a JWKS is fetched by
    /// [`Self::refresh`].
    pub(crate) fn new(cfg: &JwtConfig) -> Result<JwtVerifier, SetupError> {
        let algorithms = cfg
            .algorithms
            .iter()
            .map(|a| {
                a.parse::<Algorithm>()
                    .map_err(|reason| SetupError::Algorithm {
                        algorithm: a.clone(),
                        reason,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let keys = match &cfg.keys {
            JwtKeys::Pem(pems) => pems
                .iter()
                .enumerate()
                .map(|(i, pem)| {
                    pem_key(pem)
                        .map(|key| Key { kid: None, key })
                        .ok_or(SetupError::PemKey(i))
                })
                .collect::<Result<Vec<_>, _>>()?,
            JwtKeys::Jwks(_) => Vec::new(),
        };
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(SetupError::HttpClient)?;
        Ok(JwtVerifier {
            cfg: cfg.clone(),
            algorithms,
            keys: ArcSwap::from_pointee(keys),
            fetched: tokio::sync::Mutex::new(None),
            http,
        })
    }

    /// The JWKS URL, when keys come from one.
    pub(crate) fn jwks_url(&self) -> Option<&str> {
        match &self.cfg.keys {
            JwtKeys::Jwks(url) => Some(url),
            JwtKeys::Pem(_) => None,
        }
    }

    pub(crate) fn refresh_interval(&self) -> Duration {
        self.cfg.jwks_refresh
    }

    /// Fetches the JWKS again, unless `only_if_stale` and the last fetch is
    /// more recent than the cool-down. Returns whether keys were replaced.
    pub(crate) async fn refresh(&self, only_if_stale: bool) -> bool {
        let Some(url) = self.jwks_url() else {
            return false;
        };
        let mut fetched = self.fetched.lock().await;
        if only_if_stale && fetched.is_some_and(|at| at.elapsed() < self.cfg.jwks_refetch_cooldown)
        {
            return false;
        }
        *fetched = Some(Instant::now());
        match self.fetch(url).await {
            Ok(keys) => {
                tracing::info!(keys = keys.len(), "JWKS fetched");
                self.keys.store(Arc::new(keys));
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "JWKS fetch failed; keeping the keys I have");
                false
            }
        }
    }

    async fn fetch(&self, url: &str) -> Result<Vec<Key>, FetchError> {
        let response = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| FetchError::Request(e.without_url()))?;
        if !response.status().is_success() {
            return Err(FetchError::Status(response.status()));
        }
        let text = response.text().await.map_err(FetchError::Body)?;
        let set: JwkSet = serde_json::from_str(&text).map_err(FetchError::NotJwks)?;
        Ok(set
            .keys
            .iter()
            .filter_map(|jwk| match DecodingKey::from_jwk(jwk) {
                Ok(key) => Some(Key {
                    kid: jwk.common.key_id.clone(),
                    key,
                }),
                Err(e) => {
                    tracing::warn!(kid = ?jwk.common.key_id, error = %e, "JWKS key skipped");
                    None
                }
            })
            .collect())
    }

    /// Checks `token` and reads the client and its scopes from it.
    pub(crate) async fn verify(&self, token: &str) -> Result<Identity, AuthError> {
        let header =
            decode_header(token).map_err(|_| AuthError::invalid("the token is not a valid JWT"))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(AuthError::invalid(format!(
                "tokens signed with {:?} are not accepted",
                header.alg
            )));
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.cfg.issuer]);
        validation.set_audience(&[&self.cfg.audience]);
        validation.leeway = self.cfg.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);

        let mut claims = self.try_keys(token, header.kid.as_deref(), &validation);
        if matches!(claims, Err(ref e) if e.is_unknown_key()) && self.refresh(true).await {
            claims = self.try_keys(token, header.kid.as_deref(), &validation);
        }
        let claims = claims?;
        let client = claims
            .get(&self.cfg.client_claim)
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .ok_or_else(|| {
                AuthError::invalid(format!(
                    "the token has no {:?} claim",
                    self.cfg.client_claim
                ))
            })?;
        let scopes = match claims.get(&self.cfg.scopes_claim) {
            Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        Ok(Identity::new(client, scopes))
    }

    /// Verifies with the key named by `kid`, or each key without one.
    fn try_keys(
        &self,
        token: &str,
        kid: Option<&str>,
        validation: &Validation,
    ) -> Result<Map<String, Value>, AuthError> {
        let keys = self.keys.load();
        let candidates: Vec<&Key> = keys
            .iter()
            .filter(|k| kid.is_none() || k.kid.is_none() || k.kid.as_deref() == kid)
            .collect();
        if candidates.is_empty() {
            return Err(AuthError::UnknownKey);
        }
        let mut last = AuthError::invalid("no key verifies the token");
        for key in candidates {
            match decode::<Map<String, Value>>(token, &key.key, validation) {
                Ok(data) => return Ok(data.claims),
                Err(e) => last = describe(e.kind()),
            }
        }
        Err(last)
    }
}

/// A PEM public key of any supported kind.
fn pem_key(pem: &str) -> Option<DecodingKey> {
    let bytes = pem.as_bytes();
    DecodingKey::from_rsa_pem(bytes)
        .or_else(|_| DecodingKey::from_ec_pem(bytes))
        .or_else(|_| DecodingKey::from_ed_pem(bytes))
        .ok()
}

/// Why a token failed, in words a client can act on.
fn describe(kind: &jsonwebtoken::errors::ErrorKind) -> AuthError {
    use jsonwebtoken::errors::ErrorKind;
    AuthError::invalid(match kind {
        ErrorKind::ExpiredSignature => "the token has expired".to_owned(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".to_owned(),
        ErrorKind::InvalidIssuer => "the token's issuer is not accepted".to_owned(),
        ErrorKind::InvalidAudience => "the token's audience is not this gateway".to_owned(),
        ErrorKind::InvalidSignature => "the token's signature does not verify".to_owned(),
        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no {claim:?} claim"),
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidKeyFormat => {
            "the token's algorithm does not match its key".to_owned()
        }
        _ => "the token is not valid".to_owned(),
    })
}
