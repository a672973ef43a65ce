//! Auditing what already runs: judge the launch workloads listed from a cluster against a
//! policy, as if each were submitted now, and describe the outcome as a report (a table, JSON,
//! or `wgpolicyk8s.io/v1alpha2` PolicyReports, the format Kyverno and Kubewarden write and
//! Policy Reporter shows).
//!
//! This module is the pure part: one listed object in, one [`AuditEntry`] out, through the
//! same [`crate::judge::judge`] (mutate, then validate) the webhook's two endpoints amount to.
//! Listing the objects and writing the reports is [`scan`], a thin shell over `kube::Client`.

pub mod scan;

use crate::admission::AdmissionRequest;
use crate::cluster::ClusterView;
use crate::judge::judge;
use crate::policy::Policy;
use crate::rules::Effect;
use crate::workload::WorkloadKind;
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

pub(crate) use scan::{AuditOptions, run};

/// Name of the report written in each namespace.
pub(crate) const POLICY_REPORT_NAME: &str = "launchgate";
/// `source` of every report result.
pub(crate) const REPORT_SOURCE: &str = "launchgate";

/// Which report API the audit writes: the Policy WG's `wgpolicyk8s.io/v1alpha2` PolicyReport,
/// or its successor `openreports.io/v1alpha1` Report (what Kyverno and Kubewarden moved to). The
/// two carry the same results and summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReportFormat {
    /// `wgpolicyk8s.io/v1alpha2` PolicyReport.
    #[default]
    PolicyReport,
    /// `openreports.io/v1alpha1` Report.
    OpenReports,
}

impl ReportFormat {
    /// The report resource: its API group, version, kind and plural (from a CRD that may not
    /// be installed).
    pub fn resource(self) -> ListedKind {
        let (group, version, kind, plural) = match self {
            ReportFormat::PolicyReport => (
                "wgpolicyk8s.io",
                "v1alpha2",
                "PolicyReport",
                "policyreports",
            ),
            ReportFormat::OpenReports => ("openreports.io", "v1alpha1", "Report", "reports"),
        };
        ListedKind {
            group,
            version,
            kind,
            plural,
            optional: true,
        }
    }
    /// `policyreports.wgpolicyk8s.io/v1alpha2`, for messages.
    pub fn resource_name(self) -> String {
        let resource = self.resource();
        format!("{}/{}", resource.resource_name(), resource.version)
    }
}

/// A kind of launch workload the audit lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedKind {
    /// API group (empty for the core group).
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Resource name in URLs.
    pub plural: &'static str,
    /// Comes from a CRD that may not be installed (then it is skipped with a note).
    pub optional: bool,
}

impl ListedKind {
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `jobs.batch`, `pods`, `pytorchjobs.kubeflow.org`: the name kubectl knows it by.
    pub(crate) fn resource_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// What the audit lists, in this order: every kind with pod templates of its own or from a
/// runtime, in [`crate::kinds::ALL`]'s order, then Pods. Only objects without a launch owner are
/// judged: a Job's pods are covered by the Job, a JobSet's Jobs by the JobSet, a TrainJob's
/// JobSet by the TrainJob. A kind of a dotted API group comes from a CRD (Kubernetes' own
/// workload groups have no dot), which may not be installed.
pub fn listed_kinds() -> Vec<ListedKind> {
    let (jobs, pods): (Vec<WorkloadKind>, Vec<WorkloadKind>) =
        WorkloadKind::all().partition(|k| k.is_job());
    jobs.into_iter()
        .chain(pods)
        .map(|k| {
            let (group, version, plural) = k.api_resource();
            ListedKind {
                group,
                version,
                kind: k.api_kind(),
                plural,
                optional: group.contains('.'),
            }
        })
        .collect()
}

/// The verdict on one workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditResult {
    /// Admitted as it is.
    Pass,
    /// Admitted with warnings or violations under `warn`/`audit` enforcement.
    Warn,
    /// Would be denied.
    Fail,
}

impl AuditResult {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AuditResult::Pass => "pass",
            AuditResult::Warn => "warn",
            AuditResult::Fail => "fail",
        }
    }
}

