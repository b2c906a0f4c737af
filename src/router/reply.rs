//! What the router answers with: a whole frame, a stream of frames, or a
//! list page's frame kept in pieces.
//!
//! A merged list page is built once per catalog snapshot and shared (see
//! [`crate::catalog::Page`]); a 5,000-tool page is about a megabyte. Its
//! response frame is the request's own envelope around that shared text,
//! so HTTP sends the three pieces as they are (one vectored write, no copy
//! of the page); only transports that need one string join them.

use bytes::Bytes;
use tokio::sync::mpsc;

use super::rewrite;
use crate::catalog::Page;
use crate::protocol;
use crate::protocol::hints::CacheHints;

/// The answer to one request.
pub(crate) enum Reply {
    /// A complete JSON-RPC response frame.
    Ready(Frame),
    /// A list page's complete response frame, in pieces.
    Page(PageFrame),
    /// Frames of a forwarded call that streams progress: notifications
    /// first, the response frame last, then the channel closes.
    Streaming(mpsc::Receiver<String>),
}

/// A whole response frame and how the request ended, decided where the
/// frame was built, so no layer reads the frame again to learn it.
#[derive(Debug)]
pub(crate) struct Frame {
    text: String,
    ended: Ended,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// With a `result`.
    Result,
    /// With an `error`: its code, and for an upstream refused by its
    /// protection (saturated, circuit open) when to come back.
    Error {
        code: i64,
        retry_after_ms: Option<u64>,
    },
}

impl Frame {
    /// A frame whose answer is a `result`.
    pub(crate) fn result(text: String) -> Frame {
        Frame {
            text,
            ended: Ended::Result,
        }
    }

    /// A frame whose answer is an `error` with `code`.
    pub(crate) fn error(text: String, code: i64, retry_after_ms: Option<u64>) -> Frame {
        Frame {
            text,
            ended: Ended::Error {
                code,
                retry_after_ms,
            },
        }
    }

    pub(crate) fn into_text(self) -> String {
        self.text
    }

    pub(crate) fn ended(&self) -> Ended {
        self.ended
    }

    /// The JSON-RPC error code, if the request ended with an error.
    pub(crate) fn error_code(&self) -> Option<i64> {
        match self.ended {
            Ended::Result => None,
            Ended::Error { code, .. } => Some(code),
        }
    }

    /// The same answer with its text rewritten (the outcome is kept).
    pub(crate) fn map_text(self, map: impl FnOnce(String) -> String) -> Frame {
        Frame {
            text: map(self.text),
            ended: self.ended,
        }
    }
}

/// `{"jsonrpc":"2.0","id":ID,"result":PAGE}`, as the envelope's head, the
/// page (from its byte `skip` on) and the closing brace.
#[derive(Debug)]
pub(crate) struct PageFrame {
    head: String,
    page: Page,
    skip: usize,
}

impl PageFrame {
    /// The response to request `id` (raw JSON) whose result is `page`, a
    /// JSON object; with `hints`, the result also carries `resultType`,
    /// `ttlMs` and `cacheScope` (first, as [`rewrite::cacheable`] puts them).
    pub(crate) fn new(id: &str, page: Page, hints: Option<CacheHints<'_>>) -> PageFrame {
        let mut head = protocol::response_head(id, 96);
        let mut skip = 0;
        if let Some(hints) = hints {
            let rest = page.strip_prefix('{').unwrap_or(&page);
            head.push_str(&rewrite::hinted_opening(rest, hints.ttl_ms, hints.scope));
            skip = page.len() - rest.len();
        }
        PageFrame { head, page, skip }
    }

    /// The frame as one string, for transports that write whole frames.
    pub(crate) fn into_text(self) -> String {
        let mut text = self.head;
        text.reserve(self.page.len() - self.skip + 1);
        text.push_str(&self.page[self.skip..]);
        text.push('}');
        text
    }

    /// The frame's pieces in order, for a vectored write.
    pub(crate) fn into_pieces(self) -> [Bytes; 3] {
        [
            Bytes::from(self.head),
            self.page.into_bytes().slice(self.skip..),
            Bytes::from_static(b"}"),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn joined(frame: PageFrame) -> Value {
        let pieces = frame.into_pieces();
        serde_json::from_slice(&pieces.concat()).unwrap()
    }

    #[test]
    fn a_page_frame_is_the_envelope_around_the_page_with_or_without_hints() {
        let page = || Page::from(r#"{"tools":[{"name":"a"}],"nextCursor":"x"}"#.to_owned());
        let plain =
            json!({"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"a"}],"nextCursor":"x"}});
        assert_eq!(joined(PageFrame::new("7", page(), None)), plain);
        let text = PageFrame::new("7", page(), None).into_text();
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), plain);

        let hints = || CacheHints {
            ttl_ms: 60000,
            scope: "private",
        };
        let hinted = json!({"jsonrpc":"2.0","id":"r","result":{
            "resultType":"complete","ttlMs":60000,"cacheScope":"private",
            "tools":[{"name":"a"}],"nextCursor":"x"}});
        assert_eq!(
            joined(PageFrame::new(r#""r""#, page(), Some(hints()))),
            hinted
        );
        let text = PageFrame::new(r#""r""#, page(), Some(hints())).into_text();
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), hinted);
        assert!(text.starts_with(r#"{"jsonrpc":"2.0","id":"r","result":{"resultType":"complete""#));

        let empty = PageFrame::new("1", Page::from("{ }".to_owned()), Some(hints()));
        assert_eq!(
            joined(empty)["result"],
            json!({"resultType":"complete","ttlMs":60000,"cacheScope":"private"})
        );
    }
}
