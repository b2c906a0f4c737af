//! The operator's view of users' connected accounts (`mcpmux connections`):
//! list the grants in the token store and revoke one, working on the store
//! directly, whether a gateway is running or not. Run by the CLI's own
//! task; it owns no task.
//!
//! Revoking removes the grant from the store, then revokes it at the
//! upstream's authorization server (RFC 7009, best effort) with the
//! client configured in the upstream's `auth:` section. A running gateway
//! reads the store again when its user's token is next due: it finds no
//! grant, and the user is asked to connect again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::store::{Connected, TokenStore};
use super::{Connector, UpstreamCredentials};
use crate::Config;
use crate::config::{AuthMode, Transport, UpstreamAuth};

/// Why a listing or a revocation could not be done.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionsError {
    /// The config keeps no users' grants.
    #[error("no token store is configured: {0}")]
    NoStore(&'static str),
    /// `--upstream` names no upstream of the config.
    #[error("no upstream named `{0}` in the config")]
    UnknownUpstream(String),
    /// `--upstream` names an upstream users do not connect to.
    #[error(
        "upstream `{upstream}` has {has}; users connect their accounts only to upstreams with auth.mode: user"
    )]
    NotUserMode { upstream: String, has: String },
    /// There was no grant to revoke.
    #[error("`{client}` has no grant at upstream `{upstream}`")]
    NoGrant { upstream: String, client: String },
    /// The store could not be opened, read or written.
    #[error("the token store failed: {0}")]
    Store(String),
}

impl ConnectionsError {
    /// Whether the config or the command line is at fault (exit 64), not
    /// the store's content or the store itself.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            ConnectionsError::NoStore(_)
                | ConnectionsError::UnknownUpstream(_)
                | ConnectionsError::NotUserMode { .. }
        )
    }
}

/// One user's connection at one upstream: what may be shown, never a
/// token. Its `Display` is one tab-separated line; it serializes with
/// RFC 3339 UTC times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Connection {
    pub upstream: String,
    /// The identity that connected (the gateway's client name).
    pub client: String,
    #[serde(serialize_with = "rfc3339")]
    pub connected_at: SystemTime,
    /// When the stored access token expires; none: it does not say.
    #[serde(serialize_with = "rfc3339_or_null")]
    pub expires_at: Option<SystemTime>,
    /// Whether the grant has a refresh token.
    pub refreshable: bool,
}

impl Connection {
    fn of(connected: Connected) -> Self {
        let at = |ms| UNIX_EPOCH + Duration::from_millis(ms);
        Connection {
            upstream: connected.upstream,
            client: connected.identity,
            connected_at: at(connected.connected_at_ms),
            expires_at: connected.expires_at_ms.map(at),
            refreshable: connected.refreshable,
        }
    }
}

/// `UPSTREAM  CLIENT  CONNECTED_AT  EXPIRES_AT (or -)  yes|no`, tab-separated.
impl std::fmt::Display for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\t{}\t{}\t",
            self.upstream,
            self.client,
            humantime::format_rfc3339_seconds(self.connected_at)
        )?;
        match self.expires_at {
            Some(at) => write!(f, "{}", humantime::format_rfc3339_seconds(at))?,
            None => f.write_str("-")?,
        }
        f.write_str(if self.refreshable { "\tyes" } else { "\tno" })
    }
}

fn rfc3339<S: serde::Serializer>(at: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_rfc3339_seconds(*at))
}

fn rfc3339_or_null<S: serde::Serializer>(at: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match at {
        Some(at) => rfc3339(at, s),
        None => s.serialize_none(),
    }
}

/// What became of a removed grant at the authorization server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revocation {
    /// The server revoked it.
    Revoked,
    /// The server has no revocation endpoint.
    NoEndpoint,
    /// It was not tried, for this reason.
    NotTried(&'static str),
    /// It failed, for this reason (no token in it).
    Failed(String),
}

