//! Launch workloads created for real: what the API server, launchgate and the Job controller
//! make of them together.

use crate::common::env_entry;
use crate::ctx::{CONTROLLER_WAIT, Ctx, manifest, mutations};
use crate::webhook::{KUBEFLOW_QUEUE, WARN_QUEUE};
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// `obj` with everything the API server derives from one particular create (uid, times,
/// versions, the uid-derived selector labels) replaced, so a dry run and a real create compare.
pub fn comparable(obj: &Value) -> Value {
    let uid = obj["metadata"]["uid"]
        .as_str()
        .unwrap_or("<none>")
        .to_string();
    let mut v = obj.clone();
    if let Some(meta) = v["metadata"].as_object_mut() {
        for key in [
            "uid",
            "creationTimestamp",
            "resourceVersion",
            "managedFields",
            "generation",
        ] {
            meta.remove(key);
        }
    }
    let mut text = serde_json::to_string(&v).unwrap().replace(&uid, "<uid>");
    // The ServiceAccount admission plugin names the token volume with a random suffix.
    let marker = "kube-api-access-";
    let mut from = 0;
    while let Some(at) = text[from..].find(marker).map(|i| from + i + marker.len()) {
        let end = text[at..].find('"').map_or(text.len(), |i| at + i);
        text.replace_range(at..end, "<random>");
        from = at;
    }
    serde_json::from_str(&text).unwrap()
}

/// The effective securityContext launchgate promises on every container of a pod spec.
fn assert_safe_containers(spec: &Value, what: &str) -> Result<()> {
    let containers = spec["containers"]
        .as_array()
        .context("pod spec without containers")?;
    for c in containers {
        let sc = &c["securityContext"];
        ensure!(
            sc["allowPrivilegeEscalation"] == false
                && sc["capabilities"]["drop"] == json!(["ALL"])
                && sc["seccompProfile"]["type"] == "RuntimeDefault",
            "{what}: container {} has securityContext {sc}",
            c["name"]
        );
    }
    Ok(())
}

/// Every recorded workload kind: `dryRun=All` answers exactly what a real create stores, and
/// persists nothing.
pub async fn dry_run_equals_create_for_every_recorded_kind(ctx: &Ctx) -> Result<()> {
    // Owners before the pods that name them (the Volcano pods read their Job).
    for file in [
        "job-demo.yaml",
        "indexed-job-ddp.yaml",
        "vcjob.yaml",
        "pod-master-0.yaml",
        "pod-worker-0.yaml",
        "pod-worker-1.yaml",
        "ptjob.yaml",
        "kaniko-pod.yaml",
    ] {
        let obj = manifest(file);
        let name = obj["metadata"]["name"].as_str().context("named manifest")?;
        let dry = ctx
            .create(&obj, true)
            .await
            .with_context(|| format!("{file}: dry run"))?;
        ensure!(
            ctx.get(&obj, name).await?.is_none(),
            "{file}: the dry run persisted {name}"
        );
        let real = ctx
            .create(&obj, false)
            .await
            .with_context(|| format!("{file}: create"))?;
        ensure!(
            comparable(&dry) == comparable(&real),
            "{file}: dry run and create differ\n dry: {}\nreal: {}",
            comparable(&dry),
            comparable(&real)
        );
        // The kaniko image build is excluded (it must run as root); everything else is ours.
        let excluded = file == "kaniko-pod.yaml";
        ensure!(
            mutations(&real).is_some() != excluded,
            "{file}: launchgate.io/mutations is {:?}",
            mutations(&real)
        );
    }
    Ok(())
}

/// A launch Job's pods are made by the Job controller from the mutated template: every one
/// carries the mutations, and the Job its defaults.
pub async fn job_controller_pods_carry_the_mutations(ctx: &Ctx) -> Result<()> {
    let mut job = manifest("job-demo.yaml");
    job["spec"]["parallelism"] = json!(2);
    job["spec"]["completions"] = json!(2);
    let job = ctx.create(&job, false).await?;
    ensure!(
        job["spec"]["backoffLimit"] == 0 && job["spec"]["ttlSecondsAfterFinished"] == 60,
        "job defaults not applied: {}",
        job["spec"]
    );
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    let pods = ctx
        .wait_for_pods(&format!("batch.kubernetes.io/job-name={name}"), 2)
        .await?;
    for pod in &pods {
        let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
        assert_safe_containers(&pod["spec"], pod_name)?;
        ensure!(
            pod.pointer("/metadata/labels/launchgate.io~1queue")
                .is_some(),
            "{pod_name}: no queue label"
        );
    }
    Ok(())
}

