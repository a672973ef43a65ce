//! A JobSet wired for PyTorch. JobSet sets no env, only labels
//! (`jobset.sigs.k8s.io/jobset-name`, `…/replicatedjob-name`, `…/job-index`) and a headless
//! Service: with `spec.network.enableDNSHostnames` (JobSet's webhook defaults it to true) each
//! pod is reachable as `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>`, the
//! subdomain being `spec.network.subdomain` or the JobSet's name.
//!
//! Opted in on the same positive evidence as an Indexed Job ([`super::indexed_job::opt_in`]:
//! the `launchgate.io/pytorch` annotation, the queue's `indexedJobs: true`, or with
//! `indexedJobs: auto` a launcher or PyTorch env in any replicated job's pod template). Every
//! replicated job takes part in the rendezvous unless its Job template is annotated
//! `launchgate.io/pytorch: "false"` (a tensorboard or data-loader job). The world size is
//! Σ `replicas × completions` of those jobs; the master is pod 0 of Job 0 of the first one; a
//! pod's rank is `base + completions × job-index + completion-index`, `base` counting the ranks
//! of the jobs before its own.
//!
//! JobSet's own webhook defaults `completionMode: Indexed`, the pods' `restartPolicy` and
//! `enableDNSHostnames: true`, before or after launchgate's: everything here reads an absent
//! field as JobSet's default, so the outcome does not depend on the order.
//!
//! The wiring: an opted-in JobSet gets, on each pod template of a
//! replicated job that takes part, the record of its wiring ([`deferred`]) — the master
//! address with the JobSet's name as placeholder, the port, the world size and where that
//! job's ranks start — and each pod is wired in full at pod admission, when its
//! `jobset.sigs.k8s.io/job-index` and completion index are known. Nothing is written into the
//! containers of the JobSet itself, so no pod ever runs with a world size but no rank.

use super::config::{IndexedJobs, OPT_IN_ANNOTATION, PytorchConfig};
use super::deferred::{self, Deferred, JOB_PLACEHOLDER, JobSetRank};
use super::env::{self, display_name, host_network_dns_problem, string_at};
use super::indexed_job::{OptIn, pod_spec_evidence};
use super::site::{Site, Warnings, warn_unwirable};
use crate::json::Pointer as _;
use crate::patch::Node;
use crate::workload::{self, WorkloadKind};
use serde_json::Value;

/// The label JobSet's controller gives every Job and pod: its Job's index within the
/// replicated job.
pub const JOB_INDEX_KEY: &str = "jobset.sigs.k8s.io/job-index";
/// The label naming a pod's JobSet.
pub const JOBSET_NAME_KEY: &str = "jobset.sigs.k8s.io/jobset-name";

/// Whether (and how) a JobSet is opted in.
pub fn opt_in(cfg: &PytorchConfig, jobset: &Value) -> Option<OptIn> {
    match annotation_says(jobset.get("metadata")) {
        Some(true) => Some(OptIn::Annotation),
        Some(false) => None,
        None => match cfg.indexed_jobs {
            IndexedJobs::All => Some(OptIn::Queue),
            IndexedJobs::Auto => workload::templates(WorkloadKind::JobSet, jobset)
                .into_iter()
                .find_map(|(_, t)| pod_spec_evidence(workload::pod_spec(t)?))
                .map(OptIn::Evidence),
            IndexedJobs::Off => None,
        },
    }
}

/// `launchgate.io/pytorch` under `metadata`: `Some(true)`, `Some(false)` or unset.
fn annotation_says(metadata: Option<&Value>) -> Option<bool> {
    let v = metadata?
        .get("annotations")?
        .get(OPT_IN_ANNOTATION)?
        .as_str()?
        .trim();
    if v.eq_ignore_ascii_case("true") {
        Some(true)
    } else if v.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

/// One replicated job that takes part in the rendezvous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankedJob {
    /// Index in `spec.replicatedJobs`.
    pub index: usize,
    pub name: String,
    /// Rank of pod 0 of its Job 0.
    pub base: i64,
    /// Ranks per Job (`completions`).
    pub stride: i64,
}

/// The rendezvous of a JobSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `<replicatedJob>-0-0.<subdomain>` without the JobSet's name in front; `subdomain` is
    /// `None` when it is the JobSet's own name.
    pub master_job: String,
    pub subdomain: Option<String>,
    pub nnodes: i64,
    pub ranked: Vec<RankedJob>,
}

