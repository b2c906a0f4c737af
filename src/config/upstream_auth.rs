//! An upstream's `auth:` section (how the gateway obtains the bearer token
//! it sends a remote upstream) and the top-level `credentials:` section
//! (where the tokens of users who connected their own accounts are kept).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::{Location, Spanned};

use super::{Lookup, Problems, Secret, StateKey};

/// How the gateway obtains an upstream's bearer token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UpstreamAuth {
    pub mode: AuthMode,
    /// Where the authorization server takes requests.
    pub server: AuthServer,
    /// The gateway's client at that server; none: register (RFC 7591) on
    /// first use (`mode: user` only).
    pub client: Option<ClientCredentials>,
    /// Scopes asked for, in every mode.
    pub scopes: Vec<String>,
    /// The RFC 8707 resource indicator: the upstream's URL unless set.
    pub resource: String,
}

/// The gateway's client id and secret at the authorization server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClientCredentials {
    pub client_id: String,
    /// None: a public client.
    pub client_secret: Option<Secret>,
}

/// Where tokens come from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AuthServer {
    /// Configured endpoints.
    Endpoints {
        token_url: String,
        authorization_url: Option<String>,
        revocation_url: Option<String>,
    },
    /// An issuer whose metadata (RFC 8414 or OpenID discovery) names them.
    Issuer(String),
    /// Found from the upstream's own 401 (RFC 9728), then its metadata.
    Discover,
}

/// `auth.mode` and what only that mode takes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AuthMode {
    /// One service identity for every caller (RFC 6749 §4.4).
    ClientCredentials,
    /// Each caller's JWT exchanged for a token of the upstream (RFC 8693).
    TokenExchange {
        audience: Option<String>,
        subject_token_type: String,
        /// What a client with no JWT to exchange (an API key) gets.
        api_key_clients: ApiKeyClients,
        sessions: IdentitySessions,
    },
    /// Each person connects their own account (authorization code + PKCE).
    User { sessions: IdentitySessions },
}

impl AuthMode {
    /// The per-identity session settings, for the modes that act as each caller.
    pub(crate) fn per_identity(&self) -> Option<&IdentitySessions> {
        match self {
            AuthMode::ClientCredentials => None,
            AuthMode::TokenExchange { sessions, .. } | AuthMode::User { sessions } => {
                Some(sessions)
            }
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            AuthMode::ClientCredentials => "client_credentials",
            AuthMode::TokenExchange { .. } => "token_exchange",
            AuthMode::User { .. } => "user",
        }
    }
}

/// What a token-exchange upstream does for a client that has no JWT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ApiKeyClients {
    /// Its calls are refused with an error that says why.
    Refuse,
    /// It acts as the gateway's service identity (client credentials).
    Service,
}

/// The upstream sessions of an upstream that acts as each caller: one per
/// identity, created on first use.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IdentitySessions {
    /// Identities with a session at once; beyond it the least recently
    /// used idle one is closed, or the call is refused.
    pub max_identities: usize,
    /// A session unused this long is closed.
    pub idle_timeout: Duration,
    /// List the upstream's items with a client-credentials token; without
    /// it the lists come from the first identity that connects.
    pub discovery: bool,
}

impl IdentitySessions {
    pub(crate) const DEFAULT_MAX_IDENTITIES: u64 = 1000;
    pub(crate) const DEFAULT_IDLE: Duration = Duration::from_secs(15 * 60);
}

/// The top-level `credentials:` section.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct CredentialsConfig {
    /// Encrypts stored tokens (AES-256-GCM); required once any upstream
    /// uses `mode: user`.
    pub key: Option<StateKey>,
    /// Keys tokens may still be sealed with (rotation): read, then
    /// rewritten with `key`.
    pub previous_keys: Vec<StateKey>,
    /// The token file (when no `session_store` is configured).
    pub path: PathBuf,
    /// The redirect URI given to authorization servers; by default
    /// `http://<listen address>/oauth/callback`.
    pub callback_url: Option<String>,
}

