//! Tool search for progressive views: the view's tools, ranked for a text
//! query by BM25 (the `bm25` crate: tokenizer with stemming and stop words,
//! scorer and index). A tool's document is its name split into words, its
//! title, its description and its parameters' names, so a query in plain
//! words finds `create_issue` as readily as `createIssue`. The index is
//! built on the first search of a catalog snapshot and shared until the
//! next snapshot.

use std::sync::OnceLock;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The gateway's tool that searches a progressive view.
pub(crate) const SEARCH_TOOL: &str = "search_tools";
/// The gateway's tool that calls a tool found by a search.
pub(crate) const CALL_TOOL: &str = "call_tool";

/// The tools a progressive view searches, in list order, and their index.
#[derive(Debug, Default)]
pub(crate) struct Searchable {
    /// Each tool as listed (with its exposed name and full schema).
    pub(super) items: Vec<Box<RawValue>>,
    /// Each tool's policy key.
    pub(super) keys: Vec<Box<str>>,
    /// The upstream each tool comes from.
    owners: Vec<std::sync::Arc<str>>,
    /// The text each tool is found by.
    pub(super) documents: Vec<String>,
    /// Most matches one search returns.
    pub(super) results: usize,
    /// Built on first use.
    index: OnceLock<Index>,
}

/// The fitted embedder (tokenizer, BM25 parameters, average length) and
/// the scorer with every tool's embedding (its inverted index).
struct Index {
    embedder: bm25::Embedder,
    scorer: bm25::Scorer<u32>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Index")
    }
}

/// One match: the tool's listed JSON (and, for tests, its policy key).
pub(crate) struct Found<'a> {
    pub item: &'a RawValue,
    #[cfg(test)]
    pub key: &'a str,
}

impl Searchable {
    pub(super) fn new(results: usize) -> Searchable {
        Searchable {
            results,
            ..Searchable::default()
        }
    }

    pub(super) fn push(
        &mut self,
        item: Box<RawValue>,
        key: &str,
        owner: &std::sync::Arc<str>,
        tool: &Map<String, Value>,
    ) {
        self.documents.push(document(tool));
        self.items.push(item);
        self.keys.push(key.into());
        self.owners.push(owner.clone());
    }

    /// Tools it searches.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// The configured most matches of one search.
    pub(crate) fn results(&self) -> usize {
        self.results
    }

    /// The tools as listed, with their keys and upstreams, in list order.
    pub(crate) fn tools(&self) -> impl Iterator<Item = (&RawValue, &str, &std::sync::Arc<str>)> {
        self.items
            .iter()
            .zip(&self.keys)
            .zip(&self.owners)
            .map(|((item, key), owner)| (&**item, &**key, owner))
    }

    fn index(&self) -> &Index {
        self.index.get_or_init(|| {
            let corpus: Vec<&str> = self.documents.iter().map(String::as_str).collect();
            let embedder: bm25::Embedder =
                bm25::EmbedderBuilder::with_fit_to_corpus(bm25::Language::English, &corpus).build();
            let mut scorer = bm25::Scorer::new();
            for (i, text) in corpus.iter().enumerate() {
                scorer.upsert(&(i as u32), embedder.embed(text));
            }
            Index { embedder, scorer }
        })
    }

    /// The best `limit` matches for `query` among the tools `visible`
    /// admits (by key), best first. A query with no word the index knows
    /// finds nothing.
    pub(crate) fn search(
        &self,
        query: &str,
        limit: usize,
        visible: impl Fn(&str) -> bool,
    ) -> Vec<Found<'_>> {
        if self.items.is_empty() || limit == 0 {
            return Vec::new();
        }
        let index = self.index();
        let query = index.embedder.embed(&words(query));
        let mut hits: Vec<(u32, f32)> = index
            .scorer
            .matches(&query)
            .into_iter()
            .map(|hit| (hit.id, hit.score))
            .collect();
        // Best first; equal scores in list order, the same on every run.
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.into_iter()
            .filter_map(|(id, _)| {
                let i = id as usize;
                let key = self.keys.get(i)?;
                visible(key).then(|| Found {
                    item: &self.items[i],
                    #[cfg(test)]
                    key,
                })
            })
            .take(limit)
            .collect()
    }
}

/// The text a tool is found by: its name (as words and whole), title,
/// description, and its parameters' names and descriptions.
fn document(tool: &Map<String, Value>) -> String {
    let mut text = String::new();
    let mut add = |part: &str| {
        text.push_str(part);
        text.push(' ');
    };
    if let Some(name) = tool.get("name").and_then(Value::as_str) {
        add(&words(name));
    }
    if let Some(title) = tool.get("title").and_then(Value::as_str) {
        add(title);
    }
    if let Some(title) = tool
        .get("annotations")
        .and_then(|a| a.get("title"))
        .and_then(Value::as_str)
    {
        add(title);
    }
    if let Some(description) = tool.get("description").and_then(Value::as_str) {
        add(description);
    }
    if let Some(properties) = tool
        .get("inputSchema")
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
    {
        for (name, schema) in properties {
            add(&words(name));
            if let Some(description) = schema.get("description").and_then(Value::as_str) {
                add(description);
            }
        }
    }
    text
}

/// Identifiers split into words: `get_issueComments-v2` becomes
/// `get issue Comments v2`; other text is kept.
fn words(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut previous: Option<char> = None;
    for c in text.chars() {
        match c {
            '_' | '-' | '.' | '/' | ':' => out.push(' '),
            c if c.is_uppercase() && previous.is_some_and(char::is_lowercase) => {
                out.push(' ');
                out.push(c);
            }
            c => out.push(c),
        }
        previous = Some(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn searchable(tools: &[Value]) -> Searchable {
        let mut s = Searchable::new(5);
        for tool in tools {
            let map = tool.as_object().expect("object").clone();
            let name = map["name"].as_str().expect("name").to_owned();
            s.push(
                serde_json::value::to_raw_value(&map).expect("json"),
                &name,
                &std::sync::Arc::from("up"),
                &map,
            );
        }
        s
    }

    #[test]
    fn identifiers_become_words() {
        assert_eq!(words("get_issueComments-v2"), "get issue Comments v2");
        assert_eq!(words("plain text"), "plain text");
    }

    #[test]
    fn finds_by_name_words_description_and_parameters_and_honours_visibility() {
        let s = searchable(&[
            json!({"name": "gh__create_issue", "description": "Open a new issue in a repository"}),
            json!({"name": "gh__list_pulls", "description": "List pull requests"}),
            json!({"name": "weather__forecast", "description": "Weather for a city",
                   "inputSchema": {"type": "object", "properties": {"latitude": {}, "longitude": {}}}}),
        ]);
        let names = |found: Vec<Found<'_>>| -> Vec<String> {
            found.iter().map(|f| f.key.to_owned()).collect()
        };
        assert_eq!(
            names(s.search("create an issue", 3, |_| true))[0],
            "gh__create_issue"
        );
        assert_eq!(
            names(s.search("pull requests", 3, |_| true))[0],
            "gh__list_pulls"
        );
        assert_eq!(
            names(s.search("latitude", 3, |_| true)),
            ["weather__forecast"]
        );
        // A hidden tool is never found.
        assert!(
            names(s.search("issue", 3, |k| k != "gh__create_issue"))
                .iter()
                .all(|k| k != "gh__create_issue")
        );
        assert!(s.search("zzzz", 3, |_| true).is_empty());
        assert_eq!(s.search("issue pull weather", 1, |_| true).len(), 1);
    }
}
