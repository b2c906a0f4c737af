//! The OAuth flows themselves, run by oxide-auth: the authorization
//! request (client and redirect URI bound by [`Clients`], scope
//! negotiated, PKCE S256 required, the RFC 8707 resource checked), the
//! code exchange (client authenticated, redirect URI and PKCE verifier
//! checked) and the refresh. This file is the glue: the endpoint that
//! hands oxide-auth our primitives, the consent decision it asks for, and
//! the `resource` addon.

use std::collections::HashMap;
use std::sync::Arc;

use oxide_auth::endpoint::{OAuthError, OwnerConsent, Scopes, Solicitation, Template};
use oxide_auth::frontends::simple::extensions::{
    AccessTokenAddon, AddonList, AddonResult, AuthorizationAddon, Pkce,
};
use oxide_auth::frontends::simple::request::{NoError, Request, Response};
use oxide_auth::primitives::grant::{GrantExtension, Value};
use oxide_auth_async::endpoint::access_token::AccessTokenFlow;
use oxide_auth_async::endpoint::authorization::AuthorizationFlow;
use oxide_auth_async::endpoint::refresh::RefreshFlow;
use oxide_auth_async::endpoint::{Endpoint, Extension, OwnerSolicitor};
use oxide_auth_async::primitives::{Authorizer, Issuer, Registrar};

use super::clients::Clients;
use super::grants::{Codes, Grants, RESOURCE_EXTENSION, Tokens};

/// What the user said, for the second pass of an authorization request.
pub(crate) enum Decision {
    /// First pass: only check the request; the login comes next.
    Check,
    /// The user logged in and agreed: a code for this owner.
    Grant(String),
    /// The user refused (or the provider did).
    Deny,
}

/// The parameters of a valid authorization request, as oxide-auth bound them.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    pub redirect_uri: String,
}

struct Solicitor {
    decision: Decision,
    checked: Option<Checked>,
}

#[async_trait::async_trait]
impl OwnerSolicitor<Request> for Solicitor {
    async fn check_consent(
        &mut self,
        _: &mut Request,
        solicitation: Solicitation<'_>,
    ) -> OwnerConsent<Response> {
        let pre = solicitation.pre_grant();
        self.checked = Some(Checked {
            redirect_uri: pre.redirect_uri.to_string(),
        });
        match &self.decision {
            Decision::Check => OwnerConsent::InProgress(Response::default()),
            Decision::Grant(owner) => OwnerConsent::Authorized(owner.clone()),
            Decision::Deny => OwnerConsent::Denied,
        }
    }
}

/// RFC 8707: the resource a token is for. On the authorization request it
/// must be one of the gateway's; on the token request it must be the same
/// one (or name one when the authorization did not).
struct ResourceIndicator {
    accepts: Arc<dyn Fn(&str) -> bool + Send + Sync>,
}

impl GrantExtension for ResourceIndicator {
    fn identifier(&self) -> &'static str {
        RESOURCE_EXTENSION
    }
}

impl AuthorizationAddon for ResourceIndicator {
    fn execute(
        &self,
        request: &dyn oxide_auth::frontends::simple::extensions::AuthorizationRequest,
    ) -> AddonResult {
        match request.extension("resource") {
            None => AddonResult::Ok,
            Some(resource) if (self.accepts)(&resource) => {
                AddonResult::Data(Value::public(Some(resource.into_owned())))
            }
            Some(_) => AddonResult::Err,
        }
    }
}

impl AccessTokenAddon for ResourceIndicator {
    fn execute(
        &self,
        request: &dyn oxide_auth::frontends::simple::extensions::AccessTokenRequest,
        data: Option<Value>,
    ) -> AddonResult {
        let granted = data.and_then(|v| v.into_public_value().ok().flatten());
        let requested = request.extension("resource").map(|r| r.into_owned());
        match (granted, requested) {
            (Some(g), Some(r)) if g != r => AddonResult::Err,
            (Some(g), _) => AddonResult::Data(Value::public(Some(g))),
            (None, Some(r)) if (self.accepts)(&r) => AddonResult::Data(Value::public(Some(r))),
            (None, Some(_)) => AddonResult::Err,
            (None, None) => AddonResult::Ok,
        }
    }
}

/// oxide-auth's PKCE check (S256 required), which also notes when a code
/// verifier failed: oxide-auth answers that `invalid_request`, and the
/// token endpoint says `invalid_grant` as RFC 7636 §4.6 asks.
struct PkceCheck {
    inner: Pkce,
    failed: Arc<std::sync::atomic::AtomicBool>,
}

impl GrantExtension for PkceCheck {
    fn identifier(&self) -> &'static str {
        self.inner.identifier()
    }
}

impl AuthorizationAddon for PkceCheck {
    fn execute(
        &self,
        request: &dyn oxide_auth::frontends::simple::extensions::AuthorizationRequest,
    ) -> AddonResult {
        AuthorizationAddon::execute(&self.inner, request)
    }
}

impl AccessTokenAddon for PkceCheck {
    fn execute(
        &self,
        request: &dyn oxide_auth::frontends::simple::extensions::AccessTokenRequest,
        data: Option<Value>,
    ) -> AddonResult {
        let result = AccessTokenAddon::execute(&self.inner, request, data);
        if matches!(result, AddonResult::Err) {
            self.failed
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        result
    }
}

/// Why a flow could not produce an answer at all (as opposed to an OAuth
/// error answer, which is a [`Response`]).
#[derive(Debug, thiserror::Error)]
#[error("the authorization server failed: {0:?}")]
pub(crate) struct FlowError(OAuthError);

/// The endpoint oxide-auth drives, for one request.
struct Gateway<'a> {
    clients: &'a Clients,
    codes: Codes<'a>,
    tokens: Tokens<'a>,
    solicitor: Solicitor,
    addons: AddonList,
}

