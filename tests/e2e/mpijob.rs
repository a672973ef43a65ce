//! Kubeflow MPIJob v2 (`kubeflow.org/v2beta1`) on the real control plane with the upstream
//! mpi-operator CRD. No mpi-operator runs here: the test plays its part (it creates the
//! launcher Job and the worker pods an MPIJob's operator would, as the operator's service
//! account); the real Job controller makes the launcher's pod.

use crate::checks::{ensure_denied, ensure_nothing_pruned, ensure_stored_launch, hardened};
use crate::ctx::Ctx;
use crate::webhook::GUARDRAILS_QUEUE;
use anyhow::{Context, Result, ensure};
use launchgate::Policy;
use serde_json::{Value, json};

/// The identity the mpi-operator runs as (its standalone install).
pub const MPI_OPERATOR: &str = "system:serviceaccount:mpi-operator:mpi-operator";

/// A queue whose template is an MPIJob: a launcher without GPUs, 1..4 workers of up to 4 GPUs,
/// at most 8 GPUs in all, handed off to the Kueue LocalQueue `team-a`. Served by the
/// [`crate::updates::Own`] launchgate ([`crate::updates::capped_config`]).
pub const MPI_QUEUE: &str = "mpi-queue";

/// [`MPI_QUEUE`]'s config: `base` (the built-in queue) with its limits and Kueue hand-off.
pub fn mpi_queue(base: &Value) -> Value {
    crate::updates::kind_queue(
        base,
        "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nspec:\n  mpiReplicaSpecs:\n    Launcher:\n      replicas: 1\n      template:\n        spec:\n          containers:\n            - resources: {limits: {nvidia.com/gpu: '{{launcher_gpus}}'}}\n    Worker:\n      replicas: '{{workers}}'\n      template:\n        spec:\n          containers:\n            - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}\n",
        json!({
            "launcher_gpus": {"type": "integer", "minimum": 0, "maximum": 0},
            "workers": {"type": "integer", "minimum": 1, "maximum": 4},
            "gpus": {"type": "integer", "minimum": 0, "maximum": 4},
        }),
    )
}

/// A launch MPIJob in `queue` (the upstream `pi` example's shape): a CPU launcher running
/// `mpirun` and `workers` workers of `gpus` GPUs, cleaning up its workers when it ends.
pub(crate) fn mpijob(name: &str, queue: &str, workers: i64, gpus: i64) -> Value {
    let container = |name: &str, command: &[&str], gpus: i64| {
        let mut limits = json!({"cpu": "1", "memory": "1Gi"});
        if gpus > 0 {
            limits["nvidia.com/gpu"] = json!(gpus);
        }
        json!({"name": name, "image": "mpioperator/mpi-pi:openmpi", "command": command,
               "resources": {"limits": limits}})
    };
    json!({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": name, "labels": crate::updates::queue_labels(queue)},
        "spec": {
            "slotsPerWorker": 1,
            "sshAuthMountPath": "/home/mpiuser/.ssh",
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"metadata": {"labels": crate::updates::queue_labels(queue)},
                    "spec": {"containers": [container("mpi-launcher",
                        &["mpirun", "-n", "2", "/home/mpiuser/pi"], 0)]}}},
                "Worker": {"replicas": workers, "template": {"metadata": {"labels": crate::updates::queue_labels(queue)},
                    "spec": {"containers": [container("mpi-worker",
                        &["/usr/sbin/sshd", "-De"], gpus)]}}}}}})
}

/// The containers of both replica types.
fn containers(job: &Value) -> Vec<&Value> {
    ["Launcher", "Worker"]
        .iter()
        .map(|role| &job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0])
        .collect()
}

/// The controller owner reference the operator writes on what it makes for the stored `job`.
fn owned_by(job: &Value) -> Value {
    json!([{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "name": job["metadata"]["name"], "uid": job["metadata"]["uid"],
        "controller": true, "blockOwnerDeletion": true}])
}

/// The labels the operator gives a pod (template) of `role` of the stored `job`.
fn operator_labels(job: &Value, role: &str) -> Value {
    let key = if role == "launcher" {
        "Launcher"
    } else {
        "Worker"
    };
    let mut labels = job["spec"]["mpiReplicaSpecs"][key]["template"]["metadata"]["labels"].clone();
    labels["training.kubeflow.org/operator-name"] = json!("mpi-operator");
    labels["training.kubeflow.org/job-name"] = job["metadata"]["name"].clone();
    labels["training.kubeflow.org/job-role"] = json!(role);
    labels
}

