//! The pure core: AdmissionReview request bytes + policy → AdmissionReview response bytes.
//!
//! No I/O, no clock, no globals. The server, the CLI, the tests and the benchmarks all call
//! [`review`] (or [`decide`] for an already parsed request).

use crate::admission::{
    ADMISSION_API_VERSION, ADMISSION_KIND, AdmissionRequest, AdmissionResponse,
    AdmissionReviewRequest, AdmissionReviewResponse, Operation, bounded_warnings,
};
use crate::cluster::ClusterView;
use crate::mutate::{self, Findings, MutationContext};
use crate::policy::{Policy, WorkloadMatch};
use crate::validate::{self, Enforcement};
use crate::workload::WorkloadKind;
use serde_json::Value;
use std::fmt;

/// Which webhook is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Mutate,
    Validate,
}

impl Endpoint {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Not ours (kind, operation, not a launch workload, excluded): allowed untouched.
    Skipped,
    /// Allowed with no change.
    Allowed,
    /// Allowed with a patch.
    Patched,
    /// Allowed despite violations (warn or audit enforcement).
    AllowedWithViolations,
    Denied,
}

impl Outcome {
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

/// A summary of one decision for metrics and logs.
#[derive(Debug, Clone)]
pub struct ReviewSummary {
    pub kind: &'static str,
    pub operation: &'static str,
    pub outcome: Outcome,
    pub queue: Option<String>,
    pub patch_operations: usize,
    /// Violations found under `audit` enforcement (logged and counted, not shown).
    pub audit_violations: Vec<String>,
    pub dry_run: bool,
}

/// The decision on one request: the response plus its summary.
#[derive(Debug, Clone)]
pub struct Decision {
    pub response: AdmissionResponse,
    pub patch: json_patch::Patch,
    pub summary: ReviewSummary,
}

/// The answer to one AdmissionReview.
#[derive(Debug, Clone)]
pub struct ReviewOutcome {
    /// The AdmissionReview response JSON.
    pub body: Vec<u8>,
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
    let request = parse_request(body)?;
    let decision = decide(policy, endpoint, &request, cluster);
    let body = serde_json::to_vec(&AdmissionReviewResponse::new(decision.response))
        .expect("an AdmissionReview response always serialises");
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
    let kind = WorkloadKind::from_gvk(
        &request.kind.group,
        &request.kind.version,
        &request.kind.kind,
    );
    let mut summary = ReviewSummary {
        kind: kind.map_or("other", WorkloadKind::as_str),
        operation: operation_name(&request.operation),
        outcome: Outcome::Skipped,
        queue: None,
        patch_operations: 0,
        audit_violations: Vec::new(),
        dry_run: request.dry_run.unwrap_or(false),
    };
    let skip = |summary: ReviewSummary| Decision {
        response: AdmissionResponse::allow(&request.uid),
        patch: json_patch::Patch(Vec::new()),
        summary,
    };
    let (Some(kind), Some(object)) = (kind, request.object.as_ref()) else {
        return skip(summary);
    };
    if !matches!(request.operation, Operation::Create | Operation::Update)
        || request
            .sub_resource
            .as_deref()
            .is_some_and(|s| !s.is_empty())
        || !object.is_object()
    {
        return skip(summary);
    }
    if policy.classify(kind, object) != WorkloadMatch::Launch {
        return skip(summary);
    }
    let Some(resolution) = policy.resolve_queue(kind, object, request.namespace.as_deref()) else {
        let mut d = skip(summary);
        d.response.warnings.push(
            "launchgate: launch workload names no configured queue and no default queue is set; nothing was checked".into(),
        );
        return d;
    };
    summary.queue = Some(resolution.queue.name.clone());
    let ctx = MutationContext {
        kind,
        policy,
        queue: resolution.queue,
        request,
        cluster,
    };
    let mut findings = Findings::default();
    findings.warnings.extend(resolution.warning.clone());
    match endpoint {
        Endpoint::Mutate => mutate_decision(&ctx, object, findings, summary),
        Endpoint::Validate => validate_decision(&ctx, object, findings, summary),
    }
}

fn finish(
    uid: &str,
    findings: Findings,
    patch: json_patch::Patch,
    mut summary: ReviewSummary,
) -> Decision {
    let mut response = if findings.denials.is_empty() {
        AdmissionResponse::allow(uid).with_patch(&patch)
    } else {
        summary.outcome = Outcome::Denied;
        AdmissionResponse::deny(uid, findings.denials.join("\n"))
    };
    response.warnings = bounded_warnings(findings.warnings);
    summary.patch_operations = if response.allowed { patch.0.len() } else { 0 };
    Decision {
        response,
        patch,
        summary,
    }
}

fn mutate_decision(
    ctx: &MutationContext<'_>,
    object: &Value,
    mut findings: Findings,
    mut summary: ReviewSummary,
) -> Decision {
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
    let mut mutated = object.clone();
    mutate::apply_all(ctx, &mut mutated, &mut findings);
    let patch = json_patch::diff(object, &mutated);
    summary.outcome = if patch.0.is_empty() {
        Outcome::Allowed
    } else {
        Outcome::Patched
    };
    finish(&ctx.request.uid, findings, patch, summary)
}

fn validate_decision(
    ctx: &MutationContext<'_>,
    object: &Value,
    mut findings: Findings,
    mut summary: ReviewSummary,
) -> Decision {
    if matches!(ctx.request.operation, Operation::Create) {
        findings.extend(mutate::pytorch::check(ctx, object));
    }
    let report = validate::check_limits(
        ctx.queue,
        ctx.kind,
        object,
        ctx.request.old_object.as_ref(),
        ctx.request.namespace.as_deref(),
        &ctx.request.operation,
    );
    findings.warnings.extend(report.warnings);
    summary.outcome = Outcome::Allowed;
    if !report.violations.is_empty() {
        match report.enforcement {
            Enforcement::Deny => findings.denials.extend(report.violations),
            Enforcement::Warn => {
                summary.outcome = Outcome::AllowedWithViolations;
                findings.warnings.extend(report.violations);
            }
            Enforcement::Audit => {
                summary.outcome = Outcome::AllowedWithViolations;
                summary.audit_violations = report.violations;
            }
        }
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
