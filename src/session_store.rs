//! Session state shared by replicas (`session_store: redis://...`).
//!
//! A 2025-era session is a local [`crate::downstream`] session on every
//! replica that serves it; what they must agree on lives here: the
//! negotiated version, the client's capabilities and info, its identity,
//! its log level, the URIs it subscribed to, and which replica holds its
//! notification stream. Records expire after `sessions.idle_timeout`
//! without use (the TTL is refreshed by each replica for the sessions it
//! served). Replicas tell each other on one channel that a session was
//! deleted, that its stream moved, that its subscriptions changed, or
//! that its client answered there a request another replica asked it.
//!
//! The store is an enum so another backend is one more variant; today it
//! is Redis (or Valkey) through the `redis` crate's `ConnectionManager`
//! (one multiplexed, self-reconnecting connection per replica) and one
//! pub/sub connection. Nothing here is on the path of a session that is
//! already in this replica's memory.

pub(crate) mod redis;

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What replicas share about one session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The protocol version agreed in `initialize`.
    pub version: String,
    /// The capabilities the client declared in `initialize`.
    pub capabilities: Map<String, Value>,
    /// Its `clientInfo`.
    pub client_info: Value,
    /// The authenticated client that created it (none: auth is off).
    pub identity: Option<StoredIdentity>,
    /// Its `logging/setLevel`, if it set one.
    pub log_level: Option<String>,
    /// The namespaced URIs it subscribed to.
    pub uris: BTreeSet<String>,
    /// The replica holding its notification stream, if any did.
    pub stream: Option<String>,
    /// The endpoint it was created at (`/mcp/<name>`); none: `/mcp`.
    #[serde(default)]
    pub endpoint: Option<String>,
}

/// [`crate::auth::Identity`] as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredIdentity {
    pub client: String,
    pub scopes: Vec<String>,
}

impl StoredIdentity {
    pub(crate) fn of(identity: &crate::auth::Identity) -> Self {
        Self {
            client: identity.client.to_string(),
            scopes: identity.scopes.clone(),
        }
    }

    pub(crate) fn to_identity(&self) -> crate::auth::Identity {
        crate::auth::Identity::new(self.client.as_str(), self.scopes.clone())
    }
}

/// What one replica tells the others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Event {
    /// The session ended (`DELETE`): every replica drops its copy.
    Deleted { session: String },
    /// `replica` now holds the session's notification stream: the others
    /// release the upstream subscriptions they held for it.
    StreamMoved { session: String, replica: String },
    /// Its subscriptions or log level changed on `replica`: the holder of
    /// its stream catches up.
    Changed { session: String, replica: String },
    /// A client answered, on another replica, request `ask` that
    /// `replica` asked it (a load balancer sent the answer elsewhere):
    /// `replica` hands it to the waiting call. `result` or `error` is the
    /// answer's JSON text.
    Answered {
        session: String,
        replica: String,
        ask: String,
        result: Option<String>,
        error: Option<String>,
    },
}

/// Why the store could not answer.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum StoreError {
    #[error("the session store is unreachable: {0}")]
    Unavailable(String),
    #[error("the session store holds a record this replica cannot read: {0}")]
    Corrupt(String),
}

/// The store's state for `/status`, `/metrics` and `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Health {
    /// The backend (`redis`).
    pub kind: &'static str,
    pub up: bool,
    /// The last error while down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A session store.
pub(crate) enum SessionStore {
    Redis(self::redis::RedisStore),
}

impl SessionStore {
    /// The store at `url` (`redis://...`), records kept for `ttl` without
    /// use. Connects lazily: a store that is down at start makes new
    /// sessions fail, not the gateway.
    pub(crate) fn open(url: &str, ttl: std::time::Duration) -> Result<Arc<Self>, StoreError> {
        Ok(Arc::new(Self::Redis(self::redis::RedisStore::open(
            url, ttl,
        )?)))
    }

    pub(crate) async fn create(&self, id: &str, record: &Record) -> Result<(), StoreError> {
        match self {
            Self::Redis(r) => r.create(id, record).await,
        }
    }

    /// The session's record (its TTL refreshed), none if it does not exist.
    pub(crate) async fn load(&self, id: &str) -> Result<Option<Record>, StoreError> {
        match self {
            Self::Redis(r) => r.load(id).await,
        }
    }

