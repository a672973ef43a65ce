//! Today's launch stack on the real control plane with the upstream CRDs: JobSets, Trainer v2
//! TrainJobs, and the UPDATE by which Kueue admits a workload. No JobSet, Trainer or Kueue
//! controller runs here: a test plays their part (it creates the Jobs a JobSet's controller
//! would, as that controller's service account; it sends Kueue's admission UPDATE).

use crate::common::env_entry;
use crate::ctx::{Ctx, mutations, rbac_probe_job};
use crate::webhook::{KUEUE_QUEUE, TRAINJOB_QUEUE};
use anyhow::{Context, Result, ensure};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

const JOBSET_CONTROLLER: &str = "system:serviceaccount:jobset-system:jobset-controller-manager";

fn gpu_container(gpus: i64) -> Value {
    json!({"name": "train", "image": "acme/train:1", "command": ["torchrun", "train.py"],
           "resources": {"limits": {"nvidia.com/gpu": gpus}}})
}

/// A launch JobSet: one replicated job of `replicas` Jobs with `pods` Indexed pods each.
fn jobset(name: &str, replicas: i64, pods: i64, gpus: i64) -> Value {
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "labels": {"wandb.ai/monitor": "true"},
                     "annotations": {"launchgate.io/pytorch": "true"}},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas, "template": {"spec": {
            "completionMode": "Indexed", "parallelism": pods, "completions": pods,
            "template": {"spec": {"restartPolicy": "OnFailure", "containers": [gpu_container(gpus)]}}}}}]}})
}

/// Lets `user` (a controller's service account) create Jobs in the test's namespace.
async fn grant_jobs(ctx: &Ctx, user: &str) -> Result<()> {
    let (sa_ns, sa) = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|s| s.split_once(':'))
        .context("a service account")?;
    ctx.grant(
        "controller",
        json!([{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]),
        json!([{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}]),
        &rbac_probe_job(),
        &[(user, &[])],
    )
    .await
}

/// Job `index` of replicated job `rj` as JobSet's controller makes it from the stored JobSet.
fn child_job(js: &Value, rj: usize, index: usize) -> Result<Value> {
    let name = js["metadata"]["name"].as_str().context("name")?;
    let uid = js["metadata"]["uid"].as_str().context("uid")?;
    let rjob = &js["spec"]["replicatedJobs"][rj];
    let rj_name = rjob["name"].as_str().context("replicated job name")?;
    let labels = json!({"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/jobset-uid": uid,
        "jobset.sigs.k8s.io/replicatedjob-name": rj_name,
        "jobset.sigs.k8s.io/job-index": index.to_string(),
        "jobset.sigs.k8s.io/replicatedjob-replicas": rjob["replicas"].to_string()});
    let mut spec = rjob["template"]["spec"].clone();
    let template = &mut spec["template"];
    for (k, v) in labels.as_object().unwrap() {
        template["metadata"]["labels"][k] = v.clone();
        template["metadata"]["annotations"][k] = v.clone();
    }
    template["spec"]["subdomain"] = json!(name);
    spec["suspend"] = json!(false);
    Ok(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("{name}-{rj_name}-{index}"), "labels": labels,
            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": spec}))
}

/// Reads the stored `name`, changes it with `change` and sends it back as an UPDATE, again on a
/// conflict (the Job controller writes the Job's status meanwhile).
async fn update(
    api: &Api<kube::api::DynamicObject>,
    name: &str,
    change: impl Fn(&mut Value),
) -> Result<Value, kube::Error> {
    let mut attempt = 0;
    loop {
        let mut current =
            serde_json::to_value(api.get(name).await?).map_err(kube::Error::SerdeError)?;
        change(&mut current);
        let object = serde_json::from_value(current).map_err(kube::Error::SerdeError)?;
        match api.replace(name, &PostParams::default(), &object).await {
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 10 => attempt += 1,
            other => {
                return other
                    .and_then(|o| serde_json::to_value(o).map_err(kube::Error::SerdeError));
            }
        }
    }
}

fn value<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    env_entry(container, name).and_then(|e| e["value"].as_str())
}

