//! Who may ask the authorization server for tokens: hosts registered with
//! RFC 7591 at `/register` (kept in the state store), and hosts whose
//! `client_id` is the https URL of their Client ID Metadata Document,
//! fetched under strict limits (https only outside loopback, a size cap,
//! a time cap, no redirects), checked (its `client_id` must be its own
//! URL) and cached. [`Clients`] is also oxide-auth's `Registrar`: it binds
//! a request's redirect URI to a registered one, negotiates the scope and
//! authenticates confidential clients at the token endpoint.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use oxide_auth::primitives::registrar::{
    BoundClient, ClientUrl, ExactUrl, PreGrant, RegisteredUrl, RegistrarError,
};
use oxide_auth::primitives::scope::Scope;
use reqwest::Url;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use subtle::ConstantTimeEq as _;

use super::state::{Lifetime, StateError, StateStore, now_ms};
use crate::config::{Registration, sha256};
use crate::seal::random_token;

/// Documents kept in the cache at most; the oldest goes first.
const CACHE_CAP: usize = 1000;
/// Largest `/register` body read.
pub(crate) const MAX_REGISTRATION_BYTES: usize = 16 * 1024;

/// A client as the server knows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ClientRecord {
    pub client_id: String,
    #[serde(default)]
    pub client_name: Option<String>,
    pub redirect_uris: Vec<String>,
    /// SHA-256 (hex) of a confidential client's secret; none: public.
    #[serde(default)]
    pub secret_sha256: Option<String>,
    /// Whether the client came from a metadata document.
    #[serde(default)]
    pub metadata_document: bool,
    pub created_ms: u64,
}

/// Why a client cannot be used; the message is the RFC's
/// `error_description` and never holds a secret.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ClientError {
    #[error("unknown client_id")]
    Unknown,
    /// A metadata document that cannot be used.
    #[error("client metadata document: {0}")]
    Document(String),
    #[error("the client's state could not be read")]
    State,
}

/// Why `/register` refused: an RFC 7591 error, or a limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RegisterError {
    pub status: u16,
    pub error: &'static str,
    pub description: String,
}

impl RegisterError {
    fn metadata(description: impl Into<String>) -> Self {
        RegisterError {
            status: 400,
            error: "invalid_client_metadata",
            description: description.into(),
        }
    }

    fn redirect(description: impl Into<String>) -> Self {
        RegisterError {
            status: 400,
            error: "invalid_redirect_uri",
            description: description.into(),
        }
    }
}

/// What `/register` reads (RFC 7591 §2); unknown members are ignored.
#[derive(Deserialize)]
struct Requested {
    #[serde(default)]
    redirect_uris: Vec<String>,
    #[serde(default)]
    client_name: Option<String>,
    #[serde(default)]
    token_endpoint_auth_method: Option<String>,
    #[serde(default)]
    grant_types: Option<Vec<String>>,
    #[serde(default)]
    response_types: Option<Vec<String>>,
    #[serde(default)]
    scope: Option<String>,
}

/// A Client ID Metadata Document: the members that matter here.
#[derive(Deserialize)]
struct Document {
    client_id: String,
    #[serde(default)]
    client_name: Option<String>,
    #[serde(default)]
    redirect_uris: Vec<String>,
    #[serde(default)]
    token_endpoint_auth_method: Option<String>,
    #[serde(default)]
    client_secret: Option<Value>,
}

/// The registered clients and the document cache.
pub(crate) struct Clients {
    settings: Registration,
    scopes: Vec<String>,
    state: Arc<StateStore>,
    http: reqwest::Client,
    documents: Mutex<HashMap<String, (Instant, Arc<ClientRecord>)>>,
    registrations: DefaultKeyedRateLimiter<IpAddr>,
}

impl Clients {
    pub(crate) fn new(
        settings: &Registration,
        scopes: Vec<String>,
        state: Arc<StateStore>,
    ) -> Result<Clients, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(settings.metadata_timeout)
            .connect_timeout(settings.metadata_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let per_minute = NonZeroU32::new(settings.per_minute).unwrap_or(NonZeroU32::MIN);
        Ok(Clients {
            settings: settings.clone(),
            scopes,
            state,
            http,
            documents: Mutex::new(HashMap::new()),
            registrations: RateLimiter::keyed(Quota::per_minute(per_minute)),
        })
    }

