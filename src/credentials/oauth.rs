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
//! Nothing here spawns; each call runs on the task that awaits it.

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
use serde::Deserialize;

use crate::config::Secret;

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

    pub(crate) fn endpoints(&self) -> &Endpoints {
        &self.endpoints
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
async fn fetch(
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

/// RFC 9728 protected-resource metadata, the part we use.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProtectedResource {
    pub resource: String,
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Vec<String>,
}

/// One challenge of a `WWW-Authenticate` value: its scheme and
/// auth-params (a token68 is skipped).
#[derive(Debug, PartialEq)]
struct Challenge {
    scheme: String,
    params: Vec<(String, String)>,
}

/// The `resource_metadata` URL of the first `Bearer` challenge that names
/// one (RFC 9728 §5.1). Several header fields may be joined with `, `.
pub(crate) fn resource_metadata_url(www_authenticate: &str) -> Option<String> {
    challenges(www_authenticate)
        .into_iter()
        .filter(|c| c.scheme.eq_ignore_ascii_case("bearer"))
        .find_map(|c| {
            c.params
                .into_iter()
                .find(|(name, _)| name.eq_ignore_ascii_case("resource_metadata"))
                .map(|(_, value)| value)
        })
}

/// The challenges of a `WWW-Authenticate` value (RFC 9110 §11.6.1): each a
/// scheme, then a token68 or a comma-separated auth-param list, whose
/// values are tokens or quoted strings with `\` escapes. Lenient where
/// servers are sloppy: an unquoted value runs to the next comma or space
/// (so a bare URL works). Stops at the first thing it cannot read,
/// keeping what came before.
fn challenges(value: &str) -> Vec<Challenge> {
    let mut p = Cursor {
        s: value.as_bytes(),
        i: 0,
    };
    let mut out = Vec::new();
    loop {
        p.skip(|b| b == b',' || is_space(b));
        let Some(scheme) = p.token() else { break };
        let mut challenge = Challenge {
            scheme,
            params: Vec::new(),
        };
        let spaced = p.skip(is_space) > 0;
        if !spaced || matches!(p.peek(), None | Some(b',')) || p.token68() {
            out.push(challenge);
            continue;
        }
        loop {
            let Some(param) = p.param() else {
                out.push(challenge);
                return out;
            };
            challenge.params.push(param);
            p.skip(is_space);
            match p.peek() {
                None => break,
                Some(b',') => {
                    p.skip(|b| b == b',' || is_space(b));
                    if !p.param_follows() {
                        break;
                    }
                }
                Some(_) => {
                    out.push(challenge);
                    return out;
                }
            }
        }
        out.push(challenge);
    }
    out
}

/// A read position in a header value.
struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    /// Skips bytes matching `f`, and says how many.
    fn skip(&mut self, f: impl Fn(u8) -> bool) -> usize {
        let start = self.i;
        while self.peek().is_some_and(&f) {
            self.i += 1;
        }
        self.i - start
    }

    fn text(&self, start: usize) -> String {
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }

    fn token(&mut self) -> Option<String> {
        let start = self.i;
        (self.skip(is_tchar) > 0).then(|| self.text(start))
    }

    /// Consumes a token68 that ends the challenge (followed by a comma or
    /// the end), or nothing.
    fn token68(&mut self) -> bool {
        let start = self.i;
        if self.skip(is_token68_char) > 0 {
            self.skip(|b| b == b'=');
            self.skip(is_space);
            if matches!(self.peek(), None | Some(b',')) {
                return true;
            }
        }
        self.i = start;
        false
    }

    /// `name BWS "=" BWS ( quoted-string / value )`.
    fn param(&mut self) -> Option<(String, String)> {
        let name = self.token()?;
        self.skip(is_space);
        if self.peek() != Some(b'=') {
            return None;
        }
        self.i += 1;
        self.skip(is_space);
        let value = if self.peek() == Some(b'"') {
            self.quoted()?
        } else {
            let start = self.i;
            if self.skip(|b| b != b',' && !is_space(b)) == 0 {
                return None;
            }
            self.text(start)
        };
        Some((name, value))
    }

    fn quoted(&mut self) -> Option<String> {
        self.i += 1;
        let mut value = Vec::new();
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(String::from_utf8_lossy(&value).into_owned());
                }
                b'\\' => {
                    self.i += 1;
                    value.push(self.peek()?);
                }
                b => value.push(b),
            }
            self.i += 1;
        }
    }

    /// Whether an auth-param (`name =`) starts here, rather than a new
    /// challenge's scheme.
    fn param_follows(&mut self) -> bool {
        let start = self.i;
        let follows = self.token().is_some() && {
            self.skip(is_space);
            self.peek() == Some(b'=')
        };
        self.i = start;
        follows
    }
}

fn is_space(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_token68_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)
}

