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
  fields:
    limits:
      fields:
        - {path: "containers[*].resources.limits.cpu", type: quantity, maximum: "4"}
      totals:
        nvidia.com/gpu: {maximum: 16}
  deadline:
    limits:
      maxActiveDeadlineSeconds: 3600
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

/// True when an UPDATE carries `new` given the old object's violations `admitted`.
fn carried(new: &Violation, admitted: &[Violation]) -> bool {
    validate::Admitted::new(admitted).carries(new)
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
    assert!(carried(&at(rules::LIMITS_TOTALS, "32"), &admitted));
    assert!(carried(&at(rules::LIMITS_TOTALS, "24"), &admitted));
    assert!(!carried(&at(rules::LIMITS_TOTALS, "48"), &admitted));
    assert!(!carried(
        &at(rules::LIMITS_TOTALS, "24").limit("exceeds maximum 8"),
        &admitted
    ));
    let memory = [at(rules::LIMITS_TOTALS, "64Gi")];
    assert!(carried(&at(rules::LIMITS_TOTALS, "32Gi"), &memory));
    assert!(!carried(&at(rules::LIMITS_TOTALS, "65Gi"), &memory));
    // Changed: only the same value.
    let registries = [at(rules::LIMITS_ALLOWED_REGISTRIES, "8")];
    assert!(carried(
        &at(rules::LIMITS_ALLOWED_REGISTRIES, "8"),
        &registries
    ));
    assert!(!carried(
        &at(rules::LIMITS_ALLOWED_REGISTRIES, "6"),
        &registries
    ));
    // Grown over a maximum: an amount over its maximum compares as Grown, any other violation
    // of the rule as Changed.
    let over = |value: &str| at(rules::LIMITS_VARIABLES, value).bound("exceeds maximum 4", true);
    let variables = [over("8")];
    assert!(carried(&over("8"), &variables));
    assert!(carried(&over("6"), &variables));
    assert!(!carried(&over("9"), &variables));
    let typed = [at(rules::LIMITS_VARIABLES, "8").limit("is not an integer")];
    assert!(carried(
        &at(rules::LIMITS_VARIABLES, "8").limit("is not an integer"),
        &typed
    ));
    assert!(!carried(
        &at(rules::LIMITS_VARIABLES, "6").limit("is not an integer"),
        &typed
    ));
    // Judged on CREATE only; on every request alike.
    assert!(carried(&at(rules::PYTORCH_ON_UNWIRABLE, "x"), &[]));
    assert!(!carried(
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

/// `job` with its Kueue label as the queue writes it, so only the rule under test is broken.
fn in_gpu(parallelism: i64, gpus: i64) -> Value {
    let mut j = job(Some("gpu"), parallelism, gpus);
    j["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = json!("team-a");
    j
}

#[test]
fn a_grandfathered_per_container_amount_passes_an_update_that_does_not_grow_it() {
    // 8 GPUs in a container, over the variable's maximum 4: admitted before the limit.
    let admitted = in_gpu(1, 8);
    for (gpus, passes) in [(8, true), (6, true), (4, true), (9, false)] {
        let mut updated = in_gpu(1, gpus);
        updated["metadata"]["labels"]["note"] = json!("x");
        let d = ask(Endpoint::Validate, updated, Some(admitted.clone()), TENANT);
        assert_eq!(d.response.allowed, passes, "8 → {gpus}: {}", message(&d));
        if passes && gpus > 4 {
            assert_eq!(rules::ids(&d.summary.unchanged), ["limits.variables"]);
            let warned = d.response.warnings.join("\n");
            assert!(warned.contains("already so before this update"), "{warned}");
        }
        if !passes {
            assert_eq!(rules_of(&d), ["limits.variables"]);
        }
    }
}

/// A rule whose UPDATE comparison is "grown", an object admitted over its bound, and updates of
/// it: smaller, the same, larger — each with whether it passes.
struct Grown {
    rule: &'static rules::Rule,
    admitted: Value,
    updates: Vec<(Value, bool)>,
}

fn deadline_job(queue: &str, gpus: i64, seconds: i64) -> Value {
    let mut j = job(Some(queue), 1, gpus);
    j["spec"]["activeDeadlineSeconds"] = json!(seconds);
    j
}

fn fields_pod(cpu: &str, containers: usize) -> Value {
    let containers: Vec<Value> = (0..containers)
        .map(|i| {
            json!({"name": format!("c{i}"), "image": "acme/t:1",
                "resources": {"limits": {"cpu": cpu}}})
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "research",
            "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": "fields"}},
        "spec": {"restartPolicy": "Never", "containers": containers}})
}

#[test]
fn each_rule_that_judges_growth_passes_an_update_that_did_not_grow() {
    let totals = |parallelism: i64| {
        let mut j = job(Some("fields"), parallelism, 4);
        j["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!(1);
        j
    };
    let walk = [
        Grown {
            rule: rules::LIMITS_VARIABLES,
            admitted: in_gpu(1, 8),
            updates: vec![
                (in_gpu(1, 6), true),
                (in_gpu(1, 8), true),
                (in_gpu(1, 9), false),
            ],
        },
        Grown {
            rule: rules::LIMITS_FIELDS,
            admitted: fields_pod("8", 1),
            updates: vec![
                (fields_pod("6", 1), true),
                (fields_pod("8", 1), true),
                (fields_pod("9", 1), false),
            ],
        },
        Grown {
            rule: rules::LIMITS_TOTALS,
            admitted: totals(16),
            updates: vec![(totals(12), true), (totals(16), true), (totals(20), false)],
        },
        Grown {
            rule: rules::LIMITS_MAX_ACTIVE_DEADLINE_SECONDS,
            admitted: deadline_job("deadline", 0, 7200),
            updates: vec![
                (deadline_job("deadline", 0, 5000), true),
                (deadline_job("deadline", 0, 7200), true),
                (deadline_job("deadline", 0, 9000), false),
            ],
        },
        Grown {
            rule: rules::GUARDRAILS_COST_CEILING,
            // 8 GPUs × 4 h = 32 GPU-hours, over the queue's 16.
            admitted: deadline_job("capped", 8, 4 * 3600),
            updates: vec![
                (deadline_job("capped", 8, 3 * 3600), true),
                (deadline_job("capped", 8, 4 * 3600), true),
                (deadline_job("capped", 8, 5 * 3600), false),
            ],
        },
    ];
    for case in &walk {
        for (update, passes) in &case.updates {
            let mut update = update.clone();
            update["metadata"]["labels"]["note"] = json!("x");
            let d = ask(
                Endpoint::Validate,
                update,
                Some(case.admitted.clone()),
                TENANT,
            );
            assert_eq!(
                d.response.allowed,
                *passes,
                "{}: {}",
                case.rule.id,
                message(&d)
            );
            if *passes {
                assert!(
                    rules::ids(&d.summary.unchanged).contains(&case.rule.id),
                    "{}: carried with a warning",
                    case.rule.id
                );
            } else {
                assert!(rules_of(&d).contains(&case.rule.id), "{}", case.rule.id);
            }
        }
    }
    // A Scale of a PyTorchJob the cache lists the namespace of and has not seen yet: down and
    // level pass, up is refused.
    let scale = |old: i64, new: i64| {
        let body = serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                "resource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"},
                "subResource": "scale", "name": "ddp", "namespace": "wandb", "operation": "UPDATE",
                "object": {"apiVersion": "autoscaling/v1", "kind": "Scale",
                    "metadata": {"name": "ddp", "namespace": "wandb"}, "spec": {"replicas": new}},
                "oldObject": {"apiVersion": "autoscaling/v1", "kind": "Scale",
                    "metadata": {"name": "ddp", "namespace": "wandb"}, "spec": {"replicas": old}},
                "userInfo": {"username": TENANT}}}))
        .unwrap();
        let out = review(
            &Policy::embedded_default(),
            Endpoint::Validate,
            &body,
            &crate::cluster::StaticCluster::default(),
        )
        .unwrap();
        (
            out.summary.violations,
            serde_json::from_slice::<Value>(&out.body).unwrap()["response"]["allowed"] == true,
        )
    };
    assert!(scale(2, 1).1 && scale(2, 2).1);
    let (found, allowed) = scale(2, 3);
    assert!(!allowed);
    assert_eq!(rules::ids(&found), ["scale.unreadableOwner"]);
    // Every rule the table says compares growth is walked above.
    let walked: Vec<&str> = walk
        .iter()
        .map(|c| c.rule.id)
        .chain(["scale.unreadableOwner"])
        .collect();
    for rule in rules::RULES {
        if matches!(
            rule.update,
            rules::OnUpdate::Grown | rules::OnUpdate::GrownOverMaximum
        ) {
            assert!(walked.contains(&rule.id), "{} is not walked", rule.id);
        }
    }
}

