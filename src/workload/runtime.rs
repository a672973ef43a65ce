//! A workload whose pods come from a runtime it names, as its controller will run it
//! ([`crate::kinds::RuntimeSpec`]: a Kubeflow Trainer v2 TrainJob and its
//! ClusterTrainingRuntime or TrainingRuntime).
//!
//! The object names its runtime and may leave its node count and resources to it. The
//! controller renders the runtime's object (a TrainJob's JobSet): the holder of the nodes runs
//! the node count of pods (the object's, else the runtime's, else the default), and its node
//! container takes the object's resources and image when the object sets them. [`rendered`]
//! is that object; the limits count it as they count its kind, so a TrainJob and the JobSet
//! Trainer makes for it are the same size to the queue.

use super::{TemplateInfo, WorkloadKind, edit, name_in, name_of};
use crate::kinds::{Position, RuntimeSpec, field, field_mut};
use crate::patch::{MapNode, Node};
use serde_json::{Map, Value, json};

/// The runtime a workload names (with the defaults of its kind's [`RuntimeSpec::reference`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeRef {
    /// `ClusterTrainingRuntime` (the default) or `TrainingRuntime`.
    pub kind: String,
    pub name: String,
    /// Whether the runtime kind is cluster-scoped (`None`: it is no runtime kind, one the
    /// controller cannot run).
    pub cluster_scoped: Option<bool>,
}

impl RuntimeRef {
    /// `ClusterTrainingRuntime "torch-distributed"`.
    pub fn describe(&self) -> String {
        format!("{} {:?}", self.kind, self.name)
    }
}

/// A workload's runtime as read from the cluster.
#[derive(Debug, Clone)]
pub struct TrainingRuntime {
    /// What the workload names.
    pub reference: RuntimeRef,
    /// The runtime object.
    pub object: std::sync::Arc<Value>,
}

/// The runtime the object names, when it names one.
pub fn runtime_ref(rt: &RuntimeSpec, object: &Value) -> Option<RuntimeRef> {
    let r = field(object, rt.reference)?;
    let text = |k: &str| r.get(k).and_then(Value::as_str).filter(|v| !v.is_empty());
    let kind = text("kind").unwrap_or(rt.cluster);
    Some(RuntimeRef {
        name: text("name")?.to_string(),
        kind: kind.to_string(),
        cluster_scoped: (kind == rt.cluster || kind == rt.namespaced).then_some(kind == rt.cluster),
    })
}

/// The object's settings for the node container, when its kind reads a runtime.
pub fn settings(kind: WorkloadKind, object: &Value) -> Option<&Map<String, Value>> {
    field(object, kind.spec().runtime?.settings)?.as_object()
}

/// The object's own node count, when set.
pub fn own_nodes(rt: &RuntimeSpec, object: &Value) -> Option<i64> {
    field(object, rt.settings)?.get(rt.nodes)?.as_i64()
}

/// What of its size the object leaves to its runtime (empty: it sets both).
pub fn left_to_runtime(rt: &RuntimeSpec, object: &Value) -> Vec<String> {
    let resources = field(object, rt.settings).and_then(|s| s.get(rt.resources));
    let nodes = own_nodes(rt, object).is_none().then_some(rt.nodes);
    let resources = resources.is_none_or(Value::is_null).then_some(rt.resources);
    let at = |key| format!("{}.{key}", rt.settings.join("."));
    nodes.into_iter().chain(resources).map(at).collect()
}

/// The runtime of `kind` and the position of the kind it renders into.
pub fn parts(kind: WorkloadKind) -> Option<(&'static RuntimeSpec, &'static Position)> {
    Some((
        kind.spec().runtime?,
        kind.runs_as()?.spec().positions.first()?,
    ))
}

/// True for the holder that runs the nodes.
fn is_node_step(rt: &RuntimeSpec, holder: &Value) -> bool {
    match field(holder, rt.step).and_then(Value::as_str) {
        Some(step) => step == rt.step_is,
        None => name_of(holder) == Some(rt.node),
    }
}

