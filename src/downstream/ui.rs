//! The operator's page: `GET /ui` (server-rendered HTML), its stylesheet
//! and script (`/ui/ui.css`, `/ui/ui.js`, embedded in the binary), and
//! `GET /ui/events`, a server-sent event stream of live figures once a
//! second. All four are guarded like `/status` (`auth.admin`).
//!
//! The page reads the same live tables as `/status` and `/metrics` (the
//! upstream handles, the session table, the hub, the subscription table)
//! plus each upstream's `Journal` (uptime, recent errors) and the router's
//! `live::Live` figures. Nothing here runs unless someone looks.

mod render;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::{Value, json};

use super::AppState;
use super::authn::admit_admin;
use crate::catalog::ListKind;
use crate::live::{Rates, Sample};

const CSS: &str = include_str!("ui/ui.css");
const JS: &str = include_str!("ui/ui.js");
/// How often `/ui/events` sends figures.
const TICK: Duration = Duration::from_secs(1);

/// What the page shows of the config: the one in force and the last reload.
pub(crate) struct UiState {
    started: SystemTime,
    config: arc_swap::ArcSwap<crate::config::Config>,
    last_reload: Mutex<Option<(SystemTime, String)>>,
}

impl UiState {
    pub(crate) fn new(config: &crate::config::Config) -> Self {
        Self {
            started: SystemTime::now(),
            config: arc_swap::ArcSwap::from_pointee(config.clone()),
            last_reload: Mutex::new(None),
        }
    }

    /// Notes a reload: the config now in force (when it was applied) and
    /// what came of it, in words.
    pub(crate) fn reloaded(&self, applied: Option<&crate::config::Config>, result: String) {
        if let Some(config) = applied {
            self.config.store(Arc::new(config.clone()));
        }
        *self.last_reload.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((SystemTime::now(), result));
    }
}

/// `GET /ui`.
pub(crate) async fn page(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(refused) = admit_admin(&state, &headers).await {
        return refused;
    }
    let connected = connected_users(&state).await;
    let html = render::page(&gather(&state, &connected));
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            ),
        ],
        html,
    )
        .into_response()
}

