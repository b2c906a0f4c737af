//! The routes of the gateway's own authorization server
//! (`auth.oauth_server`; each answers 404 when it is off):
//!
//! - `GET /.well-known/oauth-authorization-server`: RFC 8414 metadata.
//! - `GET /authorize`, `GET /oauth/login/callback`, `POST /oauth/consent`:
//!   the browser's way through a login.
//! - `POST /token`, `POST /register`, `POST /revoke`, `GET /jwks.json`:
//!   what hosts call.
//! - `GET /oauth/grants[?user=]` and `DELETE /oauth/grants?user=[&client_id=]`:
//!   the operator's list and revocation, under `auth.admin`.
//!
//! The steps themselves are `oauth_server`'s; this file reads requests
//! (forms capped at [`MAX_FORM`]) and writes answers.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, RawQuery};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;
use super::listener::{ClientPeer, client_ip};
use crate::oauth_server::{Answer, MAX_REGISTRATION_BYTES, OAuthServer};

/// The routes hosts call from a browser too (a web host, the Inspector):
/// metadata, keys, token, registration and revocation, with CORS for any
/// origin. None of them uses cookies, so `*` lets no page act as the user.
pub(crate) fn discovery_routes() -> axum::Router<Arc<AppState>> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/.well-known/oauth-authorization-server", get(metadata))
        .route(
            "/.well-known/oauth-protected-resource",
            get(super::authn::protected_resource),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*resource}",
            get(super::authn::protected_resource),
        )
        .route("/jwks.json", get(jwks))
        .route("/token", post(token))
        .route("/register", post(register))
        .route("/revoke", post(revoke))
        .layer(axum::middleware::from_fn(cors))
}

/// Answers a CORS preflight, and lets any origin read the answer.
async fn cors(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let preflight = request.method() == axum::http::Method::OPTIONS;
    let mut response = if preflight {
        let mut response = StatusCode::NO_CONTENT.into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization, content-type, mcp-protocol-version"),
        );
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        response
    } else {
        next.run(request).await
    };
    response.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Origin"));
    response
}

/// Largest form body read (token, revocation and consent requests).
const MAX_FORM: usize = 64 * 1024;

/// The authorization server, or the 404 that says it is off (an extractor).
pub(crate) struct Server(Arc<OAuthServer>);

#[allow(clippy::result_large_err)]
fn server_of(state: &AppState) -> Result<Arc<OAuthServer>, Response> {
    state.oauth_server.load_full().ok_or_else(|| {
        json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": "not_found", "error_description": "this gateway has no authorization server (auth.oauth_server)"}),
        )
    })
}

impl FromRequestParts<Arc<AppState>> for Server {
    type Rejection = Response;

    async fn from_request_parts(
        _: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        server_of(state).map(Server)
    }
}

/// The server for an operator admitted by `auth.admin` (401 or 403 first,
/// then the 404 when it is off).
pub(crate) struct Operator(Arc<OAuthServer>);

impl FromRequestParts<Arc<AppState>> for Operator {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        super::authn::admit_admin(state, &parts.headers).await?;
        server_of(state).map(Operator)
    }
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response {
    (
        status,
        [
            (header::CACHE_CONTROL, "no-store"),
            (header::CONTENT_TYPE, "application/json"),
        ],
        body.to_string(),
    )
        .into_response()
}

fn pairs(text: &[u8]) -> Vec<(String, String)> {
    url::form_urlencoded::parse(text).into_owned().collect()
}

fn authorization(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// A form body's pairs (an extractor): at most [`MAX_FORM`] bytes of
/// `application/x-www-form-urlencoded`, else the 413 or 400 that says why.
pub(crate) struct Form(Vec<(String, String)>);

impl FromRequest<Arc<AppState>> for Form {
    type Rejection = Response;

    async fn from_request(
        request: axum::extract::Request,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let form_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
        let body = Bytes::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        if body.len() > MAX_FORM {
            return Err(json_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                &json!({"error": "invalid_request", "error_description": format!("the body is larger than {MAX_FORM} bytes")}),
            ));
        }
        if !form_type {
            return Err(json_response(
                StatusCode::BAD_REQUEST,
                &json!({"error": "invalid_request", "error_description": "the body must be application/x-www-form-urlencoded"}),
            ));
        }
        Ok(Form(pairs(&body)))
    }
}

/// The parameters of a query string.
fn query_pairs(query: Option<String>) -> Vec<(String, String)> {
    pairs(query.unwrap_or_default().as_bytes())
}

