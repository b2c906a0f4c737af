//! Unit tests of an upstream's `auth:` section and `credentials:`.

use super::super::{Config, ConfigError, Lookup, Transport};
use super::*;

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(
        text,
        "test.yaml",
        &Lookup::from_pairs([("SECRET", "s3cret-value")]),
    )
}

/// The problems of `text`, one line each.
fn problems(text: &str) -> Vec<String> {
    parse(text)
        .expect_err("the config should be refused")
        .lines()
}

fn auth_of(config: &Config) -> &UpstreamAuth {
    match &config.upstreams[0].transport {
        Transport::Remote(remote) => remote.auth.as_ref().expect("an auth section"),
        _ => panic!("a remote upstream"),
    }
}

const ON: &str =
    "auth:\n  mode: on\n  api_keys:\n    - client: alice\n      key: alice-key-0123456789\n";

#[test]
fn the_three_modes_parse_with_their_defaults() {
    let cc = parse(
        "auth: { mode: off }\nupstreams:\n  crm:\n    url: https://crm.test/mcp\n    auth:\n      mode: client_credentials\n      token_url: https://idp.test/token\n      client_id: gw\n      client_secret: ${SECRET}\n      scopes: [a, b]\n",
    )
    .unwrap();
    let auth = auth_of(&cc);
    assert_eq!(auth.mode, AuthMode::ClientCredentials);
    assert_eq!(auth.resource, "https://crm.test/mcp", "the upstream's url");
    assert_eq!(auth.scopes, ["a", "b"]);
    assert!(
        !format!("{cc:?}").contains("s3cret-value"),
        "the secret is masked"
    );

    let te = parse(&format!(
        "{ON}upstreams:\n  crm:\n    url: https://crm.test/mcp\n    auth:\n      mode: token_exchange\n      token_url: https://idp.test/token\n      client_id: gw\n      api_key_clients: service\n      max_identities: 5\n      idle_timeout: 1m\n"
    ))
    .unwrap();
    let AuthMode::TokenExchange {
        subject_token_type,
        api_key_clients,
        sessions,
        ..
    } = &auth_of(&te).mode
    else {
        panic!("token_exchange");
    };
    assert_eq!(subject_token_type, ACCESS_TOKEN_TYPE);
    assert_eq!(*api_key_clients, ApiKeyClients::Service);
    assert_eq!(sessions.max_identities, 5);
    assert_eq!(sessions.idle_timeout, Duration::from_secs(60));
    assert!(!sessions.discovery);

    let user = parse(&format!(
        "{ON}credentials:\n  key: {KEY}\nupstreams:\n  code:\n    url: https://code.test/mcp\n    auth:\n      mode: user\n"
    ))
    .unwrap();
    assert_eq!(auth_of(&user).server, AuthServer::Discover);
    assert_eq!(auth_of(&user).client, None, "registered on first use");
    assert_eq!(user.credentials.path, PathBuf::from(DEFAULT_TOKEN_FILE));
}

#[test]
fn mistakes_are_refused_with_their_line_and_column() {
    let cases = [
        (
            "auth: { mode: off }\nupstreams:\n  crm:\n    command: srv\n    auth: { mode: client_credentials }\n",
            "4:14: upstreams.crm.auth: only remote (url) upstreams take auth",
        ),
        (
            "auth: { mode: off }\nupstreams:\n  crm:\n    url: https://crm.test/mcp\n    auth: { mode: magic }\n",
            "5:19: upstreams.crm.auth.mode: \"magic\" is not",
        ),
        (
            "auth: { mode: off }\nupstreams:\n  crm:\n    url: https://crm.test/mcp\n    auth: { mode: client_credentials }\n",
            "upstreams.crm.auth: mode client_credentials needs token_url",
        ),
        (
            "auth: { mode: off }\nupstreams:\n  crm:\n    url: https://crm.test/mcp\n    auth: { mode: client_credentials, token_url: ftp://x, client_id: a }\n",
            "upstreams.crm.auth.token_url: \"ftp://x\" is not an http:// or https:// URL",
        ),
        (
            "auth: { mode: off }\nupstreams:\n  crm:\n    url: https://crm.test/mcp\n    headers: { Authorization: x }\n    auth: { mode: client_credentials, token_url: https://i/t, client_id: a }\n",
            "the auth section sends its own token",
        ),
        (
            "auth: { mode: off }\nupstreams:\n  crm:\n    url: https://crm.test/mcp\n    auth: { mode: client_credentials, token_url: https://i/t, client_id: a, discovery: client_credentials }\n",
            "upstreams.crm.auth.discovery: only mode token_exchange or user takes discovery",
        ),
        (
            "auth: { mode: off }\nupstreams:\n  crm:\n    url: https://crm.test/mcp\n    auth: { mode: token_exchange, token_url: https://i/t, client_id: a }\n",
            "acting as each caller needs client authentication, but auth.mode is off",
        ),
        (
            &format!(
                "{ON}upstreams:\n  crm:\n    url: https://crm.test/mcp\n    auth: {{ mode: user }}\n"
            ),
            "upstreams.crm.auth.mode: user needs credentials.key",
        ),
        (
            &format!(
                "{ON}credentials:\n  key: short\nupstreams:\n  crm:\n    url: https://crm.test/mcp\n    auth: {{ mode: user }}\n"
            ),
            "credentials.key: is not base64",
        ),
        (
            "auth: { mode: off }\nupstreams:\n  crm:\n    url: https://crm.test/mcp\n    auth: { mode: client_credentials, token_url: https://i/t, client_id: a, scopes: [\"two words\"] }\n",
            "is not one scope",
        ),
    ];
    for (text, expected) in cases {
        let lines = problems(text);
        assert!(
            lines.iter().any(|l| l.contains(expected)),
            "{expected:?} not in {lines:#?}\nfor:\n{text}"
        );
    }
}
