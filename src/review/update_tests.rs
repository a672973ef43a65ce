//! How an UPDATE is judged: only what launchgate admitted in a queue is carried over (an UPDATE
//! that brings an object into a queue is judged as a CREATE), and an UPDATE of what was admitted
//! is refused by a rule only when what the rule judges grew.

use super::*;
use crate::admission::{AdmissionRequest, Operation};
use crate::cluster::NoCluster;
use crate::policy::EXEMPTED_BY_ANNOTATION;
use crate::rules::Violation;
use crate::validate;
use serde_json::json;

const CONFIG: &str = r#"
match:
  exemptions:
    - name: platform
      groups: [platform-admins]
queues:
  gpu:
    kueue: {localQueue: team-a}
    limits:
      variables:
        gpus: {type: integer, minimum: 0, maximum: 4}
      template:
        spec:
          template:
            spec:
              containers:
                - resources:
                    limits: {nvidia.com/gpu: "{{gpus}}"}
      totals:
        nvidia.com/gpu: {maximum: 16}
  cpu: {}
  mpi:
    kueue: {localQueue: team-a}
    limits:
      variables:
        gpus: {type: integer, minimum: 0, maximum: 4}
      template:
        apiVersion: kubeflow.org/v2beta1
        kind: MPIJob
        spec:
          mpiReplicaSpecs:
            Launcher:
              template:
                spec:
                  containers:
                    - resources: {limits: {nvidia.com/gpu: "0"}}
            Worker:
              template:
                spec:
                  containers:
                    - resources: {limits: {nvidia.com/gpu: "{{gpus}}"}}
  capped:
    guardrails:
      costCeiling: {maxGpuHours: 16}
"#;

const TENANT: &str = "alice";
const KUEUE: &str = "system:serviceaccount:kueue-system:kueue-controller-manager";
const RAY_HEAD: &str = "system:serviceaccount:research:default";

fn policy() -> Policy {
    Policy::from_yaml(CONFIG).unwrap()
}

