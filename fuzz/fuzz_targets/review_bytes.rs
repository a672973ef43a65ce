//! Arbitrary bytes as an AdmissionReview request body, on both endpoints, with the embedded
//! default policy. Checks every answer (see `launchgate_fuzz::review_checked`) and that a
//! patched object is not patched again; the memory budget's shape scan of the same bytes never
//! panics and never charges less than the body's length-based charge.
#![no_main]

use launchgate_fuzz::{DEFAULT_POLICY, review_both};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cost = launchgate::server::budget::review_cost(data);
    assert!(cost.charge >= data.len() as u64 * 16);
    let _ = review_both(&DEFAULT_POLICY, data);
});
