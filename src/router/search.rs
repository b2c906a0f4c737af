//! The router's side of progressive tool listing: a progressive view's two
//! tools. `search_tools` is answered here, from the view's index, showing
//! only what the caller may see; `call_tool` becomes a `tools/call` of the
//! tool it names, which then takes the same path as a direct call (policy,
//! limits, audit, cache, tracing).

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::rewrite;
use super::{Frame, RequestContext, RouteError, Router};
use crate::catalog::Catalog;
use crate::catalog::search::{CALL_TOOL, SEARCH_TOOL};
use crate::metrics::Outcome;
use crate::protocol::{self, Era};
use crate::protocol::{Params, ParamsError, Request};

/// What a `tools/call` of a progressive view asks of the gateway itself.
pub(super) enum GatewayCall {
    /// A search, answered with this frame.
    Answered(Frame),
    /// A call of the found tool: these are its `tools/call` params.
    Call(Box<RawValue>),
}

impl Router {
    /// Handles a call of a progressive view's own tools; none for any
    /// other call (or view).
    pub(super) fn gateway_call(
        &self,
        ctx: &RequestContext,
        catalog: &Catalog,
        request: &mut Request<'_>,
    ) -> Option<GatewayCall> {
        let searchable = catalog.searchable()?;
        let id = request.id;
        let parsed = request.params().ok()?;
        let name = parsed.optional_string("name").ok().flatten()?;
        let started = std::time::Instant::now();
        let answer = match &*name {
            SEARCH_TOOL => self.search(ctx, catalog, searchable, parsed),
            CALL_TOOL => {
                return Some(match call_params(parsed) {
                    Ok(params) => GatewayCall::Call(params),
                    Err(e) => GatewayCall::Answered(e.to_frame(id.get(), ctx.era)),
                });
            }
            _ => return None,
        };
        let outcome = match &answer {
            Ok(_) => Outcome::Ok,
            Err(e) => e.outcome(),
        };
        self.metrics.observe(
            protocol::method::TOOLS_CALL,
            "mcpmux",
            outcome,
            started.elapsed(),
        );
        super::forward::audit(
            ctx.identity.as_ref().map(|i| &*i.client),
            protocol::method::TOOLS_CALL,
            "mcpmux",
            SEARCH_TOOL,
            outcome,
            started.elapsed(),
            id.get(),
        );
        Some(GatewayCall::Answered(match answer {
            Ok(result) => Frame::result(match ctx.era {
                Era::Legacy => protocol::response_frame(id.get(), &result),
                // The gateway wrote it: it has no hint member of its own.
                Era::Modern => rewrite::modern_frame(
                    id.get(),
                    &crate::protocol::Method::ToolsCall,
                    &result,
                    &crate::protocol::hints::HintSpans::none(),
                    None,
                ),
            }),
            Err(e) => e.to_frame(id.get(), ctx.era),
        }))
    }

    /// `search_tools`: the best matches the caller may see, with their full
    /// definitions, as text (for models) and as structured content.
    fn search(
        &self,
        ctx: &RequestContext,
        catalog: &Catalog,
        searchable: &crate::catalog::search::Searchable,
        params: &Params,
    ) -> Result<String, RouteError> {
        let arguments = params
            .object("arguments")
            .map_err(RouteError::InvalidParams)?;
        let Some(query) = arguments.get("query").and_then(Value::as_str) else {
            return Err(RouteError::InvalidParams(ParamsError::Invalid(
                "search_tools needs arguments.query, a string".into(),
            )));
        };
        let limit = match arguments.get("limit") {
            None | Some(Value::Null) => searchable.results(),
            Some(v) => match v.as_u64() {
                Some(n) if n >= 1 => (n as usize).min(crate::config::MAX_SEARCH_RESULTS),
                _ => {
                    return Err(RouteError::InvalidParams(ParamsError::Invalid(
                        "search_tools: arguments.limit must be a positive integer".into(),
                    )));
                }
            },
        };
        let grant = self.grant(ctx);
        let found = searchable.search(query, limit, |key| {
            catalog.admits(key) && grant.as_ref().is_none_or(|g| g.allows_in(catalog, key))
        });
        let tools: Vec<&RawValue> = found.iter().map(|f| f.item).collect();
        let text = match tools.is_empty() {
            true => format!("No tool matches {query:?}; try other words."),
            false => serde_json::to_string(&tools).unwrap_or_default(),
        };
        Ok(json!({
            "content": [{ "type": "text", "text": text }],
            "structuredContent": { "tools": tools },
        })
        .to_string())
    }
}

/// The `tools/call` params `call_tool` stands for: its `name` and
/// `arguments`, with the outer call's `_meta` (its progress token) and
/// `task`.
fn call_params(params: &Params) -> Result<Box<RawValue>, RouteError> {
    let arguments = params
        .object("arguments")
        .map_err(RouteError::InvalidParams)?;
    let invalid = |why: &str| RouteError::InvalidParams(ParamsError::Invalid(why.into()));
    let name = arguments
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            invalid("call_tool needs arguments.name, the name of a tool search_tools found")
        })?;
    if name == CALL_TOOL || name == SEARCH_TOOL {
        return Err(invalid(
            "call_tool calls a found tool, not the gateway's own",
        ));
    }
    let mut inner = Map::new();
    inner.insert("name".into(), Value::from(name));
    match arguments.get("arguments") {
        None | Some(Value::Null) => {}
        Some(Value::Object(args)) => {
            inner.insert("arguments".into(), Value::Object(args.clone()));
        }
        Some(_) => return Err(invalid("call_tool: arguments.arguments must be an object")),
    }
    if let Some(meta) = params.meta_object() {
        inner.insert("_meta".into(), Value::Object(meta.clone()));
    }
    if let Some(task) = params.raw("task") {
        let task: Value = serde_json::from_str(task.get()).unwrap_or(Value::Null);
        inner.insert("task".into(), task);
    }
    serde_json::value::to_raw_value(&inner)
        .map_err(|_| invalid("call_tool: the arguments cannot be sent on"))
}