/// A launch JobSet comes back hardened, with Job defaults in JobSet's terms and its wiring
/// recorded; an over-limit one is denied with the queue, field, value and limit; the Jobs its
/// controller makes (sent as that controller) are judged per pod and left unwired, and the pods
/// the real Job controller makes from them see one coherent rendezvous.
pub async fn jobset_is_hardened_limited_and_wired(ctx: &Ctx) -> Result<()> {
    let (status, body, _) = ctx.create_raw(&jobset("too-big", 1, 2, 8), false).await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(status == 403, "an 8-GPU JobSet: {status} {body}");
    for part in [
        "queue \"gpu-queue\"",
        "spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources.limits[\"nvidia.com/gpu\"]=8",
        "exceeds maximum 4",
    ] {
        ensure!(message.contains(part), "{message:?} lacks {part:?}");
    }

    let js = ctx.create(&jobset("ddp", 2, 2, 1), false).await?;
    let rjob = &js["spec"]["replicatedJobs"][0]["template"]["spec"];
    let train = &rjob["template"]["spec"]["containers"][0];
    ensure!(
        train["securityContext"]["allowPrivilegeEscalation"] == false
            && train["securityContext"]["capabilities"]["drop"] == json!(["ALL"]),
        "stored JobSet container not hardened: {train}"
    );
    ensure!(
        js["spec"]["failurePolicy"]["maxRestarts"] == 0
            && js["spec"]["ttlSecondsAfterFinished"] == 60,
        "JobSet defaults: {}",
        js["spec"]
    );
    let record = rjob["template"]["metadata"]["annotations"]["launchgate.io/pytorch-wiring"]
        .as_str()
        .context("no wiring record on the JobSet's pod template (pruned?)")?;
    ensure!(record.contains("\"jobsetRank\""), "record {record}");
    ensure!(
        mutations(&js).is_some_and(|m| m.contains("pytorch") && m.contains("security-context")),
        "mutations {:?}",
        mutations(&js)
    );

    grant_jobs(ctx, JOBSET_CONTROLLER).await?;
    for index in 0..2 {
        let job = child_job(&js, 0, index)?;
        let (status, created, _) = ctx
            .create_raw_as(&job, false, Some(JOBSET_CONTROLLER))
            .await?;
        ensure!(status == 201, "child Job {index}: {status} {created}");
        let spec = &created["spec"];
        ensure!(
            spec["backoffLimit"] == 6,
            "a JobSet's Job gets no job defaults of its own: {spec}"
        );
    }
    let pods = ctx
        .wait_for_pods("jobset.sigs.k8s.io/jobset-name=ddp", 4)
        .await?;
    let mut ranks = BTreeSet::new();
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let c = &pod["spec"]["containers"][0];
        ensure!(
            value(c, "MASTER_ADDR") == Some("ddp-workers-0-0.ddp"),
            "{name}: {c}"
        );
        ensure!(value(c, "WORLD_SIZE") == Some("4"), "{name}: {c}");
        ensure!(value(c, "PET_NNODES") == Some("4"), "{name}: {c}");
        let rank = value(c, "RANK").with_context(|| format!("{name}: no RANK"))?;
        ensure!(value(c, "PET_NODE_RANK") == Some(rank), "{name}: {c}");
        let expected = pod["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"]
            .as_str()
            .and_then(|j| j.parse::<i64>().ok())
            .zip(
                pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                    .as_str()
                    .and_then(|i| i.parse::<i64>().ok()),
            )
            .map(|(j, i)| (2 * j + i).to_string());
        ensure!(
            expected.as_deref() == Some(rank),
            "{name}: RANK {rank}, expected {expected:?}"
        );
        ranks.insert(rank.to_string());
    }
    ensure!(ranks.len() == 4, "ranks {ranks:?}");
    Ok(())
}

fn trainjob(name: &str, runtime: &str, nodes: i64, gpus: i64) -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": TRAINJOB_QUEUE}},
        "spec": {"runtimeRef": {"name": runtime},
                 "trainer": {"image": "acme/train:1", "numNodes": nodes,
                             "resourcesPerNode": {"limits": {"nvidia.com/gpu": gpus}}}}})
}

