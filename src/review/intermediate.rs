//! Intermediate owners: a StatefulSet whose pod template carries a launch kind's mark makes
//! pods that pass as that kind's ([`crate::kinds::Through::Owner`]), so only that kind's
//! controller may create it or change its spec ([`crate::policy::intermediate_guard`]).
//! Nothing else about it is launchgate's: it is never mutated, and every other request for it
//! is allowed untouched.

use super::answer::{Decision, Outcome, ReviewSummary, describe_request, finish, skip};
use super::request::Endpoint;
use crate::admission::{AdmissionRequest, Operation};
use crate::kinds::Intermediate;
use crate::mutate::Findings;
use crate::policy::{Policy, Requester, intermediate_guard};
use crate::rules::{self, Violation};
use serde_json::Value;
use std::ops::ControlFlow::{self, Break, Continue};

/// `Break`: the request is for an intermediate owner, answered here; `Continue`: it is not.
pub(super) fn guard(
    policy: &Policy,
    endpoint: Endpoint,
    request: &AdmissionRequest,
    object: Option<&Value>,
) -> ControlFlow<Decision> {
    let Some(via) = Intermediate::of(&request.kind.group, &request.kind.kind) else {
        return Continue(());
    };
    let summary = ReviewSummary::of(request, None);
    let judged = endpoint == Endpoint::Validate
        && matches!(request.operation, Operation::Create | Operation::Update)
        && request
            .sub_resource
            .as_deref()
            .unwrap_or_default()
            .is_empty();
    let Some(object) = object.filter(|_| judged) else {
        return Break(skip(request, summary, "not-a-workload"));
    };
    let who = Requester::of(request);
    let Some(why) = intermediate_guard(
        via.group,
        via.kind,
        object,
        request.old_object.as_ref(),
        &who,
        &policy.config.match_rules.pod_creators,
    ) else {
        return Break(skip(request, summary, "not-a-workload"));
    };
    let mut summary = summary;
    describe_request(&mut summary, request, object);
    summary.outcome = Outcome::Denied;
    let mut findings = Findings::default();
    findings.add_violation(Violation::new(rules::OWNER_INTERMEDIATE, why));
    Break(finish(
        &request.uid,
        findings,
        json_patch::Patch(Vec::new()),
        summary,
    ))
}
