//! A recorded Volcano pod whose Job was never mutated is fully wired by reading the owner Job
//! through the watch cache (`server::owner_cache`), here against a fake Kubernetes API served
//! in-process: it answers the list and watch of `batch.volcano.sh/v1alpha1` jobs with the
//! recorded Job, and the Services (a rendezvous Service) the same cache watches.

mod common;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use common::{
    TestServer, env_value, fixture_bytes, fixture_json, kube_client, options, serve_http,
};
use launchgate::Policy;
use launchgate::WorkloadKind;
use launchgate::cluster::ClusterView;
use launchgate::review::{Endpoint, review};
use launchgate::server::owner_cache;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn recorded_job() -> Value {
    let review = fixture_json("create-vcjob-wandb-job-run42.json");
    let mut job = review["request"]["object"].clone();
    job["metadata"]["resourceVersion"] = json!("7");
    job["metadata"]["uid"] = json!("0b6e2b7e-1c0c-4c5e-9a51-0c6d7b1d2f11");
    job
}

#[derive(Clone, Default)]
struct Calls {
    lists: Arc<AtomicUsize>,
    watches: Arc<AtomicUsize>,
}

/// `GET /apis/batch.volcano.sh/v1alpha1/jobs`: a list, or (with `watch=true`) a watch that
/// sends a bookmark and then stays quiet for a while.
async fn jobs(State(calls): State<Calls>, RawQuery(query): RawQuery) -> Response {
    let query = query.unwrap_or_default();
    if query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1")
    {
        calls.watches.fetch_add(1, Ordering::SeqCst);
        let bookmark = json!({"type": "BOOKMARK", "object": {
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"resourceVersion": "7"}}});
        // Hold the watch open a little so the watcher does not spin.
        tokio::time::sleep(Duration::from_millis(500)).await;
        return (
            [("content-type", "application/json")],
            format!("{bookmark}\n"),
        )
            .into_response();
    }
    calls.lists.fetch_add(1, Ordering::SeqCst);
    let list = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "JobList",
                      "metadata": {"resourceVersion": "7"}, "items": [recorded_job()]});
    ([("content-type", "application/json")], list.to_string()).into_response()
}

/// `GET /api/v1/services` (or one namespace's): the headless Service `wandb/ddp`, or a quiet
/// watch.
async fn services(RawQuery(query): RawQuery) -> Response {
    let query = query.unwrap_or_default();
    if query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1")
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
        return ([("content-type", "application/json")], String::new()).into_response();
    }
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "ddp", "namespace": "wandb", "resourceVersion": "3"},
        "spec": {"clusterIP": "None", "selector": {"batch.kubernetes.io/job-name": "ddp"}}});
    let list = json!({"apiVersion": "v1", "kind": "ServiceList",
                      "metadata": {"resourceVersion": "3"}, "items": [service]});
    ([("content-type", "application/json")], list.to_string()).into_response()
}

/// `GET /apis/kubeflow.org/v1/pytorchjobs`: one PyTorchJob, then a quiet watch.
async fn pytorch_jobs(RawQuery(query): RawQuery) -> Response {
    let query = query.unwrap_or_default();
    if query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1")
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
        return ([("content-type", "application/json")], String::new()).into_response();
    }
    let job = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "ddp", "namespace": "wandb", "resourceVersion": "5"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}});
    let list = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJobList",
                      "metadata": {"resourceVersion": "5"}, "items": [job]});
    ([("content-type", "application/json")], list.to_string()).into_response()
}

async fn not_found(uri: Uri) -> Response {
    (
        StatusCode::NOT_FOUND,
        format!("fake API: no route for {uri}"),
    )
        .into_response()
}

/// Serves `routes` over loopback, answering 404 to everything else; its base URL.
async fn fake_api<S: Clone + Send + Sync + 'static>(routes: Router<S>, state: S) -> String {
    serve_http(routes.fallback(not_found).with_state(state)).await
}

/// The request object of the AdmissionReview `body` with the base64 patch of `response`
/// applied.
fn patched_object(body: &[u8], response: &Value) -> Value {
    let patch = common::decode_patch(response).expect("a patch");
    let request: Value = serde_json::from_slice(body).unwrap();
    let mut object = request["request"]["object"].clone();
    json_patch::patch(&mut object, &patch).unwrap();
    object
}

