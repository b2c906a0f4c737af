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
}
