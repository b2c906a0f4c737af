//! The token store in Redis (or Valkey), shared by replicas.
//!
//! One key per record, `mcpmux:grant:{upstream}:{identity}` with both
//! parts percent-encoded (so a `:` in an identity cannot collide), holding
//! the record as JSON; the set `mcpmux:grants` lists the record keys.
//! Changes are compare-and-set (a short Lua script checks the value it
//! replaces), so two replicas writing one record at once never lose the
//! first `connected_at` nor resurrect a removed grant.
//!
//! Commands use one `ConnectionManager` (multiplexed, reconnecting by
//! itself), made lazily as in [`crate::session_store`]. Errors never
//! carry the URL's password.

use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{Client, RedisError};

use super::{Connected, Record, StoreError};

/// The set of record keys.
const SET: &str = "mcpmux:grants";
/// What every record key starts with.
const PREFIX: &str = "mcpmux:grant:";
/// How long one command or connection attempt may take.
const TIMEOUT: Duration = Duration::from_secs(2);
/// How many times a change is tried while other replicas change the record.
const ATTEMPTS: usize = 16;
/// Record keys per `MGET`.
const BATCH: usize = 256;

/// KEYS[1] the record, KEYS[2] the set; ARGV[1] the value expected (empty:
/// none), ARGV[2] the new one (empty: delete). 1 if it was set, 0 if the
/// record was not as expected.
const SWAP: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur == false then cur = '' end
if cur ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
  redis.call('SREM', KEYS[2], KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('SADD', KEYS[2], KEYS[1])
end
return 1
";

pub(super) struct RedisStore {
    conn: ConnectionManager,
    /// The URL's secrets, removed from every error message.
    secrets: Vec<String>,
}

/// The key of the record of `identity` at `upstream`.
pub(super) fn key(upstream: &str, identity: &str) -> String {
    format!("{PREFIX}{}:{}", encode(upstream), encode(identity))
}

/// The upstream and identity of a record key.
pub(super) fn parse_key(key: &str) -> Option<(String, String)> {
    let (upstream, identity) = key.strip_prefix(PREFIX)?.split_once(':')?;
    Some((decode(upstream)?, decode(identity)?))
}

/// Percent-encodes all but letters, digits and `-._~@+=`.
fn encode(part: &str) -> String {
    let mut out = String::with_capacity(part.len());
    for byte in part.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~@+=".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn decode(part: &str) -> Option<String> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The parts of `url` that must not be shown: the password of its user
/// info and a `password`/`pass` query parameter, as written and decoded.
fn secrets_of(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if let Some((user_info, _)) = authority.rsplit_once('@')
        && let Some((_, password)) = user_info.split_once(':')
    {
        found.push(password.to_owned());
    }
    if let Some((_, query)) = rest.split_once('?') {
        for pair in query.split(['&', '#']) {
            if let Some(("password" | "pass", value)) = pair.split_once('=') {
                found.push(value.to_owned());
            }
        }
    }
    let decoded: Vec<String> = found.iter().filter_map(|s| decode(s)).collect();
    found.extend(decoded);
    found.retain(|s| !s.is_empty());
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    found.dedup();
    found
}

pub(crate) fn redact(message: String, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(message, |m, secret| m.replace(secret.as_str(), "***"))
}

/// A lazily connecting, reconnecting `ConnectionManager` for `url` with 1 s
/// timeouts, and the secrets its errors must not show; the error is
/// already redacted.
pub(crate) fn lazy_manager(url: &str) -> Result<(ConnectionManager, Vec<String>), String> {
    let secrets = secrets_of(url);
    let fail = |e: RedisError| redact(e.to_string(), &secrets);
    let client = Client::open(url).map_err(fail)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(TIMEOUT))
        .set_response_timeout(Some(TIMEOUT))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_secs(1));
    let conn = ConnectionManager::new_lazy_with_config(client, config).map_err(fail)?;
    Ok((conn, secrets))
}

impl RedisStore {
    pub(super) fn open(url: &str) -> Result<Self, StoreError> {
        let (conn, secrets) = lazy_manager(url).map_err(StoreError::Redis)?;
        Ok(Self { conn, secrets })
    }

    fn fail(&self, e: RedisError) -> StoreError {
        StoreError::Redis(redact(e.to_string(), &self.secrets))
    }

