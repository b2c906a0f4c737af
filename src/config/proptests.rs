//! Property tests for the config loader ([`Config::parse`]): arbitrary text,
//! YAML built from random keys and values near the real schema, and damaged
//! copies of `config/full.yaml` never panic, and every refusal is
//! [`ConfigError::Invalid`] with issues at line and column 1 or more, each
//! with a non-empty one-line message.

use proptest::prelude::*;

use super::*;

const FULL: &str = include_str!("../../config/full.yaml");

fn lookup() -> Lookup {
    Lookup::from_pairs([
        ("TOKEN", "hunter2"),
        ("EMPTY", ""),
        ("MULTI", "two\nlines"),
        ("MCPMUX_EXE", "/bin/mcpmux"),
    ])
}

/// The whole property for one config text.
fn check(text: &str) -> Result<(), TestCaseError> {
    let err = match Config::parse(text, "test.yaml", &lookup()) {
        Ok(_) => return Ok(()),
        Err(err) => err,
    };
    let lines = err.lines();
    let ConfigError::Invalid { file, issues } = err else {
        return Err(TestCaseError::fail(format!(
            "not an Invalid error: {err:?}"
        )));
    };
    prop_assert_eq!(file, "test.yaml");
    prop_assert!(!issues.is_empty(), "Invalid with no issues");
    for issue in &issues {
        prop_assert!(
            issue.line >= 1 && issue.column >= 1,
            "{:?} in {:?}",
            issue,
            text
        );
        prop_assert!(
            !issue.message.trim().is_empty(),
            "{:?} in {:?}",
            issue,
            text
        );
        prop_assert!(
            !issue.message.contains(['\n', '\r']),
            "{:?} in {:?}",
            issue,
            text
        );
    }
    // Rendered, each issue is exactly one line.
    prop_assert_eq!(lines.len(), issues.len(), "{:?}", lines);
    Ok(())
}

/// The `|`-separated words of `list` (so rustfmt keeps long lists short).
fn words(list: &'static str) -> Vec<&'static str> {
    list.split('|').collect()
}

/// Pieces of YAML syntax, schema keys and values, to be strung together.
fn token() -> impl Strategy<Value = String> {
    let syntax = words(
        "\n|\n  |\n    |  | |\t|- |: |:|, |{|}|[|]|\"|'|#|>|? |&a |*a|<<: |!!str |\
         ---\n|...\n|%YAML 1.2\n|\\",
    );
    let keys = words(
        "upstreams|listen|page_size|shutdown_grace|sessions|idle_timeout|max|http|\
         max_body_bytes|allowed_origins|sse_keepalive|command|args|env|cwd|url|headers|\
         transport|prefix|timeout|era|namespace_uris|required",
    );
    let values = words(
        "a|files|srv|30s|0s|1h|-1|0|100|99999999999999999999|1.5|true|null|~|http://h/mcp|\
         127.0.0.1:8080|modern|sse|${|}|$$|${TOKEN}|${NOPE}|${MULTI}|${EMPTY:-x}|\
         \u{0}|\u{85}|\u{2028}|\u{feff}|é",
    );
    let all: Vec<&str> = [syntax, keys, values, vec!["|"]].concat();
    prop_oneof![
        8 => prop::sample::select(all).prop_map(str::to_owned),
        1 => crate::protocol::proptests::chars(4),
    ]
}

/// A YAML node: a scalar already written out, or a collection.
#[derive(Debug, Clone)]
enum Node {
    Scalar(String),
    Seq(Vec<Node>, bool),
    Map(Vec<(String, Node)>, bool),
}

impl Node {
    fn is_flow(&self) -> bool {
        match self {
            Self::Scalar(_) => true,
            Self::Seq(items, flow) => *flow || items.is_empty(),
            Self::Map(entries, flow) => *flow || entries.is_empty(),
        }
    }

    /// Block style at `indent`, except nodes written in flow style.
    fn render(&self, indent: usize, out: &mut String) {
        let pad = " ".repeat(indent);
        match self {
            _ if self.is_flow() => {
                self.render_flow(out);
                out.push('\n');
            }
            Self::Seq(items, _) => {
                for item in items {
                    out.push_str(&pad);
                    out.push('-');
                    item.render_nested(indent + 2, out);
                }
            }
            Self::Map(entries, _) => {
                for (key, value) in entries {
                    out.push_str(&pad);
                    out.push_str(key);
                    out.push(':');
                    value.render_nested(indent + 2, out);
                }
            }
            Self::Scalar(_) => unreachable!("scalars are flow"),
        }
    }

    /// After `key:` or `-`: flow nodes on the same line, blocks below.
    fn render_nested(&self, indent: usize, out: &mut String) {
        out.push(if self.is_flow() { ' ' } else { '\n' });
        self.render(indent, out);
    }

    fn render_flow(&self, out: &mut String) {
        match self {
            Self::Scalar(s) => out.push_str(s),
            Self::Seq(items, _) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.render_flow(out);
                }
                out.push(']');
            }
            Self::Map(entries, _) => {
                out.push('{');
                for (i, (key, value)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(key);
                    out.push_str(": ");
                    value.render_flow(out);
                }
                out.push('}');
            }
        }
    }
}

