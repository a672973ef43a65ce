//! Queue limits on real launch workloads, through the review core with the recorded
//! AdmissionReviews (as the API server sends them, after defaulting): pods made by a
//! controller, every container in every role, what runs at once, odd queue names.

mod common;

use launchgate::Policy;
use launchgate::cluster::NoCluster;
use launchgate::review::{Endpoint, review};
use serde_json::{Value, json};
use std::path::PathBuf;

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/admission")
        .join(name);
    serde_json::from_slice(&std::fs::read(path).expect("fixture exists")).expect("fixture is JSON")
}

/// A policy whose default queue `gpu-queue` has `limits_yaml` as its `limits:`.
fn policy(limits_yaml: &str) -> Policy {
    let limits: String = limits_yaml
        .lines()
        .map(|l| format!("      {l}\n"))
        .collect();
    let yaml = format!(
        "defaultQueue: gpu-queue\nqueues:\n  gpu-queue:\n    pytorch: {{enabled: false}}\n    limits:\n{limits}"
    );
    Policy::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

/// The `response` of `endpoint` for `request_review`.
fn answer(policy: &Policy, endpoint: Endpoint, request_review: &Value) -> Value {
    let body = serde_json::to_vec(request_review).unwrap();
    let outcome = review(policy, endpoint, &body, &NoCluster).expect("a valid AdmissionReview");
    let mut response: Value = serde_json::from_slice(&outcome.body).unwrap();
    response["response"].take()
}

fn validate(policy: &Policy, request_review: &Value) -> Value {
    answer(policy, Endpoint::Validate, request_review)
}

fn denial(response: &Value) -> Vec<&str> {
    assert_eq!(response["allowed"], false, "expected a denial: {response}");
    response["status"]["message"]
        .as_str()
        .unwrap()
        .lines()
        .collect()
}

/// Workload rules a launch Job satisfies but its pods, on their own, cannot: the deadline is
/// on the Job (`spec.activeDeadlineSeconds`), the GPU total needs both pods, the strict
/// template fixes the Job's `backoffLimit`.
const WORKLOAD_RULES: &str = r#"
strict: true
template: |
  spec:
    backoffLimit: 0
    template:
      spec:
        containers:
          - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}
variables:
  gpus: {type: integer, minimum: 0, maximum: 4}
totals:
  nvidia.com/gpu: {minimum: 2, maximum: 8}
maxActiveDeadlineSeconds: 3600
"#;

