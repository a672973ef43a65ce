//! `launchgate playground`: a local page to try a policy on manifests — paste or pick a config
//! (launchgate's own or a W&B queue) and a manifest, and see the verdict, the warnings, the
//! patch as a diff and which rule said what.
//!
//! Plain HTTP on a loopback address only (there is no authentication, and nothing is worth
//! serving to others); the page, its script and its style are in the binary; the judging is
//! the offline commands' ([`api::review`]), with cluster lookups off. Nothing leaves the machine.

pub(crate) mod api;

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::process::ExitCode;

/// Largest request body `POST /api/review` reads.
pub(crate) const MAX_BODY_BYTES: usize = 1024 * 1024;

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

async fn review_handler(request: Request) -> Response {
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
    let parsed: api::ReviewRequest = match serde_json::from_slice(&bytes) {
        Ok(parsed) => parsed,
        Err(e) => return error(StatusCode::BAD_REQUEST, "request", format!("request: {e}")),
    };
    // Judging is CPU work: off the async workers. A bug answers 500 instead of taking the
    // server down (the task's panic ends in its JoinError).
    match tokio::task::spawn_blocking(move || api::review(&parsed)).await {
        Ok(Ok(answer)) => axum::Json(answer).into_response(),
        Ok(Err(bad)) => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": bad.error, "input": bad.input, "details": bad.details, "code": 400})),
        )
            .into_response(),
        Err(e) => {
            tracing::error!("BUG: the playground's review failed: {e}");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "request",
                "internal error while judging; please report it with the config and manifest",
            )
        }
    }
}

/// The playground's routes.
pub(crate) fn router() -> Router {
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
        .layer(tower_http::catch_panic::CatchPanicLayer::new())
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
        axum::serve(listener, router())
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