/// Discovery as the MCP authorization spec (2025-11-25) orders it: the
/// header's `resource_metadata` URL when it names one, else the well-known
/// URIs from the upstream URL (path-inserted, then the root one). The
/// document's `resource` must be on the upstream's origin (RFC 9728 §3.3
/// asks for the identical URL; servers differ on paths and trailing
/// slashes, the origin is what keeps another site's metadata out), and it
/// must name at least one authorization server.
pub(crate) async fn protected_resource(
    http: &reqwest::Client,
    upstream: &Url,
    www_authenticate: Option<&str>,
) -> Result<ProtectedResource, OAuthError> {
    let candidates = match www_authenticate.and_then(resource_metadata_url) {
        Some(url) => vec![Url::parse(&url).map_err(|_| {
            OAuthError::Discovery(
                "the WWW-Authenticate header's resource_metadata is not a URL".into(),
            )
        })?],
        None => {
            let path = upstream.path().trim_end_matches('/');
            let mut urls = Vec::new();
            if !path.is_empty() {
                urls.push(at(
                    upstream,
                    &format!("/.well-known/oauth-protected-resource{path}"),
                ));
            }
            urls.push(at(upstream, "/.well-known/oauth-protected-resource"));
            urls
        }
    };
    let mut tried = Vec::new();
    for url in candidates {
        check_secure(&url, "protected-resource metadata URL")?;
        let Some(document) = get_json::<ResourceDocument>(http, &url, &mut tried).await? else {
            continue;
        };
        let resource = document.resource.unwrap_or_default();
        let same_origin = Url::parse(&resource).is_ok_and(|r| r.origin() == upstream.origin());
        if !same_origin {
            return Err(OAuthError::Discovery(format!(
                "the metadata at {} is for resource {:?}, not on {}",
                shown(&url),
                clean(&resource, &[], SNIPPET_CHARS),
                upstream.origin().ascii_serialization()
            )));
        }
        let authorization_servers = document.authorization_servers.unwrap_or_default();
        if authorization_servers.is_empty() {
            return Err(OAuthError::Discovery(format!(
                "the metadata at {} names no authorization_servers",
                shown(&url)
            )));
        }
        return Ok(ProtectedResource {
            resource,
            authorization_servers,
            scopes_supported: document.scopes_supported.unwrap_or_default(),
        });
    }
    Err(OAuthError::Discovery(format!(
        "no protected-resource metadata for {} ({})",
        shown(upstream),
        tried.join("; ")
    )))
}

/// RFC 8414 then OpenID discovery for `issuer`, in the MCP spec's order
/// (with a path: oauth-authorization-server path-inserted,
/// openid-configuration path-inserted, openid-configuration appended;
/// without: oauth-authorization-server, openid-configuration). The first
/// metadata document found decides: its `issuer` must equal the one asked
/// for (a root issuer may differ by its trailing slash), it must list
/// S256 in `code_challenge_methods_supported`, and every endpoint in it
/// must be https unless on loopback.
pub(crate) async fn authorization_server(
    http: &reqwest::Client,
    issuer: &str,
) -> Result<Endpoints, OAuthError> {
    let base = Url::parse(issuer).map_err(|_| {
        OAuthError::Discovery(format!(
            "the issuer {:?} is not a URL",
            clean(issuer, &[], SNIPPET_CHARS)
        ))
    })?;
    check_secure(&base, "issuer")?;
    if base.query().is_some() || base.fragment().is_some() {
        return Err(OAuthError::Discovery(format!(
            "the issuer {} has a query or fragment (RFC 8414 §2)",
            shown(&base)
        )));
    }
    let path = base.path().trim_end_matches('/');
    let candidates = if path.is_empty() {
        vec![
            at(&base, "/.well-known/oauth-authorization-server"),
            at(&base, "/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            at(
                &base,
                &format!("/.well-known/oauth-authorization-server{path}"),
            ),
            at(&base, &format!("/.well-known/openid-configuration{path}")),
            at(&base, &format!("{path}/.well-known/openid-configuration")),
        ]
    };
    let mut tried = Vec::new();
    for url in candidates {
        let Some(document) = get_json::<ServerDocument>(http, &url, &mut tried).await? else {
            continue;
        };
        return endpoints_from(document, issuer);
    }
    Err(OAuthError::Discovery(format!(
        "no authorization-server metadata for {issuer} ({})",
        tried.join("; ")
    )))
}

/// The fields of RFC 9728 metadata used here.
#[derive(Deserialize)]
struct ResourceDocument {
    resource: Option<String>,
    authorization_servers: Option<Vec<String>>,
    scopes_supported: Option<Vec<String>>,
}

/// The fields of RFC 8414 / OpenID metadata used here.
#[derive(Deserialize)]
struct ServerDocument {
    issuer: Option<String>,
    authorization_endpoint: Option<String>,
    token_endpoint: Option<String>,
    registration_endpoint: Option<String>,
    revocation_endpoint: Option<String>,
    code_challenge_methods_supported: Option<Vec<String>>,
}

