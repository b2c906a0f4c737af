//! A user's own connection, through a running gateway's HTTP route
//! (`mcpmux connections disconnect`): authenticated with the user's own
//! credential (from the environment, never the command line), it removes
//! the user's grant at one upstream; nothing here reads the token store.

use reqwest::{StatusCode, Url};

/// Why a disconnect did not happen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DisconnectError {
    /// The command was given something unusable (exit 64).
    #[error("{0}")]
    Usage(String),
    /// The user had no connection there.
    #[error("you have no connection at upstream {0:?}")]
    NotConnected(String),
    /// The gateway could not be reached or refused.
    #[error("{0}")]
    Failed(String),
}

impl DisconnectError {
    /// Whether the command line (or environment) was wrong.
    pub fn is_usage(&self) -> bool {
        matches!(self, DisconnectError::Usage(_))
    }
}

/// The URL of the route `segments` at the gateway whose base (or MCP
/// endpoint) URL is `gateway`, or why `--gateway` is no such URL.
pub(crate) fn gateway_route(gateway: &str, segments: &[&str]) -> Result<Url, String> {
    let mut url = Url::parse(gateway.trim_end_matches('/').trim_end_matches("/mcp"))
        .map_err(|e| format!("--gateway {gateway:?}: {e}"))?;
    url.path_segments_mut()
        .map_err(|()| format!("--gateway {gateway:?} is not a base URL"))?
        .pop_if_empty()
        .extend(segments);
    Ok(url)
}

/// Disconnects the user of `bearer` from `upstream` at the gateway whose
/// base (or MCP endpoint) URL is `gateway`.
pub async fn disconnect(
    gateway: &str,
    bearer: &str,
    upstream: &str,
) -> Result<(), DisconnectError> {
    let url = gateway_route(gateway, &["oauth", "connections", upstream])
        .map_err(DisconnectError::Usage)?;
    if bearer.trim().is_empty() {
        return Err(DisconnectError::Usage(
            "set MCPMUX_BEARER to your own API key or token for the gateway".into(),
        ));
    }
    let answer = reqwest::Client::new()
        .delete(url)
        .bearer_auth(bearer.trim())
        .send()
        .await
        .map_err(|e| {
            DisconnectError::Failed(format!("the gateway did not answer: {}", e.without_url()))
        })?;
    match answer.status() {
        StatusCode::OK => Ok(()),
        StatusCode::NOT_FOUND => Err(DisconnectError::NotConnected(upstream.to_owned())),
        status => {
            let body: String = answer
                .text()
                .await
                .unwrap_or_default()
                .chars()
                .take(300)
                .collect();
            Err(DisconnectError::Failed(format!(
                "the gateway answered {status}: {body}"
            )))
        }
    }
}
