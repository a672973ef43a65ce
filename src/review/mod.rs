//! The pure core: AdmissionReview request bytes + policy → AdmissionReview response bytes.
//!
//! No I/O, no clock, no globals. The server, the CLI, the tests and the benchmarks all call
//! [`review`] (or [`decide`] for an already parsed request).
//!
//! As the API server's admission chain is an ordered list of plugins, a review is an ordered
//! list of stages, each in its own module with the rules it owns; this file only orders them
//! ([`chain`]). A stage that answers the request ends the review.
//!
//! | stage | module | what it decides |
//! |---|---|---|
//! | parse | `request` | a usable AdmissionReview v1 |
//! | LaunchQueues | `launchqueue` | a queue as a Kubernetes object: refused when its spec would not hold |
//! | intermediate owners | `intermediate` | a StatefulSet carrying a launch kind's mark: only that kind's controller makes or changes one |
//! | scale | `subresource` | a Scale of a kind with a scale subresource: judged as the UPDATE of the workload it scales |
//! | selection | `select` | a launch workload of a known kind, a CREATE or UPDATE, a judged subresource; its queue; who made it (the rules' scope); what the queue admitted before |
//! | exemptions | `exempt` | the global list, the queue's, and what a verified child inherits: allowed untouched |
//! | runtime | `runtime` | the runtime a workload's pods come from, and the rules about it |
//! | mutation | `mutation`, `subresource` | `/mutate`: the mutators and the recorded patch; `pods/ephemeralcontainers` |
//! | validation | `validation` | `/validate`: the rules outside the limits, the queue's limits, Kueue labels |
//! | answer | `answer` | the response and summary, rendered once from the findings |

mod answer;
mod exempt;
mod intermediate;
mod launchqueue;
mod mutation;
mod request;
mod runtime;
mod select;
mod subresource;
mod validation;

pub use answer::{Decision, Outcome, OwnerRef, ReviewOutcome, ReviewSummary};
pub use request::{Endpoint, Observer, Phase, RequestError, parse_request};

use crate::admission::AdmissionRequest;
use crate::cluster::ClusterView;
use crate::mutate::{Findings, MutationContext};
use crate::policy::{OwnerClaim, Policy, Requester};
use crate::rules::{self, Warning};
use crate::validate::Scope;
use serde_json::Value;
use std::ops::ControlFlow;

/// The core entry point: request bytes in, response bytes out.
pub fn review(
    policy: &Policy,
    endpoint: Endpoint,
    body: &[u8],
    cluster: &dyn ClusterView,
) -> Result<ReviewOutcome, RequestError> {
    review_observed(policy, endpoint, body, cluster, &mut ())
}

/// [`review`], telling `observer` the phases as they begin and the request once parsed.
pub fn review_observed(
    policy: &Policy,
    endpoint: Endpoint,
    body: &[u8],
    cluster: &dyn ClusterView,
    observer: &mut dyn Observer,
) -> Result<ReviewOutcome, RequestError> {
    observer.phase(Phase::Parse);
    // Nothing here writes the objects out whole: their managed field sets stay text.
    let mut request = crate::json::raw_field_sets(|| parse_request(body))?;
    observer.request(&request);
    observer.phase(Phase::Policy);
    // The object is mutated in place; the patch is recorded as it is written.
    let object = request.object.take();
    let decision = settled(chain(policy, endpoint, &request, object, cluster, observer));
    let decision = answer::linked(policy.config.docs_url.as_deref(), decision);
    observer.phase(Phase::Serialise);
    let body = crate::admission::review_response_body(&decision.response);
    Ok(ReviewOutcome {
        body,
        summary: decision.summary,
    })
}

/// Decides on a parsed request. `dryRun` is deliberately not read: the answer is the same.
pub fn decide(
    policy: &Policy,
    endpoint: Endpoint,
    request: &AdmissionRequest,
    cluster: &dyn ClusterView,
) -> Decision {
    let decision = settled(chain(
        policy,
        endpoint,
        request,
        request.object.clone(),
        cluster,
        &mut (),
    ));
    answer::linked(policy.config.docs_url.as_deref(), decision)
}

/// The decision, whichever stage made it.
fn settled(flow: ControlFlow<Decision, Decision>) -> Decision {
    match flow {
        ControlFlow::Break(decision) | ControlFlow::Continue(decision) => decision,
    }
}

