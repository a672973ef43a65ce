//! Launch guardrails on the real control plane: the real Job controller honours
//! `podFailurePolicy` and `successPolicy`, so a test marks pods Failed or Succeeded through the
//! status subresource (as a kubelet would) and watches what the controller does.

use crate::ctx::{CONTROLLER_WAIT, Ctx, manifest};
use crate::webhook::GUARDRAILS_QUEUE;
use anyhow::{Context, Result, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::Duration;

fn launch_job(name: &str, queue: Option<&str>, spec: Value) -> Value {
    let mut labels = json!({"wandb.ai/monitor": "true"});
    if let Some(q) = queue {
        labels["launchgate.io/queue"] = json!(q);
    }
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": labels}, "spec": spec})
}

fn container(gpus: i64, command: &[&str]) -> Value {
    json!({"name": "train", "image": "acme/train:1", "command": command,
           "resources": {"limits": {"nvidia.com/gpu": gpus}}})
}

/// Marks `pod` terminal as a kubelet would: `phase`, its container's exit code and, for a
/// disruption, the `DisruptionTarget` condition the scheduler or the eviction API sets.
pub(crate) async fn finish_pod(
    ctx: &Ctx,
    pod: &Value,
    phase: &str,
    exit_code: i32,
    disrupted: bool,
) -> Result<()> {
    let name = pod["metadata"]["name"].as_str().context("pod name")?;
    let container = pod["spec"]["containers"][0]["name"]
        .as_str()
        .unwrap_or("train");
    let mut conditions = Vec::new();
    if disrupted {
        conditions.push(json!({"type": "DisruptionTarget", "status": "True",
            "reason": "PreemptionByScheduler", "message": "preempted by a higher-priority run",
            "lastTransitionTime": "2026-11-25T00:00:00Z"}));
    }
    let status = json!({"status": {"phase": phase, "conditions": conditions,
        "containerStatuses": [{"name": container, "image": "acme/train:1", "imageID": "",
            "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": exit_code, "reason": if exit_code == 0 { "Completed" } else { "Error" },
                "startedAt": "2026-11-25T00:00:00Z", "finishedAt": "2026-11-25T00:01:00Z"}}}]}});
    let pods: Api<Pod> = ctx.api();
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("marking {name} {phase}"))?;
    Ok(())
}

