//! OAuth 2.0 as a client of an upstream's authorization server: discovery
//! (RFC 9728 resource metadata, RFC 8414 / OpenID server metadata), dynamic
//! registration (RFC 7591), authorization code with PKCE S256, client
//! credentials, refresh, token exchange (RFC 8693) and revocation (RFC 7009).
//!
//! The flows the `oauth2` crate knows run through it, over the gateway's
//! reqwest client ([`OAuthClient::post`] is its HTTP client). Token exchange
//! and revocation are the single form POSTs their RFCs define, built here
//! with the same client authentication. Every body read is capped, every
//! endpoint must be https unless it is on loopback, and no error carries a
//! token, secret or code: only the server's `error`/`error_description`,
//! status codes and short snippets, with whatever was sent scrubbed out.
//! Discovery and registration live in [`discovery`]. Nothing here spawns;
//! each call runs on the task that awaits it.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use oauth2::basic::{BasicClient, BasicErrorResponse, BasicTokenResponse};
use oauth2::http::{self, HeaderValue, StatusCode, header};
use oauth2::url::form_urlencoded;
use oauth2::{
    AsyncHttpClient, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointNotSet,
    EndpointSet, HttpRequest, HttpResponse, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl,
    RefreshToken, RequestTokenError, Scope, TokenResponse as _, TokenUrl,
};
use reqwest::Url;

use crate::config::Secret;

mod discovery;

pub(crate) use discovery::{authorization_server, protected_resource, register};

/// Most bytes read from a metadata, registration or revocation answer.
const METADATA_LIMIT: usize = 64 * 1024;
/// Most bytes read from a token endpoint's answer.
const TOKEN_LIMIT: usize = 1024 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const TOTAL_TIMEOUT: Duration = Duration::from_secs(20);
const TOKEN_EXCHANGE_GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// Characters kept of a non-OAuth body, and of a server's `error_description`.
const SNIPPET_CHARS: usize = 120;
const DESCRIPTION_CHARS: usize = 300;

/// Where an authorization server takes requests.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Endpoints {
    pub issuer: Option<String>,
    pub authorization: Option<Url>,
    pub token: Url,
    pub registration: Option<Url>,
    pub revocation: Option<Url>,
}

/// How the gateway authenticates to the token endpoint: HTTP Basic
/// (`client_secret_basic`) with a secret, else `client_id` in the body
/// (a public client, `token_endpoint_auth_method` `none`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClientAuth {
    pub client_id: String,
    pub client_secret: Option<Secret>,
}

/// A token as the server issued it. `Debug` masks access and refresh.
#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub access: Secret,
    pub expires_at: Option<SystemTime>,
    pub refresh: Option<Secret>,
    pub scope: Option<String>,
}

impl Token {
    /// True if the token has no expiry, or more than `margin` left.
    pub(crate) fn fresh_for(&self, margin: Duration) -> bool {
        self.expires_at.is_none_or(|at| {
            at.duration_since(SystemTime::now())
                .is_ok_and(|left| left > margin)
        })
    }

    /// The token in `answer`; `sent_at` (when the request left) plus
    /// `expires_in` is its expiry, so the estimate errs early.
    fn issued(answer: &BasicTokenResponse, sent_at: SystemTime) -> Token {
        let scope = answer
            .scopes()
            .map(|scopes| {
                scopes
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .filter(|scope| !scope.is_empty());
        Token {
            access: Secret::new(answer.access_token().secret().clone()),
            expires_at: answer.expires_in().and_then(|d| sent_at.checked_add(d)),
            refresh: answer
                .refresh_token()
                .map(|r| Secret::new(r.secret().clone())),
            scope,
        }
    }
}

/// Why an OAuth operation failed. No variant holds a token, secret or code.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum OAuthError {
    /// The server answered with an OAuth error (RFC 6749 §5.2), e.g. invalid_grant.
    #[error(
        "the {endpoint} endpoint refused: {error}{}",
        description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default()
    )]
    Refused {
        /// `"token"`, `"registration"` or `"revocation"`.
        endpoint: &'static str,
        error: String,
        description: Option<String>,
    },
    /// The server could not be reached, timed out, or answered 5xx without
    /// an OAuth error: worth trying again later.
    #[error("authorization server unreachable: {0}")]
    Unreachable(String),
    /// It answered something that is not OAuth (status and a short snippet),
    /// or more than the cap allows.
    #[error("unexpected answer from the authorization server: {0}")]
    Malformed(String),
    /// Discovery found no usable authorization server, and why.
    #[error("OAuth discovery failed: {0}")]
    Discovery(String),
    /// An endpoint that is not https outside loopback.
    #[error("refusing an endpoint that is not https: {0}")]
    Insecure(String),
}

