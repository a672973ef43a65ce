//! Queue limits on real launch workloads, through the review core with the recorded
//! AdmissionReviews (as the API server sends them, after defaulting): pods made by a
//! controller, every container in every role, what runs at once, odd queue names.

mod common;

use common::{
    denial_message, fixture_json, launchgate_command, limits_policy, manifest_path,
    review_response, text, validate_response,
};
use launchgate::Policy;
use launchgate::cluster::NoCluster;
use launchgate::review::{Endpoint, review};
use serde_json::{Value, json};

/// The lines of a denial's message.
fn denial(response: &Value) -> Vec<&str> {
    denial_message(response).lines().collect()
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
    let policy = limits_policy("gpu-queue", WORKLOAD_RULES);
    // The Job: 2 pods at once with 1 GPU each, a 600 s deadline on the Job.
    let mut job = fixture_json("create-job-launch-acme-mnist.json");
    let spec = &mut job["request"]["object"]["spec"];
    spec["parallelism"] = json!(2);
    spec["completions"] = json!(2);
    spec["activeDeadlineSeconds"] = json!(600);
    spec["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!("1");
    assert_eq!(
        validate_response(&policy, &job)["allowed"],
        true,
        "the Job is valid"
    );

    // Its pod as the Job controller creates it: sent by the controller's identity,
    // generateName, no name, the owner reference and the Job's controller-uid label, no
    // pod-level deadline, 1 GPU.
    let mut pod = fixture_json("create-pod-launch-acme-mnist-mzxkz.json");
    pod["request"]["userInfo"] =
        json!({"username": "system:serviceaccount:kube-system:job-controller"});
    pod["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
        json!("1");
    assert!(pod["request"]["object"]["metadata"].get("name").is_none());
    let response = validate_response(&policy, &pod);
    assert_eq!(response["allowed"], true, "{response}");

    // The same pod, owner reference and labels included, sent by a user: the claim is not
    // verifiable, so every rule applies, and the denial says why.
    let mut claimed = pod.clone();
    claimed["request"]["userInfo"] = json!({"username": "alice", "groups": ["team-a"]});
    let response = validate_response(&policy, &claimed);
    let lines = denial(&response);
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines[1].contains("activeDeadlineSeconds is not set"),
        "{lines:#?}"
    );
    assert!(
        lines[2].contains("names Job") && lines[2].contains(r#"sent by user "alice""#),
        "{lines:#?}"
    );

    // The same pod created by hand is a workload of its own: every rule applies.
    let mut bare = pod.clone();
    bare["request"]["object"]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    assert_eq!(
        denial(&validate_response(&policy, &bare)),
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
        denial(&validate_response(&policy, &over)),
        vec![
            r#"queue "gpu-queue": spec.containers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus")"#
        ]
    );
}

#[test]
fn pods_of_volcano_and_pytorch_jobs_are_per_pod_checked_too() {
    let policy = limits_policy("gpu-queue", WORKLOAD_RULES);
    for (api_version, kind, controller, label) in [
        (
            "batch.volcano.sh/v1alpha1",
            "Job",
            "system:serviceaccount:volcano-system:volcano-controllers",
            "volcano.sh/job-name",
        ),
        (
            "kubeflow.org/v1",
            "PyTorchJob",
            "system:serviceaccount:kubeflow:training-operator",
            "training.kubeflow.org/job-name",
        ),
    ] {
        let mut pod = fixture_json("create-pod-wandb-job-run42-worker-0.json");
        pod["request"]["userInfo"] = json!({"username": controller});
        pod["request"]["object"]["metadata"]["labels"][label] = json!("wandb-job-run42");
        pod["request"]["object"]["metadata"]["ownerReferences"] = json!([{
            "apiVersion": api_version, "kind": kind, "name": "wandb-job-run42",
            "uid": "0b6e2b7e-1c0c-4c5e-9a51-0c6d7b1d2f11", "controller": true,
            "blockOwnerDeletion": true
        }]);
        let response = validate_response(&policy, &pod);
        assert_eq!(response["allowed"], true, "{kind}: {response}");
        // An UPDATE of such a pod (a controller removing a finalizer) is not re-judged either.
        let mut update = fixture_json("update-pod-wandb-job-run42-worker-0.json");
        update["request"]["userInfo"] = json!({"username": controller});
        for object in ["object", "oldObject"] {
            update["request"][object]["metadata"]["labels"][label] = json!("wandb-job-run42");
            update["request"][object]["metadata"]["ownerReferences"] =
                pod["request"]["object"]["metadata"]["ownerReferences"].clone();
        }
        let response = validate_response(&policy, &update);
        assert_eq!(response["allowed"], true, "{kind}: {response}");
    }
    // Without the owner reference (as recorded) the Volcano pod is judged as a workload.
    let response = validate_response(
        &policy,
        &fixture_json("create-pod-wandb-job-run42-worker-0.json"),
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
    let mut job = fixture_json("create-job-launch-acme-mnist.json");
    job["request"]["object"]["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("queue");
    job["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "WANDB_LAUNCH_QUEUE_NAME", "value": queue}]);
    let response = review_response(&policy, Endpoint::Mutate, &job);
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
    let mut pod = fixture_json("create-pod-launch-acme-mnist-mzxkz.json");
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
    let response = review_response(&policy, Endpoint::Mutate, &again);
    assert!(
        common::decode_patch(&response).is_none_or(|p| p.0.is_empty()),
        "{response}"
    );
}

/// The W&B minikube queue: `gpus` on the template's (unnamed) container, cpu/memory as fields.
const MINIKUBE_QUEUE: &str = r#"
template: |
  spec:
    template:
      spec:
        containers:
          - image: ${image_uri}
            resources:
              limits: {cpu: 4, memory: 12Gi, nvidia.com/gpu: '{{gpus}}'}
variables:
  gpus: {type: integer, minimum: 0, maximum: 4}
fields:
  - {path: "containers[*].resources.limits.cpu", type: quantity, maximum: "4"}
  - {path: "containers[*].resources.limits.memory", type: quantity, maximum: 12Gi}
"#;

/// The recorded launch Job with 2 GPUs (within the queue) and `extra` containers in `list`.
fn launch_job_with(list: &str, extra: Vec<Value>) -> Value {
    let mut job = fixture_json("create-job-launch-acme-mnist.json");
    let spec = &mut job["request"]["object"]["spec"]["template"]["spec"];
    spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!("2");
    let items = spec[list].as_array().cloned().unwrap_or_default();
    spec[list] = Value::Array(if list == "containers" {
        items.into_iter().chain(extra).collect()
    } else {
        extra
    });
    job
}

fn container(name: &str, limits: Value) -> Value {
    json!({"name": name, "image": "busybox", "resources": {"limits": limits}})
}

#[test]
fn every_container_in_every_role_is_held_to_the_limits() {
    let policy = limits_policy("gpu-queue", MINIKUBE_QUEUE);
    let base = launch_job_with("containers", vec![]);
    assert_eq!(validate_response(&policy, &base)["allowed"], true);
    let sidecar = |limits: Value| {
        let mut c = container("proxy", limits);
        c["restartPolicy"] = json!("Always");
        c
    };
    let cases = [
        (
            "containers",
            container("second", json!({"nvidia.com/gpu": "8"})),
            r#"queue "gpu-queue": spec.template.spec.containers[1].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus", which holds every container)"#,
        ),
        (
            "initContainers",
            container("prepare", json!({"nvidia.com/gpu": "8"})),
            r#"queue "gpu-queue": spec.template.spec.initContainers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus", which holds every container)"#,
        ),
        (
            "initContainers",
            sidecar(json!({"memory": "64Gi"})),
            r#"queue "gpu-queue": spec.template.spec.initContainers[0].resources.limits.memory=64Gi exceeds maximum 12Gi (field "containers[*].resources.limits.memory", which holds every container)"#,
        ),
    ];
    for (list, extra, expected) in cases {
        let job = launch_job_with(list, vec![extra.clone()]);
        assert_eq!(
            denial(&validate_response(&policy, &job)),
            vec![expected],
            "{extra}"
        );
        // Within the limits they are fine.
        let mut fine = extra.clone();
        fine["resources"]["limits"] = json!({"nvidia.com/gpu": "1", "memory": "1Gi"});
        let job = launch_job_with(list, vec![fine]);
        assert_eq!(validate_response(&policy, &job)["allowed"], true, "{list}");
    }
}

#[test]
fn the_template_container_is_the_training_container_wherever_a_sidecar_sits() {
    let policy = limits_policy("gpu-queue", MINIKUBE_QUEUE);
    // A mesh injector put its proxy first; the training container is second.
    let mut job = launch_job_with("containers", vec![]);
    let spec = &mut job["request"]["object"]["spec"]["template"]["spec"];
    let training = spec["containers"][0].clone();
    spec["containers"] = json!([container("istio-proxy", json!({"cpu": "2"})), training]);
    spec["containers"][1]["resources"]["limits"]["nvidia.com/gpu"] = json!("8");
    assert_eq!(
        denial(&validate_response(&policy, &job)),
        vec![
            r#"queue "gpu-queue": spec.template.spec.containers[1].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus")"#
        ]
    );
}

/// A Volcano queue: CPU-only master, GPU workers, the containers named.
const VOLCANO_QUEUE: &str = r#"
template: |
  apiVersion: batch.volcano.sh/v1alpha1
  kind: Job
  spec:
    tasks:
      - name: master
        template:
          spec:
            containers:
              - name: master
                resources: {limits: {nvidia.com/gpu: '{{master_gpus}}'}}
      - name: worker
        template:
          spec:
            containers:
              - name: worker
                resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}
variables:
  master_gpus: {type: integer, maximum: 0}
  gpus: {type: integer, minimum: 1, maximum: 4}
"#;

#[test]
fn volcano_tasks_bind_by_name_and_an_extra_task_is_held_too() {
    let policy = limits_policy("gpu-queue", VOLCANO_QUEUE);
    let mut review = fixture_json("create-vcjob-wandb-job-run42.json");
    let tasks = review["request"]["object"]["spec"]["tasks"]
        .as_array_mut()
        .unwrap();
    // Workers listed first: positions differ from the template, names do not.
    tasks.reverse();
    tasks[0]["template"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"nvidia.com/gpu": "4"}});
    assert_eq!(validate_response(&policy, &review)["allowed"], true);

    // An extra task is not in the template, and still cannot take more than any task may.
    let mut extra = review["request"]["object"]["spec"]["tasks"][0].clone();
    extra["name"] = json!("evaluator");
    extra["template"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"nvidia.com/gpu": "8"}});
    review["request"]["object"]["spec"]["tasks"]
        .as_array_mut()
        .unwrap()
        .push(extra);
    assert_eq!(
        denial(&validate_response(&policy, &review)),
        vec![
            r#"queue "gpu-queue": spec.tasks[2].template.spec.containers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus", which holds every container)"#
        ]
    );

    // A worker pod made by the Volcano controller is held to the worker's limits, not the
    // master's.
    let mut pod = fixture_json("create-pod-wandb-job-run42-worker-0.json");
    pod["request"]["object"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"nvidia.com/gpu": "2"}});
    assert_eq!(
        validate_response(&policy, &pod)["allowed"],
        true,
        "worker with 2 GPUs"
    );
    let mut master = fixture_json("create-pod-wandb-job-run42-master-0.json");
    master["request"]["object"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"nvidia.com/gpu": "2"}});
    assert_eq!(
        denial(&validate_response(&policy, &master)),
        vec![
            r#"queue "gpu-queue": spec.containers[0].resources.limits["nvidia.com/gpu"]=2 exceeds maximum 0 (variable "master_gpus")"#
        ]
    );
}

#[test]
fn the_cli_queue_flag_with_such_a_name_writes_the_valid_label_too() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    let queue = "Team A GPU queue";
    std::fs::write(&config, format!("queues:\n  {queue}: {{}}\n")).unwrap();
    let out = launchgate_command()
        .args([
            "mutate",
            "-f",
            &manifest_path("job-demo.yaml"),
            "--queue",
            queue,
        ])
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let job: Value = serde_yaml::from_slice(&out.stdout).unwrap();
    for meta in [&job["metadata"], &job["spec"]["template"]["metadata"]] {
        let label = meta["labels"]["launchgate.io/queue"].as_str().unwrap();
        assert!(is_valid_label_value(label), "{label:?}");
        assert_eq!(meta["annotations"]["launchgate.io/queue-name"], queue);
    }
}
