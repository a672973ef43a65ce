//! Nothing a tenant writes into an object takes it out of policy: exemptions go by who sends
//! the request, as the API server authenticated it.

use crate::checks::ensure_denied;
use crate::ctx::{Ctx, manifest, rbac_probe_job};
use crate::webhook::DEADLINE_QUEUE;
use anyhow::{Result, ensure};
use serde_json::{Value, json};

/// The group the suite config exempts on the default queue in namespaces `exempt-group-*`
/// (the docs' example: a platform team exempt in its own namespaces).
pub const EXEMPT_GROUP: &str = "platform-admins";

/// The W&B agent's service account as the default config's image-build exemption names it.
const AGENT: &str = "system:serviceaccount:wandb:wandb-launch-serviceaccount-e2e";

/// The recorded 8-GPU launch Job (over the queue's 4), labelled like an image build.
fn labelled_job(name: &str) -> Value {
    let mut job = manifest("wandb-job.yaml");
    job["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("generateName");
    job["metadata"]["name"] = json!(name);
    job["metadata"]["labels"]["wandb"] = json!("launch");
    job["spec"]["template"]["metadata"]["labels"]["wandb"] = json!("launch");
    job
}

/// [`labelled_job`] shaped like the agent's image build: its one container the kaniko executor
/// with the executor's own entrypoint.
fn image_build(name: &str) -> Value {
    let mut job = labelled_job(name);
    let container = &mut job["spec"]["template"]["spec"]["containers"][0];
    container["image"] = json!("gcr.io/kaniko-project/executor:v1.8.0");
    container["args"] = json!([
        "--context=s3://bucket/ctx.tgz",
        "--destination=registry/img:tag"
    ]);
    for key in ["command", "env"] {
        container.as_object_mut().unwrap().remove(key);
    }
    job["spec"]["template"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("initContainers");
    job
}

/// Lets the agent's service account create workloads in the test's namespace.
async fn grant_agent(ctx: &Ctx) -> Result<()> {
    ctx.grant(
        "wandb-agent",
        json!([{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]),
        json!([{"kind": "ServiceAccount", "name": "wandb-launch-serviceaccount-e2e", "namespace": "wandb"}]),
        &rbac_probe_job(),
        &[(AGENT, &[])],
    )
    .await
}

/// The image-build label on an over-limit Job: denied when a user sends it (with the reason the
/// exemption did not apply), admitted untouched only when the agent's service account sends
/// a kaniko build, and the agent's training run (labelled or not) is judged like anyone's.
pub async fn a_label_exempts_only_with_its_requester(ctx: &Ctx) -> Result<()> {
    let job = labelled_job("disguised");
    let (status, body, _) = ctx.create_raw(&job, false).await?;
    ensure!(
        status == 403,
        "a user's labelled 8-GPU Job: status {status}: {body}"
    );
    let message = body["message"].as_str().unwrap_or_default();
    for part in [
        "maximum 4",
        "exemption \"wandb-image-builds\" does not apply",
        "a label alone exempts nothing",
    ] {
        ensure!(message.contains(part), "message {message:?} lacks {part:?}");
    }
    ensure!(
        ctx.get(&job, "disguised").await?.is_none(),
        "the denied Job was stored"
    );

    grant_agent(ctx).await?;
    let (status, body, _) = ctx
        .create_raw_as(&labelled_job("agent-run"), true, Some(AGENT))
        .await?;
    ensure!(
        status == 403,
        "the agent's training run labelled like an image build: status {status}: {body}"
    );
    let (status, body, warnings) = ctx
        .create_raw_as(&image_build("image-build"), false, Some(AGENT))
        .await?;
    ensure!(
        status == 201,
        "the agent's image build: status {status}: {body}"
    );
    ensure!(
        body.pointer("/metadata/annotations/launchgate.io~1mutations")
            .is_none(),
        "the exempt image build was mutated: {body}"
    );
    ensure!(warnings.is_empty(), "warnings {warnings:?}");

    let mut unlabelled = labelled_job("agent-over-limit");
    unlabelled["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("wandb");
    unlabelled["spec"]["template"]["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("wandb");
    let (status, body, _) = ctx.create_raw_as(&unlabelled, true, Some(AGENT)).await?;
    ensure!(
        status == 403,
        "the agent's over-limit Job without the label: status {status}: {body}"
    );
    Ok(())
}

/// A bare Pod that names an existing (suspended, decoy) Job as its controller, with the Job's
/// labels copied, is judged on every rule of its queue: only the Job controller's pods are
/// judged as the Job's.
pub async fn a_claimed_owner_is_not_trusted(ctx: &Ctx) -> Result<()> {
    let mut job = manifest("job-demo.yaml");
    job["metadata"]["name"] = json!("decoy");
    job["metadata"]["labels"]["queue"] = json!(DEADLINE_QUEUE);
    job["spec"]["activeDeadlineSeconds"] = json!(3600);
    job["spec"]["suspend"] = json!(true);
    let job = ctx.create(&job, false).await?;
    let uid = job["metadata"]["uid"].as_str().unwrap_or_default();
    let mut pod = ctx.launch_pod("claims-decoy");
    pod["metadata"]["labels"]["queue"] = json!(DEADLINE_QUEUE);
    for key in ["batch.kubernetes.io/controller-uid", "controller-uid"] {
        pod["metadata"]["labels"][key] = json!(uid);
    }
    pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = json!("decoy");
    pod["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "batch/v1", "kind": "Job", "name": "decoy", "uid": uid,
        "controller": true, "blockOwnerDeletion": true,
    }]);
    let (status, body, _) = ctx.create_raw(&pod, false).await?;
    ensure!(
        status == 403,
        "a bare pod claiming a Job owner skipped the deadline rule: status {status}: {body}"
    );
    let message = body["message"].as_str().unwrap_or_default();
    for part in [
        "activeDeadlineSeconds",
        "names Job \"decoy\" as its controller",
    ] {
        ensure!(message.contains(part), "message {message:?} lacks {part:?}");
    }
    Ok(())
}

/// The docs' exemption example on the real control plane: a group exempt in a namespace creates
/// an over-limit Job there; the kube-controller-manager's Job controller creates its pods, and
/// they are admitted (they inherit the Job's exemption: no FailedCreate). Someone else's same
/// Job is denied, and a tenant can neither copy the exemption's mark into their own Job nor
/// claim the exempt Job from a bare pod.
pub async fn exempt_group_jobs_pods_inherit_the_exemption(ctx: &Ctx) -> Result<()> {
    ensure!(
        ctx.ns.starts_with("exempt-group-"),
        "the suite config exempts {EXEMPT_GROUP} in exempt-group-*, not in {}",
        ctx.ns
    );
    // The platform team and a tenant may create Jobs and Pods here.
    ctx.grant(
        "workloads",
        json!([{"apiGroups": ["batch", ""], "resources": ["jobs", "pods"], "verbs": ["create"]}]),
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": EXEMPT_GROUP},
               {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "tenant"}]),
        &rbac_probe_job(),
        &[("ops", &[EXEMPT_GROUP]), ("tenant", &[])],
    )
    .await?;

    let mut job = manifest("wandb-job.yaml");
    job["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("generateName");
    job["metadata"]["name"] = json!("smoke");
    job["spec"]["parallelism"] = json!(2);
    job["spec"]["completions"] = json!(2);

    // Someone outside the group: denied (8 GPUs, the queue allows 4).
    let (status, body, _) = ctx
        .create_raw_impersonating(&job, true, Some("tenant"), &[])
        .await?;
    ensure!(
        status == 403,
        "the tenant's 8-GPU Job: status {status}: {body}"
    );
    // The tenant writing launchgate's mark into their Job: removed, and judged.
    let mut forged = job.clone();
    forged["metadata"]["name"] = json!("forged");
    for at in ["metadata", "spec.template.metadata"] {
        let meta = at.split('.').fold(&mut forged, |v, k| &mut v[k]);
        meta["annotations"] = json!({"launchgate.io/exempted-by": "platform-smoke-tests"});
    }
    let (status, body, _) = ctx
        .create_raw_impersonating(&forged, false, Some("tenant"), &[])
        .await?;
    ensure_denied(
        status,
        &body,
        "maximum 4",
        "the tenant's Job carrying the exemption's mark",
    )?;

    // The exempt group's Job: admitted, and the Job controller's pods with it.
    let (status, body, _) = ctx
        .create_raw_impersonating(&job, false, Some("ops"), &[EXEMPT_GROUP])
        .await?;
    ensure!(
        status == 201,
        "the exempt group's Job: status {status}: {body}"
    );
    let uid = body["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let pods = ctx
        .wait_for_pods("batch.kubernetes.io/job-name=smoke", 2)
        .await?;
    for pod in &pods {
        ensure!(
            pod.pointer("/metadata/annotations/launchgate.io~1exempted-by")
                == Some(&json!("platform-smoke-tests")),
            "a pod of the exempt Job without the exemption's mark: {pod}"
        );
    }
    let events = ctx.events_text().await;
    ensure!(
        !events.contains("FailedCreate"),
        "the Job controller could not create the exempt Job's pods: {events}"
    );

    // A tenant's bare pod that claims the exempt Job, its labels and its mark: judged.
    let mut bare = pods[0].clone();
    let meta = bare["metadata"].as_object_mut().unwrap();
    for key in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "name",
    ] {
        meta.remove(key);
    }
    meta.insert("generateName".into(), json!("claims-smoke-"));
    bare["spec"].as_object_mut().unwrap().remove("nodeName");
    bare.as_object_mut().unwrap().remove("status");
    ensure!(
        bare.pointer("/metadata/labels/batch.kubernetes.io~1controller-uid") == Some(&json!(uid)),
        "the copied pod lost its owner's labels: {bare}"
    );
    let (status, body, _) = ctx
        .create_raw_impersonating(&bare, true, Some("tenant"), &[])
        .await?;
    ensure!(
        status == 403,
        "a tenant's bare pod claiming the exempt Job: status {status}: {body}"
    );
    Ok(())
}
