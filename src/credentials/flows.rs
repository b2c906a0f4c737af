//! Users connecting their own accounts (`mode: user`): the authorization
//! flows in progress and their end at `/oauth/callback`.
//!
//! A flow starts when a caller who has no grant at an upstream calls it:
//! [`Connector::start`] makes an unguessable `state`, keeps it with the
//! caller's identity, the upstream and the PKCE verifier, and returns the
//! authorization URL. The callback takes the `state` out (it works once),
//! checks its age, exchanges the code (with the verifier and the RFC 8707
//! resource) and stores the grant under the identity that started the
//! flow, whoever's browser brings the code back: a forged, replayed or
//! expired `state` is refused and changes nothing. Calls waiting for the
//! user ([`Connector::wait_connected`]) are woken.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use reqwest::Url;
use tokio::sync::watch;

use super::oauth::{OAuthClient, Token};
use super::store::{Grant, TokenStore};
use super::{CredentialError, UpstreamCredentials};
use crate::config::Secret;

/// How long a user has to finish signing in.
pub(crate) const FLOW_LIFETIME: Duration = Duration::from_secs(10 * 60);
/// Flows one identity may have open at once; a new one ends the oldest.
const FLOWS_PER_IDENTITY: usize = 8;
/// Flows open at once in the gateway; beyond it new ones are refused.
const MAX_FLOWS: usize = 10_000;

/// What the caller is told: where to sign in, and the elicitation's id.
#[derive(Debug, Clone)]
pub(crate) struct FlowStart {
    pub url: Url,
    pub elicitation_id: String,
}

/// A flow waiting for its callback.
struct Pending {
    credentials: Arc<UpstreamCredentials>,
    identity: Arc<str>,
    verifier: Secret,
    redirect: Url,
    started: Instant,
}

/// Why a callback did not connect anything.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum CallbackError {
    #[error(
        "this sign-in link is unknown, was used already or has expired; call the tool again from your MCP client to get a new one"
    )]
    UnknownState,
    #[error("the authorization server did not grant access: {0}")]
    Denied(String),
    #[error("the callback has no code")]
    NoCode,
    #[error(transparent)]
    Credential(#[from] CredentialError),
}

/// A flow that ended well.
#[derive(Debug, Clone)]
pub(crate) struct Connected {
    pub upstream: Arc<str>,
    pub identity: Arc<str>,
}

/// The gateway's users' authorization flows and their token store.
pub(crate) struct Connector {
    store: Option<Arc<TokenStore>>,
    /// `credentials.callback_url`, else set once the HTTP server listens.
    callback: OnceLock<Url>,
    /// By `state`; a std mutex held for a lookup, never across an await.
    pending: Mutex<HashMap<String, Pending>>,
    /// Bumped by every flow that ended well (waiting calls re-check).
    connected: watch::Sender<u64>,
}

impl Connector {
    pub(crate) fn new(store: Option<Arc<TokenStore>>, callback: Option<String>) -> Self {
        let cell = OnceLock::new();
        if let Some(url) = callback.and_then(|c| Url::parse(&c).ok()) {
            let _ = cell.set(url);
        }
        Self {
            store,
            callback: cell,
            pending: Mutex::new(HashMap::new()),
            connected: watch::Sender::new(0),
        }
    }

    /// The token store; users cannot connect without one.
    pub(crate) fn store(&self) -> Result<&Arc<TokenStore>, CredentialError> {
        self.store.as_ref().ok_or(CredentialError::Unusable(
            "no token store is configured (credentials.key)",
        ))
    }

    /// Sets the callback URL from the address the gateway listens on,
    /// unless the config named one.
    pub(crate) fn listening_on(&self, addr: std::net::SocketAddr) {
        if let Ok(url) = Url::parse(&format!("http://{addr}/oauth/callback")) {
            let _ = self.callback.set(url);
        }
    }

