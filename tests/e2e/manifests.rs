//! The install without Helm, run as the pages write it. docs/manifests.md: the namespace, a CA
//! and serving certificate, the TLS Secret; `launchgate.yaml` applied with its caBundle, both
//! ways the page shows (`sed` while applying, and applied as is then patched); the page's
//! server-side dry run of `job-demo.yaml`, judged through both webhooks; the certificate
//! rotated — both CAs trusted, the Secret replaced, then the new CA alone — without a request
//! failing. docs/uninstall.md's uninstall without Helm then leaves nothing of the install: no
//! webhook configuration, no ClusterRole or ClusterRoleBinding, no namespace.
//!
//! The blocks are read from the pages and run with `sh -e` by install_path's shell (its
//! markers, exit codes and substitutions). What cannot run here literally, and what stands in
//! for it (the smallest substitution each):
//! - There is no kubelet, so the Deployment never runs a pod: the test starts the built binary
//!   as the pod would, with the Deployment's flags, the ConfigMap's config and the Secret's
//!   certificate and key in files (written again when the Secret changes, as the kubelet syncs
//!   a Secret volume; launchgate reloads them).
//! - There are no pods behind the Service for the API server to reach: the
//!   `manifests/launchgate.yaml` the pages apply is the repository's with each webhook's
//!   `clientConfig.service` replaced by the pod's URL on 127.0.0.1, and its namespace selectors
//!   narrowed to the tenants' namespace (so no other test's namespace is judged); the page's
//!   `launchgate certs` also names 127.0.0.1 (`--dns 127.0.0.1`), the address the API server
//!   now dials.
//! - `kubectl rollout status` needs pods: the line is left out.
//! - The tenants' namespace is `job-demo.yaml`'s, created first and kept from the suite's own
//!   launchgate.

use crate::ctx::Ctx;
use crate::default_install::deployment_flags;
use crate::install_path::{Shell, installed, kept_from_the_suite};
use crate::webhook::Launchgate;
use anyhow::{Context, Result, ensure};
use base64::Engine;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

const MANIFESTS: &str = "docs/manifests.md";
const UNINSTALL: &str = "docs/uninstall.md";
/// The marker of the blocks this test runs.
const MARKER: &str = "<!-- docs-test: covered by e2e::manifests::the_plain_manifests_install_judges_rotates_and_uninstalls -->";
/// The manifests' release name and namespace.
const RELEASE: &str = "launchgate";
/// The namespace of `job-demo.yaml`, the page's run.
const TENANT: &str = "wandb";
/// The page's server-side dry run.
pub(crate) const DRY_RUN: &str =
    "kubectl apply --dry-run=server -o yaml -f tests/fixtures/manifests/job-demo.yaml";

/// launchgate where the Deployment's pod would run it.
struct Pod {
    server: Option<Launchgate>,
    port: u16,
    dir: tempfile::TempDir,
}

impl Pod {
    /// Starts the server as the Deployment's pod: its flags, the ConfigMap's config, the
    /// Secret's certificate in the files its volume holds.
    async fn start(&mut self, ctx: &Ctx, ca: &str) -> Result<()> {
        let (deployment, config) = installed(ctx).await?;
        self.sync_secret(ctx).await?;
        let mut flags = deployment_flags(&[deployment], TENANT)?;
        let tls = self.dir.path().join("tls");
        flags.push(format!("--tls-cert={}", tls.join("tls.crt").display()));
        flags.push(format!("--tls-key={}", tls.join("tls.key").display()));
        // What the start-up check trusts (the page's CA).
        let certs = self.dir.path().join("launchgate-certs");
        std::fs::create_dir_all(&certs)?;
        std::fs::write(certs.join("ca.crt"), ca)?;
        self.server = Some(
            Launchgate::start_on(
                self.dir.path(),
                Some(&ctx.env.kubeconfig),
                "127.0.0.1",
                self.port,
                &config,
                &flags,
            )
            .await?,
        );
        Ok(())
    }

