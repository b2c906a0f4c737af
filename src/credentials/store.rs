//! The token store: each person's grant at each upstream, kept per
//! (upstream, identity) so connected accounts survive restarts. Called by
//! whichever task handles a request that needs the token; it owns no task.
//!
//! A record is the grant sealed with [`Sealer`] (AES-256-GCM) under the
//! purpose `mcpmux.grant\n{upstream}\n{identity}`, so a record copied to
//! another person or upstream does not open, plus what `/status` may show
//! in clear beside it ([`Connected`]). `key` seals; a record that opens
//! only with one of the previous keys is returned and sealed again with
//! `key`. A record no key opens is [`StoreError::Corrupt`] for that record
//! alone. Tokens never appear in the backend, an error or a log line.
//!
//! Two backends: one JSON file ([`file`], for a single gateway) or Redis
//! ([`redis`], shared by replicas).

mod file;
mod redis;

pub(crate) use redis::{lazy_manager as redis_manager, redact as redact_redis};

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::config::{Secret, StateKey};
use crate::seal::Sealer;

/// One user's grant at one upstream: what the token endpoint gave. Debug
/// masks access and refresh.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Grant {
    pub access: Secret,
    pub refresh: Option<Secret>,
    pub expires_at: Option<SystemTime>,
    pub scope: Option<String>,
}

/// What may be shown about a connection (never a token): for `/status`,
/// `/ui` and the user's own list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Connected {
    pub upstream: String,
    pub identity: String,
    pub connected_at_ms: u64,
    pub expires_at_ms: Option<u64>,
    pub refreshable: bool,
}

/// Why the store could not answer. No variant carries a token or a
/// record's content.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum StoreError {
    /// The file (or its directory) could not be read or written.
    #[error("token store {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not a token store this version reads.
    #[error("token store {}: {reason}", path.display())]
    Unreadable { path: PathBuf, reason: String },
    /// Redis failed; the message never holds the URL's password.
    #[error("token store (redis): {0}")]
    Redis(String),
    /// One record cannot be read; the others can.
    #[error("the stored grant of `{identity}` at `{upstream}` cannot be read: {why}")]
    Corrupt {
        upstream: String,
        identity: String,
        why: &'static str,
    },
}

/// Why a record did not open, for [`StoreError::Corrupt`].
const NO_KEY_OPENS: &str =
    "no configured key opens it (it was sealed with another key, altered, or moved)";

/// A record as stored: metadata in clear, the grant sealed.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
struct Record {
    upstream: String,
    identity: String,
    connected_at_ms: u64,
    #[serde(default)]
    expires_at_ms: Option<u64>,
    refreshable: bool,
    /// [`Payload`] as JSON, sealed for [`purpose`].
    sealed: String,
}

impl Record {
    fn connected(&self) -> Connected {
        Connected {
            upstream: self.upstream.clone(),
            identity: self.identity.clone(),
            connected_at_ms: self.connected_at_ms,
            expires_at_ms: self.expires_at_ms,
            refreshable: self.refreshable,
        }
    }

    /// Whether [`TokenStore::connections`] with these filters lists it.
    fn matches(&self, identity: Option<&str>, upstream: Option<&str>) -> bool {
        identity.is_none_or(|i| i == self.identity) && upstream.is_none_or(|u| u == self.upstream)
    }
}

/// What is sealed: the grant itself.
#[derive(Serialize, Deserialize)]
struct Payload {
    access: String,
    #[serde(default)]
    refresh: Option<String>,
    /// Unix milliseconds.
    #[serde(default)]
    expires_at: Option<u64>,
    #[serde(default)]
    scope: Option<String>,
}

/// The associated data a grant is sealed with: it binds the record to
/// its upstream and identity.
fn purpose(upstream: &str, identity: &str) -> String {
    format!("mcpmux.grant\n{upstream}\n{identity}")
}

fn to_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn from_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn now_ms() -> u64 {
    to_ms(SystemTime::now())
}

/// The key that seals, and those that still open.
struct Keys {
    current: Sealer,
    previous: Vec<Sealer>,
}

