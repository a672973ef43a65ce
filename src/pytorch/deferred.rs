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
//! warning; it is never denied (its controller would retry the pod forever).

use super::env::{self, EnvValue};
use super::volcano;
use crate::mutate::{Findings, MutationContext};
use crate::topology::jobset::{JOB_INDEX_KEY, JOBSET_NAME_KEY};
use crate::topology::volcano::{self as volcano_job, RANK_OFFSET_ANNOTATION};
use crate::topology::{JOB_PLACEHOLDER, JobWiring, PytorchConfig};
use crate::workload;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Template (and so pod) annotation: the wiring launchgate decided at Job admission, to be
/// completed when the pod (and so the Job's name) is known.
pub const DEFERRED_ANNOTATION: &str = "launchgate.io/pytorch-wiring";
/// Labels/annotations naming a pod's Job, in the order they are tried (a JobSet's pods also
/// carry their child Job's `job-name`: the JobSet's name comes first).
const JOB_NAME_KEYS: [&str; 4] = [
    JOBSET_NAME_KEY,
    "volcano.sh/job-name",
    "batch.kubernetes.io/job-name",
    "job-name",
];

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

/// The completion index of a Job's pod (label or annotation).
const COMPLETION_INDEX_KEY: &str = "batch.kubernetes.io/job-completion-index";

impl JobSetRank {
    /// The rank of a JobSet pod, from its job index and completion index; `None` (and why)
    /// when the pod does not carry them.
    fn of(&self, pod: &Map<String, Value>) -> Result<i64, String> {
        let read = |key: &str| {
            workload::label(pod, key)
                .or_else(|| workload::annotation(pod, key))
                .and_then(|v| v.parse::<i64>().ok())
                .ok_or_else(|| format!("no numeric {key}"))
        };
        let job = read(JOB_INDEX_KEY)?;
        let index = read(COMPLETION_INDEX_KEY)?;
        self.stride
            .checked_mul(job)
            .and_then(|r| r.checked_add(self.base))
            .and_then(|r| r.checked_add(index))
            .ok_or_else(|| "a rank that does not fit".to_string())
    }
}

impl Deferred {
    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a plain struct serialises")
    }
}

/// Writes the record onto a pod template; true when it changed it.
pub fn record(template: &mut Map<String, Value>, deferred: &Deferred) -> bool {
    let value = deferred.to_annotation();
    let annotations = workload::metadata_map_mut(template, "annotations");
    if annotations.get(DEFERRED_ANNOTATION).and_then(Value::as_str) == Some(value.as_str()) {
        return false;
    }
    annotations.insert(DEFERRED_ANNOTATION.into(), json!(value));
    true
}

/// True when a pod carries the record.
pub fn is_deferred(pod: &Value) -> bool {
    pod.as_object()
        .and_then(|p| workload::annotation(p, DEFERRED_ANNOTATION))
        .is_some()
}

fn job_name(pod: &Map<String, Value>) -> Option<&str> {
    JOB_NAME_KEYS.iter().find_map(|key| {
        workload::label(pod, key)
            .or_else(|| workload::annotation(pod, key))
            .filter(|v| !v.is_empty())
    })
}

