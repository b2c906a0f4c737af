//! A call resolved to its upstream, ready to send: what `prepare_call`
//! hands to `forward` (and `cached` and `tasks` read).

use std::sync::Arc;

use crate::protocol::Method;
use crate::protocol::Params;
use crate::upstream::UpstreamHandle;

/// Where a call goes and what changes in its params: all of a [`Call`]
/// but the params, which the router reads while it resolves.
pub(super) struct Resolved {
    pub method: Method,
    pub handle: UpstreamHandle,
    pub key: &'static str,
    pub value: Arc<str>,
    pub item: String,
    pub target: Option<Arc<str>>,
    pub repeatable: bool,
}

impl Resolved {
    /// The call, with the params it was resolved from.
    pub(super) fn with(self, params: Params<'_>) -> Call<'_> {
        Call {
            method: self.method,
            handle: self.handle,
            params,
            key: self.key,
            value: self.value,
            item: self.item,
            target: self.target,
            repeatable: self.repeatable,
        }
    }
}

/// A call resolved to its upstream, ready to send.
pub(super) struct Call<'p> {
    pub method: Method,
    pub handle: UpstreamHandle,
    pub params: Params<'p>,
    /// The params member that changes (`name`, `uri` or `ref`) and its new JSON.
    pub key: &'static str,
    pub value: Arc<str>,
    /// What the client asked for (its name, URI or reference), for the audit log.
    pub item: String,
    /// The tool or prompt name, or the URI, as the upstream knows it.
    pub target: Option<Arc<str>>,
    /// Safe to send twice (see `retry`).
    pub repeatable: bool,
}
