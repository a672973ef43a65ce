//! Launch mutations against the recorded requests: golden results, idempotency, unknown fields,
//! valid Kubernetes output.
//!
//! Golden files live in tests/golden/<fixture>; regenerate with `UPDATE_GOLDEN=1 cargo test
//! --test mutations` and review the diff.

mod common;

use common::{
    Kind, fixture_request, fixtures, golden_path, kind_of, mutated, template_pointers, templates,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use launchgate::Policy;
use launchgate::admission::AdmissionRequest;
use launchgate::cluster::NoCluster;
use serde_json::{Value, json};
use std::collections::HashSet;

struct Mutated {
    request: AdmissionRequest,
    object: Value,
    patch: json_patch::Patch,
    warnings: Vec<String>,
}

fn mutate_request(policy: &Policy, request: AdmissionRequest) -> Mutated {
    let (object, d) = mutated(policy, &request, &NoCluster);
    Mutated {
        request,
        object,
        patch: d.patch,
        warnings: d.response.warnings,
    }
}

fn mutate_fixture(policy: &Policy, name: &str) -> Mutated {
    mutate_request(policy, fixture_request(name))
}

#[test]
fn every_fixture_matches_its_golden_result() {
    let policy = Policy::embedded_default();
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut mismatches = Vec::new();
    for (name, _) in fixtures() {
        let m = mutate_fixture(&policy, &name);
        let actual = json!({"warnings": m.warnings, "patch": m.patch, "object": m.object});
        let path = golden_path(&name);
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, serde_json::to_string_pretty(&actual).unwrap() + "\n").unwrap();
            continue;
        }
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display())),
        )
        .unwrap();
        if expected != actual {
            mismatches.push(name);
        }
    }
    assert!(
        mismatches.is_empty(),
        "golden mismatch for {mismatches:?}; rerun with UPDATE_GOLDEN=1 and review the diff"
    );
}

