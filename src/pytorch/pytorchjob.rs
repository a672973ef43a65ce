//! A Kubeflow PyTorchJob (`kubeflow.org/v1`): its replica specs as the training operator reads
//! them (types matched case-insensitively, replicas defaulted to 1) and the jobs the operator
//! cannot wire.

use super::{host_network_dns_problem, string_at};
use crate::json::Pointer as _;
use crate::workload::{self, WorkloadKind};
use serde_json::Value;

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
