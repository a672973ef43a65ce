//! The launch guardrails both paths read ([`guardrails`]: a gang below its rendezvous size,
//! the rendezvous Service, a run's GPU-hours, their config). They read the rendezvous size of a
//! distributed job from [`crate::pytorch`].

pub mod guardrails;

// `guardrails` reads the Volcano and PyTorchJob topology as `super::volcano` and
// `super::pytorchjob`.
use crate::pytorch::{pytorchjob, volcano};
