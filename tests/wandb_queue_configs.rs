//! "Paste your W&B queue config as-is": the W&B docs' minikube GPU queue and Kubeflow
//! PyTorchJob queue, in every shape W&B keeps a queue config in (the object itself, under
//! `kubernetes:`, under `resource_args.kubernetes`, YAML and JSON), limit `{{gpus}}` to 0..4:
//! an 8-GPU workload is denied and a 2-GPU one allowed, for every shape. Queues whose template
//! is a Trainer v2 TrainJob or a JobSet (with or without `apiVersion`) do the same for theirs.

mod common;

use common::{
    check_config, launchgate, launchgate_command, manifest_json, queue_config, queue_config_path,
    run_with_stdin, text,
};
use launchgate::Policy;
use launchgate::admission::AdmissionRequest;
use launchgate::cluster::NoCluster;
use launchgate::review::{Endpoint, decide};
use serde_json::{Value, json};

/// A policy whose only queue has `template` pasted as-is and `gpus` limited to 0..4, in W&B's
/// list form (`[{name, description, schema}]`) or the `{name: schema}` map.
fn policy(template: &str, list_form: bool) -> Policy {
    let schema = json!({"type": "integer", "minimum": 0, "maximum": 4, "default": 1});
    let variables = if list_form {
        json!([{"name": "gpus", "description": "GPUs per pod", "schema": schema}])
    } else {
        json!({"gpus": schema})
    };
    let config = json!({
        "defaultQueue": "gpu-queue",
        "queues": {"gpu-queue": {"limits": {"template": template, "variables": variables}}}
    });
    Policy::from_yaml(&serde_yaml::to_string(&config).unwrap())
        .unwrap_or_else(|e| panic!("config is accepted:\n{e}"))
}

/// The W&B launch Job (8 GPUs as recorded) with `gpus` GPUs.
fn batch_job(gpus: &str) -> Value {
    let mut job = manifest_json("wandb-job.yaml");
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
        json!(gpus);
    job
}

/// The docs' Kubeflow PyTorchJob with `gpus` GPUs in every replica's container.
fn pytorch_job(gpus: &str) -> Value {
    let mut job = manifest_json("ptjob.yaml");
    for replica in ["Master", "Worker"] {
        job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]["containers"][0]["resources"] =
            json!({"limits": {"nvidia.com/gpu": gpus}});
    }
    job
}

/// (allowed, message) of the validating webhook.
fn verdict(policy: &Policy, object: Value) -> (bool, String) {
    let request = AdmissionRequest::synthetic_create(object, Some("wandb")).unwrap();
    let d = decide(policy, Endpoint::Validate, &request, &NoCluster);
    let message = d
        .response
        .status
        .as_ref()
        .map(|s| s.message.clone())
        .unwrap_or_default();
    (d.response.allowed, message)
}

const JOB_DENIED: &str = r#"queue "gpu-queue": spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus")"#;
/// A batch/v1 Job under the PyTorchJob template has no Master or Worker: its container is held
/// by the largest maximum the queue gives any container.
const JOB_DENIED_BY_ENVELOPE: &str = r#"queue "gpu-queue": spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus", which holds every container)"#;
const WORKER_DENIED: &str = r#"queue "gpu-queue": spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus")"#;

fn assert_minikube_queue_enforces(template: &str, list_form: bool) {
    let policy = policy(template, list_form);
    let (allowed, message) = verdict(&policy, batch_job("8"));
    assert!(!allowed, "an 8-GPU Job was allowed");
    assert_eq!(message, JOB_DENIED);
    assert_eq!(verdict(&policy, batch_job("2")), (true, String::new()));
    // The template's pod-template position limits every kind's pod templates.
    let (allowed, message) = verdict(&policy, pytorch_job("8"));
    assert!(!allowed && message.contains(WORKER_DENIED), "{message}");
}

