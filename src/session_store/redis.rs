//! The Redis (or Valkey) session store.
//!
//! Keys, per session: `mcpmux:session:{id}`, a hash (`version`,
//! `capabilities`, `client_info`, `identity` as JSON, `log_level`,
//! `stream`), and `mcpmux:session:{id}:uris`, the set of subscribed URIs;
//! both expire after the TTL unless a replica refreshes them. Events go
//! out as JSON on the channel `mcpmux:sessions`.
//!
//! Commands use one `ConnectionManager` (multiplexed and pipelined, it
//! reconnects by itself) with short timeouts, so a store that is down
//! fails the requests that need it within about a second. The pub/sub
//! connection is its own, redialled by [`RedisStore::run`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{Client, RedisError};
use futures_util::StreamExt as _;
use tokio_util::sync::CancellationToken;

use super::{Event, Health, Record, StoreError};

/// The channel replicas tell each other on.
const CHANNEL: &str = "mcpmux:sessions";
/// How long one command or connection attempt may take.
const TIMEOUT: Duration = Duration::from_secs(1);
/// How often the health check runs (and a lost event connection is redialled).
const CHECK_EVERY: Duration = Duration::from_secs(1);

pub(crate) struct RedisStore {
    client: Client,
    conn: ConnectionManager,
    ttl_secs: i64,
    /// Whether the last command or check succeeded, and the error when
    /// not: written by commands and the check task, read by `/status`.
    up: AtomicBool,
    error: Mutex<Option<String>>,
}

fn key(id: &str) -> String {
    format!("mcpmux:session:{id}")
}

fn uris_key(id: &str) -> String {
    format!("mcpmux:session:{id}:uris")
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("a record serializes")
}

