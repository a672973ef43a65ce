//! batch/v1 Indexed Jobs (the Kubernetes "Job with Pod-to-Pod Communication" pattern).
//!
//! Opt-in: the Job annotation `launchgate.io/pytorch: "true"` (or `"false"` to opt out), else
//! the queue's `indexedJobs: true`, which covers the queue's Indexed Jobs (a non-Indexed Job
//! of such a queue is an ordinary single-pod job and is left alone).
//!
//! Everything is written once into `spec.template`, so the controller-made pods (which have
//! only a `generateName` at admission) need nothing further: `MASTER_ADDR` =
//! `<job>-0.<subdomain>`, `MASTER_PORT` = the queue's port, `WORLD_SIZE` = `completions`,
//! `RANK` = a downward-API `fieldRef` on the pod's completion-index annotation.
//!
//! An opted-in Job that can never rendezvous — not Indexed (explicit opt-in only), no
//! `completions`, no `subdomain` (pods get no DNS name), or `parallelism < completions` (not
//! all ranks run at once) — is left unwired with a warning, and denied by the validating
//! webhook when the queue says `onUnwirable: deny`.

use super::deferred::{self, Deferred, JOB_PLACEHOLDER};
use super::env::{self, EnvValue, JobWiring};
use super::{OPT_IN_ANNOTATION, PytorchConfig, warn_unwirable};
use crate::mutate::intent::UserIntent;
use crate::mutate::{Findings, MutationContext};
use crate::workload;
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
    let parallelism = job
        .pointer("/spec/parallelism")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let subdomain = env::string_at(job, "/spec/template/spec/subdomain");
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

/// Template path of the pod spec, for messages.
const SPEC_PATH: &str = "spec.template.spec";

/// Did the user write the template's `dnsPolicy` (the API server defaults it)?
fn user_wrote_dns(job: &Value) -> bool {
    UserIntent::of(job).wrote(&["spec", "template", "spec", "dnsPolicy"])
}