/// The ClusterTrainingRuntimes API (cluster-scoped).
fn cluster_runtimes(ctx: &Ctx) -> Api<kube::api::DynamicObject> {
    use kube::core::GroupVersionKind;
    use kube::discovery::ApiResource;
    Api::all_with(
        ctx.client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime"),
            "clustertrainingruntimes",
        ),
    )
}

/// Creates the ClusterTrainingRuntime `runtime`, runs `test`, and deletes the runtime again.
async fn with_cluster_runtime<F, Fut>(ctx: &Ctx, runtime: Value, test: F) -> Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let api = cluster_runtimes(ctx);
    let name = runtime["metadata"]["name"]
        .as_str()
        .context("runtime name")?
        .to_string();
    api.create(&PostParams::default(), &serde_json::from_value(runtime)?)
        .await?;
    let result = test().await;
    let _ = api.delete(&name, &Default::default()).await;
    result
}

/// Dry-runs `tj` until launchgate reads its runtime (the watch delivers a new runtime a moment
/// after it is created); returns the last answer: status, body, warnings.
async fn dry_run_once_runtime_is_read(ctx: &Ctx, tj: &Value) -> Result<(u16, Value, Vec<String>)> {
    ctx.poll(
        "the runtime in launchgate's cache",
        Duration::from_secs(30),
        || async {
            let (status, body, warnings) = ctx.create_raw(tj, true).await?;
            let unread = body["message"]
                .as_str()
                .is_some_and(|m| m.contains("cannot verify the runtime's size"))
                || warnings.iter().any(|w| w.contains("cannot be read"));
            Ok((!unread).then_some((status, body, warnings)))
        },
    )
    .await
}

/// A launch TrainJob is hardened through launchgate's runtime patch, which the real TrainJob
/// schema keeps whole; it gets no PyTorch env; over its queue's limits it is denied.
pub async fn trainjob_is_hardened_through_a_runtime_patch_and_limited(ctx: &Ctx) -> Result<()> {
    let runtime = format!("torch-{}", ctx.ns);
    with_cluster_runtime(ctx, cluster_runtime(&runtime, 1, 8), || {
        trainjob_hardened(ctx, &runtime)
    })
    .await
}