/// One judged workload. Small: the object itself is not kept.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// `apiVersion` of the object.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    /// Its `metadata.uid`.
    pub uid: String,
    /// The queue it was judged against (`None`: it names no configured queue and there is no
    /// default).
    pub queue: Option<String>,
    /// What admission would say today.
    pub result: AuditResult,
    /// The id of the rule or notice ([`crate::rules`]) that denies or warns (the first, when
    /// several do: all are in `rules`); `admission` on a pass.
    pub rule: &'static str,
    /// The ids of every rule (or notice, for a warning) that denies or warns, in the order
    /// the message names them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<&'static str>,
    /// The denial (fail), the violations or warnings (warn); empty on a pass.
    pub message: String,
    /// The warnings admission would show, each with its rule's or notice's id.
    pub warnings: Vec<crate::rules::Warning>,
}

/// The whole audit.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditReport {
    /// Every launch workload judged, in listing order.
    pub entries: Vec<AuditEntry>,
    /// Objects listed (launch workloads or not).
    pub listed: usize,
    /// Objects that are not launch workloads, or pods of a launch owner.
    pub skipped: usize,
    /// Kinds skipped because their CRD is not installed, and similar remarks.
    pub notes: Vec<String>,
    /// `namespace/name` of each PolicyReport written.
    pub policy_reports: Vec<String>,
}

/// Counts by result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Counts {
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
}

impl Counts {
    pub(crate) fn of<'a>(entries: impl IntoIterator<Item = &'a AuditEntry>) -> Counts {
        let mut c = Counts::default();
        for e in entries {
            match e.result {
                AuditResult::Pass => c.pass += 1,
                AuditResult::Warn => c.warn += 1,
                AuditResult::Fail => c.fail += 1,
            }
        }
        c
    }
}

impl AuditReport {
    pub(crate) fn counts(&self) -> Counts {
        Counts::of(&self.entries)
    }
}

/// True when a pod's controller (the owner reference with `controller: true`) is a launch
/// workload (any kind with pod templates of its own or from a runtime): its launch owner is judged instead (as the webhook judged the
/// owner when it was submitted). An owner reference without `controller: true` makes no pod
/// its workload's, for the webhook as here: such a pod is judged on its own.
pub(crate) fn has_launch_owner(pod: &Value) -> bool {
    let Some(owners) = pod
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
    else {
        return false;
    };
    owners.iter().any(|o| {
        if o.get("controller").and_then(Value::as_bool) != Some(true) {
            return false;
        }
        let api_version = o.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = o.get("kind").and_then(Value::as_str).unwrap_or("");
        let group = api_version.split_once('/').map_or("", |(g, _)| g);
        WorkloadKind::all().any(|k| k.is_job() && k.api_group() == group && k.api_kind() == kind)
    })
}

fn meta_str(object: &Value, key: &str) -> String {
    object
        .get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// An item of a list response with the `apiVersion` and `kind` list responses leave off.
pub(crate) fn as_listed(listed: &ListedKind, mut object: Value) -> Value {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(listed.api_version()));
        map.insert("kind".into(), Value::String(listed.kind.into()));
    }
    object
}

