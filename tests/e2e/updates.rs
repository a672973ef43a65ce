//! An UPDATE is judged against what launchgate admitted: one that brings an object into a
//! queue is judged as a CREATE; a controller's update within what was admitted passes; the
//! child a runtime-sized run's controller makes is held to the run's per-run rules.

use crate::ctx::{Ctx, rbac_probe_job};
use crate::trust::EXEMPT_GROUP;
use crate::webhook::{Launchgate, RAY_CAPPED_QUEUE, RAY_QUEUE, suite_config};
use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};
use std::time::Duration;

/// The built-in queue with a 16 GPU-hour ceiling per run, 16 GPUs per workload in all, the
/// Kueue LocalQueue `team-a`, TrainJobs sized by namespaced TrainingRuntimes too, and the
/// platform group exempt: where UPDATEs are judged against what was admitted.
pub const CAPPED_QUEUE: &str = "capped-queue";

/// The suite's config with the queues whose ceilings these tests (and the KubeRay one) judge:
/// [`CAPPED_QUEUE`] and [`RAY_CAPPED_QUEUE`] (the KubeRay queue with at most 8 GPU-hours per
/// run), the MPIJob queue ([`crate::mpijob::MPI_QUEUE`], the platform group exempt there too) and
/// the LeaderWorkerSet queue ([`crate::leaderworkerset::LWS_QUEUE`]). Served by a launchgate of their own ([`Own`]), so the suite's config — and the
/// differential's sample over its queues — stays as it is.
pub fn capped_config() -> Result<String> {
    let mut config: Value = serde_yaml::from_str(&suite_config()?)?;
    let default_queue = config["defaultQueue"]
        .as_str()
        .context("a default queue")?
        .to_string();
    let mut capped = config["queues"][&default_queue].clone();
    capped["guardrails"]["costCeiling"] = json!({"maxGpuHours": 16});
    capped["limits"]["totals"] = json!({"nvidia.com/gpu": {"maximum": 16}});
    capped["limits"]["trainingRuntimes"] = json!("namespaced");
    capped["kueue"] = json!({"localQueue": "team-a"});
    capped["exemptions"] = json!([{"name": "capped-platform", "groups": [EXEMPT_GROUP]}]);
    config["queues"][CAPPED_QUEUE] = capped;
    let mut ray_capped = config["queues"][RAY_QUEUE].clone();
    ray_capped["guardrails"]["costCeiling"] = json!({"maxGpuHours": 8});
    config["queues"][RAY_CAPPED_QUEUE] = ray_capped;
    let mut mpi = crate::mpijob::mpi_queue(&config["queues"][&default_queue]);
    mpi["exemptions"] = json!([{"name": MPI_PLATFORM, "groups": [EXEMPT_GROUP]}]);
    config["queues"][crate::mpijob::MPI_QUEUE] = mpi;
    let lws = crate::leaderworkerset::lws_queue(&config["queues"][&default_queue]);
    config["queues"][crate::leaderworkerset::LWS_QUEUE] = lws;
    Ok(serde_yaml::to_string(&config)?)
}

/// A queue of one kind's template for [`capped_config`]: `base` (the built-in queue) denying
/// what `template` and its `variables` do not allow, at most 8 GPUs in all, handed off to the
/// Kueue LocalQueue `team-a`.
pub fn kind_queue(base: &Value, template: &str, variables: Value) -> Value {
    let mut queue = base.clone();
    queue["kueue"] = json!({"localQueue": "team-a"});
    queue["limits"] = json!({
        "enforcement": "deny",
        "template": template,
        "variables": variables,
        "totals": {"nvidia.com/gpu": {"maximum": 8}},
    });
    queue
}

/// The labels of a launch workload (and its templates) in `queue`.
pub fn queue_labels(queue: &str) -> Value {
    json!({"wandb.ai/monitor": "true", "launchgate.io/queue": queue})
}

/// The exemption of the platform group in the MPIJob queue.
const MPI_PLATFORM: &str = "mpi-platform";

/// A launchgate serving [`capped_config`] (with cluster lookups), registered for one namespace
/// of the test's that the suite's own launchgate does not see.
pub struct Own {
    webhook: Launchgate,
    /// The namespace it judges.
    pub ns: Ctx,
    _dir: tempfile::TempDir,
}

