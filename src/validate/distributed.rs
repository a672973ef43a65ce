//! Distributed PyTorch jobs that can never rendezvous ([`crate::pytorch::problems`]) are
//! denied on CREATE when the queue says `onUnwirable: deny`; with `warn` the mutating
//! webhook's warning is all the user gets.

use crate::pytorch::{self, OnUnwirable, PytorchConfig};
use crate::rules::{self, Violation};
use crate::workload::WorkloadKind;
use serde_json::Value;

/// The denials of a workload the queue's PyTorch wiring cannot wire.
pub fn denials(
    kind: WorkloadKind,
    cfg: &PytorchConfig,
    object: &Value,
    object_name: &str,
) -> Vec<Violation> {
    if cfg.on_unwirable != OnUnwirable::Deny {
        return Vec::new();
    }
    pytorch::problems(kind, cfg, object, object_name)
        .into_iter()
        .map(|p| Violation::new(rules::PYTORCH_ON_UNWIRABLE, format!("launchgate: {p}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use serde_json::json;

    fn vcjob(master_replicas: i64) -> Value {
        json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "wandb"},
        "spec": {"plugins": {"pytorch": []}, "tasks": [
            {"name": "master", "replicas": master_replicas, "template": {"spec": {"containers": [{"name": "train"}]}}},
            {"name": "worker", "replicas": 2, "template": {"spec": {"containers": [{"name": "train"}]}}}
        ]}})
    }

    #[test]
    fn two_master_replicas_are_denied_unless_the_queue_only_warns() {
        for (body, denied) in [
            ("{}", true),
            ("{pytorch: {onUnwirable: warn}}", false),
            ("{pytorch: {enabled: false}}", false),
        ] {
            let policy = Policy::from_yaml(&format!("queues:\n  q: {body}\n")).unwrap();
            let cfg = &policy.queue("q").unwrap().config.pytorch;
            let d = denials(WorkloadKind::VolcanoJob, cfg, &vcjob(2), "j");
            assert_eq!(!d.is_empty(), denied, "{body}: {d:?}");
            assert!(denials(WorkloadKind::VolcanoJob, cfg, &vcjob(1), "j").is_empty());
        }
    }

    #[test]
    fn a_kueue_partial_admission_of_a_wired_job_is_denied_and_a_broken_jobset_too() {
        let policy = Policy::from_yaml("queues:\n  q: {pytorch: {indexedJobs: true}}\n").unwrap();
        let cfg = &policy.queue("q").unwrap().config.pytorch;
        let mut job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "ddp", "annotations": {}},
            "spec": {"completionMode": "Indexed", "completions": 4, "parallelism": 4,
                     "template": {"spec": {"subdomain": "ddp", "containers": [{"name": "t"}]}}}});
        assert!(denials(WorkloadKind::BatchJob, cfg, &job, "ddp").is_empty());
        job["metadata"]["annotations"]["kueue.x-k8s.io/job-min-parallelism"] = json!("2");
        let d = denials(WorkloadKind::BatchJob, cfg, &job, "ddp");
        assert!(
            d[0].message.contains("partial admission") && d[0].message.contains("\"2\""),
            "{d:?}"
        );
        let js = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "s"}, "spec": {"network": {"enableDNSHostnames": false},
            "replicatedJobs": [{"name": "w", "template": {"spec": {"completions": 2, "parallelism": 2,
                "template": {"spec": {"containers": [{"name": "t"}]}}}}}]}});
        let d = denials(WorkloadKind::JobSet, cfg, &js, "s");
        assert!(
            d[0].message.contains("enableDNSHostnames is false"),
            "{d:?}"
        );
    }
}
