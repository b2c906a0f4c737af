//! Users connecting their own accounts (`mode: user`): the authorization
//! flows and their end at `/oauth/callback`.
//!
//! A flow starts when a caller who has no grant at an upstream calls it:
//! [`Connector::start`] seals the caller's identity, the upstream, the
//! PKCE verifier, the redirect URI and the time into the `state` (AES-GCM
//! under the token store's key, so any replica sharing the key can end the
//! flow), and returns the authorization URL. The callback opens the
//! `state`, checks its age, claims it once in the store (a replay is
//! refused, on every replica), exchanges the code with the verifier and
//! the RFC 8707 resource, and stores the grant under the identity that
//! started the flow, whoever's browser brings the code back: a forged,
//! replayed or expired `state` is refused and changes nothing. Calls
//! waiting for the user ([`Connector::wait_connected`]) are woken.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, SystemTime};

use reqwest::Url;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::oauth::{OAuthClient, Token};
use super::store::{Grant, TokenStore};
use super::{CredentialError, UpstreamCredentials};
use crate::config::Secret;

/// How long a user has to finish signing in.
pub(crate) const FLOW_LIFETIME: Duration = Duration::from_secs(10 * 60);
/// What a flow's `state` is sealed for.
const PURPOSE: &str = "mcpmux.oauth-state";

/// What the caller is told: where to sign in, and the elicitation's id.
#[derive(Debug, Clone)]
pub(crate) struct FlowStart {
    pub url: Url,
    pub elicitation_id: String,
}

/// What a `state` carries (sealed: the browser sees only ciphertext).
#[derive(Serialize, Deserialize)]
struct Sealed {
    /// The upstream.
    u: String,
    /// The identity that started the flow.
    i: String,
    /// The PKCE verifier.
    v: String,
    /// The redirect URI the code was issued for.
    r: String,
    /// When the flow started, in ms since the epoch.
    t: u64,
    /// A random id: what is claimed once.
    n: String,
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
    /// The upstreams whose flows end here, by name (a reload replaces
    /// one); a std mutex held for a lookup.
    upstreams: Mutex<HashMap<Arc<str>, Weak<UpstreamCredentials>>>,
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
            upstreams: Mutex::default(),
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

    /// Makes `credentials` the one whose flows for its upstream end here.
    pub(crate) fn register(&self, credentials: &Arc<UpstreamCredentials>) {
        let mut upstreams = self.upstreams.lock().unwrap_or_else(|e| e.into_inner());
        upstreams.retain(|_, c| c.strong_count() > 0);
        upstreams.insert(credentials.upstream().clone(), Arc::downgrade(credentials));
    }

    fn upstream(&self, name: &str) -> Option<Arc<UpstreamCredentials>> {
        let upstreams = self.upstreams.lock().unwrap_or_else(|e| e.into_inner());
        upstreams.get(name).and_then(Weak::upgrade)
    }

    /// Starts a flow of `identity` at the upstream of `credentials`.
    pub(crate) fn start(
        &self,
        credentials: &UpstreamCredentials,
        identity: &str,
        client: &OAuthClient,
        redirect: &Url,
    ) -> Result<FlowStart, CredentialError> {
        let store = self.store()?;
        let id = crate::seal::random_token(32);
        let (url, verifier) = client.authorization_url(
            redirect,
            credentials.scopes(),
            Some(credentials.resource()),
            "pending",
        )?;
        let sealed = Sealed {
            u: credentials.upstream().to_string(),
            i: identity.to_owned(),
            v: verifier.expose().to_owned(),
            r: redirect.to_string(),
            t: unix_ms(SystemTime::now()),
            n: id.clone(),
        };
        let payload = serde_json::to_vec(&sealed).expect("the state serializes");
        let state = store.seal(PURPOSE, &payload);
        tracing::info!(upstream = %credentials.upstream(), client = identity, "authorization flow started");
        Ok(FlowStart {
            url: with_state(url, &state),
            elicitation_id: id,
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
        let refused = || {
            tracing::warn!(target: "mcpmux::audit", "an authorization callback with an unknown, used or expired state was refused");
            CallbackError::UnknownState
        };
        let store = self.store()?;
        let flow: Sealed = store
            .open_sealed(PURPOSE, state)
            .and_then(|plain| serde_json::from_slice(&plain).ok())
            .ok_or_else(refused)?;
        let age = unix_ms(SystemTime::now()).saturating_sub(flow.t);
        if age > FLOW_LIFETIME.as_millis() as u64 {
            return Err(refused());
        }
        let first = store
            .claim_once(&flow.n, FLOW_LIFETIME)
            .await
            .map_err(|e| CredentialError::Store(e.to_string()))?;
        if !first {
            return Err(refused());
        }
        let credentials = self.upstream(&flow.u).ok_or_else(refused)?;
        let upstream = credentials.upstream().clone();
        let identity: Arc<str> = flow.i.into();
        if let Some(error) = error {
            tracing::info!(target: "mcpmux::audit", %upstream, client = %identity, error, "the authorization server refused the user's authorization");
            return Err(CallbackError::Denied(error.chars().take(200).collect()));
        }
        let code = code.ok_or(CallbackError::NoCode)?;
        let redirect = Url::parse(&flow.r).map_err(|_| refused())?;
        let client = credentials.client().await?;
        let token = client
            .exchange_code(
                code,
                &Secret::new(flow.v),
                &redirect,
                Some(credentials.resource()),
            )
            .await
            .map_err(CredentialError::from)?;
        store
            .put(&upstream, &identity, &grant_of(&token))
            .await
            .map_err(|e| CredentialError::Store(e.to_string()))?;
        tracing::info!(target: "mcpmux::audit", %upstream, client = %identity, "the user connected their account");
        self.connected.send_modify(|n| *n += 1);
        Ok(Connected { upstream, identity })
    }

    /// Waits (until `deadline`) for `identity` to have a grant at
    /// `upstream`; true once it has. A grant made on another replica is
    /// seen at the deadline's last look, or as soon as this replica ends a
    /// flow (so waiting is for the replica that serves the callback).
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

/// `url` with its `state` parameter set to `state`.
fn with_state(mut url: Url, state: &str) -> Url {
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| k != "state")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    url.query_pairs_mut()
        .clear()
        .extend_pairs(pairs)
        .append_pair("state", state);
    url
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_replaces_any_other_state_parameter() {
        let url =
            Url::parse("https://as.test/authorize?client_id=c&state=pending&scope=a+b").unwrap();
        let url = with_state(url, "S");
        let states: Vec<String> = url
            .query_pairs()
            .filter(|(k, _)| k == "state")
            .map(|(_, v)| v.into_owned())
            .collect();
        assert_eq!(states, ["S"]);
        assert!(url.query_pairs().any(|(k, v)| k == "scope" && v == "a b"));
    }
}
