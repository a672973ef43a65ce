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

use super::deferred::{self, Deferred};
use super::env::{self, EnvValue};
use super::warn_unwirable;
use crate::mutate::{Findings, MutationContext};
use crate::topology::indexed_job::{
    SPEC_PATH, Shape, opt_in, parallelism_to_write, shape, user_wrote_dns,
};
use crate::topology::{JOB_PLACEHOLDER, JobWiring, PytorchConfig};
use crate::workload;
use serde_json::Value;

/// Writes [`parallelism_to_write`]: an opted-in Indexed Job whose `parallelism` the API server
/// defaulted runs all its ranks at once.
fn all_ranks_at_once(job: &mut Value) -> bool {
    let Some(parallelism) = parallelism_to_write(job) else {
        return false;
    };
    match job.get_mut("spec").and_then(Value::as_object_mut) {
        Some(spec) => {
            spec.insert("parallelism".into(), serde_json::json!(parallelism));
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
    use crate::topology::OPT_IN_ANNOTATION;
    use crate::topology::indexed_job::OptIn;
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
        use crate::mutate::pytorch::MUTATOR;
        use crate::mutate::test_support::mutate_with;
        // completions 3 without parallelism: the API server stored parallelism 1.
        let mut spec = good_spec();
        spec["parallelism"] = json!(1);
        let (out, f) = mutate_with(
            &MUTATOR,
            "pytorch: {indexedJobs: true}",
            job(spec.clone(), json!({})),
        );
        assert_eq!(out["spec"]["parallelism"], 3);
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);
        // Written by the user (server-side apply owns it): kept, and unwirable.
        let mut j = job(spec, json!({}));
        j["metadata"]["managedFields"] = json!([{"operation": "Apply", "manager": "kubectl",
            "fieldsV1": {"f:spec": {"f:parallelism": {}}}}]);
        let (out, f) = mutate_with(&MUTATOR, "pytorch: {indexedJobs: true}", j);
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
