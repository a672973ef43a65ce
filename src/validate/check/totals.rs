//! What the whole run can use at once (`limits.totals`): each resource summed over the pod
//! templates' pods at once, GPUs however they are asked for (the accelerator map).

use super::{Evaluation, rendered, template_label};
use crate::json;
use crate::quantity::Quantity;
use crate::rules::{self, Violation};
use crate::validate::binding::TemplateShape;
use crate::validate::schema::Schema;
use crate::workload::consumption::{Accounting, PodGpus};
use crate::workload::runtime::{self, TrainingRuntime};
use crate::workload::{self, ContainerRole, TemplateInfo, WorkloadKind};
use serde_json::{Map, Value};

/// Why a workload's GPUs cannot be counted.
#[derive(Debug, Clone, PartialEq)]
pub enum NotCounted {
    /// The sum does not fit.
    TooMany,
    /// A pod asks for devices the accelerator map cannot count, or through a claim that cannot
    /// be read: why.
    Devices(String),
}

/// One pod template's part of a GPU sum: `spec.template: 4 × 2`, with how the pod asks for
/// them when it is more than one whole-GPU resource name on its containers.
pub(super) fn pod_part(label: &str, at_most: i64, pod: &PodGpus) -> String {
    match pod.names.as_slice() {
        _ if pod.other_ways => format!(
            "{label}: {at_most} × {} ({})",
            pod.per_pod,
            pod.parts.join(", ")
        ),
        [name] => format!("{name} {label}: {at_most} × {}", pod.per_pod),
        _ => format!("{label}: {at_most} × {}", pod.per_pod),
    }
}

/// The GPUs a workload can use at once however asked for (the accelerator map, claims read
/// through `accounting`), by the totals arithmetic, with the parts of the sum; why not when
/// they cannot be counted.
///
/// A TrainJob whose `runtime` is known counts as the JobSet Trainer makes from it.
pub fn gpus_at_once(
    kind: WorkloadKind,
    object: &Value,
    runtime: Option<&TrainingRuntime>,
    accounting: &Accounting<'_>,
) -> Result<(Quantity, Vec<String>), NotCounted> {
    let shape = TemplateShape::default();
    let rendered = rendered(kind, object, runtime);
    let templates = workload::templates(kind, object);
    let eval = Evaluation::new(
        "",
        kind,
        object,
        templates,
        rendered.as_ref(),
        &shape,
        &[],
        accounting,
    );
    eval.gpus_at_once()
}

/// Effective per-pod amount of `resource`, by Kubernetes' pod resource formula with native
/// sidecars (`initContainers` with `restartPolicy: Always`):
/// max(Σ app containers + Σ sidecars, max over init containers of (the init container +
/// Σ sidecars started before it)). Each container counts its limit, else its request.
/// `None` when the sum does not fit.
pub(super) fn per_pod(template: &Map<String, Value>, resource: &str) -> Option<Quantity> {
    let amount = |container: &Map<String, Value>| -> Quantity {
        container
            .get("resources")
            .map_or(Quantity::ZERO, |r| amount(r, resource))
    };
    let mut app = Quantity::ZERO;
    let mut sidecars = Quantity::ZERO;
    let mut init_peak = Quantity::ZERO;
    let spec = workload::pod_spec(template)?;
    for (slot, container) in workload::containers(spec, &[]) {
        let own = amount(container);
        match slot.role {
            ContainerRole::App | ContainerRole::ConfiguredSidecar => app = app.checked_add(&own)?,
            ContainerRole::Sidecar => {
                sidecars = sidecars.checked_add(&own)?;
                init_peak = init_peak.max(sidecars);
            }
            ContainerRole::Init => init_peak = init_peak.max(own.checked_add(&sidecars)?),
        }
    }
    app = app.checked_add(&sidecars)?;
    // Pod-level resources (`spec.resources`) bound the containers together: the pod has them.
    let pod_level =
        json::member(spec, "resources").map_or(Quantity::ZERO, |r| self::amount(r, resource));
    Some(app.max(init_peak).max(pod_level))
}

