//! The router's side of MCP Apps (`io.modelcontextprotocol/ui`): an app's
//! calls by its server's tool names, and the extension the gateway
//! declares to its clients.

use serde_json::{Value, json};

use super::RouteError;
use crate::policy::Grant;

/// Adds extension `name` with `settings` to `capabilities.extensions`.
pub(crate) fn declare_extension(capabilities: &mut Value, name: &str, settings: Value) {
    if !capabilities["extensions"].is_object() {
        capabilities["extensions"] = json!({});
    }
    capabilities["extensions"][name] = settings;
}

/// The exposed tool an app means by `name`, its server's own name for it:
/// the one such tool this client may see. Hidden ones do not count (they
/// answer like unknown ones); several visible ones are refused, naming them.
pub(super) fn by_server_name(
    catalog: &crate::catalog::Catalog,
    name: String,
    grant: Option<&Grant>,
) -> Result<String, RouteError> {
    let visible: Vec<&str> = catalog
        .apps()
        .tools_named(&name)
        .iter()
        .map(|t| &**t)
        .filter(|exposed| {
            grant.is_none_or(|g| g.allows(catalog.key_of(crate::catalog::ListKind::Tools, exposed)))
        })
        .collect();
    match visible.as_slice() {
        [] => Err(RouteError::UnknownTool(name)),
        [one] => Ok((*one).to_owned()),
        several => Err(RouteError::AmbiguousTool {
            name,
            candidates: several.iter().map(|s| (*s).to_owned()).collect(),
        }),
    }
}