async fn trainjob_hardened(ctx: &Ctx, runtime: &str) -> Result<()> {
    let trainjob = |name: &str, nodes: i64, gpus: i64| trainjob(name, runtime, nodes, gpus);
    dry_run_once_runtime_is_read(ctx, &trainjob("probe", 1, 1)).await?;
    let (status, body, _) = ctx.create_raw(&trainjob("too-big", 8, 8), false).await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(status == 403, "an 8-node TrainJob: {status} {body}");
    for part in [
        format!("queue {TRAINJOB_QUEUE:?}"),
        "spec.trainer.numNodes=8 exceeds maximum 4 (variable \"nodes\")".to_string(),
        "total nvidia.com/gpu over all pods=64 exceeds maximum 16 (totals)".to_string(),
    ] {
        ensure!(message.contains(&part), "{message:?} lacks {part:?}");
    }
    // What launchgate writes (a dry run answers it) is what the API server stores: nothing of
    // the runtime patch is pruned by the real schema.
    let (status, dry, warnings) = ctx.create_raw(&trainjob("run", 2, 4), true).await?;
    ensure!(status == 201, "dry run: {status} {dry}");
    let stored = ctx.create(&trainjob("run", 2, 4), false).await?;
    let patches = stored["spec"]["runtimePatches"]
        .as_array()
        .context("no runtimePatches stored")?;
    let ours = patches
        .iter()
        .find(|p| p["manager"] == "launchgate.io/admission")
        .with_context(|| format!("no launchgate runtime patch: {patches:?}"))?;
    let node = &ours["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0];
    ensure!(node["name"] == "node", "{node}");
    let template = &node["template"]["spec"]["template"];
    let c = &template["spec"]["containers"][0];
    ensure!(
        c["name"] == "node"
            && c["securityContext"]["allowPrivilegeEscalation"] == false
            && c["securityContext"]["capabilities"]["drop"] == json!(["ALL"])
            && c["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault",
        "node container: {c}"
    );
    ensure!(
        c["volumeMounts"].as_array().is_some_and(|m| !m.is_empty())
            && template["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "nfs-pvc",
        "cache: {template}"
    );
    ensure!(
        template["metadata"]["labels"]["launchgate.io/queue"] == TRAINJOB_QUEUE,
        "queue label for the runtime's pods: {template}"
    );
    ensure!(
        dry["spec"]["runtimePatches"] == stored["spec"]["runtimePatches"],
        "stored patch differs from the written one:\n{}\n{}",
        dry["spec"]["runtimePatches"],
        stored["spec"]["runtimePatches"]
    );
    let text = serde_json::to_string(&stored)?;
    ensure!(
        !text.contains("PET_"),
        "a TrainJob got torchrun env: {text}"
    );
    ensure!(
        stored["spec"]["trainer"]["env"]
            .as_array()
            .is_some_and(|e| e.iter().any(|v| v["name"] == "HF_HOME")),
        "the cache env goes to spec.trainer.env: {}",
        stored["spec"]["trainer"]
    );
    let _ = warnings;
    Ok(())
}

/// An Indexed PyTorch Job of a queue that hands off to Kueue: the hand-off labels appear at
/// CREATE; Kueue's admission UPDATE (suspend false, flavor nodeSelector) gets no patch and the
/// pods the Job controller then makes see the rendezvous size; any UPDATE is re-validated; a
/// Job that allows a partial admission is never wired, so Kueue's shrinking UPDATE yields pods
/// without a WORLD_SIZE rather than with a wrong one.
pub async fn kueue_admission_is_left_alone_and_revalidated(ctx: &Ctx) -> Result<()> {
    let job = |name: &str, annotations: Value| {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "annotations": annotations,
                         "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": KUEUE_QUEUE}},
            "spec": {"suspend": true, "completionMode": "Indexed", "completions": 4, "parallelism": 4,
                     "template": {"spec": {"subdomain": name, "restartPolicy": "Never",
                         "containers": [gpu_container(1)]}}}})
    };
    let created = ctx.create(&job("ddp", json!({})), false).await?;
    let labels = &created["metadata"]["labels"];
    ensure!(
        labels["kueue.x-k8s.io/queue-name"] == "team-a"
            && labels["kueue.x-k8s.io/priority-class"] == "research"
            && labels["kueue.x-k8s.io/max-exec-time-seconds"] == "3600",
        "hand-off labels: {labels}"
    );
    ensure!(
        created["spec"]["suspend"] == true,
        "suspend is Kueue's: {}",
        created["spec"]
    );
    let api = ctx.api_for(&created)?;
    // A change Kueue never makes, to show that UPDATEs are judged: over the queue's GPU total
    // (a suspended Job's pod resources may change).
    let denied = update(&api, "ddp", |job| {
        job["spec"]["parallelism"] = json!(2);
        job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
            json!(4);
    })
    .await;
    ensure!(
        matches!(&denied, Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("total nvidia.com/gpu over all pods=8 exceeds maximum 4")),
        "an over-limit UPDATE was not refused by the queue's totals: {denied:?}"
    );
    // Kueue admits it: suspend false and the flavor's nodeSelector, in one UPDATE.
    let admit = |job: &mut Value| {
        job["spec"]["suspend"] = json!(false);
        job["spec"]["template"]["spec"]["nodeSelector"] = json!({"cloud.example.com/gpu": "a100"});
    };
    let mut sent_template = created["spec"]["template"].clone();
    sent_template["spec"]["nodeSelector"] = json!({"cloud.example.com/gpu": "a100"});
    let stored = update(&api, "ddp", admit).await?;
    ensure!(
        stored["spec"]["template"] == sent_template
            && stored["metadata"]["annotations"] == created["metadata"]["annotations"],
        "Kueue's admission UPDATE was patched:\nsent {sent_template}\nstored {}",
        stored["spec"]["template"]
    );
    let pods = ctx
        .wait_for_pods("batch.kubernetes.io/job-name=ddp", 4)
        .await?;
    for pod in &pods {
        let c = &pod["spec"]["containers"][0];
        ensure!(value(c, "WORLD_SIZE") == Some("4"), "pod env: {c}");
    }

    // Partial admission allowed: admitted (the queue only warns) but never wired.
    let (status, partial, warnings) = ctx
        .create_raw(
            &job(
                "elastic",
                json!({"kueue.x-k8s.io/job-min-parallelism": "2"}),
            ),
            false,
        )
        .await?;
    ensure!(status == 201, "{status} {partial}");
    ensure!(
        warnings.iter().any(|w| w.contains("partial admission")),
        "warnings {warnings:?}"
    );
    update(&api, "elastic", |job| {
        job["spec"]["suspend"] = json!(false);
        job["spec"]["parallelism"] = json!(2);
        job["spec"]["completions"] = json!(2);
    })
    .await?;
    let pods = ctx
        .wait_for_pods("batch.kubernetes.io/job-name=elastic", 2)
        .await?;
    for pod in &pods {
        let c = &pod["spec"]["containers"][0];
        ensure!(
            env_entry(c, "WORLD_SIZE").is_none(),
            "a wrong WORLD_SIZE: {c}"
        );
    }
    Ok(())
}

