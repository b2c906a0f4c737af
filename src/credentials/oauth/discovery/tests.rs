//! Unit tests of discovery and registration: the `WWW-Authenticate` parser,
//! and the metadata and registration servers played by the OAuth tests' mock.

use serde_json::{Value, json};

use super::super::tests::{Mock, STREAM, route, scopes, start_with};
use super::super::{OAuthError, authorization_server, http_client, protected_resource, register};
use super::*;

#[test]
fn resource_metadata_url_reads_quoted_and_bare_values() {
    let url = "https://mcp.example/.well-known/oauth-protected-resource";
    let header = format!(r#"Bearer resource_metadata="{url}""#);
    assert_eq!(resource_metadata_url(&header).as_deref(), Some(url));
    let header = format!("Bearer resource_metadata={url}, error=invalid_token");
    assert_eq!(resource_metadata_url(&header).as_deref(), Some(url));
    let header = format!(r#"bearer  Resource_Metadata = "{url}""#);
    assert_eq!(resource_metadata_url(&header).as_deref(), Some(url));
}

#[test]
fn resource_metadata_url_unescapes_quoted_strings() {
    let header = r#"Bearer realm="a \"b\", c=d", resource_metadata="https://x.example/m\"e\\ta""#;
    assert_eq!(
        resource_metadata_url(header).as_deref(),
        Some(r#"https://x.example/m"e\ta"#)
    );
    let parsed = challenges(header);
    assert_eq!(parsed.len(), 1);
    assert_eq!(
        parsed[0].params[0],
        ("realm".into(), r#"a "b", c=d"#.into())
    );
}

#[test]
fn resource_metadata_url_finds_the_bearer_challenge_among_several() {
    let header = concat!(
        r#"Basic realm="x", resource_metadata="https://wrong.example", "#,
        r#"Negotiate abc/12+3==, "#,
        r#"Bearer error="invalid_token", resource_metadata="https://right.example/prm", "#,
        r#"DPoP algs="ES256""#,
    );
    assert_eq!(
        resource_metadata_url(header).as_deref(),
        Some("https://right.example/prm")
    );
    let schemes: Vec<_> = challenges(header).into_iter().map(|c| c.scheme).collect();
    assert_eq!(schemes, ["Basic", "Negotiate", "Bearer", "DPoP"]);
    let header = r#"Negotiate, Bearer resource_metadata="https://a.example/prm""#;
    assert_eq!(
        resource_metadata_url(header).as_deref(),
        Some("https://a.example/prm")
    );
}

#[test]
fn resource_metadata_url_absent() {
    for header in [
        "",
        "Bearer",
        r#"Bearer realm="mcp", error="invalid_token""#,
        r#"Basic resource_metadata="https://x.example/prm""#,
        r#"Bearer resource_metadata="https://x.example/unterminated"#,
        "Bearer abcdef==",
        ",,, ,",
    ] {
        assert_eq!(resource_metadata_url(header), None, "{header}");
    }
}

#[tokio::test]
async fn protected_resource_reads_the_header_url() {
    let (mock, base) = Mock::start(vec![]).await;
    let upstream = base.join("/mcp").unwrap();
    let document = json!({"resource": upstream.as_str(),
        "authorization_servers": ["https://auth.example"], "scopes_supported": ["mcp"]});
    let (mock2, meta) = Mock::start(vec![route("/custom/prm", 200, document)]).await;
    // Another port is another origin: the resource must name the upstream's.
    let header = format!(
        r#"Bearer resource_metadata="{}""#,
        meta.join("/custom/prm").unwrap()
    );
    let found: ProtectedResource =
        protected_resource(&http_client().unwrap(), &upstream, Some(&header))
            .await
            .unwrap();
    assert_eq!(found.resource, upstream.as_str());
    assert_eq!(found.authorization_servers, ["https://auth.example"]);
    assert_eq!(found.scopes_supported, ["mcp"]);
    assert_eq!(mock2.paths(), ["/custom/prm"]);
    assert!(mock.paths().is_empty(), "no well-known fallback");
}

#[tokio::test]
async fn protected_resource_falls_back_to_the_well_known_urls() {
    let (mock, base) = start_with(|base| {
        let document =
            json!({"resource": base.as_str(), "authorization_servers": ["https://a.example"]});
        vec![route(
            "/.well-known/oauth-protected-resource",
            200,
            document,
        )]
    })
    .await;
    let upstream = base.join("/public/mcp/?key=k").unwrap();
    let header = r#"Bearer error="invalid_token""#;
    let found = protected_resource(&http_client().unwrap(), &upstream, Some(header))
        .await
        .unwrap();
    assert_eq!(
        mock.paths(),
        [
            "/.well-known/oauth-protected-resource/public/mcp",
            "/.well-known/oauth-protected-resource"
        ]
    );
    assert_eq!(found.authorization_servers, ["https://a.example"]);
    assert!(found.scopes_supported.is_empty());
}

#[tokio::test]
async fn protected_resource_refuses_another_origin_and_no_servers() {
    let document = json!({"resource": "https://other.example/mcp",
        "authorization_servers": ["https://a.example"]});
    let (_mock, base) = Mock::start(vec![route(
        "/.well-known/oauth-protected-resource",
        200,
        document,
    )])
    .await;
    let error = protected_resource(&http_client().unwrap(), &base, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, OAuthError::Discovery(m) if m.contains("other.example")),
        "{error}"
    );

    let (_mock, base) = start_with(|base| {
        let document = json!({"resource": base.as_str(), "authorization_servers": []});
        vec![route(
            "/.well-known/oauth-protected-resource",
            200,
            document,
        )]
    })
    .await;
    let error = protected_resource(&http_client().unwrap(), &base, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, OAuthError::Discovery(m) if m.contains("authorization_servers")),
        "{error}"
    );

    let (_mock, base) = Mock::start(vec![]).await;
    let error = protected_resource(&http_client().unwrap(), &base, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, OAuthError::Discovery(m) if m.contains("404")),
        "{error}"
    );
}

fn server_document(issuer: &str, base: &Url) -> Value {
    json!({
        "issuer": issuer,
        "authorization_endpoint": base.join("/authorize").unwrap().as_str(),
        "token_endpoint": base.join("/token").unwrap().as_str(),
        "registration_endpoint": base.join("/register").unwrap().as_str(),
        "code_challenge_methods_supported": ["plain", "S256"],
    })
}

#[tokio::test]
async fn authorization_server_with_a_path_tries_the_urls_in_order() {
    let (mock, base) = start_with(|base| {
        let issuer = format!("{}tenant", base);
        vec![route(
            "/tenant/.well-known/openid-configuration",
            200,
            server_document(&issuer, base),
        )]
    })
    .await;
    let issuer = format!("{base}tenant");
    let endpoints = authorization_server(&http_client().unwrap(), &issuer)
        .await
        .unwrap();
    assert_eq!(
        mock.paths(),
        [
            "/.well-known/oauth-authorization-server/tenant",
            "/.well-known/openid-configuration/tenant",
            "/tenant/.well-known/openid-configuration",
        ]
    );
    assert_eq!(endpoints.issuer.as_deref(), Some(issuer.as_str()));
    assert_eq!(endpoints.token, base.join("/token").unwrap());
    assert_eq!(
        endpoints.authorization,
        Some(base.join("/authorize").unwrap())
    );
    assert_eq!(
        endpoints.registration,
        Some(base.join("/register").unwrap())
    );
    assert_eq!(endpoints.revocation, None);
}

#[tokio::test]
async fn authorization_server_without_a_path_tries_the_urls_in_order() {
    let (mock, base) = start_with(|base| {
        // The issuer as discovery names it, without the trailing slash.
        let issuer = base.as_str().trim_end_matches('/').to_owned();
        vec![route(
            "/.well-known/openid-configuration",
            200,
            server_document(&issuer, base),
        )]
    })
    .await;
    let endpoints = authorization_server(&http_client().unwrap(), base.as_str())
        .await
        .unwrap();
    assert_eq!(
        mock.paths(),
        [
            "/.well-known/oauth-authorization-server",
            "/.well-known/openid-configuration"
        ]
    );
    assert_eq!(endpoints.token, base.join("/token").unwrap());

    let (mock, base) = Mock::start(vec![]).await;
    let error = authorization_server(&http_client().unwrap(), base.as_str())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, OAuthError::Discovery(m) if m.contains("404")),
        "{error}"
    );
    assert_eq!(mock.paths().len(), 2);
}

