//! The `upstreams` section: one upstream's keys as written, and their
//! validation into an [`UpstreamConfig`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use indexmap::IndexMap;
use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{
    EraChoice, HealthConfig, InheritEnv, Isolation, Lookup, Problems, RemoteConfig, RemoteMode,
    Root, Secret, ShapeConfig, StdioConfig, Transport, UpstreamConfig,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstream {
    #[serde(default)]
    command: Option<Spanned<String>>,
    #[serde(default)]
    args: Vec<Spanned<String>>,
    #[serde(default)]
    env: IndexMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    cwd: Option<Spanned<String>>,
    #[serde(default)]
    url: Option<Spanned<String>>,
    #[serde(default)]
    headers: IndexMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    transport: Option<Spanned<String>>,
    #[serde(default)]
    prefix: Option<Spanned<String>>,
    #[serde(default)]
    timeout: Option<Spanned<String>>,
    #[serde(default)]
    era: Option<Spanned<String>>,
    #[serde(default)]
    namespace_uris: Option<bool>,
    #[serde(default)]
    required: Option<bool>,
    #[serde(default)]
    inherit_env: Option<Spanned<RawInheritEnv>>,
    #[serde(default)]
    start_wait: Option<Spanned<String>>,
    #[serde(default)]
    isolation: Option<Spanned<String>>,
    #[serde(default)]
    max_instances: Option<Spanned<u64>>,
    #[serde(default)]
    health: Option<RawHealth>,
    #[serde(default)]
    tools: Option<super::shape::RawListShape>,
    #[serde(default)]
    prompts: Option<super::shape::RawListShape>,
    #[serde(default)]
    resources: Option<bool>,
    #[serde(default)]
    roots: Vec<Spanned<RawRoot>>,
    #[serde(default)]
    limits: Option<super::protect::RawLimits>,
    #[serde(default)]
    circuit_breaker: Option<super::protect::RawBreaker>,
    #[serde(default)]
    cache: Option<super::protect::RawCache>,
    #[serde(default)]
    auth: Option<super::upstream_auth::RawUpstreamAuth>,
}

/// A root: its `file://` URI, or `{uri, name}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawRoot {
    Uri(String),
    Named {
        uri: String,
        #[serde(default)]
        name: Option<String>,
    },
}

