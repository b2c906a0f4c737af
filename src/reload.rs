//! Hot reload: the running upstream set as a diff target, and the watcher
//! that reloads the config file on change or SIGHUP.
//!
//! A reload parses and validates the whole file first; an invalid file is
//! logged (every problem with its line and column) and changes nothing.
//! A valid one is applied as a diff of upstreams by name: added ones start,
//! removed ones stop (their children are stopped and reaped), changed ones
//! restart (a change of shaping alone is applied to the catalog without
//! one), unchanged ones are not touched, and downstream sessions stay
//! open. The catalog is rebuilt once, so each session gets at most one
//! `list_changed` per kind. A changed `policy` is swapped in whole (see
//! [`crate::policy`]). Other settings need a restart; a reload that
//! changes them says so in the log.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::catalog::{CatalogStore, ViewSpec};
use crate::config::{Config, Lookup, UpstreamConfig};
use crate::notify::NotifyHub;
use crate::upstream::{self, Interest, UpstreamSet};

/// How often the watcher looks at the config file.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// What a reload changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Diff {
    /// Upstreams new in the config: started.
    pub added: Vec<String>,
    /// Upstreams gone from the config: stopped.
    pub removed: Vec<String>,
    /// Upstreams whose settings changed: restarted.
    pub changed: Vec<String>,
    /// Upstreams whose shaping (`tools`, `prompts`, `resources`) alone
    /// changed: applied to the catalog without a restart.
    pub reshaped: Vec<String>,
}

impl Diff {
    /// Whether the reload changed no upstream.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.reshaped.is_empty()
    }

    /// The reload in words: "applied: added a; changed b" or "applied: no
    /// upstream changed".
    pub(crate) fn summary(&self) -> String {
        let parts: Vec<String> = [
            ("added", &self.added),
            ("removed", &self.removed),
            ("changed", &self.changed),
            ("reshaped", &self.reshaped),
        ]
        .into_iter()
        .filter(|(_, names)| !names.is_empty())
        .map(|(what, names)| format!("{what} {}", names.join(", ")))
        .collect();
        match parts.is_empty() {
            true => "applied: no upstream changed".into(),
            false => format!("applied: {}", parts.join("; ")),
        }
    }
}

struct Running {
    config: UpstreamConfig,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// Owns the upstream supervisors so they can be added, removed and
/// restarted one by one.
pub(crate) struct UpstreamManager {
    catalog: Arc<CatalogStore>,
    set: Arc<UpstreamSet>,
    hub: Arc<NotifyHub>,
    /// What clients want of upstreams, restored on each (re)start.
    interest: Arc<Interest>,
    /// Parent of every supervisor's stop token (gateway shutdown).
    shutdown: CancellationToken,
    tracker: TaskTracker,
    /// The supervisors in config order. An async lock: one reload at a time,
    /// held while old supervisors finish stopping.
    running: Mutex<IndexMap<String, Running>>,
    /// Users' authorization flows and token store, for upstreams with an
    /// `auth:` section.
    connector: Arc<crate::credentials::Connector>,
}

impl UpstreamManager {
    pub(crate) fn new(
        catalog: Arc<CatalogStore>,
        set: Arc<UpstreamSet>,
        hub: Arc<NotifyHub>,
        interest: Arc<Interest>,
        shutdown: CancellationToken,
        tracker: TaskTracker,
        connector: Arc<crate::credentials::Connector>,
    ) -> Self {
        Self {
            connector,
            catalog,
            set,
            hub,
            interest,
            shutdown,
            tracker,
            running: Mutex::new(IndexMap::new()),
        }
    }

    fn start(&self, config: &UpstreamConfig) -> Running {
        let stop = self.shutdown.child_token();
        let credentials = match &config.transport {
            crate::config::Transport::Remote(remote) => remote.auth.as_ref().and_then(|auth| {
                crate::credentials::UpstreamCredentials::new(
                    config.name.as_str().into(),
                    auth,
                    &remote.url,
                    self.connector.clone(),
                )
                .inspect_err(|e| tracing::error!(upstream = %config.name, error = %e, "its auth section cannot be used; it gets no token"))
                .ok()
            }),
            _ => None,
        };
        let (handle, task) = upstream::spawn(
            config.clone(),
            self.catalog.clone(),
            self.hub.clone(),
            self.interest.clone(),
            stop.clone(),
            &self.tracker,
            credentials,
        );
        self.set.insert(handle);
        Running {
            config: config.clone(),
            stop,
            task,
        }
    }