/// A string as YAML: plain when that is safe enough, else double-quoted
/// (JSON's escapes are YAML's too); sometimes plain regardless.
fn quoted(s: String, how: u8) -> String {
    let simple = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
        && !s.starts_with(['-', '.']);
    match how % 32 {
        0 => s,
        _ if simple && how.is_multiple_of(2) => s,
        _ => serde_json::to_string(&s).unwrap_or_default(),
    }
}

/// One of the `|`-separated `choices` (the first two valid, the rest not
/// always), rarely anything.
fn string(choices: &'static str) -> impl Strategy<Value = String> {
    let choices = words(choices);
    prop_oneof![
        20 => prop::sample::select(choices[..2].to_vec()).prop_map(str::to_owned),
        10 => prop::sample::select(choices).prop_map(str::to_owned),
        1 => crate::protocol::proptests::chars(12),
    ]
}

fn scalar_of(s: impl Strategy<Value = String>) -> impl Strategy<Value = Node> {
    (s, any::<u8>()).prop_map(|(s, how)| Node::Scalar(quoted(s, how)))
}

fn duration() -> impl Strategy<Value = Node> {
    scalar_of(string(
        "30s|5m|1h|500ms|0s|0|-1s|soon||30|1y|99999999999999999999s|\
         ${DUR:-10s}|${NOPE}|${|$${X}| 15s ",
    ))
}

fn integer() -> impl Strategy<Value = Node> {
    prop_oneof![
        20 => prop::sample::select(vec![1i128, 100, 1024, 10_000, 0, 1023, 10_001])
            .prop_map(|n| Node::Scalar(n.to_string())),
        1 => prop::sample::select(vec![-1, 1 << 64, i128::MAX])
            .prop_map(|n| Node::Scalar(n.to_string())),
        1 => any::<u64>().prop_map(|n| Node::Scalar(n.to_string())),
        1 => scalar_of(string("1e3|0x10|1_000|ten|")),
    ]
}

fn boolean() -> impl Strategy<Value = Node> {
    prop_oneof![
        10 => prop::sample::select(vec!["true", "false"]),
        1 => prop::sample::select(vec!["yes", "no", "True", "1", "null", "\"true\""]),
    ]
    .prop_map(|s| Node::Scalar(s.to_owned()))
}

/// Any node at all, a couple of levels deep.
fn anything() -> impl Strategy<Value = Node> {
    let leaf = prop_oneof![
        scalar_of(string("x||null|~|${TOKEN}|a: b|- c")),
        integer(),
        boolean(),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..4), any::<bool>())
                .prop_map(|(items, flow)| Node::Seq(items, flow)),
            (
                prop::collection::vec((key_text(), inner), 0..4),
                any::<bool>()
            )
                .prop_map(|(entries, flow)| Node::Map(entries, flow)),
        ]
    })
}

fn key_text() -> impl Strategy<Value = String> {
    (string("a|b|command|url|x-y|A|1"), any::<u8>()).prop_map(|(s, how)| quoted(s, how))
}