/// Judges one object listed from the cluster as a CREATE of it now, under `policy`, with the
/// TrainJob runtimes of `cluster` (the audit lists them first: a TrainJob is sized as Trainer
/// will run it). `None` when it is not a launch workload (or a pod with a launch owner).
///
/// List responses leave `apiVersion`/`kind` off their items; they are filled in from `listed`.
/// `status` is dropped first: the webhook never sees it on a CREATE. `managedFields` stay: they
/// record what a server-side apply wrote, which the webhook reads as the user's intent.
pub fn evaluate(
    policy: &Policy,
    cluster: &dyn ClusterView,
    listed: &ListedKind,
    mut object: Value,
) -> Option<AuditEntry> {
    object = as_listed(listed, object);
    let map = object.as_object_mut()?;
    map.remove("status");
    if has_launch_owner(&object) {
        return None;
    }
    let namespace = meta_str(&object, "namespace");
    let name = meta_str(&object, "name");
    let uid = meta_str(&object, "uid");
    let request = AdmissionRequest::synthetic_create(object, None).ok()?;
    let j = judge(policy, &request, cluster);
    let warnings = j.warnings();
    if j.skipped() && warnings.is_empty() {
        return None;
    }
    let audit = j.audit_violations();
    // The rules behind the verdict, read from the structured violations and warnings.
    let (result, rules, message) = match j.denied_by() {
        Some(_) => (AuditResult::Fail, j.denied_rules(), j.message()),
        None if !audit.is_empty() => (
            AuditResult::Warn,
            crate::rules::ids(j.violations().filter(|v| v.effect == Effect::Audit)),
            audit.join("\n"),
        ),
        None if !warnings.is_empty() => {
            let lines: Vec<&str> = warnings.iter().map(|w| w.message.as_str()).collect();
            let ids = crate::rules::warning_ids(&warnings);
            (AuditResult::Warn, ids, lines.join("\n"))
        }
        None => (AuditResult::Pass, Vec::new(), String::new()),
    };
    // Every denial and warning names its rule or notice; a result without one is a pass.
    let rule = match (result, rules.first()) {
        (AuditResult::Pass, _) | (_, None) => "admission",
        (_, Some(id)) => id,
    };
    Some(AuditEntry {
        api_version: listed.api_version(),
        kind: listed.kind.to_string(),
        namespace,
        name,
        uid,
        queue: j.queue().map(str::to_string),
        result,
        rule,
        rules,
        message,
        warnings,
    })
}

/// Most results one PolicyReport carries: an object must stay well below etcd's size limit
/// (about 1.5 MiB). Failures come first, then warnings, then passes; the summary still counts
/// every workload.
pub(crate) const MAX_RESULTS_PER_REPORT: usize = 1000;

fn report_result(e: &AuditEntry, timestamp: i64) -> Value {
    let mut resource = Map::new();
    resource.insert("apiVersion".into(), json!(e.api_version));
    resource.insert("kind".into(), json!(e.kind));
    resource.insert("namespace".into(), json!(e.namespace));
    resource.insert("name".into(), json!(e.name));
    if !e.uid.is_empty() {
        resource.insert("uid".into(), json!(e.uid));
    }
    let message = match e.result {
        AuditResult::Pass => "allowed by the queue's policy".to_string(),
        _ => e.message.clone(),
    };
    let mut r = json!({
        "source": REPORT_SOURCE,
        "policy": e.queue.as_deref().unwrap_or("launchgate"),
        "rule": e.rule,
        "category": "Launch queue",
        "result": e.result.as_str(),
        "message": message,
        "scored": true,
        "timestamp": {"seconds": timestamp, "nanos": 0},
        "resources": [Value::Object(resource)],
    });
    if e.result == AuditResult::Fail {
        r["severity"] = json!("high");
    }
    if e.rules.len() > 1 {
        r["properties"] = json!({"rules": e.rules.join(",")});
    }
    r
}

/// The PolicyReport of one namespace (named [`POLICY_REPORT_NAME`]): one result per workload
/// (at most [`MAX_RESULTS_PER_REPORT`], the worst first) and the summary counts. With no
/// entries it is the empty report that replaces one whose workloads are gone. `timestamp` is
/// seconds since the epoch (the caller's clock: this function reads none).
pub(crate) fn policy_report(
    format: ReportFormat,
    namespace: &str,
    entries: &[&AuditEntry],
    timestamp: i64,
) -> Value {
    let counts = Counts::of(entries.iter().copied());
    let mut ordered: Vec<&AuditEntry> = entries.to_vec();
    // Stable: listing order within each result.
    ordered.sort_by_key(|e| std::cmp::Reverse(e.result));
    let results: Vec<Value> = ordered
        .iter()
        .take(MAX_RESULTS_PER_REPORT)
        .map(|e| report_result(e, timestamp))
        .collect();
    let mut report = json!({
        "apiVersion": format.resource().api_version(),
        "kind": format.resource().kind,
        "metadata": {
            "name": POLICY_REPORT_NAME,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "launchgate"},
        },
        "scope": {"apiVersion": "v1", "kind": "Namespace", "name": namespace},
        "summary": {
            "pass": counts.pass,
            "fail": counts.fail,
            "warn": counts.warn,
            "error": 0,
            "skip": 0,
        },
        "results": results,
    });
    // A Report names the engine that made it (PolicyReport results do, one by one).
    if format == ReportFormat::OpenReports {
        report["source"] = json!(REPORT_SOURCE);
    }
    report
}

