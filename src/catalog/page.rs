//! Paging a merged list: a page is the concatenation of pre-serialized
//! items under the list's result key, with a cursor to the next one. Pages
//! of the whole list (no policy view) are built once per catalog snapshot
//! and shared ([`Page::Shared`]): serving one again is a reference count,
//! not 5,000 items copied. A view's pages are built per request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::value::RawValue;

use super::{Catalog, CursorError, ListKind, Subset};

/// Most pages of one list a snapshot keeps (a list of 5,000 items at a page
/// size of 10 has 500); past it, pages are built per request.
const MAX_SHARED_PAGES: usize = 1024;

/// One page as a result object's JSON text.
#[derive(Debug, Clone)]
pub(crate) enum Page {
    /// Built once for this snapshot, shared by every request for it.
    Shared(Arc<str>),
    /// Built for this request (a view's page, or any other result text).
    Owned(String),
}

impl std::ops::Deref for Page {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            Page::Shared(text) => text,
            Page::Owned(text) => text,
        }
    }
}

impl Page {
    /// The page's text as bytes, without copying it.
    pub(crate) fn into_bytes(self) -> bytes::Bytes {
        match self {
            Page::Shared(text) => bytes::Bytes::from_owner(SharedText(text)),
            Page::Owned(text) => bytes::Bytes::from(text),
        }
    }
}

/// A shared page's text, owned by the bytes that point into it.
struct SharedText(Arc<str>);

impl AsRef<[u8]> for SharedText {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl PartialEq for Page {
    fn eq(&self, other: &Page) -> bool {
        **self == **other
    }
}

impl From<String> for Page {
    fn from(text: String) -> Page {
        Page::Owned(text)
    }
}

/// One list's shared pages by (first item, page size).
type PagesOf = HashMap<(usize, usize), Arc<str>>;

/// A snapshot's shared pages of the whole lists, by list and by (first
/// item, page size). Filled on first request; dropped with the snapshot.
/// The lock is held only to look up or insert, never while building.
#[derive(Debug, Default)]
pub(super) struct SharedPages {
    pages: [Mutex<PagesOf>; 4],
}

impl SharedPages {
    fn get(&self, kind: ListKind, key: (usize, usize)) -> Option<Arc<str>> {
        self.lock(kind).get(&key).cloned()
    }

    fn keep(&self, kind: ListKind, key: (usize, usize), page: &Arc<str>) {
        let mut pages = self.lock(kind);
        if pages.len() < MAX_SHARED_PAGES {
            pages.entry(key).or_insert_with(|| page.clone());
        }
    }

    fn lock(&self, kind: ListKind) -> std::sync::MutexGuard<'_, PagesOf> {
        self.pages[kind.index()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl Catalog {
    /// One page of a merged list as a result object's JSON text, shared by
    /// every request for the same page of this snapshot.
    pub(crate) fn page(
        &self,
        kind: ListKind,
        cursor: Option<&str>,
        page_size: usize,
    ) -> Result<Page, CursorError> {
        self.page_in(kind, None, cursor, page_size)
    }

    /// One page of a list, or of a client's view of it (`subset`), whose
    /// cursors are bound to that view.
    pub(crate) fn page_in(
        &self,
        kind: ListKind,
        subset: Option<Subset<'_>>,
        cursor: Option<&str>,
        page_size: usize,
    ) -> Result<Page, CursorError> {
        let list = &self.lists[kind.index()];
        let len = subset.map_or(list.items.len(), |s| s.indices.len());
        let start = match cursor {
            None => 0,
            Some(c) => self.decode_cursor(kind, list.version, subset, len, c)?,
        };
        if subset.is_some() {
            return Ok(Page::Owned(
                self.build_page(kind, subset, start, len, page_size),
            ));
        }
        let key = (start, page_size);
        if let Some(page) = self.shared_pages.get(kind, key) {
            return Ok(Page::Shared(page));
        }
        let page: Arc<str> = self.build_page(kind, None, start, len, page_size).into();
        self.shared_pages.keep(kind, key, &page);
        Ok(Page::Shared(page))
    }

    /// Items `start..start + page_size` (of the list or of `subset`), and
    /// the cursor to the next page if there is one.
    fn build_page(
        &self,
        kind: ListKind,
        subset: Option<Subset<'_>>,
        start: usize,
        len: usize,
        page_size: usize,
    ) -> String {
        let list = &self.lists[kind.index()];
        let end = start.saturating_add(page_size).min(len);
        let item = |i: usize| -> &RawValue {
            match subset {
                Some(s) => &list.items[s.indices[i] as usize],
                None => &list.items[i],
            }
        };
        let mut out = String::with_capacity(
            64 + (start..end).map(|i| item(i).get().len() + 1).sum::<usize>(),
        );
        out.push_str("{\"");
        out.push_str(kind.result_key());
        out.push_str("\":[");
        for i in start..end {
            if i > start {
                out.push(',');
            }
            out.push_str(item(i).get());
        }
        out.push(']');
        if end < len {
            out.push_str(",\"nextCursor\":\"");
            out.push_str(&self.encode_cursor(kind, list.version, subset, end));
            out.push('"');
        }
        out.push('}');
        out
    }

    fn encode_cursor(
        &self,
        kind: ListKind,
        version: u64,
        subset: Option<Subset<'_>>,
        offset: usize,
    ) -> String {
        let mut plain = format!("{}:{version:x}:{offset:x}", kind.tag());
        if let Some(s) = subset {
            plain.push_str(&format!(":{:x}.{:x}", s.epoch, s.id));
        }
        URL_SAFE_NO_PAD.encode(plain)
    }

    fn decode_cursor(
        &self,
        kind: ListKind,
        version: u64,
        subset: Option<Subset<'_>>,
        len: usize,
        cursor: &str,
    ) -> Result<usize, CursorError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(cursor)
            .map_err(|_| CursorError::Invalid)?;
        let text = std::str::from_utf8(&bytes).map_err(|_| CursorError::Invalid)?;
        let mut parts = text.split(':');
        let (Some(tag), Some(issued), Some(offset), view, None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(CursorError::Invalid);
        };
        let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| CursorError::Invalid);
        if tag.len() != 1 || !tag.starts_with(kind.tag()) {
            return Err(CursorError::Invalid);
        }
        // A cursor of another view (or of the whole list) is never this view's.
        let policy_changed = match (subset, view) {
            (None, None) => false,
            (Some(s), Some(view)) => {
                let (view_epoch, id) = view.split_once('.').ok_or(CursorError::Invalid)?;
                if hex(id)? != s.id {
                    return Err(CursorError::Invalid);
                }
                hex(view_epoch)? != u64::from(s.epoch)
            }
            _ => return Err(CursorError::Invalid),
        };
        if policy_changed || hex(issued)? != version {
            return Err(CursorError::Stale);
        }
        let offset = usize::try_from(hex(offset)?).map_err(|_| CursorError::Invalid)?;
        // Issued cursors point inside the list: the last page has no next one.
        if offset == 0 || offset >= len {
            return Err(CursorError::Invalid);
        }
        // Only the exact text the gateway wrote: hex without leading zeros, `+` or capitals.
        if self.encode_cursor(kind, version, subset, offset) != cursor {
            return Err(CursorError::Invalid);
        }
        Ok(offset)
    }
}
