//! The YAML configuration: types, defaults, `${VAR}` expansion and validation.
//!
//! Loading is two steps. [`RawConfig`] mirrors the file (every struct denies
//! unknown keys and keeps the YAML location of the values it validates), then
//! [`RawConfig::validate`] expands variables, checks names and ranges, and
//! builds the typed [`Config`] the rest of the gateway uses. Every error names
//! `file:line:column`. Secrets (upstream `env` values) live in [`Secret`],
//! whose `Debug` prints a mask.

mod auth;
mod endpoints;
mod expand;
mod oauth_server;
mod pages;
mod policy;
mod problems;
mod protect;
mod secret;
mod shape;
mod telemetry;
mod upstream;
mod upstream_auth;

#[cfg(test)]
pub(crate) use auth::ApiKey;
pub(crate) use auth::{AdminAccess, AuthConfig, AuthSettings, JwtConfig, JwtKeys};
pub(crate) use endpoints::{
    EndpointConfig, MAX_SEARCH_RESULTS, Naming, PrefixMode, SearchConfig, naming_issue,
};
pub(crate) use oauth_server::{
    ClaimNames, Consent, OAuthServerConfig, ProviderConfig, Registration, signing_algorithm,
};
pub(crate) use telemetry::TracingConfig;
use upstream::RawUpstream;
#[cfg(test)]
use upstream::check_upstream_name;
pub(crate) use upstream_auth::{
    ApiKeyClients, AuthMode, AuthServer, CredentialsConfig, UpstreamAuth,
};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indexmap::IndexMap;
use serde::Deserialize;
use serde_saphyr::Spanned;

pub use expand::Lookup;
pub(crate) use pages::PageSizes;
pub(crate) use policy::{Access, PolicyConfig, RuleConfig};
use problems::Problems;
pub(crate) use protect::{BreakerConfig, CacheConfig, LimitsConfig, ProtectConfig};
pub(crate) use secret::{Secret, StateKey, sha256};
pub(crate) use shape::{ItemOverride, ListShape, ShapeConfig};

/// The config `mcpmux serve` runs when no `--config` is given: two copies of
/// the bundled example server, started as stdio children.
pub const DEMO_CONFIG: &str = include_str!("config/demo.yaml");

/// Where the address comes from when neither the CLI nor the file sets one.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// A config that failed to load. Each variant renders as one line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{}", render_issues(.file, .issues))]
    Invalid { file: String, issues: Vec<Issue> },
}

/// One problem in a config file, at a line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub line: u64,
    pub column: u64,
    pub message: String,
}

fn render_issues(file: &str, issues: &[Issue]) -> String {
    issues
        .iter()
        .map(|i| format!("{file}:{}:{}: {}", i.line, i.column, i.message))
        .collect::<Vec<_>>()
        .join("\n")
}

impl ConfigError {
    /// The problems found, one per line (a read error is one line too).
    pub fn lines(&self) -> Vec<String> {
        self.to_string().lines().map(str::to_owned).collect()
    }
}

/// A validated configuration, from [`Config::load`] or [`Config::parse`].
/// Every problem in the file is reported at once, with its line and column.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Address to serve on, if the file sets one.
    pub(crate) listen: Option<SocketAddr>,
    /// Upstream servers in file order (the order breaks naming ties).
    pub(crate) upstreams: Vec<UpstreamConfig>,
    pub(crate) sessions: SessionConfig,
    pub(crate) http: HttpConfig,
    /// Items per page of each merged list.
    pub(crate) page_size: PageSizes,
    /// How long shutdown waits for in-flight requests and for children.
    pub(crate) shutdown_grace: Duration,
    /// How clients authenticate (or that they do not).
    pub(crate) auth: AuthConfig,
    /// Requests per second per client; none when unlimited.
    pub(crate) rate_limit: Option<RateLimit>,
    /// Who may see and use what; none: everything, for everyone.
    pub(crate) policy: Option<PolicyConfig>,
    /// Seals the `requestState` given to 2026-07-28 clients while a
    /// 2025-era upstream waits for their input; none: a random key per
    /// process.
    pub(crate) request_state_key: Option<StateKey>,
    /// Where session state is shared with other replicas
    /// (`session_store: redis://...`); none: sessions live in this process.
    pub(crate) session_store: Option<Secret>,
    /// OpenTelemetry trace export (off by default).
    pub(crate) tracing: TracingConfig,
    /// Where upstream tokens of users who connected their accounts are kept.
    pub(crate) credentials: CredentialsConfig,
    /// How the whole view (`/mcp`) names tools and prompts; endpoints
    /// inherit it unless they set their own.
    pub(crate) naming: Naming,
    /// More views, each at `/mcp/<name>`, in file order.
    pub(crate) endpoints: Vec<EndpointConfig>,
    /// How resource URIs of upstreams without their own `namespace_uris`
    /// are exposed, the same in every view (URIs are subscription keys).
    pub(crate) uri_naming: Naming,
}

