//! Unit tests of the OAuth client (and the mock the discovery tests use too),
//! against a tiny axum server on 127.0.0.1
//! port 0 playing token endpoint and metadata server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::response::IntoResponse as _;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};

use super::*;

const SECRET: &str = "s3cr:t/+";

/// A route body that makes the mock stream this many bytes (`STREAM:n`).
pub(super) const STREAM: &str = "STREAM:";

/// What the mock server was sent.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) authorization: Option<String>,
    pub(super) body: String,
}

/// A server answering fixed bodies by path (404 for any other), and
/// recording every request.
#[derive(Clone, Default)]
pub(super) struct Mock {
    routes: Arc<HashMap<String, (u16, String)>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Mock {
    pub(super) async fn start(routes: Vec<(&'static str, u16, String)>) -> (Mock, Url) {
        start_with(|_| routes).await
    }

    pub(super) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub(super) fn paths(&self) -> Vec<String> {
        self.seen().into_iter().map(|s| s.path).collect()
    }

    /// The only request's form body.
    fn form(&self) -> HashMap<String, String> {
        let seen = self.seen();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].method, "POST");
        form_urlencoded::parse(seen[0].body.as_bytes())
            .into_owned()
            .collect()
    }
}

async fn answer(
    axum::extract::State(mock): axum::extract::State<Mock>,
    request: axum::extract::Request,
) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    mock.seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        authorization: parts
            .headers
            .get(header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap().to_owned()),
        body: String::from_utf8(body.to_vec()).unwrap(),
    });
    match mock.routes.get(parts.uri.path()) {
        Some((status, body)) if body.starts_with(STREAM) => {
            // No Content-Length: the cap must hold while reading.
            let bytes: usize = body[STREAM.len()..].parse().unwrap();
            let chunks = (0..bytes.div_ceil(8192))
                .map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b'a'; 8192])));
            let body = axum::body::Body::from_stream(tokio_stream::iter(chunks));
            (StatusCode::from_u16(*status).unwrap(), body).into_response()
        }
        Some((status, body)) => {
            let kind = if body.starts_with('{') {
                "application/json"
            } else {
                "text/html"
            };
            let status = StatusCode::from_u16(*status).unwrap();
            (status, [(header::CONTENT_TYPE, kind)], body.clone()).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

pub(super) fn route(path: &'static str, status: u16, body: Value) -> (&'static str, u16, String) {
    (path, status, body.to_string())
}

fn client(base: &Url, secret: Option<&str>) -> OAuthClient {
    let endpoints = Endpoints {
        issuer: Some(base.to_string()),
        authorization: Some(base.join("/authorize").unwrap()),
        token: base.join("/token").unwrap(),
        registration: Some(base.join("/register").unwrap()),
        revocation: Some(base.join("/revoke").unwrap()),
    };
    let auth = ClientAuth {
        client_id: "gateway".into(),
        client_secret: secret.map(|s| Secret::new(s.into())),
    };
    OAuthClient::new(http_client().unwrap(), endpoints, auth)
}

pub(super) fn scopes(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// The Basic credential oauth2 sends: each part urlencoded, then base64.
fn basic(id: &str, secret: &str) -> String {
    let id: String = form_urlencoded::byte_serialize(id.as_bytes()).collect();
    let secret: String = form_urlencoded::byte_serialize(secret.as_bytes()).collect();
    format!("Basic {}", STANDARD.encode(format!("{id}:{secret}")))
}

fn expires_in(token: &Token) -> u64 {
    let at = token.expires_at.expect("an expiry");
    at.duration_since(SystemTime::now()).unwrap().as_secs()
}

#[tokio::test]
async fn client_credentials_sends_grant_scope_resource_and_basic_auth() {
    let body = json!({"access_token": "at-1", "token_type": "Bearer",
        "expires_in": 3600, "scope": "read write"});
    let (mock, base) = Mock::start(vec![route("/token", 200, body)]).await;
    let client = client(&base, Some(SECRET));
    let token = client
        .client_credentials(&scopes(&["read", "write"]), Some("https://mcp.example/mcp"))
        .await
        .unwrap();
    let form = mock.form();
    assert_eq!(form["grant_type"], "client_credentials");
    assert_eq!(form["scope"], "read write");
    assert_eq!(form["resource"], "https://mcp.example/mcp");
    assert!(!form.contains_key("client_id") && !form.contains_key("client_secret"));
    assert_eq!(
        basic("gateway", SECRET),
        "Basic Z2F0ZXdheTpzM2NyJTNBdCUyRiUyQg=="
    );
    assert_eq!(
        mock.seen()[0].authorization.as_deref(),
        Some(basic("gateway", SECRET).as_str())
    );
    assert_eq!(token.access.expose(), "at-1");
    assert_eq!(client.endpoints.token, base.join("/token").unwrap());
    assert!((3590..=3600).contains(&expires_in(&token)));
    assert_eq!(token.scope.as_deref(), Some("read write"));
    assert!(token.refresh.is_none());
}

#[tokio::test]
async fn a_public_client_sends_its_id_in_the_body() {
    let body = json!({"access_token": "at", "token_type": "bearer"});
    let (mock, base) = Mock::start(vec![route("/token", 200, body)]).await;
    let token = client(&base, None)
        .client_credentials(&[], None)
        .await
        .unwrap();
    let form = mock.form();
    assert_eq!(form["client_id"], "gateway");
    assert!(!form.contains_key("scope") && !form.contains_key("resource"));
    assert_eq!(mock.seen()[0].authorization, None);
    assert_eq!(token.expires_at, None);
    assert!(token.fresh_for(Duration::from_secs(1_000_000)));
}

#[tokio::test]
async fn token_exchange_sends_every_rfc8693_field() {
    let body = json!({"access_token": "exchanged", "token_type": "Bearer", "expires_in": 60,
        "issued_token_type": ACCESS_TOKEN_TYPE});
    let (mock, base) = Mock::start(vec![route("/token", 200, body)]).await;
    let token = client(&base, Some(SECRET))
        .token_exchange(
            "subject-jwt",
            "urn:ietf:params:oauth:token-type:jwt",
            Some("https://mcp.example/mcp"),
            Some("mcp-server"),
            &scopes(&["a", "b"]),
        )
        .await
        .unwrap();
    let form = mock.form();
    assert_eq!(form["grant_type"], TOKEN_EXCHANGE_GRANT);
    assert_eq!(form["subject_token"], "subject-jwt");
    assert_eq!(
        form["subject_token_type"],
        "urn:ietf:params:oauth:token-type:jwt"
    );
    assert_eq!(form["resource"], "https://mcp.example/mcp");
    assert_eq!(form["audience"], "mcp-server");
    assert_eq!(form["scope"], "a b");
    assert_eq!(form["requested_token_type"], ACCESS_TOKEN_TYPE);
    assert!(!form.contains_key("client_id"));
    assert_eq!(
        mock.seen()[0].authorization.as_deref(),
        Some(basic("gateway", SECRET).as_str())
    );
    assert_eq!(token.access.expose(), "exchanged");
    assert!((50..=60).contains(&expires_in(&token)));
}

#[tokio::test]
async fn token_exchange_invalid_grant_is_refused_without_echoing_secrets() {
    let body = json!({"error": "invalid_grant",
        "error_description": format!("subject subject-jwt of client {SECRET} expired")});
    let (_mock, base) = Mock::start(vec![route("/token", 400, body)]).await;
    let error = client(&base, Some(SECRET))
        .token_exchange("subject-jwt", ACCESS_TOKEN_TYPE, None, None, &[])
        .await
        .unwrap_err();
    assert!(error.grant_refused(), "{error:?}");
    let OAuthError::Refused {
        endpoint,
        description,
        ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(*endpoint, "token");
    assert_eq!(
        description.as_deref(),
        Some("subject *** of client *** expired")
    );
    let shown = format!("{error} {error:?}");
    assert!(shown.contains("invalid_grant"), "{shown}");
    assert!(
        !shown.contains("subject-jwt") && !shown.contains(SECRET),
        "{shown}"
    );
}

#[tokio::test]
async fn other_refusals_are_not_grant_refusals() {
    let body = json!({"error": "invalid_scope"});
    let (_mock, base) = Mock::start(vec![route("/token", 400, body)]).await;
    let error = client(&base, Some(SECRET))
        .client_credentials(&scopes(&["admin"]), None)
        .await
        .unwrap_err();
    assert!(matches!(&error, OAuthError::Refused { error, .. } if error == "invalid_scope"));
    assert!(!error.grant_refused());
}

#[tokio::test]
async fn refresh_keeps_the_old_refresh_token_when_none_comes_back() {
    let body = json!({"access_token": "at-2", "token_type": "Bearer", "expires_in": 300});
    let (mock, base) = Mock::start(vec![route("/token", 200, body)]).await;
    let old = Secret::new("rt-old".into());
    let token = client(&base, Some(SECRET))
        .refresh(&old, &scopes(&["read"]), Some("https://mcp.example/mcp"))
        .await
        .unwrap();
    let form = mock.form();
    assert_eq!(form["grant_type"], "refresh_token");
    assert_eq!(form["refresh_token"], "rt-old");
    assert_eq!(form["scope"], "read");
    assert_eq!(form["resource"], "https://mcp.example/mcp");
    assert_eq!(token.access.expose(), "at-2");
    assert_eq!(token.refresh.as_ref().map(Secret::expose), Some("rt-old"));
}

#[tokio::test]
async fn refresh_takes_a_rotated_refresh_token() {
    let body = json!({"access_token": "at-3", "token_type": "Bearer", "refresh_token": "rt-new"});
    let (_mock, base) = Mock::start(vec![route("/token", 200, body)]).await;
    let token = client(&base, None)
        .refresh(&Secret::new("rt-old".into()), &[], None)
        .await
        .unwrap();
    assert_eq!(token.refresh.as_ref().map(Secret::expose), Some("rt-new"));
}

#[test]
fn authorization_url_is_pkce_s256_with_state_and_resource() {
    let base = Url::parse("https://auth.example").unwrap();
    let redirect = Url::parse("http://127.0.0.1:8080/oauth/callback").unwrap();
    let (url, verifier) = client(&base, None)
        .authorization_url(
            &redirect,
            &scopes(&["mcp:tools", "offline_access"]),
            Some("https://mcp.example/mcp"),
            "state-123",
        )
        .unwrap();
    assert_eq!(url.origin(), base.origin());
    assert_eq!(url.path(), "/authorize");
    let query: HashMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!(query["response_type"], "code");
    assert_eq!(query["client_id"], "gateway");
    assert_eq!(query["redirect_uri"], redirect.as_str());
    assert_eq!(query["state"], "state-123");
    assert_eq!(query["resource"], "https://mcp.example/mcp");
    assert_eq!(query["scope"], "mcp:tools offline_access");
    assert_eq!(query["code_challenge_method"], "S256");
    let digest =
        aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, verifier.expose().as_bytes());
    assert_eq!(
        query["code_challenge"],
        URL_SAFE_NO_PAD.encode(digest.as_ref())
    );
    assert!((43..=128).contains(&verifier.expose().len()));
    let (_, again) = client(&base, None)
        .authorization_url(&redirect, &[], None, "s")
        .unwrap();
    assert_ne!(verifier, again, "each verifier is random");
}

#[test]
fn authorization_url_needs_an_authorization_endpoint() {
    let base = Url::parse("https://auth.example").unwrap();
    let mut client = client(&base, None);
    client.endpoints.authorization = None;
    let redirect = Url::parse("https://gw.example/cb").unwrap();
    let error = client
        .authorization_url(&redirect, &[], None, "s")
        .unwrap_err();
    assert!(matches!(error, OAuthError::Discovery(_)), "{error:?}");
}

#[tokio::test]
async fn exchange_code_sends_the_verifier() {
    let body = json!({"access_token": "at", "token_type": "Bearer", "refresh_token": "rt"});
    let (mock, base) = Mock::start(vec![route("/token", 200, body)]).await;
    let redirect = Url::parse("http://127.0.0.1:9/callback").unwrap();
    let verifier = Secret::new("v".repeat(43));
    let token = client(&base, Some(SECRET))
        .exchange_code(
            "code-1",
            &verifier,
            &redirect,
            Some("https://mcp.example/mcp"),
        )
        .await
        .unwrap();
    let form = mock.form();
    assert_eq!(form["grant_type"], "authorization_code");
    assert_eq!(form["code"], "code-1");
    assert_eq!(form["code_verifier"], verifier.expose());
    assert_eq!(form["redirect_uri"], redirect.as_str());
    assert_eq!(form["resource"], "https://mcp.example/mcp");
    assert_eq!(token.refresh.as_ref().map(Secret::expose), Some("rt"));
}

#[tokio::test]
async fn revoke_posts_the_token_with_its_hint() {
    let (mock, base) = Mock::start(vec![("/revoke", 200, String::new())]).await;
    let revoked = client(&base, Some(SECRET))
        .revoke(&Secret::new("rt-1".into()), true)
        .await
        .unwrap();
    assert!(revoked);
    let form = mock.form();
    assert_eq!(form["token"], "rt-1");
    assert_eq!(form["token_type_hint"], "refresh_token");
    assert_eq!(
        mock.seen()[0].authorization.as_deref(),
        Some(basic("gateway", SECRET).as_str())
    );
}

#[tokio::test]
async fn revoke_without_an_endpoint_is_false() {
    let base = Url::parse("https://auth.example").unwrap();
    let mut client = client(&base, None);
    client.endpoints.revocation = None;
    let revoked = client.revoke(&Secret::new("at".into()), false).await;
    assert!(!revoked.unwrap());
}

/// A mock whose base URL is known before its routes are: binds, reads the
/// port, then serves `routes(base)`.
pub(super) async fn start_with(
    routes: impl FnOnce(&Url) -> Vec<(&'static str, u16, String)>,
) -> (Mock, Url) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    let mock = Mock {
        routes: Arc::new(
            routes(&base)
                .into_iter()
                .map(|(path, status, body)| (path.to_owned(), (status, body)))
                .collect(),
        ),
        seen: Arc::default(),
    };
    let app = axum::Router::new()
        .fallback(answer)
        .with_state(mock.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (mock, base)
}

#[tokio::test]
async fn an_oversized_token_answer_is_refused() {
    let huge = format!(
        r#"{{"access_token":"{}","token_type":"Bearer"}}"#,
        "a".repeat(TOKEN_LIMIT)
    );
    let (_mock, base) = Mock::start(vec![("/token", 200, huge)]).await;
    let error = client(&base, None)
        .client_credentials(&[], None)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, OAuthError::Malformed(m) if m.contains("larger")),
        "{error}"
    );

    let streamed = format!("{STREAM}{}", TOKEN_LIMIT + 1);
    let (_mock, base) = Mock::start(vec![("/token", 200, streamed)]).await;
    let error = client(&base, None)
        .client_credentials(&[], None)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, OAuthError::Malformed(m) if m.contains("larger")),
        "{error}"
    );
}

