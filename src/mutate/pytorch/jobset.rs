//! JobSets ([`crate::topology::jobset`]): an opted-in JobSet gets, on each pod template of a
//! replicated job that takes part, the record of its wiring ([`deferred`]) — the master
//! address with the JobSet's name as placeholder, the port, the world size and where that
//! job's ranks start — and each pod is wired in full at pod admission, when its
//! `jobset.sigs.k8s.io/job-index` and completion index are known. Nothing is written into the
//! containers of the JobSet itself, so no pod ever runs with a world size but no rank.

use super::deferred::{self, Deferred, JobSetRank};
use super::env;
use super::warn_unwirable;
use crate::mutate::{Findings, MutationContext};
use crate::topology::jobset::{layout, opt_in};
use crate::topology::{JOB_PLACEHOLDER, PytorchConfig};
use crate::workload::{self, WorkloadKind};
use serde_json::Value;

/// Records the wiring on every taking-part template of an opted-in JobSet.
pub fn mutate(
    ctx: &MutationContext<'_>,
    cfg: &PytorchConfig,
    object: &mut Value,
    findings: &mut Findings,
) -> bool {
    let Some(how) = opt_in(cfg, object) else {
        return false;
    };
    let name = ctx.object_name(object).to_string();
    let layout = match layout(object, how, &name) {
        Ok(layout) => layout,
        Err(problems) => {
            warn_unwirable(findings, &problems);
            return false;
        }
    };
    let master_addr = layout.master_addr(JOB_PLACEHOLDER);
    let mut changed = false;
    workload::for_each_template_mut(WorkloadKind::JobSet, object, |info, template| {
        let index = info.index;
        let Some(ranked) = layout.ranked_at(index) else {
            return;
        };
        changed |= deferred::record(
            template,
            &Deferred {
                master_addr: master_addr.clone(),
                port: cfg.port,
                nnodes: layout.nnodes,
                ranked: true,
                wait_for_master: true,
                jobset_rank: Some(JobSetRank {
                    base: ranked.base,
                    stride: ranked.stride,
                }),
            },
        );
        if let Some(spec) = workload::pod_spec_mut(template) {
            // A custom resource: no API default to tell apart, any dnsPolicy is the user's.
            changed |= env::ensure_host_network_dns(spec, &info.spec_path(), true, findings);
        }
    });
    changed
}

#[cfg(test)]
mod tests {
    use crate::mutate::pytorch::MUTATOR;
    use crate::mutate::pytorch::deferred::{DEFERRED_ANNOTATION, Deferred, JobSetRank};
    use crate::mutate::test_support::mutate_with;
    use serde_json::{Value, json};

    fn jobset() -> Value {
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "ddp", "namespace": "wandb"},
        "spec": {"replicatedJobs": [
            {"name": "driver", "template": {"spec": {"parallelism": 1, "completions": 1,
                "template": {"spec": {"containers": [{"name": "t", "command": ["torchrun", "train.py"]}]}}}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 3, "completions": 3,
                "template": {"spec": {"containers": [{"name": "t"}]}}}}}
        ]}})
    }

    fn record_of(out: &Value, index: usize) -> Deferred {
        let text = out["spec"]["replicatedJobs"][index]["template"]["spec"]["template"]["metadata"]
            ["annotations"][DEFERRED_ANNOTATION]
            .as_str()
            .unwrap();
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn each_replicated_job_records_where_its_ranks_start() {
        let (out, f) = mutate_with(&MUTATOR, "pytorch: {indexedJobs: auto}", jobset());
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);
        let driver = record_of(&out, 0);
        assert_eq!(driver.master_addr, "{job}-driver-0-0.{job}");
        assert_eq!(driver.nnodes, 7);
        assert_eq!(driver.jobset_rank, Some(JobSetRank { base: 0, stride: 1 }));
        assert_eq!(
            record_of(&out, 1).jobset_rank,
            Some(JobSetRank { base: 1, stride: 3 })
        );
        // Nothing in the containers: each pod is wired in full at its own admission.
        assert!(
            out["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"]
                [0]
            .get("env")
            .is_none()
        );
        let (again, _) = mutate_with(&MUTATOR, "pytorch: {indexedJobs: auto}", out.clone());
        assert_eq!(again, out, "idempotent");
    }

    #[test]
    fn without_evidence_or_with_an_unwirable_shape_nothing_is_recorded() {
        let mut plain = jobset();
        plain["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .remove("command");
        let (out, _) = mutate_with(&MUTATOR, "pytorch: {indexedJobs: auto}", plain.clone());
        assert_eq!(out, plain);
        let mut broken = jobset();
        broken["spec"]["network"] = json!({"enableDNSHostnames": false});
        let (out, f) = mutate_with(&MUTATOR, "pytorch: {indexedJobs: auto}", broken.clone());
        assert_eq!(out, broken);
        assert!(
            f.warnings[0].contains("enableDNSHostnames"),
            "{:?}",
            f.warnings
        );
    }

    #[test]
    fn pods_of_a_jobset_are_wired_from_the_record() {
        let (out, _) = mutate_with(&MUTATOR, "pytorch: {indexedJobs: auto}", jobset());
        let template = &out["spec"]["replicatedJobs"][1]["template"]["spec"]["template"];
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "ddp-workers-1-2-",
                "labels": {"jobset.sigs.k8s.io/jobset-name": "ddp", "jobset.sigs.k8s.io/job-index": "1",
                           "batch.kubernetes.io/job-completion-index": "2",
                           "batch.kubernetes.io/job-name": "ddp-workers-1"},
                "annotations": template["metadata"]["annotations"].clone()},
            "spec": template["spec"].clone()});
        pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = json!("2");
        let (wired, f) = mutate_with(&MUTATOR, "{}", pod);
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);
        let env = &wired["spec"]["containers"][0]["env"];
        let value = |name: &str| {
            env.as_array()
                .unwrap()
                .iter()
                .rev()
                .find(|e| e["name"] == name)
                .map(|e| e["value"].clone())
        };
        assert_eq!(value("MASTER_ADDR"), Some(json!("ddp-driver-0-0.ddp")));
        assert_eq!(value("WORLD_SIZE"), Some(json!("7")));
        assert_eq!(value("RANK"), Some(json!("6")));
        assert_eq!(value("PET_NODE_RANK"), Some(json!("6")));
        assert_eq!(value("PET_NNODES"), Some(json!("7")));
    }
}
