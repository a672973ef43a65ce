//! OTLP trace export (`serve --otlp-traces`) against a real OTLP/HTTP receiver: the test serves
//! `POST /v1/traces` on loopback, decodes each body with the OTLP protobuf types
//! (opentelemetry-proto) and checks the spans the real `launchgate serve` binary sends for
//! admission reviews; and that without the flag nothing is sent, that a collector that is down
//! or hangs does not fail or stall admission, and that bad settings are reported.

mod common;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use common::fixture_bytes;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind};
use prost::Message as _;
use serde_json::{Value, json};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A generous bound for things that happen in the background (spans arriving, the process
/// starting and stopping); never a measure of speed.
const DEADLINE: Duration = Duration::from_secs(60);

/// An OTLP/HTTP receiver on an ephemeral loopback port: every request is counted, every
/// `POST /v1/traces` body decoded and kept.
#[derive(Clone, Default)]
struct Collector {
    requests: Arc<AtomicUsize>,
    exports: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
}

impl Collector {
    /// Starts the receiver; its base URL (what OTEL_EXPORTER_OTLP_ENDPOINT takes).
    async fn start() -> (Collector, String) {
        async fn traces(State(c): State<Collector>, body: Bytes) -> (StatusCode, Vec<u8>) {
            c.requests.fetch_add(1, Ordering::SeqCst);
            match ExportTraceServiceRequest::decode(body) {
                Ok(export) => {
                    c.exports.lock().unwrap().push(export);
                    (
                        StatusCode::OK,
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
                Err(_) => (StatusCode::BAD_REQUEST, Vec::new()),
            }
        }
        async fn other(State(c): State<Collector>) -> StatusCode {
            c.requests.fetch_add(1, Ordering::SeqCst);
            StatusCode::NOT_FOUND
        }
        let collector = Collector::default();
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(traces))
            .fallback(other)
            .with_state(collector.clone());
        let base = common::serve_http(app).await;
        (collector, base)
    }

    /// Every span received so far, with its resource's attributes and its scope's name.
    fn spans(&self) -> Vec<Received> {
        let mut out = Vec::new();
        for export in self.exports.lock().unwrap().iter() {
            for rs in &export.resource_spans {
                let resource = rs
                    .resource
                    .as_ref()
                    .map(|r| attributes(&r.attributes))
                    .unwrap_or_default();
                for ss in &rs.scope_spans {
                    let scope = ss
                        .scope
                        .as_ref()
                        .map(|s| s.name.clone())
                        .unwrap_or_default();
                    for span in &ss.spans {
                        out.push(Received {
                            resource: resource.clone(),
                            scope: scope.clone(),
                            attributes: attributes(&span.attributes),
                            span: span.clone(),
                        });
                    }
                }
            }
        }
        out
    }

    /// Waits until `done` holds for the spans received; fails after [`DEADLINE`].
    async fn wait_for(&self, what: &str, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let until = Instant::now() + DEADLINE;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(Instant::now() < until, "{what}: got {:#?}", names(&spans));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[derive(Clone, Debug)]
struct Received {
    resource: serde_json::Map<String, Value>,
    scope: String,
    attributes: serde_json::Map<String, Value>,
    span: Span,
}

fn names(spans: &[Received]) -> Vec<&str> {
    spans.iter().map(|s| s.span.name.as_str()).collect()
}

/// OTLP attributes as JSON values (strings, booleans, integers).
fn attributes(kvs: &[KeyValue]) -> serde_json::Map<String, Value> {
    kvs.iter()
        .filter_map(|kv| {
            let value = match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => json!(s),
                any_value::Value::BoolValue(b) => json!(b),
                any_value::Value::IntValue(i) => json!(i),
                any_value::Value::DoubleValue(d) => json!(d),
                other => json!(format!("{other:?}")),
            };
            Some((kv.key.clone(), value))
        })
        .collect()
}

/// The `launchgate serve` binary on an ephemeral port, with only the environment given.
struct Launchgate {
    child: Child,
    dir: tempfile::TempDir,
    client: reqwest::Client,
    base: String,
}

impl Drop for Launchgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Spawns `launchgate serve` with `args` and exactly the environment `env` (nothing inherited).
fn spawn(args: &[&str], env: &[(&str, &str)]) -> (Child, tempfile::TempDir, u16) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let stderr = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_launchgate"))
        .arg("serve")
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(format!("--dev-cert-dir={}", dir.path().display()))
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    (child, dir, port)
}

impl Launchgate {
    /// Starts the server and waits until it is ready.
    async fn start(args: &[&str], env: &[(&str, &str)]) -> Launchgate {
        let (mut child, dir, port) = spawn(args, env);
        let base = format!("https://127.0.0.1:{port}");
        let until = Instant::now() + DEADLINE;
        let client = loop {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "launchgate exited ({status}): {}",
                    std::fs::read_to_string(dir.path().join("stderr.log")).unwrap()
                );
            }
            if let Ok(ca) = std::fs::read_to_string(dir.path().join("ca.crt"))
                && !ca.is_empty()
            {
                let client = common::client_for(&ca);
                if client
                    .get(format!("{base}/readyz"))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
                {
                    break client;
                }
            }
            assert!(Instant::now() < until, "launchgate not ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        Launchgate {
            child,
            dir,
            client,
            base,
        }
    }

    /// POSTs a recorded review to `path` (with extra `headers`); the answer's `response`.
    async fn review(&self, path: &str, fixture: &str, headers: &[(&str, &str)]) -> Value {
        let mut request = common::json_post(
            &self.client,
            format!("{}{path}", self.base),
            fixture_bytes(fixture),
        );
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let answer = request.send().await.expect("launchgate answers");
        assert_eq!(answer.status(), 200, "{path} {fixture}");
        let body: Value = answer.json().await.unwrap();
        body["response"].clone()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap()
    }

    /// SIGTERM, then the exit status (within [`DEADLINE`]) and the log.
    async fn stop(mut self) -> (ExitStatus, String) {
        let pid = self.child.id() as libc::pid_t;
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let until = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < until,
                "launchgate did not stop after SIGTERM: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        (status, self.log())
    }
}

/// The outcome the span must carry for an answer.
fn expected_outcome(response: &Value) -> &'static str {
    if response["allowed"] == false {
        "denied"
    } else if response["warnings"]
        .as_array()
        .is_some_and(|w| !w.is_empty())
    {
        "warned"
    } else if response["patch"].is_string() {
        "patched"
    } else {
        "allowed"
    }
}