/// `inherit_env: all`, or a list of names.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawInheritEnv {
    Keyword(String),
    Names(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHealth {
    #[serde(default)]
    ping_interval: Option<Spanned<String>>,
    #[serde(default)]
    ping_timeout: Option<Spanned<String>>,
    #[serde(default)]
    restart_after: Option<Spanned<String>>,
    #[serde(default)]
    call_timeouts: Option<Spanned<u64>>,
}

impl RawUpstream {
    /// Where `auth.mode: user` is written, if it is.
    pub(super) fn user_mode_at(&self) -> Option<serde_saphyr::Location> {
        self.auth.as_ref().and_then(|a| a.user_mode_at())
    }

    /// Where an `auth.mode` that acts as each caller is written, if one is.
    pub(super) fn per_identity_at(&self) -> Option<serde_saphyr::Location> {
        self.auth.as_ref().and_then(|a| a.per_identity_at())
    }

    pub(super) fn validate(
        &self,
        name: &Spanned<String>,
        lookup: &Lookup,
        p: &mut Problems,
    ) -> Option<UpstreamConfig> {
        let before = p.issues.len();
        if let Err(why) = check_upstream_name(&name.value) {
            p.at(
                name.referenced,
                format_args!(
                    "upstream name {:?} {why} (names match [a-z][a-z0-9-]{{0,31}})",
                    name.value
                ),
            );
        }
        // Names and keys are escaped where they are not quoted, so every message stays one line.
        let label = format!("upstreams.{}", name.value.escape_debug());

        let transport = match (&self.command, &self.url) {
            (Some(_), Some(url)) => {
                p.at(
                    url.referenced,
                    format_args!("{label}: set either command (stdio) or url (remote), not both"),
                );
                None
            }
            (None, None) => {
                p.at(
                    name.referenced,
                    format_args!("{label}: needs a command (stdio) or a url (remote)"),
                );
                None
            }
            (Some(command), None) => self.stdio(command, &label, lookup, p).map(Transport::Stdio),
            (None, Some(url)) => self.remote(url, &label, lookup, p).map(Transport::Remote),
        };

        let prefix = match &self.prefix {
            None => Some(name.value.clone()),
            Some(raw) => {
                let prefix = p.expand(raw, &format!("{label}.prefix"), lookup)?;
                if prefix.len() > 32
                    || !prefix
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                {
                    p.at(
                        raw.referenced,
                        format_args!("{label}.prefix: {prefix:?} must be at most 32 characters of a-z, A-Z, 0-9, '_' and '-'"),
                    );
                }
                Some(prefix)
            }
        };
        let timeout = self
            .timeout
            .as_ref()
            .map_or(Some(Duration::from_secs(60)), |t| {
                p.duration(t, &format!("{label}.timeout"), lookup)
            });

        let start_wait = p.duration_or(
            self.start_wait.as_ref(),
            Duration::from_secs(5),
            &format!("{label}.start_wait"),
            lookup,
        );
        let health = self.health.as_ref().map_or_else(
            || Some(HealthConfig::default()),
            |h| h.validate(&label, lookup, p),
        );
        let list_shape = |raw: &Option<super::shape::RawListShape>, key: &str, p: &mut Problems| {
            raw.as_ref()
                .map(|r| r.validate(&format!("{label}.{key}"), key == "tools", p))
                .unwrap_or_default()
        };
        let protect = super::protect::validate(
            self.limits.as_ref(),
            self.circuit_breaker.as_ref(),
            self.cache.as_ref(),
            &label,
            lookup,
            p,
        );
        let shape = ShapeConfig {
            tools: list_shape(&self.tools, "tools", p),
            prompts: list_shape(&self.prompts, "prompts", p),
            resources: self.resources.unwrap_or(true),
        };

        if p.issues.len() != before {
            return None;
        }
        let era = match self.era.as_ref().map(|e| (e, e.value.as_str())) {
            None | Some((_, "auto")) => EraChoice::Auto,
            Some((_, "legacy")) => EraChoice::Legacy,
            Some((_, "modern")) => EraChoice::Modern,
            Some((e, other)) => {
                p.at(
                    e.referenced,
                    format_args!(
                        "{label}.era: {other:?} is not \"auto\", \"legacy\" or \"modern\""
                    ),
                );
                return None;
            }
        };
        if let (EraChoice::Modern, Some(Transport::Remote(remote)), Some(e)) =
            (era, &transport, &self.era)
            && remote.mode == RemoteMode::Sse
        {
            p.at(
                e.referenced,
                format_args!("{label}.era: \"modern\" cannot be used with transport: sse (HTTP+SSE is 2024-11-05 only)"),
            );
            return None;
        }
        Some(UpstreamConfig {
            name: name.value.clone(),
            prefix: prefix?,
            transport: transport?,
            timeout: timeout?,
            era,
            namespace_uris: self.namespace_uris,
            required: self.required.unwrap_or(false),
            start_wait: start_wait?,
            health: health?,
            shape,
            roots: self.roots(&label, lookup, p)?,
            protect: protect?,
        })
    }

    /// `roots`: `file://` URIs (expanded), each with an optional name.
    fn roots(&self, label: &str, lookup: &Lookup, p: &mut Problems) -> Option<Vec<Root>> {
        let before = p.issues.len();
        let roots: Vec<Root> = self
            .roots
            .iter()
            .filter_map(|raw| {
                let (uri, name) = match &raw.value {
                    RawRoot::Uri(uri) => (uri, None),
                    RawRoot::Named { uri, name } => (uri, name.clone()),
                };
                let what = format!("{label}.roots");
                let spanned = Spanned {
                    value: uri.clone(),
                    referenced: raw.referenced,
                    defined: raw.defined,
                };
                let text = p.expand(&spanned, &what, lookup)?;
                if !text.starts_with("file://") {
                    p.at(
                        raw.referenced,
                        format_args!("{what}: {text:?} is not a file:// URI"),
                    );
                    return None;
                }
                Some(Root { uri: text, name })
            })
            .collect();
        (p.issues.len() == before).then_some(roots)
    }

    /// `inherit_env`: `all`, or names of variables (a trailing `*` is a prefix).
    fn inherit_env(&self, label: &str, p: &mut Problems) -> InheritEnv {
        let Some(raw) = &self.inherit_env else {
            return InheritEnv::Base(Vec::new());
        };
        match &raw.value {
            RawInheritEnv::Keyword(word) if word == "all" => InheritEnv::All,
            RawInheritEnv::Keyword(other) => {
                p.at(
                    raw.referenced,
                    format_args!(
                        "{label}.inherit_env: {other:?} is not \"all\" or a list of variable names"
                    ),
                );
                InheritEnv::Base(Vec::new())
            }
            RawInheritEnv::Names(names) => {
                for name in names {
                    let stem = name.strip_suffix('*').unwrap_or(name);
                    if stem.is_empty() || stem.contains(['=', '\0', '*']) {
                        p.at(
                            raw.referenced,
                            format_args!("{label}.inherit_env: {name:?} is not a variable name (or a prefix ending in *)"),
                        );
                    }
                }
                InheritEnv::Base(names.clone())
            }
        }
    }

    fn stdio(
        &self,
        command: &Spanned<String>,
        label: &str,
        lookup: &Lookup,
        p: &mut Problems,
    ) -> Option<StdioConfig> {
        for (key, present) in [
            ("headers", !self.headers.is_empty()),
            ("transport", self.transport.is_some()),
            ("auth", self.auth.is_some()),
        ] {
            if present {
                p.at(
                    command.referenced,
                    format_args!("{label}.{key}: only remote (url) upstreams take {key}"),
                );
            }
        }
        let command_text = p.expand(command, &format!("{label}.command"), lookup)?;
        if command_text.trim().is_empty() {
            p.at(
                command.referenced,
                format_args!("{label}.command: is empty"),
            );
        }
        let args = self
            .args
            .iter()
            .filter_map(|a| p.expand(a, &format!("{label}.args"), lookup))
            .collect();
        let mut env = BTreeMap::new();
        for (key, value) in &self.env {
            if key.value.is_empty() || key.value.contains(['=', '\0']) {
                p.at(
                    key.referenced,
                    format_args!("{label}.env: {:?} is not a valid variable name", key.value),
                );
            }
            if let Some(v) = p.expand(
                value,
                &format!("{label}.env.{}", key.value.escape_debug()),
                lookup,
            ) {
                env.insert(key.value.clone(), Secret::new(v));
            }
        }
        let cwd = self
            .cwd
            .as_ref()
            .and_then(|c| p.expand(c, &format!("{label}.cwd"), lookup))
            .map(PathBuf::from);
        let inherit_env = self.inherit_env(label, p);
        let isolation = self.isolation(label, p);
        Some(StdioConfig {
            command: command_text,
            args,
            env,
            cwd,
            inherit_env,
            isolation,
        })
    }

    /// `isolation` (`shared` or `per-session`) and `max_instances`, which
    /// only `per-session` takes.
    fn isolation(&self, label: &str, p: &mut Problems) -> Isolation {
        let per_session = match self.isolation.as_ref().map(|i| (i, i.value.as_str())) {
            None | Some((_, "shared")) => false,
            Some((_, "per-session")) => true,
            Some((i, other)) => {
                p.at(
                    i.referenced,
                    format_args!(
                        "{label}.isolation: {other:?} is not \"shared\" or \"per-session\""
                    ),
                );
                return Isolation::Shared;
            }
        };
        let max_instances = p.count_or(
            self.max_instances.as_ref(),
            Isolation::DEFAULT_MAX_INSTANCES as u64,
            1,
            Isolation::MAX_MAX_INSTANCES as u64,
            &format!("{label}.max_instances"),
        );
        match (per_session, &self.max_instances) {
            (true, _) => Isolation::PerSession {
                max_instances: usize::try_from(max_instances).unwrap_or(usize::MAX),
            },
            (false, Some(max)) => {
                p.at(
                    max.referenced,
                    format_args!("{label}.max_instances: only applies with isolation: per-session"),
                );
                Isolation::Shared
            }
            (false, None) => Isolation::Shared,
        }
    }

    fn remote(
        &self,
        url: &Spanned<String>,
        label: &str,
        lookup: &Lookup,
        p: &mut Problems,
    ) -> Option<RemoteConfig> {
        let stdio_only = [
            ("args", !self.args.is_empty()),
            ("env", !self.env.is_empty()),
            ("cwd", self.cwd.is_some()),
            ("inherit_env", self.inherit_env.is_some()),
            ("isolation", self.isolation.is_some()),
            ("max_instances", self.max_instances.is_some()),
        ];
        for (key, present) in stdio_only {
            if present {
                p.at(
                    url.referenced,
                    format_args!("{label}.{key}: only stdio (command) upstreams take {key}"),
                );
            }
        }
        let url_text = p.expand(url, &format!("{label}.url"), lookup)?;
        let scheme_ok = url_text.starts_with("http://") || url_text.starts_with("https://");
        if !scheme_ok || reqwest::Url::parse(&url_text).is_err() {
            p.at(
                url.referenced,
                format_args!("{label}.url: {url_text:?} is not an http:// or https:// URL"),
            );
        }
        let mut headers = BTreeMap::new();
        for (key, value) in &self.headers {
            if reqwest::header::HeaderName::from_bytes(key.value.as_bytes()).is_err() {
                p.at(
                    key.referenced,
                    format_args!(
                        "{label}.headers: {:?} is not a valid header name",
                        key.value
                    ),
                );
            }
            if let Some(v) = p.expand(
                value,
                &format!("{label}.headers.{}", key.value.escape_debug()),
                lookup,
            ) {
                if reqwest::header::HeaderValue::from_str(&v).is_err() {
                    p.at(
                        value.referenced,
                        format_args!(
                            "{label}.headers.{}: the value is not a valid header value",
                            key.value.escape_debug()
                        ),
                    );
                }
                headers.insert(key.value.clone(), Secret::new(v));
            }
        }
        let mode = match self.transport.as_ref().map(|t| (t, t.value.as_str())) {
            None => RemoteMode::Auto,
            Some((_, "streamable-http")) => RemoteMode::StreamableHttp,
            Some((_, "sse")) => RemoteMode::Sse,
            Some((t, other)) => {
                p.at(
                    t.referenced,
                    format_args!(
                        "{label}.transport: {other:?} is not \"streamable-http\" or \"sse\""
                    ),
                );
                RemoteMode::Auto
            }
        };
        let authorize = headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization"));
        let auth = match &self.auth {
            Some(raw) => Some(raw.validate(label, &url_text, authorize, lookup, p)?),
            None => None,
        };
        if auth.is_some() && mode == RemoteMode::Sse {
            p.at(
                url.referenced,
                format_args!("{label}.auth: not available with transport: sse (the 2024-11-05 transport has no authorization flow)"),
            );
        }
        Some(RemoteConfig {
            url: url_text,
            headers,
            mode,
            auth,
        })
    }
}

impl RawHealth {
    fn validate(&self, label: &str, lookup: &Lookup, p: &mut Problems) -> Option<HealthConfig> {
        let defaults = HealthConfig::default();
        let what = |key: &str| format!("{label}.health.{key}");
        let ping_interval = p.duration_or(
            self.ping_interval.as_ref(),
            defaults.ping_interval,
            &what("ping_interval"),
            lookup,
        );
        let ping_timeout = p.duration_or(
            self.ping_timeout.as_ref(),
            defaults.ping_timeout,
            &what("ping_timeout"),
            lookup,
        );
        let restart_after = p.duration_or(
            self.restart_after.as_ref(),
            defaults.restart_after,
            &what("restart_after"),
            lookup,
        );
        let call_timeouts = p.count_or(
            self.call_timeouts.as_ref(),
            u64::from(defaults.call_timeouts),
            1,
            1000,
            &what("call_timeouts"),
        );
        Some(HealthConfig {
            ping_interval: ping_interval?,
            ping_timeout: ping_timeout?,
            restart_after: restart_after?,
            call_timeouts: u32::try_from(call_timeouts).unwrap_or(u32::MAX),
        })
    }
}

/// Why a name is not a valid upstream name; reads after the quoted name
/// ("upstream name \"X\" is empty").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum UpstreamNameError {
    #[error("is empty")]
    Empty,
    #[error("must start with a lowercase letter a-z, not {0:?}")]
    BadFirst(char),
    /// Holds the length in bytes.
    #[error("is {0} characters long; the limit is 32")]
    TooLong(usize),
    #[error("may contain only a-z, 0-9 and '-', not {0:?}")]
    BadChar(char),
}

/// Upstream names: `[a-z][a-z0-9-]{0,31}`.
pub(crate) fn check_upstream_name(name: &str) -> Result<(), UpstreamNameError> {
    let mut chars = name.chars();
    match chars.next() {
        None => return Err(UpstreamNameError::Empty),
        Some(c) if !c.is_ascii_lowercase() => return Err(UpstreamNameError::BadFirst(c)),
        Some(_) => {}
    }
    if name.len() > 32 {
        return Err(UpstreamNameError::TooLong(name.len()));
    }
    if let Some(c) = chars.find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')) {
        return Err(UpstreamNameError::BadChar(c));
    }
    Ok(())
}
