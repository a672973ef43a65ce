//! `launchgate audit` end to end against an in-process stand-in for the Kubernetes API
//! (plain HTTP on 127.0.0.1, reached through a kubeconfig): what it lists, what it reports for
//! the running config and for a new one, the notes for missing CRDs, the PolicyReport it applies
//! and its exit status.

mod common;

use axum::body::Bytes;
use axum::http::{Method, StatusCode, Uri};
use axum::response::IntoResponse;
use common::{crd_text, launchgate_command, serve_http, text};
use serde_json::{Value, json};
use std::process::Output;
use std::sync::{Arc, Mutex};

type Seen = Arc<Mutex<Vec<(String, String, Value)>>>;

fn job(name: &str, gpus: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "wandb", "uid": format!("uid-{name}"),
            "labels": {"wandb.ai/monitor": "true", "queue": "gpu-queue"}},
        "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 60, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "acme/train:1",
                "resources": {"limits": {"cpu": "4", "memory": "12Gi", "nvidia.com/gpu": gpus}}}]}}},
        "status": {"active": 1}})
}

fn pods() -> Value {
    json!({"kind": "PodList", "metadata": {}, "items": [
        // A launch pod of the Job: judged through its Job, not twice.
        {"metadata": {"name": "train-3-abc", "namespace": "wandb", "uid": "p1",
            "labels": {"wandb.ai/monitor": "true"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train-3", "uid": "uid-train-3", "controller": true}]},
         "spec": {"containers": [{"name": "main", "image": "acme/train:1"}]}},
        // A bare launch pod (no owner): judged.
        {"metadata": {"name": "notebook", "namespace": "team-b", "uid": "p2",
            "labels": {"wandb.ai/monitor": "true"}},
         "spec": {"containers": [{"name": "main", "image": "acme/nb:1",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
        // Not a launch workload.
        {"metadata": {"name": "web", "namespace": "default", "uid": "p3"},
         "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    ]})
}

async fn fake_api(policy_reports_crd: bool) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |method: Method, uri: Uri, body: Bytes| {
        let log = log.clone();
        async move {
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            log.lock()
                .unwrap()
                .push((method.to_string(), uri.to_string(), body.clone()));
            let query = uri.query().unwrap_or("");
            let (status, answer) = match (method.as_str(), uri.path()) {
                ("GET", "/apis/batch/v1/jobs") if query.contains("continue=next") => (
                    StatusCode::OK,
                    json!({"kind": "JobList", "metadata": {}, "items": [job("train-1", "1")]}),
                ),
                ("GET", "/apis/batch/v1/jobs") => (
                    StatusCode::OK,
                    json!({"kind": "JobList", "metadata": {"continue": "next"},
                        "items": [job("train-3", "3")]}),
                ),
                ("GET", "/api/v1/pods") => (StatusCode::OK, pods()),
                ("GET", "/apis/wgpolicyk8s.io/v1alpha2") if policy_reports_crd => (
                    StatusCode::OK,
                    json!({"kind": "APIResourceList", "groupVersion": "wgpolicyk8s.io/v1alpha2",
                        "resources": [{"name": "policyreports", "namespaced": true, "kind": "PolicyReport"}]}),
                ),
                ("GET", "/apis/wgpolicyk8s.io/v1alpha2/policyreports") if policy_reports_crd => (
                    StatusCode::OK,
                    json!({"kind": "PolicyReportList", "metadata": {}, "items": []}),
                ),
                ("PATCH", p) if p.starts_with("/apis/wgpolicyk8s.io/v1alpha2/namespaces/") => {
                    (StatusCode::OK, body)
                }
                _ => (
                    StatusCode::NOT_FOUND,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": "the server could not find the requested resource",
                        "reason": "NotFound", "code": 404}),
                ),
            };
            (
                status,
                [("content-type", "application/json")],
                serde_json::to_vec(&answer).unwrap(),
            )
                .into_response()
        }
    });
    (serve_http(app).await, seen)
}

fn kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"{server}\"}}\nusers:\n- name: auditor\n  user: {{token: t}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: auditor, namespace: default}}\ncurrent-context: fake\n"
        ),
    )
    .unwrap();
    path
}

async fn audit(kubeconfig: &std::path::Path, args: &[&str]) -> Output {
    let mut cmd = launchgate_command();
    cmd.arg("audit")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("LAUNCHGATE_CONFIG");
    // The fake API server runs on this test's runtime: wait for the CLI off it.
    tokio::task::spawn_blocking(move || cmd.output().expect("launchgate runs"))
        .await
        .unwrap()
}

#[tokio::test]
async fn audit_reports_what_a_new_config_would_break() {
    let (server, seen) = fake_api(false).await;
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), &server);

    // The running (built-in) policy: everything passes.
    let out = audit(&kc, &["--page-size", "1"]).await;
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}{}", text(&out.stderr));
    assert!(table.starts_with("NAMESPACE"), "{table}");
    assert!(
        table.contains(
            "3 launch workload(s): 3 pass, 0 warn, 0 fail (5 object(s) listed, 2 not judged)"
        ),
        "{table}"
    );
    assert!(table.contains("note: jobs.batch.volcano.sh"), "{table}");
    assert!(table.contains("note: pytorchjobs.kubeflow.org"), "{table}");

    // A new config with at most 2 GPUs: the 3-GPU Job would be denied.
    let new = dir.path().join("new.yaml");
    std::fs::write(
        &new,
        launchgate::policy::DEFAULT_CONFIG_YAML
            .replace("minimum: 0, maximum: 4", "minimum: 0, maximum: 2"),
    )
    .unwrap();
    let out = audit(&kc, &["--config", new.to_str().unwrap(), "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["counts"], json!({"pass": 2, "warn": 0, "fail": 1}));
    let failed: Vec<&Value> = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["result"] == "fail")
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["name"], "train-3");
    assert_eq!(failed[0]["kind"], "Job");
    assert_eq!(failed[0]["queue"], "gpu-queue");
    assert!(
        failed[0]["message"]
            .as_str()
            .unwrap()
            .contains("exceeds maximum 2"),
        "{}",
        failed[0]
    );
    let judged: Vec<&str> = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(judged, ["train-3", "train-1", "notebook"]);
    // --no-fail: the same findings, exit 0 (for a scheduled run).
    let out = audit(&kc, &["--config", new.to_str().unwrap(), "--no-fail"]).await;
    assert_eq!(out.status.code(), Some(0));

    // Read-only: only GETs, pages of the requested size.
    let seen = seen.lock().unwrap();
    assert!(seen.iter().all(|(m, _, _)| m == "GET"), "{seen:?}");
    assert!(
        seen.iter()
            .any(|(_, u, _)| u.starts_with("/apis/batch/v1/jobs?") && u.contains("limit=1")),
        "{seen:?}"
    );
}

