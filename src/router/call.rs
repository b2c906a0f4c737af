//! A call resolved to its upstream, ready to send: what `prepare_call`
//! hands to `forward` (and `cached` and `tasks` read).

use std::sync::Arc;

use super::rewrite::Params;
use crate::protocol::Method;
use crate::upstream::UpstreamHandle;

/// A call resolved to its upstream, ready to send.
pub(super) struct Call<'p> {
    pub method: Method,
    pub handle: UpstreamHandle,
    pub params: Params<'p>,
    /// The params member that changes (`name`, `uri` or `ref`) and its new JSON.
    pub key: &'static str,
    pub value: String,
    /// What the client asked for (its name, URI or reference), for the audit log.
    pub item: String,
    /// The tool or prompt name, or the URI, as the upstream knows it.
    pub target: Option<Arc<str>>,
    /// Safe to send twice (see `retry`).
    pub repeatable: bool,
}