#[tokio::test]
async fn insecure_urls_are_refused() {
    for (url, ok) in [
        ("https://auth.example/token", true),
        ("http://localhost:8080/token", true),
        ("http://127.1.2.3/token", true),
        ("http://[::1]:80/token", true),
        ("http://auth.example/token", false),
        ("http://10.0.0.1/token", false),
        ("http://localhost.evil.example/token", false),
        ("ftp://127.0.0.1/token", false),
    ] {
        let checked = check_secure(&Url::parse(url).unwrap(), "token endpoint");
        assert_eq!(checked.is_ok(), ok, "{url}");
    }
    let http = http_client().unwrap();
    let base = Url::parse("http://auth.example").unwrap();
    let error = client(&base, Some(SECRET))
        .client_credentials(&[], None)
        .await
        .unwrap_err();
    assert!(matches!(error, OAuthError::Insecure(_)), "{error:?}");
    let error = client(&base, None)
        .token_exchange("t", ACCESS_TOKEN_TYPE, None, None, &[])
        .await
        .unwrap_err();
    assert!(matches!(error, OAuthError::Insecure(_)), "{error:?}");
    let error = authorization_server(&http, "http://auth.example")
        .await
        .unwrap_err();
    assert!(matches!(error, OAuthError::Insecure(_)), "{error:?}");
    let upstream = Url::parse("https://mcp.example/mcp").unwrap();
    let header = r#"Bearer resource_metadata="http://evil.example/prm""#;
    let error = protected_resource(&http, &upstream, Some(header))
        .await
        .unwrap_err();
    assert!(matches!(error, OAuthError::Insecure(_)), "{error:?}");
    let error = register(
        &http,
        &base.join("/register").unwrap(),
        "mcpmux",
        &upstream,
        &[],
    )
    .await
    .unwrap_err();
    assert!(matches!(error, OAuthError::Insecure(_)), "{error:?}");
}

