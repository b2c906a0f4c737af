//! How a forwarded `resources/read` or `prompts/get` uses the result cache
//! ([`crate::cache`]): [`before`] answers from it or waits for an identical
//! request in flight, and the [`Plan`] it returns stores the answer (in
//! `forward`'s `Exchange::finish`), as long as the upstream allows:
//! a 2026-07-28 upstream's `ttlMs` and `cacheScope`, or the configured
//! `cache.ttl` of a 2025-era one (whose results every client shares).
//!
//! Not cached: a call of an `isolation: per-session` upstream (its answer
//! is one session's), a round of input (`inputResponses`, `requestState`),
//! a task-augmented request, and a private result without an identity. An
//! upstream that acts as each caller (`auth.mode: token_exchange` or
//! `user`) answers each with its own token: every result it gives is kept
//! as private to the caller, whatever its hints say.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::time::Instant;

use super::RequestContext;
use super::call::Call;
use super::rewrite;
use crate::cache::{Flight, FlightGuard, Hit, Item, ResultCache, Store};
use crate::protocol::{self, Era, Method};

/// What the cache says before a call is sent.
pub(super) enum Before {
    /// The answer frame, from the cache.
    Hit(String),
    /// Ask upstream; with a plan when the answer may be kept.
    Miss(Option<Plan>),
}

/// A call whose answer may be kept.
pub(crate) struct Plan {
    cache: Arc<ResultCache>,
    upstream: Arc<str>,
    key: String,
    item: Item,
    identity: Option<Arc<str>>,
    /// The upstream acts as each caller: results are the caller's own.
    per_identity: bool,
    /// The configured `cache.ttl` of a 2025-era upstream; none: the
    /// upstream's own hints decide.
    legacy_ttl: Option<Duration>,
    max_entries: u64,
    /// Held while this call is the one asking upstream.
    _flight: Option<FlightGuard>,
}

/// The caching members of a result.
#[derive(Deserialize)]
struct Hints {
    #[serde(rename = "ttlMs")]
    ttl_ms: Option<u64>,
    #[serde(rename = "cacheScope")]
    cache_scope: Option<String>,
}

/// Looks the call up; a miss becomes the leader of identical misses, or
/// waits (until `deadline`) for the leader and looks again.
pub(super) async fn before(
    call: &Call<'_>,
    ctx: &RequestContext,
    id: &RawValue,
    cache: &Arc<ResultCache>,
    deadline: Instant,
) -> Before {
    let item = match (&call.method, &call.target) {
        (Method::ResourcesRead, Some(uri)) => Item::Resource(uri.to_string()),
        (Method::PromptsGet, Some(_)) => Item::Prompt,
        _ => return Before::Miss(None),
    };
    let config = call.handle.protection().cache_config();
    let legacy_ttl = match call.handle.is_modern() {
        true => None,
        false => match config.ttl {
            Some(ttl) => Some(ttl),
            None => return Before::Miss(None),
        },
    };
    let once = ["inputResponses", "requestState", "task"]
        .iter()
        .any(|k| call.params.raw(k).is_some());
    let per_identity = call.handle.acts_as_each_caller();
    if once || (call.handle.instance_count().is_some() && !per_identity) {
        return Before::Miss(None);
    }
    let arguments = call.params.raw("arguments").map_or("", |a| a.get());
    let key = format!(
        "{}\n{}\n{arguments}",
        call.method.name(),
        call.target.as_deref().unwrap_or_default()
    );
    let upstream = call.handle.name().clone();
    let identity = ctx.identity.as_ref().map(|i| i.client.clone());
    let method = call.method.name();
    if let Some(hit) = cache.get(&upstream, &key, identity.as_ref()) {
        return Before::Hit(frame(method, &hit, id.get(), ctx.era));
    }
    let flight = match cache.flight(&upstream, &key) {
        Flight::Leader(guard) => Some(guard),
        Flight::Follower(mut leader) => {
            Flight::wait(&mut leader, deadline).await;
            if let Some(hit) = cache.get(&upstream, &key, identity.as_ref()) {
                return Before::Hit(frame(method, &hit, id.get(), ctx.era));
            }
            None
        }
    };
    Before::Miss(Some(Plan {
        cache: cache.clone(),
        upstream,
        key,
        item,
        identity,
        per_identity,
        legacy_ttl,
        max_entries: config.max_entries,
        _flight: flight,
    }))
}

