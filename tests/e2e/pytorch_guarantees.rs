//! Nothing launchgate writes makes a run hang: what the pods that actually run see.

use crate::common::env_entry;
use crate::ctx::{Ctx, manifest};
use crate::workloads::volcano_pod;
use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

/// The effective (last) value of env var `name` in a container, as the kubelet reads it.
fn effective<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    env_entry(container, name).and_then(|e| e["value"].as_str())
}

/// A Volcano Job with a tensorboard task beside its master and workers: the pods the Volcano
/// controller creates carry its pytorch plugin's appended env — before Volcano v1.12 a
/// `WORLD_SIZE` that sums every task's replicas (4 here) — after the template's. Every pod
/// that runs, tensorboard's included, sees `WORLD_SIZE` and `PET_NNODES` = the rendezvous size
/// (master + workers = 3).
pub async fn volcano_pods_see_the_rendezvous_size_despite_the_plugin(ctx: &Ctx) -> Result<()> {
    let mut job = manifest("vcjob.yaml");
    let tensorboard = json!({"name": "tensorboard", "replicas": 1, "template": {
        "metadata": {"labels": {"wandb.ai/monitor": "true"}},
        "spec": {"restartPolicy": "OnFailure",
            "containers": [{"name": "tensorboard", "image": "acme/tensorboard:1"}]}}});
    job["spec"]["tasks"]
        .as_array_mut()
        .context("tasks")?
        .push(tensorboard);
    let job = ctx.create(&job, false).await?;
    let job_name = job["metadata"]["name"].as_str().context("name")?;
    let master_addr = format!("{job_name}-master-0.{job_name}");
    for (task, index, rank) in [
        ("master", 0, Some("0")),
        ("worker", 1, Some("2")),
        ("tensorboard", 0, None),
    ] {
        let mut pod = volcano_pod(&job, task, index)?;
        // What the plugin (OnPodCreate, before v1.12) appends to every container.
        for c in pod["spec"]["containers"]
            .as_array_mut()
            .context("containers")?
        {
            let env = c["env"].as_array_mut().context("env")?;
            env.push(json!({"name": "MASTER_ADDR", "value": master_addr}));
            env.push(json!({"name": "MASTER_PORT", "value": "23456"}));
            env.push(json!({"name": "WORLD_SIZE", "value": "4"}));
            if let Some(rank) = rank {
                env.push(json!({"name": "RANK", "value": rank}));
            }
        }
        let pod = ctx.create(&pod, false).await?;
        let c = &pod["spec"]["containers"][0];
        ensure!(
            effective(c, "WORLD_SIZE") == Some("3"),
            "{task}-{index}: WORLD_SIZE {:?} (the rendezvous is master + workers = 3)",
            effective(c, "WORLD_SIZE")
        );
        if let Some(nnodes) = effective(c, "PET_NNODES") {
            ensure!(nnodes == "3", "{task}-{index}: PET_NNODES {nnodes}");
        }
    }
    Ok(())
}
