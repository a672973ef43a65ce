//! A controller's identity is configuration, never a guess: what a controller makes is judged
//! on the per-pod rules only when an identity the config trusts sends it, and no identity in a
//! namespace tenants hold is trusted unless the config names it (with a warning).

use super::*;
use crate::admission::AdmissionRequest;
use crate::cluster::NoCluster;
use serde_json::json;

/// A queue whose runs may hold 16 GPUs in all, at most 4 per container.
const QUEUE: &str = r#"
queues:
  ray:
    limits:
      fields:
        - {path: 'containers[*].resources.limits["nvidia.com/gpu"]', type: integer, maximum: 4}
      totals:
        nvidia.com/gpu: {maximum: 16}
"#;

/// The identity KubeRay's own instructions install the operator as: a service account of
/// `default`, which anyone with `edit` there can run a pod as.
const IN_DEFAULT: &str = "system:serviceaccount:default:kuberay-operator";

/// The operator installed in a namespace of its own.
const IN_RAY_SYSTEM: &str = "system:serviceaccount:ray-system:kuberay-operator";

fn policy(pod_creators: &str) -> Policy {
    Policy::from_yaml(&format!("{pod_creators}{QUEUE}")).unwrap()
}

/// The RayCluster KubeRay makes for the 1-GPU RayJob `train` (uid `rj-1`), grown to `workers`
/// workers of `gpus` GPUs each: carrying the RayJob's labels and mark, owned by it.
fn operator_cluster(workers: i64, gpus: i64) -> Value {
    json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "train-raycluster-x7k2p", "namespace": "research",
            "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": "ray",
                "ray.io/originated-from-cr-name": "train", "ray.io/originated-from-crd": "RayJob"},
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "train",
                "uid": "rj-1", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {
            "headGroupSpec": {"template": {"spec": {"containers": [
                {"name": "ray-head", "image": "rayproject/ray:2.46.0"}]}}},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": workers, "minReplicas": 1,
                "maxReplicas": workers, "template": {"spec": {"containers": [
                    {"name": "ray-worker", "image": "rayproject/ray:2.46.0",
                     "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}]}})
}

fn ask(policy: &Policy, object: Value, user: &str) -> Decision {
    let mut request = AdmissionRequest::synthetic_create(object, Some("research")).unwrap();
    request.user_info = Some(json!({"username": user, "groups": ["system:authenticated"]}));
    decide(policy, Endpoint::Validate, &request, &NoCluster)
}

fn message(d: &Decision) -> &str {
    d.response
        .status
        .as_ref()
        .map_or("", |s| s.message.as_str())
}

#[test]
fn a_controller_in_default_is_trusted_only_when_the_config_names_it() {
    let oversized = operator_cluster(16, 4);
    // No KubeRay identity configured: the operator's service account in `default` is no one's
    // controller, and its 16 × 4-GPU RayCluster for a 1-GPU RayJob is judged on every rule.
    let unconfigured = policy("");
    let creators = &unconfigured.config.match_rules.pod_creators;
    assert!(
        !creators.contains_key("RayCluster") && !creators.contains_key("RayJob"),
        "{creators:?}"
    );
    let denied = ask(&unconfigured, oversized.clone(), IN_DEFAULT);
    assert!(!denied.response.allowed, "{denied:?}");
    assert_eq!(rules::ids(&denied.summary.violations), ["limits.totals"]);
    assert!(
        message(&denied).contains("total nvidia.com/gpu over all pods=64 exceeds maximum 16"),
        "{}",
        message(&denied)
    );
    // It is told why the owner claim did not count, naming the key to configure.
    assert!(
        message(&denied).contains("match.podCreators.RayJob: none configured"),
        "{}",
        message(&denied)
    );

    // The operator named, in a namespace of its own: its child is judged per pod as before —
    // the RayJob was held to the totals — and a container over the per-pod bound is still not.
    let configured = policy(&format!(
        "match:\n  podCreators:\n    RayJob: [{IN_RAY_SYSTEM}]\n    RayCluster: [{IN_RAY_SYSTEM}]\n"
    ));
    assert!(configured.warnings.is_empty(), "{:?}", configured.warnings);
    let child = ask(&configured, oversized.clone(), IN_RAY_SYSTEM);
    assert!(child.response.allowed, "{}", message(&child));
    let from_default = ask(&configured, oversized.clone(), IN_DEFAULT);
    assert_eq!(
        rules::ids(&from_default.summary.violations),
        ["limits.totals"]
    );
    let too_wide = ask(&configured, operator_cluster(2, 8), IN_RAY_SYSTEM);
    assert!(!too_wide.response.allowed);
    assert_eq!(rules::ids(&too_wide.summary.violations), ["limits.fields"]);

    // Named in `default` it is the platform team's word, trusted with a warning that says why
    // it should not be.
    let in_default = policy(&format!(
        "match:\n  podCreators:\n    RayJob: [{IN_DEFAULT}]\n"
    ));
    let warned: Vec<String> = in_default.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        warned
            .iter()
            .any(|w| w.starts_with("match.podCreators.RayJob[0]: ")
                && w.contains("namespace \"default\", which tenants commonly hold")),
        "{warned:?}"
    );
    assert!(ask(&in_default, oversized, IN_DEFAULT).response.allowed);
}

#[test]
fn no_controller_identity_is_trusted_where_the_config_puts_tenants() {
    // Named in a namespace whose workloads the config queues: a config error.
    let err = Policy::from_yaml(&format!(
        "namespaceQueues: {{research: ray}}\nmatch:\n  podCreators:\n    RayCluster: ['system:serviceaccount:research:*']\n{QUEUE}"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("match.podCreators.RayCluster[0]: ")
            && err.contains("where tenants launch workloads (namespaceQueues.research)"),
        "{err}"
    );
    // A built-in identity in a namespace a queue allows is not trusted, and the listing says so.
    let policy =
        Policy::from_yaml(&format!("{QUEUE}      allowedNamespaces: [kubeflow]\n")).unwrap();
    assert!(
        !policy
            .config
            .match_rules
            .pod_creators
            .contains_key("PyTorchJob")
    );
    let warned: Vec<String> = policy.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        warned.iter().any(|w| w.starts_with("match.podCreators.PyTorchJob: the PyTorchJob controller's built-in identity system:serviceaccount:kubeflow:training-operator is not trusted")),
        "{warned:?}"
    );
    let pytorch = policy
        .trusted_creators
        .iter()
        .find(|t| t.kind.as_str() == "PyTorchJob")
        .unwrap();
    assert!(
        pytorch.to_string().starts_with("no one (built in")
            && pytorch
                .to_string()
                .contains("its namespace is a tenants' (queues.ray.limits.allowedNamespaces)"),
        "{pytorch}"
    );
    // A PyTorchJob's pod sent as that identity is judged on every rule.
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "ddp-worker-", "namespace": "kubeflow",
            "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": "ray",
                "training.kubeflow.org/job-name": "ddp"},
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "name": "ddp", "uid": "p-1", "controller": true}]},
        "spec": {"containers": [{"name": "pytorch", "image": "acme/t:1",
            "resources": {"limits": {"nvidia.com/gpu": 8}}}]}});
    let mut request = AdmissionRequest::synthetic_create(pod, Some("kubeflow")).unwrap();
    request.user_info =
        Some(json!({"username": "system:serviceaccount:kubeflow:training-operator"}));
    let judged = decide(&policy, Endpoint::Validate, &request, &NoCluster);
    assert!(!judged.response.allowed);
    assert!(
        judged.summary.warnings.iter().any(|w| w
            .message
            .contains("match.podCreators.PyTorchJob: none configured"))
            || message(&judged).contains("match.podCreators.PyTorchJob: none configured"),
        "{judged:?}"
    );
}

