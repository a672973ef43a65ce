//! A pod's wiring, completed at pod admission: a pod carrying the [`deferred`] record of a
//! workload that had no name (or of a JobSet, always) gets its rendezvous env in full; a
//! Volcano pod gets its `RANK` ([`volcano::mutate_pod`]). Any other pod gets nothing.

use super::deferred::{self, DEFERRED_ANNOTATION, Deferred, JOB_PLACEHOLDER, JobSetRank};
use super::env::{self, EnvValue, JobWiring};
use super::jobset::{JOB_INDEX_KEY, JOBSET_NAME_KEY};
use super::site::{Site, Warnings};
use super::volcano::{self, RANK_OFFSET_ANNOTATION};
use crate::patch::Node;
use crate::workload;
use serde_json::{Map, Value};

/// Wires one pod: completes a deferred record, else a Volcano pod's rank.
pub fn mutate(ctx: &dyn Site, object: &mut Node<'_, Value>, findings: &mut dyn Warnings) -> bool {
    if deferred::is_deferred(object) {
        complete_deferred(ctx, object, findings)
    } else {
        volcano::mutate_pod(ctx, object, findings)
    }
}

/// Labels/annotations naming a pod's Job, in the order they are tried (a JobSet's pods also
/// carry their child Job's `job-name`: the JobSet's name comes first).
const JOB_NAME_KEYS: [&str; 4] = [
    JOBSET_NAME_KEY,
    "volcano.sh/job-name",
    "batch.kubernetes.io/job-name",
    "job-name",
];

/// The completion index of a Job's pod (label or annotation).
const COMPLETION_INDEX_KEY: &str = "batch.kubernetes.io/job-completion-index";

/// The rank of a JobSet pod, from its job index and completion index; `Err` (and why) when
/// the pod does not carry them.
fn jobset_rank(ranks: &JobSetRank, pod: &Map<String, Value>) -> Result<i64, String> {
    let read = |key: &str| {
        workload::label(pod, key)
            .or_else(|| workload::annotation(pod, key))
            .and_then(|v| v.parse::<i64>().ok())
            .ok_or_else(|| format!("no numeric {key}"))
    };
    let job = read(JOB_INDEX_KEY)?;
    let index = read(COMPLETION_INDEX_KEY)?;
    ranks
        .stride
        .checked_mul(job)
        .and_then(|r| r.checked_add(ranks.base))
        .and_then(|r| r.checked_add(index))
        .ok_or_else(|| "a rank that does not fit".to_string())
}

fn job_name(pod: &Map<String, Value>) -> Option<&str> {
    JOB_NAME_KEYS.iter().find_map(|key| {
        workload::label(pod, key)
            .or_else(|| workload::annotation(pod, key))
            .filter(|v| !v.is_empty())
    })
}

/// Completes the wiring of a pod whose Job had no name at admission.
fn complete_deferred(
    ctx: &dyn Site,
    object: &mut Node<'_, Value>,
    findings: &mut dyn Warnings,
) -> bool {
    let cfg = ctx.pytorch();
    let Some(pod) = object.as_object() else {
        return false;
    };
    let text = workload::annotation(pod, DEFERRED_ANNOTATION).unwrap_or_default();
    let deferred: Deferred = match serde_json::from_str(text) {
        Ok(d) => d,
        Err(e) => {
            findings.warn(crate::rules::PYTORCH_POD_UNWIRED, format!(
                "launchgate: this pod's {DEFERRED_ANNOTATION} annotation is not launchgate's record ({e}); PyTorch wiring skipped"
            ));
            return false;
        }
    };
    let Some(job) = job_name(pod).map(str::to_string) else {
        findings.warn(crate::rules::PYTORCH_POD_UNWIRED, format!(
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
        let rank = match (deferred.jobset_rank, volcano::pod_place(pod)) {
            // A JobSet pod: its replicated job's base + its Job's and its own index.
            (Some(ranks), _) => match jobset_rank(&ranks, pod) {
                Ok(rank) => {
                    let rank = EnvValue::Literal(rank.to_string());
                    node_rank = Some(rank.clone());
                    Some(rank)
                }
                Err(why) => {
                    findings.warn(
                        crate::rules::PYTORCH_RANK_UNSET,
                        format!("launchgate: this JobSet pod has {why}; RANK was not set"),
                    );
                    None
                }
            },
            // A Volcano pod: offset of its task + its task index.
            (None, Some(place)) => match place.rank_offset {
                Some(Some(offset)) => volcano::rank_value(&place, offset, findings),
                _ => {
                    findings.warn(crate::rules::PYTORCH_RANK_UNSET, format!(
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
    let Some(mut spec) = object.object("spec") else {
        return false;
    };
    let mut changed = env::wire_pod_spec(ctx, &mut spec, &"spec", &vars, port, findings);
    if cfg.wait_for_master.enabled && deferred.wait_for_master {
        changed |= env::write_wait_for_master(
            &cfg.wait_for_master,
            &mut spec,
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
    use serde_json::json;

    #[test]
    fn a_jobset_pods_rank_comes_from_its_job_and_completion_index() {
        let ranks = JobSetRank { base: 1, stride: 4 };
        let pod = json!({"metadata": {
            "labels": {JOB_INDEX_KEY: "1", COMPLETION_INDEX_KEY: "2",
                       JOBSET_NAME_KEY: "ddp", "batch.kubernetes.io/job-name": "ddp-workers-1"}}});
        let pod = pod.as_object().unwrap();
        assert_eq!(jobset_rank(&ranks, pod), Ok(7));
        assert_eq!(job_name(pod), Some("ddp"));
        let bare = json!({"metadata": {"labels": {JOB_INDEX_KEY: "x"}}});
        assert!(jobset_rank(&ranks, bare.as_object().unwrap()).is_err());
        let huge = JobSetRank {
            base: i64::MAX,
            stride: 1,
        };
        assert!(jobset_rank(&huge, pod).is_err());
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
