//! Optional OpenTelemetry trace export (`serve --otlp-traces`): one span per admission request,
//! a child span per phase, sent over OTLP/HTTP (protobuf) to a collector.
//!
//! Off unless `--otlp-traces` is on; then the standard `OTEL_*` environment configures it
//! ([`plan`] reads and checks it). Spans go through the SDK's batch processor: ending a span
//! only puts it on a bounded queue (`OTEL_BSP_MAX_QUEUE_SIZE`, spans beyond it are dropped and
//! the drops logged), a thread of the SDK's own sends the batches, and the HTTP requests run on
//! the server's runtime ([`OtlpClient`]), each bounded by the export timeout. A collector that
//! is down costs failed exports (logged), never a slower admission answer. Shutting down
//! flushes what is queued.
//!
//! Span and phase times come from the server's monotonic clock: the core reports when each of
//! its phases begins ([`review::Observer`]), and the spans are built with those times when the
//! request is answered.

use super::redact;
use crate::admission::AdmissionRequest;
use crate::review::{self, Endpoint, Outcome, ReviewSummary};
use anyhow::{Context as _, Result};
use axum::body::Bytes;
use axum::http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_http::{HeaderExtractor, HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracer, SdkTracerProvider};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The spec's default OTLP/HTTP endpoint (a collector next to the process).
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";
/// The spec's default export timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// A collector's answer is read up to this size.
const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// What `--otlp-traces` and the `OTEL_*` environment ask for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Plan {
    /// No export; why (for the startup log).
    Off(String),
    /// Export with these settings.
    Export(Settings),
}

/// The checked export settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
    /// The full URL spans are POSTed to (`…/v1/traces`).
    pub(crate) endpoint: String,
    /// The bound on one export request, answer included.
    pub(crate) timeout: Duration,
    /// PEM file of the CAs to trust for an `https` endpoint (else the system roots).
    pub(crate) certificate: Option<PathBuf>,
    /// `service.name` comes from neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES`:
    /// it is `launchgate`.
    pub(crate) default_service_name: bool,
    /// Values that were ignored, each naming its variable and what is used instead.
    pub(crate) warnings: Vec<String>,
}