impl Own {
    /// Starts it, registers it for a new namespace and waits until a launch Job there is
    /// mutated by it.
    pub async fn start(ctx: &Ctx, name: &str) -> Result<Own> {
        Self::start_serving(ctx, name, &capped_config()?).await
    }

    /// [`Own::start`] serving `config` instead (which has the default queue).
    pub async fn start_serving(ctx: &Ctx, name: &str, config: &str) -> Result<Own> {
        Self::start_with_args(ctx, name, config, &[]).await
    }

    /// [`Own::start_serving`] with `serve`'s `extra_args`.
    pub async fn start_with_args(
        ctx: &Ctx,
        name: &str,
        config: &str,
        extra_args: &[String],
    ) -> Result<Own> {
        let tag = format!("{name}-{}", &ctx.ns[ctx.ns.len() - 4..]);
        let ns = crate::native::namespace(ctx, name, &tag).await?;
        let dir = tempfile::tempdir()?;
        let mut webhook = Launchgate::start_with(
            dir.path(),
            Some(&ctx.env.kubeconfig),
            "127.0.0.1",
            config,
            extra_args,
        )
        .await?;
        webhook
            .register_with(
                &ctx.client,
                &tag,
                &[json!({"key": crate::native::SELECT_LABEL, "operator": "In", "values": [tag]})],
                None,
            )
            .await?;
        let own = Own {
            webhook,
            ns,
            _dir: dir,
        };
        let mut probe = outside_job("probe", 1, 0);
        probe["metadata"]["labels"] = launch_labels();
        own.ns
            .wait_for(
                "its launchgate to take effect",
                Duration::from_secs(60),
                || async {
                    let made = own.ns.create(&probe, true).await;
                    Ok(made.is_ok_and(|j| crate::ctx::mutations(&j).is_some()))
                },
            )
            .await?;
        Ok(own)
    }

    /// Unregisters and stops it, and deletes its namespace.
    pub async fn finish(mut self, ctx: &Ctx) {
        self.webhook.unregister(&ctx.client).await;
        self.webhook.stop();
        self.ns.cleanup().await;
    }
}

/// Runs `test` in the namespace of an [`Own`] launchgate, then cleans up, pass or fail.
macro_rules! with_own {
    ($ctx:expr, $name:expr, $test:path) => {{
        let own = $crate::updates::Own::start($ctx, $name).await?;
        let result = $test(&own.ns).await;
        own.finish($ctx).await;
        result
    }};
}
pub(crate) use with_own;

const MARK: &str = "launchgate.io/exempted-by";
pub(crate) const KUEUE: &str = "system:serviceaccount:kueue-system:kueue-controller-manager";
const KUBERAY: &str = crate::ray::KUBERAY_OPERATOR;
const TRAINER: &str = "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager";

pub(crate) fn launch_labels() -> Value {
    json!({"wandb.ai/monitor": "true", "launchgate.io/queue": CAPPED_QUEUE})
}

