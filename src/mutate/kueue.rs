//! The hand-off to Kueue: a launch queue can name the Kueue LocalQueue its runs wait in, their
//! WorkloadPriorityClass and a maximum execution time. They become the labels Kueue reads
//! (`kueue.x-k8s.io/queue-name`, `kueue.x-k8s.io/priority-class`,
//! `kueue.x-k8s.io/max-exec-time-seconds`) on the top-level workload. They are the queue's, not
//! the tenant's: at CREATE a label that differs from the queue's setting (another LocalQueue, an
//! empty queue name — which takes the run out of Kueue —, another priority class, a longer or
//! unreadable run time) is replaced by it, and the validating webhook denies a workload whose
//! labels still differ ([`violations`]; under the queue's `limits.enforcement`). A shorter run
//! time than the queue's is the tenant's to choose. Kueue then owns quota, fair sharing,
//! preemption and `spec.suspend`; launchgate never writes `suspend` and never mutates the
//! UPDATE by which Kueue admits a workload (see docs/kueue.md).
//!
//! Written on the kinds Kueue integrates (batch/v1 Job, JobSet, TrainJob, PyTorchJob); never
//! on a Pod (Kueue would gate a controller's pod as a workload of its own) nor on a child
//! workload (the Jobs of a JobSet, a TrainJob's JobSet: Kueue admits their root). A standalone
//! launch Pod is checked only for the Kueue labels it carries.

use super::{Findings, MutationContext, Mutator};
use crate::error::ConfigError;
use crate::kinds::Kueue;
use crate::patch::Node;
use crate::rules::{self, Violation};
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
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct KueueConfig {
    /// The Kueue LocalQueue, in the workload's namespace (`kueue.x-k8s.io/queue-name`).
    pub local_queue: Option<String>,
    /// A WorkloadPriorityClass (`kueue.x-k8s.io/priority-class`).
    pub priority_class: Option<String>,
    /// Seconds a run may be admitted for before Kueue evicts it
    /// (`kueue.x-k8s.io/max-exec-time-seconds`).
    pub max_execution_seconds: Option<i64>,
}

impl KueueConfig {
    /// The queue's settings with the label each is written to, in a fixed order.
    pub fn settings(&self) -> Vec<Setting> {
        let mut out = Vec::new();
        if let Some(q) = &self.local_queue {
            out.push(Setting {
                label: QUEUE_NAME_LABEL,
                key: "localQueue",
                rule: Rule::Equal(q.clone()),
            });
        }
        if let Some(p) = &self.priority_class {
            out.push(Setting {
                label: PRIORITY_CLASS_LABEL,
                key: "priorityClass",
                rule: Rule::Equal(p.clone()),
            });
        }
        if let Some(s) = self.max_execution_seconds {
            out.push(Setting {
                label: MAX_EXEC_TIME_LABEL,
                key: "maxExecutionSeconds",
                rule: Rule::AtMost(s),
            });
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

/// One queue setting and the Kueue label that carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The Kueue label.
    pub label: &'static str,
    /// The key under `queues.<name>.kueue`.
    pub key: &'static str,
    /// What a label value must be to keep the setting.
    pub rule: Rule,
}

/// What a Kueue label must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// Exactly this value (the LocalQueue, the priority class).
    Equal(String),
    /// A whole number of seconds from 1 to this (the run-time bound).
    AtMost(i64),
}

impl Setting {
    /// The value launchgate writes.
    pub fn value(&self) -> String {
        match &self.rule {
            Rule::Equal(v) => v.clone(),
            Rule::AtMost(s) => s.to_string(),
        }
    }

    /// True when the label's value (`None`: unset) keeps the queue's setting.
    pub fn holds(&self, value: Option<&str>) -> bool {
        match (&self.rule, value) {
            (_, None) => false,
            (Rule::Equal(want), Some(v)) => v == want,
            (Rule::AtMost(max), Some(v)) => exec_seconds(v).is_some_and(|s| s <= *max),
        }
    }