/// An [`Answer`] as HTTP.
fn respond(answer: Answer) -> Response {
    match answer {
        Answer::Redirect(url) => match HeaderValue::from_str(&url) {
            Ok(location) => (
                StatusCode::FOUND,
                [
                    (header::LOCATION, location),
                    (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
                ],
            )
                .into_response(),
            Err(_) => page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "mcpmux: error",
                "<p>bad redirect</p>",
            ),
        },
        Answer::Page {
            status,
            title,
            html,
        } => page(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            &title,
            &html,
        ),
        Answer::Json {
            status,
            body,
            www_authenticate,
        } => {
            let mut response = json_response(
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
                &body,
            );
            if let Some(value) = www_authenticate.and_then(|v| HeaderValue::from_str(&v).ok()) {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, value);
            }
            response
        }
    }
}

/// A small HTML page; `html` is already escaped.
fn page(status: StatusCode, title: &str, html: &str) -> Response {
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{}</title>\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <style>body{{font-family:system-ui,sans-serif;max-width:40em;margin:3em auto;padding:0 1em}}\
         button{{font-size:1em;padding:.4em 1.2em;margin-right:.5em}}</style></head><body>{html}</body></html>",
        html_escape::encode_text(title)
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
            ),
        ],
        body,
    )
        .into_response()
}

/// A public document, cached by clients for five minutes.
fn cached(document: serde_json::Value) -> Response {
    (
        [(header::CACHE_CONTROL, "max-age=300")],
        axum::Json(document),
    )
        .into_response()
}

/// `GET /.well-known/oauth-authorization-server`.
pub(crate) async fn metadata(Server(server): Server) -> Response {
    cached(server.metadata())
}

/// `GET /jwks.json`.
pub(crate) async fn jwks(Server(server): Server) -> Response {
    cached(server.jwks())
}

/// `GET /authorize`.
pub(crate) async fn authorize(Server(server): Server, RawQuery(query): RawQuery) -> Response {
    respond(server.authorize(query_pairs(query)).await)
}

/// `GET /oauth/login/callback`.
pub(crate) async fn login_callback(Server(server): Server, RawQuery(query): RawQuery) -> Response {
    respond(server.login_callback(query_pairs(query)).await)
}

/// `POST /oauth/consent`.
pub(crate) async fn consent(Server(server): Server, Form(form): Form) -> Response {
    respond(server.consent(form).await)
}

/// `POST /token`.
pub(crate) async fn token(
    Server(server): Server,
    headers: HeaderMap,
    Form(form): Form,
) -> Response {
    respond(server.token(form, authorization(&headers)).await)
}

/// `POST /revoke`.
pub(crate) async fn revoke(
    Server(server): Server,
    headers: HeaderMap,
    Form(form): Form,
) -> Response {
    respond(
        server
            .revoke(form, authorization(&headers).as_deref())
            .await,
    )
}

/// `POST /register`.
pub(crate) async fn register(
    Server(server): Server,
    peer: ClientPeer,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if body.len() > MAX_REGISTRATION_BYTES {
        return json_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            &json!({"error": "invalid_client_metadata", "error_description": format!("the body is larger than {MAX_REGISTRATION_BYTES} bytes")}),
        );
    }
    let bearer = authorization(&headers).and_then(|v| {
        v.split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim().to_owned())
    });
    let address = client_ip(&peer).unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]));
    respond(server.register(&body, address, bearer.as_deref()).await)
}

/// `GET /oauth/grants[?user=NAME]`: the operator's list.
pub(crate) async fn list_grants(Operator(server): Operator, RawQuery(query): RawQuery) -> Response {
    let params = query_pairs(query);
    let user = params
        .iter()
        .find(|(k, _)| k == "user")
        .map(|(_, v)| v.as_str());
    match server.grants(user).await {
        Ok(grants) => json_response(StatusCode::OK, &json!({ "grants": grants })),
        Err(e) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"error": "temporarily_unavailable", "error_description": e}),
        ),
    }
}

/// `DELETE /oauth/grants?user=NAME[&client_id=ID]`: revokes a user's grants.
pub(crate) async fn revoke_grants(
    Operator(server): Operator,
    RawQuery(query): RawQuery,
) -> Response {
    let params = query_pairs(query);
    let get = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let Some(user) = get("user").filter(|u| !u.is_empty()) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": "invalid_request", "error_description": "user is required"}),
        );
    };
    match server.revoke_grants(user, get("client_id")).await {
        Ok(revoked) => json_response(StatusCode::OK, &json!({ "revoked": revoked })),
        Err(e) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"error": "temporarily_unavailable", "error_description": e}),
        ),
    }
}
