//! What the authorization server has granted: authorization codes (used
//! once; a replayed code revokes what it produced), access tokens (short
//! JWTs signed by the [`KeyRing`], audience-bound to the gateway's
//! resource), refresh tokens (opaque, kept by their SHA-256, rotated at
//! every use; a used one presented again revokes its whole family),
//! consents per (user, client), and the operator's view of all of it.
//!
//! A family is one login of one user at one client: its refresh tokens
//! and the access tokens they produce (which carry its id as `gid`, so a
//! revoked family's access tokens stop working too). [`Codes`] and
//! [`Tokens`] are oxide-auth's `Authorizer` and `Issuer` over [`Grants`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use oxide_auth::primitives::grant::{Extensions, Grant, Value as ExtensionValue};
use oxide_auth::primitives::issuer::{IssuedToken, RefreshedToken, TokenType};
use serde::{Deserialize, Serialize};

use super::clients::hex;
use super::keys::KeyRing;
use super::provider::User;
use super::state::{Lifetime, StateError, StateStore, now_ms};
use crate::config::sha256;
use crate::seal::random_token;

/// A family's liveness is read from the store again after this long.
const LIVE_CACHE: Duration = Duration::from_secs(5);
/// When the store cannot answer, a family known live this recently is
/// still taken as live.
const LIVE_GRACE: Duration = Duration::from_secs(60);
/// How long a used code is remembered, to revoke what a replay produced.
const USED_CODE_MEMORY: Duration = Duration::from_secs(600);
/// The grant extension that carries the RFC 8707 resource.
pub(crate) const RESOURCE_EXTENSION: &str = "resource";

/// Who a grant is for: the user and the family it starts or belongs to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Owner {
    pub user: User,
    pub family: String,
}

impl Owner {
    pub(crate) fn encode(&self) -> String {
        serde_json::to_string(self).expect("an owner serializes")
    }

    fn decode(text: &str) -> Option<Owner> {
        serde_json::from_str(text).ok()
    }
}

/// One login of one user at one client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Family {
    pub user: User,
    pub client_id: String,
    pub scope: String,
    pub created_ms: u64,
    pub used_ms: u64,
    #[serde(default)]
    pub revoked: bool,
}

/// A remembered consent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ConsentRecord {
    pub user: String,
    pub client_id: String,
    pub granted_ms: u64,
}

/// An oxide-auth grant as stored.
#[derive(Serialize, Deserialize)]
struct StoredGrant {
    owner: String,
    client_id: String,
    scope: String,
    redirect_uri: String,
    until_ms: i64,
    /// (identifier, public, content)
    extensions: Vec<(String, bool, Option<String>)>,
}

impl StoredGrant {
    fn of(grant: &Grant) -> StoredGrant {
        let mut extensions: Vec<(String, bool, Option<String>)> = grant
            .extensions
            .public()
            .map(|(k, v)| (k.to_owned(), true, v.map(str::to_owned)))
            .collect();
        extensions.extend(
            grant
                .extensions
                .private()
                .map(|(k, v)| (k.to_owned(), false, v.map(str::to_owned))),
        );
        StoredGrant {
            owner: grant.owner_id.clone(),
            client_id: grant.client_id.clone(),
            scope: grant.scope.to_string(),
            redirect_uri: grant.redirect_uri.to_string(),
            until_ms: grant.until.timestamp_millis(),
            extensions,
        }
    }

    fn grant(self) -> Option<Grant> {
        let mut extensions = Extensions::new();
        for (key, public, content) in self.extensions {
            let value = if public {
                ExtensionValue::public(content)
            } else {
                ExtensionValue::private(content)
            };
            extensions.set_raw(key, value);
        }
        Some(Grant {
            owner_id: self.owner,
            client_id: self.client_id,
            scope: self.scope.parse().ok()?,
            redirect_uri: self.redirect_uri.parse().ok()?,
            until: chrono::DateTime::from_timestamp_millis(self.until_ms)?,
            extensions,
        })
    }
}

/// A refresh token as stored (by its digest).
#[derive(Serialize, Deserialize)]
struct StoredRefresh {
    family: String,
    grant: StoredGrant,
}

/// What an access token says.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct AccessClaims {
    pub iss: String,
    pub sub: String,
    pub aud: String,
    pub client_id: String,
    #[serde(default)]
    pub scope: String,
    #[serde(default)]
    pub groups: Vec<String>,
    pub gid: String,
    pub jti: String,
    pub iat: u64,
    pub exp: u64,
}

