//! The gateway's own OAuth 2.1 authorization server (`auth.oauth_server`),
//! for hosts that log in the way the MCP spec says (RFC 9728 metadata,
//! then client registration and the authorization code flow with PKCE)
//! while the company's identity provider accepts neither client metadata
//! documents nor open registration. mcpmux is the authorization server
//! hosts see; the user logs in at the provider; the gateway's tokens carry
//! the identity the provider named, and the existing policy applies.
//!
//! The parts: [`state`] (what outlives a request: file or Redis),
//! [`keys`] (signing keys and `/jwks.json`), [`clients`] (RFC 7591
//! registration and Client ID Metadata Documents), [`provider`] (the login
//! leg, on `openidconnect`), [`grants`] (codes, tokens, families,
//! consents) and [`flow`] (the flows, run by oxide-auth). This file ties
//! them into the steps the HTTP routes call; it writes no HTTP itself.

mod answer;
mod clients;
mod flow;
mod grants;
mod keys;
pub(crate) mod operator;
mod provider;
mod state;

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::{AuthError, Identity, OwnTokens};
use crate::config::{AuthSettings, Consent, CredentialsConfig, OAuthServerConfig, Secret};
pub(crate) use answer::Answer;
use answer::{answer_of, basic_credentials, error_redirect, single_valued};
pub(crate) use clients::MAX_REGISTRATION_BYTES;
use flow::{Decision, Parts};
pub(crate) use grants::GrantSummary;
use grants::{AccessClaims, Grants, Owner};
use keys::KeyRing;
use provider::{Provider, User};
use state::{Lifetime, StateStore};

/// The path the provider sends the browser back to.
pub(crate) const LOGIN_CALLBACK: &str = "/oauth/login/callback";
/// The path of the consent form.
pub(crate) const CONSENT: &str = "/oauth/consent";

/// Why the authorization server cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SetupError {
    #[error(transparent)]
    State(#[from] state::StateError),
    #[error(transparent)]
    Keys(#[from] keys::KeyError),
    #[error("the HTTP client cannot be built: {0}")]
    Http(String),
}

/// A login at the provider in progress.
#[derive(Serialize, Deserialize)]
struct PendingLogin {
    query: HashMap<String, String>,
    verifier: String,
    nonce: String,
}

/// A consent being asked.
#[derive(Serialize, Deserialize)]
struct PendingConsent {
    query: HashMap<String, String>,
    user: User,
}

/// The authorization server. Built once per `auth.oauth_server` config.
pub(crate) struct OAuthServer {
    config: OAuthServerConfig,
    /// `auth.resource`, when configured.
    resource: Option<String>,
    scopes: Vec<String>,
    listening: OnceLock<String>,
    state: Arc<StateStore>,
    clients: clients::Clients,
    grants: Grants,
    provider: Provider,
}

impl std::fmt::Debug for OAuthServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthServer")
            .field("issuer", &self.issuer())
            .finish_non_exhaustive()
    }
}

impl OAuthServer {
    /// The server for `settings.oauth_server` (none when it is off), its
    /// key refresh running until `shutdown`.
    pub(crate) fn start(
        settings: &AuthSettings,
        credentials: &CredentialsConfig,
        session_store: Option<&Secret>,
        shutdown: &CancellationToken,
        tasks: &TaskTracker,
    ) -> Result<Option<Arc<OAuthServer>>, SetupError> {
        let Some(config) = &settings.oauth_server else {
            return Ok(None);
        };
        let state = Arc::new(match session_store {
            Some(url) => StateStore::redis(url.expose())?,
            None => StateStore::file(&config.state_path)?,
        });
        let keys = Arc::new(match (&credentials.key, config.signing_keys.is_empty()) {
            (Some(key), true) => KeyRing::generated(
                state.clone(),
                key,
                &credentials.previous_keys,
                config.key_rotation,
                config.access_token_ttl,
            ),
            _ => KeyRing::configured(&config.signing_keys)?,
        });
        let mut scopes = settings.scopes_supported.clone();
        if scopes.is_empty() {
            scopes.push("mcp".into());
        }
        let server = Arc::new(OAuthServer {
            clients: clients::Clients::new(&config.registration, scopes.clone(), state.clone())
                .map_err(|e| SetupError::Http(e.to_string()))?,
            grants: Grants::new(
                state.clone(),
                keys.clone(),
                config.access_token_ttl,
                config.refresh_token_ttl,
                config.code_ttl,
            ),
            provider: Provider::new(&config.provider, &config.claims)
                .map_err(|e| SetupError::Http(e.to_string()))?,
            config: config.clone(),
            resource: settings.resource.clone(),
            scopes,
            listening: OnceLock::new(),
            state,
        });
        spawn_key_refresh(keys, shutdown.clone(), tasks);
        Ok(Some(server))
    }

