//! A Kubeflow PyTorchJob (`kubeflow.org/v1`): its replica specs as the training operator reads
//! them (types matched case-insensitively, replicas defaulted to 1) and the jobs the operator
//! cannot wire — and what launchgate adds to it.
//!
//! The training operator sets `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK` and the
//! `PET_*` variables itself (appended at pod creation) and defaults the `pytorchjob-port` port,
//! so launchgate duplicates none of them. It adds only what is missing and configured:
//!
//! * `spec.nprocPerNode` from the queue's `nprocPerNode` when the job sets none;
//! * the TCP wait-for-master init container on the Worker template (the operator's own
//!   `init-pytorch` only waits for DNS);
//!
//! and warns about env the operator will shadow (its values are appended after the user's and
//! win) and about a job the operator cannot wire (several Masters; several Workers without a
//! Master or an elastic policy get no `MASTER_ADDR`/`RANK` at all).

use super::env::{self, host_network_dns_problem, string_at};
use super::site::{Site, Warnings, warn_unwirable};
use crate::json::Pointer as _;
use crate::patch::Node;
use crate::workload::{self, WorkloadKind};
use serde_json::{Value, json};

/// `(replica type as written, replicas)`; the operator matches types case-insensitively and
/// defaults replicas to 1.
pub fn replica_specs(job: &Value) -> Vec<(String, i64)> {
    job.at("/spec/pytorchReplicaSpecs")
        .and_then(Value::as_object)
        .map(|specs| {
            specs
                .iter()
                .map(|(t, rs)| {
                    let replicas = rs.get("replicas").and_then(Value::as_i64).unwrap_or(1);
                    (t.clone(), replicas)
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn replicas_of(specs: &[(String, i64)], replica_type: &str) -> Option<i64> {
    specs
        .iter()
        .filter(|(t, _)| t.eq_ignore_ascii_case(replica_type))
        .map(|(_, r)| *r)
        // Saturating: replicas come from the request, and only `== 1` / `> 1` matter.
        .reduce(i64::saturating_add)
}

/// Problems the operator cannot wire around (denied by [`super::problems`] under `deny`).
pub fn problems(job: &Value) -> Vec<String> {
    let specs = replica_specs(job);
    let name = string_at(job, "/metadata/name").unwrap_or("(generateName)");
    let mut out = Vec::new();
    match replicas_of(&specs, "Master") {
        Some(1) => {}
        Some(n) => out.push(format!(
            "PyTorchJob {name:?}: spec.pytorchReplicaSpecs.Master.replicas is {n}; it must be exactly 1 (one rank 0)"
        )),
        None => {
            let workers = replicas_of(&specs, "Worker").unwrap_or(0);
            let elastic = job.at("/spec/elasticPolicy").is_some();
            if workers > 1 && !elastic {
                out.push(format!(
                    "PyTorchJob {name:?} has {workers} Workers but no Master and no elasticPolicy: the operator then sets no MASTER_ADDR, RANK or WORLD_SIZE and the workers can never rendezvous; add a Master replica or an elasticPolicy"
                ));
            }
        }
    }
    out
}

/// hostNetwork replicas whose `dnsPolicy` (written by the user: the API server does not default
/// a custom resource's template) keeps the operator's service names from resolving.
pub fn dns_problems(job: &Value) -> Vec<String> {
    let name = string_at(job, "/metadata/name").unwrap_or("(generateName)");
    workload::templates(WorkloadKind::PyTorchJob, job)
        .into_iter()
        .filter_map(|(info, template)| {
            let spec = workload::pod_spec(template)?;
            host_network_dns_problem(spec, &info.spec_path(), spec.contains_key("dnsPolicy"))
        })
        .map(|p| format!("PyTorchJob {name:?}: {p}"))
        .collect()
}

/// What the operator's defaulting writes into an unset `spec.nprocPerNode`.
const OPERATOR_DEFAULT_NPROC: &str = "auto";

/// The operator's default port when the Master's `pytorch` container declares none.
const OPERATOR_DEFAULT_PORT: u16 = 23456;

/// Variables the operator sets itself.
const OPERATOR_VARS: [&str; 8] = [
    env::MASTER_ADDR,
    env::MASTER_PORT,
    env::WORLD_SIZE,
    env::RANK,
    env::PET_MASTER_ADDR,
    env::PET_MASTER_PORT,
    env::PET_NNODES,
    env::PET_NODE_RANK,
];

/// The Master's rendezvous port: its `pytorch` container's `pytorchjob-port`.
fn master_port(job: &Value) -> u16 {
    let Some(specs) = job
        .at("/spec/pytorchReplicaSpecs")
        .and_then(Value::as_object)
    else {
        return OPERATOR_DEFAULT_PORT;
    };
    specs
        .iter()
        .filter(|(t, _)| t.eq_ignore_ascii_case("Master"))
        .filter_map(|(_, rs)| rs.at("/template/spec/containers")?.as_array())
        .flatten()
        .filter(|c| workload::name_of(c) == Some("pytorch"))
        .filter_map(|c| c.get("ports")?.as_array())
        .flatten()
        .find(|p| workload::name_of(p) == Some(env::PORT_NAME))
        .and_then(|p| p.get("containerPort")?.as_u64())
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(OPERATOR_DEFAULT_PORT)
}

/// Adds what the operator lacks.
pub fn mutate(ctx: &dyn Site, object: &mut Node<'_, Value>, findings: &mut dyn Warnings) -> bool {
    let cfg = ctx.pytorch();
    let unwirable = problems(object);
    if !unwirable.is_empty() {
        warn_unwirable(findings, &unwirable);
        return false;
    }
    let mut changed = false;
    let has_master = replicas_of(&replica_specs(object), "Master").is_some();
    let job_name = ctx.object_name(object).to_string();
    let port = master_port(object);

    if let Some(nproc) = cfg.nproc_per_node {
        let elastic_nproc = object
            .at("/spec/elasticPolicy/nProcPerNode")
            .is_some_and(|v| !v.is_null());
        // The operator's defaulting writes "auto" when nprocPerNode is unset; an "auto" the
        // user did not write (by apply) is that default, not a choice.
        let user_wrote = ctx.intent(object).wrote(&["spec", "nprocPerNode"]);
        let wanted = json!(nproc.to_string());
        if !elastic_nproc && let Some(mut spec) = object.object("spec") {
            let current = spec.get("nprocPerNode");
            let unset = current.is_none_or(Value::is_null)
                || (current.and_then(Value::as_str) == Some(OPERATOR_DEFAULT_NPROC) && !user_wrote);
            if unset && current != Some(&wanted) {
                spec.set("nprocPerNode", wanted);
                changed = true;
            }
        }
    }

    if cfg.wait_for_master.enabled && has_master && job_name.is_empty() {
        findings.warn(
            crate::rules::PYTORCH_NO_MASTER_WAIT,
            "launchgate: this PyTorchJob has only a generateName, so its master's address (<name>-master-0) is not known at admission and its workers get no wait-for-master init container; give the PyTorchJob a name to have it".into(),
        );
    }
    workload::for_each_template_mut(WorkloadKind::PyTorchJob, object, |info, template| {
        let Some(replica_type) = &info.name else {
            return;
        };
        let Some(mut spec) = workload::pod_spec_mut(template) else {
            return;
        };
        let wrote_dns = spec.contains_key("dnsPolicy");
        changed |= env::ensure_host_network_dns(&mut spec, &info.spec_path(), wrote_dns, findings);
        ctx.for_each_training_container(&mut spec, &info.spec_path(), &mut |where_, c| {
            for name in OPERATOR_VARS {
                if workload::effective_env(c, name).is_some() {
                    findings.warn(crate::rules::PYTORCH_OPERATOR_ENV, format!(
                        "launchgate: {where_} sets {name}, but the PyTorchJob operator appends its own {name}, which wins; remove it"
                    ));
                }
            }
        });
        if cfg.wait_for_master.enabled
            && has_master
            && replica_type.eq_ignore_ascii_case("Worker")
            && !job_name.is_empty()
        {
            let addr = format!("{job_name}-master-0");
            changed |=
                env::write_wait_for_master(&cfg.wait_for_master, &mut spec, &addr, port, None);
        }
    });
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(specs: Value) -> Value {
        json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
               "metadata": {"name": "pt"}, "spec": {"pytorchReplicaSpecs": specs}})
    }

    #[test]
    fn master_count_and_masterless_jobs() {
        assert!(
            problems(&job(
                json!({"Master": {"replicas": 1}, "Worker": {"replicas": 4}})
            ))
            .is_empty()
        );
        assert!(
            problems(&job(json!({"master": {}, "worker": {"replicas": 2}}))).is_empty(),
            "case-insensitive, default 1"
        );
        let p = problems(&job(json!({"Master": {"replicas": 2}})));
        assert!(p[0].contains("Master.replicas is 2"), "{p:?}");
        let p = problems(&job(json!({"Worker": {"replicas": 3}})));
        assert!(p[0].contains("no Master"), "{p:?}");
        assert!(
            problems(&job(json!({"Worker": {"replicas": 1}}))).is_empty(),
            "single node"
        );
        let mut elastic = job(json!({"Worker": {"replicas": 3}}));
        elastic["spec"]["elasticPolicy"] = json!({"minReplicas": 1});
        assert!(problems(&elastic).is_empty());
        assert!(problems(&json!({"spec": 1})).is_empty());
    }

    #[test]
    fn a_generate_name_job_in_a_wait_for_master_queue_is_told_why_it_gets_no_init_container() {
        use crate::mutate::pytorch::MUTATOR;
        use crate::mutate::test_support::mutate_with;
        let q = "pytorch: {waitForMaster: {enabled: true}}";
        let replica =
            json!({"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch"}]}}});
        let mut j = job(json!({"Master": replica.clone(), "Worker": replica}));
        let (named, f) = mutate_with(&MUTATOR, q, j.clone());
        assert!(
            named["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["initContainers"]
                .is_array()
        );
        assert!(f.warning_texts().is_empty(), "{:?}", f.warning_texts());
        let meta = j["metadata"].as_object_mut().unwrap();
        meta.remove("name");
        meta.insert("generateName".into(), json!("pt-"));
        let (_, f) = mutate_with(&MUTATOR, q, j);
        assert!(
            f.warning_texts()
                .iter()
                .any(|w| w.contains("no wait-for-master init container")),
            "{:?}",
            f.warning_texts()
        );
    }

    #[test]
    fn the_operators_auto_default_is_not_the_users_choice() {
        use crate::mutate::pytorch::MUTATOR;
        use crate::mutate::test_support::mutate_with;
        let q = "pytorch: {nprocPerNode: 4}";
        let mut j = job(json!({"Master": {"replicas": 1}}));
        j["spec"]["nprocPerNode"] = json!("auto");
        let (out, _) = mutate_with(&MUTATOR, q, j.clone());
        assert_eq!(out["spec"]["nprocPerNode"], "4");
        // Applied by the user: theirs.
        j["metadata"]["managedFields"] = json!([{"manager": "flux", "operation": "Apply",
            "fieldsV1": {"f:spec": {"f:nprocPerNode": {}}}}]);
        let (out, _) = mutate_with(&MUTATOR, q, j);
        assert_eq!(out["spec"]["nprocPerNode"], "auto");
    }

    #[test]
    fn master_port_comes_from_the_pytorch_container() {
        let j = job(json!({"Master": {"template": {"spec": {"containers": [
            {"name": "side", "ports": [{"name": "pytorchjob-port", "containerPort": 1}]},
            {"name": "pytorch", "ports": [{"name": "pytorchjob-port", "containerPort": 8080}]}
        ]}}}}));
        assert_eq!(master_port(&j), 8080);
        assert_eq!(
            master_port(&job(json!({"Master": {}}))),
            OPERATOR_DEFAULT_PORT
        );
    }
}