/// A per-client request rate: `requests_per_second`, after a `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RateLimit {
    pub requests_per_second: u32,
    pub burst: u32,
}

/// Downstream session settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SessionConfig {
    /// A legacy session with no request for this long is removed.
    pub idle_timeout: Duration,
    /// Most sessions at once. At the limit, the least recently used session
    /// with no open stream and no call in flight is evicted; when there is
    /// none, a new session is refused with 503.
    pub max: usize,
    /// Most sessions one client (remote address) holds at once; its least
    /// recently used idle session makes room for a new one.
    pub max_per_client: usize,
}

/// Downstream HTTP settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HttpConfig {
    /// Largest accepted request body; larger ones get 413.
    pub max_body_bytes: usize,
    /// Extra `Origin` values accepted besides loopback origins.
    pub allowed_origins: Vec<String>,
    /// Interval of SSE keep-alive comments on open streams.
    pub sse_keepalive: Duration,
    /// `Host` header values accepted besides loopback names when the
    /// gateway listens on a loopback address (DNS-rebinding protection).
    /// When it listens elsewhere, only these are checked (none: no check).
    pub allowed_hosts: Vec<String>,
    /// A connection must send a request's complete headers within this
    /// time of its first byte.
    pub header_read_timeout: Duration,
    /// A request body must arrive within this time (408 otherwise).
    pub body_read_timeout: Duration,
    /// A connection with no request in progress is closed after this long.
    pub idle_timeout: Duration,
    /// Most open connections (streams included); more wait briefly, then
    /// evict an idle connection, then are refused with 503.
    pub max_connections: usize,
}

/// One upstream MCP server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UpstreamConfig {
    /// `[a-z][a-z0-9-]{0,31}`; also the resource URI prefix.
    pub name: String,
    /// Prefix for tool and prompt names; `""` exposes original names.
    pub prefix: String,
    pub transport: Transport,
    /// Per-request deadline; progress notifications restart it.
    pub timeout: Duration,
    /// Which protocol era to speak to it.
    pub era: EraChoice,
    /// `true`: expose resource URIs as `{upstream}+{uri}`; `false`: unchanged
    /// (a URI no namespaced upstream claims is routed to the first such
    /// upstream that lists it, or the first one); none: as the top-level
    /// `namespace_uris` mode decides (by default, namespaced).
    pub namespace_uris: Option<bool>,
    /// `/readyz` fails while a required upstream is not ready.
    pub required: bool,
    /// How long a call waits for this upstream while it is starting before
    /// it is refused with an error naming the upstream and its state.
    pub start_wait: Duration,
    pub health: HealthConfig,
    /// Which of its items are exposed, and how (the same for every client).
    /// A reload that changes only this does not restart the upstream.
    pub shape: ShapeConfig,
    /// The roots it gets when it asks for roots outside any client's call.
    pub roots: Vec<Root>,
    /// `limits`, `circuit_breaker` and `cache`.
    pub protect: ProtectConfig,
}

/// A root offered to an upstream (`roots/list`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Root {
    /// A `file://` URI.
    pub uri: String,
    pub name: Option<String>,
}

impl UpstreamConfig {
    /// The `roots/list` result for requests no client's call caused.
    pub(crate) fn roots_result(&self) -> String {
        let roots: Vec<serde_json::Value> = self
            .roots
            .iter()
            .map(|root| match &root.name {
                Some(name) => serde_json::json!({ "uri": root.uri, "name": name }),
                None => serde_json::json!({ "uri": root.uri }),
            })
            .collect();
        serde_json::json!({ "roots": roots }).to_string()
    }
}

