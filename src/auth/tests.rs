//! Unit tests of credential parsing and API keys.

use super::*;
use crate::config::{ApiKey, AuthSettings};

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
        .authenticate(Some("Bearer ops-key-0123456789"))
        .await
        .unwrap();
    assert_eq!(&*ops.client, "ops");
    let ci = auth
        .authenticate(Some("Bearer ci-key-0123456789ab"))
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
                auth.authenticate(Some(bad)).await,
                Err(AuthError::Invalid(_))
            ),
            "{bad}"
        );
    }
    assert_eq!(auth.authenticate(None).await, Err(AuthError::Missing));
}

#[tokio::test]
async fn the_admin_key_is_separate_from_client_keys() {
    let auth = with_keys(&[("ops", "ops-key-0123456789")]);
    assert!(
        auth.admits_admin(Some("Bearer admin-key-0123456789"))
            .await
            .is_ok()
    );
    assert!(
        auth.admits_admin(Some("Bearer ops-key-0123456789"))
            .await
            .is_err()
    );
    assert_eq!(auth.admits_admin(None).await, Err(AuthError::Missing));
}