/// A pod of the LeaderWorkerSet `serve`, made by the StatefulSet controller from the set's
/// StatefulSet `serve-0` (a group's workers), asking for `gpus` GPUs.
fn lws_pod(gpus: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "serve-0-", "namespace": "research",
            "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": "ray",
                "leaderworkerset.sigs.k8s.io/name": "serve",
                "leaderworkerset.sigs.k8s.io/group-index": "0"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                "name": "serve-0", "uid": "sts-1", "controller": true}]},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.9.0",
            "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}})
}

const STATEFULSET_CONTROLLER: &str = "system:serviceaccount:kube-system:statefulset-controller";
const LWS_CONTROLLER: &str = "system:serviceaccount:lws-system:lws-controller-manager";

/// A LeaderWorkerSet's pod the StatefulSet controller sends is the set's: judged on the
/// per-pod rules, given no run-level mutation (no pod deadline: the set runs until it is
/// deleted); the same pod from anyone else is judged and mutated as a pod of its own.
#[test]
fn a_leaderworkerset_pod_from_the_statefulset_controller_is_judged_per_pod() {
    let p = policy("");
    let over = ask(&p, lws_pod(5), STATEFULSET_CONTROLLER);
    assert!(!over.response.allowed);
    assert_eq!(rules::ids(&over.summary.violations), ["limits.fields"]);
    assert!(ask(&p, lws_pod(4), STATEFULSET_CONTROLLER).response.allowed);

    // The built-in config, its queue writing a run bound where a workload sets none.
    let mut config: Value = serde_yaml::from_str(crate::policy::DEFAULT_CONFIG_YAML).unwrap();
    config["queues"]["gpu-queue"]["guardrails"]["costCeiling"]["defaultDeadlineSeconds"] =
        json!(3600);
    let built_in = Policy::from_yaml(&serde_yaml::to_string(&config).unwrap()).unwrap();
    let mutate = |user: &str| {
        let mut request = AdmissionRequest::synthetic_create(lws_pod(1), Some("research")).unwrap();
        request.user_info = Some(json!({"username": user}));
        let d = decide(&built_in, Endpoint::Mutate, &request, &NoCluster);
        serde_json::to_string(&d.patch).unwrap()
    };
    let verified = mutate(STATEFULSET_CONTROLLER);
    assert!(!verified.contains("activeDeadlineSeconds"), "{verified}");
    assert!(verified.contains("securityContext"), "{verified}");
    let standalone = mutate("alice");
    assert!(standalone.contains("activeDeadlineSeconds"), "{standalone}");
}

