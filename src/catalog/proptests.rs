//! Property tests for list cursors ([`Catalog::page`] and its cursor
//! decoder): arbitrary and forged cursors never panic and are refused as
//! `Invalid` or `Stale`; only cursors the catalog issued give a page, and
//! they page through the list exactly once.

use std::collections::BTreeSet;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use proptest::prelude::*;
use serde_json::json;

use super::*;

/// List sizes for tools, prompts, resources and templates.
fn sizes() -> impl Strategy<Value = [usize; 4]> {
    [0..12usize, 0..12usize, 0..12usize, 0..12usize]
}

fn lists(sizes: [usize; 4], salt: &str) -> UpstreamLists {
    let make = |n: usize, item: &dyn Fn(usize) -> Value| {
        (0..n)
            .map(|i| item(i).as_object().cloned().unwrap_or_default())
            .collect()
    };
    UpstreamLists {
        tools: make(sizes[0], &|i| json!({ "name": format!("t{i}{salt}") })),
        prompts: make(sizes[1], &|i| json!({ "name": format!("p{i}{salt}") })),
        resources: make(
            sizes[2],
            &|i| json!({ "uri": format!("file:///{i}{salt}"), "name": format!("r{i}") }),
        ),
        templates: make(sizes[3], &|i| {
            let template = format!("file:///{i}{salt}/{{x}}");
            json!({ "uriTemplate": template, "name": format!("u{i}") })
        }),
    }
}

fn store_with(sizes: [usize; 4]) -> CatalogStore {
    let store = CatalogStore::new([("alpha".into(), "alpha".to_owned(), None)]);
    store.publish(
        "alpha",
        Some(Arc::new(UpstreamView {
            lists: lists(sizes, ""),
            instructions: None,
        })),
    );
    store
}

/// The items of one page, and its `nextCursor`.
fn read_page(
    catalog: &Catalog,
    kind: ListKind,
    cursor: Option<&str>,
    size: usize,
) -> (Vec<Value>, Option<String>) {
    let page: Value = serde_json::from_str(&catalog.page(kind, cursor, size).unwrap()).unwrap();
    let items = page[kind.result_key()].as_array().unwrap().clone();
    let next = page
        .get("nextCursor")
        .map(|c| c.as_str().unwrap().to_owned());
    (items, next)
}

/// Every cursor the catalog hands out for `kind`, whatever the page size.
fn issued(catalog: &Catalog, kind: ListKind) -> BTreeSet<String> {
    let mut cursors = BTreeSet::new();
    for size in 1..=catalog.len(kind) {
        let mut cursor = None;
        while let (_, Some(next)) = read_page(catalog, kind, cursor.as_deref(), size) {
            cursors.insert(next.clone());
            cursor = Some(next);
        }
    }
    cursors
}

/// Checks that `cursor` gives a page exactly when the catalog issued it.
fn only_issued_cursors_page(catalog: &Catalog, cursor: &str) -> Result<(), TestCaseError> {
    for kind in ListKind::ALL {
        let result = catalog.page(kind, Some(cursor), 3);
        if issued(catalog, kind).contains(cursor) {
            prop_assert!(
                result.is_ok(),
                "{:?} refused its own cursor {:?}",
                kind,
                cursor
            );
        } else {
            prop_assert!(
                matches!(result, Err(CursorError::Invalid | CursorError::Stale)),
                "{:?} took {:?} ({:?}): {:?}",
                kind,
                cursor,
                URL_SAFE_NO_PAD
                    .decode(cursor)
                    .map(|b| String::from_utf8_lossy(&b).into_owned()),
                result
            );
        }
    }
    Ok(())
}

/// How a forged cursor writes one hex field, given the real value.
#[derive(Debug, Clone)]
enum Field {
    Real,
    LeadingZero,
    Plus,
    Upper,
    Next,
    Previous,
    Other(u64),
    Text(String),
}

