//! The `tracing` section: OpenTelemetry traces exported over OTLP
//! (HTTP/protobuf). Off unless `tracing.otlp_endpoint` is set or the
//! standard `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
//! variables are (the exporter reads those itself).

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{Lookup, Problems};

/// How traces are exported.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct TracingConfig {
    /// The collector's OTLP/HTTP base URL (`/v1/traces` is added) or, when
    /// it already ends with `/v1/traces`, that URL; none: the `OTEL_*`
    /// variables decide.
    pub otlp_endpoint: Option<String>,
    /// `service.name`; none: `OTEL_SERVICE_NAME`, else `mcpmux`.
    pub service_name: Option<String>,
    /// Fraction of new traces kept (a client's sampled flag is followed);
    /// none: `OTEL_TRACES_SAMPLER`, else every trace.
    pub sample_ratio: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTracing {
    #[serde(default)]
    otlp_endpoint: Option<Spanned<String>>,
    #[serde(default)]
    service_name: Option<Spanned<String>>,
    #[serde(default)]
    sample_ratio: Option<Spanned<f64>>,
}

impl RawTracing {
    pub(super) fn validate(&self, lookup: &Lookup, p: &mut Problems) -> TracingConfig {
        let otlp_endpoint = self.otlp_endpoint.as_ref().and_then(|raw| {
            let url = p.expand(raw, "tracing.otlp_endpoint", lookup)?;
            match reqwest::Url::parse(&url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => Some(url),
                _ => {
                    p.at(
                        raw.referenced,
                        format_args!(
                            "tracing.otlp_endpoint: {url:?} is not an http:// or https:// URL"
                        ),
                    );
                    None
                }
            }
        });
        let service_name = self.service_name.as_ref().and_then(|raw| {
            let name = p.expand(raw, "tracing.service_name", lookup)?;
            if name.trim().is_empty() {
                p.at(raw.referenced, "tracing.service_name: must not be empty");
                return None;
            }
            Some(name)
        });
        let sample_ratio = self.sample_ratio.as_ref().and_then(|raw| {
            if (0.0..=1.0).contains(&raw.value) {
                Some(raw.value)
            } else {
                p.at(
                    raw.referenced,
                    format_args!("tracing.sample_ratio: {} is not between 0 and 1", raw.value),
                );
                None
            }
        });
        TracingConfig {
            otlp_endpoint,
            service_name,
            sample_ratio,
        }
    }
}
