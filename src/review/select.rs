//! Selection: whether launchgate judges the request at all (a launch workload of a kind it
//! knows, a CREATE or UPDATE of the object or a subresource that changes what the limits
//! cover), the queue it belongs to, who made it (which rules apply: the workload's, or a
//! controller's pod's), and what the queue admitted before.

use super::answer::{Decision, ReviewSummary, skip};
use super::request::Endpoint;
use crate::admission::{AdmissionRequest, Operation};
use crate::policy::{
    OwnerClaim, Policy, Queue, QueueResolution, Requester, WorkloadMatch, exemption,
    is_workload_updater, owner_claim,
};
use crate::rules::{self, Warning};
use crate::validate::Scope;
use crate::workload::WorkloadKind;
use serde_json::Value;
use std::ops::ControlFlow::{self, Break, Continue};

/// A launch workload launchgate judges, and what is known of the request so far.
pub(super) struct Target {
    pub(super) kind: WorkloadKind,
    pub(super) object: Value,
    pub(super) summary: ReviewSummary,
}

impl Target {
    /// Leaves the request alone for `why`.
    pub(super) fn skip(&mut self, request: &AdmissionRequest, why: &'static str) -> Decision {
        skip(request, std::mem::take(&mut self.summary), why)
    }
}

/// The request's object when launchgate judges it: a launch workload of a kind it knows, a
/// CREATE or UPDATE of the object or of a subresource that changes what the queue's limits
/// cover (docs/queue-limits.md lists them; status, binding, eviction, … are not judged).
pub(super) fn workload(
    policy: &Policy,
    request: &AdmissionRequest,
    object: Option<Value>,
) -> ControlFlow<Decision, Target> {
    let kind = WorkloadKind::from_gvk(
        &request.kind.group,
        &request.kind.version,
        &request.kind.kind,
    );
    let summary = ReviewSummary::of(request, kind);
    let (Some(kind), Some(object)) = (kind, object) else {
        return Break(skip(request, summary, "not-a-workload"));
    };
    if !matches!(request.operation, Operation::Create | Operation::Update) || !object.is_object() {
        return Break(skip(request, summary, "operation"));
    }
    let sub_resource = request.sub_resource.as_deref().unwrap_or_default();
    if !sub_resource.is_empty() && !kind.spec().subresources.contains(&sub_resource) {
        return Break(skip(request, summary, "subresource"));
    }
    if policy.classify(kind, &object) != WorkloadMatch::Launch {
        return Break(skip(request, summary, "not-launch"));
    }
    Continue(Target {
        kind,
        object,
        summary,
    })
}

/// The queue the workload belongs to; with none (and no default queue), left alone with a
/// warning.
pub(super) fn queue<'p>(
    policy: &'p Policy,
    request: &AdmissionRequest,
    target: &mut Target,
) -> ControlFlow<Decision, QueueResolution<'p>> {
    let Some(resolution) =
        policy.resolve_queue(target.kind, &target.object, request.namespace.as_deref())
    else {
        let mut d = target.skip(request, "no-queue");
        let warning = Warning::new(
            rules::QUEUE_NONE,
            "launchgate: launch workload names no configured queue and no default queue is set; nothing was checked",
        );
        d.response.warnings.push(warning.message.clone());
        d.summary.warnings.push(warning);
        return Break(d);
    };
    target.summary.queue = Some(resolution.queue.name.clone());
    Continue(resolution)
}

/// Made by its launch workload's controller (verified), or not.
pub(super) fn owner(policy: &Policy, target: &Target, who: &Requester<'_>) -> OwnerClaim {
    let creators = &policy.config.match_rules.pod_creators;
    owner_claim(target.kind, &target.object, who, creators)
}

/// Which rules apply, by who made the object; an owner named but not verified is said in
/// `notes` (by the validating webhook, and by the mutating one when the object is a child
/// workload taken for a standalone one, wired as one).
pub(super) fn scope(endpoint: Endpoint, claim: OwnerClaim, notes: &mut Vec<Warning>) -> Scope {
    match claim {
        // The JobSet Trainer makes for a TrainJob is the TrainJob's size as Trainer rendered
        // it from the runtime (which may have changed since the TrainJob was admitted): the
        // per-run rules (totals, the GPU-hour ceiling) are checked too, against the queue its
        // labels name (launchgate's runtime patch puts the TrainJob's queue label on the
        // trainer's pods).
        OwnerClaim::Verified(owner) if owner.spec().runtime.is_some() => Scope::PerPodAndRun,
        OwnerClaim::Verified(_) => Scope::PerPod,
        OwnerClaim::None => Scope::Workload,
        OwnerClaim::Unverified { why, standalone } => {
            match endpoint {
                Endpoint::Validate => notes.push(Warning::new(rules::OWNER_UNVERIFIED, why)),
                // A child workload taken for a standalone one is mutated as one (its own
                // wiring): the mutating webhook says so, and where its controller belongs.
                Endpoint::Mutate => {
                    notes.extend(standalone.map(|why| Warning::new(rules::OWNER_UNVERIFIED, why)))
                }
            }
            Scope::Workload
        }
    }
}

/// What launchgate admitted in `queue` before this request, and why an UPDATE is judged as a
/// CREATE when it is.
pub(super) struct Before<'r> {
    /// On an UPDATE, the old object when it already was a launch workload of the same queue —
    /// launchgate judged it (or an exemption covered it) when it came in — and this requester
    /// may carry what it was admitted with.
    pub(super) admitted: Option<&'r Value>,
    /// On an UPDATE of an exempt workload (the old object carries launchgate's mark) from a
    /// requester no exemption covers that is no controller updating what it manages: the
    /// exemption the mark names. The UPDATE is judged as that requester's CREATE.
    pub(super) outside_exemption: Option<&'r str>,
}

/// What launchgate admitted in `queue` before this request. An object that was no launch
/// workload, or another queue's, was never judged here: an UPDATE that brings it in is judged as
/// a CREATE, with nothing carried over (no "already so", no mark kept). So is an UPDATE of an
/// exempt workload from a requester no exemption covers (the ones it covers were answered
/// before): an exemption belongs to the requesters it names, not to the object, and what it
/// admitted is carried only for them — who are answered as exempt — and for the controllers
/// that update what they manage: the object's owner's controller (`by_controller`, verified)
/// and `match.workloadUpdaters` (Kueue admitting the run).
pub(super) fn admitted_before<'r>(
    policy: &Policy,
    kind: WorkloadKind,
    request: &'r AdmissionRequest,
    queue: &Queue,
    who: &Requester<'_>,
    by_controller: bool,
) -> Before<'r> {
    let none = Before {
        admitted: None,
        outside_exemption: None,
    };
    if !matches!(request.operation, Operation::Update) {
        return none;
    }
    let Some(old) = request.old_object.as_ref() else {
        return none;
    };
    if !policy.in_queue(kind, old, request.namespace.as_deref(), queue) {
        return none;
    }
    let controller =
        by_controller || is_workload_updater(&policy.config.match_rules.workload_updaters, who);
    match exemption::mark_of(kind, old) {
        Some(name) if !controller => Before {
            admitted: None,
            outside_exemption: Some(name),
        },
        _ => Before {
            admitted: Some(old),
            outside_exemption: None,
        },
    }
}