/// What a `resources` block counts of `resource`: its limit, else its request.
pub(super) fn amount(resources: &Value, resource: &str) -> Quantity {
    resources
        .get("limits")
        .and_then(|l| l.get(resource))
        .or_else(|| resources.get("requests").and_then(|r| r.get(resource)))
        .and_then(Quantity::from_json)
        .and_then(Result::ok)
        .unwrap_or(Quantity::ZERO)
}

/// Σ over the pod templates of (pods at once × per pod), with the parts of the sum, each
/// named by `label`.
pub(super) fn templates_total(
    kind: WorkloadKind,
    templates: &[(TemplateInfo, &Map<String, Value>)],
    resource: &str,
    label: impl Fn(&TemplateInfo) -> String,
) -> (Option<Quantity>, Vec<String>) {
    let mut total = Some(Quantity::ZERO);
    let mut parts = Vec::new();
    for (info, template) in templates {
        if runtime::is_patch_place(kind, &info.path_text) {
            // A runtime patch adds no pods (and its schema has no resources).
            continue;
        }
        let per_pod = per_pod(template, resource);
        if per_pod == Some(Quantity::ZERO) {
            continue;
        }
        // How many of its pods can run at once: the position's upper bound (a batch/v1 Job
        // runs min(parallelism, completions), an elastic PyTorchJob's Worker replicas scale up
        // to `elasticPolicy.maxReplicas`).
        let replicas = info.at_most;
        let shown = per_pod.map_or("too much".into(), |q| q.to_string());
        parts.push(format!("{}: {replicas} × {shown}", label(info)));
        total = total.zip(per_pod).and_then(|(total, per_pod)| {
            per_pod
                .checked_mul_int(replicas)
                .and_then(|p| total.checked_add(&p))
        });
    }
    (total, parts)
}

impl<'a> Evaluation<'a> {
    /// The GPUs the workload can use at once, however asked for (the accelerator map): Σ over
    /// its pod templates of pods at once × GPUs per pod, each shared ResourceClaim once, a
    /// TrainJob's `resourcesPerNode` × its nodes when its runtime is unknown; with the parts of
    /// the sum. `Err`: why they cannot be counted.
    pub(super) fn gpus_at_once(&self) -> Result<(Quantity, Vec<String>), NotCounted> {
        let mut total = Quantity::ZERO;
        let mut parts = Vec::new();
        let mut shared: Vec<(String, Quantity, String)> = Vec::new();
        let mut uncounted = Vec::new();
        let too_many = || NotCounted::TooMany;
        for (label, at_most, template) in self.pod_templates() {
            let pod = self.accounting.pod(template);
            uncounted.extend(pod.uncounted.iter().map(|why| format!("{label}: {why}")));
            for s in &pod.shared {
                if !shared.iter().any(|(name, _, _)| *name == s.0) {
                    shared.push(s.clone());
                }
            }
            if pod.per_pod == Quantity::ZERO {
                continue;
            }
            parts.push(pod_part(&label, at_most, &pod));
            let all = pod.per_pod.checked_mul_int(at_most).ok_or_else(too_many)?;
            total = total.checked_add(&all).ok_or_else(too_many)?;
        }
        for (_, gpus, text) in shared {
            parts.push(format!("{text} (shared, once)"));
            total = total.checked_add(&gpus).ok_or_else(too_many)?;
        }
        // A TrainJob whose runtime could not be read: `numNodes` pods, each with
        // `resourcesPerNode` (numNodes unset: counted as 1, said so).
        if let Some((rt, resources)) = self.trainer_resources().filter(|_| self.runtime.is_none()) {
            let block = Value::Object(resources.clone());
            let per_node = self.accounting.named_gpus(Some(&block));
            if per_node != Quantity::ZERO {
                let nodes = runtime::own_nodes(rt, self.object);
                let shown = match nodes {
                    Some(n) => n.to_string(),
                    None => format!("1 ({} unset)", rt.nodes),
                };
                let names = self.accounting.gpu_names(Some(&block));
                let name = match names.as_slice() {
                    [name] => format!("{name} "),
                    _ => String::new(),
                };
                parts.push(format!(
                    "{name}{}: {shown} × {per_node}",
                    rt.settings.join(".")
                ));
                let all = per_node
                    .checked_mul_int(nodes.unwrap_or(1).max(0))
                    .ok_or_else(too_many)?;
                total = total.checked_add(&all).ok_or_else(too_many)?;
            }
        }
        if !uncounted.is_empty() {
            return Err(NotCounted::Devices(uncounted.join("; ")));
        }
        Ok((total, parts))
    }