fn assert_kubeflow_queue_enforces(template: &str, list_form: bool) {
    let policy = policy(template, list_form);
    let (allowed, message) = verdict(&policy, pytorch_job("8"));
    assert!(!allowed, "an 8-GPU PyTorchJob was allowed");
    assert!(message.contains(WORKER_DENIED), "{message}");
    assert!(
        message.contains(r#"spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.limits["nvidia.com/gpu"]=8"#),
        "{message}"
    );
    assert_eq!(verdict(&policy, pytorch_job("2")), (true, String::new()));
    let (allowed, message) = verdict(&policy, batch_job("8"));
    assert!(!allowed && message == JOB_DENIED_BY_ENVELOPE, "{message}");
}

#[test]
fn minikube_queue_bare_yaml() {
    assert_minikube_queue_enforces(&queue_config("minikube-gpu.yaml"), false);
}

#[test]
fn minikube_queue_json() {
    assert_minikube_queue_enforces(&queue_config("minikube-gpu.json"), true);
}

#[test]
fn minikube_queue_under_kubernetes() {
    assert_minikube_queue_enforces(&queue_config("minikube-gpu-kubernetes.yaml"), true);
}

#[test]
fn minikube_queue_under_resource_args() {
    assert_minikube_queue_enforces(&queue_config("minikube-gpu-resource-args.json"), false);
}

#[test]
fn kubeflow_queue_under_kubernetes_as_in_the_wandb_docs() {
    assert_kubeflow_queue_enforces(&queue_config("kubeflow-pytorchjob-kubernetes.yaml"), false);
}

#[test]
fn kubeflow_queue_bare() {
    assert_kubeflow_queue_enforces(&queue_config("kubeflow-pytorchjob.yaml"), true);
}

#[test]
fn kubeflow_queue_json() {
    assert_kubeflow_queue_enforces(&queue_config("kubeflow-pytorchjob-kubernetes.json"), true);
}

#[test]
fn kubeflow_queue_under_resource_args() {
    assert_kubeflow_queue_enforces(
        &queue_config("kubeflow-pytorchjob-resource-args.json"),
        false,
    );
}

#[test]
fn kubeflow_queue_without_api_version() {
    let text = queue_config("kubeflow-pytorchjob-kubernetes.yaml");
    let without: String = text
        .lines()
        .filter(|l| !l.contains("apiVersion"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(text, without);
    assert_kubeflow_queue_enforces(&without, true);
}

fn trainjob(gpus: &str) -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "run-1", "labels": {"wandb.ai/monitor": "true"}},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"image": "acme/train:1", "numNodes": 2,
                             "resourcesPerNode": {"limits": {"nvidia.com/gpu": gpus}}}}})
}

