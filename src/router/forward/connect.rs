//! A call from a user who has not connected their account at an upstream
//! that acts as each user (`auth.mode: user`): how the user is sent to
//! sign in, the way MCP means it for each kind of client.
//!
//! - A 2025-era session whose client declared URL-mode elicitation is sent
//!   `elicitation/create` (`mode: "url"`) on the call's stream; once it
//!   accepts, the call waits (within its deadline) for the user to finish,
//!   is told `notifications/elicitation/complete`, and then goes on.
//! - A 2026-07-28 request gets an `input_required` result with the same
//!   elicitation; its retry goes on once the user has connected.
//! - Any other client gets error -32042 (URL elicitation required) whose
//!   `data.elicitations` carries the URL; calling again afterwards works.

use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::super::{Frame, Reply, RequestContext};
use super::{Call, Connected, Served};
use crate::credentials::FlowStart;
use crate::protocol::{self, Era, Method, RpcError, code};
use crate::protocol::{Params, Raw};
use crate::upstream::UpstreamError;
use crate::upstream::UpstreamEvents as _;

/// A call whose caller has not connected their account at its upstream:
/// asked over its session (see the module header) when it can be, the
/// call going on in a task once the user has connected; refused with
/// what to do otherwise.
#[allow(clippy::too_many_arguments)]
pub(super) async fn first(
    call: Call<'_>,
    ctx: &RequestContext,
    id: &RawValue,
    on: Served<'_>,
    cached: Option<super::super::cached::Plan>,
    upstream: String,
    start: FlowStart,
    deadline: Instant,
) -> Reply {
    let session = ctx
        .subscriber
        .as_ref()
        .filter(|_| ctx.era == Era::Legacy && ctx.can_stream)
        .map(|s| s.id);
    let params = serde_json::value::to_raw_value(&elicitation(&upstream, &start)).ok();
    let ask = session.and_then(|session| {
        on.hub
            .ask_client(session, &Method::Elicit, params.as_deref())
            .ok()
            .map(|ask| (session, ask))
    });
    let (Some((session, ask)), Some(caller)) = (ask, ctx.identity.clone()) else {
        return Reply::Ready(refusal(id.get(), ctx.era, &upstream, &start));
    };
    let (sink, frames) = mpsc::channel(super::STREAM_CAPACITY);
    let _ = sink.try_send(elicitation_request(&ask.id, &upstream, &start));
    // The call goes on in a task: it owns its params from here.
    let owned = RawValue::from_string(call.params.build_text(call.key, &call.value, None)).ok();
    let Call {
        method,
        handle,
        key,
        value,
        item,
        target,
        repeatable,
        ..
    } = call;
    let (ctx, id) = (ctx.clone(), id.to_owned());
    let (hub, metrics, tasks, parking) = (
        on.hub.clone(),
        on.metrics.clone(),
        on.tasks.clone(),
        on.parking.clone(),
    );
    let resume = async move {
        let connected =
            wait_for_user(&hub, session, ask, &handle, &upstream, &caller, deadline).await;
        let Some(Ok(params)) = owned
            .as_deref()
            .filter(|_| connected)
            .map(|raw| Params::parse(Some(Raw::from(raw))))
        else {
            let _ = sink.send(url_required(id.get(), &upstream, &start)).await;
            return;
        };
        let _ = sink.send(completed(&start)).await;
        let call = Call {
            method,
            handle,
            params,
            key,
            value,
            item,
            target,
            repeatable,
        };
        let on = Served {
            hub: &hub,
            metrics: &metrics,
            tasks: &tasks,
            parking: &parking,
        };
        let reply = send_connected(call, &ctx, &id, on, (session, &caller), cached, deadline).await;
        relay(reply, &sink).await;
    };
    on.tasks.spawn(tracing::Instrument::instrument(
        resume,
        tracing::debug_span!("waiting for the user to connect"),
    ));
    Reply::Streaming(frames)
}

