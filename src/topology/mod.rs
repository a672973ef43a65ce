//! The launch guardrails both paths read ([`guardrails`]: a gang below its rendezvous size,
//! the rendezvous Service, a run's GPU-hours, their config), each from the kind's descriptor
//! ([`crate::kinds`]).

pub mod guardrails;