    /// Whether this server was built from `settings` (a reload that does
    /// not change it keeps it).
    pub(crate) fn built_from(&self, settings: &AuthSettings) -> bool {
        settings.oauth_server.as_ref() == Some(&self.config)
            && settings.resource == self.resource
            && (settings.scopes_supported == self.scopes
                || (settings.scopes_supported.is_empty() && self.scopes == ["mcp"]))
    }

    /// Sets the default issuer once the gateway listens.
    pub(crate) fn listening_on(&self, addr: SocketAddr) {
        let _ = self.listening.set(format!("http://{addr}"));
    }

    /// The issuer: configured, else `http://<listen address>`.
    pub(crate) fn issuer(&self) -> String {
        if let Some(issuer) = &self.config.issuer {
            return issuer.clone();
        }
        self.listening
            .get()
            .cloned()
            .unwrap_or_else(|| "http://localhost".into())
    }

    fn default_resource(&self) -> String {
        self.resource
            .clone()
            .unwrap_or_else(|| format!("{}/mcp", self.issuer()))
    }

    /// Whether `resource` is one of the gateway's: the configured one or
    /// one of its endpoints (`{resource}/<name>`), or (none configured) an
    /// http(s) URL of its MCP path.
    fn accepts(&self) -> Arc<dyn Fn(&str) -> bool + Send + Sync> {
        let configured = self.resource.clone();
        Arc::new(move |resource: &str| match &configured {
            Some(own) => {
                resource == own
                    || resource
                        .strip_prefix(own.trim_end_matches('/'))
                        .and_then(|rest| rest.strip_prefix('/'))
                        .is_some_and(|name| {
                            !name.is_empty()
                                && name.chars().all(|c| {
                                    c.is_ascii_lowercase()
                                        || c.is_ascii_digit()
                                        || c == '-'
                                        || c == '_'
                                })
                        })
            }
            None => reqwest::Url::parse(resource).is_ok_and(|u| {
                matches!(u.scheme(), "http" | "https")
                    && u.query().is_none()
                    && u.fragment().is_none()
                    && (u.path() == "/mcp" || u.path().starts_with("/mcp/"))
            }),
        })
    }

