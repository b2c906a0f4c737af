//! The `mcpmux` command: parse the command line, set up logging, load the
//! config, then hand over to the library until a signal arrives.
#![forbid(unsafe_code)]

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use mcpmux::example_server::{self, ExampleServerArgs};
use mcpmux::{Config, ConfigError, Gateway, Lookup, UserConnections, logging};

/// jemalloc hands memory that stays unused back to the system after a few
/// seconds (a background thread purges it), so the gateway's footprint
/// follows its load down as well as up. glibc's malloc kept every page that
/// 2,000 short-lived sessions had touched.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// EX_USAGE from sysexits.h: the config or command line is wrong.
const EXIT_USAGE: u8 = 64;
/// How long `mcpmux stdio` waits for upstreams before reading its input.
const STDIO_STARTUP_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// What `mcpmux serve --help` adds after the options.
const SERVE_HELP: &str = "\
Defaults: without --config, the embedded demo config (two example upstreams);
without --listen or `listen` in the config, 127.0.0.1:8080. MCP is served at
http://ADDR/mcp (Streamable HTTP, both protocol eras) and /sse (legacy
HTTP+SSE); probes at /healthz and /readyz; /status and /metrics.

Reload: with --config, the file is watched; a change (or SIGHUP) applies
upstreams, shaping, policy, authentication and rate limits without a restart
(other settings take effect after one). A broken file is refused and the
running config stays. SIGTERM or SIGINT drains and stops.

Environment: RUST_LOG sets the log filter (default: info), e.g.
RUST_LOG=mcpmux=debug. Variables named in the config as ${VAR} or
${VAR:-default} are read at start and on each reload.

Exit status: 0 after a clean shutdown, 64 when the config is invalid (each
error with file:line:column; also when a view with `prefix_mode: never`
has colliding names once the upstreams started), 1 when the address cannot
be bound.";

#[derive(Parser)]
#[command(
    name = "mcpmux",
    version,
    about = "A standalone MCP gateway: many upstream servers, one namespaced view."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP at http://ADDR/mcp. Without --config, runs the embedded demo config.
    #[command(after_long_help = SERVE_HELP)]
    Serve {
        /// The YAML config file (`mcpmux check FILE` validates it).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Address to listen on, IP:PORT or HOST:PORT (a host name is
        /// resolved once, at start); overrides `listen` in the config.
        /// Default: the config's `listen`, else 127.0.0.1:8080.
        #[arg(long, value_parser = parse_listen)]
        listen: Option<SocketAddr>,
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
    },
    /// Speak MCP on stdin/stdout (for hosts that launch servers as commands);
    /// logs go to stderr. Without --config, runs the embedded demo config.
    Stdio {
        #[arg(long, short)]
        config: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
    },
    /// Validate a config file and exit: 0 when valid, 64 with the errors otherwise.
    Check {
        /// The YAML config file.
        #[arg(required_unless_present = "config", conflicts_with = "config")]
        file: Option<PathBuf>,
        /// The YAML config file (the same as FILE).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Print the mcpmux YAML for a host's MCP servers: Claude Desktop's
    /// claude_desktop_config.json, Cursor's or VS Code's mcp.json. Notes on
    /// what did not carry over, and the variables to set, go to stderr.
    Import {
        /// The host's config file (JSON).
        file: PathBuf,
    },
    /// Print the JSON Schema of the config file, for editors
    /// (yaml-language-server) to validate and complete it.
    Schema,
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
    /// Print the manual page (roff).
    Man,
    /// Run the bundled demo MCP server on stdin/stdout.
    ExampleServer(ExampleServerArgs),
    /// List or revoke the accounts users connected at `auth.mode: user`
    /// upstreams, in the token store (the gateway may be running or not).
    #[command(subcommand)]
    Connections(Connections),
    /// List or revoke the grants users gave hosts at the gateway's own
    /// login (`auth.oauth_server`), through a running gateway, with the
    /// admin key from the environment variable MCPMUX_ADMIN_KEY.
    #[command(subcommand)]
    Grants(Grants),
}

