//! `launchgate serve`: the HTTPS admission server.
//!
//! A thin shell around the pure core ([`crate::review`](mod@crate::review)): TLS (rustls,
//! hot-reloaded certificates), routes, metrics, config hot reload, bounded concurrency, read
//! timeouts and a graceful SIGTERM drain. Every decision on a launch workload is logged and counted
//! ([`decision`]) and, with `--events`, denials and warnings become Kubernetes Events
//! ([`events`]). `--admin-listen` serves `/healthz`, `/readyz` and `/metrics` over plain HTTP
//! on a second port, so probes and Prometheus never need a client certificate.
//!
//! The pieces: [`ServeOptions`] is `serve`'s flags and what [`start`] takes; the admission
//! handler (`admission.rs`) reads as one request's flow — body (size and time bounded), content
//! type, memory budget ([`budget`]), processing slot, review, answer, log and metrics — and
//! every way it fails is an [`AdmissionError`] with its HTTP status and metric reason.
//! tower-http layers wrap the routes: `CatchPanicLayer` answers a panicking admission request
//! 500, `TraceLayer` gives every request a span at TRACE level. With `--otlp-traces` each
//! admission request is also an OpenTelemetry span with a child span per phase, exported over
//! OTLP/HTTP (`otel.rs`).

mod admission;
pub mod budget;
pub mod bypass;
pub mod decision;
mod error;
pub mod events;
mod launchqueues;
pub(crate) mod metrics;
pub mod native_sync;
mod options;
mod otel;
pub mod owner_cache;
pub mod redact;
mod reload;
pub(crate) mod tls;
pub mod webhook_sync;

pub(crate) use options::parse_slots;
pub use options::{LogFormat, RegistrationOptions, ServeOptions};

use crate::cluster::{ClusterView, NoCluster};
use crate::kinds::WorkloadKind;
use crate::policy::Policy;
use crate::review::Endpoint;
use anyhow::{Context, Result};
use arc_swap::ArcSwap;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use error::json_error;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use metrics::Metrics;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::{
    DefaultMakeSpan, DefaultOnFailure, DefaultOnRequest, DefaultOnResponse, TraceLayer,
};
use tracing::Level;

/// Largest accepted request body: an UPDATE carries the old and the new object, each up to the
/// API server's 3 MiB limit, plus the envelope.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Shared state of the running server.
pub(crate) struct AppState {
    pub(crate) policy: ArcSwap<Policy>,
    pub(crate) metrics: Metrics,
    pub(crate) cluster: Arc<dyn ClusterView>,
    pub(crate) shutting_down: AtomicBool,
    pub(crate) cert_valid: AtomicBool,
    slots: budget::Slots,
    budget: budget::MemoryBudget,
    read_timeout: Duration,
    request_deadline: Duration,
    /// Set when Events are on.
    events: Option<events::EventRecorder>,
    /// Set when OTLP trace export is on (`--otlp-traces`).
    tracer: Option<opentelemetry_sdk::trace::SdkTracer>,
    /// Set when the server keeps native admission policies (`--native-policies`).
    pub(crate) native: Option<native_sync::Native>,
    /// Set when the server honours the emergency bypass (it registers webhooks or keeps native
    /// policies, and knows its namespace).
    pub(crate) bypass: Option<Arc<bypass::Bypass>>,
    /// Set when the server serves the cluster's LaunchQueues (`--launchqueues`).
    pub(crate) launch_queues: Option<Arc<launchqueues::LaunchQueues>>,
}

impl AppState {
    fn is_ready(&self) -> bool {
        self.not_ready().is_none()
    }

    /// Why the server is not ready, if it is not: what `/readyz` answers.
    fn not_ready(&self) -> Option<String> {
        if self.shutting_down.load(Ordering::Acquire) {
            Some("shutting down".into())
        } else if !self.cert_valid.load(Ordering::Acquire) {
            Some("certificate not valid".into())
        } else if let Some(why) = self.launch_queues.as_ref().and_then(|q| q.not_ready()) {
            Some(why)
        } else {
            let bypassed = self.bypass.as_ref().is_some_and(|b| b.on().is_some());
            self.native.as_ref().and_then(|n| n.not_ready(bypassed))
        }
    }
}