    /// Writes the Secret's certificate and key where the pod's volume puts them.
    async fn sync_secret(&self, ctx: &Ctx) -> Result<()> {
        let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), RELEASE);
        let data = secrets
            .get(&format!("{RELEASE}-tls"))
            .await?
            .data
            .context("the TLS Secret has no data")?;
        let tls = self.dir.path().join("tls");
        std::fs::create_dir_all(&tls)?;
        for key in ["tls.key", "tls.crt"] {
            let value = data
                .get(key)
                .with_context(|| format!("the Secret has no {key}"))?;
            std::fs::write(tls.join(key), &value.0)?;
        }
        Ok(())
    }

    /// Waits until the pod serves a certificate `ca` (PEM) verifies, as a reader waits for
    /// every pod to serve the new certificate.
    async fn serves(&self, ctx: &Ctx, ca: &str) -> Result<()> {
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes())?)
            .tls_built_in_root_certs(false)
            .timeout(Duration::from_secs(2))
            .build()?;
        let url = format!("https://127.0.0.1:{}/healthz", self.port);
        ctx.wait_for(
            "the pod to serve the new certificate",
            Duration::from_secs(30),
            || async { Ok(client.get(&url).send().await?.status().is_success()) },
        )
        .await
    }

    fn stop(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.stop();
        }
    }
}

/// `manifests/launchgate.yaml` with each webhook calling `https://127.0.0.1:<port><path>` in
/// place of the Service, and selecting the namespace `tenant` alone.
fn routed(text: &str, port: u16, tenant: &str) -> Result<String> {
    let mut out = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let mut object = Value::deserialize(document)?;
        if object.is_null() {
            continue;
        }
        let kind = object["kind"].as_str().unwrap_or_default();
        if kind.ends_with("WebhookConfiguration") {
            for webhook in object["webhooks"]
                .as_array_mut()
                .context("a webhook configuration without webhooks")?
            {
                let path = webhook["clientConfig"]["service"]["path"]
                    .as_str()
                    .context("a webhook that calls no Service path")?
                    .to_string();
                let ca = webhook["clientConfig"]["caBundle"].clone();
                webhook["clientConfig"] =
                    json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca});
                webhook["namespaceSelector"]["matchExpressions"]
                    .as_array_mut()
                    .context("a webhook without namespace matchExpressions")?
                    .push(
                        json!({"key": "kubernetes.io/metadata.name", "operator": "In",
                                 "values": [tenant]}),
                    );
            }
        }
        out.push(serde_yaml::to_string(&object)?);
    }
    Ok(out.join("---\n"))
}

