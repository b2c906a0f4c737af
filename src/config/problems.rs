//! Validation problems, collected so that one run of `mcpmux check` (or a
//! start) reports every mistake in the file with its line and column, and
//! the readings every section shares: `${VAR}` expansion, durations and
//! counts with their ranges.

use std::fmt;
use std::time::Duration;

use serde_saphyr::{Location, Spanned};

use super::Issue;
use super::expand::{self, Lookup};

/// Collects validation problems so one run reports all of them.
pub(super) struct Problems {
    pub(super) issues: Vec<Issue>,
}

impl Problems {
    pub(super) fn at(&mut self, location: Location, message: impl fmt::Display) {
        self.issues.push(Issue {
            line: location.line(),
            column: location.column(),
            message: message.to_string(),
        });
    }

    /// Expands `${VAR}` in a spanned string, reporting failures at its location.
    pub(super) fn expand(
        &mut self,
        value: &Spanned<String>,
        what: &str,
        lookup: &Lookup,
    ) -> Option<String> {
        match expand::expand(&value.value, lookup) {
            Ok(s) => Some(s),
            Err(e) => {
                self.at(value.referenced, format_args!("{what}: {e}"));
                None
            }
        }
    }

    pub(super) fn duration(
        &mut self,
        value: &Spanned<String>,
        what: &str,
        lookup: &Lookup,
    ) -> Option<Duration> {
        let text = self.expand(value, what, lookup)?;
        match humantime::parse_duration(text.trim()) {
            Ok(d) if !d.is_zero() => Some(d),
            Ok(_) => {
                self.at(
                    value.referenced,
                    format_args!("{what}: must be greater than zero"),
                );
                None
            }
            Err(e) => {
                self.at(
                    value.referenced,
                    format_args!("{what}: {e} (write a duration such as \"30s\" or \"5m\")"),
                );
                None
            }
        }
    }
}

impl Problems {
    /// An optional duration, or `default` when the key is absent.
    pub(super) fn duration_or(
        &mut self,
        value: Option<&Spanned<String>>,
        default: Duration,
        what: &str,
        lookup: &Lookup,
    ) -> Option<Duration> {
        match value {
            None => Some(default),
            Some(v) => self.duration(v, what, lookup),
        }
    }

    /// An optional count in `min..=max`, or `default` when absent.
    pub(super) fn count_or(
        &mut self,
        value: Option<&Spanned<u64>>,
        default: u64,
        min: u64,
        max: u64,
        what: &str,
    ) -> u64 {
        match value {
            None => default,
            Some(v) if v.value < min || v.value > max => {
                self.at(
                    v.referenced,
                    format_args!("{what}: must be between {min} and {max}"),
                );
                default
            }
            Some(v) => v.value,
        }
    }
}
