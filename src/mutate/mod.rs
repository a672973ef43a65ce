//! Mutations: each a small module with one job, run in a fixed order on the object in place,
//! through [`Node`]s that record the JSON Patch as they write ([`crate::patch`]).

pub mod cache;
pub mod guardrails;
pub mod job_defaults;
pub mod kueue;
pub mod labels;
pub mod pytorch;
pub mod runtime_patch;
pub mod security_context;
pub mod visible_devices;

use crate::admission::AdmissionRequest;
use crate::cluster::ClusterView;
use crate::patch::{MapNode, Node};
use crate::pytorch::PytorchConfig;
use crate::rules::{self, Effect, Notice, Violation, Warning};
use crate::workload::consumption::Accounting;
use crate::workload::intent::UserIntent;
use crate::workload::{ContainerAt, ContainerRole, WorkloadKind};
use cache::CacheConfig;
use job_defaults::JobDefaultsConfig;
use security_context::SecurityContextConfig;
use serde_json::Value;

/// A queue's mutation settings, one per mutator.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    pub security_context: &'a SecurityContextConfig,
    pub job_defaults: &'a JobDefaultsConfig,
    pub cache: Option<&'a CacheConfig>,
    pub pytorch: &'a PytorchConfig,
    pub kueue: Option<&'a kueue::KueueConfig>,
    pub guardrails: &'a crate::topology::guardrails::GuardrailsConfig,
    pub visible_devices: &'a visible_devices::VisibleDevicesConfig,
    /// How GPUs are counted (`accelerators`, the same for every queue).
    pub accelerators: &'a crate::workload::consumption::Accelerators,
}

/// What a mutator sees besides the object.
pub struct MutationContext<'a> {
    pub kind: WorkloadKind,
    /// The queue's name as workloads write it (without its `entity/`).
    pub queue_name: &'a str,
    pub settings: Settings<'a>,
    /// Container names that are sidecars, never training containers (`match.sidecarContainers`).
    pub sidecars: &'a [String],
    pub request: &'a AdmissionRequest,
    /// Read-only snapshot of cluster state (owner Jobs); empty offline.
    pub cluster: &'a dyn ClusterView,
    /// The object was made by its launch workload's controller (verified: the Jobs of a JobSet,
    /// a TrainJob's JobSet, a Job's pods): its root got the workload-level mutations, so only
    /// what applies to every pod template is done again.
    pub child: bool,
    /// A TrainJob's runtime, when it could be read from the cluster.
    pub runtime: Option<&'a crate::workload::runtime::TrainingRuntime>,
    /// On an UPDATE, the old object when launchgate admitted it in this queue (judged, or
    /// exempted, when it came in); `None` on CREATE and on an UPDATE that brings the object
    /// into the queue, which is judged as a CREATE.
    pub admitted: Option<&'a Value>,
    /// On an UPDATE of an exempt workload (the old object carries launchgate's mark) from a
    /// requester no exemption covers that is no controller updating what it manages: the
    /// exemption the mark names. `admitted` is then `None`: the UPDATE is judged as that
    /// requester's CREATE.
    pub outside_exemption: Option<&'a str>,
    /// What the user wrote of the object ([`UserIntent`]), read when a mutator first asks
    /// ([`MutationContext::intent`]); `Default::default()` when the context is made.
    pub intent: std::cell::OnceCell<UserIntent>,
}

impl MutationContext<'_> {
    /// True for an UPDATE judged as a CREATE: one that brings the object into this queue, or
    /// one of an exempt workload from a requester its exemption does not cover.
    pub fn update_as_create(&self) -> bool {
        matches!(self.request.operation, crate::admission::Operation::Update)
            && self.admitted.is_none()
    }
}

