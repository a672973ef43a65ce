//! The hand-off to Kueue: a launch queue can name the Kueue LocalQueue its runs wait in, their
//! WorkloadPriorityClass and a maximum execution time. They become the labels Kueue reads
//! (`kueue.x-k8s.io/queue-name`, `kueue.x-k8s.io/priority-class`,
//! `kueue.x-k8s.io/max-exec-time-seconds`) on the top-level workload, only where the user set
//! none. Kueue then owns quota, fair sharing, preemption and `spec.suspend`; launchgate never
//! writes `suspend` and never mutates the UPDATE by which Kueue admits a workload (see
//! docs/kueue.md).
//!
//! Written on the kinds Kueue integrates (batch/v1 Job, JobSet, TrainJob, PyTorchJob); never
//! on a Pod (Kueue would gate a controller's pod as a workload of its own) nor on a child
//! workload (the Jobs of a JobSet, a TrainJob's JobSet: Kueue admits their root).

use super::{Findings, MutationContext, Mutator};
use crate::error::ConfigError;
use crate::workload::{self, WorkloadKind};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Kueue's label naming the LocalQueue.
pub const QUEUE_NAME_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Kueue's label naming the WorkloadPriorityClass.
pub const PRIORITY_CLASS_LABEL: &str = "kueue.x-k8s.io/priority-class";
/// Kueue's label bounding the workload's run time.
pub const MAX_EXEC_TIME_LABEL: &str = "kueue.x-k8s.io/max-exec-time-seconds";

/// `queues.<name>.kueue`: where this launch queue's runs wait for quota.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KueueConfig {
    /// The Kueue LocalQueue, in the workload's namespace (`kueue.x-k8s.io/queue-name`).
    #[serde(default)]
    pub local_queue: Option<String>,
    /// A WorkloadPriorityClass (`kueue.x-k8s.io/priority-class`).
    #[serde(default)]
    pub priority_class: Option<String>,
    /// Seconds a run may be admitted for before Kueue evicts it
    /// (`kueue.x-k8s.io/max-exec-time-seconds`).
    #[serde(default)]
    pub max_execution_seconds: Option<i64>,
}

impl KueueConfig {
    /// The labels, in a fixed order.
    pub fn labels(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(q) = &self.local_queue {
            out.push((QUEUE_NAME_LABEL, q.clone()));
        }
        if let Some(p) = &self.priority_class {
            out.push((PRIORITY_CLASS_LABEL, p.clone()));
        }
        if let Some(s) = self.max_execution_seconds {
            out.push((MAX_EXEC_TIME_LABEL, s.to_string()));
        }
        out
    }

    pub fn check(&self, at: &str, errors: &mut Vec<ConfigError>) {
        for (key, value) in [
            ("localQueue", &self.local_queue),
            ("priorityClass", &self.priority_class),
        ] {
            if let Some(v) = value
                && !is_dns_subdomain_label(v)
            {
                errors.push(ConfigError::new(
                    format!("{at}.{key}"),
                    format!("{v:?} is not a Kueue object name usable as a label value (lowercase letters, digits, '-' and '.', at most 63)"),
                ));
            }
        }
        if let Some(s) = self.max_execution_seconds
            && !(1..=i64::from(i32::MAX)).contains(&s)
        {
            errors.push(ConfigError::new(
                format!("{at}.maxExecutionSeconds"),
                "must be between 1 and 2147483647",
            ));
        }
    }
}

/// A lowercase DNS subdomain that is also a label value (at most 63 characters).
fn is_dns_subdomain_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The Kueue hand-off mutator.
pub const MUTATOR: Mutator = Mutator {
    name: "kueue",
    run: mutate,
};

pub fn mutate(ctx: &MutationContext<'_>, object: &mut Value, findings: &mut Findings) -> bool {
    let Some(cfg) = ctx.settings.kueue else {
        return false;
    };
    if ctx.child {
        return false;
    }
    match ctx.kind {
        WorkloadKind::BatchJob
        | WorkloadKind::JobSet
        | WorkloadKind::TrainJob
        | WorkloadKind::PyTorchJob => {}
        WorkloadKind::Pod => return false,
        WorkloadKind::VolcanoJob => {
            if cfg.local_queue.is_some() {
                findings.warn(
                    "launchgate: the queue hands off to a Kueue LocalQueue, but Kueue does not manage Volcano Jobs (Volcano's scheduler queues them); no Kueue label was written",
                );
            }
            return false;
        }
    }
    let Some(top) = object.as_object_mut() else {
        return false;
    };
    let labels = workload::metadata_map_mut(top, "labels");
    let mut changed = false;
    for (key, value) in cfg.labels() {
        if labels.get(key).is_none_or(Value::is_null) {
            labels.insert(key.into(), json!(value));
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutate::test_support::{mutate_with, queue_yaml};

    const QUEUE: &str =
        "kueue: {localQueue: team-a, priorityClass: research, maxExecutionSeconds: 86400}";

    #[test]
    fn the_labels_go_where_the_user_set_none() {
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "labels": {PRIORITY_CLASS_LABEL: "urgent"}},
            "spec": {"suspend": false, "template": {"spec": {"containers": []}}}});
        let (out, f) = mutate_with(&MUTATOR, QUEUE, job.clone());
        assert!(f.warnings.is_empty());
        assert_eq!(
            out["metadata"]["labels"],
            json!({PRIORITY_CLASS_LABEL: "urgent", QUEUE_NAME_LABEL: "team-a", MAX_EXEC_TIME_LABEL: "86400"})
        );
        assert_eq!(out["spec"], job["spec"], "suspend is Kueue's");
        let (again, _) = mutate_with(&MUTATOR, QUEUE, out.clone());
        assert_eq!(again, out);
    }

    #[test]
    fn pods_and_volcano_jobs_get_none() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}});
        let (out, _) = mutate_with(&MUTATOR, QUEUE, pod.clone());
        assert_eq!(out, pod);
        let vc = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {}, "spec": {}});
        let (out, f) = mutate_with(&MUTATOR, QUEUE, vc.clone());
        assert_eq!(out, vc);
        assert!(f.warnings[0].contains("Kueue does not manage Volcano Jobs"));
        let (out, _) = mutate_with(
            &MUTATOR,
            "{}",
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {}}),
        );
        assert!(out["metadata"].get("labels").is_none());
    }

    #[test]
    fn names_and_times_are_checked() {
        let e = queue_yaml("kueue: {localQueue: Team_A, maxExecutionSeconds: 0}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("queues.q.kueue.localQueue"), "{e}");
        assert!(e.contains("queues.q.kueue.maxExecutionSeconds"), "{e}");
        assert!(queue_yaml("kueue: {localQueue: a, queue: b}").is_err());
    }
}
