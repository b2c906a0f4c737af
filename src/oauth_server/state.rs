//! Where the authorization server keeps what outlives one request: codes,
//! logins in progress, refresh tokens and their families, consents,
//! registered clients and generated signing keys. A small key-value store
//! with expiry and the two atomic steps the flows need: take (a code is
//! used once) and put-if-absent (a refresh token is rotated once).
//!
//! Two backends. [`StateStore::file`] keeps everything in this process and
//! writes the lasting entries to one JSON file (mode 0600, atomic rename)
//! after each change; short-lived ones (codes, logins) stay in memory.
//! [`StateStore::redis`] shares every entry with the other replicas, so any
//! replica serves any step of a flow. Values are JSON text; nothing secret
//! is stored in clear (tokens by their SHA-256, keys sealed).

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};

use crate::credentials::store::{redact_redis, redis_manager};

/// Every Redis key of the authorization server starts with this.
const REDIS_PREFIX: &str = "mcpmux:oauth:";

/// Why the state store could not answer. Never holds a value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum StateError {
    #[error("oauth_server state {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("oauth_server state {}: not a state file this version reads ({reason})", path.display())]
    Unreadable { path: PathBuf, reason: String },
    /// Redis failed; the message never holds the URL's password.
    #[error("oauth_server state (redis): {0}")]
    Redis(String),
}

/// How long an entry lives and whether the file backend writes it down.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lifetime {
    /// Minutes at most (codes, logins): memory only in the file backend.
    Short(Duration),
    /// Kept across restarts, until it expires (if ever).
    Long(Option<Duration>),
}

impl Lifetime {
    fn ttl(self) -> Option<Duration> {
        match self {
            Lifetime::Short(ttl) => Some(ttl),
            Lifetime::Long(ttl) => ttl,
        }
    }

    fn lasting(self) -> bool {
        matches!(self, Lifetime::Long(_))
    }
}

/// The store, shared behind an `Arc`; every method takes `&self`.
pub(crate) enum StateStore {
    File(FileState),
    Redis(RedisState),
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StateStore::File(_) => "StateStore(file)",
            StateStore::Redis(_) => "StateStore(redis)",
        })
    }
}

impl StateStore {
    /// The file backend at `path` (read now if it exists).
    pub(crate) fn file(path: &Path) -> Result<StateStore, StateError> {
        FileState::open(path).map(StateStore::File)
    }

    /// The Redis backend at `url`; connects lazily.
    pub(crate) fn redis(url: &str) -> Result<StateStore, StateError> {
        RedisState::open(url).map(StateStore::Redis)
    }

    pub(crate) async fn get(&self, key: &str) -> Result<Option<String>, StateError> {
        match self {
            StateStore::File(f) => Ok(f.get(key)),
            StateStore::Redis(r) => r.get(key).await,
        }
    }

    /// Sets `key`, replacing any value.
    pub(crate) async fn put(
        &self,
        key: &str,
        value: &str,
        life: Lifetime,
    ) -> Result<(), StateError> {
        match self {
            StateStore::File(f) => f.put(key, value, life, false).map(|_| ()),
            StateStore::Redis(r) => r.put(key, value, life, false).await.map(|_| ()),
        }
    }

    /// Sets `key` only if it holds nothing: true if this call set it.
    pub(crate) async fn put_new(
        &self,
        key: &str,
        value: &str,
        life: Lifetime,
    ) -> Result<bool, StateError> {
        match self {
            StateStore::File(f) => f.put(key, value, life, true),
            StateStore::Redis(r) => r.put(key, value, life, true).await,
        }
    }

    /// Removes `key` and returns what it held: one caller gets it.
    pub(crate) async fn take(&self, key: &str) -> Result<Option<String>, StateError> {
        match self {
            StateStore::File(f) => f.take(key),
            StateStore::Redis(r) => r.take(key).await,
        }
    }

    pub(crate) async fn delete(&self, key: &str) -> Result<(), StateError> {
        self.take(key).await.map(|_| ())
    }

    /// Every live entry whose key starts with `prefix`.
    pub(crate) async fn scan(&self, prefix: &str) -> Result<Vec<(String, String)>, StateError> {
        match self {
            StateStore::File(f) => Ok(f.scan(prefix)),
            StateStore::Redis(r) => r.scan(prefix).await,
        }
    }
}

