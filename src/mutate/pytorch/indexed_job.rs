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
use crate::json::Pointer as _;
use crate::mutate::{Findings, MutationContext};
use crate::topology::guardrails::rendezvous_service_problems;
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
    preflight(ctx, object, &job_name, &subdomain, cfg.port, findings);
    if job_name.is_empty() {
        // No name yet (generateName): nothing half-wired in the template; each pod carries
        // the Job's name and gets everything at pod admission.
        let Some(template) = object
            .at_mut("/spec/template")
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
                jobset_rank: None,
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
        .at_mut("/spec/template")
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

/// The rendezvous preflight (`guardrails.rendezvousPreflight`, with cluster lookups): the
/// headless Service the pods' subdomain names, as the cluster has it now.
fn preflight(
    ctx: &MutationContext<'_>,
    job: &Value,
    job_name: &str,
    subdomain: &str,
    port: u16,
    findings: &mut Findings,
) {
    if !ctx.settings.guardrails.rendezvous_preflight || !ctx.cluster.is_connected() {
        return;
    }
    let Some(namespace) = ctx.request.namespace.as_deref() else {
        return;
    };
    let service = ctx.cluster.service(namespace, subdomain);
    let labels = job
        .at("/spec/template/metadata/labels")
        .and_then(Value::as_object);
    for problem in rendezvous_service_problems(
        service.as_deref(),
        namespace,
        subdomain,
        labels,
        job_name,
        port,
    ) {
        // The API server cuts long warnings: what and why first.
        findings.warn(format!("launchgate: rendezvous preflight: {problem}"));
    }
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
        cfg.indexed_jobs = crate::topology::IndexedJobs::All;
        assert_eq!(opt_in(&cfg, &j), Some(OptIn::Queue));
        let out = job(good_spec(), json!({OPT_IN_ANNOTATION: "false"}));
        assert_eq!(opt_in(&cfg, &out), None);
        cfg.indexed_jobs = crate::topology::IndexedJobs::Off;
        let inn = job(good_spec(), json!({OPT_IN_ANNOTATION: "true"}));
        assert_eq!(opt_in(&cfg, &inn), Some(OptIn::Annotation));
        assert_eq!(opt_in(&cfg, &json!({"metadata": 3})), None);
    }

    #[test]
    fn parallelism_is_raised_only_when_a_record_shows_the_api_defaulted_it() {
        use crate::mutate::pytorch::MUTATOR;
        use crate::mutate::test_support::mutate_with;
        let mut spec = good_spec();
        spec["parallelism"] = json!(1);
        // kubectl apply without parallelism: last-applied says the API server set the 1.
        let applied = json!({"kubectl.kubernetes.io/last-applied-configuration":
            r#"{"spec":{"completionMode":"Indexed","completions":3}}"#});
        let (out, f) = mutate_with(
            &MUTATOR,
            "pytorch: {indexedJobs: true}",
            job(spec.clone(), applied),
        );
        assert_eq!(out["spec"]["parallelism"], 3);
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);
        // Written by the user (server-side apply owns it): kept, and unwirable.
        let mut j = job(spec.clone(), json!({}));
        j["metadata"]["managedFields"] = json!([{"operation": "Apply", "manager": "kubectl",
            "fieldsV1": {"f:spec": {"f:parallelism": {}}}}]);
        let (out, f) = mutate_with(&MUTATOR, "pytorch: {indexedJobs: true}", j);
        assert_eq!(out["spec"]["parallelism"], 1);
        assert!(
            f.warnings[0].contains("spec.parallelism 1 < spec.completions 3"),
            "{:?}",
            f.warnings
        );
        // No record (kubectl create, the W&B agent): a 1 may be the user's, so it is kept and
        // the message says how to run every rank at once.
        let (out, f) = mutate_with(
            &MUTATOR,
            "pytorch: {indexedJobs: true}",
            job(spec, json!({})),
        );
        assert_eq!(out["spec"]["parallelism"], 1);
        assert!(
            f.warnings[0].contains("set spec.parallelism: 3"),
            "{:?}",
            f.warnings
        );
    }

    #[test]
    fn pytorch_env_stays_coherent_with_what_the_user_kept() {
        use crate::mutate::pytorch::MUTATOR;
        use crate::mutate::test_support::mutate_with;
        let mut spec = good_spec();
        // WORLD_SIZE as a process count (3 pods × 8 GPUs) and a rendezvous port of their own.
        spec["template"]["spec"]["containers"][0]["env"] = json!([
            {"name": "WORLD_SIZE", "value": "24"},
            {"name": "MASTER_PORT", "value": "29500"}
        ]);
        let (out, f) = mutate_with(
            &MUTATOR,
            "pytorch: {indexedJobs: true}",
            job(spec, json!({})),
        );
        let c = &out["spec"]["template"]["spec"]["containers"][0];
        let value = |n: &str| crate::workload::effective_env_value(c.as_object().unwrap(), n);
        // torchrun's --nnodes counts pods, never the user's process count.
        assert_eq!(value("PET_NNODES"), Some("3"));
        assert_eq!(value("WORLD_SIZE"), Some("24"));
        // The port the containers rendezvous on is the MASTER_PORT they use.
        assert_eq!(value("MASTER_PORT"), Some("29500"));
        assert_eq!(value("PET_MASTER_PORT"), Some("29500"));
        assert_eq!(c["ports"][0]["containerPort"], 29500, "{}", c["ports"]);
        assert!(
            f.warnings
                .iter()
                .any(|w| w.contains("keeps its WORLD_SIZE")),
            "{:?}",
            f.warnings
        );
    }

    #[test]
    fn auto_wires_only_jobs_that_show_they_are_pytorch() {
        use crate::topology::IndexedJobs;
        let cfg = PytorchConfig {
            indexed_jobs: IndexedJobs::Auto,
            ..PytorchConfig::default()
        };
        let with = |container: Value| {
            let mut spec = good_spec();
            spec["template"]["spec"]["containers"] = json!([container]);
            job(spec, json!({}))
        };
        // A sharded evaluation: an Indexed Job, nothing PyTorch-distributed about it.
        let eval = with(
            json!({"name": "eval", "command": ["python", "eval.py", "--shard=$(JOB_COMPLETION_INDEX)"]}),
        );
        assert_eq!(opt_in(&cfg, &eval), None);
        for (container, evidence) in [
            (
                json!({"name": "t", "command": ["torchrun", "--nproc-per-node=8", "train.py"]}),
                "torchrun",
            ),
            (
                json!({"name": "t", "command": ["/opt/conda/bin/torchrun"]}),
                "torchrun",
            ),
            (
                json!({"name": "t", "command": ["python", "-m", "torch.distributed.run", "t.py"]}),
                "torch.distributed.run",
            ),
            (
                json!({"name": "t", "command": ["bash", "-c"], "args": ["pip install -e . && accelerate launch train.py"]}),
                "accelerate launch",
            ),
            (
                json!({"name": "t", "args": ["deepspeed", "train.py"]}),
                "deepspeed",
            ),
            (
                json!({"name": "t", "env": [{"name": "WORLD_SIZE", "value": "4"}]}),
                "env",
            ),
        ] {
            match opt_in(&cfg, &with(container.clone())) {
                Some(OptIn::Evidence(why)) => {
                    assert!(why.contains(evidence), "{why} for {container}")
                }
                other => panic!("{container}: {other:?}"),
            }
        }
        // "accelerate" alone (e.g. a config step) is no launcher; an init container's command
        // says nothing about the training container.
        assert_eq!(
            opt_in(
                &cfg,
                &with(json!({"name": "t", "command": ["accelerate", "config"]}))
            ),
            None
        );
        let mut init_only = eval.clone();
        init_only["spec"]["template"]["spec"]["initContainers"] =
            json!([{"name": "prep", "command": ["torchrun", "--help"]}]);
        assert_eq!(opt_in(&cfg, &init_only), None);
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
