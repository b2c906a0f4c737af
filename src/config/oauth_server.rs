//! `auth.oauth_server`: the authorization server inside mcpmux that hosts
//! log in to, which hands the login itself to the company's OpenID Connect
//! provider. Parsed like the rest of the file: unknown keys are errors and
//! every problem has its line and column.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::secret::sha256;
use super::{Lookup, Problems, Secret};

/// The validated `auth.oauth_server` section.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OAuthServerConfig {
    /// The issuer (`iss` of the gateway's tokens and the base of its
    /// endpoints); none: `http://<listen address>`, set once it listens.
    pub issuer: Option<String>,
    pub provider: ProviderConfig,
    pub claims: ClaimNames,
    pub access_token_ttl: Duration,
    pub refresh_token_ttl: Duration,
    pub code_ttl: Duration,
    /// How long a user may take at the provider's login page.
    pub login_timeout: Duration,
    /// Private keys in PEM, the first signs; none: generated and kept in
    /// the state store (sealed with `credentials.key`).
    pub signing_keys: Vec<Secret>,
    /// A generated signing key is replaced after this long (the old one
    /// is still published until the tokens it signed have expired).
    pub key_rotation: Duration,
    pub consent: Consent,
    pub registration: Registration,
    /// The state file (when no `session_store` is configured).
    pub state_path: PathBuf,
}

/// The company's OpenID Connect provider and the gateway's client there.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProviderConfig {
    pub issuer: String,
    pub client_id: String,
    /// None: a public client (PKCE alone).
    pub client_secret: Option<Secret>,
    /// Asked for at login; `openid` is always among them.
    pub scopes: Vec<String>,
}

/// Which ID token claims become the gateway identity.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClaimNames {
    /// The client name the policy's `clients` rules match.
    pub client: String,
    /// Groups (an array or a space-separated string): matched by the
    /// policy's `scopes` rules.
    pub groups: Option<String>,
    /// Scopes the provider grants the user, added like groups.
    pub scopes: Option<String>,
}

/// When a user is asked whether a host may act for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Consent {
    /// Once per (user, client), remembered until revoked.
    Remember,
    /// At every authorization.
    Always,
}

/// How hosts become clients.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Registration {
    /// RFC 7591 at `/register`.
    pub dynamic: bool,
    /// SHA-256 of the initial access token `/register` requires, if any.
    pub initial_access_token: Option<[u8; 32]>,
    /// Registrations one address may make per minute.
    pub per_minute: u32,
    /// Client ID Metadata Documents (an https `client_id`).
    pub metadata_documents: bool,
    pub metadata_max_bytes: usize,
    pub metadata_timeout: Duration,
    /// How long a fetched document is used before it is fetched again.
    pub metadata_cache: Duration,
}

