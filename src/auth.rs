//! Who a client is. Authentication happens at the HTTP edge; what it finds
//! travels with every request as an [`Identity`] in the router's
//! `RequestContext`, and a 2025-era session keeps the identity that
//! created it.
//!
//! A bearer credential is an API key (compared as a SHA-256 digest, in
//! constant time, against every configured key) or a JWT (see [`jwt`]).
//! Nothing here writes HTTP: the downstream layer turns an [`AuthError`]
//! into 401 or 403 with `WWW-Authenticate` (RFC 6750, RFC 9728).

mod jwt;

pub(crate) use jwt::SetupError;

use std::sync::Arc;

use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{AdminAccess, AuthConfig, AuthSettings, sha256};

/// An authenticated client.
#[derive(Clone)]
pub struct Identity {
    /// The client's name: an API key's client, or a JWT's configured claim.
    pub client: Arc<str>,
    /// Scopes and groups from its token, for policy rules.
    pub scopes: Vec<String>,
    /// The JWT the request carried (none for an API key): what an upstream
    /// in `auth.mode: token_exchange` exchanges. Never shown, and not part
    /// of who the client is (equality ignores it).
    subject: Option<Arc<crate::config::Secret>>,
}

impl Identity {
    /// The client `client` with `scopes`, and no token of its own.
    pub fn new(client: impl Into<Arc<str>>, scopes: Vec<String>) -> Identity {
        Identity {
            client: client.into(),
            scopes,
            subject: None,
        }
    }

    /// The token the request carried, when it was a JWT.
    pub(crate) fn subject_token(&self) -> Option<&str> {
        self.subject.as_deref().map(crate::config::Secret::expose)
    }

    /// This identity as carried by a request with `token` (a verified JWT).
    pub(crate) fn with_subject(mut self, token: &str) -> Identity {
        self.subject = Some(Arc::new(crate::config::Secret::new(token.to_owned())));
        self
    }
}

impl PartialEq for Identity {
    fn eq(&self, other: &Self) -> bool {
        self.client == other.client && self.scopes == other.scopes
    }
}

impl Eq for Identity {}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("client", &self.client)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// Why a request was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum AuthError {
    /// No credential at all: 401 without an error code.
    #[error("this gateway needs a bearer token (Authorization: Bearer ...)")]
    Missing,
    /// A credential that is not valid: 401 `invalid_token`.
    #[error("invalid token: {0}")]
    Invalid(String),
    /// A valid token without a required scope: 403 `insufficient_scope`.
    #[error("the token lacks the scope {0:?}")]
    InsufficientScope(String),
    /// No key with the token's `kid` (yet): a JWKS refresh may find it.
    #[error("invalid token: no key with its key id")]
    UnknownKey,
}

impl AuthError {
    fn invalid(why: impl Into<String>) -> Self {
        AuthError::Invalid(why.into())
    }

    fn is_unknown_key(&self) -> bool {
        matches!(self, AuthError::UnknownKey)
    }
}

/// The tokens the gateway's own authorization server issues
/// (`auth.oauth_server`), accepted next to the provider's JWTs and API keys.
pub(crate) trait OwnTokens: Send + Sync {
    /// Whether `kid` names one of the server's signing keys.
    fn issued_by_me(&self, kid: &str) -> bool;

    /// The identity of `token`, checked for `resource` (its audience).
    fn verify<'a>(
        &'a self,
        token: &'a str,
        resource: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Identity, AuthError>> + Send + 'a>>;
}

/// Checks credentials against the configured API keys and JWT issuer.
pub(crate) struct Authenticator {
    settings: AuthSettings,
    jwt: Option<jwt::JwtVerifier>,
    own: Option<Arc<dyn OwnTokens>>,
}

impl Authenticator {
    /// Reads PEM keys now; a JWKS is fetched by [`Self::spawn_refresh`].
    pub(crate) fn new(settings: &AuthSettings) -> Result<Authenticator, SetupError> {
        let jwt = settings
            .jwt
            .as_ref()
            .map(jwt::JwtVerifier::new)
            .transpose()?;
        Ok(Authenticator {
            settings: settings.clone(),
            jwt,
            own: None,
        })
    }

    /// Also accepts the tokens of the gateway's own authorization server.
    pub(crate) fn with_own_tokens(mut self, own: Option<Arc<dyn OwnTokens>>) -> Authenticator {
        self.own = own;
        self
    }

    /// The authenticator for `auth`, its JWKS refresh running until
    /// `shutdown` (or until it is replaced by a reload and dropped); none
    /// when authentication is off.
    pub(crate) fn start(
        auth: &AuthConfig,
        own: Option<Arc<dyn OwnTokens>>,
        shutdown: &CancellationToken,
        tasks: &TaskTracker,
    ) -> Option<Arc<Authenticator>> {
        let AuthConfig::On(settings) = auth else {
            return None;
        };
        let authenticator = match Authenticator::new(settings) {
            Ok(a) => a,
            Err(e) => {
                // Config validation reads the same keys; refuse everyone
                // rather than serve openly if it missed something.
                tracing::error!(error = %e, "authentication cannot start; refusing every client");
                Authenticator {
                    settings: AuthSettings {
                        api_keys: Vec::new(),
                        jwt: None,
                        ..(**settings).clone()
                    },
                    jwt: None,
                    own: None,
                }
            }
        };
        let authenticator = Arc::new(authenticator.with_own_tokens(own));
        authenticator.spawn_refresh(shutdown.clone(), tasks);
        Some(authenticator)
    }

