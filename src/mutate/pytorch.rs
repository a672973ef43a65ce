//! PyTorch distributed wiring: `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK` (env://),
//! their torchrun twins `PET_MASTER_ADDR`, `PET_MASTER_PORT`, `PET_NNODES`, `PET_NODE_RANK`,
//! `PET_NPROC_PER_NODE`, the `pytorchjob-port` container port and an optional TCP
//! wait-for-master init container — done in admission, for every kind of launch workload.
//!
//! One module per workload kind, all writing through [`env`]:
//!
//! * [`volcano`] — a Volcano Job with `spec.plugins.pytorch` gets the job-wide values in every
//!   task template; each Volcano pod gets its `RANK` from the `volcano.sh/task-index`
//!   annotation (never the pod name). A pod whose Job was never mutated is completed from the
//!   owner Job read through [`crate::cluster::ClusterView`].
//! * [`indexed_job`] — an opted-in batch/v1 Indexed Job gets everything at Job level, `RANK`
//!   as a downward-API `fieldRef` on the completion-index annotation.
//! * [`pytorchjob`] — a Kubeflow PyTorchJob: the operator sets the env itself; only what it
//!   lacks is added.
//! * [`jobset`] — a JobSet opted in like an Indexed Job: its templates record the decision and
//!   each pod is wired in full at pod admission, its rank from its job and completion index.
//! * [`deferred`] — a Job with only a `generateName`: the decision is recorded on its
//!   templates and each pod is wired in full at pod admission (never half-wired).
//!
//! A Trainer v2 TrainJob is never given PyTorch env: Trainer's torch plugin sets `PET_NNODES`,
//! `PET_NPROC_PER_NODE`, `PET_NODE_RANK` and `PET_MASTER_ADDR/PORT` itself and rejects them
//! from anyone else. A queue's `nprocPerNode` becomes the TrainJob's
//! `spec.trainer.numProcPerNode` when that is unset; a TrainJob that asks for wiring is told why
//! it gets none.
//!
//! hostNetwork pods get `dnsPolicy: ClusterFirstWithHostNet` unless the user wrote a
//! `dnsPolicy` ([`crate::workload::intent`]); every env read and write follows the last entry of
//! a name (the one the kubelet uses).
//!
//! `WORLD_SIZE` (and `PET_NNODES`) is the number of **pods** (nodes) that rendezvous, never the
//! number of processes: with one process per pod it is what `init_process_group("env://")`
//! needs, and torchrun replaces `WORLD_SIZE`/`RANK` for its workers with
//! `nnodes × nproc_per_node` and the global process rank.
//!
//! Structural problems (no master task, several master replicas, an Indexed Job that can never
//! rendezvous) are read by [`crate::topology`] and denied by the validating webhook
//! ([`crate::validate::distributed`]) when the queue says
//! `onUnwirable: deny`; the mutator skips the wiring and warns either way.

pub mod deferred;
pub mod env;
pub mod indexed_job;
pub mod jobset;
pub mod pytorchjob;
pub mod volcano;

use super::{Findings, MutationContext, Mutator};
use crate::topology::{IndexedJobs, NprocPerNode, OPT_IN_ANNOTATION, PytorchConfig};
use crate::workload::{self, WorkloadKind};
use serde_json::{Value, json};

/// The pytorch mutator.
pub const MUTATOR: Mutator = Mutator {
    name: "pytorch",
    run: mutate,
};

pub fn mutate(ctx: &MutationContext<'_>, object: &mut Value, f: &mut Findings) -> bool {
    let cfg = ctx.settings.pytorch;
    if !cfg.enabled || !object.is_object() || (ctx.child && ctx.kind != WorkloadKind::Pod) {
        return false;
    }
    let kind = ctx.kind;
    if kind == WorkloadKind::VolcanoJob {
        volcano::mutate_job(ctx, cfg, object, f)
    } else if kind == WorkloadKind::Pod && deferred::is_deferred(object) {
        deferred::mutate_pod(ctx, cfg, object, f)
    } else if kind == WorkloadKind::Pod {
        volcano::mutate_pod(ctx, cfg, object, f)
    } else if kind == WorkloadKind::BatchJob {
        indexed_job::mutate(ctx, cfg, object, f)
    } else if kind == WorkloadKind::PyTorchJob {
        pytorchjob::mutate(ctx, cfg, object, f)
    } else if kind == WorkloadKind::JobSet {
        jobset::mutate(ctx, cfg, object, f)
    } else if kind == WorkloadKind::TrainJob {
        trainjob(cfg, object, f)
    } else {
        false
    }
}

