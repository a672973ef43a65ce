//! The pure core: AdmissionReview request bytes + policy → AdmissionReview response bytes.
//!
//! No I/O, no clock, no globals. The server, the CLI, the tests and the benchmarks all call
//! [`review`] (or [`decide`] for an already parsed request).

use crate::admission::{
    ADMISSION_API_VERSION, ADMISSION_KIND, AdmissionRequest, AdmissionResponse,
    AdmissionReviewRequest, Operation,
};
use crate::cluster::{ClusterView, RuntimeLookup};
use crate::json::Pointer as _;
use crate::kinds::RuntimeSpec;
use crate::mutate::{self, Findings, MutationContext};
use crate::patch::{Node, Recorder, diff};
use crate::policy::{
    EXEMPTED_BY_ANNOTATION, Exemption, OwnerClaim, Policy, Queue, Requester, WorkloadMatch,
    exemption, owner_claim,
};
use crate::rules::{self, Effect, Violation, Warning};
use crate::validate::{self, Enforcement, Scope, TrainingRuntimes, UnverifiableRuntime};
use crate::workload::WorkloadKind;
use crate::workload::runtime::{self, RuntimeRef, TrainingRuntime};
use serde_json::Value;
use std::fmt;

/// Which webhook is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// The mutating webhook (`/mutate`).
    Mutate,
    /// The validating webhook (`/validate`).
    Validate,
}

impl Endpoint {
    /// The endpoint's path name (`mutate`, `validate`), as in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Mutate => "mutate",
            Endpoint::Validate => "validate",
        }
    }
}

/// A request body that is not a usable AdmissionReview (answered with HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError(pub String);

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RequestError {}

/// How a request was answered (for metrics and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Outcome {
    /// Not ours (kind, operation, not a launch workload, exempt): allowed untouched.
    #[default]
    Skipped,
    /// Allowed with no change.
    Allowed,
    /// Allowed with a patch.
    Patched,
    /// Allowed despite violations (warn or audit enforcement).
    AllowedWithViolations,
    /// Denied.
    Denied,
}

impl Outcome {
    /// The outcome as a metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Skipped => "skipped",
            Outcome::Allowed => "allowed",
            Outcome::Patched => "patched",
            Outcome::AllowedWithViolations => "violations_allowed",
            Outcome::Denied => "denied",
        }
    }
}

/// The phases of one review, in order; [`review_observed`] reports each as it begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Reading the AdmissionReview out of the body.
    Parse,
    /// Matching: workload kind, operation and subresource, launch workload or not, exemptions,
    /// the queue.
    Policy,
    /// The mutating rules and the patch (`/mutate`).
    Mutate,
    /// The validating rules and the queue's limits (`/validate`).
    Validate,
    /// Writing the AdmissionReview response.
    Serialise,
}

impl Phase {
    /// The phase's name: `parse`, `policy`, `mutate`, `validate`, `serialise`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Parse => "parse",
            Phase::Policy => "policy",
            Phase::Mutate => "mutate",
            Phase::Validate => "validate",
            Phase::Serialise => "serialise",
        }
    }
}

/// What the caller of [`review_observed`] hears while the core works: each phase as it begins
/// (so the previous one ends), and the request once it is parsed. The core reads no clock; a
/// caller that times the phases does it here. `()` hears nothing.
pub trait Observer {
    /// `phase` begins (and the phase before it, if any, ends).
    fn phase(&mut self, phase: Phase);
    /// The request, right after parsing.
    fn request(&mut self, request: &AdmissionRequest) {
        let _ = request;
    }
}

impl Observer for () {
    fn phase(&mut self, _: Phase) {}
}

/// A summary of one decision for metrics and logs.
#[derive(Debug, Clone, Default)]
pub struct ReviewSummary {
    /// The workload kind (`Pod`, `Job`, `VolcanoJob`, `PyTorchJob`) or `other`.
    pub kind: &'static str,
    /// The operation (`CREATE`, `UPDATE`, …).
    pub operation: &'static str,
    /// How the request was answered.
    pub outcome: Outcome,
    /// The queue the workload resolved to.
    pub queue: Option<String>,
    /// The exemption that left the request alone, when one did.
    pub exempted_by: Option<String>,
    /// Why a skipped request was left alone: `not-a-workload` (a kind launchgate does not
    /// handle, or no object), `operation` (not a CREATE or UPDATE of an object),
    /// `subresource`, `not-launch` (not a launch workload), `exempt`, `no-queue` (no queue
    /// and no default queue), `scale` (a PyTorchJob Scale whose PyTorchJob could not be read and
    /// that is not a scale-up).
    pub skipped: Option<&'static str>,
    /// Operations in the JSON Patch sent.
    pub patch_operations: usize,
    /// Size of the JSON Patch as sent (before base64), bytes.
    pub patch_bytes: usize,
    /// Violations found under `audit` enforcement (logged and counted, not shown).
    pub audit_violations: Vec<String>,
    /// The request was a dry run.
    pub dry_run: bool,
    /// `request.uid`.
    pub uid: String,
    /// `request.namespace` (empty for cluster-scoped objects).
    pub namespace: String,
    /// `request.name`; empty on a CREATE that relies on `generateName`.
    pub name: String,
    /// `metadata.generateName` of the object, when it has one.
    pub generate_name: String,
    /// The kind as the API server sent it (`Job`, `Pod`, `PyTorchJob`).
    pub api_kind: String,
    /// `apiVersion` of the object (`batch/v1`, `batch.volcano.sh/v1alpha1`).
    pub api_version: String,
    /// `metadata.uid` of the object (set on UPDATE; empty on CREATE).
    pub object_uid: String,
    /// The controlling owner of the object (`ownerReferences` entry with `controller: true`).
    pub owner: Option<OwnerRef>,
    /// `userInfo.username`.
    pub user: String,
    /// Every rule violation found — the queue's limits whatever their enforcement (deny, warn
    /// or audit), the guardrails, the PyTorch wiring's, launchgate's own denials — each naming
    /// its rule ([`crate::rules`]) and its effect.
    pub violations: Vec<Violation>,
    /// The violations of the queue's limits an UPDATE left as they were: allowed with a
    /// warning (their message), not counted as violations.
    pub unchanged: Vec<Violation>,
    /// The queue's limit enforcement when its limits were violated (`deny`, `warn`, `audit`).
    pub enforcement: Option<&'static str>,
    /// The denial message sent to the client.
    pub message: Option<String>,
    /// The warnings sent to the client, each with its rule's or notice's id.
    pub warnings: Vec<Warning>,
}

/// The controller owning an object (for Events about a controller-made pod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    /// Its `apiVersion`.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its `metadata.uid`.
    pub uid: String,
}

/// The decision on one request: the response plus its summary.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The AdmissionReview response.
    pub response: AdmissionResponse,
    /// The JSON Patch the response carries (empty when none).
    pub patch: json_patch::Patch,
    /// What was decided, for logs and metrics.
    pub summary: ReviewSummary,
}

/// The answer to one AdmissionReview.
#[derive(Debug, Clone)]
pub struct ReviewOutcome {
    /// The AdmissionReview response JSON.
    pub body: Vec<u8>,
    /// What was decided, for logs and metrics.
    pub summary: ReviewSummary,
}

