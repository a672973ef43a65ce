//! Wiring that waits for the pod: `generateName` workloads.
//!
//! The W&B agent names Jobs by `generateName` when the queue gives no name, so at Job admission
//! `MASTER_ADDR` (`<job>-0.<subdomain>`, `<job>-master-0.<job>`) cannot be known. launchgate
//! then writes **no** rendezvous env into the template (a pod must never run with `WORLD_SIZE`
//! but no address) and records its decision on each pod template in [`DEFERRED_ANNOTATION`]:
//! the address with the placeholder [`JOB_PLACEHOLDER`] for the Job's name, the port, the world
//! size and whether the task waits for the master. The controllers copy template annotations
//! onto every pod, and every pod carries its Job's name (`batch.kubernetes.io/job-name` /
//! `job-name` from the Job controller, `volcano.sh/job-name` from Volcano), so at pod admission
//! the wiring is completed in full: `MASTER_ADDR`/`PET_MASTER_ADDR` naming the rank-0 pod,
//! `MASTER_PORT`, `WORLD_SIZE`, `RANK` and their twins, and the port.
//!
//! A JobSet's pods are always wired this way, named or not: a pod's rank is
//! `base + completions × job-index + completion-index` ([`JobSetRank`]), which no downward-API
//! field gives, and every pod carries `jobset.sigs.k8s.io/jobset-name` and
//! `jobset.sigs.k8s.io/job-index` from JobSet's controller.
//!
//! A pod with the record but no Job name (never made by those controllers) gets nothing and a
//! warning; it is never denied (its controller would retry the pod forever). The pods are
//! wired in [`super::pod`]; this module is the record.

use crate::patch::MapNode;
use crate::workload;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Stands for the Job's name in [`Deferred::master_addr`] (never part of a Kubernetes name).
pub const JOB_PLACEHOLDER: &str = "{job}";

/// Template (and so pod) annotation: the wiring launchgate decided at Job admission, to be
/// completed when the pod (and so the Job's name) is known.
pub const DEFERRED_ANNOTATION: &str = "launchgate.io/pytorch-wiring";

/// What launchgate decided at Job admission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deferred {
    /// `MASTER_ADDR` with [`JOB_PLACEHOLDER`] for the Job's name.
    pub master_addr: String,
    pub port: u16,
    /// `WORLD_SIZE`: pods that rendezvous.
    pub nnodes: i64,
    /// This template's pods take a rank (and the port); false for e.g. a Volcano tensorboard task.
    pub ranked: bool,
    /// This template's pods wait for the master (when the queue enables `waitForMaster`).
    pub wait_for_master: bool,
    /// A JobSet's replicated job: where its pods' ranks start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobset_rank: Option<JobSetRank>,
}

/// The ranks of one replicated job of a JobSet: pod `p` of Job `j` has rank
/// `base + stride × j + p`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSetRank {
    pub base: i64,
    pub stride: i64,
}

impl Deferred {
    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a plain struct serialises")
    }
}

/// Writes the record onto a pod template; true when it changed it.
pub fn record(template: &mut MapNode<'_>, deferred: &Deferred) -> bool {
    workload::set_annotation(template, DEFERRED_ANNOTATION, &deferred.to_annotation())
}

/// True when a pod carries the record.
pub fn is_deferred(pod: &Value) -> bool {
    pod.as_object()
        .and_then(|p| workload::annotation(p, DEFERRED_ANNOTATION))
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::Node;

    #[test]
    fn the_record_round_trips_and_is_written_once() {
        let d = Deferred {
            master_addr: "{job}-0.ddp".into(),
            port: 23456,
            nnodes: 3,
            ranked: true,
            wait_for_master: true,
            jobset_rank: None,
        };
        let text = d.to_annotation();
        assert!(!text.contains("jobsetRank"), "{text}");
        assert_eq!(serde_json::from_str::<Deferred>(&text).unwrap(), d);
        assert!(text.contains("\"masterAddr\":\"{job}-0.ddp\""), "{text}");
        let mut template = serde_json::Map::new();
        assert!(record(&mut Node::scratch(&mut template), &d));
        assert!(!record(&mut Node::scratch(&mut template), &d));
        assert!(is_deferred(&Value::Object(template)));
    }
}
