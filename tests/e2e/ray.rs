//! KubeRay on the real control plane with the upstream RayJob and RayCluster CRDs. No KubeRay
//! operator runs here: the test plays its part (it creates the RayCluster a RayJob's operator
//! would, and that RayCluster's pods, as the operator's service account).

use crate::checks::{ensure_denied, ensure_needs_no_patch, ensure_stored_launch, hardened};
use crate::ctx::Ctx;
use crate::webhook::{RAY_CAPPED_QUEUE, RAY_QUEUE, suite_config};
use anyhow::{Context, Result, ensure};
use launchgate::Policy;
use serde_json::{Value, json};

/// The identity the KubeRay operator runs as here (its Helm chart's service account, installed
/// in a namespace of its own), which the suite's config names in `match.podCreators.RayJob` and
/// `.RayCluster`: launchgate trusts no KubeRay identity unconfigured.
pub const KUBERAY_OPERATOR: &str = "system:serviceaccount:ray-system:kuberay-operator";

/// The same operator installed as KubeRay's own instructions do, in `default`: a namespace
/// tenants commonly hold, where anyone who may create a pod can run it as this service account.
pub const KUBERAY_IN_DEFAULT: &str = "system:serviceaccount:default:kuberay-operator";

fn container(name: &str, gpus: i64) -> Value {
    json!({"name": name, "image": "rayproject/ray:2.46.0",
           "resources": {"limits": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": gpus}}})
}

fn labels() -> Value {
    json!({"wandb.ai/monitor": "true", "launchgate.io/queue": RAY_QUEUE})
}

/// A launch RayJob: a CPU head and one worker group `gpu` of `replicas` pods (`max` when the
/// cluster autoscales) with `gpus` GPUs each, submitted by a submitter pod.
fn rayjob(name: &str, replicas: i64, max: i64, autoscale: bool, gpus: i64) -> Value {
    json!({"apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": name, "labels": labels()},
        "spec": {
            "entrypoint": "python train.py",
            "shutdownAfterJobFinishes": true,
            "rayClusterSpec": {
                "enableInTreeAutoscaling": autoscale,
                "headGroupSpec": {"rayStartParams": {},
                    "template": {"metadata": {"labels": labels()},
                                 "spec": {"containers": [container("ray-head", 0)]}}},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": replicas, "minReplicas": 1,
                    "maxReplicas": max, "rayStartParams": {},
                    "template": {"metadata": {"labels": labels()},
                                 "spec": {"containers": [container("ray-worker", gpus)]}}}]},
            "submitterPodTemplate": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "ray-job-submitter", "image": "rayproject/ray:2.46.0",
                                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}}})
}

/// Every container of the RayJob's pod templates (head, workers, submitter).
fn containers(rayjob: &Value) -> Vec<&Value> {
    let spec = &rayjob["spec"];
    let cluster = &spec["rayClusterSpec"];
    let mut out = vec![&cluster["headGroupSpec"]["template"]["spec"]["containers"][0]];
    for group in cluster["workerGroupSpecs"].as_array().into_iter().flatten() {
        out.push(&group["template"]["spec"]["containers"][0]);
    }
    out.push(&spec["submitterPodTemplate"]["spec"]["containers"][0]);
    out
}

/// Lets the KubeRay operator's service account `operator` create RayClusters and pods here.
async fn grant_kuberay(ctx: &Ctx, name: &str, operator: &str) -> Result<()> {
    ctx.grant_operator(
        name,
        json!([{"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["create"]},
               {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]),
        operator,
    )
    .await
}

/// The RayCluster the operator makes for the stored RayJob `job`, with `replicas` workers.
fn operator_cluster(job: &Value, replicas: i64) -> Value {
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    let mut labels = job["metadata"]["labels"].clone();
    labels["ray.io/originated-from-cr-name"] = json!(name);
    labels["ray.io/originated-from-crd"] = json!("RayJob");
    let mut spec = job["spec"]["rayClusterSpec"].clone();
    spec["workerGroupSpecs"][0]["replicas"] = json!(replicas);
    spec["workerGroupSpecs"][0]["maxReplicas"] = json!(replicas.max(1));
    json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": format!("{name}-raycluster-x7k2p"), "labels": labels,
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": name,
                "uid": job["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]},
        "spec": spec})
}

/// A worker pod the operator makes for the stored RayCluster `cluster`, with `gpus` GPUs.
fn operator_pod(cluster: &Value, gpus: i64) -> Value {
    let name = cluster["metadata"]["name"].as_str().unwrap_or_default();
    let template = &cluster["spec"]["workerGroupSpecs"][0]["template"];
    let mut labels = template["metadata"]["labels"].clone();
    labels["ray.io/cluster"] = json!(name);
    labels["ray.io/group"] = json!("gpu");
    labels["ray.io/node-type"] = json!("worker");
    let mut spec = template["spec"].clone();
    spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!(gpus);
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": format!("{name}-gpu-worker-"), "labels": labels,
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": name,
                "uid": cluster["metadata"]["uid"], "controller": true,
                "blockOwnerDeletion": true}]},
        "spec": spec})
}