#[tokio::test]
async fn policy_reports_are_applied_when_the_crd_is_installed() {
    let (server, seen) = fake_api(true).await;
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), &server);
    let out = audit(&kc, &["--policy-reports"]).await;
    let table = text(&out.stdout);
    assert!(out.status.success(), "{table}{}", text(&out.stderr));
    assert!(
        table.contains("wrote PolicyReport team-b/launchgate"),
        "{table}"
    );
    assert!(
        table.contains("wrote PolicyReport wandb/launchgate"),
        "{table}"
    );
    {
        let seen = seen.lock().unwrap();
        let patches: Vec<&(String, String, Value)> =
            seen.iter().filter(|(m, _, _)| m == "PATCH").collect();
        assert_eq!(patches.len(), 2);
        let (_, uri, body) = patches
            .iter()
            .find(|(_, u, _)| u.contains("/namespaces/wandb/"))
            .unwrap();
        assert!(uri.contains("fieldManager=launchgate-audit"), "{uri}");
        assert_eq!(body["apiVersion"], "wgpolicyk8s.io/v1alpha2");
        assert_eq!(body["summary"]["pass"], 2);
        assert_eq!(body["results"][0]["policy"], "gpu-queue");
        assert_eq!(body["results"][0]["resources"][0]["name"], "train-3");
    }
    // Without the CRD: a note, no write.
    let (server, seen) = fake_api(false).await;
    let kc = kubeconfig(dir.path(), &server);
    let out = audit(&kc, &["--policy-reports"]).await;
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains(
            "note: the PolicyReport CRD (policyreports.wgpolicyk8s.io/v1alpha2) is not installed"
        ),
        "{}",
        text(&out.stdout)
    );
    assert!(seen.lock().unwrap().iter().all(|(m, _, _)| m == "GET"));
}

