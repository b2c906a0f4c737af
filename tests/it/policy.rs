//! Policy and per-client views, driven through in-process sessions of
//! several authenticated identities at once (the HTTP edge that
//! authenticates is not part of this test): every list on every page, hidden items answered
//! exactly like unknown ones, subscriptions and notifications that follow
//! each client's view, and a policy reload.

use serde_json::{Value, json};

use mcpmux::{Config, Identity, LocalSession, LocalStateless, Lookup};

use crate::support::interop::everything_upstream;
use crate::support::{TestGateway, fixture_upstream, within};

/// One in-process client of the gateway: a 2025-era session of a client,
/// or the same client's stateless (2026-07-28) requests.
enum Client {
    Session(LocalSession),
    Stateless(LocalStateless),
}

impl Client {
    /// A 2025-era session of `client` (none: authentication off).
    fn session(gw: &TestGateway, client: Option<&str>) -> Client {
        let identity = client.map(|c| Identity::new(c, Vec::new()));
        Client::Session(gw.gateway().local_session(identity))
    }

    /// The same client's stateless (2026-07-28) requests.
    fn modern(&self) -> Client {
        Client::Stateless(self.local().stateless())
    }

    fn era(&self) -> &'static str {
        match self {
            Client::Session(_) => "2025 session",
            Client::Stateless(_) => "stateless",
        }
    }

    fn local(&self) -> &LocalSession {
        match self {
            Client::Session(session) => session,
            Client::Stateless(_) => panic!("a session"),
        }
    }

    /// The response frame to one request.
    async fn ask(&self, method: &str, params: Value) -> Value {
        match self {
            Client::Session(session) => within(method, session.request(method, params)).await,
            Client::Stateless(client) => within(method, client.request(method, params)).await,
        }
    }

    async fn result(&self, method: &str, params: Value) -> Value {
        let answer = self.ask(method, params).await;
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }

    async fn error(&self, method: &str, params: Value) -> Value {
        let answer = self.ask(method, params).await;
        answer
            .get("error")
            .unwrap_or_else(|| panic!("{method} should fail: {answer}"))
            .clone()
    }

    /// Every item key (name, URI or template) of a list, walking every page,
    /// and how many pages it took.
    async fn list_all(&self, method: &str) -> (Vec<String>, usize) {
        let key = match method {
            "tools/list" => "tools",
            "prompts/list" => "prompts",
            "resources/list" => "resources",
            _ => "resourceTemplates",
        };
        let (mut keys, mut pages) = (Vec::new(), 0);
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.result(method, params).await;
            pages += 1;
            for item in page[key].as_array().unwrap() {
                let name = ["uriTemplate", "uri", "name"]
                    .iter()
                    .find_map(|k| item.get(*k))
                    .unwrap();
                keys.push(name.as_str().unwrap().to_owned());
            }
            match page.get("nextCursor") {
                Some(next) => cursor = Some(next.as_str().unwrap().to_owned()),
                None => return (keys, pages),
            }
        }
    }

    /// The next notification of the session: (method, uri or logger).
    async fn next_event(&self) -> (String, String) {
        let frame = within("a notification", self.local().next_notification()).await;
        let detail = frame["params"]["uri"]
            .as_str()
            .or(frame["params"]["logger"].as_str())
            .unwrap_or_default()
            .to_owned();
        (frame["method"].as_str().unwrap().to_owned(), detail)
    }

    fn pending(&self) -> usize {
        self.local().pending_notifications()
    }

    /// The URIs the session is subscribed to.
    fn subscriptions(&self) -> Vec<String> {
        self.local().subscribed_uris()
    }
}

const LISTS: [&str; 4] = [
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
];

/// The example the docs walk through (config/secure.yaml's policy).
const SECURE_POLICY: &str = r#"policy:
  default: deny
  clients:
    ops: { allow: ["*"] }
    reader: { allow: ["weather__*"], deny: ["notes+*"] }
"#;

