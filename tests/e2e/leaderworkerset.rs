//! LeaderWorkerSet v1 (`leaderworkerset.x-k8s.io/v1`) on the real control plane with the
//! upstream LWS CRD. No LWS controller runs here: the LeaderWorkerSet is judged as its user
//! submits it, and what its controller would make — the StatefulSets, as the LWS controller's
//! service account, and their pods, as the StatefulSet controller — is sent under those
//! identities, as those controllers would send it.

use crate::checks::{ensure_nothing_pruned, ensure_stored_launch, hardened};
use crate::ctx::Ctx;
use crate::trust::EXEMPT_GROUP;
use anyhow::{Context, Result, ensure};
use launchgate::Policy;
use serde_json::{Value, json};

/// A queue whose template is a LeaderWorkerSet: groups of a leader and workers of up to 4
/// GPUs each, at most 8 GPUs in all, handed off to the Kueue LocalQueue `team-a`. Served by
/// the [`crate::updates::Own`] launchgate ([`crate::updates::capped_config`]).
pub const LWS_QUEUE: &str = "lws-queue";

/// The exemption of the platform group in [`LWS_QUEUE`].
const LWS_PLATFORM: &str = "lws-platform";

/// The LWS controller's identity (its upstream install).
const LWS_CONTROLLER: &str = "system:serviceaccount:lws-system:lws-controller-manager";

/// The StatefulSet controller's identity (kube-controller-manager with
/// `--use-service-account-credentials`).
const STATEFULSET_CONTROLLER: &str = "system:serviceaccount:kube-system:statefulset-controller";

/// [`LWS_QUEUE`]'s config: `base` (the built-in queue) with its limits, Kueue hand-off and the
/// platform group's exemption.
pub fn lws_queue(base: &Value) -> Value {
    let mut queue = lws_limits(base);
    queue["exemptions"] = json!([{"name": LWS_PLATFORM, "groups": [EXEMPT_GROUP]}]);
    queue
}

fn lws_limits(base: &Value) -> Value {
    crate::updates::kind_queue(
        base,
        "apiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\nspec:\n  replicas: '{{groups}}'\n  leaderWorkerTemplate:\n    size: '{{size}}'\n    leaderTemplate:\n      spec:\n        containers:\n          - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}\n    workerTemplate:\n      spec:\n        containers:\n          - resources: {limits: {nvidia.com/gpu: '{{gpus}}'}}\n",
        json!({
            "groups": {"type": "integer", "minimum": 1, "maximum": 4},
            "size": {"type": "integer", "minimum": 1, "maximum": 8},
            "gpus": {"type": "integer", "minimum": 0, "maximum": 4},
        }),
    )
}

/// A launch LeaderWorkerSet in `queue` serving a model: `groups` groups of `size` pods (a
/// leader and `size − 1` workers), each of `gpus` GPUs.
pub(crate) fn lws(name: &str, queue: &str, groups: i64, size: i64, gpus: i64) -> Value {
    let template = |role: &str| {
        json!({"metadata": {"labels": crate::updates::queue_labels(queue)},
            "spec": {"containers": [{"name": role, "image": "vllm/vllm-openai:v0.8.5",
                "command": ["sh", "-c", "sleep infinity"],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus}}}]}})
    };
    json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": crate::updates::queue_labels(queue)},
        "spec": {
            "replicas": groups,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": template("leader"),
                "workerTemplate": template("worker")}}})
}

/// The pod templates of the stored `lws`, leader first.
fn templates(lws: &Value) -> [&Value; 2] {
    ["leaderTemplate", "workerTemplate"].map(|t| &lws["spec"]["leaderWorkerTemplate"][t])
}

/// A LeaderWorkerSet over its queue's totals (groups × (leader + (size − 1) workers)) is denied
/// naming the queue, the count and the template; one within is stored with both templates
/// hardened, labelled for Kueue, with nothing launchgate wrote pruned by the real CRD, and no
/// deadline anywhere (it runs until it is deleted).
pub async fn a_leaderworkerset_is_limited_by_its_groups_and_stored_hardened(
    ctx: &Ctx,
) -> Result<()> {
    crate::updates::with_own!(ctx, "lws", limited_and_hardened)
}

