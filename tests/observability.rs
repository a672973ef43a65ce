//! Operating the server: the decision metrics and Events of a denied launch workload, the
//! plain-HTTP admin port (probes and metrics without a client certificate), and the readable
//! 413 for an oversized body over HTTP/2 and HTTP/1.1.

mod common;

use common::{
    TestServer, client_for, fixture_bytes, fixture_json, json_post, kube_client, options,
    serve_http, start_default, text,
};
use launchgate::server::events::{MemoryEventSink, REASON_DENIED};
use launchgate::server::{ServeOptions, start, start_with_event_sink};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

const DENIED: &str = "create-job-launch-acme-mnist.json";

#[tokio::test]
async fn a_denied_create_is_counted_by_queue_and_rule_and_becomes_one_event() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(MemoryEventSink::default());
    let server = start_with_event_sink(options(dir.path()), None, Some(sink.clone()))
        .await
        .unwrap();
    let srv = TestServer::new(server, dir);
    for path in ["/mutate", "/validate"] {
        let answer = srv.post_json(path, fixture_bytes(DENIED)).await;
        if path == "/validate" {
            assert_eq!(answer["response"]["allowed"], false, "{answer}");
        }
    }
    // A dry run of the same denial: counted, but no Event.
    let mut dry = fixture_json(DENIED);
    dry["request"]["dryRun"] = Value::Bool(true);
    dry["request"]["uid"] = Value::String("dry-run-uid".into());
    dry["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        ["nvidia.com/gpu"] = Value::String("9".into());
    let resp = srv
        .post("/validate", serde_json::to_vec(&dry).unwrap())
        .await;
    assert_eq!(resp.status(), 200);

    let text = srv.metrics().await;
    for needle in [
        r#"launchgate_decisions_total{endpoint="validate",queue="gpu-queue",outcome="denied"} 2"#,
        r#"launchgate_violations_total{queue="gpu-queue",rule="limits.variables",enforcement="deny"} 2"#,
        r#"launchgate_build_info{version=""#,
        r#"launchgate_admission_duration_seconds_bucket{le="30.0",endpoint="validate"}"#,
    ] {
        assert!(text.contains(needle), "metrics lack {needle}:\n{text}");
    }
    // The mutating webhook patched it (no denial there).
    assert!(
        text.contains(r#"launchgate_decisions_total{endpoint="mutate",queue="gpu-queue",outcome="#),
        "{text}"
    );

    // Exactly one Event: the validate denial (the dry run is not one).
    let mut events = Vec::new();
    for _ in 0..100 {
        events = sink.events.lock().unwrap().clone();
        if !events.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let events_now = sink.events.lock().unwrap().clone();
    assert_eq!(events_now.len(), 1, "{events_now:?}");
    let e = &events[0];
    assert_eq!(e.reason.as_deref(), Some(REASON_DENIED));
    assert_eq!(e.metadata.namespace.as_deref(), Some("wandb"));
    assert!(e.note.as_deref().unwrap().contains("exceeds maximum 4"));
    let r = e.regarding.as_ref().unwrap();
    assert_eq!(r.kind.as_deref(), Some("Job"));
    assert_eq!(r.api_version.as_deref(), Some("batch/v1"));
    assert_eq!(r.namespace.as_deref(), Some("wandb"));
    assert!(
        e.metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("launch-acme-mnist.")
    );
    let text = srv.metrics().await;
    assert!(
        text.contains(r#"launchgate_events_total{result="created"} 1"#),
        "{text}"
    );
    srv.server.begin_shutdown();
    srv.server.wait().await.unwrap();
}

#[tokio::test]
async fn probes_and_metrics_answer_over_plain_http_when_client_certificates_are_required() {
    let dir = tempfile::tempdir().unwrap();
    let ca = launchgate::certs::generate(&["client-ca".to_string()], 1).unwrap();
    let ca_path = dir.path().join("client-ca.crt");
    std::fs::write(&ca_path, &ca.ca_pem).unwrap();
    let opts = ServeOptions {
        client_ca: Some(ca_path),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        shutdown_delay: Duration::from_millis(600),
        ..options(dir.path())
    };
    let server = start(opts, None).await.unwrap();
    let admin = format!("http://{}", server.admin_addr.expect("admin port bound"));
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let get = |path: &'static str| {
        let plain = plain.clone();
        let admin = admin.clone();
        async move { plain.get(format!("{admin}{path}")).send().await.unwrap() }
    };
    assert_eq!(get("/healthz").await.status(), 200);
    assert_eq!(get("/readyz").await.text().await.unwrap(), "ready");
    let text = get("/metrics").await.text().await.unwrap();
    assert!(text.contains("launchgate_build_info"), "{text}");
    // No admission over plain HTTP.
    let resp = json_post(&plain, format!("{admin}/validate"), fixture_bytes(DENIED))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    // The HTTPS port still insists on a client certificate.
    let https = client_for(server.dev_ca_pem.as_deref().unwrap());
    assert!(
        https
            .get(format!(
                "https://localhost:{}/healthz",
                server.local_addr.port()
            ))
            .send()
            .await
            .is_err()
    );
    // During the shutdown delay the admin port reports unready (the kubelet must see it).
    server.begin_shutdown();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let resp = get("/readyz").await;
    assert_eq!(resp.status(), 503);
    server.wait().await.unwrap();
}

async fn assert_413(client: &reqwest::Client, url: &str, version: reqwest::Version, what: &str) {
    let body = vec![b' '; 10 * 1024 * 1024];
    let resp = json_post(client, url, body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer: {e:?}"));
    assert_eq!(resp.version(), version, "{what}");
    assert_eq!(resp.status(), 413, "{what}");
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["code"], 413, "{what}");
    assert!(err["error"].as_str().unwrap().contains("exceeds"), "{what}");
}

#[tokio::test]
async fn an_oversized_body_gets_a_readable_413_over_http2_and_http1() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(options(dir.path()), None).await.unwrap();
    let ca = server.dev_ca_pem.clone().unwrap();
    let url = format!("https://localhost:{}/validate", server.local_addr.port());
    let builder = || {
        reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
            .tls_built_in_root_certs(false)
            .timeout(Duration::from_secs(30))
    };
    let h2 = builder().http2_prior_knowledge().build().unwrap();
    let h1 = builder().http1_only().build().unwrap();
    for round in 0..3 {
        assert_413(&h2, &url, reqwest::Version::HTTP_2, &format!("h2 #{round}")).await;
        assert_413(
            &h1,
            &url,
            reqwest::Version::HTTP_11,
            &format!("h1 #{round}"),
        )
        .await;
    }
    // curl sends the whole body as fast as flow control allows and reports what it got; it
    // saw a reset stream (HTTP/2) or a 100 Continue without the 413 (HTTP/1.1) when the server
    // answered before reading the body to its end.
    let big = dir.path().join("big.json");
    std::fs::write(&big, vec![b' '; 10 * 1024 * 1024]).unwrap();
    for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        for round in 0..3 {
            let mut curl = std::process::Command::new("curl");
            curl.args(["-sS", flag, "--cacert"])
                .arg(dir.path().join("dev-certs/ca.crt"))
                .args(["-o", "/dev/null", "-w", "%{http_version} %{http_code}"])
                .args(["-H", "content-type: application/json", "--data-binary"])
                .arg(format!("@{}", big.display()))
                .arg(&url);
            let out = tokio::task::spawn_blocking(move || curl.output())
                .await
                .unwrap()
                .expect("curl runs (the test needs the curl command)");
            assert_eq!(
                text(&out.stdout),
                format!("{version} 413"),
                "curl {flag} #{round}: {}",
                text(&out.stderr)
            );
        }
    }
    // The connections stay usable.
    for client in [&h2, &h1] {
        let resp = json_post(client, &url, fixture_bytes("create-job-demo.json"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    server.begin_shutdown();
    server.wait().await.unwrap();
}

/// `launchgate delete-webhooks` (the chart's pre-delete hook) against a fake API server: the
/// validating configuration is deleted first, a configuration already gone is fine.
#[tokio::test]
async fn delete_webhooks_removes_both_configurations_and_tolerates_missing_ones() {
    use axum::extract::State;
    use axum::http::{Method, StatusCode, Uri};
    use axum::response::IntoResponse;
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    async fn api(
        State(seen): State<Arc<std::sync::Mutex<Vec<String>>>>,
        method: Method,
        uri: Uri,
    ) -> axum::response::Response {
        seen.lock()
            .unwrap()
            .push(format!("{method} {}", uri.path()));
        if uri.path().contains("mutatingwebhookconfigurations") {
            let status = serde_json::json!({"kind": "Status", "apiVersion": "v1",
                "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"});
            return (
                StatusCode::NOT_FOUND,
                [("content-type", "application/json")],
                status.to_string(),
            )
                .into_response();
        }
        let status = serde_json::json!({"kind": "Status", "apiVersion": "v1",
            "status": "Success", "code": 200});
        ([("content-type", "application/json")], status.to_string()).into_response()
    }
    let app = axum::Router::new().fallback(api).with_state(seen.clone());
    let client = kube_client(&serve_http(app).await);
    let report = launchgate::server::delete_webhooks(
        client,
        &["launchgate".to_string()],
        &["launchgate".to_string()],
    )
    .await
    .unwrap();
    assert_eq!(
        report,
        [
            "deleted validatingwebhookconfiguration launchgate",
            "mutatingwebhookconfiguration launchgate already gone"
        ]
    );
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "DELETE /apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/launchgate",
            "DELETE /apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/launchgate"
        ]
    );
}

/// Without matchConditions (Kubernetes < 1.28) the API server sends every pod and job; the
/// server applies the same filter: a job without launch labels and an image build
/// (`wandb: launch`) are allowed untouched, and leave no decision (no log line, no per-queue
/// count), exactly as if the API server had not called.
#[tokio::test]
async fn objects_matchconditions_would_filter_are_skipped_by_the_server() {
    let srv = start_default().await;
    let mut plain = fixture_json("create-job-demo.json");
    let object = &mut plain["request"]["object"];
    object["metadata"]["labels"] = serde_json::json!({"app": "batch-report"});
    object["spec"]["template"]["metadata"]["labels"] = serde_json::json!({"app": "batch-report"});
    let bodies = [
        (
            "job without launch labels",
            serde_json::to_vec(&plain).unwrap(),
        ),
        (
            "image build",
            fixture_bytes("create-pod-kaniko-build-abc.json"),
        ),
    ];
    for (what, body) in bodies {
        for path in ["/mutate", "/validate"] {
            let answer: Value = srv.post_json(path, body.clone()).await;
            let r = &answer["response"];
            assert_eq!(r["allowed"], true, "{what} {path}");
            assert!(r["patch"].is_null(), "{what} {path}: {r}");
            assert!(r["warnings"].is_null(), "{what} {path}: {r}");
        }
    }
    let text = srv.metrics().await;
    assert!(!text.contains("launchgate_decisions_total{"), "{text}");
    assert!(
        text.contains(r#"launchgate_admission_requests_total{endpoint="mutate",kind="Job",operation="CREATE",outcome="skipped"} 1"#),
        "{text}"
    );
}

/// Every series a shipped alert (the chart's PrometheusRule) reads is exposed by a freshly
/// started server, at 0: an alert on `increase(...) > 0` fires on the first failure only if the
/// series existed before it.
#[tokio::test]
async fn every_series_a_shipped_alert_reads_exists_from_start_up() {
    let rule = std::fs::read_to_string(
        common::root().join("charts/launchgate/templates/prometheusrule.yaml"),
    )
    .unwrap();
    let srv = start_default().await;
    let text = srv.metrics().await;
    let series: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    let mut checked = 0;
    for expr in rule.lines().filter_map(|l| l.trim().strip_prefix("expr:")) {
        let mut rest = expr;
        while let Some(at) = rest.find("launchgate_") {
            let from = &rest[at..];
            let name_len = from
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(from.len());
            let name = &from[..name_len];
            let labels = from[name_len..]
                .strip_prefix('{')
                .and_then(|l| l.split_once('}'))
                .map_or("", |(l, _)| l);
            // `key="v"` and `key=~"a|b"` after the chart's own selector.
            let mut wanted: Vec<Vec<String>> = vec![vec![]];
            for pair in labels.split(',').filter(|p| p.contains('"')) {
                let (key, value) = pair.split_once('=').unwrap();
                let (regex, value) = match value.strip_prefix('~') {
                    Some(v) => (true, v),
                    None => (false, value),
                };
                let value = value.trim_matches('"');
                let options: Vec<&str> = if regex {
                    value.split('|').collect()
                } else {
                    vec![value]
                };
                wanted = wanted
                    .iter()
                    .flat_map(|w| {
                        options.iter().map(move |o| {
                            let mut w = w.clone();
                            w.push(format!("{}=\"{o}\"", key.trim()));
                            w
                        })
                    })
                    .collect();
            }
            for labels in wanted {
                let found = series.iter().any(|s| {
                    s.starts_with(name)
                        && s[name.len()..].starts_with(['{', ' '])
                        && labels.iter().all(|l| s.contains(l.as_str()))
                });
                assert!(
                    found,
                    "alert expression {expr:?} reads {name}{{{}}}, which a fresh server does not expose:\n{text}",
                    labels.join(",")
                );
                checked += 1;
            }
            rest = &from[name_len..];
        }
    }
    assert!(
        checked >= 10,
        "only {checked} series found in the alert rules"
    );
}