/// A started server.
pub struct RunningServer {
    /// The HTTPS address the server listens on.
    pub local_addr: SocketAddr,
    /// The plain-HTTP admin address (`--admin-listen`), when serving one.
    pub admin_addr: Option<SocketAddr>,
    /// PEM of the development CA, when a self-signed certificate was generated.
    pub dev_ca_pem: Option<String>,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl RunningServer {
    /// Starts the graceful shutdown (what SIGTERM does).
    pub fn begin_shutdown(&self) {
        let _ = self.shutdown.send(true);
    }

    /// Waits until the server has drained and stopped.
    pub async fn wait(self) -> Result<()> {
        self.task.await.context("server task panicked")?
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(s): State<Arc<AppState>>) -> Response {
    match s.not_ready() {
        None => match s.bypass.as_ref().and_then(|b| b.on()) {
            // Ready — the pod serves — but never silently bypassed.
            Some(value) => (
                StatusCode::OK,
                format!(
                    "ready; emergency bypass on: {value} (annotation {} on namespace {}): no webhook registered, native policies dormant",
                    bypass::ANNOTATION,
                    s.bypass.as_ref().map(|b| b.namespace.as_str()).unwrap_or_default()
                ),
            )
                .into_response(),
            None => (StatusCode::OK, "ready").into_response(),
        },
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
    }
}

async fn metrics_text(State(s): State<Arc<AppState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        )],
        s.metrics.encode(),
    )
        .into_response()
}

/// `/healthz`, `/readyz`, `/metrics`, and a JSON 404 for any other route: both ports serve
/// these.
fn probe_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .fallback(|| async { json_error(StatusCode::NOT_FOUND, "no such route") })
}

/// Per-request tracing (tower-http's `TraceLayer`): a `request` span with method, URI and
/// version, and the status and latency when answered. All at TRACE level, so the default and
/// debug logs keep their lines and fields; `--log-level info,tower_http=trace` shows them.
fn request_trace() -> TraceLayer<SharedClassifier<ServerErrorsAsFailures>> {
    TraceLayer::new_for_http()
        .make_span_with(DefaultMakeSpan::new().level(Level::TRACE))
        .on_request(DefaultOnRequest::new().level(Level::TRACE))
        .on_response(DefaultOnResponse::new().level(Level::TRACE))
        .on_failure(DefaultOnFailure::new().level(Level::TRACE))
}

/// The plain-HTTP admin routes: `/healthz`, `/readyz`, `/metrics`; no admission endpoints.
pub(crate) fn admin_router(state: Arc<AppState>) -> Router {
    probe_routes().layer(request_trace()).with_state(state)
}

/// The HTTPS routes: `POST /mutate`, `POST /validate` and the probe routes (also usable
/// in-process by tests).
pub(crate) fn router(state: Arc<AppState>) -> Router {
    probe_routes()
        .route("/mutate", admission::route(&state, Endpoint::Mutate))
        .route("/validate", admission::route(&state, Endpoint::Validate))
        .layer(request_trace())
        .with_state(state)
}

/// The policy of a config file, or the built-in example policy without one: the one loader of
/// `serve` and of the offline commands (`mutate`, `validate`, `audit`, `test`). An unreadable
/// file or one that fails a check is an error naming the file (and the offending key paths).
pub fn load_policy(path: Option<&Path>) -> Result<Policy> {
    match path {
        None => Ok(Policy::embedded_default()),
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading config {}", p.display()))?;
            Policy::from_yaml(&text).map_err(|e| anyhow::anyhow!("config {}:\n{e}", p.display()))
        }
    }
}

/// Loads config and certificate, binds the listener and starts serving.
/// Fails (and never serves) when the config or the certificate cannot be loaded, or when
/// `opts.events` is on and no Kubernetes client can be configured.
pub async fn start(
    opts: ServeOptions,
    cluster: Option<Arc<dyn ClusterView>>,
) -> Result<RunningServer> {
    let sink: Option<Arc<dyn events::EventSink>> = if opts.events {
        Some(Arc::new(events::KubeEventSink::try_default().await?))
    } else {
        None
    };
    start_with_event_sink(opts, cluster, sink).await
}

