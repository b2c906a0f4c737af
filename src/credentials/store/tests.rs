//! Tests of the token store: both backends, sealing, key rotation, and
//! that no token reaches the disk, Redis or an error.

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

use super::*;

const ACCESS: &str = "acc-7f3e9b2d-PLAINTEXT-ACCESS-TOKEN";
const REFRESH: &str = "ref-41c8a6f0-PLAINTEXT-REFRESH-TOKEN";

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "mcpmux-store-{}-{name}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        Self(dir)
    }

    fn file(&self) -> PathBuf {
        self.0.join("state").join("grants.json")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn key(byte: u8) -> StateKey {
    use base64::Engine as _;
    StateKey::parse(&base64::engine::general_purpose::STANDARD.encode([byte; 32])).unwrap()
}

fn grant(access: &str) -> Grant {
    Grant {
        access: Secret::new(access.to_owned()),
        refresh: Some(Secret::new(REFRESH.to_owned())),
        // Whole milliseconds: what the store keeps.
        expires_at: Some(UNIX_EPOCH + Duration::from_millis(1_900_000_000_123)),
        scope: Some("repo read:user".to_owned()),
    }
}

fn is_corrupt(result: Result<Option<Grant>, StoreError>, who: &str) -> bool {
    matches!(result, Err(StoreError::Corrupt { ref identity, .. }) if identity == who)
}

#[tokio::test]
async fn a_grant_survives_a_restart() {
    let dir = TempDir::new("restart");
    let store = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    assert_eq!(store.get("github", "alice").await.unwrap(), None);
    store.put("github", "alice", &grant(ACCESS)).await.unwrap();
    let no_refresh = Grant {
        refresh: None,
        expires_at: None,
        scope: None,
        ..grant("other")
    };
    store.put("linear", "alice", &no_refresh).await.unwrap();
    assert_eq!(
        store.get("github", "alice").await.unwrap(),
        Some(grant(ACCESS))
    );
    drop(store);

    let store = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    assert_eq!(
        store.get("github", "alice").await.unwrap(),
        Some(grant(ACCESS))
    );
    assert_eq!(
        store.get("linear", "alice").await.unwrap(),
        Some(no_refresh)
    );
    assert_eq!(store.get("github", "bob").await.unwrap(), None);
}

#[tokio::test]
async fn a_new_grant_keeps_the_time_of_connection() {
    let dir = TempDir::new("connected-at");
    let store = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    store.put("github", "alice", &grant("one")).await.unwrap();
    let first = store.connections(None, None).await.unwrap();
    let mut refreshed = grant("two");
    refreshed.refresh = None;
    store.put("github", "alice", &refreshed).await.unwrap();
    let second = store.connections(None, None).await.unwrap();
    assert_eq!(second[0].connected_at_ms, first[0].connected_at_ms);
    assert!(!second[0].refreshable);
    assert_eq!(store.get("github", "alice").await.unwrap(), Some(refreshed));
}

#[tokio::test]
async fn a_record_sealed_with_another_key_is_corrupt_alone() {
    let dir = TempDir::new("wrong-key");
    let store = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    store.put("github", "alice", &grant(ACCESS)).await.unwrap();
    drop(store);

    let store = TokenStore::file(&dir.file(), &key(2), &[]).unwrap();
    store.put("github", "bob", &grant("bobs")).await.unwrap();
    let error = store.get("github", "alice").await.unwrap_err();
    assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("alice") && message.contains("github"),
        "{message}"
    );
    assert!(!message.contains(ACCESS));
    assert_eq!(
        store.get("github", "bob").await.unwrap(),
        Some(grant("bobs"))
    );
    // Its metadata is still listed, and it can be replaced or removed.
    assert_eq!(store.connections(None, None).await.unwrap().len(), 2);
    assert_eq!(store.remove("github", "alice").await.unwrap(), None);
    assert_eq!(store.get("github", "alice").await.unwrap(), None);
}

#[tokio::test]
async fn a_previous_key_opens_and_the_grant_is_sealed_again() {
    let dir = TempDir::new("rotation");
    let store = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    store.put("github", "alice", &grant(ACCESS)).await.unwrap();
    store.put("github", "bob", &grant("bobs")).await.unwrap();
    drop(store);
    let before = std::fs::read(dir.file()).unwrap();

    let store = TokenStore::file(&dir.file(), &key(2), &[key(1)]).unwrap();
    assert_eq!(
        store.get("github", "alice").await.unwrap(),
        Some(grant(ACCESS))
    );
    drop(store);
    assert_ne!(std::fs::read(dir.file()).unwrap(), before, "written back");

    let store = TokenStore::file(&dir.file(), &key(2), &[]).unwrap();
    assert_eq!(
        store.get("github", "alice").await.unwrap(),
        Some(grant(ACCESS))
    );
    // Bob's was not read with both keys, so only the old key opens it.
    assert!(is_corrupt(store.get("github", "bob").await, "bob"));
    let old_only = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    assert!(is_corrupt(old_only.get("github", "alice").await, "alice"));
}