#[derive(Subcommand)]
enum Grants {
    /// Print one line per grant: user, client id, logins, consented
    /// (yes/no), last used (RFC 3339 UTC), tab-separated. Never a token.
    List {
        /// The gateway's URL (its base, or its /mcp endpoint).
        #[arg(long)]
        gateway: String,
        /// Only this user's grants.
        #[arg(long)]
        user: Option<String>,
        /// Print the JSON array instead.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a user's grants (and forget their consents): their hosts'
    /// tokens stop working and they log in again. Exit 1 when there was
    /// nothing to revoke.
    Revoke {
        /// The gateway's URL (its base, or its /mcp endpoint).
        #[arg(long)]
        gateway: String,
        /// The user (the client name their login gave).
        #[arg(long)]
        user: String,
        /// Only the grant to this host (client id).
        #[arg(long)]
        client_id: Option<String>,
    },
}

#[derive(Subcommand)]
enum Connections {
    /// Print one line per connection: upstream, client, connected at,
    /// expires at (RFC 3339 UTC, `-` for none), refreshable (yes/no),
    /// tab-separated. Never a token.
    List {
        /// The gateway's YAML config file (its `credentials` section and
        /// `session_store` locate the store).
        #[arg(long, short)]
        config: PathBuf,
        /// Only the connections at this upstream.
        #[arg(long)]
        upstream: Option<String>,
        /// Only the connections of this client (identity).
        #[arg(long)]
        client: Option<String>,
        /// Print a JSON array of {upstream, client, connected_at,
        /// expires_at, refreshable} instead.
        #[arg(long)]
        json: bool,
    },
    /// Disconnect your own account at an upstream through a running
    /// gateway, authenticated with your key or token from the environment
    /// variable MCPMUX_BEARER. Exit 1 when you had no connection there.
    Disconnect {
        /// The gateway's URL (its base, or its /mcp endpoint).
        #[arg(long)]
        gateway: String,
        /// The upstream (with auth.mode: user).
        #[arg(long)]
        upstream: String,
    },
    /// Remove a user's grant at an upstream and revoke it at the upstream's
    /// authorization server (best effort). Exit 1 when there is none.
    Revoke {
        /// The gateway's YAML config file.
        #[arg(long, short)]
        config: PathBuf,
        /// The upstream (with auth.mode: user).
        #[arg(long)]
        upstream: String,
        /// The client (identity) whose grant is revoked.
        #[arg(long)]
        client: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { file, config } => {
            let config = file.or(config).expect("clap requires one of them");
            check(&config)
        }
        Command::Import { file } => import(&file),
        Command::Connections(command) => connections(command),
        Command::Grants(command) => grants(command),
        Command::Schema => {
            print!("{}", mcpmux::CONFIG_SCHEMA);
            ExitCode::SUCCESS
        }
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "mcpmux", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man => {
            match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("mcpmux: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::ExampleServer(args) => {
            let _log = logging::init(logging::Format::Text);
            // One thread: a demo server's echo costs no thread hop.
            let runtime = one_thread_runtime();
            match runtime.block_on(example_server::run(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("example-server: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Serve {
            config,
            listen,
            log_format,
        } => {
            let cfg = match load(config.as_deref()) {
                Ok(cfg) => cfg,
                Err(e) => return config_failure(&e),
            };
            let _log = logging::init(log_format.into());
            mcpmux::raise_fd_limit();
            serve(cfg, listen, config)
        }
        Command::Stdio { config, log_format } => {
            let cfg = match load(config.as_deref()) {
                Ok(cfg) => cfg,
                Err(e) => return config_failure(&e),
            };
            let _log = logging::init(log_format.into());
            mcpmux::raise_fd_limit();
            serve_stdio(cfg, config)
        }
    }
}

/// `mcpmux check`: 0 when the file is valid, 64 with its errors.
fn check(config: &std::path::Path) -> ExitCode {
    match Config::load(config, &Lookup::from_process()) {
        Ok(cfg) => {
            println!(
                "{}: ok ({} upstreams)",
                config.display(),
                cfg.upstream_count()
            );
            ExitCode::SUCCESS
        }
        Err(e) => config_failure(&e),
    }
}

/// `mcpmux connections`: 0 when done; 64 for a config with no token
/// store, or an upstream users do not connect to; 1 when there was no
/// grant to revoke or the store failed.
fn connections(command: Connections) -> ExitCode {
    if let Connections::Disconnect { gateway, upstream } = &command {
        return disconnect(gateway, upstream);
    }
    let (Connections::List { config, .. } | Connections::Revoke { config, .. }) = &command else {
        unreachable!("handled above");
    };
    let cfg = match Config::load(config, &Lookup::from_process()) {
        Ok(cfg) => cfg,
        Err(e) => return config_failure(&e),
    };
    let store = match UserConnections::open(&cfg) {
        Ok(store) => store,
        Err(e) => return connections_failure(&e),
    };
    let runtime = one_thread_runtime();
    let done = runtime.block_on(async {
        match &command {
            Connections::List {
                upstream,
                client,
                json,
                ..
            } => {
                let list = store.list(upstream.as_deref(), client.as_deref()).await?;
                if let Some(path) = store.missing_file() {
                    eprintln!(
                        "mcpmux: note: there is no token file at {} (yet)",
                        path.display()
                    );
                }
                if *json {
                    let text = serde_json::to_string_pretty(&list).expect("connections serialize");
                    println!("{text}");
                } else {
                    for connection in &list {
                        println!("{connection}");
                    }
                }
            }
            Connections::Revoke {
                upstream, client, ..
            } => {
                let revocation = store.revoke(upstream, client).await?;
                if let Some(note) = revocation.note() {
                    eprintln!("mcpmux: {note}");
                }
                println!("revoked {upstream} for {client}");
            }
            Connections::Disconnect { .. } => unreachable!("handled above"),
        }
        Ok(())
    });
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => connections_failure(&e),
    }
}

/// `mcpmux connections disconnect`: 0 when done, 1 when there was no
/// connection or the gateway refused, 64 without MCPMUX_BEARER.
fn disconnect(gateway: &str, upstream: &str) -> ExitCode {
    let bearer = std::env::var("MCPMUX_BEARER").unwrap_or_default();
    let runtime = one_thread_runtime();
    match runtime.block_on(mcpmux::disconnect_own(gateway, &bearer, upstream)) {
        Ok(()) => {
            println!("disconnected from {upstream}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mcpmux: {e}");
            match e.is_usage() {
                true => ExitCode::from(EXIT_USAGE),
                false => ExitCode::FAILURE,
            }
        }
    }
}

/// Unix milliseconds as RFC 3339 UTC, to the second.
fn rfc3339(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// `mcpmux grants`: 0 when done, 1 when the gateway refused (or there was
/// nothing to revoke), 64 without MCPMUX_ADMIN_KEY or with a bad URL.
fn grants(command: Grants) -> ExitCode {
    let key = std::env::var("MCPMUX_ADMIN_KEY").unwrap_or_default();
    let runtime = one_thread_runtime();
    let done = runtime.block_on(async {
        match &command {
            Grants::List {
                gateway,
                user,
                json,
            } => {
                let list = mcpmux::list_grants(gateway, &key, user.as_deref()).await?;
                if *json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&list).expect("grants serialize")
                    );
                } else {
                    for grant in &list {
                        println!(
                            "{}\t{}\t{}\t{}\t{}",
                            grant.user,
                            grant.client_id,
                            grant.logins,
                            if grant.consented { "yes" } else { "no" },
                            rfc3339(grant.used_ms)
                        );
                    }
                }
                Ok(true)
            }
            Grants::Revoke {
                gateway,
                user,
                client_id,
            } => {
                let revoked =
                    mcpmux::revoke_grants(gateway, &key, user, client_id.as_deref()).await?;
                println!("revoked {revoked} login(s) of {user}");
                Ok(revoked > 0)
            }
        }
    });
    match done {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            let e: mcpmux::GrantsError = e;
            eprintln!("mcpmux: {e}");
            match e.is_usage() {
                true => ExitCode::from(EXIT_USAGE),
                false => ExitCode::FAILURE,
            }
        }
    }
}

fn connections_failure(error: &mcpmux::ConnectionsError) -> ExitCode {
    eprintln!("mcpmux: {error}");
    match error.is_usage() {
        true => ExitCode::from(EXIT_USAGE),
        false => ExitCode::FAILURE,
    }
}

/// `mcpmux import`: the YAML on stdout, notes and variables on stderr.
fn import(file: &std::path::Path) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("mcpmux: cannot read {}: {e}", file.display());
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match mcpmux::import::convert(&text) {
        Ok(imported) => {
            print!("{}", imported.yaml);
            for note in &imported.notes {
                eprintln!("note: {note}");
            }
            if !imported.variables.is_empty() {
                eprintln!(
                    "set these variables where mcpmux runs (the host config had the values):"
                );
                for (name, _) in &imported.variables {
                    eprintln!("  {name}");
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mcpmux: {}: {e}", file.display());
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// `--listen`: IP:PORT, or HOST:PORT resolved now (the first address).
fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let mut addrs = text
        .to_socket_addrs()
        .map_err(|e| format!("{text:?} is not IP:PORT or HOST:PORT ({e})"))?;
    addrs
        .next()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}

/// The config file, or the embedded demo config without one.
fn load(path: Option<&std::path::Path>) -> Result<Config, ConfigError> {
    let lookup = Lookup::from_process();
    match path {
        Some(path) => Config::load(path, &lookup),
        None => Config::parse(mcpmux::DEMO_CONFIG, "<embedded demo config>", &lookup),
    }
}

/// Serves MCP on stdin/stdout; reloads `config_path` on change or SIGHUP.
fn serve_stdio(cfg: Config, config_path: Option<PathBuf>) -> ExitCode {
    runtime().block_on(async move {
        let gateway = Gateway::new(cfg);
        match config_path {
            Some(path) => gateway.watch_config(path),
            None => absorb_hangups(),
        }
        // Answer the host's first tools/list with every upstream that can start.
        if tokio::time::timeout(STDIO_STARTUP_WAIT, gateway.settled())
            .await
            .is_err()
        {
            tracing::warn!("upstreams still starting; serving a partial view until they are ready");
        }
        let served = gateway
            .serve_stdio(tokio::io::stdin(), tokio::io::stdout(), shutdown_signal())
            .await;
        gateway.shutdown().await;
        match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "stdio transport failed");
                ExitCode::FAILURE
            }
        }
    })
}

fn config_failure(error: &ConfigError) -> ExitCode {
    for line in error.lines() {
        eprintln!("mcpmux: config error: {line}");
    }
    ExitCode::from(EXIT_USAGE)
}

/// Serves until SIGTERM/SIGINT; reloads `config_path` on change or SIGHUP.
fn serve(cfg: Config, listen: Option<SocketAddr>, config_path: Option<PathBuf>) -> ExitCode {
    let addr = listen.or(cfg.listen()).unwrap_or_else(|| {
        mcpmux::DEFAULT_LISTEN
            .parse()
            .expect("default address is valid")
    });
    runtime().block_on(async move {
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(%addr, error = %e, "cannot listen");
                return ExitCode::FAILURE;
            }
        };
        if config_path.is_none() {
            absorb_hangups();
        }
        let file = config_path.as_ref().map_or_else(
            || "(embedded demo config)".to_owned(),
            |p| p.display().to_string(),
        );
        match mcpmux::run(cfg, listener, shutdown_signal(), config_path).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(mcpmux::RunError::Names(issues)) => {
                // The config cannot hold with these upstreams: a config error.
                for issue in issues {
                    eprintln!(
                        "mcpmux: config error: {file}:{}:{}: {}",
                        issue.line, issue.column, issue.message
                    );
                }
                ExitCode::from(EXIT_USAGE)
            }
            Err(e) => {
                tracing::error!(error = %e, "gateway failed");
                ExitCode::FAILURE
            }
        }
    })
}

/// A runtime on this thread alone: for commands that make a few requests,
/// and the demo server.
fn one_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
}

/// Without a config file there is nothing to reload: SIGHUP is logged, not
/// fatal (its default action would end the process).
fn absorb_hangups() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(mut hangup) => {
            // Not on a tracker: it lives as long as the process.
            tokio::spawn(async move {
                while hangup.recv().await.is_some() {
                    tracing::info!("SIGHUP received; no --config file to reload");
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot handle SIGHUP"),
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}

impl From<LogFormat> for logging::Format {
    fn from(format: LogFormat) -> Self {
        match format {
            LogFormat::Text => logging::Format::Text,
            LogFormat::Json => logging::Format::Json,
        }
    }
}