/// The default token file, relative to the working directory.
pub(crate) const DEFAULT_TOKEN_FILE: &str = "mcpmux-tokens.json";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstreamAuth {
    mode: Spanned<String>,
    #[serde(default)]
    token_url: Option<Spanned<String>>,
    #[serde(default)]
    authorization_url: Option<Spanned<String>>,
    #[serde(default)]
    revocation_url: Option<Spanned<String>>,
    #[serde(default)]
    issuer: Option<Spanned<String>>,
    #[serde(default)]
    client_id: Option<Spanned<String>>,
    #[serde(default)]
    client_secret: Option<Spanned<String>>,
    #[serde(default)]
    scopes: Vec<Spanned<String>>,
    #[serde(default)]
    resource: Option<Spanned<String>>,
    #[serde(default)]
    audience: Option<Spanned<String>>,
    #[serde(default)]
    subject_token_type: Option<Spanned<String>>,
    #[serde(default)]
    api_key_clients: Option<Spanned<String>>,
    #[serde(default)]
    discovery: Option<Spanned<String>>,
    #[serde(default)]
    max_identities: Option<Spanned<u64>>,
    #[serde(default)]
    idle_timeout: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCredentials {
    #[serde(default)]
    key: Option<Spanned<String>>,
    #[serde(default)]
    previous_keys: Vec<Spanned<String>>,
    #[serde(default)]
    path: Option<Spanned<String>>,
    #[serde(default)]
    callback_url: Option<Spanned<String>>,
}

/// `urn:ietf:params:oauth:token-type:access_token`, the default subject type.
pub(crate) const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

impl RawUpstreamAuth {
    pub(super) fn user_mode_at(&self) -> Option<Location> {
        (self.mode.value == "user").then_some(self.mode.referenced)
    }

    pub(super) fn per_identity_at(&self) -> Option<Location> {
        matches!(self.mode.value.as_str(), "user" | "token_exchange")
            .then_some(self.mode.referenced)
    }

    /// Validates the section of the upstream at `url`; `label` is
    /// `upstreams.<name>`. `headers_authorize`: the upstream also sets an
    /// `Authorization` header, which this section replaces.
    pub(super) fn validate(
        &self,
        label: &str,
        url: &str,
        headers_authorize: bool,
        lookup: &Lookup,
        p: &mut Problems,
    ) -> Option<UpstreamAuth> {
        let before = p.issues.len();
        let label = format!("{label}.auth");
        let text = |p: &mut Problems, raw: &Option<Spanned<String>>, key: &str| {
            raw.as_ref()
                .and_then(|v| p.expand(v, &format!("{label}.{key}"), lookup))
        };
        let url_of = |p: &mut Problems, raw: &Option<Spanned<String>>, key: &str| {
            let value = text(p, raw, key)?;
            check_url(
                p,
                raw.as_ref()?.referenced,
                &format!("{label}.{key}"),
                &value,
            )
        };
        let mode = self.mode.value.as_str();
        if headers_authorize {
            p.at(
                self.mode.referenced,
                format_args!("{label}: the upstream also sets headers.Authorization; the auth section sends its own token, so remove one of them"),
            );
        }
        let token_url = url_of(p, &self.token_url, "token_url");
        let authorization_url = url_of(p, &self.authorization_url, "authorization_url");
        let revocation_url = url_of(p, &self.revocation_url, "revocation_url");
        let issuer = url_of(p, &self.issuer, "issuer");
        let client_id = text(p, &self.client_id, "client_id");
        let client_secret = text(p, &self.client_secret, "client_secret").map(Secret::new);
        let scopes: Vec<String> = self
            .scopes
            .iter()
            .filter_map(|s| p.expand(s, &format!("{label}.scopes"), lookup))
            .collect();
        for (raw, scope) in self.scopes.iter().zip(&scopes) {
            if scope.is_empty() || scope.contains(|c: char| c.is_whitespace() || c == '"') {
                p.at(
                    raw.referenced,
                    format_args!(
                        "{label}.scopes: {scope:?} is not one scope (no spaces or quotes)"
                    ),
                );
            }
        }
        let resource = match text(p, &self.resource, "resource") {
            Some(r) => r,
            None => url.to_owned(),
        };
        let audience = text(p, &self.audience, "audience");
        let subject_token_type = text(p, &self.subject_token_type, "subject_token_type");
        let only = |p: &mut Problems, present: Option<Location>, key: &str, modes: &str| {
            if let Some(at) = present {
                p.at(at, format_args!("{label}.{key}: only {modes} takes {key}"));
            }
        };
        let at = |raw: &Option<Spanned<String>>| raw.as_ref().map(|r| r.referenced);
        let per_identity = mode != "client_credentials";
        if !per_identity {
            for (key, present) in [
                ("discovery", at(&self.discovery)),
                ("idle_timeout", at(&self.idle_timeout)),
                (
                    "max_identities",
                    self.max_identities.as_ref().map(|m| m.referenced),
                ),
            ] {
                only(p, present, key, "mode token_exchange or user");
            }
        }
        if mode != "token_exchange" {
            for (key, present) in [
                ("audience", at(&self.audience)),
                ("subject_token_type", at(&self.subject_token_type)),
                ("api_key_clients", at(&self.api_key_clients)),
            ] {
                only(p, present, key, "mode token_exchange");
            }
        }
        if mode != "user" {
            for (key, present) in [
                ("authorization_url", at(&self.authorization_url)),
                ("issuer", at(&self.issuer)),
            ] {
                only(p, present, key, "mode user");
            }
        }
        let sessions = IdentitySessions {
            max_identities: usize::try_from(p.count_or(
                self.max_identities.as_ref(),
                IdentitySessions::DEFAULT_MAX_IDENTITIES,
                1,
                1_000_000,
                &format!("{label}.max_identities"),
            ))
            .unwrap_or(usize::MAX),
            idle_timeout: p
                .duration_or(
                    self.idle_timeout.as_ref(),
                    IdentitySessions::DEFAULT_IDLE,
                    &format!("{label}.idle_timeout"),
                    lookup,
                )
                .unwrap_or(IdentitySessions::DEFAULT_IDLE),
            discovery: match self.discovery.as_ref().map(|d| (d, d.value.as_str())) {
                None | Some((_, "none")) => false,
                Some((_, "client_credentials")) => true,
                Some((d, other)) => {
                    p.at(
                        d.referenced,
                        format_args!(
                            "{label}.discovery: {other:?} is not \"none\" or \"client_credentials\""
                        ),
                    );
                    false
                }
            },
        };
        let client = client_id.map(|client_id| ClientCredentials {
            client_id,
            client_secret,
        });
        let needs_client_and_token_url = |p: &mut Problems, why: &str| {
            if token_url.is_none() {
                p.at(
                    self.mode.referenced,
                    format_args!("{label}: {why} needs token_url"),
                );
            }
            if client.is_none() {
                p.at(
                    self.mode.referenced,
                    format_args!("{label}: {why} needs client_id (and client_secret)"),
                );
            }
        };
        let mode = match mode {
            "client_credentials" => {
                needs_client_and_token_url(p, "mode client_credentials");
                AuthMode::ClientCredentials
            }
            "token_exchange" => {
                needs_client_and_token_url(p, "mode token_exchange");
                let api_key_clients = match self
                    .api_key_clients
                    .as_ref()
                    .map(|a| (a, a.value.as_str()))
                {
                    None | Some((_, "refuse")) => ApiKeyClients::Refuse,
                    Some((_, "service")) => ApiKeyClients::Service,
                    Some((a, other)) => {
                        p.at(
                            a.referenced,
                            format_args!("{label}.api_key_clients: {other:?} is not \"refuse\" or \"service\""),
                        );
                        ApiKeyClients::Refuse
                    }
                };
                AuthMode::TokenExchange {
                    audience,
                    subject_token_type: subject_token_type
                        .unwrap_or_else(|| ACCESS_TOKEN_TYPE.to_owned()),
                    api_key_clients,
                    sessions,
                }
            }
            "user" => {
                if sessions.discovery && (token_url.is_none() && issuer.is_none()) {
                    // Discovery by client credentials needs to know where to ask.
                    p.at(
                        self.mode.referenced,
                        format_args!(
                            "{label}: discovery: client_credentials needs token_url or issuer"
                        ),
                    );
                }
                if sessions.discovery && client.is_none() {
                    p.at(
                        self.mode.referenced,
                        format_args!("{label}: discovery: client_credentials needs client_id (and client_secret)"),
                    );
                }
                if token_url.is_some() && issuer.is_some() {
                    p.at(
                        self.mode.referenced,
                        format_args!("{label}: set issuer (discovered endpoints) or token_url and authorization_url, not both"),
                    );
                }
                if token_url.is_some() != authorization_url.is_some() {
                    p.at(
                        self.mode.referenced,
                        format_args!("{label}: token_url and authorization_url go together (or set neither, to discover them)"),
                    );
                }
                AuthMode::User { sessions }
            }
            other => {
                p.at(
                    self.mode.referenced,
                    format_args!("{label}.mode: {other:?} is not \"client_credentials\", \"token_exchange\" or \"user\""),
                );
                return None;
            }
        };
        if p.issues.len() != before {
            return None;
        }
        let server = match (token_url, issuer) {
            (Some(token_url), _) => AuthServer::Endpoints {
                token_url,
                authorization_url,
                revocation_url,
            },
            (None, Some(issuer)) => AuthServer::Issuer(issuer),
            (None, None) => AuthServer::Discover,
        };
        Some(UpstreamAuth {
            mode,
            server,
            client,
            scopes,
            resource,
        })
    }
}

/// An http(s) URL, or a problem at `at`.
fn check_url(p: &mut Problems, at: Location, what: &str, value: &str) -> Option<String> {
    let ok = (value.starts_with("https://") || value.starts_with("http://"))
        && reqwest::Url::parse(value).is_ok();
    if !ok {
        p.at(
            at,
            format_args!("{what}: {value:?} is not an http:// or https:// URL"),
        );
        return None;
    }
    Some(value.to_owned())
}

impl RawCredentials {
    pub(super) fn validate(&self, lookup: &Lookup, p: &mut Problems) -> CredentialsConfig {
        let key = |p: &mut Problems, raw: &Spanned<String>, what: &str| {
            let text = p.expand(raw, what, lookup)?;
            StateKey::parse(&text)
                .map_err(|why| {
                    p.at(
                        raw.referenced,
                        format_args!("{what}: {why} (make one with `openssl rand -base64 32`)"),
                    )
                })
                .ok()
        };
        let callback_url = self.callback_url.as_ref().and_then(|raw| {
            let value = p.expand(raw, "credentials.callback_url", lookup)?;
            check_url(p, raw.referenced, "credentials.callback_url", &value)
        });
        CredentialsConfig {
            key: self
                .key
                .as_ref()
                .and_then(|raw| key(p, raw, "credentials.key")),
            previous_keys: self
                .previous_keys
                .iter()
                .filter_map(|raw| key(p, raw, "credentials.previous_keys"))
                .collect(),
            path: self
                .path
                .as_ref()
                .and_then(|raw| p.expand(raw, "credentials.path", lookup))
                .map_or_else(|| PathBuf::from(DEFAULT_TOKEN_FILE), PathBuf::from),
            callback_url,
        }
    }
}

/// Upstreams that act as each caller need callers with an identity, and
/// users' tokens need a key to be stored with.
pub(super) fn check_identity_needs(
    upstreams: Option<&indexmap::IndexMap<Spanned<String>, super::RawUpstream>>,
    auth: &Option<super::AuthConfig>,
    credentials: &CredentialsConfig,
    p: &mut Problems,
) {
    for (name, upstream) in upstreams.into_iter().flatten() {
        let name = name.value.escape_debug();
        if let (Some(at), Some(super::AuthConfig::Off)) = (upstream.per_identity_at(), auth) {
            p.at(
                at,
                format_args!("upstreams.{name}.auth.mode: acting as each caller needs client authentication, but auth.mode is off"),
            );
        }
        if let (Some(at), None) = (upstream.user_mode_at(), &credentials.key) {
            p.at(
                at,
                format_args!("upstreams.{name}.auth.mode: user needs credentials.key to encrypt the users' tokens (make one with `openssl rand -base64 32`)"),
            );
        }
    }
}

#[cfg(test)]
mod tests;
