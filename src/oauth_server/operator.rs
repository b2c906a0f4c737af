//! The operator's `mcpmux grants`, through a running gateway's HTTP routes
//! (`GET` and `DELETE /oauth/grants`): list the grants users gave hosts at
//! the gateway's login, and revoke a user's. The admin credential comes
//! from the environment, never the command line; nothing here reads the
//! state store.

use reqwest::{Method, StatusCode};
use serde_json::Value;

/// Why `mcpmux grants` did not do its work.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GrantsError {
    /// The command was given something unusable (exit 64).
    #[error("{0}")]
    Usage(String),
    /// The gateway could not be reached or refused.
    #[error("{0}")]
    Failed(String),
}

impl GrantsError {
    /// Whether the command line (or environment) was wrong.
    pub fn is_usage(&self) -> bool {
        matches!(self, GrantsError::Usage(_))
    }
}

/// One grant: a user's logins at one host (client), never a token.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct Grant {
    pub user: String,
    pub client_id: String,
    pub scope: String,
    pub created_ms: u64,
    pub used_ms: u64,
    pub logins: u64,
    pub consented: bool,
}

/// The grants at the gateway at `gateway` (its base or `/mcp` URL), of
/// `user` or everyone.
pub async fn list_grants(
    gateway: &str,
    key: &str,
    user: Option<&str>,
) -> Result<Vec<Grant>, GrantsError> {
    let mut query = Vec::new();
    if let Some(user) = user {
        query.push(("user", user));
    }
    let body = send(Method::GET, gateway, key, &query).await?;
    serde_json::from_value(body["grants"].clone()).map_err(|e| {
        GrantsError::Failed(format!("the gateway's answer is not a list of grants: {e}"))
    })
}

/// Revokes `user`'s grants (to `client_id` only, if given); how many
/// logins ended.
pub async fn revoke_grants(
    gateway: &str,
    key: &str,
    user: &str,
    client_id: Option<&str>,
) -> Result<u64, GrantsError> {
    let mut query = vec![("user", user)];
    if let Some(client_id) = client_id {
        query.push(("client_id", client_id));
    }
    let body = send(Method::DELETE, gateway, key, &query).await?;
    Ok(body["revoked"].as_u64().unwrap_or(0))
}

async fn send(
    method: Method,
    gateway: &str,
    key: &str,
    query: &[(&str, &str)],
) -> Result<Value, GrantsError> {
    let mut url = crate::credentials::own::gateway_route(gateway, &["oauth", "grants"])
        .map_err(GrantsError::Usage)?;
    if key.trim().is_empty() {
        return Err(GrantsError::Usage(
            "set MCPMUX_ADMIN_KEY to the gateway's admin key (auth.admin)".into(),
        ));
    }
    url.query_pairs_mut().extend_pairs(query);
    let answer = reqwest::Client::new()
        .request(method, url)
        .bearer_auth(key.trim())
        .send()
        .await
        .map_err(|e| {
            GrantsError::Failed(format!("the gateway did not answer: {}", e.without_url()))
        })?;
    let status = answer.status();
    let text = answer.text().await.unwrap_or_default();
    if status != StatusCode::OK {
        let shown: String = text.chars().take(300).collect();
        return Err(GrantsError::Failed(format!(
            "the gateway answered {status}: {shown}"
        )));
    }
    serde_json::from_str(&text)
        .map_err(|_| GrantsError::Failed("the gateway's answer is not JSON".into()))
}
