//! Why the router could not answer a request, and the one mapping of its
//! errors to JSON-RPC errors (the era decides a missing resource's code).

use serde_json::{Value, json};

use super::reply::Frame;
use crate::catalog::CursorError;
use crate::metrics::Outcome;
use crate::protocol::{self, Era, RpcError, code};
use crate::upstream::UpstreamError;

/// Where a router error came from, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The client sent something wrong.
    Downstream,
    /// An upstream failed or refused.
    Upstream,
}

/// Why the router could not answer a request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum RouteError {
    #[error("method not found: {0}")]
    MethodNotFound(String),
    #[error("invalid params: {0}")]
    InvalidParams(#[from] crate::protocol::ParamsError),
    #[error("unknown tool: {0}")]
    UnknownTool(String),
    #[error("unknown prompt: {0}")]
    UnknownPrompt(String),
    /// A server-side tool name (an app's call) that several upstreams have.
    #[error("tool name {name:?} is ambiguous: the tools {} have it as their own name; call one of them by its exposed name", candidates.join(", "))]
    AmbiguousTool {
        name: String,
        candidates: Vec<String>,
    },
    #[error("resource not found: {0}")]
    ResourceNotFound(String),
    #[error(transparent)]
    Cursor(#[from] CursorError),
    #[error("upstream '{upstream}' does not support {feature}")]
    NotSupported {
        upstream: String,
        feature: &'static str,
    },
    #[error("request cancelled")]
    Cancelled,
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
}

impl RouteError {
    /// The metrics outcome of a failed request.
    pub(crate) fn outcome(&self) -> Outcome {
        match self {
            Self::Cancelled | Self::Upstream(UpstreamError::Cancelled { .. }) => Outcome::Cancelled,
            Self::Upstream(UpstreamError::Timeout { .. }) => Outcome::Timeout,
            Self::Upstream(
                UpstreamError::Unavailable { .. }
                | UpstreamError::SessionExpired { .. }
                | UpstreamError::Overloaded { .. }
                | UpstreamError::CircuitOpen { .. }
                | UpstreamError::NotRetried { .. },
            ) => Outcome::Unavailable,
            _ => Outcome::Error,
        }
    }

    /// The one mapping from gateway errors to JSON-RPC errors. The era
    /// matters once: a missing resource is -32002 before 2026-07-28 and
    /// -32602 from it on.
    pub(crate) fn to_rpc(&self, era: Era) -> (Fault, RpcError) {
        let message = self.to_string();
        match self {
            Self::MethodNotFound(_) => (
                Fault::Downstream,
                RpcError::new(code::METHOD_NOT_FOUND, message),
            ),
            Self::InvalidParams(_) | Self::Cursor(_) => (
                Fault::Downstream,
                RpcError::new(code::INVALID_PARAMS, message),
            ),
            Self::AmbiguousTool { name, candidates } => (
                Fault::Downstream,
                RpcError::new(code::INVALID_PARAMS, message)
                    .with_data(json!({ "name": name, "candidates": candidates })),
            ),
            Self::UnknownTool(name) | Self::UnknownPrompt(name) => (
                Fault::Downstream,
                RpcError::new(code::INVALID_PARAMS, message).with_data(json!({ "name": name })),
            ),
            Self::ResourceNotFound(uri) => {
                let code = match era {
                    Era::Legacy => code::RESOURCE_NOT_FOUND,
                    Era::Modern => code::INVALID_PARAMS,
                };
                (
                    Fault::Downstream,
                    RpcError::new(code, message).with_data(json!({ "uri": uri })),
                )
            }
            Self::NotSupported { upstream, .. } => (
                Fault::Downstream,
                RpcError::new(code::METHOD_NOT_FOUND, message)
                    .with_data(json!({ "upstream": upstream })),
            ),
            Self::Cancelled | Self::Upstream(UpstreamError::Cancelled { .. }) => (
                Fault::Downstream,
                RpcError::new(code::REQUEST_CANCELLED, message),
            ),
            Self::Upstream(UpstreamError::AuthorizationRequired { upstream, start }) => (
                Fault::Downstream,
                RpcError::new(code::URL_ELICITATION_REQUIRED, message).with_data(json!({
                    "upstream": upstream,
                    "elicitations": [{
                        "mode": "url",
                        "url": start.url.as_str(),
                        "elicitationId": start.elicitation_id,
                        "message": format!("Connect your {upstream} account"),
                    }],
                })),
            ),
            Self::Upstream(UpstreamError::Credential { upstream, error }) if error.is_final() => (
                Fault::Downstream,
                RpcError::new(code::INVALID_REQUEST, message)
                    .with_data(json!({ "upstream": upstream })),
            ),
            Self::Upstream(e) => {
                let (code, upstream) = match e {
                    UpstreamError::Unavailable { upstream, .. }
                    | UpstreamError::SessionExpired { upstream, .. }
                    | UpstreamError::NotRetried { upstream, .. }
                    | UpstreamError::Unauthorized { upstream, .. }
                    | UpstreamError::Credential { upstream, .. } => {
                        (code::UPSTREAM_UNAVAILABLE, upstream)
                    }
                    // Matched above; listed so a new variant must be placed.
                    UpstreamError::AuthorizationRequired { upstream, .. } => {
                        (code::URL_ELICITATION_REQUIRED, upstream)
                    }
                    UpstreamError::Overloaded { upstream, .. } => {
                        (code::UPSTREAM_SATURATED, upstream)
                    }
                    UpstreamError::CircuitOpen { upstream, .. } => {
                        (code::UPSTREAM_CIRCUIT_OPEN, upstream)
                    }
                    UpstreamError::Timeout { upstream, .. } => (code::UPSTREAM_TIMEOUT, upstream),
                    UpstreamError::Protocol { upstream, .. }
                    | UpstreamError::Rpc { upstream, .. } => (code::UPSTREAM_PROTOCOL, upstream),
                    // Matched above; listed so a new variant must be placed.
                    UpstreamError::Cancelled { upstream, .. } => {
                        (code::REQUEST_CANCELLED, upstream)
                    }
                };
                let mut data = json!({ "upstream": upstream });
                if let Some(after) = e.retry_after() {
                    data["retryAfterMs"] = json!(after.as_millis() as u64);
                }
                (
                    Fault::Upstream,
                    RpcError::new(code, message).with_data(data),
                )
            }
        }
    }

    /// The error response frame for request `id`, with its outcome. An
    /// upstream's own JSON-RPC error is passed through unchanged, except
    /// that a modern client gets -32602 where a legacy upstream said -32002.
    pub(crate) fn to_frame(&self, id: &str, era: Era) -> Frame {
        if let Self::Upstream(UpstreamError::Rpc { error, code, .. }) = self {
            if era == Era::Modern
                && *code == code::RESOURCE_NOT_FOUND
                && let Ok(mut object) =
                    serde_json::from_str::<serde_json::Map<String, Value>>(error.get())
            {
                object.insert("code".into(), Value::from(code::INVALID_PARAMS));
                let text = protocol::error_frame_raw(id, &Value::Object(object).to_string());
                return Frame::error(text, code::INVALID_PARAMS, None);
            }
            // Another gateway's refusal keeps its advice on when to retry.
            let retry_after_ms = matches!(
                *code,
                code::UPSTREAM_SATURATED | code::UPSTREAM_CIRCUIT_OPEN
            )
            .then(|| retry_after_ms(error))
            .flatten();
            return Frame::error(
                protocol::error_frame_raw(id, error.get()),
                *code,
                retry_after_ms,
            );
        }
        let error = self.to_rpc(era).1;
        let retry_after_ms = match self {
            Self::Upstream(e) => e.retry_after().map(|after| after.as_millis() as u64),
            _ => None,
        };
        Frame::error(
            protocol::error_frame(Some(id), &error),
            error.code,
            retry_after_ms,
        )
    }
}

/// `data.retryAfterMs` of an error object.
fn retry_after_ms(error: &serde_json::value::RawValue) -> Option<u64> {
    let object: Value = serde_json::from_str(error.get()).ok()?;
    object.pointer("/data/retryAfterMs")?.as_u64()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::value::RawValue;

    use super::*;
    use crate::router::Ended;

    fn rpc(error: &str) -> RouteError {
        let error = RawValue::from_string(error.to_owned()).expect("json");
        RouteError::Upstream(UpstreamError::Rpc {
            upstream: "a".into(),
            code: protocol::error_code(&error),
            error,
        })
    }

    #[test]
    fn a_frame_carries_how_the_request_ended() {
        // An upstream's own error passes through with its code.
        let frame = rpc(r#"{"code":-32602,"message":"bad"}"#).to_frame("1", Era::Legacy);
        assert_eq!(frame.error_code(), Some(-32602));
        assert!(frame.into_text().contains(r#""message":"bad""#));
        // A modern client gets -32602 for a legacy upstream's -32002.
        let frame = rpc(r#"{"code":-32002,"message":"gone"}"#).to_frame("1", Era::Modern);
        assert_eq!(frame.error_code(), Some(code::INVALID_PARAMS));
        assert!(frame.into_text().contains("-32602"));
        // The gateway's own refusal keeps its retry advice.
        let busy = RouteError::Upstream(UpstreamError::Overloaded {
            upstream: "a".into(),
            reason: "full".into(),
            retry_after: Duration::from_millis(1500),
        });
        assert_eq!(
            busy.to_frame("1", Era::Modern).ended(),
            Ended::Error {
                code: code::UPSTREAM_SATURATED,
                retry_after_ms: Some(1500)
            }
        );
        // So does another gateway's, passed through.
        let frame = rpc(r#"{"code":-32053,"message":"busy","data":{"retryAfterMs":900}}"#)
            .to_frame("1", Era::Legacy);
        assert_eq!(
            frame.ended(),
            Ended::Error {
                code: code::UPSTREAM_SATURATED,
                retry_after_ms: Some(900)
            }
        );
        // An error object without a usable code counts as an internal error.
        assert_eq!(
            rpc(r#"{"message":"no code"}"#)
                .to_frame("1", Era::Legacy)
                .error_code(),
            Some(code::INTERNAL_ERROR)
        );
    }
}