/// Waits until none of the namespaces `names` exists: one an earlier test deleted terminates
/// first (its objects deleted), and a namespace being deleted takes nothing new.
pub(crate) async fn gone(ctx: &Ctx, names: &[&str]) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    ctx.wait_for(
        &format!("the namespaces {names:?} to be gone"),
        Duration::from_secs(180),
        || async {
            for name in names {
                if namespaces.get_opt(name).await?.is_some() {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
    .await
}

fn admission_api(ctx: &Ctx, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        &format!("{}s", kind.to_lowercase()),
    );
    Api::all_with(ctx.client.clone(), &resource)
}

/// The caBundle of every webhook of the release's two configurations.
async fn ca_bundles(ctx: &Ctx) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let object = serde_json::to_value(admission_api(ctx, kind).get(RELEASE).await?)?;
        for webhook in object["webhooks"].as_array().into_iter().flatten() {
            out.push(
                webhook["clientConfig"]["caBundle"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
    Ok(out)
}

/// Every webhook of both configurations trusts exactly the PEM files `cas`, concatenated.
async fn trusts(ctx: &Ctx, shell: &Shell, cas: &[&str]) -> Result<()> {
    let mut pem = String::new();
    for ca in cas {
        pem.push_str(&shell.file(ca)?);
    }
    let want = base64::engine::general_purpose::STANDARD.encode(pem);
    let bundles = ca_bundles(ctx).await?;
    ensure!(
        bundles.len() >= 3 && bundles.iter().all(|b| *b == want),
        "the webhooks do not all trust {cas:?}: {} webhooks, {} of them do",
        bundles.len(),
        bundles.iter().filter(|b| **b == want).count()
    );
    Ok(())
}

/// The page's dry run, run until it prints `job-demo.yaml` mutated (the mutating webhook fails
/// open, so a launchgate the API server cannot reach shows as a run left as written); every
/// try must succeed (the validating webhook fails closed).
pub(crate) async fn judged(shell: &Shell, what: &str) -> Result<()> {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = shell.spawn(DRY_RUN)?.wait_with_output()?;
        let printed = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success(),
            "{what}: the dry run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if printed.contains("launchgate.io/mutations")
            && printed.contains("allowPrivilegeEscalation: false")
        {
            return Ok(());
        }
        ensure!(
            std::time::Instant::now() < until,
            "{what}: the dry run is not mutated after 30 s:\n{printed}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The install without Helm end to end (see the module's comment).
pub async fn the_plain_manifests_install_judges_rotates_and_uninstalls(ctx: &Ctx) -> Result<()> {
    let root = crate::common::root();
    let mut pod = Pod {
        server: None,
        port: crate::cluster::free_port()?,
        dir: tempfile::tempdir()?,
    };
    let mut shell = Shell::new(
        &ctx.env.kubeconfig,
        MARKER,
        TENANT,
        crate::cluster::free_port()?,
    )?;
    shell.substitutions.push((
        "--dns launchgate.launchgate.svc".into(),
        "--dns launchgate.launchgate.svc --dns 127.0.0.1".into(),
    ));
    let dir = shell.dir.path().to_path_buf();
    std::fs::create_dir(dir.join("manifests"))?;
    std::fs::copy(
        root.join("manifests/namespace.yaml"),
        dir.join("manifests/namespace.yaml"),
    )?;
    std::fs::write(
        dir.join("manifests/launchgate.yaml"),
        routed(
            &std::fs::read_to_string(root.join("manifests/launchgate.yaml"))?,
            pod.port,
            TENANT,
        )?,
    )?;
    std::os::unix::fs::symlink(root.join("tests"), dir.join("tests"))?;

    let result = match gone(ctx, &[RELEASE, TENANT]).await {
        Ok(()) => steps(ctx, &mut shell, &mut pod).await,
        Err(e) => Err(e),
    };
    pod.stop();
    let result = result.map_err(|e| {
        anyhow::anyhow!(
            "{e:#}\nthe pod's launchgate log ends:\n{}",
            crate::cluster::tail(&pod.dir.path().join("launchgate.log"), 60)
        )
    });
    if result.is_err()
        && let Ok(child) = shell.spawn(&format!(
            "kubectl delete --ignore-not-found validatingwebhookconfiguration,mutatingwebhookconfiguration {RELEASE}; \
             kubectl delete --ignore-not-found clusterroles,clusterrolebindings -l app.kubernetes.io/instance={RELEASE}"
        ))
    {
        let _ = child.wait_with_output();
    }
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    for ns in [RELEASE, TENANT] {
        let _ = namespaces.delete(ns, &Default::default()).await;
    }
    // Gone before the next test that names them runs.
    result.and(gone(ctx, &[RELEASE, TENANT]).await)
}

/// The pages' blocks in the order a reader runs them, each step's effect asserted.
async fn steps(ctx: &Ctx, shell: &mut Shell, pod: &mut Pod) -> Result<()> {
    // The tenants' namespace, kept from the suite's own launchgate.
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": TENANT}}))?;
    namespaces
        .create(&PostParams::default(), &namespace)
        .await?;
    kept_from_the_suite(ctx, TENANT).await?;

    // 2. The namespace, the certificates, the Secret.
    shell.run(MANIFESTS, "kubectl apply -f manifests/namespace.yaml", 0)?;
    let ca = shell.file("certs/ca.crt")?;
    // 3. The caBundle, while applying; then applied as is and patched, with the `CA_BUNDLE`
    // the reader's shell holds from the block before.
    shell.run(MANIFESTS, "CA_BUNDLE=$(base64 -w0 < certs/ca.crt)", 0)?;
    trusts(ctx, shell, &["certs/ca.crt"]).await?;
    shell.envs.push((
        "CA_BUNDLE".into(),
        base64::engine::general_purpose::STANDARD.encode(&ca),
    ));
    shell.run(MANIFESTS, "kubectl apply -f manifests/launchgate.yaml", 0)?;
    trusts(ctx, shell, &["certs/ca.crt"]).await?;
    shell.envs.clear();

    // 4. The pod, then the page's check: the dry run judged through both webhooks (the
    // validating one fails closed, so the dry run succeeding means it answered).
    pod.start(ctx, &ca).await?;
    let checked = shell.run(MANIFESTS, "kubectl -n launchgate rollout status", 0)?;
    ensure!(
        checked.stdout.contains("launchgate.io/mutations")
            && checked.stdout.contains("allowPrivilegeEscalation: false"),
        "the page's dry run is not mutated:\n{}",
        checked.all()
    );

    // The rotation: both CAs trusted and the Secret replaced, which the kubelet syncs into the
    // pod; then the new CA alone. The run is judged at every step.
    shell.run(
        MANIFESTS,
        "launchgate certs --dns launchgate.launchgate.svc --out certs-new/",
        0,
    )?;
    trusts(ctx, shell, &["certs/ca.crt", "certs-new/ca.crt"]).await?;
    judged(shell, "the run judged with both CAs trusted").await?;
    pod.sync_secret(ctx).await?;
    ensure!(
        std::fs::read_to_string(pod.dir.path().join("tls/tls.crt"))?
            == shell.file("certs-new/tls.crt")?,
        "the Secret does not hold the new certificate"
    );
    pod.serves(ctx, &shell.file("certs-new/ca.crt")?).await?;
    judged(
        shell,
        "the run judged once the pod serves the new certificate",
    )
    .await?;
    shell.run(MANIFESTS, "CA_BUNDLE=$(base64 -w0 < certs-new/ca.crt)", 0)?;
    trusts(ctx, shell, &["certs-new/ca.crt"]).await?;
    judged(shell, "the run judged with the new CA alone trusted").await?;

    // The uninstall: nothing of the install left, and the run stored as written.
    shell.run(
        UNINSTALL,
        "kubectl delete validatingwebhookconfiguration launchgate",
        0,
    )?;
    pod.stop();
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let left = admission_api(ctx, kind)
            .list(&ListParams::default().labels(&format!("launchgate.io/webhook-set={RELEASE}")))
            .await?;
        ensure!(
            left.items.is_empty(),
            "a {kind} is left after the uninstall"
        );
    }
    let cluster_rbac = shell
        .spawn(&format!(
            "kubectl get clusterroles,clusterrolebindings -l app.kubernetes.io/instance={RELEASE} -o name"
        ))?
        .wait_with_output()?;
    ensure!(
        cluster_rbac.status.success() && cluster_rbac.stdout.is_empty(),
        "cluster-scoped RBAC left after the uninstall: {}",
        String::from_utf8_lossy(&cluster_rbac.stdout)
    );
    ensure!(
        namespaces.get_opt(RELEASE).await?.is_none(),
        "the namespace {RELEASE} is left after the uninstall"
    );
    let out = shell.spawn(DRY_RUN)?.wait_with_output()?;
    ensure!(
        out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("launchgate.io/"),
        "after the uninstall the run is still judged: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    shell.ensure_all_run(&[MANIFESTS, UNINSTALL])
}