impl Field {
    fn write(&self, real: u64) -> String {
        match self {
            Self::Real => format!("{real:x}"),
            Self::LeadingZero => format!("0{real:x}"),
            Self::Plus => format!("+{real:x}"),
            Self::Upper => format!("{real:X}"),
            Self::Next => format!("{:x}", real.wrapping_add(1)),
            Self::Previous => format!("{:x}", real.wrapping_sub(1)),
            Self::Other(n) => format!("{n:x}"),
            Self::Text(t) => t.clone(),
        }
    }
}

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        12 => Just(Field::Real),
        1 => Just(Field::LeadingZero),
        1 => Just(Field::Plus),
        1 => Just(Field::Upper),
        1 => Just(Field::Next),
        1 => Just(Field::Previous),
        1 => any::<u64>().prop_map(Field::Other),
        1 => "[0-9a-fA-F+ -]{0,20}".prop_map(Field::Text),
    ]
}

/// A cursor built from a list's real version with each
/// part kept, bent or replaced: forgeries close to real cursors.
#[derive(Debug, Clone)]
struct Forgery {
    kind: ListKind,
    /// `None` writes the kind's own tag.
    tag: Option<String>,
    version: Field,
    /// Either an offset anywhere in `0..=len + 1`, or a field around `len / 2`.
    offset: Result<prop::sample::Index, Field>,
    extra: Option<String>,
    encoding: u8,
}

fn forgery() -> impl Strategy<Value = Forgery> {
    (
        prop::sample::select(ListKind::ALL.to_vec()),
        prop::option::weighted(
            0.2,
            prop::sample::select(vec!["t", "p", "r", "u", "tt", "", "T"]),
        ),
        field(),
        prop_oneof![
            any::<prop::sample::Index>().prop_map(Ok),
            field().prop_map(Err)
        ],
        prop::option::weighted(0.1, "[0-9a-f:]{0,4}"),
        0..8u8,
    )
        .prop_map(|(kind, tag, version, offset, extra, encoding)| Forgery {
            kind,
            tag: tag.map(str::to_owned),
            version,
            offset,
            extra,
            encoding,
        })
}

impl Forgery {
    fn write(&self, catalog: &Catalog) -> String {
        use base64::engine::general_purpose::{STANDARD, URL_SAFE};
        let list = &catalog.lists[self.kind.index()];
        let tag = self
            .tag
            .clone()
            .unwrap_or_else(|| self.kind.tag().to_string());
        let version = self.version.write(list.version);
        let len = list.items.len();
        let offset = match &self.offset {
            Ok(i) => format!("{:x}", i.index(len + 2)),
            Err(field) => field.write(len as u64 / 2),
        };
        let mut plain = match self.encoding {
            0 => format!("{tag}:{version}"),
            _ => format!("{tag}:{version}:{offset}"),
        };
        if let Some(extra) = &self.extra {
            plain.push(':');
            plain.push_str(extra);
        }
        match self.encoding {
            1 => URL_SAFE.encode(&plain),
            2 => STANDARD.encode(&plain),
            3 => format!("{} ", URL_SAFE_NO_PAD.encode(&plain)),
            _ => URL_SAFE_NO_PAD.encode(&plain),
        }
    }
}

