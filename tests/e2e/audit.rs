//! `launchgate audit` on a real API server: what a new config would break among the workloads
//! already running, as a table and as PolicyReports or OpenReports Reports.

use crate::ctx::{Ctx, manifest};
use anyhow::{Context, Result, ensure};
use launchgate::Policy;
use launchgate::audit::scan::{AuditOptions, run};
use launchgate::audit::{AuditResult, ReportFormat};
use serde_json::{Value, json};

/// A launch Job of the built-in queue asking for `gpus` GPUs.
pub fn gpu_job(name: &str, gpus: u32) -> Value {
    let mut job = manifest("wandb-job.yaml");
    let meta = job["metadata"].as_object_mut().unwrap();
    meta.remove("generateName");
    meta.insert("name".into(), json!(name));
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
        json!(gpus.to_string());
    job
}

/// The built-in policy with its `gpus` variable lowered from 4 to 2: the config an audit
/// checks before it is rolled out.
pub fn stricter_config() -> Result<String> {
    let stricter = launchgate::policy::DEFAULT_CONFIG_YAML.replace(
        "gpus: {type: integer, minimum: 0, maximum: 4, default: 1}",
        "gpus: {type: integer, minimum: 0, maximum: 2, default: 1}",
    );
    ensure!(
        stricter != launchgate::policy::DEFAULT_CONFIG_YAML,
        "the built-in config's gpus variable changed shape"
    );
    Ok(stricter)
}

