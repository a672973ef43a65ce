//! The mutating webhook's stage: the queue's mutators in order, the patch recorded as they
//! write, and an UPDATE judged by what it may change.

use super::answer::{Decision, ReviewSummary, finish_mutated};
use crate::admission::Operation;
use crate::mutate::{self, Findings, MutationContext};
use crate::patch::{Node, Recorder, diff};
use crate::policy::{EXEMPTED_BY_ANNOTATION, exemption};
use crate::rules;
use serde_json::Value;

/// Mutates `object` in place by the queue's mutators; the decision carries the recorded patch.
pub(super) fn decide(
    ctx: &MutationContext<'_>,
    object: &mut Value,
    mut findings: Findings,
    summary: ReviewSummary,
) -> Decision {
    // An UPDATE judged as a CREATE — one that brings the object into the queue, or one of an
    // exempt workload from a requester its exemption does not cover: what an UPDATE may change
    // of what a CREATE would write — the queue's Kueue labels, and no exemption mark launchgate
    // did not give this request on the object itself (one left on a pod template is denied by
    // the validating webhook; templates are not rewritten on UPDATE).
    if ctx.update_as_create() && !ctx.child {
        let mut recorder = Recorder::default();
        let mut root = Node::root(object, &mut recorder);
        mutate::kueue::mutate(ctx, &mut root, &mut findings);
        if exemption::strip_own_mark(&mut root) {
            let why = match ctx.outside_exemption {
                Some(name) => format!(
                    "this update comes from {}, whom exemption {name:?} does not cover, so it is judged as their CREATE",
                    crate::policy::Requester::of(ctx.request).describe()
                ),
                None => format!(
                    "this update brings the workload into queue {:?}",
                    ctx.queue_name
                ),
            };
            findings.warn(rules::EXEMPTIONS_MARK_REMOVED, format!(
                "launchgate: removed the {EXEMPTED_BY_ANNOTATION} annotation: {why}, and launchgate writes it only on a workload an exemption covers"
            ));
        }
        let patch = recorder.patch(object);
        return finish_mutated(&ctx.request.uid, findings, patch, summary);
    }
    // Pod specs and Job templates are immutable after CREATE: only CREATE is mutated.
    if !matches!(ctx.request.operation, Operation::Create) {
        return finish_mutated(
            &ctx.request.uid,
            findings,
            json_patch::Patch(Vec::new()),
            summary,
        );
    }
    // Debug builds (every test) hold the recorded patch equal to the diff from a copy made
    // before mutating; release builds make no copy.
    let copy = cfg!(debug_assertions).then(|| diff::copy_without_managed_fields(object));
    let managed_fields = cfg!(debug_assertions).then(|| diff::managed_fields(object).cloned());
    let mut recorder = Recorder::default();
    let mut root = Node::root(object, &mut recorder);
    mutate::apply_all(ctx, &mut root, &mut findings);
    // Only launchgate marks a workload exempt, and only when an exemption covers it (this one
    // is not exempt): a mark it carries was not launchgate's, or names an exemption that no
    // longer covers it.
    if exemption::strip_marks(ctx.kind, &mut root) {
        findings.warn(rules::EXEMPTIONS_MARK_REMOVED, format!(
            "launchgate: removed the {EXEMPTED_BY_ANNOTATION} annotation: launchgate writes it, on a workload an exemption covers, and no exemption covers this one"
        ));
    }
    let patch = recorder.patch(object);
    if let Some(copy) = copy {
        assert_eq!(
            patch,
            diff::diff_copy(&copy, object),
            "the recorded patch is the diff"
        );
    }
    if let Some(before) = managed_fields {
        assert_eq!(
            diff::managed_fields(object),
            before.as_ref(),
            "a mutator changed metadata.managedFields, which the patch never carries"
        );
    }
    finish_mutated(&ctx.request.uid, findings, patch, summary)
}