/// Only the LeaderWorkerSet controller creates a StatefulSet whose pods carry a set's name:
/// a tenant's is denied at the StatefulSet (rule owner.intermediate), the controller's is
/// allowed, and the mutating webhook never touches one.
#[test]
fn a_statefulset_carrying_a_sets_name_is_the_lws_controllers_alone() {
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "serve-0", "namespace": "research"},
        "spec": {"replicas": 64, "template": {
            "metadata": {"labels": {"leaderworkerset.sigs.k8s.io/name": "serve"},
                "annotations": {"launchgate.io/exempted-by": "wandb-image-builds"}},
            "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.9.0"}]}}}});
    let p = policy("");
    let forged = ask(&p, sts.clone(), "alice");
    assert!(!forged.response.allowed);
    assert_eq!(
        rules::ids(&forged.summary.violations),
        ["owner.intermediate"]
    );
    assert!(
        message(&forged).contains("match.podCreators.LeaderWorkerSet"),
        "{}",
        message(&forged)
    );
    let made = ask(&p, sts.clone(), LWS_CONTROLLER);
    assert!(made.response.allowed && made.summary.violations.is_empty());
    let mut request = AdmissionRequest::synthetic_create(sts, Some("research")).unwrap();
    request.user_info = Some(json!({"username": "alice"}));
    let mutated = decide(&p, Endpoint::Mutate, &request, &NoCluster);
    assert!(mutated.response.allowed && mutated.patch.0.is_empty());
}