impl OAuthError {
    /// A `Refused` with `invalid_grant`: the grant (code, refresh token,
    /// subject token) is revoked or expired, so retrying it is useless.
    pub(crate) fn grant_refused(&self) -> bool {
        matches!(self, OAuthError::Refused { error, .. } if error == "invalid_grant")
    }
}

/// The `oauth2` client for one call: the token endpoint and credentials set.
type TokenClient =
    BasicClient<EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointSet>;

/// Talks to one authorization server as one client.
#[derive(Debug, Clone)]
pub(crate) struct OAuthClient {
    http: reqwest::Client,
    endpoints: Endpoints,
    client: ClientAuth,
}

impl OAuthClient {
    /// A client; the endpoints are checked (https) when a call uses them.
    pub(crate) fn new(http: reqwest::Client, endpoints: Endpoints, client: ClientAuth) -> Self {
        OAuthClient {
            http,
            endpoints,
            client,
        }
    }

    /// RFC 6749 §4.4: a token for the client itself.
    pub(crate) async fn client_credentials(
        &self,
        scopes: &[String],
        resource: Option<&str>,
    ) -> Result<Token, OAuthError> {
        let client = self.oauth2()?;
        let mut request = client
            .exchange_client_credentials()
            .add_scopes(scopes.iter().cloned().map(Scope::new));
        if let Some(resource) = resource {
            request = request.add_extra_param("resource", resource);
        }
        let scrub = self.scrub(&[]);
        let send = Adapter {
            client: self,
            endpoint: "token",
            limit: TOKEN_LIMIT,
            scrub: &scrub,
        };
        let sent_at = SystemTime::now();
        let answer = request
            .request_async(&send)
            .await
            .map_err(|e| token_error("token", e))?;
        Ok(Token::issued(&answer, sent_at))
    }

    /// RFC 8693: an access token for `subject_token`, which the server
    /// knows as `subject_token_type` (a `urn:ietf:params:oauth:token-type:*`).
    pub(crate) async fn token_exchange(
        &self,
        subject_token: &str,
        subject_token_type: &str,
        resource: Option<&str>,
        audience: Option<&str>,
        scopes: &[String],
    ) -> Result<Token, OAuthError> {
        let url = &self.endpoints.token;
        check_secure(url, "token endpoint")?;
        let scope = scopes.join(" ");
        let mut form = vec![
            ("grant_type", TOKEN_EXCHANGE_GRANT),
            ("subject_token", subject_token),
            ("subject_token_type", subject_token_type),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
        ];
        form.extend(resource.map(|r| ("resource", r)));
        form.extend(audience.map(|a| ("audience", a)));
        if !scope.is_empty() {
            form.push(("scope", &scope));
        }
        let request = self.form_request(url, &form)?;
        let scrub = self.scrub(&[subject_token]);
        let sent_at = SystemTime::now();
        let answer = self.post(request, "token", TOKEN_LIMIT, &scrub).await?;
        let parsed: BasicTokenResponse = serde_json::from_slice(answer.body()).map_err(|e| {
            OAuthError::Malformed(format!(
                "the token endpoint's answer is not a token response: {}",
                why(&e)
            ))
        })?;
        Ok(Token::issued(&parsed, sent_at))
    }

