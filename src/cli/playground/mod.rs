//! `launchgate playground`: a local page to try a policy on manifests — paste or pick a config
//! (launchgate's own or a W&B queue) and a manifest, and see the verdict, the warnings, the
//! patch as a diff and which rule said what.
//!
//! Plain HTTP on a loopback address only (there is no authentication, and nothing is worth
//! serving to others); the page, its script and its style are in the binary; the judging is
//! the offline commands' ([`api::prepare`], then `judge`), with cluster lookups off. Nothing leaves the machine.
//!
//! Only requests addressed to a loopback host name with the bound port (`localhost`,
//! `127.0.0.1`, `[::1]`) are answered: a web page of another origin that makes its own host
//! name resolve to 127.0.0.1 (DNS rebinding) gets a 403. Judging is bounded as `serve` bounds
//! it ([`crate::server::budget`]): a few requests at a time, each answered within `serve`'s
//! default request deadline and charged against the memory budget by its objects' shape; one
//! whose shape alone exceeds the budget, or would take longer to judge than half the deadline,
//! is refused (413).

pub(crate) mod api;

use crate::server::budget::{BudgetError, MemoryBudget, Refusal, Slots, review_time_allowed};
use anyhow::{Context, Result, bail};
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::builder::TypedValueParser as _;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest request body `POST /api/review` reads.
pub(crate) const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Reviews worked on at once (reading the config and manifests, then judging).
const SLOTS: usize = 2;

/// What bounds the playground: its port (the host names it answers carry it), its processing
/// slots, its memory budget (as `serve` sizes it: `--memory-budget-mib`, else from the memory
/// limit, else the default) and its request deadline (`--request-deadline-ms`, as `serve`'s):
/// the waits for a slot and for the memory charge come out of the deadline (a 503 past it),
/// and an object whose shape alone would take longer than half of it to judge is refused
/// unjudged (413).
pub(crate) struct Limits {
    port: u16,
    slots: Slots,
    budget: MemoryBudget,
    deadline: Duration,
}

impl Limits {
    /// The limits of a playground bound to `port`, with a memory budget of `budget` bytes and
    /// `serve`'s default request deadline.
    pub(crate) fn new(port: u16, budget: MemoryBudget) -> Self {
        Limits {
            port,
            slots: Slots::new(SLOTS),
            budget,
            deadline: crate::server::ServeOptions::default().request_deadline,
        }
    }
}

/// True when `host` (a `Host` header or URI authority) names this playground: a loopback host
/// name (`localhost`, `127.0.0.1`, `[::1]`) with `port` (the port may be left out only when it
/// is 80, as browsers do).
fn is_own_host(host: &str, port: u16) -> bool {
    let host = host.trim();
    let (name, written_port) = match host.rsplit_once(':') {
        // `[::1]:8090`, `localhost:8090`; a bare `[::1]` has its colons inside the brackets.
        Some((name, p)) if !p.contains(']') => (name, Some(p)),
        _ => (host, None),
    };
    let port_ok = match written_port {
        Some(p) => p.parse::<u16>().ok() == Some(port),
        None => port == 80,
    };
    let name = name.to_ascii_lowercase();
    let name = name.strip_suffix('.').unwrap_or(&name);
    port_ok && matches!(name, "localhost" | "127.0.0.1" | "[::1]")
}

/// Refuses a request not addressed to this playground by a loopback host name.
async fn own_host_only(
    State(limits): State<Arc<Limits>>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.to_string()));
    match host {
        Some(host) if is_own_host(&host, limits.port) => next.run(request).await,
        other => {
            let shown = other.map_or("none".to_string(), |h| format!("{h:?}"));
            error(
                StatusCode::FORBIDDEN,
                "request",
                format!(
                    "request: Host {shown} is not this playground's; it answers loopback host names only (localhost, 127.0.0.1 or [::1], port {}): open http://127.0.0.1:{}/",
                    limits.port, limits.port
                ),
            )
        }
    }
}

const INDEX_HTML: &str = include_str!("page/index.html");
const APP_JS: &str = include_str!("page/app.js");
const STYLE_CSS: &str = include_str!("page/style.css");

