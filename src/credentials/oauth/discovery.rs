//! Finding an upstream's authorization server and becoming its client:
//! the `WWW-Authenticate` challenge, RFC 9728 protected-resource metadata,
//! RFC 8414 / OpenID server metadata in the MCP spec's order, and RFC 7591
//! dynamic registration. Runs on the task that awaits it, like the rest of
//! [`super`].

use oauth2::http::{self, StatusCode, header};
use reqwest::Url;
use serde::Deserialize;

use super::{
    ClientAuth, Endpoints, METADATA_LIMIT, OAuthError, SNIPPET_CHARS, check_secure, clean, fetch,
    refusal, shown, why,
};
use crate::config::Secret;

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

#[cfg(test)]
mod tests;
