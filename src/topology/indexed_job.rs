//! A batch/v1 Indexed Job opted in to PyTorch wiring (the Kubernetes "Job with Pod-to-Pod
//! Communication" pattern): the annotation `launchgate.io/pytorch: "true"` (or `"false"` to opt
//! out), else the queue's `indexedJobs: true`. Its world size is `completions`, its master
//! `<job>-0.<subdomain>`; it can never rendezvous when it is not Indexed (explicit opt-in only),
//! has no `completions`, no `subdomain`, or runs fewer pods at once than it has ranks.

use super::{OPT_IN_ANNOTATION, PytorchConfig, host_network_dns_problem, string_at};
use crate::workload::intent::UserIntent;
use serde_json::Value;

/// How a Job came to be wired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptIn {
    /// `launchgate.io/pytorch: "true"` on the Job.
    Annotation,
    /// The queue's `indexedJobs: true`.
    Queue,
}

/// Whether (and how) a batch/v1 Job is opted in.
pub fn opt_in(cfg: &PytorchConfig, job: &Value) -> Option<OptIn> {
    let annotation = job
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(OPT_IN_ANNOTATION))
        .and_then(Value::as_str);
    match annotation.map(str::trim) {
        Some(v) if v.eq_ignore_ascii_case("true") => Some(OptIn::Annotation),
        Some(v) if v.eq_ignore_ascii_case("false") => None,
        _ if cfg.indexed_jobs => Some(OptIn::Queue),
        _ => None,
    }
}

/// What an opted-in Job looks like, or why it cannot be wired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// Not a distributed job (not Indexed, opted in by the queue only): left alone.
    NotDistributed,
    Wirable {
        completions: i64,
        subdomain: String,
    },
    Unwirable(Vec<String>),
}

/// Reads the shape of an opted-in Job.
pub fn shape(job: &Value, how: OptIn, job_name: &str) -> Shape {
    let display = display_name(job_name);
    let why_opted = match how {
        OptIn::Annotation => format!("{OPT_IN_ANNOTATION}: \"true\""),
        OptIn::Queue => "the queue's pytorch.indexedJobs".to_string(),
    };
    let indexed = job.pointer("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
    if !indexed {
        return match how {
            OptIn::Queue => Shape::NotDistributed,
            OptIn::Annotation => Shape::Unwirable(vec![format!(
                "{display} asks for PyTorch wiring ({why_opted}) but is not an Indexed Job: set spec.completionMode: Indexed so every pod has a rank"
            )]),
        };
    }
    let mut problems = Vec::new();
    let completions = job.pointer("/spec/completions").and_then(Value::as_i64);
    let parallelism = parallelism_to_write(job)
        .or_else(|| job.pointer("/spec/parallelism").and_then(Value::as_i64))
        .unwrap_or(1);
    let subdomain = string_at(job, "/spec/template/spec/subdomain");
    match completions {
        Some(c) if c >= 1 => {
            if parallelism < c {
                problems.push(format!(
                    "{display} (PyTorch wiring via {why_opted}): spec.parallelism {parallelism} < spec.completions {c}, so not all {c} ranks run at once and the job can never rendezvous"
                ));
            }
        }
        _ => problems.push(format!(
            "{display} (PyTorch wiring via {why_opted}): spec.completions must be set (>= 1); it is the world size"
        )),
    }
    if subdomain.is_none() {
        problems.push(format!(
            "{display} (PyTorch wiring via {why_opted}): spec.template.spec.subdomain is not set, so its pods get no DNS name and MASTER_ADDR cannot resolve; create a headless Service and set subdomain to its name"
        ));
    }
    match (problems.is_empty(), completions, subdomain) {
        (true, Some(completions), Some(subdomain)) => Shape::Wirable {
            completions,
            subdomain: subdomain.to_string(),
        },
        _ => Shape::Unwirable(problems),
    }
}

/// Path of the Job's pod spec, for messages.
pub const SPEC_PATH: &str = "spec.template.spec";

/// Did the user write the template's `dnsPolicy` (the API server defaults it)?
pub fn user_wrote_dns(job: &Value) -> bool {
    UserIntent::of(job).wrote(&["spec", "template", "spec", "dnsPolicy"])
}

/// Why an opted-in batch/v1 Job can never rendezvous, judged as the mutation leaves it (an
/// API-defaulted parallelism becomes completions, see [`parallelism_to_write`]).
pub fn problems(cfg: &PytorchConfig, object: &Value, name: &str) -> Vec<String> {
    match opt_in(cfg, object).map(|how| shape(object, how, name)) {
        Some(Shape::Unwirable(problems)) => problems,
        Some(Shape::Wirable { .. }) => object
            .pointer("/spec/template/spec")
            .and_then(Value::as_object)
            .and_then(|spec| host_network_dns_problem(spec, SPEC_PATH, user_wrote_dns(object)))
            .map(|p| format!("{}: {p}", display_name(name)))
            .into_iter()
            .collect(),
        _ => Vec::new(),
    }
}

fn display_name(job_name: &str) -> String {
    if job_name.is_empty() {
        "Job (generateName)".to_string()
    } else {
        format!("Job {job_name:?}")
    }
}

/// The API server defaults an unset `spec.parallelism` to 1 before admission, which would run
/// the ranks one at a time (never a rendezvous). When the user did not write `parallelism`
/// ([`UserIntent`]), an opted-in Indexed Job runs all ranks at once: this is the
/// `parallelism` (= `completions`) the mutation writes, `None` when it writes none.
pub fn parallelism_to_write(job: &Value) -> Option<i64> {
    let indexed = job.pointer("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
    let completions = job.pointer("/spec/completions").and_then(Value::as_i64);
    let parallelism = job.pointer("/spec/parallelism").and_then(Value::as_i64);
    let completions = completions.filter(|c| *c > 1)?;
    let defaulted = indexed
        && matches!(parallelism, None | Some(1))
        && !UserIntent::of(job).wrote(&["spec", "parallelism"]);
    defaulted.then_some(completions)
}
