//! Tasks through the gateway: the `io.modelcontextprotocol/tasks`
//! extension of 2026-07-28 and the experimental tasks of 2025-11-25.
//!
//! A `tools/call` goes to its upstream as any call; when its answer
//! creates a task, [`adopt_reply`] swaps the upstream's task id for a
//! gateway id kept in the hub's [`crate::notify::tasks::TaskTable`] and
//! bound to the caller (the session, or a stateless client's identity).
//! The id is the upstream's name and a sealed token of the route and the
//! caller ([`crate::seal`], the `request_state.key`), so a replica that
//! never saw the task (another replica made it, or this one forgot it)
//! opens the id, checks the caller, and takes the task in: any replica
//! serves a 2026-07-28 client's tasks, and a session's with a session
//! store. `tasks/get`, `tasks/update`, `tasks/result` and `tasks/cancel`
//! resolve that id for the same caller only (any other id gets the error
//! of a nonexistent one) and are forwarded with the upstream's id; the
//! answer comes back with the gateway's. `tasks/list` asks the upstreams
//! the caller has tasks on (as this replica knows them) and keeps the
//! caller's. Runs in the request's task; a streamed reply is rewritten by
//! one small task on the tracker.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::call::Call;
use super::rewrite::json_string;
use super::{Frame, Reply, RequestContext, RouteError, Router};
use crate::notify::tasks::{Owner, Route};
use crate::protocol::Params;
use crate::protocol::{self, Era, Method, RpcError, code};
use crate::seal::Sealer;
use crate::upstream::UpstreamSet;

/// The 2026-07-28 tasks extension's id.
pub(crate) const EXTENSION: &str = protocol::meta::TASKS_EXTENSION;

/// The `_meta` key a 2025-11-25 result names its task with.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// Upstream pages of `tasks/list` walked per upstream.
const MAX_LIST_PAGES: usize = 32;

/// Frames buffered while a streamed reply is rewritten.
const STREAM_CAPACITY: usize = 64;

