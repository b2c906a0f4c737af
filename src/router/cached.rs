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

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::time::Instant;

use super::RequestContext;
use super::call::Call;
use super::rewrite;
use crate::cache::{Flight, FlightGuard, Hit, Item, ResultCache, Store};
use crate::protocol::hints::{CacheHints, Hint, HintSpans};
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
    if let Some(hit) = cache.get(&upstream, &key, identity.as_ref()) {
        return Before::Hit(frame(&call.method, &hit, id.get(), ctx.era));
    }
    let flight = match cache.flight(&upstream, &key) {
        Flight::Leader(guard) => Some(guard),
        Flight::Follower(mut leader) => {
            Flight::wait(&mut leader, deadline).await;
            if let Some(hit) = cache.get(&upstream, &key, identity.as_ref()) {
                return Before::Hit(frame(&call.method, &hit, id.get(), ctx.era));
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
    /// Keeps the (namespaced) result `text` if the upstream allows, its
    /// own hint members read where `spans` says they are; for a
    /// 2026-07-28 client's read of a 2025-era upstream with a configured
    /// `cache.ttl`, the hints its answer carries: that TTL, and
    /// `cacheScope: public` unless the upstream acts as each caller.
    pub(super) fn store(
        &self,
        text: &str,
        spans: &HintSpans,
        era: Era,
    ) -> Option<CacheHints<'static>> {
        let (ttl, private) = match self.legacy_ttl {
            Some(ttl) => (ttl, false),
            None => {
                let ttl_ms = spans.value(text, Hint::TtlMs)?;
                let ttl_ms = serde_json::from_str::<u64>(ttl_ms).ok()?;
                // An explicit `null` is no scope; any other non-string
                // makes the hints unreadable, and the result is not kept.
                let scope = match spans.value(text, Hint::CacheScope) {
                    Some(scope) => serde_json::from_str::<Option<String>>(scope).ok()?,
                    None => None,
                };
                (
                    Duration::from_millis(ttl_ms),
                    scope.as_deref() != Some("public"),
                )
            }
        };
        let identity = match (private || self.per_identity, &self.identity) {
            (false, _) => None,
            (true, Some(identity)) => Some(identity),
            // Private to a client the gateway cannot tell apart: not kept.
            (true, None) => return None,
        };
        self.cache.put(Store {
            upstream: &self.upstream,
            key: &self.key,
            item: self.item.clone(),
            identity,
            body: text,
            hints: spans,
            ttl,
            max_entries: self.max_entries,
        });
        match (self.legacy_ttl, era, &self.item) {
            (Some(ttl), Era::Modern, Item::Resource(_)) => Some(CacheHints {
                ttl_ms: ttl.as_millis() as u64,
                scope: scope_name(self.per_identity),
            }),
            _ => None,
        }
    }
}

/// `cacheScope` of a result kept for one identity, or for all.
fn scope_name(private: bool) -> &'static str {
    match private {
        true => "private",
        false => "public",
    }
}

/// The answer frame of a hit: what was kept, and for a 2026-07-28 client
/// the time it has left and its scope.
fn frame(method: &Method, hit: &Hit, id: &str, era: Era) -> String {
    match era {
        Era::Legacy => protocol::response_frame(id, &hit.body),
        Era::Modern => {
            let hinted = *method == Method::ResourcesRead || hit.hints.has(Hint::TtlMs);
            let cache = hinted.then(|| CacheHints {
                ttl_ms: hit.remaining.as_millis() as u64,
                scope: scope_name(hit.private),
            });
            rewrite::modern_frame(id, method, &hit.body, &hit.hints, cache)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_carry_the_time_left_and_their_scope_to_modern_clients() {
        let (body, hints) =
            crate::protocol::hints::learn(r#"{"contents":[],"ttlMs":30000,"cacheScope":"public"}"#);
        let hit = Hit {
            body: body.into(),
            hints,
            remaining: Duration::from_millis(1200),
            private: false,
        };
        let modern: serde_json::Value =
            serde_json::from_str(&frame(&Method::ResourcesRead, &hit, "7", Era::Modern)).unwrap();
        assert_eq!(modern["result"]["ttlMs"], 1200);
        assert_eq!(modern["result"]["cacheScope"], "public");
        assert_eq!(modern["result"]["resultType"], "complete");
        let legacy: serde_json::Value =
            serde_json::from_str(&frame(&Method::ResourcesRead, &hit, "7", Era::Legacy)).unwrap();
        assert_eq!(
            legacy["result"]["ttlMs"], 30000,
            "kept as the upstream sent it"
        );
    }
}