/// A reader that also sees weather resources and some of server-everything.
const WIDER_POLICY: &str = r#"policy:
  clients:
    ops: { allow: ["*"] }
    reader:
      allow: ["weather__*", "weather+*", "everything__echo", "everything__get-*", "everything+demo://resource/static/document/*"]
      deny: ["notes+*", "weather__add"]
"#;

fn yaml(policy: &str, upstreams: &str) -> String {
    format!("page_size: 3\n{policy}upstreams:\n{upstreams}")
}

fn examples() -> String {
    fixture_upstream("weather", &["--test-controls"])
        + &fixture_upstream("notes", &["--test-controls"])
}

#[tokio::test]
async fn the_secure_example_gives_each_client_exactly_its_own_lists_on_every_page() {
    let gw = TestGateway::start(&yaml(SECURE_POLICY, &examples())).await;
    let anonymous = Client::session(&gw, None);
    let ops = Client::session(&gw, Some("ops"));
    let reader = Client::session(&gw, Some("reader"));
    let stranger = Client::session(&gw, Some("stranger"));
    for method in LISTS {
        let (everything, _) = anonymous.list_all(method).await;
        assert!(!everything.is_empty(), "{method}");
        assert_eq!(ops.list_all(method).await.0, everything, "ops, {method}");
        let (stranger_sees, pages) = stranger.list_all(method).await;
        assert_eq!(
            (stranger_sees, pages),
            (Vec::<String>::new(), 1),
            "stranger, {method}"
        );
        let expected: Vec<String> = everything
            .iter()
            .filter(|k| k.starts_with("weather__"))
            .cloned()
            .collect();
        let (reader_sees, pages) = reader.list_all(method).await;
        assert_eq!(reader_sees, expected, "reader, {method}");
        if method == "tools/list" {
            assert!(pages >= 3, "the reader's tools take several pages: {pages}");
            assert!(expected.len() < everything.len());
        }
    }
    // The modern era gets the same views, marked private.
    let page = reader.modern().result("tools/list", json!({})).await;
    assert_eq!(page["cacheScope"], "private");
    let page = anonymous.modern().result("tools/list", json!({})).await;
    assert_eq!(page["cacheScope"], "public");
    gw.stop().await;
}

/// An error with `name` replaced, so errors about different names compare.
fn shape(error: &Value, name: &str) -> String {
    error.to_string().replace(name, "<NAME>")
}

