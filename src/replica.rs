//! This process's replica id: 8 hex digits made at random when first
//! asked for, the prefix of every session id it issues (`{replica}-{random}`),
//! so a load balancer or a person reading logs can tell which replica a
//! session lives on. Sessions live in one process's memory: another
//! replica answers 404 to an id it does not hold, and the client
//! initializes again, as the spec intends.

use std::sync::OnceLock;

static ID: OnceLock<String> = OnceLock::new();

/// The replica id, the same for the life of the process.
pub(crate) fn id() -> &'static str {
    ID.get_or_init(|| format!("{:08x}", rand::random::<u32>()))
}

/// The replica a session id names, when it has the `{replica}-` prefix.
pub(crate) fn of_session(session_id: &str) -> Option<&str> {
    let (replica, _) = session_id.split_once('-')?;
    (replica.len() == 8 && replica.bytes().all(|b| b.is_ascii_hexdigit())).then_some(replica)
}

/// The id of the `n`th request this replica asks a client (sampling,
/// elicitation, roots): `mcpmux-{replica}-{n}`, so a replica that gets the
/// client's answer can tell which replica waits for it.
pub(crate) fn ask_id(n: u64) -> String {
    format!("mcpmux-{}-{n}", id())
}

/// The replica an [`ask_id`] names.
pub(crate) fn of_ask(ask: &str) -> Option<&str> {
    of_session(ask.strip_prefix("mcpmux-")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_stable_and_prefixes_session_ids() {
        assert_eq!(id(), id());
        assert_eq!(id().len(), 8);
        let session = format!("{}-{:032x}", id(), 7u128);
        assert_eq!(of_session(&session), Some(id()));
        assert_eq!(of_session("0123456789abcdef"), None);
        assert_eq!(of_session("xyz-1"), None);
    }

    #[test]
    fn an_ask_id_names_its_replica() {
        assert_eq!(of_ask(&ask_id(12)), Some(id()));
        assert_eq!(of_ask("mcpmux-12"), None);
        assert_eq!(of_ask("0123abcd-12"), None);
    }
}
