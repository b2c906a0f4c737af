//! The integration test binary: real sockets on port 0, real child
//! processes, and third-party MCP peers (see `support::interop`).

mod apps;
mod asking;
mod auth;
mod bad_input;
mod caching;
mod cli;
mod conformance;
mod core;
mod deploy;
mod docs;
mod everything;
mod faults;
mod hardening;
mod input_rounds;
mod isolation;
mod live;
mod login;
mod modern;
mod onboarding;
mod ops;
mod policy;
mod protection;
mod remote;
mod replicas;
mod resume;
mod shaping;
mod support;
mod tasks;
mod telemetry;
mod ui;
mod upstream_auth;
mod upstream_secrecy;
mod upstream_tokens;
mod upstream_users;
