//! Credentials the gateway obtains for remote upstreams (an upstream's
//! `auth:` section): OAuth 2.0 tokens for one service identity (client
//! credentials), for each caller (RFC 8693 token exchange), or for each
//! person who connects their own account (authorization code with PKCE).
//! Clients' own tokens are never passed upstream.
//!
//! [`UpstreamCredentials`] is one upstream's: it knows its authorization
//! server (configured, or discovered from the upstream's 401 and the
//! server's metadata, once, on first need) and hands each link a
//! [`cell::TokenCell`]: the service cell, or one per identity. The
//! [`Connector`] is the gateway's one table of users' authorization flows
//! and their stored grants (see [`flows`] and [`store`]); [`admin`] is the
//! operator's `mcpmux connections`.

pub(crate) mod admin;
pub(crate) mod cell;
pub(crate) mod flows;
pub(crate) mod oauth;
pub(crate) mod own;
pub(crate) mod store;

use std::sync::{Arc, Mutex};

use reqwest::Url;

use crate::config::{ApiKeyClients, AuthMode, AuthServer, CredentialsConfig, Secret, UpstreamAuth};
use cell::{Fetch, TokenCell};
use oauth::{ClientAuth, Endpoints, OAuthClient, OAuthError, Token};

pub(crate) use flows::{Connector, FlowStart};

/// How long one refresh of a refresh token is claimed for.
const REFRESH_CLAIM: std::time::Duration = std::time::Duration::from_secs(60);
/// How long a task waits for a refresh another one is making ...
const REFRESH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// ... looking at the store this often.
const REFRESH_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// Why no token could be had.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum CredentialError {
    #[error("{0}")]
    OAuth(#[from] OAuthError),
    /// The caller has not connected their account at this upstream.
    #[error("you have not connected your account yet")]
    NotConnected,
    /// The caller has no token to exchange (an API key client).
    #[error(
        "it exchanges each caller's JWT for its token, and an API-key client has none (set auth.api_key_clients: service to act as the gateway's service identity instead)"
    )]
    NoSubjectToken,
    #[error("{0}")]
    Unusable(&'static str),
    #[error("the token store failed: {0}")]
    Store(String),
}

impl CredentialError {
    /// Whether asking again cannot help until the user acts (the grant is
    /// gone): a cell then drops even a token that has not expired.
    pub(crate) fn is_final(&self) -> bool {
        match self {
            CredentialError::NotConnected | CredentialError::NoSubjectToken => true,
            CredentialError::OAuth(e) => e.grant_refused(),
            _ => false,
        }
    }
}

/// The latest token of one caller, exchanged for an upstream token when
/// that one is due (`mode: token_exchange`). Every call of the caller
/// replaces it, so an expired JWT is never exchanged while a fresh one has
/// been seen.
#[derive(Default)]
pub(crate) struct SubjectSlot(Mutex<Option<Secret>>);

impl SubjectSlot {
    pub(crate) fn set(&self, token: &str) {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_none_or(|t| t.expose() != token) {
            *slot = Some(Secret::new(token.to_owned()));
        }
    }

    pub(crate) fn get(&self) -> Option<Secret> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// One upstream's credentials.
pub(crate) struct UpstreamCredentials {
    upstream: Arc<str>,
    auth: UpstreamAuth,
    url: Url,
    http: reqwest::Client,
    /// The authorization server and the gateway's client there, found on
    /// first need (a failure is not kept: the next need tries again).
    client: tokio::sync::OnceCell<Arc<OAuthClient>>,
    /// The service identity's token (client credentials), when this
    /// upstream uses one: its mode, `discovery: client_credentials`, or
    /// `api_key_clients: service`.
    service: Option<Arc<TokenCell>>,
    connector: Arc<Connector>,
}

impl std::fmt::Debug for UpstreamCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamCredentials")
            .field("upstream", &self.upstream)
            .field("mode", &self.auth.mode.name())
            .finish_non_exhaustive()
    }
}