    /// `SET mcpmux:claimed:{id} 1 NX EX ttl`: true if this call set it.
    pub(super) async fn claim_once(&self, id: &str, ttl: Duration) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let set: Option<String> = ::redis::cmd("SET")
            .arg(format!("mcpmux:claimed:{id}"))
            .arg(1)
            .arg("NX")
            .arg("EX")
            .arg(ttl.as_secs().max(1))
            .query_async(&mut conn)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(set.is_some())
    }

    async fn get_raw(&self, key: &str) -> Result<Option<String>, StoreError> {
        let mut conn = self.conn.clone();
        ::redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.fail(e))
    }

    /// Sets (or, `new` empty, deletes) `key` if it holds `expected` (empty: nothing).
    async fn swap(&self, key: &str, expected: &str, new: &str) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let done: i64 = ::redis::cmd("EVAL")
            .arg(SWAP)
            .arg(2)
            .arg(key)
            .arg(SET)
            .arg(expected)
            .arg(new)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(done == 1)
    }

    pub(super) async fn load(
        &self,
        upstream: &str,
        identity: &str,
    ) -> Result<Option<Record>, StoreError> {
        match self.get_raw(&key(upstream, identity)).await? {
            None => Ok(None),
            Some(raw) => decode_record(upstream, identity, &raw).map(Some),
        }
    }

    /// Stores `record`, keeping the `connected_at_ms` of the one it replaces.
    pub(super) async fn put(&self, mut record: Record) -> Result<(), StoreError> {
        let key = key(&record.upstream, &record.identity);
        let now = record.connected_at_ms;
        for _ in 0..ATTEMPTS {
            let old = self.get_raw(&key).await?;
            record.connected_at_ms = old
                .as_deref()
                .and_then(|raw| serde_json::from_str::<Record>(raw).ok())
                .map_or(now, |old| old.connected_at_ms);
            let new = serde_json::to_string(&record).expect("a record serializes");
            if self.swap(&key, old.as_deref().unwrap_or(""), &new).await? {
                return Ok(());
            }
        }
        Err(contended())
    }

    /// Replaces the record's sealed grant if it is still `old`; whether it was.
    pub(super) async fn reseal(
        &self,
        upstream: &str,
        identity: &str,
        old: &str,
        sealed: String,
    ) -> Result<bool, StoreError> {
        let key = key(upstream, identity);
        let Some(raw) = self.get_raw(&key).await? else {
            return Ok(false);
        };
        let mut record = decode_record(upstream, identity, &raw)?;
        if record.sealed != old {
            return Ok(false);
        }
        record.sealed = sealed;
        let new = serde_json::to_string(&record).expect("a record serializes");
        self.swap(&key, &raw, &new).await
    }

    /// Removes the record and returns it (none, with a warning, if it was
    /// not a record this gateway reads).
    pub(super) async fn take(
        &self,
        upstream: &str,
        identity: &str,
    ) -> Result<Option<Record>, StoreError> {
        let key = key(upstream, identity);
        for _ in 0..ATTEMPTS {
            let Some(raw) = self.get_raw(&key).await? else {
                return Ok(None);
            };
            if self.swap(&key, &raw, "").await? {
                return Ok(decode_record(upstream, identity, &raw).ok());
            }
        }
        Err(contended())
    }

    pub(super) async fn list(
        &self,
        identity: Option<&str>,
        upstream: Option<&str>,
    ) -> Result<Vec<Connected>, StoreError> {
        let mut conn = self.conn.clone();
        let keys: Vec<String> = ::redis::cmd("SMEMBERS")
            .arg(SET)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.fail(e))?;
        let wanted: Vec<(String, (String, String))> = keys
            .into_iter()
            .filter_map(|k| parse_key(&k).map(|parts| (k, parts)))
            .filter(|(_, (u, i))| {
                identity.is_none_or(|want| want == i) && upstream.is_none_or(|want| want == u)
            })
            .collect();
        let mut list = Vec::with_capacity(wanted.len());
        for batch in wanted.chunks(BATCH) {
            let values: Vec<Option<String>> = ::redis::cmd("MGET")
                .arg(batch.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>())
                .query_async(&mut conn)
                .await
                .map_err(|e| self.fail(e))?;
            for ((_, (u, i)), value) in batch.iter().zip(values) {
                // Removed since SMEMBERS, or unreadable (warned).
                if let Some(record) = value.and_then(|raw| decode_record(u, i, &raw).ok()) {
                    list.push(record.connected());
                }
            }
        }
        Ok(list)
    }
}

fn contended() -> StoreError {
    StoreError::Redis("the record kept changing while it was written".to_owned())
}

/// The record of `identity` at `upstream` in `raw`: one that does not parse
/// or names another upstream or identity is corrupt (with a warning).
fn decode_record(upstream: &str, identity: &str, raw: &str) -> Result<Record, StoreError> {
    match serde_json::from_str::<Record>(raw) {
        Ok(record) if record.upstream == upstream && record.identity == identity => Ok(record),
        _ => {
            tracing::warn!(
                upstream = %upstream,
                identity = %identity,
                "token store: a stored record is not a grant record of its key; it is ignored"
            );
            Err(StoreError::Corrupt {
                upstream: upstream.to_owned(),
                identity: identity.to_owned(),
                why: "it is not a grant record of its key",
            })
        }
    }
}
