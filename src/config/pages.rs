//! `page_size`: how many items one page of each merged list holds.
//!
//! `tools/list` and `prompts/list` answer with the whole list by default:
//! hosts offer a model only the tools they have listed, and many never
//! follow `nextCursor`. Resources and templates page by 100. A number sets
//! all four lists; a mapping sets each (`tools`, `prompts`, `resources`,
//! `templates`), with `all` for no paging.

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::Problems;

/// The largest page a number may ask for.
const MAX_PAGE: u64 = 100_000;

/// Items per page of each merged list; `usize::MAX` is the whole list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageSizes {
    pub tools: usize,
    pub prompts: usize,
    pub resources: usize,
    pub templates: usize,
}

impl Default for PageSizes {
    fn default() -> Self {
        Self {
            tools: usize::MAX,
            prompts: usize::MAX,
            resources: 100,
            templates: 100,
        }
    }
}

/// `page_size` as written: one number, or one size per list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawPageSize {
    All(RawSize),
    Each {
        #[serde(default)]
        tools: Option<RawSize>,
        #[serde(default)]
        prompts: Option<RawSize>,
        #[serde(default)]
        resources: Option<RawSize>,
        #[serde(default)]
        templates: Option<RawSize>,
    },
}

/// A page size: a number, or `all`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawSize {
    Count(u64),
    Word(String),
}

impl RawSize {
    fn validate(&self, what: &str) -> Result<usize, String> {
        match self {
            RawSize::Count(n) if (1..=MAX_PAGE).contains(n) => Ok(*n as usize),
            RawSize::Word(word) if word == "all" => Ok(usize::MAX),
            RawSize::Count(n) => Err(format!(
                "{what}: {n} is out of range; use 1 to {MAX_PAGE}, or all"
            )),
            RawSize::Word(word) => Err(format!("{what}: {word:?} is not a number of items or all")),
        }
    }
}

impl PageSizes {
    /// The same size for every list.
    pub(crate) fn uniform(size: usize) -> Self {
        Self {
            tools: size,
            prompts: size,
            resources: size,
            templates: size,
        }
    }

    pub(super) fn from_raw(raw: Option<&Spanned<RawPageSize>>, p: &mut Problems) -> PageSizes {
        let Some(raw) = raw else {
            return PageSizes::default();
        };
        let defaults = PageSizes::default();
        let mut size = |value: Option<&RawSize>, default: usize, what: &str| match value {
            None => default,
            Some(v) => v.validate(what).unwrap_or_else(|why| {
                p.at(raw.referenced, why);
                default
            }),
        };
        match &raw.value {
            RawPageSize::All(v) => PageSizes::uniform(size(Some(v), 0, "page_size")),
            RawPageSize::Each {
                tools,
                prompts,
                resources,
                templates,
            } => PageSizes {
                tools: size(tools.as_ref(), defaults.tools, "page_size.tools"),
                prompts: size(prompts.as_ref(), defaults.prompts, "page_size.prompts"),
                resources: size(
                    resources.as_ref(),
                    defaults.resources,
                    "page_size.resources",
                ),
                templates: size(
                    templates.as_ref(),
                    defaults.templates,
                    "page_size.templates",
                ),
            },
        }
    }
}