#[tokio::test]
async fn recorded_pods_are_wired_from_the_watched_owner_job() {
    let calls = Calls::default();
    let routes = Router::new()
        .route(
            "/apis/batch.volcano.sh/v1alpha1/jobs",
            axum::routing::get(jobs),
        )
        .route("/api/v1/services", axum::routing::get(services))
        .route(
            "/apis/kubeflow.org/v1/pytorchjobs",
            axum::routing::get(pytorch_jobs),
        );
    let client = kube_client(&fake_api(routes, calls.clone()).await);
    let cache = owner_cache::start(client, owner_cache::WatchScope::default()).await;
    assert!(
        cache.wait_until_ready(Duration::from_secs(10)).await,
        "the cache never listed the jobs"
    );
    assert!(cache.is_connected());
    let service = cache
        .service("wandb", "ddp")
        .expect("the Service is cached");
    assert_eq!(service["spec"]["clusterIP"], "None");
    // The PyTorchJobs a label-less Scale is judged against (not waited for by readiness).
    let mut job = None;
    for _ in 0..100 {
        job = cache.workload(WorkloadKind::PyTorchJob, "wandb", "ddp");
        if job.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let job = job.expect("the PyTorchJob is cached");
    assert_eq!(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"], 2);
    assert!(
        cache
            .workload(WorkloadKind::PyTorchJob, "wandb", "other")
            .is_none()
    );
    assert!(cache.service("other", "ddp").is_none());
    let job = cache
        .workload(WorkloadKind::VolcanoJob, "wandb", "wandb-job-run42")
        .expect("the recorded Job is cached");
    assert_eq!(job["spec"]["plugins"]["pytorch"][2], "--port=23456");
    assert!(
        cache
            .workload(WorkloadKind::VolcanoJob, "other", "wandb-job-run42")
            .is_none()
    );
    assert!(calls.lists.load(Ordering::SeqCst) >= 1);

    let policy = Policy::embedded_default();
    for (name, rank) in [
        ("create-pod-wandb-job-run42-master-0.json", "0"),
        ("create-pod-wandb-job-run42-worker-0.json", "1"),
        ("create-pod-wandb-job-run42-worker-1.json", "2"),
    ] {
        let body = fixture_bytes(name);
        let outcome = review(&policy, Endpoint::Mutate, &body, &cache).unwrap();
        let response: Value = serde_json::from_slice(&outcome.body).unwrap();
        let response = &response["response"];
        assert_eq!(response["allowed"], true, "{name}");
        let pod = patched_object(&body, response);
        let c = &pod["spec"]["containers"][0];
        assert_eq!(
            env_value(c, "MASTER_ADDR"),
            Some("wandb-job-run42-master-0.wandb-job-run42"),
            "{name}"
        );
        assert_eq!(env_value(c, "MASTER_PORT"), Some("23456"), "{name}");
        assert_eq!(env_value(c, "WORLD_SIZE"), Some("3"), "{name}");
        assert_eq!(env_value(c, "RANK"), Some(rank), "{name}");
        let ports: Vec<&Value> = c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["name"] == "pytorchjob-port")
            .collect();
        assert_eq!(ports.len(), 1, "{name}");
        let warnings = response["warnings"].as_array().cloned().unwrap_or_default();
        assert!(
            warnings
                .iter()
                .all(|w| !w.as_str().unwrap().contains("owner Volcano Job")),
            "{name}: {warnings:?}"
        );
    }

    // The same through the real HTTPS server, started with the watch cache as its cluster view
    // (what `serve --cluster-lookups` does).
    let dir = tempfile::tempdir().unwrap();
    let server = launchgate::server::start(options(dir.path()), Some(Arc::new(cache)))
        .await
        .expect("server starts");
    let srv = TestServer::new(server, dir);
    let body = fixture_bytes("create-pod-wandb-job-run42-worker-1.json");
    let answer = srv.post_json("/mutate", body.clone()).await;
    let pod = patched_object(&body, &answer["response"]);
    let c = &pod["spec"]["containers"][0];
    assert_eq!(
        env_value(c, "MASTER_ADDR"),
        Some("wandb-job-run42-master-0.wandb-job-run42")
    );
    assert_eq!(env_value(c, "WORLD_SIZE"), Some("3"));
    assert_eq!(env_value(c, "RANK"), Some("2"));
    srv.server.begin_shutdown();
    srv.server.wait().await.unwrap();
}

/// `GET /apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs`: records the namespace and
/// query, answers an empty list (or a quiet watch).
async fn namespaced_jobs(
    State(seen): State<Arc<std::sync::Mutex<Vec<String>>>>,
    axum::extract::Path(ns): axum::extract::Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let query = query.unwrap_or_default();
    seen.lock().unwrap().push(format!("{ns}?{query}"));
    if query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1")
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
        return ([("content-type", "application/json")], String::new()).into_response();
    }
    let list = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "JobList",
                      "metadata": {"resourceVersion": "7"}, "items": []});
    ([("content-type", "application/json")], list.to_string()).into_response()
}

#[tokio::test]
async fn the_watch_is_limited_to_the_given_namespaces_and_label_selector() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let routes = Router::new()
        .route(
            "/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs",
            axum::routing::get(namespaced_jobs),
        )
        .route(
            "/api/v1/namespaces/{ns}/services",
            axum::routing::get(services),
        );
    let client = kube_client(&fake_api(routes, seen.clone()).await);
    let scope = owner_cache::WatchScope {
        namespaces: vec!["wandb".into(), "team-a".into(), "wandb".into()],
        label_selector: "wandb.ai/monitor".into(),
    };
    let cache = owner_cache::start(client, scope).await;
    assert!(
        cache.wait_until_ready(Duration::from_secs(10)).await,
        "both namespaced lists arrive"
    );
    assert!(
        cache
            .workload(WorkloadKind::VolcanoJob, "wandb", "anything")
            .is_none()
    );
    assert!(
        cache
            .workload(WorkloadKind::VolcanoJob, "elsewhere", "anything")
            .is_none()
    );
    let seen = seen.lock().unwrap().clone();
    let lists: Vec<&String> = seen.iter().filter(|q| !q.contains("watch=")).collect();
    let mut namespaces: Vec<&str> = lists.iter().map(|q| q.split('?').next().unwrap()).collect();
    namespaces.sort();
    namespaces.dedup();
    assert_eq!(namespaces, ["team-a", "wandb"], "{seen:?}");
    assert!(
        lists
            .iter()
            .all(|q| q.contains("labelSelector=wandb.ai%2Fmonitor")),
        "{seen:?}"
    );
}
