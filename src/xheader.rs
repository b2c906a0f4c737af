//! Tool parameters mirrored into HTTP headers (`x-mcp-header`, 2026-07-28),
//! and the `=?base64?…?=` header value encoding shared with `Mcp-Name`.
//!
//! A tool's `inputSchema` may mark primitive properties, reachable from the
//! root through `properties` keys only, with `"x-mcp-header": "Name"`; a
//! call then carries `Mcp-Param-Name: <value>`. The gateway checks the
//! annotations when it builds its catalog (a tool with an invalid one is
//! left out, as HTTP clients must do), validates the headers of modern
//! clients against the body, and sets them on calls to modern HTTP
//! upstreams.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

/// One mirrored parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeaderParam {
    /// The `x-mcp-header` value: the header is `Mcp-Param-{name}`.
    pub name: String,
    /// Property names from the schema root to the parameter.
    pub path: Vec<String>,
}

/// Why a tool's `x-mcp-header` annotations make its definition invalid (the
/// catalog then leaves the tool out).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum AnnotationError {
    /// Two parameters name the same header, ignoring case.
    #[error("x-mcp-header {0:?} is used twice")]
    Duplicate(String),
    /// The annotation (shown as JSON) is not an HTTP header token.
    #[error("x-mcp-header {0} is not a header token")]
    NotAToken(Value),
    /// The annotation is on the root, or under something but `properties`.
    #[error("x-mcp-header {0:?} is not on a property reachable through `properties`")]
    Unreachable(String),
    /// The annotated property's `type` is missing or not a primitive.
    #[error(
        "x-mcp-header {name:?} is on a {kind:?} parameter; only string, integer and boolean are allowed"
    )]
    NotPrimitive { name: String, kind: Option<String> },
}

/// Why a modern client's `Mcp-Param-*` headers do not agree with its
/// arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum HeaderMismatch {
    /// The argument is present, its header is not; holds the header name.
    #[error("the {0} header is missing")]
    Missing(String),
    /// The header's `=?base64?…?=` value does not decode to UTF-8.
    #[error("the {0} header is not valid Base64 UTF-8")]
    NotBase64(String),
    /// The header and the argument disagree.
    #[error("{header} header value {decoded:?} does not match body value {body}")]
    Differs {
        header: String,
        decoded: String,
        body: Value,
    },
}

/// The annotated parameters of a tool's `inputSchema`, or why the tool
/// definition is invalid.
pub(crate) fn from_schema(schema: &Value) -> Result<Vec<HeaderParam>, AnnotationError> {
    let mut found = Vec::new();
    walk(schema, &mut Vec::new(), true, &mut found)?;
    let mut seen = std::collections::HashSet::new();
    for param in &found {
        if !seen.insert(param.name.to_ascii_lowercase()) {
            return Err(AnnotationError::Duplicate(param.name.clone()));
        }
    }
    Ok(found)
}

fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Walks the schema; `reachable` says whether the current node is reached
/// from the root through `properties` keys only.
fn walk(
    node: &Value,
    path: &mut Vec<String>,
    reachable: bool,
    found: &mut Vec<HeaderParam>,
) -> Result<(), AnnotationError> {
    let Value::Object(map) = node else {
        if let Value::Array(items) = node {
            for item in items {
                walk(item, path, false, found)?;
            }
        }
        return Ok(());
    };
    if let Some(header) = map.get("x-mcp-header") {
        let name = header
            .as_str()
            .filter(|n| is_token(n))
            .ok_or_else(|| AnnotationError::NotAToken(header.clone()))?;
        if !reachable || path.is_empty() {
            return Err(AnnotationError::Unreachable(name.to_owned()));
        }
        match map.get("type").and_then(Value::as_str) {
            Some("string" | "integer" | "boolean") => {}
            other => {
                return Err(AnnotationError::NotPrimitive {
                    name: name.to_owned(),
                    kind: other.map(str::to_owned),
                });
            }
        }
        found.push(HeaderParam {
            name: name.to_owned(),
            path: path.clone(),
        });
    }
    for (key, child) in map {
        match (key.as_str(), child) {
            ("properties", Value::Object(props)) => {
                for (prop, schema) in props {
                    path.push(prop.clone());
                    walk(schema, path, reachable, found)?;
                    path.pop();
                }
            }
            ("x-mcp-header", _) => {}
            (_, child) => walk(child, path, false, found)?,
        }
    }
    Ok(())
}

/// The value at `path` in the call's arguments as header text, if present.
fn value_at<'a>(arguments: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut node = arguments;
    for key in path {
        node = node.get(key)?;
    }
    (!node.is_null()).then_some(node)
}

fn as_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        Value::Number(n) => n
            .as_f64()
            .filter(|f| f.fract() == 0.0)
            .map(|f| format!("{f:.0}")),
        _ => None,
    }
}

/// The `Mcp-Param-*` headers for a call's arguments.
pub(crate) fn headers_for(params: &[HeaderParam], arguments: &Value) -> Vec<(String, String)> {
    params
        .iter()
        .filter_map(|p| {
            let text = as_text(value_at(arguments, &p.path)?)?;
            Some((format!("mcp-param-{}", p.name), encode(&text)))
        })
        .collect()
}

