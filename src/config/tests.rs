//! Unit tests for config parsing and validation.

use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    // Authentication is its own concern; these tests are about the rest.
    let text = if text.contains("auth:") {
        text.to_owned()
    } else {
        format!("{text}\nauth: {{ mode: off }}\n")
    };
    Config::parse(
        &text,
        "test.yaml",
        &Lookup::from_pairs([("TOKEN", "hunter2")]),
    )
}

fn single_issue(text: &str) -> String {
    let err = parse(text).expect_err("config should be rejected");
    let lines = err.lines();
    assert_eq!(lines.len(), 1, "expected one line, got {lines:?}");
    lines[0].clone()
}

#[test]
fn minimal_config_gets_defaults() {
    let cfg = parse("upstreams:\n  files:\n    command: srv\n").unwrap();
    assert_eq!(cfg.listen, None);
    assert_eq!(cfg.page_size, PageSizes::default());
    assert_eq!(cfg.upstreams.len(), 1);
    let up = &cfg.upstreams[0];
    assert_eq!(up.name, "files");
    assert_eq!(up.prefix, "files");
    assert_eq!(up.timeout, Duration::from_secs(60));
}

#[test]
fn unknown_key_names_line_and_column() {
    let line = single_issue("upstreams:\n  files:\n    command: srv\n    comand: typo\n");
    assert!(line.starts_with("test.yaml:4:5: "), "{line}");
    assert!(line.contains("comand"), "{line}");
}

#[test]
fn bad_upstream_name_is_explained() {
    let line = single_issue("upstreams:\n  Files_1:\n    command: srv\n");
    assert!(line.starts_with("test.yaml:2:3: "), "{line}");
    assert!(line.contains("\"Files_1\""), "{line}");
    assert!(line.contains("lowercase"), "{line}");
}

#[test]
fn upstream_name_messages_read_as_they_always_have() {
    let why = |name: &str| check_upstream_name(name).unwrap_err().to_string();
    assert_eq!(why(""), "is empty");
    assert_eq!(
        why("Files"),
        "must start with a lowercase letter a-z, not 'F'"
    );
    assert_eq!(
        why(&"a".repeat(33)),
        "is 33 characters long; the limit is 32"
    );
    assert_eq!(why("files_1"), "may contain only a-z, 0-9 and '-', not '_'");
    assert_eq!(check_upstream_name("files-1"), Ok(()));
    let line = single_issue("upstreams:\n  Files_1:\n    command: srv\n");
    assert_eq!(
        line,
        "test.yaml:2:3: upstream name \"Files_1\" must start with a lowercase letter a-z, not 'F' (names match [a-z][a-z0-9-]{0,31})"
    );
}

#[test]
fn unset_variable_is_an_error_at_its_value() {
    let line =
        single_issue("upstreams:\n  a:\n    command: srv\n    env:\n      KEY: \"${NOPE}\"\n");
    assert!(line.starts_with("test.yaml:5:12: "), "{line}");
    assert!(line.contains("NOPE is not set"), "{line}");
}

#[test]
fn secrets_are_masked_in_debug_output() {
    let cfg =
        parse("upstreams:\n  a:\n    command: srv\n    env: { KEY: \"${TOKEN}\" }\n").unwrap();
    let Transport::Stdio(stdio) = &cfg.upstreams[0].transport else {
        panic!("a stdio upstream");
    };
    assert_eq!(stdio.env["KEY"].expose(), "hunter2");
    let debug = format!("{cfg:?}");
    assert!(!debug.contains("hunter2"), "{debug}");
    assert!(debug.contains("***"));
}

#[test]
fn yaml_syntax_errors_have_a_location() {
    let line = single_issue("upstreams:\n  a: [unclosed\n");
    assert!(line.starts_with("test.yaml:"), "{line}");
    assert!(!line.contains('\n'));
}

#[test]
fn every_problem_is_reported() {
    let err =
        parse("upstreams:\n  Bad:\n    command: x\n  good:\n    timeout: soon\n").unwrap_err();
    let lines = err.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
}