impl UpstreamCredentials {
    pub(crate) fn new(
        upstream: Arc<str>,
        auth: &UpstreamAuth,
        url: &str,
        connector: Arc<Connector>,
    ) -> Result<Arc<Self>, CredentialError> {
        let url = Url::parse(url).map_err(|_| CredentialError::Unusable("invalid upstream url"))?;
        let http = oauth::http_client()?;
        let this = Arc::new_cyclic(|weak: &std::sync::Weak<UpstreamCredentials>| {
            let uses_service = match &auth.mode {
                AuthMode::ClientCredentials => true,
                AuthMode::TokenExchange {
                    api_key_clients,
                    sessions,
                    ..
                } => sessions.discovery || *api_key_clients == ApiKeyClients::Service,
                AuthMode::User { sessions } => sessions.discovery,
            };
            let service = uses_service.then(|| {
                let weak = weak.clone();
                let fetch: Fetch = Arc::new(move |_| {
                    let weak = weak.clone();
                    Box::pin(async move {
                        let this = weak.upgrade().ok_or(CredentialError::Unusable(
                            "the upstream was removed",
                        ))?;
                        let client = this.client().await?;
                        let token = client
                            .client_credentials(&this.auth.scopes, Some(&this.auth.resource))
                            .await?;
                        tracing::info!(upstream = %this.upstream, "obtained a service token (client credentials)");
                        Ok(token)
                    })
                });
                Arc::new(TokenCell::new(fetch))
            });
            UpstreamCredentials {
                upstream: upstream.clone(),
                auth: auth.clone(),
                url,
                http,
                client: tokio::sync::OnceCell::new(),
                service,
                connector: connector.clone(),
            }
        });
        connector.register(&this);
        Ok(this)
    }

    pub(crate) fn mode(&self) -> &AuthMode {
        &self.auth.mode
    }

    /// The service identity's token, if this upstream has one.
    pub(crate) fn service(&self) -> Option<Arc<TokenCell>> {
        self.service.clone()
    }

    /// Whether a caller with no JWT acts as the service identity.
    pub(crate) fn api_key_clients_as_service(&self) -> bool {
        matches!(
            self.auth.mode,
            AuthMode::TokenExchange {
                api_key_clients: ApiKeyClients::Service,
                ..
            }
        )
    }

    /// The token of `identity`'s own upstream session: an exchange of the
    /// caller's latest JWT (`subject`), or the user's stored grant.
    pub(crate) fn identity_cell(
        self: &Arc<Self>,
        identity: &Arc<str>,
        subject: Arc<SubjectSlot>,
    ) -> Arc<TokenCell> {
        let weak = Arc::downgrade(self);
        let identity = identity.clone();
        let fetch: Fetch = Arc::new(move |refused| {
            let (weak, identity, subject) = (weak.clone(), identity.clone(), subject.clone());
            Box::pin(async move {
                let this = weak
                    .upgrade()
                    .ok_or(CredentialError::Unusable("the upstream was removed"))?;
                match &this.auth.mode {
                    AuthMode::TokenExchange {
                        audience,
                        subject_token_type,
                        ..
                    } => {
                        let subject = subject.get().ok_or(CredentialError::NoSubjectToken)?;
                        let client = this.client().await?;
                        let token = client
                            .token_exchange(
                                subject.expose(),
                                subject_token_type,
                                Some(&this.auth.resource),
                                audience.as_deref(),
                                &this.auth.scopes,
                            )
                            .await?;
                        tracing::info!(upstream = %this.upstream, client = %identity, "exchanged the caller's token for an upstream token");
                        Ok(token)
                    }
                    AuthMode::User { .. } => this.user_token(&identity, refused.as_ref()).await,
                    AuthMode::ClientCredentials => Err(CredentialError::Unusable(
                        "this upstream has one service identity",
                    )),
                }
            })
        });
        Arc::new(TokenCell::new(fetch))
    }