    /// Why the pods of this workload ask for devices that cannot be counted (each once).
    pub(super) fn uncounted_devices(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (label, _, template) in self.pod_templates() {
            // Only claims and DeviceClass names can be uncountable (an overflow is the totals').
            let spec = workload::pod_spec(template);
            if !spec.is_some_and(|s| self.accounting.may_be_uncounted(s)) {
                continue;
            }
            for why in self.accounting.pod(template).uncounted {
                let line = format!("{label}: {why}");
                if !out.contains(&line) {
                    out.push(line);
                }
            }
        }
        out
    }

    /// `gpus`: the resource counts as a whole GPU (`nvidia.com/gpu`), so its total counts
    /// every GPU, however asked for.
    pub(super) fn check_total(&mut self, resource: &str, schema: &Schema, gpus: bool) {
        let (total, parts) = if gpus {
            match self.gpus_at_once() {
                // Its parts name the resource only when another counts too.
                Ok((total, parts)) => (
                    Some(total),
                    parts
                        .into_iter()
                        .map(|p| {
                            p.strip_prefix(&format!("{resource} "))
                                .map_or(p.clone(), str::to_string)
                        })
                        .collect(),
                ),
                Err(NotCounted::TooMany) => (None, Vec::new()),
                // Reported once for the queue (`accelerators.uncounted`).
                Err(NotCounted::Devices(_)) => return,
            }
        } else {
            self.total(resource)
        };
        let parts = rules::listed(&parts);
        let Some(total) = total else {
            self.report(
                Violation::new(
                    rules::LIMITS_TOTALS,
                    format!(
                        "total {resource} over all pods is too large to count (totals) ({parts})"
                    ),
                )
                .key(resource),
            );
            return;
        };
        if let Some(problem) = schema.problem(&Value::String(total.to_string())) {
            let detail = if parts.is_empty() {
                String::new()
            } else {
                format!(" ({parts})")
            };
            self.report(
                Violation::new(
                    rules::LIMITS_TOTALS,
                    format!("total {resource} over all pods={total} {problem} (totals){detail}"),
                )
                .key(resource)
                .value(total.to_string())
                .limit(problem),
            );
        }
    }

    /// How much of `resource` the workload can use at once (`None`: too much to count), and the
    /// parts of the sum (`spec.template: 4 × 2`).
    pub(super) fn total(&self, resource: &str) -> (Option<Quantity>, Vec<String>) {
        // A TrainJob whose runtime is known: the JobSet Trainer makes from it.
        if let Some(view) = &self.runtime {
            return templates_total(view.kind, &view.templates, resource, |info| {
                view.label(info)
            });
        }
        let (mut total, mut parts) =
            templates_total(self.kind, &self.templates, resource, template_label);
        // A TrainJob whose runtime could not be read: `numNodes` pods, each with
        // `resourcesPerNode` (numNodes unset: counted as 1, said so, and the queue's
        // `unverifiableRuntime` decides whether that is enough).
        if let Some((rt, resources)) = self.trainer_resources() {
            let per_node = amount(&Value::Object(resources.clone()), resource);
            if per_node != Quantity::ZERO {
                let nodes = runtime::own_nodes(rt, self.object);
                let shown = match nodes {
                    Some(n) => n.to_string(),
                    None => format!("1 ({} unset)", rt.nodes),
                };
                parts.push(format!("{}: {shown} × {per_node}", rt.settings.join(".")));
                total = total.and_then(|total| {
                    per_node
                        .checked_mul_int(nodes.unwrap_or(1).max(0))
                        .and_then(|p| total.checked_add(&p))
                });
            }
        }
        (total, parts)
    }
}