    /// The URL to send the user to, and the PKCE verifier to keep. Always
    /// S256; `state` is made by the caller.
    pub(crate) fn authorization_url(
        &self,
        redirect_uri: &Url,
        scopes: &[String],
        resource: Option<&str>,
        state: &str,
    ) -> Result<(Url, Secret), OAuthError> {
        let endpoint = self.endpoints.authorization.as_ref().ok_or_else(|| {
            OAuthError::Discovery("the authorization server has no authorization endpoint".into())
        })?;
        check_secure(endpoint, "authorization endpoint")?;
        let client = self
            .oauth2()?
            .set_auth_uri(AuthUrl::from_url(endpoint.clone()))
            .set_redirect_uri(RedirectUrl::from_url(redirect_uri.clone()));
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client
            .authorize_url(|| CsrfToken::new(state.to_owned()))
            .add_scopes(scopes.iter().cloned().map(Scope::new))
            .set_pkce_challenge(challenge);
        if let Some(resource) = resource {
            request = request.add_extra_param("resource", resource);
        }
        let (url, _state) = request.url();
        Ok((url, Secret::new(verifier.into_secret())))
    }

    /// RFC 6749 §4.1.3: the code the user came back with, for a token.
    pub(crate) async fn exchange_code(
        &self,
        code: &str,
        verifier: &Secret,
        redirect_uri: &Url,
        resource: Option<&str>,
    ) -> Result<Token, OAuthError> {
        let client = self.oauth2()?;
        let redirect = RedirectUrl::from_url(redirect_uri.clone());
        let mut request = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .set_pkce_verifier(PkceCodeVerifier::new(verifier.expose().to_owned()))
            .set_redirect_uri(std::borrow::Cow::Owned(redirect));
        if let Some(resource) = resource {
            request = request.add_extra_param("resource", resource);
        }
        let scrub = self.scrub(&[code, verifier.expose()]);
        let send = Adapter {
            client: self,
            endpoint: "token",
            limit: TOKEN_LIMIT,
            scrub: &scrub,
        };
        let sent_at = SystemTime::now();
        let answer = request
            .request_async(&send)
            .await
            .map_err(|e| token_error("token", e))?;
        Ok(Token::issued(&answer, sent_at))
    }

    /// A refresh; a response without a new refresh token keeps the old one
    /// in the returned Token.
    pub(crate) async fn refresh(
        &self,
        refresh_token: &Secret,
        scopes: &[String],
        resource: Option<&str>,
    ) -> Result<Token, OAuthError> {
        let client = self.oauth2()?;
        let old = RefreshToken::new(refresh_token.expose().to_owned());
        let mut request = client
            .exchange_refresh_token(&old)
            .add_scopes(scopes.iter().cloned().map(Scope::new));
        if let Some(resource) = resource {
            request = request.add_extra_param("resource", resource);
        }
        let scrub = self.scrub(&[refresh_token.expose()]);
        let send = Adapter {
            client: self,
            endpoint: "token",
            limit: TOKEN_LIMIT,
            scrub: &scrub,
        };
        let sent_at = SystemTime::now();
        let answer = request
            .request_async(&send)
            .await
            .map_err(|e| token_error("token", e))?;
        let mut token = Token::issued(&answer, sent_at);
        if token.refresh.is_none() {
            token.refresh = Some(refresh_token.clone());
        }
        Ok(token)
    }

    /// RFC 7009 revocation of an access token (or, with `refresh`, a
    /// refresh token), when the server has an endpoint (Ok(false) when it
    /// has none). oauth2's own revocation refuses http even on loopback,
    /// so this is the RFC's one form POST.
    pub(crate) async fn revoke(&self, token: &Secret, refresh: bool) -> Result<bool, OAuthError> {
        let Some(url) = &self.endpoints.revocation else {
            return Ok(false);
        };
        check_secure(url, "revocation endpoint")?;
        let hint = if refresh {
            "refresh_token"
        } else {
            "access_token"
        };
        let form = [("token", token.expose()), ("token_type_hint", hint)];
        let request = self.form_request(url, &form)?;
        let scrub = self.scrub(&[token.expose()]);
        self.post(request, "revocation", METADATA_LIMIT, &scrub)
            .await?;
        Ok(true)
    }

