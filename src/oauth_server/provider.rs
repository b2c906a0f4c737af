//! The login leg: the gateway as a client of the company's OpenID Connect
//! provider. The protocol work (discovery, the authorization URL with PKCE
//! S256 and a nonce, the code exchange, the ID token's signature, issuer,
//! audience, expiry and nonce) is the `openidconnect` crate's; this file
//! keeps the provider's metadata and maps the verified claims to the
//! gateway identity (`claims.client`, `claims.groups`, `claims.scopes`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreAuthenticationFlow, CoreErrorResponseType,
    CoreGenderClaim, CoreJsonWebKey, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm,
    CoreProviderMetadata, CoreRevocableToken, CoreRevocationErrorResponse,
    CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AdditionalClaims, AsyncHttpClient, AuthorizationCode, ClientId, ClientSecret, CsrfToken,
    EmptyExtraTokenFields, EndpointMaybeSet, EndpointNotSet, EndpointSet, HttpRequest,
    HttpResponse, IdTokenFields, IssuerUrl, Nonce, PkceCodeChallenge, PkceCodeVerifier,
    RedirectUrl, Scope, StandardErrorResponse, StandardTokenResponse, TokenResponse as _,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::{ClaimNames, ProviderConfig};
use crate::credentials::oauth::{OAuthError, fetch};

/// Largest answer read from the provider.
const MAX_ANSWER: usize = 256 * 1024;
/// The provider's metadata (and keys) are fetched again after this long,
/// or at once when an ID token's signature does not verify.
const METADATA_TTL: Duration = Duration::from_secs(3600);

/// Every claim of the ID token that is not a standard one.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct OtherClaims(serde_json::Map<String, Value>);

impl AdditionalClaims for OtherClaims {}

type IdFields = IdTokenFields<
    OtherClaims,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
type Answer = StandardTokenResponse<IdFields, CoreTokenType>;
type OidcClient = openidconnect::Client<
    OtherClaims,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    Answer,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// Why a login at the provider failed. Never holds a token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ProviderError {
    #[error("the identity provider's metadata could not be read: {0}")]
    Discovery(String),
    #[error("the identity provider refused the code: {0}")]
    Exchange(String),
    #[error("the identity provider's answer has no ID token")]
    NoIdToken,
    #[error("the ID token did not verify: {0}")]
    IdToken(String),
    #[error("the ID token has no usable `{0}` claim to name the user")]
    NoClient(String),
    #[error("the callback URL is not a URL")]
    Redirect,
}

/// What starts a login: where to send the browser, and what to keep.
pub(crate) struct LoginStart {
    pub url: reqwest::Url,
    pub state: String,
    pub verifier: String,
    pub nonce: String,
}

/// The person who logged in, as the gateway names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct User {
    /// The client name for policy rules (`claims.client`).
    pub client: String,
    /// Groups and provider scopes, for the policy's `scopes` rules.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// The provider, its metadata fetched on first use.
pub(crate) struct Provider {
    config: ProviderConfig,
    claims: ClaimNames,
    http: reqwest::Client,
    metadata: tokio::sync::Mutex<Option<(Instant, Arc<CoreProviderMetadata>)>>,
}

impl Provider {
    pub(crate) fn new(
        config: &ProviderConfig,
        claims: &ClaimNames,
    ) -> Result<Provider, OAuthError> {
        Ok(Provider {
            config: config.clone(),
            claims: claims.clone(),
            http: crate::credentials::oauth::http_client()?,
            metadata: tokio::sync::Mutex::new(None),
        })
    }

    /// The metadata, fetched when absent, old, or `again`.
    async fn metadata(&self, again: bool) -> Result<Arc<CoreProviderMetadata>, ProviderError> {
        let mut held = self.metadata.lock().await;
        if let Some((at, metadata)) = held.as_ref()
            && !again
            && at.elapsed() < METADATA_TTL
        {
            return Ok(metadata.clone());
        }
        let issuer = IssuerUrl::new(self.config.issuer.clone())
            .map_err(|e| ProviderError::Discovery(e.to_string()))?;
        let metadata = CoreProviderMetadata::discover_async(issuer, &self.adapter())
            .await
            .map_err(|e| ProviderError::Discovery(discovery_error(&e)))?;
        let metadata = Arc::new(metadata);
        *held = Some((Instant::now(), metadata.clone()));
        Ok(metadata)
    }

    fn client(
        &self,
        metadata: &CoreProviderMetadata,
        redirect: &str,
    ) -> Result<OidcClient, ProviderError> {
        let redirect =
            RedirectUrl::new(redirect.to_owned()).map_err(|_| ProviderError::Redirect)?;
        Ok(OidcClient::from_provider_metadata(
            metadata.clone(),
            ClientId::new(self.config.client_id.clone()),
            self.config
                .client_secret
                .as_ref()
                .map(|s| ClientSecret::new(s.expose().to_owned())),
        )
        .set_redirect_uri(redirect))
    }

