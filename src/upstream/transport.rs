//! How the gateway talks to an upstream: a stdio child (`stdio`), or a
//! remote server over Streamable HTTP (`http`, with the POST client
//! `poster`, its kept connections `pool` and their exchange `http1`) or the legacy HTTP+SSE
//! transport (`legacy_sse`), both sharing one remote session's state
//! (`remote`). A `link::Link` owns one of them; the protocol above them is
//! `connection::Connection`'s.

pub(crate) mod http;
mod http1;
#[cfg(test)]
mod http_tests;
mod legacy_sse;
#[cfg(test)]
mod legacy_sse_tests;
mod pool;
mod poster;
mod remote;
pub(crate) mod stdio;
#[cfg(test)]
mod test_server;
