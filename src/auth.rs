//! Who a client is. Authentication happens at the HTTP edge; what it finds
//! travels with every request as an [`Identity`] in the router's
//! `RequestContext`, and a 2025-era session keeps the identity that
//! created it.

use std::sync::Arc;

/// An authenticated client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The client's name: an API key's client, or a JWT's configured claim.
    pub client: Arc<str>,
    /// Scopes and groups from its token, for policy rules.
    pub scopes: Vec<String>,
}