#[tokio::test]
async fn a_record_moved_to_another_identity_or_upstream_does_not_open() {
    let dir = TempDir::new("moved");
    let store = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    store.put("github", "alice", &grant(ACCESS)).await.unwrap();
    drop(store);

    let original = std::fs::read_to_string(dir.file()).unwrap();
    for (from, to, upstream, identity) in [
        ("\"alice\"", "\"mallory\"", "github", "mallory"),
        ("\"github\"", "\"gitlab\"", "gitlab", "alice"),
    ] {
        assert!(original.contains(from));
        std::fs::write(dir.file(), original.replace(from, to)).unwrap();
        let store = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
        assert!(is_corrupt(store.get(upstream, identity).await, identity));
        assert_eq!(store.connections(None, None).await.unwrap().len(), 1);
    }
}

#[tokio::test]
async fn connections_show_no_tokens_and_filter() {
    let dir = TempDir::new("connections");
    let store = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    store.put("linear", "bob", &grant(ACCESS)).await.unwrap();
    store.put("github", "bob", &grant(ACCESS)).await.unwrap();
    let mut plain = grant(ACCESS);
    plain.refresh = None;
    plain.expires_at = None;
    store.put("github", "alice", &plain).await.unwrap();

    let all = store.connections(None, None).await.unwrap();
    let names: Vec<(&str, &str)> = all
        .iter()
        .map(|c| (c.upstream.as_str(), c.identity.as_str()))
        .collect();
    assert_eq!(
        names,
        [("github", "alice"), ("github", "bob"), ("linear", "bob")]
    );
    assert_eq!(all[0].expires_at_ms, None);
    assert!(!all[0].refreshable);
    assert_eq!(all[1].expires_at_ms, Some(1_900_000_000_123));
    assert!(all[1].refreshable);
    let json = serde_json::to_string(&all).unwrap();
    assert!(!json.contains(ACCESS) && !json.contains(REFRESH), "{json}");

    let bobs = store.connections(Some("bob"), None).await.unwrap();
    assert_eq!(bobs.len(), 2);
    assert!(bobs.iter().all(|c| c.identity == "bob"));
    let github = store.connections(None, Some("github")).await.unwrap();
    assert_eq!(github.len(), 2);
    assert!(github.iter().all(|c| c.upstream == "github"));
    let one = store
        .connections(Some("bob"), Some("linear"))
        .await
        .unwrap();
    assert_eq!(one, [all[2].clone()]);
    assert!(
        store
            .connections(Some("carol"), None)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn remove_returns_the_grant_and_forgets_it() {
    let dir = TempDir::new("remove");
    let store = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    store.put("github", "alice", &grant(ACCESS)).await.unwrap();
    store.put("github", "bob", &grant("bobs")).await.unwrap();
    assert_eq!(
        store.remove("github", "alice").await.unwrap(),
        Some(grant(ACCESS))
    );
    assert_eq!(store.remove("github", "alice").await.unwrap(), None);
    assert_eq!(store.get("github", "alice").await.unwrap(), None);
    drop(store);

    let store = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    assert_eq!(store.get("github", "alice").await.unwrap(), None);
    let left = store.connections(None, None).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].identity, "bob");
}

#[tokio::test]
async fn a_change_made_by_another_process_is_seen_and_kept() {
    // Two stores on one file: the gateway and `mcpmux connections revoke`.
    let dir = TempDir::new("two-processes");
    let gateway = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    gateway
        .put("github", "alice", &grant(ACCESS))
        .await
        .unwrap();
    gateway.put("github", "bob", &grant("bobs")).await.unwrap();
    let cli = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    assert_eq!(
        cli.remove("github", "alice").await.unwrap(),
        Some(grant(ACCESS))
    );

    // The gateway reads the file again: alice is gone ...
    assert_eq!(gateway.get("github", "alice").await.unwrap(), None);
    let left = gateway.connections(None, None).await.unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    // ... and its next write does not bring her back.
    gateway
        .put("linear", "carol", &grant("carols"))
        .await
        .unwrap();
    let on_disk = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    let who: Vec<_> = on_disk
        .connections(None, None)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.identity)
        .collect();
    assert_eq!(who, ["bob", "carol"]);
    // A grant the CLI's store added meanwhile is read too.
    cli.put("github", "dave", &grant("daves")).await.unwrap();
    assert_eq!(
        gateway.get("github", "dave").await.unwrap(),
        Some(grant("daves"))
    );
}

