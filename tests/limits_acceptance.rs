//! Queue limits end to end through the review core and the CLI: the W&B docs' minikube GPU
//! queue (the embedded policy) against the recorded launch Job.

mod common;

use common::{check_config, fixture_json, fixture_path, launchgate, text, validate_response};
use launchgate::Policy;
use serde_json::Value;

const EIGHT_GPUS_DENIED: &str = r#"queue "gpu-queue": spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus")"#;

fn with_gpus(mut review: Value, gpus: &str) -> Value {
    review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        ["nvidia.com/gpu"] = Value::String(gpus.into());
    review
}

#[test]
fn seed_queue_denies_the_recorded_eight_gpu_job_with_one_precise_line() {
    let policy = Policy::embedded_default();
    let response = validate_response(&policy, &fixture_json("create-job-launch-acme-mnist.json"));
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
    let response = validate_response(
        &policy,
        &with_gpus(fixture_json("create-job-launch-acme-mnist.json"), "2"),
    );
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response.get("warnings").is_none(), "{response}");
    // The boundary itself is allowed; one more is not.
    let at_max = validate_response(
        &policy,
        &with_gpus(fixture_json("create-job-launch-acme-mnist.json"), "4"),
    );
    assert_eq!(at_max["allowed"], true, "{at_max}");
    let above = validate_response(
        &policy,
        &with_gpus(fixture_json("create-job-launch-acme-mnist.json"), "5"),
    );
    assert_eq!(above["allowed"], false, "{above}");
}

#[test]
fn seed_queue_memory_is_compared_by_value_not_text() {
    let policy = Policy::embedded_default();
    let mut review = with_gpus(fixture_json("create-job-launch-acme-mnist.json"), "1");
    let limits = &mut review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["resources"]
        ["limits"];
    limits["memory"] = Value::String("13000Mi".into());
    limits["cpu"] = Value::String("4000m".into());
    let response = validate_response(&policy, &review);
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
        let real = with_gpus(fixture_json("create-job-launch-acme-mnist.json"), gpus);
        let mut dry = real.clone();
        dry["request"]["dryRun"] = Value::Bool(true);
        let real_response = validate_response(&policy, &real);
        let dry_response = validate_response(&policy, &dry);
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
    let mut real = fixture_json("dryrun-create-job-demo.json");
    let dry_response = validate_response(&strict, &real);
    real["request"]["dryRun"] = Value::Bool(false);
    let real_response = validate_response(&strict, &real);
    assert_eq!(dry_response["allowed"], false, "{dry_response}");
    assert_eq!(dry_response, real_response);
    assert!(dry_response.get("patch").is_none());
}

#[test]
fn check_config_rejects_placeholder_without_schema_and_inverted_bounds() {
    let cases = [
        (
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
            "queues.gpu-small.limits.template: placeholder {{memory}} at spec.template.spec.containers[0].resources.limits.memory has no schema: add `variables.memory` with its type and bounds",
        ),
        (
            r#"
queues:
  gpu-small:
    limits:
      template: "spec: {template: {spec: {containers: [{resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}}]}}}"
      variables:
        gpus: {type: integer, minimum: 4, maximum: 0}
"#,
            "queues.gpu-small.limits.variables.gpus.minimum: minimum 4 is greater than maximum 0",
        ),
    ];
    for (config, expected) in cases {
        let out = check_config(config);
        let said = text(&out.stdout) + &text(&out.stderr);
        assert!(!out.status.success(), "{said}");
        assert!(said.contains(expected), "{said}");
    }
}

#[test]
fn embedded_default_config_passes_check_config() {
    let out = check_config(launchgate::policy::DEFAULT_CONFIG_YAML);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn offline_validate_gives_the_same_verdict_and_message() {
    let out = launchgate(&[
        "validate",
        "-f",
        &fixture_path("create-job-launch-acme-mnist.json"),
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("DENIED"), "{stdout}");
    assert!(stdout.contains(EIGHT_GPUS_DENIED), "{stdout}");

    let dir = tempfile::tempdir().unwrap();
    let two_gpus = dir.path().join("two-gpus.json");
    let review = with_gpus(fixture_json("create-job-launch-acme-mnist.json"), "2");
    std::fs::write(
        &two_gpus,
        serde_json::to_vec(&review["request"]["object"]).unwrap(),
    )
    .unwrap();
    let out = launchgate(&["validate", "-f", two_gpus.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("ALLOWED"), "{stdout}");
}

#[test]
fn seed_queue_caps_requests_of_a_container_that_sets_no_limits() {
    let policy = Policy::embedded_default();
    let mut review = with_gpus(fixture_json("create-job-launch-acme-mnist.json"), "1");
    let resources =
        &mut review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["resources"];
    *resources = serde_json::json!({"requests": {"cpu": "64", "memory": "500Gi"}});
    let response = validate_response(&policy, &review);
    assert_eq!(response["allowed"], false, "{response}");
    let message = response["status"]["message"].as_str().unwrap_or_default();
    for expected in [
        r#"spec.template.spec.containers[0].resources.requests.cpu=64 exceeds maximum 4"#,
        r#"spec.template.spec.containers[0].resources.requests.memory=500Gi exceeds maximum 12Gi"#,
    ] {
        assert!(message.contains(expected), "{message}");
    }
}

#[test]
fn check_config_warns_about_a_cap_on_limits_alone() {
    let limits_only = r#"
queues:
  q:
    limits:
      fields:
        - {path: "containers[*].resources.limits.cpu", type: quantity, maximum: "4"}
        - {path: "containers[*].resources.limits.memory", type: quantity, maximum: 12Gi}
"#;
    let out = check_config(limits_only);
    let err = text(&out.stderr);
    // It loads (the caps do bound limits), with a warning per resource on stderr.
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(r#"warning: queues.q.limits: field "containers[*].resources.limits.cpu" (quantity at most 4) caps resources.limits.cpu only"#),
        "{err}"
    );
    assert!(err.contains("caps resources.limits.memory only"), "{err}");
    // The built-in policy bounds requests too: no warning.
    let out = check_config(launchgate::policy::DEFAULT_CONFIG_YAML);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "the built-in policy's caps hold");
}
