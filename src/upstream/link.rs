//! The transport of one upstream life: a child process or an HTTP session.
//!
//! The supervisor sees only this enum: start it, wait for it to end, stop it.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use super::LinkError;
use super::connection::Connection;
use super::message::Outgoing;
use super::transport::http::HttpLink;
use super::transport::stdio::StdioChild;
use crate::config::Transport;

pub(crate) enum Link {
    Stdio(Box<StdioChild>),
    Http(HttpLink),
}

impl Link {
    /// Starts the transport; messages it receives go to `conn`, messages
    /// from `outbound` go to the upstream. Its I/O tasks run on `tasks`.
    pub(crate) fn start(
        upstream: Arc<str>,
        transport: &Transport,
        conn: Arc<Connection>,
        outbound: mpsc::Receiver<Outgoing>,
        noise: Arc<super::noise::NoiseFilter>,
        tasks: &TaskTracker,
        bearer: Option<Arc<crate::credentials::cell::TokenCell>>,
    ) -> Result<Link, LinkError> {
        match transport {
            Transport::Stdio(cfg) => StdioChild::spawn(upstream, cfg, conn, outbound, noise, tasks)
                .map(|child| Link::Stdio(Box::new(child)))
                .map_err(|source| LinkError::Spawn {
                    command: cfg.command.clone(),
                    source,
                }),
            Transport::Remote(cfg) => {
                HttpLink::start(upstream, cfg, conn, outbound, tasks, bearer).map(Link::Http)
            }
        }
    }

    /// The child's process id (stdio only).
    pub(crate) fn pid(&self) -> Option<u32> {
        match self {
            Link::Stdio(child) => child.pid(),
            Link::Http(_) => None,
        }
    }

    /// Waits until the transport ends, and says why.
    pub(crate) async fn wait_ended(&mut self) -> String {
        match self {
            Link::Stdio(child) => format!("its process {}", child.wait_ended().await),
            Link::Http(link) => link.wait_ended().await,
        }
    }

    /// Whether the upstream should be re-initialized at once rather than
    /// after a backoff (an HTTP server that forgot our session).
    pub(crate) fn restart_now(&self) -> bool {
        match self {
            Link::Stdio(_) => false,
            Link::Http(link) => link.session_expired(),
        }
    }

    /// Stops the transport and releases everything it holds.
    pub(crate) async fn stop(&mut self) -> String {
        match self {
            Link::Stdio(child) => child.stop().await,
            Link::Http(link) => link.stop().await,
        }
    }
}