#[tokio::test]
async fn tokens_never_reach_the_file_or_debug_output() {
    let dir = TempDir::new("plaintext");
    let store = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    store.put("github", "alice", &grant(ACCESS)).await.unwrap();
    let bytes = std::fs::read(dir.file()).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.contains("\"alice\"") && text.contains("\"sealed\""));
    assert!(!text.contains(ACCESS), "{text}");
    assert!(!text.contains(REFRESH), "{text}");
    let debug = format!("{:?} {store:?}", grant(ACCESS));
    assert!(
        !debug.contains(ACCESS) && !debug.contains(REFRESH),
        "{debug}"
    );
    // Nothing else (a temp file) was left beside it.
    let entries = std::fs::read_dir(dir.file().parent().unwrap()).unwrap();
    assert_eq!(entries.count(), 1);
}

#[tokio::test]
async fn the_file_and_its_directory_are_private() {
    let dir = TempDir::new("mode");
    let store = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.file()), 0o600, "created empty");
    assert_eq!(mode(dir.file().parent().unwrap()), 0o700);
    std::fs::set_permissions(dir.file(), std::fs::Permissions::from_mode(0o644)).unwrap();
    store.put("github", "alice", &grant(ACCESS)).await.unwrap();
    assert_eq!(mode(&dir.file()), 0o600, "rewritten");
}

#[tokio::test]
async fn a_bad_file_is_an_error_naming_its_path_not_its_content() {
    let dir = TempDir::new("bad-file");
    std::fs::create_dir_all(dir.file().parent().unwrap()).unwrap();
    let cases = [
        "not json SECRETCONTENT".to_owned(),
        r#"{"version":1,"grants":[{"upstream":"u","identity":"i","connected_at_ms":"SECRETCONTENT","refreshable":true,"sealed":"x"}]}"#.to_owned(),
        r#"{"version":2,"grants":[]}"#.to_owned(),
        r#"{"version":1,"grants":[{"upstream":"u","identity":"i","connected_at_ms":1,"refreshable":true,"sealed":"SECRETCONTENT"},{"upstream":"u","identity":"i","connected_at_ms":1,"refreshable":true,"sealed":"SECRETCONTENT"}]}"#.to_owned(),
    ];
    for text in cases {
        std::fs::write(dir.file(), &text).unwrap();
        let error = TokenStore::file(&dir.file(), &key(1), &[]).unwrap_err();
        assert!(matches!(error, StoreError::Unreadable { .. }), "{error:?}");
        let message = error.to_string();
        assert!(message.contains("grants.json"), "{message}");
        assert!(!message.contains("SECRETCONTENT"), "{message}");
    }
    // A directory in its place cannot be read.
    let error = TokenStore::file(&dir.0, &key(1), &[]).unwrap_err();
    assert!(matches!(error, StoreError::Io { .. }), "{error:?}");
}

#[test]
fn redis_keys_cannot_collide() {
    use super::redis::{key, parse_key};
    let a = key("up", "a:b");
    let b = key("up:a", "b");
    assert_ne!(a, b);
    assert_eq!(a.matches(':').count(), 3);
    for (upstream, identity) in [("up", "a:b"), ("up:a", "b"), ("g h", "100%é@x.org")] {
        assert_eq!(
            parse_key(&key(upstream, identity)),
            Some((upstream.to_owned(), identity.to_owned()))
        );
    }
    assert_eq!(
        key("github", "alice@example.org"),
        "mcpmux:grant:github:alice@example.org"
    );
}

#[tokio::test]
async fn redis_errors_do_not_show_the_password() {
    for url in [
        "redis://:hunter2secret@127.0.0.1:1",
        "redis://user:hunter2secret@127.0.0.1:1/0",
    ] {
        let store = TokenStore::redis(url, &key(1), &[]).unwrap();
        let error = store.get("github", "alice").await.unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, StoreError::Redis(_)), "{error:?}");
        assert!(!message.contains("hunter2secret"), "{message}");
    }
    if let Err(error) = TokenStore::redis("redis://:hunter2secret@[::1", &key(1), &[]) {
        assert!(!error.to_string().contains("hunter2secret"), "{error}");
    }
}

/// `redis-server` on a unix socket in a temp dir, no persistence.
struct RedisServer {
    child: Child,
    socket: PathBuf,
    _dir: TempDir,
}