#[test]
fn a_rayclusters_deadline_field_does_not_satisfy_the_queues_maximum() {
    // spec.activeDeadlineSeconds is no RayCluster field (its CRD prunes it): a RayCluster runs
    // until it is deleted, whatever it carries.
    let cluster = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "c", "namespace": "research",
            "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": "deadline"}},
        "spec": {"activeDeadlineSeconds": 600,
            "headGroupSpec": {"template": {"spec": {"activeDeadlineSeconds": 600,
                "containers": [{"name": "ray-head", "image": "rayproject/ray:2.46.0"}]}}}}});
    let d = ask(Endpoint::Validate, cluster, None, TENANT);
    assert!(!d.response.allowed);
    assert_eq!(rules_of(&d), ["limits.maxActiveDeadlineSeconds"]);
    assert!(
        message(&d).contains("a RayCluster runs until it is deleted"),
        "{}",
        message(&d)
    );
    // A RayJob's own field bounds its run.
    let rayjob = json!({"apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": "j", "namespace": "research",
            "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": "deadline"}},
        "spec": {"activeDeadlineSeconds": 600, "shutdownAfterJobFinishes": true,
            "rayClusterSpec": {"headGroupSpec": {"template": {"spec": {
                "containers": [{"name": "ray-head", "image": "rayproject/ray:2.46.0"}]}}}}}});
    let d = ask(Endpoint::Validate, rayjob, None, TENANT);
    assert!(d.response.allowed, "{}", message(&d));
}

