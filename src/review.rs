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
use crate::policy::{Policy, Queue, WorkloadMatch};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Outcome {
    /// Not ours (kind, operation, not a launch workload, excluded): allowed untouched.
    #[default]
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
#[derive(Debug, Clone, Default)]
pub struct ReviewSummary {
    pub kind: &'static str,
    pub operation: &'static str,
    pub outcome: Outcome,
    pub queue: Option<String>,
    pub patch_operations: usize,
    /// Size of the JSON Patch as sent (before base64), bytes.
    pub patch_bytes: usize,
    /// Violations found under `audit` enforcement (logged and counted, not shown).
    pub audit_violations: Vec<String>,
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
    /// Queue limit violations, whatever the queue's enforcement (deny, warn or audit).
    pub violations: Vec<String>,
    /// The queue's limit enforcement when there were violations (`deny`, `warn`, `audit`).
    pub enforcement: Option<&'static str>,
    /// The denial message sent to the client.
    pub message: Option<String>,
    /// The warnings sent to the client.
    pub warnings: Vec<String>,
}

/// The controller owning an object (for Events about a controller-made pod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
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
        dry_run: request.dry_run.unwrap_or(false),
        ..ReviewSummary::default()
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
    describe_request(&mut summary, request, object);
    let queue = resolution.queue;
    let ctx = MutationContext {
        kind,
        queue_name: &queue.name,
        settings: queue.mutation_settings(),
        sidecars: &policy.config.match_rules.sidecar_containers,
        request,
        cluster,
    };
    let mut findings = Findings::default();
    findings.warnings.extend(resolution.warning.clone());
    match endpoint {
        Endpoint::Mutate => mutate_decision(&ctx, object, findings, summary),
        Endpoint::Validate => validate_decision(&ctx, queue, object, findings, summary),
    }
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
    let mut response = if findings.denials.is_empty() {
        AdmissionResponse::allow(uid).with_patch(&patch)
    } else {
        summary.outcome = Outcome::Denied;
        AdmissionResponse::deny(uid, findings.denials.join("\n"))
    };
    response.warnings = bounded_warnings(findings.warnings);
    summary.patch_operations = if response.allowed { patch.0.len() } else { 0 };
    summary.patch_bytes = response.patch.as_deref().map_or(0, base64_decoded_len);
    summary.message = response.status.as_ref().map(|s| s.message.clone());
    summary.warnings = response.warnings.clone();
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
    let patch = diff(object, &mutated);
    summary.outcome = if patch.0.is_empty() {
        Outcome::Allowed
    } else {
        Outcome::Patched
    };
    finish(&ctx.request.uid, findings, patch, summary)
}

/// Length of the bytes a padded base64 text decodes to.
fn base64_decoded_len(b64: &str) -> usize {
    let padding = b64.bytes().rev().take_while(|&b| b == b'=').count();
    (b64.len() / 4 * 3).saturating_sub(padding)
}

/// The JSON Patch from `original` to `mutated`: exactly the operations, in the same order, that
/// `json_patch::diff` produces, without its cost on the untouched part of the object.
///
/// `json_patch::diff` descends into every member and element and builds (and escapes) a JSON
/// Pointer for each, even where nothing changed; on a Pod that is most of the document
/// (`managedFields`, volumes, untouched containers). Here an equal member is skipped after one
/// allocation-free comparison, so pointers are only built along the paths that changed. The
/// operations are the same: diffing two equal values yields no operation, so skipping them
/// changes neither the set nor the order of what is emitted.
fn diff(original: &Value, mutated: &Value) -> json_patch::Patch {
    let mut patch = json_patch::Patch(Vec::new());
    let mut pointer = json_patch::jsonptr::PointerBuf::new();
    diff_value(original, mutated, &mut pointer, &mut patch.0);
    patch
}