/// Strings with no knowledge of the format.
fn arbitrary() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,40}",
        "[A-Za-z0-9_-]{0,40}",
        "[tpru]:[0-9a-f]{0,16}:[0-9a-f]{0,3}".prop_map(|s| URL_SAFE_NO_PAD.encode(s)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_strings_are_refused(sizes in sizes(), cursor in arbitrary()) {
        only_issued_cursors_page(&store_with(sizes).load(), &cursor)?;
    }

    #[test]
    fn forged_cursors_are_refused(sizes in sizes(), forgery in forgery()) {
        let catalog = store_with(sizes).load();
        only_issued_cursors_page(&catalog, &forgery.write(&catalog))?;
    }

    #[test]
    fn issued_cursors_page_through_each_list_once(
        sizes in sizes(),
        first in 1..14usize,
        then in 1..14usize,
    ) {
        let catalog = store_with(sizes).load();
        for kind in ListKind::ALL {
            let (all, none) = read_page(&catalog, kind, None, usize::MAX / 2);
            prop_assert_eq!(none, None);
            prop_assert_eq!(all.len(), catalog.len(kind));

            // Page 1's nextCursor gives page 2, at any page size.
            let (one, next) = read_page(&catalog, kind, None, first);
            prop_assert_eq!(&one[..], &all[..first.min(all.len())]);
            prop_assert_eq!(next.is_some(), first < all.len());
            let Some(next) = next else { continue };
            let (two, _) = read_page(&catalog, kind, Some(&next), then);
            prop_assert_eq!(&two[..], &all[first..(first + then).min(all.len())]);

            // Following cursors visits every item once, in order.
            let mut seen = one;
            let mut cursor = Some(next);
            while let Some(c) = cursor {
                let (items, next) = read_page(&catalog, kind, Some(&c), first);
                prop_assert!(!items.is_empty());
                seen.extend(items);
                cursor = next;
            }
            prop_assert_eq!(&seen, &all);
        }
    }

    #[test]
    fn a_changed_list_makes_its_cursors_stale(
        sizes in sizes().prop_filter("a list to page", |s| s.iter().any(|&n| n >= 2)),
        changed in prop::sample::select(ListKind::ALL.to_vec()),
        salt in "[a-z]{1,3}",
    ) {
        let store = store_with(sizes);
        let before = store.load();
        let cursors: Vec<(ListKind, String)> = ListKind::ALL
            .into_iter()
            .filter_map(|k| read_page(&before, k, None, 1).1.map(|c| (k, c)))
            .collect();
        // The same lists again: nothing changes, every cursor still pages.
        let view = |lists| Some(Arc::new(UpstreamView { lists, instructions: None }));
        prop_assert_eq!(store.publish("alpha", view(lists(sizes, ""))), Vec::<ListKind>::new());
        for (kind, cursor) in &cursors {
            prop_assert!(store.load().page(*kind, Some(cursor), 1).is_ok());
        }
        // One list's items change: its cursors are stale, the others' still page.
        let mut new = lists(sizes, "");
        *new.get_mut(changed) = lists(sizes, &salt).get(changed).to_vec();
        store.publish("alpha", view(new));
        let after = store.load();
        for (kind, cursor) in &cursors {
            let result = after.page(*kind, Some(cursor), 1);
            if *kind == changed {
                prop_assert_eq!(result, Err(CursorError::Stale));
            } else {
                prop_assert!(result.is_ok(), "{:?}: {:?}", kind, result);
            }
        }
    }
}

// Cases the properties above found, kept as plain tests.

#[test]
fn cursors_the_catalog_never_wrote_are_invalid() {
    let catalog = store_with([3, 0, 0, 0]).load();
    let version = catalog.lists[ListKind::Tools.index()].version;
    let issued = issued(&catalog, ListKind::Tools);
    let mut forged = vec![
        // The end of the list: no page has it as its next cursor.
        format!("t:{version:x}:3"),
        // A real offset, written differently.
        format!("t:0{version:x}:1"),
        format!("t:+{version:x}:1"),
        format!("t:{version:x}:01"),
    ];
    // The digest may have no hex letters to write in capitals.
    if format!("{version:X}") != format!("{version:x}") {
        forged.push(format!("t:{version:X}:1"));
    }
    for plain in forged {
        let cursor = URL_SAFE_NO_PAD.encode(&plain);
        assert!(!issued.contains(&cursor), "{plain}");
        assert_eq!(
            catalog.page(ListKind::Tools, Some(&cursor), 1),
            Err(CursorError::Invalid),
            "{plain}"
        );
    }
}
