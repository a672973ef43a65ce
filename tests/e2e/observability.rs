//! What a platform team sees when launchgate denies a run: the client's message, a decision log
//! line, a Kubernetes Event on the object's namespace and a metric, all for the same request.

use crate::ctx::{Ctx, manifest};
use anyhow::{Result, bail, ensure};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use std::time::Duration;

/// `launchgate_decisions_total{queue, outcome="denied", endpoint="validate"}` from launchgate's
/// own /metrics.
async fn denied_decisions(ctx: &Ctx, queue: &str) -> Result<f64> {
    let text = ctx.launchgate_metrics().await?;
    let mut total = 0.0;
    for line in text
        .lines()
        .filter(|l| l.starts_with("launchgate_decisions_total{"))
    {
        if line.contains(&format!("queue=\"{queue}\""))
            && line.contains("outcome=\"denied\"")
            && let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok())
        {
            total += v;
        }
    }
    Ok(total)
}

/// A denied create through the real API server leaves its trail everywhere an operator looks.
pub async fn a_denial_is_logged_evented_and_counted(ctx: &Ctx) -> Result<()> {
    let before = denied_decisions(ctx, "gpu-queue").await?;
    let mut job = manifest("wandb-job.yaml");
    job["metadata"]["name"] = json!("trail");
    let message = match ctx.create(&job, false).await {
        Ok(_) => bail!("an 8-GPU Job on a 4-GPU queue was admitted"),
        Err(kube::Error::Api(status)) => status.message,
        Err(e) => bail!("unexpected error: {e}"),
    };
    ensure!(message.contains("maximum 4"), "client message: {message}");

    // The decision log: one JSON line naming the object, the user, the queue and the message.
    let line = ctx
        .poll("the decision log line", Duration::from_secs(10), || async {
            let log = std::fs::read_to_string(&ctx.env.launchgate_log)?;
            Ok(log
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|l| {
                    l["message"] == "admission decision"
                        && l["namespace"] == ctx.ns.as_str()
                        && l["name"] == "trail"
                        && l["outcome"] == "denied"
                }))
        })
        .await?;
    ensure!(
        line["user"] == "admin"
            && line["queue"] == "gpu-queue"
            && line["kind"] == "Job"
            && line["level"] == "INFO"
            && line["denial"]
                .as_str()
                .is_some_and(|d| d.contains("maximum 4")),
        "decision line: {line}"
    );

    // The Event, on the object's namespace, regarding the Job.
    let event = ctx.denied_event(None).await?;
    let regarding = event.regarding.clone().unwrap_or_default();
    ensure!(
        regarding.kind.as_deref() == Some("Job")
            && regarding.name.as_deref() == Some("trail")
            && event
                .note
                .as_deref()
                .is_some_and(|n| n.contains("maximum 4"))
            && event.reporting_controller.as_deref() == Some("launchgate"),
        "event: {event:?}"
    );

    // The metric.
    let after = denied_decisions(ctx, "gpu-queue").await?;
    ensure!(
        after >= before + 1.0,
        "denied decisions {before} -> {after}"
    );
    Ok(())
}

/// A dry run is judged but writes no Event.
pub async fn a_dry_run_denial_writes_no_event(ctx: &Ctx) -> Result<()> {
    let mut job = manifest("wandb-job.yaml");
    job["metadata"]["name"] = json!("dry-trail");
    ensure!(ctx.create(&job, true).await.is_err(), "dry run admitted");
    // Give a (wrong) Event time to arrive, then check there is none.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events: Api<Event> = ctx.api();
    let launchgate: Vec<_> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("launchgate"))
        .collect();
    ensure!(
        launchgate.is_empty(),
        "events for a dry run: {launchgate:?}"
    );
    Ok(())
}
