//! Where a correct-looking webhook breaks real launch workloads: each class of breakage seen on
//! a real control plane, as the API server, the Job controller and the user's client see it.

use crate::common::env_entry;
use crate::ctx::{Ctx, manifest};
use crate::webhook::DEADLINE_QUEUE;
use crate::workloads::volcano_pod;
use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

/// The effective (last) value of env var `name` in a container, as the kubelet reads it.
fn effective<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    env_entry(container, name).and_then(|e| e["value"].as_str())
}

/// The recorded Indexed PyTorch Job as `name`, with `pods` pods and its own subdomain.
fn indexed_job(name: &str, pods: u32) -> Value {
    let mut job = manifest("indexed-job-ddp.yaml");
    job["metadata"]["name"] = json!(name);
    job["spec"]["completions"] = json!(pods);
    job["spec"]["parallelism"] = json!(pods);
    job["spec"]["template"]["spec"]["subdomain"] = json!(name);
    job
}

/// A pod made by the Job controller for a Job launchgate admitted is never denied on a
/// workload-level rule: the Job sets `activeDeadlineSeconds` (its pods do not), and every pod
/// is created, with no `FailedCreate`.
pub async fn controller_pods_are_not_judged_on_workload_rules(ctx: &Ctx) -> Result<()> {
    let mut job = manifest("job-demo.yaml");
    job["metadata"]["name"] = json!("deadline");
    job["metadata"]["labels"]["queue"] = json!(DEADLINE_QUEUE);
    job["spec"]["activeDeadlineSeconds"] = json!(3600);
    job["spec"]["parallelism"] = json!(2);
    job["spec"]["completions"] = json!(2);
    ctx.create(&job, false)
        .await
        .context("the Job is within the deadline cap")?;
    let pods = ctx
        .wait_for_pods("batch.kubernetes.io/job-name=deadline", 2)
        .await?;
    ensure!(pods.len() == 2, "{} pods", pods.len());
    // A bare Pod of the same queue is its own workload: the rule still holds for it.
    let mut bare = ctx.launch_pod("bare");
    bare["metadata"]["labels"]["queue"] = json!(DEADLINE_QUEUE);
    let denied = ctx.create(&bare, false).await;
    ensure!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.message.contains("activeDeadlineSeconds")),
        "a bare pod without activeDeadlineSeconds: {denied:?}"
    );
    Ok(())
}

/// Server-side apply records what the user wrote: a `backoffLimit: 6` owned by an Apply
/// manager is kept, like one in `last-applied-configuration`.
pub async fn server_side_apply_intent_is_kept(ctx: &Ctx) -> Result<()> {
    let mut job = manifest("job-demo.yaml");
    job["metadata"]["name"] = json!("six-on-purpose");
    job["spec"]["backoffLimit"] = json!(6);
    let applied = ctx.apply(&job, "argocd-controller").await?;
    ensure!(
        applied["spec"]["backoffLimit"] == 6,
        "the user's backoffLimit 6 became {}",
        applied["spec"]["backoffLimit"]
    );
    Ok(())
}

/// An Indexed Job named by `generateName` (the W&B agent without a queue-given name): every
/// pod ends with MASTER_ADDR and PET_MASTER_ADDR naming the rank-0 pod of the real Job.
pub async fn generate_name_jobs_are_wired_at_pod_admission(ctx: &Ctx) -> Result<()> {
    let mut job = indexed_job("ddp-workers", 2);
    let meta = job["metadata"].as_object_mut().context("metadata")?;
    meta.remove("name");
    meta.insert("generateName".into(), json!("ddp-"));
    let job = ctx.create(&job, false).await?;
    let name = job["metadata"]["name"]
        .as_str()
        .context("generated name")?
        .to_string();
    let pods = ctx
        .wait_for_pods(&format!("batch.kubernetes.io/job-name={name}"), 2)
        .await?;
    let want = format!("{name}-0.ddp-workers");
    for pod in &pods {
        let c = &pod["spec"]["containers"][0];
        let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
        ensure!(
            effective(c, "MASTER_ADDR") == Some(want.as_str())
                && effective(c, "PET_MASTER_ADDR") == Some(want.as_str()),
            "{pod_name}: MASTER_ADDR {:?}, PET_MASTER_ADDR {:?} (want {want})",
            effective(c, "MASTER_ADDR"),
            effective(c, "PET_MASTER_ADDR")
        );
        ensure!(
            effective(c, "WORLD_SIZE") == Some("2"),
            "{pod_name}: WORLD_SIZE {:?}",
            effective(c, "WORLD_SIZE")
        );
    }
    Ok(())
}

/// hostNetwork pods resolve pod DNS names only with `dnsPolicy: ClusterFirstWithHostNet`;
/// the API server has already defaulted it to `ClusterFirst` when launchgate sees the Job.
pub async fn host_network_pods_can_resolve_the_master(ctx: &Ctx) -> Result<()> {
    let mut job = indexed_job("hostnet", 2);
    job["spec"]["template"]["spec"]["hostNetwork"] = json!(true);
    ctx.create(&job, false).await?;
    let pods = ctx
        .wait_for_pods("batch.kubernetes.io/job-name=hostnet", 2)
        .await?;
    for pod in &pods {
        ensure!(
            pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet",
            "{}: dnsPolicy {}",
            pod["metadata"]["name"],
            pod["spec"]["dnsPolicy"]
        );
    }
    Ok(())
}

