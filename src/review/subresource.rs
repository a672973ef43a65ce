//! Per-kind subresources: a kind's scale subresource (a Scale, judged as an UPDATE of the
//! workload it scales) and `pods/ephemeralcontainers` (`kubectl debug`: the new containers get
//! the container defaults).

use super::answer::{Decision, Outcome, ReviewSummary, describe_request, finish, finish_mutated};
use super::request::Endpoint;
use crate::admission::{AdmissionRequest, Operation};
use crate::cluster::ClusterView;
use crate::json::Pointer as _;
use crate::mutate::{self, Findings, MutationContext};
use crate::patch::diff;
use crate::rules::{self, Violation};
use crate::workload::WorkloadKind;
use serde_json::Value;
use std::ops::ControlFlow::{self, Break, Continue};

/// The UPDATE of a workload a Scale amounts to: the workload with the new count.
pub(super) struct AsUpdate {
    /// The request, as an UPDATE of the workload.
    pub(super) request: AdmissionRequest,
    /// The workload with the new count.
    pub(super) object: Value,
    /// What the Scale was.
    pub(super) scaling: Scaling,
}

/// What a Scale was, for the denial of the UPDATE it amounts to.
pub(super) struct Scaling(String);

impl Scaling {
    /// The Scale's decision: the UPDATE's, its denial saying it was a Scale.
    pub(super) fn explain(&self, mut decision: Decision) -> Decision {
        if let Some(status) = decision.response.status.as_mut() {
            status.message = format!("{}:\n{}", self.0, status.message);
            decision.summary.message = Some(status.message.clone());
        }
        decision
    }
}

/// `<resource>/scale` of a kind with a scale subresource ([`crate::kinds::KindSpec::scale`]):
/// an `autoscaling/v1` Scale, which carries neither labels nor pod templates, sets the field
/// the descriptor names (a PyTorchJob's `Worker.replicas`). The Scale is judged against the
/// workload it scales, read from the cluster view (a cached watch): a workload that is no
/// launch workload (or is exempt) is not launchgate's, and passes; a launch workload's Scale is
/// judged by its queue exactly as an UPDATE of that field to the new count. A Scale that
/// cannot be attributed to a launch workload — no cluster lookups, a namespace they do not
/// watch, not listed yet — is not launchgate's to deny, and passes untouched: denying it would
/// stop every team's scaling to guard launchgate's. Only a workload the cache should hold and
/// does not (it watches every one in the namespace and has listed them: created a moment ago)
/// has its scale-up denied, to be retried, with the way it is judged (changing the field on the
/// workload itself); a scale-down, or a Scale that keeps the count, is allowed. Nothing is ever
/// patched.
///
/// `Break`: the Scale is answered here; `Continue(Some)`: judge the UPDATE it amounts to;
/// `Continue(None)`: not a Scale.
pub(super) fn scale(
    endpoint: Endpoint,
    request: &AdmissionRequest,
    object: Option<&Value>,
    cluster: &dyn ClusterView,
) -> ControlFlow<Decision, Option<AsUpdate>> {
    let scaled = request
        .resource
        .as_ref()
        .and_then(|r| WorkloadKind::scaled_through(&r.group, &r.resource));
    let (Some(crate::kinds::SCALE_SUBRESOURCE), Some(kind)) =
        (request.sub_resource.as_deref(), scaled)
    else {
        return Continue(None);
    };
    let mut summary = ReviewSummary::of(request, None);
    let Some(scale) = kind.spec().scale.as_ref() else {
        return Break(finish(
            &request.uid,
            Findings::default(),
            json_patch::Patch(Vec::new()),
            summary,
        ));
    };
    summary.kind = kind.as_str();
    if let Some(scale) = object {
        describe_request(&mut summary, request, scale);
    }
    let replicas = |v: Option<&Value>| {
        v.and_then(|o| o.at(crate::kinds::SCALE_REPLICAS))
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
        return Continue(Some(AsUpdate {
            request: update,
            object: scaled,
            scaling: Scaling(format!(
                "launchgate: scaling {what} {:?} from {old} to {new} {} is judged as an update of {field}",
                request.name, scale.counts
            )),
        }));
    }
    let mut findings = Findings::default();
    if judged && new > old && cluster.lists_workloads(kind, namespace) {
        let message = format!(
            "launchgate: scaling {what} {:?} from {old} to {new} {} through the scale subresource is denied: a Scale carries no labels and the {what} is not in launchgate's cache yet (created a moment ago), so its queue's limits cannot be checked; retry, or change {field} on the {what} instead (checked against its queue)",
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
        decision.summary.skipped = Some(crate::kinds::SCALE_SUBRESOURCE);
    }
    Break(decision)
}

/// `pods/ephemeralcontainers`: `kubectl debug` adding a container to a running pod.
pub(super) fn is_ephemeral(request: &AdmissionRequest) -> bool {
    request.sub_resource.as_deref() == Some("ephemeralcontainers")
}

/// The ephemeral containers `kubectl debug` adds get the container defaults, and
/// `NVIDIA_VISIBLE_DEVICES=void` (they ask for no GPU).
pub(super) fn ephemeral(
    ctx: &MutationContext<'_>,
    object: &mut Value,
    mut findings: Findings,
    summary: ReviewSummary,
) -> Decision {
    let before = object.clone();
    mutate::security_context::mutate_ephemeral(
        ctx,
        object,
        ctx.request.old_object.as_ref(),
        &mut findings,
    );
    mutate::visible_devices::mutate_ephemeral(ctx, object, ctx.request.old_object.as_ref());
    let patch = diff::diff_tree(&before, object);
    finish_mutated(&ctx.request.uid, findings, patch, summary)
}