#[test]
fn demo_config_is_valid() {
    let lookup = Lookup::from_pairs([("MCPMUX_EXE", "/bin/mcpmux")]);
    let cfg = Config::parse(DEMO_CONFIG, "demo", &lookup).unwrap();
    assert!(cfg.upstreams.len() >= 2);
}

#[test]
fn remote_upstreams_take_url_headers_and_transport() {
    let cfg = parse(
        "upstreams:\n  docs:\n    url: https://docs.example.com/mcp\n    headers: { Authorization: \"Bearer ${TOKEN}\" }\n    transport: sse\n    timeout: 5s\n",
    )
    .unwrap();
    let Transport::Remote(remote) = &cfg.upstreams[0].transport else {
        panic!("a remote upstream");
    };
    assert_eq!(remote.url, "https://docs.example.com/mcp");
    assert_eq!(remote.mode, RemoteMode::Sse);
    assert_eq!(remote.headers["Authorization"].expose(), "Bearer hunter2");
    assert!(!format!("{cfg:?}").contains("hunter2"));
}

#[test]
fn remote_and_stdio_keys_do_not_mix() {
    let both = single_issue("upstreams:\n  a:\n    command: x\n    url: http://h/mcp\n");
    assert!(
        both.contains("either command") && both.starts_with("test.yaml:4:10:"),
        "{both}"
    );
    let env_on_url = single_issue("upstreams:\n  a:\n    url: http://h/mcp\n    env: { K: v }\n");
    assert!(env_on_url.contains("only stdio"), "{env_on_url}");
    let bad_url = single_issue("upstreams:\n  a:\n    url: ftp://h/mcp\n");
    assert!(bad_url.contains("not an http"), "{bad_url}");
    let bad_mode =
        single_issue("upstreams:\n  a:\n    url: http://h/mcp\n    transport: carrier-pigeon\n");
    assert!(bad_mode.contains("carrier-pigeon"), "{bad_mode}");
}

#[test]
fn modern_era_cannot_use_the_legacy_sse_transport() {
    let line = single_issue(
        "upstreams:\n  a:\n    url: http://h/sse\n    transport: sse\n    era: modern\n",
    );
    assert!(
        line.starts_with("test.yaml:5:10:") && line.contains("transport: sse"),
        "{line}"
    );
}

#[test]
fn the_request_state_key_is_32_bytes_of_base64() {
    let up = "upstreams:\n  files:\n    command: srv\n";
    assert_eq!(parse(up).unwrap().request_state_key, None);
    // Standard and URL-safe alphabets, padded or not.
    let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    for text in [
        key,
        key.trim_end_matches('='),
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
    ] {
        let cfg = parse(&format!("{up}request_state:\n  key: \"{text}\"\n")).unwrap();
        let expected: [u8; 32] = std::array::from_fn(|i| i as u8);
        assert_eq!(cfg.request_state_key.unwrap().bytes(), &expected);
    }
    let short = single_issue(&format!("{up}request_state:\n  key: \"AAECAw==\"\n"));
    assert!(short.contains(":5:8:"), "{short}");
    assert!(short.contains("is 4 bytes; it must be 32"), "{short}");
    let garbage = single_issue(&format!("{up}request_state:\n  key: \"not base64!\"\n"));
    assert!(garbage.contains("is not base64"), "{garbage}");
    let missing = single_issue(&format!("{up}request_state:\n  key: \"${{NOPE}}\"\n"));
    assert!(missing.contains("request_state.key"), "{missing}");
    // The key never shows in debug output.
    let cfg = parse(&format!("{up}request_state:\n  key: \"{key}\"\n")).unwrap();
    assert!(!format!("{cfg:?}").contains(key));
}