/// Waits (until `deadline`) for the user to accept the elicitation and
/// finish connecting their account at `upstream`; true once they have.
async fn wait_for_user(
    hub: &crate::notify::NotifyHub,
    session: crate::upstream::SubscriberId,
    ask: crate::upstream::ClientAsk,
    handle: &crate::upstream::UpstreamHandle,
    upstream: &str,
    caller: &crate::auth::Identity,
    deadline: Instant,
) -> bool {
    let answered = tokio::time::timeout_at(deadline, ask.answer).await;
    let accepted = matches!(&answered, Ok(Ok(Ok(result))) if accepted(result));
    if answered.is_err() {
        hub.forget_ask(session, &ask.id);
    }
    match (accepted, handle.credentials()) {
        (true, Some(credentials)) => {
            credentials
                .connector()
                .wait_connected(upstream, &caller.client, deadline)
                .await
        }
        _ => false,
    }
}

/// Sends a call whose caller has just connected: admitted and connected
/// as the caller, then as any other call.
async fn send_connected(
    call: Call<'_>,
    ctx: &RequestContext,
    id: &RawValue,
    on: Served<'_>,
    (session, caller): (crate::upstream::SubscriberId, &crate::auth::Identity),
    cached: Option<super::super::cached::Plan>,
    deadline: Instant,
) -> Reply {
    let admitted = call
        .handle
        .protection()
        .admit(super::client_key(ctx), deadline)
        .await;
    let connected = match &admitted {
        Ok(_) => {
            call.handle
                .connection_for(Some(session), Some(caller), deadline)
                .await
        }
        Err(e) => Err(e.clone()),
    };
    match connected {
        Ok((conn, via)) => {
            let connected = Connected {
                conn,
                via,
                admission: admitted.ok(),
                cached,
            };
            super::send(call, ctx, id, on, connected).await
        }
        Err(e) => super::refused(&call, ctx, id, on.metrics, e, std::time::Instant::now()),
    }
}

/// Moves a reply's frames onto the call's stream until it ends or the
/// client is gone.
async fn relay(reply: Reply, sink: &mpsc::Sender<String>) {
    match reply {
        Reply::Streaming(mut more) => {
            while let Some(frame) = more.recv().await {
                if sink.send(frame).await.is_err() {
                    return;
                }
            }
        }
        Reply::Ready(frame) => {
            let _ = sink.send(frame.into_text()).await;
        }
        Reply::Page(page) => {
            let _ = sink.send(page.into_text()).await;
        }
    }
}

/// What a `requestState` of the gateway's own connect round starts with.
/// It carries nothing secret: a retry that has it simply goes on, and its
/// `inputResponses` (answers to the gateway) are not passed upstream.
const STATE_PREFIX: &str = "mcpmux.connect.";

/// Takes the gateway's own round out of a retry's params.
pub(super) fn strip_own_round(params: &mut Params<'_>) {
    let ours = params
        .raw("requestState")
        .and_then(|raw| serde_json::from_str::<&str>(raw.get()).ok())
        .is_some_and(|state| state.starts_with(STATE_PREFIX));
    if ours {
        params.take("requestState");
        params.take("inputResponses");
    }
}

/// The URL-mode elicitation that sends the user to `start.url`.
pub(super) fn elicitation(upstream: &str, start: &FlowStart) -> Value {
    json!({
        "mode": "url",
        "elicitationId": start.elicitation_id,
        "url": start.url.as_str(),
        "message": format!("Connect your {upstream} account: sign in on the page this opens, then come back here."),
    })
}

/// Error -32042 carrying the URL, for a client that cannot be asked.
pub(super) fn url_required(id: &str, upstream: &str, start: &FlowStart) -> String {
    let error = RpcError::new(
        code::URL_ELICITATION_REQUIRED,
        format!(
            "upstream '{upstream}' acts as each user, and you have not connected your account yet: open {} to connect it, then call again",
            start.url
        ),
    )
    .with_data(json!({
        "upstream": upstream,
        "elicitations": [elicitation(upstream, start)],
    }));
    protocol::error_frame(Some(id), &error)
}

/// The `input_required` result for a 2026-07-28 request.
pub(super) fn input_required(id: &str, upstream: &str, start: &FlowStart) -> String {
    let result = json!({
        "resultType": "input_required",
        "inputRequests": {
            start.elicitation_id.as_str(): {
                "method": "elicitation/create",
                "params": elicitation(upstream, start),
            }
        },
        "requestState": format!("{STATE_PREFIX}{upstream}"),
    });
    protocol::response_frame(id, &result.to_string())
}