/// [`start`] with Events going to `sink` (whatever `opts.events` says).
pub async fn start_with_event_sink(
    opts: ServeOptions,
    cluster: Option<Arc<dyn ClusterView>>,
    sink: Option<Arc<dyn events::EventSink>>,
) -> Result<RunningServer> {
    opts.registration.check()?;
    let policy = load_policy(opts.config.as_deref())?;
    for warning in &policy.warnings {
        tracing::warn!(%warning, "config loads, but does not hold as written");
    }
    for trusted in &policy.trusted_creators {
        tracing::info!(kind = trusted.kind.as_str(), %trusted, "controller trusted with what it makes");
    }
    if cluster.as_ref().is_none_or(|c| !c.is_connected()) {
        let sized: Vec<&str> = policy
            .queues
            .values()
            .filter(|q| !q.size_bounds().is_empty())
            .map(|q| q.key.as_str())
            .collect();
        if !sized.is_empty() {
            let scaled: Vec<_> = WorkloadKind::all()
                .filter(|k| k.spec().scale.is_some())
                .collect();
            let resources: Vec<String> = scaled.iter().filter_map(|k| k.scale_resource()).collect();
            let kinds: Vec<&str> = scaled.iter().map(|k| k.as_str()).collect();
            let kinds = kinds.join(" or ");
            tracing::warn!(
                queues = ?sized,
                "without cluster lookups a Scale ({}) cannot be attributed to the {kinds} it scales and is allowed: a launch {kinds} scaled that way is not held to these queues' totals or GPU-hour ceiling; turn on --cluster-lookups (the chart's clusterLookups)",
                resources.join(", ")
            );
        }
    }
    let (cert_source, dev_ca_pem) = match (&opts.tls_cert, &opts.tls_key) {
        (Some(c), Some(k)) => (
            reload::CertSource::Files {
                cert: c.clone(),
                key: k.clone(),
            },
            None,
        ),
        (None, None) => {
            let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
            names.extend(opts.dev_cert_names.iter().cloned());
            let generated = crate::certs::generate(&names, 365)?;
            let written = crate::certs::write_to_dir(&generated, &opts.dev_cert_dir)?;
            tracing::info!(
                ca_bundle = %written.ca.display(),
                "generated a self-signed development certificate; point caBundle at this CA"
            );
            eprintln!(
                "launchgate: self-signed development certificate; CA bundle written to {}",
                written.ca.display()
            );
            let ca = generated.ca_pem.clone();
            (reload::CertSource::Generated(generated), Some(ca))
        }
        _ => anyhow::bail!("--tls-cert and --tls-key must be given together"),
    };
    let loaded = cert_source.load()?;
    let resolver = tls::SwappableCert::new(loaded.key.clone());
    let client_ca = match &opts.client_ca {
        Some(p) => {
            Some(std::fs::read(p).with_context(|| format!("reading client CA {}", p.display()))?)
        }
        None => None,
    };
    let tls_config = tls::server_config(resolver.clone(), client_ca.as_deref())?;
    let acceptor = TlsAcceptor::from(Arc::new(tls_config));

    let mut metrics = Metrics::new();
    metrics.cert_not_after.set(loaded.not_after_unix);
    let budget = match opts.memory_budget {
        Some(bytes) => budget::MemoryBudget::new(bytes),
        None => budget::MemoryBudget::from_environment(),
    };
    budget.register(&mut metrics.registry);
    tracing::info!(
        memory_budget_bytes = budget.bytes(),
        cost_factor = budget::COST_FACTOR,
        "memory budget for reviews in flight"
    );
    let instance = opts
        .pod_name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(events::default_instance);
    let recorder =
        sink.map(|sink| events::EventRecorder::start(sink, instance, metrics.decisions.clone()));
    let telemetry = otel::Telemetry::start(opts.otlp_traces)?;
    let native = match &opts.native_policies {
        Some(set) => {
            let client = kube::Client::try_default()
                .await
                .context("--native-policies needs a Kubernetes client")?;
            let target = native_sync::Target {
                set: set.clone(),
                slots: opts.native_policy_slots,
                namespace_selector: opts.native_namespace_selector.clone(),
            };
            let reporter = own_pod(&opts).map(|pod| {
                let sink: Arc<dyn events::EventSink> =
                    Arc::new(events::KubeEventSink::new(client.clone()));
                (sink, pod)
            });
            if reporter.is_none() {
                tracing::info!(
                    "no --pod-namespace and not in a pod: the native policies' state is not written as Events"
                );
            }
            let store: Arc<dyn native_sync::SlotStore> =
                Arc::new(native_sync::KubeSlots::new(client));
            Some((native_sync::Native::new(target, reporter, &metrics), store))
        }
        None => None,
    };
    let (native, native_store) = match native {
        Some((n, store)) => (Some(n), Some(store)),
        None => (None, None),
    };
    // The emergency bypass is read where the server puts launchgate into the admission path —
    // registering webhooks, keeping native policies — and, to say it is on, wherever it talks
    // to the API server anyway (Events, cluster lookups).
    let bypass_client = if opts.registration.register_webhooks.is_some()
        || opts.native_policies.is_some()
        || opts.events
        || opts.cluster_lookups
    {
        match own_pod(&opts) {
            Some(pod) => match kube::Client::try_default().await {
                Ok(client) => Some((Arc::new(bypass::Bypass::new(pod.namespace)), client)),
                Err(e) => {
                    tracing::warn!(error = %redact::in_text(&e.to_string()), "no Kubernetes client: the emergency bypass ({}) is not read", bypass::ANNOTATION);
                    None
                }
            },
            None => {
                tracing::warn!(
                    "no --pod-namespace and not in a pod: the emergency bypass ({}) is not read",
                    bypass::ANNOTATION
                );
                None
            }
        }
    } else {
        None
    };
    let launch_queues = if opts.launch_queues {
        let client = kube::Client::try_default()
            .await
            .context("--launchqueues needs a Kubernetes client")?;
        let text = match &opts.config {
            Some(path) => std::fs::read(path).unwrap_or_default(),
            None => crate::policy::DEFAULT_CONFIG_YAML.as_bytes().to_vec(),
        };
        let queues = launchqueues::LaunchQueues::new(
            policy.config.clone(),
            crate::policy::config_hash(&text),
        );
        Some((queues, client))
    } else {
        None
    };
    let state = Arc::new(AppState {
        launch_queues: launch_queues.as_ref().map(|(q, _)| q.clone()),
        policy: ArcSwap::from_pointee(policy),
        metrics,
        cluster: cluster.unwrap_or_else(|| Arc::new(NoCluster)),
        shutting_down: AtomicBool::new(false),
        cert_valid: AtomicBool::new(reload::not_expired(loaded.not_after_unix)),
        slots: budget::Slots::new(opts.max_concurrency),
        budget,
        read_timeout: opts.read_timeout,
        request_deadline: opts.request_deadline,
        events: recorder,
        tracer: telemetry.as_ref().map(otel::Telemetry::tracer),
        native,
        bypass: bypass_client.as_ref().map(|(b, _)| b.clone()),
    });

    let listener = TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("binding {}", opts.listen))?;
    let local_addr = listener.local_addr()?;
    let admin = match opts.admin_listen {
        Some(addr) => {
            let l = TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the admin address {addr}"))?;
            Some(l)
        }
        None => None,
    };
    let admin_addr = admin.as_ref().map(|l| l.local_addr()).transpose()?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);

    reload::spawn(
        state.clone(),
        resolver,
        cert_source,
        opts.config.clone(),
        opts.reload_interval,
        shutdown_rx.clone(),
    );
    if let Some((_, client)) = bypass_client {
        bypass::spawn(
            state.clone(),
            client,
            opts.reload_interval,
            shutdown_rx.clone(),
        );
    }
    if let Some((queues, client)) = launch_queues {
        let pod = own_pod(&opts);
        let identity = pod
            .as_ref()
            .map(|p| p.name.clone())
            .unwrap_or_else(events::default_instance);
        launchqueues::spawn(
            state.clone(),
            queues,
            client,
            pod.map(|p| p.namespace),
            identity,
            shutdown_rx.clone(),
        );
    }
    if let Some(store) = native_store {
        native_sync::spawn(
            state.clone(),
            store,
            opts.reload_interval,
            shutdown_rx.clone(),
        );
    }

    let registration = match &opts.registration.register_webhooks {
        Some(name) => {
            let client = kube::Client::try_default()
                .await
                .context("--register-webhooks needs a Kubernetes client")?;
            let r = &opts.registration;
            let ca = match (
                &r.webhook_ca_bundle,
                &r.webhook_ca_bundle_base64,
                &dev_ca_pem,
            ) {
                (Some(file), _, _) => webhook_sync::CaSource::File(file.clone()),
                (None, Some(pem), _) | (None, None, Some(pem)) => {
                    webhook_sync::CaSource::Pem(pem.clone())
                }
                (None, None, None) => webhook_sync::CaSource::File(
                    opts.tls_cert
                        .clone()
                        .context("--register-webhooks needs --webhook-ca-bundle")?,
                ),
            };
            Some(webhook_sync::Registration {
                client,
                name: name.clone(),
                options: opts.registration.clone(),
                listen: local_addr,
                ca,
            })
        }
        None => None,
    };

    let app = router(state.clone());
    // The admin port answers until the HTTPS server has drained: the kubelet must see
    // `/readyz` fail during the shutdown delay.
    let admin_task = admin.map(|l| {
        tokio::spawn(admin_loop(
            l,
            admin_router(state.clone()),
            opts.read_timeout,
        ))
    });
    let reload_interval = opts.reload_interval;
    let main = serve_loop(
        listener,
        acceptor,
        app,
        state.clone(),
        opts,
        shutdown_rx.clone(),
    );
    let task = tokio::spawn(async move {
        let result = main.await;
        if let Some(t) = admin_task {
            t.abort();
        }
        // After the drain: the last requests' spans are queued by now.
        if let Some(telemetry) = telemetry {
            telemetry.shutdown().await;
        }
        result
    });
    tracing::info!(%local_addr, ?admin_addr, "launchgate serving HTTPS");
    // Registered only now that the listener serves, and only once the server is ready.
    if let Some(registration) = registration {
        webhook_sync::spawn(state, registration, reload_interval, shutdown_rx);
    }
    Ok(RunningServer {
        local_addr,
        admin_addr,
        dev_ca_pem,
        shutdown: shutdown_tx,
        task,
    })
}