#[test]
fn the_session_store_is_a_redis_url_kept_secret() {
    let up = "upstreams:\n  files:\n    command: srv\n";
    assert_eq!(parse(up).unwrap().session_store, None);
    let url = "redis://:hunter2hunter2@redis:6379/0";
    let cfg = parse(&format!("{up}session_store: \"{url}\"\n")).unwrap();
    assert_eq!(cfg.session_store.as_ref().unwrap().expose(), url);
    assert!(!format!("{cfg:?}").contains("hunter2"));
    for bad in ["http://redis:6379", "redis://", "valkey"] {
        let issue = single_issue(&format!("{up}session_store: \"{bad}\"\n"));
        assert!(
            issue.contains(":4:16:") && issue.contains("must be a redis:// URL"),
            "{issue}"
        );
    }
    let missing = single_issue(&format!("{up}session_store: \"${{NOPE}}\"\n"));
    assert!(missing.contains("session_store"), "{missing}");
}

#[test]
fn roots_are_file_uris_with_optional_names() {
    let cfg = parse(
        "upstreams:\n  files:\n    command: srv\n    roots:\n      - \"file:///srv/${TOKEN}\"\n      - { uri: \"file:///data\", name: data }\n",
    )
    .unwrap();
    let up = &cfg.upstreams[0];
    assert_eq!(
        up.roots_result(),
        r#"{"roots":[{"uri":"file:///srv/hunter2"},{"uri":"file:///data","name":"data"}]}"#
    );
    assert_eq!(
        parse("upstreams:\n  files:\n    command: srv\n")
            .unwrap()
            .upstreams[0]
            .roots_result(),
        r#"{"roots":[]}"#
    );
    let bad = single_issue(
        "upstreams:\n  files:\n    command: srv\n    roots: [\"https://example.com\"]\n",
    );
    assert!(bad.contains(":4:13:"), "{bad}");
    assert!(
        bad.contains("upstreams.files.roots: \"https://example.com\" is not a file:// URI"),
        "{bad}"
    );
}

#[test]
fn isolation_is_shared_by_default_and_per_session_takes_a_cap() {
    let stdio = |yaml: &str| match parse(yaml).unwrap().upstreams.remove(0).transport {
        Transport::Stdio(s) => s.isolation,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        stdio("upstreams:\n  b:\n    command: srv\n"),
        Isolation::Shared
    );
    assert_eq!(
        stdio("upstreams:\n  b:\n    command: srv\n    isolation: shared\n"),
        Isolation::Shared
    );
    assert_eq!(
        stdio("upstreams:\n  b:\n    command: srv\n    isolation: per-session\n"),
        Isolation::PerSession {
            max_instances: Isolation::DEFAULT_MAX_INSTANCES
        }
    );
    assert_eq!(
        stdio(
            "upstreams:\n  b:\n    command: srv\n    isolation: per-session\n    max_instances: 3\n"
        ),
        Isolation::PerSession { max_instances: 3 }
    );
}

#[test]
fn isolation_keys_are_checked_with_their_location() {
    let line = single_issue("upstreams:\n  b:\n    url: http://x\n    isolation: per-session\n");
    assert!(line.starts_with("test.yaml:3:10: "), "{line}");
    assert!(line.contains("upstreams.b.isolation: only stdio"), "{line}");

    let line = single_issue("upstreams:\n  b:\n    command: srv\n    isolation: per-user\n");
    assert!(line.starts_with("test.yaml:4:16: "), "{line}");
    assert!(line.contains("\"shared\" or \"per-session\""), "{line}");

    let line = single_issue(
        "upstreams:\n  b:\n    command: srv\n    isolation: per-session\n    max_instances: 0\n",
    );
    assert!(line.starts_with("test.yaml:5:20: "), "{line}");
    assert!(
        line.contains("upstreams.b.max_instances: must be between 1 and"),
        "{line}"
    );

    let line = single_issue("upstreams:\n  b:\n    command: srv\n    max_instances: 4\n");
    assert!(line.starts_with("test.yaml:4:20: "), "{line}");
    assert!(
        line.contains("only applies with isolation: per-session"),
        "{line}"
    );
}