fn endpoints_from(document: ServerDocument, issuer: &str) -> Result<Endpoints, OAuthError> {
    let named = document.issuer.unwrap_or_default();
    let root_alike = matches!(
        (Url::parse(&named), Url::parse(issuer)),
        (Ok(a), Ok(b)) if a.path() == "/" && a == b
    );
    if named != issuer && !root_alike {
        return Err(OAuthError::Discovery(format!(
            "the metadata for {issuer} names issuer {:?} (RFC 8414 §3.3)",
            clean(&named, &[], SNIPPET_CHARS)
        )));
    }
    match &document.code_challenge_methods_supported {
        Some(methods) if methods.iter().any(|m| m == "S256") => {}
        Some(_) => {
            return Err(OAuthError::Discovery(format!(
                "{issuer} does not list S256 in code_challenge_methods_supported; \
                 MCP requires PKCE S256"
            )));
        }
        None => {
            return Err(OAuthError::Discovery(format!(
                "{issuer} has no code_challenge_methods_supported, so PKCE S256 \
                 support is unknown; MCP requires it"
            )));
        }
    }
    let endpoint = |value: Option<String>, field: &str| -> Result<Option<Url>, OAuthError> {
        let Some(value) = value else { return Ok(None) };
        let url = Url::parse(&value)
            .map_err(|_| OAuthError::Discovery(format!("{issuer}'s {field} is not a URL")))?;
        check_secure(&url, field)?;
        Ok(Some(url))
    };
    let token = endpoint(document.token_endpoint, "token_endpoint")?
        .ok_or_else(|| OAuthError::Discovery(format!("{issuer} has no token_endpoint")))?;
    Ok(Endpoints {
        issuer: Some(named),
        authorization: endpoint(document.authorization_endpoint, "authorization_endpoint")?,
        token,
        registration: endpoint(document.registration_endpoint, "registration_endpoint")?,
        revocation: endpoint(document.revocation_endpoint, "revocation_endpoint")?,
    })
}

/// `base` with `path` and no query or fragment.
fn at(base: &Url, path: &str) -> Url {
    let mut url = base.clone();
    url.set_path(path);
    url.set_query(None);
    url.set_fragment(None);
    url
}

/// GETs a metadata document. `None` (noted in `tried`) when the answer is
/// not a 200 with a JSON object of the expected shape, so the next
/// well-known URL gets its turn; unreachable or oversized is an error.
async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &Url,
    tried: &mut Vec<String>,
) -> Result<Option<T>, OAuthError> {
    let request = http::Request::get(url.as_str())
        .header(header::ACCEPT, "application/json")
        .body(Vec::new())
        .map_err(|e| OAuthError::Discovery(format!("{}: {e}", shown(url))))?;
    let answer = fetch(http, request, "metadata", METADATA_LIMIT).await?;
    if answer.status() != StatusCode::OK {
        tried.push(format!("{}: HTTP {}", shown(url), answer.status()));
        return Ok(None);
    }
    match serde_json::from_slice(answer.body()) {
        Ok(document) => Ok(Some(document)),
        Err(e) => {
            tried.push(format!("{}: {}", shown(url), why(&e)));
            Ok(None)
        }
    }
}

/// RFC 7591 dynamic registration of the gateway as a client with
/// `redirect_uri`, for the code and refresh grants. It asks for
/// `client_secret_basic` (the gateway can keep a secret); a server that
/// answers `none`, or with no secret, makes it a public client.
pub(crate) async fn register(
    http: &reqwest::Client,
    registration: &Url,
    client_name: &str,
    redirect_uri: &Url,
    scopes: &[String],
) -> Result<ClientAuth, OAuthError> {
    check_secure(registration, "registration endpoint")?;
    let mut metadata = serde_json::json!({
        "client_name": client_name,
        "redirect_uris": [redirect_uri.as_str()],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "client_secret_basic",
    });
    if !scopes.is_empty() {
        metadata["scope"] = scopes.join(" ").into();
    }
    let request = http::Request::post(registration.as_str())
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_TYPE, "application/json")
        .body(metadata.to_string().into_bytes())
        .map_err(|e| OAuthError::Malformed(format!("cannot build the request: {e}")))?;
    let answer = fetch(http, request, "registration", METADATA_LIMIT).await?;
    if !matches!(answer.status(), StatusCode::OK | StatusCode::CREATED) {
        return Err(refusal("registration", answer.status(), answer.body(), &[]));
    }
    #[derive(Deserialize)]
    struct Registered {
        client_id: String,
        client_secret: Option<String>,
        token_endpoint_auth_method: Option<String>,
    }
    let registered: Registered = serde_json::from_slice(answer.body()).map_err(|e| {
        OAuthError::Malformed(format!(
            "the registration endpoint's answer is not a client: {}",
            why(&e)
        ))
    })?;
    if registered.client_id.is_empty() {
        return Err(OAuthError::Malformed(
            "the registration endpoint's answer has an empty client_id".into(),
        ));
    }
    let public = registered.token_endpoint_auth_method.as_deref() == Some("none");
    Ok(ClientAuth {
        client_id: registered.client_id,
        client_secret: registered
            .client_secret
            .filter(|s| !public && !s.is_empty())
            .map(Secret::new),
    })
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