/// The pod spec the operator gives `replica` (`Launcher` or `Worker`) of the stored `job`: the
/// replica's template's, restarting on `restart`, as host `hostname` of the job's subdomain,
/// without the security context launchgate wrote on its container.
fn operator_spec(job: &Value, replica: &str, restart: &str, hostname: &str) -> Value {
    let mut spec = job["spec"]["mpiReplicaSpecs"][replica]["template"]["spec"].clone();
    spec["restartPolicy"] = json!(restart);
    spec["hostname"] = json!(hostname);
    spec["subdomain"] = job["metadata"]["name"].clone();
    let c = &mut spec["containers"][0];
    c.as_object_mut().map(|c| c.remove("securityContext"));
    spec
}

/// The launcher Job the operator makes for the stored `job` (`<name>-launcher`, labelled
/// `app: <name>`), its pod template the Launcher's, without the security context launchgate
/// wrote there, and with `gpus` GPUs.
fn launcher_job(job: &Value, gpus: i64) -> Value {
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    let mut spec = operator_spec(job, "Launcher", "OnFailure", &format!("{name}-launcher"));
    if gpus > 0 {
        spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!(gpus);
    }
    let run = &job["spec"]["runPolicy"];
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("{name}-launcher"), "labels": {"app": name},
            "ownerReferences": owned_by(job)},
        "spec": {"backoffLimit": run["backoffLimit"],
            "ttlSecondsAfterFinished": run["ttlSecondsAfterFinished"],
            "podReplacementPolicy": "Failed",
            "template": {"metadata": {"labels": operator_labels(job, "launcher")},
                "spec": spec}}})
}

/// Worker `index` the operator makes for the stored `job` (`<name>-worker-<i>`), without the
/// security context launchgate wrote on its template, and with `gpus` GPUs.
fn worker_pod(job: &Value, index: i64, gpus: i64) -> Value {
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    let mut labels = operator_labels(job, "worker");
    labels["training.kubeflow.org/replica-index"] = json!(index.to_string());
    let mut spec = operator_spec(job, "Worker", "Never", &format!("{name}-worker-{index}"));
    spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!(gpus);
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{name}-worker-{index}"), "labels": labels,
            "ownerReferences": owned_by(job)},
        "spec": spec})
}

/// Lets the mpi-operator's service account create Jobs and pods here.
async fn grant_operator(ctx: &Ctx) -> Result<()> {
    ctx.grant_operator(
        "mpi-operator",
        json!([{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]},
               {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]),
        MPI_OPERATOR,
    )
    .await
}

/// An MPIJob over its queue's totals is denied with the numbers and the rule's id; one within
/// is stored hardened, labelled for Kueue, with the queue's run defaults under
/// `spec.runPolicy` and nothing launchgate wrote pruned by the real CRD; the launcher Job and
/// worker pods its operator makes are judged per pod, each bound to its role.
pub async fn an_mpijob_is_limited_hardened_and_its_children_verified(ctx: &Ctx) -> Result<()> {
    crate::updates::with_own!(ctx, "mpijob", limited_hardened_and_verified)
}