/// Why a task request was refused before reaching an upstream.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum TaskError {
    /// Unknown, expired, or another client's: one answer for all three.
    #[error("unknown task: {0}")]
    Unknown(String),
    #[error("{0} needs the client extension {EXTENSION}")]
    MissingExtension(&'static str),
    #[error("method not found: {0}")]
    MethodNotFound(String),
    #[error(transparent)]
    Route(#[from] RouteError),
}

impl TaskError {
    fn to_frame(&self, id: &str, era: Era) -> Frame {
        let message = self.to_string();
        let error = match self {
            Self::Unknown(task) => {
                RpcError::new(code::INVALID_PARAMS, message).with_data(json!({ "taskId": task }))
            }
            Self::MissingExtension(_) => RpcError::new(code::MISSING_CLIENT_CAPABILITY, message)
                .with_data(json!({ "requiredCapabilities": { "extensions": { EXTENSION: {} } } })),
            Self::MethodNotFound(_) => RpcError::new(code::METHOD_NOT_FOUND, message),
            Self::Route(e) => return e.to_frame(id, era),
        };
        Frame::error(protocol::error_frame(Some(id), &error), error.code, None)
    }
}

/// The sealing purpose of task ids.
const TASK_PURPOSE: &str = "task";

/// Who a request's tasks belong to: its session, or (stateless) its
/// authenticated client; every anonymous stateless client is one owner.
pub(super) struct Caller {
    /// As this replica's table knows it.
    owner: Owner,
    /// As every replica names it, sealed into the ids of its tasks:
    /// `session:{id}`, `client:{name}` or `anonymous`. None for an
    /// in-process session, whose tasks no other process may take.
    portable: Option<String>,
}

impl Caller {
    pub(super) fn of(ctx: &RequestContext) -> Self {
        match (&ctx.subscriber, &ctx.identity) {
            (Some(session), _) => Self {
                owner: Owner::Session(session.id),
                portable: ctx.session_id.as_ref().map(|id| format!("session:{id}")),
            },
            (None, identity) => Self::stateless(identity.as_deref()),
        }
    }

    fn stateless(identity: Option<&crate::auth::Identity>) -> Self {
        match identity {
            Some(identity) => Self {
                owner: Owner::Client(identity.client.clone()),
                portable: Some(format!("client:{}", identity.client)),
            },
            None => Self {
                owner: Owner::Anonymous,
                portable: Some("anonymous".to_owned()),
            },
        }
    }
}

/// What a task id seals: where the task lives and whose it is.
#[derive(Serialize, Deserialize)]
struct TaskToken {
    #[serde(rename = "u")]
    upstream: String,
    #[serde(rename = "t")]
    upstream_id: String,
    #[serde(rename = "m")]
    modern: bool,
    #[serde(rename = "o")]
    owner: Option<String>,
}

/// A new gateway id for the task at `route` made by `caller`:
/// `{upstream}.{sealed token}` (upstream names have no dots).
fn mint(sealer: &Sealer, route: &Route, caller: &Caller) -> Arc<str> {
    let token = TaskToken {
        upstream: route.upstream.to_string(),
        upstream_id: route.upstream_id.to_string(),
        modern: route.era == Era::Modern,
        owner: caller.portable.clone(),
    };
    let payload = serde_json::to_vec(&token).expect("a task token serializes");
    format!("{}.{}", route.upstream, sealer.seal(TASK_PURPOSE, &payload)).into()
}

/// Where task `id` leads if this gateway's key sealed it for `caller`.
fn open(sealer: &Sealer, id: &str, caller: &Caller) -> Option<Route> {
    let portable = caller.portable.as_deref()?;
    let (upstream, sealed) = id.split_once('.')?;
    let token: TaskToken = serde_json::from_slice(&sealer.open(TASK_PURPOSE, sealed).ok()?).ok()?;
    (token.upstream == upstream && token.owner.as_deref() == Some(portable)).then(|| Route {
        upstream: token.upstream.into(),
        upstream_id: token.upstream_id.into(),
        era: if token.modern {
            Era::Modern
        } else {
            Era::Legacy
        },
    })
}

/// Whether a `tools/call` may create a task: a 2025-era call with a
/// `task` member, or a modern one whose client declared the extension.
/// Others are left alone (no parse of their answer).
pub(super) fn may_create(ctx: &RequestContext, params: &Params<'_>) -> bool {
    match ctx.era {
        Era::Legacy => params.raw("task").is_some(),
        Era::Modern => params
            .meta(protocol::meta::CLIENT_CAPABILITIES)
            .and_then(|c| c.get("extensions"))
            .and_then(|e| e.get(EXTENSION))
            .is_some_and(|v| !v.is_null()),
    }
}

/// Whether the upstreams offer tasks in `era`: the extension (modern
/// upstreams) or the `tasks` capability (legacy ones).
pub(super) fn offered(upstreams: &UpstreamSet, era: Era) -> bool {
    upstreams.all().iter().any(|handle| {
        handle.hello().is_some_and(|hello| match era {
            Era::Modern => {
                hello.modern
                    && hello
                        .capabilities
                        .get("extensions")
                        .and_then(|e| e.get(EXTENSION))
                        .is_some_and(|v| !v.is_null())
            }
            Era::Legacy => !hello.modern && hello.has("tasks"),
        })
    })
}

/// Adds the tasks capability of `era` to the gateway's capabilities when
/// an upstream offers it. The gateway relays `tasks/list` and
/// `tasks/cancel` itself, and tasks only for `tools/call`.
pub(super) fn declare(capabilities: &mut Value, upstreams: &UpstreamSet, era: Era) {
    if !offered(upstreams, era) {
        return;
    }
    match era {
        Era::Modern => super::apps::declare_extension(capabilities, EXTENSION, json!({})),
        Era::Legacy => {
            capabilities["tasks"] =
                json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } });
        }
    }
}

/// Rewrites the answer to a `tools/call` that created a task: the
/// upstream's task id becomes a gateway id bound to `owner`.
pub(super) fn adopt_reply(
    reply: Reply,
    hub: Arc<crate::notify::NotifyHub>,
    sealer: Arc<Sealer>,
    upstream: Arc<str>,
    caller: Caller,
    era: Era,
    tracker: &tokio_util::task::TaskTracker,
) -> Reply {
    map_result(reply, tracker, move |result| {
        let task = match era {
            Era::Modern => (result.get("resultType").and_then(Value::as_str) == Some("task"))
                .then_some(&mut *result),
            Era::Legacy => result.get_mut("task").filter(|t| t.is_object()),
        };
        let Some(task) = task else { return };
        let Some(upstream_id) = task.get("taskId").and_then(Value::as_str) else {
            return;
        };
        let route = Route {
            upstream: upstream.clone(),
            upstream_id: upstream_id.into(),
            era,
        };
        let id = hub.tasks().adopt(route, caller.owner.clone(), |route| {
            mint(&sealer, route, &caller)
        });
        task["taskId"] = Value::from(&*id);
    })
}

