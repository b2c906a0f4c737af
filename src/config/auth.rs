//! The `auth` section: how clients prove who they are. It must be present:
//! `auth: { mode: off }` is the explicit way to serve without
//! authentication. API keys are kept only as SHA-256 digests.

use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::oauth_server::{OAuthServerConfig, RawOAuthServer};
use super::secret::sha256;
use super::{Lookup, Problems};

/// How clients authenticate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AuthConfig {
    /// Anyone who reaches the port may use everything (the config says so).
    Off,
    On(Box<AuthSettings>),
}

/// Authentication settings when it is on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AuthSettings {
    pub api_keys: Vec<ApiKey>,
    pub jwt: Option<JwtConfig>,
    /// The gateway's resource URI (RFC 9728 `resource`); by default the
    /// request's own `http://HOST/mcp`.
    pub resource: Option<String>,
    /// Authorization servers named in the protected-resource metadata.
    pub authorization_servers: Vec<String>,
    /// Scopes named in the metadata.
    pub scopes_supported: Vec<String>,
    /// Scopes every token must carry; a token without them gets 403.
    pub required_scopes: Vec<String>,
    /// Who may read `/status` and `/metrics`.
    pub admin: AdminAccess,
    /// The gateway's own authorization server, if on.
    pub oauth_server: Option<OAuthServerConfig>,
}

/// One API key: its client's name and the SHA-256 of the key.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ApiKey {
    pub client: String,
    pub sha256: [u8; 32],
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey")
            .field("client", &self.client)
            .field("sha256", &"***")
            .finish()
    }
}

/// Where JWT verification keys come from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum JwtKeys {
    /// A JWKS document, fetched at start, on an unknown `kid` and on an interval.
    Jwks(String),
    /// Public keys in PEM.
    Pem(Vec<String>),
}

/// JWT bearer tokens from an identity provider.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JwtConfig {
    pub issuer: String,
    pub audience: String,
    pub keys: JwtKeys,
    /// Accepted `alg` values; never HMAC or `none`.
    pub algorithms: Vec<String>,
    /// The claim that names the client.
    pub client_claim: String,
    /// The claim holding scopes (a space-separated string) or groups (an array).
    pub scopes_claim: String,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// How often the JWKS is fetched again.
    pub jwks_refresh: Duration,
    /// The least time between fetches caused by unknown `kid`s.
    pub jwks_refetch_cooldown: Duration,
}

/// Access to `/status` and `/metrics` (probes are always open).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AdminAccess {
    Open,
    /// Any authenticated client.
    Clients,
    /// A separate key (its SHA-256).
    Key([u8; 32]),
}