/// The object the controller renders from `runtime` for `object` (only what sizes it: the
/// holders, their counts, pod templates with the object's resources and image); null for a
/// kind that reads no runtime.
pub fn rendered(kind: WorkloadKind, object: &Value, runtime: &Value) -> Value {
    let (Some((rt, position)), Some(into)) = (parts(kind), kind.runs_as()) else {
        return Value::Null;
    };
    let spec = field(runtime, rt.renders)
        .and_then(|t| t.get("spec"))
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let mut out = json!({"apiVersion": into.api_version(), "kind": into.api_kind(),
        "metadata": {"name": field(object, &["metadata", "name"]).cloned().unwrap_or(Value::Null)},
        "spec": spec});
    // The object's node count, else the runtime's, else the default.
    let nodes = own_nodes(rt, object)
        .or_else(|| field(runtime, rt.runtime_nodes).and_then(Value::as_i64))
        .unwrap_or(rt.default_nodes)
        .max(0);
    let own = |key: &str| field(object, rt.settings).and_then(|s| s.get(key));
    let resources = own(rt.resources).filter(|r| r.is_object());
    let image = own(rt.image).filter(|i| i.is_string());
    let holders = field_mut(&mut out, position.holders.path()).and_then(Value::as_array_mut);
    for holder in holders.into_iter().flatten() {
        if !is_node_step(rt, holder) {
            continue;
        }
        if let Some(job) = field_mut(holder, rt.job).and_then(Value::as_object_mut) {
            for key in rt.nodes_at {
                job.insert(key.to_string(), json!(nodes));
            }
        }
        let mut node = field_mut(holder, position.template)
            .and_then(|t| t.get_mut("spec"))
            .and_then(Value::as_object_mut)
            .and_then(|s| node_container_mut(rt, s));
        for (key, value) in [("resources", resources), ("image", image)] {
            if let (Some(node), Some(value)) = (node.as_mut(), value) {
                node.insert(key.into(), value.clone());
            }
        }
    }
    out
}

/// The pod spec of the runtime's node holder (the pod the controller makes for each node,
/// before the object's patches).
pub fn node_pod_spec(kind: WorkloadKind, runtime: &Value) -> Option<Map<String, Value>> {
    let (rt, position) = parts(kind)?;
    field(field(runtime, rt.renders)?, position.holders.path())?
        .as_array()?
        .iter()
        .find(|j| is_node_step(rt, j))
        .and_then(|j| {
            field(j, position.template)?
                .get("spec")?
                .as_object()
                .cloned()
        })
}

/// The holders of one patch entry, and their path from the entry.
pub fn patch_holders<'a>(
    rt: &RuntimeSpec,
    position: &Position,
    entry: &'a Value,
) -> (Option<&'a Vec<Value>>, String) {
    let at = [rt.patch_renders, position.holders.path()].concat();
    (field(entry, &at).and_then(Value::as_array), at.join("."))
}

/// The entries of the object's patches to its runtime.
pub fn patch_entries<'a>(rt: &RuntimeSpec, object: &'a Value) -> impl Iterator<Item = &'a Value> {
    field(object, rt.patches)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The pod templates of the object's patches to its runtime (a TrainJob's
/// `spec.runtimePatches[i].trainingRuntimeSpec.template.spec.replicatedJobs[j].template.spec.template`),
/// every entry's, the tenant's and launchgate's alike: each is a pod spec the controller
/// merges into the pods of the holder it names. They add no pods (`replicas` 0), and what they
/// leave out is the runtime's. Each is bound as a pod template of the kind the runtime is
/// rendered into ([`WorkloadKind::runs_as`]); a kind rendered from no runtime has none.
pub fn patch_templates(
    kind: WorkloadKind,
    object: &Value,
) -> Vec<(TemplateInfo, &Map<String, Value>)> {
    let mut out = Vec::new();
    let Some((rt, position)) = parts(kind) else {
        return out;
    };
    for (i, entry) in patch_entries(rt, object).enumerate() {
        let (holders, at) = patch_holders(rt, position, entry);
        for (j, holder) in holders.into_iter().flatten().enumerate() {
            let Some(template) = field(holder, position.template).and_then(Value::as_object) else {
                continue;
            };
            let path = format!(
                "{}[{i}].{at}[{j}].{}",
                rt.patches.join("."),
                position.template.join(".")
            );
            let name = name_of(holder).unwrap_or_default().to_string();
            out.push((
                TemplateInfo::at_path(position, j, Some(name), path),
                template,
            ));
        }
    }
    out
}

