//! Inputs the fuzz targets (fuzz/, docs/fuzzing.md) crashed on, fed through the same API as
//! the target that found them. Each test names its target and crash artifact.

mod common;

use common::{fixture_json, review_response};
use launchgate::Policy;
use launchgate::quantity::Quantity;
use launchgate::review::Endpoint;
use serde_json::Value;

/// quantity_parse, `crash-b1530e83e049815198652d47b1d244122598d68d` (input `1e1000`):
/// `checked_add(&Quantity::ZERO)` returned `None`. Zero is `0 × 10^0`, and aligning it with
/// `1 × 10^1000` multiplied by 10^1000, which overflows; any exponent beyond ±38 failed the same
/// way. Adding zero now returns the other operand.
#[test]
fn quantity_parse_1e1000_plus_zero() {
    let input = "1e1000";
    let q = Quantity::parse(input).expect("parses");
    assert_eq!(q.checked_add(&Quantity::ZERO), Some(q));
    for text in [
        "1e1000",
        "1e-1000",
        "-7e39",
        "1e-39",
        "99999999999999999999Ei",
        "12Gi",
    ] {
        let q = Quantity::parse(text).expect("parses");
        assert_eq!(q.checked_add(&Quantity::ZERO), Some(q), "{text} + 0");
        assert_eq!(Quantity::ZERO.checked_add(&q), Some(q), "0 + {text}");
    }
}

/// The same defect as a queue saw it: a total starts from zero, so one pod asking for `1e40`
/// CPUs was "too large to count", and a workload meeting a minimum-only total was denied.
#[test]
fn quantity_parse_1e1000_a_huge_total_is_counted() {
    let policy = Policy::from_yaml(
        "defaultQueue: q\nqueues:\n  q:\n    pytorch: {enabled: false}\n    limits:\n      totals:\n        cpu: {minimum: \"1\"}\n",
    )
    .expect("valid config");
    let mut request = fixture_json("create-pod-launch-acme-mnist-mzxkz.json");
    request["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] =
        Value::from("1e40");
    let response = review_response(&policy, Endpoint::Validate, &request);
    assert_eq!(response["allowed"], true, "{response}");
}

/// review_structured, `crash-dea1d8a779cee2f312bdbf9c3af925e836eead94`: the recorded Volcano
/// Job with `spec.tasks[1].replicas` (the worker task) set to `i64::MAX`, reviewed with the
/// fuzzers' wide policy. `volcano::analyse` computed WORLD_SIZE as `master + Σ workers` in
/// unchecked `i64`: "attempt to add with overflow" (a panic with overflow checks, a negative
/// WORLD_SIZE without). The sum is now checked; past `i64` the job is unwirable.
#[test]
fn review_structured_volcano_worker_replicas_i64_max() {
    let mut request = fixture_json("create-vcjob-wandb-job-run42.json");
    request["request"]["object"]["spec"]["tasks"][1]["replicas"] = Value::from(i64::MAX);
    let wide = Policy::from_yaml(include_str!("../fuzz/src/wide-config.yaml")).unwrap();
    let default = Policy::embedded_default();
    // onUnwirable: warn (wide) warns on the mutate endpoint; deny (default) denies on both.
    for (policy, endpoint) in [
        (&wide, Endpoint::Mutate),
        (&default, Endpoint::Mutate),
        (&default, Endpoint::Validate),
    ] {
        let response = review_response(policy, endpoint, &request);
        let messages = response.to_string();
        assert!(
            messages.contains("add up to more than 9223372036854775807"),
            "{endpoint:?}: {messages}"
        );
    }
    // The wide policy's validate endpoint answers as well (no panic).
    let _ = review_response(&wide, Endpoint::Validate, &request);
    let response = review_response(&default, Endpoint::Validate, &request);
    assert_eq!(response["allowed"], false, "{response}");
    // Two worker tasks whose replicas only overflow together.
    let tasks = &mut request["request"]["object"]["spec"]["tasks"];
    tasks[1]["replicas"] = Value::from(i64::MAX / 2 + 1);
    let second = tasks[1].clone();
    tasks.as_array_mut().unwrap().push(second);
    let response = review_response(&default, Endpoint::Validate, &request);
    assert_eq!(response["allowed"], false, "{response}");
}

/// Same defect class, found while fixing the above: a Volcano pod's RANK is
/// `launchgate.io/pytorch-rank-offset + volcano.sh/task-index`, both read from the request.
#[test]
fn volcano_pod_rank_offset_out_of_range_is_a_warning() {
    let mut request = fixture_json("create-pod-wandb-job-run42-worker-1.json");
    request["request"]["object"]["metadata"]["annotations"]["launchgate.io/pytorch-rank-offset"] =
        Value::from(i64::MAX.to_string());
    let response = review_response(&Policy::embedded_default(), Endpoint::Mutate, &request);
    assert_eq!(response["allowed"], true, "{response}");
    assert!(
        response["warnings"]
            .to_string()
            .contains("RANK was not set"),
        "{response}"
    );
}

/// Same defect class: a PyTorchJob's Master replicas are summed over case-insensitive
/// duplicates (`Master`, `master`), read from the request.
#[test]
fn pytorchjob_master_replicas_overflow_is_not_exactly_one() {
    let mut request = fixture_json("create-pytorchjob-run42-pytorch-job.json");
    let specs = &mut request["request"]["object"]["spec"]["pytorchReplicaSpecs"];
    specs["Master"]["replicas"] = Value::from(i64::MAX);
    specs["master"] = specs["Master"].clone();
    let response = review_response(&Policy::embedded_default(), Endpoint::Validate, &request);
    assert_eq!(response["allowed"], false, "{response}");
    assert!(
        response.to_string().contains("it must be exactly 1"),
        "{response}"
    );
}
