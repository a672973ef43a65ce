//! The validating webhook's stage: the rules outside the queue's limits (the unwirable PyTorch
//! job, a forged exemption mark, the guardrails, whose runtime may size the run), then the
//! queue's limits and Kueue labels, each answered by its own setting; an UPDATE of what was
//! admitted carries what its rule allows.

use super::answer::{Decision, Outcome, ReviewSummary, finish};
use super::runtime::{self, RuntimeState};
use crate::admission::Operation;
use crate::mutate::{self, Findings, MutationContext};
use crate::policy::{EXEMPTED_BY_ANNOTATION, Queue, exemption};
use crate::rules::{self, Effect, Violation, Warning};
use crate::validate::{self, Scope};
use serde_json::Value;

/// Judges `object` by the queue's validating rules.
pub(super) fn decide(
    ctx: &MutationContext<'_>,
    queue: &Queue,
    object: &Value,
    scope: Scope,
    state: &RuntimeState,
    mut findings: Findings,
    mut summary: ReviewSummary,
) -> Decision {
    // How GPUs are counted: the accelerator map, the pods' claims read from the cluster view
    // in the workload's namespace.
    let accounting = ctx.accounting(ctx.namespace(object));
    // The rules outside the queue's limits: each denies or warns by its own setting.
    let mut found: Vec<Violation> = Vec::new();
    let as_create = ctx.judged_as_create();
    if scope == Scope::Workload && as_create {
        found.extend(runtime::unverifiable_size(ctx.kind, queue, object, state));
    }
    if as_create {
        found.extend(validate::distributed::denials(
            ctx.kind,
            &queue.config.pytorch,
            object,
            ctx.object_name(object),
        ));
    }
    // A mark of exemption that launchgate did not write (a controller's pod or child workload
    // carries its owner's, which was judged when the owner was). Only a mark of what was
    // admitted in this queue is kept by an UPDATE.
    if scope == Scope::Workload {
        let forged = exemption::unearned_marks(ctx.kind, object, ctx.admitted);
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
            let run = ctx.kind.made_by().find(|k| k.spec().runtime.is_some())?;
            let owner = summary.owner.as_ref().map(|o| o.name.as_str());
            ctx.cluster.workload(
                run,
                ctx.request.namespace.as_deref().unwrap_or_default(),
                owner.unwrap_or_else(|| ctx.object_name(object)),
            )
        })
        .flatten();
    let run_rules = |object: &Value| -> Vec<Violation> {
        match scope {
            Scope::Workload => {
                let mut out: Vec<Violation> = runtime::untrusted(ctx.kind, queue, object)
                    .into_iter()
                    .collect();
                out.extend(
                    validate::guardrails::check(
                        &queue.name,
                        ctx.kind,
                        &queue.config.guardrails,
                        object,
                        ctx.runtime,
                        &accounting,
                    )
                    .violations,
                );
                out
            }
            Scope::PerPodAndRun => validate::guardrails::child_cost(
                &queue.name,
                &queue.config.guardrails,
                ctx.kind,
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
    let before = match ctx.admitted {
        Some(old) if !now.is_empty() => run_rules(old),
        _ => Vec::new(),
    };
    let before = validate::Admitted::new(&before);
    for v in now {
        if ctx.admitted.is_some() && before.carries(&v) {
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
            kind: ctx.kind,
            object,
            old_object: ctx.admitted,
            namespace: ctx.request.namespace.as_deref(),
            operation: &ctx.request.operation,
            scope,
            runtime: ctx.runtime,
            accounting: &accounting,
        },
        ctx.sidecars,
    );
    // The queue's Kueue labels: a workload's own (a controller's child has its root's), judged
    // on CREATE and UPDATE like a limit.
    if scope == Scope::Workload
        && let Some(cfg) = &queue.config.kueue
        && matches!(ctx.request.operation, Operation::Create | Operation::Update)
    {
        let found = mutate::kueue::violations(&queue.name, cfg, ctx.kind, object);
        let admitted = match ctx.admitted {
            Some(old) if !found.is_empty() => {
                mutate::kueue::violations(&queue.name, cfg, ctx.kind, old)
            }
            _ => Vec::new(),
        };
        validate::add_violations(&mut report, found, &admitted);
    }
    // A tenant's own NVIDIA_VISIBLE_DEVICES: a workload's (a controller's child has its
    // root's), judged on CREATE and UPDATE like a limit.
    if scope == Scope::Workload
        && queue.config.visible_devices.enabled
        && matches!(ctx.request.operation, Operation::Create | Operation::Update)
    {
        let judge = |object: &Value| {
            mutate::visible_devices::violations(&queue.name, ctx.kind, object, &accounting)
        };
        let found = judge(object);
        let admitted = match ctx.admitted {
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
        &ctx.request.uid,
        findings,
        json_patch::Patch(Vec::new()),
        summary,
    )
}