/// Checks a modern client's `Mcp-Param-*` headers against the arguments.
pub(crate) fn validate(
    params: &[HeaderParam],
    arguments: &Value,
    header: impl Fn(&str) -> Option<String>,
) -> Result<(), HeaderMismatch> {
    for param in params {
        let Some(body) = value_at(arguments, &param.path) else {
            continue;
        };
        let header_name = format!("Mcp-Param-{}", param.name);
        let raw = header(&header_name.to_ascii_lowercase())
            .ok_or_else(|| HeaderMismatch::Missing(header_name.clone()))?;
        let Some(decoded) = decode(raw.trim()) else {
            return Err(HeaderMismatch::NotBase64(header_name));
        };
        let matches = match body {
            Value::Number(n) => decoded.parse::<f64>().ok() == n.as_f64(),
            other => as_text(other).as_deref() == Some(decoded.as_str()),
        };
        if !matches {
            return Err(HeaderMismatch::Differs {
                header: header_name,
                decoded,
                body: body.clone(),
            });
        }
    }
    Ok(())
}

/// A header value: the text itself when it is plain visible ASCII, else
/// the `=?base64?…?=` sentinel form.
pub(crate) fn encode(text: &str) -> String {
    let plain = !text.is_empty()
        && text.bytes().all(|b| (0x20..0x7f).contains(&b))
        && text.trim() == text
        && !(text.starts_with("=?base64?") && text.ends_with("?="));
    if plain {
        text.to_owned()
    } else {
        format!("=?base64?{}?=", STANDARD.encode(text))
    }
}

/// Decodes a header value that may use the `=?base64?…?=` sentinel.
pub(crate) fn decode(value: &str) -> Option<String> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(encoded) => String::from_utf8(STANDARD.decode(encoded).ok()?).ok(),
        None => Some(value.to_owned()),
    }
}

/// The `arguments` of a `tools/call` params object.
pub(crate) fn arguments(raw: Option<&str>) -> Value {
    raw.and_then(|raw| serde_json::from_str(raw).ok())
        .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_valid_annotations_and_rejects_bad_ones() {
        let schema = json!({ "type": "object", "properties": {
            "region": { "type": "string", "x-mcp-header": "Region" },
            "opts": { "type": "object", "properties": { "dry": { "type": "boolean", "x-mcp-header": "Dry-Run" } } },
            "query": { "type": "string" } } });
        let params = from_schema(&schema).unwrap();
        assert_eq!(params.len(), 2);
        assert!(
            params
                .iter()
                .any(|p| p.name == "Dry-Run" && p.path == ["opts", "dry"])
        );
        for bad in [
            json!({ "properties": { "n": { "type": "number", "x-mcp-header": "N" } } }),
            json!({ "properties": { "l": { "type": "array", "items": { "type": "string", "x-mcp-header": "L" } } } }),
            json!({ "properties": { "a": { "type": "string", "x-mcp-header": "A" }, "b": { "type": "string", "x-mcp-header": "a" } } }),
            json!({ "properties": { "s": { "type": "string", "x-mcp-header": "bad name" } } }),
        ] {
            assert!(from_schema(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn validates_and_builds_headers() {
        let params = vec![
            HeaderParam {
                name: "Region".into(),
                path: vec!["region".into()],
            },
            HeaderParam {
                name: "Count".into(),
                path: vec!["count".into()],
            },
        ];
        let args = json!({ "region": "日本", "count": 42 });
        let headers = headers_for(&params, &args);
        assert_eq!(
            headers[0],
            (
                "mcp-param-Region".into(),
                format!("=?base64?{}?=", STANDARD.encode("日本"))
            )
        );
        let lookup = |h: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(h))
                .map(|(_, v)| v.clone())
        };
        assert!(validate(&params, &args, lookup).is_ok());
        assert!(
            validate(&params, &args, |h| (h == "mcp-param-region")
                .then(|| "us".to_owned()))
            .is_err()
        );
        let numeric = |h: &str| {
            Some(if h == "mcp-param-count" {
                "42.0".to_owned()
            } else {
                encode("日本")
            })
        };
        assert!(validate(&params, &args, numeric).is_ok());
        assert!(
            validate(&params, &json!({}), |_| None).is_ok(),
            "absent values need no header"
        );
        assert_eq!(decode("=?base64?!!?="), None);
    }

    #[test]
    fn errors_read_as_they_always_have() {
        let text = |schema: Value| from_schema(&schema).unwrap_err().to_string();
        assert_eq!(
            text(json!({ "properties": { "n": { "type": "number", "x-mcp-header": "N" } } })),
            r#"x-mcp-header "N" is on a Some("number") parameter; only string, integer and boolean are allowed"#
        );
        assert_eq!(
            text(
                json!({ "properties": { "s": { "type": "string", "x-mcp-header": "bad name" } } })
            ),
            r#"x-mcp-header "bad name" is not a header token"#
        );
        assert_eq!(
            text(json!({ "type": "string", "x-mcp-header": "Root" })),
            "x-mcp-header \"Root\" is not on a property reachable through `properties`"
        );
        assert_eq!(
            text(
                json!({ "properties": { "a": { "type": "string", "x-mcp-header": "Same" }, "b": { "type": "string", "x-mcp-header": "same" } } })
            ),
            r#"x-mcp-header "same" is used twice"#
        );
        let params = [HeaderParam {
            name: "Region".into(),
            path: vec!["region".into()],
        }];
        let args = json!({ "region": "us" });
        let why = |header: Option<&str>| {
            validate(&params, &args, |_| header.map(str::to_owned))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(why(None), "the Mcp-Param-Region header is missing");
        assert_eq!(
            why(Some("=?base64?!!?=")),
            "the Mcp-Param-Region header is not valid Base64 UTF-8"
        );
        assert_eq!(
            why(Some("eu")),
            r#"Mcp-Param-Region header value "eu" does not match body value "us""#
        );
    }
}
