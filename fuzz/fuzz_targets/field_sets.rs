//! Managed fields: a recorded fixture whose `metadata.managedFields` (apply and update records,
//! their field sets, the old object's) get edits chosen by the input, reviewed on both
//! endpoints. Besides every review check, the answer must be byte for byte the one given on
//! the request parsed whole (the review keeps the field sets as text).
#![no_main]

use arbitrary::Unstructured;
use launchgate_fuzz::{edited_managed_fields, review_both};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((policy, body)) = edited_managed_fields(&mut Unstructured::new(data)) {
        let _ = review_both(policy, &body);
    }
});
