//! `mcpmux import`: a host's MCP server config (Claude Desktop's
//! `claude_desktop_config.json`, Cursor's `mcp.json`, VS Code's `mcp.json`)
//! turned into the equivalent mcpmux YAML, so a team can move its servers
//! behind the gateway in one step.
//!
//! Both shapes are read: `mcpServers` (Claude Desktop, Cursor, Claude
//! Code's `.mcp.json`) and `servers` (VS Code). Each server becomes an
//! upstream: `command`/`args`/`env`/`cwd` a stdio one, `url`/`headers` a
//! remote one (`type: sse` keeps the legacy transport). Secrets do not
//! travel into the YAML: every `env` value and header value becomes a
//! `${VAR}` reference, and the notes list what to export. Whatever has no
//! mcpmux equivalent (unknown fields, VS Code's `inputs` and `envFile`,
//! disabled servers) is reported in the notes, never dropped silently.

use std::fmt::Write as _;

use serde_json::Value;

/// Why a file could not be read as a host config.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    #[error("not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    #[error("no `mcpServers` or `servers` object at the top level")]
    NoServers,
    #[error("no servers to import")]
    Empty,
}

/// The YAML for mcpmux, and what the user must know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// A complete config, valid for `mcpmux check` once the variables it
    /// names are set.
    pub yaml: String,
    /// One line per thing that did not carry over as is.
    pub notes: Vec<String>,
    /// The environment variables the YAML refers to, with the value the
    /// host config had (for the user to export; never written to `yaml`).
    pub variables: Vec<(String, String)>,
}

/// Converts a host config (JSON text) into mcpmux YAML.
pub fn convert(json: &str) -> Result<Imported, ImportError> {
    // Host configs are JSON, but VS Code's allow comments and trailing commas.
    let value: Value = match serde_json::from_str(json) {
        Ok(v) => v,
        Err(e) => match serde_json::from_str(&strip_jsonc(json)) {
            Ok(v) => v,
            Err(_) => return Err(ImportError::NotJson(e)),
        },
    };
    let top = value.as_object().ok_or(ImportError::NoServers)?;
    let (key, servers) = ["mcpServers", "servers"]
        .iter()
        .find_map(|k| top.get(*k).and_then(Value::as_object).map(|s| (*k, s)))
        .ok_or(ImportError::NoServers)?;
    let mut out = Converter::default();
    for (name, _) in top {
        match name.as_str() {
            n if n == key => {}
            "inputs" => out.note(
                "`inputs` (values VS Code prompts for) have no equivalent: set the variables named below instead".into(),
            ),
            other => out.note(format!("top-level `{other}` ignored")),
        }
    }
    for (name, server) in servers {
        out.server(name, server);
    }
    if out.upstreams.is_empty() {
        return Err(ImportError::Empty);
    }
    Ok(out.finish())
}

#[derive(Default)]
struct Converter {
    upstreams: String,
    names: Vec<String>,
    notes: Vec<String>,
    variables: Vec<(String, String)>,
}

impl Converter {
    fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    fn server(&mut self, original: &str, server: &Value) {
        let Some(server) = server.as_object() else {
            self.note(format!("{original:?}: not an object; skipped"));
            return;
        };
        if server.get("disabled").and_then(Value::as_bool) == Some(true) {
            self.note(format!("{original:?}: disabled in the host; skipped"));
            return;
        }
        let name = self.upstream_name(original);
        let mut body = String::new();
        let mut known = vec!["type", "disabled"];
        let kind = server.get("type").and_then(Value::as_str);
        if let Some(command) = server.get("command").and_then(Value::as_str) {
            known.extend(["command", "args", "env", "cwd", "envFile"]);
            let _ = writeln!(body, "    command: {}", quote(command));
            if let Some(args) = server.get("args").and_then(Value::as_array) {
                let args: Vec<String> = args.iter().map(|a| quote(&text_of(a))).collect();
                let _ = writeln!(body, "    args: [{}]", args.join(", "));
            }
            if let Some(cwd) = server.get("cwd").and_then(Value::as_str) {
                let _ = writeln!(body, "    cwd: {}", quote(cwd));
            }
            if let Some(env) = server.get("env").and_then(Value::as_object)
                && !env.is_empty()
            {
                body.push_str("    env:\n");
                for (var, value) in env {
                    let reference = self.secret(&name, var, value);
                    let _ = writeln!(body, "      {}: {}", quote(var), quote(&reference));
                }
            }
            if server.contains_key("envFile") {
                self.note(format!(
                    "{name}: `envFile` is not read; put its variables in `env`"
                ));
            }
        } else if let Some(url) = server
            .get("url")
            .or_else(|| server.get("serverUrl"))
            .and_then(Value::as_str)
        {
            known.extend(["url", "serverUrl", "headers"]);
            let _ = writeln!(body, "    url: {}", quote(url));
            match kind {
                Some("sse") => body.push_str("    transport: sse\n"),
                Some("http" | "streamable-http" | "streamableHttp") => {
                    body.push_str("    transport: streamable-http\n")
                }
                _ => {}
            }
            if let Some(headers) = server.get("headers").and_then(Value::as_object)
                && !headers.is_empty()
            {
                body.push_str("    headers:\n");
                for (header, value) in headers {
                    let var = format!("{}_{}", env_stem(&name), env_stem(header));
                    let reference = self.secret_as(&var, value);
                    let _ = writeln!(body, "      {}: {}", quote(header), quote(&reference));
                }
            }
        } else {
            self.note(format!(
                "{original:?}: neither `command` nor `url`; skipped"
            ));
            return;
        }
        for field in server.keys() {
            if !known.contains(&field.as_str()) {
                self.note(format!(
                    "{name}: field `{field}` has no mcpmux equivalent; not carried over"
                ));
            }
        }
        let _ = writeln!(self.upstreams, "  {name}:");
        self.upstreams.push_str(&body);
    }

