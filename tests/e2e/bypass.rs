//! The runbook's emergency bypass (docs/operations.md, "Emergency bypass"), run as the page
//! writes it — the commands are read from the page — with kubectl, as the cluster's admin,
//! against `serve` running with the chart's rights in `policyMode: hybrid` with
//! `webhook.registration: server`: the webhooks it registers and the native policies it keeps
//! both leave the admission path and stay out while it runs, through many re-registration
//! periods and a config change, and come back with the way back. The chart README
//! (charts/launchgate/README.md, the site's docs/chart.md) shows the same two blocks, which
//! tests/docs_site.rs holds equal to the runbook's.

use crate::ctx::{Ctx, manifest};
use crate::native::{containers_mut, create_in};
use crate::native_rbac::{config, install, kubeconfig_as, owners, render_chart, uninstall};
use crate::webhook::Launchgate;
use anyhow::{Context, Result, bail, ensure};
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the server applies its webhook configurations again (`--webhook-resync-seconds`;
/// 60 by default): a third of it, so the bypass is seen to hold through many periods.
const RESYNC_SECONDS: u64 = 20;

/// How long the bypass must hold with the server running: two minutes at least, and at least
/// two periods of the default resync (60 s) as well as of this test's.
const HOLD: Duration = Duration::from_secs(125);

/// Runs one of the runbook's blocks (`on` or `off`) with `sh -e` as the suite's admin: its
/// first line (`ns=… release=…`, the reader's names) replaced by this test's.
fn run_documented(which: &str, ns: &str, release: &str, kubeconfig: &Path) -> Result<String> {
    let block = crate::common::emergency_bypass_block(&crate::common::runbook(), which);
    let (names, commands) = block.split_first().context("an empty block")?;
    ensure!(
        names.starts_with("ns=launchgate"),
        "the block's first line names the namespace and release: {names}"
    );
    let script = commands.join("\n");
    let out = std::process::Command::new("sh")
        .args(["-ec", &script])
        .env("ns", ns)
        .env("release", release)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .context("sh (and kubectl on PATH)")?;
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success(),
        "the runbook's `{which}` block failed: {printed}"
    );
    Ok(printed)
}

/// A launch Job of the queue asking 8 GPUs a container (the queue allows 4).
fn over_the_limit() -> Value {
    let mut job = manifest("job-demo.yaml");
    job["metadata"]["name"] = json!("over-the-limit");
    job["metadata"]["labels"]["launchgate.io/queue"] = json!("gpu-queue");
    for c in containers_mut(&mut job) {
        c["resources"]["limits"]["nvidia.com/gpu"] = json!("8");
    }
    job
}

/// Whether the API server refuses the over-the-limit Job (a dry run in `ns`) by its GPU limit;
/// any other refusal is an error.
async fn refused(ctx: &Ctx, ns: &str) -> Result<bool> {
    Ok(
        match create_in(&ctx.client, ns, &over_the_limit(), true).await? {
            Ok(_) => false,
            Err(e) => {
                ensure!(
                    e.code == 403 && e.message.contains("exceeds maximum 4"),
                    "unexpected refusal: {} {}",
                    e.code,
                    e.message
                );
                true
            }
        },
    )
}

/// The webhooks of the configuration `kind` named `name` (`None`: there is none).
async fn webhooks(ctx: &Ctx, kind: &str, name: &str) -> Result<Option<Vec<String>>> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        &format!("{}s", kind.to_lowercase()),
    );
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
    Ok(api.get_opt(name).await?.map(|c| {
        c.data["webhooks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| h["name"].as_str().map(str::to_string))
            .collect()
    }))
}

/// The value of the metric line `name` on the server's `/metrics`.
async fn metric(server: &Launchgate, name: &str) -> Result<Option<String>> {
    let (_, text) = server.get("/metrics").await?;
    let prefix = format!("{name} ");
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::to_string))
}