/// Applies `rewrite` to the `result` of the response frame in `reply`;
/// notifications and errors pass unchanged. A streamed reply is mapped by
/// a task on `tracker` that stops (dropping the upstream stream, as the
/// client did) when the client goes.
fn map_result(
    reply: Reply,
    tracker: &tokio_util::task::TaskTracker,
    rewrite: impl Fn(&mut Value) + Send + 'static,
) -> Reply {
    let map = move |frame: String| -> String {
        let Ok(mut message) = serde_json::from_str::<Map<String, Value>>(&frame) else {
            return frame;
        };
        if message.contains_key("method") {
            return frame;
        }
        match message.get_mut("result") {
            Some(result) => rewrite(result),
            None => return frame,
        }
        Value::Object(message).to_string()
    };
    match reply {
        Reply::Ready(frame) => Reply::Ready(frame.map_text(map)),
        Reply::Page(page) => Reply::Ready(Frame::result(map(page.into_text()))),
        Reply::Streaming(mut frames) => {
            let (out, mapped) = mpsc::channel(STREAM_CAPACITY);
            tracker.spawn(async move {
                loop {
                    tokio::select! {
                        () = out.closed() => return,
                        frame = frames.recv() => match frame {
                            Some(frame) => if out.send(map(frame)).await.is_err() { return },
                            None => return,
                        },
                    }
                }
            });
            Reply::Streaming(mapped)
        }
    }
}

/// Puts the gateway id back where an upstream result names its task: the
/// task itself (`taskId`), and the 2025-11-25 related-task `_meta` of a
/// result (top level, or inlined under `result`).
fn restore_id(result: &mut Value, id: &str) {
    if result.get("taskId").is_some_and(Value::is_string) {
        result["taskId"] = Value::from(id);
    }
    for pointer in ["/_meta", "/result/_meta"] {
        if let Some(related) = result
            .pointer_mut(pointer)
            .and_then(|m| m.get_mut(RELATED_TASK))
            .and_then(Value::as_object_mut)
        {
            related.insert("taskId".into(), Value::from(id));
        }
    }
}

/// Whether a modern request's client declared the tasks extension.
fn declares_extension(params: Option<crate::protocol::Raw<'_>>) -> bool {
    params
        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
        .and_then(|p| {
            p.pointer("/_meta/io.modelcontextprotocol~1clientCapabilities/extensions")
                .and_then(|e| e.get(EXTENSION))
                .map(|v| !v.is_null())
        })
        .unwrap_or(false)
}

/// What a listen stream's `notifications.taskIds` came to.
pub(crate) struct WatchedTasks {
    /// The ids the stream will hear of (the caller's own), for the ack.
    pub(crate) honoured: Vec<Value>,
    /// Modern upstreams whose own listen must now ask for more tasks.
    pub(crate) upstreams: Vec<crate::upstream::UpstreamHandle>,
}

impl Router {
    /// A 2026-07-28 listen stream's `taskIds`: each of the caller's own
    /// tasks is watched by `subscriber`; other ids are left out of the
    /// acknowledgment as if they did not exist. `Ok(None)`: none asked.
    /// `Err`: the error frame for a client that did not declare the
    /// extension (-32021).
    pub(crate) fn watch_tasks(
        &self,
        subscriber: crate::upstream::SubscriberId,
        identity: Option<&crate::auth::Identity>,
        id: &RawValue,
        params: Option<crate::protocol::Raw<'_>>,
    ) -> Result<Option<WatchedTasks>, String> {
        let requested: Vec<String> = params
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .and_then(|p| p.pointer("/notifications/taskIds").cloned())
            .and_then(|ids| serde_json::from_value(ids).ok())
            .unwrap_or_default();
        if requested.is_empty() {
            return Ok(None);
        }
        if !declares_extension(params) {
            return Err(TaskError::MissingExtension("task notifications")
                .to_frame(id.get(), Era::Modern)
                .into_text());
        }
        let caller = Caller::stateless(identity);
        let mut watched = WatchedTasks {
            honoured: Vec::new(),
            upstreams: Vec::new(),
        };
        for task in requested {
            let table = self.hub.tasks();
            let route = table.watch(&task, &caller.owner, subscriber).or_else(|| {
                self.recall(&task, &caller)?;
                table.watch(&task, &caller.owner, subscriber)
            });
            let Some(route) = route else {
                continue;
            };
            watched.honoured.push(Value::from(task));
            if let Ok(handle) = self.upstream(&route.upstream)
                && !watched.upstreams.iter().any(|h| h.name() == handle.name())
            {
                watched.upstreams.push(handle);
            }
        }
        Ok(Some(watched))
    }