/// `launchgate playground` arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct PlaygroundArgs {
    /// Address to serve the page on (plain HTTP, no authentication): a loopback address only.
    /// Port 0 picks a free port; the address is printed on start.
    #[arg(
        long,
        env = "LAUNCHGATE_PLAYGROUND_LISTEN",
        default_value = "127.0.0.1:8090"
    )]
    pub(crate) listen: SocketAddr,
    /// MiB that reviews may hold at once, as `serve --memory-budget-mib`. Default: half of the
    /// container's memory limit after 48 MiB, or 512 MiB without a limit.
    #[arg(
        long = "memory-budget-mib",
        value_name = "MEMORY_BUDGET_MIB",
        env = "LAUNCHGATE_MEMORY_BUDGET_MIB",
        value_parser = clap::value_parser!(u64).map(|mib| mib.saturating_mul(1 << 20))
    )]
    pub(crate) memory_budget: Option<u64>,
    /// Milliseconds from a review request's arrival by which it is answered, as `serve
    /// --request-deadline-ms` (at least 100).
    #[arg(
        long = "request-deadline-ms",
        value_name = "REQUEST_DEADLINE_MS",
        env = "LAUNCHGATE_REQUEST_DEADLINE_MS",
        default_value = "4000",
        value_parser = clap::value_parser!(u64).map(|ms| Duration::from_millis(ms.max(100)))
    )]
    pub(crate) request_deadline: Duration,
}

/// A config or manifest to pick in the page.
struct Example {
    id: &'static str,
    title: &'static str,
    /// `launchgate` or `wandb` (configs only).
    format: &'static str,
    text: &'static str,
    /// W&B template variables and queue name that go with a W&B UI config.
    variables: &'static str,
    queue: &'static str,
}

const fn example(id: &'static str, title: &'static str, text: &'static str) -> Example {
    Example {
        id,
        title,
        format: "",
        text,
        variables: "",
        queue: "",
    }
}

const CONFIGS: &[Example] = &[
    Example {
        format: "launchgate",
        ..example(
            "builtin",
            "Built-in example policy (launchgate config)",
            crate::policy::DEFAULT_CONFIG_YAML,
        )
    },
    Example {
        format: "launchgate",
        ..example(
            "strict-queue",
            "Strict queue template (examples/policy-tests/strict-queue)",
            include_str!("../../../examples/policy-tests/strict-queue/config.yaml"),
        )
    },
    Example {
        format: "wandb",
        ..example(
            "wandb-minikube-gpu",
            "W&B queue export: minikube GPU queue, 0 to 4 GPUs",
            include_str!("examples/wandb-minikube-gpu-export.yaml"),
        )
    },
    Example {
        format: "wandb",
        variables: include_str!("examples/wandb-pytorchjob-variables.yaml"),
        queue: "pytorch-queue",
        ..example(
            "wandb-pytorchjob",
            "W&B queue config from the UI: Kubeflow PyTorchJob, 1 to 2 GPUs per replica",
            include_str!("examples/wandb-pytorchjob-ui.yaml"),
        )
    },
];

const MANIFESTS: &[Example] = &[
    example(
        "job-8-gpus",
        "Job: W&B Launch run, 8 GPUs",
        include_str!("../../../examples/policy-tests/builtin/resources/train-8-gpus.yaml"),
    ),
    example(
        "job-2-gpus",
        "Job: W&B Launch run, 2 GPUs",
        include_str!("../../../examples/policy-tests/builtin/resources/train-2-gpus.yaml"),
    ),
    example(
        "volcano-job",
        "Volcano Job: PyTorch master and 2 workers",
        include_str!("examples/volcano-job.yaml"),
    ),
    example(
        "pytorchjob",
        "PyTorchJob: master and 2 workers",
        include_str!("../../../examples/policy-tests/builtin/resources/pytorch/run42.yaml"),
    ),
    example(
        "pod",
        "Pod: a launch run's bare pod",
        include_str!("examples/pod.yaml"),
    ),
    example(
        "image-build-label",
        "Job labelled as an image build (exempt only when the W&B agent sends it)",
        include_str!("../../../examples/policy-tests/builtin/resources/labelled-image-build.yaml"),
    ),
];

fn examples_json() -> Value {
    let list = |items: &[Example]| -> Vec<Value> {
        items
            .iter()
            .map(|e| {
                json!({"id": e.id, "title": e.title, "format": e.format, "text": e.text,
                       "variables": e.variables, "queue": e.queue})
            })
            .collect()
    };
    json!({"configs": list(CONFIGS), "manifests": list(MANIFESTS)})
}

/// A JSON error answer: `{"error", "input", "details"}`.
fn error(status: StatusCode, input: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": message.into(), "input": input, "code": status.as_u16()});
    (status, axum::Json(body)).into_response()
}

/// An embedded file, never cached (the binary may change under the same address), with a
/// content security policy that lets the page talk to this server only.
fn asset(content_type: &'static str, text: &'static str) -> Response {
    let mut response = Response::new(Body::from(text));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    response
}