    /// The client `client_id`: a registered one, or the metadata document
    /// at that URL.
    pub(crate) async fn resolve(&self, client_id: &str) -> Result<Arc<ClientRecord>, ClientError> {
        if client_id.starts_with("https://") || client_id.starts_with("http://") {
            if !self.settings.metadata_documents {
                return Err(ClientError::Document(
                    "this server does not accept client metadata documents; register at /register"
                        .into(),
                ));
            }
            return self.document(client_id).await;
        }
        let stored = self
            .state
            .get(&format!("client:{client_id}"))
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "oauth_server: a client could not be read");
                ClientError::State
            })?
            .ok_or(ClientError::Unknown)?;
        serde_json::from_str(&stored)
            .map(Arc::new)
            .map_err(|_| ClientError::State)
    }

    /// The document at `url`, from the cache or fetched now.
    async fn document(&self, url: &str) -> Result<Arc<ClientRecord>, ClientError> {
        if let Some((at, record)) = self.cache().get(url)
            && at.elapsed() < self.settings.metadata_cache
        {
            return Ok(record.clone());
        }
        let parsed = check_document_url(url).map_err(ClientError::Document)?;
        let record = Arc::new(
            self.fetch(parsed, url)
                .await
                .map_err(ClientError::Document)?,
        );
        let mut cache = self.cache();
        if cache.len() >= CACHE_CAP
            && let Some(oldest) = cache
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
        {
            cache.remove(&oldest);
        }
        cache.insert(url.to_owned(), (Instant::now(), record.clone()));
        Ok(record)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Arc<ClientRecord>)>> {
        self.documents.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn fetch(&self, url: Url, client_id: &str) -> Result<ClientRecord, String> {
        let limit = self.settings.metadata_max_bytes;
        let mut response = self
            .http
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    format!(
                        "not fetched within {}",
                        humantime::format_duration(self.settings.metadata_timeout)
                    )
                } else {
                    "could not be fetched".to_owned()
                }
            })?;
        if response.status() != reqwest::StatusCode::OK {
            return Err(format!("fetching it answered HTTP {}", response.status()));
        }
        let too_big = || format!("larger than {limit} bytes");
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(too_big());
        }
        let mut body = Vec::new();
        loop {
            let chunk = tokio::time::timeout(self.settings.metadata_timeout, response.chunk())
                .await
                .map_err(|_| "not read in time".to_owned())?
                .map_err(|_| "could not be read".to_owned())?;
            let Some(chunk) = chunk else { break };
            if body.len() + chunk.len() > limit {
                return Err(too_big());
            }
            body.extend_from_slice(&chunk);
        }
        let document: Document =
            serde_json::from_slice(&body).map_err(|_| "is not a JSON client metadata document")?;
        if document.client_id != client_id {
            return Err("its client_id is not the URL it was fetched from".into());
        }
        if document.client_secret.is_some()
            || document
                .token_endpoint_auth_method
                .as_deref()
                .is_some_and(|m| m != "none")
        {
            return Err(
                "only public clients (token_endpoint_auth_method \"none\") are accepted".into(),
            );
        }
        if document.redirect_uris.is_empty() {
            return Err("it lists no redirect_uris".into());
        }
        for uri in &document.redirect_uris {
            check_redirect_uri(uri)?;
        }
        Ok(ClientRecord {
            client_id: document.client_id,
            client_name: document.client_name.map(|n| clip(&n, 200)),
            redirect_uris: document.redirect_uris,
            secret_sha256: None,
            metadata_document: true,
            created_ms: now_ms(),
        })
    }

    /// RFC 7591 registration of the JSON `body` from `address`, which
    /// presented `bearer` (the initial access token, if one is required).
    pub(crate) async fn register(
        &self,
        body: &[u8],
        address: IpAddr,
        bearer: Option<&str>,
    ) -> Result<Value, RegisterError> {
        if !self.settings.dynamic {
            return Err(RegisterError {
                status: 404,
                error: "invalid_request",
                description: "dynamic client registration is off".into(),
            });
        }
        if let Some(digest) = &self.settings.initial_access_token {
            let presented = bearer.map(|t| sha256(t.as_bytes())).unwrap_or([0; 32]);
            if bearer.is_none() || !bool::from(presented.ct_eq(digest)) {
                return Err(RegisterError {
                    status: 401,
                    error: "invalid_token",
                    description: "registration needs the initial access token".into(),
                });
            }
        }
        if self.registrations.check_key(&address).is_err() {
            return Err(RegisterError {
                status: 429,
                error: "slow_down",
                description: format!(
                    "at most {} registrations a minute from one address",
                    self.settings.per_minute
                ),
            });
        }
        if self.registrations.len() > 10_000 {
            self.registrations.retain_recent();
        }
        let requested: Requested = serde_json::from_slice(body).map_err(|e| {
            RegisterError::metadata(format!("the body is not client metadata: {e}"))
        })?;
        if requested.redirect_uris.is_empty() {
            return Err(RegisterError::redirect("redirect_uris is required"));
        }
        for uri in &requested.redirect_uris {
            check_redirect_uri(uri).map_err(RegisterError::redirect)?;
        }
        let method = requested
            .token_endpoint_auth_method
            .as_deref()
            .unwrap_or("client_secret_basic");
        if !matches!(
            method,
            "none" | "client_secret_basic" | "client_secret_post"
        ) {
            return Err(RegisterError::metadata(format!(
                "token_endpoint_auth_method {method:?} is not none, client_secret_basic or client_secret_post"
            )));
        }
        let grant_types = requested
            .grant_types
            .unwrap_or_else(|| vec!["authorization_code".into()]);
        if let Some(other) = grant_types
            .iter()
            .find(|g| !matches!(g.as_str(), "authorization_code" | "refresh_token"))
        {
            return Err(RegisterError::metadata(format!(
                "grant type {other:?} is not supported (authorization_code, refresh_token)"
            )));
        }
        let response_types = requested
            .response_types
            .unwrap_or_else(|| vec!["code".into()]);
        if response_types.iter().any(|r| r != "code") {
            return Err(RegisterError::metadata(
                "only the response type code is supported",
            ));
        }
        let client_id = format!("mcpmux-{}", random_token(16));
        let secret = (method != "none").then(|| random_token(32));
        let record = ClientRecord {
            client_id: client_id.clone(),
            client_name: requested.client_name.as_deref().map(|n| clip(n, 200)),
            redirect_uris: requested.redirect_uris.clone(),
            secret_sha256: secret.as_ref().map(|s| hex(&sha256(s.as_bytes()))),
            metadata_document: false,
            created_ms: now_ms(),
        };
        let value = serde_json::to_string(&record).expect("a client serializes");
        self.state
            .put(&format!("client:{client_id}"), &value, Lifetime::Long(None))
            .await
            .map_err(|e: StateError| {
                tracing::warn!(error = %e, "oauth_server: a registration could not be stored");
                RegisterError {
                    status: 503,
                    error: "temporarily_unavailable",
                    description: "the registration could not be stored".into(),
                }
            })?;
        tracing::info!(target: "mcpmux::audit", client_id = %client_id, client_name = ?record.client_name, "oauth_server: client registered");
        let mut answer = json!({
            "client_id": client_id,
            "client_id_issued_at": record.created_ms / 1000,
            "redirect_uris": requested.redirect_uris,
            "token_endpoint_auth_method": method,
            "grant_types": grant_types,
            "response_types": response_types,
        });
        if let Some(name) = &record.client_name {
            answer["client_name"] = json!(name);
        }
        if let Some(scope) = requested.scope {
            answer["scope"] = json!(self.negotiated(Some(&scope)));
        }
        if let Some(secret) = secret {
            answer["client_secret"] = json!(secret);
            answer["client_secret_expires_at"] = json!(0);
        }
        Ok(answer)
    }

    /// The scope granted for `requested`: the supported ones it names
    /// (and `offline_access`), or all supported ones when it names none.
    pub(crate) fn negotiated(&self, requested: Option<&str>) -> String {
        let wanted: Vec<&str> = requested
            .unwrap_or_default()
            .split_whitespace()
            .filter(|s| self.scopes.iter().any(|k| k == s) || *s == "offline_access")
            .collect();
        if wanted.iter().all(|s| *s == "offline_access") {
            return self.scopes.join(" ");
        }
        wanted.join(" ")
    }

    /// Whether `redirect_uri` is one of `client`'s (loopback URIs match
    /// on any port, RFC 8252 §7.3).
    pub(crate) fn redirect_allowed(client: &ClientRecord, redirect_uri: &str) -> bool {
        client
            .redirect_uris
            .iter()
            .any(|registered| same_redirect(registered, redirect_uri))
    }
}

