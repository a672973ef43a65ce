//! Exemptions: by who asks and where, from the global list, then the queue's; a pod or child
//! workload its owner's controller verifiably made inherits its exempt owner's. An exempt
//! request is allowed untouched, the exemption named in the API server's audit log.

use super::answer::{Decision, finish};
use super::request::Endpoint;
use super::select::Target;
use crate::admission::{AdmissionRequest, Operation};
use crate::mutate::Findings;
use crate::patch::{Node, Recorder};
use crate::policy::{Exemption, OwnerClaim, Policy, Queue, Requester, exemption};
use std::ops::ControlFlow::{self, Break, Continue};

/// The exemptions of `list` (the global list, or the queue's): a request one covers is
/// answered here; otherwise why those whose labels the object carries did not apply.
pub(super) fn check(
    policy: &Policy,
    endpoint: Endpoint,
    request: &AdmissionRequest,
    target: &mut Target,
    list: &[Exemption],
    who: &Requester<'_>,
) -> ControlFlow<Decision, Vec<String>> {
    let check = policy.exemptions_for(list, target.kind, &target.object, who);
    match check.exempt_by {
        Some(exemption) => Break(exempted(endpoint, request, target, exemption)),
        None => Continue(check.not_applied),
    }
}

/// A pod (child workload) its owner's controller verifiably made for an exempt workload
/// inherits the exemption launchgate marked that workload with.
pub(super) fn inherited(
    policy: &Policy,
    endpoint: Endpoint,
    request: &AdmissionRequest,
    target: &mut Target,
    claim: &OwnerClaim,
    queue: &Queue,
    who: &Requester<'_>,
) -> ControlFlow<Decision> {
    if matches!(claim, OwnerClaim::Verified(_))
        && let Some(exemption) = exemption::inherited(
            &[
                &policy.config.match_rules.exemptions,
                &queue.config.exemptions,
            ],
            target.kind,
            &target.object,
            who.namespace,
        )
    {
        return Break(exempted(endpoint, request, target, exemption));
    }
    Continue(())
}

/// A request an exemption covers: allowed untouched, the exemption named in the API server's
/// audit log. On CREATE the mutating webhook marks the workload (and its pod templates) with the
/// exemption's name: what its pods and child workloads inherit it by.
fn exempted(
    endpoint: Endpoint,
    request: &AdmissionRequest,
    target: &mut Target,
    exemption: &Exemption,
) -> Decision {
    let mut decision = target.skip(request, "exempt");
    if endpoint == Endpoint::Mutate && matches!(request.operation, Operation::Create) {
        let mut marked = std::mem::take(&mut target.object);
        let mut recorder = Recorder::default();
        if exemption::write_marks(
            target.kind,
            &mut Node::root(&mut marked, &mut recorder),
            &exemption.name,
        ) {
            let patch = recorder.patch(&marked);
            let summary = std::mem::take(&mut decision.summary);
            decision = finish(&request.uid, Findings::default(), patch, summary);
        }
    }
    decision
        .response
        .audit_annotations
        .insert("exempted-by".into(), exemption.name.clone());
    decision.summary.exempted_by = Some(exemption.name.clone());
    decision
}