#[test]
fn job_demo_gets_backoff_zero_and_ttl_despite_api_default_six() {
    let policy = Policy::embedded_default();
    let before = fixture_request("create-job-demo.json");
    assert_eq!(
        before.object.as_ref().unwrap()["spec"]["backoffLimit"],
        6,
        "the API server defaulted it"
    );
    let m = mutate_fixture(&policy, "create-job-demo.json");
    assert_eq!(m.object["spec"]["backoffLimit"], 0);
    assert_eq!(m.object["spec"]["ttlSecondsAfterFinished"], 60);
    let sc = &m.object["spec"]["template"]["spec"]["containers"][0]["securityContext"];
    assert_eq!(
        sc,
        &json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    assert_eq!(
        m.object["metadata"]["labels"]["launchgate.io/queue"],
        "gpu-queue"
    );
    assert_eq!(
        m.object["spec"]["template"]["metadata"]["labels"]["launchgate.io/queue"],
        "gpu-queue"
    );
    assert_eq!(
        m.object["metadata"]["labels"]["queue"], "k8s-test",
        "user labels kept"
    );
    // The dry-run request gets the same patch.
    let dry = mutate_fixture(&policy, "dryrun-create-job-demo.json");
    assert_eq!(dry.patch, m.patch);
}

#[test]
fn launch_pods_get_the_three_container_fields() {
    let policy = Policy::embedded_default();
    for name in [
        "create-pod-launch-acme-mnist-mzxkz.json",
        "create-pod-wandb-job-run42-master-0.json",
        "create-pod-wandb-job-run42-worker-0.json",
        "create-pod-wandb-job-run42-worker-1.json",
    ] {
        let m = mutate_fixture(&policy, name);
        for c in m.object["spec"]["containers"].as_array().unwrap() {
            let sc = &c["securityContext"];
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
            assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{name}");
            assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{name}");
        }
        assert_eq!(
            m.object["metadata"]["labels"]["wandb.ai/monitor"], "true",
            "{name}: wandb labels kept"
        );
    }
}

#[test]
fn kaniko_build_pod_gets_no_patch() {
    let m = mutate_fixture(
        &Policy::embedded_default(),
        "create-pod-kaniko-build-abc.json",
    );
    assert!(m.patch.0.is_empty());
    assert!(m.warnings.is_empty());
}

#[test]
fn acme_mnist_keeps_run_as_user_and_its_own_nfs_volume() {
    let m = mutate_fixture(
        &Policy::embedded_default(),
        "create-job-launch-acme-mnist.json",
    );
    let spec = &m.object["spec"]["template"]["spec"];
    let c = &spec["containers"][0];
    assert_eq!(c["securityContext"]["runAsUser"], 1000);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    // Its own NFS volume is the cache (no second one); /dev/shm is the queue's guardrail.
    assert_eq!(
        spec["volumes"],
        json!([{"name": "nfs-storage", "persistentVolumeClaim": {"claimName": "nfs-pvc"}},
               {"name": "launchgate-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}])
    );
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": "nfs-storage", "mountPath": "/root/.cache"},
               {"name": "launchgate-shm", "mountPath": "/dev/shm"}])
    );
    let env: Vec<&str> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for var in ["HF_HOME", "TORCH_HOME", "XDG_CACHE_HOME"] {
        assert!(env.contains(&var), "{var} points into the shared cache");
    }
    assert_eq!(m.object["spec"]["backoffLimit"], 0, "the user's 0 is kept");
}

/// JSON-pointer prefixes a mutation may touch, per kind: pod templates and documented job
/// fields only.
fn allowed_prefixes(kind: Kind, object: &Value) -> Vec<String> {
    let mut p = vec![
        "/metadata/labels".to_string(),
        "/metadata/annotations".to_string(),
    ];
    match kind {
        Kind::Pod => p.push("/spec".into()),
        Kind::BatchJob => p.extend(
            [
                "/spec/template",
                "/spec/backoffLimit",
                "/spec/ttlSecondsAfterFinished",
                "/spec/podFailurePolicy",
            ]
            .map(String::from),
        ),
        Kind::VolcanoJob => {
            p.extend(template_pointers(object));
            p.extend(
                [
                    "/spec/ttlSecondsAfterFinished",
                    "/spec/maxRetry",
                    "/spec/minAvailable",
                ]
                .map(String::from),
            );
        }
        Kind::PyTorchJob => {
            p.extend(template_pointers(object));
            p.push("/spec/runPolicy".into());
        }
        Kind::JobSet => {
            p.extend(template_pointers(object));
            p.extend(["/spec/ttlSecondsAfterFinished", "/spec/failurePolicy"].map(String::from));
        }
        // Only launchgate's own runtime patch, and env the trainer takes.
        Kind::TrainJob => p.extend(["/spec/runtimePatches", "/spec/trainer/env"].map(String::from)),
    }
    p
}

#[test]
fn every_template_of_every_kind_is_mutated_and_nothing_else() {
    let policy = Policy::embedded_default();
    for (name, count) in [
        ("create-vcjob-wandb-job-run42.json", 2),
        ("create-pytorchjob-run42-pytorch-job.json", 2),
        ("create-jobset-ddp.json", 1),
        ("create-trainjob-llama-ft.json", 1),
    ] {
        let m = mutate_fixture(&policy, name);
        let original = m.request.object.as_ref().unwrap();
        let kind = kind_of(original).unwrap();
        let templates = templates(&m.object);
        assert_eq!(templates.len(), count, "{name}");
        for (at, t) in templates {
            for c in t["spec"]["containers"].as_array().unwrap() {
                // A TrainJob's node container comes from its runtime, which offline cannot be
                // read: no allowPrivilegeEscalation (a privileged runtime would contradict it).
                let expected = if kind == Kind::TrainJob {
                    Value::Null
                } else {
                    Value::Bool(false)
                };
                assert_eq!(
                    c["securityContext"]["allowPrivilegeEscalation"], expected,
                    "{name} {at}"
                );
                assert_eq!(
                    c["securityContext"]["capabilities"]["drop"],
                    json!(["ALL"]),
                    "{name} {at}"
                );
                let mounts = c["volumeMounts"].as_array().expect("cache mounted");
                assert!(
                    mounts.iter().any(|m| m["name"] == "launchgate-cache"),
                    "{name} {at}"
                );
            }
            assert_eq!(t["metadata"]["labels"]["launchgate.io/queue"], "gpu-queue");
        }
        let allowed = allowed_prefixes(kind, original);
        for op in &m.patch.0 {
            let path = op_path(op);
            assert!(
                allowed.iter().any(|p| path.starts_with(p.as_str())),
                "{name}: patch touches {path}"
            );
        }
    }
}

fn op_path(op: &json_patch::PatchOperation) -> String {
    serde_json::to_value(op).unwrap()["path"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_second_pass_gives_an_empty_patch_for_every_fixture() {
    let policy = Policy::embedded_default();
    for (name, _) in fixtures() {
        let first = mutate_fixture(&policy, &name);
        let mut again = first.request.clone();
        again.object = Some(first.object.clone());
        let second = mutate_request(&policy, again);
        assert!(
            second.patch.0.is_empty(),
            "{name}: second pass patched {:?}",
            second.patch
        );
    }
}

#[test]
fn unknown_fields_survive_mutation() {
    let policy = Policy::embedded_default();
    for name in [
        "create-job-demo.json",
        "create-vcjob-wandb-job-run42.json",
        "create-pytorchjob-run42-pytorch-job.json",
        "create-jobset-ddp.json",
        "create-pod-wandb-job-run42-master-0.json",
    ] {
        let mut request = fixture_request(name);
        let obj = request.object.as_mut().unwrap();
        obj["metadata"]["futureMeta"] = json!({"x": [1, 2]});
        obj["spec"]["futureSpecField"] = json!("from-k8s-1.40");
        for at in template_pointers(obj) {
            let spec = &mut obj.pointer_mut(&at).unwrap()["spec"];
            spec["futurePodField"] = json!({"enabled": true});
            spec["containers"][0]["futureContainerField"] = json!(42);
        }
        let m = mutate_request(&policy, request);
        assert_eq!(
            m.object["metadata"]["futureMeta"],
            json!({"x": [1, 2]}),
            "{name}"
        );
        assert_eq!(
            m.object["spec"]["futureSpecField"], "from-k8s-1.40",
            "{name}"
        );
        for (_, t) in templates(&m.object) {
            assert_eq!(
                t["spec"]["futurePodField"],
                json!({"enabled": true}),
                "{name}"
            );
            assert_eq!(
                t["spec"]["containers"][0]["futureContainerField"], 42,
                "{name}"
            );
        }
    }
}

fn assert_unique_names(items: Option<&Value>, what: &str) {
    let mut seen = HashSet::new();
    for item in items.and_then(Value::as_array).into_iter().flatten() {
        let key = item
            .get("name")
            .or_else(|| item.get("mountPath"))
            .cloned()
            .unwrap_or(Value::Null);
        assert!(seen.insert(key.to_string()), "duplicate {what} {key}");
    }
}

#[test]
fn mutated_objects_are_valid_kubernetes() {
    let policy = Policy::embedded_default();
    for (name, _) in fixtures() {
        let m = mutate_fixture(&policy, &name);
        match kind_of(&m.object).unwrap() {
            Kind::Pod => {
                serde_json::from_value::<Pod>(m.object.clone())
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            Kind::BatchJob => {
                serde_json::from_value::<Job>(m.object.clone())
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            _ => {}
        }
        for (at, t) in templates(&m.object) {
            serde_json::from_value::<PodTemplateSpec>(t.clone())
                .unwrap_or_else(|e| panic!("{name} {at}: {e}"));
            let spec = &t["spec"];
            assert_unique_names(spec.get("volumes"), "volume");
            for list in ["containers", "initContainers"] {
                for c in spec
                    .get(list)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    assert_unique_names(c.get("env"), "env");
                    assert_unique_names(c.get("ports"), "port");
                    assert_unique_names(c.get("volumeMounts"), "mount");
                    let paths: Vec<Value> = c
                        .get("volumeMounts")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .map(|m| m["mountPath"].clone())
                        .collect();
                    assert_eq!(
                        paths.len(),
                        paths.iter().collect::<HashSet<_>>().len(),
                        "{name}: duplicate mountPath"
                    );
                }
            }
        }
    }
}