/// Jobs admitted under today's policy (at most 4 GPUs) are judged against a stricter one (at
/// most 2): the 3-GPU Job fails, the 1-GPU Job passes, their controller-made pods are not
/// reported again, and the PolicyReport written for the namespace says the same.
pub async fn audit_reports_what_a_new_config_would_break(ctx: &Ctx) -> Result<()> {
    let small = ctx.create(&gpu_job("small", 1), false).await?;
    let large = ctx.create(&gpu_job("large", 3), false).await?;
    ctx.wait_for_pods("batch.kubernetes.io/job-name=large", 1)
        .await?;

    let stricter = stricter_config()?;
    let policy = Policy::from_yaml(&stricter).map_err(|e| anyhow::anyhow!("{e}"))?;
    let opts = AuditOptions {
        namespace: Some(ctx.ns.clone()),
        page_size: 1,
        write_policy_reports: true,
        ..AuditOptions::default()
    };
    let report = run(ctx.client.clone(), &policy, &opts).await?;

    let entry = |name: &str| {
        report
            .entries
            .iter()
            .find(|e| e.name == name && e.kind == "Job")
            .with_context(|| format!("no entry for Job {name}: {:?}", report.entries))
    };
    let large_entry = entry("large")?;
    ensure!(
        large_entry.result == AuditResult::Fail
            && large_entry.message.contains("exceeds maximum 2")
            && large_entry.queue.as_deref() == Some("gpu-queue"),
        "large: {large_entry:?}"
    );
    ensure!(
        entry("small")?.result == AuditResult::Pass,
        "small: {:?}",
        entry("small")
    );
    ensure!(
        !report.entries.iter().any(|e| e.kind == "Pod"),
        "controller-made pods were reported: {:?}",
        report.entries
    );

    // `audit --native`: the native policies enforce the GPU variable too, so the verdicts hold.
    let native = launchgate::native::as_native(&policy).map_err(|e| anyhow::anyhow!("{e}"))?;
    let native_opts = AuditOptions {
        write_policy_reports: false,
        ..opts.clone()
    };
    let by_native = run(ctx.client.clone(), &native, &native_opts).await?;
    let verdicts = |r: &launchgate::audit::AuditReport| {
        let mut v: Vec<(String, AuditResult)> = r
            .entries
            .iter()
            .filter(|e| e.kind == "Job")
            .map(|e| (e.name.clone(), e.result))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    ensure!(
        verdicts(&by_native) == verdicts(&report),
        "native {:?} vs webhook {:?}",
        verdicts(&by_native),
        verdicts(&report)
    );

    // The PolicyReport, read back from the API server.
    let reports =
        ctx.api_for(&json!({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport"}))?;
    let written = serde_json::to_value(reports.get("launchgate").await?)?;
    ensure!(
        written["summary"]["fail"] == 1 && written["summary"]["pass"].as_u64() >= Some(1),
        "summary {}",
        written["summary"]
    );
    let failed: Vec<&Value> = written["results"]
        .as_array()
        .context("results")?
        .iter()
        .filter(|r| r["result"] == "fail")
        .collect();
    ensure!(failed.len() == 1, "failed results: {failed:?}");
    ensure!(
        failed[0]["policy"] == "gpu-queue"
            && failed[0]["resources"][0]["uid"] == large["metadata"]["uid"],
        "failed result {}",
        failed[0]
    );
    let small_uid = &small["metadata"]["uid"];
    ensure!(
        written["results"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["result"] == "pass" && &r["resources"][0]["uid"] == small_uid),
        "no pass result for the 1-GPU Job"
    );
    Ok(())
}

/// `audit` judges as the webhook does: a server-side-applied `backoffLimit: 6` is the user's
/// (kept at admission, so a strict template is broken), and a pod whose owner reference is not
/// its controller is judged on its own.
pub async fn audit_judges_as_the_webhook_does(ctx: &Ctx) -> Result<()> {
    let mut applied = gpu_job("applied", 1);
    applied["spec"]["backoffLimit"] = json!(6);
    let stored = ctx.apply(&applied, "argocd").await?;
    ensure!(
        stored["spec"]["backoffLimit"] == 6,
        "the applied backoffLimit was not kept: {}",
        stored["spec"]
    );
    let mut pod = ctx.launch_pod("linked");
    pod["spec"]["containers"][0]["resources"] = json!({"limits": {"nvidia.com/gpu": "3"}});
    pod["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "batch/v1", "kind": "Job", "name": "applied",
        "uid": stored["metadata"]["uid"], "controller": false,
    }]);
    ctx.create(&pod, false)
        .await
        .context("a 3-GPU pod within today's limit of 4")?;

    let stricter = launchgate::policy::DEFAULT_CONFIG_YAML
        .replace("strict: false", "strict: true")
        .replace(
            "gpus: {type: integer, minimum: 0, maximum: 4, default: 1}",
            "gpus: {type: integer, minimum: 0, maximum: 2, default: 1}",
        );
    let policy = Policy::from_yaml(&stricter).map_err(|e| anyhow::anyhow!("{e}"))?;
    let opts = AuditOptions {
        namespace: Some(ctx.ns.clone()),
        ..AuditOptions::default()
    };
    let report = run(ctx.client.clone(), &policy, &opts).await?;
    let entry = |kind: &str, name: &str| {
        report
            .entries
            .iter()
            .find(|e| e.name == name && e.kind == kind)
            .with_context(|| format!("no entry for {kind} {name}: {:?}", report.entries))
    };
    let job = entry("Job", "applied")?;
    ensure!(
        job.result == AuditResult::Fail && job.message.contains("backoffLimit"),
        "the applied Job: {job:?}"
    );
    let linked = entry("Pod", "linked")?;
    ensure!(
        linked.result == AuditResult::Fail && linked.message.contains("exceeds maximum 2"),
        "the pod with a non-controller owner: {linked:?}"
    );
    Ok(())
}

/// With `--report-format openreports` the audit writes an `openreports.io/v1alpha1` Report that
/// the upstream CRD keeps whole, and empties it once the namespace's launch workloads are gone.
pub async fn audit_writes_openreports_and_clears_them(ctx: &Ctx) -> Result<()> {
    let large = ctx.create(&gpu_job("large", 3), false).await?;
    let stricter = launchgate::policy::DEFAULT_CONFIG_YAML.replace(
        "gpus: {type: integer, minimum: 0, maximum: 4, default: 1}",
        "gpus: {type: integer, minimum: 0, maximum: 2, default: 1}",
    );
    let policy = Policy::from_yaml(&stricter).map_err(|e| anyhow::anyhow!("{e}"))?;
    let opts = AuditOptions {
        namespace: Some(ctx.ns.clone()),
        write_policy_reports: true,
        report_format: ReportFormat::OpenReports,
        ..AuditOptions::default()
    };
    let report = run(ctx.client.clone(), &policy, &opts).await?;
    ensure!(
        report.policy_reports == [format!("{}/launchgate", ctx.ns)],
        "written: {:?}, notes: {:?}",
        report.policy_reports,
        report.notes
    );
    let reports =
        ctx.api_for(&json!({"apiVersion": "openreports.io/v1alpha1", "kind": "Report"}))?;
    let written = serde_json::to_value(reports.get("launchgate").await?)?;
    ensure!(
        written["source"] == "launchgate" && written["summary"]["fail"] == 1,
        "report {written}"
    );
    let result = &written["results"][0];
    ensure!(
        result["result"] == "fail"
            && result["policy"] == "gpu-queue"
            && result["resources"][0]["uid"] == large["metadata"]["uid"]
            && result["timestamp"]["seconds"]
                .as_i64()
                .is_some_and(|s| s > 0),
        "result {result}"
    );
    // The Job goes (its pods with it): the next audit empties the namespace's Report.
    let jobs = ctx.api_for(&large)?;
    jobs.delete("large", &kube::api::DeleteParams::background())
        .await?;
    ctx.wait_for(
        "the Job to be gone",
        std::time::Duration::from_secs(30),
        || async { Ok(ctx.get(&large, "large").await?.is_none()) },
    )
    .await?;
    run(ctx.client.clone(), &policy, &opts).await?;
    let cleared = serde_json::to_value(reports.get("launchgate").await?)?;
    ensure!(
        cleared["summary"]["fail"] == 0
            && cleared["results"].as_array().is_none_or(|r| r.is_empty()),
        "stale report {cleared}"
    );
    Ok(())
}