#[tokio::test]
async fn an_unreachable_cluster_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let kc = kubeconfig(dir.path(), &format!("http://{addr}"));
    let out = audit(&kc, &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("listing jobs.batch"),
        "{}",
        text(&out.stderr)
    );
}

/// The reports launchgate writes fit the CRD fixtures the real-API-server tests install (the
/// PolicyReport's, and the upstream OpenReports Report CRD): same group/version/kind, every
/// result's `result` and `severity` within the CRD's enums, `policy` (required) always set, and
/// no field the schema does not know (the API server would prune it).
#[test]
fn reports_fit_the_crd_fixtures() {
    use launchgate::audit::ReportFormat;
    for (format, file) in [
        (
            ReportFormat::PolicyReport,
            "wgpolicyk8s.io_policyreports.yaml",
        ),
        (ReportFormat::OpenReports, "openreports.io_reports.yaml"),
    ] {
        report_fits(format, file);
    }
}

fn report_fits(format: launchgate::audit::ReportFormat, file: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd: CustomResourceDefinition = serde_yaml::from_str(&crd_text(file)).unwrap();
    let resource = format.resource();
    assert_eq!(crd.spec.group, resource.group);
    assert_eq!(crd.spec.names.kind, resource.kind);
    assert_eq!(crd.spec.names.plural, resource.plural);
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, resource.version);
    let schema =
        serde_json::to_value(&version.schema.as_ref().unwrap().open_api_v3_schema).unwrap();
    let item = &schema["properties"]["results"]["items"]["properties"];
    let allowed =
        |field: &str| -> Vec<Value> { item[field]["enum"].as_array().cloned().unwrap_or_default() };

    let policy = launchgate::Policy::from_yaml(
        &launchgate::policy::DEFAULT_CONFIG_YAML
            .replace("minimum: 0, maximum: 4", "minimum: 0, maximum: 2"),
    )
    .unwrap();
    let listed = launchgate::audit::listed_kinds()[0];
    let entries: Vec<_> = [job("a", "1"), job("b", "3")]
        .into_iter()
        .filter_map(|o| {
            launchgate::audit::evaluate(&policy, &launchgate::cluster::NoCluster, &listed, o)
        })
        .collect();
    let reports = launchgate::audit::policy_reports(format, &entries, 1);
    assert_eq!(reports.len(), 1);
    let report = &reports[0];
    assert_eq!(
        report["apiVersion"],
        format!("{}/{}", crd.spec.group, version.name)
    );
    assert_eq!(report["kind"], crd.spec.names.kind);
    for key in report.as_object().unwrap().keys() {
        assert!(
            ["apiVersion", "kind", "metadata"].contains(&key.as_str())
                || schema["properties"].get(key).is_some(),
            "{file}: {key} is not in the CRD schema"
        );
    }
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        assert!(r["policy"].is_string());
        let results_allowed = allowed("result");
        assert!(
            results_allowed.is_empty() || results_allowed.contains(&r["result"]),
            "{r}"
        );
        if let Some(sev) = r.get("severity") {
            let severities = allowed("severity");
            assert!(severities.is_empty() || severities.contains(sev), "{r}");
        }
        for key in r.as_object().unwrap().keys() {
            assert!(
                item.get(key).is_some(),
                "{file}: {key} is not in the CRD schema"
            );
        }
    }
    for key in report["summary"].as_object().unwrap().keys() {
        assert!(
            schema["properties"]["summary"]["properties"]
                .get(key)
                .is_some()
        );
    }
}

/// An object as a list response carries it: no `apiVersion`, no `kind`.
fn as_listed(mut object: Value) -> Value {
    let map = object.as_object_mut().unwrap();
    map.remove("apiVersion");
    map.remove("kind");
    object
}