async fn review_handler(State(limits): State<Arc<Limits>>, request: Request) -> Response {
    let started = Instant::now();
    let time_left = || limits.deadline.saturating_sub(started.elapsed());
    let json_body = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json_body {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "request",
            "request: send JSON with Content-Type: application/json",
        );
    }
    let bytes = match axum::body::to_bytes(request.into_body(), MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request",
                format!(
                    "request: body too large or unreadable (at most {} KiB)",
                    MAX_BODY_BYTES / 1024
                ),
            );
        }
    };
    // A few reviews at a time: reading a manifest holds memory before its cost is known.
    let _slot = match limits.slots.take(time_left()).await {
        Ok(slot) => slot,
        Err(e) => return busy(e, limits.deadline),
    };
    let parsed: api::ReviewRequest = match serde_json::from_slice(&bytes) {
        Ok(parsed) => parsed,
        Err(e) => return error(StatusCode::BAD_REQUEST, "request", format!("request: {e}")),
    };
    drop(bytes);
    // Reading and judging are CPU work: off the async workers. A bug answers 500 instead of
    // taking the server down (the task's panic ends in its JoinError).
    let prepared = match tokio::task::spawn_blocking(move || api::prepare(&parsed)).await {
        Ok(Ok(prepared)) => prepared,
        Ok(Err(bad)) => return bad_input(bad),
        Err(e) => return internal(e),
    };
    // Judging holds memory and takes time by the objects' shape: charged against the budget
    // as `serve` charges a review, and refused when its shape alone exceeds the budget or
    // would take longer than the deadline allows.
    let time_allowed = review_time_allowed(limits.deadline);
    let _charge = match limits
        .budget
        .admit(prepared.cost(), time_allowed, time_left())
        .await
    {
        Ok(charge) => charge,
        Err(Refusal::TooDense(cost)) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "manifest",
                format!(
                    "manifest: {}; split it into smaller objects",
                    cost.too_dense_reason(limits.budget.bytes())
                ),
            );
        }
        Err(Refusal::TooSlow(cost, allowed)) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "manifest",
                format!(
                    "manifest: {}; split it into smaller objects",
                    cost.too_slow_reason(allowed)
                ),
            );
        }
        Err(Refusal::Budget(e)) => return busy(e, limits.deadline),
    };
    match tokio::task::spawn_blocking(move || prepared.judge()).await {
        Ok(answer) => axum::Json(answer).into_response(),
        Err(e) => internal(e),
    }
}

fn bad_input(bad: api::InputError) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(
            json!({"error": bad.error, "input": bad.input, "details": bad.details, "code": 400}),
        ),
    )
        .into_response()
}

fn internal(e: tokio::task::JoinError) -> Response {
    tracing::error!("BUG: the playground's review failed: {e}");
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "request",
        "internal error while judging; please report it with the config and manifest",
    )
}

fn busy(e: BudgetError, deadline: Duration) -> Response {
    let why = match e {
        BudgetError::Deadline => format!(
            "request: busy with other reviews for {} ms; try again",
            deadline.as_millis()
        ),
        BudgetError::Closed => "request: the playground is stopping".to_string(),
    };
    error(StatusCode::SERVICE_UNAVAILABLE, "request", why)
}

/// The playground's routes, answering only requests addressed to it by a loopback host name,
/// bounded by `limits`.
pub(crate) fn router(limits: Limits) -> Router {
    let limits = Arc::new(limits);
    let examples = examples_json();
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
        .route(
            "/api/examples",
            get(move || {
                let examples = examples.clone();
                async move { axum::Json(examples) }
            }),
        )
        .route(
            "/api/review",
            post(review_handler).fallback(|| async {
                error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "request",
                    "request: POST a JSON review request to /api/review",
                )
            }),
        )
        .fallback(|| async { error(StatusCode::NOT_FOUND, "request", "not found") })
        .layer(axum::middleware::from_fn_with_state(
            limits.clone(),
            own_host_only,
        ))
        .layer(tower_http::catch_panic::CatchPanicLayer::new())
        .with_state(limits)
}