/// Unix milliseconds now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[derive(Clone, Serialize, Deserialize)]
struct Entry {
    value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_ms: Option<u64>,
    #[serde(default = "lasting")]
    lasting: bool,
}

fn lasting() -> bool {
    true
}

impl Entry {
    fn live(&self, now: u64) -> bool {
        self.expires_ms.is_none_or(|at| at > now)
    }
}

#[derive(Serialize, Deserialize)]
struct Document {
    version: u32,
    entries: HashMap<String, Entry>,
}

const VERSION: u32 = 1;

/// The single-gateway backend: a map in memory, its lasting part written
/// to a file after every change.
pub(crate) struct FileState {
    path: PathBuf,
    entries: Mutex<HashMap<String, Entry>>,
}

impl FileState {
    fn open(path: &Path) -> Result<FileState, StateError> {
        let entries = match std::fs::read(path) {
            Ok(bytes) => {
                let document: Document =
                    serde_json::from_slice(&bytes).map_err(|e| StateError::Unreadable {
                        path: path.to_owned(),
                        reason: e.to_string(),
                    })?;
                if document.version != VERSION {
                    return Err(StateError::Unreadable {
                        path: path.to_owned(),
                        reason: format!("version {}", document.version),
                    });
                }
                document.entries
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashMap::new(),
            Err(source) => {
                return Err(StateError::Io {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        Ok(FileState {
            path: path.to_owned(),
            entries: Mutex::new(entries),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, key: &str) -> Option<String> {
        let now = now_ms();
        self.lock()
            .get(key)
            .filter(|e| e.live(now))
            .map(|e| e.value.clone())
    }

    fn put(
        &self,
        key: &str,
        value: &str,
        life: Lifetime,
        only_new: bool,
    ) -> Result<bool, StateError> {
        let now = now_ms();
        let mut entries = self.lock();
        if only_new && entries.get(key).is_some_and(|e| e.live(now)) {
            return Ok(false);
        }
        entries.insert(
            key.to_owned(),
            Entry {
                value: value.to_owned(),
                expires_ms: life.ttl().map(|ttl| now.saturating_add(ms(ttl))),
                lasting: life.lasting(),
            },
        );
        if life.lasting() {
            self.write(&mut entries, now)?;
        }
        Ok(true)
    }

    fn take(&self, key: &str) -> Result<Option<String>, StateError> {
        let now = now_ms();
        let mut entries = self.lock();
        let Some(entry) = entries.remove(key) else {
            return Ok(None);
        };
        if entry.lasting {
            self.write(&mut entries, now)?;
        }
        Ok(entry.live(now).then_some(entry.value))
    }

    fn scan(&self, prefix: &str) -> Vec<(String, String)> {
        let now = now_ms();
        let mut found: Vec<(String, String)> = self
            .lock()
            .iter()
            .filter(|(k, e)| k.starts_with(prefix) && e.live(now))
            .map(|(k, e)| (k.clone(), e.value.clone()))
            .collect();
        found.sort();
        found
    }

    /// Drops expired entries and writes the lasting ones: a temporary file
    /// beside the target (0600), then a rename.
    fn write(&self, entries: &mut HashMap<String, Entry>, now: u64) -> Result<(), StateError> {
        entries.retain(|_, e| e.live(now));
        let document = Document {
            version: VERSION,
            entries: entries
                .iter()
                .filter(|(_, e)| e.lasting)
                .map(|(k, e)| (k.clone(), e.clone()))
                .collect(),
        };
        let bytes = serde_json::to_vec(&document).expect("the state serializes");
        let io = |source| StateError::Io {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let temporary = self.path.with_extension("json.tmp");
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&temporary)
                .map_err(io)?;
            file.write_all(&bytes).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        std::fs::rename(&temporary, &self.path).map_err(io)
    }
}

/// The shared backend: one Redis key per entry, expiry by Redis.
pub(crate) struct RedisState {
    conn: ConnectionManager,
    secrets: Vec<String>,
}

impl RedisState {
    fn open(url: &str) -> Result<RedisState, StateError> {
        let (conn, secrets) = redis_manager(url).map_err(StateError::Redis)?;
        Ok(RedisState { conn, secrets })
    }

    fn fail(&self, e: redis::RedisError) -> StateError {
        StateError::Redis(redact_redis(e.to_string(), &self.secrets))
    }

    /// `GET` or `GETDEL` of one key.
    async fn read(&self, command: &str, key: &str) -> Result<Option<String>, StateError> {
        let mut conn = self.conn.clone();
        redis::cmd(command)
            .arg(format!("{REDIS_PREFIX}{key}"))
            .query_async(&mut conn)
            .await
            .map_err(|e| self.fail(e))
    }

    async fn get(&self, key: &str) -> Result<Option<String>, StateError> {
        self.read("GET", key).await
    }

    async fn put(
        &self,
        key: &str,
        value: &str,
        life: Lifetime,
        only_new: bool,
    ) -> Result<bool, StateError> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("SET");
        cmd.arg(format!("{REDIS_PREFIX}{key}")).arg(value);
        if only_new {
            cmd.arg("NX");
        }
        if let Some(ttl) = life.ttl() {
            cmd.arg("PX").arg(ms(ttl).max(1));
        }
        let set: Option<String> = cmd.query_async(&mut conn).await.map_err(|e| self.fail(e))?;
        Ok(set.is_some())
    }

    async fn take(&self, key: &str) -> Result<Option<String>, StateError> {
        self.read("GETDEL", key).await
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(String, String)>, StateError> {
        let mut conn = self.conn.clone();
        let pattern = format!("{REDIS_PREFIX}{}*", glob_escape(prefix));
        let mut keys: Vec<String> = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.fail(e))?;
            keys.extend(batch);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        keys.sort();
        keys.dedup();
        let mut found = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(200) {
            let values: Vec<Option<String>> = redis::cmd("MGET")
                .arg(chunk)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.fail(e))?;
            for (key, value) in chunk.iter().zip(values) {
                if let Some(value) = value {
                    found.push((key[REDIS_PREFIX.len()..].to_owned(), value));
                }
            }
        }
        Ok(found)
    }
}

/// `text` with Redis glob characters escaped.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::{Entry, Lifetime, StateStore, now_ms};
    use std::time::Duration;

    /// A fresh state file path under the system temp dir.
    pub(crate) fn temp_path(name: &str) -> std::path::PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "mcpmux-oauth-state-{}-{name}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("state.json")
    }

    #[tokio::test]
    async fn take_gives_a_value_once_and_put_new_sets_only_an_absent_key() {
        let path = temp_path("take");
        let store = StateStore::file(&path).unwrap();
        let short = Lifetime::Short(Duration::from_secs(60));
        store.put("code:a", "1", short).await.unwrap();
        assert_eq!(store.take("code:a").await.unwrap().as_deref(), Some("1"));
        assert_eq!(store.take("code:a").await.unwrap(), None);
        assert!(
            store
                .put_new("used:x", "f", Lifetime::Long(None))
                .await
                .unwrap()
        );
        assert!(
            !store
                .put_new("used:x", "g", Lifetime::Long(None))
                .await
                .unwrap()
        );
        assert_eq!(store.get("used:x").await.unwrap().as_deref(), Some("f"));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[tokio::test]
    async fn lasting_entries_survive_a_restart_in_a_private_file_and_short_ones_do_not() {
        use std::os::unix::fs::PermissionsExt as _;
        let path = temp_path("restart");
        let store = StateStore::file(&path).unwrap();
        store
            .put("client:c", "{}", Lifetime::Long(None))
            .await
            .unwrap();
        store
            .put("login:l", "{}", Lifetime::Short(Duration::from_secs(60)))
            .await
            .unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = StateStore::file(&path).unwrap();
        assert!(again.get("client:c").await.unwrap().is_some());
        assert!(again.get("login:l").await.unwrap().is_none());
        assert_eq!(again.scan("client:").await.unwrap().len(), 1);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[tokio::test]
    async fn an_expired_entry_is_gone_for_every_reading() {
        let path = temp_path("expired");
        let store = StateStore::file(&path).unwrap();
        let StateStore::File(file) = &store else {
            unreachable!()
        };
        file.lock().insert(
            "code:old".into(),
            Entry {
                value: "v".into(),
                expires_ms: Some(now_ms() - 1),
                lasting: false,
            },
        );
        assert_eq!(store.get("code:old").await.unwrap(), None);
        assert_eq!(store.take("code:old").await.unwrap(), None);
        assert!(store.scan("code:").await.unwrap().is_empty());
        assert!(
            store
                .put_new("code:old", "new", Lifetime::Short(Duration::from_secs(9)))
                .await
                .unwrap()
        );
    }
}