/// The node pod spec as the patches of every manager but `except` write it (the node holder's,
/// in list order): what the tenant's own patches put into the node pods.
pub fn tenant_patch_pod_spec(
    kind: WorkloadKind,
    object: &Value,
    except: &str,
) -> Map<String, Value> {
    let mut out = Map::new();
    let Some((rt, position)) = parts(kind) else {
        return out;
    };
    for entry in patch_entries(rt, object) {
        if entry.get("manager").and_then(Value::as_str) == Some(except) {
            continue;
        }
        for holder in patch_holders(rt, position, entry).0.into_iter().flatten() {
            let spec = field(holder, position.template).and_then(|t| t.get("spec"));
            if name_of(holder) == Some(rt.node)
                && let Some(spec) = spec.and_then(Value::as_object)
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

/// The node container of a pod spec (by name).
pub fn node_container_mut<'a>(
    rt: &RuntimeSpec,
    spec: &'a mut Map<String, Value>,
) -> Option<&'a mut Map<String, Value>> {
    spec.get_mut("containers")?
        .as_array_mut()?
        .iter_mut()
        .filter_map(Value::as_object_mut)
        .find(|c| name_in(c) == Some(rt.node))
}

/// True for a place inside the object's patches to its runtime.
pub fn is_patch_place(kind: WorkloadKind, place: &str) -> bool {
    kind.spec().runtime.is_some_and(|rt| {
        place
            .strip_prefix(&rt.patches.join("."))
            .is_some_and(|rest| rest.starts_with('['))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TJ: WorkloadKind = WorkloadKind::TrainJob;

    fn rt() -> &'static RuntimeSpec {
        TJ.spec().runtime.unwrap()
    }

    fn runtime(nodes: i64, gpus: i64) -> Value {
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "torch-64"},
            "spec": {"mlPolicy": {"numNodes": nodes, "torch": {"numProcPerNode": "auto"}},
                "template": {"spec": {"replicatedJobs": [
                    {"name": "dataset-initializer", "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
                        "spec": {"template": {"spec": {"containers": [{"name": "dataset-initializer", "image": "init"}]}}}}},
                    {"name": "node", "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                        "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch",
                            "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}}]}}}})
    }

    #[test]
    fn the_runtime_sizes_what_the_trainjob_leaves_out() {
        let tj = json!({"metadata": {"name": "run"}, "spec": {"runtimeRef": {"name": "torch-64"}}});
        let named = runtime_ref(rt(), &tj).unwrap();
        assert_eq!(named.describe(), r#"ClusterTrainingRuntime "torch-64""#);
        assert_eq!(named.cluster_scoped, Some(true));
        assert_eq!(
            left_to_runtime(rt(), &tj),
            ["spec.trainer.numNodes", "spec.trainer.resourcesPerNode"]
        );
        let js = rendered(TJ, &tj, &runtime(64, 8));
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
        assert!(left_to_runtime(rt(), &own).is_empty());
        assert_eq!(runtime_ref(rt(), &own).unwrap().cluster_scoped, Some(false));
        let js = rendered(TJ, &own, &runtime(64, 8));
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
            let _ = rendered(TJ, &own, &garbage);
            let _ = rendered(TJ, &garbage, &runtime(1, 1));
        }
        assert_eq!(
            runtime_ref(rt(), &json!({"spec": {"runtimeRef": {}}})),
            None
        );
        assert_eq!(js["kind"], "JobSet");
    }
}
