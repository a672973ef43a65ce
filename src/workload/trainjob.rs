//! A TrainJob as Kubeflow Trainer v2 will run it.
//!
//! A TrainJob names a runtime (`spec.runtimeRef`: a ClusterTrainingRuntime unless `kind` says
//! TrainingRuntime) and may leave `spec.trainer.numNodes`, `resourcesPerNode` and the image to
//! it. Trainer builds the JobSet from the runtime's `spec.template`: the trainer step's
//! replicated job (label `trainer.kubeflow.org/trainjob-ancestor-step: trainer`, or the one named
//! `node`) runs `numNodes` pods (the TrainJob's, else the runtime's `mlPolicy.numNodes`, else 1),
//! and its `node` container takes `resourcesPerNode` and `image` when the TrainJob sets them.
//! [`effective_jobset`] is that JobSet; the limits count it as they count a JobSet, so a
//! TrainJob and the JobSet Trainer makes for it are the same size to the queue.

use super::{TRAINER_NODE, TemplateInfo, WorkloadKind, edit, name_in, trainer, trainer_num_nodes};
use crate::json::Pointer as _;
use crate::patch::{MapNode, Node};
use serde_json::{Map, Value, json};

pub use crate::cluster::{CLUSTER_RUNTIME, NAMESPACED_RUNTIME};
/// The label Trainer reads to find a runtime's trainer step.
const ANCESTOR_STEP: &str = "trainer.kubeflow.org/trainjob-ancestor-step";

/// The runtime a TrainJob names (`spec.runtimeRef`, with the CRD's defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeRef {
    /// `ClusterTrainingRuntime` (the default) or `TrainingRuntime`.
    pub kind: String,
    pub name: String,
}

impl RuntimeRef {
    /// `ClusterTrainingRuntime "torch-distributed"`.
    pub fn describe(&self) -> String {
        format!("{} {:?}", self.kind, self.name)
    }

    /// True for a kind Trainer knows (any other is a TrainJob Trainer cannot run).
    pub fn is_known_kind(&self) -> bool {
        self.kind == CLUSTER_RUNTIME || self.kind == NAMESPACED_RUNTIME
    }
}

/// A TrainJob's runtime as read from the cluster.
#[derive(Debug, Clone)]
pub struct TrainingRuntime {
    /// What the TrainJob names.
    pub reference: RuntimeRef,
    /// The runtime object.
    pub object: std::sync::Arc<Value>,
}

/// The TrainJob's `spec.runtimeRef`, when it names a runtime.
pub fn runtime_ref(trainjob: &Value) -> Option<RuntimeRef> {
    let r = trainjob.at("/spec/runtimeRef")?;
    let name = r.get("name")?.as_str().filter(|n| !n.is_empty())?;
    let kind = r
        .get("kind")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())
        .unwrap_or(CLUSTER_RUNTIME);
    Some(RuntimeRef {
        kind: kind.to_string(),
        name: name.to_string(),
    })
}

/// What of its size a TrainJob leaves to its runtime (empty: it sets both).
pub fn left_to_runtime(trainjob: &Value) -> Vec<&'static str> {
    let mut out = Vec::new();
    if trainer_num_nodes(trainjob).is_none() {
        out.push("spec.trainer.numNodes");
    }
    if trainer(trainjob)
        .and_then(|t| t.get("resourcesPerNode"))
        .is_none_or(Value::is_null)
    {
        out.push("spec.trainer.resourcesPerNode");
    }
    out
}

/// True for the runtime replicated job that runs the trainer.
fn is_trainer_step(rjob: &Value) -> bool {
    let step = rjob
        .at("/template/metadata/labels")
        .and_then(|l| l.get(ANCESTOR_STEP))
        .and_then(Value::as_str);
    match step {
        Some(step) => step == "trainer",
        None => rjob.get("name").and_then(Value::as_str) == Some(TRAINER_NODE),
    }
}

/// The number of trainer nodes: the TrainJob's, else the runtime's `mlPolicy.numNodes`, else 1.
pub fn num_nodes(trainjob: &Value, runtime: &Value) -> i64 {
    trainer_num_nodes(trainjob)
        .or_else(|| {
            runtime
                .at("/spec/mlPolicy/numNodes")
                .and_then(Value::as_i64)
        })
        .unwrap_or(1)
        .max(0)
}