/// A TrainJob: never env (Trainer owns it); the queue's process count as
/// `spec.trainer.numProcPerNode` when unset; a word when the TrainJob or queue asks for wiring.
fn trainjob(cfg: &PytorchConfig, object: &mut Value, findings: &mut Findings) -> bool {
    let asked = object
        .as_object()
        .and_then(|o| workload::annotation(o, OPT_IN_ANNOTATION))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        || cfg.indexed_jobs == IndexedJobs::All;
    if asked {
        findings.warn(
            "launchgate: a TrainJob gets no PyTorch env from launchgate: Kubeflow Trainer sets PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT from spec.trainer.numNodes and numProcPerNode and rejects them from anyone else",
        );
    }
    let Some(NprocPerNode::Count(n)) = cfg.nproc_per_node else {
        return false;
    };
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return false;
    };
    let trainer = spec.entry("trainer").or_insert_with(|| json!({}));
    match trainer.as_object_mut() {
        Some(t) if t.get("numProcPerNode").is_none_or(Value::is_null) => {
            t.insert("numProcPerNode".into(), json!(n));
            true
        }
        _ => false,
    }
}

/// Reports problems found while wiring: always a warning from the mutator.
pub(crate) fn warn_unwirable(findings: &mut Findings, problems: &[String]) {
    for p in problems {
        findings.warn(format!("launchgate: PyTorch wiring skipped: {p}"));
    }
}

#[cfg(test)]
mod mutator_tests {
    use super::*;
    use crate::mutate::test_support::mutate_with;
    use crate::topology::OPT_IN_ANNOTATION;
    use crate::topology::volcano::RANK_OFFSET_ANNOTATION;
    use serde_json::json;