/// One entry of the operator's list: a user's grant to one client.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct GrantSummary {
    pub user: String,
    pub client_id: String,
    pub scope: String,
    pub created_ms: u64,
    pub used_ms: u64,
    /// Logins (families) behind it that are still live.
    pub logins: usize,
    pub consented: bool,
}

/// Codes, tokens, families and consents.
pub(crate) struct Grants {
    state: Arc<StateStore>,
    keys: Arc<KeyRing>,
    pub(crate) access_ttl: Duration,
    refresh_ttl: Duration,
    pub(crate) code_ttl: Duration,
    live: DashMap<String, (bool, Instant)>,
}

fn digest(token: &str) -> String {
    hex(&sha256(token.as_bytes()))
}

impl Grants {
    pub(crate) fn new(
        state: Arc<StateStore>,
        keys: Arc<KeyRing>,
        access_ttl: Duration,
        refresh_ttl: Duration,
        code_ttl: Duration,
    ) -> Grants {
        Grants {
            state,
            keys,
            access_ttl,
            refresh_ttl,
            code_ttl,
            live: DashMap::new(),
        }
    }

    pub(crate) fn keys(&self) -> &KeyRing {
        &self.keys
    }

    async fn family(&self, id: &str) -> Result<Option<Family>, StateError> {
        Ok(self
            .state
            .get(&format!("family:{id}"))
            .await?
            .and_then(|v| serde_json::from_str(&v).ok()))
    }

    async fn put_family(&self, id: &str, family: &Family) -> Result<(), StateError> {
        let value = serde_json::to_string(family).expect("a family serializes");
        self.state
            .put(
                &format!("family:{id}"),
                &value,
                Lifetime::Long(Some(self.refresh_ttl)),
            )
            .await
    }

    /// Revokes the family `id` (its refresh tokens and access tokens).
    pub(crate) async fn revoke_family(&self, id: &str, why: &str) -> Result<bool, StateError> {
        let Some(mut family) = self.family(id).await? else {
            return Ok(false);
        };
        self.live.insert(id.to_owned(), (false, Instant::now()));
        if family.revoked {
            return Ok(false);
        }
        family.revoked = true;
        self.put_family(id, &family).await?;
        tracing::info!(target: "mcpmux::audit", user = %family.user.client, client_id = %family.client_id, reason = why, "oauth_server: grant revoked");
        Ok(true)
    }

    /// Whether the family `id` is live: what an access token's `gid` must be.
    pub(crate) async fn family_live(&self, id: &str) -> bool {
        let cached = self.live.get(id).map(|e| *e);
        match cached {
            Some((false, _)) => return false,
            Some((true, at)) if at.elapsed() < LIVE_CACHE => return true,
            _ => {}
        }
        match self.family(id).await {
            Ok(found) => {
                let live = found.is_some_and(|f| !f.revoked);
                if self.live.len() > 100_000 {
                    self.live.retain(|_, (_, at)| at.elapsed() < LIVE_GRACE);
                }
                self.live.insert(id.to_owned(), (live, Instant::now()));
                live
            }
            Err(e) => {
                tracing::warn!(error = %e, "oauth_server: a grant's state could not be read");
                matches!(cached, Some((true, at)) if at.elapsed() < LIVE_GRACE)
            }
        }
    }

    /// A signed access token for `grant`, and when it expires.
    fn access_token(
        &self,
        grant: &Grant,
        owner: &Owner,
        issuer: &str,
        default_resource: &str,
    ) -> Result<(String, chrono::DateTime<chrono::Utc>), ()> {
        let resource = grant
            .extensions
            .public()
            .find(|(k, _)| *k == RESOURCE_EXTENSION)
            .and_then(|(_, v)| v.map(str::to_owned))
            .unwrap_or_else(|| default_resource.to_owned());
        let now = now_ms() / 1000;
        let exp = now + self.access_ttl.as_secs();
        let claims = AccessClaims {
            iss: issuer.to_owned(),
            sub: owner.user.client.clone(),
            aud: resource,
            client_id: grant.client_id.clone(),
            scope: grant.scope.to_string(),
            groups: owner.user.groups.clone(),
            gid: owner.family.clone(),
            jti: random_token(12),
            iat: now,
            exp,
        };
        let token = self.keys.sign(&claims).map_err(|e| {
            tracing::warn!(error = %e, "oauth_server: an access token could not be signed");
        })?;
        let until =
            chrono::DateTime::from_timestamp(i64::try_from(exp).unwrap_or(i64::MAX), 0).ok_or(())?;
        Ok((token, until))
    }

