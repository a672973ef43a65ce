//! launchgate: a Kubernetes admission webhook for ML launch workloads.
//!
//! The crate is split into a pure core and thin I/O shells:
//!
//! * [`review`] — the one entry point: AdmissionReview request bytes + [`policy::Policy`]
//!   → AdmissionReview response bytes. No I/O, no clock, no globals.
//! * [`admission`] — the AdmissionReview v1 wire types (request in, response out).
//! * [`workload`] — the Workload view: where pod specs live in a Pod, a batch/v1 Job,
//!   a Volcano Job and a PyTorchJob.
//! * [`policy`] — the configuration model, loading, checking and queue resolution.
//! * [`mutate`] — one module per mutation, run in a fixed order.
//! * [`patch`] — the JSON Patch of a mutation, recorded as the mutators write.
//! * [`validate`] — queue template limits.
//! * [`rules`] — the rule table: one entry per denial, and the structured [`rules::Violation`]
//!   every check returns.
//! * [`judge`] — mutate, then validate the mutated object, as the API server does.
//! * [`audit`] — judging the workloads already in a cluster (PolicyReports).
//! * [`native`] — the policy compiled to ValidatingAdmissionPolicies and
//!   MutatingAdmissionPolicies, with what stays in the webhook.
//! * [`server`], [`cli`], [`certs`] — the HTTPS server, the offline CLI and certificate tooling.
//! * [`reference`] — the documentation site's reference pages, written from the code.

#![deny(missing_docs)]

pub mod admission;
pub mod audit;
pub(crate) mod cel;
pub mod certs;
pub mod cli;
pub mod cluster;
pub mod error;
pub(crate) mod json;
pub(crate) mod judge;
pub(crate) mod kinds;
pub(crate) mod manifest;
pub(crate) mod mutate;
pub mod native;
pub(crate) mod patch;
pub mod policy;
pub(crate) mod pytorch;
pub mod quantity;
pub mod reference;
pub mod review;
pub mod rules;
pub mod server;
pub(crate) mod topology;
pub(crate) mod validate;
pub(crate) mod workload;

pub use kinds::WorkloadKind;
pub use policy::Policy;
pub use review::{Endpoint, RequestError, ReviewOutcome, ReviewSummary, review};