/// The default state file, relative to the working directory.
pub(crate) const DEFAULT_STATE_FILE: &str = "mcpmux-oauth-server.json";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOAuthServer {
    #[serde(default)]
    issuer: Option<Spanned<String>>,
    provider: Spanned<RawProvider>,
    #[serde(default)]
    claims: Option<RawClaims>,
    #[serde(default)]
    access_token_ttl: Option<Spanned<String>>,
    #[serde(default)]
    refresh_token_ttl: Option<Spanned<String>>,
    #[serde(default)]
    code_ttl: Option<Spanned<String>>,
    #[serde(default)]
    login_timeout: Option<Spanned<String>>,
    #[serde(default)]
    signing_keys: Vec<Spanned<String>>,
    #[serde(default)]
    key_rotation: Option<Spanned<String>>,
    #[serde(default)]
    consent: Option<Spanned<String>>,
    #[serde(default)]
    registration: Option<RawRegistration>,
    #[serde(default)]
    state_path: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    issuer: Spanned<String>,
    client_id: Spanned<String>,
    #[serde(default)]
    client_secret: Option<Spanned<String>>,
    #[serde(default)]
    scopes: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClaims {
    #[serde(default)]
    client: Option<Spanned<String>>,
    #[serde(default)]
    groups: Option<Spanned<String>>,
    #[serde(default)]
    scopes: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRegistration {
    #[serde(default)]
    dynamic: Option<bool>,
    #[serde(default)]
    initial_access_token: Option<Spanned<String>>,
    #[serde(default)]
    per_minute: Option<Spanned<u64>>,
    #[serde(default)]
    client_metadata_documents: Option<bool>,
    #[serde(default)]
    metadata_max_bytes: Option<Spanned<u64>>,
    #[serde(default)]
    metadata_timeout: Option<Spanned<String>>,
    #[serde(default)]
    metadata_cache: Option<Spanned<String>>,
}

/// Tokens live at most this long: a leaked one must not be good for long.
const MAX_ACCESS_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Codes are exchanged at once; RFC 6749 §4.1.2 recommends at most 10 minutes.
const MAX_CODE_TTL: Duration = Duration::from_secs(10 * 60);
/// Shortest initial access token accepted.
const MIN_TOKEN_LEN: usize = 16;

impl RawOAuthServer {
    pub(super) fn validate(&self, lookup: &Lookup, p: &mut Problems) -> Option<OAuthServerConfig> {
        let before = p.issues.len();
        let issuer = self.issuer.as_ref().and_then(|raw| {
            let text = p.expand(raw, "auth.oauth_server.issuer", lookup)?;
            let text = text.trim_end_matches('/').to_owned();
            base_url(p, raw, "auth.oauth_server.issuer", &text).then_some(text)
        });
        let provider = self.provider.value.validate(lookup, p);
        let claims = match &self.claims {
            None => Some(ClaimNames {
                client: "sub".into(),
                groups: Some("groups".into()),
                scopes: None,
            }),
            Some(raw) => raw.validate(lookup, p),
        };
        let ttl = |p: &mut Problems, v: &Option<Spanned<String>>, d: u64, what: &str| {
            p.duration_or(v.as_ref(), Duration::from_secs(d), what, lookup)
        };
        let access_token_ttl = ttl(
            p,
            &self.access_token_ttl,
            300,
            "auth.oauth_server.access_token_ttl",
        );
        if let (Some(t), Some(raw)) = (access_token_ttl, &self.access_token_ttl)
            && t > MAX_ACCESS_TTL
        {
            p.at(
                raw.referenced,
                "auth.oauth_server.access_token_ttl: at most 24h (refresh tokens are for longer)",
            );
        }
        let refresh_token_ttl = ttl(
            p,
            &self.refresh_token_ttl,
            30 * 24 * 3600,
            "auth.oauth_server.refresh_token_ttl",
        );
        let code_ttl = ttl(p, &self.code_ttl, 60, "auth.oauth_server.code_ttl");
        if let (Some(t), Some(raw)) = (code_ttl, &self.code_ttl)
            && t > MAX_CODE_TTL
        {
            p.at(raw.referenced, "auth.oauth_server.code_ttl: at most 10m");
        }
        let login_timeout = ttl(
            p,
            &self.login_timeout,
            600,
            "auth.oauth_server.login_timeout",
        );
        let key_rotation = ttl(
            p,
            &self.key_rotation,
            30 * 24 * 3600,
            "auth.oauth_server.key_rotation",
        );
        let mut signing_keys = Vec::new();
        for raw in &self.signing_keys {
            let Some(pem) = p.expand(raw, "auth.oauth_server.signing_keys", lookup) else {
                continue;
            };
            if signing_algorithm(&pem).is_none() {
                p.at(
                    raw.referenced,
                    "auth.oauth_server.signing_keys: not an EC P-256 or RSA private key in PEM (PKCS#8, or PKCS#1 for RSA)",
                );
            }
            signing_keys.push(Secret::new(pem));
        }
        let consent = match &self.consent {
            None => Some(Consent::Remember),
            Some(raw) => match p.expand(raw, "auth.oauth_server.consent", lookup)?.as_str() {
                "remember" => Some(Consent::Remember),
                "always" => Some(Consent::Always),
                other => {
                    p.at(
                        raw.referenced,
                        format_args!(
                            "auth.oauth_server.consent: {other:?} is not \"remember\" or \"always\""
                        ),
                    );
                    None
                }
            },
        };
        let registration = match &self.registration {
            None => Some(Registration::default()),
            Some(raw) => raw.validate(lookup, p),
        };
        let state_path = match &self.state_path {
            None => Some(PathBuf::from(DEFAULT_STATE_FILE)),
            Some(raw) => p
                .expand(raw, "auth.oauth_server.state_path", lookup)
                .map(PathBuf::from),
        };
        if p.issues.len() != before {
            return None;
        }
        Some(OAuthServerConfig {
            issuer,
            provider: provider?,
            claims: claims?,
            access_token_ttl: access_token_ttl?,
            refresh_token_ttl: refresh_token_ttl?,
            code_ttl: code_ttl?,
            login_timeout: login_timeout?,
            signing_keys,
            key_rotation: key_rotation?,
            consent: consent?,
            registration: registration?,
            state_path: state_path?,
        })
    }

    /// Where the section starts, for problems about it as a whole.
    pub(super) fn location(&self) -> serde_saphyr::Location {
        self.provider.referenced
    }
}

impl Default for Registration {
    fn default() -> Self {
        Registration {
            dynamic: true,
            initial_access_token: None,
            per_minute: 10,
            metadata_documents: true,
            metadata_max_bytes: 5 * 1024,
            metadata_timeout: Duration::from_secs(5),
            metadata_cache: Duration::from_secs(600),
        }
    }
}

/// The JWS algorithm a PEM private key signs with: ES256 (P-256) or RS256.
pub(crate) fn signing_algorithm(pem: &str) -> Option<jsonwebtoken::Algorithm> {
    let bytes = pem.as_bytes();
    if jsonwebtoken::EncodingKey::from_ec_pem(bytes).is_ok() {
        // Only P-256: the key must also sign as ES256.
        let key = jsonwebtoken::EncodingKey::from_ec_pem(bytes).ok()?;
        let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        return jsonwebtoken::encode(&header, &serde_json::json!({}), &key)
            .ok()
            .map(|_| jsonwebtoken::Algorithm::ES256);
    }
    if jsonwebtoken::EncodingKey::from_rsa_pem(bytes).is_ok() {
        return Some(jsonwebtoken::Algorithm::RS256);
    }
    None
}

/// Whether `text` is an http(s) URL with no query or fragment; reports why not.
fn base_url(p: &mut Problems, raw: &Spanned<String>, what: &str, text: &str) -> bool {
    let ok = reqwest::Url::parse(text).is_ok_and(|u| {
        matches!(u.scheme(), "http" | "https")
            && u.host().is_some()
            && u.query().is_none()
            && u.fragment().is_none()
    });
    if !ok {
        p.at(
            raw.referenced,
            format_args!(
                "{what}: {text:?} is not an http:// or https:// URL without query or fragment"
            ),
        );
    }
    ok
}

impl RawProvider {
    fn validate(&self, lookup: &Lookup, p: &mut Problems) -> Option<ProviderConfig> {
        let issuer = p
            .expand(&self.issuer, "auth.oauth_server.provider.issuer", lookup)
            .and_then(|text| {
                let text = text.trim_end_matches('/').to_owned();
                base_url(p, &self.issuer, "auth.oauth_server.provider.issuer", &text)
                    .then_some(text)
            });
        let client_id = p.expand(
            &self.client_id,
            "auth.oauth_server.provider.client_id",
            lookup,
        );
        let client_secret = self.client_secret.as_ref().and_then(|raw| {
            p.expand(raw, "auth.oauth_server.provider.client_secret", lookup)
                .map(Secret::new)
        });
        let mut scopes: Vec<String> = self
            .scopes
            .iter()
            .filter_map(|s| p.expand(s, "auth.oauth_server.provider.scopes", lookup))
            .collect();
        if self.scopes.is_empty() {
            scopes = ["openid", "profile", "email"].map(String::from).to_vec();
        }
        if !scopes.iter().any(|s| s == "openid") {
            scopes.insert(0, "openid".into());
        }
        Some(ProviderConfig {
            issuer: issuer?,
            client_id: client_id?,
            client_secret,
            scopes,
        })
    }
}

impl RawClaims {
    fn validate(&self, lookup: &Lookup, p: &mut Problems) -> Option<ClaimNames> {
        let name = |p: &mut Problems, v: &Option<Spanned<String>>, what: &str| {
            v.as_ref().and_then(|raw| {
                let text = p.expand(raw, what, lookup)?;
                if text.trim().is_empty() {
                    p.at(raw.referenced, format_args!("{what}: is empty"));
                    return None;
                }
                Some(text)
            })
        };
        let client = name(p, &self.client, "auth.oauth_server.claims.client");
        let groups = name(p, &self.groups, "auth.oauth_server.claims.groups");
        let scopes = name(p, &self.scopes, "auth.oauth_server.claims.scopes");
        Some(ClaimNames {
            client: client.unwrap_or_else(|| "sub".into()),
            groups: if self.groups.is_some() {
                groups
            } else {
                Some("groups".into())
            },
            scopes,
        })
    }
}

impl RawRegistration {
    fn validate(&self, lookup: &Lookup, p: &mut Problems) -> Option<Registration> {
        let defaults = Registration::default();
        let initial_access_token = match &self.initial_access_token {
            None => None,
            Some(raw) => {
                let token = p.expand(
                    raw,
                    "auth.oauth_server.registration.initial_access_token",
                    lookup,
                )?;
                if token.len() < MIN_TOKEN_LEN {
                    p.at(
                        raw.referenced,
                        format_args!("auth.oauth_server.registration.initial_access_token: must be at least {MIN_TOKEN_LEN} characters"),
                    );
                    return None;
                }
                Some(sha256(token.as_bytes()))
            }
        };
        let per_minute = p.count_or(
            self.per_minute.as_ref(),
            u64::from(defaults.per_minute),
            1,
            10_000,
            "auth.oauth_server.registration.per_minute",
        );
        let metadata_max_bytes = p.count_or(
            self.metadata_max_bytes.as_ref(),
            defaults.metadata_max_bytes as u64,
            256,
            1024 * 1024,
            "auth.oauth_server.registration.metadata_max_bytes",
        );
        let metadata_timeout = p.duration_or(
            self.metadata_timeout.as_ref(),
            defaults.metadata_timeout,
            "auth.oauth_server.registration.metadata_timeout",
            lookup,
        );
        let metadata_cache = p.duration_or(
            self.metadata_cache.as_ref(),
            defaults.metadata_cache,
            "auth.oauth_server.registration.metadata_cache",
            lookup,
        );
        Some(Registration {
            dynamic: self.dynamic.unwrap_or(defaults.dynamic),
            initial_access_token,
            per_minute: u32::try_from(per_minute).unwrap_or(u32::MAX),
            metadata_documents: self
                .client_metadata_documents
                .unwrap_or(defaults.metadata_documents),
            metadata_max_bytes: usize::try_from(metadata_max_bytes).unwrap_or(usize::MAX),
            metadata_timeout: metadata_timeout?,
            metadata_cache: metadata_cache?,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{AuthConfig, Config, Consent, Lookup};
    use std::time::Duration;

    const BASE: &str = "upstreams:\n  a:\n    command: srv\nauth:\n  mode: on\n  oauth_server:\n    provider:\n      issuer: https://idp.example.com/realms/acme\n      client_id: mcpmux\n";

    fn parse(text: &str) -> Result<Config, Vec<String>> {
        Config::parse(text, "t.yaml", &Lookup::from_pairs([("K", "v")])).map_err(|e| e.lines())
    }

    #[test]
    fn defaults_with_configured_keys_and_a_generated_key_needs_credentials_key() {
        let missing = parse(BASE).unwrap_err();
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(missing[0].starts_with("t.yaml:8:7: "), "{missing:?}");
        assert!(missing[0].contains("credentials.key"), "{missing:?}");
        let with_key = format!(
            "{BASE}credentials:\n  key: \"QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY=\"\n"
        );
        let config = parse(&with_key).unwrap();
        let AuthConfig::On(settings) = &config.auth else {
            panic!("auth is on")
        };
        let server = settings.oauth_server.as_ref().unwrap();
        assert_eq!(server.access_token_ttl, Duration::from_secs(300));
        assert_eq!(server.code_ttl, Duration::from_secs(60));
        assert_eq!(server.consent, Consent::Remember);
        assert_eq!(server.claims.client, "sub");
        assert_eq!(server.provider.scopes, ["openid", "profile", "email"]);
        assert!(server.registration.dynamic && server.registration.metadata_documents);
    }

    #[test]
    fn mistakes_are_refused_with_their_line_and_column() {
        let text = format!(
            "{BASE}    consent: sometimes\n    code_ttl: 1h\n    signing_keys: [\"not a key\"]\n    registration:\n      initial_access_token: short\n"
        );
        let lines = parse(&text).unwrap_err();
        let all = lines.join("\n");
        assert!(
            all.contains("t.yaml:10:14: auth.oauth_server.consent"),
            "{all}"
        );
        assert!(
            all.contains("t.yaml:11:15: auth.oauth_server.code_ttl: at most 10m"),
            "{all}"
        );
        assert!(
            all.contains("t.yaml:12:20: auth.oauth_server.signing_keys"),
            "{all}"
        );
        assert!(
            all.contains("initial_access_token: must be at least 16"),
            "{all}"
        );
    }
}
