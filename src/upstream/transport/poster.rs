//! The POST client of a Streamable HTTP link.
//!
//! A plain `http://` upstream with no proxy configured in the environment
//! is POSTed to through its own kept HTTP/1.1 connections (`pool`), with
//! the fixed parts (the path, and the configured headers, `Content-Type`
//! and `Accept` as request-head bytes) built once per link, so a call
//! costs no URL parsing, proxy matching, redirect bookkeeping or copy of
//! the fixed headers. Everything else (`https://`, an `HTTP_PROXY`/`ALL_PROXY`
//! in the environment) goes through reqwest as before, and so does a POST
//! the fast client got a redirect for, so redirects are followed the same
//! way on both paths. Both paths hand back the same [`HttpAnswer`].

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::http;
use reqwest::Url;
use reqwest::header::{self, HeaderMap, HeaderValue};

/// Headers a request adds to the fixed ones, as room reserved up front.
const EXTRA_HEADERS: usize = 8;

/// Errors of reading an answer's body, from either client.
pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An answer's body, from either client.
pub(super) type AnswerBody = UnsyncBoxBody<Bytes, BoxError>;

/// What a POST (or GET) got back.
pub(super) type HttpAnswer = http::Response<AnswerBody>;

/// Why a POST got no answer at all.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(super) struct PostError {
    /// The server could not be reached (nothing was sent).
    pub(super) connect: bool,
    pub(super) message: String,
}

/// Sends a link's POSTs; see the module header for which client does.
pub(super) struct Poster {
    fast: Option<FastPost>,
    client: reqwest::Client,
    url: Url,
    /// The configured headers (credentials marked sensitive), plus
    /// `Content-Type` and `Accept` for POSTs.
    fixed: HeaderMap,
}

/// The upstream's kept connections and the request parts built once.
struct FastPost {
    pool: super::pool::Pool,
    /// The URL's path and query: what an HTTP/1.1 request line names.
    target: String,
    /// The fixed headers, encoded once.
    fixed: super::http1::FixedFields,
}

/// Proxy settings reqwest honours; with any of them set, every POST goes
/// through reqwest so the proxy is used as configured.
const PROXY_VARIABLES: [&str; 4] = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];

impl Poster {
    pub(super) fn new(
        client: reqwest::Client,
        url: Url,
        headers: &HeaderMap,
        connect_timeout: Duration,
        idle_timeout: Duration,
    ) -> Poster {
        let mut fixed = headers.clone();
        fixed.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        fixed.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        let proxied = PROXY_VARIABLES
            .iter()
            .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
        let fast = match (url.scheme(), proxied) {
            ("http", false) => url.as_str().parse::<http::Uri>().ok().and_then(|uri| {
                let target = uri.path_and_query()?.as_str().to_owned();
                let pool = super::pool::Pool::new(&uri, connect_timeout, idle_timeout)?;
                Some(FastPost {
                    pool,
                    target,
                    fixed: super::http1::FixedFields::new(&fixed),
                })
            }),
            _ => None,
        };
        Poster {
            fast,
            client,
            url,
            fixed,
        }
    }

    /// POSTs `body` with the fixed headers and the ones `add` puts in
    /// (which replace fixed ones of the same name). `add` runs once per
    /// client the POST goes through, so the headers are never copied.
    pub(super) async fn post(
        &self,
        body: Bytes,
        add: impl Fn(&mut HeaderMap),
    ) -> Result<HttpAnswer, PostError> {
        // reqwest's request: the fixed headers and the POST's own in one
        // map.
        let headers = || {
            // Room for what `add` puts in (session, version, trace context,
            // mirrored params) from the start: a clone is exactly as large
            // as the fixed headers, and grew twice per request.
            let mut headers = HeaderMap::with_capacity(self.fixed.len() + EXTRA_HEADERS);
            for (name, value) in &self.fixed {
                headers.append(name.clone(), value.clone());
            }
            add(&mut headers);
            headers
        };
        if let Some(fast) = &self.fast {
            // The fixed headers go as encoded once; only the POST's own
            // are put in a map.
            let mut extra = HeaderMap::with_capacity(EXTRA_HEADERS);
            add(&mut extra);
            let post = super::http1::Post {
                method: &http::Method::POST,
                target: &fast.target,
                fixed: &fast.fixed,
                extra: &extra,
                body: &body,
            };
            let answer = fast.pool.send(post).await.map_err(|e| PostError {
                connect: e.is_connect(),
                message: describe(&e),
            })?;
            // reqwest follows redirects (with its limits); let it.
            if !answer.status().is_redirection() {
                return Ok(answer.map(|b| b.map_err(BoxError::from).boxed_unsync()));
            }
        }
        let answer = self
            .client
            .post(self.url.clone())
            .headers(headers())
            .body(body)
            .send()
            .await
            .map_err(|e| PostError {
                connect: e.is_connect(),
                message: e.without_url().to_string(),
            })?;
        Ok(from_reqwest(answer))
    }
}

/// A reqwest answer as an [`HttpAnswer`].
pub(super) fn from_reqwest(answer: reqwest::Response) -> HttpAnswer {
    http::Response::<reqwest::Body>::from(answer).map(|b| b.map_err(BoxError::from).boxed_unsync())
}

/// An error and its causes on one line, as reqwest words its own.
fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
