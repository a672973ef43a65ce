//! A TrainJob judged as Kubeflow Trainer will run it: its size from the runtime it names, the
//! JobSet Trainer makes for it held to the same totals.

use crate::admission::AdmissionRequest;
use crate::cluster::{ClusterView, NoCluster, StaticCluster};
use crate::judge::judge;
use crate::policy::Policy;
use serde_json::{Value, json};

const TRAINER: &str = "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager";

fn policy(extra_limits: &str) -> Policy {
    Policy::from_yaml(&format!(
        "queues:\n  q:\n    limits:\n      totals: {{nvidia.com/gpu: {{maximum: 16}}}}\n{extra_limits}"
    ))
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A ClusterTrainingRuntime of `nodes` nodes with `gpus` GPUs each, as Trainer's manifests
/// write one.
pub(crate) fn runtime(name: &str, nodes: i64, gpus: i64) -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {"mlPolicy": {"numNodes": nodes, "torch": {"numProcPerNode": "auto"}},
            "template": {"spec": {"replicatedJobs": [{"name": "node", "replicas": 1,
                "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"containers": [{"name": "node",
                        "image": "pytorch/pytorch:2.7.1",
                        "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}}]}}}})
}

/// A launch TrainJob of queue `q` that sets nothing of its size.
fn trainjob(runtime: &str) -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "run", "namespace": "wandb",
                     "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": "q"}},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": {"image": "acme/train:1"}}})
}

fn judged(policy: &Policy, object: Value, cluster: &dyn ClusterView) -> crate::judge::Judgement {
    let request = AdmissionRequest::synthetic_create(object, Some("wandb")).unwrap();
    judge(policy, &request, cluster)
}

#[test]
fn a_trainjob_that_leaves_its_size_to_the_runtime_is_counted_as_the_runtime() {
    let cluster = StaticCluster::default().with_training_runtime(runtime("torch-64", 64, 8));
    let j = judged(&policy(""), trainjob("torch-64"), &cluster);
    assert!(!j.allowed(), "64 × 8 GPUs admitted: {:?}", j.warnings());
    let message = j.message();
    assert!(
        message.contains(
            r#"queue "q": total nvidia.com/gpu over all pods=512 exceeds maximum 16 (totals) (ClusterTrainingRuntime "torch-64" replicatedJobs[0] (node): 64 × 8)"#
        ),
        "{message}"
    );
    // What the TrainJob sets is what Trainer runs: 2 nodes of 8 fit.
    let mut small = trainjob("torch-64");
    small["spec"]["trainer"]["numNodes"] = json!(2);
    let j = judged(&policy(""), small.clone(), &cluster);
    assert!(j.allowed(), "{}", j.message());
    // numNodes alone: the runtime's 8 GPUs a node count.
    small["spec"]["trainer"]["numNodes"] = json!(4);
    let j = judged(&policy(""), small, &cluster);
    assert!(
        j.message()
            .contains("total nvidia.com/gpu over all pods=32 exceeds maximum 16"),
        "{}",
        j.message()
    );
}

#[test]
fn a_runtime_that_cannot_be_read_is_never_counted_as_one_node_without_gpus() {
    // Offline: the queue decides; `deny` by default.
    let j = judged(&policy(""), trainjob("torch-64"), &NoCluster);
    assert!(!j.allowed());
    let message = j.message();
    for part in [
        r#"queue "q": cannot verify the runtime's size"#,
        "spec.trainer.numNodes and spec.trainer.resourcesPerNode",
        r#"ClusterTrainingRuntime "torch-64""#,
        "(limits.unverifiableRuntime: deny)",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    // Connected, and the runtime is not there.
    let j = judged(&policy(""), trainjob("gone"), &StaticCluster::default());
    assert!(
        j.message().contains("which is not in the cluster"),
        "{}",
        j.message()
    );
    // `warn`: admitted, and said so.
    let warn = policy("      unverifiableRuntime: warn\n");
    let j = judged(&warn, trainjob("torch-64"), &NoCluster);
    assert!(j.allowed(), "{}", j.message());
    assert!(
        j.warnings()
            .iter()
            .any(|w| w.message.contains("cannot verify the runtime's size")),
        "{:?}",
        j.warnings()
    );
    // A TrainJob that sets its size is judged on it; a queue that bounds no size has nothing
    // to verify.
    let mut sized = trainjob("torch-64");
    sized["spec"]["trainer"]["numNodes"] = json!(2);
    sized["spec"]["trainer"]["resourcesPerNode"] = json!({"limits": {"nvidia.com/gpu": 8}});
    assert!(judged(&policy(""), sized, &NoCluster).allowed());
    let unbounded = Policy::from_yaml("queues:\n  q: {}\n").unwrap();
    assert!(judged(&unbounded, trainjob("torch-64"), &NoCluster).allowed());
}

#[test]
fn the_gpu_hour_ceiling_counts_the_runtimes_gpus() {
    let cluster = StaticCluster::default().with_training_runtime(runtime("torch-64", 64, 8));
    let policy =
        Policy::from_yaml("queues:\n  q:\n    guardrails:\n      costCeiling: {maxGpuHours: 64}\n")
            .unwrap();
    let mut tj = trainjob("torch-64");
    tj["spec"]["activeDeadlineSeconds"] = json!(3600);
    let j = judged(&policy, tj, &cluster);
    assert!(!j.allowed());
    assert!(j.message().contains("512 GPUs"), "{}", j.message());
}

/// The JobSet Trainer makes for `trainjob` from a runtime of `nodes` × `gpus`, as Trainer's
/// controller sends it (named after the TrainJob, owned by it, the queue label launchgate's
/// runtime patch put on the trainer's pods).
fn trainer_jobset(nodes: i64, gpus: i64) -> Value {
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "run", "namespace": "wandb",
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": "run", "uid": "u-1", "controller": true}]},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {
            "parallelism": nodes, "completions": nodes,
            "template": {"metadata": {"labels": {"launchgate.io/queue": "q"}},
                "spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2.7.1",
                    "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}}]}})
}

#[test]
fn the_jobset_trainer_makes_is_held_to_its_trainjobs_queue_totals() {
    let as_trainer = |object: Value| {
        let mut request = AdmissionRequest::synthetic_create(object, Some("wandb")).unwrap();
        request.user_info = Some(json!({"username": TRAINER}));
        judge(&policy(""), &request, &NoCluster)
    };
    // The runtime grew after the TrainJob was admitted: Trainer renders 8 × 8.
    let j = as_trainer(trainer_jobset(8, 8));
    assert!(!j.allowed(), "a 64-GPU JobSet of a TrainJob was admitted");
    assert!(
        j.message().contains(
            r#"queue "q": total nvidia.com/gpu over all pods=64 exceeds maximum 16 (totals)"#
        ),
        "{}",
        j.message()
    );
    // Within the totals it is judged per pod, as before: no workload-level rule, no Job
    // defaults.
    let j = as_trainer(trainer_jobset(2, 8));
    assert!(j.allowed(), "{}", j.message());
}

#[test]
fn the_jobset_trainer_makes_is_held_to_its_trainjobs_gpu_hour_ceiling() {
    // Admitted at 1 node × 1 GPU × 10 h in a 16 GPU-hour queue; its (tenant-owned) runtime
    // then grows by 15 GPUs.
    let policy = Policy::from_yaml(
        "queues:
  q:
    limits: {trainingRuntimes: namespaced}
    guardrails:
      costCeiling: {maxGpuHours: 16}
",
    )
    .unwrap();
    let mut tj = trainjob("torch");
    tj["spec"]["activeDeadlineSeconds"] = json!(36000);
    let as_trainer = |object: Value, cluster: &dyn ClusterView| {
        let mut request = AdmissionRequest::synthetic_create(object, Some("wandb")).unwrap();
        request.user_info = Some(json!({"username": TRAINER}));
        judge(&policy, &request, cluster)
    };
    let cluster = StaticCluster::default().with_workload(tj.clone());
    let grown = as_trainer(trainer_jobset(1, 16), &cluster);
    assert!(!grown.allowed(), "a 16-GPU × 10 h JobSet was admitted");
    assert!(
        grown
            .message()
            .contains("16 GPUs at once (nvidia.com/gpu spec.replicatedJobs[0].template.spec.template: 1 × 16) × spec.activeDeadlineSeconds 36000 (10.00 h) = 160.00 GPU-hours"),
        "{}",
        grown.message()
    );
    // As admitted: within the ceiling.
    assert!(as_trainer(trainer_jobset(1, 1), &cluster).allowed());
    // Its TrainJob unread (no lookups): the JobSet's own bound counts, and it has none.
    let unread = as_trainer(trainer_jobset(1, 1), &NoCluster);
    assert!(!unread.allowed());
    assert!(
        unread
            .message()
            .contains("the run this JobSet belongs to cannot be read"),
        "{}",
        unread.message()
    );
}

/// The node container of launchgate's runtime patch in a mutated TrainJob.
fn patched_node(tj: &Value) -> Value {
    tj["spec"]["runtimePatches"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["manager"] == "launchgate.io/admission"))
        .map(|p| {
            p["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
                ["template"]["spec"]["containers"][0]
                .clone()
        })
        .unwrap_or(Value::Null)
}

/// What the API server says of a container whose securityContext is the runtime's with the
/// patch's over it (the checks `ValidateSecurityContext` makes that hardening can break).
fn invalid_merged(runtime_sc: &Value, patch_sc: &Value) -> Option<&'static str> {
    let field = |k: &str| patch_sc.get(k).or_else(|| runtime_sc.get(k));
    let privileged = field("privileged") == Some(&json!(true));
    let no_escalation = field("allowPrivilegeEscalation") == Some(&json!(false));
    let adds = |sc: &Value| {
        sc["capabilities"]["add"]
            .as_array()
            .is_some_and(|a| a.iter().any(|c| c == "SYS_ADMIN" || c == "CAP_SYS_ADMIN"))
    };
    if no_escalation && privileged {
        return Some("cannot set allowPrivilegeEscalation to false and privileged to true");
    }
    if no_escalation && (adds(runtime_sc) || adds(patch_sc)) {
        return Some(
            "cannot set allowPrivilegeEscalation to false and capabilities.Add CAP_SYS_ADMIN",
        );
    }
    None
}

fn runtime_with_node_sc(name: &str, sc: Value) -> Value {
    let mut rt = runtime(name, 2, 8);
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
        [0]["securityContext"] = sc;
    rt
}

#[test]
fn hardening_never_makes_a_privileged_runtime_invalid() {
    let unbounded = Policy::from_yaml("queues:\n  q: {}\n").unwrap();
    for sc in [
        json!({"privileged": true}),
        json!({"capabilities": {"add": ["IPC_LOCK", "SYS_ADMIN"]}}),
    ] {
        let cluster = StaticCluster::default()
            .with_training_runtime(runtime_with_node_sc("rdma", sc.clone()));
        let j = judged(&unbounded, trainjob("rdma"), &cluster);
        assert!(j.allowed(), "{}", j.message());
        let node = patched_node(j.mutated.as_ref().unwrap());
        assert_eq!(
            invalid_merged(&sc, &node["securityContext"]),
            None,
            "the merged node container is invalid: runtime {sc}, patch {node}"
        );
    }
    // Privileged: left as is and said so, as for a Job.
    let cluster = StaticCluster::default()
        .with_training_runtime(runtime_with_node_sc("rdma", json!({"privileged": true})));
    let j = judged(&unbounded, trainjob("rdma"), &cluster);
    assert!(
        j.warnings().iter().any(|w| w.message.contains(
            r#"the node container of ClusterTrainingRuntime "rdma" (a TrainJob's trainer)"#
        ) && w
            .message
            .contains("is privileged; its securityContext was left as is")),
        "{:?}",
        j.warnings()
    );
    // A runtime that is not privileged gets every default, except what it sets itself.
    let cluster = StaticCluster::default().with_training_runtime(runtime_with_node_sc(
        "plain",
        json!({"seccompProfile": {"type": "Unconfined"}}),
    ));
    let j = judged(&unbounded, trainjob("plain"), &cluster);
    let node = patched_node(j.mutated.as_ref().unwrap());
    assert_eq!(
        node["securityContext"],
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}),
        "{node}"
    );
    // A second pass (reinvocation) changes nothing.
    let again = judged(&unbounded, j.mutated.clone().unwrap(), &cluster);
    assert!(
        again.mutation.patch.0.is_empty(),
        "{:?}",
        again.mutation.patch
    );
}

#[test]
fn a_runtime_that_cannot_be_read_gets_no_field_it_could_contradict() {
    let unbounded = Policy::from_yaml("queues:\n  q: {}\n").unwrap();
    let j = judged(&unbounded, trainjob("rdma"), &NoCluster);
    assert!(j.allowed(), "{}", j.message());
    let node = patched_node(j.mutated.as_ref().unwrap());
    assert_eq!(
        node["securityContext"],
        json!({"capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}),
        "{node}"
    );
    assert!(
        j.warnings().iter().any(|w| w.message.contains(
            r#"launchgate: ClusterTrainingRuntime "rdma" cannot be read, so allowPrivilegeEscalation was not set on the TrainJob's node pods"#
        )),
        "{:?}",
        j.warnings()
    );
    let again = judged(&unbounded, j.mutated.clone().unwrap(), &NoCluster);
    assert!(
        again.mutation.patch.0.is_empty(),
        "{:?}",
        again.mutation.patch
    );
}

#[test]
fn a_tenants_privileged_runtime_patch_is_never_contradicted() {
    let unbounded = Policy::from_yaml("queues:\n  q: {}\n").unwrap();
    let mut tj = trainjob("plain");
    tj["spec"]["runtimePatches"] = json!([{"manager": "acme.io/rdma",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node",
            "template": {"spec": {"template": {"spec": {"containers": [
                {"name": "node", "securityContext": {"privileged": true}}]}}}}}]}}}}]);
    let cluster = StaticCluster::default().with_training_runtime(runtime("plain", 1, 8));
    for cluster in [&cluster as &dyn ClusterView, &NoCluster] {
        let j = judged(&unbounded, tj.clone(), cluster);
        assert!(j.allowed(), "{}", j.message());
        let node = patched_node(j.mutated.as_ref().unwrap());
        assert_eq!(
            invalid_merged(&json!({"privileged": true}), &node["securityContext"]),
            None,
            "{node}"
        );
        assert!(
            j.warnings().iter().any(|w| w
                .message
                .contains("is privileged; its securityContext was left as is")),
            "{:?}",
            j.warnings()
        );
    }
}
