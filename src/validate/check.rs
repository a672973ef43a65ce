//! Checking an admitted object against its queue's compiled limits.

use super::binding::{Ceiling, Source, TemplateShape};
use super::path::{self, FieldPath, Segment};
use super::schema::{Schema, ValueType, display_value};
use super::template::{self, Anchor, LeafContent, Piece, TemplateLeaf};
use super::{Enforcement, LimitReport, QueueLimits};
use crate::admission::Operation;
use crate::json::{self, Pointer as _};
use crate::kinds::{Deadline, RuntimeSpec};
use crate::quantity::Quantity;
use crate::rules::{self, OnUpdate, Violation};
use crate::workload::consumption::{Accounting, PodGpus};
use crate::workload::runtime::{self, TrainingRuntime};
use crate::workload::{self, CONTAINER_LISTS, ContainerRole, TemplateInfo, WorkloadKind};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

/// Checks `object` (and, on an UPDATE of what was admitted, compares with `old_object`) against
/// the queue's limits.
///
/// Every violation is reported (the answer shows the first, [`rules::bounded_message`]), one
/// line each, in a fixed order: namespace, variables (by
/// name), field limits, the strict template contract, totals, deadline, registries. On an
/// UPDATE of what was admitted, a violation its rule carries ([`Admitted::carries`]: the old object had
/// it, and it did not grow) does not block: it becomes a warning, so labels and finalizers of
/// an already-violating object can still be changed. Other operations are not checked.
///
/// A Pod its workload's controller made (the caller verified it: `candidate.scope`) is checked
/// on the per-pod rules only ([`Scope::PerPod`]). `sidecars` are the container names that are
/// never "the training container" (`match.sidecarContainers`).
pub fn check_limits(
    queue_name: &str,
    limits: &QueueLimits,
    candidate: &Candidate<'_>,
    sidecars: &[String],
) -> LimitReport {
    let mut report = LimitReport {
        enforcement: limits.enforcement,
        ..LimitReport::default()
    };
    if !matches!(candidate.operation, Operation::Create | Operation::Update) || limits.is_empty() {
        return report;
    }
    let found = limits.violations(queue_name, candidate, sidecars, &mut report.warnings);
    let admitted: Vec<Violation> = match (candidate.operation, candidate.old_object) {
        (Operation::Update, Some(old)) if !found.is_empty() => limits.violations(
            queue_name,
            &Candidate {
                object: old,
                ..*candidate
            },
            sidecars,
            &mut Vec::new(),
        ),
        _ => Vec::new(),
    };
    add_violations(&mut report, found, &admitted);
    cap_lines(&mut report.warnings, queue_name, "unchanged violations");
    report
}

/// Adds the violations `found` on the object to `report`. On an UPDATE of what was admitted in
/// the queue, `admitted` are the violations the old object has by the same rules: one its rule
/// carries ([`Admitted::carries`]) does not block and becomes a warning, except under `audit`.
pub fn add_violations(report: &mut LimitReport, found: Vec<Violation>, admitted: &[Violation]) {
    let admitted = Admitted::new(admitted);
    for violation in found {
        if report.enforcement != Enforcement::Audit && admitted.carries(&violation) {
            let kept = as_carried(violation);
            report.warnings.push(rules::Warning::of(&kept));
            report.unchanged.push(kept);
        } else {
            report.violations.push(violation);
        }
    }
}

/// `violation` as an UPDATE carries it: a warning that says why it passes.
pub fn as_carried(violation: Violation) -> Violation {
    Violation {
        message: format!(
            "{} (already so before this update; allowed because this update does not make it worse)",
            violation.message
        ),
        effect: rules::Effect::Warn,
        ..violation
    }
}

/// Where a violation is: its rule, the config entry, the place in the object and the bound.
/// An UPDATE compares a violation only with the old object's at the same place.
type Place<'a> = (
    &'static str,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
);

fn place_of(v: &Violation) -> Place<'_> {
    (
        v.rule.id,
        v.key.as_deref(),
        v.path.as_deref(),
        v.limit.as_deref(),
    )
}

/// The violations of the old object of an UPDATE (found the same way on it, which launchgate
/// admitted in this queue), indexed by place once, so that judging the new object's
/// violations is linear in both: each is compared only with the old ones at its place.
#[derive(Debug, Default)]
pub struct Admitted<'a> {
    by_place: HashMap<Place<'a>, Vec<&'a Violation>>,
}

impl<'a> Admitted<'a> {
    /// The index of `violations`.
    pub fn new(violations: &'a [Violation]) -> Self {
        let mut by_place: HashMap<Place<'a>, Vec<&'a Violation>> =
            HashMap::with_capacity(violations.len());
        for v in violations {
            by_place.entry(place_of(v)).or_default().push(v);
        }
        Admitted { by_place }
    }

    /// The old object's violations at `new`'s place: the only ones it is compared with.
    pub fn at_place_of<'s>(&'s self, new: &'s Violation) -> &'s [&'s Violation] {
        self.by_place.get(&place_of(new)).map_or(&[], Vec::as_slice)
    }

    /// True when `new`, found on the object an UPDATE would store, is one its rule lets pass
    /// given what was admitted: the rule's [`OnUpdate`] says how they compare.
    pub fn carries(&self, new: &Violation) -> bool {
        let same_value = |old: &&Violation| old.value == new.value;
        let no_larger = |old: &&Violation| not_larger(new.value.as_deref(), old.value.as_deref());
        match new.rule.update {
            OnUpdate::Every => false,
            OnUpdate::CreateOnly => true,
            OnUpdate::Changed => self.at_place_of(new).iter().any(same_value),
            OnUpdate::Grown => self.at_place_of(new).iter().any(no_larger),
            OnUpdate::GrownOverMaximum if new.over_maximum => {
                self.at_place_of(new).iter().any(no_larger)
            }
            OnUpdate::GrownOverMaximum => self.at_place_of(new).iter().any(same_value),
        }
    }
}

/// True when `new` is no larger than `old`: the same text, or both amounts (a number or a
/// Kubernetes quantity, the first word of the text) with `new` ≤ `old`.
fn not_larger(new: Option<&str>, old: Option<&str>) -> bool {
    if new == old {
        return true;
    }
    let amount = |text: &str| {
        let head = text.split_whitespace().next()?;
        Quantity::parse(head.trim_matches('"')).ok()
    };
    match (new.and_then(amount), old.and_then(amount)) {
        (Some(n), Some(o)) => n <= o,
        _ => false,
    }
}

/// The object the API server asks about.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub kind: WorkloadKind,
    pub object: &'a Value,
    /// The object before an UPDATE, when launchgate admitted it in this queue; `None` on
    /// CREATE and on an UPDATE that brings the object into the queue (judged as a CREATE).
    pub old_object: Option<&'a Value>,
    pub namespace: Option<&'a str>,
    pub operation: &'a Operation,
    /// Which rules apply: [`Scope::PerPod`] only for a pod verified as its workload's.
    pub scope: Scope,
    /// A TrainJob's runtime, when it could be read: the TrainJob is counted as the JobSet
    /// Trainer makes from it.
    pub runtime: Option<&'a TrainingRuntime>,
    /// How GPUs are counted (the accelerator map) and where the pods' claims are read.
    pub accounting: &'a Accounting<'a>,
}

/// Which of the queue's rules an object is checked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every rule: a workload (Job, Volcano Job, PyTorchJob), or a Pod not verified as made
    /// by its workload's controller.
    Workload,
    /// The per-pod rules only — template variables and `fields` inside the pod template,
    /// the envelope on every container, registries, namespaces — for a Pod whose workload
    /// was already checked on the workload rules (deadline, totals, the strict template
    /// contract, everything at the object's root).
    PerPod,
    /// The per-pod rules and the per-run rules of the run it belongs to — `totals` here, the
    /// GPU-hour ceiling in the guardrails: a JobSet Trainer made for a TrainJob (verified). Its
    /// size is the TrainJob's as Trainer rendered it from the runtime, which may have changed
    /// since the TrainJob was admitted.
    PerPodAndRun,
}