    /// A new refresh token of `family` for `grant`.
    async fn refresh_token(&self, family: &str, grant: &Grant) -> Result<String, StateError> {
        let token = random_token(32);
        let record = StoredRefresh {
            family: family.to_owned(),
            grant: StoredGrant::of(grant),
        };
        let value = serde_json::to_string(&record).expect("a refresh token serializes");
        self.state
            .put(
                &format!("refresh:{}", digest(&token)),
                &value,
                Lifetime::Long(Some(self.refresh_ttl)),
            )
            .await?;
        Ok(token)
    }

    /// Whether `user` consented to `client_id` before.
    pub(crate) async fn consented(&self, user: &str, client_id: &str) -> bool {
        matches!(
            self.state.get(&consent_key(user, client_id)).await,
            Ok(Some(_))
        )
    }

    pub(crate) async fn remember_consent(&self, user: &str, client_id: &str) {
        let record = ConsentRecord {
            user: user.to_owned(),
            client_id: client_id.to_owned(),
            granted_ms: now_ms(),
        };
        let value = serde_json::to_string(&record).expect("a consent serializes");
        if let Err(e) = self
            .state
            .put(&consent_key(user, client_id), &value, Lifetime::Long(None))
            .await
        {
            tracing::warn!(error = %e, "oauth_server: a consent could not be stored");
        }
    }

    /// The live grants, of one user or all, by (user, client).
    pub(crate) async fn list(&self, user: Option<&str>) -> Result<Vec<GrantSummary>, StateError> {
        let mut out: Vec<GrantSummary> = Vec::new();
        for (_, value) in self.state.scan("family:").await? {
            let Ok(family) = serde_json::from_str::<Family>(&value) else {
                continue;
            };
            if family.revoked || user.is_some_and(|u| u != family.user.client) {
                continue;
            }
            match out
                .iter_mut()
                .find(|g| g.user == family.user.client && g.client_id == family.client_id)
            {
                Some(g) => {
                    g.logins += 1;
                    g.created_ms = g.created_ms.min(family.created_ms);
                    g.used_ms = g.used_ms.max(family.used_ms);
                }
                None => out.push(GrantSummary {
                    user: family.user.client.clone(),
                    client_id: family.client_id.clone(),
                    scope: family.scope.clone(),
                    created_ms: family.created_ms,
                    used_ms: family.used_ms,
                    logins: 1,
                    consented: false,
                }),
            }
        }
        for (_, value) in self.state.scan("consent:").await? {
            let Ok(consent) = serde_json::from_str::<ConsentRecord>(&value) else {
                continue;
            };
            if user.is_some_and(|u| u != consent.user) {
                continue;
            }
            match out
                .iter_mut()
                .find(|g| g.user == consent.user && g.client_id == consent.client_id)
            {
                Some(g) => g.consented = true,
                None => out.push(GrantSummary {
                    user: consent.user.clone(),
                    client_id: consent.client_id.clone(),
                    scope: String::new(),
                    created_ms: consent.granted_ms,
                    used_ms: consent.granted_ms,
                    logins: 0,
                    consented: true,
                }),
            }
        }
        out.sort_by(|a, b| (&a.user, &a.client_id).cmp(&(&b.user, &b.client_id)));
        Ok(out)
    }

    /// Revokes `user`'s grants (to `client_id` only, if given) and forgets
    /// the consents: the next authorization asks again. Returns how many
    /// logins were revoked.
    pub(crate) async fn revoke_user(
        &self,
        user: &str,
        client_id: Option<&str>,
    ) -> Result<usize, StateError> {
        let mut revoked = 0;
        for (key, value) in self.state.scan("family:").await? {
            let Ok(family) = serde_json::from_str::<Family>(&value) else {
                continue;
            };
            if family.revoked
                || family.user.client != user
                || client_id.is_some_and(|c| c != family.client_id)
            {
                continue;
            }
            let id = key.trim_start_matches("family:");
            if self.revoke_family(id, "revoked by the operator").await? {
                revoked += 1;
            }
        }
        for (key, value) in self.state.scan("consent:").await? {
            let Ok(consent) = serde_json::from_str::<ConsentRecord>(&value) else {
                continue;
            };
            if consent.user == user && client_id.is_none_or(|c| c == consent.client_id) {
                self.state.delete(&key).await?;
            }
        }
        Ok(revoked)
    }