/// Checks a metadata document URL: https (or http to loopback), a path,
/// no fragment, no credentials, no dot segments.
fn check_document_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|_| "the client_id is not a URL".to_owned())?;
    let secure = url.scheme() == "https" || (url.scheme() == "http" && is_loopback(&url));
    if !secure {
        return Err("the client_id URL must be https (http only on loopback)".into());
    }
    if url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
        return Err("the client_id URL must not have a fragment or credentials".into());
    }
    if url.path() == "/" || text.contains("/./") || text.contains("/../") {
        return Err("the client_id URL must have a path without dot segments".into());
    }
    Ok(url)
}

/// A redirect URI a client may register: absolute, no fragment, and not
/// plain http except to loopback (private-use schemes are fine).
fn check_redirect_uri(text: &str) -> Result<(), String> {
    let url = Url::parse(text).map_err(|_| format!("redirect URI {text:?} is not absolute"))?;
    if url.fragment().is_some() {
        return Err(format!("redirect URI {text:?} has a fragment"));
    }
    if url.scheme() == "http" && !is_loopback(&url) {
        return Err(format!(
            "redirect URI {text:?} is plain http to a host that is not loopback"
        ));
    }
    if matches!(url.scheme(), "javascript" | "data" | "file") {
        return Err(format!("redirect URI {text:?} has a forbidden scheme"));
    }
    Ok(())
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// Exact match, or for loopback http the same URI on another port.
fn same_redirect(registered: &str, requested: &str) -> bool {
    if registered == requested {
        return true;
    }
    let (Ok(mut a), Ok(mut b)) = (Url::parse(registered), Url::parse(requested)) else {
        return false;
    };
    if a.scheme() != "http" || !is_loopback(&a) || !is_loopback(&b) {
        return false;
    }
    let _ = a.set_port(None);
    let _ = b.set_port(None);
    a == b
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn clip(text: &str, max: usize) -> String {
    text.chars().filter(|c| !c.is_control()).take(max).collect()
}

#[async_trait::async_trait]
impl oxide_auth_async::primitives::Registrar for Clients {
    async fn bound_redirect<'a>(
        &self,
        bound: ClientUrl<'a>,
    ) -> Result<BoundClient<'a>, RegistrarError> {
        let client = self
            .resolve(&bound.client_id)
            .await
            .map_err(|_| RegistrarError::Unspecified)?;
        let chosen = match &bound.redirect_uri {
            Some(uri) if Self::redirect_allowed(&client, uri.as_str()) => uri.as_ref().clone(),
            Some(_) => return Err(RegistrarError::Unspecified),
            None => match client.redirect_uris.as_slice() {
                [only] => ExactUrl::new(only.clone()).map_err(|_| RegistrarError::Unspecified)?,
                _ => return Err(RegistrarError::Unspecified),
            },
        };
        Ok(BoundClient {
            client_id: bound.client_id,
            redirect_uri: Cow::Owned(RegisteredUrl::Exact(chosen)),
        })
    }

    async fn negotiate<'a>(
        &self,
        client: BoundClient<'a>,
        scope: Option<Scope>,
    ) -> Result<PreGrant, RegistrarError> {
        let scope = self
            .negotiated(scope.map(|s| s.to_string()).as_deref())
            .parse()
            .map_err(|_| RegistrarError::PrimitiveError)?;
        Ok(PreGrant {
            client_id: client.client_id.into_owned(),
            redirect_uri: client.redirect_uri.into_owned(),
            scope,
        })
    }

    async fn check(
        &self,
        client_id: &str,
        passphrase: Option<&[u8]>,
    ) -> Result<(), RegistrarError> {
        let client = self
            .resolve(client_id)
            .await
            .map_err(|_| RegistrarError::Unspecified)?;
        match (&client.secret_sha256, passphrase) {
            (None, None) => Ok(()),
            (Some(digest), Some(secret))
                if bool::from(hex(&sha256(secret)).as_bytes().ct_eq(digest.as_bytes())) =>
            {
                Ok(())
            }
            _ => Err(RegistrarError::Unspecified),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{check_document_url, check_redirect_uri, same_redirect};

    #[test]
    fn document_urls_must_be_https_with_a_path() {
        assert!(check_document_url("https://host.example/client.json").is_ok());
        assert!(check_document_url("http://127.0.0.1:9/c.json").is_ok());
        assert!(check_document_url("http://host.example/client.json").is_err());
        assert!(check_document_url("https://host.example/").is_err());
        assert!(check_document_url("https://u:p@host.example/c").is_err());
        assert!(check_document_url("https://host.example/a/../c").is_err());
    }

    #[test]
    fn loopback_redirects_match_on_any_port_and_others_exactly() {
        assert!(same_redirect(
            "http://127.0.0.1/cb",
            "http://127.0.0.1:4711/cb"
        ));
        assert!(!same_redirect(
            "http://127.0.0.1/cb",
            "http://127.0.0.1:4711/other"
        ));
        assert!(!same_redirect(
            "https://app.example/cb",
            "https://app.example/cb?x=1"
        ));
        assert!(same_redirect("cursor://auth/cb", "cursor://auth/cb"));
        assert!(check_redirect_uri("http://evil.example/cb").is_err());
        assert!(check_redirect_uri("https://app.example/cb#x").is_err());
        assert!(check_redirect_uri("vscode://callback").is_ok());
    }
}
