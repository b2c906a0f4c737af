//! What an operator wants to know of an upstream's recent past: since when
//! it has been ready, and its last errors (state changes to down or
//! unresponsive, failed calls), for the operator's page.
//!
//! Both are written only on cold paths (a state change, a failed call) and
//! bounded: the error ring keeps the last [`RECENT_ERRORS`] entries.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

/// Errors kept per upstream; the oldest goes first.
pub(crate) const RECENT_ERRORS: usize = 16;
/// Characters kept of one error's text.
const MAX_TEXT: usize = 512;

/// One remembered error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecentError {
    pub at: SystemTime,
    pub text: String,
}

/// An upstream's uptime and recent errors.
#[derive(Default)]
pub(crate) struct Journal {
    ready_since: Mutex<Option<Instant>>,
    errors: Mutex<VecDeque<RecentError>>,
}

impl Journal {
    /// Notes a state change: `ready` starts the uptime clock (unless it
    /// runs), anything else stops it.
    pub(crate) fn state_changed(&self, ready: bool) {
        let mut since = self.ready_since.lock().unwrap_or_else(|e| e.into_inner());
        match (ready, *since) {
            (true, None) => *since = Some(Instant::now()),
            (false, _) => *since = None,
            (true, Some(_)) => {}
        }
    }

    /// How long it has been ready; none when it is not.
    pub(crate) fn uptime(&self) -> Option<std::time::Duration> {
        self.ready_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|since| since.elapsed())
    }

    /// Remembers an error, dropping the oldest beyond [`RECENT_ERRORS`].
    pub(crate) fn error(&self, text: &str) {
        let mut text = text.to_owned();
        if text.len() > MAX_TEXT {
            let mut end = MAX_TEXT;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push('…');
        }
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        if errors.len() == RECENT_ERRORS {
            errors.pop_front();
        }
        errors.push_back(RecentError {
            at: SystemTime::now(),
            text,
        });
    }

    /// The remembered errors, newest first.
    pub(crate) fn recent_errors(&self) -> Vec<RecentError> {
        let errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        errors.iter().rev().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_errors() {
        let journal = Journal::default();
        for i in 0..RECENT_ERRORS + 3 {
            journal.error(&format!("e{i}"));
        }
        let errors = journal.recent_errors();
        assert_eq!(errors.len(), RECENT_ERRORS);
        assert_eq!(errors[0].text, format!("e{}", RECENT_ERRORS + 2));
        journal.error(&"é".repeat(600));
        assert!(journal.recent_errors()[0].text.ends_with('…'));
    }

    #[test]
    fn uptime_runs_only_while_ready() {
        let journal = Journal::default();
        assert!(journal.uptime().is_none());
        journal.state_changed(true);
        assert!(journal.uptime().is_some());
        journal.state_changed(false);
        assert!(journal.uptime().is_none());
    }
}
