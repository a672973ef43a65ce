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
        message.contains("16 GPUs at once (nvidia.com/gpu spec.template: 4 × 4) × spec.activeDeadlineSeconds 3600 (1.00 h) = 16.00 GPU-hours exceeds the queue's maximum 8 GPU-hours per run")
            && message.contains("set spec.activeDeadlineSeconds to at most 1800"),
        "{message}"
    );
    Ok(())
}

/// (6b) The GPU-hour cap reads the run's bound, not a pod's: a Job of 100 one-hour pods two at a
/// time gets the queue's run-level deadline and cannot lose it; a Volcano Job counts the
/// restarts Volcano allows (`maxRetry`: the queue's `volcanoMaxRetry` where the user wrote none,
/// although the CRD writes 3 first, as offline; the user's own when written), a JobSet its
/// `failurePolicy.maxRestarts`, and each replicated Job gets a deadline of its own (kept by the
/// real JobSet CRD).
pub async fn the_gpu_hour_cap_reads_the_whole_run(ctx: &Ctx) -> Result<()> {
    let one_gpu = |deadline: Option<i64>| {
        let mut spec = json!({"restartPolicy": "Never",
            "containers": [container(1, &["python", "train.py"])]});
        if let Some(d) = deadline {
            spec["activeDeadlineSeconds"] = json!(d);
        }
        json!({"metadata": {"labels": {"wandb.ai/monitor": "true"}}, "spec": spec})
    };
    // 2 GPUs × 1 h per pod, but 50 waves: the Job gets spec.activeDeadlineSeconds.
    let sweep = launch_job(
        "sweep",
        Some(GUARDRAILS_QUEUE),
        json!({"completions": 100, "parallelism": 2, "template": one_gpu(Some(3600))}),
    );
    let created = ctx.create(&sweep, false).await?;
    ensure!(
        created["spec"]["activeDeadlineSeconds"] == 3600
            && created["spec"]["template"]["spec"]["activeDeadlineSeconds"] == 3600,
        "no run-level deadline: {}",
        created["spec"]
    );
    // Taking it away leaves a pod deadline that bounds no run: denied on the UPDATE.
    let jobs: Api<Job> = ctx.api();
    let removed = jobs
        .patch(
            "sweep",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"activeDeadlineSeconds": null}})),
        )
        .await;
    let message = match removed {
        Err(kube::Error::Api(status)) if status.code == 403 => status.message,
        other => anyhow::bail!("removing the run's deadline was not denied: {other:?}"),
    };
    ensure!(
        message.contains(&format!("queue {GUARDRAILS_QUEUE:?}"))
            && message.contains("this run has no spec.activeDeadlineSeconds; spec.template.spec.activeDeadlineSeconds 3600 bounds one pod, not the run")
            && message.contains("completions 100 at parallelism 2 (50 waves of pods)")
            && message.contains("at most 8 GPU-hours per run (guardrails.costCeiling.maxGpuHours): set spec.activeDeadlineSeconds to at most 14400"),
        "{message}"
    );

    // A Volcano Job: 3 GPUs × the queue's 1 h on each pod × its runs (maxRetry + 1).
    let volcano = |name: &str, max_retry: Option<i64>| {
        let mut vc = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "labels": {"wandb.ai/monitor": "true",
                "launchgate.io/queue": GUARDRAILS_QUEUE}},
            "spec": {"schedulerName": "volcano", "minAvailable": 3,
                "tasks": [{"name": "worker", "replicas": 3, "template": one_gpu(None)}]}});
        if let Some(r) = max_retry {
            vc["spec"]["maxRetry"] = json!(r);
        }
        vc
    };
    // Without a maxRetry of the user's, the CRD's schema writes 3 before any webhook; as
    // offline (where nothing writes it), the queue's volcanoMaxRetry replaces it: 2 runs × 3 h
    // fit. The offline verdict is the same.
    let (status, body, _) = ctx.create_raw(&volcano("defaulted", None), true).await?;
    ensure!(status == 201, "{status} {body}");
    ensure!(body["spec"]["maxRetry"] == 1, "{}", body["spec"]);
    let dir = tempfile::tempdir()?;
    let (config, vc_file) = (dir.path().join("config.yaml"), dir.path().join("vc.yaml"));
    std::fs::write(&config, crate::webhook::suite_config()?)?;
    std::fs::write(
        &vc_file,
        serde_json::to_string(&volcano("defaulted", None))?,
    )?;
    let offline = crate::common::launchgate(&[
        "validate",
        "--config",
        config.to_str().unwrap_or_default(),
        "-f",
        vc_file.to_str().unwrap_or_default(),
    ]);
    ensure!(
        offline.status.success(),
        "offline: {}",
        crate::common::text(&offline.stdout)
    );
    // A maxRetry the user wrote (server-side apply records it) is theirs: 4 runs × 3 h.
    let err = ctx
        .apply(&volcano("retried", Some(3)), "tenant")
        .await
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    ensure!(
        err.contains("3 GPUs at once (nvidia.com/gpu spec.tasks[0].template: 3 × 1) × 4 runs (spec.maxRetry 3 + 1) × spec.tasks[0].template.spec.activeDeadlineSeconds 3600 (4.00 h) = 12.00 GPU-hours exceeds the queue's maximum 8 GPU-hours per run"),
        "{err}"
    );
    let (status, body, _) = ctx.create_raw(&volcano("once", Some(1)), true).await?;
    ensure!(status == 201, "{status} {body}");
    ensure!(
        body["spec"]["tasks"][0]["template"]["spec"]["activeDeadlineSeconds"] == 3600,
        "{}",
        body["spec"]
    );

    // A JobSet: each replicated Job gets its own deadline; restarts multiply it.
    let jobset = |name: &str, restarts: i64| {
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "labels": {"wandb.ai/monitor": "true",
                "launchgate.io/queue": GUARDRAILS_QUEUE}},
            "spec": {"failurePolicy": {"maxRestarts": restarts}, "replicatedJobs": [{"name": "w", "replicas": 1,
                "template": {"spec": {"parallelism": 2, "completions": 2, "template": one_gpu(Some(600))}}}]}})
    };
    let (status, body, _) = ctx.create_raw(&jobset("within", 3), true).await?;
    ensure!(status == 201, "{status} {body}");
    let job = &body["spec"]["replicatedJobs"][0]["template"]["spec"];
    ensure!(
        job["activeDeadlineSeconds"] == 3600
            && job["template"]["spec"]["activeDeadlineSeconds"] == 600,
        "the replicated Job's deadline (pruned?): {job}"
    );
    let (status, body, _) = ctx.create_raw(&jobset("restarted", 4), true).await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(status == 403, "{status} {body}");
    ensure!(
        message.contains("× 5 runs (spec.failurePolicy.maxRestarts 4 + 1) × spec.replicatedJobs[0].template.spec.activeDeadlineSeconds 3600 (5.00 h) = 10.00 GPU-hours exceeds the queue's maximum 8 GPU-hours per run"),
        "{message}"
    );

    // A PyTorchJob whose pods each set a deadline gets the run's (runPolicy), and a TrainJob its
    // own, both kept by the real CRDs.
    let mut pt = manifest("ptjob.yaml");
    pt["metadata"]["name"] = json!("pods-only");
    pt["metadata"]["labels"]["launchgate.io/queue"] = json!(GUARDRAILS_QUEUE);
    for role in ["Master", "Worker"] {
        let spec = &mut pt["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"];
        spec["activeDeadlineSeconds"] = json!(600);
        spec["containers"][0]["resources"] = json!({"limits": {"nvidia.com/gpu": 1}});
    }
    let (status, body, _) = ctx.create_raw(&pt, true).await?;
    ensure!(status == 201, "{status} {body}");
    ensure!(
        body["spec"]["runPolicy"]["activeDeadlineSeconds"] == 3600,
        "no run-level deadline: {}",
        body["spec"]
    );
    let tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "trained", "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": GUARDRAILS_QUEUE}},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"image": "acme/train:1", "numNodes": 2,
                             "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}}});
    let (status, body, _) = ctx.create_raw(&tj, true).await?;
    ensure!(status == 201, "{status} {body}");
    ensure!(
        body["spec"]["activeDeadlineSeconds"] == 3600,
        "no run-level deadline: {}",
        body["spec"]
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
