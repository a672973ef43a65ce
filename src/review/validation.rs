//! The validating webhook's stage: the rules outside the queue's limits (the unwirable PyTorch
//! job, a forged exemption mark, the guardrails, whose runtime may size the run), then the
//! queue's limits and Kueue labels, each answered by its own setting; an UPDATE of what was
//! admitted carries what its rule allows.

use super::answer::{Decision, Outcome, ReviewSummary, finish};
use super::runtime::{self, RuntimeState};
use crate::admission::{AdmissionRequest, Operation};
use crate::cluster::ClusterView;
use crate::kinds::WorkloadKind;
use crate::mutate::{self, Findings};
use crate::policy::{EXEMPTED_BY_ANNOTATION, Queue, exemption};
use crate::rules::{self, Effect, Violation, Warning};
use crate::validate::{self, Scope};
use crate::workload::consumption::Accounting;
use serde_json::Value;

/// What the validating stage judges an object by: the request and the object's kind, the
/// queue and which of its rules apply, the runtime that sizes the run, and what launchgate
/// admitted before.
pub(super) struct Judged<'a> {
    pub kind: WorkloadKind,
    pub request: &'a AdmissionRequest,
    pub queue: &'a Queue,
    pub scope: Scope,
    /// A TrainJob's runtime, as far as it could be read.
    pub runtime: &'a RuntimeState,
    /// On an UPDATE, the old object when launchgate admitted it in this queue; `None` on
    /// CREATE and on an UPDATE judged as a CREATE.
    pub admitted: Option<&'a Value>,
    /// Container names that are sidecars, never training containers (`match.sidecarContainers`).
    pub sidecars: &'a [String],
    /// Read-only snapshot of cluster state: the run a child belongs to, the pods' claims.
    pub cluster: &'a dyn ClusterView,
}