#[test]
fn pods_made_by_a_validated_job_are_not_re_judged_on_workload_rules() {
    let policy = policy(WORKLOAD_RULES);
    // The Job: 2 pods at once with 1 GPU each, a 600 s deadline on the Job.
    let mut job = fixture("create-job-launch-acme-mnist.json");
    let spec = &mut job["request"]["object"]["spec"];
    spec["parallelism"] = json!(2);
    spec["completions"] = json!(2);
    spec["activeDeadlineSeconds"] = json!(600);
    spec["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!("1");
    assert_eq!(validate(&policy, &job)["allowed"], true, "the Job is valid");

    // Its pod as the Job controller creates it: generateName, no name, the owner reference,
    // no pod-level deadline, 1 GPU.
    let mut pod = fixture("create-pod-launch-acme-mnist-mzxkz.json");
    pod["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
        json!("1");
    assert!(pod["request"]["object"]["metadata"].get("name").is_none());
    let response = validate(&policy, &pod);
    assert_eq!(response["allowed"], true, "{response}");

    // The same pod created by hand is a workload of its own: every rule applies.
    let mut bare = pod.clone();
    bare["request"]["object"]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    assert_eq!(
        denial(&validate(&policy, &bare)),
        vec![
            r#"queue "gpu-queue": total nvidia.com/gpu over all pods=1 is below minimum 2 (totals) (pod: 1 × 1)"#,
            r#"queue "gpu-queue": activeDeadlineSeconds is not set; the queue allows at most 3600 (maxActiveDeadlineSeconds), so set it on the workload or on every pod template"#,
        ]
    );

    // Per-pod rules still hold for a controller-made pod.
    let mut over = pod.clone();
    over["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
        json!("8");
    assert_eq!(
        denial(&validate(&policy, &over)),
        vec![
            r#"queue "gpu-queue": spec.containers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus")"#
        ]
    );
}

#[test]
fn pods_of_volcano_and_pytorch_jobs_are_per_pod_checked_too() {
    let policy = policy(WORKLOAD_RULES);
    for (api_version, kind) in [
        ("batch.volcano.sh/v1alpha1", "Job"),
        ("kubeflow.org/v1", "PyTorchJob"),
    ] {
        let mut pod = fixture("create-pod-wandb-job-run42-worker-0.json");
        pod["request"]["object"]["metadata"]["ownerReferences"] = json!([{
            "apiVersion": api_version, "kind": kind, "name": "wandb-job-run42",
            "uid": "0b6e2b7e-1c0c-4c5e-9a51-0c6d7b1d2f11", "controller": true,
            "blockOwnerDeletion": true
        }]);
        let response = validate(&policy, &pod);
        assert_eq!(response["allowed"], true, "{kind}: {response}");
        // An UPDATE of such a pod (a controller removing a finalizer) is not re-judged either.
        let mut update = fixture("update-pod-wandb-job-run42-worker-0.json");
        for object in ["object", "oldObject"] {
            update["request"][object]["metadata"]["ownerReferences"] =
                pod["request"]["object"]["metadata"]["ownerReferences"].clone();
        }
        let response = validate(&policy, &update);
        assert_eq!(response["allowed"], true, "{kind}: {response}");
    }
    // Without the owner reference (as recorded) the Volcano pod is judged as a workload.
    let response = validate(
        &policy,
        &fixture("create-pod-wandb-job-run42-worker-0.json"),
    );
    assert_eq!(response["allowed"], false, "{response}");
}

/// A Kubernetes label value, checked independently of launchgate's own code.
fn is_valid_label_value(v: &str) -> bool {
    let bytes = v.as_bytes();
    v.is_empty()
        || (v.len() <= 63
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b))
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric())
}

#[test]
fn a_queue_name_that_is_no_label_value_is_labelled_validly_and_still_resolves() {
    let queue = "Team A — GPU queue for the long-running multi-node training experiments";
    let policy = Policy::from_yaml(&format!(
        "defaultQueue: other\nqueues:\n  other: {{}}\n  {queue}: {{}}\n"
    ))
    .unwrap();
    // The launch Job names its queue through the W&B agent's env var (a label could not hold
    // this name).
    let mut job = fixture("create-job-launch-acme-mnist.json");
    job["request"]["object"]["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("queue");
    job["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "WANDB_LAUNCH_QUEUE_NAME", "value": queue}]);
    let response = answer(&policy, Endpoint::Mutate, &job);
    assert_eq!(response["allowed"], true, "{response}");
    let patch = common::decode_patch(&response).expect("a patch");
    let mut mutated = job["request"]["object"].clone();
    json_patch::patch(&mut mutated, &patch).unwrap();
    let template_meta = mutated["spec"]["template"]["metadata"].clone();
    for meta in [&mutated["metadata"], &template_meta] {
        let label = meta["labels"]["launchgate.io/queue"].as_str().unwrap();
        assert!(is_valid_label_value(label), "{label:?}");
        assert_eq!(meta["annotations"]["launchgate.io/queue-name"], queue);
    }

    // The Job controller copies the template's labels and annotations onto its pods; the
    // label alone leads back to the queue (not to the default queue).
    let mut pod = fixture("create-pod-launch-acme-mnist-mzxkz.json");
    let meta = &mut pod["request"]["object"]["metadata"];
    meta["labels"]["launchgate.io/queue"] = template_meta["labels"]["launchgate.io/queue"].clone();
    meta["annotations"] = template_meta["annotations"].clone();
    let body = serde_json::to_vec(&pod).unwrap();
    let outcome = review(&policy, Endpoint::Mutate, &body, &NoCluster).unwrap();
    assert_eq!(outcome.summary.queue.as_deref(), Some(queue));
    let response: Value = serde_json::from_slice(&outcome.body).unwrap();
    assert!(response["response"].get("warnings").is_none(), "{response}");

    // A second pass over the mutated Job changes nothing.
    let mut again = job.clone();
    again["request"]["object"] = mutated;
    let response = answer(&policy, Endpoint::Mutate, &again);
    assert!(
        common::decode_patch(&response).is_none_or(|p| p.0.is_empty()),
        "{response}"
    );
}