    /// RFC 7009: revokes the family of a refresh token or of one of our
    /// access tokens, if it belongs to `client_id`. Unknown tokens are
    /// ignored, as the RFC says.
    pub(crate) async fn revoke_token(
        &self,
        token: &str,
        client_id: &str,
    ) -> Result<(), StateError> {
        let family = match self
            .state
            .get(&format!("refresh:{}", digest(token)))
            .await?
        {
            Some(value) => serde_json::from_str::<StoredRefresh>(&value)
                .ok()
                .map(|r| r.family),
            None => self.access_token_family(token).await,
        };
        let Some(id) = family else { return Ok(()) };
        if self
            .family(&id)
            .await?
            .is_some_and(|f| f.client_id == client_id)
        {
            self.revoke_family(&id, "revoked by the client").await?;
        }
        Ok(())
    }

    /// The family of a valid access token of ours.
    async fn access_token_family(&self, token: &str) -> Option<String> {
        let kid = jsonwebtoken::decode_header(token).ok()?.kid?;
        let key = self.keys.find(&kid).await?;
        let mut validation = jsonwebtoken::Validation::new(key.alg);
        validation.validate_aud = false;
        jsonwebtoken::decode::<AccessClaims>(token, &key.decoding, &validation)
            .ok()
            .map(|d| d.claims.gid)
    }
}

fn consent_key(user: &str, client_id: &str) -> String {
    let user = hex(&sha256(user.as_bytes())[..12]);
    let client = hex(&sha256(client_id.as_bytes())[..12]);
    format!("consent:{user}:{client}")
}

/// oxide-auth's `Authorizer`: codes kept by digest for `code_ttl`.
pub(crate) struct Codes<'a> {
    pub grants: &'a Grants,
}

#[async_trait::async_trait]
impl oxide_auth_async::primitives::Authorizer for Codes<'_> {
    async fn authorize(&mut self, grant: Grant) -> Result<String, ()> {
        let code = random_token(32);
        let value = serde_json::to_string(&StoredGrant::of(&grant)).map_err(|_| ())?;
        self.grants
            .state
            .put(
                &format!("code:{}", digest(&code)),
                &value,
                Lifetime::Short(self.grants.code_ttl),
            )
            .await
            .map_err(|e| tracing::warn!(error = %e, "oauth_server: a code could not be stored"))?;
        Ok(code)
    }

    async fn extract(&mut self, code: &str) -> Result<Option<Grant>, ()> {
        let key = digest(code);
        let taken = self
            .grants
            .state
            .take(&format!("code:{key}"))
            .await
            .map_err(|e| tracing::warn!(error = %e, "oauth_server: a code could not be read"))?;
        let Some(value) = taken else {
            // A code used before: revoke what it produced (RFC 6749 §4.1.2).
            if let Ok(Some(family)) = self.grants.state.get(&format!("usedcode:{key}")).await {
                let _ = self
                    .grants
                    .revoke_family(&family, "an authorization code was used twice")
                    .await;
            }
            return Ok(unusable_grant());
        };
        let stored: StoredGrant = serde_json::from_str(&value).map_err(|_| ())?;
        if let Some(owner) = Owner::decode(&stored.owner) {
            let _ = self
                .grants
                .state
                .put(
                    &format!("usedcode:{key}"),
                    &owner.family,
                    Lifetime::Short(USED_CODE_MEMORY),
                )
                .await;
        }
        if stored.until_ms < chrono::Utc::now().timestamp_millis() {
            return Ok(unusable_grant());
        }
        Ok(stored.grant())
    }
}

/// What an unknown, used or expired code stands for: a grant to nobody
/// that expired long ago, which oxide-auth refuses with `invalid_grant`
/// (RFC 6749 §5.2); no grant at all would be `invalid_request`.
fn unusable_grant() -> Option<Grant> {
    Some(Grant {
        owner_id: String::new(),
        client_id: String::new(),
        scope: "none".parse().ok()?,
        redirect_uri: "about:invalid".parse().ok()?,
        until: chrono::DateTime::UNIX_EPOCH,
        extensions: Extensions::new(),
    })
}

/// oxide-auth's `Issuer`: access and refresh tokens for one request.
pub(crate) struct Tokens<'a> {
    pub grants: &'a Grants,
    pub issuer: &'a str,
    pub default_resource: &'a str,
}