impl RedisStore {
    pub(crate) fn open(url: &str, ttl: Duration) -> Result<Self, StoreError> {
        let client = Client::open(url).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(TIMEOUT))
            .set_response_timeout(Some(TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(1));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(Self {
            client,
            conn,
            ttl_secs: i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX),
            up: AtomicBool::new(true),
            error: Mutex::new(None),
        })
    }

    /// Records the outcome of a command for `/status` and `/readyz`.
    fn note<T>(&self, result: Result<T, RedisError>) -> Result<T, StoreError> {
        match result {
            Ok(v) => {
                self.up.store(true, Ordering::Relaxed);
                Ok(v)
            }
            Err(e) => {
                let why = e.to_string();
                self.up.store(false, Ordering::Relaxed);
                *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
                Err(StoreError::Unavailable(why))
            }
        }
    }

    async fn run_pipe<T: ::redis::FromRedisValue>(
        &self,
        pipe: &::redis::Pipeline,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        self.note(pipe.query_async::<T>(&mut conn).await)
    }

    pub(crate) async fn create(&self, id: &str, record: &Record) -> Result<(), StoreError> {
        let mut pipe = ::redis::pipe();
        pipe.atomic()
            .hset_multiple(
                key(id),
                &[
                    ("version", record.version.clone()),
                    ("capabilities", json(&record.capabilities)),
                    ("client_info", json(&record.client_info)),
                    ("identity", json(&record.identity)),
                    ("endpoint", record.endpoint.clone().unwrap_or_default()),
                ],
            )
            .ignore()
            .expire(key(id), self.ttl_secs)
            .ignore();
        self.run_pipe::<()>(&pipe).await
    }

    pub(crate) async fn load(&self, id: &str) -> Result<Option<Record>, StoreError> {
        let mut pipe = ::redis::pipe();
        pipe.hgetall(key(id))
            .smembers(uris_key(id))
            .expire(key(id), self.ttl_secs)
            .ignore()
            .expire(uris_key(id), self.ttl_secs)
            .ignore();
        let (fields, uris): (HashMap<String, String>, Vec<String>) = self.run_pipe(&pipe).await?;
        let Some(version) = fields.get("version") else {
            return Ok(None);
        };
        let parse = |name: &str| -> Result<serde_json::Value, StoreError> {
            fields
                .get(name)
                .map_or(Ok(serde_json::Value::Null), |text| {
                    serde_json::from_str(text)
                        .map_err(|e| StoreError::Corrupt(format!("{name}: {e}")))
                })
        };
        Ok(Some(Record {
            version: version.clone(),
            capabilities: match parse("capabilities")? {
                serde_json::Value::Object(map) => map,
                _ => serde_json::Map::new(),
            },
            client_info: parse("client_info")?,
            identity: serde_json::from_value(parse("identity")?)
                .map_err(|e| StoreError::Corrupt(format!("identity: {e}")))?,
            log_level: fields.get("log_level").cloned(),
            uris: uris.into_iter().collect(),
            stream: fields.get("stream").cloned(),
            endpoint: fields.get("endpoint").filter(|e| !e.is_empty()).cloned(),
        }))
    }

    pub(crate) async fn set_uri(&self, id: &str, uri: &str, on: bool) -> Result<(), StoreError> {
        let mut pipe = ::redis::pipe();
        if on {
            pipe.sadd(uris_key(id), uri).ignore();
        } else {
            pipe.srem(uris_key(id), uri).ignore();
        }
        pipe.expire(uris_key(id), self.ttl_secs).ignore();
        self.changed(id, pipe).await
    }

    pub(crate) async fn set_level(&self, id: &str, level: &str) -> Result<(), StoreError> {
        let mut pipe = ::redis::pipe();
        pipe.hset(key(id), "log_level", level).ignore();
        self.changed(id, pipe).await
    }

    /// Runs `pipe` and publishes that the session changed.
    async fn changed(&self, id: &str, mut pipe: ::redis::Pipeline) -> Result<(), StoreError> {
        let event = Event::Changed {
            session: id.to_owned(),
            replica: crate::replica::id().to_owned(),
        };
        pipe.atomic().publish(CHANNEL, json(&event)).ignore();
        self.run_pipe::<()>(&pipe).await
    }

    pub(crate) async fn claim_stream(&self, id: &str) -> Result<(), StoreError> {
        let event = Event::StreamMoved {
            session: id.to_owned(),
            replica: crate::replica::id().to_owned(),
        };
        let mut pipe = ::redis::pipe();
        pipe.atomic()
            .hset(key(id), "stream", crate::replica::id())
            .ignore()
            .publish(CHANNEL, json(&event))
            .ignore();
        self.run_pipe::<()>(&pipe).await
    }

    pub(crate) async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let event = Event::Deleted {
            session: id.to_owned(),
        };
        let mut pipe = ::redis::pipe();
        pipe.atomic()
            .del(key(id))
            .del(uris_key(id))
            .ignore()
            .publish(CHANNEL, json(&event))
            .ignore();
        let (deleted,): (u64,) = self.run_pipe(&pipe).await?;
        Ok(deleted > 0)
    }

    /// Publishes `event` alone.
    pub(crate) async fn publish(&self, event: &Event) -> Result<(), StoreError> {
        let mut pipe = ::redis::pipe();
        pipe.publish(CHANNEL, json(event)).ignore();
        self.run_pipe::<()>(&pipe).await
    }

    pub(crate) async fn refresh(&self, ids: &[Arc<str>]) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut pipe = ::redis::pipe();
        for id in ids {
            pipe.expire(key(id), self.ttl_secs)
                .ignore()
                .expire(uris_key(id), self.ttl_secs)
                .ignore();
        }
        self.run_pipe::<()>(&pipe).await
    }

    pub(crate) fn health(&self) -> Health {
        let up = self.up.load(Ordering::Relaxed);
        let error = match up {
            true => None,
            false => self.error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        };
        Health {
            kind: "redis",
            up,
            error,
        }
    }

    /// The health check and the event listener, until `stop`.
    pub(crate) async fn run(
        &self,
        events: tokio::sync::mpsc::Sender<Event>,
        stop: CancellationToken,
    ) {
        let mut check = tokio::time::interval(CHECK_EVERY);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // (Re)connect the listener; while that fails, only check.
            let mut pubsub = match tokio::time::timeout(TIMEOUT, self.client.get_async_pubsub())
                .await
            {
                Ok(Ok(mut p)) => match tokio::time::timeout(TIMEOUT, p.subscribe(CHANNEL)).await {
                    Ok(Ok(())) => Some(p),
                    _ => None,
                },
                _ => None,
            };
            let mut messages = pubsub.as_mut().map(|p| p.on_message());
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = check.tick() => {
                        let mut conn = self.conn.clone();
                        let ping = ::redis::cmd("PING").query_async::<String>(&mut conn).await;
                        let _ = self.note(ping);
                        if messages.is_none() {
                            break;
                        }
                    }
                    message = async {
                        match messages.as_mut() {
                            Some(m) => m.next().await,
                            None => std::future::pending().await,
                        }
                    } => {
                        let Some(message) = message else {
                            tracing::warn!("session store: the event connection closed; reconnecting");
                            break;
                        };
                        let Ok(event) = serde_json::from_slice::<Event>(message.get_payload_bytes()) else {
                            continue;
                        };
                        if events.try_send(event).is_err() {
                            tracing::warn!("session store: event queue full; an event was dropped");
                        }
                    }
                }
            }
        }
    }
}
