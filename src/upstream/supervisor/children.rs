//! How the pools of an upstream start their child supervisors: a
//! session's own instance (`isolation: per-session`) and an identity's own
//! session (an `auth.mode` that acts as each caller), each a supervisor
//! like the shared one, sharing its parts.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::super::{Interest, UpstreamEvents, identities, isolated, noise};
use super::{Role, Supervisor, new_handle};
use crate::catalog::CatalogStore;
use crate::config::UpstreamConfig;
use crate::credentials::UpstreamCredentials;
use crate::credentials::cell::TokenCell;

/// What a child supervisor (a session's instance, an identity's session)
/// shares with the upstream's own: cloned into each pool's starter.
#[derive(Clone)]
pub(super) struct Parts {
    pub(super) config: UpstreamConfig,
    pub(super) catalog: Arc<CatalogStore>,
    pub(super) events: Arc<dyn UpstreamEvents>,
    pub(super) interest: Arc<Interest>,
    pub(super) shutdown: CancellationToken,
    pub(super) tracker: TaskTracker,
    pub(super) noise: Arc<noise::NoiseFilter>,
}

impl Parts {
    /// Starts a child supervisor: its stop token is a child of the
    /// upstream's, `events` is where its announcements go, and it runs in
    /// `span` on the tracker.
    pub(super) fn start(
        &self,
        events: Arc<dyn UpstreamEvents>,
        role: Role,
        bearer: Option<Arc<TokenCell>>,
        published: Option<Arc<AtomicBool>>,
        identity: Option<Arc<str>>,
        span: tracing::Span,
    ) -> isolated::Started {
        let handle = new_handle(
            &self.config,
            self.catalog.uri_forms(),
            self.noise.clone(),
            None,
            None,
            None,
        );
        let stop = self.shutdown.child_token();
        let supervisor = Supervisor {
            handle: handle.clone(),
            config: self.config.clone(),
            catalog: self.catalog.clone(),
            events,
            interest: self.interest.clone(),
            shutdown: stop.clone(),
            tasks: self.tracker.clone(),
            role,
            bearer,
            published,
            identity,
        };
        let task = self
            .tracker
            .spawn(tracing::Instrument::instrument(supervisor.run(), span));
        isolated::Started { handle, stop, task }
    }
}

/// How the pool of an upstream that acts as each caller starts one
/// identity's session: a supervisor like the shared one, with that
/// identity's own token, whose log messages and resource updates reach no
/// other client. `publishes` (set when the shared supervisor holds only
/// the place): these sessions provide the catalog's lists, and say so.
pub(super) fn identity_starter(
    parts: Parts,
    credentials: Arc<UpstreamCredentials>,
    publishes: Option<Arc<AtomicBool>>,
) -> identities::StartIdentity {
    Box::new(move |identity, subject| {
        let span =
            tracing::info_span!("upstream", upstream = %parts.config.name, client = %identity);
        let events = identities::IdentityEvents::new(parts.events.clone(), identity.clone());
        parts.start(
            Arc::new(events),
            Role::Identity {
                publishes: publishes.is_some(),
            },
            Some(credentials.identity_cell(identity, subject)),
            publishes.clone(),
            Some(identity.clone()),
            span,
        )
    })
}

/// How the pool of a per-session upstream starts one session's instance:
/// a supervisor like the shared one whose announcements reach that
/// session alone.
pub(super) fn instance_starter(parts: Parts) -> isolated::Start {
    Box::new(move |session| {
        let span = tracing::info_span!("upstream", upstream = %parts.config.name, session);
        let events = Arc::new(isolated::SessionEvents::new(parts.events.clone(), session));
        parts.start(events, Role::Instance, None, None, None, span)
    })
}
