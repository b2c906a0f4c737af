//! The token store in one JSON file, for a single gateway:
//! `{"version":1,"grants":[{upstream, identity, connected_at_ms,
//! expires_at_ms, refreshable, sealed}]}`.
//!
//! The file is read when the store opens and kept in memory; it is read
//! again when another process (`mcpmux connections revoke`) has replaced
//! it since, which a read notices by the file's inode, size and mtime.
//! Every change holds the store's mutex and, on the blocking pool, an
//! advisory lock (`flock`) on the file's directory: it reads a file
//! replaced meanwhile first, then writes the whole document again
//! atomically (a temp file with mode 0600 in the same directory, fsync,
//! rename, fsync of the directory). So writes never interleave, one
//! process never writes back what another removed, and memory never runs
//! ahead of the disk. Two gateways must not share one file (replicas use
//! Redis: a flow's `state` is claimed in this process's memory).

use std::collections::BTreeMap;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

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

/// Which version of the file was read or written: a replaced file (every
/// writer renames a new one into place) has another inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl Stamp {
    /// The file's stamp; none when it is missing or cannot be read.
    fn of(path: &Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(path).ok()?;
        Some(Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            modified: meta.modified().ok(),
        })
    }
}

/// The grants as last read or written, and the file's stamp then.
#[derive(Clone)]
struct Loaded {
    grants: Grants,
    stamp: Option<Stamp>,
}

pub(super) struct FileStore {
    path: Arc<Path>,
    /// The grants by (upstream, identity). Held by a changing call until
    /// its write is done, and by a reading call while it catches up with
    /// a file another process replaced.
    loaded: tokio::sync::Mutex<Loaded>,
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
            loaded: tokio::sync::Mutex::new(Loaded {
                grants,
                stamp: Stamp::of(path),
            }),
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
        let loaded = self.current().await;
        loaded
            .grants
            .get(&(upstream.to_owned(), identity.to_owned()))
            .cloned()
    }

    /// Stores `record`, keeping the `connected_at_ms` of the one it replaces.
    pub(super) async fn put(&self, mut record: Record) -> Result<(), StoreError> {
        self.change(move |grants| {
            let at = (record.upstream.clone(), record.identity.clone());
            if let Some(old) = grants.get(&at) {
                record.connected_at_ms = old.connected_at_ms;
            }
            grants.insert(at, record);
            (true, ())
        })
        .await
    }

    /// Replaces the record's sealed grant if it is still `old`; whether it was.
    pub(super) async fn reseal(
        &self,
        upstream: &str,
        identity: &str,
        old: &str,
        sealed: String,
    ) -> Result<bool, StoreError> {
        let at = (upstream.to_owned(), identity.to_owned());
        let old = old.to_owned();
        self.change(move |grants| match grants.get_mut(&at) {
            Some(record) if record.sealed == old => {
                record.sealed = sealed;
                (true, true)
            }
            _ => (false, false),
        })
        .await
    }

    /// Removes the record and returns it.
    pub(super) async fn take(
        &self,
        upstream: &str,
        identity: &str,
    ) -> Result<Option<Record>, StoreError> {
        let at = (upstream.to_owned(), identity.to_owned());
        self.change(move |grants| {
            let record = grants.remove(&at);
            (record.is_some(), record)
        })
        .await
    }

    pub(super) async fn list(
        &self,
        identity: Option<&str>,
        upstream: Option<&str>,
    ) -> Vec<Connected> {
        let loaded = self.current().await;
        loaded
            .grants
            .values()
            .filter(|r| r.matches(identity, upstream))
            .map(Record::connected)
            .collect()
    }

    /// The grants, read again first if another process replaced the file
    /// (a missing file holds none). A file that cannot be read then is
    /// logged once, and the grants as last known are kept.
    async fn current(&self) -> tokio::sync::MutexGuard<'_, Loaded> {
        let mut loaded = self.loaded.lock().await;
        let path = self.path.clone();
        let known = loaded.stamp;
        let caught_up = tokio::task::spawn_blocking(move || catch_up(&path, known)).await;
        match caught_up {
            Ok(Ok(Some(fresh))) => *loaded = fresh,
            Ok(Ok(None)) | Err(_) => {}
            Ok(Err((e, stamp))) => {
                tracing::warn!(error = %e, "token store: the file was changed by another process and cannot be read; keeping the grants as last read");
                loaded.stamp = stamp;
            }
        }
        loaded
    }

    /// Applies `edit` to the grants as on disk, and writes them when it
    /// says it changed them; returns what `edit` returned.
    async fn change<T: Send + 'static>(
        &self,
        edit: impl FnOnce(&mut Grants) -> (bool, T) + Send + 'static,
    ) -> Result<T, StoreError> {
        let mut loaded = self.loaded.lock().await;
        let path = self.path.clone();
        let known = loaded.clone();
        let (next, value) = tokio::task::spawn_blocking(move || change_locked(&path, known, edit))
            .await
            .map_err(|_| io(&self.path, std::io::Error::other("the writing task failed")))??;
        *loaded = next;
        Ok(value)
    }
}

/// The grants in the file at `path` when its stamp is no longer `known`;
/// none when it is. On error, the stamp that was seen.
fn catch_up(
    path: &Path,
    known: Option<Stamp>,
) -> Result<Option<Loaded>, (StoreError, Option<Stamp>)> {
    let stamp = Stamp::of(path);
    if stamp == known {
        return Ok(None);
    }
    let grants = match std::fs::read(path) {
        Ok(bytes) => parse(path, &bytes).map_err(|e| (e, stamp))?,
        Err(e) if e.kind() == ErrorKind::NotFound => Grants::new(),
        Err(source) => return Err((io(path, source), stamp)),
    };
    Ok(Some(Loaded { grants, stamp }))
}

/// [`FileStore::change`] on the blocking pool, under the directory's lock:
/// catches up with the file, edits, writes. A file replaced by another
/// process that cannot be read is an error, never overwritten.
fn change_locked<T>(
    path: &Path,
    known: Loaded,
    edit: impl FnOnce(&mut Grants) -> (bool, T),
) -> Result<(Loaded, T), StoreError> {
    let dir = File::open(parent(path).unwrap_or(Path::new("."))).map_err(|e| io(path, e))?;
    dir.lock().map_err(|e| io(path, e))?;
    let mut current = match catch_up(path, known.stamp) {
        Ok(fresh) => fresh.unwrap_or(known),
        Err((e, _)) => return Err(e),
    };
    let (changed, value) = edit(&mut current.grants);
    if changed {
        write_atomic(path, &render(&current.grants))?;
        current.stamp = Stamp::of(path);
    }
    // Dropping `dir` releases the lock.
    Ok((current, value))
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