async fn limited_and_hardened(ctx: &Ctx) -> Result<()> {
    // (a) 2 groups of a leader and 3 workers, 2 GPUs each: 16 over the queue's 8.
    let (status, body, _) = ctx
        .create_raw(&lws("too-big", LWS_QUEUE, 2, 4, 2), false)
        .await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(status == 403, "a 16-GPU LeaderWorkerSet: {status} {body}");
    for part in [
        &format!("queue \"{LWS_QUEUE}\""),
        "total nvidia.com/gpu over all pods=16",
        "exceeds maximum 8",
        "(totals)",
        "spec.leaderWorkerTemplate.leaderTemplate: 2 × 2",
        "spec.leaderWorkerTemplate.workerTemplate: 6 × 2",
    ] {
        ensure!(message.contains(part), "{message:?} lacks {part:?}");
    }

    // (b) 1 group of a leader and a worker, 4 GPUs each: 8.
    let submitted = lws("serve", LWS_QUEUE, 1, 2, 4);
    let (status, created, _) = ctx.create_raw(&submitted, false).await?;
    ensure!(
        status == 201,
        "an 8-GPU LeaderWorkerSet: {status} {created}"
    );
    let stored = ctx
        .get(&submitted, "serve")
        .await?
        .context("the stored LeaderWorkerSet")?;
    let containers: Vec<&Value> = templates(&stored)
        .iter()
        .map(|t| &t["spec"]["containers"][0])
        .collect();
    ensure_stored_launch(&stored, &containers, "LeaderWorkerSet")?;
    for t in templates(&stored) {
        ensure!(
            t["spec"].get("activeDeadlineSeconds").is_none(),
            "a deadline on a template of a run that lasts until deleted: {t}"
        );
    }
    ensure!(
        !stored.to_string().contains("activeDeadlineSeconds"),
        "a deadline was written: {stored}"
    );
    // Nothing launchgate wrote was pruned: every value its patch writes is stored, and the
    // stored object needs no patch.
    let policy =
        Policy::from_yaml(&crate::updates::capped_config()?).map_err(anyhow::Error::msg)?;
    ensure_nothing_pruned(&policy, &submitted, &ctx.ns, &stored, "LeaderWorkerSet")?;

    // (c) Its StatefulSets are the LWS controller's alone: a tenant's carrying the set's name
    // is denied at the StatefulSet.
    ctx.grant(
        "lws-controller",
        json!([{"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["create"]},
               {"apiGroups": ["leaderworkerset.x-k8s.io"], "resources": ["leaderworkersets"], "verbs": ["create"]}]),
        json!([{"kind": "ServiceAccount", "name": "lws-controller-manager", "namespace": "lws-system"},
               {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": EXEMPT_GROUP}]),
        &statefulset_probe(),
        &[(LWS_CONTROLLER, &[]), ("ops", &[EXEMPT_GROUP])],
    )
    .await?;
    let workers = statefulset(&stored, "workerTemplate", "serve-0");
    let (status, body, _) = ctx.create_raw(&workers, false).await?;
    let message = body["message"].as_str().unwrap_or_default();
    ensure!(
        status == 403,
        "a tenant's StatefulSet of the set: {status} {body}"
    );
    for part in [
        "leaderworkerset.sigs.k8s.io/name = \"serve\"",
        "match.podCreators.LeaderWorkerSet",
    ] {
        ensure!(message.contains(part), "{message:?} lacks {part:?}");
    }

    // (d) The controller's StatefulSet; its pods, sent by the StatefulSet controller, are the
    // set's: judged per pod, hardened, no deadline; a tenant's same pod is not trusted.
    let (status, sts, _) = ctx
        .create_raw_as(&workers, false, Some(LWS_CONTROLLER))
        .await?;
    ensure!(
        status == 201,
        "the LWS controller's StatefulSet: {status} {sts}"
    );
    let (status, pod, _) = ctx
        .create_raw_as(&pod_of(&sts, 4), false, Some(STATEFULSET_CONTROLLER))
        .await?;
    ensure!(status == 201, "the set's worker pod: {status} {pod}");
    let c = &pod["spec"]["containers"][0];
    ensure!(hardened(c), "the set's pod is not hardened: {c}");
    ensure!(
        pod["spec"].get("activeDeadlineSeconds").is_none(),
        "a deadline on a pod of a set that runs until deleted: {}",
        pod["spec"]
    );
    let (status, body, _) = ctx
        .create_raw_as(&pod_of(&sts, 8), true, Some(STATEFULSET_CONTROLLER))
        .await?;
    ensure!(
        status == 403
            && body["message"]
                .as_str()
                .is_some_and(|m| m.contains("exceeds maximum 4")),
        "an 8-GPU pod of the set: {status} {body}"
    );
    let (_, _, warnings) = ctx.create_raw(&pod_of(&sts, 4), true).await?;
    ensure!(
        warnings.iter().any(|w| w.contains(
            "carries leaderworkerset.sigs.k8s.io/name = \"serve\", the mark of LeaderWorkerSet"
        )),
        "a tenant's pod of the set: warnings {warnings:?}"
    );

    // (e) An exempt set's pods inherit its exemption: 8-GPU pods of the platform team's set,
    // over the queue's per-container bound, are admitted.
    let (status, exempt, _) = ctx
        .create_raw_impersonating(
            &lws("platform", LWS_QUEUE, 2, 4, 8),
            false,
            Some("ops"),
            &[EXEMPT_GROUP],
        )
        .await?;
    ensure!(status == 201, "the platform team's set: {status} {exempt}");
    let (status, sts, _) = ctx
        .create_raw_as(
            &statefulset(&exempt, "workerTemplate", "platform-0"),
            false,
            Some(LWS_CONTROLLER),
        )
        .await?;
    ensure!(
        status == 201,
        "the exempt set's StatefulSet: {status} {sts}"
    );
    let (status, pod, _) = ctx
        .create_raw_as(&pod_of(&sts, 8), false, Some(STATEFULSET_CONTROLLER))
        .await?;
    ensure!(status == 201, "the exempt set's 8-GPU pod: {status} {pod}");
    ensure!(
        pod["metadata"]["annotations"]["launchgate.io/exempted-by"] == LWS_PLATFORM,
        "the exempt set's pod: {}",
        pod["metadata"]
    );
    Ok(())
}

/// The StatefulSet the LWS controller makes of the stored `lws`'s `template` (`workerTemplate`:
/// one group's workers; `leaderTemplate`: the leaders), named `name`: owned by the set, its
/// pod template the set's, labelled with the set's name.
fn statefulset(lws: &Value, template: &str, name: &str) -> Value {
    let set = lws["metadata"]["name"].as_str().unwrap_or_default();
    let mut pod_template = lws["spec"]["leaderWorkerTemplate"][template].clone();
    pod_template["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/name"] = json!(set);
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name,
            "labels": {"leaderworkerset.sigs.k8s.io/name": set},
            "ownerReferences": [{"apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet", "name": set, "uid": lws["metadata"]["uid"],
                "controller": true}]},
        "spec": {"replicas": 1, "serviceName": set,
            "selector": {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": set}},
            "template": pod_template}})
}

/// A pod of the stored StatefulSet `sts`, as the StatefulSet controller makes it (its pod
/// template's labels, annotations and spec, owned by it), its container asking for `gpus`
/// GPUs.
fn pod_of(sts: &Value, gpus: i64) -> Value {
    let name = sts["metadata"]["name"].as_str().unwrap_or_default();
    let template = &sts["spec"]["template"];
    let mut spec = template["spec"].clone();
    spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!(gpus);
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": format!("{name}-"),
            "labels": template["metadata"]["labels"],
            "annotations": template["metadata"].get("annotations").cloned().unwrap_or(json!({})),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
                "uid": sts["metadata"]["uid"], "controller": true}]},
        "spec": spec})
}

/// A StatefulSet no rule judges (no set's name in its template), for probing RBAC.
fn statefulset_probe() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "rbac-probe"},
        "spec": {"serviceName": "probe", "selector": {"matchLabels": {"app": "probe"}},
            "template": {"metadata": {"labels": {"app": "probe"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
}