/// A queue's Kueue labels are the queue's: a tenant's empty or foreign LocalQueue, other
/// priority class or longer run time is replaced at CREATE (Job and JobSet) with a warning;
/// Kueue's admission UPDATE still passes untouched; a tenant's UPDATE taking a workload out of
/// Kueue, or lengthening its run, is denied naming the queue, the label, its value and the
/// queue's setting.
pub async fn a_tenants_kueue_labels_are_replaced_or_denied(ctx: &Ctx) -> Result<()> {
    let tenant_labels = |queue_name: &str| {
        json!({"wandb.ai/monitor": "true", "launchgate.io/queue": KUEUE_QUEUE,
            "kueue.x-k8s.io/queue-name": queue_name,
            "kueue.x-k8s.io/priority-class": "urgent",
            "kueue.x-k8s.io/max-exec-time-seconds": "999999"})
    };
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "escape", "labels": tenant_labels("")},
        "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
            "containers": [gpu_container(1)]}}}});
    let mut set = jobset("escape-js", 1, 2, 1);
    set["metadata"]["labels"] = tenant_labels("team-b");
    for object in [&job, &set] {
        let (status, stored, warnings) = ctx.create_raw(object, false).await?;
        ensure!(status == 201, "{status} {stored}");
        let labels = &stored["metadata"]["labels"];
        ensure!(
            labels["kueue.x-k8s.io/queue-name"] == "team-a"
                && labels["kueue.x-k8s.io/priority-class"] == "research"
                && labels["kueue.x-k8s.io/max-exec-time-seconds"] == "3600",
            "{}: the tenant's Kueue labels were kept: {labels}",
            object["kind"]
        );
        ensure!(
            warnings
                .iter()
                .filter(|w| w.contains("replaced by") && w.contains("kueue.x-k8s.io/"))
                .count()
                == 3,
            "warnings {warnings:?}"
        );
    }
    ensure!(
        ctx.get(&job, "escape").await?.context("the Job")?["spec"]["suspend"] == true,
        "suspend is Kueue's"
    );
    // Kueue admits the Job: passes, untouched.
    let api = ctx.api_for(&job)?;
    let before = ctx.get(&job, "escape").await?.context("the Job")?;
    let stored = update(&api, "escape", |job| {
        job["spec"]["suspend"] = json!(false);
        job["spec"]["template"]["spec"]["nodeSelector"] = json!({"cloud.example.com/gpu": "a100"});
    })
    .await
    .context("Kueue's admission UPDATE")?;
    ensure!(
        stored["metadata"]["labels"] == before["metadata"]["labels"]
            && stored["spec"]["template"]["spec"]["nodeSelector"]
                == json!({"cloud.example.com/gpu": "a100"}),
        "Kueue's admission UPDATE was changed: {}",
        stored["metadata"]
    );
    // A tenant's UPDATE taking the Job out of Kueue, or lengthening the JobSet's run.
    let out = update(&api, "escape", |job| {
        job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = json!("");
    })
    .await;
    ensure!(
        matches!(&out, Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains(&format!(
            r#"queue "{KUEUE_QUEUE}": label kueue.x-k8s.io/queue-name="" is not the queue's "team-a" (kueue.localQueue)"#
        ))),
        "an UPDATE emptying the queue name was not denied: {out:?}"
    );
    let longer = update(&ctx.api_for(&set)?, "escape-js", |js| {
        js["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = json!("7200");
    })
    .await;
    ensure!(
        matches!(&longer, Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains(
            r#"label kueue.x-k8s.io/max-exec-time-seconds="7200" exceeds maximum 3600 (kueue.maxExecutionSeconds)"#
        )),
        "an UPDATE lengthening the run was not denied: {longer:?}"
    );
    Ok(())
}