/// Reads the `OTEL_*` settings through `env` (an unset or empty variable is `None`, as the
/// spec says) when `enabled` (`--otlp-traces`). An error is a setting launchgate cannot export
/// with (an endpoint that is no http(s) URL, a protocol or exporter other than OTLP/HTTP
/// protobuf); values the SDK falls back on (timeouts, batch sizes, a malformed resource
/// attribute) are warnings.
pub(crate) fn plan(enabled: bool, env: &dyn Fn(&str) -> Option<String>) -> Result<Plan, String> {
    let get = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if !enabled {
        let set = [
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ]
        .into_iter()
        .find(|v| get(v).is_some());
        return Ok(Plan::Off(match set {
            Some(var) => format!("{var} is set but --otlp-traces is off: no traces are exported"),
            None => "--otlp-traces is off".into(),
        }));
    }
    let mut warnings = Vec::new();
    if let Some(disabled) = get("OTEL_SDK_DISABLED") {
        match disabled.trim().to_ascii_lowercase().as_str() {
            "true" => return Ok(Plan::Off("OTEL_SDK_DISABLED=true".into())),
            "false" => {}
            _ => warnings.push(format!(
                "OTEL_SDK_DISABLED={disabled:?} is neither true nor false; taken as false"
            )),
        }
    }
    if let Some(exporters) = get("OTEL_TRACES_EXPORTER") {
        let names: Vec<String> = exporters
            .split(',')
            .map(|e| e.trim().to_ascii_lowercase())
            .filter(|e| !e.is_empty())
            .collect();
        if names.iter().all(|e| e == "none") {
            return Ok(Plan::Off("OTEL_TRACES_EXPORTER=none".into()));
        }
        if !names.iter().any(|e| e == "otlp") {
            return Err(format!(
                "OTEL_TRACES_EXPORTER={exporters:?}: launchgate exports traces over OTLP only (otlp or none)"
            ));
        }
        if names.iter().any(|e| e != "otlp" && e != "none") {
            warnings.push(format!(
                "OTEL_TRACES_EXPORTER={exporters:?}: only otlp is supported; the others are ignored"
            ));
        }
    }
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(protocol) = get(var) {
            if protocol.trim() != "http/protobuf" {
                return Err(format!(
                    "{var}={protocol:?}: launchgate sends OTLP over HTTP with protobuf (http/protobuf) only; point the endpoint at the collector's OTLP/HTTP port (4318)"
                ));
            }
            // The traces variable wins; the general one is not read after it.
            break;
        }
    }
    let endpoint = match (
        get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        get("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ) {
        // The signal's own endpoint is the full URL, used as given.
        (Some(url), _) => checked_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url.trim())?,
        // The general one is a base URL: the signal's path is appended.
        (None, Some(base)) => checked_url(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            &format!("{}/v1/traces", base.trim().trim_end_matches('/')),
        )?,
        (None, None) => format!("{DEFAULT_ENDPOINT}/v1/traces"),
    };
    let mut millis = |traces: &str, general: &str, default: Option<Duration>| {
        let (var, value) = match (get(traces), get(general)) {
            (Some(v), _) => (traces, v),
            (None, Some(v)) => (general, v),
            (None, None) => return default,
        };
        match value.trim().parse::<u64>() {
            Ok(ms) => Some(Duration::from_millis(ms)),
            Err(_) => {
                warnings.push(format!(
                    "{var}={value:?} is not a number of milliseconds; ignored{}",
                    default.map_or(String::new(), |d| format!(", {} ms is used", d.as_millis()))
                ));
                default
            }
        }
    };
    let timeout = millis(
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        Some(DEFAULT_TIMEOUT),
    )
    .unwrap_or(DEFAULT_TIMEOUT);
    // The batch processor reads these itself and silently skips a value it cannot parse.
    for var in [
        "OTEL_BSP_SCHEDULE_DELAY",
        "OTEL_BSP_EXPORT_TIMEOUT",
        "OTEL_BSP_MAX_QUEUE_SIZE",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    ] {
        if let Some(value) = get(var)
            && value.trim().parse::<u64>().is_err()
        {
            warnings.push(format!(
                "{var}={value:?} is not a whole number; the SDK's default is used"
            ));
        }
    }
    let certificate = get("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE")
        .or_else(|| get("OTEL_EXPORTER_OTLP_CERTIFICATE"))
        .map(PathBuf::from);
    let mut named_in_attributes = false;
    if let Some(attributes) = get("OTEL_RESOURCE_ATTRIBUTES") {
        for pair in attributes.split(',').filter(|p| !p.trim().is_empty()) {
            match pair.split_once('=') {
                Some((key, _)) if !key.trim().is_empty() => {
                    named_in_attributes |= key.trim() == "service.name";
                }
                _ => warnings.push(format!(
                    "OTEL_RESOURCE_ATTRIBUTES: {pair:?} is not key=value; ignored"
                )),
            }
        }
    }
    Ok(Plan::Export(Settings {
        endpoint,
        timeout,
        certificate,
        default_service_name: get("OTEL_SERVICE_NAME").is_none() && !named_in_attributes,
        warnings,
    }))
}

/// `url` when it is an absolute http or https URL; else an error naming `var`.
fn checked_url(var: &str, url: &str) -> Result<String, String> {
    let parsed: axum::http::Uri = url
        .parse()
        .map_err(|e| format!("{var}: {:?} is not a URL: {e}", redact::url(url)))?;
    match (parsed.scheme_str(), parsed.authority()) {
        (Some("http" | "https"), Some(a)) if !a.host().is_empty() => Ok(url.to_string()),
        _ => Err(format!(
            "{var}: {:?} is not an http:// or https:// URL with a host",
            redact::url(url)
        )),
    }
}

/// The running export: the SDK's provider (to flush and stop) and the tracer of `launchgate`.
pub(crate) struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Telemetry {
    /// Starts exporting when `enabled` and the environment asks for it; `None` when not (the
    /// reason logged). Needs the server's runtime (exports run on it). A setting launchgate
    /// cannot export with is an error; ignored values are logged as warnings.
    pub(crate) fn start(enabled: bool) -> Result<Option<Telemetry>> {
        let env = |name: &str| std::env::var(name).ok();
        let settings = match plan(enabled, &env).map_err(anyhow::Error::msg)? {
            Plan::Off(why) => {
                tracing::debug!(reason = why.as_str(), "OTLP trace export off");
                if why.contains("is set") {
                    tracing::info!("{why}");
                }
                return Ok(None);
            }
            Plan::Export(settings) => settings,
        };
        for warning in &settings.warnings {
            tracing::warn!("OTLP trace export: {warning}");
        }
        let client = OtlpClient::new(&settings)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(settings.timeout)
            .build()
            .context("OTLP trace exporter")?;
        let mut resource = Resource::builder()
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
        if settings.default_service_name {
            resource = resource.with_service_name("launchgate");
        }
        let provider = SdkTracerProvider::builder()
            .with_span_processor(BatchSpanProcessor::builder(exporter).build())
            .with_resource(resource.build())
            .build();
        let tracer = provider.tracer_with_scope(
            InstrumentationScope::builder("launchgate")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        );
        tracing::info!(
            endpoint = redact::url(&settings.endpoint),
            "exporting admission traces over OTLP/HTTP"
        );
        Ok(Some(Telemetry { provider, tracer }))
    }

    /// The tracer the admission handler starts spans with.
    pub(crate) fn tracer(&self) -> SdkTracer {
        self.tracer.clone()
    }

    /// Sends what is queued and stops the export (bounded by the export timeout).
    pub(crate) async fn shutdown(self) {
        let provider = self.provider;
        // The SDK blocks until its thread has exported; that export runs on this runtime.
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => tracing::debug!("OTLP trace export flushed and stopped"),
            Ok(Err(e)) => {
                tracing::warn!(error = %redact::in_text(&e.to_string()), "OTLP trace export: flushing at shutdown failed")
            }
            Err(e) => {
                tracing::warn!(error = %redact::in_text(&e.to_string()), "OTLP trace export: shutdown did not finish")
            }
        }
    }
}

