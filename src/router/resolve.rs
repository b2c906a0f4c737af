//! Resolving a call to the one upstream that serves it: the name or URI
//! the client used, as the view it asked shows it, becomes the upstream's
//! own, after the view and the caller's grant were asked whether the
//! caller may see it (a hidden item is answered exactly like an unknown
//! one, before anything else is looked up).

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::call::{self, Resolved};
use super::rewrite::json_string;
use super::{RequestContext, RouteError, Router, apps, retry};
use crate::catalog::{Catalog, ListKind};
use crate::policy::Grant;
use crate::protocol::{Method, Params, ParamsError};

/// Who asks, in which view: what decides whether a name is visible.
#[derive(Clone, Copy)]
struct Asker<'a> {
    catalog: &'a Catalog,
    grant: Option<&'a Grant>,
    identity: Option<&'a crate::auth::Identity>,
}

/// Where a call goes: the upstream, the params member that changes and
/// its new JSON, and the name or URI as the upstream knows it.
struct Target {
    upstream: Arc<str>,
    key: &'static str,
    value: Arc<str>,
    original: Option<Arc<str>>,
}

impl Router {
    /// Resolves a call, bringing up the caller's own session or
    /// waiting for a starting upstream when the name is not (yet) known.
    pub(super) async fn resolve<'p>(
        &self,
        ctx: &RequestContext,
        method: Method,
        params: Params<'p>,
        catalog: &Catalog,
        grant: Option<&Grant>,
    ) -> Result<call::Call<'p>, RouteError> {
        let identity = ctx.identity.as_deref();
        let mut prepared = self.prepare_call(method.clone(), &params, catalog, grant, identity);
        if let Err(RouteError::UnknownTool(_) | RouteError::UnknownPrompt(_)) = &prepared
            && self.warm(ctx).await
        {
            let catalog = self.catalog_for(ctx);
            prepared = self.prepare_call(method.clone(), &params, &catalog, grant, identity);
        }
        if let Err(RouteError::UnknownTool(name) | RouteError::UnknownPrompt(name)) = &prepared
            && grant.is_none_or(|g| g.allows(name))
            && let Some(owner) = self.owner_not_up(catalog, name)
        {
            // Its items are missing because it is not up: say so,
            // after a short wait if it is starting.
            prepared = match owner.wait_started().await {
                true => {
                    let catalog = self.catalog_for(ctx);
                    self.prepare_call(method, &params, &catalog, grant, identity)
                }
                false => Err(RouteError::Upstream(owner.unavailable())),
            };
        }
        prepared.map(|resolved| resolved.with(params))
    }

    /// Resolves a call to its upstream and says what changes in its params.
    pub(super) fn prepare_call(
        &self,
        method: Method,
        params: &Params<'_>,
        catalog: &Catalog,
        grant: Option<&Grant>,
        identity: Option<&crate::auth::Identity>,
    ) -> Result<Resolved, RouteError> {
        let asker = Asker {
            catalog,
            grant,
            identity,
        };
        // What the client named, for the audit line.
        let mut item = ["name", "uri"]
            .iter()
            .find_map(|key| params.optional_string(key).ok().flatten());
        let mut tool_marked = false;
        let target = match method {
            Method::ToolsCall => {
                let (target, name) = self.tool_target(params, asker)?;
                // A call that creates a task is never repeatable.
                tool_marked = catalog.tool_repeatable(&name) && params.raw("task").is_none();
                item = Some(name);
                target
            }
            Method::PromptsGet => self.prompt_target(params, asker)?,
            Method::ResourcesRead => self.resource_target(params, asker)?,
            _ => self.completion_target(params, asker)?,
        };
        let handle = self.upstream(&target.upstream)?;
        Ok(Resolved {
            repeatable: retry::repeatable(&method, tool_marked),
            method,
            handle,
            key: target.key,
            value: target.value,
            item: item.map(Cow::into_owned).unwrap_or_default(),
            target: target.original,
        })
    }

    /// Whether `asker` may not see `named` (by its policy key); a hidden
    /// name is counted as a policy denial, an item outside the view's
    /// `items` is simply not there.
    fn hidden(&self, asker: Asker<'_>, kind: ListKind, named: &str) -> bool {
        let Asker {
            catalog,
            grant,
            identity,
        } = asker;
        // The whole view without a policy hides nothing: no lookups.
        if grant.is_none() && !catalog.selects_items() {
            return false;
        }
        let key = catalog.key_of(kind, named);
        if !catalog.admits(key) {
            return true;
        }
        let hidden = grant.is_some_and(|g| !g.allows_in(catalog, key));
        if let (true, Some(identity)) = (hidden, identity) {
            // Answered like an unknown name; counted as what it is.
            self.metrics.denied(&identity.client, "policy");
            tracing::info!(target: "mcpmux::audit", client = %identity.client, item = key, reason = "policy", "request refused");
        }
        hidden
    }

    /// `tools/call`: the tool, and the name it is known by in the view.
    fn tool_target<'p>(
        &self,
        params: &Params<'p>,
        asker: Asker<'_>,
    ) -> Result<(Target, Cow<'p, str>), RouteError> {
        let catalog = asker.catalog;
        let asked = params.string("name").map_err(RouteError::InvalidParams)?;
        // An app calls its server's tools by their own names.
        let name = match catalog.tool(&asked) {
            Some(_) => asked,
            None => Cow::Owned(apps::by_server_name(
                catalog,
                asked.into_owned(),
                asker.grant,
            )?),
        };
        if self.hidden(asker, ListKind::Tools, &name) {
            return Err(RouteError::UnknownTool(name.into_owned()));
        }
        let tool = catalog
            .tool(&name)
            .ok_or_else(|| RouteError::UnknownTool(name.to_string()))?;
        let target = Target {
            upstream: tool.upstream.clone(),
            key: "name",
            value: tool.original_json.clone(),
            original: Some(tool.original.clone()),
        };
        Ok((target, name))
    }

    /// `prompts/get`.
    fn prompt_target(&self, params: &Params<'_>, asker: Asker<'_>) -> Result<Target, RouteError> {
        let name = params.string("name").map_err(RouteError::InvalidParams)?;
        if self.hidden(asker, ListKind::Prompts, &name) {
            return Err(RouteError::UnknownPrompt(name.into_owned()));
        }
        let prompt = asker
            .catalog
            .prompt(&name)
            .ok_or_else(|| RouteError::UnknownPrompt(name.to_string()))?;
        Ok(Target {
            upstream: prompt.upstream.clone(),
            key: "name",
            value: prompt.original_json.clone(),
            original: Some(prompt.original.clone()),
        })
    }

    /// `resources/read`.
    fn resource_target(&self, params: &Params<'_>, asker: Asker<'_>) -> Result<Target, RouteError> {
        let uri = params.string("uri").map_err(RouteError::InvalidParams)?;
        if self.hidden(asker, ListKind::Resources, &uri) {
            return Err(RouteError::ResourceNotFound(uri.into_owned()));
        }
        let (upstream, original) = self
            .split_uri(asker.catalog, &uri)
            .ok_or_else(|| RouteError::ResourceNotFound(uri.to_string()))?;
        Ok(Target {
            upstream,
            key: "uri",
            value: json_string(&original).into(),
            original: Some(Arc::from(&*original)),
        })
    }

    /// `completion/complete`: its `ref` names a prompt or a resource.
    fn completion_target(
        &self,
        params: &Params<'_>,
        asker: Asker<'_>,
    ) -> Result<Target, RouteError> {
        let mut reference = params.object("ref").map_err(RouteError::InvalidParams)?;
        let upstream = match reference.get("type").and_then(Value::as_str) {
            Some("ref/prompt") => self.completed_prompt(&mut reference, asker)?,
            Some("ref/resource") => self.completed_resource(&mut reference, asker)?,
            other => return Err(ParamsError::RefType(other.map(str::to_owned)).into()),
        };
        Ok(Target {
            upstream,
            key: "ref",
            value: Value::Object(reference).to_string().into(),
            original: None,
        })
    }

    /// A completion's prompt reference, renamed for its upstream.
    fn completed_prompt(
        &self,
        reference: &mut Map<String, Value>,
        asker: Asker<'_>,
    ) -> Result<Arc<str>, RouteError> {
        let name = reference
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if self.hidden(asker, ListKind::Prompts, &name) {
            return Err(RouteError::UnknownPrompt(name));
        }
        let target = asker
            .catalog
            .prompt(&name)
            .ok_or(RouteError::UnknownPrompt(name))?;
        reference.insert("name".into(), Value::from(&*target.original));
        Ok(target.upstream.clone())
    }

    /// A completion's resource reference, its URI the upstream's own.
    fn completed_resource(
        &self,
        reference: &mut Map<String, Value>,
        asker: Asker<'_>,
    ) -> Result<Arc<str>, RouteError> {
        let uri = reference
            .get("uri")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if self.hidden(asker, ListKind::Resources, &uri) {
            return Err(RouteError::ResourceNotFound(uri));
        }
        let (upstream, original) = self
            .split_uri(asker.catalog, &uri)
            .ok_or_else(|| RouteError::ResourceNotFound(uri.clone()))?;
        reference.insert("uri".into(), Value::from(original.into_owned()));
        Ok(upstream)
    }
}