impl Revocation {
    /// A line for the operator when the grant was not revoked at the
    /// server (it was removed from the store all the same).
    pub fn note(&self) -> Option<String> {
        let why = match self {
            Revocation::Revoked => return None,
            Revocation::NoEndpoint => {
                "the authorization server has no revocation endpoint".to_owned()
            }
            Revocation::NotTried(why) => (*why).to_owned(),
            Revocation::Failed(why) => format!("revoking it failed: {why}"),
        };
        Some(format!(
            "not revoked at the authorization server ({why}); the grant was removed from the store"
        ))
    }
}

/// The token store of a config, and its upstreams users connect to.
pub struct UserConnections {
    /// None: the token file does not exist yet (nothing to list).
    store: Option<Arc<TokenStore>>,
    /// The token file when it does not exist yet.
    missing: Option<PathBuf>,
    /// The `auth.mode: user` upstreams: their auth and URL.
    upstreams: BTreeMap<String, (UpstreamAuth, String)>,
    /// What every other upstream has instead, for the error.
    others: BTreeMap<String, String>,
    callback_url: Option<String>,
}

impl std::fmt::Debug for UserConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserConnections")
            .field("store", &self.store)
            .field("upstreams", &self.upstreams.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl UserConnections {
    /// Opens `config`'s token store (Redis with `session_store`, else the
    /// file `credentials.path`, which is not created when missing).
    pub fn open(config: &Config) -> Result<UserConnections, ConnectionsError> {
        let mut upstreams = BTreeMap::new();
        let mut others = BTreeMap::new();
        for upstream in &config.upstreams {
            let auth = match &upstream.transport {
                Transport::Remote(remote) => remote.auth.as_ref().map(|a| (a, &remote.url)),
                Transport::Stdio(_) => None,
            };
            match auth {
                Some((auth, url)) if matches!(auth.mode, AuthMode::User { .. }) => {
                    upstreams.insert(upstream.name.clone(), (auth.clone(), url.clone()));
                }
                Some((auth, _)) => {
                    let has = format!("auth.mode: {}", auth.mode.name());
                    others.insert(upstream.name.clone(), has);
                }
                None => {
                    others.insert(upstream.name.clone(), "no auth section".to_owned());
                }
            }
        }
        if upstreams.is_empty() {
            return Err(ConnectionsError::NoStore(
                "no upstream has auth.mode: user, so no user connects an account",
            ));
        }
        let credentials = &config.credentials;
        let key = credentials
            .key
            .as_ref()
            .ok_or(ConnectionsError::NoStore("credentials.key is not set"))?;
        let store = |e: super::store::StoreError| ConnectionsError::Store(e.to_string());
        let (store, missing) = match &config.session_store {
            Some(url) => (
                Some(
                    TokenStore::redis(url.expose(), key, &credentials.previous_keys)
                        .map_err(store)?,
                ),
                None,
            ),
            None if !Path::new(&credentials.path).exists() => {
                (None, Some(credentials.path.clone()))
            }
            None => (
                Some(
                    TokenStore::file(&credentials.path, key, &credentials.previous_keys)
                        .map_err(store)?,
                ),
                None,
            ),
        };
        Ok(UserConnections {
            store: store.map(Arc::new),
            missing,
            upstreams,
            others,
            callback_url: credentials.callback_url.clone(),
        })
    }

    /// The token file, when it does not exist yet (nobody has connected,
    /// or the path is not the gateway's: a relative one is resolved from
    /// the working directory).
    pub fn missing_file(&self) -> Option<&Path> {
        self.missing.as_deref()
    }

    /// The connections, of one upstream and / or one client, ordered by
    /// upstream then client.
    pub async fn list(
        &self,
        upstream: Option<&str>,
        client: Option<&str>,
    ) -> Result<Vec<Connection>, ConnectionsError> {
        if let Some(upstream) = upstream {
            self.user_upstream(upstream)?;
        }
        let Some(store) = &self.store else {
            return Ok(Vec::new());
        };
        let listed = store
            .connections(client, upstream)
            .await
            .map_err(|e| ConnectionsError::Store(e.to_string()))?;
        Ok(listed.into_iter().map(Connection::of).collect())
    }

    /// Removes `client`'s grant at `upstream`, then revokes it at the
    /// upstream's authorization server (best effort: the grant is gone
    /// from the store whatever the server says).
    pub async fn revoke(
        &self,
        upstream: &str,
        client: &str,
    ) -> Result<Revocation, ConnectionsError> {
        let (auth, url) = self.user_upstream(upstream)?;
        let no_grant = || ConnectionsError::NoGrant {
            upstream: upstream.to_owned(),
            client: client.to_owned(),
        };
        let store = self.store.as_ref().ok_or_else(no_grant)?;
        let failed = |e: super::store::StoreError| ConnectionsError::Store(e.to_string());
        // `remove` returns no grant for one it cannot open, too: ask first.
        if store
            .connections(Some(client), Some(upstream))
            .await
            .map_err(failed)?
            .is_empty()
        {
            return Err(no_grant());
        }
        let removed = store.remove(upstream, client).await.map_err(failed)?;
        let Some(grant) = removed else {
            return Ok(Revocation::NotTried(
                "the stored grant could not be opened with the configured keys",
            ));
        };
        if auth.client.is_none() {
            // A token may only be revoked by the client it was issued to,
            // and the gateway registered that one in its own memory.
            return Ok(Revocation::NotTried(
                "the gateway registered its client dynamically, and only that client may revoke the grant; configure auth.client_id to let this command revoke",
            ));
        }
        let connector = Arc::new(Connector::new(
            Some(store.clone()),
            self.callback_url.clone(),
        ));
        let credentials = match UpstreamCredentials::new(upstream.into(), auth, url, connector) {
            Ok(credentials) => credentials,
            Err(e) => return Ok(Revocation::Failed(e.to_string())),
        };
        let oauth = match credentials.client().await {
            Ok(oauth) => oauth,
            Err(e) => return Ok(Revocation::Failed(e.to_string())),
        };
        let token = grant.refresh.as_ref().unwrap_or(&grant.access);
        Ok(match oauth.revoke(token, grant.refresh.is_some()).await {
            Ok(true) => Revocation::Revoked,
            Ok(false) => Revocation::NoEndpoint,
            Err(e) => Revocation::Failed(e.to_string()),
        })
    }

    /// The auth section and URL of `name`, an `auth.mode: user` upstream.
    fn user_upstream(&self, name: &str) -> Result<(&UpstreamAuth, &String), ConnectionsError> {
        if let Some((auth, url)) = self.upstreams.get(name) {
            return Ok((auth, url));
        }
        Err(match self.others.get(name) {
            Some(has) => ConnectionsError::NotUserMode {
                upstream: name.to_owned(),
                has: has.clone(),
            },
            None => ConnectionsError::UnknownUpstream(name.to_owned()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_one_tab_separated_line_and_json_in_utc() {
        let connection = Connection {
            upstream: "crm".into(),
            client: "alice".into(),
            connected_at: UNIX_EPOCH + Duration::from_millis(1_767_225_600_123),
            expires_at: None,
            refreshable: true,
        };
        assert_eq!(
            connection.to_string(),
            "crm\talice\t2026-01-01T00:00:00Z\t-\tyes"
        );
        let json = serde_json::to_value(&connection).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "upstream": "crm",
                "client": "alice",
                "connected_at": "2026-01-01T00:00:00Z",
                "expires_at": null,
                "refreshable": true,
            })
        );
    }

    #[test]
    fn only_a_bad_config_or_command_line_is_a_usage_error() {
        assert!(ConnectionsError::NoStore("x").is_usage());
        assert!(ConnectionsError::UnknownUpstream("x".into()).is_usage());
        let no_grant = ConnectionsError::NoGrant {
            upstream: "crm".into(),
            client: "alice".into(),
        };
        assert!(!no_grant.is_usage());
        assert_eq!(
            no_grant.to_string(),
            "`alice` has no grant at upstream `crm`"
        );
    }
}