impl Endpoint<Request> for Gateway<'_> {
    type Error = FlowError;

    fn registrar(&self) -> Option<&(dyn Registrar + Sync)> {
        Some(self.clients)
    }

    fn authorizer_mut(&mut self) -> Option<&mut (dyn Authorizer + Send)> {
        Some(&mut self.codes)
    }

    fn issuer_mut(&mut self) -> Option<&mut (dyn Issuer + Send)> {
        Some(&mut self.tokens)
    }

    fn owner_solicitor(&mut self) -> Option<&mut (dyn OwnerSolicitor<Request> + Send)> {
        Some(&mut self.solicitor)
    }

    fn scopes(&mut self) -> Option<&mut dyn Scopes<Request>> {
        None
    }

    fn response(&mut self, _: &mut Request, _: Template) -> Result<Response, FlowError> {
        Ok(Response::default())
    }

    fn error(&mut self, err: OAuthError) -> FlowError {
        FlowError(err)
    }

    fn web_error(&mut self, err: NoError) -> FlowError {
        match err {}
    }

    fn extension(&mut self) -> Option<&mut (dyn Extension + Send)> {
        Some(&mut self.addons)
    }
}

/// What one flow needs from the server.
pub(crate) struct Parts<'a> {
    pub clients: &'a Clients,
    pub grants: &'a Grants,
    pub issuer: &'a str,
    pub default_resource: &'a str,
    pub accepts: Arc<dyn Fn(&str) -> bool + Send + Sync>,
}

impl<'a> Parts<'a> {
    fn endpoint(
        &self,
        decision: Decision,
        pkce_failed: Arc<std::sync::atomic::AtomicBool>,
    ) -> Gateway<'a> {
        let mut addons = AddonList::new();
        addons.push_code(PkceCheck {
            inner: Pkce::required(),
            failed: pkce_failed,
        });
        addons.push_code(ResourceIndicator {
            accepts: self.accepts.clone(),
        });
        Gateway {
            clients: self.clients,
            codes: Codes {
                grants: self.grants,
            },
            tokens: Tokens {
                grants: self.grants,
                issuer: self.issuer,
                default_resource: self.default_resource,
            },
            solicitor: Solicitor {
                decision,
                checked: None,
            },
            addons,
        }
    }

    /// Runs an authorization request with `query`; the answer, and the
    /// request's bound parameters when it was valid.
    pub(crate) async fn authorize(
        &self,
        query: HashMap<String, String>,
        decision: Decision,
    ) -> Result<(Response, Option<Checked>), FlowError> {
        let request = Request {
            query,
            urlbody: HashMap::new(),
            auth: None,
        };
        let mut endpoint = self.endpoint(decision, Arc::default());
        // The flow borrows the endpoint, so the solicitor's record of the
        // bound parameters can be read after it.
        let mut flow = AuthorizationFlow::prepare(&mut endpoint)?;
        let response = flow.execute(request).await?;
        Ok((response, endpoint.solicitor.checked.take()))
    }

    /// Runs a token request (`grant_type` authorization_code or refresh_token);
    /// the answer, and whether a PKCE code verifier failed.
    pub(crate) async fn token(
        &self,
        body: HashMap<String, String>,
        authorization: Option<String>,
    ) -> Result<(Response, bool), FlowError> {
        let refresh = body.get("grant_type").map(String::as_str) == Some("refresh_token");
        let request = Request {
            query: HashMap::new(),
            urlbody: body,
            auth: authorization,
        };
        let failed = Arc::<std::sync::atomic::AtomicBool>::default();
        let mut endpoint = self.endpoint(Decision::Deny, failed.clone());
        let response = if refresh {
            let mut flow = RefreshFlow::prepare(&mut endpoint)?;
            flow.execute(request).await?
        } else {
            let mut flow = AccessTokenFlow::prepare(&mut endpoint)?;
            flow.allow_credentials_in_body(true);
            flow.execute(request).await?
        };
        Ok((response, failed.load(std::sync::atomic::Ordering::Relaxed)))
    }
}

impl Endpoint<Request> for &mut Gateway<'_> {
    type Error = FlowError;

    fn registrar(&self) -> Option<&(dyn Registrar + Sync)> {
        (**self).registrar()
    }

    fn authorizer_mut(&mut self) -> Option<&mut (dyn Authorizer + Send)> {
        (**self).authorizer_mut()
    }

    fn issuer_mut(&mut self) -> Option<&mut (dyn Issuer + Send)> {
        (**self).issuer_mut()
    }

    fn owner_solicitor(&mut self) -> Option<&mut (dyn OwnerSolicitor<Request> + Send)> {
        (**self).owner_solicitor()
    }

    fn scopes(&mut self) -> Option<&mut dyn Scopes<Request>> {
        (**self).scopes()
    }

    fn response(&mut self, request: &mut Request, kind: Template) -> Result<Response, FlowError> {
        (**self).response(request, kind)
    }

    fn error(&mut self, err: OAuthError) -> FlowError {
        (**self).error(err)
    }

    fn web_error(&mut self, err: NoError) -> FlowError {
        (**self).web_error(err)
    }

    fn extension(&mut self) -> Option<&mut (dyn Extension + Send)> {
        (**self).extension()
    }
}