    /// A task this replica does not hold, whose id it sealed (or a replica
    /// with the same key did) for `caller`: taken into the table.
    fn recall(&self, task: &str, caller: &Caller) -> Option<Route> {
        let route = open(&self.sealer, task, caller)?;
        tracing::debug!(task, upstream = %route.upstream, "task taken in from its sealed id");
        Some(
            self.hub
                .tasks()
                .recall(task.into(), route, caller.owner.clone()),
        )
    }

    /// `tasks/get`, `tasks/update`, `tasks/result`, `tasks/cancel` and
    /// `tasks/list` of either era.
    pub(super) async fn task_request(
        &self,
        ctx: &RequestContext,
        id: &RawValue,
        method: Method,
        params: Option<crate::protocol::Raw<'_>>,
    ) -> Reply {
        match self.task_request_inner(ctx, id, method, params).await {
            Ok(reply) => reply,
            Err(e) => Reply::Ready(e.to_frame(id.get(), ctx.era)),
        }
    }

    async fn task_request_inner(
        &self,
        ctx: &RequestContext,
        id: &RawValue,
        method: Method,
        params: Option<crate::protocol::Raw<'_>>,
    ) -> Result<Reply, TaskError> {
        // `tasks/update` is the extension's; `tasks/result` and
        // `tasks/list` are 2025-11-25's (the extension removed them).
        let era_has_it = match method {
            Method::TasksUpdate => ctx.era == Era::Modern,
            Method::TasksResult | Method::TasksList => ctx.era == Era::Legacy,
            _ => true,
        };
        if !era_has_it {
            return Err(TaskError::MethodNotFound(method.name().to_owned()));
        }
        if ctx.era == Era::Modern && !declares_extension(params) {
            return Err(TaskError::MissingExtension(match method {
                Method::TasksGet => "tasks/get",
                Method::TasksUpdate => "tasks/update",
                _ => "tasks/cancel",
            }));
        }
        let caller = Caller::of(ctx);
        if method == Method::TasksList {
            return Ok(Reply::Ready(Frame::result(
                self.list_tasks(id, &caller.owner).await,
            )));
        }
        let parsed = Params::parse(params).map_err(RouteError::InvalidParams)?;
        let task = parsed
            .string("taskId")
            .map_err(RouteError::InvalidParams)?
            .into_owned();
        let table = self.hub.tasks();
        let route = table
            .resolve(&task, &caller.owner)
            .or_else(|| self.recall(&task, &caller))
            .filter(|route| route.era == ctx.era)
            .ok_or_else(|| TaskError::Unknown(task.clone()))?;
        let handle = self.upstream(&route.upstream)?;
        let call = Call {
            repeatable: super::retry::repeatable(&method, false),
            method,
            handle,
            params: parsed,
            key: "taskId",
            value: json_string(&route.upstream_id).into(),
            item: task.clone(),
            target: Some(Arc::from(&*route.upstream_id)),
        };
        let reply = self.forward(call, ctx, id).await;
        let gateway_id = task;
        Ok(map_result(reply, &self.tasks, move |result| {
            restore_id(result, &gateway_id)
        }))
    }