#[async_trait::async_trait]
impl oxide_auth_async::primitives::Issuer for Tokens<'_> {
    async fn issue(&mut self, grant: Grant) -> Result<IssuedToken, ()> {
        let owner = Owner::decode(&grant.owner_id).ok_or(())?;
        let now = now_ms();
        let family = Family {
            user: owner.user.clone(),
            client_id: grant.client_id.clone(),
            scope: grant.scope.to_string(),
            created_ms: now,
            used_ms: now,
            revoked: false,
        };
        let value = serde_json::to_string(&family).map_err(|_| ())?;
        let created = self
            .grants
            .state
            .put_new(
                &format!("family:{}", owner.family),
                &value,
                Lifetime::Long(Some(self.grants.refresh_ttl)),
            )
            .await
            .map_err(|e| tracing::warn!(error = %e, "oauth_server: a grant could not be stored"))?;
        if !created {
            // A family is started by one code, once.
            return Err(());
        }
        let (token, until) =
            self.grants
                .access_token(&grant, &owner, self.issuer, self.default_resource)?;
        let refresh = self
            .grants
            .refresh_token(&owner.family, &grant)
            .await
            .map_err(
                |e| tracing::warn!(error = %e, "oauth_server: a refresh token could not be stored"),
            )?;
        tracing::info!(target: "mcpmux::audit", user = %owner.user.client, client_id = %grant.client_id, "oauth_server: tokens issued");
        Ok(IssuedToken {
            token,
            refresh: Some(refresh),
            until,
            token_type: TokenType::Bearer,
        })
    }

    async fn refresh(&mut self, refresh: &str, grant: Grant) -> Result<RefreshedToken, ()> {
        let key = digest(refresh);
        let owner = Owner::decode(&grant.owner_id).ok_or(())?;
        // Rotation: the first to mark the token used wins; a second use is
        // a replay and revokes the family.
        let first = self
            .grants
            .state
            .put_new(
                &format!("used:{key}"),
                &owner.family,
                Lifetime::Long(Some(self.grants.refresh_ttl)),
            )
            .await
            .map_err(|_| ())?;
        if !first {
            let _ = self
                .grants
                .revoke_family(&owner.family, "a refresh token was used twice")
                .await;
            return Err(());
        }
        let _ = self.grants.state.delete(&format!("refresh:{key}")).await;
        let Ok(Some(mut family)) = self.grants.family(&owner.family).await else {
            return Err(());
        };
        if family.revoked {
            return Err(());
        }
        family.used_ms = now_ms();
        self.grants
            .put_family(&owner.family, &family)
            .await
            .map_err(|_| ())?;
        let (token, until) =
            self.grants
                .access_token(&grant, &owner, self.issuer, self.default_resource)?;
        let next = self
            .grants
            .refresh_token(&owner.family, &grant)
            .await
            .map_err(|_| ())?;
        Ok(RefreshedToken {
            token,
            refresh: Some(next),
            until,
            token_type: TokenType::Bearer,
        })
    }

    async fn recover_token(&mut self, _: &str) -> Result<Option<Grant>, ()> {
        // Access tokens are verified as JWTs by the authenticator.
        Ok(None)
    }

    async fn recover_refresh(&mut self, refresh: &str) -> Result<Option<Grant>, ()> {
        let key = digest(refresh);
        let stored = self
            .grants
            .state
            .get(&format!("refresh:{key}"))
            .await
            .map_err(|_| ())?;
        let Some(value) = stored else {
            if let Ok(Some(family)) = self.grants.state.get(&format!("used:{key}")).await {
                let _ = self
                    .grants
                    .revoke_family(&family, "a refresh token was used twice")
                    .await;
            }
            return Ok(None);
        };
        let stored: StoredRefresh = serde_json::from_str(&value).map_err(|_| ())?;
        // Read, not cached: another replica may have just revoked it.
        let family = self.grants.family(&stored.family).await.map_err(|_| ())?;
        if family.is_none_or(|f| f.revoked) {
            return Ok(None);
        }
        let mut grant = stored.grant.grant().ok_or(())?;
        // The refresh token's own lifetime, not the code's.
        grant.until = chrono::Utc::now()
            + chrono::Duration::from_std(self.grants.refresh_ttl).map_err(|_| ())?;
        Ok(Some(grant))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use oxide_auth::primitives::grant::{Extensions, Grant};
    use oxide_auth_async::primitives::{Authorizer as _, Issuer as _};

    use super::{Codes, Grants, Owner, Tokens};
    use crate::config::StateKey;
    use crate::oauth_server::keys::KeyRing;
    use crate::oauth_server::provider::User;
    use crate::oauth_server::state::StateStore;

    async fn grants(name: &str) -> Grants {
        let path = crate::oauth_server::state::tests::temp_path(name);
        let state = Arc::new(StateStore::file(&path).unwrap());
        let key = StateKey::parse("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY=").unwrap();
        let keys = Arc::new(KeyRing::generated(
            state.clone(),
            &key,
            &[],
            Duration::from_secs(3600),
            Duration::from_secs(300),
        ));
        keys.refresh().await.unwrap();
        Grants::new(
            state,
            keys,
            Duration::from_secs(300),
            Duration::from_secs(3600),
            Duration::from_secs(60),
        )
    }

    fn grant(family: &str, until: chrono::DateTime<chrono::Utc>) -> Grant {
        let owner = Owner {
            user: User {
                client: "alice".into(),
                groups: vec!["ops".into()],
            },
            family: family.into(),
        };
        Grant {
            owner_id: owner.encode(),
            client_id: "host".into(),
            scope: "mcp".parse().unwrap(),
            redirect_uri: "http://127.0.0.1/cb".parse().unwrap(),
            until,
            extensions: Extensions::new(),
        }
    }

    fn later() -> chrono::DateTime<chrono::Utc> {
        chrono::Utc::now() + chrono::Duration::minutes(5)
    }

    #[tokio::test]
    async fn a_code_works_once_and_its_replay_revokes_the_login_it_started() {
        let grants = grants("code-replay").await;
        let mut codes = Codes { grants: &grants };
        let code = codes.authorize(grant("fam-1", later())).await.unwrap();
        let first = codes.extract(&code).await.unwrap().unwrap();
        assert_eq!(first.client_id, "host");
        let mut tokens = Tokens {
            grants: &grants,
            issuer: "http://gw",
            default_resource: "http://gw/mcp",
        };
        let issued = tokens.issue(first).await.unwrap();
        assert!(grants.family_live("fam-1").await);
        // The replay: a grant to nobody (invalid_grant), and the login is revoked.
        let replay = codes.extract(&code).await.unwrap().unwrap();
        assert!(replay.client_id.is_empty());
        assert!(!grants.family_live("fam-1").await);
        let refresh = issued.refresh.unwrap();
        assert!(tokens.recover_refresh(&refresh).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn an_expired_code_is_refused() {
        let grants = grants("code-expired").await;
        let mut codes = Codes { grants: &grants };
        let past = chrono::Utc::now() - chrono::Duration::seconds(1);
        let code = codes.authorize(grant("fam-2", past)).await.unwrap();
        let grant = codes.extract(&code).await.unwrap().unwrap();
        assert!(grant.client_id.is_empty(), "an expired code is no grant");
    }

    #[tokio::test]
    async fn refresh_tokens_rotate_and_a_used_one_revokes_the_family() {
        let grants = grants("refresh-reuse").await;
        let mut tokens = Tokens {
            grants: &grants,
            issuer: "http://gw",
            default_resource: "http://gw/mcp",
        };
        let issued = tokens.issue(grant("fam-3", later())).await.unwrap();
        let first = issued.refresh.unwrap();
        let recovered = tokens.recover_refresh(&first).await.unwrap().unwrap();
        let rotated = tokens.refresh(&first, recovered).await.unwrap();
        let second = rotated.refresh.unwrap();
        assert_ne!(first, second);
        assert!(grants.family_live("fam-3").await);
        // The first one again: reuse, the whole family ends.
        assert!(tokens.recover_refresh(&first).await.unwrap().is_none());
        assert!(!grants.family_live("fam-3").await);
        assert!(tokens.recover_refresh(&second).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn the_operator_lists_and_revokes_a_users_grants() {
        let grants = grants("operator").await;
        let mut tokens = Tokens {
            grants: &grants,
            issuer: "http://gw",
            default_resource: "http://gw/mcp",
        };
        tokens.issue(grant("fam-4", later())).await.unwrap();
        tokens.issue(grant("fam-5", later())).await.unwrap();
        grants.remember_consent("alice", "host").await;
        let listed = grants.list(Some("alice")).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].logins, 2);
        assert!(listed[0].consented);
        assert!(grants.list(Some("bob")).await.unwrap().is_empty());
        assert_eq!(grants.revoke_user("alice", None).await.unwrap(), 2);
        assert!(!grants.consented("alice", "host").await);
        assert!(grants.list(Some("alice")).await.unwrap().is_empty());
    }
}
