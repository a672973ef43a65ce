//! A GPU is counted however it is asked for, on the real API server: through a DRA claim
//! template created for real (read by launchgate's cached watch), a whole-GPU MIG slice, and
//! pod-level resources.

use crate::ctx::Ctx;
use anyhow::{Result, ensure};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use std::time::Duration;

/// The built-in queue with at most 16 GPUs and 64 GPU-hours per run (its `gpus` variable
/// keeps at most 4 per container).
pub const ACCELERATORS_QUEUE: &str = "accelerators-queue";

/// NVIDIA's DRA DeviceClass, as its driver installs it.
async fn nvidia_device_class(ctx: &Ctx) -> Result<()> {
    let api: Api<DynamicObject> = Api::all_with(
        ctx.client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("resource.k8s.io", "v1", "DeviceClass"),
            "deviceclasses",
        ),
    );
    let class = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}});
    match api
        .create(&PostParams::default(), &serde_json::from_value(class)?)
        .await
    {
        Ok(_) => Ok(()),
        // Another test made it first.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A Job of the queue: `pods` pods at once for `hours`, each pod spec `spec`.
fn job(name: &str, pods: i64, hours: i64, spec: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name,
                     "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": ACCELERATORS_QUEUE}},
        "spec": {"parallelism": pods, "completions": pods, "activeDeadlineSeconds": hours * 3600,
                 "template": {"spec": spec}}})
}

/// A pod spec whose container `main` has `resources`, with `extra` pod spec fields.
fn pod_spec(resources: Value, extra: Value) -> Value {
    let mut spec = json!({"restartPolicy": "Never",
        "containers": [{"name": "main", "image": "busybox", "resources": resources}]});
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    spec
}

/// Dry-runs `job` until launchgate's watch holds the claim template (it arrives a moment after
/// it is created); returns the last answer.
async fn once_claims_are_read(ctx: &Ctx, job: &Value) -> Result<(u16, Value)> {
    ctx.poll(
        "the claim template in launchgate's cache",
        Duration::from_secs(30),
        || async {
            let (status, body, _) = ctx.create_raw(job, true).await?;
            let message = body["message"].as_str().unwrap_or_default();
            let unread =
                message.contains("is not in namespace") || message.contains("cannot be read");
            Ok((!unread).then_some((status, body)))
        },
    )
    .await
}