    /// 2025-11-25 `tasks/list`: the caller's tasks, from every upstream it
    /// has tasks on (`tasks/list` where the upstream offers it, else
    /// `tasks/get` of each), with gateway ids; one page.
    async fn list_tasks(&self, id: &RawValue, owner: &Owner) -> String {
        let table = self.hub.tasks();
        let mut listed: Vec<Value> = Vec::new();
        for upstream in table.upstreams_of(owner, Era::Legacy) {
            let Ok(handle) = self.upstream(&upstream) else {
                continue;
            };
            let Ok(conn) = handle.connection() else {
                continue;
            };
            let lists = handle.hello().is_some_and(|h| {
                h.capabilities
                    .get("tasks")
                    .and_then(|t| t.get("list"))
                    .is_some_and(|l| !l.is_null())
            });
            let owned = table.owned_on(owner, &upstream);
            let mut found: Vec<Value> = Vec::new();
            if lists {
                let mut cursor: Option<String> = None;
                for _ in 0..MAX_LIST_PAGES {
                    let params = match &cursor {
                        Some(c) => json!({ "cursor": c }).to_string(),
                        None => "{}".to_owned(),
                    };
                    let page = conn
                        .request(Method::TasksList, Some(&params), handle.timeout())
                        .await;
                    let Some(page) = page
                        .ok()
                        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                    else {
                        break;
                    };
                    if let Some(tasks) = page.get("tasks").and_then(Value::as_array) {
                        found.extend(tasks.iter().cloned());
                    }
                    cursor = page
                        .get("nextCursor")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    if cursor.is_none() {
                        break;
                    }
                }
            } else {
                for (_, upstream_id) in &owned {
                    let params = json!({ "taskId": &**upstream_id }).to_string();
                    if let Ok(task) = conn
                        .request(Method::TasksGet, Some(&params), handle.timeout())
                        .await
                        && let Ok(task) = serde_json::from_str::<Value>(task.get())
                    {
                        found.push(task);
                    }
                }
            }
            for mut task in found {
                let mine = task
                    .get("taskId")
                    .and_then(Value::as_str)
                    .and_then(|t| owned.iter().find(|(_, upstream_id)| &**upstream_id == t))
                    .map(|(gateway_id, _)| gateway_id.clone());
                if let Some(gateway_id) = mine {
                    task["taskId"] = Value::from(&*gateway_id);
                    listed.push(task);
                }
            }
        }
        protocol::response_frame(id.get(), &json!({ "tasks": listed }).to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_restored_where_results_name_their_task() {
        let mut get = json!({ "taskId": "up-1", "status": "completed",
            "result": { "content": [], "_meta": { RELATED_TASK: { "taskId": "up-1" } } } });
        restore_id(&mut get, "gw");
        assert_eq!(get["taskId"], "gw");
        assert_eq!(get["result"]["_meta"][RELATED_TASK]["taskId"], "gw");
        let mut payload = json!({ "content": [], "_meta": { RELATED_TASK: { "taskId": "up-1" } } });
        restore_id(&mut payload, "gw");
        assert_eq!(payload["_meta"][RELATED_TASK]["taskId"], "gw");
        assert!(payload.get("taskId").is_none());
    }

    #[test]
    fn a_refusal_names_what_is_missing_and_unknown_is_invalid_params() {
        let frame = TaskError::MissingExtension("tasks/get").to_frame("1", Era::Modern);
        assert_eq!(frame.error_code(), Some(code::MISSING_CLIENT_CAPABILITY));
        let value: Value = serde_json::from_str(&frame.into_text()).unwrap();
        assert_eq!(value["error"]["code"], code::MISSING_CLIENT_CAPABILITY);
        assert!(
            value["error"]["data"]["requiredCapabilities"]["extensions"][EXTENSION].is_object()
        );
        let frame = TaskError::Unknown("x".into()).to_frame("1", Era::Legacy);
        let value: Value = serde_json::from_str(&frame.into_text()).unwrap();
        assert_eq!(value["error"]["code"], code::INVALID_PARAMS);
    }

    #[test]
    fn a_sealed_id_opens_for_its_caller_with_the_same_key_only() {
        let sealer = Sealer::new(&[9; 32]);
        let alice = Caller::stateless(Some(&crate::auth::Identity::new("alice", Vec::new())));
        let route = Route {
            upstream: "notes".into(),
            upstream_id: "t-1".into(),
            era: Era::Legacy,
        };
        let id = mint(&sealer, &route, &alice);
        assert!(id.starts_with("notes.mcpmux.v1."), "{id}");
        assert!(!id.contains("t-1"), "the upstream's id is not readable");
        let opened = open(&sealer, &id, &alice).expect("opens for its creator");
        assert_eq!(
            (&*opened.upstream, &*opened.upstream_id, opened.era),
            ("notes", "t-1", Era::Legacy)
        );
        assert!(open(&sealer, &id, &Caller::stateless(None)).is_none());
        assert!(open(&Sealer::new(&[8; 32]), &id, &alice).is_none());
        let renamed = id.replacen("notes.", "other.", 1);
        assert!(
            open(&sealer, &renamed, &alice).is_none(),
            "bound to its upstream"
        );
        // A session's tasks: by session id, and never an in-process session's.
        let session = |id: Option<&str>| Caller {
            owner: Owner::Session(1),
            portable: id.map(|id| format!("session:{id}")),
        };
        let id = mint(&sealer, &route, &session(Some("r1-abc")));
        assert!(open(&sealer, &id, &session(Some("r1-abc"))).is_some());
        assert!(open(&sealer, &id, &session(Some("r2-abc"))).is_none());
        let local = mint(&sealer, &route, &session(None));
        assert!(open(&sealer, &local, &session(None)).is_none());
    }
}