/// The answer for a client that is not asked over its session: modern
/// requests get an input round, others the error.
pub(super) fn refusal(id: &str, era: Era, upstream: &str, start: &FlowStart) -> Frame {
    match era {
        Era::Modern => Frame::result(input_required(id, upstream, start)),
        Era::Legacy => Frame::error(
            url_required(id, upstream, start),
            code::URL_ELICITATION_REQUIRED,
            None,
        ),
    }
}

/// `elicitation/create` as a request to the client under the gateway's `ask_id`.
pub(super) fn elicitation_request(ask_id: &str, upstream: &str, start: &FlowStart) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": ask_id,
        "method": "elicitation/create",
        "params": elicitation(upstream, start),
    })
    .to_string()
}

/// `notifications/elicitation/complete` for the flow of `start`.
pub(super) fn completed(start: &FlowStart) -> String {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/elicitation/complete",
        "params": { "elicitationId": start.elicitation_id },
    })
    .to_string()
}

/// Whether a client's answer to the elicitation accepted it.
pub(super) fn accepted(answer: &serde_json::value::RawValue) -> bool {
    serde_json::from_str::<Value>(answer.get())
        .ok()
        .and_then(|v| v.get("action").and_then(Value::as_str).map(str::to_owned))
        .is_some_and(|action| action == "accept")
}

/// The result of the placeholder `connect` tool for a user who has connected.
pub(super) fn connected_result(upstream: &str) -> String {
    json!({
        "content": [{
            "type": "text",
            "text": format!("Your {upstream} account is connected; its tools are available now."),
        }],
        "isError": false,
    })
    .to_string()
}

impl super::Exchange {
    /// The caller's grant at an upstream that acts as each user ended (it
    /// was revoked, or its refresh refused): its session there closes and
    /// the answer sends the user to connect again.
    pub(super) async fn connect_again(&self) -> Option<Frame> {
        let credentials = self.handle.credentials()?;
        let client = self.client.as_ref()?;
        if !matches!(credentials.mode(), crate::config::AuthMode::User { .. }) {
            return None;
        }
        self.handle.close_identity(client);
        match crate::upstream::authorization_required(credentials, client).await {
            UpstreamError::AuthorizationRequired { upstream, start } => {
                Some(refusal(&self.client_id, self.era, &upstream, &start))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> FlowStart {
        FlowStart {
            url: reqwest::Url::parse("http://127.0.0.1:9/authorize?state=s").unwrap(),
            elicitation_id: "e-1".into(),
        }
    }

    #[test]
    fn the_error_carries_the_url_as_a_url_elicitation() {
        let frame: Value = serde_json::from_str(&url_required("7", "github", &start())).unwrap();
        assert_eq!(frame["error"]["code"], -32042);
        let item = &frame["error"]["data"]["elicitations"][0];
        assert_eq!(item["mode"], "url");
        assert_eq!(item["url"], "http://127.0.0.1:9/authorize?state=s");
        assert_eq!(item["elicitationId"], "e-1");
    }

    #[test]
    fn a_modern_request_gets_an_input_round_whose_retry_is_recognised() {
        let frame: Value = serde_json::from_str(&input_required("1", "github", &start())).unwrap();
        let result = &frame["result"];
        assert_eq!(result["resultType"], "input_required");
        assert_eq!(
            result["inputRequests"]["e-1"]["method"],
            "elicitation/create"
        );
        let retry = json!({
            "name": "x",
            "requestState": result["requestState"],
            "inputResponses": { "e-1": { "action": "accept" } },
        });
        let raw = serde_json::value::to_raw_value(&retry).unwrap();
        let mut params = Params::parse(Some(Raw::from(&*raw))).unwrap();
        strip_own_round(&mut params);
        assert!(params.raw("requestState").is_none());
        assert!(params.raw("inputResponses").is_none());
        assert!(params.raw("name").is_some());
    }

    #[test]
    fn another_round_state_is_left_for_its_owner() {
        let raw =
            serde_json::value::to_raw_value(&json!({"requestState": "mcpmux.v1.abc"})).unwrap();
        let mut params = Params::parse(Some(Raw::from(&*raw))).unwrap();
        strip_own_round(&mut params);
        assert!(params.raw("requestState").is_some());
    }
}
