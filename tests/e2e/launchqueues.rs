//! LaunchQueues on the real control plane: the CRD applied from the chart's `crds/`, a
//! launchgate serving with `--launchqueues`, and a queue created, changed wrongly and deleted
//! as a platform team would with `kubectl apply` and `kubectl delete` (what docs/launchqueues.md
//! shows: its example LaunchQueue and Jobs are the ones applied here).

use crate::ctx::Ctx;
use anyhow::{Context, Result, bail, ensure};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The queue the test creates (cluster-scoped: one name for the whole control plane).
const QUEUE: &str = "lq-small";

/// The LaunchQueue CRD's name.
const CRD: &str = "launchqueues.launchgate.io";

fn example(name: &str) -> Result<Value> {
    let path = crate::common::root()
        .join("examples/launchqueues")
        .join(name);
    Ok(serde_yaml::from_str(&std::fs::read_to_string(&path)?)?)
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Creates the LaunchQueue CRD from the chart's `crds/` (as `helm install` does) unless it
/// exists, and waits until it is served.
async fn install_crd(ctx: &Ctx) -> Result<()> {
    let path = crate::common::root().join("charts/launchgate/crds/launchqueues.launchgate.io.yaml");
    let crd: Value = serde_yaml::from_str(&std::fs::read_to_string(&path)?)?;
    let api: Api<DynamicObject> = Api::all_with(
        ctx.client.clone(),
        &resource(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    match api
        .create(&PostParams::default(), &serde_json::from_value(crd)?)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => {
            return Err(e).context("creating the LaunchQueue CRD from charts/launchgate/crds/");
        }
    }
    ctx.wait_for(
        "the LaunchQueue CRD to be established",
        Duration::from_secs(30),
        || {
            let api = api.clone();
            async move {
                let crd = api.get(CRD).await?;
                let crd = serde_json::to_value(crd)?;
                Ok(crd["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Established" && c["status"] == "True"))
            }
        },
    )
    .await
}

/// Dry-runs the example Job of `gpus` GPUs in `ns`: `Ok(None)` admitted, `Ok(Some(message))`
/// denied, with the warnings kubectl would print.
async fn job(ns: &Ctx, gpus: u8) -> Result<(Option<String>, Vec<String>)> {
    let job = example(&format!("job-{gpus}gpu.yaml"))?;
    let (status, body, warnings) = ns.create_raw(&job, true).await?;
    Ok(match status {
        201 => (None, warnings),
        403 => (
            Some(body["message"].as_str().unwrap_or_default().to_string()),
            warnings,
        ),
        other => bail!("the {gpus}-GPU Job: {other} {body}"),
    })
}

/// A LaunchQueue allowing 1 GPU per container, applied while `serve --launchqueues` runs: within
/// 10 s a Job of its queue asking for 2 is denied naming the queue, one asking for 1 admitted;
/// its status says Ready at its generation; an invalid change is refused at apply with its key
/// path and the old limit stays; deleted, its Jobs fall back as an unknown queue's do.
pub async fn a_launchqueue_is_enforced_within_seconds_and_says_so(ctx: &Ctx) -> Result<()> {
    install_crd(ctx).await?;
    let own = crate::updates::Own::start_with_args(
        ctx,
        "lq",
        &crate::updates::capped_config()?,
        &[
            "--launchqueues=true".to_string(),
            format!("--pod-namespace={}", ctx.ns),
            "--pod-name=launchgate-lq-e2e".to_string(),
        ],
    )
    .await?;
    let result = enforced_and_reported(ctx, &own.ns).await;
    let queues: Api<DynamicObject> = Api::all_with(
        ctx.client.clone(),
        &resource("launchgate.io", "v1alpha1", "LaunchQueue", "launchqueues"),
    );
    let _ = queues.delete(QUEUE, &DeleteParams::default()).await;
    own.finish(ctx).await;
    // The CRD goes too: the install tests install it from the chart as Helm does, owning it.
    let removed = remove_crd(ctx).await;
    result.and(removed)
}

/// Deletes the LaunchQueue CRD and waits until it is gone.
async fn remove_crd(ctx: &Ctx) -> Result<()> {
    let api: Api<DynamicObject> = Api::all_with(
        ctx.client.clone(),
        &resource(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    let _ = api.delete(CRD, &DeleteParams::default()).await;
    ctx.wait_for(
        "the LaunchQueue CRD to be gone",
        Duration::from_secs(60),
        || {
            let api = api.clone();
            async move { Ok(api.get_opt(CRD).await?.is_none()) }
        },
    )
    .await
}

async fn enforced_and_reported(ctx: &Ctx, ns: &Ctx) -> Result<()> {
    let queues: Api<DynamicObject> = Api::all_with(
        ctx.client.clone(),
        &resource("launchgate.io", "v1alpha1", "LaunchQueue", "launchqueues"),
    );
    let _ = queues.delete(QUEUE, &DeleteParams::default()).await;
    // Before: the queue is unknown.
    let (denied, warnings) = job(ns, 2).await?;
    ensure!(
        denied.as_deref().is_none_or(|m| !m.contains(QUEUE)),
        "lq-small before its LaunchQueue: {denied:?}"
    );
    ensure!(
        warnings
            .iter()
            .any(|w| w.contains("not configured") || w.contains("names no configured queue")),
        "an unknown queue's warning: {warnings:?}"
    );

    // (1) Applied: enforced within 10 s.
    let lq = example("lq-small.yaml")?;
    let applied = Instant::now();
    queues
        .patch(
            QUEUE,
            &PatchParams::apply("platform-team").force(),
            &Patch::Apply(&lq),
        )
        .await
        .context("applying the LaunchQueue")?;
    let message = loop {
        if let (Some(message), _) = job(ns, 2).await?
            && message.contains(&format!("queue \"{QUEUE}\""))
        {
            break message;
        }
        ensure!(
            applied.elapsed() < Duration::from_secs(10),
            "the LaunchQueue was not enforced within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!(
        "e2e: LaunchQueue {QUEUE} enforced {} ms after it was applied",
        applied.elapsed().as_millis()
    );
    ensure!(message.contains("exceeds maximum 1"), "{message}");
    let (denied, _) = job(ns, 1).await?;
    ensure!(denied.is_none(), "the 1-GPU Job: {denied:?}");

    // (2) Its status: Ready at the current generation, with its caps.
    let ready = |stored: &Value| {
        let generation = &stored["metadata"]["generation"];
        stored["status"]["observedGeneration"] == *generation
            && stored["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["type"] == "Ready"
                        && c["status"] == "True"
                        && c["observedGeneration"] == *generation
                })
    };
    let since = Instant::now();
    let stored = loop {
        let stored = serde_json::to_value(queues.get(QUEUE).await?)?;
        if ready(&stored) {
            break stored;
        }
        ensure!(
            since.elapsed() < Duration::from_secs(10),
            "the LaunchQueue's status does not say Ready: {stored}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    ensure!(
        stored["status"]["perPod"] == "nvidia.com/gpu≤1",
        "perPod {}",
        stored["status"]["perPod"]
    );

    // (3) An invalid change is refused at apply, naming its key path; the old limit stays.
    let mut lots = lq.clone();
    lots["spec"]["limits"]["fields"][0]["maximum"] = json!("lots");
    match queues
        .patch(
            QUEUE,
            &PatchParams::apply("platform-team").force(),
            &Patch::Apply(&lots),
        )
        .await
    {
        Err(kube::Error::Api(e)) => ensure!(
            e.message.contains("spec.limits.fields") && e.message.contains("lots"),
            "the refusal: {}",
            e.message
        ),
        Ok(_) => bail!("a maximum of `lots` was stored"),
        Err(e) => return Err(e.into()),
    }
    let (denied, _) = job(ns, 2).await?;
    ensure!(
        denied.is_some_and(|m| m.contains("exceeds maximum 1")),
        "the old limit after a refused change"
    );

    // (4) Deleted: its Jobs fall back as an unknown queue's do.
    queues.delete(QUEUE, &DeleteParams::default()).await?;
    let deleted = Instant::now();
    loop {
        let (denied, warnings) = job(ns, 2).await?;
        if denied.as_deref().is_none_or(|m| !m.contains(QUEUE))
            && warnings
                .iter()
                .any(|w| w.contains("not configured") || w.contains("names no configured queue"))
        {
            break;
        }
        ensure!(
            deleted.elapsed() < Duration::from_secs(10),
            "still judged by the deleted LaunchQueue: {denied:?} {warnings:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