    pub(crate) fn callback_url(&self) -> Result<Url, CredentialError> {
        self.callback.get().cloned().ok_or(CredentialError::Unusable(
            "the gateway does not serve HTTP, so it has no callback URL (set credentials.callback_url)",
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a flow of `identity` at the upstream of `credentials`.
    pub(crate) fn start(
        &self,
        credentials: Arc<UpstreamCredentials>,
        identity: Arc<str>,
        client: &OAuthClient,
        redirect: &Url,
    ) -> Result<FlowStart, CredentialError> {
        let state = random_token();
        let elicitation_id = random_token();
        let (url, verifier) = client.authorization_url(
            redirect,
            credentials.scopes(),
            Some(credentials.resource()),
            &state,
        )?;
        let mut pending = self.lock();
        pending.retain(|_, p| p.started.elapsed() < FLOW_LIFETIME);
        let mut own: Vec<(Instant, String)> = pending
            .iter()
            .filter(|(_, p)| p.identity == identity)
            .map(|(s, p)| (p.started, s.clone()))
            .collect();
        if own.len() >= FLOWS_PER_IDENTITY {
            own.sort();
            pending.remove(&own[0].1);
        }
        if pending.len() >= MAX_FLOWS {
            return Err(CredentialError::Unusable(
                "too many sign-ins are in progress; try again in a few minutes",
            ));
        }
        tracing::info!(upstream = %credentials.upstream(), client = %identity, "authorization flow started");
        pending.insert(
            state,
            Pending {
                credentials,
                identity,
                verifier,
                redirect: redirect.clone(),
                started: Instant::now(),
            },
        );
        Ok(FlowStart {
            url,
            elicitation_id,
        })
    }

    /// Ends the flow of `state` with the authorization server's answer:
    /// `code`, or `error` and its description.
    pub(crate) async fn complete(
        &self,
        state: &str,
        code: Option<&str>,
        error: Option<&str>,
    ) -> Result<Connected, CallbackError> {
        let pending = self.lock().remove(state);
        let Some(flow) = pending.filter(|p| p.started.elapsed() < FLOW_LIFETIME) else {
            tracing::warn!(target: "mcpmux::audit", "an authorization callback with an unknown, used or expired state was refused");
            return Err(CallbackError::UnknownState);
        };
        let upstream = flow.credentials.upstream().clone();
        if let Some(error) = error {
            tracing::info!(target: "mcpmux::audit", %upstream, client = %flow.identity, error, "the authorization server refused the user's authorization");
            return Err(CallbackError::Denied(error.chars().take(200).collect()));
        }
        let code = code.ok_or(CallbackError::NoCode)?;
        let client = flow.credentials.client().await?;
        let token = client
            .exchange_code(
                code,
                &flow.verifier,
                &flow.redirect,
                Some(flow.credentials.resource()),
            )
            .await
            .map_err(CredentialError::from)?;
        self.store()?
            .put(&upstream, &flow.identity, &grant_of(&token))
            .await
            .map_err(|e| CredentialError::Store(e.to_string()))?;
        tracing::info!(target: "mcpmux::audit", %upstream, client = %flow.identity, "the user connected their account");
        self.connected.send_modify(|n| *n += 1);
        Ok(Connected {
            upstream,
            identity: flow.identity,
        })
    }

    /// Waits (until `deadline`) for `identity` to have a grant at
    /// `upstream`; true once it has.
    pub(crate) async fn wait_connected(
        &self,
        upstream: &str,
        identity: &str,
        deadline: tokio::time::Instant,
    ) -> bool {
        let Ok(store) = self.store() else {
            return false;
        };
        let mut changes = self.connected.subscribe();
        let connected = async {
            loop {
                if matches!(store.get(upstream, identity).await, Ok(Some(_))) {
                    return true;
                }
                if changes.changed().await.is_err() {
                    return false;
                }
            }
        };
        tokio::time::timeout_at(deadline, connected)
            .await
            .unwrap_or(false)
    }
}

/// 32 random bytes in base64url: a `state` or an elicitation id.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    aws_lc_rs::rand::fill(&mut bytes).expect("the system random generator works");
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A token as the store keeps it.
pub(crate) fn grant_of(token: &Token) -> Grant {
    Grant {
        access: token.access.clone(),
        refresh: token.refresh.clone(),
        expires_at: token.expires_at,
        scope: token.scope.clone(),
    }
}

/// A stored grant as a token.
pub(crate) fn token_of(grant: Grant) -> Token {
    Token {
        access: grant.access,
        expires_at: grant.expires_at,
        refresh: grant.refresh,
        scope: grant.scope,
    }
}