#[tokio::test]
async fn authorization_server_refuses_an_issuer_mismatch() {
    let (mock, base) = start_with(|base| {
        vec![route(
            "/.well-known/oauth-authorization-server",
            200,
            server_document("https://evil.example", base),
        )]
    })
    .await;
    let error = authorization_server(&http_client().unwrap(), base.as_str())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, OAuthError::Discovery(m) if m.contains("evil.example")),
        "{error}"
    );
    assert_eq!(mock.paths().len(), 1, "a mismatch ends discovery");
}

#[tokio::test]
async fn authorization_server_requires_s256() {
    for methods in [None, Some(json!(["plain"]))] {
        let (_mock, base) = start_with(|base| {
            let mut document = server_document(base.as_str(), base);
            match &methods {
                Some(list) => document["code_challenge_methods_supported"] = list.clone(),
                None => {
                    document
                        .as_object_mut()
                        .unwrap()
                        .remove("code_challenge_methods_supported");
                }
            }
            vec![route(
                "/.well-known/oauth-authorization-server",
                200,
                document,
            )]
        })
        .await;
        let error = authorization_server(&http_client().unwrap(), base.as_str())
            .await
            .unwrap_err();
        assert!(
            matches!(&error, OAuthError::Discovery(m) if m.contains("S256")),
            "{error}"
        );
    }
}