impl RedisServer {
    /// Starts it and waits (without polling) for it to say it is ready.
    async fn start() -> Self {
        let dir = TempDir::new("redis");
        std::fs::create_dir_all(&dir.0).unwrap();
        let socket = dir.0.join("redis.sock");
        let mut child = Command::new("/usr/bin/redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args([
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&dir.0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                // "Ready to accept connections tcp" or "... now ready to accept
                // connections at <socket>", by version and listener.
                if line
                    .to_ascii_lowercase()
                    .contains("ready to accept connections")
                {
                    return;
                }
            }
            panic!("redis-server exited before it was ready");
        })
        .await
        .expect("redis-server ready within 20s");
        // Keep draining its log, so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            child,
            socket,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("redis+unix://{}", self.socket.display())
    }

    /// Every key and value in it, as one string.
    async fn dump(&self) -> String {
        let client = ::redis::Client::open(self.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> = ::redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut conn)
            .await
            .unwrap();
        let mut out = String::new();
        for key in keys {
            let kind: String = ::redis::cmd("TYPE")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            let value: Vec<String> = match kind.as_str() {
                "string" => vec![
                    ::redis::cmd("GET")
                        .arg(&key)
                        .query_async(&mut conn)
                        .await
                        .unwrap(),
                ],
                "set" => ::redis::cmd("SMEMBERS")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap(),
                other => panic!("unexpected {other} at {key}"),
            };
            out.push_str(&format!("{key} = {value:?}\n"));
        }
        out
    }

    async fn stop(mut self) {
        self.child.kill().await.unwrap();
    }
}

#[tokio::test]
async fn redis_stores_grants_that_replicas_share() {
    let server = RedisServer::start().await;
    let a = TokenStore::redis(&server.url(), &key(1), &[]).unwrap();
    let b = TokenStore::redis(&server.url(), &key(1), &[]).unwrap();

    assert_eq!(a.get("github", "alice").await.unwrap(), None);
    a.put("github", "alice", &grant(ACCESS)).await.unwrap();
    a.put("github", "a:b", &grant("colon-one")).await.unwrap();
    b.put("github:a", "b", &grant("colon-two")).await.unwrap();
    assert_eq!(b.get("github", "alice").await.unwrap(), Some(grant(ACCESS)));
    assert_eq!(
        a.get("github", "a:b").await.unwrap(),
        Some(grant("colon-one"))
    );
    assert_eq!(
        a.get("github:a", "b").await.unwrap(),
        Some(grant("colon-two"))
    );

    let first = b.connections(None, None).await.unwrap();
    let names: Vec<(&str, &str)> = first
        .iter()
        .map(|c| (c.upstream.as_str(), c.identity.as_str()))
        .collect();
    assert_eq!(
        names,
        [("github", "a:b"), ("github", "alice"), ("github:a", "b")]
    );
    assert_eq!(
        a.connections(Some("alice"), Some("github")).await.unwrap(),
        [first[1].clone()]
    );
    assert_eq!(
        b.connections(None, Some("github:a")).await.unwrap().len(),
        1
    );

    // Replacing keeps the time of connection.
    b.put("github", "alice", &grant("second")).await.unwrap();
    let again = a.connections(Some("alice"), None).await.unwrap();
    assert_eq!(again[0].connected_at_ms, first[1].connected_at_ms);

    let dump = server.dump().await;
    assert!(dump.contains("mcpmux:grants"), "{dump}");
    for token in [ACCESS, REFRESH, "colon-one", "colon-two", "second"] {
        assert!(!dump.contains(token), "{token} in {dump}");
    }

    assert_eq!(
        a.remove("github", "alice").await.unwrap(),
        Some(grant("second"))
    );
    assert_eq!(b.get("github", "alice").await.unwrap(), None);
    assert_eq!(b.remove("github", "alice").await.unwrap(), None);
    assert_eq!(b.connections(None, None).await.unwrap().len(), 2);

    // Rotation: a replica with a new key reads and seals again; then the
    // new key alone opens it, and a wrong key fails only that record.
    let rotated = TokenStore::redis(&server.url(), &key(2), &[key(1)]).unwrap();
    assert_eq!(
        rotated.get("github", "a:b").await.unwrap(),
        Some(grant("colon-one"))
    );
    let new_only = TokenStore::redis(&server.url(), &key(2), &[]).unwrap();
    assert_eq!(
        new_only.get("github", "a:b").await.unwrap(),
        Some(grant("colon-one"))
    );
    assert!(is_corrupt(new_only.get("github:a", "b").await, "b"));
    assert!(is_corrupt(a.get("github", "a:b").await, "a:b"));

    server.stop().await;
}

#[tokio::test]
async fn the_store_can_be_shared_by_tasks() {
    fn send<T: Send>(_: &T) {}
    fn shared<T: Send + Sync + 'static>() {}
    shared::<TokenStore>();
    let dir = TempDir::new("send");
    let store = TokenStore::file(&dir.file(), &key(1), &[]).unwrap();
    let g = grant(ACCESS);
    send(&store.get("u", "i"));
    send(&store.put("u", "i", &g));
    send(&store.remove("u", "i"));
    send(&store.connections(None, None));
}