impl Layout {
    /// `MASTER_ADDR` for a JobSet called `name`.
    pub fn master_addr(&self, name: &str) -> String {
        let subdomain = self.subdomain.as_deref().unwrap_or(name);
        format!("{name}-{}-0-0.{subdomain}", self.master_job)
    }

    /// The ranked job at `index` of `spec.replicatedJobs`.
    pub fn ranked_at(&self, index: usize) -> Option<&RankedJob> {
        self.ranked.iter().find(|r| r.index == index)
    }
}

/// Reads the rendezvous of an opted-in JobSet, or why it can never happen.
pub fn layout(jobset: &Value, how: OptIn, name: &str) -> Result<Layout, Vec<String>> {
    let display = display_name("JobSet", name);
    let why_opted = how.describe();
    let mut problems = Vec::new();
    let network = jobset.at("/spec/network");
    if network
        .and_then(|n| n.get("enableDNSHostnames"))
        .and_then(Value::as_bool)
        == Some(false)
    {
        problems.push(format!(
            "{display} (PyTorch wiring via {why_opted}): spec.network.enableDNSHostnames is false, so its pods get no DNS name and MASTER_ADDR cannot resolve; remove it (JobSet defaults it to true)"
        ));
    }
    let subdomain = string_at(jobset, "/spec/network/subdomain").map(str::to_string);
    let mut ranked = Vec::new();
    let mut base: i64 = 0;
    for (info, _) in workload::templates(WorkloadKind::JobSet, jobset) {
        let (index, Some(rj)) = (info.index, info.name.clone()) else {
            continue;
        };
        let Some(rjob) = jobset.at(&format!("/spec/replicatedJobs/{index}")) else {
            continue;
        };
        if annotation_says(rjob.at("/template/metadata")) == Some(false) {
            continue;
        }
        let at = format!("spec.replicatedJobs[{index}] ({rj})");
        let job_spec = rjob.at("/template/spec");
        let int = |key: &str| job_spec.and_then(|s| s.get(key)).and_then(Value::as_i64);
        let mode = job_spec
            .and_then(|s| s.get("completionMode"))
            .and_then(Value::as_str);
        if mode.is_some_and(|m| m != "Indexed") {
            problems.push(format!(
                "{display} (PyTorch wiring via {why_opted}): {at} has completionMode {}, so its pods have no completion index to take a rank from; leave it out (JobSet defaults Indexed) or annotate that Job template {OPT_IN_ANNOTATION}: \"false\"",
                mode.unwrap_or_default()
            ));
            continue;
        }
        let replicas = rjob.get("replicas").and_then(Value::as_i64).unwrap_or(1);
        let parallelism = int("parallelism").unwrap_or(1);
        let Some(completions) = int("completions").filter(|c| *c >= 1) else {
            problems.push(format!(
                "{display} (PyTorch wiring via {why_opted}): {at} sets no template.spec.completions (>= 1); its Jobs are Indexed, so it is the number of ranks per Job"
            ));
            continue;
        };
        if parallelism < completions {
            problems.push(format!(
                "{display} (PyTorch wiring via {why_opted}): {at} has parallelism {parallelism} < completions {completions}: set template.spec.parallelism: {completions}; not all ranks run at once, so the job can never rendezvous"
            ));
        }
        if let Some(spec) = rjob
            .at("/template/spec/template/spec")
            .and_then(Value::as_object)
            && let Some(p) = host_network_dns_problem(spec, &info.spec_path(), true)
        {
            problems.push(format!("{display}: {p}"));
        }
        ranked.push(RankedJob {
            index,
            name: rj,
            base,
            stride: completions,
        });
        base = base.saturating_add(replicas.max(0).saturating_mul(completions));
    }
    let Some(first) = ranked.first() else {
        problems.push(format!(
            "{display} (PyTorch wiring via {why_opted}): no replicated job takes part in the rendezvous"
        ));
        return Err(problems);
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Layout {
        master_job: first.name.clone(),
        subdomain,
        nnodes: base,
        ranked,
    })
}