impl Keys {
    fn new(key: &StateKey, previous_keys: &[StateKey]) -> Self {
        Self {
            current: Sealer::new(key.bytes()),
            previous: previous_keys
                .iter()
                .filter(|k| *k != key)
                .map(|k| Sealer::new(k.bytes()))
                .collect(),
        }
    }

    /// The plaintext, and whether only a previous key opened it.
    fn open(&self, purpose: &str, sealed: &str) -> Option<(Vec<u8>, bool)> {
        if let Ok(plain) = self.current.open(purpose, sealed) {
            return Some((plain, false));
        }
        self.previous
            .iter()
            .find_map(|s| s.open(purpose, sealed).ok())
            .map(|plain| (plain, true))
    }
}

enum Backend {
    File(file::FileStore),
    Redis(redis::RedisStore),
}

/// The gateway's store of users' grants. Cheap to share behind an `Arc`;
/// every method takes `&self`.
pub(crate) struct TokenStore {
    keys: Keys,
    backend: Backend,
}

impl std::fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.backend {
            Backend::File(_) => "file",
            Backend::Redis(_) => "redis",
        };
        f.debug_struct("TokenStore").field("kind", &kind).finish()
    }
}

impl TokenStore {
    /// A store in `path` (created with mode 0600 and its directory if
    /// absent; an existing file is read and checked now: a file that
    /// cannot be read or parsed is an error naming the path).
    pub(crate) fn file(
        path: &Path,
        key: &StateKey,
        previous_keys: &[StateKey],
    ) -> Result<TokenStore, StoreError> {
        Ok(TokenStore {
            keys: Keys::new(key, previous_keys),
            backend: Backend::File(file::FileStore::open(path)?),
        })
    }

    /// A store in Redis at `url` (`redis://...`, `rediss://...` or
    /// `redis+unix://...`), shared by replicas. Connects lazily: a Redis
    /// that is down fails the calls that need it, not this.
    pub(crate) fn redis(
        url: &str,
        key: &StateKey,
        previous_keys: &[StateKey],
    ) -> Result<TokenStore, StoreError> {
        Ok(TokenStore {
            keys: Keys::new(key, previous_keys),
            backend: Backend::Redis(redis::RedisStore::open(url)?),
        })
    }

    /// `payload` sealed for `purpose` with the current key: state the
    /// gateway hands out and takes back on any replica (a flow's `state`).
    pub(crate) fn seal(&self, purpose: &str, payload: &[u8]) -> String {
        self.keys.current.seal(purpose, payload)
    }

    /// The payload of a token sealed for `purpose` with any of the keys.
    pub(crate) fn open_sealed(&self, purpose: &str, token: &str) -> Option<Vec<u8>> {
        self.keys.open(purpose, token).map(|(plain, _)| plain)
    }

