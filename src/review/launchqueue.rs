//! LaunchQueues: a `LaunchQueue` (`launchgate.io`) created or changed is refused when its spec
//! would not hold as a queue of the config the server serves, its key paths named on the
//! object (`spec.limits.fields[0].maximum`), so a typo is found at `kubectl apply`, not in a
//! pod log. Nothing else about it is judged here.

use super::answer::{Decision, Outcome, ReviewSummary, describe_request, finish, skip};
use super::request::Endpoint;
use crate::admission::{AdmissionRequest, Operation};
use crate::mutate::Findings;
use crate::policy::Policy;
use crate::policy::launchqueue::{self, GROUP, KIND};
use crate::rules::{self, Violation};
use serde_json::Value;
use std::ops::ControlFlow::{self, Break, Continue};

/// `Break`: the request is for a LaunchQueue, answered here; `Continue`: it is not.
pub(super) fn check(
    policy: &Policy,
    endpoint: Endpoint,
    request: &AdmissionRequest,
    object: Option<&Value>,
) -> ControlFlow<Decision> {
    if request.kind.group != GROUP || request.kind.kind != KIND {
        return Continue(());
    }
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
    let errors = match launchqueue::parse(object)
        .and_then(|queue| launchqueue::check(&policy.config, &queue))
    {
        Ok(()) => return Break(skip(request, summary, "not-a-workload")),
        Err(errors) => errors,
    };
    let mut summary = summary;
    describe_request(&mut summary, request, object);
    summary.outcome = Outcome::Denied;
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut findings = Findings::default();
    findings.add_violation(Violation::new(
        rules::LAUNCHQUEUE_INVALID,
        format!("launchgate: {KIND} {name:?} does not hold as a queue: {errors}"),
    ));
    Break(finish(
        &request.uid,
        findings,
        json_patch::Patch(Vec::new()),
        summary,
    ))
}
