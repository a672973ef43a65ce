//! The benchmark cases, shared by `benches/core.rs` (time) and `benches/memory.rs` (bytes):
//! the recorded fixtures and generated launch Pods of growing size.
#![allow(dead_code)]

use serde_json::{Value, json};
use std::path::PathBuf;

pub fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/admission")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A launch Pod CREATE with `n` containers of about `container_bytes` each, built from the
/// recorded `create-pod-launch-acme-mnist-mzxkz.json` request.
pub fn generated_pod(n: usize, container_bytes: usize) -> Vec<u8> {
    let mut review: Value =
        serde_json::from_slice(&fixture("create-pod-launch-acme-mnist-mzxkz.json")).unwrap();
    let object = &mut review["request"]["object"];
    object["metadata"]["labels"]["wandb.ai/monitor"] = json!("true");
    // Pad the fixture's container with env vars to ~`container_bytes`, then copy it.
    let mut template = object["spec"]["containers"][0].clone();
    assert!(template["env"].is_array(), "fixture container has env");
    let mut k = 0;
    while serde_json::to_vec(&template).unwrap().len() < container_bytes {
        template["env"].as_array_mut().unwrap().push(json!({
            "name": format!("LAUNCH_SETTING_{k:04}"),
            "value": format!("value-{k}-{}", "x".repeat(48)),
        }));
        k += 1;
    }
    let containers: Vec<Value> = (0..n)
        .map(|i| {
            let mut c = template.clone();
            c["name"] = json!(format!("worker-{i}"));
            c
        })
        .collect();
    object["spec"]["containers"] = Value::Array(containers);
    serde_json::to_vec(&review).unwrap()
}

/// A launch Pod CREATE with `n` tiny containers as the API server defaults them (image pull
/// policy, termination message path and policy, empty resources): the shape that costs the most
/// memory per body byte.
pub fn dense_pod(n: usize) -> Vec<u8> {
    let mut review: Value =
        serde_json::from_slice(&fixture("create-pod-launch-acme-mnist-mzxkz.json")).unwrap();
    let object = &mut review["request"]["object"];
    object["metadata"]["labels"]["wandb.ai/monitor"] = json!("true");
    let containers: Vec<Value> = (0..n)
        .map(|i| {
            json!({"name": format!("c{i}"), "image": "busybox", "resources": {},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File", "imagePullPolicy": "Always"})
        })
        .collect();
    object["spec"]["containers"] = Value::Array(containers);
    serde_json::to_vec(&review).unwrap()
}

/// A CREATE review of `tests/fixtures/manifests/rayjob.yaml` from a tenant, as the API server
/// sends it for a CRD without defaults: the manifest plus the server's metadata.
pub fn rayjob_create() -> Vec<u8> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/manifests/rayjob.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut object: Value = serde_yaml::from_str(&text).unwrap();
    let metadata = &mut object["metadata"];
    metadata["uid"] = json!("5b0f3c1e-7a9d-4f7e-9c55-2f1d0e7b9a41");
    metadata["generation"] = json!(1);
    metadata["creationTimestamp"] = json!("2026-11-26T10:00:00Z");
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0d6c2b7e-1f43-4b8a-a3a5-6f0e2c9d8b17",
            "kind": {"group": "ray.io", "version": "v1", "kind": "RayJob"},
            "resource": {"group": "ray.io", "version": "v1", "resource": "rayjobs"},
            "requestKind": {"group": "ray.io", "version": "v1", "kind": "RayJob"},
            "requestResource": {"group": "ray.io", "version": "v1", "resource": "rayjobs"},
            "name": "llm-ft-run7",
            "namespace": "ml-team",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    });
    serde_json::to_vec(&review).unwrap()
}

/// A launch Pod UPDATE (a label added) of `n` containers that each break the queue's limits as
/// they did when the Pod was admitted (8 GPUs over the example queue's 4): both objects are
/// judged and every violation of the new one is compared with the old one's.
pub fn violating_pod_update(n: usize) -> Vec<u8> {
    let mut review: Value =
        serde_json::from_slice(&fixture("create-pod-launch-acme-mnist-mzxkz.json")).unwrap();
    let request = &mut review["request"];
    let object = &mut request["object"];
    object["metadata"]["name"] = json!("launch-acme-mnist-mzxkz-7xq2p");
    let template = object["spec"]["containers"][0].clone();
    assert_eq!(template["resources"]["limits"]["nvidia.com/gpu"], "8");
    let containers: Vec<Value> = (0..n)
        .map(|i| {
            let mut c = template.clone();
            c["name"] = json!(format!("worker-{i}"));
            c
        })
        .collect();
    object["spec"]["containers"] = Value::Array(containers);
    let old = object.clone();
    object["metadata"]["labels"]["note"] = json!("relabelled");
    request["oldObject"] = old;
    request["operation"] = json!("UPDATE");
    request["name"] = json!("launch-acme-mnist-mzxkz-7xq2p");
    request["options"] = json!({"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"});
    serde_json::to_vec(&review).unwrap()
}

pub struct Case {
    pub name: String,
    pub body: Vec<u8>,
}

pub fn cases() -> Vec<Case> {
    let mut out: Vec<Case> = [
        ("pod-small", "create-pod-launch-acme-mnist-mzxkz.json"),
        ("job", "create-job-launch-acme-mnist.json"),
        ("volcano-job", "create-vcjob-wandb-job-run42.json"),
        ("pytorchjob", "create-pytorchjob-run42-pytorch-job.json"),
        ("jobset", "create-jobset-ddp.json"),
        ("trainjob", "create-trainjob-llama-ft.json"),
        ("update-pod", "update-pod-wandb-job-run42-worker-0.json"),
        ("pod-not-launch", "create-pod-kaniko-build-abc.json"),
    ]
    .into_iter()
    .map(|(name, file)| Case {
        name: name.into(),
        body: fixture(file),
    })
    .collect();
    out.push(Case {
        name: "rayjob".into(),
        body: rayjob_create(),
    });
    out.push(Case {
        name: "pod-200c-1MiB".into(),
        body: generated_pod(200, 5 * 1024),
    });
    for n in [1_000, 10_000, 50_000] {
        out.push(Case {
            name: format!("pod-dense-{n}c"),
            body: dense_pod(n),
        });
    }
    for n in [1_000, 4_900] {
        out.push(Case {
            name: format!("update-violating-{n}c"),
            body: violating_pod_update(n),
        });
    }
    for n in [1, 10, 100, 1000] {
        out.push(Case {
            name: format!("curve-{n}c"),
            body: generated_pod(n, 5 * 1024),
        });
    }
    out
}