fn diff_value(
    left: &Value,
    right: &Value,
    pointer: &mut json_patch::jsonptr::PointerBuf,
    ops: &mut Vec<json_patch::PatchOperation>,
) {
    use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation};
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => {
            for (key, r_value) in r {
                match l.get(key) {
                    Some(l_value) if l_value == r_value => {}
                    Some(l_value) => {
                        pointer.push_back(key);
                        diff_value(l_value, r_value, pointer, ops);
                        pointer.pop_back();
                    }
                    None => {
                        pointer.push_back(key);
                        ops.push(PatchOperation::Add(AddOperation {
                            path: pointer.clone(),
                            value: r_value.clone(),
                        }));
                        pointer.pop_back();
                    }
                }
            }
            for key in l.keys() {
                if !r.contains_key(key) {
                    pointer.push_back(key);
                    ops.push(PatchOperation::Remove(RemoveOperation {
                        path: pointer.clone(),
                    }));
                    pointer.pop_back();
                }
            }
        }
        (Value::Array(l), Value::Array(r)) => {
            let mut shift = 0usize;
            for idx in 0..l.len().max(r.len()) {
                match (l.get(idx), r.get(idx)) {
                    (Some(l_item), Some(r_item)) => {
                        if l_item != r_item {
                            pointer.push_back(idx - shift);
                            diff_value(l_item, r_item, pointer, ops);
                            pointer.pop_back();
                        }
                    }
                    (Some(_), None) => {
                        pointer.push_back(idx - shift);
                        shift += 1;
                        ops.push(PatchOperation::Remove(RemoveOperation {
                            path: pointer.clone(),
                        }));
                        pointer.pop_back();
                    }
                    (None, Some(r_item)) => {
                        pointer.push_back(idx - shift);
                        ops.push(PatchOperation::Add(AddOperation {
                            path: pointer.clone(),
                            value: r_item.clone(),
                        }));
                        pointer.pop_back();
                    }
                    (None, None) => unreachable!("idx < max(len)"),
                }
            }
        }
        _ if left == right => {}
        _ => ops.push(PatchOperation::Replace(ReplaceOperation {
            path: pointer.clone(),
            value: right.clone(),
        })),
    }
}

fn validate_decision(
    ctx: &MutationContext<'_>,
    queue: &Queue,
    object: &Value,
    mut findings: Findings,
    mut summary: ReviewSummary,
) -> Decision {
    if matches!(ctx.request.operation, Operation::Create) {
        findings.denials.extend(validate::distributed::denials(
            ctx.kind,
            &queue.config.pytorch,
            object,
            ctx.object_name(object),
        ));
    }
    let report = validate::check_limits(
        &queue.name,
        &queue.limits,
        &validate::Candidate {
            kind: ctx.kind,
            object,
            old_object: ctx.request.old_object.as_ref(),
            namespace: ctx.request.namespace.as_deref(),
            operation: &ctx.request.operation,
        },
        ctx.sidecars,
    );
    findings.warnings.extend(report.warnings);
    summary.outcome = Outcome::Allowed;
    if !report.violations.is_empty() {
        summary.violations = report.violations.clone();
        summary.enforcement = Some(match report.enforcement {
            Enforcement::Deny => "deny",
            Enforcement::Warn => "warn",
            Enforcement::Audit => "audit",
        });
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

#[cfg(test)]
mod diff_tests {
    use super::diff;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn small_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (0i64..4).prop_map(Value::from),
            prop::sample::select(vec!["a", "b", "x/y", "m~n", ""]).prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop::sample::select(vec!["a", "b", "c", "x/y", "m~n", ""])
                        .prop_map(str::to_string),
                    inner,
                    0..5
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn fixture_patches_equal_json_patch_diff() {
        let policy = crate::Policy::embedded_default();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admission");
        let mut patched = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let body = std::fs::read(entry.unwrap().path()).unwrap();
            let request = super::parse_request(&body).unwrap();
            let d = super::decide(
                &policy,
                super::Endpoint::Mutate,
                &request,
                &crate::cluster::NoCluster,
            );
            let Some(original) = request.object.as_ref() else {
                continue;
            };
            let mut mutated = original.clone();
            json_patch::patch(&mut mutated, &d.patch).unwrap();
            assert_eq!(d.patch, json_patch::diff(original, &mutated));
            patched += usize::from(!d.patch.0.is_empty());
        }
        assert!(patched >= 5, "the fixtures exercise the diff");
    }

    proptest! {
        #[test]
        fn same_operations_as_json_patch_diff(a in small_value(), b in small_value()) {
            prop_assert_eq!(diff(&a, &b), json_patch::diff(&a, &b));
        }

        #[test]
        fn same_operations_on_edits_of_one_document(a in small_value(), b in small_value()) {
            // Mostly-equal documents: the case the pruning is for.
            let left = json!({"keep": a.clone(), "edit": a.clone(), "list": [a.clone(), 1, a.clone()]});
            let right = json!({"keep": a.clone(), "edit": b.clone(), "list": [a, b]});
            prop_assert_eq!(diff(&left, &right), json_patch::diff(&left, &right));
            prop_assert_eq!(diff(&right, &left), json_patch::diff(&right, &left));
        }
    }
}