async fn serve_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    state: Arc<AppState>,
    opts: ServeOptions,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(opts.read_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256)
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let builder = Arc::new(builder);
    let mut draining_since: Option<Instant> = None;
    loop {
        let delay_left = draining_since
            .map(|t| opts.shutdown_delay.saturating_sub(t.elapsed()))
            .unwrap_or(Duration::MAX);
        if draining_since.is_some() && delay_left.is_zero() {
            break;
        }
        tokio::select! {
            accepted = listener.accept() => {
                let (tcp, _peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let builder = builder.clone();
                let service = TowerToHyperService::new(app.clone());
                let handshake_timeout = opts.read_timeout;
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let tls = match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!("TLS handshake timed out");
                            return;
                        }
                    };
                    let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
                    if let Err(e) = watcher.watch(conn.into_owned()).await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            changed = shutdown.changed(), if draining_since.is_none() => {
                if changed.is_err() || *shutdown.borrow() {
                    state.shutting_down.store(true, Ordering::Release);
                    tracing::info!(delay = ?opts.shutdown_delay, "shutting down: readiness is now false");
                    draining_since = Some(Instant::now());
                }
            }
            _ = tokio::time::sleep(delay_left), if draining_since.is_some() => {}
        }
    }
    drop(listener);
    tracing::info!("stopped accepting; draining in-flight requests");
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!("drained"),
        _ = tokio::time::sleep(opts.drain_timeout) => tracing::warn!("drain timeout; closing remaining connections"),
    }
    Ok(())
}