/// The exporter's HTTP client: hyper-util's pooled client over hyper-rustls (rustls with ring),
/// each request run on the server's runtime and bounded by the export timeout.
#[derive(Debug, Clone)]
struct OtlpClient {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

impl OtlpClient {
    fn new(settings: &Settings) -> Result<OtlpClient> {
        let mut roots = rustls::RootCertStore::empty();
        if settings.endpoint.starts_with("https:") {
            match &settings.certificate {
                Some(path) => {
                    use rustls_pki_types::CertificateDer;
                    use rustls_pki_types::pem::PemObject as _;
                    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                        .and_then(|certs| certs.collect())
                        .with_context(|| {
                            format!("OTEL_EXPORTER_OTLP_CERTIFICATE: reading {}", path.display())
                        })?;
                    let (added, _) = roots.add_parsable_certificates(certs);
                    anyhow::ensure!(
                        added > 0,
                        "OTEL_EXPORTER_OTLP_CERTIFICATE: no usable CA certificate in {}",
                        path.display()
                    );
                }
                None => {
                    let native = rustls_native_certs::load_native_certs();
                    roots.add_parsable_certificates(native.certs);
                    anyhow::ensure!(
                        !roots.is_empty(),
                        "the OTLP endpoint {} is https but no system CA certificates were found; set OTEL_EXPORTER_OTLP_CERTIFICATE to the collector's CA",
                        redact::url(&settings.endpoint)
                    );
                }
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .context("TLS for the OTLP exporter")?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Ok(OtlpClient {
            client: Client::builder(TokioExecutor::new()).build(connector),
            runtime: tokio::runtime::Handle::try_current()
                .context("the OTLP exporter needs the server's runtime")?,
            timeout: settings.timeout,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (client, timeout) = (self.client.clone(), self.timeout);
        let send = async move {
            let (parts, body) = request.into_parts();
            let response = client
                .request(Request::from_parts(parts, Full::new(body)))
                .await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_RESPONSE_BYTES)
                .collect()
                .await?
                .to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        };
        // The SDK's export thread waits here; the request itself runs on the runtime.
        self.runtime
            .spawn(async move {
                tokio::time::timeout(timeout, send)
                    .await
                    .map_err(|_| -> HttpError { format!("no answer within {timeout:?}").into() })?
            })
            .await
            .map_err(|e| -> HttpError { format!("export task: {e}").into() })?
    }
}

/// One admission request being traced: when it and each of its phases began, and what it was
/// about. Built only when tracing is on; the spans are made when the request is answered.
pub(crate) struct RequestTrace {
    tracer: SdkTracer,
    parent: Context,
    started: Instant,
    started_at: SystemTime,
    /// Each phase and when it began; a phase ends when the next begins (the last at the
    /// answer).
    phases: Vec<(&'static str, Instant)>,
    request: Vec<KeyValue>,
}

impl RequestTrace {
    /// Starts tracing a request that arrived at `started` (its body not read yet). A W3C
    /// `traceparent` header (the API server's tracing) makes the span that trace's child.
    pub(crate) fn start(tracer: &SdkTracer, headers: &HeaderMap, started: Instant) -> Self {
        let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
        RequestTrace {
            tracer: tracer.clone(),
            parent,
            started,
            started_at: SystemTime::now()
                .checked_sub(started.elapsed())
                .unwrap_or_else(SystemTime::now),
            phases: {
                // The server's two phases, the core's four, and none to grow into.
                let mut phases = Vec::with_capacity(6);
                phases.push(("read", started));
                phases
            },
            request: Vec::new(),
        }
    }

    /// `phase` begins now.
    pub(crate) fn mark(&mut self, phase: &'static str) {
        self.phases.push((phase, Instant::now()));
    }

    /// The request was answered from a review.
    pub(crate) fn reviewed(self, endpoint: Endpoint, summary: &ReviewSummary) {
        let skipped = summary.outcome == Outcome::Skipped;
        let mut attributes = vec![
            KeyValue::new(
                "launchgate.outcome",
                if skipped {
                    "skipped"
                } else {
                    super::decision::outcome_label(summary)
                },
            ),
            KeyValue::new("launchgate.allowed", summary.outcome != Outcome::Denied),
            KeyValue::new("launchgate.patched", summary.patch_operations > 0),
            KeyValue::new("launchgate.workload", summary.kind),
            KeyValue::new("launchgate.operation", summary.operation),
            KeyValue::new("launchgate.dry_run", summary.dry_run),
            KeyValue::new("http.response.status_code", 200),
        ];
        let mut add = |key: &'static str, value: Option<opentelemetry::Value>| {
            if let Some(v) = value {
                attributes.push(KeyValue::new(key, v));
            }
        };
        add("launchgate.queue", summary.queue.clone().map(Into::into));
        add("launchgate.skipped", summary.skipped.map(Into::into));
        add(
            "launchgate.exempted_by",
            summary.exempted_by.clone().map(Into::into),
        );
        add(
            "launchgate.enforcement",
            summary.enforcement.map(Into::into),
        );
        let count = |n: usize| (n > 0).then(|| (n as i64).into());
        add(
            "launchgate.patch.operations",
            count(summary.patch_operations),
        );
        add("launchgate.patch.bytes", count(summary.patch_bytes));
        add("launchgate.violations", count(summary.violations.len()));
        add("launchgate.warnings", count(summary.warnings.len()));
        self.finish(endpoint, attributes, None);
    }

    /// The request was answered without a review (`reason`, as in the metrics), with `status`.
    pub(crate) fn unreviewed(self, endpoint: Endpoint, reason: &'static str, status: u16) {
        let error = (status != 200).then(|| reason.to_string());
        let mut attributes = vec![
            KeyValue::new("launchgate.error", reason),
            KeyValue::new("http.response.status_code", i64::from(status)),
        ];
        if status == 200 {
            attributes.push(KeyValue::new("launchgate.outcome", "denied"));
            attributes.push(KeyValue::new("launchgate.allowed", false));
        }
        self.finish(endpoint, attributes, error);
    }

    /// Makes the request span and its phase spans, ending now.
    fn finish(self, endpoint: Endpoint, mut attributes: Vec<KeyValue>, error: Option<String>) {
        let ended = Instant::now();
        let at = |t: Instant| {
            self.started_at
                .checked_add(t.saturating_duration_since(self.started))
                .unwrap_or(self.started_at)
        };
        let (name, route) = match endpoint {
            Endpoint::Mutate => ("POST /mutate", "/mutate"),
            Endpoint::Validate => ("POST /validate", "/validate"),
        };
        attributes.extend([
            KeyValue::new("launchgate.endpoint", endpoint.as_str()),
            KeyValue::new("http.request.method", "POST"),
            KeyValue::new("http.route", route),
        ]);
        attributes.extend(self.request);
        let mut span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_start_time(self.started_at)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &self.parent);
        if let Some(message) = error {
            span.set_status(Status::error(message));
        }
        let cx = self.parent.with_span(span);
        let ends = self
            .phases
            .iter()
            .skip(1)
            .map(|(_, t)| *t)
            .chain(std::iter::once(ended));
        for ((phase, began), end) in self.phases.iter().zip(ends) {
            let mut child = self
                .tracer
                .span_builder(*phase)
                .with_kind(SpanKind::Internal)
                .with_start_time(at(*began))
                .start_with_context(&self.tracer, &cx);
            child.end_with_timestamp(at(end));
        }
        cx.span().end_with_timestamp(at(ended));
    }
}

impl review::Observer for RequestTrace {
    fn phase(&mut self, phase: review::Phase) {
        self.mark(phase.as_str());
    }

    fn request(&mut self, request: &AdmissionRequest) {
        let kind = &request.kind;
        self.request.extend([
            KeyValue::new("launchgate.request.uid", request.uid.clone()),
            KeyValue::new("launchgate.kind.group", kind.group.clone()),
            KeyValue::new("launchgate.kind.version", kind.version.clone()),
            KeyValue::new("launchgate.kind.kind", kind.kind.clone()),
        ]);
        if let Some(ns) = request.namespace.as_deref().filter(|n| !n.is_empty()) {
            self.request
                .push(KeyValue::new("k8s.namespace.name", ns.to_string()));
        }
        if !request.name.is_empty() {
            self.request
                .push(KeyValue::new("launchgate.name", request.name.clone()));
        }
        if let Some(sub) = request.sub_resource.as_deref().filter(|s| !s.is_empty()) {
            self.request
                .push(KeyValue::new("launchgate.subresource", sub.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn plan_with(enabled: bool, vars: &[(&str, &str)]) -> Result<Plan, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        plan(enabled, &|name: &str| vars.get(name).cloned())
    }

    fn settings(vars: &[(&str, &str)]) -> Settings {
        match plan_with(true, vars) {
            Ok(Plan::Export(s)) => s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn off_without_the_flag_whatever_the_environment_says() {
        assert_eq!(
            plan_with(false, &[]),
            Ok(Plan::Off("--otlp-traces is off".into()))
        );
        let Ok(Plan::Off(why)) = plan_with(
            false,
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")],
        ) else {
            panic!()
        };
        assert!(why.contains("OTEL_EXPORTER_OTLP_ENDPOINT is set"), "{why}");
    }

    #[test]
    fn the_sdk_switches_turn_it_off() {
        for vars in [
            [("OTEL_SDK_DISABLED", "TRUE")],
            [("OTEL_TRACES_EXPORTER", "none")],
        ] {
            assert!(
                matches!(plan_with(true, &vars), Ok(Plan::Off(_))),
                "{vars:?}"
            );
        }
        let s = settings(&[("OTEL_SDK_DISABLED", "yes")]);
        assert!(s.warnings[0].contains("OTEL_SDK_DISABLED"), "{s:?}");
        assert!(
            settings(&[("OTEL_SDK_DISABLED", "false")])
                .warnings
                .is_empty()
        );
    }

    #[test]
    fn endpoints_follow_the_spec() {
        assert_eq!(settings(&[]).endpoint, "http://localhost:4318/v1/traces");
        assert_eq!(
            settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")]).endpoint,
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c.example/otlp")]).endpoint,
            "https://c.example/otlp/v1/traces"
        );
        // The signal's endpoint is used as given and wins.
        assert_eq!(
            settings(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:9999/custom"),
            ])
            .endpoint,
            "http://c:9999/custom"
        );
        // Empty is unset.
        assert_eq!(
            settings(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", " ")]).endpoint,
            "http://localhost:4318/v1/traces"
        );
    }

    #[test]
    fn settings_launchgate_cannot_export_with_are_errors() {
        for (var, value, says) in [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318", "not a URL"),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "/otlp",
                "http:// or https://",
            ),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "ftp://c/v1/traces",
                "http:// or https://",
            ),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://a b",
                "not a URL",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "http/protobuf"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                "http/json",
                "http/protobuf",
            ),
            ("OTEL_TRACES_EXPORTER", "zipkin", "OTLP only"),
        ] {
            let err = plan_with(true, &[(var, value)]).unwrap_err();
            assert!(
                err.starts_with(var) && err.contains(says),
                "{var}={value}: {err}"
            );
        }
        // The traces protocol wins over the general one.
        settings(&[
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]);
    }

    #[test]
    fn values_the_sdk_falls_back_on_are_warnings() {
        let s = settings(&[
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "lots"),
            ("OTEL_RESOURCE_ATTRIBUTES", "team=ml,broken"),
            ("OTEL_TRACES_EXPORTER", "otlp,console"),
        ]);
        assert_eq!(s.timeout, Duration::from_secs(3));
        assert_eq!(s.warnings.len(), 3, "{:?}", s.warnings);
        assert!(
            s.warnings
                .iter()
                .any(|w| w.contains("OTEL_BSP_MAX_QUEUE_SIZE"))
        );
        assert!(s.warnings.iter().any(|w| w.contains("\"broken\"")));
        let s = settings(&[("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "soon")]);
        assert_eq!(s.timeout, DEFAULT_TIMEOUT);
        assert!(s.warnings[0].starts_with("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"));
    }

    #[test]
    fn the_service_is_launchgate_unless_the_environment_names_it() {
        assert!(settings(&[]).default_service_name);
        assert!(!settings(&[("OTEL_SERVICE_NAME", "webhook")]).default_service_name);
        assert!(
            !settings(&[("OTEL_RESOURCE_ATTRIBUTES", "a=b, service.name=x")]).default_service_name
        );
    }
}