/// A cluster running Kubeflow Trainer: two TrainJobs that leave their size to their runtimes,
/// a 64 × 8-GPU ClusterTrainingRuntime and a 2 × 4-GPU one (403 Forbidden instead when
/// `runtimes_forbidden`), no Jobs or Pods.
async fn trainer_api(runtimes_forbidden: bool) -> String {
    let trainjob = common::manifest_json("trainjob-torch.yaml");
    let mut small = trainjob.clone();
    small["metadata"]["name"] = json!("run-small");
    small["spec"]["runtimeRef"]["name"] = json!("torch-small");
    let big_runtime = common::manifest_json("runtimes/torch-64x8.yaml");
    let mut small_runtime = common::manifest_json("runtimes/torch-2x4.yaml");
    small_runtime["metadata"]["name"] = json!("torch-small");
    let app = axum::Router::new().fallback(move |method: Method, uri: Uri| {
        let trainjobs = json!([as_listed(trainjob.clone()), as_listed(small.clone())]);
        let runtimes = json!([as_listed(big_runtime.clone()), as_listed(small_runtime.clone())]);
        async move {
            let list = |items: Value| (StatusCode::OK, json!({"metadata": {}, "items": items}));
            let (status, answer) = match (method.as_str(), uri.path()) {
                ("GET", "/apis/trainer.kubeflow.org/v1alpha1") => (
                    StatusCode::OK,
                    json!({"kind": "APIResourceList", "groupVersion": "trainer.kubeflow.org/v1alpha1",
                        "resources": [{"name": "trainjobs"}, {"name": "trainingruntimes"},
                            {"name": "clustertrainingruntimes"}]}),
                ),
                ("GET", "/apis/trainer.kubeflow.org/v1alpha1/trainjobs") => list(trainjobs),
                ("GET", "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes")
                    if runtimes_forbidden =>
                {
                    (
                        StatusCode::FORBIDDEN,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": "clustertrainingruntimes.trainer.kubeflow.org is forbidden",
                            "reason": "Forbidden", "code": 403}),
                    )
                }
                ("GET", "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes") => {
                    list(runtimes)
                }
                ("GET", "/apis/trainer.kubeflow.org/v1alpha1/trainingruntimes")
                | ("GET", "/apis/batch/v1/jobs")
                | ("GET", "/api/v1/pods") => list(json!([])),
                _ => (
                    StatusCode::NOT_FOUND,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": "the server could not find the requested resource",
                        "reason": "NotFound", "code": 404}),
                ),
            };
            (
                status,
                [("content-type", "application/json")],
                serde_json::to_vec(&answer).unwrap(),
            )
                .into_response()
        }
    });
    serve_http(app).await
}

#[tokio::test]
async fn trainjobs_are_sized_by_the_clusters_runtimes() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "queues:\n  q:\n    limits:\n      totals: {nvidia.com/gpu: {maximum: 16}}\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let entries = |out: &Output| -> Vec<(String, String, String)> {
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
        report["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_string(),
                    e["result"].as_str().unwrap().to_string(),
                    e["message"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };

    let kc = kubeconfig(dir.path(), &trainer_api(false).await);
    let out = audit(&kc, &["--config", config, "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let got = entries(&out);
    assert_eq!(got.len(), 2, "{got:?}");
    let (name, result, message) = &got[0];
    assert_eq!((name.as_str(), result.as_str()), ("run", "fail"));
    assert!(
        message.contains("total nvidia.com/gpu over all pods=512 exceeds maximum 16")
            && message.contains(r#"ClusterTrainingRuntime "torch-distributed""#),
        "{message}"
    );
    assert_eq!(
        (got[1].0.as_str(), got[1].1.as_str()),
        ("run-small", "pass"),
        "{got:?}"
    );

    // Runtimes the auditor may not list: unknown, so the queue's unverifiableRuntime decides,
    // and a note says why.
    let kc = kubeconfig(dir.path(), &trainer_api(true).await);
    let out = audit(&kc, &["--config", config, "-o", "json"]).await;
    let got = entries(&out);
    assert!(
        got.iter().all(|(_, result, message)| result == "fail"
            && message.contains("cannot verify the runtime's size")),
        "{got:?}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("clustertrainingruntimes.trainer.kubeflow.org could not be listed")),
        "{report}"
    );
}