fn jobset(gpus: &str) -> Value {
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "run-1", "labels": {"wandb.ai/monitor": "true"}},
        "spec": {"replicatedJobs": [{"name": "workers", "template": {"spec": {
            "parallelism": 2, "completions": 2, "template": {"spec": {"containers": [
                {"name": "train", "image": "acme/train:1",
                 "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}}]}})
}

/// `apiVersion` lines removed: the kind is told by the spec (`trainer`, `replicatedJobs`).
fn without_api_version(text: &str) -> String {
    text.lines()
        .filter(|l| !l.contains("apiVersion"))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn trainjob_queue_limits_the_trainer_resources() {
    let text = queue_config("trainer-trainjob-kubernetes.yaml");
    for template in [text.clone(), without_api_version(&text)] {
        let policy = policy(&template, true);
        let (allowed, message) = verdict(&policy, trainjob("8"));
        assert!(!allowed);
        assert_eq!(
            message,
            r#"queue "gpu-queue": spec.trainer.resourcesPerNode.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus")"#
        );
        assert_eq!(verdict(&policy, trainjob("2")), (true, String::new()));
        // Other kinds are held to the same ceiling through the envelope.
        let (allowed, message) = verdict(&policy, batch_job("8"));
        assert!(
            !allowed && message.contains("which holds every container"),
            "{message}"
        );
    }
}

#[test]
fn jobset_queue_limits_every_replicated_job() {
    let text = queue_config("jobset-kubernetes.yaml");
    for template in [text.clone(), without_api_version(&text)] {
        let policy = policy(&template, false);
        let (allowed, message) = verdict(&policy, jobset("8"));
        assert!(!allowed);
        assert_eq!(
            message,
            r#"queue "gpu-queue": spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus")"#
        );
        assert_eq!(verdict(&policy, jobset("2")), (true, String::new()));
        // Its pod-template position limits every kind's pod templates, and the TrainJob's node.
        assert!(!verdict(&policy, pytorch_job("8")).0);
        assert!(!verdict(&policy, trainjob("8")).0);
    }
}

#[test]
fn structured_template_mapping_works_like_the_text() {
    let text = queue_config("kubeflow-pytorchjob-kubernetes.yaml");
    let mapping: Value = serde_yaml::from_str(&text).unwrap();
    let config = json!({
        "defaultQueue": "gpu-queue",
        "queues": {"gpu-queue": {"limits": {"template": mapping,
            "variables": {"gpus": {"type": "integer", "maximum": 4}}}}}
    });
    let policy = Policy::from_yaml(&serde_yaml::to_string(&config).unwrap()).unwrap();
    assert!(!verdict(&policy, pytorch_job("8")).0);
    assert!(verdict(&policy, pytorch_job("2")).0);
}

fn config_with_template(template: &str) -> String {
    let config = json!({
        "queues": {"team-a/k8s-gpu": {"limits": {"template": template,
            "variables": [{"name": "gpus", "schema": {"type": "integer", "maximum": 4}}]}}}
    });
    serde_yaml::to_string(&config).unwrap()
}

#[test]
fn check_config_rejects_a_template_of_unknown_kind_naming_queue_and_variable() {
    let tfjob = queue_config("kubeflow-pytorchjob-kubernetes.yaml")
        .replace("kind: PyTorchJob", "kind: TFJob")
        .replace("pytorchReplicaSpecs", "tfReplicaSpecs");
    let out = check_config(&config_with_template(&tfjob));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!text(&out.stdout).contains("ok"));
    assert!(
        err.contains(r#"queues.team-a/k8s-gpu.limits.template: kubernetes: kind "TFJob" of apiVersion "kubeflow.org/v1" is not a workload kind launchgate checks"#),
        "{err}"
    );
    assert!(
        err.contains(r#"variable "gpus" would never be checked"#),
        "{err}"
    );
}

#[test]
fn check_config_rejects_a_variable_no_check_reads_naming_queue_and_variable() {
    // `containers` directly under the Job's pod template (no `spec:` in between): no pod
    // has it there, so `{{gpus}}` would limit nothing.
    let template = "spec:\n  template:\n    containers:\n      - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}\n";
    let out = check_config(&config_with_template(template));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(r#"queues.team-a/k8s-gpu.limits.template: {{gpus}} at spec.template.containers[0].resources.limits["nvidia.com/gpu"]"#)
            && err.contains(r#"no check would ever read variable "gpus""#),
        "{err}"
    );
    // The same config written correctly is ok.
    let out = check_config(&config_with_template(&queue_config("minikube-gpu.yaml")));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn import_queue_turns_a_terraform_queue_into_a_snippet_that_enforces_the_limit() {
    let out = run_with_stdin(
        launchgate_command().args(["import-queue", "-"]),
        queue_config("terraform-show.json").as_bytes(),
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // One line per limit, before anything is installed.
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        vec![
            r#"enforces acme/kubeflow-gpu: variable "gpus" (integer 0..4): spec.containers[0].resources.limits["nvidia.com/gpu"] of the Master pod template; spec.containers[0].resources.limits["nvidia.com/gpu"] of the Worker pod template"#
        ]
    );
    let snippet = String::from_utf8(out.stdout).unwrap();
    let ok = check_config(&snippet);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    // The imported queue, selected by the agent's entity and queue env, denies 8 GPUs.
    let policy = Policy::from_yaml(&snippet).unwrap();
    let with_env = |gpus: &str| {
        let mut job = pytorch_job(gpus);
        for replica in ["Master", "Worker"] {
            job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]["containers"][0]["env"] = json!([
                {"name": "WANDB_LAUNCH_QUEUE_NAME", "value": "kubeflow-gpu"},
                {"name": "WANDB_LAUNCH_QUEUE_ENTITY", "value": "acme"}
            ]);
        }
        job
    };
    let (allowed, message) = verdict(&policy, with_env("8"));
    assert!(!allowed, "8 GPUs allowed");
    assert!(
        message.contains(r#"queue "kubeflow-gpu": spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4"#),
        "{message}"
    );
    assert_eq!(verdict(&policy, with_env("2")), (true, String::new()));
}

#[test]
fn import_queue_of_a_ui_config_names_the_variable_that_needs_a_schema() {
    let out = launchgate(&[
        "import-queue",
        &queue_config_path("minikube-gpu.yaml"),
        "--name",
        "gpu-queue",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("queues.gpu-queue.limits.variables.gpus.type: missing `type`"),
        "{stderr}"
    );
    // The template is the config as written.
    let snippet: Value = serde_yaml::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(
        snippet["queues"]["gpu-queue"]["limits"]["template"],
        json!(queue_config("minikube-gpu.yaml"))
    );
}