/// An Indexed Job with PyTorch wiring: the Job controller's pods (generateName, no name at
/// admission) each get their rank from the completion index, and all share the rendezvous.
pub async fn indexed_job_pods_get_their_ranks(ctx: &Ctx) -> Result<()> {
    let job = ctx.create(&manifest("indexed-job-ddp.yaml"), false).await?;
    let name = job["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let pods = ctx
        .wait_for_pods(&format!("batch.kubernetes.io/job-name={name}"), 3)
        .await?;
    let mut ranks = BTreeSet::new();
    for pod in &pods {
        let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let trainer = &pod["spec"]["containers"][0];
        ensure!(
            env_entry(trainer, "MASTER_ADDR").map(|e| &e["value"])
                == Some(&json!(format!("{name}-0.{name}"))),
            "{pod_name}: MASTER_ADDR is {:?}",
            env_entry(trainer, "MASTER_ADDR")
        );
        ensure!(
            env_entry(trainer, "WORLD_SIZE").map(|e| &e["value"]) == Some(&json!("3")),
            "{pod_name}: WORLD_SIZE is {:?}",
            env_entry(trainer, "WORLD_SIZE")
        );
        // RANK is a downward-API reference; resolve it as the kubelet will.
        let rank = env_entry(trainer, "RANK").context("no RANK")?;
        let path = rank
            .pointer("/valueFrom/fieldRef/fieldPath")
            .and_then(Value::as_str)
            .with_context(|| format!("{pod_name}: RANK is {rank}"))?;
        let key = path
            .strip_prefix("metadata.annotations['")
            .and_then(|p| p.strip_suffix("']"))
            .with_context(|| format!("{pod_name}: RANK reads {path}"))?;
        let value = pod["metadata"]["annotations"][key]
            .as_str()
            .with_context(|| format!("{pod_name}: annotation {key} missing"))?;
        ranks.insert(value.to_string());
        ensure!(
            trainer["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["name"] == "pytorchjob-port")
                .count()
                == 1,
            "{pod_name}: ports {}",
            trainer["ports"]
        );
    }
    ensure!(
        ranks == BTreeSet::from(["0".into(), "1".into(), "2".into()]),
        "ranks {ranks:?}"
    );
    Ok(())
}

/// A Volcano pod as the Volcano job controller creates it from task `task` of the stored
/// `job`: `<job>-<task>-<index>`, `volcano.sh/*` labels and annotations, owned by the Job.
pub fn volcano_pod(job: &Value, task: &str, index: usize) -> Result<Value> {
    let job_name = job["metadata"]["name"].as_str().context("job name")?;
    let spec = job["spec"]["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["name"] == task)
        .with_context(|| format!("no task {task}"))?;
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": spec["template"]["metadata"].clone(),
        "spec": spec["template"]["spec"].clone(),
    });
    let name = format!("{job_name}-{task}-{index}");
    let meta = &mut pod["metadata"];
    if !meta.is_object() {
        *meta = json!({});
    }
    meta["name"] = json!(name);
    let volcano = json!({
        "volcano.sh/job-name": job_name,
        "volcano.sh/job-namespace": job["metadata"]["namespace"],
        "volcano.sh/queue-name": "default",
        "volcano.sh/task-spec": task,
        "volcano.sh/task-index": index.to_string(),
    });
    for field in ["labels", "annotations"] {
        if !meta[field].is_object() {
            meta[field] = json!({});
        }
        for (k, v) in volcano.as_object().unwrap() {
            meta[field][k] = v.clone();
        }
    }
    meta["annotations"]["volcano.sh/job-version"] = json!("0");
    meta["annotations"]["volcano.sh/template-uid"] = json!(format!("{job_name}-{task}"));
    meta["ownerReferences"] = json!([{
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "name": job_name,
        "uid": job["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    }]);
    pod["spec"]["hostname"] = json!(name);
    pod["spec"]["subdomain"] = json!(job_name);
    pod["spec"]["schedulerName"] = json!("volcano");
    Ok(pod)
}

/// The RANK / MASTER_ADDR / WORLD_SIZE values of a pod's first container.
fn torch_env(pod: &Value) -> (Option<String>, Option<String>, Option<String>) {
    let c = &pod["spec"]["containers"][0];
    let get = |n: &str| {
        env_entry(c, n)
            .and_then(|e| e["value"].as_str())
            .map(str::to_string)
    };
    (get("RANK"), get("MASTER_ADDR"), get("WORLD_SIZE"))
}

/// Creates the pods of `job` (master 1, worker 2) as Volcano would and checks their ranks.
async fn assert_volcano_pods_wired(ctx: &Ctx, job: &Value) -> Result<()> {
    let job_name = job["metadata"]["name"].as_str().unwrap_or_default();
    let master_addr = format!("{job_name}-master-0.{job_name}");
    for (task, index, rank) in [("master", 0, "0"), ("worker", 0, "1"), ("worker", 1, "2")] {
        let pod = ctx.create(&volcano_pod(job, task, index)?, false).await?;
        let (r, addr, world) = torch_env(&pod);
        ensure!(
            r.as_deref() == Some(rank)
                && addr.as_deref() == Some(master_addr.as_str())
                && world.as_deref() == Some("3"),
            "{task}-{index}: RANK {r:?}, MASTER_ADDR {addr:?}, WORLD_SIZE {world:?}"
        );
        assert_safe_containers(&pod["spec"], &format!("{task}-{index}"))?;
    }
    Ok(())
}

/// A Volcano Job with the pytorch plugin, and its pods as the Volcano controller makes them.
pub async fn volcano_job_and_its_pods_are_wired(ctx: &Ctx) -> Result<()> {
    let job = ctx.create(&manifest("vcjob.yaml"), false).await?;
    for task in job["spec"]["tasks"].as_array().context("tasks")? {
        let c = &task["template"]["spec"]["containers"][0];
        ensure!(
            env_entry(c, "WORLD_SIZE").is_some() && env_entry(c, "MASTER_ADDR").is_some(),
            "task {} not wired: {}",
            task["name"],
            c["env"]
        );
    }
    assert_volcano_pods_wired(ctx, &job).await
}

/// A Volcano Job created before launchgate was installed: its pods are completed from the
/// owner Job that `--cluster-lookups` reads from the API server.
pub async fn owner_lookup_reads_the_real_api(ctx: &Ctx) -> Result<()> {
    let job = ctx.create(&manifest("vcjob.yaml"), false).await?;
    ensure!(
        mutations(&job).is_none(),
        "the Job was mutated although launchgate does not see its namespace"
    );
    ctx.register_namespace().await?;
    // The watch cache sees the Job within its watch latency; a pod created before that gets
    // a warning instead of the owner's values, so retry on a dry run first.
    let probe = volcano_pod(&job, "worker", 1)?;
    ctx.wait_for(
        "launchgate's Volcano Job cache to hold the Job",
        CONTROLLER_WAIT,
        || async {
            let pod = ctx.create(&probe, true).await?;
            Ok(torch_env(&pod).2.is_some())
        },
    )
    .await?;
    assert_volcano_pods_wired(ctx, &job).await
}

/// A PyTorchJob (the training operator's kind) gets the job defaults and safe containers.
pub async fn pytorchjob_is_mutated(ctx: &Ctx) -> Result<()> {
    let job = ctx.create(&manifest("ptjob.yaml"), false).await?;
    ensure!(
        mutations(&job).is_some(),
        "not mutated: {}",
        job["metadata"]
    );
    for (role, spec) in job["spec"]["pytorchReplicaSpecs"]
        .as_object()
        .context("replica specs")?
    {
        assert_safe_containers(&spec["template"]["spec"], role)?;
    }
    Ok(())
}

/// A denial reaches the client with launchgate's message (queue, field, value, limit), and
/// nothing is stored.
pub async fn denial_message_reaches_the_client(ctx: &Ctx) -> Result<()> {
    let mut job = manifest("wandb-job.yaml");
    job["metadata"]["name"] = json!("too-many-gpus");
    match ctx.create(&job, false).await {
        Ok(_) => bail!("an 8-GPU Job on a 4-GPU queue was admitted"),
        Err(kube::Error::Api(status)) => {
            for part in ["gpu-queue", "nvidia.com/gpu", "8", "maximum 4"] {
                ensure!(
                    status.message.contains(part),
                    "message {:?} lacks {part:?}",
                    status.message
                );
            }
            ensure!(
                status.message.contains("validate.launchgate.io"),
                "message {:?} does not name the webhook",
                status.message
            );
        }
        Err(e) => bail!("unexpected error: {e}"),
    }
    ensure!(
        ctx.get(&job, "too-many-gpus").await?.is_none(),
        "the denied Job was stored"
    );
    Ok(())
}

/// A queue in `warn` enforcement: the object is admitted and the client gets the violations as
/// `Warning` headers (what kubectl prints as `Warning: …`).
pub async fn warnings_reach_the_client(ctx: &Ctx) -> Result<()> {
    let mut job = manifest("wandb-job.yaml");
    job["metadata"]["name"] = json!("warned");
    job["metadata"]["labels"]["queue"] = json!(WARN_QUEUE);
    let (status, body, warnings) = ctx.create_raw(&job, false).await?;
    ensure!(status == 201, "status {status}: {body}");
    ensure!(
        warnings.iter().any(|w| w.contains(WARN_QUEUE)
            && w.contains("nvidia.com/gpu")
            && w.contains("maximum 4")),
        "warnings {warnings:?}"
    );
    Ok(())
}

/// Server-side apply (kubectl --server-side, Flux, Argo CD) goes through the same mutation.
pub async fn server_side_apply_is_mutated(ctx: &Ctx) -> Result<()> {
    let mut job = manifest("job-demo.yaml");
    job["metadata"]["name"] = json!("applied");
    if let Some(spec) = job["spec"].as_object_mut() {
        spec.remove("backoffLimit");
    }
    let applied = ctx.apply(&job, "e2e-gitops").await?;
    ensure!(mutations(&applied).is_some(), "not mutated");
    ensure!(
        applied["spec"]["backoffLimit"] == 0,
        "backoffLimit {} (the API default 6 was not replaced)",
        applied["spec"]["backoffLimit"]
    );
    assert_safe_containers(&applied["spec"]["template"]["spec"], "applied")?;
    // A second apply of the same intent changes nothing (reinvocation-safe, no fight).
    let again = ctx.apply(&job, "e2e-gitops").await?;
    // (The Job controller updates the status meanwhile: compare the generation, which only
    // moves when the spec does, and what launchgate writes into metadata.)
    ensure!(
        again["metadata"]["generation"] == applied["metadata"]["generation"]
            && again["metadata"]["labels"] == applied["metadata"]["labels"]
            && again["metadata"]["annotations"] == applied["metadata"]["annotations"],
        "re-applying the same object changed it:\n{}\n{}",
        applied["metadata"],
        again["metadata"]
    );
    Ok(())
}

/// UPDATE of a launch Job launchgate never mutated (created before it was installed): the
/// update is admitted, and launchgate never patches the immutable pod template.
pub async fn update_of_an_existing_job_is_admitted(ctx: &Ctx) -> Result<()> {
    let mut job = manifest("job-demo.yaml");
    job["metadata"]["name"] = json!("pre-existing");
    let created = ctx.create(&job, false).await?;
    ensure!(mutations(&created).is_none(), "mutated before registration");
    ctx.register_namespace().await?;
    let api = ctx.api_for(&job)?;
    let patch = json!({"metadata": {"labels": {"team": "vision"}}});
    let updated = api
        .patch(
            "pre-existing",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .context("label update of an existing Job")?;
    let updated = serde_json::to_value(updated)?;
    ensure!(
        updated["spec"]["template"] == created["spec"]["template"],
        "the pod template changed on UPDATE"
    );
    ensure!(
        updated["metadata"]["labels"]["team"] == "vision",
        "label not applied"
    );
    Ok(())
}

/// A burst: a Job with parallelism 40; the Job controller creates all 40 pods and launchgate
/// admits (and mutates) every one.
pub async fn burst_of_forty_pods_is_admitted(ctx: &Ctx) -> Result<()> {
    let mut job = manifest("job-demo.yaml");
    job["metadata"]["name"] = json!("burst");
    job["spec"]["parallelism"] = json!(40);
    job["spec"]["completions"] = json!(40);
    ctx.create(&job, false).await?;
    let pods = ctx
        .wait_for_pods("batch.kubernetes.io/job-name=burst", 40)
        .await?;
    ensure!(pods.len() == 40, "{} pods", pods.len());
    for pod in &pods {
        assert_safe_containers(&pod["spec"], pod["metadata"]["name"].as_str().unwrap_or(""))?;
    }
    let events = ctx.events_text().await;
    ensure!(
        !events.contains("FailedCreate"),
        "FailedCreate events:\n{events}"
    );
    Ok(())
}

/// A queue made from the W&B docs' Kubeflow queue config pasted as-is (`kubernetes:`-wrapped):
/// an 8-GPU PyTorchJob is refused by the API server with the queue's limit, a 2-GPU one created.
pub async fn pasted_kubeflow_queue_config_is_enforced(ctx: &Ctx) -> Result<()> {
    let job = |name: &str, gpus: &str| {
        let mut job = manifest("ptjob.yaml");
        job["metadata"]["name"] = json!(name);
        job["metadata"]["labels"]["queue"] = json!(KUBEFLOW_QUEUE);
        for replica in ["Master", "Worker"] {
            job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]["containers"][0]["resources"] =
                json!({"limits": {"nvidia.com/gpu": gpus}});
        }
        job
    };
    match ctx.create(&job("eight", "8"), false).await {
        Ok(_) => bail!("an 8-GPU PyTorchJob on a 4-GPU queue was admitted"),
        Err(kube::Error::Api(status)) => ensure!(
            status.message.contains(&format!("queue \"{KUBEFLOW_QUEUE}\""))
                && status.message.contains(
                    r#"spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits["nvidia.com/gpu"]=8 exceeds maximum 4 (variable "gpus")"#
                ),
            "message: {}",
            status.message
        ),
        Err(e) => bail!("unexpected error: {e}"),
    }
    ctx.create(&job("two", "2"), false)
        .await
        .context("a 2-GPU PyTorchJob")?;
    Ok(())
}
