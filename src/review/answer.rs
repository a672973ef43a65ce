//! The answer: one value per decision (the response, its patch, its summary), rendered once
//! from the findings.

use super::request::operation_name;
use crate::admission::{AdmissionRequest, AdmissionResponse};
use crate::mutate::Findings;
use crate::rules::{self, Effect, Violation, Warning};
use crate::workload::WorkloadKind;
use serde_json::Value;

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

impl ReviewSummary {
    /// The violations answered by `audit` enforcement: logged, counted and in the API server's
    /// audit log, not shown.
    pub fn audit_violations(&self) -> impl Iterator<Item = &Violation> {
        self.violations.iter().filter(|v| v.effect == Effect::Audit)
    }

    /// What the request is before any stage reads it: its kind (`other` when launchgate does
    /// not judge it), operation and dry run.
    pub(super) fn of(request: &AdmissionRequest, kind: Option<WorkloadKind>) -> Self {
        ReviewSummary {
            kind: kind.map_or("other", WorkloadKind::as_str),
            operation: operation_name(&request.operation),
            dry_run: request.dry_run.unwrap_or(false),
            ..ReviewSummary::default()
        }
    }
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

/// Fills in who and what the request is about (only for launch workloads: skipped requests are
/// neither logged nor counted per object, so they do not pay for it).
pub(super) fn describe_request(
    summary: &mut ReviewSummary,
    request: &AdmissionRequest,
    object: &Value,
) {
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

/// The answer: allowed (with `patch`) unless a finding denies, the warnings bounded to what
/// the API server shows, and the summary filled from the same findings.
pub(super) fn finish(
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
    let audit: Vec<&str> = summary
        .audit_violations()
        .map(|v| v.message.as_str())
        .collect();
    if !audit.is_empty() {
        response.audit_annotations.insert(
            "limit-violations".into(),
            rules::bounded_message(audit.into_iter(), std::iter::empty()),
        );
    }
    Decision {
        response,
        patch,
        summary,
    }
}

/// Trims warnings to what the API server will show without truncating mid-word.
/// Each keeps its id; what is cut is replaced by one [`rules::SERVER_WARNINGS_OMITTED`].
pub(super) fn bounded_warnings(warnings: Vec<Warning>) -> Vec<Warning> {
    let count = warnings.len();
    let mut out = Vec::with_capacity(count);
    let mut total = 0;
    for (i, mut w) in warnings.into_iter().enumerate() {
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
                format!("launchgate: {} further warnings omitted", count - i),
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

/// A request launchgate leaves alone for `why` (`ReviewSummary::skipped`): allowed untouched.
pub(super) fn skip(
    request: &AdmissionRequest,
    summary: ReviewSummary,
    why: &'static str,
) -> Decision {
    Decision {
        response: AdmissionResponse::allow(&request.uid),
        patch: json_patch::Patch(Vec::new()),
        summary: ReviewSummary {
            skipped: Some(why),
            ..summary
        },
    }
}

/// `decision` with its denial ending in a link to each denying rule's section of the
/// documentation site, when the config says where the site is (`docsUrl`).
pub(super) fn linked(docs_url: Option<&str>, mut decision: Decision) -> Decision {
    let Some(url) = docs_url else {
        return decision;
    };
    let Some(status) = decision.response.status.as_mut() else {
        return decision;
    };
    let ids = rules::ids(
        decision
            .summary
            .violations
            .iter()
            .filter(|v| v.effect == Effect::Deny),
    );
    if ids.is_empty() || decision.response.allowed {
        return decision;
    }
    status.message.push('\n');
    status.message.push_str(&rules::links_line(url, &ids));
    decision.summary.message = Some(status.message.clone());
    decision
}

/// [`finish`] for the mutating webhook: allowed as it was, or patched.
pub(super) fn finish_mutated(
    uid: &str,
    findings: Findings,
    patch: json_patch::Patch,
    mut summary: ReviewSummary,
) -> Decision {
    summary.outcome = if patch.0.is_empty() {
        Outcome::Allowed
    } else {
        Outcome::Patched
    };
    finish(uid, findings, patch, summary)
}