    fn catalog_order(configs: &[UpstreamConfig]) -> Vec<(Arc<str>, String, Option<bool>)> {
        configs
            .iter()
            .map(|u| {
                (
                    Arc::from(u.name.as_str()),
                    u.prefix.clone(),
                    u.namespace_uris,
                )
            })
            .collect()
    }

    /// Starts every upstream of the initial config (before any reload).
    pub(crate) fn start_all(&self, configs: &[UpstreamConfig]) {
        let Ok(mut running) = self.running.try_lock() else {
            tracing::error!("upstreams started twice; ignored");
            return;
        };
        for config in configs {
            running.insert(config.name.clone(), self.start(config));
        }
    }

    /// Applies a new upstream list as a diff.
    pub(crate) async fn apply(&self, configs: &[UpstreamConfig]) -> Diff {
        let mut running = self.running.lock().await;
        let mut diff = Diff::default();
        let mut stopping = Vec::new();
        let wanted: IndexMap<&str, &UpstreamConfig> =
            configs.iter().map(|c| (c.name.as_str(), c)).collect();
        let names: Vec<String> = running.keys().cloned().collect();
        for name in names {
            match wanted.get(name.as_str()) {
                None => {
                    diff.removed.push(name.clone());
                    stopping.push(running.shift_remove(&name).expect("present"));
                }
                Some(new) if needs_restart(&running[&name].config, new) => {
                    diff.changed.push(name.clone());
                    stopping.push(running.shift_remove(&name).expect("present"));
                }
                Some(new) if running[&name].config.shape != new.shape => {
                    diff.reshaped.push(name.clone());
                }
                Some(_) => {}
            }
        }
        // Stop first and wait, so an old child never outlives its successor.
        for old in &stopping {
            old.stop.cancel();
        }
        for old in stopping {
            let _ = old.task.await;
        }
        for name in &diff.removed {
            self.set.remove(name);
        }
        let mut changed_kinds = self.catalog.set_upstreams(Self::catalog_order(configs));
        // Shaping applies without a restart.
        for kind in self
            .catalog
            .set_shapes(configs.iter().map(|c| (c.name.as_str(), &c.shape)))
        {
            if !changed_kinds.contains(&kind) {
                changed_kinds.push(kind);
            }
        }
        self.hub.lists_changed(&changed_kinds);
        // Restart changed ones and start added ones, keeping config order.
        let mut next = IndexMap::new();
        for config in configs {
            let entry = match running.shift_remove(&config.name) {
                Some(mut unchanged) => {
                    unchanged.config = config.clone();
                    unchanged
                }
                None => {
                    if !diff.changed.contains(&config.name) {
                        diff.added.push(config.name.clone());
                    }
                    self.start(config)
                }
            };
            next.insert(config.name.clone(), entry);
        }
        *running = next;
        diff
    }
}

impl UpstreamManager {
    /// Puts a reloaded config's views in force: its naming, its endpoints
    /// and its policies. Each running session's and listen stream's rights
    /// follow them from its next request, and those whose view changed get
    /// `list_changed`. Returns whether a policy changed.
    pub(crate) fn apply_views(&self, config: &crate::config::Config) -> bool {
        let kinds = self.catalog.set_views(
            ViewSpec::whole(config.naming.mode),
            config.endpoints.iter().map(ViewSpec::endpoint).collect(),
            config.uri_naming.mode,
        );
        let replaced = self
            .hub
            .views()
            .is_some_and(|v| v.replace(config.policy.as_ref(), &config.endpoints));
        if !replaced {
            self.hub.lists_changed(&kinds);
            return false;
        }
        self.hub.policy_changed();
        tracing::info!(
            policy = config.policy.is_some(),
            endpoints = config.endpoints.len(),
            "policies reloaded"
        );
        true
    }
}

/// The names that collide, now, in the views of `config` that name items
/// by `prefix_mode: never` (and the URIs, under `namespace_uris: never`):
/// each an issue at that `prefix_mode` (or `namespace_uris`). Such a
/// config is refused (at start, once the upstreams settled; on a reload,
/// before anything is applied).
pub(crate) fn naming_conflicts(
    catalog: &CatalogStore,
    config: &crate::config::Config,
) -> Vec<crate::config::Issue> {
    use crate::config::{PrefixMode, naming_issue};
    let whole = (
        "prefix_mode".to_owned(),
        config.naming,
        ViewSpec::whole(config.naming.mode),
    );
    let endpoints = config.endpoints.iter().map(|e| {
        let label = match e.naming == config.naming {
            true => format!("prefix_mode (inherited by endpoints.{})", e.name),
            false => format!("endpoints.{}.prefix_mode", e.name),
        };
        (label, e.naming, ViewSpec::endpoint(e))
    });
    let mut issues = Vec::new();
    if config.uri_naming.mode == PrefixMode::Never {
        for collision in catalog.uri_collisions(PrefixMode::Never) {
            issues.push(naming_issue(
                &config.uri_naming,
                format!("namespace_uris: never, but the {collision}; use on_collision, or set namespace_uris: true on one of the upstreams"),
            ));
        }
    }
    for (label, naming, spec) in std::iter::once(whole).chain(endpoints) {
        if naming.mode != PrefixMode::Never {
            continue;
        }
        for collision in catalog.preview(&spec).collisions() {
            issues.push(naming_issue(
                &naming,
                format!("{label}: never, but the {collision}; use on_collision, or rename with the upstream's tools or prompts settings"),
            ));
        }
    }
    issues
}

/// Whether a changed upstream config needs its upstream restarted: any
/// difference but in its shaping (`tools`, `prompts`, `resources`), which
/// the catalog applies on its own.
fn needs_restart(old: &UpstreamConfig, new: &UpstreamConfig) -> bool {
    let mut old = old.clone();
    old.shape = new.shape.clone();
    old != *new
}

/// Reloads `path` when its content changes or on SIGHUP, until `stop`.
/// `current` is the config the gateway runs; reloads replace it.
pub(crate) async fn watch(
    path: PathBuf,
    manager: Arc<UpstreamManager>,
    edge: Arc<crate::downstream::AppState>,
    mut current: Config,
    stop: CancellationToken,
) {
    let mut last = std::fs::read(&path).ok();
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; reloading on file changes only");
            None
        }
    };
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let forced = tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => false,
            Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
        };
        let content = std::fs::read(&path).ok();
        if !forced && content == last {
            continue;
        }
        last = content;
        tracing::info!(file = %path.display(), trigger = if forced { "SIGHUP" } else { "file change" }, "reloading config");
        let next = match Config::load(&path, &Lookup::from_process()) {
            Ok(next) => next,
            Err(e) => {
                for line in e.lines() {
                    tracing::error!(problem = %line, "config reload rejected; still serving the previous config");
                }
                edge.ui
                    .reloaded(None, format!("rejected: {}", e.lines().join("; ")));
                continue;
            }
        };
        let conflicts = naming_conflicts(&manager.catalog, &next);
        if !conflicts.is_empty() {
            let lines: Vec<String> = conflicts
                .iter()
                .map(|i| format!("{}:{}:{}: {}", path.display(), i.line, i.column, i.message))
                .collect();
            for line in &lines {
                tracing::error!(problem = %line, "config reload rejected; still serving the previous config");
            }
            edge.ui
                .reloaded(None, format!("rejected: {}", lines.join("; ")));
            continue;
        }
        let needs_restart = next.listen != current.listen
            || next.http != current.http
            || next.sessions != current.sessions
            || next.page_size != current.page_size
            || next.shutdown_grace != current.shutdown_grace
            || next.request_state_key != current.request_state_key
            || next.session_store != current.session_store
            || next.tracing != current.tracing;
        if needs_restart {
            tracing::warn!(
                "settings outside `upstreams` changed; they take effect after a restart"
            );
        }
        let diff = manager.apply(&next.upstreams).await;
        manager.apply_views(&next);
        if next.auth != current.auth || next.rate_limit != current.rate_limit {
            edge.apply_edge(&next, &stop);
            tracing::info!("authentication and rate limits reloaded");
        }
        edge.set_endpoints(&next.endpoints);
        tracing::info!(added = ?diff.added, removed = ?diff.removed, changed = ?diff.changed, reshaped = ?diff.reshaped, "config reloaded");
        edge.ui.reloaded(Some(&next), diff.summary());
        current = next;
    }
}

#[cfg(test)]
mod tests {
    use super::Diff;

    #[test]
    fn a_reload_is_summed_up_in_words_for_the_operators_page() {
        assert_eq!(Diff::default().summary(), "applied: no upstream changed");
        let diff = Diff {
            added: vec!["a".into(), "b".into()],
            changed: vec!["c".into()],
            ..Diff::default()
        };
        assert_eq!(diff.summary(), "applied: added a, b; changed c");
    }
}
