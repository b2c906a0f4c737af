//! The operator's page as HTML, from a [`Page`] gathered by `ui`.
//!
//! Everything that comes from outside (tool names, URIs, client names,
//! error texts, the config) is untrusted and goes through `html_escape`:
//! `encode_text` in element content, `encode_double_quoted_attribute` in
//! attribute values. The page is semantic HTML (sections, tables with
//! header cells, `details` lists, labelled controls), works without
//! JavaScript, and `ui.js` adds the item filter and the live figures.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use html_escape::{encode_double_quoted_attribute as attr, encode_text as text};

/// One upstream as the page shows it.
pub(crate) struct UpstreamRow {
    pub name: String,
    pub state: &'static str,
    pub reason: Option<String>,
    pub transport: &'static str,
    /// `2026-07-28`, a legacy protocol version, or none before a handshake.
    pub era: Option<String>,
    pub server: Option<String>,
    pub restarts: u64,
    pub uptime: Option<Duration>,
    pub pid: Option<u32>,
    /// Tools, prompts, resources and templates, by exposed name or URI.
    pub items: [Vec<String>; 4],
    pub errors: Vec<(SystemTime, String)>,
    /// With an `auth:` section: its mode, who connected their account,
    /// and who has an upstream session of their own now (no token).
    pub auth: Option<AuthRow>,
}

/// How an upstream with an `auth:` section acts upstream.
pub(crate) struct AuthRow {
    pub mode: &'static str,
    pub connected: Vec<String>,
    pub sessions: Vec<String>,
}

/// One session or listen stream.
pub(crate) struct ClientRow {
    /// `session` or `listen stream`.
    pub kind: &'static str,
    /// A short, non-secret label (the subscriber number, and for a session
    /// the first characters of its id).
    pub label: String,
    pub client: Option<(String, String)>,
    pub era: String,
    pub identity: Option<String>,
    pub age: Duration,
    pub in_flight: usize,
    pub streams: usize,
    /// The endpoint it uses (`/mcp/<name>`); none: `/mcp`.
    pub endpoint: Option<String>,
}

/// One view: the whole one (`/mcp`) or an endpoint.
pub(crate) struct EndpointRow {
    pub path: String,
    /// The upstreams it shows; none: all.
    pub upstreams: Option<Vec<String>>,
    pub prefix_mode: &'static str,
    /// Listed tools, prompts, resources and templates.
    pub counts: [usize; 4],
    /// A progressive view's searchable tools.
    pub searchable: Option<usize>,
    pub sessions: usize,
    /// Items left out by `prefix_mode: never`.
    pub collisions: Vec<String>,
}

/// One subscribed URI.
pub(crate) struct SubscriptionRow {
    pub uri: String,
    pub upstream: String,
    /// The labels of its subscribers (as in [`ClientRow::label`]).
    pub subscribers: Vec<String>,
}

/// One (upstream, item)'s figures since start.
pub(crate) struct FigureRow {
    pub upstream: String,
    pub item: String,
    pub calls: u64,
    pub errors: u64,
}

/// Everything on the page.
pub(crate) struct Page {
    pub version: &'static str,
    pub upstreams: Vec<UpstreamRow>,
    /// The whole view first, then each endpoint.
    pub endpoints: Vec<EndpointRow>,
    pub clients: Vec<ClientRow>,
    pub subscriptions: Vec<SubscriptionRow>,
    pub figures: Vec<FigureRow>,
    /// The config in force, secrets masked.
    pub config: String,
    /// When the gateway started.
    pub started: SystemTime,
    /// The last reload: when, and what came of it.
    pub last_reload: Option<(SystemTime, String)>,
}

const KINDS: [&str; 4] = ["Tools", "Prompts", "Resources", "Resource templates"];
/// Items listed per kind and upstream; the rest are counted.
const MAX_LISTED: usize = 2000;

