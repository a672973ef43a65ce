//! Records what launchgate did: the `launchgate.io/queue` label (on the object and its pod
//! templates, so controller-made pods carry it too) and the `launchgate.io/mutations`
//! annotation listing the mutations applied. `wandb.ai/*` labels are never removed or renamed.
//!
//! A queue name that is not a valid label value (more than 63 characters, spaces, `/`…) would
//! make the API server reject every workload of the queue, so the label gets
//! [`queue_label_value`] — a valid value that still names the queue uniquely — and the full
//! name goes into the `launchgate.io/queue-name` annotation next to it. Queue resolution maps
//! the label value back to its queue (`Policy::queue_by_name_or_label`).

use super::MutationContext;
use crate::patch::{MapNode, Node};
use crate::workload;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::BTreeSet;

/// Label naming the queue a workload was admitted under.
pub const QUEUE_LABEL: &str = "launchgate.io/queue";
/// Annotation listing the mutations launchgate applied (comma-separated, sorted).
pub const MUTATIONS_ANNOTATION: &str = "launchgate.io/mutations";
/// Annotation holding the full queue name when it is not a valid label value.
pub const QUEUE_NAME_ANNOTATION: &str = "launchgate.io/queue-name";

/// Longest Kubernetes label value.
const MAX_LABEL_VALUE: usize = 63;

/// True for a valid Kubernetes label value: at most 63 characters of `[A-Za-z0-9-_.]`,
/// starting and ending with a letter or digit (or empty).
pub fn is_label_value(value: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    value.is_empty()
        || (value.len() <= MAX_LABEL_VALUE
            && value.chars().all(ok)
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// The `launchgate.io/queue` label value for queue `name`: the name itself when it is a valid
/// label value; otherwise its valid characters (others become `-`), cut to 54, then `-` and 8
/// hex digits of a hash of the full name, so two queue names never share a value by accident
/// (e.g. `Team A GPU queue` → `Team-A-GPU-queue-1c0f3a5e`).
pub fn queue_label_value(name: &str) -> Cow<'_, str> {
    if is_label_value(name) {
        return Cow::Borrowed(name);
    }
    let hash = name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let mapped: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trim = |s: &str| {
        s.trim_matches(|c: char| !c.is_ascii_alphanumeric())
            .to_string()
    };
    let mut prefix = trim(&mapped);
    prefix.truncate(MAX_LABEL_VALUE - 9);
    let prefix = trim(&prefix);
    Cow::Owned(if prefix.is_empty() {
        format!("{hash:08x}")
    } else {
        format!("{prefix}-{hash:08x}")
    })
}

/// Adds the queue label where missing and merges `applied` into the mutations annotation.
pub fn record(
    ctx: &MutationContext<'_>,
    object: &mut Node<'_, Value>,
    applied: &[&'static str],
) -> bool {
    let queue = ctx.queue_name;
    let label_value = queue_label_value(queue);
    let mut changed = false;
    let Some(mut top) = object.as_map_node() else {
        return false;
    };
    let add_label = |map: &mut MapNode<'_>| {
        let mut labels = workload::metadata_map_mut(map, "labels");
        // Kept as is, unless it is the queue's full name where that is no label value (the
        // CLI's `--queue` on a bare manifest): the API server would reject it.
        let written_raw =
            label_value != queue && labels.get(QUEUE_LABEL).and_then(Value::as_str) == Some(queue);
        if labels.contains_key(QUEUE_LABEL) && !written_raw {
            return false;
        }
        labels.set(QUEUE_LABEL, json!(label_value));
        if label_value != queue {
            let mut annotations = workload::metadata_map_mut(map, "annotations");
            if !annotations.contains_key(QUEUE_NAME_ANNOTATION) {
                annotations.set(QUEUE_NAME_ANNOTATION, json!(queue));
            }
        }
        true
    };
    changed |= add_label(&mut top);
    workload::for_each_template_mut(ctx.kind, object, |info, template| {
        if !info.is_pod() {
            changed |= add_label(template);
        }
    });
    // A TrainJob's pods come from its runtime: the label goes into launchgate's runtime patch.
    if ctx.kind.spec().runtime.is_some() {
        changed |=
            super::runtime_patch::with_trainer_pod_template(ctx.kind, object, |template, _| {
                add_label(&mut Node::scratch(template))
            });
    }
    if applied.is_empty() {
        return changed;
    }
    let Some(mut top) = object.as_map_node() else {
        return changed;
    };
    let mut annotations = workload::metadata_map_mut(&mut top, "annotations");
    let mut names: BTreeSet<String> = annotations
        .get(MUTATIONS_ANNOTATION)
        .and_then(Value::as_str)
        .map(|s| {
            s.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    names.extend(applied.iter().map(|s| s.to_string()));
    let joined = names.into_iter().collect::<Vec<_>>().join(",");
    if annotations
        .get(MUTATIONS_ANNOTATION)
        .and_then(Value::as_str)
        != Some(joined.as_str())
    {
        annotations.set(MUTATIONS_ANNOTATION, json!(joined));
        changed = true;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_queue_names_are_their_own_label_value() {
        for name in ["gpu-queue", "k8s-test", "a", "Team_A.gpu-2"] {
            assert_eq!(queue_label_value(name), name);
        }
    }

    #[test]
    fn other_queue_names_become_distinct_valid_label_values() {
        let long = "a".repeat(64);
        let names = [
            "Team A GPU queue",
            "Team A GPU queue ",
            "team/gpu",
            "-gpu-",
            "ÄÖÜ",
            "",
            long.as_str(),
            "x".repeat(200).as_str(),
        ]
        .map(str::to_string);
        let mut seen = BTreeSet::new();
        for name in &names {
            let value = queue_label_value(name);
            assert!(is_label_value(&value), "{name:?} -> {value:?}");
            assert!(
                seen.insert(value.to_string()),
                "{name:?} -> {value:?} twice"
            );
            // A value written once stays: it is already valid.
            assert_eq!(queue_label_value(&value), value);
        }
        assert!(
            queue_label_value("Team A GPU queue").starts_with("Team-A-GPU-queue-"),
            "{}",
            queue_label_value("Team A GPU queue")
        );
        assert_eq!(queue_label_value(&long).len(), 63);
        assert!(!is_label_value(&long));
        assert!(is_label_value(&"a".repeat(63)));
    }
}
