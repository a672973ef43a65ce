//! The envelope: every container no variable or field limit looked at, held to the largest
//! maximum any container position of the queue template has.

use super::Evaluation;
use super::totals::amount;
use crate::json;
use crate::quantity::Quantity;
use crate::rules::Violation;
use crate::validate::QueueLimits;
use crate::validate::binding::Ceiling;
use crate::validate::path::{self, Segment};
use crate::validate::schema::{ValueType, display_value};
use crate::workload;
use serde_json::{Map, Value};

impl<'a> Evaluation<'a> {
    /// Holds every container no variable or field limit looked at to the queue's envelope.
    pub(super) fn check_envelope(&mut self, limits: &QueueLimits) {
        let envelope = limits.envelope.as_slice();
        let mut found = Vec::new();
        for (info, template) in &self.templates {
            let spec = workload::pod_spec(template);
            for (c, container) in spec.into_iter().flat_map(|s| workload::containers(s, &[])) {
                for ceiling in envelope {
                    let value = container
                        .get("resources")
                        .and_then(|r| r.get(&ceiling.kind))
                        .and_then(|r| r.get(&ceiling.resource))
                        .filter(|v| !v.is_null());
                    // Most containers set few of the ceilings' resources: the place is named
                    // only for a value that is there.
                    let Some(value) = value else { continue };
                    let mut place = info.spec_path_text();
                    for segment in [
                        Segment::Key(c.list.to_string()),
                        Segment::Index(c.index),
                        Segment::Key("resources".into()),
                        Segment::Key(ceiling.kind.clone()),
                        Segment::Key(ceiling.resource.clone()),
                    ] {
                        path::push_segment(&mut place, &segment);
                    }
                    found.extend(self.over_ceiling(ceiling, value, &place, ""));
                }
            }
        }
        self.envelope_other_ways(limits, &mut found);
        // A TrainJob's `resourcesPerNode` is the `node` container's resources on every node.
        if let Some((rt, resources)) = self.trainer_resources() {
            let place = format!("{}.{}", rt.settings.join("."), rt.resources);
            self.block_over_ceilings(envelope, resources, &place, "", &mut found);
        }
        for line in found {
            self.report(line);
        }
    }

    /// The envelope's verdicts on a `resources` block at `place` that is not a container's own
    /// (`why` says why it is held to what one container may have).
    pub(super) fn block_over_ceilings(
        &self,
        envelope: &[Ceiling],
        resources: &Map<String, Value>,
        place: &str,
        why: &str,
        found: &mut Vec<Violation>,
    ) {
        for ceiling in envelope {
            let Some(value) = resources
                .get(&ceiling.kind)
                .and_then(|r| r.get(&ceiling.resource))
                .filter(|v| !v.is_null())
            else {
                continue;
            };
            let mut place = place.to_string();
            for key in [&ceiling.kind, &ceiling.resource] {
                path::push_segment(&mut place, &Segment::Key(key.clone()));
            }
            found.extend(self.over_ceiling(ceiling, value, &place, why));
        }
    }

    /// What the envelope holds beyond the containers' own resource names: the pod-level
    /// resources (`spec.resources`, which the containers share, so no more than one container
    /// may have), and each container's GPUs however asked for — claims, MIG slices, a
    /// DeviceClass's extended name — against a ceiling on a whole GPU (`nvidia.com/gpu`).
    pub(super) fn envelope_other_ways(&self, limits: &QueueLimits, found: &mut Vec<Violation>) {
        let envelope = limits.envelope.as_slice();
        let gpu_ceilings: Vec<&Ceiling> = envelope
            .iter()
            .filter(|c| limits.is_whole_gpu(&c.resource))
            .collect();
        let names: Vec<&str> = gpu_ceilings.iter().map(|c| c.resource.as_str()).collect();
        for (info, template) in &self.templates {
            let Some(spec) = workload::pod_spec(template) else {
                continue;
            };
            if let Some(pod_level) = json::member(spec, "resources").and_then(Value::as_object) {
                let mut place = info.spec_path_text();
                path::push_segment(&mut place, &Segment::Key("resources".into()));
                self.block_over_ceilings(
                    envelope,
                    pod_level,
                    &place,
                    "pod-level resources are shared by the pod's containers, so they are held to what one container may have: ",
                    found,
                );
            }
            // A pod that asks for GPUs only by the ceilings' own names was held above.
            if gpu_ceilings.is_empty() || !self.accounting.asks_beyond(spec, &names) {
                continue;
            }
            let pod = self.accounting.pod(template);
            for c in &pod.containers {
                let resources = json::member(spec, c.list)
                    .and_then(|l| l.get(c.index))
                    .and_then(|c| c.get("resources"));
                for ceiling in &gpu_ceilings {
                    // What the envelope reads by the ceiling's own name is checked above.
                    let own = resources.map_or(Quantity::ZERO, |r| amount(r, &ceiling.resource));
                    if c.gpus <= own {
                        continue;
                    }
                    let value = Value::String(c.gpus.to_string());
                    let Some(problem) = ceiling.schema.problem(&value) else {
                        continue;
                    };
                    let mut place = info.spec_path_text();
                    path::push_segment(&mut place, &Segment::Key(c.list.to_string()));
                    path::push_segment(&mut place, &Segment::Index(c.index));
                    found.push(
                        ceiling
                            .source
                            .violation(format!(
                                "{place} ({}) asks for {} GPUs ({}), {problem} ({} on {}, which holds every container however it asks for GPUs)",
                                c.name,
                                c.gpus,
                                c.parts.join(" + "),
                                ceiling.source.text,
                                ceiling.resource
                            ))
                            .at(place)
                            .value(c.gpus.to_string())
                            .limit(problem),
                    );
                }
            }
        }
    }

    /// The envelope's verdict on `value` at `place`; none where a variable or field limit
    /// looked (the place is theirs). `why`, when given, says why the place is held to what one
    /// container may have.
    pub(super) fn over_ceiling(
        &self,
        ceiling: &Ceiling,
        value: &Value,
        place: &str,
        why: &str,
    ) -> Option<Violation> {
        if self.reached.contains(place) {
            return None;
        }
        let problem = ceiling.schema.problem(value)?;
        let shown = display_value(value, Some(ValueType::Quantity));
        Some(
            ceiling
                .source
                .violation(format!(
                    "{place}={shown} {problem} ({why}{}, which holds every container)",
                    ceiling.source.text
                ))
                .at(place)
                .value(shown)
                .bound(problem.text, problem.over_maximum),
        )
    }
}