/// The JobSet Trainer makes from `runtime` for `trainjob` (only what sizes it: replicated jobs,
/// their parallelism and completions, pod templates with the trainer's resources and image).
pub fn effective_jobset(trainjob: &Value, runtime: &Value) -> Value {
    let mut spec = runtime
        .at("/spec/template/spec")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let nodes = num_nodes(trainjob, runtime);
    let trainer = trainer(trainjob);
    let resources = trainer
        .and_then(|t| t.get("resourcesPerNode"))
        .filter(|r| r.is_object());
    let image = trainer
        .and_then(|t| t.get("image"))
        .filter(|i| i.is_string());
    if let Some(jobs) = spec.get_mut("replicatedJobs").and_then(Value::as_array_mut) {
        for rjob in jobs.iter_mut().filter(|j| is_trainer_step(j)) {
            let Some(job_spec) = rjob.at_mut("/template/spec").and_then(Value::as_object_mut)
            else {
                continue;
            };
            job_spec.insert("parallelism".into(), json!(nodes));
            job_spec.insert("completions".into(), json!(nodes));
            let node = job_spec
                .get_mut("template")
                .and_then(|t| t.get_mut("spec"))
                .and_then(Value::as_object_mut)
                .and_then(node_container_mut);
            if let Some(node) = node {
                set_trainer_fields(node, resources, image);
            }
        }
    }
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": trainjob.at("/metadata/name").cloned().unwrap_or(Value::Null)},
        "spec": spec})
}

/// The pod spec of the runtime's trainer step (the pod Trainer makes for each node, before the
/// TrainJob's runtime patches).
pub fn trainer_pod_spec(runtime: &Value) -> Option<Map<String, Value>> {
    runtime
        .at("/spec/template/spec/replicatedJobs")?
        .as_array()?
        .iter()
        .find(|j| is_trainer_step(j))?
        .at("/template/spec/template/spec")?
        .as_object()
        .cloned()
}

/// Where a TrainJob's runtime patches are (`spec.runtimePatches`): each entry's pod templates
/// are merged by Trainer into the runtime's pods.
pub const PATCHES_PATH: &str = "spec.runtimePatches";

/// The pod templates of a TrainJob's runtime patches
/// (`spec.runtimePatches[i].trainingRuntimeSpec.template.spec.replicatedJobs[j].template.spec.template`),
/// every entry's, the tenant's and launchgate's alike: each is a pod spec Trainer merges into
/// the pods of the replicated job it names. They add no pods (`replicas` 0), and what they leave
/// out is the runtime's.
/// Each is bound as a pod template of the kind `kind`'s runtime is rendered into
/// ([`WorkloadKind::runs_as`]); a kind rendered from no runtime has none.
pub fn patch_templates(
    kind: WorkloadKind,
    trainjob: &Value,
) -> Vec<(TemplateInfo, &Map<String, Value>)> {
    let mut out = Vec::new();
    let Some(position) = kind.runs_as().and_then(|k| k.spec().positions.first()) else {
        return out;
    };
    let patches = trainjob
        .at("/spec/runtimePatches")
        .and_then(Value::as_array);
    for (i, patch) in patches.into_iter().flatten().enumerate() {
        let jobs = patch
            .at("/trainingRuntimeSpec/template/spec/replicatedJobs")
            .and_then(Value::as_array);
        for (j, rjob) in jobs.into_iter().flatten().enumerate() {
            let Some(template) = rjob
                .at("/template/spec/template")
                .and_then(Value::as_object)
            else {
                continue;
            };
            out.push((
                TemplateInfo::at_path(
                    position,
                    j,
                    Some(
                        rjob.get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                    ),
                    format!(
                        "{PATCHES_PATH}[{i}].trainingRuntimeSpec.template.spec.replicatedJobs[{j}].template.spec.template"
                    ),
                ),
                template,
            ));
        }
    }
    out
}

/// The trainer's pod spec as the runtime patches of every manager but `except` write it (the
/// `node` replicated job's, in list order): what the tenant's own patches put into the
/// trainer's pods.
pub fn tenant_patch_pod_spec(trainjob: &Value, except: &str) -> Map<String, Value> {
    let mut out = Map::new();
    let patches = trainjob
        .at("/spec/runtimePatches")
        .and_then(Value::as_array);
    for patch in patches.into_iter().flatten() {
        if patch.get("manager").and_then(Value::as_str) == Some(except) {
            continue;
        }
        let jobs = patch
            .at("/trainingRuntimeSpec/template/spec/replicatedJobs")
            .and_then(Value::as_array);
        for rjob in jobs.into_iter().flatten() {
            if rjob.get("name").and_then(Value::as_str) != Some(TRAINER_NODE) {
                continue;
            }
            if let Some(spec) = rjob
                .at("/template/spec/template/spec")
                .and_then(Value::as_object)
            {
                merge_pod_spec(&mut out, spec);
            }
        }
    }
    out
}

