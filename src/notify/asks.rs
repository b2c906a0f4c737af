//! Requests upstreams asked of one downstream session (sampling,
//! elicitation, roots), waiting for the client's answer.
//!
//! Each has a gateway-issued id; the client answers with a response
//! carrying that id on the same session, and only there. The table belongs
//! to the session's subscriber: when the session ends it is dropped, and
//! every waiter learns so at once. Entries also leave when answered, and
//! when the waiter gives up (`forget`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use crate::protocol::Method;
use crate::upstream::{AskRefused, ClientAnswer, ClientAsk};

/// Requests waiting for one client, and what the client can answer.
#[derive(Default)]
pub(crate) struct Asks {
    /// The `capabilities` the client declared in `initialize` (set once).
    capabilities: OnceLock<Map<String, Value>>,
    /// Gateway-issued id → the waiter. A std mutex, held for one lookup.
    waiting: Mutex<HashMap<Arc<str>, oneshot::Sender<ClientAnswer>>>,
    /// The client's last `roots/list` answer, until it says its roots
    /// changed; kept only for clients that declared `roots.listChanged`.
    roots: Mutex<Option<Arc<RawValue>>>,
}

impl Asks {
    /// Records the client's declared capabilities (the first call wins).
    pub(crate) fn set_capabilities(&self, capabilities: Map<String, Value>) {
        let _ = self.capabilities.set(capabilities);
    }

    /// The capabilities the client declared, once it has.
    pub(crate) fn capabilities(&self) -> Option<Value> {
        self.capabilities.get().map(|c| Value::Object(c.clone()))
    }

    /// Registers a request under `id`, if the client declared what it needs.
    pub(crate) fn register(
        &self,
        id: Arc<str>,
        method: &Method,
        params: Option<&RawValue>,
    ) -> Result<ClientAsk, AskRefused> {
        self.check(method, params)?;
        let (tx, answer) = oneshot::channel();
        self.lock().insert(id.clone(), tx);
        Ok(ClientAsk { id, answer })
    }

    /// Hands the client's answer to its waiter (one that gave up just
    /// now drops it); gives it back if nothing here asked `id`.
    pub(crate) fn answer(&self, id: &str, answer: ClientAnswer) -> Result<(), ClientAnswer> {
        match self.lock().remove(id) {
            Some(waiter) => {
                let _ = waiter.send(answer);
                Ok(())
            }
            None => Err(answer),
        }
    }

    /// Drops the entry for `id` (its waiter gave up).
    pub(crate) fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// The client's roots as it last gave them, if they still hold.
    pub(crate) fn cached_roots(&self) -> Option<Arc<RawValue>> {
        self.roots.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Keeps the client's `roots/list` answer, if the client will say when
    /// its roots change (otherwise each request asks it again).
    pub(crate) fn remember_roots(&self, result: &RawValue) {
        let announces = self
            .capabilities
            .get()
            .and_then(|c| c.get("roots"))
            .and_then(|r| r.get("listChanged"))
            .and_then(Value::as_bool)
            == Some(true);
        if announces {
            *self.roots.lock().unwrap_or_else(|e| e.into_inner()) = Some(result.to_owned().into());
        }
    }

    /// The client said its roots changed: the next request asks it again.
    pub(crate) fn roots_changed(&self) {
        *self.roots.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Requests still waiting for this client.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, oneshot::Sender<ClientAnswer>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the client declared the capability `method` needs.
    fn check(&self, method: &Method, params: Option<&RawValue>) -> Result<(), AskRefused> {
        crate::upstream::check_declared(self.capabilities.get(), method, params)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn declared(capabilities: Value) -> Asks {
        let asks = Asks::default();
        if let Value::Object(map) = capabilities {
            asks.set_capabilities(map);
        }
        asks
    }

    fn raw(value: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&value).unwrap()
    }

    #[test]
    fn requests_need_the_capability_the_client_declared() {
        let none = declared(json!({}));
        for (method, what) in [
            (Method::CreateMessage, "sampling"),
            (Method::Elicit, "elicitation"),
            (Method::RootsList, "roots"),
        ] {
            let refused = none.register("a".into(), &method, None).err();
            assert_eq!(refused, Some(AskRefused::MissingCapability(what)));
        }
        assert_eq!(none.len(), 0);
        let form = declared(json!({ "elicitation": {} }));
        let url = raw(json!({ "mode": "url", "url": "https://example.com" }));
        assert!(form.register("a".into(), &Method::Elicit, None).is_ok());
        assert_eq!(
            form.register("b".into(), &Method::Elicit, Some(&url)).err(),
            Some(AskRefused::MissingCapability("URL-mode elicitation"))
        );
        let both = declared(json!({ "elicitation": { "form": {}, "url": {} } }));
        assert!(
            both.register("c".into(), &Method::Elicit, Some(&url))
                .is_ok()
        );
    }

    #[tokio::test]
    async fn an_answer_reaches_its_waiter_once_and_a_dropped_table_fails_the_rest() {
        let asks = declared(json!({ "sampling": {} }));
        let first = asks
            .register("g-1".into(), &Method::CreateMessage, None)
            .unwrap();
        let second = asks
            .register("g-2".into(), &Method::CreateMessage, None)
            .unwrap();
        assert!(asks.answer("g-1", Ok(raw(json!({ "ok": 1 })))).is_ok());
        assert!(
            asks.answer("g-1", Ok(raw(json!({})))).is_err(),
            "answered twice"
        );
        assert!(asks.answer("unknown", Ok(raw(json!({})))).is_err());
        let got = first.answer.await.unwrap().unwrap();
        assert_eq!(got.get(), r#"{"ok":1}"#);
        assert_eq!(asks.len(), 1);
        drop(asks);
        assert!(second.answer.await.is_err(), "the session's end is seen");
    }

    #[test]
    fn roots_are_kept_only_for_a_client_that_announces_changes() {
        let roots = raw(json!({ "roots": [{ "uri": "file:///a" }] }));
        let silent = declared(json!({ "roots": {} }));
        silent.remember_roots(&roots);
        assert!(
            silent.cached_roots().is_none(),
            "it would never say they changed"
        );

        let announcing = declared(json!({ "roots": { "listChanged": true } }));
        announcing.remember_roots(&roots);
        assert_eq!(announcing.cached_roots().unwrap().get(), roots.get());
        announcing.roots_changed();
        assert!(announcing.cached_roots().is_none());
    }
}