fn operation_name(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// Parses an AdmissionReview request body, checking what a v1 webhook must check.
pub fn parse_request(body: &[u8]) -> Result<AdmissionRequest, RequestError> {
    let review: AdmissionReviewRequest = serde_json::from_slice(body)
        .map_err(|e| RequestError(format!("body is not an AdmissionReview: {e}")))?;
    if let Some(kind) = review.kind.as_deref()
        && kind != ADMISSION_KIND
    {
        return Err(RequestError(format!(
            "expected kind {ADMISSION_KIND}, got {kind:?}"
        )));
    }
    if let Some(v) = review.api_version.as_deref()
        && v != ADMISSION_API_VERSION
    {
        return Err(RequestError(format!(
            "only {ADMISSION_API_VERSION} is supported, got {v:?}"
        )));
    }
    let request = review
        .request
        .ok_or_else(|| RequestError("AdmissionReview has no request".into()))?;
    if request.uid.is_empty() {
        return Err(RequestError("request.uid is empty".into()));
    }
    Ok(request)
}

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
    let mut request = parse_request(body)?;
    observer.request(&request);
    observer.phase(Phase::Policy);
    // The object is mutated in place; the patch is recorded as it is written.
    let object = request.object.take();
    let decision = decide_object(policy, endpoint, &request, object, cluster, observer);
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
    decide_object(
        policy,
        endpoint,
        request,
        request.object.clone(),
        cluster,
        &mut (),
    )
}

/// `pods/ephemeralcontainers`: `kubectl debug` adding a container to a running pod.
const EPHEMERAL_CONTAINERS: &str = "ephemeralcontainers";

/// Decides on `object` (the request's object, held apart so it can be mutated in place).
/// `observer` hears when the endpoint's rules begin.
fn decide_object(
    policy: &Policy,
    endpoint: Endpoint,
    request: &AdmissionRequest,
    object: Option<Value>,
    cluster: &dyn ClusterView,
    observer: &mut dyn Observer,
) -> Decision {
    let kind = WorkloadKind::from_gvk(
        &request.kind.group,
        &request.kind.version,
        &request.kind.kind,
    );
    let mut summary = ReviewSummary {
        kind: kind.map_or("other", WorkloadKind::as_str),
        operation: operation_name(&request.operation),
        dry_run: request.dry_run.unwrap_or(false),
        ..ReviewSummary::default()
    };
    let skip = |summary: ReviewSummary, why: &'static str| Decision {
        response: AdmissionResponse::allow(&request.uid),
        patch: json_patch::Patch(Vec::new()),
        summary: ReviewSummary {
            skipped: Some(why),
            ..summary
        },
    };
    if request.sub_resource.as_deref() == Some("scale")
        && let Some(scaled) = request
            .resource
            .as_ref()
            .and_then(|r| WorkloadKind::scaled_through(&r.group, &r.resource))
    {
        return scale_decision(
            policy,
            endpoint,
            request,
            scaled,
            object.as_ref(),
            summary,
            cluster,
            observer,
        );
    }
    let (Some(kind), Some(mut object)) = (kind, object) else {
        return skip(summary, "not-a-workload");
    };
    if !matches!(request.operation, Operation::Create | Operation::Update) || !object.is_object() {
        return skip(summary, "operation");
    }
    // Subresources that change what the queue's limits cover are judged (docs/queue-limits.md
    // lists them); every other subresource (status, binding, eviction, …) is not.
    let sub_resource = request.sub_resource.as_deref().unwrap_or_default();
    if !sub_resource.is_empty() && !kind.spec().subresources.contains(&sub_resource) {
        return skip(summary, "subresource");
    }
    if policy.classify(kind, &object) != WorkloadMatch::Launch {
        return skip(summary, "not-launch");
    }
    let who = Requester::of(request);
    let global = policy.exemptions_for(&policy.config.match_rules.exemptions, kind, &object, &who);
    if let Some(exemption) = global.exempt_by {
        let d = skip(summary, "exempt");
        return exempted(endpoint, request, kind, object, d, exemption);
    }
    let Some(resolution) = policy.resolve_queue(kind, &object, request.namespace.as_deref()) else {
        let mut d = skip(summary, "no-queue");
        let warning = Warning::new(
            rules::QUEUE_NONE,
            "launchgate: launch workload names no configured queue and no default queue is set; nothing was checked",
        );
        d.response.warnings.push(warning.message.clone());
        d.summary.warnings.push(warning);
        return d;
    };
    let queue = resolution.queue;
    let own = policy.exemptions_for(&queue.config.exemptions, kind, &object, &who);
    if let Some(exemption) = own.exempt_by {
        summary.queue = Some(queue.name.clone());
        let d = skip(summary, "exempt");
        return exempted(endpoint, request, kind, object, d, exemption);
    }
    // Made by its launch workload's controller (verified), or not.
    let creators = &policy.config.match_rules.pod_creators;
    let claim = owner_claim(kind, &object, &who, creators);
    // A pod (child workload) its owner's controller verifiably made for an exempt workload
    // inherits the exemption launchgate marked that workload with.
    if matches!(claim, OwnerClaim::Verified(_))
        && let Some(exemption) = exemption::inherited(
            &[
                &policy.config.match_rules.exemptions,
                &queue.config.exemptions,
            ],
            kind,
            &object,
            who.namespace,
        )
    {
        summary.queue = Some(queue.name.clone());
        let d = skip(summary, "exempt");
        return exempted(endpoint, request, kind, object, d, exemption);
    }
    summary.queue = Some(queue.name.clone());
    describe_request(&mut summary, request, &object);
    // Why something that looks like it takes the object out of a rule does not: shown as
    // warnings, and under a denial's violations.
    let mut notes: Vec<Warning> = global
        .not_applied
        .into_iter()
        .chain(own.not_applied)
        .map(|why| Warning::new(rules::EXEMPTIONS_NOT_APPLIED, why))
        .collect();
    let scope = match claim {
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
    };
    let runtime = match kind.spec().runtime {
        Some(rt) => lookup_runtime(rt, cluster, &object, request.namespace.as_deref()),
        None => RuntimeState::NotATrainJob,
    };
    let ctx = MutationContext {
        kind,
        queue_name: &queue.name,
        settings: queue.mutation_settings(),
        sidecars: &policy.config.match_rules.sidecar_containers,
        request,
        cluster,
        child: scope != Scope::Workload,
        runtime: match &runtime {
            RuntimeState::Found(r) => Some(r),
            _ => None,
        },
        admitted: admitted_before(policy, kind, request, queue),
    };
    let mut findings = Findings::default();
    findings.add_warnings(resolution.warning.clone());
    observer.phase(match endpoint {
        Endpoint::Mutate => Phase::Mutate,
        Endpoint::Validate => Phase::Validate,
    });
    findings.add_notes(notes);
    match endpoint {
        Endpoint::Mutate => mutate_decision(&ctx, &mut object, findings, summary),
        Endpoint::Validate => {
            validate_decision(&ctx, queue, &object, scope, &runtime, findings, summary)
        }
    }
}

/// What launchgate admitted in `queue` before this request: on an UPDATE, the old object when
/// it already was a launch workload of the same queue — launchgate judged it (or an exemption
/// covered it) when it came in. An object that was no launch workload, or another queue's, was
/// never judged here: an UPDATE that brings it in is judged as a CREATE, with nothing carried
/// over (no "already so", no mark kept).
fn admitted_before<'r>(
    policy: &Policy,
    kind: WorkloadKind,
    request: &'r AdmissionRequest,
    queue: &Queue,
) -> Option<&'r Value> {
    if !matches!(request.operation, Operation::Update) {
        return None;
    }
    let old = request.old_object.as_ref()?;
    let same_queue = policy.classify(kind, old) == WorkloadMatch::Launch
        && policy
            .resolve_queue(kind, old, request.namespace.as_deref())
            .is_some_and(|was| std::ptr::eq(was.queue, queue));
    same_queue.then_some(old)
}