const TRAINER_CONTROLLER: &str =
    "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager";

/// Lets Trainer's controller (its service account) create JobSets in the test's namespace.
async fn grant_jobsets(ctx: &Ctx) -> Result<()> {
    // Not a launch workload: only RBAC can refuse it.
    let probe = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "rbac-probe"},
        "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}]}});
    ctx.grant(
        "trainer",
        json!([{"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["create"]}]),
        json!([{"kind": "ServiceAccount", "name": "kubeflow-trainer-controller-manager",
                "namespace": "kubeflow-system"}]),
        &probe,
        &[(TRAINER_CONTROLLER, &[])],
    )
    .await
}

/// A ClusterTrainingRuntime of `nodes` × `gpus` GPUs, as Trainer's manifests write one.
fn cluster_runtime(name: &str, nodes: i64, gpus: i64) -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {"mlPolicy": {"numNodes": nodes, "torch": {"numProcPerNode": "auto"}},
            "template": {"spec": {"replicatedJobs": [{"name": "node", "replicas": 1,
                "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"containers": [{"name": "node",
                        "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
                        "command": ["torchrun", "train.py"],
                        "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}}]}}}})
}

/// The JobSet Trainer makes for the stored TrainJob `tj` when its runtime renders `nodes` ×
/// `gpus` (named after the TrainJob, owned by it, with the trainer pods' queue label that
/// launchgate's runtime patch gave them).
fn trainer_jobset(tj: &Value, nodes: i64, gpus: i64) -> Value {
    let labels = &tj["spec"]["runtimePatches"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["manager"] == "launchgate.io/admission"))
        .map(|p| p["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"].clone())
        .unwrap_or(Value::Null);
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": tj["metadata"]["name"],
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": tj["metadata"]["name"], "uid": tj["metadata"]["uid"],
                "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"parallelism": nodes, "completions": nodes, "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "node",
                    "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
                    "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}}]}})
}

/// A TrainJob that leaves numNodes and resourcesPerNode to its ClusterTrainingRuntime (64 × 8
/// GPUs) is counted as the runtime, read through the server's cluster lookups, and denied by
/// its queue's totals with the queue, the total, its value, the limit and where the size comes
/// from. The JobSet Trainer makes for an admitted TrainJob is held to the same totals.
pub async fn trainjob_is_sized_by_its_runtime(ctx: &Ctx) -> Result<()> {
    let name = format!("torch-64x8-{}", ctx.ns);
    with_cluster_runtime(ctx, cluster_runtime(&name, 64, 8), || async {
        let tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "big", "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": TRAINJOB_QUEUE}},
            "spec": {"runtimeRef": {"name": name}, "trainer": {"image": "acme/train:1"}}});
        let (status, body, _) = dry_run_once_runtime_is_read(ctx, &tj).await?;
        ensure!(status == 403, "a TrainJob of 64 × 8 GPUs was admitted: {status} {body}");
        let message = body["message"].as_str().unwrap_or_default();
        for part in [
            format!("queue {TRAINJOB_QUEUE:?}"),
            "total nvidia.com/gpu over all pods=512 exceeds maximum 16 (totals)".to_string(),
            format!("(ClusterTrainingRuntime {name:?} replicatedJobs[0] (node): 64 × 8)"),
        ] {
            ensure!(message.contains(&part), "{message:?} lacks {part:?}");
        }
        // Created for real, the same answer.
        let (status, _, _) = ctx.create_raw(&tj, false).await?;
        ensure!(status == 403, "created: {status}");

        // A TrainJob that sets its size within the totals is admitted: 2 × 8 = 16.
        let mut fits = tj.clone();
        fits["metadata"]["name"] = json!("fits");
        fits["spec"]["trainer"]["numNodes"] = json!(2);
        fits["spec"]["trainer"]["resourcesPerNode"] = json!({"limits": {"nvidia.com/gpu": 8}});
        let stored = ctx.create(&fits, false).await?;
        grant_jobsets(ctx).await?;
        // Trainer renders it as the TrainJob says: judged per pod, admitted.
        let (status, body, _) = ctx
            .create_raw_as(&trainer_jobset(&stored, 2, 8), true, Some(TRAINER_CONTROLLER))
            .await?;
        ensure!(status == 201, "Trainer's 2 × 8 JobSet: {status} {body}");
        // A JobSet of 8 × 8 for it (the runtime grew since) is held to the queue's totals.
        let (status, body, _) = ctx
            .create_raw_as(&trainer_jobset(&stored, 8, 8), true, Some(TRAINER_CONTROLLER))
            .await?;
        let message = body["message"].as_str().unwrap_or_default();
        ensure!(status == 403, "Trainer's 8 × 8 JobSet: {status} {body}");
        for part in [
            format!("queue {TRAINJOB_QUEUE:?}"),
            "total nvidia.com/gpu over all pods=64 exceeds maximum 16 (totals)".to_string(),
        ] {
            ensure!(message.contains(&part), "{message:?} lacks {part:?}");
        }
        Ok(())
    })
    .await
}

/// The pod Trainer makes for a node of `tj` from the runtime's trainer pod template with the
/// TrainJob's runtime patches merged over it (container securityContext field by field, as a
/// strategic merge does).
fn trainer_pod(runtime: &Value, tj: &Value) -> Value {
    let mut template = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
        ["template"]
        .clone();
    for patch in tj["spec"]["runtimePatches"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let patched = &patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]
            ["spec"]["template"];
        for c in patched["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let Some(node) = template["spec"]["containers"]
                .as_array_mut()
                .and_then(|cs| cs.iter_mut().find(|x| x["name"] == c["name"]))
            else {
                continue;
            };
            for (k, v) in c["securityContext"].as_object().into_iter().flatten() {
                node["securityContext"][k] = v.clone();
            }
        }
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-node-0"},
        "spec": template["spec"]})
}