/// The Job's condition of `type`, when true.
pub(crate) async fn condition(ctx: &Ctx, name: &str, kind: &str) -> Result<bool> {
    let jobs: Api<Job> = ctx.api();
    let job = serde_json::to_value(jobs.get(name).await?)?;
    Ok(job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True"))
}

/// (1) The W&B tutorial's Volcano Job (`minAvailable: 1` with three pods to rendezvous) comes
/// back with `minAvailable: 3`; in a queue that denies instead, it is denied with the numbers.
pub async fn a_gang_starts_whole_or_is_denied(ctx: &Ctx) -> Result<()> {
    let (status, created, warnings) = ctx.create_raw(&manifest("vcjob.yaml"), false).await?;
    ensure!(status == 201, "{status} {created}");
    ensure!(
        created["spec"]["minAvailable"] == 3,
        "minAvailable {}",
        created["spec"]["minAvailable"]
    );
    ensure!(
        warnings
            .iter()
            .any(|w| w.contains("raised to 3 so it starts whole")),
        "warnings {warnings:?}"
    );
    let mut strict = manifest("vcjob.yaml");
    strict["metadata"]["name"] = json!("strict");
    strict["metadata"]["labels"]["launchgate.io/queue"] = json!(GUARDRAILS_QUEUE);
    let (status, body, _) = ctx.create_raw(&strict, false).await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(status == 403, "{status} {body}");
    ensure!(
        message.contains(&format!("queue {GUARDRAILS_QUEUE:?}"))
            && message.contains("spec.minAvailable=1 is below the job's rendezvous size 3")
            && message.contains("guardrails.gang: deny"),
        "{message}"
    );
    Ok(())
}

/// (2) A launch Job with `backoffLimit: 0`: a pod failed by a preemption is replaced and the
/// Job goes on; a plain failure still fails it.
pub async fn a_preempted_pod_is_replaced_and_a_failure_still_fails(ctx: &Ctx) -> Result<()> {
    let job = launch_job(
        "preempted",
        None,
        json!({"template": {"spec": {
        "restartPolicy": "Never", "containers": [container(1, &["python", "train.py"])]}}}),
    );
    let created = ctx.create(&job, false).await?;
    ensure!(created["spec"]["backoffLimit"] == 0, "{}", created["spec"]);
    ensure!(
        created["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["type"]
            == "DisruptionTarget",
        "no podFailurePolicy: {}",
        created["spec"]
    );
    let selector = "batch.kubernetes.io/job-name=preempted";
    let first = ctx.wait_for_pods(selector, 1).await?.remove(0);
    finish_pod(ctx, &first, "Failed", 137, true).await?;
    let first_name = first["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let replacement = ctx
        .poll(
            "a replacement for the preempted pod",
            CONTROLLER_WAIT,
            || async {
                Ok(ctx.pods(selector).await?.into_iter().find(|p| {
                    p["metadata"]["name"] != first_name.as_str() && p["status"]["phase"] != "Failed"
                }))
            },
        )
        .await?;
    ensure!(
        !condition(ctx, "preempted", "Failed").await?,
        "the Job failed on a preemption"
    );
    finish_pod(ctx, &replacement, "Failed", 1, false).await?;
    ctx.wait_for(
        "the Job to fail on a plain failure",
        CONTROLLER_WAIT,
        || async { condition(ctx, "preempted", "Failed").await },
    )
    .await
}

/// (3) With `endWithRankZero`, a distributed Indexed Job completes when index 0 succeeds,
/// although its other indexes still run.
pub async fn a_run_ends_when_rank_zero_ends(ctx: &Ctx) -> Result<()> {
    let job = launch_job(
        "ddp",
        Some(GUARDRAILS_QUEUE),
        json!({
        "completionMode": "Indexed", "completions": 3, "parallelism": 3, "activeDeadlineSeconds": 600,
        "template": {"spec": {"subdomain": "ddp", "restartPolicy": "Never",
            "containers": [container(1, &["torchrun", "train.py"])]}}}),
    );
    let created = ctx.create(&job, false).await?;
    ensure!(
        created["spec"]["successPolicy"] == json!({"rules": [{"succeededIndexes": "0"}]}),
        "{}",
        created["spec"]
    );
    let pods = ctx
        .wait_for_pods("batch.kubernetes.io/job-name=ddp", 3)
        .await?;
    let rank0 = pods
        .iter()
        .find(|p| p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "0")
        .context("no index 0 pod")?;
    finish_pod(ctx, rank0, "Succeeded", 0, false).await?;
    ctx.wait_for(
        "the Job to complete on index 0",
        CONTROLLER_WAIT,
        || async { condition(ctx, "ddp", "Complete").await },
    )
    .await
}

/// (6) A run without a deadline gets the queue's; one over the queue's GPU-hour cap is denied
/// with the arithmetic.
pub async fn a_run_gets_a_deadline_and_an_over_cap_run_is_denied(ctx: &Ctx) -> Result<()> {
    let small = launch_job(
        "small",
        Some(GUARDRAILS_QUEUE),
        json!({"template": {"spec": {
        "restartPolicy": "Never", "containers": [container(1, &["python", "train.py"])]}}}),
    );
    let created = ctx.create(&small, false).await?;
    ensure!(
        created["spec"]["activeDeadlineSeconds"] == 3600,
        "{}",
        created["spec"]
    );
    let big = launch_job(
        "big",
        Some(GUARDRAILS_QUEUE),
        json!({"parallelism": 4, "completions": 4,
        "template": {"spec": {"restartPolicy": "Never", "containers": [container(4, &["python", "train.py"])]}}}),
    );
    let (status, body, _) = ctx.create_raw(&big, false).await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(status == 403, "{status} {body}");
    ensure!(
        message.contains("16 GPUs at once (nvidia.com/gpu spec.template: 4 × 4) × activeDeadlineSeconds 3600 (1.00 h) = 16.00 GPU-hours exceeds the queue's maximum 8 GPU-hours per run")
            && message.contains("set activeDeadlineSeconds to at most 1800"),
        "{message}"
    );
    Ok(())
}

/// (7) With cluster lookups, a wired Indexed Job is told when the headless Service its pods
/// rendezvous through is missing or cannot give them DNS names in time, and not once it can.
pub async fn the_rendezvous_service_is_preflighted(ctx: &Ctx) -> Result<()> {
    let job = launch_job(
        "ddp",
        Some(GUARDRAILS_QUEUE),
        json!({
        "completionMode": "Indexed", "completions": 2, "parallelism": 2,
        "template": {"metadata": {"labels": {"app": "ddp"}}, "spec": {"subdomain": "ddp",
            "restartPolicy": "Never", "containers": [container(1, &["torchrun", "train.py"])]}}}),
    );
    let preflight = || async {
        let (status, body, warnings) = ctx.create_raw(&job, true).await?;
        ensure!(status == 201, "{status} {body}");
        Ok::<_, anyhow::Error>(
            warnings
                .into_iter()
                .filter(|w| w.contains("rendezvous preflight"))
                .collect::<Vec<_>>(),
        )
    };
    let missing = preflight().await?;
    ensure!(
        missing.len() == 1
            && missing[0].contains(&format!("Service {}/ddp does not exist (yet)", ctx.ns)),
        "{missing:?}"
    );
    let services: Api<Service> = ctx.api();
    let wrong = json!({"metadata": {"name": "ddp"}, "spec": {"clusterIP": "None",
        "selector": {"app": "other"}, "ports": [{"name": "http", "port": 80}]}});
    services
        .create(&PostParams::default(), &serde_json::from_value(wrong)?)
        .await?;
    let found = ctx
        .poll(
            "the Service in launchgate's cache",
            Duration::from_secs(30),
            || async {
                let w = preflight().await?;
                Ok((!w.iter().any(|w| w.contains("does not exist"))).then_some(w))
            },
        )
        .await?;
    let text = found.join("\n");
    for part in [
        "selects app=other",
        "rendezvous port 23456",
        "publishNotReadyAddresses",
    ] {
        ensure!(text.contains(part), "{part}: {text}");
    }
    let right = json!({"metadata": {"name": "ddp"}, "spec": {"clusterIP": "None",
        "selector": {"app": null, "batch.kubernetes.io/job-name": "ddp"}, "publishNotReadyAddresses": true,
        "ports": [{"name": "rendezvous", "port": 23456}]}});
    services
        .patch("ddp", &PatchParams::default(), &Patch::Merge(&right))
        .await?;
    ctx.wait_for("the preflight to pass", Duration::from_secs(30), || async {
        Ok(preflight().await?.is_empty())
    })
    .await
}