/// Serves the admin routes over plain HTTP/1.1 until aborted.
async fn admin_loop(listener: TcpListener, app: Router, read_timeout: Duration) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout);
    let builder = Arc::new(builder);
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let builder = builder.clone();
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            if let Err(e) = builder.serve_connection(TokioIo::new(tcp), service).await {
                tracing::debug!(error = %e, "admin connection ended with an error");
            }
        });
    }
}

/// The server's own pod, for Events about its state: `--pod-namespace` (else the namespace of
/// the pod's service account, in a pod) and `--pod-name` (else the hostname); `None` outside a
/// pod without `--pod-namespace`.
fn own_pod(opts: &ServeOptions) -> Option<events::OwnPod> {
    let namespace = opts
        .pod_namespace
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
        })?;
    let name = opts
        .pod_name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(events::default_instance);
    Some(events::OwnPod {
        namespace,
        name,
        uid: opts.pod_uid.clone().filter(|u| !u.is_empty()),
    })
}

/// Runs the server until SIGTERM or Ctrl-C, then shuts down gracefully.
pub async fn run_until_signal(
    opts: ServeOptions,
    cluster: Option<Arc<dyn ClusterView>>,
) -> Result<()> {
    let server = start(opts, cluster).await?;
    println!("launchgate listening on https://{}", server.local_addr);
    if let Some(admin) = server.admin_addr {
        println!("launchgate admin (healthz, readyz, metrics) on http://{admin}");
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
    server.begin_shutdown();
    server.wait().await
}

/// The cluster view backed by the Kubernetes API (owner Volcano Jobs, Services, PyTorchJobs;
/// cached watches).
///
/// Uses the in-cluster service account (or the local kubeconfig) and starts the Volcano Job
/// watch, limited to `scope` (namespaces and a label selector). Serving does not wait for the
/// cache forever: after `ready_timeout` the server starts anyway (pods of unknown Jobs then get
/// what can be derived from the pod alone, with a warning) and the cache fills in the
/// background.
pub async fn cluster_view(
    ready_timeout: Duration,
    scope: owner_cache::WatchScope,
) -> Result<Arc<dyn ClusterView>> {
    let client = kube::Client::try_default()
        .await
        .context("--cluster-lookups: connecting to the Kubernetes API")?;
    let cache = owner_cache::start(client, scope).await;
    if cache.wait_until_ready(ready_timeout).await {
        tracing::info!(owners = cache.len(), "owner cache ready");
    } else {
        tracing::warn!(
            timeout = ?ready_timeout,
            "owner cache not filled yet (are the watched kinds' CRDs installed and RBAC granted?); serving anyway"
        );
    }
    Ok(Arc::new(cache))
}

/// Deletes the named webhook configurations (the chart's pre-delete hook). One that is already
/// gone counts as deleted. Returns one line per configuration.
pub async fn delete_webhooks(
    client: kube::Client,
    mutating: &[String],
    validating: &[String],
) -> Result<Vec<String>> {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    async fn delete<K>(api: kube::Api<K>, kind: &str, name: &str) -> Result<String>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        match api.delete(name, &kube::api::DeleteParams::default()).await {
            Ok(_) => Ok(format!("deleted {kind} {name}")),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(format!("{kind} {name} already gone")),
            Err(e) => Err(anyhow::anyhow!("deleting {kind} {name}: {e}")),
        }
    }
    let mut report = Vec::new();
    for name in validating {
        let api = kube::Api::<ValidatingWebhookConfiguration>::all(client.clone());
        report.push(delete(api, "validatingwebhookconfiguration", name).await?);
    }
    for name in mutating {
        let api = kube::Api::<MutatingWebhookConfiguration>::all(client.clone());
        report.push(delete(api, "mutatingwebhookconfiguration", name).await?);
    }
    Ok(report)
}

/// Deletes every native admission policy and binding of the set `set` (what
/// `--native-policies=<set>` keeps in the cluster); a line for what it did.
pub async fn delete_native_policies(client: kube::Client, set: &str) -> Result<String> {
    let deleted = native_sync::delete_set(&client, set, &Default::default()).await?;
    Ok(format!(
        "deleted {deleted} native admission policies and bindings of set {set}"
    ))
}