#[tokio::test]
async fn non_oauth_answers_carry_the_status_and_a_scrubbed_snippet() {
    let page = format!("<html>Bad Gateway for {SECRET} and rt-9</html>");
    let (_mock, base) = Mock::start(vec![("/token", 502, page)]).await;
    let error = client(&base, Some(SECRET))
        .refresh(&Secret::new("rt-9".into()), &[], None)
        .await
        .unwrap_err();
    let OAuthError::Unreachable(message) = &error else {
        panic!("{error:?}")
    };
    assert!(
        message.contains("502") && message.contains("Bad Gateway"),
        "{message}"
    );
    assert!(
        !message.contains(SECRET) && !message.contains("rt-9"),
        "{message}"
    );

    let (_mock, base) = Mock::start(vec![]).await;
    let error = client(&base, None)
        .client_credentials(&[], None)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, OAuthError::Malformed(m) if m.contains("404")),
        "{error}"
    );

    let body = json!({"access_token": 12345, "token_type": "Bearer"});
    let (_mock, base) = Mock::start(vec![route("/token", 200, body)]).await;
    let error = client(&base, None)
        .client_credentials(&[], None)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, OAuthError::Malformed(m) if !m.contains("12345")),
        "{error}"
    );
}

#[test]
fn token_debug_masks_secrets() {
    let token = Token {
        access: Secret::new("access-value".into()),
        expires_at: None,
        refresh: Some(Secret::new("refresh-value".into())),
        scope: Some("read".into()),
    };
    let shown = format!("{token:?}");
    assert!(
        !shown.contains("access-value") && !shown.contains("refresh-value"),
        "{shown}"
    );
    assert!(shown.contains("read"));
}

#[test]
fn fresh_for_compares_the_time_left_with_the_margin() {
    let mut token = Token {
        access: Secret::new("a".into()),
        expires_at: Some(SystemTime::now() + Duration::from_secs(120)),
        refresh: None,
        scope: None,
    };
    assert!(token.fresh_for(Duration::from_secs(60)));
    assert!(!token.fresh_for(Duration::from_secs(300)));
    token.expires_at = Some(SystemTime::now() - Duration::from_secs(1));
    assert!(!token.fresh_for(Duration::ZERO));
}

#[test]
fn the_calls_are_send() {
    fn send<T: Send>(_: T) {}
    let base = Url::parse("https://auth.example").unwrap();
    let client = client(&base, None);
    let secret = Secret::new("x".into());
    let redirect = base.clone();
    let http = http_client().unwrap();
    send(client.client_credentials(&[], None));
    send(client.token_exchange("t", "t", None, None, &[]));
    send(client.exchange_code("c", &secret, &redirect, None));
    send(client.refresh(&secret, &[], None));
    send(client.revoke(&secret, false));
    send(protected_resource(&http, &base, None));
    send(authorization_server(&http, "https://auth.example"));
    send(register(&http, &base, "n", &base, &[]));
}