impl Plan {
    /// Keeps the (namespaced) result `body` if the upstream allows, and
    /// returns it as it goes to the client: a 2026-07-28 client's read of
    /// a 2025-era upstream with a configured `cache.ttl` gets that TTL and
    /// `cacheScope: public`.
    pub(super) fn store<'b>(&self, body: Cow<'b, str>, era: Era) -> Cow<'b, str> {
        let (ttl, private) = match self.legacy_ttl {
            Some(ttl) => (ttl, false),
            None => match serde_json::from_str::<Hints>(&body) {
                Ok(Hints {
                    ttl_ms: Some(ms),
                    cache_scope,
                }) => (
                    Duration::from_millis(ms),
                    cache_scope.as_deref() != Some("public"),
                ),
                _ => return body,
            },
        };
        let identity = match (private || self.per_identity, &self.identity) {
            (false, _) => None,
            (true, Some(identity)) => Some(identity),
            // Private to a client the gateway cannot tell apart: not kept.
            (true, None) => return body,
        };
        self.cache.put(Store {
            upstream: &self.upstream,
            key: &self.key,
            item: self.item.clone(),
            identity,
            body: &body,
            ttl,
            max_entries: self.max_entries,
        });
        match (self.legacy_ttl, era, &self.item) {
            (Some(ttl), Era::Modern, Item::Resource(_)) => {
                Cow::Owned(with_hints(&body, ttl.as_millis() as u64, self.per_identity))
            }
            _ => body,
        }
    }
}

/// The answer frame of a hit: what was kept, and for a 2026-07-28 client
/// the time it has left and its scope.
fn frame(method: &str, hit: &Hit, id: &str, era: Era) -> String {
    match era {
        Era::Legacy => protocol::response_frame(id, &hit.body),
        Era::Modern => {
            let hinted = match method == "resources/read" || hit.body.contains("\"ttlMs\"") {
                true => with_hints(&hit.body, hit.remaining.as_millis() as u64, hit.private),
                false => hit.body.to_string(),
            };
            protocol::response_frame(id, &rewrite::modern_result(method, &hinted))
        }
    }
}

/// `body` with its `ttlMs` and `cacheScope` set.
fn with_hints(body: &str, ttl_ms: u64, private: bool) -> String {
    let Ok(mut members) = serde_json::from_str::<IndexMap<String, Box<RawValue>>>(body) else {
        return body.to_owned();
    };
    let raw = |s: String| RawValue::from_string(s).expect("valid JSON literal");
    let scope = if private { "private" } else { "public" };
    members.insert("ttlMs".into(), raw(ttl_ms.to_string()));
    members.insert("cacheScope".into(), raw(format!("\"{scope}\"")));
    serde_json::to_string(&members).unwrap_or_else(|_| body.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_carry_the_time_left_and_their_scope_to_modern_clients() {
        let hit = Hit {
            body: r#"{"contents":[],"ttlMs":30000,"cacheScope":"public"}"#.into(),
            remaining: Duration::from_millis(1200),
            private: false,
        };
        let modern: serde_json::Value =
            serde_json::from_str(&frame("resources/read", &hit, "7", Era::Modern)).unwrap();
        assert_eq!(modern["result"]["ttlMs"], 1200);
        assert_eq!(modern["result"]["cacheScope"], "public");
        assert_eq!(modern["result"]["resultType"], "complete");
        let legacy: serde_json::Value =
            serde_json::from_str(&frame("resources/read", &hit, "7", Era::Legacy)).unwrap();
        assert_eq!(
            legacy["result"]["ttlMs"], 30000,
            "kept as the upstream sent it"
        );
    }
}