/// Most warnings of unchanged violations an UPDATE gives: the API server shows a few KiB of
/// warnings at most ([`crate::admission::MAX_WARNINGS_TOTAL_CHARS`]); the report's
/// `unchanged` and the decision log keep every one.
pub const MAX_REPORTED_LINES: usize = 100;

/// The line in place of the cut ones keeps the id of the first it stands for.
fn cap_lines(lines: &mut Vec<rules::Warning>, queue: &str, what: &str) {
    if lines.len() > MAX_REPORTED_LINES {
        let more = lines.len() - (MAX_REPORTED_LINES - 1);
        let rule = lines[MAX_REPORTED_LINES - 1].rule;
        lines.truncate(MAX_REPORTED_LINES - 1);
        lines.push(rules::Warning {
            rule,
            message: format!("queue {queue:?}: … and {more} more {what}"),
        });
    }
}

/// Registry prefix in the form images are compared in (`acme` → `docker.io/acme`).
pub(super) fn normalized_registry(prefix: &str) -> String {
    let first = prefix.split('/').next().unwrap_or_default();
    if first.contains('.') || first.contains(':') || first == "localhost" {
        prefix.to_string()
    } else {
        format!("docker.io/{prefix}")
    }
}

/// An image reference with its implicit registry spelled out (`busybox` →
/// `docker.io/library/busybox`, `acme/train:1` → `docker.io/acme/train:1`).
fn normalized_image(image: &str) -> String {
    if image.contains('/') {
        normalized_registry(image)
    } else {
        format!("docker.io/library/{image}")
    }
}

/// True when `image` (normalised) is `prefix` or lies under it (`prefix/`, `prefix:`, `prefix@`).
fn image_allowed_by(image: &str, prefix: &str) -> bool {
    image
        .strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['/', ':', '@']))
}

/// Literal template values compare by value when both are numbers/quantities (`4` == `"4"`).
fn same_literal(template: &Value, actual: &Value) -> bool {
    if template == actual {
        return true;
    }
    match (template, actual) {
        (Value::Object(_) | Value::Array(_), _) | (_, Value::Object(_) | Value::Array(_)) => false,
        _ => match (Quantity::from_json(template), Quantity::from_json(actual)) {
            (Some(Ok(a)), Some(Ok(b))) => a == b,
            _ => false,
        },
    }
}

/// A runtime-sized run's pods as its controller makes them from its runtime (a TrainJob's, as
/// the JobSet Trainer renders).
struct RuntimeView<'a> {
    /// `ClusterTrainingRuntime "torch-distributed"`.
    source: &'a str,
    /// The kind it is rendered into.
    kind: WorkloadKind,
    templates: Vec<(TemplateInfo, &'a Map<String, Value>)>,
}

/// A runtime-sized `kind`'s run as its controller renders it from its `runtime` (when known):
/// how messages name the runtime, and the rendered object.
fn rendered(
    kind: WorkloadKind,
    object: &Value,
    runtime: Option<&TrainingRuntime>,
) -> Option<(String, Value)> {
    let runtime = runtime.filter(|_| kind.spec().runtime.is_some())?;
    Some((
        runtime.reference.describe(),
        runtime::rendered(kind, object, &runtime.object),
    ))
}

impl<'a> RuntimeView<'a> {
    /// The view of `kind`'s run rendered as `jobset`, when `kind` is rendered from a runtime.
    fn new(kind: WorkloadKind, (source, jobset): &'a (String, Value)) -> Option<Self> {
        let kind = kind.runs_as()?;
        Some(RuntimeView {
            source,
            kind,
            templates: workload::templates(kind, jobset),
        })
    }

    /// `ClusterTrainingRuntime "x" replicatedJobs[1] (node)` for a template of the JobSet.
    fn label(&self, info: &TemplateInfo) -> String {
        // The list of the rendered object's holders.
        let holders = info.position.holders.path().last().unwrap_or(&"");
        match &info.name {
            Some(name) => format!("{} {holders}[{}] ({name})", self.source, info.index),
            None => self.source.to_string(),
        }
    }
}

/// One evaluation of one object.
struct Evaluation<'a> {
    queue: &'a str,
    kind: WorkloadKind,
    object: &'a Value,
    templates: Vec<(TemplateInfo, &'a Map<String, Value>)>,
    /// A TrainJob whose runtime is known: the JobSet Trainer makes for it, its pod templates,
    /// and the runtime named in messages.
    runtime: Option<RuntimeView<'a>>,
    shape: &'a TemplateShape,
    sidecars: &'a [String],
    accounting: &'a Accounting<'a>,
    /// Every place a variable or field limit looked at (the envelope holds the others).
    reached: HashSet<String>,
    violations: Vec<Violation>,
    /// The violations already reported (a location can be reached twice).
    seen: HashSet<String>,
}

