//! Subresources that change what the queue's limits cover: `pods/ephemeralcontainers`
//! (`kubectl debug`) and `pytorchjobs/scale` (the real PyTorchJob CRD scales
//! `Worker.replicas`), as the chart registers them.

use crate::ctx::{Ctx, manifest};
use crate::webhook::REGISTRY_QUEUE;
use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

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

/// The PyTorchJob CRD's scale subresource sets `Worker.replicas` through a Scale that carries
/// no labels: a scale-up is denied with the judged way to do it, a scale-down is allowed.
pub async fn pytorchjob_scale_up_is_denied(ctx: &Ctx) -> Result<()> {
    let job = ctx.create(&manifest("ptjob.yaml"), false).await?;
    let name = job["metadata"]["name"].as_str().context("name")?;
    let api = ctx.api_for(&job)?;
    let scale = |n: i64| Patch::Merge(json!({"spec": {"replicas": n}}));
    match api
        .patch_scale(name, &PatchParams::default(), &scale(64))
        .await
    {
        Ok(s) => bail!("scaling Worker replicas 2 → 64 was admitted: {s:?}"),
        Err(kube::Error::Api(s)) => ensure!(
            s.message
                .contains("through the scale subresource is denied")
                && s.message.contains("Worker.replicas"),
            "message {:?}",
            s.message
        ),
        Err(e) => bail!("unexpected error: {e}"),
    }
    api.patch_scale(name, &PatchParams::default(), &scale(1))
        .await
        .context("a scale-down")?;
    let stored = ctx.get(&job, name).await?.context("the PyTorchJob")?;
    ensure!(
        stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1,
        "{}",
        stored["spec"]["pytorchReplicaSpecs"]["Worker"]
    );
    Ok(())
}