    fn adapter(&self) -> Adapter<'_> {
        Adapter { http: &self.http }
    }

    /// A new login whose answer comes back to `redirect`.
    pub(crate) async fn begin(&self, redirect: &str) -> Result<LoginStart, ProviderError> {
        let metadata = self.metadata(false).await?;
        let client = self.client(&metadata, redirect)?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .set_pkce_challenge(challenge);
        for scope in self.config.scopes.iter().filter(|s| *s != "openid") {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.url();
        Ok(LoginStart {
            url,
            state: state.secret().clone(),
            verifier: verifier.secret().clone(),
            nonce: nonce.secret().clone(),
        })
    }

    /// Ends a login: exchanges `code`, verifies the ID token and names the user.
    pub(crate) async fn finish(
        &self,
        redirect: &str,
        code: &str,
        verifier: &str,
        nonce: &str,
    ) -> Result<User, ProviderError> {
        let metadata = self.metadata(false).await?;
        let client = self.client(&metadata, redirect)?;
        let answer = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| ProviderError::Exchange(e.to_string()))?
            .set_pkce_verifier(PkceCodeVerifier::new(verifier.to_owned()))
            .request_async(&self.adapter())
            .await
            .map_err(|e| ProviderError::Exchange(exchange_error(&e)))?;
        let id_token = answer.id_token().ok_or(ProviderError::NoIdToken)?;
        let nonce = Nonce::new(nonce.to_owned());
        let claims = match id_token.claims(&client.id_token_verifier(), &nonce) {
            Ok(claims) => claims.clone(),
            Err(first) => {
                // The provider may have rotated its keys: fetch them once more.
                let metadata = self.metadata(true).await?;
                let client = self.client(&metadata, redirect)?;
                id_token
                    .claims(&client.id_token_verifier(), &nonce)
                    .map_err(|_| ProviderError::IdToken(first.to_string()))?
                    .clone()
            }
        };
        let all = serde_json::to_value(&claims).unwrap_or(Value::Null);
        let client_name = values(&all, &self.claims.client)
            .into_iter()
            .next()
            .filter(|c| !c.trim().is_empty())
            .ok_or_else(|| ProviderError::NoClient(self.claims.client.clone()))?;
        let mut groups: Vec<String> = Vec::new();
        for claim in [&self.claims.groups, &self.claims.scopes]
            .into_iter()
            .flatten()
        {
            for value in values(&all, claim) {
                if !groups.contains(&value) {
                    groups.push(value);
                }
            }
        }
        Ok(User {
            client: client_name,
            groups,
        })
    }
}

/// The strings a claim holds: a string (split on spaces for lists), an
/// array of strings, or a number. `a.b` reads a nested claim.
fn values(claims: &Value, name: &str) -> Vec<String> {
    let found = claims
        .get(name)
        .or_else(|| name.split('.').try_fold(claims, |at, part| at.get(part)));
    match found {
        Some(Value::String(s)) if s.contains(' ') => {
            s.split_whitespace().map(str::to_owned).collect()
        }
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Number(n)) => vec![n.to_string()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn discovery_error<E: std::error::Error>(e: &openidconnect::DiscoveryError<E>) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn exchange_error<E: std::error::Error, R: openidconnect::ErrorResponse>(
    e: &openidconnect::RequestTokenError<E, R>,
) -> String {
    match e {
        openidconnect::RequestTokenError::ServerResponse(r) => serde_json::to_value(r)
            .ok()
            .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| "an OAuth error".into()),
        openidconnect::RequestTokenError::Request(e) => e.to_string(),
        openidconnect::RequestTokenError::Parse(_, _) => {
            "its answer is not a token response".into()
        }
        openidconnect::RequestTokenError::Other(m) => m.clone(),
    }
}

/// openidconnect's HTTP client: reqwest with the body cap.
struct Adapter<'a> {
    http: &'a reqwest::Client,
}

impl<'c> AsyncHttpClient<'c> for Adapter<'_> {
    type Error = OAuthError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, OAuthError>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(fetch(self.http, request, "identity provider", MAX_ANSWER))
    }
}

#[cfg(test)]
mod tests {
    use super::values;
    use serde_json::json;

    #[test]
    fn claims_are_read_as_strings_arrays_and_nested_paths() {
        let claims = json!({
            "sub": "u1",
            "groups": ["ops", "dev"],
            "scp": "a b",
            "realm_access": {"roles": ["admin"]},
        });
        assert_eq!(values(&claims, "sub"), ["u1"]);
        assert_eq!(values(&claims, "groups"), ["ops", "dev"]);
        assert_eq!(values(&claims, "scp"), ["a", "b"]);
        assert_eq!(values(&claims, "realm_access.roles"), ["admin"]);
        assert!(values(&claims, "missing").is_empty());
    }
}
