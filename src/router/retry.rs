//! Which failed requests are sent once more, and when the upstream's
//! retry budget says no. Runs in the calling task, inside `forward`.
//!
//! A request is *repeatable* when running it twice does no harm: reads and
//! gets (`resources/read`, `prompts/get`, `completion/complete`,
//! `tasks/get`, `tasks/list`) and `tools/call` of a tool its upstream marks
//! both `readOnlyHint: true` and `idempotentHint: true` (not one that
//! creates a task). A repeatable request is retried once after a transport
//! failure or a reconnect (the connection closed or lost its session while
//! it was in flight), or after the upstream refused the gateway's token
//! (HTTP 401: the retry carries a new one). Any request the upstream
//! refused because it no longer knew the session is sent again too: it
//! never ran. Every retry spends from the upstream's retry budget.

use crate::protocol::Method;
use crate::upstream::UpstreamError;
use crate::upstream::protect::Protection;

/// Whether `method` may run twice; `tool_marked`: the tool called is
/// marked read-only and idempotent by its upstream.
pub(super) fn repeatable(method: &Method, tool_marked: bool) -> bool {
    match method {
        Method::ResourcesRead
        | Method::PromptsGet
        | Method::Complete
        | Method::TasksGet
        | Method::TasksList => true,
        Method::ToolsCall => tool_marked,
        _ => false,
    }
}

/// What to do after the first attempt failed with `error`: `None` when it
/// is not a failure a retry can help; `Some(Ok)` to retry; `Some(Err)` with
/// the error to give the client (why it was not retried).
pub(super) fn decide(
    error: &UpstreamError,
    repeatable: bool,
    protection: &Protection,
) -> Option<Result<(), UpstreamError>> {
    let (upstream, never_ran) = match error {
        UpstreamError::SessionExpired { upstream, refused } => (upstream, *refused),
        UpstreamError::Unavailable { upstream, .. }
        | UpstreamError::Unauthorized { upstream, .. } => (upstream, false),
        _ => return None,
    };
    let not_retried = |why: String| UpstreamError::NotRetried {
        upstream: upstream.clone(),
        cause: error.cause(),
        why,
    };
    if !repeatable && !never_ran {
        return Some(Err(not_retried(
            "it may have run already, and only reads, gets and tools marked readOnlyHint and idempotentHint are sent again".into(),
        )));
    }
    if !protection.try_retry() {
        return Some(Err(not_retried(format!(
            "the upstream's retry budget is spent (retries may add {}% of the requests of the last {}s, at least {})",
            (crate::upstream::protect::RETRY_RATIO * 100.0) as u32,
            crate::upstream::protect::RETRY_WINDOW.as_secs(),
            crate::upstream::protect::MIN_RETRIES,
        ))));
    }
    Some(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crashed() -> UpstreamError {
        UpstreamError::Unavailable {
            upstream: "notes".into(),
            reason: "its process exited".into(),
        }
    }

    #[test]
    fn only_repeatable_requests_are_retried_after_a_transport_failure() {
        let p = Protection::new("notes".into(), &crate::config::ProtectConfig::default());
        assert!(repeatable(&Method::ResourcesRead, false));
        assert!(!repeatable(&Method::ToolsCall, false));
        assert!(repeatable(&Method::ToolsCall, true));
        let Some(Err(e)) = decide(&crashed(), false, &p) else {
            panic!("a plain tools/call is never retried")
        };
        assert!(e.to_string().contains("not retried"), "{e}");
        assert!(matches!(decide(&crashed(), true, &p), Some(Ok(()))));
        // Refused for its session: it never ran, so any request goes again.
        let refused = UpstreamError::SessionExpired {
            upstream: "notes".into(),
            refused: true,
        };
        assert!(matches!(decide(&refused, false, &p), Some(Ok(()))));
        let timeout = UpstreamError::Timeout {
            upstream: "notes".into(),
            timeout: std::time::Duration::from_secs(1),
        };
        assert!(decide(&timeout, true, &p).is_none());
    }

    #[test]
    fn an_empty_budget_gives_a_precise_error() {
        let p = Protection::new("notes".into(), &crate::config::ProtectConfig::default());
        while matches!(decide(&crashed(), true, &p), Some(Ok(()))) {}
        let Some(Err(e)) = decide(&crashed(), true, &p) else {
            panic!("spent")
        };
        assert!(e.to_string().contains("retry budget is spent"), "{e}");
        assert_eq!(p.snapshot().retry_budget_exhausted, 2);
    }
}