async fn limited_hardened_and_verified(ctx: &Ctx) -> Result<()> {
    // (a) 3 workers × 4 GPUs: 12 over the queue's 8.
    let (status, body, _) = ctx
        .create_raw(&mpijob("too-big", MPI_QUEUE, 3, 4), false)
        .await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(status == 403, "a 12-GPU MPIJob: {status} {body}");
    for part in [
        &format!("queue \"{MPI_QUEUE}\""),
        "total nvidia.com/gpu over all pods=12",
        "exceeds maximum 8",
        "(totals)",
        "spec.mpiReplicaSpecs.Worker.template: 3 × 4",
    ] {
        ensure!(message.contains(part), "{message:?} lacks {part:?}");
    }
    // The rule's id, on the Event about it.
    let rules = ctx
        .denied_event(Some("too-big"))
        .await?
        .metadata
        .annotations
        .and_then(|mut a| a.remove("launchgate.io/rules"))
        .context("the Event's launchgate.io/rules")?;
    ensure!(
        rules.split(',').any(|r| r == "limits.totals"),
        "rules {rules:?}"
    );

    // (b) 2 workers × 4 GPUs: 8.
    let submitted = mpijob("pi", MPI_QUEUE, 2, 4);
    let (status, created, _) = ctx.create_raw(&submitted, false).await?;
    ensure!(status == 201, "an 8-GPU MPIJob: {status} {created}");
    let stored = ctx
        .get(&submitted, "pi")
        .await?
        .context("the stored MPIJob")?;
    ensure_stored_launch(&stored, &containers(&stored), "MPIJob")?;
    let run = &stored["spec"]["runPolicy"];
    ensure!(
        run["backoffLimit"] == 0
            && run["ttlSecondsAfterFinished"] == 60
            && run["cleanPodPolicy"] == "Running",
        "stored runPolicy {run}"
    );
    // Nothing launchgate wrote was pruned: every value its patch writes is stored, and the
    // stored object needs no patch.
    let policy =
        Policy::from_yaml(&crate::updates::capped_config()?).map_err(anyhow::Error::msg)?;
    ensure_nothing_pruned(&policy, &submitted, &ctx.ns, &stored, "MPIJob")?;

    // (c) The operator's children: judged per pod (8 GPUs in all already admitted), hardened,
    // bound to their role.
    grant_operator(ctx).await?;
    let (status, job, _) = ctx
        .create_raw_as(&launcher_job(&stored, 0), false, Some(MPI_OPERATOR))
        .await?;
    ensure!(status == 201, "the operator's launcher Job: {status} {job}");
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    ensure!(hardened(c), "launcher Job not hardened: {c}");
    ensure!(
        job["spec"]["backoffLimit"] == 0,
        "the launcher Job's backoffLimit {}",
        job["spec"]["backoffLimit"]
    );
    // Its pod, made by the real Job controller, carries the launcher's role.
    let pods = ctx
        .wait_for_pods("training.kubeflow.org/job-role=launcher", 1)
        .await?;
    let c = &pods[0]["spec"]["containers"][0];
    ensure!(hardened(c), "launcher pod not hardened: {c}");
    for index in 0..2 {
        let (status, pod, _) = ctx
            .create_raw_as(&worker_pod(&stored, index, 4), false, Some(MPI_OPERATOR))
            .await?;
        ensure!(
            status == 201,
            "the operator's worker {index}: {status} {pod}"
        );
        let c = &pod["spec"]["containers"][0];
        ensure!(hardened(c), "worker pod not hardened: {c}");
    }
    // A worker over the Worker's bound, and a launcher over the Launcher's, are refused.
    let (status, body, _) = ctx
        .create_raw_as(&worker_pod(&stored, 2, 8), true, Some(MPI_OPERATOR))
        .await?;
    ensure_denied(status, &body, "exceeds maximum 4", "an 8-GPU worker pod")?;
    let mut gpu_launcher = worker_pod(&stored, 0, 1);
    gpu_launcher["metadata"]["name"] = json!("pi-launcher-x");
    gpu_launcher["metadata"]["labels"]["training.kubeflow.org/job-role"] = json!("launcher");
    let (status, body, _) = ctx
        .create_raw_as(&gpu_launcher, true, Some(MPI_OPERATOR))
        .await?;
    ensure_denied(status, &body, "exceeds maximum 0", "a 1-GPU launcher pod")?;
    // The same worker from a tenant is not trusted as the operator's.
    let (_, _, warnings) = ctx.create_raw(&worker_pod(&stored, 3, 4), true).await?;
    ensure!(
        warnings
            .iter()
            .any(|w| w.contains("names MPIJob \"pi\" as its controller")),
        "a tenant's worker pod: warnings {warnings:?}"
    );
    Ok(())
}

/// `guardrails.gang: deny` denies an MPIJob whose gang minimum
/// (`spec.runPolicy.schedulingPolicy.minAvailable`) is below its launcher and workers; the
/// built-in `raise` lifts it to them.
pub async fn a_gang_below_launcher_and_workers_is_denied(ctx: &Ctx) -> Result<()> {
    let mut job = mpijob("gang", GUARDRAILS_QUEUE, 2, 1);
    job["spec"]["runPolicy"]["schedulingPolicy"] = json!({"minAvailable": 2});
    let (status, body, _) = ctx.create_raw(&job, true).await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(status == 403, "a gang of 2 for 3 pods: {status} {body}");
    ensure!(
        message.contains(&format!("queue {GUARDRAILS_QUEUE:?}"))
            && message.contains(
                "spec.runPolicy.schedulingPolicy.minAvailable=2 is below the job's rendezvous size 3"
            )
            && message.contains("guardrails.gang: deny"),
        "{message}"
    );
    let mut raised = job.clone();
    raised["metadata"]["labels"] = json!({"wandb.ai/monitor": "true"});
    for role in ["Launcher", "Worker"] {
        raised["spec"]["mpiReplicaSpecs"][role]["template"]["metadata"]["labels"] =
            json!({"wandb.ai/monitor": "true"});
    }
    let created = ctx.create(&raised, true).await?;
    ensure!(
        created["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 3,
        "raised minAvailable {}",
        created["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"]
    );
    Ok(())
}
