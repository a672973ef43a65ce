//! Subresources that change what the queue's limits cover: `pods/ephemeralcontainers`
//! (`kubectl debug`) and `pytorchjobs/scale` (the real PyTorchJob CRD scales
//! `Worker.replicas`), as the chart registers them.

use crate::ctx::{Ctx, manifest};
use crate::webhook::{KUEUE_QUEUE, REGISTRY_QUEUE};
use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;

/// `kubectl debug` adds an ephemeral container: it gets the queue's container securityContext
/// defaults, and one from a registry the queue does not allow is denied.
pub async fn ephemeral_containers_are_judged(ctx: &Ctx) -> Result<()> {
    let mut pod = ctx.launch_pod("debugged");
    pod["metadata"]["labels"]["queue"] = json!(REGISTRY_QUEUE);
    ctx.create(&pod, false).await.context("the pod")?;
    let pods: Api<Pod> = ctx.api();
    let debug = |name: &str, image: &str| {
        json!({"spec": {"ephemeralContainers": [
            {"name": name, "image": image, "command": ["sh"], "stdin": true, "tty": true}]}})
    };
    let patched = pods
        .patch_ephemeral_containers(
            "debugged",
            &PatchParams::default(),
            &Patch::Strategic(debug("debugger", "acme/debug:1")),
        )
        .await
        .context("an ephemeral container from an allowed registry")?;
    let value = serde_json::to_value(&patched)?;
    let sc = &value["spec"]["ephemeralContainers"][0]["securityContext"];
    ensure!(
        sc["allowPrivilegeEscalation"] == false && sc["capabilities"]["drop"] == json!(["ALL"]),
        "the ephemeral container got no securityContext defaults: {sc}"
    );
    match pods
        .patch_ephemeral_containers(
            "debugged",
            &PatchParams::default(),
            &Patch::Strategic(debug("shell", "busybox")),
        )
        .await
    {
        Ok(_) => bail!("an ephemeral container from docker.io/library was admitted"),
        Err(kube::Error::Api(s)) => ensure!(
            s.message.contains("not from an allowed registry")
                && s.message.contains("ephemeralContainers"),
            "message {:?}",
            s.message
        ),
        Err(e) => bail!("unexpected error: {e}"),
    }
    Ok(())
}

/// Scales `name` through the scale subresource once launchgate's PyTorchJob cache has it (a
/// Scale of a PyTorchJob the cache has not seen yet is refused as unjudgeable).
async fn scale(
    ctx: &Ctx,
    api: &Api<kube::api::DynamicObject>,
    name: &str,
    replicas: i64,
) -> Result<Result<(), Box<kube::core::Status>>> {
    let patch = &Patch::Merge(json!({"spec": {"replicas": replicas}}));
    ctx.poll(
        "launchgate's PyTorchJob cache to hold the job",
        Duration::from_secs(30),
        || async move {
            match api.patch_scale(name, &PatchParams::default(), patch).await {
                Ok(_) => Ok(Some(Ok(()))),
                Err(kube::Error::Api(s)) if s.message.contains("not in launchgate's cache") => {
                    Ok(None)
                }
                Err(kube::Error::Api(s)) => Ok(Some(Err(s))),
                Err(e) => bail!("unexpected error: {e}"),
            }
        },
    )
    .await
}

/// The PyTorchJob CRD's scale subresource sets `Worker.replicas` through a Scale that carries
/// no labels. launchgate judges it against the PyTorchJob it scales (its cached watch): another
/// team's PyTorchJob scales freely; a launch PyTorchJob's scale is judged by its queue, as an
/// update of `Worker.replicas` (a scale-up over the queue's totals is denied naming the queue,
/// the total, its value and the limit; one within them and a scale-down pass).
pub async fn pytorchjob_scale_is_judged_against_its_pytorchjob(ctx: &Ctx) -> Result<()> {
    let with_gpu_and_labels = |name: &str, labels: Value| {
        let mut job = manifest("ptjob.yaml");
        job["metadata"]["name"] = json!(name);
        job["metadata"]["labels"] = labels.clone();
        for role in ["Master", "Worker"] {
            let t = &mut job["spec"]["pytorchReplicaSpecs"][role]["template"];
            t["metadata"]["labels"] = labels.clone();
            t["spec"]["containers"][0]["resources"] = json!({"limits": {"nvidia.com/gpu": 1}});
        }
        job
    };
    // Another team's PyTorchJob (no launch label): not launchgate's to judge.
    let other = ctx
        .create(
            &with_gpu_and_labels("elastic-b", json!({"team": "b"})),
            false,
        )
        .await?;
    let api = ctx.api_for(&other)?;
    if let Err(s) = scale(ctx, &api, "elastic-b", 64).await? {
        bail!(
            "scaling another team's PyTorchJob 2 → 64 was refused: {}",
            s.message
        );
    }
    // A launch PyTorchJob of a queue with at most 4 GPUs in all: 1 master + 2 workers.
    let launch = with_gpu_and_labels(
        "ddp",
        json!({"wandb.ai/monitor": "true", "launchgate.io/queue": KUEUE_QUEUE}),
    );
    ctx.create(&launch, false).await?;
    match scale(ctx, &api, "ddp", 64).await? {
        Ok(()) => bail!("scaling a launch PyTorchJob 2 → 64 Worker replicas was admitted"),
        Err(s) => ensure!(
            s.code == 403
                && s.message.contains("scaling PyTorchJob \"ddp\" from 2 to 64 Worker replicas")
                && s.message.contains(&format!(
                    "queue \"{KUEUE_QUEUE}\": total nvidia.com/gpu over all pods=65 exceeds maximum 4 (totals)"
                )),
            "message {:?}",
            s.message
        ),
    }
    if let Err(s) = scale(ctx, &api, "ddp", 3).await? {
        bail!(
            "a scale within the queue's totals was refused: {}",
            s.message
        );
    }
    if let Err(s) = scale(ctx, &api, "ddp", 1).await? {
        bail!("a scale-down was refused: {}", s.message);
    }
    let stored = ctx.get(&launch, "ddp").await?.context("the PyTorchJob")?;
    ensure!(
        stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1,
        "{}",
        stored["spec"]["pytorchReplicaSpecs"]["Worker"]
    );
    Ok(())
}
