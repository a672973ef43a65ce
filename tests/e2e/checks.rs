//! Checks the end-to-end tests share on what the API server answered or stored.

use anyhow::{Context, Result, ensure};
use launchgate::Policy;
use launchgate::admission::AdmissionRequest;
use launchgate::cluster::NoCluster;
use launchgate::review::{Endpoint, decide};
use serde_json::{Value, json};

/// Whether container `c` carries launchgate's hardening: no privilege escalation, every
/// capability dropped.
pub fn hardened(c: &Value) -> bool {
    c["securityContext"]["allowPrivilegeEscalation"] == false
        && c["securityContext"]["capabilities"]["drop"] == json!(["ALL"])
}

/// A create answered `status` and `body` (of [`crate::ctx::Ctx::create_raw`]) was denied, its
/// message containing `part`.
pub fn ensure_denied(status: u16, body: &Value, part: &str, what: &str) -> Result<()> {
    ensure!(
        status == 403 && body["message"].as_str().unwrap_or_default().contains(part),
        "{what}: status {status}: {body}"
    );
    Ok(())
}

/// A stored launch workload of `kind`: each of its `containers` hardened and without the
/// PyTorch rendezvous env, labelled for the Kueue LocalQueue `team-a`, its mutations recorded.
pub fn ensure_stored_launch(stored: &Value, containers: &[&Value], kind: &str) -> Result<()> {
    for c in containers {
        ensure!(hardened(c), "stored {kind} container not hardened: {c}");
        ensure!(
            c["env"].as_array().into_iter().flatten().all(|e| ![
                "MASTER_ADDR",
                "WORLD_SIZE",
                "RANK"
            ]
            .contains(&e["name"].as_str().unwrap_or_default())),
            "a {kind} container got PyTorch env: {c}"
        );
    }
    ensure!(
        stored["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a",
        "Kueue label: {}",
        stored["metadata"]["labels"]
    );
    let mutations = crate::ctx::mutations(stored);
    ensure!(
        mutations.is_some_and(|m| m.contains("security-context")),
        "mutations {mutations:?}"
    );
    Ok(())
}

/// Nothing launchgate wrote on `submitted` (created in namespace `ns`, a `what`) was pruned by
/// the API server: `policy`'s patch writes something, every value it writes is in `stored`, and
/// `stored` needs no patch again ([`ensure_needs_no_patch`]).
pub fn ensure_nothing_pruned(
    policy: &Policy,
    submitted: &Value,
    ns: &str,
    stored: &Value,
    what: &str,
) -> Result<()> {
    let mut sent = submitted.clone();
    sent["metadata"]["namespace"] = json!(ns);
    let request = AdmissionRequest::synthetic_create(sent.clone(), None)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("a {what} request"))?;
    let patch = decide(policy, Endpoint::Mutate, &request, &NoCluster).patch;
    ensure!(
        !patch.0.is_empty(),
        "launchgate wrote nothing on the {what}"
    );
    let mut mutated = sent;
    json_patch::patch(&mut mutated, &patch)?;
    for op in patch.0.iter() {
        let path = op.path().to_string();
        if let Some(want) = mutated.pointer(&path) {
            ensure!(
                stored.pointer(&path) == Some(want),
                "{path}: launchgate wrote {want}, the API server stored {:?}",
                stored.pointer(&path)
            );
        }
    }
    ensure_needs_no_patch(policy, stored, &format!("the stored {what}"))
}

/// `policy` admits the stored object `stored` (`what`) as it is, with nothing to patch again:
/// nothing launchgate wrote was pruned.
pub fn ensure_needs_no_patch(policy: &Policy, stored: &Value, what: &str) -> Result<()> {
    let request = AdmissionRequest::synthetic_create(stored.clone(), None)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("{what} as a request"))?;
    let again = decide(policy, Endpoint::Mutate, &request, &NoCluster);
    ensure!(
        again.response.allowed && again.patch.0.is_empty(),
        "{what} would be patched again (pruned?): {:?}",
        again.patch
    );
    Ok(())
}