    fn vcjob(master_replicas: i64) -> Value {
        json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "wandb"},
        "spec": {"plugins": {"pytorch": ["--port=5000"]}, "tasks": [
            {"name": "master", "replicas": master_replicas, "template": {"spec": {"containers": [
                {"name": "train"}, {"name": "istio-proxy", "ports": [{"name": "http", "containerPort": 15001}]}
            ]}}},
            {"name": "worker", "replicas": 2, "template": {"spec": {"containers": [{"name": "train"}]}}},
            {"name": "tensorboard", "replicas": 1, "template": {"spec": {"containers": [{"name": "tb"}]}}}
        ]}})
    }

    #[test]
    fn volcano_job_is_wired_once_and_sidecars_are_untouched() {
        let (out, f) = mutate_with(&MUTATOR, "{}", vcjob(1));
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);
        let master = &out["spec"]["tasks"][0]["template"];
        assert_eq!(
            master["metadata"]["annotations"][RANK_OFFSET_ANNOTATION],
            "0"
        );
        let train = &master["spec"]["containers"][0];
        assert_eq!(
            train["env"][0],
            json!({"name": "MASTER_ADDR", "value": "j-master-0.j"})
        );
        assert_eq!(
            train["env"][1],
            json!({"name": "MASTER_PORT", "value": "5000"})
        );
        assert_eq!(train["env"][2], json!({"name": "WORLD_SIZE", "value": "3"}));
        assert_eq!(train["ports"][0]["containerPort"], 5000);
        assert_eq!(
            master["spec"]["containers"][1],
            vcjob(1)["spec"]["tasks"][0]["template"]["spec"]["containers"][1],
            "sidecar untouched"
        );
        let worker = &out["spec"]["tasks"][1]["template"];
        assert_eq!(
            worker["metadata"]["annotations"][RANK_OFFSET_ANNOTATION],
            "1"
        );
        let tb = &out["spec"]["tasks"][2]["template"];
        assert_eq!(
            tb["metadata"]["annotations"][RANK_OFFSET_ANNOTATION],
            "none"
        );
        assert!(
            tb["spec"]["containers"][0].get("ports").is_none(),
            "no port for extra tasks"
        );
        assert_eq!(tb["spec"]["containers"][0]["env"][2]["value"], "3");
        let (again, _) = mutate_with(&MUTATOR, "{}", out.clone());
        assert_eq!(again, out, "idempotent");
    }

    #[test]
    fn two_master_replicas_are_skipped_by_the_mutator_with_a_warning() {
        let (out, f) = mutate_with(&MUTATOR, "{}", vcjob(2));
        // Nothing wired; only the record that its pods take no rank.
        let mut expected = vcjob(2);
        for task in expected["spec"]["tasks"].as_array_mut().unwrap() {
            task["template"]["metadata"] = json!({"annotations": {RANK_OFFSET_ANNOTATION: "none"}});
        }
        assert_eq!(out, expected);
        assert!(
            f.warnings[0].contains("replicas of the PyTorch master task \"master\" is 2"),
            "{:?}",
            f.warnings
        );
    }

    #[test]
    fn wait_for_master_goes_to_workers_only() {
        let (out, _) = mutate_with(
            &MUTATOR,
            "{pytorch: {waitForMaster: {enabled: true, timeoutSeconds: 60}}}",
            vcjob(1),
        );
        assert!(
            out["spec"]["tasks"][0]["template"]["spec"]
                .get("initContainers")
                .is_none()
        );
        let init = &out["spec"]["tasks"][1]["template"]["spec"]["initContainers"][0];
        assert_eq!(init["name"], "wait-for-master");
        assert_eq!(init["env"][0]["value"], "j-master-0.j");
        assert_eq!(init["env"][1]["value"], "5000");
        assert_eq!(init["env"][2]["value"], "60");
    }

    #[test]
    fn a_trainjob_gets_no_env_and_the_queues_process_count() {
        let tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "run", "annotations": {OPT_IN_ANNOTATION: "true"}},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}});
        let (out, f) = mutate_with(&MUTATOR, "{pytorch: {nprocPerNode: 8}}", tj.clone());
        assert_eq!(
            out["spec"]["trainer"],
            json!({"numNodes": 2, "numProcPerNode": 8})
        );
        assert!(
            f.warnings[0].contains("rejects them from anyone else"),
            "{:?}",
            f.warnings
        );
        assert!(!serde_json::to_string(&out).unwrap().contains("PET_"));
        let mut own = tj.clone();
        own["spec"]["trainer"]["numProcPerNode"] = json!(4);
        let (out, _) = mutate_with(&MUTATOR, "{pytorch: {nprocPerNode: 8}}", own.clone());
        assert_eq!(out, own);
        let (out, _) = mutate_with(&MUTATOR, "{pytorch: {nprocPerNode: auto}}", tj.clone());
        assert_eq!(out, tj);
    }

    #[test]
    fn disabled_queue_and_malformed_objects_change_nothing() {
        let (out, _) = mutate_with(&MUTATOR, "{pytorch: {enabled: false}}", vcjob(1));
        assert_eq!(out, vcjob(1));
        for spec in [
            json!(null),
            json!({"plugins": {"pytorch": null}, "tasks": 3}),
            json!({"plugins": {"pytorch": {}}, "tasks": [1, {"name": "master", "replicas": 1, "template": 2}]}),
        ] {
            let mut job = vcjob(1);
            job["spec"] = spec;
            let _ = mutate_with(&MUTATOR, "{}", job);
        }
        for obj in [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {"volcano.sh/job-name": 3}}, "spec": []}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {"volcano.sh/job-name": "j", "volcano.sh/task-spec": "worker", "volcano.sh/task-index": "1"}}, "spec": {"containers": "x"}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "d", "annotations": {OPT_IN_ANNOTATION: "true"}}, "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "template": {"spec": {"subdomain": "d", "containers": [7]}}}}),
            json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {}, "spec": {"pytorchReplicaSpecs": {"Master": 1, "Worker": {"template": {"spec": {"containers": {}}}}}}}),
        ] {
            let _ = mutate_with(
                &MUTATOR,
                "{pytorch: {waitForMaster: {enabled: true}, nprocPerNode: 2}}",
                obj,
            );
        }
    }
}