/// Refuses an address others could reach.
fn check_listen(addr: SocketAddr) -> Result<()> {
    if !addr.ip().is_loopback() {
        bail!(
            "--listen {addr}: the playground serves plain HTTP without authentication, so it listens on a loopback address only (127.0.0.1, ::1)"
        );
    }
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Serves the playground until Ctrl-C or SIGTERM.
pub(crate) fn run(args: &PlaygroundArgs) -> Result<ExitCode> {
    check_listen(args.listen)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        let addr = listener.local_addr()?;
        outln!("launchgate playground: http://{addr}/ (Ctrl-C to stop)")?;
        let budget = match args.memory_budget {
            Some(bytes) => MemoryBudget::new(bytes),
            None => MemoryBudget::from_environment(),
        };
        let limits = Limits {
            deadline: args.request_deadline,
            ..Limits::new(addr.port(), budget)
        };
        axum::serve(listener, router(limits))
            .with_graceful_shutdown(shutdown_signal())
            .await
            .context("serving the playground")
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_served() {
        assert!(check_listen("127.0.0.1:0".parse().unwrap()).is_ok());
        assert!(check_listen("[::1]:8090".parse().unwrap()).is_ok());
        let err = check_listen("0.0.0.0:8090".parse().unwrap()).unwrap_err();
        assert!(err.to_string().contains("loopback address only"), "{err}");
        assert!(check_listen("192.168.1.4:80".parse().unwrap()).is_err());
    }

    #[test]
    fn only_loopback_host_names_with_the_bound_port_are_this_playground() {
        for host in [
            "127.0.0.1:8090",
            "localhost:8090",
            "LOCALHOST:8090",
            "localhost.:8090",
            "[::1]:8090",
        ] {
            assert!(is_own_host(host, 8090), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8090",
            "127.0.0.1",
            "127.0.0.1:8091",
            "localhost:80",
            "[::1]",
            "127.0.0.2:8090",
            "localhost.evil.example:8090",
            "",
        ] {
            assert!(!is_own_host(host, 8090), "{host}");
        }
        // Port 80 may be left out, as browsers do.
        assert!(is_own_host("localhost", 80) && is_own_host("[::1]", 80));
    }

    async fn call(router: Router, request: Request) -> (StatusCode, Value) {
        use tower::ServiceExt as _;
        let response = router.oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    fn review_request(host: &str, body: &Value) -> Request {
        Request::post("/api/review")
            .header(header::HOST, host)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap()
    }

    #[tokio::test]
    async fn a_request_for_another_host_name_is_refused() {
        let limits = || Limits::new(8090, MemoryBudget::new(64 << 20));
        let manifest = json!({"manifest": MANIFESTS[1].text});
        let (status, body) = call(
            router(limits()),
            review_request("evil.example:8090", &manifest),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        let said = body["error"].as_str().unwrap();
        assert!(
            said.contains(r#"Host "evil.example:8090" is not this playground's"#),
            "{said}"
        );
        let page = Request::get("/")
            .header(header::HOST, "evil.example")
            .body(Body::empty())
            .unwrap();
        assert_eq!(call(router(limits()), page).await.0, StatusCode::FORBIDDEN);
        let (status, body) = call(
            router(limits()),
            review_request("127.0.0.1:8090", &manifest),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["results"][0]["verdict"], "allowed", "{body}");
    }

    #[tokio::test]
    async fn a_manifest_whose_shape_exceeds_the_memory_budget_is_refused_unjudged() {
        // 2000 containers: about 24 MiB to judge, as `serve` charges it; the budget is 4 MiB.
        let containers = vec![json!({"name": "c", "image": "busybox"}); 2000];
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "wide", "namespace": "default", "labels": {"wandb.ai/agent": "x"}},
            "spec": {"template": {"spec": {"containers": containers}}}});
        let limits = || Limits::new(8090, MemoryBudget::new(4 << 20));
        let (status, body) = call(
            router(limits()),
            review_request("localhost:8090", &json!({"manifest": job.to_string()})),
        )
        .await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
        let said = body["error"].as_str().unwrap();
        assert!(
            said.starts_with("manifest: the object is too large to review: 2000 containers")
                && said.contains("more than launchgate's memory budget of 4 MiB"),
            "{said}"
        );
        // A launch Job of the usual size fits the same budget.
        let (status, body) = call(
            router(limits()),
            review_request("localhost:8090", &json!({"manifest": MANIFESTS[1].text})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    #[test]
    fn every_example_loads_and_is_judged() {
        for config in CONFIGS {
            for manifest in MANIFESTS {
                let request = api::ReviewRequest {
                    config: Some(config.text.into()),
                    wandb_variables: Some(config.variables.into()),
                    wandb_queue: Some(config.queue.into()),
                    manifest: manifest.text.into(),
                    ..Default::default()
                };
                let answer = api::review(&request)
                    .unwrap_or_else(|e| panic!("{} / {}: {e:?}", config.id, manifest.id));
                assert_eq!(answer["results"].as_array().unwrap().len(), 1);
            }
        }
    }

    #[test]
    fn the_page_names_only_embedded_assets() {
        for (name, text) in [
            ("index.html", INDEX_HTML),
            ("app.js", APP_JS),
            ("style.css", STYLE_CSS),
        ] {
            for remote in ["http://", "https://", "//cdn", "@import", "fonts.g"] {
                assert!(!text.contains(remote), "{name} refers to {remote}");
            }
        }
    }
}