#[test]
fn page_sizes_are_one_number_or_one_per_list() {
    let up = "upstreams:\n  files:\n    command: srv\n";
    let default = parse(up).unwrap().page_size;
    assert_eq!((default.tools, default.prompts), (usize::MAX, usize::MAX));
    assert_eq!((default.resources, default.templates), (100, 100));
    assert_eq!(
        parse(&format!("page_size: 50\n{up}")).unwrap().page_size,
        PageSizes::uniform(50)
    );
    let each = parse(&format!(
        "page_size: {{ tools: 200, resources: all }}\n{up}"
    ))
    .unwrap()
    .page_size;
    assert_eq!(
        (each.tools, each.prompts, each.resources, each.templates),
        (200, usize::MAX, usize::MAX, 100)
    );
    let zero = single_issue(&format!("page_size: 0\n{up}"));
    assert!(
        zero.contains(":1:12:") && zero.contains("page_size: 0 is out of range"),
        "{zero}"
    );
    let word = single_issue(&format!("page_size: {{ tools: many }}\n{up}"));
    assert!(
        word.contains("page_size.tools: \"many\" is not a number"),
        "{word}"
    );
}

#[test]
fn protection_keys_have_defaults_and_located_errors() {
    let cfg = parse("upstreams:\n  files:\n    command: srv\n").unwrap();
    assert_eq!(cfg.upstreams[0].protect, ProtectConfig::default());
    let cfg = parse(
        "upstreams:\n  files:\n    command: srv\n    limits: { max_in_flight: 16, max_queued: 64, queue_timeout: 2s }\n    circuit_breaker: { failures: 3, cooldown: 10s }\n    cache: { ttl: 30s, max_entries: 10000 }\n",
    )
    .unwrap();
    let protect = &cfg.upstreams[0].protect;
    assert_eq!(protect.limits.max_in_flight, 16);
    assert_eq!(protect.limits.max_queued, 64);
    assert_eq!(protect.limits.queue_timeout, Duration::from_secs(2));
    assert_eq!(protect.breaker.failures, 3);
    assert_eq!(protect.cache.ttl, Some(Duration::from_secs(30)));
    assert_eq!(protect.cache.max_entries, 10000);

    let line = single_issue(
        "upstreams:\n  files:\n    command: srv\n    limits:\n      max_in_flight: 0\n",
    );
    assert!(line.starts_with("test.yaml:5:22: "), "{line}");
    assert!(
        line.contains("upstreams.files.limits.max_in_flight: must be between 1 and"),
        "{line}"
    );
    let line = single_issue(
        "upstreams:\n  files:\n    command: srv\n    circuit_breaker: { cooldown: soon }\n",
    );
    assert!(line.starts_with("test.yaml:4:34: "), "{line}");
    assert!(line.contains("circuit_breaker.cooldown"), "{line}");
    let line = single_issue("upstreams:\n  files:\n    command: srv\n    cache: { tll: 1s }\n");
    assert!(line.starts_with("test.yaml:4:14: "), "{line}");
    assert!(line.contains("tll"), "{line}");
}

#[test]
fn tracing_is_off_by_default_and_its_keys_are_checked() {
    let cfg = parse("upstreams:\n  files:\n    command: srv\n").unwrap();
    assert_eq!(cfg.tracing, TracingConfig::default());
    let cfg = parse(
        "tracing:\n  otlp_endpoint: http://collector:4318\n  service_name: gw\n  sample_ratio: 0.25\nupstreams:\n  files:\n    command: srv\n",
    )
    .unwrap();
    assert_eq!(
        cfg.tracing.otlp_endpoint.as_deref(),
        Some("http://collector:4318")
    );
    assert_eq!(cfg.tracing.service_name.as_deref(), Some("gw"));
    assert_eq!(cfg.tracing.sample_ratio, Some(0.25));
    let line =
        single_issue("tracing:\n  sample_ratio: 2\nupstreams:\n  files:\n    command: srv\n");
    assert!(
        line.contains("tracing.sample_ratio") && line.contains(":2:"),
        "{line}"
    );
    let line = single_issue(
        "tracing:\n  otlp_endpoint: collector:4318\nupstreams:\n  files:\n    command: srv\n",
    );
    assert!(line.contains("tracing.otlp_endpoint"), "{line}");
    let line =
        single_issue("tracing:\n  endpoint: http://c\nupstreams:\n  files:\n    command: srv\n");
    assert!(line.contains("endpoint"), "{line}");
}