impl MutationContext<'_> {
    /// What the user wrote of `object`, the request's object: read once per request (no
    /// mutator writes the records it is read from, the last-applied annotation and the
    /// managed fields).
    pub fn intent(&self, object: &Value) -> &UserIntent {
        self.intent.get_or_init(|| UserIntent::of(object))
    }

    /// The workload's namespace, where its pods' claims are: the request's, else the
    /// object's, else `default`.
    pub fn namespace<'v>(&'v self, object: &'v Value) -> &'v str {
        self.request.namespace_of(object)
    }

    /// How GPUs are counted for this request: the queue's accelerator map, with the pods'
    /// claims read from the cluster view in `namespace` ([`MutationContext::namespace`]).
    pub fn accounting<'v>(&'v self, namespace: &'v str) -> Accounting<'v> {
        Accounting {
            accelerators: self.settings.accelerators,
            claims: self.cluster,
            namespace,
        }
    }

    /// The object's name: `request.name`, else `metadata.name` (empty with `generateName`).
    pub fn object_name<'v>(&'v self, object: &'v Value) -> &'v str {
        self.request.object_name(object)
    }

    /// Calls `f` for every training container of a pod spec (`spec.containers` minus the
    /// configured sidecars) with its display path, e.g. `spec.containers[0] (trainer)`.
    pub fn for_each_training_container(
        &self,
        pod_spec: &mut MapNode<'_>,
        spec_path: &dyn std::fmt::Display,
        mut f: impl FnMut(&dyn std::fmt::Display, &mut MapNode<'_>),
    ) {
        crate::workload::for_each_container_mut(pod_spec, self.sidecars, |slot, c| {
            if slot.role == ContainerRole::App {
                let name = crate::workload::name_in(c).unwrap_or_default().to_string();
                f(
                    &ContainerAt {
                        spec_path,
                        slot,
                        name,
                    },
                    c,
                );
            }
        });
    }
}

impl MutationContext<'_> {
    /// Calls `f` on every pod spec of the workload with its dotted path (for a kind whose pods
    /// come from a runtime, the pod spec of launchgate's runtime patch, [`runtime_patch`]);
    /// true when a call changed something.
    pub fn for_each_pod_spec(
        &self,
        object: &mut Node<'_, Value>,
        mut f: impl FnMut(&mut MapNode<'_>, &dyn std::fmt::Display) -> bool,
    ) -> bool {
        if self.kind.spec().runtime.is_some() {
            return runtime_patch::with_trainer_pod_spec(self.kind, object, |spec, path| {
                f(&mut Node::scratch(spec), &path)
            });
        }
        let mut changed = false;
        crate::workload::for_each_template_mut(self.kind, object, |info, template| {
            if let Some(mut spec) = crate::workload::pod_spec_mut(template) {
                changed |= f(&mut spec, &info.spec_path());
            }
        });
        changed
    }
}

/// What the mutators and checks found, in the order found: violations of rules (whatever their
/// effect) and warnings, each naming its rule or notice ([`crate::rules`]). The answer is
/// rendered from it once: the denial message from the violations that deny, the warnings
/// kubectl prints from the warnings and the violations that warn.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Findings {
    found: Vec<Finding>,
}

/// One thing found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Finding {
    Violation(Violation),
    Warning(Warning),
    /// A warning that also explains a denial: why something that looks as if it takes the
    /// object out of a rule does not (shown as a warning, and under a denial's violations).
    Note(Warning),
}

impl Findings {
    /// Leaves a warning of `notice` for the user.
    pub fn warn(&mut self, notice: &'static Notice, message: impl Into<String>) {
        self.found
            .push(Finding::Warning(Warning::new(notice, message)));
    }

    /// Leaves a warning made elsewhere (a notice's, or a violation an UPDATE carries).
    pub fn add_warning(&mut self, warning: Warning) {
        self.found.push(Finding::Warning(warning));
    }

    /// Adds warnings made elsewhere.
    pub fn add_warnings(&mut self, warnings: impl IntoIterator<Item = Warning>) {
        self.found
            .extend(warnings.into_iter().map(Finding::Warning));
    }

    /// Adds warnings that also explain a denial, if there is one: each is shown as a warning,
    /// and under the violations in the denial message.
    pub fn add_notes(&mut self, notes: impl IntoIterator<Item = Warning>) {
        self.found.extend(notes.into_iter().map(Finding::Note));
    }

    /// Adds a violation, answered by its effect.
    pub fn add_violation(&mut self, violation: Violation) {
        self.found.push(Finding::Violation(violation));
    }

    /// Adds violations, each answered by its effect.
    pub fn add_violations(&mut self, violations: impl IntoIterator<Item = Violation>) {
        self.found
            .extend(violations.into_iter().map(Finding::Violation));
    }