/// `patch` over `base` for the fields hardening reads: pod `securityContext`, and each
/// container's `securityContext` by name, field by field; other keys are replaced.
pub fn merge_pod_spec(base: &mut Map<String, Value>, patch: &Map<String, Value>) {
    let mut base = Node::scratch(base);
    for (key, value) in patch {
        match key.as_str() {
            "securityContext" => merge_objects(&mut base, key, value),
            "containers" | "initContainers" => {
                let mut items = base.array_or_new(key);
                for c in value.as_array().into_iter().flatten() {
                    let Some(name) = c.get("name").and_then(Value::as_str) else {
                        continue;
                    };
                    let existing = items
                        .iter_mut()
                        .filter_map(Value::as_object_mut)
                        .find(|e| name_in(e) == Some(name));
                    match (existing, c.get("securityContext")) {
                        (Some(e), Some(sc)) => {
                            merge_objects(&mut Node::scratch(e), "securityContext", sc)
                        }
                        (Some(_), None) => {}
                        (None, _) => items.push(c.clone()),
                    }
                }
            }
            _ => base.set(key, value.clone()),
        }
    }
}

/// Deep-merges the object `from` into `into[key]` (created when `from` is an object).
fn merge_objects(into: &mut MapNode<'_>, key: &str, from: &Value) {
    if from.is_object() {
        edit::deep_merge(&mut into.object_or_new(key), from);
    }
}

/// The `node` container of a pod spec (the trainer's, by name).
pub fn node_container(spec: &Map<String, Value>) -> Option<&Map<String, Value>> {
    spec.get("containers")?
        .as_array()?
        .iter()
        .filter_map(Value::as_object)
        .find(|c| name_in(c) == Some(TRAINER_NODE))
}

/// [`node_container`], mutable.
pub fn node_container_mut(spec: &mut Map<String, Value>) -> Option<&mut Map<String, Value>> {
    spec.get_mut("containers")?
        .as_array_mut()?
        .iter_mut()
        .filter_map(Value::as_object_mut)
        .find(|c| name_in(c) == Some(TRAINER_NODE))
}

/// True for a place inside a TrainJob's runtime patches.
pub fn is_patch_place(place: &str) -> bool {
    place
        .strip_prefix(PATCHES_PATH)
        .is_some_and(|rest| rest.starts_with('['))
}

fn set_trainer_fields(
    node: &mut Map<String, Value>,
    resources: Option<&Value>,
    image: Option<&Value>,
) {
    if let Some(resources) = resources {
        node.insert("resources".into(), resources.clone());
    }
    if let Some(image) = image {
        node.insert("image".into(), image.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime(nodes: i64, gpus: i64) -> Value {
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "torch-64"},
            "spec": {"mlPolicy": {"numNodes": nodes, "torch": {"numProcPerNode": "auto"}},
                "template": {"spec": {"replicatedJobs": [
                    {"name": "dataset-initializer", "template": {"metadata": {"labels": {ANCESTOR_STEP: "dataset-initializer"}},
                        "spec": {"template": {"spec": {"containers": [{"name": "dataset-initializer", "image": "init"}]}}}}},
                    {"name": "node", "template": {"metadata": {"labels": {ANCESTOR_STEP: "trainer"}},
                        "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch",
                            "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}}]}}}})
    }

    #[test]
    fn the_runtime_sizes_what_the_trainjob_leaves_out() {
        let tj = json!({"metadata": {"name": "run"}, "spec": {"runtimeRef": {"name": "torch-64"}}});
        assert_eq!(
            runtime_ref(&tj),
            Some(RuntimeRef {
                kind: CLUSTER_RUNTIME.into(),
                name: "torch-64".into()
            })
        );
        assert_eq!(
            left_to_runtime(&tj),
            ["spec.trainer.numNodes", "spec.trainer.resourcesPerNode"]
        );
        let js = effective_jobset(&tj, &runtime(64, 8));
        let node = &js["spec"]["replicatedJobs"][1]["template"]["spec"];
        assert_eq!(node["parallelism"], 64);
        assert_eq!(node["completions"], 64);
        assert_eq!(
            node["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
            8
        );
        // The initializer is left as the runtime has it.
        assert!(js["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"].is_null());
        // What the TrainJob sets wins.
        let own = json!({"spec": {"runtimeRef": {"name": "torch-64", "kind": "TrainingRuntime"},
            "trainer": {"numNodes": 2, "image": "acme/x:1",
                        "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}}});
        assert!(left_to_runtime(&own).is_empty());
        assert_eq!(runtime_ref(&own).unwrap().kind, NAMESPACED_RUNTIME);
        let js = effective_jobset(&own, &runtime(64, 8));
        let node = &js["spec"]["replicatedJobs"][1]["template"]["spec"];
        assert_eq!(node["parallelism"], 2);
        let c = &node["template"]["spec"]["containers"][0];
        assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 1);
        assert_eq!(c["image"], "acme/x:1");
        // Garbage never panics.
        for garbage in [
            json!(null),
            json!({"spec": 1}),
            json!({"spec": {"template": []}}),
        ] {
            let _ = effective_jobset(&own, &garbage);
            let _ = effective_jobset(&garbage, &runtime(1, 1));
        }
        assert_eq!(runtime_ref(&json!({"spec": {"runtimeRef": {}}})), None);
    }
}