/// `<resource>/scale` of a kind with a scale subresource ([`crate::kinds::KindSpec::scale`]):
/// an `autoscaling/v1` Scale, which carries neither labels nor pod templates, sets the field
/// the descriptor names (a PyTorchJob's `Worker.replicas`). The Scale is judged against the
/// workload it scales, read from the cluster view (a cached watch): a workload that is no
/// launch workload (or is exempt) is not launchgate's, and passes; a launch workload's Scale is
/// judged by its queue exactly as an UPDATE of that field to the new count. When the workload
/// cannot be read (no cluster lookups, or not in the cache yet) a scale-up is denied with the
/// way that is judged (changing the field on the workload itself); a scale-down, or a Scale
/// that keeps the count, is allowed. Nothing is ever patched.
#[allow(clippy::too_many_arguments)]
fn scale_decision(
    policy: &Policy,
    endpoint: Endpoint,
    request: &AdmissionRequest,
    kind: WorkloadKind,
    object: Option<&Value>,
    mut summary: ReviewSummary,
    cluster: &dyn ClusterView,
    observer: &mut dyn Observer,
) -> Decision {
    let Some(scale) = kind.spec().scale.as_ref() else {
        return finish(
            &request.uid,
            Findings::default(),
            json_patch::Patch(Vec::new()),
            summary,
        );
    };
    summary.kind = kind.as_str();
    if let Some(scale) = object {
        describe_request(&mut summary, request, scale);
    }
    let replicas = |v: Option<&Value>| {
        v.and_then(|o| o.at("/spec/replicas"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let (new, old) = (replicas(object), replicas(request.old_object.as_ref()));
    let namespace = request.namespace.as_deref().unwrap_or_default();
    let judged = endpoint == Endpoint::Validate && matches!(request.operation, Operation::Update);
    let field = scale.replicas.join(".");
    let what = kind.api_kind();
    // Read (and converted from the cache) only when a Scale is judged.
    if judged && let Some(owner) = cluster.workload(kind, namespace, &request.name) {
        // The UPDATE this Scale amounts to: the workload with the new count.
        let mut scaled = owner.as_ref().clone();
        if let Some((key, holder)) = scale.replicas.split_last()
            && let Some(holder) =
                crate::kinds::field_mut(&mut scaled, holder).and_then(Value::as_object_mut)
        {
            holder.insert(key.to_string(), Value::from(new));
        }
        let mut update = request.clone();
        update.kind =
            kube::core::GroupVersionKind::gvk(kind.api_group(), kind.spec().version, what);
        update.sub_resource = None;
        update.object = None;
        update.old_object = Some(owner.as_ref().clone());
        let mut decision = decide_object(
            policy,
            Endpoint::Validate,
            &update,
            Some(scaled),
            cluster,
            observer,
        );
        if let Some(status) = decision.response.status.as_mut() {
            status.message = format!(
                "launchgate: scaling {what} {:?} from {old} to {new} {} is judged as an update of {field}:\n{}",
                request.name, scale.counts, status.message
            );
            decision.summary.message = Some(status.message.clone());
        }
        return decision;
    }
    let mut findings = Findings::default();
    if judged && new > old {
        let why = if cluster.is_connected() {
            format!(
                "the {what} is not in launchgate's cache (created a moment ago, or in a namespace its cluster lookups do not watch), so its queue's limits cannot be checked; retry, or"
            )
        } else {
            format!(
                "without cluster lookups launchgate cannot read the {what}, so its queue's limits cannot be checked;"
            )
        };
        let message = format!(
            "launchgate: scaling {what} {:?} from {old} to {new} {} through the scale subresource is denied: a Scale carries no labels and {why} change {field} on the {what} instead (checked against its queue)",
            request.name, scale.counts
        );
        findings.add_violation(
            Violation::new(rules::SCALE_UNREADABLE_OWNER, message)
                .at(field)
                .value(new.to_string()),
        );
    }
    let mut decision = finish(
        &request.uid,
        findings,
        json_patch::Patch(Vec::new()),
        summary,
    );
    if decision.response.allowed {
        decision.summary.outcome = Outcome::Skipped;
        decision.summary.skipped = Some("scale");
    }
    decision
}

/// A request an exemption covers: allowed untouched, the exemption named in the API server's
/// audit log. On CREATE the mutating webhook marks the workload (and its pod templates) with the
/// exemption's name: what its pods and child workloads inherit it by.
fn exempted(
    endpoint: Endpoint,
    request: &AdmissionRequest,
    kind: WorkloadKind,
    object: Value,
    mut decision: Decision,
    exemption: &Exemption,
) -> Decision {
    if endpoint == Endpoint::Mutate && matches!(request.operation, Operation::Create) {
        let mut marked = object;
        let mut recorder = Recorder::default();
        if exemption::write_marks(
            kind,
            &mut Node::root(&mut marked, &mut recorder),
            &exemption.name,
        ) {
            let patch = recorder.patch(&marked);
            decision.summary.skipped = Some("exempt");
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

/// Fills in who and what the request is about (only for launch workloads: skipped requests are
/// neither logged nor counted per object, so they do not pay for it).
fn describe_request(summary: &mut ReviewSummary, request: &AdmissionRequest, object: &Value) {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
    let meta = object.get("metadata");
    summary.uid = request.uid.clone();
    summary.namespace = request.namespace.clone().unwrap_or_default();
    summary.name = request.name.clone();
    if summary.name.is_empty() {
        summary.name = text(meta.and_then(|m| m.get("name")));
    }
    summary.generate_name = text(meta.and_then(|m| m.get("generateName")));
    summary.api_kind = request.kind.kind.clone();
    summary.api_version = if request.kind.group.is_empty() {
        request.kind.version.clone()
    } else {
        format!("{}/{}", request.kind.group, request.kind.version)
    };
    summary.object_uid = text(meta.and_then(|m| m.get("uid")));
    summary.owner = meta
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .and_then(|refs| {
            refs.iter()
                .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        })
        .map(|r| OwnerRef {
            api_version: text(r.get("apiVersion")),
            kind: text(r.get("kind")),
            name: text(r.get("name")),
            uid: text(r.get("uid")),
        })
        .filter(|o| !o.kind.is_empty() && !o.name.is_empty());
    summary.user = request.username().to_string();
}

fn finish(
    uid: &str,
    findings: Findings,
    patch: json_patch::Patch,
    mut summary: ReviewSummary,
) -> Decision {
    let warnings = bounded_warnings(findings.warnings());
    let mut response = match findings.denial() {
        None => AdmissionResponse::allow(uid).with_patch(&patch),
        Some(message) => {
            summary.outcome = Outcome::Denied;
            AdmissionResponse::deny(uid, message)
        }
    };
    response.warnings = warnings.iter().map(|w| w.message.clone()).collect();
    summary.violations = findings.into_violations();
    summary.patch_operations = if response.allowed { patch.0.len() } else { 0 };
    summary.patch_bytes = response.patch.as_deref().map_or(0, base64_decoded_len);
    summary.message = response.status.as_ref().map(|s| s.message.clone());
    summary.warnings = warnings;
    Decision {
        response,
        patch,
        summary,
    }
}

fn mutate_decision(
    ctx: &MutationContext<'_>,
    object: &mut Value,
    mut findings: Findings,
    mut summary: ReviewSummary,
) -> Decision {
    // `kubectl debug`: the new ephemeral containers get the container defaults.
    if ctx.request.sub_resource.as_deref() == Some(EPHEMERAL_CONTAINERS) {
        let before = object.clone();
        mutate::security_context::mutate_ephemeral(
            ctx,
            object,
            ctx.request.old_object.as_ref(),
            &mut findings,
        );
        let patch = diff::diff_tree(&before, object);
        summary.outcome = if patch.0.is_empty() {
            Outcome::Allowed
        } else {
            Outcome::Patched
        };
        return finish(&ctx.request.uid, findings, patch, summary);
    }
    // An UPDATE that brings the object into the queue: what an UPDATE may change of what a
    // CREATE would write — the queue's Kueue labels, and no exemption mark launchgate did not
    // write on the object itself (one left on a pod template is denied by the validating
    // webhook; templates are not rewritten on UPDATE).
    if ctx.enters_queue() && !ctx.child {
        let mut recorder = Recorder::default();
        let mut root = Node::root(object, &mut recorder);
        mutate::kueue::mutate(ctx, &mut root, &mut findings);
        if exemption::strip_own_mark(&mut root) {
            findings.warn(rules::EXEMPTIONS_MARK_REMOVED, format!(
                "launchgate: removed the {EXEMPTED_BY_ANNOTATION} annotation: this update brings the workload into queue {:?}, and launchgate writes it only on a workload an exemption covers",
                ctx.queue_name
            ));
        }
        let patch = recorder.patch(object);
        summary.outcome = if patch.0.is_empty() {
            Outcome::Allowed
        } else {
            Outcome::Patched
        };
        return finish(&ctx.request.uid, findings, patch, summary);
    }
    // Pod specs and Job templates are immutable after CREATE: only CREATE is mutated.
    if !matches!(ctx.request.operation, Operation::Create) {
        summary.outcome = Outcome::Allowed;
        return finish(
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
    summary.outcome = if patch.0.is_empty() {
        Outcome::Allowed
    } else {
        Outcome::Patched
    };
    finish(&ctx.request.uid, findings, patch, summary)
}

/// Trims warnings to what the API server will show without truncating mid-word.
/// Each keeps its id; what is cut is replaced by one [`rules::SERVER_WARNINGS_OMITTED`].
fn bounded_warnings(warnings: Vec<Warning>) -> Vec<Warning> {
    let mut out = Vec::with_capacity(warnings.len());
    let mut total = 0;
    for mut w in warnings {
        if w.message.chars().count() > crate::admission::MAX_WARNING_CHARS {
            let mut s: String = w
                .message
                .chars()
                .take(crate::admission::MAX_WARNING_CHARS - 1)
                .collect();
            s.push('…');
            w.message = s;
        }
        let len = w.message.chars().count();
        if total + len > crate::admission::MAX_WARNINGS_TOTAL_CHARS {
            out.push(Warning::new(
                rules::SERVER_WARNINGS_OMITTED,
                "launchgate: further warnings omitted",
            ));
            break;
        }
        total += len;
        out.push(w);
    }
    out
}

/// Length of the bytes a padded base64 text decodes to.
fn base64_decoded_len(b64: &str) -> usize {
    let padding = b64.bytes().rev().take_while(|&b| b == b'=').count();
    (b64.len() / 4 * 3).saturating_sub(padding)
}

/// What is known of a TrainJob's runtime.
enum RuntimeState {
    /// Not a TrainJob.
    NotATrainJob,
    /// Read from the cluster.
    Found(TrainingRuntime),
    /// Cannot be read: why, and the runtime named (if any).
    Unknown {
        reference: Option<RuntimeRef>,
        why: String,
    },
}

/// The runtime `trainjob` names, from the cluster view.
fn lookup_runtime(
    rt: &RuntimeSpec,
    cluster: &dyn ClusterView,
    trainjob: &Value,
    namespace: Option<&str>,
) -> RuntimeState {
    let Some(reference) = runtime::runtime_ref(rt, trainjob) else {
        return RuntimeState::Unknown {
            reference: None,
            why: format!("names no runtime ({}.name)", rt.reference.join(".")),
        };
    };
    if reference.cluster_scoped.is_none() {
        return RuntimeState::Unknown {
            reference: Some(reference),
            why: "is not a kind Trainer runs (ClusterTrainingRuntime or TrainingRuntime)".into(),
        };
    }
    let namespace = namespace
        .or_else(|| trainjob.at("/metadata/namespace").and_then(Value::as_str))
        .unwrap_or(crate::cluster::DEFAULT_NAMESPACE);
    match cluster.training_runtime(&reference.kind, namespace, &reference.name) {
        RuntimeLookup::Found(object) => RuntimeState::Found(TrainingRuntime { reference, object }),
        RuntimeLookup::NotFound => RuntimeState::Unknown {
            reference: Some(reference),
            why: "is not in the cluster".into(),
        },
        RuntimeLookup::Unavailable => RuntimeState::Unknown {
            reference: Some(reference),
            why: "launchgate cannot read (no cluster lookups of runtimes: offline without its manifest beside the TrainJob, `serve` without --cluster-lookups, or the runtime watch has no access)".into(),
        },
    }
}

/// Why a TrainJob's size cannot be verified, when its queue bounds sizes (totals, GPU-hours)
/// and the TrainJob leaves its size to a runtime that cannot be read.
fn unverifiable_size(
    kind: WorkloadKind,
    queue: &Queue,
    object: &Value,
    runtime: &RuntimeState,
) -> Option<Violation> {
    let RuntimeState::Unknown { reference, why } = runtime else {
        return None;
    };
    let bounded = queue.size_bounds();
    let left = runtime::left_to_runtime(kind.spec().runtime?, object);
    if bounded.is_empty() || left.is_empty() {
        return None;
    }
    let named = reference
        .as_ref()
        .map_or_else(|| "its runtime".to_string(), RuntimeRef::describe);
    let effect = match queue.limits.unverifiable_runtime() {
        UnverifiableRuntime::Deny => Effect::Deny,
        UnverifiableRuntime::Warn => Effect::Warn,
    };
    let message = format!(
        "queue {:?}: cannot verify the runtime's size: the TrainJob leaves {} to {named}, which {why}, so its size is unknown to the queue's {} (limits.unverifiableRuntime: {}); set them on the TrainJob",
        queue.name,
        left.join(" and "),
        bounded.join(" and "),
        queue.limits.unverifiable_runtime().as_str(),
    );
    Some(
        Violation::new(rules::LIMITS_UNVERIFIABLE_RUNTIME, message)
            .value(left.join(", "))
            .limit(bounded.join(", "))
            .effect(effect),
    )
}

/// A TrainJob that names a namespaced TrainingRuntime in a queue that bounds its runs' size or
/// cost (totals, a GPU-hour ceiling) and takes sizes only from ClusterTrainingRuntimes
/// (`limits.trainingRuntimes: clusterOnly`, the default): a tenant may own that runtime and
/// grow it after the TrainJob is admitted. Answered as the queue's limits are.
fn untrusted_runtime(rt: &RuntimeSpec, queue: &Queue, object: &Value) -> Option<Violation> {
    if queue.limits.training_runtimes() != TrainingRuntimes::ClusterOnly {
        return None;
    }
    let named = runtime::runtime_ref(rt, object)?;
    let bounded = queue.size_bounds();
    if named.cluster_scoped != Some(false) || bounded.is_empty() {
        return None;
    }
    let effect = match queue.limits.enforcement() {
        Enforcement::Deny => Effect::Deny,
        Enforcement::Warn => Effect::Warn,
        Enforcement::Audit => Effect::Audit,
    };
    let message = format!(
        "queue {:?}: the TrainJob names {}, a namespaced runtime that anyone who can edit the namespace can grow after the TrainJob is admitted, and the queue's {} take runs' sizes only from ClusterTrainingRuntimes (limits.trainingRuntimes: clusterOnly): name a ClusterTrainingRuntime",
        queue.name,
        named.describe(),
        bounded.join(" and "),
    );
    Some(
        Violation::new(rules::LIMITS_TRAINING_RUNTIMES, message)
            .at(format!("{}.kind", rt.reference.join(".")))
            .value(format!("{:?}", named.kind))
            .limit(TrainingRuntimes::ClusterOnly.as_str())
            .effect(effect),
    )
}

#[allow(clippy::too_many_arguments)]
fn validate_decision(
    ctx: &MutationContext<'_>,
    queue: &Queue,
    object: &Value,
    scope: Scope,
    runtime: &RuntimeState,
    mut findings: Findings,
    mut summary: ReviewSummary,
) -> Decision {
    // The rules outside the queue's limits: each denies or warns by its own setting.
    let mut found: Vec<Violation> = Vec::new();
    let as_create = ctx.judged_as_create();
    if scope == Scope::Workload && as_create {
        found.extend(unverifiable_size(ctx.kind, queue, object, runtime));
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
                        forged.join(", ")
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
                let mut out: Vec<Violation> = (ctx.kind.spec().runtime)
                    .and_then(|rt| untrusted_runtime(rt, queue, object))
                    .into_iter()
                    .collect();
                out.extend(
                    validate::guardrails::check(
                        &queue.name,
                        ctx.kind,
                        &queue.config.guardrails,
                        object,
                        ctx.runtime,
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
    for v in now {
        if ctx.admitted.is_some() && validate::carried(&v, &before) {
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
    findings.add_warnings(report.warnings);
    summary.unchanged.extend(report.unchanged);
    summary.outcome = Outcome::Allowed;
    if !report.violations.is_empty() {
        let effect = match report.enforcement {
            Enforcement::Deny => Effect::Deny,
            Enforcement::Warn => Effect::Warn,
            Enforcement::Audit => Effect::Audit,
        };
        summary.enforcement = Some(effect.as_str());
        match effect {
            Effect::Deny => {}
            Effect::Warn => summary.outcome = Outcome::AllowedWithViolations,
            Effect::Audit => {
                summary.outcome = Outcome::AllowedWithViolations;
                summary.audit_violations = report
                    .violations
                    .iter()
                    .map(|v| v.message.clone())
                    .collect();
            }
        }
        findings.add_violations(report.violations.into_iter().map(|v| v.effect(effect)));
    }
    let audit = summary.audit_violations.join("\n");
    let mut decision = finish(
        &ctx.request.uid,
        findings,
        json_patch::Patch(Vec::new()),
        summary,
    );
    if !audit.is_empty() {
        decision
            .response
            .audit_annotations
            .insert("limit-violations".into(), audit);
    }
    decision
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_large_objects_recorded_patch_is_its_diff() {
        use base64::Engine;
        let body = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/admission/create-pod-launch-acme-mnist-mzxkz.json"),
        )
        .unwrap();
        let mut review: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let containers = &mut review["request"]["object"]["spec"]["containers"];
        let first = containers[0].clone();
        for i in 0..200 {
            let mut c = first.clone();
            c["name"] = serde_json::json!(format!("worker-{i}"));
            containers.as_array_mut().unwrap().push(c);
        }
        let body = serde_json::to_vec(&review).unwrap();
        assert!(body.len() >= 64 << 10, "{}", body.len());
        let policy = crate::Policy::embedded_default();
        let cluster = &crate::cluster::NoCluster;
        let answer = super::review(&policy, super::Endpoint::Mutate, &body, cluster).unwrap();
        let response: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        let b64 = response["response"]["patch"].as_str().expect("patched");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let recorded: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        let request = super::parse_request(&body).unwrap();
        let mut mutated = request.object.clone().unwrap();
        json_patch::patch(&mut mutated, &recorded).unwrap();
        let original = request.object.as_ref().unwrap();
        assert_eq!(recorded, crate::patch::diff::diff_tree(original, &mutated));
        assert!(recorded.0.len() > 200, "every container was mutated");
    }
}

#[cfg(test)]
mod observer_tests {
    use super::*;

    #[test]
    fn warnings_are_bounded() {
        let long = Warning::new(rules::CACHE_MOUNT_TAKEN, "x".repeat(1000));
        let w = bounded_warnings(vec![long; 40]);
        assert!(
            w.iter()
                .all(|w| w.message.chars().count() <= crate::admission::MAX_WARNING_CHARS + 40)
        );
        assert!(
            w.iter().map(|w| w.message.chars().count()).sum::<usize>()
                <= crate::admission::MAX_WARNINGS_TOTAL_CHARS + 64
        );
        assert_eq!(w[0].rule, "cache.mountTaken");
        assert_eq!(w.last().unwrap().rule, "server.warningsOmitted");
    }
    use crate::cluster::NoCluster;

    #[derive(Default)]
    struct Heard {
        phases: Vec<Phase>,
        kind: Option<String>,
    }

    impl Observer for Heard {
        fn phase(&mut self, phase: Phase) {
            self.phases.push(phase);
        }
        fn request(&mut self, request: &AdmissionRequest) {
            self.kind = Some(request.kind.kind.clone());
        }
    }

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/admission")
                .join(name),
        )
        .unwrap()
    }

    fn heard(endpoint: Endpoint, body: &[u8]) -> (Heard, Result<ReviewOutcome, RequestError>) {
        let policy = Policy::embedded_default();
        let mut heard = Heard::default();
        let outcome = review_observed(&policy, endpoint, body, &NoCluster, &mut heard);
        (heard, outcome)
    }

    #[test]
    fn a_launch_workload_goes_through_every_phase_of_its_endpoint() {
        use Phase::*;
        let body = fixture("create-job-launch-acme-mnist.json");
        let (mutate, outcome) = heard(Endpoint::Mutate, &body);
        assert_eq!(mutate.phases, [Parse, Policy, Mutate, Serialise]);
        assert_eq!(mutate.kind.as_deref(), Some("Job"));
        let outcome = outcome.unwrap();
        assert_eq!(outcome.summary.skipped, None);
        // The same answer as without an observer.
        let plain = review(
            &crate::policy::Policy::embedded_default(),
            Endpoint::Mutate,
            &body,
            &NoCluster,
        )
        .unwrap();
        assert_eq!(outcome.body, plain.body);
        let (validate, _) = heard(Endpoint::Validate, &body);
        assert_eq!(validate.phases, [Parse, Policy, Validate, Serialise]);
    }

    #[test]
    fn a_skipped_request_has_no_rules_phase_and_says_why() {
        use Phase::*;
        let (heard, outcome) = heard(Endpoint::Mutate, &fixture("create-pod-demo.json"));
        let summary = outcome.unwrap().summary;
        assert_eq!(summary.outcome, Outcome::Skipped);
        assert_eq!(summary.skipped, Some("not-launch"));
        assert_eq!(heard.phases, [Parse, Policy, Serialise]);
    }

    #[test]
    fn a_body_that_is_no_review_ends_in_the_parse_phase() {
        let (heard, outcome) = heard(Endpoint::Validate, b"{\"kind\": 1}");
        assert!(outcome.is_err());
        assert_eq!(heard.phases, [Phase::Parse]);
        assert_eq!(heard.kind, None);
    }
}

#[cfg(test)]
mod subresource_tests {
    use super::*;
    use crate::cluster::NoCluster;
    use serde_json::json;

    fn scale_review(old: i64, new: i64) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                "resource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"},
                "subResource": "scale", "name": "ddp", "namespace": "wandb", "operation": "UPDATE",
                "object": {"apiVersion": "autoscaling/v1", "kind": "Scale",
                    "metadata": {"name": "ddp", "namespace": "wandb"}, "spec": {"replicas": new}},
                "oldObject": {"apiVersion": "autoscaling/v1", "kind": "Scale",
                    "metadata": {"name": "ddp", "namespace": "wandb"}, "spec": {"replicas": old}},
                "userInfo": {"username": "alice"}}}))
        .unwrap()
    }

    #[test]
    fn a_jobsets_job_from_its_controller_is_a_child_and_from_anyone_else_a_workload() {
        use crate::cluster::NoCluster;
        let policy = Policy::from_yaml(
            "defaultQueue: q\nqueues:\n  q:\n    pytorch: {indexedJobs: true}\n    kueue: {localQueue: team-a}\n    limits: {totals: {nvidia.com/gpu: {maximum: 4}}}\n",
        )
        .unwrap();
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "ddp-workers-0", "namespace": "wandb",
                "labels": {"jobset.sigs.k8s.io/jobset-uid": "js-1", "wandb.ai/monitor": "true"},
                "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                    "name": "ddp", "uid": "js-1", "controller": true}]},
            "spec": {"backoffLimit": 6, "completionMode": "Indexed", "completions": 4, "parallelism": 4,
                "template": {"spec": {"restartPolicy": "OnFailure", "subdomain": "ddp",
                    "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}});
        let ask = |endpoint: Endpoint, user: &str| {
            let mut request =
                AdmissionRequest::synthetic_create(job.clone(), Some("wandb")).unwrap();
            request.user_info = Some(json!({"username": user}));
            decide(&policy, endpoint, &request, &NoCluster)
        };
        let paths = |d: &Decision| -> Vec<String> {
            d.patch
                .0
                .iter()
                .map(|op| {
                    serde_json::to_value(op).unwrap()["path"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect()
        };
        let jobset = "system:serviceaccount:jobset-system:jobset-controller-manager";
        // From JobSet's controller: hardened like any pod template, no Job defaults, no wiring
        // (the JobSet's own), no Kueue label (Kueue admits the JobSet); per-pod rules only.
        let child = ask(Endpoint::Mutate, jobset);
        let touched = paths(&child);
        assert!(
            touched.iter().all(|p| !p.starts_with("/spec/backoffLimit")),
            "{touched:?}"
        );
        assert!(
            !serde_json::to_string(&child.patch)
                .unwrap()
                .contains("MASTER_ADDR")
        );
        assert!(
            !serde_json::to_string(&child.patch)
                .unwrap()
                .contains("kueue.x-k8s.io")
        );
        assert!(
            touched.iter().any(|p| p.contains("securityContext")),
            "{touched:?}"
        );
        assert!(
            ask(Endpoint::Validate, jobset).response.allowed,
            "totals are the JobSet's rule"
        );
        // The same Job from a user: a workload of its own, on every rule.
        let user = ask(Endpoint::Mutate, "alice");
        let text = serde_json::to_string(&user.patch).unwrap();
        assert!(
            text.contains("/spec/backoffLimit")
                && text.contains("MASTER_ADDR")
                && text.contains("team-a"),
            "{text}"
        );
        let denied = ask(Endpoint::Validate, "alice");
        assert!(!denied.response.allowed);
        let message = &denied.response.status.as_ref().unwrap().message;
        assert!(
            message.contains("total nvidia.com/gpu over all pods=8 exceeds maximum 4"),
            "{message}"
        );
        assert!(
            message.contains("names JobSet \"ddp\" as its controller but is sent by"),
            "{message}"
        );
    }

    fn pytorchjob(labels: Value) -> Value {
        let replica = |n: i64| {
            json!({"replicas": n, "template": {"metadata": {"labels": labels.clone()},
                "spec": {"containers": [{"name": "pytorch", "image": "acme/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}})
        };
        json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "ddp", "namespace": "wandb", "labels": labels.clone()},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(2)}}})
    }

    #[test]
    fn a_scale_is_judged_against_the_pytorchjob_it_scales() {
        use crate::cluster::StaticCluster;
        let policy = Policy::from_yaml(
            "queues:\n  gpu-queue:\n    limits: {totals: {nvidia.com/gpu: {maximum: 16}}}\n",
        )
        .unwrap();
        let answer = |cluster: &dyn ClusterView, body: Vec<u8>| {
            let out = review(&policy, Endpoint::Validate, &body, cluster).unwrap();
            serde_json::from_slice::<Value>(&out.body).unwrap()["response"].clone()
        };
        // Another team's elastic job: not launchgate's, scales freely.
        let other = StaticCluster::default().with_workload(pytorchjob(json!({"team": "b"})));
        assert_eq!(answer(&other, scale_review(2, 64))["allowed"], true);
        // A launch workload: judged by its queue, as an update of Worker.replicas.
        let launch = StaticCluster::default().with_workload(pytorchjob(
            json!({"wandb.ai/monitor": "true", "launchgate.io/queue": "gpu-queue"}),
        ));
        let up = answer(&launch, scale_review(2, 64));
        assert_eq!(up["allowed"], false, "{up}");
        let message = up["status"]["message"].as_str().unwrap();
        assert!(
            message.contains("scaling PyTorchJob \"ddp\" from 2 to 64 Worker replicas")
                && message.contains(
                    "queue \"gpu-queue\": total nvidia.com/gpu over all pods=65 exceeds maximum 16 (totals)"
                ),
            "{message}"
        );
        assert_eq!(answer(&launch, scale_review(2, 15))["allowed"], true);
        // Connected, but the PyTorchJob is not in the cache: a scale-up cannot be judged.
        let unknown = answer(&StaticCluster::default(), scale_review(2, 64));
        assert_eq!(unknown["allowed"], false);
        assert!(
            unknown["status"]["message"]
                .as_str()
                .unwrap()
                .contains("not in launchgate's cache")
        );
        assert_eq!(
            answer(&StaticCluster::default(), scale_review(2, 1))["allowed"],
            true
        );
    }

    #[test]
    fn the_agents_training_run_labelled_like_an_image_build_is_judged() {
        let policy = Policy::embedded_default();
        let agent = "system:serviceaccount:wandb:wandb-launch-serviceaccount-prod";
        let job = |container: Value| {
            json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "run", "namespace": "wandb", "labels": {"wandb": "launch"}},
                "spec": {"backoffLimit": 0, "template": {
                    "metadata": {"labels": {"wandb": "launch", "wandb.ai/monitor": "true"}},
                    "spec": {"restartPolicy": "Never", "containers": [container]}}}})
        };
        let ask = |object: Value| {
            let mut request = AdmissionRequest::synthetic_create(object, Some("wandb")).unwrap();
            request.user_info = Some(json!({"username": agent}));
            decide(&policy, Endpoint::Validate, &request, &NoCluster)
        };
        let run = ask(job(
            json!({"name": "train", "image": "ghcr.io/acme/train:1",
            "resources": {"limits": {"nvidia.com/gpu": 8}}}),
        ));
        assert!(!run.response.allowed, "{:?}", run.response);
        let message = &run.response.status.as_ref().unwrap().message;
        assert!(message.contains("maximum 4"), "{message}");
        assert!(
            message.contains("exemption \"wandb-image-builds\" does not apply"),
            "{message}"
        );
        let build = ask(job(json!({"name": "wandb-container-build",
            "image": "gcr.io/kaniko-project/executor:v1.8.0",
            "args": ["--context=s3://b/ctx.tgz", "--destination=registry/img:tag"]})));
        assert!(build.response.allowed, "{:?}", build.response);
        assert_eq!(
            build.summary.exempted_by.as_deref(),
            Some("wandb-image-builds")
        );
    }

    #[test]
    fn a_job_with_its_jobsets_marks_from_an_unconfigured_controller_is_rewired_with_a_warning() {
        let policy =
            Policy::from_yaml("defaultQueue: q\nqueues:\n  q:\n    pytorch: {indexedJobs: true}\n")
                .unwrap();
        // The Job JobSet's controller makes, sent under another account than the configured
        // one (a JobSet install in its own namespace).
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "ddp-workers-0", "namespace": "wandb",
                "labels": {"jobset.sigs.k8s.io/jobset-uid": "js-1",
                    "jobset.sigs.k8s.io/jobset-name": "ddp", "wandb.ai/monitor": "true"},
                "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                    "name": "ddp", "uid": "js-1", "controller": true}]},
            "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2,
                "template": {"spec": {"restartPolicy": "Never", "subdomain": "ddp",
                    "containers": [{"name": "t", "image": "acme/train:1"}]}}}});
        let mut request = AdmissionRequest::synthetic_create(job, Some("wandb")).unwrap();
        request.user_info = Some(
            json!({"username": "system:serviceaccount:ml-platform:jobset-controller-manager"}),
        );
        let mutated = decide(&policy, Endpoint::Mutate, &request, &NoCluster);
        // Wired as a world of its own, and told so, with where to name the controller.
        assert!(
            serde_json::to_string(&mutated.patch)
                .unwrap()
                .contains("MASTER_ADDR")
        );
        let warnings = &mutated.response.warnings;
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("match.podCreators.JobSet")
                    && w.contains(r#"of JobSet "ddp""#)
                    && w.contains("standalone")
                    && w.contains("ml-platform/jobset-controller-manager")
                    && !w.ends_with('…')),
            "{warnings:?}"
        );
        let validated = decide(&policy, Endpoint::Validate, &request, &NoCluster);
        assert!(
            validated
                .response
                .warnings
                .iter()
                .any(|w| w.contains("match.podCreators.JobSet")),
            "{:?}",
            validated.response.warnings
        );
    }

    /// The docs' exemption example: the platform team's group is exempt in its namespaces.
    fn platform_policy() -> Policy {
        let mut config: Value = serde_yaml::from_str(crate::policy::DEFAULT_CONFIG_YAML).unwrap();
        config["queues"]["gpu-queue"]["exemptions"] = json!([{"name": "platform-smoke-tests",
            "groups": ["platform-admins"], "namespaces": ["platform-*"]}]);
        Policy::from_yaml(&serde_yaml::to_string(&config).unwrap()).unwrap()
    }

    /// An 8-GPU launch Job (the queue allows 4 per pod) in `namespace`.
    fn eight_gpu_job(namespace: &str) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "smoke", "namespace": namespace, "uid": "job-uid-1",
                "labels": {"wandb.ai/monitor": "true"}},
            "spec": {"backoffLimit": 0, "template": {
                "metadata": {"labels": {"wandb.ai/monitor": "true"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "t",
                    "image": "acme/train:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}})
    }

    /// The pod the Job controller makes for `job`: its template, its owner, its mark.
    fn controller_pod(job: &Value) -> Value {
        let mut pod = job["spec"]["template"].clone();
        let uid = job["metadata"]["uid"].clone();
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        pod["metadata"]["generateName"] = json!("smoke-");
        pod["metadata"]["namespace"] = job["metadata"]["namespace"].clone();
        pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = uid.clone();
        pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = json!("smoke");
        pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job",
            "name": "smoke", "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
        pod
    }

    fn ask(
        policy: &Policy,
        endpoint: Endpoint,
        object: &Value,
        user: &str,
        groups: &[&str],
    ) -> Decision {
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap()
            .to_string();
        let mut request =
            AdmissionRequest::synthetic_create(object.clone(), Some(&namespace)).unwrap();
        request.user_info = Some(json!({"username": user, "groups": groups}));
        decide(policy, endpoint, &request, &NoCluster)
    }

    /// What the API server stores: `object` with the mutating webhook's patch applied.
    fn admitted(policy: &Policy, object: &Value, user: &str, groups: &[&str]) -> Value {
        let d = ask(policy, Endpoint::Mutate, object, user, groups);
        assert!(d.response.allowed, "{:?}", d.response);
        let mut stored = object.clone();
        json_patch::patch(&mut stored, &d.patch).unwrap();
        let v = ask(policy, Endpoint::Validate, &stored, user, groups);
        assert!(v.response.allowed, "{:?}", v.response);
        stored
    }

    const JOB_CONTROLLER: &str = "system:serviceaccount:kube-system:job-controller";

    #[test]
    fn the_pods_of_an_exempt_job_are_exempt_and_a_tenant_cannot_claim_it() {
        let policy = platform_policy();
        let admins = ["system:authenticated", "platform-admins"];
        // The exempt group's 8-GPU Job, and the pods the Job controller makes for it.
        let job = admitted(&policy, &eight_gpu_job("platform-tools"), "ops", &admins);
        let pod = controller_pod(&job);
        let decision = ask(&policy, Endpoint::Validate, &pod, JOB_CONTROLLER, &[]);
        assert!(decision.response.allowed, "{:?}", decision.response);
        assert_eq!(
            decision.summary.exempted_by.as_deref(),
            Some("platform-smoke-tests")
        );
        let mutated = ask(&policy, Endpoint::Mutate, &pod, JOB_CONTROLLER, &[]);
        assert!(mutated.patch.0.is_empty(), "{:?}", mutated.patch);
        // A second pass over the exempt Job (reinvocation) changes nothing more.
        let again = ask(&policy, Endpoint::Mutate, &job, "ops", &admins);
        assert!(again.patch.0.is_empty(), "{:?}", again.patch);

        // Someone else's same Job in that namespace is judged.
        let theirs = ask(
            &policy,
            Endpoint::Validate,
            &eight_gpu_job("platform-tools"),
            "alice",
            &["system:authenticated"],
        );
        assert!(!theirs.response.allowed);
        // A tenant who copies the mark into their Job: removed, and denied if it stays.
        let mut forged = eight_gpu_job("platform-tools");
        forged["spec"]["template"]["metadata"]["annotations"] =
            json!({EXEMPTED_BY_ANNOTATION: "platform-smoke-tests"});
        forged["metadata"]["annotations"] = json!({EXEMPTED_BY_ANNOTATION: "platform-smoke-tests"});
        let m = ask(&policy, Endpoint::Mutate, &forged, "alice", &[]);
        let mut stored = forged.clone();
        json_patch::patch(&mut stored, &m.patch).unwrap();
        assert!(
            !serde_json::to_string(&stored)
                .unwrap()
                .contains(EXEMPTED_BY_ANNOTATION)
        );
        assert!(
            m.response.warnings.iter().any(|w| w.contains("removed")),
            "{:?}",
            m.response.warnings
        );
        let v = ask(&policy, Endpoint::Validate, &forged, "alice", &[]);
        let message = &v.response.status.as_ref().unwrap().message;
        assert!(
            message
                .contains("spec.template.metadata.annotations carries launchgate.io/exempted-by"),
            "{message}"
        );
        // A bare pod with the mark (and a copied owner claim) is not the controller's.
        let bare = ask(&policy, Endpoint::Validate, &pod, "alice", &[]);
        assert!(!bare.response.allowed, "{:?}", bare.response);
        // The controller's pod in a namespace the exemption does not cover is judged.
        let mut elsewhere = pod.clone();
        elsewhere["metadata"]["namespace"] = json!("team-a");
        let d = ask(&policy, Endpoint::Validate, &elsewhere, JOB_CONTROLLER, &[]);
        assert!(!d.response.allowed, "{:?}", d.response);
    }

    #[test]
    fn an_exempt_jobsets_jobs_and_their_pods_inherit_its_exemption() {
        let policy = platform_policy();
        let admins = ["platform-admins"];
        let jobset = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "ddp", "namespace": "platform-tools", "uid": "js-1",
                "labels": {"wandb.ai/monitor": "true"}},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
                "parallelism": 2, "completions": 2, "completionMode": "Indexed",
                "template": {"metadata": {"labels": {"wandb.ai/monitor": "true"}},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "t",
                        "image": "acme/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}]}});
        let jobset = admitted(&policy, &jobset, "ops", &admins);
        // The Job JobSet's controller makes from the replicated job.
        let mut job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "ddp-workers-0", "namespace": "platform-tools", "uid": "job-uid-1",
                "labels": {"jobset.sigs.k8s.io/jobset-uid": "js-1"},
                "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                    "name": "ddp", "uid": "js-1", "controller": true}]}});
        job["spec"] = jobset["spec"]["replicatedJobs"][0]["template"]["spec"].clone();
        let jobset_controller = "system:serviceaccount:jobset-system:jobset-controller-manager";
        let d = ask(&policy, Endpoint::Validate, &job, jobset_controller, &[]);
        assert_eq!(
            d.summary.exempted_by.as_deref(),
            Some("platform-smoke-tests"),
            "{:?}",
            d.response
        );
        let job = admitted(&policy, &job, jobset_controller, &[]);
        let d = ask(
            &policy,
            Endpoint::Validate,
            &controller_pod(&job),
            JOB_CONTROLLER,
            &[],
        );
        assert!(d.response.allowed, "{:?}", d.response);
        assert_eq!(
            d.summary.exempted_by.as_deref(),
            Some("platform-smoke-tests")
        );
        // The same Job from anyone else is a workload of its own, judged.
        let d = ask(&policy, Endpoint::Validate, &job, "alice", &[]);
        assert!(!d.response.allowed, "{:?}", d.response);
    }

    #[test]
    fn an_exemption_whose_pods_could_never_inherit_it_is_a_config_error() {
        let err = Policy::from_yaml(
            "defaultQueue: q\nmatch:\n  exemptions: []\n  podCreators: {Job: [], VolcanoJob: [v], PyTorchJob: [p], JobSet: [j]}\nqueues:\n  q:\n    exemptions: [{name: ops, groups: [ops], namespaces: [ops]}]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("match.podCreators.Job:"), "{err}");
        assert!(err.contains(r#"exemption "ops""#), "{err}");
    }

    #[test]
    fn a_pytorchjob_scale_up_is_denied_and_a_scale_down_allowed() {
        let policy = Policy::embedded_default();
        let answer = |body: Vec<u8>| {
            let out = review(&policy, Endpoint::Validate, &body, &NoCluster).unwrap();
            serde_json::from_slice::<Value>(&out.body).unwrap()["response"].clone()
        };
        let up = answer(scale_review(2, 64));
        assert_eq!(up["allowed"], false, "{up}");
        assert!(
            up["status"]["message"]
                .as_str()
                .unwrap()
                .contains("from 2 to 64 Worker replicas"),
            "{up}"
        );
        assert_eq!(answer(scale_review(2, 1))["allowed"], true);
        let mutate = review(&policy, Endpoint::Mutate, &scale_review(2, 64), &NoCluster).unwrap();
        let mutate: Value = serde_json::from_slice(&mutate.body).unwrap();
        assert_eq!(mutate["response"]["allowed"], true);
    }
}

#[cfg(test)]
mod kueue_tests {
    use super::*;
    use crate::cluster::NoCluster;
    use serde_json::json;

    const CONFIG: &str = "defaultQueue: q\nqueues:\n  q:\n    kueue: {localQueue: team-a, priorityClass: research, maxExecutionSeconds: 3600}\n";

    fn job(labels: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "wandb", "labels": labels},
            "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "t", "image": "acme/t:1"}]}}}})
    }

    fn labels(queue_name: &str, seconds: &str) -> Value {
        json!({"wandb.ai/monitor": "true", "kueue.x-k8s.io/queue-name": queue_name,
            "kueue.x-k8s.io/priority-class": "research",
            "kueue.x-k8s.io/max-exec-time-seconds": seconds})
    }

    fn ask(endpoint: Endpoint, object: Value, old: Option<Value>) -> Decision {
        let policy = Policy::from_yaml(CONFIG).unwrap();
        let mut request = AdmissionRequest::synthetic_create(object, Some("wandb")).unwrap();
        if let Some(old) = old {
            request.operation = Operation::Update;
            request.old_object = Some(old);
        }
        request.user_info = Some(json!({"username": "alice"}));
        decide(&policy, endpoint, &request, &NoCluster)
    }

    #[test]
    fn a_tenants_kueue_labels_are_replaced_at_create_and_denied_when_they_still_differ() {
        for (queue_name, seconds) in [("", "3600"), ("team-b", "3600"), ("team-a", "7200")] {
            let tenant = job(labels(queue_name, seconds));
            let mutated = ask(Endpoint::Mutate, tenant.clone(), None);
            let patch = serde_json::to_string(&mutated.patch).unwrap();
            assert!(
                patch.contains("team-a") || patch.contains("\"3600\""),
                "{patch}"
            );
            assert!(!patch.contains("suspend"), "{patch}");
            // The mutating webhook bypassed: the validating webhook denies it.
            let denied = ask(Endpoint::Validate, tenant.clone(), None);
            assert!(!denied.response.allowed, "{queue_name:?} {seconds}");
            let message = &denied.response.status.as_ref().unwrap().message;
            assert!(
                message.contains("queue \"q\": label kueue.x-k8s.io/"),
                "{message}"
            );
            // Applying the patch gives a Job the validating webhook admits.
            let mut fixed = tenant.clone();
            json_patch::patch(&mut fixed, &mutated.patch).unwrap();
            assert!(ask(Endpoint::Validate, fixed, None).response.allowed);
        }
    }

    #[test]
    fn kueues_admission_update_passes_and_a_changed_queue_name_is_denied() {
        let admitted = job(labels("team-a", "3600"));
        let mut unsuspended = admitted.clone();
        unsuspended["spec"]["suspend"] = json!(false);
        unsuspended["spec"]["template"]["spec"]["nodeSelector"] = json!({"flavor": "a100"});
        let update = ask(
            Endpoint::Validate,
            unsuspended.clone(),
            Some(admitted.clone()),
        );
        assert!(update.response.allowed);
        let mutate = ask(Endpoint::Mutate, unsuspended, Some(admitted.clone()));
        assert!(
            mutate.patch.0.is_empty(),
            "Kueue's admission UPDATE is never patched"
        );
        // A tenant's UPDATE taking the Job out of Kueue.
        let mut out = admitted.clone();
        out["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = json!("");
        let denied = ask(Endpoint::Validate, out, Some(admitted.clone()));
        assert!(!denied.response.allowed);
        assert!(denied.response.status.as_ref().unwrap().message.contains(
            r#"label kueue.x-k8s.io/queue-name="" is not the queue's "team-a" (kueue.localQueue)"#
        ));
        // A Job that already differed before launchgate's rule: its UPDATEs pass, with a warning.
        let old = job(labels("team-b", "3600"));
        let mut relabelled = old.clone();
        relabelled["metadata"]["labels"]["note"] = json!("x");
        let kept = ask(Endpoint::Validate, relabelled, Some(old));
        assert!(kept.response.allowed);
        assert!(kept.response.warnings[0].contains("already so before this update"));
    }
}

#[cfg(test)]
mod update_tests;
