//! What the authorization server's steps answer, before HTTP: a redirect,
//! an HTML page or a JSON body ([`Answer`]), oxide-auth's responses turned
//! into one, and the small readings of a request every step shares
//! (single-valued parameters, `Authorization: Basic`).

use std::collections::HashMap;

use oxide_auth::frontends::simple::request::{Body, Response, Status};
use serde_json::{Value, json};

use super::flow::Checked;

/// What a route answers.
#[derive(Debug)]
pub(crate) enum Answer {
    /// 302 to this URL.
    Redirect(String),
    /// An HTML page (an error, or the consent form).
    Page {
        status: u16,
        title: String,
        html: String,
    },
    /// A JSON body (token endpoint, registration, errors); never cached.
    Json {
        status: u16,
        body: Value,
        www_authenticate: Option<String>,
    },
}

impl Answer {
    pub(super) fn error_page(status: u16, error: &str, description: &str) -> Answer {
        Answer::Page {
            status,
            title: format!("mcpmux: {error}"),
            html: format!(
                "<h1>The sign-in cannot go on</h1><p><code>{}</code>: {}</p>",
                html_escape::encode_text(error),
                html_escape::encode_text(description)
            ),
        }
    }

    pub(super) fn json_error(status: u16, error: &str, description: &str) -> Answer {
        Answer::Json {
            status,
            body: json!({"error": error, "error_description": description}),
            www_authenticate: None,
        }
    }
}

/// The parameters as a map; none when one is repeated (RFC 6749 §3.1).
pub(super) fn single_valued(pairs: Vec<(String, String)>) -> Option<HashMap<String, String>> {
    let mut map = HashMap::with_capacity(pairs.len());
    for (key, value) in pairs {
        if map.insert(key, value).is_some() {
            return None;
        }
    }
    Some(map)
}

/// The client's id and secret from `Authorization: Basic`.
pub(super) fn basic_credentials(authorization: Option<&str>) -> Option<(String, String)> {
    use base64::Engine as _;
    let value = authorization?.trim();
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (id, secret) = text.split_once(':')?;
    let unescape = |s: &str| {
        url::form_urlencoded::parse(format!("x={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    Some((unescape(id), unescape(secret)))
}

/// An error sent to the client's redirect URI (the request was valid).
pub(super) fn error_redirect(
    checked: &Checked,
    query: &HashMap<String, String>,
    error: &str,
    description: &str,
) -> Answer {
    let Ok(mut url) = reqwest::Url::parse(&checked.redirect_uri) else {
        return Answer::error_page(400, error, description);
    };
    {
        let mut pairs = url.query_pairs_mut();
        pairs.append_pair("error", error);
        pairs.append_pair("error_description", description);
        if let Some(state) = query.get("state") {
            pairs.append_pair("state", state);
        }
    }
    Answer::Redirect(url.to_string())
}

/// oxide-auth's answer as ours.
pub(super) fn answer_of(response: Response) -> Answer {
    let body = response.body.as_ref().map(Body::as_str).unwrap_or("");
    let json = matches!(response.body, Some(Body::Json(_)));
    match response.status {
        Status::Redirect => match response.location {
            Some(url) => Answer::Redirect(url.to_string()),
            None => Answer::error_page(500, "server_error", "no redirect target"),
        },
        status => {
            let code = match status {
                Status::Ok => 200,
                Status::Unauthorized => 401,
                _ => 400,
            };
            if json || status == Status::Ok {
                Answer::Json {
                    status: code,
                    body: serde_json::from_str(body)
                        .unwrap_or_else(|_| json!({"error": "invalid_request"})),
                    www_authenticate: response.www_authenticate,
                }
            } else {
                Answer::error_page(
                    code,
                    "invalid_request",
                    if body.is_empty() {
                        "the request is not valid"
                    } else {
                        body
                    },
                )
            }
        }
    }
}