/// A runtime whose node container adds CAP_SYS_ADMIN (RDMA, GPUDirect; a privileged one is
/// refused by this control plane's `--allow-privileged=false` whatever launchgate does):
/// launchgate's hardening writes nothing that contradicts it, so the pod Trainer makes from
/// the runtime and the patches is one the API server accepts, and the user is told.
pub async fn trainjob_hardening_keeps_a_privileged_runtime_valid(ctx: &Ctx) -> Result<()> {
    let name = format!("rdma-{}", ctx.ns);
    let mut runtime = cluster_runtime(&name, 2, 4);
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["containers"][0]["securityContext"] =
        json!({"capabilities": {"add": ["IPC_LOCK", "CAP_SYS_ADMIN"]}});
    let rt = runtime.clone();
    with_cluster_runtime(ctx, runtime, || async {
        let tj = trainjob("rdma", &name, 2, 4);
        let (status, body, warnings) = dry_run_once_runtime_is_read(ctx, &tj).await?;
        ensure!(status == 201, "{status} {body}");
        ensure!(
            warnings.iter().any(|w| w.contains(&format!(
                "the node container of ClusterTrainingRuntime {name:?} (a TrainJob's trainer) adds CAP_SYS_ADMIN; allowPrivilegeEscalation was left unset"
            ))),
            "no word about the node container's CAP_SYS_ADMIN: {warnings:?}"
        );
        let stored = ctx.create(&tj, false).await?;
        // Not a launch pod: only the API server's own validation judges it.
        let pod = trainer_pod(&rt, &stored);
        let (status, body, _) = ctx.create_raw(&pod, true).await?;
        ensure!(
            status == 201,
            "the pod Trainer would make is invalid: {status} {body}\n{pod}"
        );
        Ok(())
    })
    .await
}