#[test]
fn an_update_of_thousands_of_violating_containers_is_judged_and_answered_in_bounds() {
    // 4,900 containers over the cpu maximum, admitted so: an UPDATE that does not grow them
    // passes, every one carried (compared in linear work: validate::check's tests count it).
    let admitted = fields_pod("8", 4_900);
    let mut relabelled = admitted.clone();
    relabelled["metadata"]["labels"]["note"] = json!("x");
    let d = ask(
        Endpoint::Validate,
        relabelled,
        Some(admitted.clone()),
        TENANT,
    );
    assert!(d.response.allowed, "{}", message(&d));
    assert_eq!(d.summary.unchanged.len(), 4_900);
    let warned: usize = d.response.warnings.iter().map(|w| w.chars().count()).sum();
    assert!(
        warned <= crate::admission::MAX_WARNINGS_TOTAL_CHARS + 64,
        "{warned}"
    );
    // The same Pod created: denied with the first violations and a count of the rest; the
    // summary (the decision log, the reports) has every one.
    let d = ask(Endpoint::Validate, admitted, None, TENANT);
    assert!(!d.response.allowed);
    assert_eq!(d.summary.violations.len(), 4_900);
    let text = message(&d);
    assert!(text.len() <= rules::MAX_MESSAGE_BYTES, "{}", text.len());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), rules::MAX_SHOWN_VIOLATIONS + 1, "{text}");
    assert_eq!(
        lines.last(),
        Some(
            &format!(
                "… and {} more violations",
                4_900 - rules::MAX_SHOWN_VIOLATIONS
            )
            .as_str()
        )
    );
}

#[test]
fn a_jobset_of_thousands_of_jobs_is_denied_with_a_bounded_message() {
    let jobs: Vec<Value> = (0..2_000)
        .map(|i| {
            json!({"name": format!("worker-{i}"), "replicas": 1, "template": {"spec": {
                "parallelism": 1, "completions": 1, "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "t", "image": "acme/t:1",
                        "resources": {"limits": {"cpu": 8, "nvidia.com/gpu": 8}}}]}}}}})
        })
        .collect();
    let jobset = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "wide", "namespace": "research",
            "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": "fields"}},
        "spec": {"replicatedJobs": jobs}});
    let d = ask(Endpoint::Validate, jobset, None, TENANT);
    assert!(!d.response.allowed);
    // Every violation is in the summary the decision log and the reports read: a cpu over the
    // maximum in each Job's container, and the totals.
    assert_eq!(d.summary.violations.len(), 2_001);
    let totals = d
        .summary
        .violations
        .iter()
        .find(|v| v.rule == rules::LIMITS_TOTALS)
        .expect("totals");
    assert!(
        totals
            .message
            .contains(&format!("… and {} more", 2_000 - rules::MAX_LISTED_PARTS)),
        "{}",
        totals.message
    );
    let text = message(&d);
    assert!(text.len() <= rules::MAX_MESSAGE_BYTES, "{}", text.len());
    assert!(
        text.lines().all(|l| l.len() <= rules::MAX_LINE_BYTES),
        "{text}"
    );
    assert!(
        text.ends_with(&format!(
            "… and {} more violations",
            2_001 - rules::MAX_SHOWN_VIOLATIONS
        )),
        "{text}"
    );
}
