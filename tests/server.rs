//! The real HTTPS server, driven with the recorded AdmissionReview requests.

mod common;

use common::{decode_patch, fixture_bytes, fixture_json, fixtures, json_post, start_default};
use serde_json::Value;
use std::time::Duration;

#[tokio::test]
async fn every_fixture_gets_a_valid_review_on_both_endpoints() {
    let srv = start_default().await;
    for (name, body) in fixtures() {
        let request: Value = serde_json::from_slice(&body).unwrap();
        let uid = request["request"]["uid"].as_str().unwrap();
        for path in ["/mutate", "/validate"] {
            let resp = srv.post(path, body.clone()).await;
            assert_eq!(resp.status(), 200, "{name} {path}");
            assert_eq!(resp.headers()["content-type"], "application/json");
            let review: Value = resp.json().await.unwrap();
            assert_eq!(review["apiVersion"], "admission.k8s.io/v1", "{name}");
            assert_eq!(review["kind"], "AdmissionReview", "{name}");
            let response = &review["response"];
            assert_eq!(response["uid"], uid, "{name} {path}: uid echoed");
            assert!(response["allowed"].is_boolean(), "{name}");
            if response["allowed"] == false {
                assert_eq!(response["status"]["code"], 403, "{name}");
                assert!(
                    response["status"]["message"]
                        .as_str()
                        .is_some_and(|m| !m.is_empty())
                );
            }
            match decode_patch(response) {
                Some(patch) => {
                    assert_eq!(path, "/mutate", "{name}: validate never patches");
                    assert_eq!(response["patchType"], "JSONPatch");
                    assert!(!patch.0.is_empty(), "{name}: empty patches are omitted");
                    let mut object = request["request"]["object"].clone();
                    json_patch::patch(&mut object, &patch)
                        .unwrap_or_else(|e| panic!("{name}: patch does not apply: {e}"));
                }
                None => assert!(response.get("patchType").is_none(), "{name}"),
            }
        }
    }
}

#[tokio::test]
async fn dry_run_answers_exactly_like_a_real_create() {
    let srv = start_default().await;
    for path in ["/mutate", "/validate"] {
        let real: Value = srv
            .post_json(path, fixture_bytes("create-job-demo.json"))
            .await;
        let dry: Value = srv
            .post_json(path, fixture_bytes("dryrun-create-job-demo.json"))
            .await;
        let strip = |mut v: Value| {
            v["response"].as_object_mut().unwrap().remove("uid");
            v
        };
        assert_eq!(strip(real), strip(dry), "{path}");
    }
}

#[tokio::test]
async fn bad_requests_get_readable_4xx_and_the_server_keeps_serving() {
    let srv = start_default().await;
    let no_request = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "malformed JSON",
            b"{\"apiVersion\": ".to_vec(),
            "application/json",
        ),
        ("JSON array", b"[1,2,3]".to_vec(), "application/json"),
        ("no request", no_request, "application/json"),
        (
            "wrong kind",
            br#"{"apiVersion":"v1","kind":"Pod"}"#.to_vec(),
            "application/json",
        ),
        (
            "10 MiB body",
            vec![b' '; 10 * 1024 * 1024],
            "application/json",
        ),
        (
            "wrong content type",
            fixture_bytes("create-job-demo.json"),
            "text/plain",
        ),
    ];
    for (what, body, ctype) in cases {
        for path in ["/mutate", "/validate"] {
            let resp = srv
                .client
                .post(srv.url(path))
                .header("content-type", ctype)
                .body(body.clone())
                .send()
                .await
                .unwrap();
            let status = resp.status();
            assert!(status.is_client_error(), "{what} {path}: got {status}");
            let err: Value = resp
                .json()
                .await
                .unwrap_or_else(|e| panic!("{what}: error body is JSON: {e}"));
            assert!(
                err["error"].as_str().is_some_and(|m| !m.is_empty()),
                "{what}: {err}"
            );
            assert_eq!(err["code"], status.as_u16());
        }
    }
    // Still serving.
    assert_eq!(srv.get_status("/readyz").await, 200);
    assert_eq!(
        srv.post("/mutate", fixture_bytes("create-job-demo.json"))
            .await
            .status(),
        200
    );
}

#[tokio::test]
async fn accepts_a_seven_mib_update() {
    let srv = start_default().await;
    let mut review: Value = fixture_json("update-job-demo.json");
    let filler = "x".repeat(3 * 1024 * 1024 + 512 * 1024);
    review["request"]["object"]["metadata"]["annotations"]["filler"] =
        Value::String(filler.clone());
    review["request"]["oldObject"]["metadata"]["annotations"]["filler"] = Value::String(filler);
    let body = serde_json::to_vec(&review).unwrap();
    assert!(body.len() >= 7 * 1024 * 1024);
    let resp = srv.post("/validate", body).await;
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let srv = start_default().await;
    assert_eq!(srv.get_status("/healthz").await, 200);
    assert_eq!(srv.get_status("/readyz").await, 200);
    for name in [
        "create-job-demo.json",
        "create-pod-kaniko-build-abc.json",
        "update-job-demo.json",
    ] {
        assert_eq!(srv.post("/mutate", fixture_bytes(name)).await.status(), 200);
        assert_eq!(
            srv.post("/validate", fixture_bytes(name)).await.status(),
            200
        );
    }
    let _ = srv.post("/mutate", b"nope".to_vec()).await;
    let text = srv.metrics().await;
    for needle in [
        r#"launchgate_admission_requests_total{endpoint="mutate",kind="Job",operation="CREATE",outcome="patched"} 1"#,
        r#"launchgate_admission_requests_total{endpoint="mutate",kind="Pod",operation="CREATE",outcome="skipped"} 1"#,
        r#"launchgate_admission_requests_total{endpoint="validate",kind="Job",operation="UPDATE""#,
        r#"launchgate_admission_duration_seconds_bucket{le="0.001",endpoint="mutate"}"#,
        r#"launchgate_admission_duration_seconds_count{endpoint="mutate"} 3"#,
        r#"launchgate_patch_operations_total{endpoint="mutate"}"#,
        r#"launchgate_admission_request_errors_total{endpoint="mutate",reason="bad_request"} 1"#,
        "launchgate_certificate_not_after_timestamp_seconds",
    ] {
        assert!(text.contains(needle), "metrics lack {needle}:\n{text}");
    }
}

