//! Unit tests of credential parsing, API keys, and why an authenticator cannot start.

use super::*;
use crate::config::{ApiKey, AuthSettings, JwtConfig, JwtKeys};

/// The resource the requests are for (only the gateway's own tokens check it).
fn resource() -> String {
    "http://127.0.0.1/mcp".to_owned()
}

/// Settings with a JWT issuer of `keys` and `algorithms`, and no API keys.
fn with_jwt(keys: JwtKeys, algorithms: &[&str]) -> AuthSettings {
    AuthSettings {
        api_keys: Vec::new(),
        jwt: Some(JwtConfig {
            issuer: "https://issuer.example".into(),
            audience: "mcpmux".into(),
            keys,
            algorithms: algorithms.iter().map(|a| (*a).to_owned()).collect(),
            client_claim: "sub".into(),
            scopes_claim: "scope".into(),
            leeway: std::time::Duration::from_secs(30),
            jwks_refresh: std::time::Duration::from_secs(300),
            jwks_refetch_cooldown: std::time::Duration::from_secs(30),
        }),
        resource: None,
        authorization_servers: Vec::new(),
        scopes_supported: Vec::new(),
        required_scopes: Vec::new(),
        admin: AdminAccess::Clients,
        oauth_server: None,
    }
}

#[test]
fn setup_errors_say_which_setting() {
    let pem = with_jwt(JwtKeys::Pem(vec!["not a key".into()]), &["RS256"]);
    let Err(e) = Authenticator::new(&pem) else {
        panic!("a bad PEM key is refused")
    };
    assert!(matches!(e, SetupError::PemKey(0)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "auth.jwt.public_keys[0] is not an RSA, EC or Ed25519 public key in PEM"
    );
    let algorithm = with_jwt(JwtKeys::Pem(Vec::new()), &["XS999"]);
    let Err(e) = Authenticator::new(&algorithm) else {
        panic!("an unknown algorithm is refused")
    };
    assert!(e.to_string().starts_with("XS999: "), "{e}");
    let jwks = with_jwt(
        JwtKeys::Jwks("https://issuer.example/jwks".into()),
        &["RS256"],
    );
    assert!(Authenticator::new(&jwks).is_ok());
}

fn with_keys(keys: &[(&str, &str)]) -> Authenticator {
    Authenticator::new(&AuthSettings {
        api_keys: keys
            .iter()
            .map(|(client, key)| ApiKey {
                client: (*client).into(),
                sha256: sha256(key.as_bytes()),
            })
            .collect(),
        jwt: None,
        resource: None,
        authorization_servers: Vec::new(),
        scopes_supported: Vec::new(),
        required_scopes: Vec::new(),
        admin: AdminAccess::Key(sha256(b"admin-key-0123456789")),
        oauth_server: None,
    })
    .unwrap()
}

#[test]
fn bearer_needs_the_scheme_and_a_token() {
    assert_eq!(bearer(Some("Bearer abc")), Ok("abc"));
    assert_eq!(bearer(Some("bearer   abc ")), Ok("abc"));
    assert_eq!(bearer(None), Err(AuthError::Missing));
    for bad in ["Basic abc", "Bearer", "Bearer ", "abc"] {
        assert!(
            matches!(bearer(Some(bad)), Err(AuthError::Invalid(_))),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn api_keys_name_their_client_and_nothing_else_passes() {
    let auth = with_keys(&[("ops", "ops-key-0123456789"), ("ci", "ci-key-0123456789ab")]);
    let ops = auth
        .authenticate(Some("Bearer ops-key-0123456789"), resource)
        .await
        .unwrap();
    assert_eq!(&*ops.client, "ops");
    let ci = auth
        .authenticate(Some("Bearer ci-key-0123456789ab"), resource)
        .await
        .unwrap();
    assert_eq!(&*ci.client, "ci");
    for bad in [
        "Bearer ops-key-012345678",
        "Bearer OPS-KEY-0123456789",
        "Bearer a.b.c",
    ] {
        assert!(
            matches!(
                auth.authenticate(Some(bad), resource).await,
                Err(AuthError::Invalid(_))
            ),
            "{bad}"
        );
    }
    assert_eq!(
        auth.authenticate(None, resource).await,
        Err(AuthError::Missing)
    );
}

#[tokio::test]
async fn the_admin_key_is_separate_from_client_keys() {
    let auth = with_keys(&[("ops", "ops-key-0123456789")]);
    assert!(
        auth.admits_admin(Some("Bearer admin-key-0123456789"), resource)
            .await
            .is_ok()
    );
    assert!(
        auth.admits_admin(Some("Bearer ops-key-0123456789"), resource)
            .await
            .is_err()
    );
    assert_eq!(
        auth.admits_admin(None, resource).await,
        Err(AuthError::Missing)
    );
}
