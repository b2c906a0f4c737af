//! Unit tests of the per-session instance pool, with fake instances.