/// How the gateway notices an upstream that is up but does not answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HealthConfig {
    /// A `ping` is sent this often while the upstream is up.
    pub ping_interval: Duration,
    /// A ping not answered within this time marks the upstream unresponsive.
    pub ping_timeout: Duration,
    /// A stdio child unresponsive this long is killed and restarted.
    pub restart_after: Duration,
    /// This many calls in a row timing out trigger a ping at once.
    pub call_timeouts: u32,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            ping_interval: Duration::from_secs(15),
            ping_timeout: Duration::from_secs(5),
            restart_after: Duration::from_secs(60),
            call_timeouts: 3,
        }
    }
}

/// How the gateway picks the protocol era of an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EraChoice {
    /// Probe with `server/discover`; fall back to `initialize`.
    Auto,
    /// Always `initialize` (2025 era).
    Legacy,
    /// Always 2026-07-28; an upstream that does not discover is an error.
    Modern,
}

/// How the gateway reaches an upstream.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub(crate) enum Transport {
    Stdio(StdioConfig),
    Remote(RemoteConfig),
}

/// A remote MCP server reached over HTTP.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RemoteConfig {
    pub url: String,
    /// Sent on every request; values may hold credentials.
    pub headers: BTreeMap<String, Secret>,
    pub mode: RemoteMode,
    /// How the gateway obtains its bearer token (none: `headers` only).
    pub auth: Option<UpstreamAuth>,
}

/// Which HTTP transport a remote upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RemoteMode {
    /// Streamable HTTP, falling back to legacy HTTP+SSE when the server
    /// refuses the initialize POST with 400, 404 or 405 (the spec's rule).
    Auto,
    StreamableHttp,
    /// The 2024-11-05 HTTP+SSE transport.
    Sse,
}

/// A local MCP server started as a child process.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StdioConfig {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, Secret>,
    pub cwd: Option<PathBuf>,
    /// Which of the gateway's own environment variables the child sees.
    pub inherit_env: InheritEnv,
    /// One child for everyone, or one per downstream session.
    pub isolation: Isolation,
}

/// `isolation:` of a stdio upstream: who shares its child process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isolation {
    /// One child serves every session (the default).
    Shared,
    /// Each 2025-era session gets a child of its own, started on its first
    /// call and stopped when it ends, at most `max_instances` at a time;
    /// the shared child still provides the catalog and serves stateless
    /// requests.
    PerSession { max_instances: usize },
}

impl Isolation {
    /// `max_instances` when none is configured: each instance is a whole
    /// process (a browser, a shell), so the default is modest.
    pub(crate) const DEFAULT_MAX_INSTANCES: usize = 16;
    /// The highest `max_instances` accepted (the default `sessions.max`).
    pub(crate) const MAX_MAX_INSTANCES: usize = 10_000;
}

/// The variables of the gateway's environment a stdio child inherits.
/// Its own `env` is always added on top.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InheritEnv {
    /// [`BASE_ENV`] plus these names (a trailing `*` matches a prefix).
    Base(Vec<String>),
    /// The whole environment of the gateway (secrets then cross upstreams).
    All,
}

/// What every stdio child inherits: enough to find programs, a home, a
/// locale, a time zone and a temp directory, and nothing that is a secret.
pub(crate) const BASE_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR", "TEMP",
    "TMP",
];

impl InheritEnv {
    /// Whether the child inherits variable `name`.
    pub(crate) fn admits(&self, name: &str) -> bool {
        let matches = |pattern: &str| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == pattern,
        };
        match self {
            InheritEnv::All => true,
            InheritEnv::Base(extra) => {
                BASE_ENV.iter().any(|p| matches(p)) || extra.iter().any(|p| matches(p))
            }
        }
    }
}

