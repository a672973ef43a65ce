//! Distributed PyTorch, one feature: what a distributed job looks like, read from the object
//! (where its master is, how many pods rendezvous — the world size — and where each pod's rank
//! comes from, and why a job that asks for wiring can never rendezvous), and the wiring it
//! drives: `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK` (env://), their torchrun twins
//! `PET_MASTER_ADDR`, `PET_MASTER_PORT`, `PET_NNODES`, `PET_NODE_RANK`, `PET_NPROC_PER_NODE`,
//! the `pytorchjob-port` container port and an optional TCP wait-for-master init container —
//! done in admission.
//!
//! One file per kind, each holding that kind's topology and its wiring:
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
//! * [`trainjob`] — a Trainer v2 TrainJob: never env (Trainer owns it), only its process count.
//! * [`pod`] — a pod: a [`deferred`] record completed, or a Volcano pod's rank.
//!
//! Beside them: [`config`] (the queue's `pytorch` settings), [`env`] (the variables and how they
//! are written), [`deferred`] (the record a workload without a name leaves on its templates)
//! and [`site`] (what the wiring needs from the mutating webhook that runs it).
//!
//! [`WIRING`] says which kinds are wired and how: a kind without an entry (a RayJob: Ray Train
//! sets up its own rendezvous) gets no PyTorch env and is never denied as unwirable.
//!
//! Both paths use this folder: the mutating webhook's `pytorch` mutator runs [`wire`]; the
//! validating webhook denies what [`problems`] finds when the queue says `onUnwirable: deny`
//! (the mutator skips the wiring and warns either way).
//!
//! hostNetwork pods get `dnsPolicy: ClusterFirstWithHostNet` unless the user wrote a
//! `dnsPolicy` ([`crate::workload::intent`]); every env read and write follows the last entry of
//! a name (the one the kubelet uses).
//!
//! `WORLD_SIZE` (and `PET_NNODES`) is the number of **pods** (nodes) that rendezvous, never the
//! number of processes: with one process per pod it is what `init_process_group("env://")`
//! needs, and torchrun replaces `WORLD_SIZE`/`RANK` for its workers with
//! `nnodes × nproc_per_node` and the global process rank.

pub mod config;
pub mod deferred;
pub mod env;
pub mod indexed_job;
pub mod jobset;
pub mod pod;
pub mod pytorchjob;
pub mod site;
pub mod trainjob;
pub mod volcano;

pub use config::{IndexedJobs, NprocPerNode, OnUnwirable, PytorchConfig, QuantityText};

use crate::patch::Node;
use crate::workload::WorkloadKind;
use serde_json::Value;
use site::{Site, Warnings};

/// Wires an object in place; true when it changed it.
pub type WireFn = fn(&dyn Site, &mut Node<'_, Value>, &mut dyn Warnings) -> bool;

/// Why an object can never rendezvous: the queue's settings, the object, its name (empty with
/// `generateName`).
pub type ProblemsFn = fn(&PytorchConfig, &Value, &str) -> Vec<String>;

/// How one kind is wired.
pub struct Wiring {
    pub wire: WireFn,
    /// `None` for a kind that nothing can make unwirable.
    pub problems: Option<ProblemsFn>,
}

/// The kinds that are wired, and how. A kind without an entry gets no PyTorch wiring.
pub static WIRING: &[(WorkloadKind, Wiring)] = &[
    (
        WorkloadKind::Pod,
        Wiring {
            wire: pod::mutate,
            problems: None,
        },
    ),
    (
        WorkloadKind::BatchJob,
        Wiring {
            wire: indexed_job::mutate,
            problems: Some(indexed_job::problems),
        },
    ),
    (
        WorkloadKind::VolcanoJob,
        Wiring {
            wire: volcano::mutate_job,
            problems: Some(|_, object, name| volcano::job_problems(object, name)),
        },
    ),
    (
        WorkloadKind::PyTorchJob,
        Wiring {
            wire: pytorchjob::mutate,
            problems: Some(|_, object, _| {
                let mut problems = pytorchjob::problems(object);
                problems.extend(pytorchjob::dns_problems(object));
                problems
            }),
        },
    ),
    (
        WorkloadKind::JobSet,
        Wiring {
            wire: jobset::mutate,
            problems: Some(jobset::problems),
        },
    ),
    (
        WorkloadKind::TrainJob,
        Wiring {
            wire: trainjob::mutate,
            problems: None,
        },
    ),
];

/// A kind's entry in [`WIRING`].
pub fn wiring_of(kind: WorkloadKind) -> Option<&'static Wiring> {
    WIRING.iter().find(|(k, _)| *k == kind).map(|(_, w)| w)
}

/// Wires a workload of `kind` (the queue's settings come with `ctx`); true when it changed it.
pub fn wire(
    kind: WorkloadKind,
    ctx: &dyn Site,
    object: &mut Node<'_, Value>,
    findings: &mut dyn Warnings,
) -> bool {
    wiring_of(kind).is_some_and(|w| (w.wire)(ctx, object, findings))
}

/// Why a workload that asks for PyTorch wiring can never rendezvous (empty when it can, or
/// when it asks for none). `object_name` is the request's name (empty with `generateName`).
pub fn problems(
    kind: WorkloadKind,
    cfg: &PytorchConfig,
    object: &Value,
    object_name: &str,
) -> Vec<String> {
    if !cfg.enabled || !object.is_object() {
        return Vec::new();
    }
    match wiring_of(kind).and_then(|w| w.problems) {
        Some(problems) => problems(cfg, object, object_name),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_kind_has_at_most_one_entry() {
        for (i, (kind, _)) in WIRING.iter().enumerate() {
            assert!(
                WIRING[i + 1..].iter().all(|(other, _)| other != kind),
                "{kind:?} has two entries: the second would never be read"
            );
        }
    }

    #[test]
    fn the_kind_alone_selects_the_unwirable_check() {
        // A Volcano Job with two masters can never rendezvous; the same object judged as a
        // kind whose entry has no check (or without an entry) is never unwirable.
        let job = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"plugins": {"pytorch": []}, "tasks": [
            {"name": "master", "replicas": 2, "template": {"spec": {"containers": [{"name": "t"}]}}}
        ]}});
        let cfg = PytorchConfig::default();
        assert!(!problems(WorkloadKind::VolcanoJob, &cfg, &job, "j").is_empty());
        for kind in [WorkloadKind::Pod, WorkloadKind::TrainJob] {
            assert!(problems(kind, &cfg, &job, "j").is_empty(), "{kind:?}");
        }
        let off = PytorchConfig {
            enabled: false,
            ..PytorchConfig::default()
        };
        assert!(problems(WorkloadKind::VolcanoJob, &off, &job, "j").is_empty());
    }
}