    /// Every violation, in the order found.
    pub fn violations(&self) -> impl Iterator<Item = &Violation> {
        self.found.iter().filter_map(|f| match f {
            Finding::Violation(v) => Some(v),
            Finding::Warning(_) | Finding::Note(_) => None,
        })
    }

    /// The denial message: the messages of the violations that deny, one a line, then the
    /// notes; `None` when none denies. Bounded ([`rules::bounded_message`]): the first
    /// violations, `… and N more violations`, each line and the whole of a readable length.
    pub fn denial(&self) -> Option<String> {
        let lines: Vec<&str> = self
            .violations()
            .filter(|v| v.effect == Effect::Deny)
            .map(|v| v.message.as_str())
            .collect();
        if lines.is_empty() {
            return None;
        }
        let notes = self.found.iter().filter_map(|f| match f {
            Finding::Note(w) => Some(w.message.as_str()),
            _ => None,
        });
        Some(rules::bounded_message(lines.into_iter(), notes))
    }

    /// The warnings for the user, in the order found: each warning, and each violation that
    /// warns (with its rule's id).
    pub fn warnings(&self) -> Vec<Warning> {
        self.found
            .iter()
            .filter_map(|f| match f {
                Finding::Warning(w) | Finding::Note(w) => Some(w.clone()),
                Finding::Violation(v) if v.effect == Effect::Warn => Some(Warning::of(v)),
                Finding::Violation(_) => None,
            })
            .collect()
    }

    /// The violations, moved out, in the order found.
    pub fn into_violations(self) -> Vec<Violation> {
        self.found
            .into_iter()
            .filter_map(|f| match f {
                Finding::Violation(v) => Some(v),
                Finding::Warning(_) | Finding::Note(_) => None,
            })
            .collect()
    }

    /// The warnings' messages (for tests that read what kubectl prints).
    #[cfg(test)]
    pub fn warning_texts(&self) -> Vec<String> {
        self.warnings().into_iter().map(|w| w.message).collect()
    }

    /// The warnings' ids, in order.
    #[cfg(test)]
    pub fn warning_ids(&self) -> Vec<&'static str> {
        self.warnings().into_iter().map(|w| w.rule).collect()
    }
}

/// The warning for variables left unset because `envFrom` may set them.
pub(crate) fn env_from_warning(where_: &dyn std::fmt::Display, vars: &[(&str, String)]) -> Warning {
    let names: Vec<&str> = vars.iter().map(|(n, _)| *n).collect();
    let mut sources: Vec<&str> = vars.iter().map(|(_, s)| s.as_str()).collect();
    sources.dedup();
    Warning::new(
        rules::ENV_FROM,
        format!(
            "launchgate: {where_} may receive {} from envFrom ({}), whose keys launchgate cannot see: left unset, since an env entry would override that value; set them in env to have launchgate's values",
            names.join(", "),
            sources.join(", ")
        ),
    )
}

/// Applies a mutation in place; returns true when it changed the object. Must be idempotent:
/// a second call on its own output changes nothing.
pub type MutateFn = fn(&MutationContext<'_>, &mut Node<'_, Value>, &mut Findings) -> bool;

/// One mutation.
#[derive(Clone, Copy)]
pub struct Mutator {
    /// Stable name, recorded in the `launchgate.io/mutations` annotation.
    pub name: &'static str,
    pub run: MutateFn,
}

impl Mutator {
    /// The mutator `name` that runs `run`.
    pub const fn new(name: &'static str, run: MutateFn) -> Self {
        Mutator { name, run }
    }
}

/// The mutators, in the order they run. The label/annotation recorder runs last.
pub static MUTATORS: &[Mutator] = &[
    job_defaults::MUTATOR,
    security_context::MUTATOR,
    cache::MUTATOR,
    pytorch::MUTATOR,
    kueue::MUTATOR,
    guardrails::GANG,
    guardrails::PREEMPTION,
    guardrails::SUCCESS_POLICY,
    guardrails::SHARED_MEMORY,
    guardrails::DEADLINE,
    guardrails::MULTI_GPU,
    // After every mutator that adds a container (the PyTorch wiring's wait-for-master).
    visible_devices::MUTATOR,
];

