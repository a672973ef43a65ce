//! docs/local-cluster.md run as the page writes it: launchgate served from the developer's
//! machine, its webhooks registered by URL with its development CA — first by the page's
//! `kubectl apply`, then by `serve --register-webhooks` — a launch run judged through them
//! each time, and the page's removal leaving nothing.
//!
//! The blocks are read from the page and run with `sh -e` by install_path's shell (its
//! markers, exit codes and substitutions). What cannot run here literally, and what stands in
//! for it (the smallest substitution each):
//! - The API server runs on this machine and dials loopback only: the page's
//!   `host.docker.internal:8443` is `127.0.0.1:<a free port>`, and `serve` listens there
//!   (`--listen`) rather than on every interface.
//! - `cargo run --release --` is this build's `launchgate`, the same program (a release build
//!   here would take minutes); the blocks that serve until stopped run in the background
//!   (`exec`) and are stopped as the reader stops them, before the next way or the removal.
//! - `/tmp` is the test's scratch directory (`TMPDIR` of every block, where `serve` writes its
//!   development CA).
//! - The run is `job-demo.yaml`, in its namespace, created first and kept from the suite's own
//!   launchgate; the page's webhooks select every namespace, so the test runs alone.

use crate::ctx::Ctx;
use crate::install_path::{Shell, kept_from_the_suite};
use crate::manifests::judged;
use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const PAGE: &str = "docs/local-cluster.md";
/// The marker of the blocks this test runs.
const MARKER: &str = "<!-- docs-test: covered by e2e::local_cluster::the_local_cluster_page_registers_and_judges -->";
/// The name the page registers under.
const NAME: &str = "launchgate-dev";
/// The namespace of `job-demo.yaml`.
const TENANT: &str = "wandb";

/// A block that serves until stopped, running in the background.
struct Serving(std::process::Child);

impl Serving {
    fn start(shell: &mut Shell, first: &str) -> Result<Serving> {
        let script = format!("exec {}", shell.script(PAGE, first)?);
        Ok(Serving(shell.spawn(&script)?))
    }

    /// What it printed, once stopped.
    fn stop(mut self) -> String {
        let _ = self.0.kill();
        let mut printed = String::new();
        if let Ok(out) = self.0.wait_with_output() {
            printed.push_str(&String::from_utf8_lossy(&out.stdout));
            printed.push_str(&String::from_utf8_lossy(&out.stderr));
        }
        printed
    }
}

/// Waits until launchgate answers `/healthz` on `port` with the development CA in `dir`.
async fn answering(serving: &mut Serving, dir: &Path, port: u16) -> Result<()> {
    let ca = dir.join("launchgate-dev-certs/ca.crt");
    let until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = serving.0.try_wait()? {
            anyhow::bail!("launchgate exited {status}");
        }
        if let Ok(pem) = std::fs::read(&ca) {
            let client = reqwest::Client::builder()
                .add_root_certificate(reqwest::Certificate::from_pem(&pem)?)
                .tls_built_in_root_certs(false)
                .timeout(Duration::from_secs(2))
                .build()?;
            let url = format!("https://127.0.0.1:{port}/healthz");
            if client
                .get(url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(());
            }
        }
        ensure!(
            std::time::Instant::now() < until,
            "launchgate does not answer on 127.0.0.1:{port} after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether a webhook configuration named [`NAME`] of `kind` exists.
async fn registered(ctx: &Ctx, kind: &str) -> Result<bool> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        &format!("{}s", kind.to_lowercase()),
    );
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
    Ok(api.get_opt(NAME).await?.is_some())
}

/// The page end to end (see the module's comment).
pub async fn the_local_cluster_page_registers_and_judges(ctx: &Ctx) -> Result<()> {
    let port = crate::cluster::free_port()?;
    let mut shell = Shell::new(
        &ctx.env.kubeconfig,
        MARKER,
        TENANT,
        crate::cluster::free_port()?,
    )?;
    let scratch = shell.dir.path().join("tmp");
    std::fs::create_dir(&scratch)?;
    std::os::unix::fs::symlink(
        crate::common::root().join("tests"),
        shell.dir.path().join("tests"),
    )?;
    shell.substitutions.extend([
        (
            "cargo run --release -- serve".to_string(),
            format!("launchgate serve --listen 127.0.0.1:{port}"),
        ),
        (
            "host.docker.internal:8443".into(),
            format!("127.0.0.1:{port}"),
        ),
        ("/tmp/".into(), "$TMPDIR/".into()),
    ]);
    shell
        .envs
        .push(("TMPDIR".into(), scratch.display().to_string()));
    let mut serving = None;
    let result = match crate::manifests::gone(ctx, &[TENANT]).await {
        Ok(()) => steps(ctx, &mut shell, &scratch, port, &mut serving).await,
        Err(e) => Err(e),
    };
    let printed = serving.map(Serving::stop).unwrap_or_default();
    if let Ok(child) = shell.spawn(&format!(
        "kubectl delete --ignore-not-found mutatingwebhookconfiguration,validatingwebhookconfiguration {NAME}"
    )) {
        let _ = child.wait_with_output();
    }
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let _ = namespaces.delete(TENANT, &Default::default()).await;
    result
        .with_context(|| format!("launchgate printed:\n{}", tail(&printed, 40)))
        .and(crate::manifests::gone(ctx, &[TENANT]).await)
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

async fn steps(
    ctx: &Ctx,
    shell: &mut Shell,
    scratch: &Path,
    port: u16,
    serving: &mut Option<Serving>,
) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": TENANT}}))?;
    namespaces
        .create(&PostParams::default(), &namespace)
        .await?;
    kept_from_the_suite(ctx, TENANT).await?;

    // Served in one terminal, registered from another.
    let started = serving.insert(Serving::start(
        shell,
        "cargo run --release -- serve --dev-cert-names host.docker.internal,192.168.49.1",
    )?);
    answering(started, scratch, port).await?;
    shell.run(
        PAGE,
        "CA=$(base64 -w0 < /tmp/launchgate-dev-certs/ca.crt)",
        0,
    )?;
    judged(
        shell,
        "the run judged through the webhooks the page applied",
    )
    .await?;

    // Stopped; the webhooks fail open; removed.
    if let Some(stopped) = serving.take() {
        stopped.stop();
    }
    let out = shell.spawn(crate::manifests::DRY_RUN)?.wait_with_output()?;
    ensure!(
        out.status.success(),
        "with launchgate stopped the run is refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    shell.run(
        PAGE,
        "kubectl delete mutatingwebhookconfiguration,validatingwebhookconfiguration launchgate-dev",
        0,
    )?;

    // The other way: launchgate registers both itself once ready.
    let started = serving.insert(Serving::start(
        shell,
        "cargo run --release -- serve --dev-cert-names host.docker.internal \\",
    )?);
    answering(started, scratch, port).await?;
    ctx.wait_for(
        "launchgate to register both webhook configurations",
        Duration::from_secs(60),
        || async {
            Ok(registered(ctx, "MutatingWebhookConfiguration").await?
                && registered(ctx, "ValidatingWebhookConfiguration").await?)
        },
    )
    .await?;
    judged(
        shell,
        "the run judged through the webhooks launchgate registered",
    )
    .await?;
    if let Some(stopped) = serving.take() {
        stopped.stop();
    }
    shell.run(
        PAGE,
        "kubectl delete mutatingwebhookconfiguration,validatingwebhookconfiguration launchgate-dev",
        0,
    )?;
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        ensure!(
            !registered(ctx, kind).await?,
            "a {kind} {NAME} is left after the removal"
        );
    }
    shell.ensure_all_run(&[PAGE])
}
