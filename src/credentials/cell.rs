//! The bearer token of one upstream link, kept until shortly before it
//! expires and then fetched again by exactly one caller.
//!
//! Every request of the link reads the current token from an `ArcSwap`
//! (no lock on the hot path). When it is due, the first request takes the
//! `fetching` mutex and asks the [`Fetch`] for a new one; the others wait
//! for that result instead of asking too. A token the upstream answered
//! 401 to is dropped ([`TokenCell::rejected`]), so the next request fetches
//! a new one; a token that was replaced meanwhile is not dropped twice.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use futures_util::future::BoxFuture;
use reqwest::header::HeaderValue;

use super::CredentialError;
use super::oauth::Token;

/// How a cell gets a token: given the one the upstream refused (after a
/// 401), if that is why, a new one.
pub(crate) type Fetch =
    Arc<dyn Fn(Option<Token>) -> BoxFuture<'static, Result<Token, CredentialError>> + Send + Sync>;

/// A token is fetched again this long before it expires at the most ...
const MAX_MARGIN: Duration = Duration::from_secs(60);
/// ... and at the latest when this fraction of its lifetime is left.
const MARGIN_FRACTION: u32 = 4;

/// One link's bearer token.
pub(crate) struct TokenCell {
    current: ArcSwapOption<Current>,
    /// Held by the one task fetching; others wait on it, then re-read.
    fetching: tokio::sync::Mutex<()>,
    fetch: Fetch,
}

struct Current {
    /// `Bearer <token>`, marked sensitive.
    header: HeaderValue,
    token: Token,
    /// When to fetch a new one (none: it does not expire).
    refresh_at: Option<SystemTime>,
    /// The upstream answered 401 to it.
    rejected: bool,
}

impl std::fmt::Debug for TokenCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenCell(***)")
    }
}

impl TokenCell {
    pub(crate) fn new(fetch: Fetch) -> Self {
        Self {
            current: ArcSwapOption::empty(),
            fetching: tokio::sync::Mutex::new(()),
            fetch,
        }
    }

    /// The `Authorization` value to send now, fetching a token if none is
    /// held or the one held is due.
    pub(crate) async fn header(&self) -> Result<HeaderValue, CredentialError> {
        if let Some(current) = self.usable() {
            return Ok(current.header.clone());
        }
        let _fetching = self.fetching.lock().await;
        // Whoever held the lock before may have fetched one meanwhile.
        if let Some(current) = self.usable() {
            return Ok(current.header.clone());
        }
        let previous = self.current.load_full();
        let refused = previous
            .as_ref()
            .filter(|c| c.rejected)
            .map(|c| c.token.clone());
        match (self.fetch)(refused).await {
            Ok(token) => {
                let current = Arc::new(Current::of(token)?);
                self.current.store(Some(current.clone()));
                Ok(current.header.clone())
            }
            // A failed early refresh leaves a token that still works in use.
            Err(e) if !e.is_final() => match previous.filter(|c| c.unexpired() && !c.rejected) {
                Some(previous) => {
                    tracing::warn!(error = %e, "could not refresh an upstream token early; using the current one until it expires");
                    Ok(previous.header.clone())
                }
                None => Err(e),
            },
            Err(e) => {
                self.current.store(None);
                Err(e)
            }
        }
    }

    /// The upstream refused `used` (HTTP 401): it is not used again, and
    /// the next fetch is told which token was refused; unless a newer
    /// token replaced it already.
    pub(crate) fn rejected(&self, used: &HeaderValue) {
        let current = self.current.load_full();
        if let Some(current) = current.filter(|c| c.header == used && !c.rejected) {
            self.current.store(Some(Arc::new(Current {
                header: current.header.clone(),
                token: current.token.clone(),
                refresh_at: current.refresh_at,
                rejected: true,
            })));
        }
    }

    /// The held token while it is not yet due (nor refused).
    fn usable(&self) -> Option<Arc<Current>> {
        self.current
            .load_full()
            .filter(|c| !c.rejected && c.refresh_at.is_none_or(|at| SystemTime::now() < at))
    }
}

impl Current {
    fn of(token: Token) -> Result<Current, CredentialError> {
        let mut header = HeaderValue::from_str(&format!("Bearer {}", token.access.expose()))
            .map_err(|_| CredentialError::Unusable("the token is not a valid header value"))?;
        header.set_sensitive(true);
        let refresh_at = token.expires_at.map(|expires| {
            let left = expires
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            expires - MAX_MARGIN.min(left / MARGIN_FRACTION)
        });
        Ok(Current {
            header,
            token,
            refresh_at,
            rejected: false,
        })
    }