/// Completes the wiring of a pod whose Job had no name at admission.
pub fn mutate_pod(
    ctx: &MutationContext<'_>,
    cfg: &PytorchConfig,
    object: &mut Value,
    findings: &mut Findings,
) -> bool {
    let Some(pod) = object.as_object() else {
        return false;
    };
    let text = workload::annotation(pod, DEFERRED_ANNOTATION).unwrap_or_default();
    let deferred: Deferred = match serde_json::from_str(text) {
        Ok(d) => d,
        Err(e) => {
            findings.warn(format!(
                "launchgate: this pod's {DEFERRED_ANNOTATION} annotation is not launchgate's record ({e}); PyTorch wiring skipped"
            ));
            return false;
        }
    };
    let Some(job) = job_name(pod).map(str::to_string) else {
        findings.warn(format!(
            "launchgate: this pod carries {DEFERRED_ANNOTATION} but no Job name label ({}); MASTER_ADDR cannot be derived, so no PyTorch env was written",
            JOB_NAME_KEYS.join(", ")
        ));
        return false;
    };
    let master_addr = deferred.master_addr.replace(JOB_PLACEHOLDER, &job);
    let wiring = JobWiring {
        master_addr: Some(master_addr.clone()),
        master_port: deferred.port,
        nnodes: deferred.nnodes,
    };
    let mut vars = env::job_vars(cfg, &wiring);
    let mut node_rank = None;
    let mut port = None;
    if deferred.ranked {
        let rank = match (deferred.jobset_rank, volcano_job::pod_place(pod)) {
            // A JobSet pod: its replicated job's base + its Job's and its own index.
            (Some(ranks), _) => match ranks.of(pod) {
                Ok(rank) => {
                    let rank = EnvValue::Literal(rank.to_string());
                    node_rank = Some(rank.clone());
                    Some(rank)
                }
                Err(why) => {
                    findings.warn(format!(
                        "launchgate: this JobSet pod has {why}; RANK was not set"
                    ));
                    None
                }
            },
            // A Volcano pod: offset of its task + its task index.
            (None, Some(place)) => match place.rank_offset {
                Some(Some(offset)) => volcano::rank_value(&place, offset, findings),
                _ => {
                    findings.warn(format!(
                        "launchgate: this Volcano pod has no numeric {RANK_OFFSET_ANNOTATION} annotation; RANK was not set"
                    ));
                    None
                }
            },
            // A batch/v1 Indexed Job pod: the completion index, as for named Jobs.
            (None, None) => {
                let rank = EnvValue::FieldRef(env::COMPLETION_INDEX_FIELD.into());
                node_rank = Some(rank.clone());
                Some(rank)
            }
        };
        if let Some(rank) = rank {
            vars.extend(env::rank_vars(cfg, rank));
        }
        port = Some(deferred.port);
    }
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return false;
    };
    let mut changed = env::wire_pod_spec(ctx, spec, "spec", &vars, port, findings);
    if cfg.wait_for_master.enabled && deferred.wait_for_master {
        changed |= env::write_wait_for_master(
            &cfg.wait_for_master,
            spec,
            &master_addr,
            deferred.port,
            node_rank,
        );
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut template = Map::new();
        assert!(record(&mut template, &d));
        assert!(!record(&mut template, &d));
        assert!(is_deferred(&Value::Object(template)));
    }

    #[test]
    fn a_jobset_pods_rank_comes_from_its_job_and_completion_index() {
        let ranks = JobSetRank { base: 1, stride: 4 };
        let pod = json!({"metadata": {
            "labels": {JOB_INDEX_KEY: "1", COMPLETION_INDEX_KEY: "2",
                       JOBSET_NAME_KEY: "ddp", "batch.kubernetes.io/job-name": "ddp-workers-1"}}});
        let pod = pod.as_object().unwrap();
        assert_eq!(ranks.of(pod), Ok(7));
        assert_eq!(job_name(pod), Some("ddp"));
        let bare = json!({"metadata": {"labels": {JOB_INDEX_KEY: "x"}}});
        assert!(ranks.of(bare.as_object().unwrap()).is_err());
        let huge = JobSetRank {
            base: i64::MAX,
            stride: 1,
        };
        assert!(huge.of(pod).is_err());
    }

    #[test]
    fn the_job_name_comes_from_the_controllers_labels() {
        let pod = json!({"metadata": {"labels": {"job-name": "old", "batch.kubernetes.io/job-name": "ddp-x7k2p"}}});
        assert_eq!(job_name(pod.as_object().unwrap()), Some("ddp-x7k2p"));
        let pod = json!({"metadata": {"annotations": {"volcano.sh/job-name": "run-abcde"}}});
        assert_eq!(job_name(pod.as_object().unwrap()), Some("run-abcde"));
        assert_eq!(job_name(json!({"metadata": {}}).as_object().unwrap()), None);
    }
}