#[tokio::test]
async fn hidden_items_answer_exactly_like_unknown_ones_in_both_eras() {
    let upstreams = examples() + &everything_upstream("everything");
    let gw = TestGateway::start(&yaml(WIDER_POLICY, &upstreams)).await;
    let ops = Client::session(&gw, Some("ops"));
    let reader = Client::session(&gw, Some("reader"));
    let prompt_ref = |name: &str| json!({ "ref": { "type": "ref/prompt", "name": name }, "argument": { "name": "name", "value": "a" } });
    let resource_ref = |uri: &str| json!({ "ref": { "type": "ref/resource", "uri": uri }, "argument": { "name": "id", "value": "1" } });
    // (method, params for a hidden item, params for an unknown one, the two names)
    type Case = (&'static str, Value, Value, &'static str, &'static str);
    let cases: Vec<Case> = vec![
        (
            "tools/call",
            json!({ "name": "notes__echo", "arguments": { "message": "hi" } }),
            json!({ "name": "nosuch__echo", "arguments": { "message": "hi" } }),
            "notes__echo",
            "nosuch__echo",
        ),
        (
            "tools/call",
            json!({ "name": "weather__add", "arguments": { "a": 1, "b": 2 } }),
            json!({ "name": "weather__nosuch", "arguments": { "a": 1, "b": 2 } }),
            "weather__add",
            "weather__nosuch",
        ),
        (
            "prompts/get",
            json!({ "name": "notes__greeting", "arguments": { "name": "a" } }),
            json!({ "name": "nosuch__greeting", "arguments": { "name": "a" } }),
            "notes__greeting",
            "nosuch__greeting",
        ),
        (
            "resources/read",
            json!({ "uri": "notes+demo://notes/readme" }),
            json!({ "uri": "nosuch+demo://notes/readme" }),
            "notes+demo://notes/readme",
            "nosuch+demo://notes/readme",
        ),
        (
            "resources/read",
            json!({ "uri": "everything+demo://resource/dynamic/text/1" }),
            json!({ "uri": "nosuch+demo://resource/dynamic/text/1" }),
            "everything+demo://resource/dynamic/text/1",
            "nosuch+demo://resource/dynamic/text/1",
        ),
        (
            "completion/complete",
            prompt_ref("notes__greeting"),
            prompt_ref("nosuch__greeting"),
            "notes__greeting",
            "nosuch__greeting",
        ),
        (
            "completion/complete",
            resource_ref("notes+demo://notes/notes/{id}"),
            resource_ref("nosuch+demo://notes/notes/{id}"),
            "notes+demo://notes/notes/{id}",
            "nosuch+demo://notes/notes/{id}",
        ),
    ];
    for (method, hidden, unknown, hidden_name, unknown_name) in cases {
        // The item exists: ops gets an answer for it.
        let answer = ops.ask(method, hidden.clone()).await;
        assert!(
            answer.get("error").is_none(),
            "ops, {method} {hidden_name}: {answer}"
        );
        for client in [&reader, &reader.modern()] {
            let hidden_error = client.error(method, hidden.clone()).await;
            let unknown_error = client.error(method, unknown.clone()).await;
            assert_eq!(
                shape(&hidden_error, hidden_name),
                shape(&unknown_error, unknown_name),
                "{method} {hidden_name} ({})",
                client.era()
            );
        }
    }
    // An everything tool outside the reader's globs, next to one inside them.
    let hidden = reader
        .error(
            "tools/call",
            json!({ "name": "everything__toggle-simulated-logging", "arguments": {} }),
        )
        .await;
    let unknown = reader
        .error(
            "tools/call",
            json!({ "name": "everything__nosuch", "arguments": {} }),
        )
        .await;
    assert_eq!(
        shape(&hidden, "everything__toggle-simulated-logging"),
        shape(&unknown, "everything__nosuch")
    );
    let echoed = reader
        .result(
            "tools/call",
            json!({ "name": "everything__echo", "arguments": { "message": "hi" } }),
        )
        .await;
    assert!(echoed.to_string().contains("hi"), "{echoed}");

    // Subscriptions: a hidden URI is refused like an unknown one and joins nothing.
    let hidden = reader
        .error(
            "resources/subscribe",
            json!({ "uri": "notes+demo://notes/readme" }),
        )
        .await;
    let unknown = reader
        .error(
            "resources/subscribe",
            json!({ "uri": "nosuch+demo://notes/readme" }),
        )
        .await;
    assert_eq!(
        shape(&hidden, "notes+demo://notes/readme"),
        shape(&unknown, "nosuch+demo://notes/readme")
    );
    let hidden = reader
        .error(
            "resources/subscribe",
            json!({ "uri": "everything+demo://resource/dynamic/text/1" }),
        )
        .await;
    assert_eq!(
        shape(&hidden, "everything+demo://resource/dynamic/text/1"),
        shape(&unknown, "nosuch+demo://notes/readme")
    );
    assert!(reader.subscriptions().is_empty());
    ops.result(
        "resources/subscribe",
        json!({ "uri": "notes+demo://notes/readme" }),
    )
    .await;
    assert_eq!(ops.subscriptions().len(), 1);

    // The reader's lists hold exactly its share of server-everything.
    let (tools, _) = reader.list_all("tools/list").await;
    let everything_tools: Vec<&String> = tools
        .iter()
        .filter(|t| t.starts_with("everything__"))
        .collect();
    assert!(everything_tools.len() > 2, "{tools:?}");
    assert!(
        everything_tools
            .iter()
            .all(|t| *t == "everything__echo" || t.starts_with("everything__get-")),
        "{tools:?}"
    );
    let (resources, _) = reader.list_all("resources/list").await;
    assert!(
        resources
            .iter()
            .any(|r| r.starts_with("everything+demo://resource/static/document/")),
        "{resources:?}"
    );
    assert!(
        resources.iter().all(|r| r.starts_with("weather+")
            || r.starts_with("everything+demo://resource/static/document/")),
        "{resources:?}"
    );
    assert_eq!(
        reader
            .list_all("prompts/list")
            .await
            .0
            .iter()
            .filter(|p| p.starts_with("everything__"))
            .count(),
        0
    );
    assert!(
        reader
            .list_all("resources/templates/list")
            .await
            .0
            .iter()
            .all(|t| t.starts_with("weather+"))
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_cursor_of_one_view_is_refused_by_another() {
    let gw = TestGateway::start(&yaml(SECURE_POLICY, &examples())).await;
    let ops = Client::session(&gw, Some("ops"));
    let reader = Client::session(&gw, Some("reader"));
    let anonymous = Client::session(&gw, None);
    let first = reader.result("tools/list", json!({})).await;
    let cursor = first["nextCursor"]
        .as_str()
        .expect("more than one page")
        .to_owned();
    let second = reader
        .result("tools/list", json!({ "cursor": cursor }))
        .await;
    assert!(
        second["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["name"].as_str().unwrap().starts_with("weather__"))
    );
    for other in [&ops, &anonymous] {
        let refused = other.error("tools/list", json!({ "cursor": cursor })).await;
        assert_eq!(refused["code"], -32602, "{refused}");
        assert!(
            refused["message"]
                .as_str()
                .unwrap()
                .starts_with("invalid cursor"),
            "{refused}"
        );
    }
    let ops_cursor = ops.result("tools/list", json!({})).await["nextCursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let refused = reader
        .error("tools/list", json!({ "cursor": ops_cursor }))
        .await;
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid cursor"),
        "{refused}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn notifications_of_hidden_things_never_reach_a_subscriber() {
    let gw = TestGateway::start(&yaml(WIDER_POLICY, &examples())).await;
    let ops = Client::session(&gw, Some("ops"));
    let reader = Client::session(&gw, Some("reader"));
    const WEATHER: &str = "weather+demo://weather/readme";
    const NOTES: &str = "notes+demo://notes/readme";
    reader
        .result("resources/subscribe", json!({ "uri": WEATHER }))
        .await;
    reader
        .error("resources/subscribe", json!({ "uri": NOTES }))
        .await;
    ops.result("resources/subscribe", json!({ "uri": WEATHER }))
        .await;
    ops.result("resources/subscribe", json!({ "uri": NOTES }))
        .await;
    // (That even a hidden URI which got into the table, say by a
    // subscription racing a policy reload, is never announced to the reader
    // is a unit test of the hub: notify/policy_tests.rs.)
    reader
        .result("logging/setLevel", json!({ "level": "info" }))
        .await;
    ops.result("logging/setLevel", json!({ "level": "info" }))
        .await;

    // resources/updated and log messages reach the hub before the call's
    // answer, so the notes ones are queued before the weather ones.
    let touch = |upstream: &str| json!({ "name": format!("{upstream}__touch"), "arguments": { "uri": format!("demo://{upstream}/readme") } });
    let log = |upstream: &str| json!({ "name": format!("{upstream}__log"), "arguments": { "level": "error" } });
    ops.result("tools/call", touch("notes")).await;
    ops.result("tools/call", log("notes")).await;
    ops.result("tools/call", touch("weather")).await;
    ops.result("tools/call", log("weather")).await;
    let updated = "notifications/resources/updated".to_owned();
    let message = "notifications/message".to_owned();
    assert_eq!(
        reader.next_event().await,
        (updated.clone(), WEATHER.to_owned())
    );
    assert_eq!(
        reader.next_event().await,
        (message.clone(), "weather/example".to_owned())
    );
    assert_eq!(reader.pending(), 0);
    assert_eq!(ops.next_event().await, (updated.clone(), NOTES.to_owned()));
    assert_eq!(ops.next_event().await, (updated, WEATHER.to_owned()));
    assert_eq!(
        ops.next_event().await,
        (message.clone(), "notes/example".to_owned())
    );
    assert_eq!(
        ops.next_event().await,
        (message, "weather/example".to_owned())
    );

    // A notes tool appears: ops is told, the reader (who sees no notes tools)
    // is not. A weather prompt appearing after it is the reader's first news.
    ops.result(
        "tools/call",
        json!({ "name": "notes__add_tools", "arguments": { "count": 1, "prefix": "n_" } }),
    )
    .await;
    assert_eq!(ops.next_event().await.0, "notifications/tools/list_changed");
    ops.result(
        "tools/call",
        json!({ "name": "weather__add_prompt", "arguments": { "name": "marker" } }),
    )
    .await;
    assert_eq!(
        reader.next_event().await.0,
        "notifications/prompts/list_changed"
    );
    assert_eq!(
        reader.pending(),
        0,
        "no tools/list_changed for a notes tool"
    );
    assert_eq!(
        ops.next_event().await.0,
        "notifications/prompts/list_changed"
    );
    // A weather tool appearing is news to both.
    ops.result(
        "tools/call",
        json!({ "name": "weather__add_tools", "arguments": { "count": 1, "prefix": "w_" } }),
    )
    .await;
    assert_eq!(
        reader.next_event().await.0,
        "notifications/tools/list_changed"
    );
    assert_eq!(ops.next_event().await.0, "notifications/tools/list_changed");
    assert!(
        reader
            .list_all("tools/list")
            .await
            .0
            .contains(&"weather__w_0".to_owned())
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_reloaded_policy_applies_on_the_next_request_and_announces_changed_views() {
    let upstreams = examples();
    let gw = TestGateway::start(&yaml(WIDER_POLICY, &upstreams)).await;
    let ops = Client::session(&gw, Some("ops"));
    let reader = Client::session(&gw, Some("reader"));
    const WEATHER: &str = "weather+demo://weather/readme";
    reader
        .result("resources/subscribe", json!({ "uri": WEATHER }))
        .await;
    ops.result("resources/subscribe", json!({ "uri": WEATHER }))
        .await;
    let cursor = reader.result("tools/list", json!({})).await["nextCursor"]
        .as_str()
        .unwrap()
        .to_owned();
    reader
        .result(
            "tools/call",
            json!({ "name": "weather__echo", "arguments": { "message": "hi" } }),
        )
        .await;

    // The reader now gets the notes tools and prompts instead.
    let swapped =
        "policy:\n  clients:\n    ops: { allow: [\"*\"] }\n    reader: { allow: [\"notes__*\"] }\n";
    let config = Config::parse(
        &crate::support::gateway::with_auth_off(&yaml(swapped, &upstreams)),
        "reload.yaml",
        &Lookup::from_process(),
    )
    .unwrap();
    let diff = within("reload", gw.gateway().reload(&config)).await;
    assert!(diff.is_empty(), "{diff:?}");

    let mut told = Vec::new();
    while reader.pending() > 0 {
        told.push(reader.next_event().await.0);
    }
    assert_eq!(
        told,
        [
            "notifications/tools/list_changed",
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed",
        ]
    );
    assert_eq!(ops.pending(), 0, "ops's view did not change");
    assert!(
        reader.subscriptions().is_empty(),
        "a URI it may no longer read"
    );
    assert_eq!(ops.subscriptions().len(), 1);

    let stale = reader
        .error("tools/list", json!({ "cursor": cursor }))
        .await;
    assert!(
        stale["message"]
            .as_str()
            .unwrap()
            .starts_with("stale cursor"),
        "{stale}"
    );
    let (tools, _) = reader.list_all("tools/list").await;
    assert!(
        !tools.is_empty() && tools.iter().all(|t| t.starts_with("notes__")),
        "{tools:?}"
    );
    let refused = reader
        .error(
            "tools/call",
            json!({ "name": "weather__echo", "arguments": { "message": "hi" } }),
        )
        .await;
    assert_eq!(refused["code"], -32602, "{refused}");
    reader
        .result(
            "tools/call",
            json!({ "name": "notes__echo", "arguments": { "message": "hi" } }),
        )
        .await;

    // The same policy again changes nothing and tells nobody.
    within("reload", gw.gateway().reload(&config)).await;
    assert_eq!((reader.pending(), ops.pending()), (0, 0));
    gw.stop().await;
}