fn when(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

fn duration(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

fn or_dash(value: Option<impl std::fmt::Display>) -> String {
    value.map_or_else(|| "–".to_owned(), |v| v.to_string())
}

/// The whole document.
pub(crate) fn page(page: &Page) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let _ = write!(
        out,
        r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mcpmux operator page</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="ui/ui.css">
<script src="ui/ui.js" defer></script>
</head>
<body>
<a class="skip" href="#upstreams">Skip to content</a>
<header>
<h1>mcpmux <small>{version}</small></h1>
<nav aria-label="Sections"><ul>
<li><a href="#upstreams">Upstreams</a></li>
<li><a href="#endpoints">Endpoints</a></li>
<li><a href="#clients">Clients</a></li>
<li><a href="#subscriptions">Subscriptions</a></li>
<li><a href="#figures">Live figures</a></li>
<li><a href="#config">Config</a></li>
</ul></nav>
<p id="live-status" role="status" aria-live="polite">Live updates: connecting…</p>
</header>
<main>
"##,
        version = text(page.version)
    );
    upstreams(&mut out, &page.upstreams);
    endpoints(&mut out, &page.endpoints);
    clients(&mut out, &page.clients);
    subscriptions(&mut out, &page.subscriptions);
    figures(&mut out, &page.figures);
    config(&mut out, page);
    out.push_str("</main>\n</body>\n</html>\n");
    out
}

fn upstreams(out: &mut String, rows: &[UpstreamRow]) {
    let _ = write!(
        out,
        r#"<section id="upstreams" aria-labelledby="upstreams-h">
<h2 id="upstreams-h">Upstreams <span class="count">({n})</span></h2>
<p><label for="item-filter">Filter tools, prompts and resources</label>
<input id="item-filter" type="search" placeholder="name or URI" autocomplete="off"></p>
<div class="cards">
"#,
        n = rows.len()
    );
    for u in rows {
        let name = attr(&u.name);
        let _ = write!(
            out,
            r#"<article class="upstream" id="upstream-{name}" data-upstream="{name}" data-state="{state}">
<h3>{title} <span class="state state-{state}" data-field="state">{state}</span></h3>
<p class="reason" data-field="reason"{hidden}>{reason}</p>
<dl>
<dt>Transport</dt><dd>{transport}</dd>
<dt>Era</dt><dd>{era}</dd>
<dt>Server</dt><dd>{server}</dd>
<dt>Restarts</dt><dd data-field="restarts">{restarts}</dd>
<dt>Uptime</dt><dd data-field="uptime">{uptime}</dd>
<dt>PID</dt><dd data-field="pid">{pid}</dd>
<dt>Calls/s</dt><dd data-field="rate">0</dd>
<dt>p50 / p99</dt><dd data-field="latency">–</dd>
</dl>
<div class="charts">
<figure><svg class="spark" data-chart="{name}" viewBox="0 0 120 30" role="img" aria-label="calls per second, last two minutes"><polyline points=""/></svg><figcaption>calls/s, last 2 min</figcaption></figure>
<figure><svg class="spark" data-chart="~p99 {name}" viewBox="0 0 120 30" role="img" aria-label="p99 latency in milliseconds, last two minutes"><polyline points=""/></svg><figcaption>p99 ms, last 2 min</figcaption></figure>
</div>
"#,
            title = text(&u.name),
            state = u.state,
            hidden = if u.reason.is_some() { "" } else { " hidden" },
            reason = text(u.reason.as_deref().unwrap_or_default()),
            transport = u.transport,
            era = text(&or_dash(u.era.as_deref())),
            server = text(&or_dash(u.server.as_deref())),
            restarts = u.restarts,
            uptime = or_dash(u.uptime.map(duration)),
            pid = or_dash(u.pid),
        );
        if let Some(auth) = &u.auth {
            let names = |list: &[String]| match list.is_empty() {
                true => "–".to_owned(),
                false => text(&list.join(", ")).into_owned(),
            };
            let _ = writeln!(
                out,
                "<dl class=\"auth\"><dt>Acts upstream as</dt><dd>{mode}</dd><dt>Connected users</dt><dd>{connected}</dd><dt>Identity sessions</dt><dd>{sessions}</dd></dl>",
                mode = auth.mode,
                connected = names(&auth.connected),
                sessions = names(&auth.sessions),
            );
        }
        for (kind, items) in KINDS.iter().zip(&u.items) {
            if items.is_empty() {
                continue;
            }
            let _ = write!(
                out,
                "<details class=\"items\"><summary>{kind} ({n})</summary><ul>",
                n = items.len()
            );
            for item in items.iter().take(MAX_LISTED) {
                let _ = write!(out, "<li>{}</li>", text(item));
            }
            if items.len() > MAX_LISTED {
                let _ = write!(out, "<li>… and {} more</li>", items.len() - MAX_LISTED);
            }
            out.push_str("</ul></details>\n");
        }
        let _ = write!(
            out,
            "<details class=\"errors\"{open}><summary>Recent errors ({n})</summary>",
            open = if u.errors.is_empty() { "" } else { " open" },
            n = u.errors.len()
        );
        if u.errors.is_empty() {
            out.push_str("<p>None.</p>");
        } else {
            out.push_str("<ol reversed>");
            for (at, error) in &u.errors {
                let at = when(*at);
                let _ = write!(
                    out,
                    "<li><time datetime=\"{at}\">{at}</time> {}</li>",
                    text(error)
                );
            }
            out.push_str("</ol>");
        }
        out.push_str("</details>\n</article>\n");
    }
    out.push_str("</div>\n</section>\n");
}

fn clients(out: &mut String, rows: &[ClientRow]) {
    let _ = write!(
        out,
        r#"<section id="clients" aria-labelledby="clients-h">
<h2 id="clients-h">Clients <span class="count">({n})</span></h2>
<div class="scroll"><table>
<thead><tr><th scope="col">Kind</th><th scope="col">Id</th><th scope="col">Client</th><th scope="col">Endpoint</th><th scope="col">Era</th><th scope="col">Identity</th><th scope="col">Age</th><th scope="col">Calls in flight</th><th scope="col">Streams</th></tr></thead>
<tbody>
"#,
        n = rows.len()
    );
    if rows.is_empty() {
        out.push_str("<tr><td colspan=\"9\">No sessions or listen streams.</td></tr>\n");
    }
    for c in rows {
        let client = c.client.as_ref().map_or_else(
            || "–".to_owned(),
            |(name, version)| format!("{name} {version}"),
        );
        let _ = writeln!(
            out,
            "<tr class=\"client\" data-kind=\"{kind}\"><td>{kind}</td><th scope=\"row\">{label}</th><td>{client}</td><td><code>{endpoint}</code></td><td>{era}</td><td>{identity}</td><td>{age}</td><td>{in_flight}</td><td>{streams}</td></tr>",
            kind = c.kind,
            label = text(&c.label),
            client = text(&client),
            endpoint = text(c.endpoint.as_deref().unwrap_or("/mcp")),
            era = text(&c.era),
            identity = text(&or_dash(c.identity.as_deref())),
            age = duration(c.age),
            in_flight = c.in_flight,
            streams = c.streams,
        );
    }
    out.push_str("</tbody></table></div>\n</section>\n");
}

fn endpoints(out: &mut String, rows: &[EndpointRow]) {
    let _ = write!(
        out,
        r#"<section id="endpoints" aria-labelledby="endpoints-h">
<h2 id="endpoints-h">Endpoints <span class="count">({n})</span></h2>
<div class="scroll"><table>
<thead><tr><th scope="col">Path</th><th scope="col">Upstreams</th><th scope="col">Names</th><th scope="col">Tools</th><th scope="col">Prompts</th><th scope="col">Resources</th><th scope="col">Templates</th><th scope="col">Search</th><th scope="col">Sessions</th></tr></thead>
<tbody>
"#,
        n = rows.len()
    );
    for e in rows {
        let upstreams = e
            .upstreams
            .as_ref()
            .map_or_else(|| "all".to_owned(), |names| names.join(", "));
        let search = e.searchable.map_or_else(
            || "off".to_owned(),
            |n| format!("progressive ({n} searchable)"),
        );
        let [tools, prompts, resources, templates] = e.counts;
        let _ = writeln!(
            out,
            "<tr class=\"endpoint\"><th scope=\"row\"><code>{path}</code></th><td>{upstreams}</td><td>{mode}</td><td>{tools}</td><td>{prompts}</td><td>{resources}</td><td>{templates}</td><td>{search}</td><td>{sessions}</td></tr>",
            path = text(&e.path),
            upstreams = text(&upstreams),
            mode = text(e.prefix_mode),
            search = text(&search),
            sessions = e.sessions,
        );
        for collision in &e.collisions {
            let _ = writeln!(
                out,
                "<tr class=\"collision\"><td colspan=\"9\">Left out: {}</td></tr>",
                text(collision)
            );
        }
    }
    out.push_str("</tbody></table></div>\n</section>\n");
}

fn subscriptions(out: &mut String, rows: &[SubscriptionRow]) {
    let _ = write!(
        out,
        r#"<section id="subscriptions" aria-labelledby="subscriptions-h">
<h2 id="subscriptions-h">Subscriptions <span class="count">({n})</span></h2>
<div class="scroll"><table>
<thead><tr><th scope="col">URI</th><th scope="col">Served by</th><th scope="col">Subscribers</th></tr></thead>
<tbody>
"#,
        n = rows.len()
    );
    if rows.is_empty() {
        out.push_str("<tr><td colspan=\"3\">No resource subscriptions.</td></tr>\n");
    }
    for s in rows {
        let _ = writeln!(
            out,
            "<tr class=\"subscription\"><th scope=\"row\"><code>{uri}</code></th><td>{upstream}</td><td>{subscribers}</td></tr>",
            uri = text(&s.uri),
            upstream = text(&s.upstream),
            subscribers = text(&s.subscribers.join(", ")),
        );
    }
    out.push_str("</tbody></table></div>\n</section>\n");
}

fn figures(out: &mut String, rows: &[FigureRow]) {
    let total: u64 = rows.iter().map(|r| r.calls).sum();
    let errors: u64 = rows.iter().map(|r| r.errors).sum();
    let _ = write!(
        out,
        r#"<section id="figures" aria-labelledby="figures-h">
<h2 id="figures-h">Live figures</h2>
<dl class="totals">
<dt>Calls since start</dt><dd id="total-calls">{total}</dd>
<dt>Errors since start</dt><dd id="total-errors">{errors}</dd>
<dt>Calls/s</dt><dd id="total-rate">0</dd>
<dt>Error rate</dt><dd id="total-error-rate">–</dd>
</dl>
<div class="charts">
<figure><svg class="spark wide" data-chart="" viewBox="0 0 120 30" role="img" aria-label="all calls per second, last two minutes"><polyline points=""/></svg><figcaption>All calls/s, last 2 min</figcaption></figure>
<figure><svg class="spark wide" data-chart="~errors" viewBox="0 0 120 30" role="img" aria-label="error rate in percent, last two minutes"><polyline points=""/></svg><figcaption>Error rate %, last 2 min</figcaption></figure>
</div>
<div class="scroll"><table>
<caption>By upstream and tool (or prompt, or resource); rates over the last second</caption>
<thead><tr><th scope="col">Upstream</th><th scope="col">Item</th><th scope="col">Calls</th><th scope="col">Calls/s</th><th scope="col">Error rate</th><th scope="col">p50</th><th scope="col">p99</th><th scope="col">Trend</th></tr></thead>
<tbody id="item-rows">
"#
    );
    for r in rows {
        // Upstream names have no spaces: "upstream item" is unambiguous.
        let key = format!("{} {}", r.upstream, r.item);
        let _ = writeln!(
            out,
            "<tr data-key=\"{key}\" data-item=\"{item_attr}\"><td>{upstream}</td><th scope=\"row\">{item}</th><td data-field=\"calls\">{calls}</td><td data-field=\"rate\">0</td><td data-field=\"errors\">–</td><td data-field=\"p50\">–</td><td data-field=\"p99\">–</td><td><svg class=\"spark\" data-chart=\"{key}\" viewBox=\"0 0 120 30\" role=\"img\" aria-label=\"calls per second\"><polyline points=\"\"/></svg></td></tr>",
            key = attr(&key),
            item_attr = attr(&r.item),
            upstream = text(&r.upstream),
            item = text(&r.item),
            calls = r.calls,
        );
    }
    out.push_str("</tbody></table></div>\n</section>\n");
}

fn config(out: &mut String, page: &Page) {
    let reload = match &page.last_reload {
        Some((at, result)) => {
            let at = when(*at);
            format!("<time datetime=\"{at}\">{at}</time>: {}", text(result))
        }
        None => "none since start".to_owned(),
    };
    let started = when(page.started);
    let _ = write!(
        out,
        r#"<section id="config" aria-labelledby="config-h">
<h2 id="config-h">Config in force</h2>
<p>Started <time datetime="{started}">{started}</time>. Last reload: <span id="last-reload">{reload}</span>.</p>
<details><summary>Settings (secrets masked)</summary><pre>{config}</pre></details>
</section>
"#,
        config = text(&page.config)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(name: &str, item: &str) -> UpstreamRow {
        UpstreamRow {
            name: name.into(),
            state: "down",
            reason: Some("down (<b>boom</b>)".into()),
            transport: "stdio",
            era: None,
            server: None,
            restarts: 2,
            uptime: None,
            pid: None,
            items: [vec![item.into()], vec![], vec![], vec![]],
            errors: vec![(SystemTime::UNIX_EPOCH, "x<y".into())],
            auth: Some(AuthRow {
                mode: "user",
                connected: vec!["<alice>".into()],
                sessions: vec![],
            }),
        }
    }

    #[test]
    fn untrusted_text_is_escaped_everywhere() {
        let evil = r#""><script>alert(1)</script>"#;
        let page = Page {
            version: "0",
            upstreams: vec![upstream("a", evil)],
            clients: vec![ClientRow {
                kind: "session",
                label: "#1".into(),
                client: Some((evil.into(), evil.into())),
                era: "2025-06-18".into(),
                identity: Some(evil.into()),
                age: Duration::from_secs(5),
                in_flight: 0,
                streams: 1,
                endpoint: Some(evil.into()),
            }],
            endpoints: vec![EndpointRow {
                path: evil.into(),
                upstreams: Some(vec![evil.into()]),
                prefix_mode: "always",
                counts: [1, 0, 0, 0],
                searchable: Some(3),
                sessions: 1,
                collisions: vec![evil.into()],
            }],
            subscriptions: vec![SubscriptionRow {
                uri: evil.into(),
                upstream: "a".into(),
                subscribers: vec![evil.into()],
            }],
            figures: vec![FigureRow {
                upstream: "a".into(),
                item: evil.into(),
                calls: 1,
                errors: 0,
            }],
            config: evil.into(),
            started: SystemTime::UNIX_EPOCH,
            last_reload: Some((SystemTime::UNIX_EPOCH, evil.into())),
        };
        let html = super::page(&page);
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(!html.contains("<b>boom"));
        assert!(html.contains("&lt;script&gt;"));
        assert!(html.contains("data-state=\"down\""));
        assert!(
            html.contains("<dt>Connected users</dt><dd>&lt;alice&gt;</dd>"),
            "who connected, escaped: {html}"
        );
    }
}