/// A duplicated env name: the kubelet uses the last entry, so the torchrun twin launchgate
/// writes must equal that one.
pub async fn torchrun_twins_follow_the_effective_env(ctx: &Ctx) -> Result<()> {
    let mut job = indexed_job("dup-env", 2);
    job["spec"]["template"]["spec"]["containers"][0]["env"] = json!([
        {"name": "MASTER_PORT", "value": "1234"},
        {"name": "MASTER_PORT", "value": "29500"},
    ]);
    ctx.create(&job, false).await?;
    let pods = ctx
        .wait_for_pods("batch.kubernetes.io/job-name=dup-env", 2)
        .await?;
    for pod in &pods {
        let c = &pod["spec"]["containers"][0];
        ensure!(
            effective(c, "MASTER_PORT") == Some("29500")
                && effective(c, "PET_MASTER_PORT") == Some("29500"),
            "{}: MASTER_PORT {:?}, PET_MASTER_PORT {:?} (the user's effective value is 29500)",
            pod["metadata"]["name"],
            effective(c, "MASTER_PORT"),
            effective(c, "PET_MASTER_PORT")
        );
    }
    Ok(())
}

/// Pods of a Volcano Job without the pytorch plugin (MPI here) get no PyTorch env.
pub async fn only_pytorch_workloads_get_pytorch_env(ctx: &Ctx) -> Result<()> {
    let mut job = manifest("vcjob.yaml");
    job["metadata"]["name"] = json!("mpi-run");
    job["spec"]["plugins"] =
        json!({"mpi": ["--master=master", "--worker=worker", "--port=22"], "ssh": [], "svc": []});
    let job = ctx.create(&job, false).await?;
    for task in job["spec"]["tasks"].as_array().context("tasks")? {
        let c = &task["template"]["spec"]["containers"][0];
        ensure!(
            env_entry(c, "WORLD_SIZE").is_none() && env_entry(c, "MASTER_ADDR").is_none(),
            "task {} of an MPI job got PyTorch env: {}",
            task["name"],
            c["env"]
        );
    }
    // Its pods, as Volcano makes them from the stored templates (launchgate's record on the
    // template is copied onto them).
    for (task, index) in [("master", 0), ("worker", 0), ("worker", 1)] {
        let pod = ctx.create(&volcano_pod(&job, task, index)?, false).await?;
        let c = &pod["spec"]["containers"][0];
        for var in [
            "RANK",
            "WORLD_SIZE",
            "MASTER_ADDR",
            "PET_NODE_RANK",
            "PET_NNODES",
        ] {
            ensure!(
                env_entry(c, var).is_none(),
                "{task}-{index} of an MPI job got {var}: {}",
                c["env"]
            );
        }
    }
    Ok(())
}

/// Offline judges as the cluster does, the upstream CRDs' defaults included: a sample of the
/// generated workloads of every kind, spread over the suite's queues, is created (dry run)
/// through the real API server — its CRDs' schemas default fields before any webhook, as
/// Volcano's writes `maxRetry: 3` — and judged by `launchgate validate` with the same config:
/// the same verdict for each.
pub async fn offline_judges_as_the_cluster_does_crd_defaults_included(ctx: &Ctx) -> Result<()> {
    let config: serde_json::Value = serde_yaml::from_str(&crate::webhook::suite_config()?)?;
    let queues: Vec<String> = config["queues"]
        .as_object()
        .map(|q| q.keys().cloned().collect())
        .unwrap_or_default();
    let mut sample = crate::common::generated::sample(48, 7, &queues);
    // And the case the CRD's default decides: a Volcano Job that writes no maxRetry, 3 GPUs for
    // the guardrails queue's hour a pod, its runs against 8 GPU-hours (2 runs fit, the CRD's 4
    // do not).
    sample.push(
        json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "volcano-defaulted", "labels": {"wandb.ai/monitor": "true",
            "launchgate.io/queue": crate::webhook::GUARDRAILS_QUEUE}},
        "spec": {"schedulerName": "volcano", "minAvailable": 3,
            "tasks": [{"name": "worker", "replicas": 3, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}]}}),
    );
    let dir = tempfile::tempdir()?;
    let config_path = dir.path().join("config.yaml");
    std::fs::write(&config_path, crate::webhook::suite_config()?)?;
    let mut args = vec![
        "validate".to_string(),
        "-o".into(),
        "json".into(),
        "--config".into(),
        config_path.display().to_string(),
        "-n".into(),
        ctx.ns.clone(),
    ];
    for (i, w) in sample.iter().enumerate() {
        let path = dir.path().join(format!("{i:03}.json"));
        std::fs::write(&path, serde_json::to_string(w)?)?;
        args.extend(["-f".to_string(), path.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = crate::common::launchgate(&args);
    let verdicts: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let verdicts = verdicts.as_array().cloned().unwrap_or_default();
    ensure!(
        verdicts.len() == sample.len(),
        "offline judged {} of {}: {}",
        verdicts.len(),
        sample.len(),
        crate::common::text(&out.stderr)
    );
    let mut differences = Vec::new();
    for (w, offline) in sample.iter().zip(&verdicts) {
        let (status, body, _) = ctx.create_raw(w, true).await?;
        let in_cluster = status == 201;
        let offline_allowed = offline["allowed"].as_bool().unwrap_or_default();
        if in_cluster != offline_allowed {
            differences.push(format!(
                "{} {}: the cluster says {status} ({}), offline {} ({})",
                w["kind"].as_str().unwrap_or_default(),
                w["metadata"]["name"].as_str().unwrap_or_default(),
                body["message"].as_str().unwrap_or_default(),
                if offline_allowed { "allowed" } else { "denied" },
                offline["message"].as_str().unwrap_or_default()
            ));
        }
    }
    ensure!(
        differences.is_empty(),
        "{} of {} judged differently:\n{}",
        differences.len(),
        sample.len(),
        differences.join("\n")
    );
    Ok(())
}