/// A RayJob is limited by what its autoscaling worker groups can reach, stored hardened and
/// labelled for Kueue with nothing pruned by the real CRD, gets no PyTorch env; the RayCluster
/// and pods the KubeRay operator makes for it are judged on the per-pod rules only.
pub async fn rayjob_is_limited_hardened_and_its_children_verified(ctx: &Ctx) -> Result<()> {
    // 1 replica now, up to 4 × 4 GPUs when it autoscales: 16 GPUs over the queue's 8.
    let (status, body, _) = ctx
        .create_raw(&rayjob("too-big", 1, 4, true, 4), false)
        .await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(
        status == 403,
        "an autoscaling 16-GPU RayJob: {status} {body}"
    );
    for part in [
        &format!("queue \"{RAY_QUEUE}\""),
        "total nvidia.com/gpu over all pods=16",
        "exceeds maximum 8",
        "(totals)",
        "spec.rayClusterSpec.workerGroupSpecs[0].template: 4 × 4",
    ] {
        ensure!(message.contains(part), "{message:?} lacks {part:?}");
    }
    // Counted under the totals rule's id.
    let metrics = ctx.launchgate_metrics().await?;
    let counted = metrics.lines().any(|l| {
        l.starts_with("launchgate_violations_total{")
            && l.contains(&format!("queue=\"{RAY_QUEUE}\""))
            && l.contains("rule=\"limits.totals\"")
    });
    ensure!(
        counted,
        "no limits.totals violation counted for {RAY_QUEUE}"
    );
    // The same group without autoscaling runs its 2 replicas: 8 GPUs.
    let job = ctx.create(&rayjob("ray-ok", 2, 4, false, 4), false).await?;
    ensure_stored_launch(&job, &containers(&job), "RayJob")?;
    // Nothing launchgate wrote was pruned: the stored object needs no patch.
    let policy = Policy::from_yaml(&suite_config()?).map_err(anyhow::Error::msg)?;
    ensure_needs_no_patch(&policy, &job, "the stored RayJob")?;

    // The operator's RayCluster, even grown to 4 workers (16 GPUs), is judged per pod.
    grant_kuberay(ctx, "kuberay", KUBERAY_OPERATOR).await?;
    let (status, cluster, _) = ctx
        .create_raw_as(&operator_cluster(&job, 4), false, Some(KUBERAY_OPERATOR))
        .await?;
    ensure!(
        status == 201,
        "the operator's RayCluster: {status} {cluster}"
    );
    // The same RayCluster from a tenant is a launch workload of its own: held to the totals.
    let mut forged = operator_cluster(&job, 4);
    forged["metadata"]["name"] = json!("forged");
    let (status, body, _) = ctx.create_raw(&forged, true).await?;
    ensure_denied(
        status,
        &body,
        "(totals)",
        "a tenant's RayCluster claiming the RayJob",
    )?;
    // Its pods, made by the operator: per-pod rules (hardening, the 4-GPU container bound).
    let (status, pod, _) = ctx
        .create_raw_as(&operator_pod(&cluster, 4), false, Some(KUBERAY_OPERATOR))
        .await?;
    ensure!(status == 201, "the operator's worker pod: {status} {pod}");
    let c = &pod["spec"]["containers"][0];
    ensure!(hardened(c), "worker pod not hardened: {c}");
    let (status, body, _) = ctx
        .create_raw_as(&operator_pod(&cluster, 8), true, Some(KUBERAY_OPERATOR))
        .await?;
    ensure_denied(status, &body, "exceeds maximum 4", "an 8-GPU worker pod")?;
    Ok(())
}

/// A controller's identity is configuration: with no KubeRay identity configured (none is
/// built in), the operator's service account in `default` is no one's controller. Its 16 ×
/// 4-GPU RayCluster "for" an admitted 1-GPU RayJob is judged on every rule and denied by the
/// queue's totals, naming the `match.podCreators` key; the operator a config names sends the
/// same RayCluster as the RayJob's child, judged per pod.
pub async fn a_kuberay_operator_in_default_is_no_controller(ctx: &Ctx) -> Result<()> {
    // The suite's launchgate names the operator (in `ray-system`): per pod.
    let job = ctx.create(&rayjob("small", 1, 1, false, 1), false).await?;
    grant_kuberay(ctx, "kuberay", KUBERAY_OPERATOR).await?;
    let (status, body, _) = ctx
        .create_raw_as(&oversized(&job), true, Some(KUBERAY_OPERATOR))
        .await?;
    ensure!(
        status == 201,
        "the configured operator's RayCluster: {status} {body}"
    );
    // A launchgate of its own whose config names no KubeRay identity.
    let mut config: Value = serde_yaml::from_str(&suite_config()?)?;
    let creators = config["match"]["podCreators"]
        .as_object_mut()
        .context("the suite's podCreators")?;
    creators.remove("RayJob");
    creators.remove("RayCluster");
    let own =
        crate::updates::Own::start_serving(ctx, "ray-unnamed", &serde_yaml::to_string(&config)?)
            .await?;
    let result = operator_in_default_is_judged_on_every_rule(&own.ns).await;
    own.finish(ctx).await;
    result
}

