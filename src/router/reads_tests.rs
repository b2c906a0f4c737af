//! Unit tests that count what the gateway reads of a call (issue 30): a
//! call's params are parsed once on the way up and its answer once on the
//! way back, whichever era either side speaks, and a result is read again
//! only to rewrite the URIs in it, not for a modern client's members nor
//! for the cache. The counters (`params::parses`, `envelopes_parsed`) are
//! per thread, and each test's tasks run on its one thread.

use serde_json::{Map, Value, json};

use super::tests::{PATIENT, call, gateway, object, ready, session_in};
use crate::protocol::Era;
use crate::upstream::test_support::{frame_of, within};

/// Issue 30: a call's params are parsed once on the way up (by the router,
/// or by whichever layer first reads them: see `protocol::Request`), and
/// the upstream's answer once on the way back (its envelope, by the
/// connection); the gateway reads neither again, whichever era the
/// upstream and the client speak (a modern client's result gets its
/// `resultType` without being read again).
#[tokio::test(start_paused = true)]
async fn a_call_is_parsed_once_on_the_way_up_and_its_answer_once_on_the_way_back() {
    for (modern, client) in [
        (false, Era::Legacy),
        (true, Era::Legacy),
        (false, Era::Modern),
        (true, Era::Modern),
    ] {
        let mut gw = gateway(PATIENT);
        if modern {
            gw.alpha.conn.set_modern(object(json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            })));
        }
        let ctx = session_in(&gw.router, false, client);
        let params_before = crate::protocol::params::parses();
        let envelopes_before = crate::protocol::envelopes_parsed();
        let reply = call(
            &gw.router,
            &ctx,
            "7",
            "tools/call",
            json!({ "name": "alpha__echo", "arguments": { "text": "hi" }, "_meta": { "k": 1 } }),
        );
        let sent = gw.alpha.next_sent().await;
        let upstream_id = sent.id.expect("a request");
        gw.alpha
            .answer(upstream_id, r#"{"content":[{"type":"text","text":"hi"}]}"#)
            .await;
        let reply = within(reply).await.unwrap();
        assert_eq!(
            crate::protocol::params::parses() - params_before,
            1,
            "the client's params, parsed once (modern upstream: {modern}, client: {client:?})"
        );
        assert_eq!(
            crate::protocol::envelopes_parsed() - envelopes_before,
            1,
            "the upstream's answer, parsed once (modern upstream: {modern}, client: {client:?})"
        );
        // What went up and what came back are whole.
        let frame = frame_of(&sent);
        assert_eq!(frame["params"]["name"], "echo");
        assert_eq!(frame["params"]["arguments"]["text"], "hi");
        assert_eq!(frame["params"]["_meta"]["k"], 1);
        assert_eq!(
            frame["params"]["_meta"]
                .get("io.modelcontextprotocol/protocolVersion")
                .is_some(),
            modern,
            "a modern upstream's _meta is merged in"
        );
        if modern {
            assert_eq!(sent.version.as_deref(), Some("2026-07-28"));
        }
        let reply = ready(reply);
        assert_eq!(reply["result"]["content"][0]["text"], "hi");
        assert_eq!(
            reply["result"].get("resultType").and_then(Value::as_str),
            (client == Era::Modern).then_some("complete"),
            "a modern client's result says it is complete"
        );
    }
}

/// Issue 30: a result the router has to change on its way is read again
/// only to rewrite the URIs in it (once), and the cache keeps it without
/// reading it: its own `ttlMs` and `cacheScope` are where the one pass
/// found them, and a modern client's `resultType` and hints are spliced in,
/// on the way through and from the cache.
#[tokio::test(start_paused = true)]
async fn a_result_is_read_again_only_to_rewrite_its_uris_and_not_to_be_cached() {
    for client in [Era::Legacy, Era::Modern] {
        let mut gw = gateway(PATIENT);
        gw.alpha.conn.set_modern(object(json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        })));
        let alpha = gw.router.upstreams().get("alpha").unwrap();
        alpha.set_hello(crate::upstream::handshake::ServerHello {
            protocol_version: "2026-07-28".into(),
            modern: true,
            capabilities: Map::new(),
            instructions: None,
            server_name: None,
        });
        let ctx = session_in(&gw.router, false, client);
        // (method, params, the upstream's result, reads of it expected)
        let cases = [
            (
                "resources/read",
                json!({ "uri": "alpha+file:///a" }),
                r#"{"contents":[{"uri":"file:///a","text":"x"}],"ttlMs":60000,"cacheScope":"public"}"#,
                2,
            ),
            (
                "prompts/get",
                json!({ "name": "alpha__p" }),
                r#"{"messages":[],"cacheScope":"public","ttlMs":60000}"#,
                1,
            ),
        ];
        for (method, params, result, reads) in cases {
            let mut answers = Vec::new();
            for round in ["upstream", "cache"] {
                let before = crate::protocol::envelopes_parsed();
                let reply = call(&gw.router, &ctx, "3", method, params.clone());
                if round == "upstream" {
                    let sent = gw.alpha.next_sent().await;
                    gw.alpha.answer(sent.id.expect("a request"), result).await;
                }
                let reply = ready(within(reply).await.unwrap());
                let expected = if round == "upstream" { reads } else { 0 };
                assert_eq!(
                    crate::protocol::envelopes_parsed() - before,
                    expected,
                    "{method} from the {round}, client {client:?}"
                );
                answers.push(reply["result"].clone());
            }
            if let Some(sent) = gw.alpha.try_sent() {
                panic!("the second came from the cache: {}", frame_of(&sent));
            }
            for (answer, round) in answers.iter().zip(["upstream", "cache"]) {
                let why = format!("{method} from the {round}, client {client:?}");
                if method == "resources/read" {
                    assert_eq!(answer["contents"][0]["uri"], "alpha+file:///a", "{why}");
                }
                assert_eq!(answer["cacheScope"], "public", "{why}");
                match client {
                    Era::Legacy => {
                        assert_eq!(answer["ttlMs"], 60000, "as the upstream sent it: {why}");
                        assert!(answer.get("resultType").is_none(), "{why}");
                    }
                    Era::Modern => {
                        assert_eq!(answer["resultType"], "complete", "{why}");
                        let ttl = answer["ttlMs"].as_u64().unwrap_or_default();
                        assert!(ttl > 0 && ttl <= 60000, "{why}: {ttl}");
                    }
                }
            }
        }
    }
}
