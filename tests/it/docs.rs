//! The documentation stays true: every relative link and anchor in
//! README.md, docs/ and ARCHITECTURE.md resolves, the README's config
//! passes `mcpmux check`, its host snippets are configs those hosts'
//! shapes describe (`mcpmux import` reads each), and CI runs the README's
//! test command, and rust-version is what the locked dependencies need.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::support::tempdir;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files a reader follows links between.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md"), repo().join("ARCHITECTURE.md")];
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (but `-`
/// and `_`), spaces to `-`; a repeated one gets `-1`, `-2`, ...
fn anchors(text: &str) -> HashSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let title = heading.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        anchors.insert(match *n {
            0 => slug.clone(),
            k => format!("{slug}-{k}"),
        });
        *n += 1;
    }
    anchors
}

/// Every `](target)` outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            links.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    links
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match link.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (link.as_str(), None),
            };
            let target: PathBuf = match path {
                "" => page.clone(),
                path => page.parent().unwrap().join(path),
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", name(&page)));
                continue;
            }
            if let Some(anchor) = anchor {
                let text = std::fs::read_to_string(&target).unwrap_or_default();
                if !anchors(&text).contains(anchor) {
                    broken.push(format!("{}: {link} (no such heading)", name(&page)));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

fn name(path: &Path) -> String {
    path.strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn the_link_checker_knows_githubs_anchors() {
    let text = "# A page\n## Requests from servers to clients (sampling, elicitation, roots)\n## `GET /mcp`\n## Calls\n## Calls\n```\n# not a heading\n```\n";
    let found = anchors(text);
    for anchor in [
        "a-page",
        "requests-from-servers-to-clients-sampling-elicitation-roots",
        "get-mcp",
        "calls",
        "calls-1",
    ] {
        assert!(found.contains(anchor), "{anchor} in {found:?}");
    }
    assert!(!found.contains("not-a-heading"));
    assert_eq!(
        links("see [a](b.md#c) and [d](#e)\n```\n[x](y)\n```"),
        ["b.md#c", "#e"]
    );
}

/// The fenced blocks of `lang` in README.md, in order.
fn readme_blocks(lang: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_start().strip_prefix("```")) {
            (None, Some(tag)) if tag == lang => current = Some(String::new()),
            (Some(block), Some("")) => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

/// `mcpmux ARGS` with `env`: exit code, and stdout and stderr together.
async fn mcpmux(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let (code, out, err) = crate::support::run_mcpmux(args, env).await;
    (code, format!("{out}{err}"))
}

#[tokio::test]
async fn the_readmes_config_and_host_snippets_are_what_they_claim() {
    let yaml = readme_blocks("yaml");
    let [config] = yaml.as_slice() else {
        panic!("expected one YAML block in README.md, found {}", yaml.len());
    };
    let file = tempdir().join("mcpmux.yaml");
    std::fs::write(&file, config).unwrap();
    let (code, said) = mcpmux(&["check", file.to_str().unwrap()], &[("GITHUB_TOKEN", "t")]).await;
    assert_eq!(code, 0, "README's config:\n{config}\n{said}");
    assert!(said.contains("ok (2 upstreams)"), "{said}");

    // Claude Desktop, VS Code and Cursor snippets: each a host config that
    // names mcpmux, in the shape that host reads.
    let json = readme_blocks("json");
    assert_eq!(json.len(), 3, "{json:?}");
    for (snippet, shape) in json.iter().zip(["mcpServers", "servers", "mcpServers"]) {
        let value: serde_json::Value =
            serde_json::from_str(snippet).unwrap_or_else(|e| panic!("not JSON ({e}):\n{snippet}"));
        assert!(value[shape]["mcpmux"].is_object(), "{shape} in {snippet}");
        let host = tempdir().join("host.json");
        std::fs::write(&host, snippet).unwrap();
        let (code, said) = mcpmux(&["import", host.to_str().unwrap()], &[]).await;
        assert_eq!(code, 0, "{said}");
        assert!(said.contains("  mcpmux:\n"), "{said}");
    }
    let claude_desktop = &json[0];
    assert!(
        claude_desktop.contains("\"stdio\""),
        "Claude Desktop runs mcpmux stdio: {claude_desktop}"
    );
}

#[test]
fn ci_runs_the_readmes_test_command() {
    let sh = readme_blocks("sh");
    let two = sh
        .iter()
        .find(|b| b.contains("# 2. Run the whole test suite"))
        .expect("the two commands in README.md");
    let commands: Vec<&str> = two
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(commands, ["cargo run -- serve", "scripts/test.sh"]);
    let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim() == "exec bash scripts/test.sh"),
        ".ci/run does not run the README's test command:\n{ci}"
    );
}

/// `major.minor` of a `rust-version` value.
fn version_of(text: &str) -> (u32, u32) {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The `rust-version = "..."` of a Cargo.toml's text.
fn rust_version(manifest: &str) -> Option<(u32, u32)> {
    manifest.lines().find_map(|line| {
        let value = line.trim().strip_prefix("rust-version")?.trim_start();
        let value = value.strip_prefix('=')?.trim().trim_matches('"');
        Some(version_of(value))
    })
}

#[test]
fn rust_version_is_what_the_locked_dependencies_need() {
    let ours = rust_version(&std::fs::read_to_string(repo().join("Cargo.toml")).unwrap())
        .expect("Cargo.toml sets rust-version");
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let sources: Vec<PathBuf> = std::fs::read_dir(cargo_home.join("registry/src"))
        .expect("the registry sources cargo unpacked for this build")
        .map(|e| e.unwrap().path())
        .collect();
    let lock = std::fs::read_to_string(repo().join("Cargo.lock")).unwrap();
    let mut needed = ((0, 0), String::new());
    let mut found = 0;
    let mut name = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"').to_owned());
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name.take()) {
            let package = format!("{n}-{}", v.trim_matches('"'));
            let manifest = sources
                .iter()
                .map(|s| s.join(&package).join("Cargo.toml"))
                .find(|m| m.exists());
            let Some(manifest) = manifest else { continue };
            found += 1;
            if let Some(v) = rust_version(&std::fs::read_to_string(manifest).unwrap())
                && v > needed.0
            {
                needed = (v, package);
            }
        }
    }
    assert!(
        found > 100,
        "only {found} locked packages found under {sources:?}"
    );
    assert_eq!(
        ours, needed.0,
        "Cargo.toml's rust-version is {ours:?}; the locked {} needs {:?}",
        needed.1, needed.0
    );
}

/// One module of ARCHITECTURE.md's table: its name and the children it
/// names in parentheses (which may name theirs).
#[derive(Debug)]
struct Listed {
    name: String,
    children: Vec<Listed>,
}

/// The modules a table row's first cell names: `` `a` (`b`, `c` (`d`)), `e` ``.
fn listed_modules(cell: &str) -> Vec<Listed> {
    fn list(tokens: &mut std::iter::Peekable<std::vec::IntoIter<String>>) -> Vec<Listed> {
        let mut out: Vec<Listed> = Vec::new();
        while let Some(token) = tokens.next() {
            match token.as_str() {
                "(" => {
                    let children = list(tokens);
                    if let Some(last) = out.last_mut() {
                        last.children = children;
                    }
                }
                ")" => return out,
                "," => {}
                name => out.push(Listed {
                    name: name.to_owned(),
                    children: Vec::new(),
                }),
            }
        }
        out
    }
    let mut tokens = Vec::new();
    let mut chars = cell.chars();
    while let Some(c) = chars.next() {
        match c {
            '`' => tokens.push(chars.by_ref().take_while(|c| *c != '`').collect()),
            '(' | ')' | ',' => tokens.push(c.to_string()),
            _ => {}
        }
    }
    list(&mut tokens.into_iter().peekable())
}

/// The modules of a directory: its `.rs` files and subdirectories, without
/// test-only ones and crate roots (`main.rs`, `lib.rs`, listed as rows).
fn modules_in(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            match e.path().is_dir() {
                true => Some(name),
                false => name.strip_suffix(".rs").map(str::to_owned),
            }
        })
        .filter(|n| {
            !(n == "tests"
                || n.ends_with("_tests")
                || n == "proptests"
                || n == "test_support"
                || n == "main"
                || n == "lib")
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Checks `listed` against `dir`: every child it names exists there, and
/// every module there is named. Returns what is wrong.
fn check_listed(listed: &Listed, dir: &Path, problems: &mut Vec<String>) {
    let here = dir.join(&listed.name);
    let found = modules_in(&here);
    for child in &listed.children {
        if !found.contains(&child.name) {
            problems.push(format!(
                "{}: names `{}`, which is not there",
                here.display(),
                child.name
            ));
        }
        check_listed(child, &here, problems);
    }
    if !listed.children.is_empty() || here.is_dir() {
        for module in &found {
            if !listed.children.iter().any(|c| &c.name == module) {
                problems.push(format!(
                    "{}: `{module}` is not in the table",
                    here.display()
                ));
            }
        }
    }
}

#[test]
fn architecture_lists_every_module_and_only_modules_that_exist() {
    let text = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let table: Vec<&str> = text
        .split("## Modules")
        .nth(1)
        .unwrap()
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .collect();
    let mut problems = Vec::new();
    let mut top: Vec<String> = Vec::new();
    for row in table {
        let cell = row.split('|').nth(1).unwrap();
        for module in listed_modules(cell) {
            let (dir, name) = match module.name.strip_suffix('/') {
                // A directory at the repository's root (`fixture/`).
                Some(path) => (repo(), path.to_owned()),
                None => (repo().join("src"), module.name.clone()),
            };
            let name = name.strip_suffix(".rs").unwrap_or(&name).to_owned();
            let exists = dir.join(format!("{name}.rs")).is_file() || dir.join(&name).is_dir();
            if !exists {
                problems.push(format!("`{}` is not a module", module.name));
            }
            check_listed(
                &Listed {
                    name: name.clone(),
                    children: module.children,
                },
                &dir,
                &mut problems,
            );
            top.push(name);
        }
    }
    for module in modules_in(&repo().join("src")) {
        if !top.contains(&module) {
            problems.push(format!("src/{module} is not in the table"));
        }
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md's modules:\n{}",
        problems.join("\n")
    );
}