    /// A user's token from the store: as stored while it is fresh, else
    /// refreshed (and stored again). A refused refresh removes the grant:
    /// the user connects again, and nobody else's token is ever used.
    async fn user_token(
        &self,
        identity: &str,
        refused: Option<&Token>,
    ) -> Result<Token, CredentialError> {
        let store = self.connector.store()?;
        let grant = store
            .get(&self.upstream, identity)
            .await
            .map_err(|e| CredentialError::Store(e.to_string()))?
            .ok_or(CredentialError::NotConnected)?;
        let token = flows::token_of(grant);
        // The token the upstream refused is not fresh, whatever its expiry.
        let refused_it = refused.is_some_and(|r| r.access.expose() == token.access.expose());
        if !refused_it && token.fresh_for(std::time::Duration::from_secs(30)) {
            return Ok(token);
        }
        let Some(refresh) = token.refresh.clone() else {
            // Still usable for a moment, or not at all: either way the user
            // must connect again once it has expired.
            return match !refused_it && token.fresh_for(std::time::Duration::ZERO) {
                true => Ok(token),
                false => {
                    let _ = store.remove(&self.upstream, identity).await;
                    Err(CredentialError::NotConnected)
                }
            };
        };
        // One refresh per refresh token, across replicas sharing the store:
        // a rotated refresh token used twice ends the grant at many servers.
        let claim = format!(
            "refresh:{}",
            crate::config::sha256(refresh.expose().as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        let first = store
            .claim_once(&claim, REFRESH_CLAIM)
            .await
            .map_err(|e| CredentialError::Store(e.to_string()))?;
        if !first {
            return self.refreshed_elsewhere(identity, &token).await;
        }
        let client = self.client().await?;
        match client
            .refresh(&refresh, &self.auth.scopes, Some(&self.auth.resource))
            .await
        {
            Ok(fresh) => {
                store
                    .put(&self.upstream, identity, &flows::grant_of(&fresh))
                    .await
                    .map_err(|e| CredentialError::Store(e.to_string()))?;
                tracing::info!(upstream = %self.upstream, client = %identity, "refreshed the user's upstream token");
                Ok(fresh)
            }
            Err(e) if e.grant_refused() => {
                tracing::info!(upstream = %self.upstream, client = %identity, error = %e, "the user's grant was refused on refresh; they must connect again");
                let _ = store.remove(&self.upstream, identity).await;
                Err(CredentialError::NotConnected)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Waits (a bounded while) for the refresh another task or replica is
    /// making of `identity`'s token, and takes its result from the store.
    async fn refreshed_elsewhere(
        &self,
        identity: &str,
        stale: &Token,
    ) -> Result<Token, CredentialError> {
        let store = self.connector.store()?;
        let until = tokio::time::Instant::now() + REFRESH_WAIT;
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(REFRESH_POLL).await;
            match store.get(&self.upstream, identity).await {
                Ok(Some(grant)) if grant.access.expose() != stale.access.expose() => {
                    return Ok(flows::token_of(grant));
                }
                // The refresh was refused and the grant removed.
                Ok(None) => return Err(CredentialError::NotConnected),
                _ => {}
            }
        }
        // Not done in time; the current token still serves while it lasts.
        match stale.fresh_for(std::time::Duration::ZERO) {
            true => Ok(stale.clone()),
            false => Err(CredentialError::Unusable(
                "the user's token is being refreshed elsewhere; try again",
            )),
        }
    }

    /// The authorization server's client: configured endpoints, or the
    /// issuer's metadata, or discovery from the upstream's own 401; the
    /// configured client, or one registered (RFC 7591).
    pub(crate) async fn client(&self) -> Result<Arc<OAuthClient>, CredentialError> {
        self.client
            .get_or_try_init(|| async {
                let endpoints = self.endpoints().await?;
                let client = match &self.auth.client {
                    Some(c) => ClientAuth {
                        client_id: c.client_id.clone(),
                        client_secret: c.client_secret.clone(),
                    },
                    None => {
                        let registration = endpoints.registration.clone().ok_or(
                            OAuthError::Discovery(
                                "the authorization server offers no dynamic registration; configure client_id and client_secret".into(),
                            ),
                        )?;
                        let redirect = self.connector.callback_url()?;
                        let scopes = &self.auth.scopes;
                        let first =
                            oauth::register(&self.http, &registration, "mcpmux", &redirect, scopes)
                                .await;
                        let client = match first {
                            // `scope` is optional (RFC 7591 §2), and some servers
                            // register only the scopes they list themselves:
                            // the scopes are asked for at authorization anyway.
                            Err(OAuthError::Refused { error, .. })
                                if error == "invalid_client_metadata" && !scopes.is_empty() =>
                            {
                                oauth::register(&self.http, &registration, "mcpmux", &redirect, &[])
                                    .await?
                            }
                            other => other?,
                        };
                        tracing::info!(upstream = %self.upstream, "registered the gateway at the authorization server");
                        client
                    }
                };
                Ok::<_, CredentialError>(Arc::new(OAuthClient::new(
                    self.http.clone(),
                    endpoints,
                    client,
                )))
            })
            .await
            .cloned()
    }

    async fn endpoints(&self) -> Result<Endpoints, CredentialError> {
        let parse = |url: &str| {
            Url::parse(url).map_err(|_| CredentialError::Unusable("invalid endpoint url"))
        };
        match &self.auth.server {
            AuthServer::Endpoints {
                token_url,
                authorization_url,
                revocation_url,
            } => Ok(Endpoints {
                issuer: None,
                token: parse(token_url)?,
                authorization: authorization_url.as_deref().map(parse).transpose()?,
                registration: None,
                revocation: revocation_url.as_deref().map(parse).transpose()?,
            }),
            AuthServer::Issuer(issuer) => {
                Ok(oauth::authorization_server(&self.http, issuer).await?)
            }
            AuthServer::Discover => {
                let challenge = self.probe().await;
                let resource =
                    oauth::protected_resource(&self.http, &self.url, challenge.as_deref()).await?;
                let issuer = resource.authorization_servers.first().ok_or_else(|| {
                    OAuthError::Discovery(format!(
                        "the protected-resource metadata of {} names no authorization server",
                        resource.resource
                    ))
                })?;
                Ok(oauth::authorization_server(&self.http, issuer).await?)
            }
        }
    }

    /// The `WWW-Authenticate` of the upstream's answer to a request with
    /// no token (RFC 9728 §5.1), if it gives one.
    async fn probe(&self) -> Option<String> {
        let body = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpmux","version":"0"}}}"#;
        let answer = self
            .http
            .post(self.url.clone())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
            .send()
            .await
            .ok()?;
        answer
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// Starts `identity`'s authorization flow: the URL to send the user to.
    pub(crate) async fn start_flow(
        self: &Arc<Self>,
        identity: &Arc<str>,
    ) -> Result<FlowStart, CredentialError> {
        let client = self.client().await?;
        let redirect = self.connector.callback_url()?;
        self.connector.start(self, identity, &client, &redirect)
    }

    /// Whether `identity` has a stored grant here.
    pub(crate) async fn connected(&self, identity: &str) -> Result<bool, CredentialError> {
        let store = self.connector.store()?;
        store
            .get(&self.upstream, identity)
            .await
            .map(|grant| grant.is_some())
            .map_err(|e| CredentialError::Store(e.to_string()))
    }

    /// `identity` disconnects: its grant is removed (and revoked at the
    /// server, best effort); true if it had one.
    pub(crate) async fn disconnect(&self, identity: &str) -> Result<bool, CredentialError> {
        let store = self.connector.store()?;
        let removed = store
            .remove(&self.upstream, identity)
            .await
            .map_err(|e| CredentialError::Store(e.to_string()))?;
        let Some(grant) = removed else {
            return Ok(false);
        };
        if let Ok(client) = self.client().await {
            let token = grant.refresh.as_ref().unwrap_or(&grant.access);
            if let Err(e) = client.revoke(token, grant.refresh.is_some()).await {
                tracing::info!(upstream = %self.upstream, error = %e, "could not revoke the disconnected grant at the authorization server");
            }
        }
        tracing::info!(target: "mcpmux::audit", upstream = %self.upstream, client = identity, "the user's account was disconnected");
        Ok(true)
    }

    pub(crate) fn connector(&self) -> &Arc<Connector> {
        &self.connector
    }

    pub(crate) fn upstream(&self) -> &Arc<str> {
        &self.upstream
    }

    pub(crate) fn scopes(&self) -> &[String] {
        &self.auth.scopes
    }

    pub(crate) fn resource(&self) -> &str {
        &self.auth.resource
    }
}

/// The gateway's one [`Connector`] for `config`: its token store opened
/// when some upstream lets users connect. A store that cannot be opened is
/// logged, and those users' calls are refused with the reason.
pub(crate) fn connector_for(config: &crate::Config) -> Arc<Connector> {
    let needs_store = config.upstreams.iter().any(|u| match &u.transport {
        crate::config::Transport::Remote(r) => r
            .auth
            .as_ref()
            .is_some_and(|a| matches!(a.mode, AuthMode::User { .. })),
        _ => false,
    });
    connector(&config.credentials, config.session_store.as_ref(), needs_store).unwrap_or_else(|e| {
        tracing::error!(error = %e, "the token store cannot be opened; users cannot connect their accounts");
        Arc::new(Connector::new(None, config.credentials.callback_url.clone()))
    })
}

/// The [`Connector`] of `config` (its token store opened when
/// `needs_store`).
pub(crate) fn connector(
    config: &CredentialsConfig,
    session_store: Option<&Secret>,
    needs_store: bool,
) -> Result<Arc<Connector>, CredentialError> {
    let store = match (needs_store, &config.key) {
        (false, _) | (true, None) => None,
        (true, Some(key)) => Some(Arc::new(
            match session_store {
                Some(url) => store::TokenStore::redis(url.expose(), key, &config.previous_keys),
                None => store::TokenStore::file(&config.path, key, &config.previous_keys),
            }
            .map_err(|e| CredentialError::Store(e.to_string()))?,
        )),
    };
    Ok(Arc::new(Connector::new(store, config.callback_url.clone())))
}