/// Decides on `object` (the request's object, held apart so it can be mutated in place) by the
/// stages of one review, in order; `observer` hears when the endpoint's rules begin.
fn chain(
    policy: &Policy,
    endpoint: Endpoint,
    request: &AdmissionRequest,
    object: Option<Value>,
    cluster: &dyn ClusterView,
    observer: &mut dyn Observer,
) -> ControlFlow<Decision, Decision> {
    launchqueue::check(policy, endpoint, request, object.as_ref())?;
    intermediate::guard(policy, endpoint, request, object.as_ref())?;
    if let Some(update) = subresource::scale(endpoint, request, object.as_ref(), cluster)? {
        let judged = settled(chain(
            policy,
            Endpoint::Validate,
            &update.request,
            Some(update.object),
            cluster,
            observer,
        ));
        return ControlFlow::Break(update.scaling.explain(judged));
    }
    let mut target = select::workload(policy, request, object)?;
    let who = Requester::of(request);
    let global = policy.config.match_rules.exemptions.as_slice();
    let global = exempt::check(policy, endpoint, request, &mut target, global, &who)?;
    let resolution = select::queue(policy, request, &mut target)?;
    let queue = resolution.queue;
    let own = exempt::check(
        policy,
        endpoint,
        request,
        &mut target,
        &queue.config.exemptions,
        &who,
    )?;
    let claim = select::owner(policy, &target, &who);
    exempt::inherited(policy, endpoint, request, &mut target, &claim, queue, &who)?;
    let before = select::admitted_before(
        policy,
        target.kind,
        request,
        queue,
        &who,
        matches!(claim, OwnerClaim::Verified(_)),
    );
    answer::describe_request(&mut target.summary, request, &target.object);
    // Why something that looks like it takes the object out of a rule does not: shown as
    // warnings, and under a denial's violations.
    let mut notes: Vec<Warning> = global
        .into_iter()
        .chain(own)
        .map(|why| Warning::new(rules::EXEMPTIONS_NOT_APPLIED, why))
        .collect();
    // An exemption belongs to the requesters it names: one it does not cover updating what it
    // exempted is judged as creating it.
    if let Some(name) = before.outside_exemption {
        notes.push(Warning::new(
            rules::EXEMPTIONS_NOT_APPLIED,
            format!(
                "launchgate: exemption {name:?} admitted this workload, but this update comes from {}, whom it does not cover: an exemption belongs to the requesters it names, so the update is judged as their CREATE, on every rule of queue {:?}",
                who.describe(),
                queue.name
            ),
        ));
    }
    let scope = select::scope(endpoint, claim, &mut notes);
    let runtime = runtime::lookup(
        cluster,
        target.kind,
        &target.object,
        request.namespace.as_deref(),
    );
    let ctx = MutationContext {
        kind: target.kind,
        queue_name: &queue.name,
        settings: queue.mutation_settings(),
        sidecars: &policy.config.match_rules.sidecar_containers,
        request,
        cluster,
        child: scope != Scope::Workload,
        runtime: runtime.found(),
        admitted: before.admitted,
        outside_exemption: before.outside_exemption,
        intent: Default::default(),
    };
    let mut findings = Findings::default();
    findings.add_warnings(resolution.warning.clone());
    findings.add_notes(notes);
    let (object, summary) = (&mut target.object, target.summary);
    ControlFlow::Continue(match endpoint {
        Endpoint::Mutate => {
            observer.phase(Phase::Mutate);
            if subresource::is_ephemeral(request) {
                subresource::ephemeral(&ctx, object, findings, summary)
            } else {
                mutation::decide(&ctx, object, findings, summary)
            }
        }
        Endpoint::Validate => {
            observer.phase(Phase::Validate);
            let judged = validation::Judged {
                kind: target.kind,
                request,
                queue,
                scope,
                runtime: &runtime,
                admitted: before.admitted,
                sidecars: &policy.config.match_rules.sidecar_containers,
                cluster,
            };
            validation::decide(&judged, object, findings, summary)
        }
    })
}

#[cfg(test)]
mod identity_tests;
#[cfg(test)]
mod stage_tests;
#[cfg(test)]
mod update_tests;
