//! The downstream side: the HTTP routes MCP hosts talk to, origin
//! validation, and the probes.
//!
//! [`app`] builds the axum router over one shared [`AppState`]. The MCP
//! endpoint lives in [`http`]; sessions in [`session`].

pub mod dispatch;
pub mod http;
pub mod legacy_sse;
pub mod listen;
pub mod modern;
pub mod session;
pub mod stdio;
pub mod stream;

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::config::HttpConfig;
use crate::protocol::code;
use crate::router::Router;
use crate::upstream::UpstreamState;
use session::SessionTable;

/// Everything a request handler needs, shared by all connections.
pub struct AppState {
    pub router: Router,
    pub sessions: Arc<SessionTable>,
    pub http: HttpConfig,
    /// Cancelled at shutdown; ends every notification stream.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// How long calls in flight may still finish when their client is done
    /// (shutdown, or a stdio host closing its input).
    pub drain_grace: std::time::Duration,
}

impl AppState {
    /// Rejects a browser `Origin` that is neither loopback nor configured (403),
    /// which stops DNS-rebinding pages from reaching a local gateway.
    #[allow(clippy::result_large_err)]
    pub fn check_origin(&self, headers: &HeaderMap) -> Result<(), Response> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origin = origin.to_str().unwrap_or_default();
        if is_loopback_origin(origin)
            || self
                .http
                .allowed_origins
                .iter()
                .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
        {
            return Ok(());
        }
        tracing::warn!(origin, "request from a disallowed Origin rejected");
        Err(http::rpc_error_response(
            StatusCode::FORBIDDEN,
            None,
            code::INVALID_REQUEST,
            format!("Origin {origin:?} is not allowed; add it to http.allowed_origins"),
        ))
    }
}

/// `http(s)://localhost`, `127.x.x.x` or `[::1]`, with any port.
fn is_loopback_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = if let Some(v6) = rest.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        rest.split(':').next().unwrap_or_default()
    };
    host.eq_ignore_ascii_case("localhost")
        || host == "::1"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The axum application.
pub fn app(state: Arc<AppState>) -> axum::Router {
    axum::Router::new()
        .route(
            "/mcp",
            get(stream::get).post(http::post).delete(http::delete),
        )
        .route("/sse", get(legacy_sse::open))
        .route("/message", axum::routing::post(legacy_sse::message))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// 200 when every upstream is connected, else 503 with each one's state.
async fn readyz(axum::extract::State(state): axum::extract::State<Arc<AppState>>) -> Response {
    let mut ready = true;
    let mut upstreams = serde_json::Map::new();
    let mut handles = state.router.upstreams().all();
    handles.sort_by(|a, b| a.name().cmp(b.name()));
    for handle in handles {
        let status = match handle.state() {
            UpstreamState::Ready => json!({ "state": "ready" }),
            UpstreamState::Starting => json!({ "state": "starting" }),
            UpstreamState::Down { reason } => json!({ "state": "down", "reason": reason }),
            UpstreamState::Stopped => json!({ "state": "stopped" }),
        };
        ready &= handle.state() == UpstreamState::Ready;
        upstreams.insert(handle.name().to_string(), status);
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        axum::Json(json!({ "ready": ready, "upstreams": upstreams })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::is_loopback_origin;

    #[test]
    fn loopback_origins() {
        for ok in [
            "http://localhost:3000",
            "https://127.0.0.1",
            "http://[::1]:8080",
            "http://LOCALHOST",
        ] {
            assert!(is_loopback_origin(ok), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://localhost.evil.example",
            "null",
            "http://10.0.0.1",
            "file://",
        ] {
            assert!(!is_loopback_origin(bad), "{bad}");
        }
    }
}