/// The problems [`super::check`] denies for a batch/v1 Job.
pub fn problems(ctx: &MutationContext<'_>, cfg: &PytorchConfig, object: &Value) -> Vec<String> {
    let name = ctx.object_name(object);
    // Judged as the mutation leaves it: an API-defaulted parallelism becomes completions.
    let mut mutated = object.clone();
    all_ranks_at_once(&mut mutated);
    let object = &mutated;
    match opt_in(cfg, object).map(|how| shape(object, how, name)) {
        Some(Shape::Unwirable(problems)) => problems,
        Some(Shape::Wirable { .. }) => object
            .pointer("/spec/template/spec")
            .and_then(Value::as_object)
            .and_then(|spec| env::host_network_dns_problem(spec, SPEC_PATH, user_wrote_dns(object)))
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
/// ([`UserIntent`]), an opted-in Indexed Job gets `parallelism = completions`.
fn all_ranks_at_once(job: &mut Value) -> bool {
    let indexed = job.pointer("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
    let completions = job.pointer("/spec/completions").and_then(Value::as_i64);
    let parallelism = job.pointer("/spec/parallelism").and_then(Value::as_i64);
    let Some(completions) = completions.filter(|c| *c > 1) else {
        return false;
    };
    if !indexed
        || !matches!(parallelism, None | Some(1))
        || UserIntent::of(job).wrote(&["spec", "parallelism"])
    {
        return false;
    }
    match job.get_mut("spec").and_then(Value::as_object_mut) {
        Some(spec) => {
            spec.insert("parallelism".into(), serde_json::json!(completions));
            true
        }
        None => false,
    }
}

/// Wires an opted-in Indexed Job's pod template.
pub fn mutate(
    ctx: &MutationContext<'_>,
    cfg: &PytorchConfig,
    object: &mut Value,
    findings: &mut Findings,
) -> bool {
    let Some(how) = opt_in(cfg, object) else {
        return false;
    };
    let job_name = ctx.object_name(object).to_string();
    let mut changed = all_ranks_at_once(object);
    let (completions, subdomain) = match shape(object, how, &job_name) {
        Shape::NotDistributed => return changed,
        Shape::Unwirable(problems) => {
            warn_unwirable(findings, &problems);
            return changed;
        }
        Shape::Wirable {
            completions,
            subdomain,
        } => (completions, subdomain),
    };
    let wrote_dns = user_wrote_dns(object);
    if job_name.is_empty() {
        // No name yet (generateName): nothing half-wired in the template; each pod carries
        // the Job's name and gets everything at pod admission.
        let Some(template) = object
            .pointer_mut("/spec/template")
            .and_then(Value::as_object_mut)
        else {
            return changed;
        };
        changed |= deferred::record(
            template,
            &Deferred {
                master_addr: format!("{JOB_PLACEHOLDER}-0.{subdomain}"),
                port: cfg.port,
                nnodes: completions,
                ranked: true,
                wait_for_master: true,
            },
        );
        if let Some(spec) = workload::pod_spec_mut(template) {
            changed |= env::ensure_host_network_dns(spec, SPEC_PATH, wrote_dns, findings);
        }
        return changed;
    }
    let wiring = JobWiring {
        master_addr: Some(format!("{job_name}-0.{subdomain}")),
        master_port: cfg.port,
        nnodes: completions,
    };
    let rank = EnvValue::FieldRef(env::COMPLETION_INDEX_FIELD.into());
    let mut vars = env::job_vars(cfg, &wiring);
    vars.extend(env::rank_vars(cfg, rank.clone()));
    let Some(template) = object
        .pointer_mut("/spec/template")
        .and_then(Value::as_object_mut)
    else {
        return changed;
    };
    let Some(spec) = workload::pod_spec_mut(template) else {
        return changed;
    };
    changed |= env::wire_pod_spec(ctx, spec, SPEC_PATH, &vars, Some(cfg.port), findings);
    changed |= env::ensure_host_network_dns(spec, SPEC_PATH, wrote_dns, findings);
    if cfg.wait_for_master.enabled
        && let Some(addr) = &wiring.master_addr
    {
        changed |=
            env::write_wait_for_master(&cfg.wait_for_master, spec, addr, cfg.port, Some(rank));
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(spec: Value, annotations: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "ddp", "annotations": annotations}, "spec": spec})
    }

    fn good_spec() -> Value {
        json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3,
               "template": {"spec": {"subdomain": "ddp", "containers": [{"name": "t"}]}}})
    }

    #[test]
    fn opt_in_by_annotation_or_queue() {
        let mut cfg = PytorchConfig::default();
        let j = job(good_spec(), json!({}));
        assert_eq!(opt_in(&cfg, &j), None);
        cfg.indexed_jobs = true;
        assert_eq!(opt_in(&cfg, &j), Some(OptIn::Queue));
        let out = job(good_spec(), json!({OPT_IN_ANNOTATION: "false"}));
        assert_eq!(opt_in(&cfg, &out), None);
        cfg.indexed_jobs = false;
        let inn = job(good_spec(), json!({OPT_IN_ANNOTATION: "true"}));
        assert_eq!(opt_in(&cfg, &inn), Some(OptIn::Annotation));
        assert_eq!(opt_in(&cfg, &json!({"metadata": 3})), None);
    }

    #[test]
    fn api_defaulted_parallelism_runs_all_ranks_at_once() {
        use crate::mutate::pytorch::PytorchWiring;
        use crate::mutate::test_support::mutate_with;
        // completions 3 without parallelism: the API server stored parallelism 1.
        let mut spec = good_spec();
        spec["parallelism"] = json!(1);
        let (out, f) = mutate_with(
            &PytorchWiring,
            "pytorch: {indexedJobs: true}",
            job(spec.clone(), json!({})),
        );
        assert_eq!(out["spec"]["parallelism"], 3);
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);
        // Written by the user (server-side apply owns it): kept, and unwirable.
        let mut j = job(spec, json!({}));
        j["metadata"]["managedFields"] = json!([{"operation": "Apply", "manager": "kubectl",
            "fieldsV1": {"f:spec": {"f:parallelism": {}}}}]);
        let (out, f) = mutate_with(&PytorchWiring, "pytorch: {indexedJobs: true}", j);
        assert_eq!(out["spec"]["parallelism"], 1);
        assert!(
            f.warnings[0].contains("spec.parallelism 1 < spec.completions 3"),
            "{:?}",
            f.warnings
        );
    }

    #[test]
    fn shapes() {
        assert_eq!(
            shape(&job(good_spec(), json!({})), OptIn::Queue, "ddp"),
            Shape::Wirable {
                completions: 3,
                subdomain: "ddp".into()
            }
        );
        let mut non_indexed = good_spec();
        non_indexed["completionMode"] = json!("NonIndexed");
        let j = job(non_indexed, json!({}));
        assert_eq!(shape(&j, OptIn::Queue, "ddp"), Shape::NotDistributed);
        let Shape::Unwirable(p) = shape(&j, OptIn::Annotation, "ddp") else {
            panic!("explicit opt-in of a non-Indexed Job is unwirable")
        };
        assert!(p[0].contains("not an Indexed Job"), "{p:?}");

        let mut s = good_spec();
        s["parallelism"] = json!(2);
        s["template"]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("subdomain");
        let Shape::Unwirable(p) = shape(&job(s, json!({})), OptIn::Queue, "ddp") else {
            panic!("unwirable")
        };
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            p[0].contains("spec.parallelism 2 < spec.completions 3"),
            "{p:?}"
        );
        assert!(p[1].contains("subdomain"), "{p:?}");

        let mut s = good_spec();
        s.as_object_mut().unwrap().remove("completions");
        let Shape::Unwirable(p) = shape(&job(s, json!({})), OptIn::Queue, "ddp") else {
            panic!("unwirable")
        };
        assert!(p[0].contains("spec.completions must be set"), "{p:?}");
        let Shape::Unwirable(_) = shape(
            &json!({"spec": {"completionMode": "Indexed"}}),
            OptIn::Queue,
            "",
        ) else {
            panic!("malformed is unwirable")
        };
    }
}