impl<'a> Evaluation<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        queue: &'a str,
        kind: WorkloadKind,
        object: &'a Value,
        templates: Vec<(TemplateInfo, &'a Map<String, Value>)>,
        rendered: Option<&'a (String, Value)>,
        shape: &'a TemplateShape,
        sidecars: &'a [String],
        accounting: &'a Accounting<'a>,
    ) -> Self {
        Evaluation {
            queue,
            kind,
            object,
            templates,
            runtime: rendered.and_then(|r| RuntimeView::new(kind, r)),
            shape,
            sidecars,
            accounting,
            reached: HashSet::new(),
            violations: Vec::new(),
            seen: HashSet::new(),
        }
    }

    /// Every pod template the workload runs (a TrainJob's as Trainer renders them from its
    /// runtime, when known), with how many of its pods run at once and how messages name it;
    /// never a runtime patch, which adds no pods.
    fn pod_templates(&self) -> Vec<(String, i64, &'a Map<String, Value>)> {
        let kind = self.kind;
        match &self.runtime {
            Some(view) => view
                .templates
                .iter()
                .map(|(info, t)| (view.label(info), info.at_most, *t))
                .collect(),
            None => self
                .templates
                .iter()
                .filter(|(info, _)| !runtime::is_patch_place(kind, &info.path_text))
                .map(|(info, t)| (template_label(info), info.at_most, *t))
                .collect(),
        }
    }

    /// The GPUs the workload can use at once, however asked for (the accelerator map): Σ over
    /// its pod templates of pods at once × GPUs per pod, each shared ResourceClaim once, a
    /// TrainJob's `resourcesPerNode` × its nodes when its runtime is unknown; with the parts of
    /// the sum. `Err`: why they cannot be counted.
    fn gpus_at_once(&self) -> Result<(Quantity, Vec<String>), NotCounted> {
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
    fn uncounted_devices(&self) -> Vec<String> {
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

    /// Records a violation (once: a location can be reached twice), its message prefixed with
    /// the queue.
    fn report(&mut self, violation: Violation) {
        let violation = violation.prefixed(&format!("queue {:?}: ", self.queue));
        if self.seen.insert(violation.message.clone()) {
            self.violations.push(violation);
        }
    }

    /// Every place `path` designates: under the root, or under each pod template.
    fn places(&self, anchor: Anchor, path: &FieldPath) -> Vec<(String, Option<&'a Value>)> {
        let places = match anchor {
            Anchor::Root => path::resolve(self.object, "", &path.0),
            Anchor::PodTemplate => self
                .templates
                .iter()
                .flat_map(|(info, template)| {
                    path::resolve_in_map(template, &info.path_text, &path.0)
                })
                .collect(),
        };
        without_unset_patch_places(self.kind, places)
    }

    /// Every place a template position designates: under the root, or in the workload's pod
    /// templates and containers it binds to (by role and name, see `binding`).
    fn template_places(
        &self,
        anchor: Anchor,
        template_path: &FieldPath,
        path: &FieldPath,
    ) -> Vec<(String, Option<&'a Value>)> {
        let places = match anchor {
            Anchor::Root => self.shape.root_places(self.kind, self.object, path),
            Anchor::PodTemplate => {
                self.shape
                    .places(&self.templates, self.sidecars, template_path, path)
            }
        };
        without_unset_patch_places(self.kind, places)
    }

    /// Holds every container no variable or field limit looked at to the queue's envelope.
    fn check_envelope(&mut self, limits: &QueueLimits) {
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
    fn block_over_ceilings(
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
    fn envelope_other_ways(&self, limits: &QueueLimits, found: &mut Vec<Violation>) {
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
                    let own =
                        resources.map_or(Quantity::ZERO, |r| self::amount(r, &ceiling.resource));
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
    fn over_ceiling(
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

    /// A TrainJob's `spec.trainer.resourcesPerNode`, with its kind's runtime.
    fn trainer_resources(&self) -> Option<(&'static RuntimeSpec, &'a Map<String, Value>)> {
        let rt = self.kind.spec().runtime?;
        let settings = runtime::settings(self.kind, self.object)?;
        Some((rt, settings.get(rt.resources)?.as_object()?))
    }

    /// Root-level template positions only mean something for the template's own kind.
    fn applies(&self, anchor: Anchor, template_kind: Option<WorkloadKind>) -> bool {
        anchor == Anchor::PodTemplate || template_kind == Some(self.kind)
    }

    fn check_schema(
        &mut self,
        place: &str,
        value: Option<&Value>,
        schema: &Schema,
        source: &Source,
    ) {
        let text = &source.text;
        match value {
            None | Some(Value::Null) => {
                if schema.required {
                    self.report(
                        source
                            .violation(format!("{place} is missing ({text} is required)"))
                            .at(place)
                            .limit("required"),
                    );
                }
            }
            Some(value) => {
                if let Some(problem) = schema.problem(value) {
                    let shown = display_value(value, Some(schema.value_type));
                    self.report(
                        source
                            .violation(format!("{place}={shown} {problem} ({text})"))
                            .at(place)
                            .value(shown)
                            .bound(problem.text, problem.over_maximum),
                    );
                }
            }
        }
    }

    fn check_fixed_value(&mut self, leaf: &TemplateLeaf) {
        for (place, value) in self.template_places(leaf.anchor, &leaf.template_path, &leaf.path) {
            let (message, value, limit) = match (&leaf.content, value) {
                (LeafContent::Literal(expected), None | Some(Value::Null)) => (
                    format!(
                        "{place} is missing; the queue template sets it to {expected} (strict)"
                    ),
                    None,
                    expected.to_string(),
                ),
                (LeafContent::Literal(expected), Some(actual))
                    if !same_literal(expected, actual) =>
                {
                    (
                        format!(
                            "{place}={actual} differs from the queue template's {expected} (strict)"
                        ),
                        Some(actual.to_string()),
                        expected.to_string(),
                    )
                }
                (LeafContent::Pattern(pattern), actual)
                    if actual
                        .and_then(Value::as_str)
                        .is_none_or(|s| template::match_pattern(pattern, s).is_none()) =>
                {
                    let shown = actual.map_or("<missing>".to_string(), Value::to_string);
                    let written = super::pattern_text(pattern);
                    (
                        format!(
                            "{place}={shown} does not match the queue template's {written:?} (strict)"
                        ),
                        Some(shown),
                        written,
                    )
                }
                _ => continue,
            };
            let violation = Violation::new(rules::LIMITS_STRICT, message)
                .at(&place)
                .limit(limit);
            self.report(Violation { value, ..violation });
        }
    }

    /// `gpus`: the resource counts as a whole GPU (`nvidia.com/gpu`), so its total counts
    /// every GPU, however asked for.
    fn check_total(&mut self, resource: &str, schema: &Schema, gpus: bool) {
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
    fn total(&self, resource: &str) -> (Option<Quantity>, Vec<String>) {
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

    fn check_deadline(&mut self, maximum: i64) {
        let resolve = |dotted: &str| {
            path::resolve(
                self.object,
                "",
                &FieldPath::parse(dotted).unwrap_or_default().0,
            )
        };
        let (places, run_bound) = match run_deadline(self.kind) {
            RunDeadline::Run(dotted) => {
                let places = resolve(dotted);
                let set = places.iter().any(|(_, v)| v.is_some());
                (places, set)
            }
            RunDeadline::EachJob(paths) => {
                let places: Vec<_> = paths.iter().flat_map(|p| resolve(p)).collect();
                let set = !places.is_empty() && places.iter().all(|(_, v)| v.is_some());
                (places, set)
            }
            RunDeadline::Pods => (Vec::new(), false),
            RunDeadline::Never { why, set } => {
                self.report(
                    Violation::new(
                        rules::LIMITS_MAX_ACTIVE_DEADLINE_SECONDS,
                        format!(
                            "{why}, so no deadline bounds it; the queue allows at most {maximum} (maxActiveDeadlineSeconds): use {set}"
                        ),
                    )
                    .limit(maximum.to_string()),
                );
                return;
            }
        };
        let pod_path = FieldPath::parse("spec.activeDeadlineSeconds").unwrap_or_default();
        let pod_places = self.places(Anchor::PodTemplate, &pod_path);
        let every_pod = !pod_places.is_empty() && pod_places.iter().all(|(_, v)| v.is_some());
        if !run_bound && !every_pod {
            self.report(
                Violation::new(
                    rules::LIMITS_MAX_ACTIVE_DEADLINE_SECONDS,
                    format!(
                        "activeDeadlineSeconds is not set; the queue allows at most {maximum} (maxActiveDeadlineSeconds), so set it on the workload or on every pod template"
                    ),
                )
                .limit(maximum.to_string()),
            );
        }
        for (place, value) in places.into_iter().chain(pod_places) {
            let Some(value) = value else { continue };
            let within = value.as_i64().is_some_and(|s| s <= maximum)
                || Quantity::from_json(value)
                    .and_then(Result::ok)
                    .is_some_and(|q| q <= Quantity::from_int(maximum));
            if !within {
                let shown = display_value(value, Some(ValueType::Integer));
                self.report(
                    Violation::new(
                        rules::LIMITS_MAX_ACTIVE_DEADLINE_SECONDS,
                        format!(
                            "{place}={shown} exceeds maximum {maximum} (maxActiveDeadlineSeconds)"
                        ),
                    )
                    .at(place)
                    .value(shown)
                    .limit(maximum.to_string()),
                );
            }
        }
    }

    fn check_registries(&mut self, allowed: &[String]) {
        // How a container's image not from an allowed registry is shown.
        let refused = |image: Option<&str>| match image {
            Some(image)
                if allowed
                    .iter()
                    .any(|p| image_allowed_by(&normalized_image(image), p)) =>
            {
                None
            }
            Some(image) => Some(format!("{image:?}")),
            None => Some("<none>".to_string()),
        };
        let mut bad = Vec::new();
        for (info, template) in &self.templates {
            let Some(spec) = template.get("spec") else {
                continue;
            };
            // A runtime patch carries no image (its containers' images are the runtime's).
            if runtime::is_patch_place(self.kind, &info.path_text) {
                continue;
            }
            // `kubectl debug` adds ephemeral containers to a running pod: their images too.
            for list in CONTAINER_LISTS.into_iter().chain(["ephemeralContainers"]) {
                let Some(containers) = spec.get(list).and_then(Value::as_array) else {
                    continue;
                };
                for (i, container) in containers.iter().enumerate() {
                    let place = format!("{}.{list}[{i}].image", info.spec_path_text());
                    let image = container.get("image").and_then(Value::as_str);
                    bad.extend(refused(image).map(|shown| (place, shown)));
                }
            }
        }
        // A TrainJob whose runtime is known: every image of the JobSet Trainer makes.
        for (view, (info, template)) in self
            .runtime
            .iter()
            .flat_map(|v| v.templates.iter().map(move |t| (v, t)))
        {
            let spec = workload::pod_spec(template);
            for (slot, c) in spec.into_iter().flat_map(|s| workload::containers(s, &[])) {
                let place = format!("{} {}[{}].image", view.label(info), slot.list, slot.index);
                let image = c.get("image").and_then(Value::as_str);
                bad.extend(refused(image).map(|shown| (place, shown)));
            }
        }
        // A TrainJob's image (unset and the runtime unknown: the runtime's).
        if let Some(rt) = self.kind.spec().runtime
            && self.runtime.is_none()
            && let Some(image) = runtime::settings(self.kind, self.object)
                .and_then(|t| t.get(rt.image))
                .and_then(Value::as_str)
            && let Some(shown) = refused(Some(image))
        {
            bad.push((format!("{}.{}", rt.settings.join("."), rt.image), shown));
        }
        let listed = allowed.join(", ");
        for (place, shown) in bad {
            self.report(
                Violation::new(
                    rules::LIMITS_ALLOWED_REGISTRIES,
                    format!(
                        "{place}={shown} is not from an allowed registry (allowedRegistries: {listed})"
                    ),
                )
                .at(place)
                .value(shown)
                .limit(listed.clone()),
            );
        }
    }
}

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
fn pod_part(label: &str, at_most: i64, pod: &PodGpus) -> String {
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
fn per_pod(template: &Map<String, Value>, resource: &str) -> Option<Quantity> {
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
fn amount(resources: &Value, resource: &str) -> Quantity {
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
fn templates_total(
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

/// Where `maxActiveDeadlineSeconds` reads the run-level deadline of a kind: its descriptor's
/// own field ([`crate::kinds::Run::deadline`]) and nothing else — another kind's field at
/// another path is no deadline of this kind (its CRD prunes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RunDeadline {
    /// One field of the object (dotted): set, it bounds the whole run.
    Run(&'static str),
    /// A field of each Job the kind runs (dotted, with `[*]` over the Jobs): it bounds the run
    /// when every Job sets it (a JobSet's replicated Jobs).
    EachJob(Vec<String>),
    /// No field of its own: only its pod templates' deadlines (a Volcano Job's tasks).
    Pods,
    /// Nothing bounds the run but deletion (a RayCluster): why, and what to use instead.
    Never {
        why: &'static str,
        set: &'static str,
    },
}

/// The kind's [`RunDeadline`], from its descriptor.
pub(super) fn run_deadline(kind: WorkloadKind) -> RunDeadline {
    match kind.spec().run.deadline {
        Deadline::Run(_, _, dotted) => RunDeadline::Run(dotted),
        Deadline::EachJob => RunDeadline::EachJob(
            kind.spec()
                .positions
                .iter()
                .filter_map(|position| {
                    // The Job spec holds the pod template: its deadline sits beside it.
                    let (_, job) = position.template.split_last()?;
                    let mut at = position.holders.path().join(".");
                    if matches!(position.holders, crate::kinds::Holders::Each(_)) {
                        at.push_str("[*]");
                    }
                    for key in job {
                        at.push('.');
                        at.push_str(key);
                    }
                    Some(format!("{at}.activeDeadlineSeconds"))
                })
                .collect(),
        ),
        Deadline::EachPod => RunDeadline::Pods,
        Deadline::Never { why, set } => RunDeadline::Never { why, set },
    }
}

/// True for a location checked on a controller-made Pod: inside the pod template, except the
/// pod's name, which the controller chooses (`generateName`).
pub(super) fn is_per_pod(anchor: Anchor, path: &FieldPath) -> bool {
    let controller_named = matches!(
        path.0.as_slice(),
        [Segment::Key(m), Segment::Key(n)] if m == "metadata" && (n == "name" || n == "generateName")
    );
    anchor == Anchor::PodTemplate && !controller_named
}

/// A TrainJob's runtime patch is a partial pod spec: what it leaves out is the runtime's, so
/// only what it sets is judged (a missing value there is no violation).
fn without_unset_patch_places(
    kind: WorkloadKind,
    places: Vec<(String, Option<&Value>)>,
) -> Vec<(String, Option<&Value>)> {
    places
        .into_iter()
        .filter(|(place, value)| value.is_some() || !runtime::is_patch_place(kind, place))
        .collect()
}

/// `spec.tasks[1].template`, or `pod` for a bare Pod.
fn template_label(info: &TemplateInfo) -> String {
    if info.path_text.is_empty() {
        "pod".to_string()
    } else {
        info.path_text.clone()
    }
}

impl QueueLimits {
    /// All violations of `object`, one message each, in a fixed order.
    fn violations(
        &self,
        queue: &str,
        candidate: &Candidate<'_>,
        sidecars: &[String],
        warnings: &mut Vec<rules::Warning>,
    ) -> Vec<Violation> {
        let Candidate {
            kind,
            object,
            namespace,
            scope,
            runtime,
            ..
        } = *candidate;
        let per_pod_only = scope != Scope::Workload;
        let rendered = rendered(kind, object, runtime);
        let mut templates = workload::templates(kind, object);
        // Its runtime patches are pod specs, judged like a Job's pod template.
        templates.extend(runtime::patch_templates(kind, object));
        let mut eval = Evaluation::new(
            queue,
            kind,
            object,
            templates,
            rendered.as_ref(),
            &self.shape,
            sidecars,
            candidate.accounting,
        );

        if !self.allowed_namespaces.is_empty() {
            let namespace =
                namespace.or_else(|| object.at("/metadata/namespace").and_then(Value::as_str));
            match namespace {
                Some(ns) if self.allowed_namespaces.iter().any(|a| a == ns) => {}
                Some(ns) => {
                    let listed = self.allowed_namespaces.join(", ");
                    eval.report(
                        Violation::new(
                            rules::LIMITS_ALLOWED_NAMESPACES,
                            format!("namespace {ns:?} is not allowed (allowedNamespaces: {listed})"),
                        )
                        .at("metadata.namespace")
                        .value(format!("{ns:?}"))
                        .limit(listed),
                    )
                }
                None => warnings.push(rules::Warning::new(
                    rules::LIMITS_NAMESPACE_UNKNOWN,
                    format!(
                        "queue {queue:?}: the namespace is unknown, so allowedNamespaces was not checked"
                    ),
                )),
            }
        }

        for variable in &self.variables {
            let source = Source::variable(&variable.name);
            for location in &variable.locations {
                if !eval.applies(location.anchor, self.template_kind)
                    || (per_pod_only && !is_per_pod(location.anchor, &location.path))
                {
                    continue;
                }
                let places =
                    eval.template_places(location.anchor, &location.template_path, &location.path);
                for (place, value) in places {
                    eval.reached.insert(place.clone());
                    if let [Piece::Variable(_)] = location.pattern.as_slice() {
                        eval.check_schema(&place, value, &variable.schema, &source);
                        continue;
                    }
                    // The variable is part of a string, e.g. `acme/{{image}}`.
                    let Some(value) = value.filter(|v| !v.is_null()) else {
                        eval.check_schema(&place, None, &variable.schema, &source);
                        continue;
                    };
                    let captured = value
                        .as_str()
                        .and_then(|s| template::match_pattern(&location.pattern, s));
                    let Some(captured) = captured else {
                        eval.report(
                            source
                                .violation(format!(
                                    "{place}={value} does not match the queue template's {:?} ({})",
                                    location.written, source.text
                                ))
                                .at(&place)
                                .value(value.to_string())
                                .limit(location.written.clone()),
                        );
                        continue;
                    };
                    let slots = location
                        .pattern
                        .iter()
                        .filter(|p| !matches!(p, Piece::Text(_)));
                    for (piece, text) in slots.zip(captured) {
                        if matches!(piece, Piece::Variable(n) if *n == variable.name) {
                            let part = Value::String(text.to_string());
                            if let Some(problem) = variable.schema.problem(&part) {
                                let shown = display_value(&part, Some(variable.schema.value_type));
                                eval.report(
                                    source
                                        .violation(format!(
                                            "{place}={value}: {{{{{}}}}}={shown} {problem} ({})",
                                            variable.name, source.text
                                        ))
                                        .at(&place)
                                        .value(shown)
                                        .bound(problem.text, problem.over_maximum),
                                );
                            }
                        }
                    }
                }
            }
        }

        for field in &self.fields {
            if per_pod_only && !is_per_pod(field.anchor, &field.path) {
                continue;
            }
            let source = Source::field(&field.written);
            for (place, value) in eval.places(field.anchor, &field.path) {
                eval.reached.insert(place.clone());
                eval.check_schema(&place, value, &field.schema, &source);
            }
        }

        eval.check_envelope(self);

        // A workload (not a controller's pod: its workload was judged) whose pods ask for
        // devices that cannot be counted, in a queue that limits GPUs.
        if scope == Scope::Workload && self.limits_gpus() {
            for why in eval.uncounted_devices() {
                eval.report(
                    Violation::new(
                        rules::ACCELERATORS_UNCOUNTED,
                        format!("{why}; the queue limits GPUs, so it cannot be admitted"),
                    )
                    .value(why),
                );
            }
        }

        if !per_pod_only {
            for leaf in &self.fixed_values {
                if eval.applies(leaf.anchor, self.template_kind) {
                    eval.check_fixed_value(leaf);
                }
            }
        }
        if scope != Scope::PerPod {
            for total in &self.totals {
                let gpus = self.is_whole_gpu(&total.resource);
                eval.check_total(&total.resource, &total.schema, gpus);
            }
        }
        if !per_pod_only && let Some(maximum) = self.max_active_deadline_seconds {
            eval.check_deadline(maximum);
        }

        if !self.allowed_registries.is_empty() {
            eval.check_registries(&self.allowed_registries);
        }

        eval.violations
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Pod of `n` containers, each over the cpu field limit of [`CPU_LIMIT`].
    fn busy_pod(n: usize) -> Value {
        let containers: Vec<Value> = (0..n)
            .map(|i| {
                serde_json::json!({"name": format!("c{i}"), "image": "acme/t:1",
                    "resources": {"limits": {"cpu": "8"}}})
            })
            .collect();
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": containers}})
    }

    const CPU_LIMIT: &str = "fields:\n  - {path: \"containers[*].resources.limits.cpu\", type: quantity, maximum: \"4\"}";

    #[test]
    fn an_updates_violations_are_compared_in_linear_work() {
        // Each violation of the new object is compared only with the old object's at its place
        // (the index): one comparison per violating container, twice as many for twice the
        // containers — never one per pair.
        let comparisons = |n: usize| {
            let pod = busy_pod(n);
            let admitted = structured(CPU_LIMIT, WorkloadKind::Pod, &pod, Scope::Workload);
            assert_eq!(admitted.len(), n, "one violation per container");
            let mut relabelled = pod.clone();
            relabelled["metadata"]["labels"] = serde_json::json!({"note": "x"});
            let found = structured(CPU_LIMIT, WorkloadKind::Pod, &relabelled, Scope::Workload);
            let index = Admitted::new(&admitted);
            assert!(found.iter().all(|v| index.carries(v)), "all carried");
            found
                .iter()
                .map(|v| index.at_place_of(v).len())
                .sum::<usize>()
        };
        assert_eq!(comparisons(2_450), 2_450);
        assert_eq!(comparisons(4_900), 4_900);
    }

    #[test]
    fn a_per_container_amount_over_its_maximum_passes_an_update_that_does_not_grow_it() {
        let at = |cpu: &str| {
            let mut pod = busy_pod(1);
            pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] = serde_json::json!(cpu);
            structured(CPU_LIMIT, WorkloadKind::Pod, &pod, Scope::Workload)
        };
        let admitted = at("8");
        assert!(admitted[0].over_maximum, "{admitted:?}");
        let index = Admitted::new(&admitted);
        for (cpu, passes) in [("8", true), ("6", true), ("8000m", true), ("9", false)] {
            let found = at(cpu);
            assert_eq!(found.len(), 1, "{cpu}");
            assert_eq!(index.carries(&found[0]), passes, "8 → {cpu}");
        }
        // Another kind of violation at the same place is compared by value: a type error
        // carried as it was, not another one.
        let typed = at("many");
        assert!(!typed[0].over_maximum);
        let index = Admitted::new(&typed);
        assert!(index.carries(&at("many")[0]));
        assert!(!index.carries(&at("lots")[0]));
    }

    #[test]
    fn a_kinds_deadline_counts_only_at_its_own_field() {
        let limits = "maxActiveDeadlineSeconds: 3600";
        let kind = |name: &str| WorkloadKind::named(name).unwrap();
        let messages = |k: WorkloadKind, object: &Value| violations_of(limits, k, object);
        // A PyTorchJob's deadline is spec.runPolicy's; spec.activeDeadlineSeconds (another
        // kind's place, pruned by its CRD) bounds nothing.
        let pytorch = |spec: Value| {
            let mut spec = spec;
            spec["pytorchReplicaSpecs"] = serde_json::json!({"Worker": {"replicas": 1,
                "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}}});
            serde_json::json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "metadata": {"name": "p"}, "spec": spec})
        };
        let elsewhere = messages(
            kind("PyTorchJob"),
            &pytorch(serde_json::json!({"activeDeadlineSeconds": 60})),
        );
        assert!(
            elsewhere.iter().any(|m| m.contains("is not set")),
            "{elsewhere:?}"
        );
        let own = messages(
            kind("PyTorchJob"),
            &pytorch(serde_json::json!({"runPolicy": {"activeDeadlineSeconds": 60}})),
        );
        assert!(own.is_empty(), "{own:?}");
        // A JobSet's deadline is each replicated Job's: every one sets it, or every pod
        // template does.
        let jobset = |first: Value, second: Value| {
            let job = |deadline: Value| {
                let mut spec = serde_json::json!({"template": {"spec": {
                    "containers": [{"name": "t", "image": "x"}]}}});
                if !deadline.is_null() {
                    spec["activeDeadlineSeconds"] = deadline;
                }
                serde_json::json!({"name": "w", "replicas": 1, "template": {"spec": spec}})
            };
            serde_json::json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": "j"}, "spec": {"activeDeadlineSeconds": 60,
                    "replicatedJobs": [job(first), job(second)]}})
        };
        let one_job = messages(kind("JobSet"), &jobset(serde_json::json!(60), Value::Null));
        assert!(
            one_job.iter().any(|m| m.contains("is not set")),
            "{one_job:?}"
        );
        assert!(
            messages(
                kind("JobSet"),
                &jobset(serde_json::json!(60), serde_json::json!(120))
            )
            .is_empty()
        );
        let long = messages(
            kind("JobSet"),
            &jobset(serde_json::json!(60), serde_json::json!(7200)),
        );
        assert_eq!(
            long,
            [
                "queue \"q\": spec.replicatedJobs[1].template.spec.activeDeadlineSeconds=7200 exceeds maximum 3600 (maxActiveDeadlineSeconds)"
            ]
        );
        // A RayCluster runs until it is deleted: no field of any kind bounds it.
        let cluster = serde_json::json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "r"}, "spec": {"activeDeadlineSeconds": 60,
                "headGroupSpec": {"template": {"spec": {"activeDeadlineSeconds": 60,
                    "containers": [{"name": "ray-head", "image": "x"}]}}}}});
        let found = structured(limits, kind("RayCluster"), &cluster, Scope::Workload);
        assert_eq!(
            rules::ids(&found),
            ["limits.maxActiveDeadlineSeconds"],
            "{found:?}"
        );
        assert!(
            found[0].message.contains("runs until it is deleted"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn images_are_normalised_before_prefix_matching() {
        assert_eq!(normalized_image("busybox"), "docker.io/library/busybox");
        assert_eq!(normalized_image("acme/train:1"), "docker.io/acme/train:1");
        assert_eq!(normalized_image("ghcr.io/acme/train"), "ghcr.io/acme/train");
        assert_eq!(normalized_image("localhost:5000/x"), "localhost:5000/x");
        assert_eq!(normalized_registry("acme"), "docker.io/acme");
        assert_eq!(normalized_registry("ghcr.io/acme"), "ghcr.io/acme");
        assert!(image_allowed_by("ghcr.io/acme/train:1", "ghcr.io/acme"));
        assert!(image_allowed_by(
            "docker.io/acme/train@sha256:00",
            "docker.io/acme/train"
        ));
        assert!(!image_allowed_by("ghcr.io/acme-evil/train", "ghcr.io/acme"));
        assert!(!image_allowed_by("evil.io/ghcr.io/acme/x", "ghcr.io/acme"));
    }

    /// The violations of `object` (a `kind`) under a queue `q` whose limits are `limits_yaml`.
    pub(crate) fn violations_of(
        limits_yaml: &str,
        kind: WorkloadKind,
        object: &Value,
    ) -> Vec<String> {
        violations_in_scope(limits_yaml, kind, object, Scope::Workload)
    }

    /// [`violations_of`] on the rules of `scope`.
    pub(crate) fn violations_in_scope(
        limits_yaml: &str,
        kind: WorkloadKind,
        object: &Value,
        scope: Scope,
    ) -> Vec<String> {
        structured(limits_yaml, kind, object, scope)
            .into_iter()
            .map(|v| v.message)
            .collect()
    }

    /// The violations as checks return them.
    fn structured(
        limits_yaml: &str,
        kind: WorkloadKind,
        object: &Value,
        scope: Scope,
    ) -> Vec<Violation> {
        let limits: String = limits_yaml
            .lines()
            .map(|l| format!("      {l}\n"))
            .collect();
        let policy = crate::Policy::from_yaml(&format!("queues:\n  q:\n    limits:\n{limits}"))
            .unwrap_or_else(|e| panic!("{e}"));
        let queue = policy.queue("q").unwrap();
        let candidate = Candidate {
            kind,
            object,
            old_object: None,
            namespace: Some("ns"),
            operation: &Operation::Create,
            scope,
            runtime: None,
            accounting: &crate::workload::consumption::offline(),
        };
        check_limits(
            &queue.name,
            &queue.limits,
            &candidate,
            &["istio-proxy".to_string()],
        )
        .violations
    }

    #[test]
    fn each_violation_names_its_rule_key_place_value_and_limit() {
        use serde_json::json;
        let limits = r#"template: |
  apiVersion: batch/v1
  kind: Job
  spec:
    backoffLimit: 0
    template:
      spec:
        containers:
          - name: train
            resources: {limits: {nvidia.com/gpu: "{{gpus}}"}}
strict: true
variables:
  gpus: {type: integer, maximum: 4}
fields:
  - {path: "containers[*].resources.limits.cpu", type: quantity, maximum: "4"}
totals:
  nvidia.com/gpu: {maximum: 8}
maxActiveDeadlineSeconds: 60
allowedRegistries: [ghcr.io/acme]
allowedNamespaces: [ml]"#;
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"backoffLimit": 2, "parallelism": 3, "activeDeadlineSeconds": 120,
            "template": {"spec": {"containers": [{"name": "train", "image": "evil.io/x",
                "resources": {"limits": {"nvidia.com/gpu": 8, "cpu": "6"}}}]}}}});
        let found = structured(limits, WorkloadKind::BatchJob, &job, Scope::Workload);
        let of = |id: &str| -> &Violation {
            found
                .iter()
                .find(|v| v.rule.id == id)
                .unwrap_or_else(|| panic!("no {id} in {found:#?}"))
        };
        let gpus = of("limits.variables");
        assert_eq!(gpus.key.as_deref(), Some("gpus"));
        assert_eq!(
            gpus.path.as_deref(),
            Some(r#"spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]"#)
        );
        assert_eq!(
            (gpus.value.as_deref(), gpus.limit.as_deref()),
            (Some("8"), Some("exceeds maximum 4"))
        );
        assert!(
            gpus.message.starts_with("queue \"q\": "),
            "{}",
            gpus.message
        );
        let cpu = of("limits.fields");
        assert_eq!(
            cpu.key.as_deref(),
            Some("containers[*].resources.limits.cpu")
        );
        assert_eq!(cpu.value.as_deref(), Some("6"));
        let total = of("limits.totals");
        assert_eq!(
            (total.key.as_deref(), total.value.as_deref()),
            (Some("nvidia.com/gpu"), Some("24"))
        );
        let strict = of("limits.strict");
        assert_eq!(strict.path.as_deref(), Some("spec.backoffLimit"));
        assert_eq!(
            (strict.value.as_deref(), strict.limit.as_deref()),
            (Some("2"), Some("0"))
        );
        let deadline = of("limits.maxActiveDeadlineSeconds");
        assert_eq!(
            (deadline.value.as_deref(), deadline.limit.as_deref()),
            (Some("120"), Some("60"))
        );
        let image = of("limits.allowedRegistries");
        assert_eq!(
            (image.path.as_deref(), image.value.as_deref()),
            (
                Some("spec.template.spec.containers[0].image"),
                Some("\"evil.io/x\"")
            )
        );
        let ns = of("limits.allowedNamespaces");
        assert_eq!(ns.value.as_deref(), Some("\"ns\""));
        // Every violation names a rule of the table.
        assert!(
            found
                .iter()
                .all(|v| rules::by_id(v.rule.id) == Some(v.rule))
        );
    }

    #[test]
    fn a_trainjob_queue_limits_its_nodes_resources_image_and_total() {
        use serde_json::json;
        let limits = r#"template: |
  apiVersion: trainer.kubeflow.org/v1alpha1
  kind: TrainJob
  spec:
    runtimeRef: {name: torch-distributed}
    trainer:
      image: "{{image}}"
      numNodes: "{{nodes}}"
      resourcesPerNode: {limits: {nvidia.com/gpu: "{{gpus}}"}}
variables:
  nodes: {type: integer, minimum: 1, maximum: 4}
  gpus: {type: integer, maximum: 8}
  image: {type: string, enum: ["acme/train:1"]}
totals:
  nvidia.com/gpu: {maximum: 16}
allowedRegistries: [docker.io/acme]"#;
        let tj = |nodes: i64, gpus: i64, image: &str| {
            json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": "run"},
                "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {
                    "image": image, "numNodes": nodes,
                    "resourcesPerNode": {"limits": {"nvidia.com/gpu": gpus}}}}})
        };
        assert!(
            violations_of(limits, WorkloadKind::TrainJob, &tj(2, 8, "acme/train:1")).is_empty()
        );
        let found = violations_of(limits, WorkloadKind::TrainJob, &tj(8, 16, "evil/x:1"));
        let text = found.join("\n");
        for expected in [
            r#"queue "q": spec.trainer.numNodes=8 exceeds maximum 4 (variable "nodes")"#,
            r#"queue "q": spec.trainer.resourcesPerNode.limits["nvidia.com/gpu"]=16 exceeds maximum 8 (variable "gpus")"#,
            r#"queue "q": spec.trainer.image="evil/x:1" is not one of"#,
            "total nvidia.com/gpu over all pods=128 exceeds maximum 16 (totals) (spec.trainer: 8 × 16)",
            r#"spec.trainer.image="evil/x:1" is not from an allowed registry"#,
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
        // numNodes left to the runtime: counted once, and said so.
        let mut unset = tj(1, 16, "acme/train:1");
        unset["spec"]["trainer"]
            .as_object_mut()
            .unwrap()
            .remove("numNodes");
        let text = violations_of(
            "totals:\n  nvidia.com/gpu: {maximum: 8}",
            WorkloadKind::TrainJob,
            &unset,
        )
        .join("\n");
        assert!(
            text.contains("(spec.trainer: 1 (numNodes unset) × 16)"),
            "{text}"
        );
    }

    #[test]
    fn a_trainjobs_runtime_patches_are_judged_like_a_jobs_pod_template() {
        use serde_json::json;
        // A queue written for batch/v1 Jobs: its pod-template positions and fields hold a
        // TrainJob's runtime patches, whichever kind the run is sent as.
        let limits = r#"template: |
  apiVersion: batch/v1
  kind: Job
  spec:
    template:
      spec:
        nodeSelector: {node.kubernetes.io/instance-type: "{{instance}}"}
        containers: [{name: train, image: acme/train:1}]
variables:
  instance: {type: string, enum: [a100]}
fields:
  - {path: serviceAccountName, type: string, enum: [default]}
  - {path: 'volumes[*].hostPath.path', type: string, enum: [/dev/shm]}
  - {path: 'tolerations[*].key', type: string, enum: [nvidia.com/gpu]}"#;
        let tj = |pod_spec: Value| {
            json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": "run"},
                "spec": {"runtimeRef": {"name": "torch"}, "runtimePatches": [
                    {"manager": "acme.io/tenant", "trainingRuntimeSpec": {"template": {"spec": {
                        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
                            "spec": pod_spec}}}}]}}}}]}})
        };
        // What the patch leaves out is the runtime's: nothing to judge.
        assert_eq!(
            violations_of(limits, WorkloadKind::TrainJob, &tj(json!({}))),
            Vec::<String>::new()
        );
        let escaping = tj(json!({
            "nodeSelector": {"node.kubernetes.io/instance-type": "h100"},
            "serviceAccountName": "cluster-admin",
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
            "containers": [{"name": "node", "securityContext": {"privileged": true}}]}));
        let at = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec";
        let found = violations_of(limits, WorkloadKind::TrainJob, &escaping);
        assert_eq!(
            found,
            [
                format!(
                    r#"queue "q": {at}.nodeSelector["node.kubernetes.io/instance-type"]="h100" is not one of "a100" (variable "instance")"#
                ),
                format!(
                    r#"queue "q": {at}.serviceAccountName="cluster-admin" is not one of "default" (field "serviceAccountName")"#
                ),
                format!(
                    r#"queue "q": {at}.volumes[0].hostPath.path="/" is not one of "/dev/shm" (field "volumes[*].hostPath.path")"#
                ),
                format!(
                    r#"queue "q": {at}.tolerations[0].key="dedicated" is not one of "nvidia.com/gpu" (field "tolerations[*].key")"#
                ),
            ]
        );
    }

    #[test]
    fn a_jobsets_replicated_jobs_are_bound_by_name_not_position() {
        use serde_json::json;
        let limits = r#"template: |
  apiVersion: jobset.x-k8s.io/v1alpha2
  kind: JobSet
  spec:
    replicatedJobs:
      - name: driver
        replicas: 1
        template: {spec: {template: {spec: {containers: [{name: d, resources: {limits: {nvidia.com/gpu: "{{driver_gpus}}"}}}]}}}}
      - name: workers
        replicas: "{{workers}}"
        template: {spec: {template: {spec: {containers: [{name: w, resources: {limits: {nvidia.com/gpu: "{{gpus}}"}}}]}}}}
variables:
  workers: {type: integer, maximum: 4}
  gpus: {type: integer, maximum: 8}
  driver_gpus: {type: integer, maximum: 0}"#;
        let rjob = |name: &str, replicas: i64, container: &str, gpus: i64| {
            json!({"name": name, "replicas": replicas, "template": {"spec": {"template": {"spec": {
                "containers": [{"name": container, "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}})
        };
        // The workers first: still the workers' limits, not the driver's.
        let js = json!({"spec": {"replicatedJobs": [rjob("workers", 16, "w", 8), rjob("driver", 1, "d", 0)]}});
        let found = violations_of(limits, WorkloadKind::JobSet, &js);
        assert_eq!(
            found,
            [
                r#"queue "q": spec.replicatedJobs[0].replicas=16 exceeds maximum 4 (variable "workers")"#
            ],
        );
        // A replicated job the template does not name is held to every one's positions.
        let extra = json!({"spec": {"replicatedJobs": [rjob("driver", 1, "d", 0), rjob("workers", 2, "w", 8),
            rjob("sneaky", 64, "w", 8)]}});
        let text = violations_of(limits, WorkloadKind::JobSet, &extra).join("\n");
        assert!(
            text.contains("spec.replicatedJobs[2].replicas=64 exceeds maximum 4"),
            "{text}"
        );
    }

    #[test]
    fn a_jobset_total_counts_replicas_times_pods_at_once() {
        use serde_json::json;
        let js = json!({"spec": {"replicatedJobs": [
            {"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 4,
                "template": {"spec": {"containers": [gpu_container(8)]}}}}}]}});
        let found = violations_of(
            "totals:\n  nvidia.com/gpu: {maximum: 32}",
            WorkloadKind::JobSet,
            &js,
        );
        assert_eq!(
            found,
            [
                r#"queue "q": total nvidia.com/gpu over all pods=64 exceeds maximum 32 (totals) (spec.replicatedJobs[0].template.spec.template: 8 × 8)"#
            ]
        );
    }

    fn gpu_container(gpus: i64) -> Value {
        serde_json::json!({"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}})
    }

    #[test]
    fn batch_job_total_counts_min_of_parallelism_and_completions() {
        use serde_json::json;
        let totals = "totals:\n  nvidia.com/gpu: {maximum: 8}";
        let job = |parallelism: Value, completions: Value| {
            let mut spec = json!({"template": {"spec": {"containers": [gpu_container(4)]}}});
            if !parallelism.is_null() {
                spec["parallelism"] = parallelism;
            }
            if !completions.is_null() {
                spec["completions"] = completions;
            }
            json!({"spec": spec})
        };
        let total = |p, c| violations_of(totals, WorkloadKind::BatchJob, &job(p, c));
        // 4 pods may be in flight, but only 2 completions are wanted: at most 2 run at once.
        assert_eq!(total(json!(4), json!(2)), Vec::<String>::new());
        // The API defaults: parallelism 1; completions unset means parallelism.
        assert_eq!(total(Value::Null, json!(10)), Vec::<String>::new());
        assert_eq!(
            total(json!(3), Value::Null),
            vec![
                r#"queue "q": total nvidia.com/gpu over all pods=12 exceeds maximum 8 (totals) (spec.template: 3 × 4)"#
            ]
        );
        assert_eq!(
            total(json!(5), json!(3)),
            vec![
                r#"queue "q": total nvidia.com/gpu over all pods=12 exceeds maximum 8 (totals) (spec.template: 3 × 4)"#
            ]
        );
    }

    #[test]
    fn elastic_pytorchjob_total_counts_max_replicas_of_the_workers() {
        use serde_json::json;
        let replica = |n: i64| json!({"replicas": n, "template": {"spec": {"containers": [gpu_container(2)]}}});
        let mut job = json!({"spec": {"pytorchReplicaSpecs": {"Worker": replica(1)}}});
        let totals = "totals:\n  nvidia.com/gpu: {maximum: 4}";
        assert!(violations_of(totals, WorkloadKind::PyTorchJob, &job).is_empty());
        job["spec"]["elasticPolicy"] = json!({"minReplicas": 1, "maxReplicas": 4});
        assert_eq!(
            violations_of(totals, WorkloadKind::PyTorchJob, &job),
            vec![
                r#"queue "q": total nvidia.com/gpu over all pods=8 exceeds maximum 4 (totals) (spec.pytorchReplicaSpecs.Worker.template: 4 × 2)"#
            ]
        );
    }

    #[test]
    fn per_pod_amount_follows_the_pod_resource_formula_with_native_sidecars() {
        use serde_json::json;
        let template = |spec: Value| json!({"spec": spec}).as_object().unwrap().clone();
        let gpus = |spec: Value| per_pod(&template(spec), "nvidia.com/gpu").map(|q| q.to_string());
        let c = |n: i64| gpu_container(n);
        let sidecar = |n: i64| {
            let mut s = gpu_container(n);
            s["restartPolicy"] = json!("Always");
            s
        };
        // Two app containers add up.
        assert_eq!(
            gpus(json!({"containers": [c(2), c(3)]})).as_deref(),
            Some("5")
        );
        // A plain init container runs alone: the larger of it and the app sum.
        assert_eq!(
            gpus(json!({"containers": [c(2)], "initContainers": [c(4)]})).as_deref(),
            Some("4")
        );
        // A native sidecar runs next to the app containers and the init containers after it.
        assert_eq!(
            gpus(json!({"containers": [c(2)], "initContainers": [sidecar(1)]})).as_deref(),
            Some("3")
        );
        assert_eq!(
            gpus(json!({"containers": [c(2)], "initContainers": [sidecar(1), c(4)]})).as_deref(),
            Some("5")
        );
        // An init container that ran before the sidecar started does not overlap with it.
        assert_eq!(
            gpus(json!({"containers": [c(2)], "initContainers": [c(4), sidecar(1)]})).as_deref(),
            Some("4")
        );
    }

    #[test]
    fn volcano_task_limits_bind_by_name_not_position() {
        use serde_json::json;
        let limits = r#"template: |
  apiVersion: batch.volcano.sh/v1alpha1
  kind: Job
  spec:
    tasks:
      - name: master
        replicas: 1
        template: {spec: {containers: [{image: x}]}}
      - name: worker
        replicas: '{{workers}}'
        template: {spec: {containers: [{image: x}]}}
variables:
  workers: {type: integer, minimum: 1, maximum: 4}"#;
        let task = |name: &str, replicas: i64| {
            json!({"name": name, "replicas": replicas,
                "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}})
        };
        let vc = |tasks: Vec<Value>| {
            json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                "spec": {"tasks": tasks}})
        };
        let ok = vc(vec![task("master", 1), task("worker", 4)]);
        assert!(violations_of(limits, WorkloadKind::VolcanoJob, &ok).is_empty());
        // Reordered: the worker task is first. Its 16 replicas are the workers variable.
        let reordered = vc(vec![task("worker", 16), task("master", 1)]);
        assert_eq!(
            violations_of(limits, WorkloadKind::VolcanoJob, &reordered),
            vec![r#"queue "q": spec.tasks[0].replicas=16 exceeds maximum 4 (variable "workers")"#]
        );
        // An extra task the template does not name is held to every task's limits.
        let extra = vc(vec![
            task("master", 1),
            task("worker", 2),
            task("worker2", 64),
        ]);
        assert_eq!(
            violations_of(limits, WorkloadKind::VolcanoJob, &extra),
            vec![r#"queue "q": spec.tasks[2].replicas=64 exceeds maximum 4 (variable "workers")"#]
        );
    }

    #[test]
    fn pytorchjob_replica_limits_bind_case_insensitively_and_reach_elastic_max() {
        use serde_json::json;
        let limits = r#"template: |
  apiVersion: kubeflow.org/v1
  kind: PyTorchJob
  spec:
    pytorchReplicaSpecs:
      Master:
        replicas: 1
        template: {spec: {containers: [{name: pytorch, image: x}]}}
      Worker:
        replicas: '{{workers}}'
        template: {spec: {containers: [{name: pytorch, image: x}]}}
variables:
  workers: {type: integer, maximum: 4}"#;
        let replica = |n: i64| json!({"replicas": n, "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}});
        let job = |worker_key: &str, n: i64| {
            json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "spec": {"pytorchReplicaSpecs": {"Master": replica(1), worker_key: replica(n)}}})
        };
        assert!(violations_of(limits, WorkloadKind::PyTorchJob, &job("Worker", 4)).is_empty());
        // `worker` is the Worker replica type for the training operator.
        assert_eq!(
            violations_of(limits, WorkloadKind::PyTorchJob, &job("worker", 32)),
            vec![
                r#"queue "q": spec.pytorchReplicaSpecs.worker.replicas=32 exceeds maximum 4 (variable "workers")"#
            ]
        );
        // An elastic job scales its workers up to maxReplicas.
        let mut elastic = job("Worker", 2);
        elastic["spec"]["elasticPolicy"] = json!({"minReplicas": 1, "maxReplicas": 32});
        assert_eq!(
            violations_of(limits, WorkloadKind::PyTorchJob, &elastic),
            vec![
                r#"queue "q": spec.elasticPolicy.maxReplicas=32 exceeds maximum 4 (variable "workers")"#
            ]
        );
    }

    #[test]
    fn controller_made_pods_are_checked_on_per_pod_rules_only() {
        use serde_json::json;
        let limits = r#"strict: true
template: |
  spec:
    activeDeadlineSeconds: 600
    template:
      metadata:
        name: trainer
      spec:
        containers:
          - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}
        restartPolicy: Never
variables:
  gpus: {type: integer, maximum: 4}
fields:
  - {path: spec.parallelism, type: integer, required: true}
totals:
  nvidia.com/gpu: {minimum: 2}
maxActiveDeadlineSeconds: 3600
allowedRegistries: [ghcr.io/acme]"#;
        let pod = |gpus: i64| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "train-"},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c",
                    "image": "ghcr.io/acme/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}})
        };
        // A pod verified as its Job's (its parallelism, totals, deadline and contract were
        // checked on the Job): allowed.
        assert_eq!(
            violations_in_scope(limits, WorkloadKind::Pod, &pod(1), Scope::PerPod),
            Vec::<String>::new(),
        );
        // Per-pod rules still hold for it.
        let mut over = pod(8);
        over["spec"]["containers"][0]["image"] = json!("docker.io/evil/x");
        assert_eq!(
            violations_in_scope(limits, WorkloadKind::Pod, &over, Scope::PerPod),
            vec![
                r#"queue "q": spec.containers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus")"#,
                r#"queue "q": spec.containers[0].image="docker.io/evil/x" is not from an allowed registry (allowedRegistries: ghcr.io/acme)"#,
            ]
        );
        // Any other pod: every rule.
        let found = violations_of(limits, WorkloadKind::Pod, &pod(1));
        assert_eq!(found.len(), 4, "{found:#?}");
        assert!(
            found
                .iter()
                .any(|v| v.contains("spec.parallelism is missing"))
        );
        assert!(found.iter().any(|v| v.contains("metadata.name is missing")));
        assert!(found.iter().any(|v| v.contains("(totals)")));
        assert!(
            found
                .iter()
                .any(|v| v.contains("activeDeadlineSeconds is not set"))
        );
    }

    #[test]
    fn literals_compare_numbers_by_value() {
        use serde_json::json;
        assert!(same_literal(&json!(4), &json!("4")));
        assert!(same_literal(&json!(4), &json!("4000m")));
        assert!(same_literal(&json!("Never"), &json!("Never")));
        assert!(!same_literal(&json!("Never"), &json!("OnFailure")));
        assert!(!same_literal(&json!(0), &json!(1)));
        assert!(!same_literal(&json!(0), &json!([0])));
    }
}
