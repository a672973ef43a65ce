//! Checking an admitted object against its queue's compiled limits: the evaluation of one
//! object here, each kind of limit in a part of its own — the template contract on a place
//! (`fields`), the envelope (`envelope`), totals (`totals`), the run's deadline (`deadline`),
//! registries (`images`) — and the comparison of an UPDATE with what was admitted
//! (`admitted`).

mod admitted;
mod deadline;
mod envelope;
mod fields;
mod images;
mod totals;

pub use admitted::{Admitted, add_violations, as_carried};
pub(super) use deadline::{RunDeadline, run_deadline};
pub(super) use images::normalized_registry;
pub use totals::{NotCounted, gpus_at_once};

use super::binding::{Source, TemplateShape};
use super::path::{self, FieldPath, Segment};
use super::schema::display_value;
use super::template::{self, Anchor, Piece};
use super::{LimitReport, QueueLimits};
use crate::admission::Operation;
use crate::json::Pointer as _;
use crate::kinds::RuntimeSpec;
use crate::rules::{self, Violation};
use crate::workload::consumption::Accounting;
use crate::workload::runtime::{self, TrainingRuntime};
use crate::workload::{self, TemplateInfo, WorkloadKind};
use serde_json::{Map, Value};
use std::collections::HashSet;

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
    use super::totals::per_pod;
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
}
