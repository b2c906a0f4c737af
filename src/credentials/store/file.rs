//! The token store in one JSON file, for a single gateway:
//! `{"version":1,"grants":[{upstream, identity, connected_at_ms,
//! expires_at_ms, refreshable, sealed}]}`.
//!
//! The file is read once, when the store opens, and kept in memory. Every
//! change writes the whole document again atomically (a temp file with
//! mode 0600 in the same directory, fsync, rename, fsync of the
//! directory) on the blocking pool, while the calling task holds the
//! store's mutex: writes never interleave, and memory never runs ahead of
//! the disk. Two gateways must not share one file (replicas use Redis).

use std::collections::BTreeMap;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::{Connected, Record, StoreError};

/// The document's format version.
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Document {
    version: u32,
    grants: Vec<Record>,
}

type Grants = BTreeMap<(String, String), Record>;

pub(super) struct FileStore {
    path: Arc<Path>,
    /// The grants as last written, by (upstream, identity). Held by a
    /// changing call until its write is done.
    grants: tokio::sync::Mutex<Grants>,
    /// Ids claimed once (see [`FileStore::claim_once`]) and until when;
    /// one process holds the file, so memory is where they are shared.
    claimed: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

impl FileStore {
    /// Reads and checks the file at `path`, or creates it (and its
    /// directory, mode 0700) empty with mode 0600.
    pub(super) fn open(path: &Path) -> Result<Self, StoreError> {
        if path.file_name().is_none() {
            return Err(StoreError::Unreadable {
                path: path.to_owned(),
                reason: "is not a file path".to_owned(),
            });
        }
        let grants = match std::fs::read(path) {
            Ok(bytes) => {
                warn_if_shared(path);
                parse(path, &bytes)?
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                if let Some(dir) = parent(path) {
                    DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(dir)
                        .map_err(|source| io(path, source))?;
                }
                let grants = Grants::new();
                write_atomic(path, &render(&grants))?;
                grants
            }
            Err(source) => return Err(io(path, source)),
        };
        Ok(Self {
            path: path.into(),
            grants: tokio::sync::Mutex::new(grants),
            claimed: std::sync::Mutex::default(),
        })
    }

    /// True the first time `id` is claimed within `ttl`.
    pub(super) fn claim_once(&self, id: &str, ttl: std::time::Duration) -> bool {
        let now = std::time::Instant::now();
        let mut claimed = self.claimed.lock().unwrap_or_else(|e| e.into_inner());
        claimed.retain(|_, until| *until > now);
        match claimed.entry(id.to_owned()) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(now + ttl);
                true
            }
        }
    }

    pub(super) async fn load(&self, upstream: &str, identity: &str) -> Option<Record> {
        let grants = self.grants.lock().await;
        grants
            .get(&(upstream.to_owned(), identity.to_owned()))
            .cloned()
    }

    /// Stores `record`, keeping the `connected_at_ms` of the one it replaces.
    pub(super) async fn put(&self, mut record: Record) -> Result<(), StoreError> {
        let mut grants = self.grants.lock().await;
        let at = (record.upstream.clone(), record.identity.clone());
        if let Some(old) = grants.get(&at) {
            record.connected_at_ms = old.connected_at_ms;
        }
        let mut next = grants.clone();
        next.insert(at, record);
        self.write(&next).await?;
        *grants = next;
        Ok(())
    }

    /// Replaces the record's sealed grant if it is still `old`; whether it was.
    pub(super) async fn reseal(
        &self,
        upstream: &str,
        identity: &str,
        old: &str,
        sealed: String,
    ) -> Result<bool, StoreError> {
        let mut grants = self.grants.lock().await;
        let at = (upstream.to_owned(), identity.to_owned());
        let mut next = grants.clone();
        match next.get_mut(&at) {
            Some(record) if record.sealed == old => record.sealed = sealed,
            _ => return Ok(false),
        }
        self.write(&next).await?;
        *grants = next;
        Ok(true)
    }

    /// Removes the record and returns it.
    pub(super) async fn take(
        &self,
        upstream: &str,
        identity: &str,
    ) -> Result<Option<Record>, StoreError> {
        let mut grants = self.grants.lock().await;
        let at = (upstream.to_owned(), identity.to_owned());
        if !grants.contains_key(&at) {
            return Ok(None);
        }
        let mut next = grants.clone();
        let record = next.remove(&at);
        self.write(&next).await?;
        *grants = next;
        Ok(record)
    }

    pub(super) async fn list(
        &self,
        identity: Option<&str>,
        upstream: Option<&str>,
    ) -> Vec<Connected> {
        let grants = self.grants.lock().await;
        grants
            .values()
            .filter(|r| r.matches(identity, upstream))
            .map(Record::connected)
            .collect()
    }

    /// Writes `grants` as the file, on the blocking pool.
    async fn write(&self, grants: &Grants) -> Result<(), StoreError> {
        let bytes = render(grants);
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || write_atomic(&path, &bytes))
            .await
            .map_err(|_| io(&self.path, std::io::Error::other("the writing task failed")))?
    }
}

fn io(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The directory `path` is in, if it names one.
fn parent(path: &Path) -> Option<&Path> {
    path.parent().filter(|p| !p.as_os_str().is_empty())
}

/// Warns when others than the owner may read the file.
fn warn_if_shared(path: &Path) {
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            path = %path.display(),
            "token store: the file is readable by others than its owner; it becomes 0600 on the next change"
        );
    }
}

/// The grants in `bytes`. Errors name the line and column, never the
/// content found there.
fn parse(path: &Path, bytes: &[u8]) -> Result<Grants, StoreError> {
    let unreadable = |reason: String| StoreError::Unreadable {
        path: path.to_owned(),
        reason,
    };
    let document: Document = serde_json::from_slice(bytes).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Io => "could not be read",
            serde_json::error::Category::Syntax => "is not JSON",
            serde_json::error::Category::Data => "is not a token store",
            serde_json::error::Category::Eof => "ends early",
        };
        unreadable(format!("{what} (line {}, column {})", e.line(), e.column()))
    })?;
    if document.version != VERSION {
        return Err(unreadable(format!(
            "has version {}; this gateway reads version {VERSION}",
            document.version
        )));
    }
    let mut grants = Grants::new();
    for record in document.grants {
        let at = (record.upstream.clone(), record.identity.clone());
        if grants.insert(at, record).is_some() {
            return Err(unreadable(
                "holds two grants for one upstream and identity".to_owned(),
            ));
        }
    }
    Ok(grants)
}

fn render(grants: &Grants) -> Vec<u8> {
    #[derive(Serialize)]
    struct DocumentRef<'a> {
        version: u32,
        grants: Vec<&'a Record>,
    }
    let document = DocumentRef {
        version: VERSION,
        grants: grants.values().collect(),
    };
    let mut bytes = serde_json::to_vec_pretty(&document).expect("a document serializes");
    bytes.push(b'\n');
    bytes
}

/// Replaces the file at `path` with `bytes`, so that a reader (or a crash)
/// sees the old content or the new, never part of either.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = parent(path).unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temp: PathBuf = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)?;
        File::open(dir)?.sync_all()
    })();
    written.map_err(|source| {
        let _ = std::fs::remove_file(&temp);
        io(path, source)
    })
}