    /// The `oauth2` client for a token request (Basic auth with a secret,
    /// `client_id` in the body without one, as oauth2 does).
    fn oauth2(&self) -> Result<TokenClient, OAuthError> {
        check_secure(&self.endpoints.token, "token endpoint")?;
        let mut client = BasicClient::new(ClientId::new(self.client.client_id.clone()))
            .set_token_uri(TokenUrl::from_url(self.endpoints.token.clone()));
        if let Some(secret) = &self.client.client_secret {
            client = client.set_client_secret(ClientSecret::new(secret.expose().to_owned()));
        }
        Ok(client)
    }

    /// A form POST of `pairs` to `url` with the client's authentication,
    /// as oauth2 builds it: Basic with each part urlencoded (RFC 6749
    /// §2.3.1), or `client_id` in the body for a public client.
    fn form_request(&self, url: &Url, pairs: &[(&str, &str)]) -> Result<HttpRequest, OAuthError> {
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.extend_pairs(pairs);
        let mut request = http::Request::post(url.as_str())
            .header(header::ACCEPT, "application/json")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        match &self.client.client_secret {
            Some(secret) => {
                let id: String =
                    form_urlencoded::byte_serialize(self.client.client_id.as_bytes()).collect();
                let secret: String =
                    form_urlencoded::byte_serialize(secret.expose().as_bytes()).collect();
                let credential = STANDARD.encode(format!("{id}:{secret}"));
                let mut value = HeaderValue::try_from(format!("Basic {credential}"))
                    .expect("base64 is a valid header value");
                value.set_sensitive(true);
                request = request.header(header::AUTHORIZATION, value);
            }
            None => {
                form.append_pair("client_id", &self.client.client_id);
            }
        }
        request
            .body(form.finish().into_bytes())
            .map_err(|e| OAuthError::Malformed(format!("cannot build the request: {e}")))
    }

    /// What to scrub from anything the server echoes: the client secret
    /// and the `sent` grant material.
    fn scrub<'a>(&'a self, sent: &[&'a str]) -> Vec<&'a str> {
        let secret = self.client.client_secret.as_ref().map(Secret::expose);
        secret.into_iter().chain(sent.iter().copied()).collect()
    }

    /// Sends `request` and hands back a 200 answer;
    /// anything else becomes the error it means.
    async fn post(
        &self,
        request: HttpRequest,
        endpoint: &'static str,
        limit: usize,
        scrub: &[&str],
    ) -> Result<HttpResponse, OAuthError> {
        let answer = fetch(&self.http, request, endpoint, limit).await?;
        if answer.status() != StatusCode::OK {
            return Err(refusal(endpoint, answer.status(), answer.body(), scrub));
        }
        Ok(answer)
    }
}

/// oauth2's HTTP client: [`OAuthClient::post`] with a body cap, and what
/// to scrub from errors. The future is boxed as `Send`, which a closure
/// returning `post`'s future cannot promise for every lifetime.
struct Adapter<'a> {
    client: &'a OAuthClient,
    endpoint: &'static str,
    limit: usize,
    scrub: &'a [&'a str],
}

impl<'c> AsyncHttpClient<'c> for Adapter<'_> {
    type Error = OAuthError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, OAuthError>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(
            self.client
                .post(request, self.endpoint, self.limit, self.scrub),
        )
    }
}

/// An oauth2 error as ours. Non-200 answers never reach oauth2 (see
/// [`OAuthClient::post`]), so what is left is a 200 that does not parse.
fn token_error(
    endpoint: &'static str,
    error: RequestTokenError<OAuthError, BasicErrorResponse>,
) -> OAuthError {
    match error {
        RequestTokenError::Request(error) => error,
        RequestTokenError::ServerResponse(error) => OAuthError::Refused {
            endpoint,
            error: clean(error.error().as_ref(), &[], SNIPPET_CHARS),
            description: error
                .error_description()
                .map(|d| clean(d, &[], DESCRIPTION_CHARS)),
        },
        RequestTokenError::Parse(error, _body) => OAuthError::Malformed(format!(
            "the {endpoint} endpoint's answer is not a token response (at `{}`): {}",
            error.path(),
            why(error.inner())
        )),
        RequestTokenError::Other(message) => {
            OAuthError::Malformed(format!("the {endpoint} endpoint: {message}"))
        }
    }
}