impl Config {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path, lookup: &Lookup) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            file: file.clone(),
            source,
        })?;
        Self::parse(&text, &file, lookup)
    }

    /// Parses and validates config text; `file` names it in errors.
    pub fn parse(text: &str, file: &str, lookup: &Lookup) -> Result<Config, ConfigError> {
        let invalid = |issues| ConfigError::Invalid {
            file: file.to_owned(),
            issues,
        };
        let raw: RawConfig =
            serde_saphyr::from_str(text).map_err(|e| invalid(vec![yaml_issue(&e)]))?;
        raw.validate(lookup).map_err(invalid)
    }

    /// The address the file says to serve on, if it says one.
    pub fn listen(&self) -> Option<SocketAddr> {
        self.listen
    }

    /// How many upstream servers it configures.
    pub fn upstream_count(&self) -> usize {
        self.upstreams.len()
    }
}

fn yaml_issue(err: &serde_saphyr::Error) -> Issue {
    let (line, column) = err.location().map_or((1, 1), |l| (l.line(), l.column()));
    let rendered = err.without_snippet().to_string();
    // The library appends its own location; keep the message on one line without it.
    let message = rendered.lines().next().unwrap_or("invalid YAML").to_owned();
    let message = match message.rfind(" at line ") {
        Some(cut) => message[..cut].to_owned(),
        None => message,
    };
    Issue {
        line,
        column,
        message,
    }
}