/// A suspended Job of `pods` pods of `gpus` GPUs, with no launch label (launchgate never sees
/// it created).
pub(crate) fn outside_job(name: &str, pods: i64, gpus: i64) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {"suspend": true, "parallelism": pods, "completions": pods,
            "template": {"metadata": {}, "spec": {"restartPolicy": "Never",
                "containers": [{"name": "train", "image": "busybox",
                    "command": ["sh", "-c", "true"],
                    "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}})
}

/// Reads the stored `obj`, changes it with `change` and sends it back as `user` (the suite's
/// own identity when `None`): the HTTP status and body.
pub(crate) async fn update_as(
    ctx: &Ctx,
    obj: &Value,
    user: Option<(&str, &[&str])>,
    change: impl Fn(&mut Value),
) -> Result<(u16, Value)> {
    let name = obj["metadata"]["name"].as_str().context("a name")?;
    let api = ctx.api_for(obj)?;
    for _ in 0..10 {
        let mut current = serde_json::to_value(api.get(name).await?)?;
        change(&mut current);
        let (status, body) = match user {
            Some((user, groups)) => ctx.replace_raw_as(&current, user, groups).await?,
            None => {
                let object = serde_json::from_value(current)?;
                match api
                    .replace(name, &kube::api::PostParams::default(), &object)
                    .await
                {
                    Ok(stored) => (200, serde_json::to_value(stored)?),
                    Err(kube::Error::Api(e)) => (e.code, json!({"message": e.message})),
                    Err(e) => return Err(e.into()),
                }
            }
        };
        if status != 409 {
            return Ok((status, body));
        }
    }
    anyhow::bail!("{name}: conflicts on every try")
}

pub(crate) fn message(body: &Value) -> &str {
    body["message"].as_str().unwrap_or_default()
}

/// A Job created outside launchgate's scope, with launchgate's exemption mark written by the
/// tenant, relabelled into a queue: judged as a CREATE — its limits with nothing "already so",
/// the mark denied — and a relabelled 16 × 4-GPU Job held to the queue's totals. A mark on the
/// object alone is removed and the queue's Kueue label written; the Job controller's pods of
/// that Job are then judged like any launch Job's, with no exemption.
pub async fn a_relabelled_job_is_judged_as_a_create(ctx: &Ctx) -> Result<()> {
    with_own!(ctx, "relabel", a_relabelled_job_is_judged_as_a_create_in)
}

async fn a_relabelled_job_is_judged_as_a_create_in(ctx: &Ctx) -> Result<()> {
    let mut marked = outside_job("marked", 1, 8);
    for at in ["metadata", "spec.template.metadata"] {
        let meta = at.split('.').fold(&mut marked, |v, k| &mut v[k]);
        meta["annotations"] = json!({MARK: "capped-platform"});
    }
    let stored = ctx.create(&marked, false).await?;
    ensure!(
        stored["metadata"]["annotations"][MARK] == "capped-platform",
        "launchgate saw a Job with no launch label: {stored}"
    );
    let (status, body) = update_as(ctx, &stored, None, |job| {
        job["metadata"]["labels"] = launch_labels();
    })
    .await?;
    ensure!(status == 403, "relabelled into the queue: {status} {body}");
    let text = message(&body);
    for part in [
        format!("queue \"{CAPPED_QUEUE}\""),
        "=8 exceeds maximum 4".to_string(),
        MARK.to_string(),
    ] {
        ensure!(text.contains(&part), "{text:?} lacks {part:?}");
    }
    ensure!(!text.contains("already so"), "grandfathered: {text}");
    // Its pod template alone relabelled (a suspended Job's template labels may change).
    let (status, body) = update_as(ctx, &stored, None, |job| {
        for (k, v) in launch_labels().as_object().into_iter().flatten() {
            job["spec"]["template"]["metadata"]["labels"][k] = v.clone();
        }
    })
    .await?;
    ensure!(status == 403, "template relabelled: {status} {body}");

    let wide = ctx.create(&outside_job("wide", 16, 4), false).await?;
    let (status, body) = update_as(ctx, &wide, None, |job| {
        job["metadata"]["labels"] = launch_labels();
    })
    .await?;
    ensure!(status == 403, "a 64-GPU Job relabelled: {status} {body}");
    ensure!(
        message(&body).contains("total nvidia.com/gpu over all pods=64 exceeds maximum 16"),
        "{}",
        message(&body)
    );

    let mut clean = outside_job("clean", 1, 1);
    clean["spec"]["activeDeadlineSeconds"] = json!(3600);
    clean["metadata"]["annotations"] = json!({MARK: "capped-platform"});
    let clean = ctx.create(&clean, false).await?;
    let (status, body) = update_as(ctx, &clean, None, |job| {
        job["metadata"]["labels"] = launch_labels();
    })
    .await?;
    ensure!(
        status == 200,
        "a Job within the limits relabelled: {status} {body}"
    );
    ensure!(
        body["metadata"]["annotations"].get(MARK).is_none(),
        "the mark stayed: {}",
        body["metadata"]
    );
    ensure!(
        body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a",
        "no Kueue label written: {}",
        body["metadata"]
    );
    let (status, body) = update_as(ctx, &clean, None, |job| {
        job["spec"]["suspend"] = json!(false);
    })
    .await?;
    ensure!(status == 200, "unsuspended: {status} {body}");
    let pods = ctx
        .wait_for_pods("batch.kubernetes.io/job-name=clean", 1)
        .await?;
    ensure!(
        pods[0]["metadata"]["annotations"].get(MARK).is_none(),
        "the Job controller's pod carries an exemption: {}",
        pods[0]["metadata"]
    );
    Ok(())
}

/// Lets `user` (a controller's service account, or a group) do `verbs` on `resources`.
async fn grant(
    ctx: &Ctx,
    name: &str,
    rules: Value,
    subject: Value,
    requester: (&str, &[&str]),
) -> Result<()> {
    ctx.grant(
        name,
        rules,
        json!([subject]),
        &rbac_probe_job(),
        &[requester],
    )
    .await
}

pub(crate) fn service_account(user: &str) -> Value {
    let (ns, name) = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|s| s.split_once(':'))
        .unwrap_or_default();
    json!({"kind": "ServiceAccount", "name": name, "namespace": ns})
}

/// Kueue's admission UPDATE (unsuspend, the flavor's nodeSelector) of a run an exemption
/// admitted passes although the run is over the queue's GPU-hour ceiling; a tenant's UPDATE
/// that grows it is refused.
pub async fn kueues_admission_of_an_exempt_run_passes(ctx: &Ctx) -> Result<()> {
    with_own!(
        ctx,
        "kueue-exempt",
        kueues_admission_of_an_exempt_run_passes_in
    )
}

async fn kueues_admission_of_an_exempt_run_passes_in(ctx: &Ctx) -> Result<()> {
    grant(
        ctx,
        "platform",
        json!([{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]),
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": EXEMPT_GROUP}),
        ("ops", &[EXEMPT_GROUP]),
    )
    .await?;
    grant(
        ctx,
        "kueue",
        json!([{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "update"]}]),
        service_account(KUEUE),
        (KUEUE, &[]),
    )
    .await?;
    // 8 GPUs and no deadline: over a 16 GPU-hour ceiling, but exempt.
    let mut run = outside_job("exempt-run", 1, 8);
    run["spec"]["completions"] = json!(4);
    run["metadata"]["labels"] = launch_labels();
    run["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = json!("team-a");
    let (status, body, _) = ctx
        .create_raw_impersonating(&run, false, Some("ops"), &[EXEMPT_GROUP])
        .await?;
    ensure!(status == 201, "the platform team's run: {status} {body}");
    ensure!(
        body["metadata"]["annotations"][MARK] == "capped-platform",
        "not marked exempt: {}",
        body["metadata"]
    );
    let (status, body) = update_as(ctx, &body, Some((KUEUE, &[])), |job| {
        job["spec"]["suspend"] = json!(false);
        job["spec"]["template"]["spec"]["nodeSelector"] = json!({"cloud.example.com/gpu": "a100"});
    })
    .await?;
    ensure!(status == 200, "Kueue's admission UPDATE: {status} {body}");
    let (status, body) = update_as(ctx, &body, None, |job| {
        job["spec"]["parallelism"] = json!(2);
    })
    .await?;
    ensure!(status == 403, "grown by a tenant: {status} {body}");
    ensure!(
        message(&body).contains("guardrails.costCeiling.maxGpuHours"),
        "{}",
        message(&body)
    );
    Ok(())
}

/// The platform group's exempt MPIJob (one 8-GPU worker in a queue of 4 GPUs a worker): a
/// tenant who changes its worker's image and command is judged as creating it — denied naming
/// the cap, nothing "already so"; within the cap she still cannot keep the exemption's mark on
/// its pod templates. Kueue's admission UPDATE and the platform group's own same UPDATE pass.
pub async fn a_tenants_update_of_an_exempt_mpijob_is_judged_as_her_create(ctx: &Ctx) -> Result<()> {
    with_own!(
        ctx,
        "exempt-mpi",
        a_tenants_update_of_an_exempt_mpijob_is_judged_as_her_create_in
    )
}

async fn a_tenants_update_of_an_exempt_mpijob_is_judged_as_her_create_in(ctx: &Ctx) -> Result<()> {
    use crate::mpijob::{MPI_QUEUE, mpijob};
    let rules = |verbs: &[&str]| {
        json!([{"apiGroups": ["kubeflow.org"], "resources": ["mpijobs"], "verbs": verbs},
               {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}])
    };
    grant(
        ctx,
        "platform",
        rules(&["create", "update"]),
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": EXEMPT_GROUP}),
        ("ops", &[EXEMPT_GROUP]),
    )
    .await?;
    grant(
        ctx,
        "tenant",
        rules(&["update"]),
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "tenant"}),
        ("tenant", &[]),
    )
    .await?;
    grant(
        ctx,
        "kueue",
        rules(&["update"]),
        service_account(KUEUE),
        (KUEUE, &[]),
    )
    .await?;
    let mut run = mpijob("exempt-pi", MPI_QUEUE, 1, 8);
    run["spec"]["runPolicy"]["suspend"] = json!(true);
    let (status, stored, _) = ctx
        .create_raw_impersonating(&run, false, Some("ops"), &[EXEMPT_GROUP])
        .await?;
    ensure!(
        status == 201,
        "the platform team's MPIJob: {status} {stored}"
    );
    for at in ["", "/spec/mpiReplicaSpecs/Worker/template"] {
        let mark = stored.pointer(&format!(
            "{at}/metadata/annotations/launchgate.io~1exempted-by"
        ));
        ensure!(
            mark == Some(&json!(MPI_PLATFORM)),
            "not marked exempt at {at:?}: {stored}"
        );
    }
    let worker = "/spec/mpiReplicaSpecs/Worker/template/spec/containers/0";
    let hijack = |gpus: i64| {
        move |job: &mut Value| {
            if let Some(c) = job.pointer_mut(worker) {
                c["image"] = json!("tenant/miner:1");
                c["command"] = json!(["/mine"]);
                c["resources"]["limits"]["nvidia.com/gpu"] = json!(gpus);
            }
        }
    };
    let tenant = Some(("tenant", &[][..]));
    let (status, body) = update_as(ctx, &stored, tenant, hijack(8)).await?;
    ensure!(
        status == 403,
        "the tenant's image on the 8-GPU worker: {status} {body}"
    );
    let text = message(&body);
    for part in [
        format!("queue \"{MPI_QUEUE}\""),
        "=8 exceeds maximum 4".to_string(),
        format!("exemption \"{MPI_PLATFORM}\" admitted this workload"),
    ] {
        ensure!(text.contains(&part), "{text:?} lacks {part:?}");
    }
    ensure!(!text.contains("already so"), "grandfathered: {text}");
    // Within the cap, the exemption's mark on the pod templates (which the operator's pods
    // would inherit) is hers to remove.
    let (status, body) = update_as(ctx, &stored, tenant, hijack(4)).await?;
    ensure!(
        status == 403,
        "the tenant's 4-GPU worker, still marked: {status} {body}"
    );
    ensure!(message(&body).contains(MARK), "{}", message(&body));
    // Kueue admits the run: unsuspended, its flavor's node selector written.
    let (status, body) = update_as(ctx, &stored, Some((KUEUE, &[])), |job| {
        job["spec"]["runPolicy"]["suspend"] = json!(false);
        job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] =
            json!({"cloud.example.com/gpu": "a100"});
    })
    .await?;
    ensure!(status == 200, "Kueue's admission UPDATE: {status} {body}");
    // The platform group, whom the exemption names, makes the tenant's change itself.
    let (status, body) = update_as(ctx, &body, Some(("ops", &[EXEMPT_GROUP])), hijack(8)).await?;
    ensure!(
        status == 200,
        "the platform team's own UPDATE: {status} {body}"
    );
    ensure!(
        body["metadata"]["annotations"][MARK] == MPI_PLATFORM,
        "the exemption's mark was removed: {}",
        body["metadata"]
    );
    Ok(())
}

fn ray_container(name: &str, gpus: i64) -> Value {
    json!({"name": name, "image": "rayproject/ray:2.46.0",
           "resources": {"limits": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": gpus}}})
}

/// The Ray autoscaler (the head pod's service account) scales the RayCluster KubeRay made for
/// a RayJob from 1 to 2 workers and back, within `maxReplicas` 4: admitted. More GPUs per
/// worker is not what it was admitted with: refused.
pub async fn the_ray_autoscaler_scales_within_what_was_admitted(ctx: &Ctx) -> Result<()> {
    with_own!(
        ctx,
        "autoscaler",
        the_ray_autoscaler_scales_within_what_was_admitted_in
    )
}

async fn the_ray_autoscaler_scales_within_what_was_admitted_in(ctx: &Ctx) -> Result<()> {
    let autoscaler = format!("system:serviceaccount:{}:default", ctx.ns);
    grant(
        ctx,
        "kuberay",
        json!([{"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["create"]},
               {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]),
        service_account(KUBERAY),
        (KUBERAY, &[]),
    )
    .await?;
    grant(
        ctx,
        "autoscaler",
        json!([{"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["get", "update"]},
               {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]),
        json!({"kind": "ServiceAccount", "name": "default", "namespace": ctx.ns}),
        (&autoscaler, &[]),
    )
    .await?;
    let labels = launch_labels();
    let cluster_spec = json!({"enableInTreeAutoscaling": true,
        "headGroupSpec": {"rayStartParams": {},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [ray_container("ray-head", 0)]}}},
        "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "minReplicas": 1, "maxReplicas": 4,
            "rayStartParams": {},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [ray_container("ray-worker", 1)]}}}]});
    let rayjob = json!({"apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": "train", "labels": labels},
        "spec": {"entrypoint": "python train.py", "shutdownAfterJobFinishes": true,
            "activeDeadlineSeconds": 3600, "rayClusterSpec": cluster_spec}});
    let job = ctx.create(&rayjob, false).await?;
    let mut cluster_labels = job["metadata"]["labels"].clone();
    cluster_labels["ray.io/originated-from-cr-name"] = json!("train");
    cluster_labels["ray.io/originated-from-crd"] = json!("RayJob");
    let cluster = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "train-raycluster-x7k2p", "labels": cluster_labels,
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "train",
                "uid": job["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]},
        "spec": job["spec"]["rayClusterSpec"]});
    let (status, stored, _) = ctx.create_raw_as(&cluster, false, Some(KUBERAY)).await?;
    ensure!(status == 201, "KubeRay's RayCluster: {status} {stored}");
    let as_autoscaler = Some((autoscaler.as_str(), &[][..]));
    for replicas in [2, 1] {
        let (status, body) = update_as(ctx, &stored, as_autoscaler, |c| {
            c["spec"]["workerGroupSpecs"][0]["replicas"] = json!(replicas);
        })
        .await?;
        ensure!(
            status == 200,
            "the autoscaler's resize to {replicas}: {status} {body}"
        );
    }
    let (status, body) = update_as(ctx, &stored, as_autoscaler, |c| {
        c["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
            ["nvidia.com/gpu"] = json!(4);
    })
    .await?;
    ensure!(status == 403, "4 GPUs a worker: {status} {body}");
    Ok(())
}

/// A TrainJob admitted at 1 GPU × 10 h in a 16 GPU-hour queue, whose (tenant-owned,
/// namespaced) TrainingRuntime then grows: the JobSet Trainer makes from it (4 × 4 GPUs) is
/// denied by the run's GPU-hour ceiling; the JobSet as admitted is not.
pub async fn a_grown_runtimes_jobset_is_held_to_the_runs_ceiling(ctx: &Ctx) -> Result<()> {
    with_own!(
        ctx,
        "grown-runtime",
        a_grown_runtimes_jobset_is_held_to_the_runs_ceiling_in
    )
}

async fn a_grown_runtimes_jobset_is_held_to_the_runs_ceiling_in(ctx: &Ctx) -> Result<()> {
    grant(
        ctx,
        "trainer",
        json!([{"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["create"]},
               {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]),
        service_account(TRAINER),
        (TRAINER, &[]),
    )
    .await?;
    let tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "tuned", "labels": launch_labels()},
        "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                "name": "mine"},
                 "activeDeadlineSeconds": 36000,
                 "trainer": {"image": "acme/train:1", "numNodes": 1,
                             "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}}});
    let stored = ctx.create(&tj, false).await?;
    let jobset = |nodes: i64, gpus: i64| {
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "tuned",
                "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "name": "tuned", "uid": stored["metadata"]["uid"],
                    "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {
                "spec": {"parallelism": nodes, "completions": nodes, "template": {
                    "metadata": {"labels": launch_labels()},
                    "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "node",
                        "image": "acme/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}}]}})
    };
    // As admitted, once launchgate's cache has the TrainJob.
    ctx.wait_for(
        "Trainer's 1 × 1 JobSet to be admitted",
        Duration::from_secs(30),
        || async {
            let (status, _, _) = ctx
                .create_raw_as(&jobset(1, 1), true, Some(TRAINER))
                .await?;
            Ok(status == 201)
        },
    )
    .await?;
    let (status, body, _) = ctx
        .create_raw_as(&jobset(4, 4), true, Some(TRAINER))
        .await?;
    ensure!(
        status == 403,
        "the grown runtime's 16-GPU JobSet: {status} {body}"
    );
    for part in [
        format!("queue \"{CAPPED_QUEUE}\""),
        "16 GPUs at once".to_string(),
        "= 160.00 GPU-hours exceeds the queue's maximum 16".to_string(),
    ] {
        ensure!(
            message(&body).contains(&part),
            "{:?} lacks {part:?}",
            message(&body)
        );
    }
    Ok(())
}

/// With only the native policies (`policyMode: native`, nothing writes launchgate's exemption
/// mark), the compiled policies refuse a mark they cannot prove: on a new launch Job, and on an
/// UPDATE that labels a Job created outside launchgate's scope into a queue.
pub async fn native_policies_refuse_a_mark_they_cannot_prove(ctx: &Ctx) -> Result<()> {
    use crate::native::{create_in, install_native, namespace};
    let policy =
        launchgate::Policy::from_yaml(&capped_config()?).map_err(|e| anyhow::anyhow!("{e}"))?;
    let compiled = launchgate::native::compile(&policy, &Default::default());
    let tag = format!("marks-{}", &ctx.ns[ctx.ns.len() - 4..]);
    let ns = namespace(ctx, "native-marks", &tag).await?;
    // Only the capped queue's objects: the API server recompiles every policy on each change,
    // and the other tests' policies should not wait for a whole set of this one's.
    let capped: Vec<Value> = compiled
        .objects
        .iter()
        .filter(|o| {
            o["metadata"]["annotations"][launchgate::native::QUEUE_KEY_ANNOTATION] == CAPPED_QUEUE
        })
        .cloned()
        .collect();
    ensure!(!capped.is_empty(), "no native objects for {CAPPED_QUEUE}");
    let installed = install_native(&ctx.client, &capped, &tag).await?;
    let result = async {
        let mut fits = outside_job("fits", 1, 1);
        fits["spec"]["activeDeadlineSeconds"] = json!(3600);
        fits["metadata"]["labels"] = launch_labels();
        let labelled = |v: &Value| v.pointer("/metadata/labels/launchgate.io~1queue").is_some();
        let mut forged = fits.clone();
        forged["metadata"]["annotations"] = json!({MARK: "capped-platform"});
        // The API server loads a new policy a moment after it is created: once the mutation
        // acts, a forged mark must be refused (within the wait, or the test fails).
        ctx.wait_for(
            "the native policies to take effect and refuse a forged mark",
            Duration::from_secs(120),
            || async {
                let made = create_in(&ctx.client, &ns.ns, &fits, true).await?;
                let refused = create_in(&ctx.client, &ns.ns, &forged, true).await?;
                Ok(made.is_ok_and(|j| labelled(&j))
                    && matches!(&refused, Err(s) if s.code == 403 && s.message.contains(MARK)))
            },
        )
        .await?;
        let mut outside = outside_job("outside", 1, 1);
        outside["spec"]["activeDeadlineSeconds"] = json!(3600);
        outside["metadata"]["annotations"] = json!({MARK: "capped-platform"});
        let stored = create_in(&ctx.client, &ns.ns, &outside, false)
            .await?
            .map_err(|s| anyhow::anyhow!("creating the unlabelled Job: {s:?}"))?;
        let api: kube::Api<kube::api::DynamicObject> =
            kube::Api::namespaced_with(ctx.client.clone(), &ns.ns, &crate::ctx::resource_for(&stored)?);
        let mut answer = Err(anyhow::anyhow!("not sent"));
        for _ in 0..10 {
            let mut relabelled = serde_json::to_value(api.get("outside").await?)?;
            relabelled["metadata"]["labels"] = launch_labels();
            answer = api
                .replace(
                    "outside",
                    &kube::api::PostParams::default(),
                    &serde_json::from_value(relabelled)?,
                )
                .await
                .map_err(anyhow::Error::from);
            let conflict = matches!(&answer, Err(e) if matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 409));
            if !conflict {
                break;
            }
        }
        let refused = matches!(&answer, Err(e) if matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 403 && s.message.contains(MARK)));
        ensure!(
            refused,
            "relabelled into the queue with a forged mark: {answer:?}"
        );
        Ok(())
    }
    .await;
    for (resource, name) in installed {
        let api: kube::Api<kube::api::DynamicObject> =
            kube::Api::all_with(ctx.client.clone(), &resource);
        let _ = api.delete(&name, &Default::default()).await;
    }
    ns.cleanup().await;
    result
}