    /// Why the label's value breaks the setting, naming the queue, the label, its value and
    /// the queue's setting.
    pub fn violation(&self, queue_name: &str, value: Option<&str>) -> String {
        let at = format!("(kueue.{})", self.key);
        let label = self.label;
        let what = match (&self.rule, value) {
            (Rule::Equal(want), None) => {
                format!("label {label} is unset, not the queue's {want:?}")
            }
            (Rule::Equal(want), Some(v)) => {
                format!("label {label}={v:?} is not the queue's {want:?}")
            }
            (Rule::AtMost(max), None) => {
                format!("label {label} is unset; the queue's maximum is {max}")
            }
            (Rule::AtMost(max), Some(v)) if exec_seconds(v).is_some() => {
                format!("label {label}={v:?} exceeds maximum {max}")
            }
            (Rule::AtMost(max), Some(v)) => format!(
                "label {label}={v:?} is not a whole number of seconds; the queue's maximum is {max}"
            ),
        };
        format!("queue {queue_name:?}: {what} {at}")
    }
}

/// A label value read as Kueue's run-time bound: a whole number of seconds, 1 or more, written
/// without sign or leading zero, at most 18 digits (the native policies read it the same way:
/// [`EXEC_SECONDS_REGEX`]).
pub fn exec_seconds(value: &str) -> Option<i64> {
    let b = value.as_bytes();
    if (1..=18).contains(&b.len()) && b[0] != b'0' && b.iter().all(u8::is_ascii_digit) {
        value.parse().ok()
    } else {
        None
    }
}

/// [`exec_seconds`] as a regular expression (RE2, for CEL's `matches`).
pub const EXEC_SECONDS_REGEX: &str = "^[1-9][0-9]{0,17}$";

/// True when Kueue manages `kind` through its labels: its integration admits it by
/// a suspend field ([`Kueue::Suspends`]) or by its pods' scheduling gates ([`Kueue::Gates`]).
pub fn manages(kind: WorkloadKind) -> bool {
    kind.spec().kueue.by_labels()
}

/// The queue's Kueue settings `object` breaks, one line each, for a workload the queue owns
/// (not a verified controller's child). A Job, JobSet, TrainJob or PyTorchJob must carry the
/// queue's labels (the mutation writes them at CREATE); a standalone Pod only must not carry
/// different ones (an empty queue name on a Pod means "not Kueue's", as Kueue reads it).
pub fn violations(
    queue_name: &str,
    cfg: &KueueConfig,
    kind: WorkloadKind,
    object: &Value,
) -> Vec<Violation> {
    let pod = kind.spec().kueue.as_pod();
    if !pod && !manages(kind) {
        return Vec::new();
    }
    cfg.settings()
        .into_iter()
        .filter_map(|setting| {
            let value = object
                .as_object()
                .and_then(|o| workload::label(o, setting.label));
            let checked = !pod || value.is_some_and(|v| !v.is_empty());
            (checked && !setting.holds(value)).then(|| {
                let found =
                    Violation::new(rules::KUEUE_LABELS, setting.violation(queue_name, value))
                        .key(setting.key)
                        .at(format!("metadata.labels[{:?}]", setting.label));
                match value {
                    Some(v) => found.value(format!("{v:?}")),
                    None => found,
                }
            })
        })
        .collect()
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
pub const MUTATOR: Mutator = Mutator::new("kueue", mutate);

pub fn mutate(
    ctx: &MutationContext<'_>,
    object: &mut Node<'_, Value>,
    findings: &mut Findings,
) -> bool {
    let Some(cfg) = ctx.settings.kueue else {
        return false;
    };
    if ctx.child {
        return false;
    }
    if let Kueue::No(why) = ctx.kind.spec().kueue {
        if cfg.local_queue.is_some() {
            findings.warn(crate::rules::KUEUE_NOT_MANAGED, format!(
                "launchgate: the queue hands off to a Kueue LocalQueue, but {why}; no Kueue label was written"
            ));
        }
        return false;
    }
    if !manages(ctx.kind) {
        return false;
    }
    let Some(mut top) = object.as_map_node() else {
        return false;
    };
    let mut labels = workload::metadata_map_mut(&mut top, "labels");
    let mut changed = false;
    for setting in cfg.settings() {
        let current = labels.get(setting.label).and_then(Value::as_str);
        if setting.holds(current) {
            continue;
        }
        let value = setting.value();
        if let Some(old) = current {
            findings.warn(crate::rules::KUEUE_LABEL_REPLACED, format!(
                "launchgate: {} {old:?} replaced by {value:?}: the queue {:?} sets it (kueue.{})",
                setting.label, ctx.queue_name, setting.key
            ));
        }
        labels.set(setting.label, json!(value));
        changed = true;
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
    fn the_labels_are_the_queues() {
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "labels": {PRIORITY_CLASS_LABEL: "urgent", "team": "a"}},
            "spec": {"suspend": false, "template": {"spec": {"containers": []}}}});
        let (out, f) = mutate_with(&MUTATOR, QUEUE, job.clone());
        assert_eq!(
            out["metadata"]["labels"],
            json!({PRIORITY_CLASS_LABEL: "research", QUEUE_NAME_LABEL: "team-a", MAX_EXEC_TIME_LABEL: "86400", "team": "a"})
        );
        assert_eq!(f.warning_texts().len(), 1, "{:?}", f.warning_texts());
        assert!(
            f.warning_texts()[0]
                .contains(r#"kueue.x-k8s.io/priority-class "urgent" replaced by "research""#),
            "{:?}",
            f.warning_texts()
        );
        assert_eq!(out["spec"], job["spec"], "suspend is Kueue's");
        let (again, f) = mutate_with(&MUTATOR, QUEUE, out.clone());
        assert_eq!(again, out);
        assert!(f.warning_texts().is_empty());
    }

    /// A kind Kueue admits by its labels and its pods' scheduling gates, without a suspend
    /// field, is managed through its labels as a suspended one is; a plain pod and a kind Kueue
    /// does not manage are not.
    #[test]
    fn a_kind_admitted_by_scheduling_gates_is_managed_by_its_labels() {
        use crate::kinds::{KindSpec, Kueue};
        const fn spec(kueue: Kueue) -> KindSpec {
            KindSpec {
                name: "Gated",
                group: "example.com",
                version: "v1",
                kind: "Gated",
                resource: "gateds",
                webhook_rule: "gated",
                kueue,
                ..KindSpec::BASE
            }
        }
        static GATED: KindSpec = spec(Kueue::Gates);
        static SUSPENDED: KindSpec = spec(Kueue::Suspends("spec.suspend"));
        static POD: KindSpec = spec(Kueue::Pod);
        static NOT: KindSpec = spec(Kueue::No("no integration"));
        let managed = |s: &'static KindSpec| manages(WorkloadKind::unregistered(s));
        assert!(managed(&GATED) && managed(&SUSPENDED));
        assert!(!managed(&POD) && !managed(&NOT));
    }

    #[test]
    fn a_tenants_queue_name_or_longer_run_is_replaced_on_every_kind_kueue_manages() {
        let objects = [
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {}}),
            json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {}}),
            json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {}}),
            json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {}}),
        ];
        for (queue_name, seconds) in [("", "86401"), ("team-b", "abc"), ("team-b", "086400")] {
            for object in &objects {
                let mut object = object.clone();
                object["metadata"]["labels"] =
                    json!({QUEUE_NAME_LABEL: queue_name, MAX_EXEC_TIME_LABEL: seconds});
                let (out, f) = mutate_with(&MUTATOR, QUEUE, object.clone());
                let labels = &out["metadata"]["labels"];
                assert_eq!(labels[QUEUE_NAME_LABEL], "team-a", "{object}");
                assert_eq!(labels[MAX_EXEC_TIME_LABEL], "86400", "{object}");
                assert_eq!(f.warning_texts().len(), 2, "{:?}", f.warning_texts());
            }
        }
        // A shorter run is the tenant's to choose.
        let mut job = objects[0].clone();
        job["metadata"]["labels"] = json!({MAX_EXEC_TIME_LABEL: "600"});
        let (out, _) = mutate_with(&MUTATOR, QUEUE, job);
        assert_eq!(out["metadata"]["labels"][MAX_EXEC_TIME_LABEL], "600");
    }

    #[test]
    fn a_workload_whose_labels_still_differ_is_a_violation() {
        let cfg = KueueConfig {
            local_queue: Some("team-a".into()),
            priority_class: Some("research".into()),
            max_execution_seconds: Some(3600),
        };
        let with = |kind: &str, labels: Value| {
            let api = if kind == "Pod" { "v1" } else { "batch/v1" };
            let object = json!({"apiVersion": api, "kind": kind, "metadata": {"labels": labels}});
            let kind = WorkloadKind::of_object(&object).unwrap();
            violations("q", &cfg, kind, &object)
                .into_iter()
                .map(|v| {
                    assert_eq!(v.rule.id, "kueue.labels");
                    v.message
                })
                .collect::<Vec<_>>()
        };
        let good = json!({QUEUE_NAME_LABEL: "team-a", PRIORITY_CLASS_LABEL: "research", MAX_EXEC_TIME_LABEL: "60"});
        assert!(with("Job", good.clone()).is_empty());
        assert_eq!(
            with(
                "Job",
                json!({QUEUE_NAME_LABEL: "", MAX_EXEC_TIME_LABEL: "7200"})
            ),
            [
                r#"queue "q": label kueue.x-k8s.io/queue-name="" is not the queue's "team-a" (kueue.localQueue)"#,
                r#"queue "q": label kueue.x-k8s.io/priority-class is unset, not the queue's "research" (kueue.priorityClass)"#,
                r#"queue "q": label kueue.x-k8s.io/max-exec-time-seconds="7200" exceeds maximum 3600 (kueue.maxExecutionSeconds)"#,
            ]
        );
        assert!(
            with("Job", json!({MAX_EXEC_TIME_LABEL: "1h"}))[2]
                .contains("is not a whole number of seconds")
        );
        // A Pod: only the Kueue labels it carries.
        assert!(with("Pod", json!({})).is_empty());
        assert!(with("Pod", json!({QUEUE_NAME_LABEL: ""})).is_empty());
        assert_eq!(with("Pod", json!({QUEUE_NAME_LABEL: "team-b"})).len(), 1);
        assert!(with("Pod", good).is_empty());
    }

    #[test]
    fn pods_and_volcano_jobs_get_none() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}});
        let (out, _) = mutate_with(&MUTATOR, QUEUE, pod.clone());
        assert_eq!(out, pod);
        let vc = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {}, "spec": {}});
        let (out, f) = mutate_with(&MUTATOR, QUEUE, vc.clone());
        assert_eq!(out, vc);
        assert!(f.warning_texts()[0].contains("Kueue does not manage Volcano Jobs"));
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