    fn unexpired(&self) -> bool {
        self.token
            .expires_at
            .is_none_or(|at| SystemTime::now() < at)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::config::Secret;

    fn token(text: &str, lasts: Option<Duration>) -> Token {
        Token {
            access: Secret::new(text.into()),
            expires_at: lasts.map(|d| SystemTime::now() + d),
            refresh: None,
            scope: None,
        }
    }

    /// A cell whose fetch counts calls and hands out `t1`, `t2`, ...
    fn counting(lasts: Option<Duration>) -> (TokenCell, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let fetch: Fetch = Arc::new(move |_| {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            Box::pin(async move { Ok(token(&format!("t{n}"), lasts)) })
        });
        (TokenCell::new(fetch), calls)
    }

    #[tokio::test]
    async fn a_token_is_fetched_once_and_reused_until_it_is_due() {
        let (cell, calls) = counting(Some(Duration::from_secs(3600)));
        let first = cell.header().await.unwrap();
        assert_eq!(first, "Bearer t1");
        assert!(first.is_sensitive());
        assert_eq!(cell.header().await.unwrap(), "Bearer t1");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn concurrent_callers_share_one_fetch() {
        let (cell, calls) = counting(None);
        let cell = Arc::new(cell);
        let all = (0..16).map(|_| {
            let cell = cell.clone();
            tokio::spawn(async move { cell.header().await.unwrap() })
        });
        for header in futures_util::future::join_all(all).await {
            assert_eq!(header.unwrap(), "Bearer t1");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_token_close_to_expiry_is_replaced_before_it_expires() {
        // 2 s left: due when a quarter of it is left, so at once after 1.5 s;
        // a token with 0 s left is due now.
        let (cell, calls) = counting(Some(Duration::ZERO));
        assert_eq!(cell.header().await.unwrap(), "Bearer t1");
        assert_eq!(cell.header().await.unwrap(), "Bearer t2");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_rejected_token_is_dropped_once() {
        let (cell, calls) = counting(None);
        let used = cell.header().await.unwrap();
        cell.rejected(&used);
        let next = cell.header().await.unwrap();
        assert_eq!(next, "Bearer t2");
        // A late 401 for the old token does not drop the new one.
        cell.rejected(&used);
        assert_eq!(cell.header().await.unwrap(), "Bearer t2");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_early_refresh_keeps_the_token_that_still_works_but_a_final_one_does_not() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let fetch: Fetch = Arc::new(move |_| {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                match n {
                    // Valid for an hour, but due at once (margin larger than life).
                    0 => {
                        let mut t = token("t1", Some(Duration::from_secs(3600)));
                        t.expires_at = Some(SystemTime::now() + Duration::from_secs(30));
                        Ok(t)
                    }
                    1 => Err(CredentialError::Unusable("the server is down")),
                    _ => Err(CredentialError::NotConnected),
                }
            })
        });
        let cell = TokenCell::new(fetch);
        assert_eq!(cell.header().await.unwrap(), "Bearer t1");
        // Due (30 s left is under the 60 s margin cap? a quarter of 30 s is
        // 7.5 s, so not due yet): force it by rejecting nothing and asking
        // again after marking it due.
        cell.current.store(Some(Arc::new(Current {
            refresh_at: Some(SystemTime::now() - Duration::from_secs(1)),
            ..Current::of(token("t1", Some(Duration::from_secs(30)))).unwrap()
        })));
        assert_eq!(
            cell.header().await.unwrap(),
            "Bearer t1",
            "kept while valid"
        );
        assert!(matches!(
            cell.header().await,
            Err(CredentialError::NotConnected)
        ));
        assert!(cell.current.load().is_none());
    }

    #[tokio::test]
    async fn the_fetch_is_told_which_token_the_upstream_refused() {
        let told: Arc<std::sync::Mutex<Vec<Option<String>>>> = Arc::default();
        let seen = told.clone();
        let calls = Arc::new(AtomicUsize::new(0));
        let fetch: Fetch = Arc::new(move |refused: Option<Token>| {
            seen.lock()
                .unwrap()
                .push(refused.map(|t| t.access.expose().to_owned()));
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            Box::pin(async move { Ok(token(&format!("t{n}"), Some(Duration::ZERO))) })
        });
        let cell = TokenCell::new(fetch);
        let first = cell.header().await.unwrap();
        // Due at once (no lifetime left): an early refresh, nothing refused.
        let second = cell.header().await.unwrap();
        cell.rejected(&second);
        let third = cell.header().await.unwrap();
        assert_eq!(
            (first, third),
            (
                "Bearer t1".try_into().unwrap(),
                "Bearer t3".try_into().unwrap()
            )
        );
        assert_eq!(*told.lock().unwrap(), [None, None, Some("t2".to_owned())]);
    }

    #[test]
    fn debug_shows_no_token() {
        let (cell, _) = counting(None);
        assert_eq!(format!("{cell:?}"), "TokenCell(***)");
    }
}