    fn parts<'a>(&'a self, issuer: &'a str, default_resource: &'a str) -> Parts<'a> {
        Parts {
            clients: &self.clients,
            grants: &self.grants,
            issuer,
            default_resource,
            accepts: self.accepts(),
        }
    }

    /// RFC 8414 metadata.
    pub(crate) fn metadata(&self) -> Value {
        let issuer = self.issuer();
        let algorithms: Vec<String> = self
            .grants
            .keys()
            .algorithms()
            .iter()
            .map(|a| format!("{a:?}"))
            .collect();
        let mut document = json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/authorize"),
            "token_endpoint": format!("{issuer}/token"),
            "jwks_uri": format!("{issuer}/jwks.json"),
            "revocation_endpoint": format!("{issuer}/revoke"),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
            "revocation_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
            "scopes_supported": self.scopes,
            "client_id_metadata_document_supported": self.config.registration.metadata_documents,
            "authorization_response_iss_parameter_supported": false,
            "access_token_signing_alg_values_supported": algorithms,
        });
        if self.config.registration.dynamic {
            document["registration_endpoint"] = json!(format!("{issuer}/register"));
        }
        document
    }

    /// The public signing keys.
    pub(crate) fn jwks(&self) -> Value {
        serde_json::to_value(self.grants.keys().jwks()).unwrap_or_else(|_| json!({"keys": []}))
    }

    /// `GET /authorize`: checks the request, then sends the user to log in.
    pub(crate) async fn authorize(&self, pairs: Vec<(String, String)>) -> Answer {
        let Some(query) = single_valued(pairs) else {
            return Answer::error_page(400, "invalid_request", "a parameter is repeated");
        };
        // Client and redirect URI first: with either wrong, nothing is
        // sent to the redirect URI (RFC 6749 §4.1.2.1).
        let Some(client_id) = query.get("client_id") else {
            return Answer::error_page(400, "invalid_request", "client_id is missing");
        };
        let client = match self.clients.resolve(client_id).await {
            Ok(client) => client,
            Err(e) => return Answer::error_page(400, "invalid_client", &e.to_string()),
        };
        match query.get("redirect_uri") {
            Some(uri) if !clients::Clients::redirect_allowed(&client, uri) => {
                return Answer::error_page(
                    400,
                    "invalid_request",
                    "redirect_uri is not one of the client's redirect URIs",
                );
            }
            None if client.redirect_uris.len() != 1 => {
                return Answer::error_page(400, "invalid_request", "redirect_uri is missing");
            }
            _ => {}
        }
        let issuer = self.issuer();
        let resource = self.default_resource();
        let parts = self.parts(&issuer, &resource);
        let (response, checked) = match parts.authorize(query.clone(), Decision::Check).await {
            Ok(done) => done,
            Err(e) => return self.failed(&e),
        };
        let Some(checked) = checked else {
            return answer_of(response);
        };
        let callback = format!("{issuer}{LOGIN_CALLBACK}");
        let start = match self.provider.begin(&callback).await {
            Ok(start) => start,
            Err(e) => {
                tracing::warn!(error = %e, "oauth_server: the identity provider is not reachable");
                return error_redirect(
                    &checked,
                    &query,
                    "temporarily_unavailable",
                    "the identity provider cannot be reached",
                );
            }
        };
        let pending = PendingLogin {
            query,
            verifier: start.verifier,
            nonce: start.nonce,
        };
        let value = serde_json::to_string(&pending).expect("a login serializes");
        if let Err(e) = self
            .state
            .put(
                &format!("login:{}", start.state),
                &value,
                Lifetime::Short(self.config.login_timeout),
            )
            .await
        {
            tracing::warn!(error = %e, "oauth_server: a login could not be stored");
            return error_redirect(
                &checked,
                &pending.query,
                "temporarily_unavailable",
                "the login cannot be started now",
            );
        }
        Answer::Redirect(start.url.to_string())
    }

    /// `GET /oauth/login/callback`: the provider's answer.
    pub(crate) async fn login_callback(&self, pairs: Vec<(String, String)>) -> Answer {
        let Some(params) = single_valued(pairs) else {
            return Answer::error_page(400, "invalid_request", "a parameter is repeated");
        };
        let Some(state) = params.get("state") else {
            return Answer::error_page(
                400,
                "invalid_request",
                "the provider's answer has no state",
            );
        };
        let pending = match self.state.take(&format!("login:{state}")).await {
            Ok(Some(value)) => serde_json::from_str::<PendingLogin>(&value).ok(),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "oauth_server: a login could not be read");
                return Answer::error_page(
                    503,
                    "temporarily_unavailable",
                    "the login cannot be read now; start again",
                );
            }
        };
        let Some(pending) = pending else {
            return Answer::error_page(
                400,
                "invalid_request",
                "this login expired or was already completed; start again from the application",
            );
        };
        if params.contains_key("error") {
            return self.decide(pending.query, Decision::Deny).await;
        }
        let Some(code) = params.get("code") else {
            return Answer::error_page(400, "invalid_request", "the provider's answer has no code");
        };
        let callback = format!("{}{LOGIN_CALLBACK}", self.issuer());
        let user = match self
            .provider
            .finish(&callback, code, &pending.verifier, &pending.nonce)
            .await
        {
            Ok(user) => user,
            Err(e) => {
                tracing::warn!(target: "mcpmux::audit", error = %e, "oauth_server: a login at the identity provider failed");
                return Answer::error_page(502, "login_failed", &e.to_string());
            }
        };
        let client_id = pending.query.get("client_id").cloned().unwrap_or_default();
        if self.config.consent == Consent::Remember
            && self.grants.consented(&user.client, &client_id).await
        {
            return self.grant(pending.query, user).await;
        }
        let id = crate::seal::random_token(24);
        let asking = PendingConsent {
            query: pending.query,
            user,
        };
        let value = serde_json::to_string(&asking).expect("a consent serializes");
        if let Err(e) = self
            .state
            .put(
                &format!("asking:{id}"),
                &value,
                Lifetime::Short(self.config.login_timeout),
            )
            .await
        {
            tracing::warn!(error = %e, "oauth_server: a consent could not be stored");
            return Answer::error_page(
                503,
                "temporarily_unavailable",
                "the consent cannot be asked now; start again",
            );
        }
        self.consent_page(&id, &asking).await
    }

    async fn consent_page(&self, id: &str, asking: &PendingConsent) -> Answer {
        let client_id = asking.query.get("client_id").cloned().unwrap_or_default();
        let name = match self.clients.resolve(&client_id).await {
            Ok(c) => c.client_name.clone().unwrap_or_else(|| client_id.clone()),
            Err(_) => client_id.clone(),
        };
        let redirect = asking
            .query
            .get("redirect_uri")
            .cloned()
            .unwrap_or_default();
        let e = |t: &str| html_escape::encode_text(t).into_owned();
        Answer::Page {
            status: 200,
            title: format!("mcpmux: allow {name}?"),
            html: format!(
                "<h1>Allow {name} to use mcpmux as {user}?</h1>\
                 <p>The application <code>{client}</code> will call this gateway's tools \
                 with your identity. It receives the answer at <code>{redirect}</code>.</p>\
                 <form method=\"post\" action=\"{CONSENT}\">\
                 <input type=\"hidden\" name=\"request\" value=\"{id}\">\
                 <button type=\"submit\" name=\"decision\" value=\"allow\">Allow</button> \
                 <button type=\"submit\" name=\"decision\" value=\"deny\">Deny</button>\
                 </form>",
                name = e(&name),
                user = e(&asking.user.client),
                client = e(&client_id),
                redirect = e(&redirect),
                id = e(id),
            ),
        }
    }

    /// `POST /oauth/consent`: the user's answer.
    pub(crate) async fn consent(&self, pairs: Vec<(String, String)>) -> Answer {
        let Some(form) = single_valued(pairs) else {
            return Answer::error_page(400, "invalid_request", "a parameter is repeated");
        };
        let Some(id) = form.get("request") else {
            return Answer::error_page(400, "invalid_request", "the form has no request");
        };
        let asking = match self.state.take(&format!("asking:{id}")).await {
            Ok(Some(value)) => serde_json::from_str::<PendingConsent>(&value).ok(),
            _ => None,
        };
        let Some(asking) = asking else {
            return Answer::error_page(
                400,
                "invalid_request",
                "this consent expired or was already answered; start again from the application",
            );
        };
        match form.get("decision").map(String::as_str) {
            Some("allow") => {
                let client_id = asking.query.get("client_id").cloned().unwrap_or_default();
                if self.config.consent == Consent::Remember {
                    self.grants
                        .remember_consent(&asking.user.client, &client_id)
                        .await;
                }
                self.grant(asking.query, asking.user).await
            }
            _ => self.decide(asking.query, Decision::Deny).await,
        }
    }

    /// A code for `user`, sent to the client.
    async fn grant(&self, query: HashMap<String, String>, user: User) -> Answer {
        let owner = Owner {
            user,
            family: crate::seal::random_token(18),
        };
        tracing::info!(target: "mcpmux::audit", user = %owner.user.client, client_id = ?query.get("client_id"), "oauth_server: user authorized a client");
        self.decide(query, Decision::Grant(owner.encode())).await
    }

    async fn decide(&self, query: HashMap<String, String>, decision: Decision) -> Answer {
        let issuer = self.issuer();
        let resource = self.default_resource();
        match self
            .parts(&issuer, &resource)
            .authorize(query, decision)
            .await
        {
            Ok((response, _)) => answer_of(response),
            Err(e) => self.failed(&e),
        }
    }

    fn failed(&self, e: &flow::FlowError) -> Answer {
        tracing::warn!(error = %e, "oauth_server: a flow failed");
        Answer::error_page(
            500,
            "server_error",
            "the authorization server failed; try again",
        )
    }

    /// `POST /token`.
    pub(crate) async fn token(
        &self,
        pairs: Vec<(String, String)>,
        authorization: Option<String>,
    ) -> Answer {
        let Some(body) = single_valued(pairs) else {
            return Answer::json_error(400, "invalid_request", "a parameter is repeated");
        };
        match body.get("grant_type").map(String::as_str) {
            Some("authorization_code" | "refresh_token") => {}
            Some(other) => {
                return Answer::json_error(
                    400,
                    "unsupported_grant_type",
                    &format!("grant_type {other:?} is not authorization_code or refresh_token"),
                );
            }
            None => return Answer::json_error(400, "invalid_request", "grant_type is missing"),
        }
        let issuer = self.issuer();
        let resource = self.default_resource();
        match self
            .parts(&issuer, &resource)
            .token(body, authorization)
            .await
        {
            Ok((response, pkce_failed)) => {
                let answer = answer_of(response);
                match answer {
                    Answer::Json { status: 400, .. } if pkce_failed => Answer::json_error(
                        400,
                        "invalid_grant",
                        "the code_verifier does not match the code_challenge",
                    ),
                    answer => answer,
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "oauth_server: a token request failed");
                Answer::json_error(500, "server_error", "the token could not be issued")
            }
        }
    }

    /// `POST /register` (RFC 7591).
    pub(crate) async fn register(
        &self,
        body: &[u8],
        address: IpAddr,
        bearer: Option<&str>,
    ) -> Answer {
        match self.clients.register(body, address, bearer).await {
            Ok(client) => Answer::Json {
                status: 201,
                body: client,
                www_authenticate: None,
            },
            Err(e) => Answer::Json {
                status: e.status,
                body: json!({"error": e.error, "error_description": e.description}),
                www_authenticate: (e.status == 401)
                    .then(|| "Bearer error=\"invalid_token\"".to_owned()),
            },
        }
    }

    /// `POST /revoke` (RFC 7009): always 200 for a well-formed request.
    pub(crate) async fn revoke(
        &self,
        pairs: Vec<(String, String)>,
        authorization: Option<&str>,
    ) -> Answer {
        let Some(body) = single_valued(pairs) else {
            return Answer::json_error(400, "invalid_request", "a parameter is repeated");
        };
        let Some(token) = body.get("token") else {
            return Answer::json_error(400, "invalid_request", "token is missing");
        };
        let (client_id, secret) = match basic_credentials(authorization) {
            Some((id, secret)) => (Some(id), Some(secret)),
            None => (
                body.get("client_id").cloned(),
                body.get("client_secret").cloned(),
            ),
        };
        let Some(client_id) = client_id else {
            return Answer::json_error(401, "invalid_client", "the client is not identified");
        };
        use oxide_auth_async::primitives::Registrar as _;
        if self
            .clients
            .check(&client_id, secret.as_deref().map(str::as_bytes))
            .await
            .is_err()
        {
            return Answer::json_error(401, "invalid_client", "client authentication failed");
        }
        if let Err(e) = self.grants.revoke_token(token, &client_id).await {
            tracing::warn!(error = %e, "oauth_server: a revocation could not be stored");
            return Answer::json_error(503, "temporarily_unavailable", "try again");
        }
        Answer::Json {
            status: 200,
            body: json!({}),
            www_authenticate: None,
        }
    }

    /// The live grants (the operator's list).
    pub(crate) async fn grants(&self, user: Option<&str>) -> Result<Vec<GrantSummary>, String> {
        self.grants.list(user).await.map_err(|e| e.to_string())
    }

    /// Revokes a user's grants (and consents); how many logins ended.
    pub(crate) async fn revoke_grants(
        &self,
        user: &str,
        client_id: Option<&str>,
    ) -> Result<usize, String> {
        self.grants
            .revoke_user(user, client_id)
            .await
            .map_err(|e| e.to_string())
    }

    /// Verifies one of the gateway's own access tokens for `resource`.
    async fn verify_own(&self, token: &str, resource: &str) -> Result<Identity, AuthError> {
        let invalid = |why: &str| AuthError::Invalid(why.to_owned());
        let header = jsonwebtoken::decode_header(token).map_err(|_| invalid("not a JWT"))?;
        let kid = header.kid.ok_or_else(|| invalid("no key id"))?;
        let key = self
            .grants
            .keys()
            .find(&kid)
            .await
            .ok_or_else(|| invalid("no key with the token's key id"))?;
        let mut validation = jsonwebtoken::Validation::new(key.alg);
        validation.set_issuer(&[self.issuer()]);
        validation.set_audience(&[resource]);
        validation.leeway = 30;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<AccessClaims>(token, &key.decoding, &validation)
            .map_err(|e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => {
                    invalid("the token has expired")
                }
                jsonwebtoken::errors::ErrorKind::InvalidAudience => {
                    invalid("the token is for another resource")
                }
                _ => invalid("the token did not verify"),
            })?;
        let claims = data.claims;
        if !self.grants.family_live(&claims.gid).await {
            return Err(invalid("the grant behind the token was revoked"));
        }
        let mut scopes: Vec<String> = claims.scope.split_whitespace().map(str::to_owned).collect();
        for group in claims.groups {
            if !scopes.contains(&group) {
                scopes.push(group);
            }
        }
        Ok(Identity::new(claims.sub, scopes))
    }
}

impl OwnTokens for OAuthServer {
    fn issued_by_me(&self, kid: &str) -> bool {
        self.grants.keys().knows(kid)
    }

    fn verify<'a>(
        &'a self,
        token: &'a str,
        resource: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Identity, AuthError>> + Send + 'a>> {
        Box::pin(self.verify_own(token, resource))
    }
}

/// Loads (and rotates) generated keys now and on their interval.
fn spawn_key_refresh(keys: Arc<KeyRing>, shutdown: CancellationToken, tasks: &TaskTracker) {
    let every = keys.refresh_every();
    let refresh = async move {
        if let Err(e) = keys.refresh().await {
            tracing::error!(error = %e, "oauth_server: signing keys are not available yet");
        }
        let Some(every) = every else { return };
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Err(e) = keys.refresh().await {
                        tracing::warn!(error = %e, "oauth_server: signing keys could not be refreshed");
                    }
                }
                () = shutdown.cancelled() => return,
            }
        }
    };
    tasks.spawn(tracing::Instrument::instrument(
        refresh,
        tracing::info_span!("oauth_keys"),
    ));
}