#[tokio::test]
async fn authorization_server_refuses_an_insecure_endpoint() {
    let (_mock, base) = start_with(|base| {
        let mut document = server_document(base.as_str(), base);
        document["token_endpoint"] = "http://auth.example/token".into();
        vec![route(
            "/.well-known/oauth-authorization-server",
            200,
            document,
        )]
    })
    .await;
    let error = authorization_server(&http_client().unwrap(), base.as_str())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, OAuthError::Insecure(m) if m.contains("token_endpoint")),
        "{error}"
    );
}

#[tokio::test]
async fn register_sends_the_client_metadata() {
    let body = json!({"client_id": "new-client", "client_secret": "new-secret",
        "token_endpoint_auth_method": "client_secret_basic"});
    let (mock, base) = Mock::start(vec![route("/register", 201, body)]).await;
    let redirect = Url::parse("https://gw.example/oauth/callback").unwrap();
    let registration = base.join("/register").unwrap();
    let auth = register(
        &http_client().unwrap(),
        &registration,
        "mcpmux",
        &redirect,
        &scopes(&["a", "b"]),
    )
    .await
    .unwrap();
    assert_eq!(auth.client_id, "new-client");
    assert_eq!(
        auth.client_secret.as_ref().map(Secret::expose),
        Some("new-secret")
    );
    assert!(!format!("{auth:?}").contains("new-secret"));
    let sent: Value = serde_json::from_str(&mock.seen()[0].body).unwrap();
    assert_eq!(sent["client_name"], "mcpmux");
    assert_eq!(sent["redirect_uris"], json!([redirect.as_str()]));
    assert_eq!(
        sent["grant_types"],
        json!(["authorization_code", "refresh_token"])
    );
    assert_eq!(sent["response_types"], json!(["code"]));
    assert_eq!(sent["scope"], "a b");

    let body = json!({"client_id": "public", "token_endpoint_auth_method": "none"});
    let (_mock, base) = Mock::start(vec![route("/register", 201, body)]).await;
    let registration = base.join("/register").unwrap();
    let auth = register(
        &http_client().unwrap(),
        &registration,
        "mcpmux",
        &redirect,
        &[],
    )
    .await
    .unwrap();
    assert_eq!(auth.client_secret, None);

    let body = json!({"error": "invalid_redirect_uri", "error_description": "not allowed"});
    let (_mock, base) = Mock::start(vec![route("/register", 400, body)]).await;
    let registration = base.join("/register").unwrap();
    let error = register(
        &http_client().unwrap(),
        &registration,
        "mcpmux",
        &redirect,
        &[],
    )
    .await
    .unwrap_err();
    let OAuthError::Refused {
        endpoint, error, ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(
        (*endpoint, error.as_str()),
        ("registration", "invalid_redirect_uri")
    );
}

#[tokio::test]
async fn oversized_metadata_is_refused() {
    let huge = format!(r#"{{"issuer":"{}"}}"#, "a".repeat(METADATA_LIMIT));
    let (_mock, base) =
        Mock::start(vec![("/.well-known/oauth-authorization-server", 200, huge)]).await;
    let error = authorization_server(&http_client().unwrap(), base.as_str())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, OAuthError::Malformed(m) if m.contains("larger")),
        "{error}"
    );

    let streamed = format!("{STREAM}{}", METADATA_LIMIT + 1);
    let (_mock, base) = Mock::start(vec![(
        "/.well-known/oauth-protected-resource",
        200,
        streamed,
    )])
    .await;
    let error = protected_resource(&http_client().unwrap(), &base, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, OAuthError::Malformed(m) if m.contains("larger")),
        "{error}"
    );
}
