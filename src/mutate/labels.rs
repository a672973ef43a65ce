//! Records what launchgate did: the `launchgate.io/queue` label (on the object and its pod
//! templates, so controller-made pods carry it too) and the `launchgate.io/mutations`
//! annotation listing the mutations applied. `wandb.ai/*` labels are never removed or renamed.

use super::MutationContext;
use crate::workload;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// Label naming the queue a workload was admitted under.
pub const QUEUE_LABEL: &str = "launchgate.io/queue";
/// Annotation listing the mutations launchgate applied (comma-separated, sorted).
pub const MUTATIONS_ANNOTATION: &str = "launchgate.io/mutations";

/// Adds the queue label where missing and merges `applied` into the mutations annotation.
pub fn record(ctx: &MutationContext<'_>, object: &mut Value, applied: &[&'static str]) -> bool {
    let queue = ctx.queue.name.as_str();
    let mut changed = false;
    let Some(top) = object.as_object_mut() else {
        return false;
    };
    let add_label = |map: &mut serde_json::Map<String, Value>| {
        let labels = workload::metadata_map_mut(map, "labels");
        if labels.contains_key(QUEUE_LABEL) {
            false
        } else {
            labels.insert(QUEUE_LABEL.into(), json!(queue));
            true
        }
    };
    changed |= add_label(top);
    workload::for_each_template_mut(ctx.kind, object, |info, template| {
        if !matches!(info.role, workload::TemplateRole::Pod) {
            changed |= add_label(template);
        }
    });
    if applied.is_empty() {
        return changed;
    }
    let Some(top) = object.as_object_mut() else {
        return changed;
    };
    let annotations = workload::metadata_map_mut(top, "annotations");
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
        annotations.insert(MUTATIONS_ANNOTATION.into(), json!(joined));
        changed = true;
    }
    changed
}
