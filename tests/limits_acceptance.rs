//! Queue limits end to end through the review core and the CLI: the W&B docs' minikube GPU
//! queue (the embedded policy) against the recorded launch Job.

use launchgate::Policy;
use launchgate::cluster::NoCluster;
use launchgate::review::{Endpoint, review};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

const EIGHT_GPUS_DENIED: &str = r#"queue "gpu-queue": spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus")"#;

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/admission")
        .join(name)
}

fn fixture(name: &str) -> Value {
    let bytes = std::fs::read(fixture_path(name)).expect("fixture exists");
    serde_json::from_slice(&bytes).expect("fixture is JSON")
}

/// The `response` of the validating webhook for `request_review`.
fn validate(policy: &Policy, request_review: &Value) -> Value {
    let body = serde_json::to_vec(request_review).unwrap();
    let outcome =
        review(policy, Endpoint::Validate, &body, &NoCluster).expect("a valid AdmissionReview");
    let mut response: Value = serde_json::from_slice(&outcome.body).unwrap();
    response["response"].take()
}

fn with_gpus(mut review: Value, gpus: &str) -> Value {
    review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        ["nvidia.com/gpu"] = Value::String(gpus.into());
    review
}

fn launchgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_launchgate"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("launchgate runs")
}

#[test]
fn seed_queue_denies_the_recorded_eight_gpu_job_with_one_precise_line() {
    let policy = Policy::embedded_default();
    let response = validate(&policy, &fixture("create-job-launch-acme-mnist.json"));
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(
        response["status"]["message"], EIGHT_GPUS_DENIED,
        "{response}"
    );
}

#[test]
fn seed_queue_allows_the_same_job_with_two_gpus() {
    let policy = Policy::embedded_default();
    let response = validate(
        &policy,
        &with_gpus(fixture("create-job-launch-acme-mnist.json"), "2"),
    );
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response.get("warnings").is_none(), "{response}");
    // The boundary itself is allowed; one more is not.
    let at_max = validate(
        &policy,
        &with_gpus(fixture("create-job-launch-acme-mnist.json"), "4"),
    );
    assert_eq!(at_max["allowed"], true, "{at_max}");
    let above = validate(
        &policy,
        &with_gpus(fixture("create-job-launch-acme-mnist.json"), "5"),
    );
    assert_eq!(above["allowed"], false, "{above}");
}

#[test]
fn seed_queue_memory_is_compared_by_value_not_text() {
    let policy = Policy::embedded_default();
    let mut review = with_gpus(fixture("create-job-launch-acme-mnist.json"), "1");
    let limits = &mut review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["resources"]
        ["limits"];
    limits["memory"] = Value::String("13000Mi".into());
    limits["cpu"] = Value::String("4000m".into());
    let response = validate(&policy, &review);
    assert_eq!(response["allowed"], false);
    assert_eq!(
        response["status"]["message"],
        r#"queue "gpu-queue": spec.template.spec.containers[0].resources.limits.memory=13000Mi exceeds maximum 12Gi (field "containers[*].resources.limits.memory")"#
    );
}

#[test]
fn dry_run_gets_the_same_verdict_and_validate_never_patches() {
    let policy = Policy::embedded_default();
    for gpus in ["8", "2"] {
        let real = with_gpus(fixture("create-job-launch-acme-mnist.json"), gpus);
        let mut dry = real.clone();
        dry["request"]["dryRun"] = Value::Bool(true);
        let real_response = validate(&policy, &real);
        let dry_response = validate(&policy, &dry);
        assert_eq!(real_response, dry_response, "gpus={gpus}");
        assert!(dry_response.get("patch").is_none(), "{dry_response}");
        assert!(dry_response.get("patchType").is_none(), "{dry_response}");
    }
    // The recorded `kubectl apply --dry-run=server` request, against a queue whose limits it breaks.
    let strict = Policy::from_yaml(
        r#"
defaultQueue: k8s-test
queues:
  k8s-test:
    limits:
      fields:
        - {path: "containers[*].resources.limits[\"nvidia.com/gpu\"]", type: integer, maximum: 1}
"#,
    )
    .unwrap();
    let mut real = fixture("dryrun-create-job-demo.json");
    let dry_response = validate(&strict, &real);
    real["request"]["dryRun"] = Value::Bool(false);
    let real_response = validate(&strict, &real);
    assert_eq!(dry_response["allowed"], false, "{dry_response}");
    assert_eq!(dry_response, real_response);
    assert!(dry_response.get("patch").is_none());
}

#[test]
fn check_config_rejects_placeholder_without_schema_and_inverted_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let missing_schema = dir.path().join("missing-schema.yaml");
    std::fs::write(
        &missing_schema,
        r#"
queues:
  gpu-small:
    limits:
      template: |
        spec:
          template:
            spec:
              containers:
                - resources:
                    limits:
                      nvidia.com/gpu: '{{gpus}}'
                      memory: '{{memory}}'
      variables:
        gpus: {type: integer, minimum: 0, maximum: 4}
"#,
    )
    .unwrap();
    let out = launchgate(&["check-config", missing_schema.to_str().unwrap()]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains(
            "queues.gpu-small.limits.template: placeholder {{memory}} at spec.template.spec.containers[0].resources.limits.memory has no schema: add `variables.memory` with its type and bounds"
        ),
        "{text}"
    );

    let inverted = dir.path().join("inverted.yaml");
    std::fs::write(
        &inverted,
        r#"
queues:
  gpu-small:
    limits:
      template: "spec: {template: {spec: {containers: [{resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}}]}}}"
      variables:
        gpus: {type: integer, minimum: 4, maximum: 0}
"#,
    )
    .unwrap();
    let out = launchgate(&["check-config", inverted.to_str().unwrap()]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains(
            "queues.gpu-small.limits.variables.gpus.minimum: minimum 4 is greater than maximum 0"
        ),
        "{text}"
    );
}

#[test]
fn embedded_default_config_passes_check_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("default.yaml");
    std::fs::write(&path, launchgate::policy::DEFAULT_CONFIG_YAML).unwrap();
    let out = launchgate(&["check-config", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn offline_validate_gives_the_same_verdict_and_message() {
    let out = launchgate(&[
        "validate",
        "-f",
        fixture_path("create-job-launch-acme-mnist.json")
            .to_str()
            .unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("DENIED"), "{stdout}");
    assert!(stdout.contains(EIGHT_GPUS_DENIED), "{stdout}");

    let dir = tempfile::tempdir().unwrap();
    let two_gpus = dir.path().join("two-gpus.json");
    let review = with_gpus(fixture("create-job-launch-acme-mnist.json"), "2");
    std::fs::write(
        &two_gpus,
        serde_json::to_vec(&review["request"]["object"]).unwrap(),
    )
    .unwrap();
    let out = launchgate(&["validate", "-f", two_gpus.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ALLOWED"), "{stdout}");
}
