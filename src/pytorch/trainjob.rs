//! A Kubeflow Trainer v2 TrainJob is never given PyTorch env: Trainer's torch plugin sets
//! `PET_NNODES`, `PET_NPROC_PER_NODE`, `PET_NODE_RANK` and `PET_MASTER_ADDR/PORT` itself and
//! rejects them from anyone else, so it has no topology to read and nothing that can never
//! rendezvous. A queue's `nprocPerNode` becomes the TrainJob's `spec.trainer.numProcPerNode`
//! when that is unset; a TrainJob that asks for wiring is told why it gets none.

use super::config::{IndexedJobs, NprocPerNode, OPT_IN_ANNOTATION};
use super::site::{Site, Warnings};
use crate::patch::Node;
use crate::workload;
use serde_json::{Value, json};

/// A TrainJob: never env (Trainer owns it); the queue's process count as
/// `spec.trainer.numProcPerNode` when unset; a word when the TrainJob or queue asks for wiring.
pub fn mutate(ctx: &dyn Site, object: &mut Node<'_, Value>, findings: &mut dyn Warnings) -> bool {
    let cfg = ctx.pytorch();
    let asked = object
        .as_object()
        .and_then(|o| workload::annotation(o, OPT_IN_ANNOTATION))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        || cfg.indexed_jobs == IndexedJobs::All;
    if asked {
        findings.warn(
            crate::rules::PYTORCH_TRAIN_JOB,
            "launchgate: a TrainJob gets no PyTorch env from launchgate: Kubeflow Trainer sets PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT from spec.trainer.numNodes and numProcPerNode and rejects them from anyone else".into(),
        );
    }
    let Some(NprocPerNode::Count(n)) = cfg.nproc_per_node else {
        return false;
    };
    let Some(mut spec) = object.object("spec") else {
        return false;
    };
    if spec.get("trainer").is_some_and(|t| !t.is_object()) {
        return false;
    }
    let mut trainer = spec.object_or_new("trainer");
    if trainer.get("numProcPerNode").is_none_or(Value::is_null) {
        trainer.set("numProcPerNode", json!(n));
        true
    } else {
        false
    }
}