/// A suspended Job of `parallelism` pods with `gpus` GPUs each, labelled into `queue` (none:
/// no launch label at all).
fn job(queue: Option<&str>, parallelism: i64, gpus: i64) -> Value {
    let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "research", "labels": {}},
        "spec": {"suspend": true, "parallelism": parallelism, "completions": parallelism,
            "template": {"metadata": {}, "spec": {"restartPolicy": "Never",
                "containers": [{"name": "t", "image": "acme/t:1",
                    "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}});
    if let Some(queue) = queue {
        j["metadata"]["labels"] = json!({"wandb.ai/monitor": "true", "launchgate.io/queue": queue});
    }
    j
}

fn marked(mut object: Value) -> Value {
    object["metadata"]["annotations"] = json!({EXEMPTED_BY_ANNOTATION: "platform"});
    object["spec"]["template"]["metadata"]["annotations"] =
        json!({EXEMPTED_BY_ANNOTATION: "platform"});
    object
}

fn ask(endpoint: Endpoint, object: Value, old: Option<Value>, user: &str) -> Decision {
    ask_as(endpoint, object, old, user, &[])
}

/// [`ask`] from `user` in `groups` (besides `system:authenticated`).
fn ask_as(
    endpoint: Endpoint,
    object: Value,
    old: Option<Value>,
    user: &str,
    groups: &[&str],
) -> Decision {
    let mut request = AdmissionRequest::synthetic_create(object, Some("research")).unwrap();
    if let Some(old) = old {
        request.operation = Operation::Update;
        request.old_object = Some(old);
    }
    let mut all = vec!["system:authenticated"];
    all.extend(groups);
    request.user_info = Some(json!({"username": user, "groups": all}));
    decide(&policy(), endpoint, &request, &NoCluster)
}

fn message(d: &Decision) -> &str {
    d.response
        .status
        .as_ref()
        .map_or("", |s| s.message.as_str())
}

fn rules_of(d: &Decision) -> Vec<&'static str> {
    rules::ids(&d.summary.violations)
}

#[test]
fn an_update_that_brings_a_job_into_a_queue_is_judged_as_a_create() {
    // Created outside launchgate's scope (never sent to it), with a mark nobody gave it.
    let outside = marked(job(None, 1, 8));
    let relabelled = marked(job(Some("gpu"), 1, 8));
    let denied = ask(
        Endpoint::Validate,
        relabelled.clone(),
        Some(outside.clone()),
        TENANT,
    );
    assert!(!denied.response.allowed, "{denied:?}");
    let text = message(&denied);
    assert!(text.contains("=8 exceeds maximum 4"), "{text}");
    assert!(!text.contains("already so"), "{text}");
    let ids = rules_of(&denied);
    for id in [
        "exemptions.unearnedMark",
        "limits.variables",
        "kueue.labels",
    ] {
        assert!(ids.contains(&id), "{id} in {ids:?}");
    }
    // The mutating webhook writes what an UPDATE may change: the queue's Kueue label, and the
    // object's own mark removed; never a pod template.
    let mutated = ask(Endpoint::Mutate, relabelled.clone(), Some(outside), TENANT);
    let paths: Vec<String> = mutated
        .patch
        .0
        .iter()
        .map(|op| op.path().to_string())
        .collect();
    assert!(
        paths
            .iter()
            .any(|p| p == "/metadata/labels/kueue.x-k8s.io~1queue-name"),
        "{paths:?}"
    );
    assert!(
        paths.iter().any(|p| p.starts_with("/metadata/annotations")),
        "{paths:?}"
    );
    assert!(
        paths.iter().all(|p| p.starts_with("/metadata/")),
        "{paths:?}"
    );
    // The same Job moved from another queue is judged in its new one as a CREATE too.
    let from_cpu = marked(job(Some("cpu"), 1, 8));
    let moved = ask(Endpoint::Validate, relabelled, Some(from_cpu), TENANT);
    assert!(!moved.response.allowed);
    assert!(rules_of(&moved).contains(&"exemptions.unearnedMark"));
}

#[test]
fn a_relabelled_job_is_held_to_the_queues_totals() {
    let mut wide = job(Some("gpu"), 16, 4);
    wide["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = json!("team-a");
    let mut outside = wide.clone();
    outside["metadata"]["labels"] = json!({});
    let denied = ask(Endpoint::Validate, wide.clone(), Some(outside), TENANT);
    assert!(!denied.response.allowed);
    assert!(
        message(&denied).contains("total nvidia.com/gpu over all pods=64 exceeds maximum 16"),
        "{}",
        message(&denied)
    );
    // The same Job already in the queue (admitted before the totals were set): its UPDATEs
    // that do not grow it pass, with the violation as a warning.
    let mut noted = wide.clone();
    noted["metadata"]["labels"]["note"] = json!("x");
    let kept = ask(Endpoint::Validate, noted, Some(wide.clone()), TENANT);
    assert!(kept.response.allowed, "{}", message(&kept));
    assert_eq!(
        rules::ids(&kept.summary.unchanged),
        ["limits.totals"],
        "carried with a warning"
    );
    // Growing it is refused.
    let mut grown = wide.clone();
    grown["spec"]["parallelism"] = json!(20);
    grown["spec"]["completions"] = json!(20);
    let refused = ask(Endpoint::Validate, grown, Some(wide), TENANT);
    assert!(!refused.response.allowed);
}

/// The RayCluster KubeRay made for a RayJob of the capped queue: a CPU head and an autoscaling
/// worker group of `replicas` (up to 4) one-GPU workers.
fn ray_cluster(replicas: i64, autoscale: bool, gpus: i64) -> Value {
    let labels = json!({"wandb.ai/monitor": "true", "launchgate.io/queue": "capped",
        "ray.io/originated-from-cr-name": "train"});
    json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "train-raycluster", "namespace": "research", "labels": labels},
        "spec": {"enableInTreeAutoscaling": autoscale,
            "headGroupSpec": {"template": {"spec": {"containers": [
                {"name": "ray-head", "image": "rayproject/ray:2.46.0"}]}}},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": replicas, "minReplicas": 1,
                "maxReplicas": 4, "template": {"spec": {"containers": [
                    {"name": "ray-worker", "image": "rayproject/ray:2.46.0",
                     "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}]}})
}

#[test]
fn a_controllers_update_within_what_was_admitted_passes() {
    // The Ray autoscaler (the head pod's service account) scales the workers up and down
    // within maxReplicas: what the cost ceiling judges did not grow.
    for (from, to) in [(1, 2), (2, 1)] {
        let scaled = ask(
            Endpoint::Validate,
            ray_cluster(to, true, 1),
            Some(ray_cluster(from, true, 1)),
            RAY_HEAD,
        );
        assert!(
            scaled.response.allowed,
            "{from} → {to}: {}",
            message(&scaled)
        );
    }
    // Without autoscaling, fewer workers is less; more GPUs per worker is more.
    let down = ask(
        Endpoint::Validate,
        ray_cluster(1, false, 1),
        Some(ray_cluster(2, false, 1)),
        RAY_HEAD,
    );
    assert!(down.response.allowed, "{}", message(&down));
    let more = ask(
        Endpoint::Validate,
        ray_cluster(1, true, 2),
        Some(ray_cluster(1, true, 1)),
        RAY_HEAD,
    );
    assert!(!more.response.allowed);
    assert!(rules_of(&more).contains(&"guardrails.costCeiling"));
}

#[test]
fn kueues_admission_update_of_an_exempt_run_passes() {
    // An exempt 8-GPU run with no deadline in the capped queue, marked by launchgate at CREATE.
    let mut run = marked(job(Some("capped"), 1, 8));
    run["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = json!("team-a");
    let created = ask(Endpoint::Validate, run.clone(), None, TENANT);
    assert!(!created.response.allowed, "a tenant's is judged");
    let mut admitted = run.clone();
    admitted["spec"]["suspend"] = json!(false);
    admitted["spec"]["template"]["spec"]["nodeSelector"] = json!({"flavor": "a100"});
    let update = ask(Endpoint::Validate, admitted, Some(run.clone()), KUEUE);
    assert!(update.response.allowed, "{}", message(&update));
    // A tenant's UPDATE that grows it is refused.
    let mut grown = run.clone();
    grown["spec"]["parallelism"] = json!(2);
    grown["spec"]["completions"] = json!(2);
    let refused = ask(Endpoint::Validate, grown, Some(run), TENANT);
    assert!(!refused.response.allowed);
}

#[test]
fn each_rule_compares_an_update_as_the_table_says() {
    let at = |rule: &'static rules::Rule, value: &str| {
        Violation::new(rule, "m")
            .key("nvidia.com/gpu")
            .value(value)
            .limit("exceeds maximum 16")
    };
    let admitted = [at(rules::LIMITS_TOTALS, "32")];
    // Grown: the same place and bound, a value no larger.
    assert!(validate::carried(
        &at(rules::LIMITS_TOTALS, "32"),
        &admitted
    ));
    assert!(validate::carried(
        &at(rules::LIMITS_TOTALS, "24"),
        &admitted
    ));
    assert!(!validate::carried(
        &at(rules::LIMITS_TOTALS, "48"),
        &admitted
    ));
    assert!(!validate::carried(
        &at(rules::LIMITS_TOTALS, "24").limit("exceeds maximum 8"),
        &admitted
    ));
    let memory = [at(rules::LIMITS_TOTALS, "64Gi")];
    assert!(validate::carried(
        &at(rules::LIMITS_TOTALS, "32Gi"),
        &memory
    ));
    assert!(!validate::carried(
        &at(rules::LIMITS_TOTALS, "65Gi"),
        &memory
    ));
    // Changed: only the same value.
    let variables = [at(rules::LIMITS_VARIABLES, "8")];
    assert!(validate::carried(
        &at(rules::LIMITS_VARIABLES, "8"),
        &variables
    ));
    assert!(!validate::carried(
        &at(rules::LIMITS_VARIABLES, "6"),
        &variables
    ));
    // Judged on CREATE only; on every request alike.
    assert!(validate::carried(
        &at(rules::PYTORCH_ON_UNWIRABLE, "x"),
        &[]
    ));
    assert!(!validate::carried(
        &at(rules::SERVER_TOO_DENSE, "x"),
        &[at(rules::SERVER_TOO_DENSE, "x")]
    ));
}

#[test]
fn a_trainjob_sizes_runs_only_from_cluster_runtimes_unless_the_queue_says_so() {
    let trainjob = |kind: &str| {
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "t", "namespace": "research",
                "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": "gpu",
                           "kueue.x-k8s.io/queue-name": "team-a"}},
            "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": kind,
                                    "name": "torch"},
                     "trainer": {"numNodes": 1,
                                 "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}}})
    };
    let own = ask(
        Endpoint::Validate,
        trainjob("TrainingRuntime"),
        None,
        TENANT,
    );
    assert!(!own.response.allowed);
    assert_eq!(rules_of(&own), ["limits.trainingRuntimes"]);
    assert!(
        message(&own).contains("TrainingRuntime \"torch\""),
        "{}",
        message(&own)
    );
    // One admitted before the queue said so: Kueue's admission UPDATE carries it.
    let mut admitted = trainjob("TrainingRuntime");
    admitted["spec"]["suspend"] = json!(false);
    let kept = ask(
        Endpoint::Validate,
        admitted,
        Some(trainjob("TrainingRuntime")),
        KUEUE,
    );
    assert!(kept.response.allowed, "{}", message(&kept));
    assert_eq!(
        rules::ids(&kept.summary.unchanged),
        ["limits.trainingRuntimes"],
        "carried with a warning"
    );
    let cluster = ask(
        Endpoint::Validate,
        trainjob("ClusterTrainingRuntime"),
        None,
        TENANT,
    );
    assert!(
        !rules_of(&cluster).contains(&"limits.trainingRuntimes"),
        "{}",
        message(&cluster)
    );
    let trusting = Policy::from_yaml(
        &CONFIG.replace("totals:\n", "trainingRuntimes: namespaced\n      totals:\n"),
    )
    .unwrap();
    let mut request =
        AdmissionRequest::synthetic_create(trainjob("TrainingRuntime"), Some("research")).unwrap();
    request.user_info = Some(json!({"username": TENANT}));
    let allowed = decide(&trusting, Endpoint::Validate, &request, &NoCluster);
    assert!(
        !rules::ids(&allowed.summary.violations).contains(&"limits.trainingRuntimes"),
        "{:?}",
        allowed.summary.violations
    );
}

const ADMIN: &str = "ops";
const ADMINS: &[&str] = &["platform-admins"];

/// A suspended MPIJob of the mpi queue, handed to Kueue: a CPU launcher and one worker of
/// `gpus` GPUs running `image`, marked exempt by `platform` as launchgate marks the platform
/// team's at CREATE (on itself and on both pod templates).
fn exempt_mpijob(gpus: i64, image: &str) -> Value {
    let container = |name: &str, command: &[&str], gpus: i64| {
        json!({"name": name, "image": image, "command": command,
               "resources": {"limits": {"nvidia.com/gpu": gpus}}})
    };
    let mark = json!({EXEMPTED_BY_ANNOTATION: "platform"});
    json!({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": "pi", "namespace": "research", "annotations": mark,
            "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": "mpi",
                       "kueue.x-k8s.io/queue-name": "team-a"}},
        "spec": {"slotsPerWorker": 1, "runPolicy": {"suspend": true},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"metadata": {"annotations": mark},
                    "spec": {"containers": [container("launcher", &["mpirun", "/pi"], 0)]}}},
                "Worker": {"replicas": 1, "template": {"metadata": {"annotations": mark},
                    "spec": {"containers": [container("worker", &["/usr/sbin/sshd", "-De"],
                        gpus)]}}}}}})
}

/// `job` with its worker's image and command replaced by the tenant's.
fn hijacked(mut job: Value) -> Value {
    let worker = &mut job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0];
    worker["image"] = json!("tenant/miner:1");
    worker["command"] = json!(["/mine"]);
    job
}