/// A map with each of `fields` present or not, each value as the schema
/// wants it or (sometimes) anything at all, plus (sometimes) an unknown key.
fn fields(fields: Vec<(&'static str, f64, BoxedStrategy<Node>)>) -> impl Strategy<Value = Node> {
    let entries: Vec<_> = fields
        .into_iter()
        .map(|(key, present, value)| {
            let value = prop_oneof![150 => value, 1 => anything()];
            prop::option::weighted(present, value).prop_map(move |v| v.map(|v| (key.to_owned(), v)))
        })
        .collect();
    (
        entries,
        prop::option::weighted(0.02, (key_text(), anything())),
        any::<bool>(),
    )
        .prop_flat_map(|(entries, unknown, flow)| {
            let mut entries: Vec<(String, Node)> = entries.into_iter().flatten().collect();
            entries.extend(unknown);
            (Just(entries).prop_shuffle(), Just(flow))
        })
        .prop_map(|(entries, flow)| {
            let flow = flow && entries.len() <= 2;
            Node::Map(entries, flow)
        })
}

fn string_list(choices: &'static str) -> BoxedStrategy<Node> {
    (
        prop::collection::vec(scalar_of(string(choices)), 0..3),
        any::<bool>(),
    )
        .prop_map(|(items, flow)| Node::Seq(items, flow))
        .boxed()
}

/// Distinct keys (a repeated key is a YAML error) with their values.
fn distinct(entries: Vec<((String, u8), Node)>) -> Vec<(String, Node)> {
    let mut seen = std::collections::HashSet::new();
    entries
        .into_iter()
        .filter(|((key, _), _)| seen.insert(key.clone()))
        .map(|((key, how), value)| (quoted(key, how), value))
        .collect()
}

fn string_map(keys: &'static str, values: &'static str) -> BoxedStrategy<Node> {
    let entry = ((string(keys), any::<u8>()), scalar_of(string(values)));
    (prop::collection::vec(entry, 0..3), any::<bool>())
        .prop_map(|(entries, flow)| Node::Map(distinct(entries), flow))
        .boxed()
}

/// An upstream: mostly a stdio or a remote one, sometimes a mix.
fn upstream() -> impl Strategy<Value = Node> {
    let command = || scalar_of(string("srv|npx|${MCPMUX_EXE}|| |${NOPE}")).boxed();
    let args = || string_list("-y|--name|${TOKEN}|$$|${1X}");
    let env = || string_map("KEY|PATH|A=B|", "v|${TOKEN}|${NOPE}|${MULTI}");
    let cwd = || scalar_of(string(".|/srv|${DOCS:-/srv/docs}")).boxed();
    let url = || {
        let urls = "http://h/mcp|https://h:8443/sse|ftp://h|http://|${URL:-http://x/}|http://[::1";
        scalar_of(string(urls)).boxed()
    };
    let headers = || {
        let names = "Authorization|X-Team|bad header|";
        string_map(names, "Bearer ${TOKEN}|v|a\nb|${MULTI}")
    };
    let transport = || scalar_of(string("sse|streamable-http|carrier-pigeon")).boxed();
    let common = || {
        vec![
            (
                "prefix",
                0.3,
                scalar_of(string("|docs|has space|${TOKEN}|a_b-C")).boxed(),
            ),
            ("timeout", 0.3, duration().boxed()),
            (
                "era",
                0.3,
                scalar_of(string("auto|legacy|modern|future")).boxed(),
            ),
            ("namespace_uris", 0.2, boolean().boxed()),
            ("required", 0.2, boolean().boxed()),
        ]
    };
    let (mine, theirs) = (0.95, 0.03);
    let stdio = [
        ("command", mine, command()),
        ("args", 0.5, args()),
        ("env", 0.5, env()),
        ("cwd", 0.3, cwd()),
        ("url", theirs, url()),
        ("headers", theirs, headers()),
        ("transport", theirs, transport()),
    ];
    let remote = [
        ("url", mine, url()),
        ("headers", 0.5, headers()),
        ("transport", 0.5, transport()),
        ("command", theirs, command()),
        ("args", theirs, args()),
        ("env", theirs, env()),
        ("cwd", theirs, cwd()),
    ];
    prop_oneof![
        fields(stdio.into_iter().chain(common()).collect()),
        fields(remote.into_iter().chain(common()).collect()),
    ]
}

fn upstreams() -> impl Strategy<Value = Node> {
    let names = "a|files|b-2|Bad|1a||a_b|abcdefghijklmnopqrstuvwxyz0123456|a\nb|a\rb";
    let entries = prop::collection::vec(((string(names), any::<u8>()), upstream()), 1..4);
    (entries, any::<bool>()).prop_map(|(entries, flow)| Node::Map(distinct(entries), flow))
}

/// A whole config near the schema.
fn config() -> impl Strategy<Value = Node> {
    let listen = "127.0.0.1:8080|[::1]:0|localhost:80|${LISTEN:-0.0.0.0:1}|:80";
    let sessions = vec![
        ("idle_timeout", 0.5, duration().boxed()),
        ("max", 0.5, integer().boxed()),
    ];
    let http = vec![
        ("max_body_bytes", 0.5, integer().boxed()),
        (
            "allowed_origins",
            0.5,
            string_list("*|https://x.example|${NOPE}"),
        ),
        ("sse_keepalive", 0.5, duration().boxed()),
    ];
    fields(vec![
        ("listen", 0.3, scalar_of(string(listen)).boxed()),
        ("page_size", 0.3, integer().boxed()),
        ("shutdown_grace", 0.3, duration().boxed()),
        ("sessions", 0.3, fields(sessions).boxed()),
        ("http", 0.3, fields(http).boxed()),
        (
            "upstreams",
            0.95,
            prop_oneof![20 => upstreams(), 1 => anything()].boxed(),
        ),
    ])
}

fn render(node: &Node) -> String {
    let mut out = String::new();
    node.render(0, &mut out);
    out
}

/// full.yaml with some of its lines dropped, repeated, moved, re-indented
/// or cut short.
fn damaged_full() -> impl Strategy<Value = String> {
    let edit = (
        0..5u8,
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
    );
    prop::collection::vec(edit, 1..4).prop_map(|edits| {
        let mut lines: Vec<String> = FULL.lines().map(str::to_owned).collect();
        for (op, a, b) in edits {
            if lines.is_empty() {
                break;
            }
            let (i, j) = (a.index(lines.len()), b.index(lines.len()));
            match op {
                0 => {
                    lines.remove(i);
                }
                1 => lines.insert(j, lines[i].clone()),
                2 => lines.swap(i, j),
                3 => lines[i].insert_str(0, &" ".repeat(j % 5)),
                _ => {
                    let line = &lines[i];
                    let cut = line
                        .char_indices()
                        .nth(j % (line.chars().count() + 1))
                        .map_or(line.len(), |(c, _)| c);
                    lines[i].truncate(cut);
                }
            }
        }
        lines.join("\n")
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_is_refused_cleanly(
        text in prop_oneof![
            ".{0,80}",
            prop::collection::vec(token(), 0..40).prop_map(|t| t.concat()),
        ],
    ) {
        check(&text)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn yaml_near_the_schema_is_refused_cleanly(node in config()) {
        check(&render(&node))?;
    }
}

proptest! {
    // Each case parses a copy of the whole annotated example config.
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn damaged_full_yaml_is_refused_cleanly(text in damaged_full()) {
        check(&text)?;
    }
}

#[test]
fn full_yaml_is_valid() {
    Config::parse(FULL, "full.yaml", &lookup()).unwrap();
}

// Cases the properties above found, kept as plain tests.

#[test]
fn names_and_keys_with_line_breaks_stay_on_one_line() {
    let text = r#"
upstreams:
  "a\nb":
    url: http://h/mcp
    headers: {"X\nY": "${NOPE}"}
  "c\rd":
    command: srv
    env: {"K\nV": "${NOPE}"}
"#;
    let err = Config::parse(text, "test.yaml", &lookup()).unwrap_err();
    let ConfigError::Invalid { issues, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(issues.len() >= 4, "{issues:?}");
    assert_eq!(err.lines().len(), issues.len(), "{:?}", err.lines());
    assert!(
        err.to_string().contains("upstreams.a\\nb.headers.X\\nY"),
        "{err}"
    );
}
