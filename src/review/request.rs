//! Reading the request: which webhook asks, the AdmissionReview's checks, and the phases a
//! caller can observe.

use crate::admission::{
    ADMISSION_API_VERSION, ADMISSION_KIND, AdmissionRequest, AdmissionReviewRequest, Operation,
};

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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RequestError(pub String);

/// The phases of one review, in order; [`review_observed`](super::review_observed) reports
/// each as it begins.
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

/// What the caller of [`review_observed`](super::review_observed) hears while the core works:
/// each phase as it begins (so the previous one ends), and the request once it is parsed. The core reads no clock; a
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

pub(super) fn operation_name(op: &Operation) -> &'static str {
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