#[test]
fn a_tenants_update_of_an_exempt_run_is_judged_as_her_create() {
    let admitted = exempt_mpijob(8, "mpioperator/mpi-pi:openmpi");
    // The platform team's own run: judged, it is over the queue's 4 GPUs a worker.
    let created = ask(Endpoint::Validate, admitted.clone(), None, TENANT);
    assert!(!created.response.allowed, "a tenant's CREATE is judged");
    // A tenant runs her image on its 8-GPU worker: judged as her CREATE, every rule, nothing
    // "already so", naming the cap.
    let update = hijacked(admitted.clone());
    let denied = ask(
        Endpoint::Validate,
        update.clone(),
        Some(admitted.clone()),
        TENANT,
    );
    assert!(!denied.response.allowed, "{denied:?}");
    let text = message(&denied);
    assert!(text.contains("=8 exceeds maximum 4"), "{text}");
    assert!(!text.contains("already so"), "{text}");
    assert!(
        text.contains(r#"exemption "platform" admitted this workload"#),
        "{text}"
    );
    assert!(denied.summary.unchanged.is_empty(), "nothing carried");
    let ids = rules_of(&denied);
    for id in ["limits.variables", "exemptions.unearnedMark"] {
        assert!(ids.contains(&id), "{id} in {ids:?}");
    }
    // The mutating webhook treats it as an UPDATE that enters the queue: the object's own
    // mark removed, no pod template rewritten.
    let mutated = ask(
        Endpoint::Mutate,
        update.clone(),
        Some(admitted.clone()),
        TENANT,
    );
    let paths: Vec<String> = mutated
        .patch
        .0
        .iter()
        .map(|op| op.path().to_string())
        .collect();
    assert_eq!(
        paths,
        ["/metadata/annotations/launchgate.io~1exempted-by"],
        "{mutated:?}"
    );
    // Within the cap, she still cannot keep the exemption on its pod templates (the
    // operator's pods would inherit it): the marks are denied; without them it passes, as
    // her CREATE would, and its pods inherit nothing.
    let small = hijacked(exempt_mpijob(4, "mpioperator/mpi-pi:openmpi"));
    let marked = ask(
        Endpoint::Validate,
        small.clone(),
        Some(admitted.clone()),
        TENANT,
    );
    assert_eq!(rules_of(&marked), ["exemptions.unearnedMark"]);
    let mut unmarked = small;
    for at in ["Launcher", "Worker"] {
        unmarked["spec"]["mpiReplicaSpecs"][at]["template"]["metadata"] = json!({});
    }
    unmarked["metadata"]["annotations"] = json!({});
    let passed = ask(Endpoint::Validate, unmarked, Some(admitted.clone()), TENANT);
    assert!(passed.response.allowed, "{}", message(&passed));
    // The platform team, whom the exemption names, updates it freely.
    let own = ask_as(
        Endpoint::Validate,
        update.clone(),
        Some(admitted.clone()),
        ADMIN,
        ADMINS,
    );
    assert!(own.response.allowed, "{}", message(&own));
    assert_eq!(own.summary.exempted_by.as_deref(), Some("platform"));
    let own = ask_as(Endpoint::Mutate, update, Some(admitted), ADMIN, ADMINS);
    assert!(own.patch.0.is_empty(), "{own:?}");
}

#[test]
fn kueues_admission_update_of_an_exempt_mpijob_passes() {
    let admitted = exempt_mpijob(8, "mpioperator/mpi-pi:openmpi");
    let mut unsuspended = admitted.clone();
    unsuspended["spec"]["runPolicy"]["suspend"] = json!(false);
    for at in ["Launcher", "Worker"] {
        unsuspended["spec"]["mpiReplicaSpecs"][at]["template"]["spec"]["nodeSelector"] =
            json!({"flavor": "a100"});
    }
    let update = ask(
        Endpoint::Validate,
        unsuspended.clone(),
        Some(admitted.clone()),
        KUEUE,
    );
    assert!(update.response.allowed, "{}", message(&update));
    let mutated = ask(
        Endpoint::Mutate,
        unsuspended.clone(),
        Some(admitted.clone()),
        KUEUE,
    );
    assert!(mutated.patch.0.is_empty(), "{mutated:?}");
    // The same UPDATE from the tenant is hers: judged as her CREATE.
    let tenants = ask(Endpoint::Validate, unsuspended, Some(admitted), TENANT);
    assert!(!tenants.response.allowed);
    assert!(rules_of(&tenants).contains(&"limits.variables"));
}

#[test]
fn the_workload_updaters_are_controllers_not_everyone() {
    for everyone in ["*", "", "system:serviceaccount:*"] {
        let config = CONFIG.replace(
            "match:\n",
            &format!("match:\n  workloadUpdaters: [{everyone:?}]\n"),
        );
        let errors = Policy::from_yaml(&config).unwrap_err().to_string();
        assert!(
            errors.contains("match.workloadUpdaters[0]"),
            "{everyone:?}: {errors}"
        );
    }
    // With no updater named, Kueue's admission of an exempt run is judged as its CREATE.
    let config = CONFIG.replace("match:\n", "match:\n  workloadUpdaters: []\n");
    let policy = Policy::from_yaml(&config).unwrap();
    let admitted = exempt_mpijob(8, "mpioperator/mpi-pi:openmpi");
    let mut unsuspended = admitted.clone();
    unsuspended["spec"]["runPolicy"]["suspend"] = json!(false);
    let mut request = AdmissionRequest::synthetic_create(unsuspended, Some("research")).unwrap();
    request.operation = Operation::Update;
    request.old_object = Some(admitted);
    request.user_info = Some(json!({"username": KUEUE}));
    let judged = decide(&policy, Endpoint::Validate, &request, &NoCluster);
    assert!(!judged.response.allowed);
}