/// Runs every mutator on `object`, then records the queue label and applied mutations.
/// Returns the names of the mutators that changed something.
pub fn apply_all(
    ctx: &MutationContext<'_>,
    object: &mut Node<'_, Value>,
    findings: &mut Findings,
) -> Vec<&'static str> {
    let mut applied = Vec::new();
    for m in MUTATORS {
        if (m.run)(ctx, object, findings) {
            applied.push(m.name);
        }
    }
    labels::record(ctx, object, &applied);
    applied
}

#[cfg(test)]
mod findings_tests {
    use super::*;

    #[test]
    fn the_answer_is_rendered_from_the_findings_in_order() {
        let mut f = Findings::default();
        f.warn(rules::CACHE_MOUNT_TAKEN, "first");
        f.add_violation(Violation::new(rules::LIMITS_TOTALS, "over").effect(Effect::Warn));
        f.add_violation(Violation::new(rules::GUARDRAILS_GANG, "short"));
        f.add_violation(Violation::new(rules::LIMITS_FIELDS, "audited").effect(Effect::Audit));
        f.add_violation(Violation::new(rules::LIMITS_VARIABLES, "too big"));
        f.add_notes([Warning::new(rules::OWNER_UNVERIFIED, "why")]);
        // The notes go under the denial's violations, and among the warnings.
        assert_eq!(f.denial().as_deref(), Some("short\ntoo big\nwhy"));
        assert_eq!(
            f.warning_ids(),
            ["cache.mountTaken", "limits.totals", "owner.unverified"]
        );
        assert_eq!(f.warning_texts(), ["first", "over", "why"]);
        assert_eq!(f.clone().into_violations().len(), 4);
        let mut allowed = Findings::default();
        allowed.add_violation(Violation::new(rules::LIMITS_FIELDS, "w").effect(Effect::Warn));
        allowed.add_notes([Warning::new(rules::OWNER_UNVERIFIED, "why")]);
        assert_eq!(allowed.denial(), None);
    }
}

/// Helpers for the mutators' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use crate::admission::AdmissionRequest;
    use crate::cluster::NoCluster;
    use crate::error::ConfigErrors;
    use crate::policy::Policy;

    /// A policy with one queue `q` (the default) whose body is `queue_body` (flow YAML).
    pub fn queue_yaml(queue_body: &str) -> Result<Policy, ConfigErrors> {
        let body = if queue_body.trim_start().starts_with('{') {
            queue_body.to_string()
        } else {
            format!("{{{queue_body}}}")
        };
        Policy::from_yaml(&format!("defaultQueue: q\nqueues:\n  q: {body}\n"))
    }

    /// Runs one mutator on `object` with queue `q` configured by `queue_body`.
    /// Also checks the mutator's "changed" answer against the real difference.
    pub fn mutate_with(mutator: &Mutator, queue_body: &str, object: Value) -> (Value, Findings) {
        let policy = queue_yaml(queue_body).expect("test config is valid");
        let kind = WorkloadKind::of_object(&object).expect("test object has a known kind");
        let request = AdmissionRequest::synthetic_create(object.clone(), Some("wandb")).unwrap();
        let queue = policy.queue("q").unwrap();
        let ctx = MutationContext {
            kind,
            queue_name: &queue.name,
            settings: queue.mutation_settings(),
            sidecars: &policy.config.match_rules.sidecar_containers,
            request: &request,
            cluster: &NoCluster,
            child: false,
            runtime: None,
            admitted: None,
            outside_exemption: None,
            intent: Default::default(),
        };
        let mut out = object.clone();
        let mut findings = Findings::default();
        let mut recorder = crate::patch::Recorder::default();
        let changed = (mutator.run)(
            &ctx,
            &mut Node::root(&mut out, &mut recorder),
            &mut findings,
        );
        assert_eq!(
            changed,
            out != object,
            "mutator {} misreports change",
            mutator.name
        );
        assert_eq!(
            recorder.patch(&out),
            crate::patch::diff::diff_tree(&object, &out),
            "mutator {} records another patch than the diff",
            mutator.name
        );
        (out, findings)
    }
}
