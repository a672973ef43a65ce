//! LeaderWorkerSet v1 (`leaderworkerset.x-k8s.io/v1`) on the real control plane with the
//! upstream LWS CRD. No LWS controller runs here: what is judged is the LeaderWorkerSet itself,
//! as its user submits it.

use crate::checks::{ensure_nothing_pruned, ensure_stored_launch};
use crate::ctx::Ctx;
use anyhow::{Context, Result, ensure};
use launchgate::Policy;
use serde_json::{Value, json};

/// A queue whose template is a LeaderWorkerSet: groups of a leader and workers of up to 4
/// GPUs each, at most 8 GPUs in all, handed off to the Kueue LocalQueue `team-a`. Served by
/// the [`crate::updates::Own`] launchgate ([`crate::updates::capped_config`]).
pub const LWS_QUEUE: &str = "lws-queue";

/// [`LWS_QUEUE`]'s config: `base` (the built-in queue) with its limits and Kueue hand-off.
pub fn lws_queue(base: &Value) -> Value {
    crate::updates::kind_queue(
        base,
        "apiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\nspec:\n  replicas: '{{groups}}'\n  leaderWorkerTemplate:\n    size: '{{size}}'\n    leaderTemplate:\n      spec:\n        containers:\n          - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}\n    workerTemplate:\n      spec:\n        containers:\n          - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}\n",
        json!({
            "groups": {"type": "integer", "minimum": 1, "maximum": 4},
            "size": {"type": "integer", "minimum": 1, "maximum": 8},
            "gpus": {"type": "integer", "minimum": 0, "maximum": 4},
        }),
    )
}

/// A launch LeaderWorkerSet in `queue` serving a model: `groups` groups of `size` pods (a
/// leader and `size − 1` workers), each of `gpus` GPUs.
pub(crate) fn lws(name: &str, queue: &str, groups: i64, size: i64, gpus: i64) -> Value {
    let template = |role: &str| {
        json!({"metadata": {"labels": crate::updates::queue_labels(queue)},
            "spec": {"containers": [{"name": role, "image": "vllm/vllm-openai:v0.8.5",
                "command": ["sh", "-c", "sleep infinity"],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus}}}]}})
    };
    json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": crate::updates::queue_labels(queue)},
        "spec": {
            "replicas": groups,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": template("leader"),
                "workerTemplate": template("worker")}}})
}

/// The pod templates of the stored `lws`, leader first.
fn templates(lws: &Value) -> [&Value; 2] {
    ["leaderTemplate", "workerTemplate"].map(|t| &lws["spec"]["leaderWorkerTemplate"][t])
}

/// A LeaderWorkerSet over its queue's totals (groups × (leader + (size − 1) workers)) is denied
/// naming the queue, the count and the template; one within is stored with both templates
/// hardened, labelled for Kueue, with nothing launchgate wrote pruned by the real CRD, and no
/// deadline anywhere (it runs until it is deleted).
pub async fn a_leaderworkerset_is_limited_by_its_groups_and_stored_hardened(
    ctx: &Ctx,
) -> Result<()> {
    crate::updates::with_own!(ctx, "lws", limited_and_hardened)
}

async fn limited_and_hardened(ctx: &Ctx) -> Result<()> {
    // (a) 2 groups of a leader and 3 workers, 2 GPUs each: 16 over the queue's 8.
    let (status, body, _) = ctx
        .create_raw(&lws("too-big", LWS_QUEUE, 2, 4, 2), false)
        .await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(status == 403, "a 16-GPU LeaderWorkerSet: {status} {body}");
    for part in [
        &format!("queue \"{LWS_QUEUE}\""),
        "total nvidia.com/gpu over all pods=16",
        "exceeds maximum 8",
        "(totals)",
        "spec.leaderWorkerTemplate.leaderTemplate: 2 × 2",
        "spec.leaderWorkerTemplate.workerTemplate: 6 × 2",
    ] {
        ensure!(message.contains(part), "{message:?} lacks {part:?}");
    }

    // (b) 1 group of a leader and a worker, 4 GPUs each: 8.
    let submitted = lws("serve", LWS_QUEUE, 1, 2, 4);
    let (status, created, _) = ctx.create_raw(&submitted, false).await?;
    ensure!(
        status == 201,
        "an 8-GPU LeaderWorkerSet: {status} {created}"
    );
    let stored = ctx
        .get(&submitted, "serve")
        .await?
        .context("the stored LeaderWorkerSet")?;
    let containers: Vec<&Value> = templates(&stored)
        .iter()
        .map(|t| &t["spec"]["containers"][0])
        .collect();
    ensure_stored_launch(&stored, &containers, "LeaderWorkerSet")?;
    for t in templates(&stored) {
        ensure!(
            t["spec"].get("activeDeadlineSeconds").is_none(),
            "a deadline on a template of a run that lasts until deleted: {t}"
        );
    }
    ensure!(
        !stored.to_string().contains("activeDeadlineSeconds"),
        "a deadline was written: {stored}"
    );
    // Nothing launchgate wrote was pruned: every value its patch writes is stored, and the
    // stored object needs no patch.
    let policy =
        Policy::from_yaml(&crate::updates::capped_config()?).map_err(anyhow::Error::msg)?;
    ensure_nothing_pruned(&policy, &submitted, &ctx.ns, &stored, "LeaderWorkerSet")?;
    Ok(())
}