    /// Claims `id` for `ttl`: true the first time, false while it is
    /// claimed (on any replica sharing the store). What makes a flow's
    /// `state` work once.
    pub(crate) async fn claim_once(&self, id: &str, ttl: Duration) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::File(f) => Ok(f.claim_once(id, ttl)),
            Backend::Redis(r) => r.claim_once(id, ttl).await,
        }
    }

    /// The grant of `identity` at `upstream`, if there is one. One sealed
    /// with a previous key is sealed again with the current one.
    pub(crate) async fn get(
        &self,
        upstream: &str,
        identity: &str,
    ) -> Result<Option<Grant>, StoreError> {
        let record = match &self.backend {
            Backend::File(f) => f.load(upstream, identity).await,
            Backend::Redis(r) => r.load(upstream, identity).await?,
        };
        let Some(record) = record else {
            return Ok(None);
        };
        let (grant, stale) = self.open(upstream, identity, &record)?;
        if stale {
            let plain = serde_json::to_vec(&payload_of(&grant)).expect("a grant serializes");
            let sealed = self.keys.current.seal(&purpose(upstream, identity), &plain);
            let resealed = match &self.backend {
                Backend::File(f) => f.reseal(upstream, identity, &record.sealed, sealed).await,
                Backend::Redis(r) => r.reseal(upstream, identity, &record.sealed, sealed).await,
            };
            match resealed {
                Ok(_) => tracing::debug!(
                    upstream = %upstream,
                    identity = %identity,
                    "token store: a grant sealed with a previous key was sealed again"
                ),
                Err(e) => tracing::warn!(
                    upstream = %upstream,
                    identity = %identity,
                    error = %e,
                    "token store: could not seal a grant again with the current key"
                ),
            }
        }
        Ok(Some(grant))
    }

    /// Stores `grant` for `identity` at `upstream`, replacing any other;
    /// it keeps the `connected_at` of the record it replaces, else now.
    pub(crate) async fn put(
        &self,
        upstream: &str,
        identity: &str,
        grant: &Grant,
    ) -> Result<(), StoreError> {
        let plain = serde_json::to_vec(&payload_of(grant)).expect("a grant serializes");
        let record = Record {
            upstream: upstream.to_owned(),
            identity: identity.to_owned(),
            connected_at_ms: now_ms(),
            expires_at_ms: grant.expires_at.map(to_ms),
            refreshable: grant.refresh.is_some(),
            sealed: self.keys.current.seal(&purpose(upstream, identity), &plain),
        };
        match &self.backend {
            Backend::File(f) => f.put(record).await,
            Backend::Redis(r) => r.put(record).await,
        }
    }

    /// Forgets the grant of `identity` at `upstream` and returns it; none
    /// if there was none, or if it could not be opened (it is removed all
    /// the same, with a warning).
    pub(crate) async fn remove(
        &self,
        upstream: &str,
        identity: &str,
    ) -> Result<Option<Grant>, StoreError> {
        let record = match &self.backend {
            Backend::File(f) => f.take(upstream, identity).await?,
            Backend::Redis(r) => r.take(upstream, identity).await?,
        };
        Ok(record.and_then(|r| self.open(upstream, identity, &r).ok().map(|(g, _)| g)))
    }

    /// Every connection, or those of one identity / one upstream (no
    /// tokens), ordered by upstream then identity.
    pub(crate) async fn connections(
        &self,
        identity: Option<&str>,
        upstream: Option<&str>,
    ) -> Result<Vec<Connected>, StoreError> {
        let mut list = match &self.backend {
            Backend::File(f) => f.list(identity, upstream).await,
            Backend::Redis(r) => r.list(identity, upstream).await?,
        };
        list.sort_by(|a, b| (&a.upstream, &a.identity).cmp(&(&b.upstream, &b.identity)));
        Ok(list)
    }

    /// Opens `record` as the grant of `identity` at `upstream`; `true`
    /// when only a previous key opened it. Logs one warning when not.
    fn open(
        &self,
        upstream: &str,
        identity: &str,
        record: &Record,
    ) -> Result<(Grant, bool), StoreError> {
        let opened = self
            .keys
            .open(&purpose(upstream, identity), &record.sealed)
            .and_then(|(plain, stale)| {
                let payload: Payload = serde_json::from_slice(&plain).ok()?;
                Some((grant_of(payload), stale))
            });
        opened.ok_or_else(|| {
            tracing::warn!(
                upstream = %upstream,
                identity = %identity,
                "token store: a stored grant does not open with any configured key; it is ignored"
            );
            StoreError::Corrupt {
                upstream: upstream.to_owned(),
                identity: identity.to_owned(),
                why: NO_KEY_OPENS,
            }
        })
    }
}

fn payload_of(grant: &Grant) -> Payload {
    Payload {
        access: grant.access.expose().to_owned(),
        refresh: grant.refresh.as_ref().map(|r| r.expose().to_owned()),
        expires_at: grant.expires_at.map(to_ms),
        scope: grant.scope.clone(),
    }
}

fn grant_of(payload: Payload) -> Grant {
    Grant {
        access: Secret::new(payload.access),
        refresh: payload.refresh.map(Secret::new),
        expires_at: payload.expires_at.map(from_ms),
        scope: payload.scope,
    }
}

#[cfg(test)]
mod tests;
