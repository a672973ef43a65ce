//! Hardening of a workload whose pods come from a runtime ([`crate::kinds::RuntimeSpec`]): a
//! TrainJob has no pod template (its pods come from the referenced TrainingRuntime), but
//! Kubeflow Trainer merges `spec.runtimePatches[]` entries, keyed by `manager`, into the
//! runtime's JobSet template (a strategic merge, in list order). The mutators that apply to
//! every pod template (container `securityContext`, the shared cache, the queue label that
//! makes the pods known as the queue's) write into launchgate's own entry, [`MANAGER`], on the
//! runtime's node holder and container ([`RuntimeSpec::node`], Trainer's convention), exactly
//! as they would into a pod template that had only that container.
//!
//! What Trainer does not take in a patch is moved where it does: env for the node container
//! (Trainer rejects it in patches) goes into the settings' `env` (`spec.trainer.env`), where
//! you did not set it. The entry is written only when something is added, and a second pass
//! finds it complete, so the patch is idempotent and reinvocation-safe. Only fields of the
//! entry's real schema are written (the API server would prune any other, silently).

use crate::kinds::field;
use crate::patch::Node;
use crate::workload::{self, WorkloadKind, edit, runtime};
use serde_json::{Map, Value, json};

/// The `manager` of launchgate's runtime patch.
pub const MANAGER: &str = "launchgate.io/admission";

/// `value` under the keys `at`, each an object of one key. (Built as maps: `json!` would
/// serialise `value` into a new tree at every level.)
fn nest(at: &[&str], value: Value) -> Value {
    at.iter().rev().fold(value, |v, k| {
        Value::Object(Map::from_iter([(k.to_string(), v)]))
    })
}

/// [`with_trainer_pod_template`] on the template's pod spec.
pub fn with_trainer_pod_spec(
    kind: WorkloadKind,
    object: &mut Node<'_, Value>,
    f: impl FnOnce(&mut Map<String, Value>, &str) -> bool,
) -> bool {
    with_trainer_pod_template(kind, object, |template, path| {
        crate::json::member_mut(template, "spec")
            .and_then(Value::as_object_mut)
            .is_some_and(|spec| f(spec, &format!("{path}.spec")))
    })
}

/// Runs `f` on the pod template (`metadata`, `spec`) of launchgate's runtime patch of the
/// object, with its path for messages (starting from what the entry holds, or from a template
/// with only the node container), and writes the entry back when `f` changed it. Returns true
/// when the object changed.
pub fn with_trainer_pod_template(
    kind: WorkloadKind,
    object: &mut Node<'_, Value>,
    f: impl FnOnce(&mut Map<String, Value>, &str) -> bool,
) -> bool {
    let Some((rt, position)) = runtime::parts(kind) else {
        return false;
    };
    // The settings and the patches are fields of one map (`spec`), written as one place.
    let (top, patches_key, settings_key) = (rt.patches[0], rt.patches[1], rt.settings[1]);
    if !object.is_object() || object.get(top).is_some_and(|s| !s.is_object()) {
        return false;
    }
    // The entry's holders (from the entry) and launchgate's entry's node template.
    let at = [rt.patch_renders, position.holders.path()].concat();
    let ours = |p: &Value| p.get("manager").and_then(Value::as_str) == Some(MANAGER);
    let template = runtime::patch_entries(rt, object)
        .find(|p| ours(p))
        .and_then(|p| runtime::patch_holders(rt, position, p).0)
        .and_then(|hs| hs.iter().find(|h| workload::name_of(h) == Some(rt.node)))
        .and_then(|h| field(h, position.template)?.as_object().cloned());
    let skeleton = json!({"spec": {"containers": [{"name": rt.node}]}});
    let mut template =
        template.unwrap_or_else(|| skeleton.as_object().cloned().unwrap_or_default());
    let path = format!(
        "{}[manager={MANAGER}].{}[name={}].{}",
        rt.patches.join("."),
        at.join("."),
        rt.node,
        position.template.join(".")
    );
    if !f(&mut template, &path) {
        return false;
    }
    let env = crate::json::member_mut(&mut template, "spec")
        .and_then(Value::as_object_mut)
        .and_then(|spec| runtime::node_container_mut(rt, spec)?.remove("env"));
    let mut changed = false;
    let Some(mut root) = object.as_map_node() else {
        return false;
    };
    let mut root_spec = root.object_or_new(top);
    let root_spec: &mut Map<String, Value> = &mut root_spec;
    if let Some(Value::Array(env)) = env
        && !env.is_empty()
    {
        let settings = root_spec.entry(settings_key).or_insert_with(|| json!({}));
        if let Some(settings) = settings.as_object_mut() {
            for entry in env {
                changed |=
                    edit::upsert_named(&mut Node::scratch(&mut *settings), "env", entry, false)
                        .changed();
            }
        }
    }
    let mut holder = json!({"name": rt.node});
    let (first, rest) = position.template.split_first().expect("a template path");
    holder[*first] = nest(rest, Value::Object(template));
    let mut entry = json!({"manager": MANAGER});
    entry[at[0]] = nest(&at[1..], Value::Array(vec![holder]));
    let patches = root_spec.entry(patches_key).or_insert_with(|| json!([]));
    if !patches.is_array() {
        return changed;
    }
    let list = patches.as_array_mut().expect("checked to be an array");
    match list.iter_mut().find(|p| ours(p)) {
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
        assert!(with_trainer_pod_spec(
            WorkloadKind::TrainJob,
            &mut Node::scratch(&mut tj),
            write
        ));
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
        assert!(!with_trainer_pod_spec(
            WorkloadKind::TrainJob,
            &mut Node::scratch(&mut tj),
            write
        ));
        assert_eq!(tj, before);
        for mut garbage in [
            json!(null),
            json!({"spec": 3}),
            json!({"spec": {"runtimePatches": 1}}),
        ] {
            let _ = with_trainer_pod_spec(
                WorkloadKind::TrainJob,
                &mut Node::scratch(&mut garbage),
                write,
            );
        }
    }
}
