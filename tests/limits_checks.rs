//! Queue limits through the review core: value types and unit forms, absent values,
//! per-workload totals over Volcano tasks / PyTorchJob replicas / Job parallelism, the
//! enforcement modes, UPDATE semantics, the strict template contract and the guardrails.

mod common;

use common::{denial_message, fixture_json, limits_policy, validate_response};
use launchgate::Policy;
use launchgate::cluster::NoCluster;
use launchgate::review::{Endpoint, review};
use serde_json::{Value, json};

/// The validating webhook's `response`, which never carries a patch.
fn validate(policy: &Policy, request_review: &Value) -> Value {
    let response = validate_response(policy, request_review);
    assert!(response.get("patch").is_none(), "validate never patches");
    response
}

fn warnings(response: &Value) -> Vec<&str> {
    response["warnings"]
        .as_array()
        .map(|w| w.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

const TYPED_QUEUE: &str = r#"
template: |
  spec:
    template:
      metadata:
        annotations:
          launchgate.io/learning-rate: '{{lr}}'
      spec:
        nodeSelector:
          node.kubernetes.io/instance-type: '{{instance}}'
        containers:
          - image: ${image_uri}
            resources:
              limits:
                cpu: '{{cpu}}'
                memory: '{{memory}}'
                nvidia.com/gpu: '{{gpus}}'
variables:
  gpus: {type: integer, minimum: 0, maximum: 4}
  cpu: {type: quantity, maximum: 4}
  memory: {type: quantity, minimum: 1Gi, maximum: 12Gi}
  instance: {type: string, enum: [ml.m4.xlarge, ml.p3.xlarge]}
  lr: {type: number, minimum: 0.0001, maximum: 0.1}
"#;

const GPU: &str = r#"spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]"#;
const MEMORY: &str = "spec.template.spec.containers[0].resources.limits.memory";
const CPU: &str = "spec.template.spec.containers[0].resources.limits.cpu";
const INSTANCE: &str = r#"spec.template.spec.nodeSelector["node.kubernetes.io/instance-type"]"#;
const LEARNING_RATE: &str = r#"spec.template.metadata.annotations["launchgate.io/learning-rate"]"#;

/// The recorded launch Job, within every limit of [`TYPED_QUEUE`].
fn typed_job() -> Value {
    let mut review = fixture_json("create-job-launch-acme-mnist.json");
    let template = &mut review["request"]["object"]["spec"]["template"];
    template["spec"]["containers"][0]["resources"]["limits"] =
        json!({"cpu": "4", "memory": "12Gi", "nvidia.com/gpu": "2"});
    template["spec"]["nodeSelector"] = json!({"node.kubernetes.io/instance-type": "ml.p3.xlarge"});
    template["metadata"]["annotations"] = json!({"launchgate.io/learning-rate": "0.01"});
    review
}

fn set(review: &mut Value, pointer: &str, value: Value) {
    let object = &mut review["request"]["object"];
    match value {
        Value::Null => {
            let (parent, key) = pointer.rsplit_once('/').unwrap();
            let key = key.replace("~1", "/").replace("~0", "~");
            let removed = object
                .pointer_mut(parent)
                .unwrap()
                .as_object_mut()
                .unwrap()
                .remove(&key);
            assert!(removed.is_some(), "{pointer} was there to remove");
        }
        value => {
            *object
                .pointer_mut(pointer)
                .unwrap_or_else(|| panic!("{pointer}")) = value
        }
    }
}

const GPU_POINTER: &str = "/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu";
const MEMORY_POINTER: &str = "/spec/template/spec/containers/0/resources/limits/memory";
const CPU_POINTER: &str = "/spec/template/spec/containers/0/resources/limits/cpu";
const INSTANCE_POINTER: &str = "/spec/template/spec/nodeSelector/node.kubernetes.io~1instance-type";
const LR_POINTER: &str = "/spec/template/metadata/annotations/launchgate.io~1learning-rate";

#[test]
fn typed_variables_with_unit_forms() {
    let policy = limits_policy("gpu-queue", TYPED_QUEUE);
    assert_eq!(
        validate(&policy, &typed_job())["allowed"],
        true,
        "the base job is within limits"
    );
    let q = r#"queue "gpu-queue": "#;
    let cases: Vec<(&str, Value, Option<String>)> = vec![
        (GPU_POINTER, json!("4"), None),
        (GPU_POINTER, json!(3), None),
        (
            GPU_POINTER,
            json!("5"),
            Some(format!(r#"{q}{GPU}=5 exceeds maximum 4 (variable "gpus")"#)),
        ),
        (
            GPU_POINTER,
            json!("2.5"),
            Some(format!(
                r#"{q}{GPU}=2.5 is not an integer (variable "gpus")"#
            )),
        ),
        (
            GPU_POINTER,
            json!(2.5),
            Some(format!(
                r#"{q}{GPU}=2.5 is not an integer (variable "gpus")"#
            )),
        ),
        (
            GPU_POINTER,
            json!("abc"),
            Some(format!(
                r#"{q}{GPU}=abc is not an integer (variable "gpus")"#
            )),
        ),
        (
            GPU_POINTER,
            json!("-1"),
            Some(format!(
                r#"{q}{GPU}=-1 is below minimum 0 (variable "gpus")"#
            )),
        ),
        (CPU_POINTER, json!("4000m"), None),
        (CPU_POINTER, json!(4), None),
        (CPU_POINTER, json!("3.5"), None),
        (
            CPU_POINTER,
            json!("4001m"),
            Some(format!(
                r#"{q}{CPU}=4001m exceeds maximum 4 (variable "cpu")"#
            )),
        ),
        (
            CPU_POINTER,
            json!("1k"),
            Some(format!(r#"{q}{CPU}=1k exceeds maximum 4 (variable "cpu")"#)),
        ),
        (MEMORY_POINTER, json!("12884901888"), None),
        (MEMORY_POINTER, json!("12288Mi"), None),
        (MEMORY_POINTER, json!("12.884901888G"), None),
        (
            MEMORY_POINTER,
            json!("13000Mi"),
            Some(format!(
                r#"{q}{MEMORY}=13000Mi exceeds maximum 12Gi (variable "memory")"#
            )),
        ),
        (
            MEMORY_POINTER,
            json!("13G"),
            Some(format!(
                r#"{q}{MEMORY}=13G exceeds maximum 12Gi (variable "memory")"#
            )),
        ),
        (MEMORY_POINTER, json!("1e10"), None),
        (
            MEMORY_POINTER,
            json!("0.5Gi"),
            Some(format!(
                r#"{q}{MEMORY}=0.5Gi is below minimum 1Gi (variable "memory")"#
            )),
        ),
        (
            MEMORY_POINTER,
            json!("12 Gi"),
            Some(format!(
                r#"{q}{MEMORY}="12 Gi" is not a valid quantity (unknown quantity suffix " Gi" (expected one of n u m k M G T P E Ki Mi Gi Ti Pi Ei or an exponent like e3)) (variable "memory")"#
            )),
        ),
        (INSTANCE_POINTER, json!("ml.m4.xlarge"), None),
        (
            INSTANCE_POINTER,
            json!("ml.p4d.24xlarge"),
            Some(format!(
                r#"{q}{INSTANCE}="ml.p4d.24xlarge" is not one of "ml.m4.xlarge", "ml.p3.xlarge" (variable "instance")"#
            )),
        ),
        (LR_POINTER, json!("1e-2"), None),
        (
            LR_POINTER,
            json!("0.5"),
            Some(format!(
                r#"{q}{LEARNING_RATE}=0.5 exceeds maximum 0.1 (variable "lr")"#
            )),
        ),
        (
            LR_POINTER,
            json!("fast"),
            Some(format!(
                r#"{q}{LEARNING_RATE}=fast is not a number (variable "lr")"#
            )),
        ),
    ];
    for (pointer, value, expected) in cases {
        let mut review = typed_job();
        set(&mut review, pointer, value.clone());
        let response = validate(&policy, &review);
        match expected {
            None => assert_eq!(response["allowed"], true, "{pointer}={value}: {response}"),
            Some(message) => assert_eq!(denial_message(&response), message, "{pointer}={value}"),
        }
    }
}

#[test]
fn absent_values_are_allowed_unless_required() {
    let mut review = typed_job();
    set(&mut review, GPU_POINTER, Value::Null);
    set(&mut review, INSTANCE_POINTER, Value::Null);
    let optional = limits_policy("gpu-queue", TYPED_QUEUE);
    assert_eq!(validate(&optional, &review)["allowed"], true);

    let required = limits_policy(
        "gpu-queue",
        &TYPED_QUEUE.replace("maximum: 4}\n  cpu", "maximum: 4, required: true}\n  cpu"),
    );
    assert_eq!(
        denial_message(&validate(&required, &review)),
        format!(r#"queue "gpu-queue": {GPU} is missing (variable "gpus" is required)"#)
    );
}

#[test]
fn all_violations_are_reported_together_in_a_fixed_order() {
    let policy = limits_policy("gpu-queue", TYPED_QUEUE);
    let mut review = typed_job();
    set(&mut review, GPU_POINTER, json!("8"));
    set(&mut review, MEMORY_POINTER, json!("13000Mi"));
    set(&mut review, INSTANCE_POINTER, json!("ml.p4d.24xlarge"));
    let response = validate(&policy, &review);
    let lines: Vec<&str> = denial_message(&response).lines().collect();
    assert_eq!(
        lines,
        vec![
            format!(r#"queue "gpu-queue": {GPU}=8 exceeds maximum 4 (variable "gpus")"#),
            format!(
                r#"queue "gpu-queue": {INSTANCE}="ml.p4d.24xlarge" is not one of "ml.m4.xlarge", "ml.p3.xlarge" (variable "instance")"#
            ),
            format!(
                r#"queue "gpu-queue": {MEMORY}=13000Mi exceeds maximum 12Gi (variable "memory")"#
            ),
        ]
    );
}

const GPU_TOTALS_QUEUE: &str = r#"
template: "spec: {template: {spec: {containers: [{resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}}]}}}"
variables:
  gpus: {type: integer, minimum: 0, maximum: 4}
totals:
  nvidia.com/gpu: {maximum: 8}
"#;

fn set_task_gpus(review: &mut Value, pointer_to_template: &str, gpus: Value) {
    let container = review["request"]["object"]
        .pointer_mut(&format!("{pointer_to_template}/spec/containers/0"))
        .unwrap();
    container["resources"] = json!({"limits": {"nvidia.com/gpu": gpus}});
}

#[test]
fn volcano_job_total_is_replicas_times_per_pod_over_tasks() {
    let policy = limits_policy("gpu-queue", GPU_TOTALS_QUEUE);
    let mut review = fixture_json("create-vcjob-wandb-job-run42.json");
    set_task_gpus(&mut review, "/spec/tasks/0/template", json!("4"));
    set_task_gpus(&mut review, "/spec/tasks/1/template", json!("4"));
    assert_eq!(
        denial_message(&validate(&policy, &review)),
        r#"queue "gpu-queue": total nvidia.com/gpu over all pods=12 exceeds maximum 8 (totals) (spec.tasks[0].template: 1 × 4, spec.tasks[1].template: 2 × 4)"#
    );
    // One worker fewer: 1×4 + 1×4 = 8.
    review["request"]["object"]["spec"]["tasks"][1]["replicas"] = json!(1);
    assert_eq!(validate(&policy, &review)["allowed"], true);
    // The template variable applies to every task's pod template.
    set_task_gpus(&mut review, "/spec/tasks/1/template", json!(6));
    assert_eq!(
        denial_message(&validate(&policy, &review)),
        r#"queue "gpu-queue": spec.tasks[1].template.spec.containers[0].resources.limits["nvidia.com/gpu"]=6 exceeds maximum 4 (variable "gpus")
queue "gpu-queue": total nvidia.com/gpu over all pods=10 exceeds maximum 8 (totals) (spec.tasks[0].template: 1 × 4, spec.tasks[1].template: 1 × 6)"#
    );
}

#[test]
fn pytorchjob_total_is_replicas_times_per_pod_over_replica_specs() {
    let policy = limits_policy("gpu-queue", GPU_TOTALS_QUEUE);
    let mut review = fixture_json("create-pytorchjob-run42-pytorch-job.json");
    set_task_gpus(
        &mut review,
        "/spec/pytorchReplicaSpecs/Master/template",
        json!("3"),
    );
    set_task_gpus(
        &mut review,
        "/spec/pytorchReplicaSpecs/Worker/template",
        json!("3"),
    );
    assert_eq!(
        denial_message(&validate(&policy, &review)),
        r#"queue "gpu-queue": total nvidia.com/gpu over all pods=9 exceeds maximum 8 (totals) (spec.pytorchReplicaSpecs.Master.template: 1 × 3, spec.pytorchReplicaSpecs.Worker.template: 2 × 3)"#
    );
    set_task_gpus(
        &mut review,
        "/spec/pytorchReplicaSpecs/Worker/template",
        json!("2"),
    );
    assert_eq!(validate(&policy, &review)["allowed"], true, "1×3 + 2×2 = 7");
}

#[test]
fn batch_job_total_counts_the_pods_that_run_at_once() {
    let policy = limits_policy("gpu-queue", GPU_TOTALS_QUEUE);
    let mut review = fixture_json("create-job-launch-acme-mnist.json");
    set(&mut review, GPU_POINTER, json!("4"));
    assert_eq!(validate(&policy, &review)["allowed"], true);
    // The API server defaulted completions to 1: parallelism 3 still runs one pod at a time.
    review["request"]["object"]["spec"]["parallelism"] = json!(3);
    assert_eq!(validate(&policy, &review)["allowed"], true);
    // min(parallelism 3, completions 5) = 3 pods at once.
    review["request"]["object"]["spec"]["completions"] = json!(5);
    assert_eq!(
        denial_message(&validate(&policy, &review)),
        r#"queue "gpu-queue": total nvidia.com/gpu over all pods=12 exceeds maximum 8 (totals) (spec.template: 3 × 4)"#
    );
}

const EIGHT_GPUS: &str = r#"queue "gpu-queue": spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus")"#;

#[test]
fn warn_mode_allows_with_the_violations_as_warnings() {
    let policy = limits_policy(
        "gpu-queue",
        &format!("enforcement: warn\n{GPU_TOTALS_QUEUE}"),
    );
    let response = validate(&policy, &fixture_json("create-job-launch-acme-mnist.json"));
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response.get("status").is_none(), "{response}");
    assert_eq!(warnings(&response), vec![EIGHT_GPUS]);
}

#[test]
fn audit_mode_allows_and_records_the_violations_in_an_audit_annotation() {
    let policy = limits_policy(
        "gpu-queue",
        &format!("enforcement: audit\n{GPU_TOTALS_QUEUE}"),
    );
    let body = serde_json::to_vec(&fixture_json("create-job-launch-acme-mnist.json")).unwrap();
    let outcome = review(&policy, Endpoint::Validate, &body, &NoCluster).unwrap();
    assert_eq!(
        outcome
            .summary
            .audit_violations()
            .map(|v| v.message.as_str())
            .collect::<Vec<_>>(),
        vec![EIGHT_GPUS]
    );
    let response: Value = serde_json::from_slice(&outcome.body).unwrap();
    let response = &response["response"];
    assert_eq!(response["allowed"], true, "{response}");
    assert!(
        warnings(response).is_empty(),
        "audit is silent towards the user: {response}"
    );
    assert_eq!(response["auditAnnotations"]["limit-violations"], EIGHT_GPUS);
}

const ONE_GPU_QUEUE: &str = r#"
fields:
  - {path: 'containers[*].resources.limits["nvidia.com/gpu"]', type: integer, maximum: 1}
"#;

#[test]
fn update_that_leaves_an_existing_violation_unchanged_is_allowed_with_a_warning() {
    // The recorded `kubectl label job demo extra=1`: 2 GPUs before and after.
    let policy = limits_policy("k8s-test", ONE_GPU_QUEUE);
    let response = validate(&policy, &fixture_json("update-job-demo.json"));
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(
        warnings(&response),
        vec![
            r#"queue "k8s-test": spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]=2 exceeds maximum 1 (field "containers[*].resources.limits[\"nvidia.com/gpu\"]") (already so before this update; allowed because this update does not make it worse)"#
        ]
    );
}

#[test]
fn update_that_makes_an_object_violate_is_denied() {
    let policy = limits_policy("k8s-test", ONE_GPU_QUEUE);
    let mut review = fixture_json("update-job-demo.json");
    set(&mut review, GPU_POINTER, json!("3"));
    assert_eq!(
        denial_message(&validate(&policy, &review)),
        r#"queue "k8s-test": spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]=3 exceeds maximum 1 (field "containers[*].resources.limits[\"nvidia.com/gpu\"]")"#
    );
    // Fixing the violation is of course allowed, silently.
    set(&mut review, GPU_POINTER, json!("1"));
    let response = validate(&policy, &review);
    assert_eq!(response["allowed"], true);
    assert!(warnings(&response).is_empty(), "{response}");
    // The same object as a CREATE (no old object) is denied.
    let mut create = fixture_json("update-job-demo.json");
    create["request"]["operation"] = json!("CREATE");
    create["request"]
        .as_object_mut()
        .unwrap()
        .remove("oldObject");
    assert_eq!(validate(&policy, &create)["allowed"], false);
}

const STRICT_VOLCANO_QUEUE: &str = r#"
strict: true
template: |
  apiVersion: batch.volcano.sh/v1alpha1
  kind: Job
  metadata:
    name: wandb-job-${run_id}
  spec:
    schedulerName: volcano
    tasks:
      - name: master
        template:
          spec:
            containers:
              - image: ${image_uri}
                resources:
                  limits:
                    nvidia.com/gpu: '{{gpus}}'
            restartPolicy: OnFailure
variables:
  gpus: {type: integer, minimum: 0, maximum: 4}
"#;

#[test]
fn strict_queue_rejects_changes_to_fixed_template_values() {
    let policy = limits_policy("gpu-queue", STRICT_VOLCANO_QUEUE);
    let mut review = fixture_json("create-vcjob-wandb-job-run42.json");
    assert_eq!(
        validate(&policy, &review)["allowed"],
        true,
        "the recorded job follows the template"
    );
    review["request"]["object"]["spec"]["schedulerName"] = json!("default-scheduler");
    review["request"]["object"]["spec"]["tasks"][1]["template"]["spec"]["restartPolicy"] =
        json!("Always");
    review["request"]["object"]["metadata"]["name"] = json!("my-job");
    assert_eq!(
        denial_message(&validate(&policy, &review)),
        r#"queue "gpu-queue": metadata.name="my-job" does not match the queue template's "wandb-job-${...}" (strict)
queue "gpu-queue": spec.schedulerName="default-scheduler" differs from the queue template's "volcano" (strict)
queue "gpu-queue": spec.tasks[1].template.spec.restartPolicy="Always" differs from the queue template's "OnFailure" (strict)"#
    );
    let lenient = self::limits_policy(
        "gpu-queue",
        &STRICT_VOLCANO_QUEUE.replace("strict: true", "strict: false"),
    );
    assert_eq!(validate(&lenient, &review)["allowed"], true);
}

#[test]
fn namespaces_registries_and_deadline_guardrails() {
    let review = fixture_json("create-job-launch-acme-mnist.json");
    let namespaces = limits_policy("gpu-queue", "allowedNamespaces: [ml-team, research]");
    assert_eq!(
        denial_message(&validate(&namespaces, &review)),
        r#"queue "gpu-queue": namespace "wandb" is not allowed (allowedNamespaces: ml-team, research)"#
    );
    assert_eq!(
        validate(
            &limits_policy("gpu-queue", "allowedNamespaces: [wandb]"),
            &review
        )["allowed"],
        true
    );

    let registries = limits_policy("gpu-queue", "allowedRegistries: [ghcr.io/acme, acme-evil]");
    assert_eq!(
        denial_message(&validate(&registries, &review)),
        r#"queue "gpu-queue": spec.template.spec.containers[0].image="acme/train:1" is not from an allowed registry (allowedRegistries: ghcr.io/acme, docker.io/acme-evil)"#
    );
    for allowed in ["[acme]", "[docker.io/acme/]", "[docker.io/acme/train]"] {
        let p = limits_policy("gpu-queue", &format!("allowedRegistries: {allowed}"));
        assert_eq!(validate(&p, &review)["allowed"], true, "{allowed}");
    }

    let deadline = limits_policy("gpu-queue", "maxActiveDeadlineSeconds: 3600");
    assert_eq!(
        denial_message(&validate(&deadline, &review)),
        r#"queue "gpu-queue": activeDeadlineSeconds is not set; the queue allows at most 3600 (maxActiveDeadlineSeconds), so set it on the workload or on every pod template"#
    );
    let mut long = review.clone();
    long["request"]["object"]["spec"]["activeDeadlineSeconds"] = json!(7200);
    assert_eq!(
        denial_message(&validate(&deadline, &long)),
        r#"queue "gpu-queue": spec.activeDeadlineSeconds=7200 exceeds maximum 3600 (maxActiveDeadlineSeconds)"#
    );
    long["request"]["object"]["spec"]["activeDeadlineSeconds"] = json!(600);
    assert_eq!(validate(&deadline, &long)["allowed"], true);
}

#[test]
fn variable_inside_a_longer_string_is_matched_around_the_literal_parts() {
    let policy = limits_policy(
        "gpu-queue",
        r#"
template: |
  spec:
    template:
      spec:
        containers:
          - image: "ghcr.io/acme/{{model}}:latest"
variables:
  model: {type: string, enum: [bert, gpt2]}
"#,
    );
    let image = "/spec/template/spec/containers/0/image";
    let mut review = fixture_json("create-job-launch-acme-mnist.json");
    set(&mut review, image, json!("ghcr.io/acme/bert:latest"));
    assert_eq!(validate(&policy, &review)["allowed"], true);
    set(&mut review, image, json!("ghcr.io/acme/llama:latest"));
    assert_eq!(
        denial_message(&validate(&policy, &review)),
        r#"queue "gpu-queue": spec.template.spec.containers[0].image="ghcr.io/acme/llama:latest": {{model}}="llama" is not one of "bert", "gpt2" (variable "model")"#
    );
    set(&mut review, image, json!("docker.io/evil:latest"));
    assert_eq!(
        denial_message(&validate(&policy, &review)),
        r#"queue "gpu-queue": spec.template.spec.containers[0].image="docker.io/evil:latest" does not match the queue template's "ghcr.io/acme/{{model}}:latest" (variable "model")"#
    );
}

#[test]
fn a_flood_of_violations_is_shown_in_part_with_a_count() {
    let policy = limits_policy(
        "gpu-queue",
        ONE_GPU_QUEUE.replace("k8s-test", "gpu-queue").as_str(),
    );
    let mut review = fixture_json("create-job-launch-acme-mnist.json");
    let container =
        review["request"]["object"]["spec"]["template"]["spec"]["containers"][0].clone();
    let mut containers = Vec::new();
    for i in 0..150 {
        let mut c = container.clone();
        c["name"] = json!(format!("c{i}"));
        c["resources"]["limits"]["nvidia.com/gpu"] = json!("2");
        containers.push(c);
    }
    review["request"]["object"]["spec"]["template"]["spec"]["containers"] =
        Value::Array(containers);
    let response = validate(&policy, &review);
    // The answer shows the first 20, then counts the rest.
    let lines: Vec<&str> = denial_message(&response).lines().collect();
    assert_eq!(lines.len(), 21);
    assert!(lines[0].contains("containers[0]"), "{}", lines[0]);
    assert!(lines[19].contains("containers[19]"), "{}", lines[19]);
    assert_eq!(lines[20], "… and 130 more violations");
}