#[tokio::test]
async fn sigterm_style_shutdown_finishes_in_flight_requests() {
    let srv = start_default().await;
    // A request whose body arrives slowly is in flight when shutdown begins.
    let body = fixture_bytes("create-job-demo.json");
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(2);
    let stream = tokio_stream_from(rx);
    let client = srv.client.clone();
    let url = srv.url("/mutate");
    let in_flight = tokio::spawn(async move {
        json_post(&client, url, reqwest::Body::wrap_stream(stream))
            .send()
            .await
    });
    let half = body.len() / 2;
    tx.send(Ok(body[..half].to_vec())).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    srv.server.begin_shutdown();
    tokio::time::sleep(Duration::from_millis(100)).await;
    tx.send(Ok(body[half..].to_vec())).await.unwrap();
    drop(tx);
    let resp = in_flight
        .await
        .unwrap()
        .expect("in-flight request completes");
    assert_eq!(resp.status(), 200);
    let review: Value = resp.json().await.unwrap();
    assert_eq!(review["response"]["allowed"], true);
    tokio::time::timeout(Duration::from_secs(10), srv.server.wait())
        .await
        .expect("server stops")
        .expect("clean exit");
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Vec<u8>, std::io::Error>>,
) -> impl futures_core::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// A Pod of `n` containers in the default queue of the built-in policy, as a CREATE review,
/// each container `make(i)`.
fn wide_pod(n: usize, make: impl Fn(usize) -> Value) -> Vec<u8> {
    let mut review = fixture_json("create-pod-launch-acme-mnist-mzxkz.json");
    review["request"]["object"]["spec"]["containers"] = (0..n).map(make).collect();
    serde_json::to_vec(&review).unwrap()
}

/// A Pod of 40,000 tiny containers (1.2 MB) fits the memory budget of a replica without a
/// memory limit (512 MiB) but would keep a core busy past the request deadline: both endpoints
/// deny it unreviewed at once, naming the rule and the containers, while a launch Pod of 200
/// containers is still reviewed and patched.
#[tokio::test]
async fn an_object_that_would_outlast_the_deadline_is_denied_unreviewed() {
    let dir = tempfile::tempdir().unwrap();
    let opts = launchgate::server::ServeOptions {
        memory_budget: Some(512 << 20),
        ..common::options(dir.path())
    };
    let srv = common::start_with(opts, dir).await;
    let wide = wide_pod(
        40_000,
        |i| serde_json::json!({"name": format!("c{i}"), "image": "x"}),
    );
    assert!(wide.len() > 1_000_000, "{} bytes", wide.len());
    for path in ["/mutate", "/validate"] {
        let answer = srv.post_json(path, wide.clone()).await;
        let response = &answer["response"];
        assert_eq!(response["allowed"], false, "{path}: {response}");
        assert_eq!(response["uid"], "2fcf3d15-b6df-451c-a30b-6b4c4ed69a3a");
        assert!(response.get("patch").is_none(), "{path}: {response}");
        let message = response["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(
                "launchgate: the object is too large to review in time: 40000 containers take up to "
            ) && message.contains("more than the 2000 ms launchgate allows a review"),
            "{path}: {message}"
        );
    }
    let metrics = srv.metrics().await;
    for endpoint in ["mutate", "validate"] {
        let line = format!(
            "launchgate_admission_request_errors_total{{endpoint=\"{endpoint}\",reason=\"too_slow\"}} 1"
        );
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
    assert!(
        metrics.contains(
            r#"launchgate_violations_total{queue="",rule="server.tooSlow",enforcement="deny"} 2"#
        ),
        "{metrics}"
    );

    // A launch Pod of 200 ordinary containers is reviewed as ever.
    let usual = wide_pod(200, |i| {
        serde_json::json!({"name": format!("worker-{i}"), "image": "ghcr.io/acme/train:1",
            "env": [{"name": "RANK", "value": i.to_string()}],
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}})
    });
    let answer = srv.post_json("/mutate", usual.clone()).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let patch = decode_patch(&answer["response"]).expect("the Pod is patched");
    assert!(!patch.0.is_empty());
    let answer = srv.post_json("/validate", usual).await;
    assert!(answer["response"]["allowed"].is_boolean(), "{answer}");
    assert!(
        !answer["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("too large to review"),
        "{answer}"
    );
}
