//! The hasher of the gateway's own maps on the request path (a request's
//! params, its session's calls in flight, the catalog's names, the metrics'
//! series): foldhash's quality variant, seeded at random per process and
//! per map as std's SipHash is, at a fraction of its cost on the short keys
//! these maps hold.

/// Builds the hasher of each map.
pub(crate) type RandomState = foldhash::quality::RandomState;

/// A std `HashMap` with [`RandomState`]; made with `default()`.
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, RandomState>;

/// A std `HashSet` with [`RandomState`]; made with `default()`.
pub(crate) type HashSet<K> = std::collections::HashSet<K, RandomState>;