/// The request span of the request with `uid`.
fn request_span<'a>(spans: &'a [Received], uid: &str) -> &'a Received {
    spans
        .iter()
        .find(|s| s.attributes.get("launchgate.request.uid") == Some(&json!(uid)))
        .unwrap_or_else(|| panic!("no span for request {uid}: {:#?}", names(spans)))
}

fn uid_of(fixture: &str) -> String {
    common::fixture_json(fixture)["request"]["uid"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The phase spans under `parent`, in order: each ends where the next begins, all within the
/// parent, and none ends before it starts.
fn phases<'a>(spans: &'a [Received], parent: &Received) -> Vec<&'a str> {
    let mut children: Vec<&Received> = spans
        .iter()
        .filter(|s| s.span.parent_span_id == parent.span.span_id)
        .collect();
    children.sort_by_key(|s| s.span.start_time_unix_nano);
    let p = &parent.span;
    for c in &children {
        assert_eq!(c.span.trace_id, p.trace_id, "{}", c.span.name);
        assert_eq!(c.span.kind, SpanKind::Internal as i32);
        assert!(c.span.start_time_unix_nano <= c.span.end_time_unix_nano);
        assert!(c.span.start_time_unix_nano >= p.start_time_unix_nano);
        assert!(c.span.end_time_unix_nano <= p.end_time_unix_nano);
    }
    for pair in children.windows(2) {
        assert_eq!(
            pair[0].span.end_time_unix_nano, pair[1].span.start_time_unix_nano,
            "{} ends where {} begins",
            pair[0].span.name, pair[1].span.name
        );
    }
    assert_eq!(
        children.first().map(|c| c.span.start_time_unix_nano),
        Some(p.start_time_unix_nano)
    );
    assert_eq!(
        children.last().map(|c| c.span.end_time_unix_nano),
        Some(p.end_time_unix_nano)
    );
    children.iter().map(|c| c.span.name.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_spans_arrive_with_queue_kind_outcome_and_phase_durations() {
    let (collector, endpoint) = Collector::start().await;
    let server = Launchgate::start(
        &["--otlp-traces=true"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment.name=test",
            ),
        ],
    )
    .await;
    let job = "create-job-launch-acme-mnist.json";
    let mutated = server.review("/mutate", job, &[]).await;
    // The API server's trace context (its APIServerTracing) makes the span its child.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let api_server_span = "00f067aa0ba902b7";
    let validated = server
        .review(
            "/validate",
            "dryrun-create-job-demo.json",
            &[(
                "traceparent",
                &format!("00-{trace_id}-{api_server_span}-01"),
            )],
        )
        .await;
    let skipped = server.review("/mutate", "create-pod-demo.json", &[]).await;
    assert_eq!(skipped["patch"], Value::Null);

    let spans = collector
        .wait_for("three request spans", |spans| {
            spans
                .iter()
                .filter(|s| s.span.name.starts_with("POST "))
                .count()
                >= 3
                && spans.len() >= 3 + 6 + 6 + 5
        })
        .await;

    for s in &spans {
        assert_eq!(s.resource["service.name"], "launchgate");
        assert_eq!(s.resource["deployment.environment.name"], "test");
        assert_eq!(s.resource["service.version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(s.scope, "launchgate");
    }

    // /mutate on a launch Job of gpu-queue.
    let m = request_span(&spans, &uid_of(job));
    assert_eq!(m.span.name, "POST /mutate");
    assert_eq!(m.span.kind, SpanKind::Server as i32);
    assert!(m.span.parent_span_id.is_empty(), "a root span");
    let a = &m.attributes;
    assert_eq!(expected_outcome(&mutated), "patched", "{mutated}");
    for (key, value) in [
        ("launchgate.endpoint", json!("mutate")),
        ("launchgate.queue", json!("gpu-queue")),
        ("launchgate.kind.group", json!("batch")),
        ("launchgate.kind.version", json!("v1")),
        ("launchgate.kind.kind", json!("Job")),
        ("launchgate.workload", json!("Job")),
        ("launchgate.operation", json!("CREATE")),
        ("launchgate.outcome", json!("patched")),
        ("launchgate.allowed", json!(true)),
        ("launchgate.patched", json!(true)),
        ("launchgate.dry_run", json!(false)),
        ("k8s.namespace.name", json!("wandb")),
        ("http.route", json!("/mutate")),
        ("http.response.status_code", json!(200)),
    ] {
        assert_eq!(a.get(key), Some(&value), "{key} in {a:#?}");
    }
    assert!(a["launchgate.patch.operations"].as_i64().unwrap() > 0);
    assert!(!a.contains_key("launchgate.skipped"));
    assert_eq!(
        phases(&spans, m),
        ["read", "wait", "parse", "policy", "mutate", "serialise"]
    );

    // /validate of a dry run, in the API server's trace.
    let v = request_span(&spans, &uid_of("dryrun-create-job-demo.json"));
    assert_eq!(v.span.name, "POST /validate");
    assert_eq!(hex(&v.span.trace_id), trace_id);
    assert_eq!(hex(&v.span.parent_span_id), api_server_span);
    let a = &v.attributes;
    assert_eq!(a["launchgate.endpoint"], "validate");
    assert_eq!(a["launchgate.dry_run"], true);
    assert_eq!(a["launchgate.kind.kind"], "Job");
    assert_eq!(a["launchgate.outcome"], expected_outcome(&validated));
    assert_eq!(a["launchgate.allowed"], validated["allowed"]);
    assert_eq!(a["launchgate.patched"], false);
    assert!(a["launchgate.queue"].is_string(), "{a:#?}");
    assert_eq!(
        phases(&spans, v),
        ["read", "wait", "parse", "policy", "validate", "serialise"]
    );

    // A pod that is no launch workload: skipped, and why; no rules phase.
    let s = request_span(&spans, &uid_of("create-pod-demo.json"));
    let a = &s.attributes;
    assert_eq!(a["launchgate.outcome"], "skipped");
    assert_eq!(a["launchgate.skipped"], "not-launch");
    assert_eq!(a["launchgate.kind.kind"], "Pod");
    assert_eq!(a["launchgate.kind.version"], "v1");
    assert_eq!(a["launchgate.kind.group"], "");
    assert!(!a.contains_key("launchgate.queue"));
    assert_eq!(
        phases(&spans, s),
        ["read", "wait", "parse", "policy", "serialise"]
    );

    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
    assert!(
        log.contains("exporting admission traces over OTLP/HTTP"),
        "{log}"
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_request_is_an_error_span() {
    let (collector, endpoint) = Collector::start().await;
    let server = Launchgate::start(
        &["--otlp-traces=true"],
        &[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                &format!("{endpoint}/v1/traces"),
            ),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_SERVICE_NAME", "admission-webhook"),
        ],
    )
    .await;
    let answer = common::json_post(
        &server.client,
        format!("{}/validate", server.base),
        "{\"kind\": \"AdmissionReview\"}",
    )
    .send()
    .await
    .unwrap();
    assert_eq!(answer.status(), 400);
    let spans = collector
        .wait_for("the request span", |spans| {
            spans.iter().any(|s| s.span.name == "POST /validate")
        })
        .await;
    let span = spans
        .iter()
        .find(|s| s.span.name == "POST /validate")
        .unwrap();
    assert_eq!(span.resource["service.name"], "admission-webhook");
    assert_eq!(span.attributes["launchgate.error"], "bad_request");
    assert_eq!(span.attributes["http.response.status_code"], 400);
    let status = span.span.status.as_ref().expect("a status");
    assert_eq!(status.code, 2, "error: {status:?}");
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_sends_the_spans_still_queued() {
    let (collector, endpoint) = Collector::start().await;
    // Batches every ten minutes: only the shutdown can send this span.
    let server = Launchgate::start(
        &["--otlp-traces=true"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
        ],
    )
    .await;
    server
        .review("/mutate", "create-job-launch-acme-mnist.json", &[])
        .await;
    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
    let spans = collector.spans();
    assert_eq!(
        spans
            .iter()
            .filter(|s| s.span.name == "POST /mutate")
            .count(),
        1,
        "{:#?}\n{log}",
        names(&spans)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_flag_or_with_the_sdk_disabled_nothing_is_sent() {
    let (collector, endpoint) = Collector::start().await;
    for (args, env, says) in [
        (
            vec![],
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())],
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but --otlp-traces is off",
        ),
        (
            vec!["--otlp-traces=false"],
            vec![("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str())],
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set but --otlp-traces is off",
        ),
        (
            vec!["--otlp-traces=true"],
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
                ("OTEL_SDK_DISABLED", "true"),
            ],
            "",
        ),
        (
            vec!["--otlp-traces=true"],
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
                ("OTEL_TRACES_EXPORTER", "none"),
            ],
            "",
        ),
    ] {
        let mut env = env;
        env.push(("OTEL_BSP_SCHEDULE_DELAY", "10"));
        let server = Launchgate::start(&args, &env).await;
        for path in ["/mutate", "/validate"] {
            server
                .review(path, "create-job-launch-acme-mnist.json", &[])
                .await;
        }
        // The process has exited: had it exported, the shutdown would have sent it by now.
        let (status, log) = server.stop().await;
        assert!(status.success(), "{log}");
        assert!(log.contains(says), "{args:?} {env:?}: {log}");
        assert!(!log.contains("exporting admission traces"), "{log}");
        assert_eq!(
            collector.requests.load(Ordering::SeqCst),
            0,
            "{args:?} {env:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_or_hangs_does_not_fail_or_stall_admission() {
    // Down: nothing listens on the port. Hung: connections are accepted and never answered.
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hung_url = format!("http://{}", hung.local_addr().unwrap());
    let held = Arc::new(Mutex::new(Vec::new()));
    let holder = held.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = hung.accept().await {
            holder.lock().unwrap().push(conn);
        }
    });
    let down_url = format!("http://127.0.0.1:{}", free_port());
    for endpoint in [&down_url, &hung_url] {
        let server = Launchgate::start(
            &["--otlp-traces=true"],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
                ("OTEL_BSP_SCHEDULE_DELAY", "10"),
                ("OTEL_BSP_MAX_QUEUE_SIZE", "8"),
                ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"),
            ],
        )
        .await;
        // Far more spans than the queue holds: the rest are dropped, admission goes on.
        let mut answers = Vec::new();
        for _ in 0..20 {
            for (path, fixture) in [
                ("/mutate", "create-job-launch-acme-mnist.json"),
                ("/validate", "create-job-launch-acme-mnist.json"),
            ] {
                let client = server.client.clone();
                let url = format!("{}{path}", server.base);
                answers.push(tokio::spawn(async move {
                    common::json_post(&client, url, fixture_bytes(fixture))
                        .send()
                        .await
                        .map(|r| r.status())
                }));
            }
        }
        for answer in answers {
            assert_eq!(answer.await.unwrap().expect("answered"), 200, "{endpoint}");
        }
        let response = server
            .review("/mutate", "create-job-launch-acme-mnist.json", &[])
            .await;
        assert!(response["patch"].is_string(), "{response}");
        let (status, log) = server.stop().await;
        assert!(status.success(), "{endpoint}: {log}");
        assert!(
            log.contains("ExportError"),
            "export failures are logged: {log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_it_cannot_export_with_stop_the_start_and_doubtful_ones_are_warned() {
    for (env, says) in [
        (
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            "OTEL_EXPORTER_OTLP_PROTOCOL=\"grpc\": launchgate sends OTLP over HTTP with protobuf",
        ),
        (
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "collector:4318/v1/traces",
            ),
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: \"collector:4318/v1/traces\" is not a URL",
        ),
    ] {
        let (mut child, dir, _) = spawn(&["--otlp-traces=true"], &[env]);
        let until = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < until, "{env:?}: still running");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap();
        assert!(!status.success(), "{env:?}: {log}");
        assert!(log.contains(says), "{env:?}: {log}");
        assert!(!log.contains("panicked"), "{log}");
    }
    // Values with a fallback: a warning naming the variable, and the server serves.
    let (collector, endpoint) = Collector::start().await;
    let server = Launchgate::start(
        &["--otlp-traces=true"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "soon"),
            ("OTEL_TRACES_SAMPLER", "sometimes"),
        ],
    )
    .await;
    server
        .review("/mutate", "create-job-launch-acme-mnist.json", &[])
        .await;
    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
    assert!(
        log.contains("OTEL_BSP_SCHEDULE_DELAY=\"soon\" is not a whole number"),
        "{log}"
    );
    assert!(log.contains("OTEL_TRACES_SAMPLER"), "{log}");
    // The fallback sampler (parent-based, always on) still records the request.
    assert!(
        collector
            .spans()
            .iter()
            .any(|s| s.span.name == "POST /mutate"),
        "{log}"
    );
}

/// Credentials in the endpoint (userinfo, a token in the query) are used, never logged: not in
/// the startup line, not in the error about an endpoint launchgate cannot use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_the_endpoint_are_never_logged() {
    let (mut child, dir, _) = spawn(
        &["--otlp-traces=true"],
        &[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "ftp://user:s3cr3t-pw@collector:4318/v1/traces?token=t0k3n",
        )],
    );
    let until = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < until, "still running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains(
            r#""ftp://***@collector:4318/v1/traces?token=***" is not an http:// or https:// URL"#
        ),
        "{log}"
    );
    assert!(!log.contains("s3cr3t") && !log.contains("t0k3n"), "{log}");

    let (_collector, endpoint) = Collector::start().await;
    let with_secrets = format!(
        "{}/v1/traces?token=t0k3n",
        endpoint
            .trim_end_matches('/')
            .replacen("http://", "http://user:s3cr3t-pw@", 1)
    );
    let server = Launchgate::start(
        &["--otlp-traces=true"],
        &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &with_secrets)],
    )
    .await;
    server
        .review("/mutate", "create-job-launch-acme-mnist.json", &[])
        .await;
    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
    assert!(log.contains("exporting admission traces"), "{log}");
    assert!(log.contains("***@127.0.0.1"), "{log}");
    assert!(!log.contains("s3cr3t") && !log.contains("t0k3n"), "{log}");
}