/// `GET /ui/ui.css` and `GET /ui/ui.js`.
pub(crate) async fn asset(
    State(state): State<Arc<AppState>>,
    axum::extract::Path(file): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = admit_admin(&state, &headers).await {
        return refused;
    }
    let (kind, body) = match file.as_str() {
        "ui.css" => ("text/css; charset=utf-8", CSS),
        "ui.js" => ("text/javascript; charset=utf-8", JS),
        _ => return axum::http::StatusCode::NOT_FOUND.into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `GET /ui/events`: a `figures` event at once, then once a second, until
/// the client goes or the gateway shuts down.
pub(crate) async fn events(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(refused) = admit_admin(&state, &headers).await {
        return refused;
    }
    let stop = state.shutdown.clone();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let seed = (state, tick, Vec::<Sample>::new(), stop);
    let events = stream::unfold(seed, |(state, mut tick, before, stop)| async move {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return None,
        }
        let now = state.router.metrics().live.sample();
        let figures = figures(&state, &now, &before);
        let event = Event::default().event("figures").data(figures.to_string());
        Some((
            Ok::<_, std::convert::Infallible>(event),
            (state, tick, now, stop),
        ))
    });
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    response
}

/// One `figures` event: each upstream's state and rates, each item's
/// rates, and the totals.
fn figures(state: &AppState, now: &[Sample], before: &[Sample]) -> Value {
    let previous = |s: &Sample| {
        before
            .binary_search_by(|b| (&b.upstream, &b.item).cmp(&(&s.upstream, &s.item)))
            .ok()
            .map(|i| &before[i])
    };
    let first = before.is_empty();
    let mut per_upstream: std::collections::BTreeMap<&str, Rates> = Default::default();
    let mut all = Rates::default();
    let mut items = Vec::with_capacity(now.len());
    let (mut total_calls, mut total_errors) = (0, 0);
    for sample in now {
        // The first event has no interval: its rates are zero.
        let rates = match first {
            true => Rates::default(),
            false => Rates::between(sample, previous(sample)),
        };
        total_calls += sample.calls;
        total_errors += sample.errors;
        per_upstream
            .entry(&sample.upstream)
            .or_default()
            .add(&rates);
        all.add(&rates);
        items.push(json!({
            "upstream": &*sample.upstream,
            "item": &*sample.item,
            "calls": sample.calls,
            "errors": sample.errors,
            "rate": rates.calls,
            "errorRate": error_rate(&rates),
            "p50": rates.quantile_ms(0.5),
            "p99": rates.quantile_ms(0.99),
        }));
    }
    let mut handles = state.router.upstreams().all();
    handles.sort_by(|a, b| a.name().cmp(b.name()));
    let upstreams: Vec<Value> = handles
        .iter()
        .map(|h| {
            let rates = per_upstream.remove(&**h.name()).unwrap_or_default();
            let upstream_state = h.state();
            json!({
                "name": &**h.name(),
                "state": upstream_state.label(),
                "reason": reason(&upstream_state),
                "restarts": h.restarts(),
                "pid": h.pid(),
                "uptime": h.journal().uptime().map(|d| humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()),
                "rate": rates.calls,
                "errorRate": error_rate(&rates),
                "p50": rates.quantile_ms(0.5),
                "p99": rates.quantile_ms(0.99),
            })
        })
        .collect();
    let hub = state.router.hub();
    json!({
        "upstreams": upstreams,
        "items": items,
        "rate": all.calls,
        "errorRate": error_rate(&all),
        "calls": total_calls,
        "errors": total_errors,
        "sessions": state.sessions.len(),
        "listenStreams": hub.listener_count(),
        "subscribedUris": hub.subscriptions().uri_count(),
    })
}

fn error_rate(rates: &Rates) -> Option<f64> {
    (rates.calls > 0).then(|| rates.errors as f64 / rates.calls as f64)
}

fn reason(state: &crate::upstream::UpstreamState) -> Option<String> {
    use crate::upstream::UpstreamState;
    matches!(
        state,
        UpstreamState::Down { .. } | UpstreamState::Unresponsive { .. }
    )
    .then(|| state.describe())
}

/// Who connected their account at each upstream (`auth.mode: user`),
/// from the token store; never a token.
pub(crate) async fn connected_users(state: &AppState) -> HashMap<String, Vec<String>> {
    let mut by_upstream: HashMap<String, Vec<String>> = HashMap::new();
    if let Ok(store) = state.connector.store()
        && let Ok(connections) = store.connections(None, None).await
    {
        for c in connections {
            by_upstream.entry(c.upstream).or_default().push(c.identity);
        }
    }
    by_upstream
}

/// Reads everything the page shows from the live tables.
fn gather(state: &AppState, connected: &HashMap<String, Vec<String>>) -> render::Page {
    let catalog = state.router.catalog().load();
    let mut handles = state.router.upstreams().all();
    handles.sort_by(|a, b| a.name().cmp(b.name()));
    let upstreams = handles
        .iter()
        .map(|h| {
            let items = std::array::from_fn(|i| {
                let kind = ListKind::ALL[i];
                catalog
                    .keys(kind)
                    .iter()
                    .enumerate()
                    .filter(|(index, _)| catalog.item(kind, *index).1 == h.name())
                    .map(|(_, key)| key.to_string())
                    .collect()
            });
            let hello = h.hello();
            let upstream_state = h.state();
            render::UpstreamRow {
                name: h.name().to_string(),
                state: upstream_state.label(),
                reason: reason(&upstream_state),
                transport: h.transport(),
                era: hello.as_ref().map(|h| h.protocol_version.clone()),
                server: hello.as_ref().and_then(|h| h.server_name.clone()),
                restarts: h.restarts(),
                uptime: h.journal().uptime(),
                pid: h.pid(),
                items,
                errors: h
                    .journal()
                    .recent_errors()
                    .into_iter()
                    .map(|e| (e.at, e.text))
                    .collect(),
                auth: h.credentials().map(|c| render::AuthRow {
                    mode: c.mode().name(),
                    connected: connected.get(&**h.name()).cloned().unwrap_or_default(),
                    sessions: h
                        .identities()
                        .unwrap_or_default()
                        .iter()
                        .map(|i| i.to_string())
                        .collect(),
                }),
            }
        })
        .collect();
    let hub = state.router.hub();
    let sessions = state.sessions.all();
    let session_of = |id| sessions.iter().find(|s| s.subscriber.id == id);
    let label = |id: u64| match session_of(id) {
        Some(s) => format!("#{id} ({}…)", &s.id[..s.id.len().min(8)]),
        None => format!("#{id}"),
    };
    let mut subscribers = hub.all_subscribers();
    subscribers.retain(|s| !s.is_log_tap());
    subscribers.sort_by_key(|s| s.id);
    let clients = subscribers
        .iter()
        .map(|s| {
            let session = session_of(s.id);
            render::ClientRow {
                kind: if s.is_listener() {
                    "listen stream"
                } else {
                    "session"
                },
                label: label(s.id),
                client: s.client_info().map(|(n, v)| (n.to_owned(), v.to_owned())),
                era: match session {
                    Some(session) => session
                        .protocol_version
                        .get()
                        .cloned()
                        .unwrap_or_else(|| "legacy".into()),
                    None if s.is_listener() => crate::protocol::MODERN_VERSION.into(),
                    None => "in-process".into(),
                },
                identity: s.identity().map(|i| i.client.to_string()),
                age: s.age(),
                in_flight: session.map_or(0, |s| s.inflight.len()),
                streams: session.map_or(usize::from(s.is_listener()), |s| s.stream_count()),
                endpoint: s.endpoint().map(|name| format!("/mcp/{name}")),
            }
        })
        .collect();
    let subscriptions = hub
        .subscriptions()
        .entries()
        .into_iter()
        .map(|(uri, upstream, ids)| render::SubscriptionRow {
            uri: uri.to_string(),
            upstream: upstream.to_string(),
            subscribers: ids.into_iter().map(label).collect(),
        })
        .collect();
    let figures = state
        .router
        .metrics()
        .live
        .sample()
        .into_iter()
        .map(|s| render::FigureRow {
            upstream: s.upstream.to_string(),
            item: s.item.to_string(),
            calls: s.calls,
            errors: s.errors,
        })
        .collect();
    let ui = &state.ui;
    let views = std::iter::once(state.router.catalog().load())
        .chain(state.router.catalog().endpoints())
        .map(|view| render::EndpointRow {
            path: view
                .view_name()
                .map_or_else(|| "/mcp".to_owned(), |name| format!("/mcp/{name}")),
            upstreams: view
                .upstream_selection()
                .map(|names| names.iter().map(|n| n.to_string()).collect()),
            prefix_mode: view.prefix_mode().as_str(),
            counts: ListKind::ALL.map(|kind| view.len(kind)),
            searchable: view.searchable().map(|s| s.len()),
            sessions: sessions
                .iter()
                .filter(|s| s.subscriber.endpoint() == view.view_name().map(|n| &**n))
                .count(),
            collisions: view.collisions().to_vec(),
        })
        .collect();
    render::Page {
        version: env!("CARGO_PKG_VERSION"),
        upstreams,
        endpoints: views,
        clients,
        subscriptions,
        figures,
        config: format!("{:#?}", ui.config.load()),
        started: ui.started,
        last_reload: ui
            .last_reload
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone(),
    }
}