    pub(crate) fn settings(&self) -> &AuthSettings {
        &self.settings
    }

    /// Fetches the JWKS now and every `jwks_refresh` until `shutdown`, or
    /// until this authenticator is dropped (a reload replaced it).
    fn spawn_refresh(self: &Arc<Self>, shutdown: CancellationToken, tasks: &TaskTracker) {
        let Some(interval) = self
            .jwt
            .as_ref()
            .filter(|j| j.jwks_url().is_some())
            .map(|j| j.refresh_interval())
        else {
            return;
        };
        let this = Arc::downgrade(self);
        let span = tracing::info_span!("jwks_refresh");
        let refresh = async move {
            let mut tick = tokio::time::interval(interval);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let Some(this) = this.upgrade() else { return };
                        if let Some(jwt) = &this.jwt {
                            jwt.refresh(false).await;
                        }
                    }
                    () = shutdown.cancelled() => return,
                }
            }
        };
        tasks.spawn(tracing::Instrument::instrument(refresh, span));
    }

    /// The client behind an `Authorization` header value, for a request
    /// to `resource` (the audience the gateway's own tokens must name; only
    /// worked out for one of those).
    pub(crate) async fn authenticate(
        &self,
        authorization: Option<&str>,
        resource: impl FnOnce() -> String,
    ) -> Result<Arc<Identity>, AuthError> {
        let token = bearer(authorization)?;
        if let Some(client) = self.api_key_client(token) {
            return Ok(Arc::new(Identity::new(client, Vec::new())));
        }
        if token.split('.').count() != 3 {
            return Err(AuthError::invalid("unknown API key"));
        }
        let identity = match (&self.jwt, &self.own) {
            (_, Some(own)) if self.jwt.is_none() || own_kid(token, own.as_ref()) => {
                own.verify(token, &resource()).await?
            }
            (Some(jwt), own) => match jwt.verify(token).await {
                // Another replica may have rotated the gateway's own key.
                Err(AuthError::UnknownKey) if own.is_some() => {
                    own.as_ref()
                        .expect("checked")
                        .verify(token, &resource())
                        .await?
                }
                Err(AuthError::UnknownKey) => {
                    return Err(AuthError::invalid("no key with the token's key id"));
                }
                other => other?.with_subject(token),
            },
            (None, _) => return Err(AuthError::invalid("unknown API key")),
        };
        if let Some(missing) = self
            .settings
            .required_scopes
            .iter()
            .find(|s| !identity.scopes.contains(s))
        {
            return Err(AuthError::InsufficientScope(missing.clone()));
        }
        Ok(Arc::new(identity))
    }

    /// The client whose key is `token`, compared in constant time with
    /// every configured key.
    fn api_key_client(&self, token: &str) -> Option<&str> {
        let digest = sha256(token.as_bytes());
        let mut found = None;
        for key in &self.settings.api_keys {
            if bool::from(key.sha256.ct_eq(&digest)) {
                found = Some(key.client.as_str());
            }
        }
        found
    }

    /// Whether `authorization` may read `/status` and `/metrics`.
    pub(crate) async fn admits_admin(
        &self,
        authorization: Option<&str>,
        resource: impl FnOnce() -> String,
    ) -> Result<(), AuthError> {
        match &self.settings.admin {
            AdminAccess::Open => Ok(()),
            AdminAccess::Clients => {
                // A host's login token (the gateway's own) acts for a
                // user of the MCP endpoint, never for an operator.
                if let (Some(own), Ok(token)) = (&self.own, bearer(authorization))
                    && own_kid(token, own.as_ref())
                {
                    return Err(AuthError::invalid(
                        "a token from the gateway's login is not an operator's credential",
                    ));
                }
                self.authenticate(authorization, resource).await.map(|_| ())
            }
            AdminAccess::Key(digest) => {
                let token = bearer(authorization)?;
                match bool::from(digest.ct_eq(&sha256(token.as_bytes()))) {
                    true => Ok(()),
                    false => Err(AuthError::invalid("not the admin key")),
                }
            }
        }
    }
}

/// Whether `token`'s header names a key of the gateway's own server.
fn own_kid(token: &str, own: &dyn OwnTokens) -> bool {
    jsonwebtoken::decode_header(token)
        .ok()
        .and_then(|h| h.kid)
        .is_some_and(|kid| own.issued_by_me(&kid))
}

/// The token of an `Authorization: Bearer <token>` value.
fn bearer(authorization: Option<&str>) -> Result<&str, AuthError> {
    let value = authorization.ok_or(AuthError::Missing)?;
    let (scheme, token) = value
        .trim()
        .split_once(' ')
        .ok_or_else(|| AuthError::invalid("expected Authorization: Bearer <token>"))?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(AuthError::invalid("expected Authorization: Bearer <token>"));
    }
    Ok(token.trim())
}

#[cfg(test)]
mod tests;