/// The runbook's bypass, on the real API server, against a running server in `policyMode:
/// hybrid` with `webhook.registration: server` and the chart's rights (rendered by Helm, the
/// server impersonating the pods' service account): before it, an over-the-limit Job is
/// refused; after the documented commands, with the server still running, it is admitted for
/// over two minutes — more than six of the server's re-registration periods and two of the
/// default's — while the webhook configurations stay gone, every slot stays dormant, a config
/// change is not synced, and the server says so (`/readyz`, `launchgate_emergency_bypass`);
/// after the documented way back it is refused again, and the webhooks are registered again.
pub async fn the_documented_bypass_holds_while_launchgate_runs(ctx: &Ctx) -> Result<()> {
    let id = &ctx.ns[ctx.ns.len() - 4..];
    let release = format!("launchgate-{id}");
    let user = format!("system:serviceaccount:{}:{release}", ctx.ns);
    let objects = render_chart(
        &release,
        &ctx.ns,
        &json!({"policyMode": "hybrid", "nativePolicySlots": 1, "clusterLookups": true,
                "events": {"enabled": true}}),
    )?;
    ensure!(
        objects.iter().any(|o| o["kind"] == "ClusterRole"
            && o["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["resources"] == json!(["namespaces"])
                    && r["resourceNames"] == json!([ctx.ns])
                    && r["verbs"] == json!(["get"]))),
        "the chart grants the pods no read of their namespace"
    );
    let created = install(ctx, &objects).await;
    // The tenants' namespace, which the webhooks and the native bindings select; `ctx.ns` is
    // the release's.
    let tenant = Ctx::new(ctx.env.clone(), "bypass-tenant", false).await?;
    let only_tenant = json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
        "operator": "In", "values": [tenant.ns]}]});
    let dir = tempfile::tempdir()?;
    let mut server: Option<Launchgate> = None;
    let result = async {
        created.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
        let kubeconfig = kubeconfig_as(ctx, &user, dir.path())?;
        // Not ready until its slot holds the config: the chart's ClusterRoleBindings may take
        // a moment, and the server retries every reload interval meanwhile; among the other
        // tests' creates that takes longer than a start-up wait, so readiness is awaited below
        // (no webhook is registered before it).
        server = Some(
            Launchgate::start_serving(
                dir.path(),
                Some(&kubeconfig),
                "127.0.0.1",
                &config(&["gpu-queue"])?,
                &[
                    format!("--native-policies={release}"),
                    "--native-policy-slots=1".into(),
                    format!("--native-namespace-selector={only_tenant}"),
                    format!("--register-webhooks={release}"),
                    format!("--webhook-namespace-selector={only_tenant}"),
                    "--webhook-validate-failure-policy=Ignore".into(),
                    format!("--webhook-resync-seconds={RESYNC_SECONDS}"),
                    format!("--pod-namespace={}", ctx.ns),
                    format!("--pod-name={release}-7d9c-x"),
                ],
            )
            .await?,
        );
        let server_dir = dir.path();
        let running = server.as_mut().context("the server")?;

        // In force: the webhooks registered, the native policy held, the Job refused.
        ctx.wait_for(
            "the server to be ready, its webhooks registered and the Job refused",
            Duration::from_secs(180),
            || async {
                let hooks = webhooks(ctx, "ValidatingWebhookConfiguration", &release).await?;
                Ok(hooks.is_some_and(|h| !h.is_empty()) && refused(ctx, &tenant.ns).await?)
            },
        )
        .await?;
        let (held, _) = owners(ctx, &release, 1).await?;
        ensure!(
            held.values().all(|o| o.as_deref() == Some("gpu-queue")),
            "the slot does not hold the queue: {held:?}"
        );
        ensure!(metric(running, "launchgate_emergency_bypass").await? == Some("0".into()));

        // The bypass, as the runbook writes it.
        let printed = run_documented("on", &ctx.ns, &release, &ctx.env.kubeconfig)?;
        let since = Instant::now();
        ctx.wait_for(
            "the over-the-limit Job to be admitted",
            Duration::from_secs(60),
            || async { Ok(!refused(ctx, &tenant.ns).await?) },
        )
        .await
        .with_context(|| format!("after the bypass printed:\n{printed}"))?;
        ctx.wait_for(
            "the server to make every slot object dormant",
            Duration::from_secs(30),
            || async {
                let (held, _) = owners(ctx, &release, 1).await?;
                Ok(held.values().all(Option::is_none))
            },
        )
        .await?;
        // A config change while bypassed: read, not synced.
        let config_path = server_dir.join("launchgate-config.yaml");
        let mut changed = std::fs::read_to_string(&config_path)?;
        changed.push_str("\n# changed while bypassed\n");
        std::fs::write(&config_path, changed)?;
        let mut checks = 0;
        while since.elapsed() < HOLD {
            running
                .check_running()
                .context("launchgate stopped while bypassed")?;
            if refused(ctx, &tenant.ns).await? {
                bail!(
                    "the over-the-limit Job was refused {:?} after the bypass",
                    since.elapsed()
                );
            }
            for kind in [
                "ValidatingWebhookConfiguration",
                "MutatingWebhookConfiguration",
            ] {
                if let Some(hooks) = webhooks(ctx, kind, &release).await?
                    && !hooks.is_empty()
                {
                    bail!(
                        "{kind} {release} holds {hooks:?} again {:?} after the bypass",
                        since.elapsed()
                    );
                }
            }
            let (held, _) = owners(ctx, &release, 1).await?;
            ensure!(
                held.values().all(Option::is_none),
                "a slot object is not dormant {:?} after the bypass: {held:?}",
                since.elapsed()
            );
            checks += 1;
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        let held_for = since.elapsed();
        ensure!(
            held_for >= HOLD && held_for.as_secs() >= 2 * RESYNC_SECONDS.max(60),
            "held only {held_for:?}"
        );
        let (status, body) = running.get("/readyz").await?;
        ensure!(
            status == 200 && body.contains("emergency bypass on"),
            "/readyz while bypassed: {status} {body}"
        );
        ensure!(
            metric(running, "launchgate_emergency_bypass").await? == Some("1".into()),
            "launchgate_emergency_bypass is not 1 while bypassed"
        );
        println!(
            "e2e: the bypass held {held_for:?} ({checks} checks, {} re-registration periods of {RESYNC_SECONDS} s) with launchgate running",
            held_for.as_secs() / RESYNC_SECONDS
        );

        // The way back, as the runbook writes it.
        run_documented("off", &ctx.ns, &release, &ctx.env.kubeconfig)?;
        ctx.wait_for(
            "the over-the-limit Job to be refused again",
            Duration::from_secs(120),
            || async { refused(ctx, &tenant.ns).await },
        )
        .await?;
        ctx.wait_for(
            "the webhooks to be registered again",
            Duration::from_secs(60),
            || async {
                let hooks = webhooks(ctx, "ValidatingWebhookConfiguration", &release).await?;
                Ok(hooks.is_some_and(|h| !h.is_empty()))
            },
        )
        .await?;
        // The config changed while bypassed is the one the slot holds now.
        let hash = launchgate::policy::config_hash(&std::fs::read(&config_path)?);
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy"),
            "validatingadmissionpolicies",
        );
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
        let slot = serde_json::to_value(api.get(&format!("{release}-q0-limits")).await?)?;
        ensure!(
            slot["metadata"]["annotations"]["launchgate.io/config-hash"] == json!(hash),
            "the slot holds {} after the way back, not the config read while bypassed ({hash})",
            slot["metadata"]["annotations"]["launchgate.io/config-hash"]
        );
        ensure!(metric(running, "launchgate_emergency_bypass").await? == Some("0".into()));
        let (status, body) = running.get("/readyz").await?;
        ensure!(status == 200 && body == "ready", "/readyz after: {status} {body}");
        Ok(())
    }
    .await;
    // The cause with what the server logged (the harness prints the error alone).
    let result = result.map_err(|e| {
        anyhow::anyhow!(
            "{e:#}\nlaunchgate's log ends:\n{}",
            crate::cluster::tail(&dir.path().join("launchgate.log"), 60)
        )
    });
    if let Some(mut server) = server {
        server.stop();
    }
    let _ = std::process::Command::new(env!("CARGO_BIN_EXE_launchgate"))
        .args([
            "delete-webhooks",
            "--mutating",
            &release,
            "--validating",
            &release,
        ])
        .arg(format!("--native-policies={release}"))
        .env("KUBECONFIG", &ctx.env.kubeconfig)
        .output();
    if let Ok(created) = &created {
        uninstall(ctx, created).await;
    }
    tenant.cleanup().await;
    result
}
