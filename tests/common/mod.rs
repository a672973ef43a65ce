//! What the integration tests share, in one place: the files under `tests/` (recorded
//! AdmissionReviews, manifests, queue configs, CRDs, goldens), the review core's answers, the
//! `launchgate` binary, the real HTTPS server on an ephemeral port with a client that trusts
//! its freshly generated certificate, and child processes and a headless browser (`browser`).
//!
//! Every test binary reaches these with `mod common;` (tests/e2e with a `#[path]`); no binary
//! declares its own copy.
#![allow(dead_code, unused_imports)]

pub mod browser;
mod cli;
pub mod docs;
mod files;
pub mod generated;
mod objects;
mod reviews;
mod server;

pub use cli::*;
pub use files::*;
pub use objects::*;
pub use reviews::*;
pub use server::*;