    /// Adds (`true`) or removes a subscribed URI, and tells the others.
    pub(crate) async fn set_uri(&self, id: &str, uri: &str, on: bool) -> Result<(), StoreError> {
        match self {
            Self::Redis(r) => r.set_uri(id, uri, on).await,
        }
    }

    /// Records its log level, and tells the others.
    pub(crate) async fn set_level(&self, id: &str, level: &str) -> Result<(), StoreError> {
        match self {
            Self::Redis(r) => r.set_level(id, level).await,
        }
    }

    /// Marks this replica as the holder of the session's stream, and tells the others.
    pub(crate) async fn claim_stream(&self, id: &str) -> Result<(), StoreError> {
        match self {
            Self::Redis(r) => r.claim_stream(id).await,
        }
    }

    /// Deletes the session everywhere; false if it did not exist.
    pub(crate) async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        match self {
            Self::Redis(r) => r.delete(id).await,
        }
    }

    /// Tells the other replicas a client's answer to a request `replica`
    /// asked it ([`Event::Answered`]).
    pub(crate) async fn relay_answer(&self, event: &Event) -> Result<(), StoreError> {
        match self {
            Self::Redis(r) => r.publish(event).await,
        }
    }

    /// Extends the TTL of sessions this replica served.
    pub(crate) async fn refresh(&self, ids: &[Arc<str>]) -> Result<(), StoreError> {
        match self {
            Self::Redis(r) => r.refresh(ids).await,
        }
    }

    pub(crate) fn health(&self) -> Health {
        match self {
            Self::Redis(r) => r.health(),
        }
    }

    /// Runs until `stop`: checks the store every second (for
    /// [`Self::health`]) and hands the other replicas' events to `events`
    /// (bounded; when full an event is dropped with a warning: they are
    /// hints, and a client's next stream catches up from the record).
    pub(crate) async fn run(
        self: Arc<Self>,
        events: tokio::sync::mpsc::Sender<Event>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        match &*self {
            Self::Redis(r) => r.run(events, stop).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replicas of different builds read each other's events: the wire
    /// form is part of the contract.
    #[test]
    fn events_have_a_stable_json_form() {
        let cases = [
            (
                Event::Deleted {
                    session: "s".into(),
                },
                r#"{"deleted":{"session":"s"}}"#,
            ),
            (
                Event::StreamMoved {
                    session: "s".into(),
                    replica: "0a1b2c3d".into(),
                },
                r#"{"stream_moved":{"session":"s","replica":"0a1b2c3d"}}"#,
            ),
            (
                Event::Changed {
                    session: "s".into(),
                    replica: "0a1b2c3d".into(),
                },
                r#"{"changed":{"session":"s","replica":"0a1b2c3d"}}"#,
            ),
            (
                Event::Answered {
                    session: "s".into(),
                    replica: "0a1b2c3d".into(),
                    ask: "mcpmux-0a1b2c3d-4".into(),
                    result: Some(r#"{"action":"decline"}"#.into()),
                    error: None,
                },
                r#"{"answered":{"session":"s","replica":"0a1b2c3d","ask":"mcpmux-0a1b2c3d-4","result":"{\"action\":\"decline\"}","error":null}}"#,
            ),
        ];
        for (event, text) in cases {
            assert_eq!(serde_json::to_string(&event).unwrap(), text);
            assert_eq!(serde_json::from_str::<Event>(text).unwrap(), event);
        }
        assert!(serde_json::from_str::<Event>(r#"{"other":{}}"#).is_err());
    }

    #[test]
    fn an_identity_survives_the_store() {
        let identity = crate::auth::Identity::new("ops", vec!["mcp:read".into()]);
        let stored = StoredIdentity::of(&identity);
        let text = serde_json::to_string(&Some(stored)).unwrap();
        let back: Option<StoredIdentity> = serde_json::from_str(&text).unwrap();
        assert_eq!(back.unwrap().to_identity(), identity);
    }

    #[tokio::test]
    async fn opening_connects_nothing() {
        let store = SessionStore::open("redis://127.0.0.1:1", std::time::Duration::from_secs(60))
            .expect("opening is lazy");
        assert_eq!(
            store.health(),
            Health {
                kind: "redis",
                up: true,
                error: None
            }
        );
    }
}