/// Algorithms a JWT may use (asymmetric only).
pub(super) const JWT_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];
/// Accepted by default.
const DEFAULT_ALGORITHMS: &[&str] = &["RS256", "ES256", "EdDSA"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuth {
    mode: Spanned<String>,
    #[serde(default)]
    api_keys: Vec<RawApiKey>,
    #[serde(default)]
    jwt: Option<Spanned<RawJwt>>,
    #[serde(default)]
    resource: Option<Spanned<String>>,
    #[serde(default)]
    authorization_servers: Vec<Spanned<String>>,
    #[serde(default)]
    scopes_supported: Vec<Spanned<String>>,
    #[serde(default)]
    required_scopes: Vec<Spanned<String>>,
    #[serde(default)]
    admin: Option<RawAdmin>,
    #[serde(default)]
    oauth_server: Option<RawOAuthServer>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApiKey {
    client: Spanned<String>,
    #[serde(default)]
    key: Option<Spanned<String>>,
    #[serde(default)]
    sha256: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJwt {
    issuer: Spanned<String>,
    audience: Spanned<String>,
    #[serde(default)]
    jwks_url: Option<Spanned<String>>,
    #[serde(default)]
    public_keys: Vec<Spanned<String>>,
    #[serde(default)]
    algorithms: Vec<Spanned<String>>,
    #[serde(default)]
    client_claim: Option<Spanned<String>>,
    #[serde(default)]
    scopes_claim: Option<Spanned<String>>,
    #[serde(default)]
    leeway: Option<Spanned<String>>,
    #[serde(default)]
    jwks_refresh: Option<Spanned<String>>,
    #[serde(default)]
    jwks_refetch_cooldown: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    access: Spanned<String>,
    #[serde(default)]
    key: Option<Spanned<String>>,
}

/// Shortest API key accepted in plain text: guessable keys are refused.
const MIN_KEY_LEN: usize = 16;

impl RawAuth {
    /// Where `auth.oauth_server` starts, when it is there.
    pub(super) fn oauth_server_at(&self) -> Option<serde_saphyr::Location> {
        self.oauth_server.as_ref().map(RawOAuthServer::location)
    }

    pub(super) fn validate(&self, lookup: &Lookup, p: &mut Problems) -> Option<AuthConfig> {
        let before = p.issues.len();
        let mode = p.expand(&self.mode, "auth.mode", lookup)?;
        match mode.as_str() {
            "off" => return Some(AuthConfig::Off),
            "on" => {}
            other => {
                p.at(
                    self.mode.referenced,
                    format_args!("auth.mode: {other:?} is not \"on\" or \"off\""),
                );
                return None;
            }
        }
        let api_keys: Vec<ApiKey> = self
            .api_keys
            .iter()
            .filter_map(|k| k.validate(lookup, p))
            .collect();
        let jwt = self.jwt.as_ref().and_then(|j| j.value.validate(lookup, p));
        let oauth_server = self
            .oauth_server
            .as_ref()
            .and_then(|raw| raw.validate(lookup, p));
        if self.api_keys.is_empty() && self.jwt.is_none() && self.oauth_server.is_none() {
            p.at(
                self.mode.referenced,
                "auth: mode on needs api_keys, jwt or oauth_server (or write mode: off to serve without authentication)",
            );
        }
        let list = |p: &mut Problems, values: &[Spanned<String>], what: &str| -> Vec<String> {
            values
                .iter()
                .filter_map(|v| p.expand(v, what, lookup))
                .collect()
        };
        let authorization_servers =
            list(p, &self.authorization_servers, "auth.authorization_servers");
        let scopes_supported = list(p, &self.scopes_supported, "auth.scopes_supported");
        let required_scopes = list(p, &self.required_scopes, "auth.required_scopes");
        let resource = self
            .resource
            .as_ref()
            .and_then(|r| p.expand(r, "auth.resource", lookup));
        let admin = match &self.admin {
            None => Some(AdminAccess::Clients),
            Some(raw) => raw.validate(lookup, p),
        };
        if p.issues.len() != before {
            return None;
        }
        Some(AuthConfig::On(Box::new(AuthSettings {
            api_keys,
            jwt,
            resource,
            authorization_servers,
            scopes_supported,
            required_scopes,
            admin: admin?,
            oauth_server,
        })))
    }
}

/// A key given in plain text (normally `${VAR}`) or as its SHA-256 in hex.
fn key_digest(
    plain: Option<&Spanned<String>>,
    hex: Option<&Spanned<String>>,
    what: &str,
    at: &Spanned<String>,
    lookup: &Lookup,
    p: &mut Problems,
) -> Option<[u8; 32]> {
    match (plain, hex) {
        (Some(plain), None) => {
            let key = p.expand(plain, what, lookup)?;
            if key.len() < MIN_KEY_LEN {
                p.at(
                    plain.referenced,
                    format_args!("{what}: a key must be at least {MIN_KEY_LEN} characters"),
                );
                return None;
            }
            Some(sha256(key.as_bytes()))
        }
        (None, Some(hex)) => {
            let text = p.expand(hex, what, lookup)?;
            let digest = decode_hex(text.trim());
            if digest.is_none() {
                p.at(
                    hex.referenced,
                    format_args!("{what}: sha256 must be 64 hexadecimal digits"),
                );
            }
            digest
        }
        _ => {
            p.at(
                at.referenced,
                format_args!("{what}: give exactly one of key (the key, e.g. \"${{VAR}}\") and sha256 (its digest)"),
            );
            None
        }
    }
}

fn decode_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl RawApiKey {
    fn validate(&self, lookup: &Lookup, p: &mut Problems) -> Option<ApiKey> {
        let client = p.expand(&self.client, "auth.api_keys.client", lookup)?;
        if client.trim().is_empty() {
            p.at(self.client.referenced, "auth.api_keys.client: is empty");
            return None;
        }
        let what = format!("auth.api_keys ({client})");
        let sha256 = key_digest(
            self.key.as_ref(),
            self.sha256.as_ref(),
            &what,
            &self.client,
            lookup,
            p,
        )?;
        Some(ApiKey { client, sha256 })
    }
}

impl RawJwt {
    fn validate(&self, lookup: &Lookup, p: &mut Problems) -> Option<JwtConfig> {
        let issuer = p.expand(&self.issuer, "auth.jwt.issuer", lookup);
        let audience = p.expand(&self.audience, "auth.jwt.audience", lookup);
        let keys = match (&self.jwks_url, self.public_keys.is_empty()) {
            (Some(url), true) => {
                let url_text = p.expand(url, "auth.jwt.jwks_url", lookup)?;
                let ok = (url_text.starts_with("https://") || url_text.starts_with("http://"))
                    && reqwest::Url::parse(&url_text).is_ok();
                if !ok {
                    p.at(
                        url.referenced,
                        format_args!(
                            "auth.jwt.jwks_url: {url_text:?} is not an http:// or https:// URL"
                        ),
                    );
                }
                Some(JwtKeys::Jwks(url_text))
            }
            (None, false) => {
                let mut pems = Vec::new();
                for key in &self.public_keys {
                    let Some(pem) = p.expand(key, "auth.jwt.public_keys", lookup) else {
                        continue;
                    };
                    let bytes = pem.as_bytes();
                    let readable = jsonwebtoken::DecodingKey::from_rsa_pem(bytes).is_ok()
                        || jsonwebtoken::DecodingKey::from_ec_pem(bytes).is_ok()
                        || jsonwebtoken::DecodingKey::from_ed_pem(bytes).is_ok();
                    if !readable {
                        p.at(
                            key.referenced,
                            "auth.jwt.public_keys: not an RSA, EC or Ed25519 public key in PEM",
                        );
                    }
                    pems.push(pem);
                }
                Some(JwtKeys::Pem(pems))
            }
            _ => {
                p.at(
                    self.issuer.referenced,
                    "auth.jwt: give exactly one of jwks_url and public_keys",
                );
                None
            }
        };
        let mut algorithms = Vec::new();
        for alg in &self.algorithms {
            if JWT_ALGORITHMS.contains(&alg.value.as_str()) {
                algorithms.push(alg.value.clone());
            } else {
                p.at(
                    alg.referenced,
                    format_args!(
                        "auth.jwt.algorithms: {:?} is not one of {} (HMAC and none are never accepted)",
                        alg.value,
                        JWT_ALGORITHMS.join(", ")
                    ),
                );
            }
        }
        if self.algorithms.is_empty() {
            algorithms = DEFAULT_ALGORITHMS.iter().map(|a| (*a).to_owned()).collect();
        }
        let claim =
            |p: &mut Problems, value: &Option<Spanned<String>>, what: &str, default: &str| {
                value
                    .as_ref()
                    .map_or(Some(default.to_owned()), |v| p.expand(v, what, lookup))
            };
        let client_claim = claim(p, &self.client_claim, "auth.jwt.client_claim", "sub");
        let scopes_claim = claim(p, &self.scopes_claim, "auth.jwt.scopes_claim", "scope");
        let leeway = p.duration_or(
            self.leeway.as_ref(),
            Duration::from_secs(30),
            "auth.jwt.leeway",
            lookup,
        );
        let jwks_refresh = p.duration_or(
            self.jwks_refresh.as_ref(),
            Duration::from_secs(600),
            "auth.jwt.jwks_refresh",
            lookup,
        );
        let jwks_refetch_cooldown = p.duration_or(
            self.jwks_refetch_cooldown.as_ref(),
            Duration::from_secs(30),
            "auth.jwt.jwks_refetch_cooldown",
            lookup,
        );
        Some(JwtConfig {
            issuer: issuer?,
            audience: audience?,
            keys: keys?,
            algorithms,
            client_claim: client_claim?,
            scopes_claim: scopes_claim?,
            leeway: leeway?,
            jwks_refresh: jwks_refresh?,
            jwks_refetch_cooldown: jwks_refetch_cooldown?,
        })
    }
}

impl RawAdmin {
    fn validate(&self, lookup: &Lookup, p: &mut Problems) -> Option<AdminAccess> {
        match self.access.value.as_str() {
            "open" => Some(AdminAccess::Open),
            "clients" => Some(AdminAccess::Clients),
            "key" => key_digest(
                self.key.as_ref(),
                None,
                "auth.admin.key",
                &self.access,
                lookup,
                p,
            )
            .map(AdminAccess::Key),
            other => {
                p.at(
                    self.access.referenced,
                    format_args!(
                        "auth.admin.access: {other:?} is not \"open\", \"clients\" or \"key\""
                    ),
                );
                None
            }
        }
    }
}