/// One report (`format`) per namespace that has launch workloads.
pub fn policy_reports(format: ReportFormat, entries: &[AuditEntry], timestamp: i64) -> Vec<Value> {
    let mut by_namespace: BTreeMap<&str, Vec<&AuditEntry>> = BTreeMap::new();
    for e in entries {
        by_namespace.entry(&e.namespace).or_default().push(e);
    }
    by_namespace
        .into_iter()
        .map(|(namespace, entries)| policy_report(format, namespace, &entries, timestamp))
        .collect()
}

/// `rows` under `header`, each column as wide as its widest cell and two spaces from the next,
/// one line each without trailing spaces (the audit's and `launchgate test`'s tables).
pub(crate) fn aligned<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header = header.map(str::to_owned);
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (cell, w) in row.iter().zip(widths) {
            line.push_str(&format!("{cell:<w$}  "));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The audit as a table (one line per workload, the first line of its message) and a summary.
pub(crate) fn render_table(report: &AuditReport) -> String {
    let header = ["NAMESPACE", "KIND", "NAME", "QUEUE", "RESULT", "MESSAGE"];
    let rows: Vec<[String; 6]> = report
        .entries
        .iter()
        .map(|e| {
            // Qualified by its group, but a core kind's and the group of what a workload with
            // no kind of its own is (W&B Launch's default: batch/v1 Job).
            let group = e.api_version.split_once('/').map_or("", |(g, _)| g);
            let kind = if group.is_empty()
                || group == crate::kinds::WorkloadKind::launch_default().spec().group
            {
                e.kind.clone()
            } else {
                format!("{}.{group}", e.kind)
            };
            [
                e.namespace.clone(),
                kind,
                e.name.clone(),
                e.queue.clone().unwrap_or_else(|| "-".into()),
                e.result.as_str().to_uppercase(),
                e.message.lines().next().unwrap_or("").to_string(),
            ]
        })
        .collect();
    let mut out = if rows.is_empty() {
        String::new()
    } else {
        aligned(header, &rows)
    };
    for note in &report.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    let c = report.counts();
    out.push_str(&format!(
        "{} launch workload(s): {} pass, {} warn, {} fail ({} object(s) listed, {} not judged)\n",
        report.entries.len(),
        c.pass,
        c.warn,
        c.fail,
        report.listed,
        report.skipped
    ));
    for r in &report.policy_reports {
        out.push_str(&format!("wrote PolicyReport {r}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NoCluster;

    /// The listed kind of an API group (`batch`: Jobs, `""`: Pods).
    fn listed(group: &str) -> ListedKind {
        listed_kinds()
            .into_iter()
            .find(|k| k.group == group)
            .expect("a listed kind")
    }

    /// A Job as a list response returns it: no apiVersion/kind, with status and managedFields,
    /// already mutated by launchgate when it was created.
    fn listed_job(name: &str, gpus: &str) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "wandb", "uid": format!("uid-{name}"),
                "labels": {"wandb.ai/monitor": "true"},
                "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
            "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 60, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "acme/train:1",
                    "resources": {"limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": gpus}}}]}}},
            "status": {"active": 1}
        })
    }

    fn policy_with_gpu_maximum(max: u32) -> Policy {
        let yaml = crate::policy::DEFAULT_CONFIG_YAML.replace(
            "minimum: 0, maximum: 4",
            &format!("minimum: 0, maximum: {max}"),
        );
        Policy::from_yaml(&yaml).unwrap()
    }

    #[test]
    fn a_workload_within_the_limits_passes() {
        let e = evaluate(
            &Policy::embedded_default(),
            &NoCluster,
            &listed("batch"),
            listed_job("ok", "2"),
        )
        .unwrap();
        assert_eq!(e.result, AuditResult::Pass, "{e:?}");
        assert_eq!(
            (e.api_version.as_str(), e.kind.as_str()),
            ("batch/v1", "Job")
        );
        assert_eq!((e.namespace.as_str(), e.name.as_str()), ("wandb", "ok"));
        assert_eq!(e.uid, "uid-ok");
        assert_eq!(e.queue.as_deref(), Some("gpu-queue"));
        assert_eq!(e.rule, "admission");
    }

    #[test]
    fn a_new_config_reports_what_it_would_break() {
        let job = listed_job("big", "3");
        assert_eq!(
            evaluate(
                &Policy::embedded_default(),
                &NoCluster,
                &listed("batch"),
                job.clone()
            )
            .unwrap()
            .result,
            AuditResult::Pass
        );
        let e = evaluate(
            &policy_with_gpu_maximum(2),
            &NoCluster,
            &listed("batch"),
            job,
        )
        .unwrap();
        assert_eq!(e.result, AuditResult::Fail);
        // The rule is read from the violation, not its message.
        assert_eq!(e.rule, "limits.variables");
        assert_eq!(e.rules, ["limits.variables"]);
        assert!(e.message.contains("gpus"), "{}", e.message);
    }

    #[test]
    fn warn_enforcement_gives_warn_results() {
        let yaml =
            crate::policy::DEFAULT_CONFIG_YAML.replace("enforcement: deny", "enforcement: warn");
        let e = evaluate(
            &Policy::from_yaml(&yaml).unwrap(),
            &NoCluster,
            &listed("batch"),
            listed_job("big", "8"),
        )
        .unwrap();
        assert_eq!(e.result, AuditResult::Warn);
        assert_eq!(e.rule, "limits.variables");
        assert!(e.message.contains("gpus"), "{}", e.message);
    }

    #[test]
    fn server_side_apply_intent_is_judged_as_the_webhook_judges_it() {
        let strict = Policy::from_yaml(
            &crate::policy::DEFAULT_CONFIG_YAML.replace("strict: false", "strict: true"),
        )
        .unwrap();
        // backoffLimit 6 as a server-side apply wrote it: the webhook kept it (the user's), so
        // the strict template (backoffLimit 0) is broken.
        let mut applied = listed_job("applied", "2");
        applied["spec"]["backoffLimit"] = json!(6);
        let limits =
            &mut applied["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"];
        limits["cpu"] = json!("4");
        limits["memory"] = json!("12Gi");
        applied["metadata"]["managedFields"] = json!([{"manager": "argocd", "operation": "Apply",
            "apiVersion": "batch/v1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:backoffLimit": {}}}}]);
        let e = evaluate(&strict, &NoCluster, &listed("batch"), applied.clone()).unwrap();
        assert_eq!(e.result, AuditResult::Fail, "{e:?}");
        assert!(e.message.contains("backoffLimit"), "{}", e.message);
        // The same value recorded only by an Update (the API server's default): replaced, so
        // the contract holds.
        applied["metadata"]["managedFields"][0]["operation"] = json!("Update");
        let e = evaluate(&strict, &NoCluster, &listed("batch"), applied).unwrap();
        assert_eq!(e.result, AuditResult::Pass, "{e:?}");
    }

    #[test]
    fn pods_of_a_launch_owner_and_other_objects_are_not_judged() {
        let policy = Policy::embedded_default();
        let mut pod = json!({"metadata": {"name": "p", "namespace": "wandb",
                "labels": {"wandb.ai/monitor": "true"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u",
                    "controller": true}]},
            "spec": {"containers": [{"name": "main", "image": "acme/train:1"}]}});
        assert!(has_launch_owner(&pod));
        assert!(evaluate(&policy, &NoCluster, &listed(""), pod.clone()).is_none());
        // An owner that is not its controller does not make it the Job's pod.
        let mut not_controlled = pod.clone();
        not_controlled["metadata"]["ownerReferences"][0]["controller"] = json!(false);
        assert!(!has_launch_owner(&not_controlled));
        assert!(evaluate(&policy, &NoCluster, &listed(""), not_controlled).is_some());
        // The same pod without an owner is judged.
        pod["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("ownerReferences");
        assert!(!has_launch_owner(&pod));
        assert!(evaluate(&policy, &NoCluster, &listed(""), pod).is_some());
        // A web server's pod (owned by a ReplicaSet) is not a launch workload.
        let web = json!({"metadata": {"name": "web", "namespace": "default",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "w", "uid": "u"}]},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        assert!(!has_launch_owner(&web));
        assert!(evaluate(&policy, &NoCluster, &listed(""), web).is_none());
        // Not an object: never panics.
        assert!(evaluate(&policy, &NoCluster, &listed(""), json!("x")).is_none());
    }

    #[test]
    fn policy_reports_group_by_namespace_with_counts() {
        let policy = policy_with_gpu_maximum(2);
        let mut other = listed_job("c", "1");
        other["metadata"]["namespace"] = json!("team-b");
        let entries: Vec<AuditEntry> = [listed_job("a", "1"), listed_job("b", "3"), other]
            .into_iter()
            .filter_map(|o| evaluate(&policy, &NoCluster, &listed("batch"), o))
            .collect();
        let reports = policy_reports(ReportFormat::PolicyReport, &entries, 1_700_000_000);
        assert_eq!(reports.len(), 2);
        let wandb = reports
            .iter()
            .find(|r| r["metadata"]["namespace"] == "wandb")
            .unwrap();
        assert_eq!(wandb["apiVersion"], "wgpolicyk8s.io/v1alpha2");
        assert_eq!(wandb["kind"], "PolicyReport");
        assert_eq!(wandb["metadata"]["name"], POLICY_REPORT_NAME);
        assert_eq!(
            wandb["summary"],
            json!({"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0})
        );
        let results = wandb["results"].as_array().unwrap();
        assert_eq!(results.len(), 2);
        let fail = results.iter().find(|r| r["result"] == "fail").unwrap();
        assert_eq!(fail["policy"], "gpu-queue");
        assert_eq!(fail["rule"], "limits.variables");
        assert_eq!(fail["source"], "launchgate");
        assert_eq!(fail["timestamp"]["seconds"], 1_700_000_000);
        assert_eq!(
            fail["resources"][0],
            json!({"apiVersion": "batch/v1", "kind": "Job", "namespace": "wandb", "name": "b", "uid": "uid-b"})
        );
        assert!(fail["message"].as_str().unwrap().contains("gpus"));
    }

    #[test]
    fn the_table_lists_each_workload_and_the_counts() {
        let policy = policy_with_gpu_maximum(2);
        let report = AuditReport {
            entries: [listed_job("a", "1"), listed_job("b", "3")]
                .into_iter()
                .filter_map(|o| evaluate(&policy, &NoCluster, &listed("batch"), o))
                .collect(),
            listed: 5,
            skipped: 3,
            notes: vec!["pytorchjobs.kubeflow.org: not installed, skipped".into()],
            policy_reports: vec![],
        };
        let table = render_table(&report);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("NAMESPACE"), "{table}");
        assert!(
            lines[1].contains(" a ") && lines[1].contains("PASS"),
            "{table}"
        );
        assert!(
            lines[2].contains(" b ") && lines[2].contains("FAIL"),
            "{table}"
        );
        assert!(table.contains("note: pytorchjobs.kubeflow.org: not installed"));
        assert!(table.contains(
            "2 launch workload(s): 1 pass, 0 warn, 1 fail (5 object(s) listed, 3 not judged)"
        ));
    }

    #[test]
    fn a_large_namespace_keeps_the_worst_results_and_true_counts() {
        let pass = evaluate(
            &Policy::embedded_default(),
            &NoCluster,
            &listed("batch"),
            listed_job("p", "1"),
        )
        .unwrap();
        let mut fail = pass.clone();
        fail.result = AuditResult::Fail;
        fail.name = "f".into();
        let mut entries: Vec<&AuditEntry> = vec![&pass; MAX_RESULTS_PER_REPORT];
        entries.push(&fail);
        let report = policy_report(ReportFormat::PolicyReport, "wandb", &entries, 0);
        let results = report["results"].as_array().unwrap();
        assert_eq!(results.len(), MAX_RESULTS_PER_REPORT);
        assert_eq!(results[0]["result"], "fail");
        assert_eq!(results[0]["resources"][0]["name"], "f");
        assert_eq!(report["summary"]["pass"], MAX_RESULTS_PER_REPORT);
        assert_eq!(report["summary"]["fail"], 1);
        // No workloads left: an empty report with zero counts.
        let empty = policy_report(ReportFormat::PolicyReport, "gone", &[], 0);
        assert_eq!(empty["results"], json!([]));
        assert_eq!(empty["summary"]["pass"], 0);
        assert_eq!(empty["metadata"]["namespace"], "gone");
    }
}
