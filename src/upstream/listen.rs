//! A modern upstream's change notifications: one `subscriptions/listen`
//! request per upstream, asking for every list kind the upstream can
//! announce and every URI that has subscribers in the gateway's table.
//!
//! When that URI set changes the supervisor opens a new listen first and
//! only then cancels the old one, so no update falls into a gap. When the
//! stream ends (the upstream closed it, or the transport broke) the
//! supervisor opens it again and refetches the lists it may have missed.

use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use std::sync::Arc;

use super::connection::{Answer, Connection, Request};
use super::handshake::ServerHello;
use crate::protocol::Method;

/// One open listen request.
pub(super) struct Listen {
    pub id: u64,
    pub answer: oneshot::Receiver<Answer>,
    /// Resolves when the upstream has acknowledged the stream.
    pub acknowledged: oneshot::Receiver<()>,
    pub opened: std::time::Instant,
}

/// Opens a listen stream for the upstream's list kinds, the URIs clients
/// watch on it (`uris`, as the upstream knows them) and the tasks whose
/// status they listen for (`tasks`, the upstream's task ids).
pub(super) async fn open(
    conn: &Connection,
    hello: &ServerHello,
    uris: Vec<Arc<str>>,
    tasks: Vec<Arc<str>>,
) -> Option<Listen> {
    let announces = |capability: &str| {
        hello
            .capabilities
            .get(capability)
            .and_then(|c| c.get("listChanged"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    let mut filter = Map::new();
    for (key, capability) in [
        ("toolsListChanged", "tools"),
        ("promptsListChanged", "prompts"),
        ("resourcesListChanged", "resources"),
    ] {
        if announces(capability) {
            filter.insert(key.into(), Value::Bool(true));
        }
    }
    if hello.can_subscribe() && !uris.is_empty() {
        let uris: Vec<&str> = uris.iter().map(|u| &**u).collect();
        filter.insert("resourceSubscriptions".into(), json!(uris));
    }
    if !tasks.is_empty() {
        let tasks: Vec<&str> = tasks.iter().map(|t| &**t).collect();
        filter.insert("taskIds".into(), json!(tasks));
    }
    if filter.is_empty() {
        return None;
    }
    let id = conn.next_id();
    let acknowledged = conn.expect_ack(id);
    let mut params = json!({ "notifications": filter });
    if !tasks.is_empty() {
        // Task notifications need the tasks extension, which the gateway
        // supports on this stream (its requests' capabilities are the
        // clients', see `forward`).
        params["_meta"] = json!({ (crate::protocol::meta::CLIENT_CAPABILITIES): {
            "extensions": { (crate::protocol::meta::TASKS_EXTENSION): {} } } });
    }
    let params = params.to_string();
    match conn
        .send_request(id, Request::new(Method::Listen, Some(&params)))
        .await
    {
        Ok(answer) => Some(Listen {
            id,
            answer,
            acknowledged,
            opened: std::time::Instant::now(),
        }),
        Err(e) => {
            tracing::warn!(error = %e, "could not open the upstream listen stream");
            None
        }
    }
}