/// Judges `object` by the queue's validating rules.
pub(super) fn decide(
    judged: &Judged<'_>,
    object: &Value,
    mut findings: Findings,
    mut summary: ReviewSummary,
) -> Decision {
    let Judged {
        kind,
        request,
        queue,
        scope,
        runtime: state,
        admitted,
        sidecars,
        cluster,
    } = *judged;
    // How GPUs are counted: the accelerator map, the pods' claims read from the cluster view
    // in the workload's namespace.
    let accounting = Accounting {
        accelerators: &queue.accelerators,
        claims: cluster,
        namespace: request.namespace_of(object),
    };
    // The rules outside the queue's limits: each denies or warns by its own setting.
    let mut found: Vec<Violation> = Vec::new();
    let as_create = request.judged_as_create(admitted);
    if scope == Scope::Workload && as_create {
        found.extend(runtime::unverifiable_size(kind, queue, object, state));
    }
    if as_create {
        found.extend(validate::distributed::denials(
            kind,
            &queue.config.pytorch,
            object,
            request.object_name(object),
        ));
    }
    // A mark of exemption that launchgate did not write (a controller's pod or child workload
    // carries its owner's, which was judged when the owner was). Only a mark of what was
    // admitted in this queue is kept by an UPDATE.
    if scope == Scope::Workload {
        let forged = exemption::unearned_marks(kind, object, admitted);
        if !forged.is_empty() {
            found.push(
                Violation::new(
                    rules::EXEMPTIONS_UNEARNED_MARK,
                    format!(
                        "launchgate: {} carries {EXEMPTED_BY_ANNOTATION}, which only launchgate writes (on a workload an exemption covers): remove it",
                        rules::listed(&forged)
                    ),
                )
                .at(forged.join(", ")),
            );
        }
    }
    // The run-level rules outside the limits, each answered by its own setting: the workload's
    // guardrails and whose runtime may size it; for a runtime-sized run's child (the JobSet
    // Trainer made for a TrainJob), the run's GPU-hour ceiling over the TrainJob's bound. A
    // controller's pod or a Job of a JobSet has its root's verdict.
    let parent = (scope == Scope::PerPodAndRun)
        .then(|| {
            let run = kind.made_by().find(|k| k.spec().runtime.is_some())?;
            let owner = summary.owner.as_ref().map(|o| o.name.as_str());
            cluster.workload(
                run,
                request.namespace.as_deref().unwrap_or_default(),
                owner.unwrap_or_else(|| request.object_name(object)),
            )
        })
        .flatten();
    let run_rules = |object: &Value| -> Vec<Violation> {
        match scope {
            Scope::Workload => {
                let mut out: Vec<Violation> = runtime::untrusted(kind, queue, object)
                    .into_iter()
                    .collect();
                out.extend(
                    validate::guardrails::check(
                        &queue.name,
                        kind,
                        &queue.config.guardrails,
                        object,
                        state.found(),
                        &accounting,
                    )
                    .violations,
                );
                out
            }
            Scope::PerPodAndRun => validate::guardrails::child_cost(
                &queue.name,
                &queue.config.guardrails,
                kind,
                object,
                parent.as_deref(),
                &accounting,
            )
            .into_iter()
            .collect(),
            Scope::PerPod => Vec::new(),
        }
    };
    let now = run_rules(object);
    // On an UPDATE of what was admitted, what its rule carries passes with a warning (the rule
    // table's `update`): the Ray autoscaler resizing within what was admitted, Kueue admitting
    // an exempt run.
    let before = match admitted {
        Some(old) if !now.is_empty() => run_rules(old),
        _ => Vec::new(),
    };
    let before = validate::Admitted::new(&before);
    for v in now {
        if admitted.is_some() && before.carries(&v) {
            let kept = validate::as_carried(v);
            findings.add_warning(Warning::of(&kept));
            summary.unchanged.push(kept);
        } else {
            found.push(v);
        }
    }
    findings.add_violations(found);
    let mut report = validate::check_limits(
        &queue.name,
        &queue.limits,
        &validate::Candidate {
            kind,
            object,
            old_object: admitted,
            namespace: request.namespace.as_deref(),
            operation: &request.operation,
            scope,
            runtime: state.found(),
            accounting: &accounting,
        },
        sidecars,
    );
    // The queue's Kueue labels: a workload's own (a controller's child has its root's), judged
    // on CREATE and UPDATE like a limit.
    if scope == Scope::Workload
        && let Some(cfg) = &queue.config.kueue
        && matches!(request.operation, Operation::Create | Operation::Update)
    {
        let found = mutate::kueue::violations(&queue.name, cfg, kind, object);
        let admitted = match admitted {
            Some(old) if !found.is_empty() => {
                mutate::kueue::violations(&queue.name, cfg, kind, old)
            }
            _ => Vec::new(),
        };
        validate::add_violations(&mut report, found, &admitted);
    }
    // A tenant's own NVIDIA_VISIBLE_DEVICES: a workload's (a controller's child has its
    // root's), judged on CREATE and UPDATE like a limit.
    if scope == Scope::Workload
        && queue.config.visible_devices.enabled
        && matches!(request.operation, Operation::Create | Operation::Update)
    {
        let judge = |object: &Value| {
            mutate::visible_devices::violations(&queue.name, kind, object, &accounting)
        };
        let found = judge(object);
        let admitted = match admitted {
            Some(old) if !found.is_empty() => judge(old),
            _ => Vec::new(),
        };
        validate::add_violations(&mut report, found, &admitted);
    }
    findings.add_warnings(report.warnings);
    summary.unchanged.extend(report.unchanged);
    summary.outcome = Outcome::Allowed;
    if !report.violations.is_empty() {
        let effect = report.enforcement.effect();
        summary.enforcement = Some(effect.as_str());
        if effect != Effect::Deny {
            summary.outcome = Outcome::AllowedWithViolations;
        }
        findings.add_violations(report.violations.into_iter().map(|v| v.effect(effect)));
    }
    finish(
        &request.uid,
        findings,
        json_patch::Patch(Vec::new()),
        summary,
    )
}
