//! The runtime a workload's pods come from (a TrainJob's TrainingRuntime), read from the
//! cluster view, and the rules about it: a size that cannot be verified, a runtime a tenant
//! may grow.

use crate::cluster::{ClusterView, RuntimeLookup};
use crate::json::Pointer as _;
use crate::policy::Queue;
use crate::rules::{self, Effect, Violation};
use crate::validate::{TrainingRuntimes, UnverifiableRuntime};
use crate::workload::WorkloadKind;
use crate::workload::runtime::{self as reader, RuntimeRef, TrainingRuntime};
use serde_json::Value;

/// What is known of a TrainJob's runtime.
pub(super) enum RuntimeState {
    /// Not a TrainJob.
    NotATrainJob,
    /// Read from the cluster.
    Found(TrainingRuntime),
    /// Cannot be read: why, and the runtime named (if any).
    Unknown {
        reference: Option<RuntimeRef>,
        why: String,
    },
}

/// The runtime a `kind` whose pods come from one names, from the cluster view.
pub(super) fn lookup(
    cluster: &dyn ClusterView,
    kind: WorkloadKind,
    trainjob: &Value,
    namespace: Option<&str>,
) -> RuntimeState {
    let Some(rt) = kind.spec().runtime else {
        return RuntimeState::NotATrainJob;
    };
    let Some(reference) = reader::runtime_ref(rt, trainjob) else {
        return RuntimeState::Unknown {
            reference: None,
            why: format!("names no runtime ({}.name)", rt.reference.join(".")),
        };
    };
    if reference.cluster_scoped.is_none() {
        return RuntimeState::Unknown {
            reference: Some(reference),
            why: format!(
                "is not a kind Trainer runs ({} or {})",
                rt.cluster, rt.namespaced
            ),
        };
    }
    let namespace = namespace
        .or_else(|| trainjob.at("/metadata/namespace").and_then(Value::as_str))
        .unwrap_or(crate::cluster::DEFAULT_NAMESPACE);
    match cluster.training_runtime(&reference.kind, namespace, &reference.name) {
        RuntimeLookup::Found(object) => RuntimeState::Found(TrainingRuntime { reference, object }),
        RuntimeLookup::NotFound => RuntimeState::Unknown {
            reference: Some(reference),
            why: "is not in the cluster".into(),
        },
        RuntimeLookup::Unavailable => RuntimeState::Unknown {
            reference: Some(reference),
            why: "launchgate cannot read (no cluster lookups of runtimes: offline without its manifest beside the TrainJob, `serve` without --cluster-lookups, or the runtime watch has no access)".into(),
        },
    }
}

/// Why a TrainJob's size cannot be verified, when its queue bounds sizes (totals, GPU-hours)
/// and the TrainJob leaves its size to a runtime that cannot be read.
pub(super) fn unverifiable_size(
    kind: WorkloadKind,
    queue: &Queue,
    object: &Value,
    runtime: &RuntimeState,
) -> Option<Violation> {
    let RuntimeState::Unknown { reference, why } = runtime else {
        return None;
    };
    let bounded = queue.size_bounds();
    let left = reader::left_to_runtime(kind.spec().runtime?, object);
    if bounded.is_empty() || left.is_empty() {
        return None;
    }
    let named = reference
        .as_ref()
        .map_or_else(|| "its runtime".to_string(), RuntimeRef::describe);
    let effect = match queue.limits.unverifiable_runtime() {
        UnverifiableRuntime::Deny => Effect::Deny,
        UnverifiableRuntime::Warn => Effect::Warn,
    };
    let message = format!(
        "queue {:?}: cannot verify the runtime's size: the TrainJob leaves {} to {named}, which {why}, so its size is unknown to the queue's {} (limits.unverifiableRuntime: {}); set them on the TrainJob",
        queue.name,
        left.join(" and "),
        bounded.join(" and "),
        queue.limits.unverifiable_runtime().as_str(),
    );
    Some(
        Violation::new(rules::LIMITS_UNVERIFIABLE_RUNTIME, message)
            .value(left.join(", "))
            .limit(bounded.join(", "))
            .effect(effect),
    )
}

/// A TrainJob that names a namespaced TrainingRuntime in a queue that bounds its runs' size or
/// cost (totals, a GPU-hour ceiling) and takes sizes only from ClusterTrainingRuntimes
/// (`limits.trainingRuntimes: clusterOnly`, the default): a tenant may own that runtime and
/// grow it after the TrainJob is admitted. Answered as the queue's limits are.
pub(super) fn untrusted(kind: WorkloadKind, queue: &Queue, object: &Value) -> Option<Violation> {
    let rt = kind.spec().runtime?;
    if queue.limits.training_runtimes() != TrainingRuntimes::ClusterOnly {
        return None;
    }
    let named = reader::runtime_ref(rt, object)?;
    let bounded = queue.size_bounds();
    if named.cluster_scoped != Some(false) || bounded.is_empty() {
        return None;
    }
    let effect = queue.limits.enforcement().effect();
    let message = format!(
        "queue {:?}: the TrainJob names {}, a namespaced runtime that anyone who can edit the namespace can grow after the TrainJob is admitted, and the queue's {} take runs' sizes only from {cluster}s (limits.trainingRuntimes: clusterOnly): name a {cluster}",
        queue.name,
        named.describe(),
        bounded.join(" and "),
        cluster = rt.cluster,
    );
    Some(
        Violation::new(rules::LIMITS_TRAINING_RUNTIMES, message)
            .at(format!("{}.kind", rt.reference.join(".")))
            .value(format!("{:?}", named.kind))
            .limit(TrainingRuntimes::ClusterOnly.as_str())
            .effect(effect),
    )
}

impl RuntimeState {
    /// The runtime, when it was read.
    pub(super) fn found(&self) -> Option<&TrainingRuntime> {
        match self {
            RuntimeState::Found(runtime) => Some(runtime),
            _ => None,
        }
    }
}