    /// A valid, unused upstream name for `original` (noted when it changes).
    fn upstream_name(&mut self, original: &str) -> String {
        let mut name: String = original
            .chars()
            .map(|c| match c.to_ascii_lowercase() {
                c @ ('a'..='z' | '0'..='9') => c,
                _ => '-',
            })
            .collect();
        name = name.trim_matches('-').to_owned();
        while name.contains("--") {
            name = name.replace("--", "-");
        }
        if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
            name.insert_str(0, "mcp-");
        }
        name.truncate(28);
        let base = name.trim_end_matches('-').to_owned();
        let mut unique = base.clone();
        let mut n = 2;
        while self.names.contains(&unique) {
            unique = format!("{base}-{n}");
            n += 1;
        }
        if unique != original {
            self.note(format!(
                "{original:?} is named {unique:?} (names are [a-z][a-z0-9-]); its tools appear as {unique}__<tool>"
            ));
        }
        self.names.push(unique.clone());
        unique
    }

    /// `${VAR}` for an `env` value: the variable keeps its name unless
    /// another server already uses that name for a different value.
    fn secret(&mut self, upstream: &str, var: &str, value: &Value) -> String {
        let value = text_of(value);
        let taken = self
            .variables
            .iter()
            .any(|(name, v)| name == var && *v != value);
        let name = match taken {
            false => var.to_owned(),
            true => format!("{}_{}", env_stem(upstream), var),
        };
        self.secret_as(&name, &Value::String(value))
    }

    fn secret_as(&mut self, name: &str, value: &Value) -> String {
        let value = text_of(value);
        if let Some(input) = value.strip_prefix("${input:") {
            self.note(format!(
                "{name}: VS Code input `{}` becomes the variable {name}",
                input.trim_end_matches('}')
            ));
        }
        if !self.variables.iter().any(|(n, _)| n == name) {
            self.variables.push((name.to_owned(), value));
        }
        format!("${{{name}}}")
    }

    fn finish(self) -> Imported {
        let mut yaml = String::from(
            "# Imported by `mcpmux import`. Check it with `mcpmux check FILE`.\n\
             # Client authentication is off: fine on the default loopback address;\n\
             # configure `auth` (see config/secure.yaml) before listening elsewhere.\n\
             auth: { mode: off }\n\
             upstreams:\n",
        );
        yaml.push_str(&self.upstreams);
        Imported {
            yaml,
            notes: self.notes,
            variables: self.variables,
        }
    }
}

/// A YAML double-quoted scalar (JSON string syntax is valid YAML).
fn quote(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `NAME` part of an environment variable made from a name or header.
fn env_stem(text: &str) -> String {
    text.chars()
        .map(|c| match c.to_ascii_uppercase() {
            c @ ('A'..='Z' | '0'..='9') => c,
            _ => '_',
        })
        .collect()
}

/// JSON with `//` and `/* */` comments and trailing commas removed (JSONC).
fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => out.extend(chars.next()),
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            _ => out.push(c),
        }
    }
    // Trailing commas: `,` followed (after whitespace) by `}` or `]`.
    let mut cleaned = String::with_capacity(out.len());
    let bytes: Vec<char> = out.chars().collect();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            cleaned.push(c);
            if c == '\\' && i + 1 < bytes.len() {
                cleaned.push(bytes[i + 1]);
                i += 1;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            cleaned.push(c);
        } else if c == ',' {
            let next = bytes[i + 1..].iter().find(|c| !c.is_whitespace());
            if !matches!(next, Some('}' | ']')) {
                cleaned.push(c);
            }
        } else {
            cleaned.push(c);
        }
        i += 1;
    }
    cleaned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_trailing_commas_are_tolerated_but_not_inside_strings() {
        let text = "{\n // a comment\n \"servers\": { /* x */ \"a\": { \"url\": \"http://h/a//b,}\", }, },\n}";
        let value: Value = serde_json::from_str(&strip_jsonc(text)).unwrap();
        assert_eq!(value["servers"]["a"]["url"], "http://h/a//b,}");
    }

    #[test]
    fn names_become_valid_and_unique() {
        let mut c = Converter::default();
        assert_eq!(c.upstream_name("GitHub Server"), "github-server");
        assert_eq!(c.upstream_name("github server"), "github-server-2");
        assert_eq!(c.upstream_name("9lives"), "mcp-9lives");
        assert_eq!(c.upstream_name("files"), "files");
        assert_eq!(c.notes.len(), 3, "{:?}", c.notes);
    }
}
