//! A TrainJob's hardening: a TrainJob has no pod template (its pods come from the referenced
//! TrainingRuntime), but Kubeflow Trainer merges `spec.runtimePatches[]` entries, keyed by
//! `manager`, into the runtime's JobSet template (a strategic merge, in list order). The
//! mutators that apply to every pod template (container `securityContext`, the shared cache,
//! the queue label that makes the pods known as the queue's) write into launchgate's own
//! entry, [`MANAGER`], on the runtime's trainer replicated job and container
//! ([`workload::TRAINER_NODE`], Trainer's convention), exactly as they would into a pod
//! template that had only that container.
//!
//! What Trainer does not take in a patch is moved where it does: env for the `node` container
//! (Trainer rejects it in patches) goes into `spec.trainer.env`, where you did not set it. The
//! entry is written only when something is added, and a second pass finds it complete, so the
//! patch is idempotent and reinvocation-safe. Only fields of the entry's real schema are
//! written (the API server would prune any other, silently).

use crate::json::Pointer as _;
use crate::patch::Node;
use crate::workload::{self, edit, trainjob};
use serde_json::{Map, Value, json};

/// The `manager` of launchgate's runtime patch.
pub const MANAGER: &str = "launchgate.io/admission";

/// Path of the patch's pod spec, for messages.
pub fn spec_path() -> String {
    format!(
        "spec.runtimePatches[manager={MANAGER}].trainingRuntimeSpec.template.spec.replicatedJobs[name={node}].template.spec.template.spec",
        node = workload::TRAINER_NODE
    )
}

/// The pod template of launchgate's entry in `runtimePatches`, if present.
fn entry_template(object: &Value) -> Option<&Map<String, Value>> {
    let entry = object
        .at("/spec/runtimePatches")?
        .as_array()?
        .iter()
        .find(|p| p.get("manager").and_then(Value::as_str) == Some(MANAGER))?;
    entry
        .at("/trainingRuntimeSpec/template/spec/replicatedJobs")?
        .as_array()?
        .iter()
        .find(|j| workload::name_of(j) == Some(workload::TRAINER_NODE))?
        .at("/template/spec/template")?
        .as_object()
}

/// [`with_trainer_pod_template`] on the template's pod spec.
pub fn with_trainer_pod_spec(
    object: &mut Node<'_, Value>,
    f: impl FnOnce(&mut Map<String, Value>, &str) -> bool,
) -> bool {
    with_trainer_pod_template(object, |template| {
        crate::json::member_mut(template, "spec")
            .and_then(Value::as_object_mut)
            .is_some_and(|spec| f(spec, &spec_path()))
    })
}

/// Runs `f` on the pod template (`metadata`, `spec`) of launchgate's runtime patch of a
/// TrainJob (starting from what the entry holds, or from a template with only the trainer's
/// `node` container) and writes the entry back when `f` changed it. Returns true when the
/// TrainJob changed.
pub fn with_trainer_pod_template(
    object: &mut Node<'_, Value>,
    f: impl FnOnce(&mut Map<String, Value>) -> bool,
) -> bool {
    if !object.is_object() || object.get("spec").is_some_and(|s| !s.is_object()) {
        return false;
    }
    let mut template = entry_template(object).cloned().unwrap_or_else(|| {
        let mut skeleton = Map::new();
        skeleton.insert(
            "spec".into(),
            json!({"containers": [{"name": workload::TRAINER_NODE}]}),
        );
        skeleton
    });
    if !f(&mut template) {
        return false;
    }
    let env = crate::json::member_mut(&mut template, "spec")
        .and_then(Value::as_object_mut)
        .map(take_node_env)
        .unwrap_or_default();
    let mut changed = false;
    let Some(mut root) = object.as_map_node() else {
        return false;
    };
    // A TrainJob's spec is small: written as one place.
    let mut root_spec = root.object_or_new("spec");
    let root_spec: &mut Map<String, Value> = &mut root_spec;
    if !env.is_empty() {
        let trainer = root_spec.entry("trainer").or_insert_with(|| json!({}));
        if let Some(trainer) = trainer.as_object_mut() {
            for entry in env {
                changed |=
                    edit::upsert_named(&mut Node::scratch(&mut *trainer), "env", entry, false)
                        .changed();
            }
        }
    }
    let entry = json!({
        "manager": MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{
            "name": workload::TRAINER_NODE,
            "template": {"spec": {"template": template}}
        }]}}}
    });
    let patches = root_spec
        .entry("runtimePatches")
        .or_insert_with(|| json!([]));
    if !patches.is_array() {
        return changed;
    }
    let list = patches.as_array_mut().expect("checked to be an array");
    match list
        .iter_mut()
        .find(|p| p.get("manager").and_then(Value::as_str) == Some(MANAGER))
    {
        Some(existing) if *existing == entry => {}
        Some(existing) => {
            *existing = entry;
            changed = true;
        }
        None => {
            list.push(entry);
            changed = true;
        }
    }
    changed
}

/// Removes the `env` of the `node` container (Trainer takes it only in `spec.trainer.env`).
fn take_node_env(spec: &mut Map<String, Value>) -> Vec<Value> {
    match trainjob::node_container_mut(spec).and_then(|c| c.remove("env")) {
        Some(Value::Array(env)) => env,
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_is_written_once_and_env_goes_to_the_trainer() {
        let mut tj = json!({"spec": {"runtimeRef": {"name": "torch"},
            "trainer": {"env": [{"name": "HF_HOME", "value": "/mine"}]},
            "runtimePatches": [{"manager": "kueue.x-k8s.io/kueue", "time": "x"}]}});
        let write = |spec: &mut Map<String, Value>, _: &str| {
            let c = spec["containers"][0].as_object_mut().unwrap();
            if c.contains_key("securityContext") {
                return false;
            }
            c.insert(
                "securityContext".into(),
                json!({"allowPrivilegeEscalation": false}),
            );
            c.insert(
                "env".into(),
                json!([{"name": "HF_HOME", "value": "/cache"},
                                          {"name": "TORCH_HOME", "value": "/cache/torch"}]),
            );
            true
        };
        assert!(with_trainer_pod_spec(&mut Node::scratch(&mut tj), write));
        assert_eq!(
            tj["spec"]["runtimePatches"][0]["manager"],
            "kueue.x-k8s.io/kueue"
        );
        let ours = &tj["spec"]["runtimePatches"][1];
        assert_eq!(ours["manager"], MANAGER);
        let node = &ours["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0];
        assert_eq!(node["name"], "node");
        assert_eq!(
            node["template"]["spec"]["template"]["spec"]["containers"][0],
            json!({"name": "node", "securityContext": {"allowPrivilegeEscalation": false}})
        );
        assert_eq!(
            tj["spec"]["trainer"]["env"],
            json!([{"name": "HF_HOME", "value": "/mine"}, {"name": "TORCH_HOME", "value": "/cache/torch"}])
        );
        let before = tj.clone();
        assert!(!with_trainer_pod_spec(&mut Node::scratch(&mut tj), write));
        assert_eq!(tj, before);
        for mut garbage in [
            json!(null),
            json!({"spec": 3}),
            json!({"spec": {"runtimePatches": 1}}),
        ] {
            let _ = with_trainer_pod_spec(&mut Node::scratch(&mut garbage), write);
        }
    }
}