/// The RayCluster the operator makes for `job`, grown to 16 workers of 4 GPUs.
fn oversized(job: &Value) -> Value {
    let mut cluster = operator_cluster(job, 16);
    cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
        ["nvidia.com/gpu"] = json!(4);
    cluster
}

async fn operator_in_default_is_judged_on_every_rule(ctx: &Ctx) -> Result<()> {
    let job = ctx.create(&rayjob("small", 1, 1, false, 1), false).await?;
    grant_kuberay(ctx, "kuberay-default", KUBERAY_IN_DEFAULT).await?;
    let (status, body, _) = ctx
        .create_raw_as(&oversized(&job), true, Some(KUBERAY_IN_DEFAULT))
        .await?;
    ensure_denied(
        status,
        &body,
        "(totals)",
        "a 16 × 4-GPU RayCluster sent as the operator's service account in default",
    )?;
    let message = body["message"].as_str().unwrap_or_default();
    for part in [
        format!("queue \"{RAY_QUEUE}\""),
        "total nvidia.com/gpu over all pods=64 exceeds maximum 8".to_string(),
        "not by that kind's controller (match.podCreators.RayJob: none configured)".to_string(),
    ] {
        ensure!(message.contains(&part), "{message:?} lacks {part:?}");
    }
    Ok(())
}

/// `rayjob` in the queue `queue`: its own label and its pod templates'.
fn in_queue(mut job: Value, queue: &str) -> Value {
    let cluster = &mut job["spec"]["rayClusterSpec"];
    cluster["headGroupSpec"]["template"]["metadata"]["labels"]["launchgate.io/queue"] =
        json!(queue);
    cluster["workerGroupSpecs"][0]["template"]["metadata"]["labels"]["launchgate.io/queue"] =
        json!(queue);
    job["metadata"]["labels"]["launchgate.io/queue"] = json!(queue);
    job
}

/// In a queue with a GPU-hour ceiling, a RayJob that leaves `shutdownAfterJobFinishes` unset is
/// stored with it `true` and the queue's TTL (nothing pruned by the real CRD, nothing to patch
/// again), so its RayCluster ends with the job and the deadline bounds its GPUs; one that keeps
/// its cluster on purpose (`false`, written with server-side apply) is denied by the ceiling,
/// which names the field.
pub async fn a_rayjob_cluster_ends_with_the_job(ctx: &Ctx) -> Result<()> {
    crate::updates::with_own!(ctx, "ray-ends", a_rayjob_cluster_ends_with_the_job_in)
}

async fn a_rayjob_cluster_ends_with_the_job_in(ctx: &Ctx) -> Result<()> {
    // 2 workers × 2 GPUs for 1 h: 4 GPU-hours, within the queue's 8 while the cluster ends.
    let mut job = in_queue(rayjob("ray-ends", 2, 2, false, 2), RAY_CAPPED_QUEUE);
    job["spec"]
        .as_object_mut()
        .context("a spec")?
        .remove("shutdownAfterJobFinishes");
    job["spec"]["activeDeadlineSeconds"] = json!(3600);
    let stored = ctx.create(&job, false).await?;
    ensure!(
        stored["spec"]["shutdownAfterJobFinishes"] == true
            && stored["spec"]["ttlSecondsAfterFinished"] == 60,
        "stored RayJob spec: shutdownAfterJobFinishes {} ttlSecondsAfterFinished {}",
        stored["spec"]["shutdownAfterJobFinishes"],
        stored["spec"]["ttlSecondsAfterFinished"]
    );
    let policy =
        Policy::from_yaml(&crate::updates::capped_config()?).map_err(anyhow::Error::msg)?;
    ensure_needs_no_patch(&policy, &stored, "the stored RayJob")?;

    // The same RayJob keeping its cluster, as written by a server-side apply manager.
    let mut kept = job.clone();
    kept["metadata"]["name"] = json!("ray-kept");
    kept["spec"]["shutdownAfterJobFinishes"] = json!(false);
    let denied = match ctx.apply(&kept, "tenant-ci").await {
        Ok(stored) => anyhow::bail!(
            "a RayJob keeping its cluster was admitted: shutdownAfterJobFinishes {}",
            stored["spec"]["shutdownAfterJobFinishes"]
        ),
        Err(e) => format!("{e:#}"),
    };
    for part in [
        &format!("queue \"{RAY_CAPPED_QUEUE}\""),
        "spec.shutdownAfterJobFinishes is not true",
        "KubeRay keeps the RayJob's RayCluster",
        "guardrails.costCeiling.maxGpuHours",
        "set spec.shutdownAfterJobFinishes: true",
    ] {
        ensure!(denied.contains(part), "{denied:?} lacks {part:?}");
    }
    Ok(())
}