/// A Job of 16 pods whose claims ask for 8 `gpu.nvidia.com` devices each (a DeviceClass and a
/// ResourceClaimTemplate created for real) is denied by the per-container most, the total and
/// the GPU-hour ceiling, naming the queue, the claim and the count; one device per pod for 4
/// pods fits. Whole-GPU MIG slices count against the GPU-hour ceiling, and pod-level resources
/// are held to what one container may have.
pub async fn a_gpu_is_counted_however_it_is_asked_for(ctx: &Ctx) -> Result<()> {
    nvidia_device_class(ctx).await?;
    let template = |name: &str, count: i64| {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
                "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}]}}}})
    };
    ctx.create(&template("eight-gpus", 8), false).await?;
    ctx.create(&template("one-gpu", 1), false).await?;
    let claiming = |template: &str| {
        pod_spec(
            json!({"claims": [{"name": "gpus"}]}),
            json!({"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}]}),
        )
    };

    let big = job("dra-big", 16, 1, claiming("eight-gpus"));
    let (status, body) = once_claims_are_read(ctx, &big).await?;
    ensure!(status == 403, "16 pods × 8 DRA GPUs: {status} {body}");
    let message = body["message"].as_str().unwrap_or_default();
    for part in [
        format!("queue {ACCELERATORS_QUEUE:?}"),
        r#"asks for 8 GPUs (claim "gpus" (ResourceClaimTemplate eight-gpus): 8 × gpu.nvidia.com (8 GPUs)), exceeds maximum 4"#.to_string(),
        "total nvidia.com/gpu over all pods=128 exceeds maximum 16 (totals)".to_string(),
        "= 128.00 GPU-hours exceeds the queue's maximum 64 GPU-hours per run".to_string(),
    ] {
        ensure!(message.contains(&part), "{message:?} lacks {part:?}");
    }
    // Created for real, the same answer.
    let (status, _, _) = ctx.create_raw(&big, false).await?;
    ensure!(status == 403, "created: {status}");
    // One device per pod, four pods: within every limit, stored.
    ctx.create(&job("dra-small", 4, 1, claiming("one-gpu")), false)
        .await?;

    // 16 whole-GPU MIG slices for 16 hours: 256 GPU-hours.
    let mig = job(
        "mig",
        16,
        16,
        pod_spec(json!({"limits": {"nvidia.com/mig-7g.80gb": 1}}), json!({})),
    );
    let (status, body, _) = ctx.create_raw(&mig, true).await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(status == 403, "16 MIG slices × 16 h: {status} {body}");
    ensure!(message.contains("= 256.00 GPU-hours"), "{message}");

    // Pod-level resources (stored by the 1.36 API server) are held to one container's most.
    let pod_level = job(
        "pod-level",
        1,
        1,
        pod_spec(
            json!({}),
            json!({"resources": {"limits": {"cpu": "64", "memory": "512Gi"}}}),
        ),
    );
    let (status, body, _) = ctx.create_raw(&pod_level, true).await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(status == 403, "64 CPUs on the pod: {status} {body}");
    for part in [
        "spec.template.spec.resources.limits.cpu=64 exceeds maximum 4",
        "spec.template.spec.resources.limits.memory=512Gi exceeds maximum 12Gi",
    ] {
        ensure!(message.contains(part), "{message:?} lacks {part:?}");
    }
    Ok(())
}

/// The variable the NVIDIA container toolkit reads, as the first container of `obj`'s pod
/// template (or of the pod) will see it: its last `env` entry of the name.
fn visible_devices(obj: &Value) -> Option<String> {
    let containers = obj
        .pointer("/spec/template/spec/containers")
        .or_else(|| obj.pointer("/spec/containers"))?;
    containers[0]["env"]
        .as_array()?
        .iter()
        .rev()
        .find(|e| e["name"] == "NVIDIA_VISIBLE_DEVICES")
        .map(|e| e["value"].as_str().unwrap_or_default().to_string())
}

/// No GPU by environment: a Job of 16 pods that ask for no GPU but set
/// `NVIDIA_VISIBLE_DEVICES=all` (each would see every GPU of its node) is denied naming the
/// queue, the container and the value; the same Job without the variable is stored with `void`
/// written, and the Job controller's pods carry it. A container with a GPU is stored without
/// it (the device plugin names its GPU), and its `all` is denied too.
pub async fn a_container_that_asks_for_no_gpu_sees_none_by_environment(ctx: &Ctx) -> Result<()> {
    let cpu = json!({"limits": {"cpu": "1", "memory": "1Gi"}});
    let with_env = |mut job: Value, value: &str| {
        job["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]);
        job
    };
    let all = with_env(
        job("env-all", 16, 1, pod_spec(cpu.clone(), json!({}))),
        "all",
    );
    let (status, body, _) = ctx.create_raw(&all, false).await?;
    ensure!(
        status == 403,
        "16 pods of no GPU setting all: {status} {body}"
    );
    let message = body["message"].as_str().unwrap_or_default();
    let expected = format!(
        r#"queue {ACCELERATORS_QUEUE:?}: spec.template.spec.containers[0] (main) asks for no GPU but sets NVIDIA_VISIBLE_DEVICES="all""#
    );
    ensure!(
        message.contains(&expected),
        "{message:?} lacks {expected:?}"
    );

    // Without the variable: stored with void, which overrides the image's `all`.
    let stored = ctx
        .create(
            &job("env-none", 2, 1, pod_spec(cpu.clone(), json!({}))),
            false,
        )
        .await?;
    ensure!(
        visible_devices(&stored).as_deref() == Some("void"),
        "stored: {}",
        stored["spec"]["template"]["spec"]["containers"][0]
    );
    for pod in ctx
        .wait_for_pods("batch.kubernetes.io/job-name=env-none", 2)
        .await?
    {
        ensure!(
            visible_devices(&pod).as_deref() == Some("void"),
            "the Job controller's pod: {}",
            pod["spec"]["containers"][0]
        );
    }

    // A container with a GPU: the device plugin's to name.
    let one = json!({"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1}});
    let stored = ctx
        .create(
            &job("env-gpu", 1, 1, pod_spec(one.clone(), json!({}))),
            true,
        )
        .await?;
    ensure!(
        visible_devices(&stored).is_none(),
        "a GPU container got the variable: {}",
        stored["spec"]["template"]["spec"]["containers"][0]
    );
    let widened = with_env(job("env-gpu-all", 1, 1, pod_spec(one, json!({}))), "all");
    let (status, body, _) = ctx.create_raw(&widened, true).await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(
        status == 403,
        "a GPU container setting all: {status} {body}"
    );
    ensure!(
        message.contains("which would replace the device plugin's list of the GPUs allocated to it (nvidia.com/gpu: 1)"),
        "{message}"
    );
    Ok(())
}
