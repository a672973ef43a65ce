//! The webhook never takes the cluster down: what a request costs is bounded by the server's
//! memory budget, whatever the object's shape.

use crate::ctx::Ctx;
use crate::webhook::SUITE_MEMORY_LIMIT;
use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

/// `VmHWM` (peak resident memory) of a process, in bytes.
fn peak_rss(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("VmHWM")?;
    Ok(kib << 10)
}

/// Launch Pods of many tiny containers, created through the API server: every container is
/// defaulted and listed in `managedFields`, so the review launchgate gets is ~20× the client's
/// body. With 10,000 containers (~3 MB reviewed, ~100 MiB to mutate) launchgate, budgeted for
/// a 256 MiB limit, denies it unreviewed with the reason; with 50,000 (a 1.5 MB client Pod) the
/// review exceeds the 8 MiB body limit and is refused unread (413; the validating webhook's
/// `failurePolicy: Fail` then denies it). Either way launchgate's peak memory stays under the
/// limit.
pub async fn a_dense_pod_is_denied_within_a_256_mib_limit(ctx: &Ctx) -> Result<()> {
    let pid = ctx.env.launchgate_pid.context("launchgate's pid")?;
    let dense = |n: usize| {
        let containers: Vec<Value> = (0..n)
            .map(|i| json!({"name": format!("c{i}"), "image": "busybox"}))
            .collect();
        let mut pod = ctx.launch_pod("dense");
        pod["spec"]["containers"] = Value::Array(containers);
        pod
    };
    let (status, body, _) = ctx.create_raw(&dense(10_000), true).await?;
    ensure!(status == 403, "status {status}: {}", body["message"]);
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(
        message.contains("too large to review") && message.contains("10000 containers"),
        "message {message:?}"
    );
    let (status, body, _) = ctx.create_raw(&dense(50_000), true).await?;
    ensure!(
        status >= 400 && body["message"].as_str().unwrap_or_default().contains("413"),
        "status {status}: {}",
        body["message"]
    );
    let peak = peak_rss(pid)?;
    eprintln!(
        "e2e: launchgate's peak RSS after the dense Pods: {} MiB",
        peak >> 20
    );
    ensure!(
        peak < SUITE_MEMORY_LIMIT,
        "launchgate peaked at {} MiB",
        peak >> 20
    );
    Ok(())
}
