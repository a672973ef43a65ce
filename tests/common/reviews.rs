//! The review core as the tests drive it: answers to AdmissionReviews, mutations with their
//! patch applied, the small policies several suites build, and reading what a patch wrote.

use launchgate::Policy;
use launchgate::admission::{AdmissionRequest, AdmissionResponse};
use launchgate::cluster::{ClusterView, NoCluster};
use launchgate::review::{Decision, Endpoint, decide, review};
use serde_json::Value;

/// The `response` of `endpoint` for the AdmissionReview `review_json`, through the entry point
/// the server uses (`launchgate::review::review`, no cluster).
pub fn review_response(policy: &Policy, endpoint: Endpoint, review_json: &Value) -> Value {
    let body = serde_json::to_vec(review_json).unwrap();
    let outcome = review(policy, endpoint, &body, &NoCluster).expect("a valid AdmissionReview");
    let mut answer: Value =
        serde_json::from_slice(&outcome.body).expect("the answer is an AdmissionReview");
    answer["response"].take()
}

/// A CREATE of `object` as the API server sends it (in the object's own namespace).
pub fn synthetic(object: Value) -> AdmissionRequest {
    AdmissionRequest::synthetic_create(object, None).expect("a workload object")
}

/// The mutating decision on `request`, which must admit it, and the request's object with the
/// decision's patch applied.
pub fn mutated(
    policy: &Policy,
    request: &AdmissionRequest,
    cluster: &dyn ClusterView,
) -> (Value, Decision) {
    let d = decide(policy, Endpoint::Mutate, request, cluster);
    assert!(d.response.allowed, "{:?}", d.response.status);
    let mut object = request.object.clone().expect("the request has an object");
    json_patch::patch(&mut object, &d.patch).expect("the patch applies");
    (object, d)
}

/// The JSON Patch of an AdmissionReview `response` (`None` when it carries none), decoded with
/// the library's own [`AdmissionResponse::decoded_patch`].
pub fn decode_patch(response: &Value) -> Option<json_patch::Patch> {
    let response: AdmissionResponse =
        serde_json::from_value(response.clone()).expect("an AdmissionResponse");
    response
        .decoded_patch()
        .map(|p| p.expect("patch is base64 of a JSON Patch"))
}

/// A policy whose one queue `queue` (also the default queue) has the PyTorch wiring off and
/// `limits_yaml` as its `limits:`.
pub fn limits_policy(queue: &str, limits_yaml: &str) -> Policy {
    let limits: String = limits_yaml
        .lines()
        .map(|l| format!("      {l}\n"))
        .collect();
    let yaml = format!(
        "defaultQueue: {queue}\nqueues:\n  {queue}:\n    pytorch: {{enabled: false}}\n    limits:\n{limits}"
    );
    Policy::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

/// The built-in policy with its queue saying every Indexed Job is PyTorch training
/// (`indexedJobs: true`), as a queue of DDP jobs that start `python train.py` (no launcher to
/// see) says it.
pub fn indexed_pytorch_queue() -> Policy {
    let yaml =
        launchgate::policy::DEFAULT_CONFIG_YAML.replace("indexedJobs: auto", "indexedJobs: true");
    assert_ne!(
        yaml,
        launchgate::policy::DEFAULT_CONFIG_YAML,
        "the built-in indexedJobs moved"
    );
    Policy::from_yaml(&yaml).unwrap()
}

/// A queue `q` with only the PyTorch wiring on (`pytorch` is its `pytorch:` value; no
/// security, cache, Job defaults or `NVIDIA_VISIBLE_DEVICES`), so env and ports can be compared
/// exactly.
pub fn pytorch_only(pytorch: &str) -> Policy {
    Policy::from_yaml(&format!(
        "defaultQueue: q\nqueues:\n  q:\n    securityContext: {{enabled: false}}\n    jobDefaults: {{enabled: false}}\n    visibleDevices: {{enabled: false}}\n    pytorch: {pytorch}\n"
    ))
    .unwrap()
}

/// The message of an AdmissionReview `response` that must be a denial.
pub fn denial_message(response: &Value) -> &str {
    assert_eq!(response["allowed"], false, "expected a denial: {response}");
    response["status"]["message"]
        .as_str()
        .expect("a denial carries a message")
}

/// The env entry of `container` named `name` that the container sees: the last one of that
/// name, as the kubelet reads it.
pub fn env_entry<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()?
        .iter()
        .rev()
        .find(|e| e["name"] == name)
}

/// The literal value the container sees for env var `name` ([`env_entry`]).
pub fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    env_entry(container, name)?.get("value")?.as_str()
}

/// The validating webhook's `response` for the AdmissionReview `review_json`.
pub fn validate_response(policy: &Policy, review_json: &Value) -> Value {
    review_response(policy, Endpoint::Validate, review_json)
}
