//! What upstreams report to the rest of the gateway, through one narrow
//! trait: the notify hub implements it, so nothing in `upstream` depends on
//! who listens.
//!
//! Calls come from an upstream's reader task (resource updates, log
//! messages) and its supervisor (list changes); an implementation must not
//! block or wait on a client.

use serde_json::value::RawValue;

use crate::catalog::ListKind;

/// Receives what upstreams announce.
pub(crate) trait UpstreamEvents: Send + Sync {
    /// `upstream`'s resource `original_uri` (as the upstream knows it) changed.
    fn resource_updated(&self, upstream: &str, original_uri: &str);
    /// A `notifications/message` from `upstream`, its params as sent.
    fn log_message(&self, upstream: &str, params: Option<&RawValue>);
    /// These merged lists changed: an upstream came, went or refreshed.
    fn lists_changed(&self, kinds: &[ListKind]);
}