/// Sends `request` and reads at most `limit` bytes of the answer.
pub(crate) async fn fetch(
    http: &reqwest::Client,
    request: HttpRequest,
    what: &str,
    limit: usize,
) -> Result<HttpResponse, OAuthError> {
    let request = reqwest::Request::try_from(request).map_err(|e| {
        OAuthError::Malformed(format!("cannot build the {what} request: {}", describe(e)))
    })?;
    let mut response = http
        .execute(request)
        .await
        .map_err(|e| OAuthError::Unreachable(format!("the {what} endpoint: {}", describe(e))))?;
    let too_large = || {
        OAuthError::Malformed(format!(
            "the {what} endpoint's answer is larger than {limit} bytes"
        ))
    };
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| {
        OAuthError::Unreachable(format!(
            "reading the {what} endpoint's answer: {}",
            describe(e)
        ))
    })? {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    let mut answer = http::Response::new(body);
    *answer.status_mut() = response.status();
    *answer.headers_mut() = std::mem::take(response.headers_mut());
    Ok(answer)
}

/// The error a non-success answer means: the server's OAuth error, or for
/// a body that is not one, the status and a snippet (5xx: Unreachable).
fn refusal(endpoint: &'static str, status: StatusCode, body: &[u8], scrub: &[&str]) -> OAuthError {
    if let Ok(error) = serde_json::from_slice::<BasicErrorResponse>(body) {
        return OAuthError::Refused {
            endpoint,
            error: clean(error.error().as_ref(), scrub, SNIPPET_CHARS),
            description: error
                .error_description()
                .map(|d| clean(d, scrub, DESCRIPTION_CHARS)),
        };
    }
    let mut detail = format!("the {endpoint} endpoint answered HTTP {status}");
    let text = clean(&String::from_utf8_lossy(body), scrub, SNIPPET_CHARS);
    if !text.trim().is_empty() {
        detail.push_str(": ");
        detail.push_str(text.trim());
    }
    if status.is_server_error() {
        OAuthError::Unreachable(detail)
    } else {
        OAuthError::Malformed(detail)
    }
}

/// `text` with every `scrub` value masked, control characters blanked,
/// and at most `max` characters kept.
fn clean(text: &str, scrub: &[&str], max: usize) -> String {
    let mut text = text.to_owned();
    for secret in scrub.iter().filter(|s| !s.is_empty()) {
        text = text.replace(secret, "***");
    }
    let mut out: String = text
        .chars()
        .take(max)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

/// Why JSON did not parse, without quoting any value from it.
fn why(error: &serde_json::Error) -> String {
    match error.classify() {
        serde_json::error::Category::Data => {
            let message = error.to_string();
            if message.starts_with("missing field") {
                message
            } else {
                format!(
                    "a field has an unexpected type or value (line {}, column {})",
                    error.line(),
                    error.column()
                )
            }
        }
        _ => "it is not JSON".to_owned(),
    }
}

/// A reqwest error and its causes on one line, without the URL.
fn describe(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Refuses `url` unless it is https, or http to a loopback host
/// (127.0.0.0/8, ::1, localhost).
fn check_secure(url: &Url, what: &str) -> Result<(), OAuthError> {
    let loopback = match url.host() {
        Some(oauth2::url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(oauth2::url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(oauth2::url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        _ => Err(OAuthError::Insecure(format!("the {what} {}", shown(url)))),
    }
}

/// `url` for an error message: origin and first path segment only, since
/// some upstream URLs carry a key in the path or query.
fn shown(url: &Url) -> String {
    let origin = url.origin().ascii_serialization();
    let mut segments = url.path_segments().into_iter().flatten();
    match (segments.next(), segments.next()) {
        (Some(first), None) => format!("{origin}/{first}"),
        (Some(first), Some(_)) => format!("{origin}/{first}/…"),
        (None, _) => origin,
    }
}

/// The reqwest client for all of the above: connect timeout 10 s, 20 s in
/// all, no redirects followed (a redirect is an answer like any other).
pub(crate) fn http_client() -> Result<reqwest::Client, OAuthError> {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(TOTAL_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| {
            OAuthError::Unreachable(format!("cannot build the HTTP client: {}", describe(e)))
        })
}

#[cfg(test)]
mod tests;
