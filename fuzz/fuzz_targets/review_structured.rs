//! Structure-aware AdmissionReviews: a recorded fixture with edits chosen by the input
//! (values replaced by strings, numbers, nulls, objects or lists; keys deleted; list entries
//! such as containers and env vars duplicated; subtrees copied; the request's kind,
//! operation, sub-resource and namespace changed), reviewed on both endpoints with the
//! default or the wide policy.
#![no_main]

use arbitrary::Unstructured;
use launchgate_fuzz::{edited_review, review_both};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((policy, body)) = edited_review(&mut Unstructured::new(data)) {
        let _ = review_both(policy, &body);
    }
});