/// The file as written, before validation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    listen: Option<Spanned<String>>,
    #[serde(default)]
    upstreams: Option<Spanned<IndexMap<Spanned<String>, RawUpstream>>>,
    #[serde(default)]
    sessions: Option<RawSessions>,
    #[serde(default)]
    http: Option<RawHttp>,
    #[serde(default)]
    page_size: Option<Spanned<pages::RawPageSize>>,
    #[serde(default)]
    shutdown_grace: Option<Spanned<String>>,
    #[serde(default)]
    auth: Option<auth::RawAuth>,
    #[serde(default)]
    rate_limit: Option<RawRateLimit>,
    #[serde(default)]
    policy: Option<policy::RawPolicy>,
    #[serde(default)]
    request_state: Option<RawRequestState>,
    #[serde(default)]
    session_store: Option<Spanned<String>>,
    tracing: Option<telemetry::RawTracing>,
    #[serde(default)]
    credentials: Option<upstream_auth::RawCredentials>,
    #[serde(default)]
    prefix_mode: Option<Spanned<String>>,
    #[serde(default)]
    namespace_uris: Option<Spanned<String>>,
    #[serde(default)]
    endpoints: Option<Spanned<IndexMap<Spanned<String>, endpoints::RawEndpoint>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequestState {
    key: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    requests_per_second: Spanned<u64>,
    #[serde(default)]
    burst: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSessions {
    #[serde(default)]
    idle_timeout: Option<Spanned<String>>,
    #[serde(default)]
    max: Option<Spanned<u64>>,
    #[serde(default)]
    max_per_client: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    #[serde(default)]
    max_body_bytes: Option<Spanned<u64>>,
    #[serde(default)]
    allowed_origins: Vec<Spanned<String>>,
    #[serde(default)]
    sse_keepalive: Option<Spanned<String>>,
    #[serde(default)]
    allowed_hosts: Vec<Spanned<String>>,
    #[serde(default)]
    header_read_timeout: Option<Spanned<String>>,
    #[serde(default)]
    body_read_timeout: Option<Spanned<String>>,
    #[serde(default)]
    idle_timeout: Option<Spanned<String>>,
    #[serde(default)]
    max_connections: Option<Spanned<u64>>,
}

impl RawConfig {
    fn validate(self, lookup: &Lookup) -> Result<Config, Vec<Issue>> {
        let mut p = Problems { issues: Vec::new() };

        let listen = self.listen.as_ref().and_then(|l| {
            let text = p.expand(l, "listen", lookup)?;
            // A host name is resolved once, here (the first address).
            let resolved = text.parse::<SocketAddr>().ok().or_else(|| {
                std::net::ToSocketAddrs::to_socket_addrs(text.as_str())
                    .ok()
                    .and_then(|mut addrs| addrs.next())
            });
            if resolved.is_none() {
                p.at(
                    l.referenced,
                    format_args!(
                        "listen: {text:?} is not an IP:port or host:port address such as \"127.0.0.1:8080\" or \"localhost:8080\""
                    ),
                );
            }
            resolved
        });

        let mut upstreams = Vec::new();
        match &self.upstreams {
            Some(map) if !map.value.is_empty() => {
                for (name, raw) in &map.value {
                    if let Some(upstream) = raw.validate(name, lookup, &mut p) {
                        upstreams.push(upstream);
                    }
                }
            }
            Some(map) => p.at(
                map.referenced,
                "upstreams: at least one upstream is required",
            ),
            None => p.issues.push(Issue {
                line: 1,
                column: 1,
                message: "upstreams: missing; list at least one upstream server".into(),
            }),
        }

        let idle_timeout = self
            .sessions
            .as_ref()
            .and_then(|s| s.idle_timeout.as_ref())
            .map_or(Some(Duration::from_secs(30 * 60)), |d| {
                p.duration(d, "sessions.idle_timeout", lookup)
            });

        let max_sessions = match self.sessions.as_ref().and_then(|s| s.max.as_ref()) {
            None => 10_000,
            Some(v) if v.value == 0 => {
                p.at(v.referenced, "sessions.max: must be at least 1");
                0
            }
            Some(v) => usize::try_from(v.value).unwrap_or(usize::MAX),
        };
        let max_per_client = p.count_or(
            self.sessions
                .as_ref()
                .and_then(|s| s.max_per_client.as_ref()),
            1000,
            1,
            u64::MAX,
            "sessions.max_per_client",
        );
        let http = self.http.as_ref();
        let header_read_timeout = p.duration_or(
            http.and_then(|h| h.header_read_timeout.as_ref()),
            Duration::from_secs(10),
            "http.header_read_timeout",
            lookup,
        );
        let body_read_timeout = p.duration_or(
            http.and_then(|h| h.body_read_timeout.as_ref()),
            Duration::from_secs(30),
            "http.body_read_timeout",
            lookup,
        );
        let http_idle_timeout = p.duration_or(
            http.and_then(|h| h.idle_timeout.as_ref()),
            Duration::from_secs(60),
            "http.idle_timeout",
            lookup,
        );
        let max_connections = p.count_or(
            http.and_then(|h| h.max_connections.as_ref()),
            4096,
            1,
            1_000_000,
            "http.max_connections",
        );
        let allowed_hosts = http
            .map(|h| h.allowed_hosts.iter())
            .into_iter()
            .flatten()
            .filter_map(|o| p.expand(o, "http.allowed_hosts", lookup))
            .collect();
        let max_body_bytes = match self.http.as_ref().and_then(|h| h.max_body_bytes.as_ref()) {
            None => 4 * 1024 * 1024,
            Some(v) if v.value < 1024 => {
                p.at(v.referenced, "http.max_body_bytes: must be at least 1024");
                0
            }
            Some(v) => usize::try_from(v.value).unwrap_or(usize::MAX),
        };
        let allowed_origins = self
            .http
            .as_ref()
            .map(|h| h.allowed_origins.iter())
            .into_iter()
            .flatten()
            .filter_map(|o| p.expand(o, "http.allowed_origins", lookup))
            .collect();

        let sse_keepalive = self
            .http
            .as_ref()
            .and_then(|h| h.sse_keepalive.as_ref())
            .map_or(Some(Duration::from_secs(15)), |d| {
                p.duration(d, "http.sse_keepalive", lookup)
            });
        let page_size = PageSizes::from_raw(self.page_size.as_ref(), &mut p);
        let shutdown_grace = self
            .shutdown_grace
            .as_ref()
            .map_or(Some(Duration::from_secs(10)), |d| {
                p.duration(d, "shutdown_grace", lookup)
            });

        let auth = match &self.auth {
            Some(raw) => raw.validate(lookup, &mut p),
            None => {
                p.issues.push(Issue {
                    line: 1,
                    column: 1,
                    message: "auth: missing; configure api_keys or jwt (see config/secure.yaml), or write `auth: { mode: off }` to serve without client authentication".into(),
                });
                None
            }
        };

        let rate_limit = self.rate_limit.as_ref().map(|r| {
            let per_second = p.count_or(
                Some(&r.requests_per_second),
                1,
                1,
                1_000_000,
                "rate_limit.requests_per_second",
            );
            let burst = p.count_or(
                r.burst.as_ref(),
                per_second,
                1,
                1_000_000,
                "rate_limit.burst",
            );
            RateLimit {
                requests_per_second: u32::try_from(per_second).unwrap_or(u32::MAX),
                burst: u32::try_from(burst).unwrap_or(u32::MAX),
            }
        });

        let policy = self.policy.as_ref().map(|raw| raw.validate(&mut p));

        let request_state_key = self.request_state.as_ref().and_then(|raw| {
            let text = p.expand(&raw.key, "request_state.key", lookup)?;
            StateKey::parse(&text)
                .map_err(|why| {
                    p.at(
                        raw.key.referenced,
                        format_args!(
                            "request_state.key: {why} (make one with `openssl rand -base64 32`)"
                        ),
                    );
                })
                .ok()
        });

        let session_store = self.session_store.as_ref().and_then(|raw| {
            let url = p.expand(raw, "session_store", lookup)?;
            match url.strip_prefix("redis://") {
                Some(rest) if !rest.is_empty() && ::redis::Client::open(url.as_str()).is_ok() => {
                    Some(Secret::new(url))
                }
                _ => {
                    p.at(
                        raw.referenced,
                        "session_store: must be a redis:// URL (redis://[user:password@]host[:port][/db])",
                    );
                    None
                }
            }
        });
        let tracing = self
            .tracing
            .as_ref()
            .map(|raw| raw.validate(lookup, &mut p))
            .unwrap_or_default();

        let credentials = self
            .credentials
            .as_ref()
            .map(|raw| raw.validate(lookup, &mut p))
            .unwrap_or_else(|| CredentialsConfig {
                path: upstream_auth::DEFAULT_TOKEN_FILE.into(),
                ..CredentialsConfig::default()
            });
        upstream_auth::check_identity_needs(
            self.upstreams.as_ref().map(|m| &m.value),
            &auth,
            &credentials,
            &mut p,
        );
        // A generated signing key is kept sealed with `credentials.key`.
        if let (Some(AuthConfig::On(settings)), Some(raw)) = (&auth, &self.auth)
            && let Some(server) = &settings.oauth_server
            && server.signing_keys.is_empty()
            && credentials.key.is_none()
            && let Some(at) = raw.oauth_server_at()
        {
            p.at(
                at,
                "auth.oauth_server: give signing_keys, or set credentials.key so the generated signing key can be stored sealed",
            );
        }

        let naming = endpoints::naming(self.prefix_mode.as_ref(), "prefix_mode", &mut p);
        let uri_naming = endpoints::naming(self.namespace_uris.as_ref(), "namespace_uris", &mut p);
        let upstream_names: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
        let endpoints = self
            .endpoints
            .as_ref()
            .map(|raw| endpoints::validate(raw, &upstream_names, auth.as_ref(), naming, &mut p))
            .unwrap_or_default();

        if !p.issues.is_empty() {
            p.issues.sort_by_key(|i| (i.line, i.column));
            return Err(p.issues);
        }
        Ok(Config {
            listen,
            upstreams,
            sessions: SessionConfig {
                idle_timeout: idle_timeout.unwrap_or_default(),
                max: max_sessions,
                max_per_client: usize::try_from(max_per_client).unwrap_or(usize::MAX),
            },
            http: HttpConfig {
                max_body_bytes,
                allowed_origins,
                sse_keepalive: sse_keepalive.unwrap_or_default(),
                allowed_hosts,
                header_read_timeout: header_read_timeout.unwrap_or_default(),
                body_read_timeout: body_read_timeout.unwrap_or_default(),
                idle_timeout: http_idle_timeout.unwrap_or_default(),
                max_connections: usize::try_from(max_connections).unwrap_or(usize::MAX),
            },
            page_size,
            shutdown_grace: shutdown_grace.unwrap_or_default(),
            auth: auth.unwrap_or(AuthConfig::Off),
            rate_limit,
            policy,
            request_state_key,
            session_store,
            tracing,
            credentials,
            naming,
            endpoints,
            uri_naming,
        })
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