/// Why an opted-in JobSet can never rendezvous (empty when it can or is not opted in).
pub fn problems(cfg: &PytorchConfig, object: &Value, name: &str) -> Vec<String> {
    match opt_in(cfg, object).map(|how| layout(object, how, name)) {
        Some(Err(problems)) => problems,
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn jobset(jobs: Value) -> Value {
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
               "metadata": {"name": "ddp", "annotations": {OPT_IN_ANNOTATION: "true"}},
               "spec": {"replicatedJobs": jobs}})
    }

    fn rjob(name: &str, replicas: i64, completions: i64) -> Value {
        json!({"name": name, "replicas": replicas, "template": {"spec": {
            "parallelism": completions, "completions": completions,
            "template": {"spec": {"containers": [{"name": "t"}]}}}}})
    }

    #[test]
    fn ranks_follow_the_replicated_jobs_in_order() {
        let mut tb = rjob("tensorboard", 1, 1);
        tb["template"]["metadata"] = json!({"annotations": {OPT_IN_ANNOTATION: "false"}});
        let js = jobset(json!([rjob("driver", 1, 1), tb, rjob("workers", 2, 4)]));
        let layout = layout(&js, OptIn::Annotation, "ddp").unwrap();
        assert_eq!(layout.nnodes, 9);
        assert_eq!(layout.master_addr("ddp"), "ddp-driver-0-0.ddp");
        assert_eq!(
            layout.ranked,
            vec![
                RankedJob {
                    index: 0,
                    name: "driver".into(),
                    base: 0,
                    stride: 1
                },
                RankedJob {
                    index: 2,
                    name: "workers".into(),
                    base: 1,
                    stride: 4
                },
            ]
        );
        let mut named = js.clone();
        named["spec"]["network"] = json!({"subdomain": "svc"});
        assert_eq!(
            layout_of(&named).master_addr("ddp-x1"),
            "ddp-x1-driver-0-0.svc"
        );
    }

    fn layout_of(js: &Value) -> Layout {
        layout(js, OptIn::Annotation, "ddp").unwrap()
    }

    #[test]
    fn what_can_never_rendezvous_is_said() {
        let mut js = jobset(json!([rjob("w", 1, 4)]));
        js["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = json!(2);
        js["spec"]["network"] = json!({"enableDNSHostnames": false});
        let found = layout(&js, OptIn::Annotation, "ddp").unwrap_err();
        assert!(
            found[0].contains("enableDNSHostnames is false"),
            "{found:?}"
        );
        assert!(
            found[1].contains("parallelism 2 < completions 4"),
            "{found:?}"
        );
        let mut js = jobset(json!([rjob("w", 1, 4)]));
        js["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] = json!("NonIndexed");
        assert!(layout_of_err(&js).contains("completionMode NonIndexed"));
        js["spec"]["replicatedJobs"][0]["template"]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("completions");
        js["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] = json!("Indexed");
        assert!(layout_of_err(&js).contains("sets no template.spec.completions"));
        // Not opted in: no problems at all.
        let mut plain = jobset(json!([rjob("w", 1, 4)]));
        plain["metadata"]["annotations"] = json!({});
        assert!(problems(&PytorchConfig::default(), &plain, "ddp").is_empty());
        for garbage in [
            json!({"spec": 1}),
            json!({"spec": {"replicatedJobs": [1, {"template": 2}]}}),
        ] {
            let _ = layout(&garbage, OptIn::Queue, "");
        }
    }

    fn layout_of_err(js: &Value) -> String {
        layout(js, OptIn::Annotation, "ddp").unwrap_err().join("\n")
    }

    #[test]
    fn auto_needs_evidence_in_a_template() {
        let cfg = PytorchConfig {
            indexed_jobs: IndexedJobs::Auto,
            ..PytorchConfig::default()
        };
        let mut js = jobset(json!([rjob("w", 1, 2)]));
        js["metadata"]["annotations"] = json!({});
        assert_eq!(opt_in(&cfg, &js), None);
        js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
            ["command"] = json!(["torchrun", "train.py"]);
        assert!(matches!(opt_in(&cfg, &js), Some(OptIn::Evidence(_))));
    }
}

/// Records the wiring on every taking-part template of an opted-in JobSet.
pub fn mutate(ctx: &dyn Site, object: &mut Node<'_, Value>, findings: &mut dyn Warnings) -> bool {
    let cfg = ctx.pytorch();
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
        if let Some(mut spec) = workload::pod_spec_mut(template) {
            // A custom resource: no API default to tell apart, any dnsPolicy is the user's.
            changed |= env::ensure_host_network_dns(&mut spec, &info.spec_path(), true, findings);
        }
    });
    changed
}

#[cfg(test)]
mod wiring_tests {
    use crate::mutate::pytorch::MUTATOR;
    use crate::mutate::test_support::mutate_with;
    use crate::pytorch::deferred::{DEFERRED_ANNOTATION, Deferred, JobSetRank};
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
        assert!(f.warning_texts().is_empty(), "{:?}", f.warning_texts());
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
            f.warning_texts()[0].contains("enableDNSHostnames"),
            "{:?}",
            f.warning_texts()
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
        assert!(f.warning_texts().is_empty(), "{:?}", f.warning_texts());
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
