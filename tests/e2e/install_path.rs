//! The documented install path, run as the pages write it. docs/install.md: your first queue in
//! `warn` mode, checked, installed with Helm and its values file; the webhooks it registers; a
//! run over the limit admitted with a warning, seen in Events and in
//! `launchgate_violations_total`; the chart README's scheduled audit turned on with
//! `--reuse-values`, its PolicyReports listed; the queue switched to `deny` — checked and
//! audited first with docs/upgrade.md's "Before the upgrade" block (the running Job is listed),
//! then upgraded; the same run refused. docs/upgrade.md: an upgrade passing the values file
//! again with a new tag, and the release's history. docs/uninstall.md: `helm uninstall`, then
//! nothing of the release left. Then the chart README's own install, dry run and uninstall
//! (docs/chart.md, generated from charts/launchgate/README.md) into the namespace the first
//! uninstall left; and its install once more, with the namespace deleted first, which strands
//! the cluster-scoped objects until docs/uninstall.md's deletes by label.
//!
//! Each block the test runs carries the marker `<!-- docs-test: covered by
//! e2e::install_path::… -->` on the line before its fence, and the test fails if a marked block
//! was not run. The blocks are read from the pages and run with `sh -e`, their exit codes
//! checked (and a `console` block's output compared), with `scripts/helm` (the real Helm
//! library, helm-sdkpy, behind helm's command line) as `helm`, the built `launchgate` and
//! kubectl on `PATH`, and `KUBECONFIG` the suite's real API server: every Helm action is a real
//! install, upgrade or uninstall of the chart there.
//!
//! What cannot run here literally, and what stands in for it (the smallest substitution each):
//! - There is no kubelet, so the chart's Deployment never runs a pod: after each Helm action the
//!   test starts the built binary with what the Deployment and the ConfigMap Helm stored now say
//!   (the rendered flags and `config.yaml`, read from the cluster), as a rollout replaces the
//!   pods, registering its webhooks by URL on 127.0.0.1 (`default_install`'s plumbing). A page's
//!   `kubectl rollout status` lines are left out, and the uninstall hook's pod is run by the
//!   test as the kubelet would: its container's arguments with the built binary, as the hook's
//!   service account, then its phase set to what the command returned.
//! - `kubectl port-forward` needs a pod: the line is left out and the page's
//!   `localhost:8080` (the admin port) is the running server's admin address.
//! - The scheduled audit's CronJob would start its pod at the next half hour: the test runs that
//!   pod's container (its arguments and environment, the ConfigMap's config where its volume puts
//!   it) as the audit's service account, as the kubelet would.
//! - `docker build`/`docker push` are left out (no registry); the image is never pulled.
//! - The placeholder `<version>` is a new tag.
//! - The chart README's dry run names no namespace: it runs with a kubeconfig whose current
//!   namespace is the tenants'.
//! - The tenants' namespace `team-a` gets a name of its own, created by the page's block before
//!   the install (so no other launchgate of the suite ever judges it: it is labelled away from
//!   the suite's own server at once).

use crate::ctx::Ctx;
use crate::default_install::serve_flags;
use crate::native_rbac::kubeconfig_as;
use crate::webhook::{Launchgate, UNREGISTERED_LABEL};
use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const INSTALL: &str = "docs/install.md";
const UPGRADE: &str = "docs/upgrade.md";
const UNINSTALL: &str = "docs/uninstall.md";
/// The chart's README as a page of the site (generated from charts/launchgate/README.md).
const CHART: &str = "docs/chart.md";
/// The runbook (its remedies).
const OPERATIONS: &str = "docs/operations.md";
/// The failure modes and their remedies.
const TROUBLESHOOTING: &str = "docs/troubleshooting.md";
/// The repository's README, whose install block is the chart README's.
const README: &str = "README.md";
/// The pages' release name and namespace.
const RELEASE: &str = "launchgate";
/// The marker of the blocks this test runs.
const MARKER: &str = "<!-- docs-test: covered by e2e::install_path::the_documented_install_path_warns_denies_and_leaves_nothing -->";
/// The new image tag the upgrade block's `<version>` stands for.
const NEW_TAG: &str = "0.1.1";

/// A block of a page marked for a test.
pub(crate) struct Block {
    /// The line of its opening fence.
    line: usize,
    /// Its commands: the lines of an `sh` block, the `$ ` lines of a `console` block.
    commands: Vec<String>,
    /// What a `console` block shows the commands print.
    output: Option<Vec<String>>,
}

/// The `sh` and `console` blocks of `page` marked with `marker` (read as the docs test reads
/// pages, `common::docs`).
fn marked_blocks(page: &str, marker: &str) -> Result<Vec<Block>> {
    let marker = marker
        .strip_prefix("<!-- docs-test: ")
        .and_then(|m| m.strip_suffix(" -->"))
        .context("the marker's form")?;
    let mut out = Vec::new();
    for block in crate::common::docs::marked_blocks(page, marker) {
        let line = block.line;
        out.push(match block.lang.as_str() {
            "sh" => Block {
                line,
                commands: block.body,
                output: None,
            },
            "console" => {
                let steps = crate::common::docs::steps(&block.body);
                Block {
                    line,
                    commands: steps.iter().map(|s| s.command.clone()).collect(),
                    output: Some(steps.into_iter().flat_map(|s| s.expected).collect()),
                }
            }
            other => bail!("{page}:{line}: a marked ```{other} block (```sh or ```console)"),
        });
    }
    Ok(out)
}

/// What a block printed.
pub(crate) struct Ran {
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Ran {
    pub(crate) fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// The pages' blocks and the shell they run in: a working directory (the repository's
/// `charts` and `examples` linked in, as a reader's clone has them), `PATH` with `helm` and
/// `launchgate` first, the substitutions.
pub(crate) struct Shell {
    pub(crate) dir: tempfile::TempDir,
    bin: PathBuf,
    kubeconfig: PathBuf,
    /// The marker of the blocks the test runs.
    marker: &'static str,
    pub(crate) substitutions: Vec<(String, String)>,
    /// Variables a reader's shell holds from an earlier block.
    pub(crate) envs: Vec<(String, String)>,
    /// (page, line) of every block run.
    run: BTreeSet<(&'static str, usize)>,
}

impl Shell {
    pub(crate) fn new(
        kubeconfig: &Path,
        marker: &'static str,
        tenant: &str,
        admin: u16,
    ) -> Result<Shell> {
        let dir = tempfile::Builder::new()
            .prefix("launchgate-install-path-")
            .tempdir()?;
        let root = crate::common::root();
        for linked in ["charts", "examples"] {
            std::os::unix::fs::symlink(root.join(linked), dir.path().join(linked))?;
        }
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin)?;
        std::os::unix::fs::symlink(root.join("scripts/helm"), bin.join("helm"))?;
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_launchgate"), bin.join("launchgate"))?;
        Ok(Shell {
            dir,
            bin,
            kubeconfig: kubeconfig.to_path_buf(),
            marker,
            substitutions: vec![
                ("team-a".into(), tenant.into()),
                ("localhost:8080".into(), format!("127.0.0.1:{admin}")),
                ("<version>".into(), NEW_TAG.into()),
            ],
            envs: Vec::new(),
            run: BTreeSet::new(),
        })
    }

    /// The block of `page` marked for this test whose first command starts with `first`, its
    /// commands adapted: lines that need a kubelet or a registry left out, the substitutions
    /// made.
    pub(crate) fn block(&mut self, page: &'static str, first: &str) -> Result<Block> {
        let found: Vec<Block> = marked_blocks(page, self.marker)?
            .into_iter()
            .filter(|b| b.commands.first().is_some_and(|l| l.starts_with(first)))
            .collect();
        ensure!(
            found.len() == 1,
            "{page}: {} marked blocks start with {first:?}",
            found.len()
        );
        let mut block = found.into_iter().next().context("a block")?;
        self.run.insert((page, block.line));
        block.commands = block
            .commands
            .into_iter()
            .filter(|l| {
                !(l.contains("rollout status")
                    || l.contains("port-forward")
                    || l.starts_with("docker "))
            })
            .map(|mut l| {
                for (from, to) in &self.substitutions {
                    l = l.replace(from.as_str(), to);
                }
                l
            })
            .collect();
        Ok(block)
    }

    /// The adapted script of that block.
    pub(crate) fn script(&mut self, page: &'static str, first: &str) -> Result<String> {
        Ok(self.block(page, first)?.commands.join("\n"))
    }

    /// Runs that block with `sh -e`; it must exit `code`, and a `console` block's commands must
    /// print what it shows.
    pub(crate) fn run(&mut self, page: &'static str, first: &str, code: i32) -> Result<Ran> {
        self.run_with(page, first, code, &self.kubeconfig.clone())
    }

    /// [`Shell::run`] with `kubeconfig`.
    pub(crate) fn run_with(
        &mut self,
        page: &'static str,
        first: &str,
        code: i32,
        kubeconfig: &Path,
    ) -> Result<Ran> {
        let block = self.block(page, first)?;
        let script = block.commands.join("\n");
        let child = self.spawn_with(&script, kubeconfig)?;
        let out = child.wait_with_output()?;
        let ran = Ran {
            stdout: String::from_utf8_lossy(&out.stdout).into(),
            stderr: String::from_utf8_lossy(&out.stderr).into(),
        };
        println!("e2e: {page}: `{first}…` printed:\n{}", ran.all());
        ensure!(
            out.status.code() == Some(code),
            "{page}: the block `{first}…` exited {:?}, not {code}:\n{script}\n--- printed:\n{}",
            out.status.code(),
            ran.all()
        );
        if let Some(shown) = &block.output {
            let printed: Vec<&str> = ran.stdout.lines().map(str::trim_end).collect();
            let shown: Vec<&str> = shown.iter().map(|l| l.trim_end()).collect();
            ensure!(
                printed == shown,
                "{page}: `{first}…` printed\n{}\nnot what the page shows:\n{}",
                printed.join("\n"),
                shown.join("\n")
            );
        }
        Ok(ran)
    }

    /// A kubeconfig of the same API server whose current namespace is `ns` (where a page's
    /// kubectl goes without `-n`).
    pub(crate) fn kubeconfig_in(&self, ns: &str) -> Result<PathBuf> {
        let mut config: Value = serde_yaml::from_str(&std::fs::read_to_string(&self.kubeconfig)?)?;
        for context in config["contexts"]
            .as_array_mut()
            .context("kubeconfig contexts")?
        {
            context["context"]["namespace"] = json!(ns);
        }
        let path = self.dir.path().join(format!("kubeconfig-{ns}"));
        std::fs::write(&path, serde_json::to_vec_pretty(&config)?)?;
        Ok(path)
    }

    pub(crate) fn spawn(&self, script: &str) -> Result<std::process::Child> {
        self.spawn_with(script, &self.kubeconfig)
    }

    pub(crate) fn spawn_with(
        &self,
        script: &str,
        kubeconfig: &Path,
    ) -> Result<std::process::Child> {
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        std::process::Command::new("sh")
            .args(["-ec", script])
            .current_dir(self.dir.path())
            .env("PATH", path)
            .env("KUBECONFIG", kubeconfig)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("sh")
    }

    /// Fails unless every block of `pages` marked for the test was run.
    pub(crate) fn ensure_all_run(&self, pages: &[&'static str]) -> Result<()> {
        let mut marked = BTreeSet::new();
        for page in pages {
            for block in marked_blocks(page, self.marker)? {
                marked.insert((*page, block.line));
            }
        }
        let unrun: Vec<_> = marked.difference(&self.run).collect();
        ensure!(
            unrun.is_empty(),
            "blocks marked for this test that it did not run: {unrun:?}"
        );
        Ok(())
    }

    pub(crate) fn file(&self, name: &str) -> Result<String> {
        std::fs::read_to_string(self.dir.path().join(name)).with_context(|| name.to_string())
    }
}

/// launchgate where the chart's Deployment would run it.
struct Pods {
    server: Option<Launchgate>,
    admin: u16,
    rollouts: usize,
    dir: tempfile::TempDir,
}

impl Pods {
    /// Replaces the running server by one started with what the Deployment and ConfigMap Helm
    /// stored say now, its webhooks for the `tenant` namespace alone.
    async fn roll(&mut self, ctx: &Ctx, tenant: &str) -> Result<()> {
        self.stop();
        let (deployment, config) = installed(ctx).await?;
        let mut flags = serve_flags(&[deployment], tenant)?;
        flags.push(format!("--admin-listen=127.0.0.1:{}", self.admin));
        self.rollouts += 1;
        let dir = self.dir.path().join(format!("rollout-{}", self.rollouts));
        std::fs::create_dir(&dir)?;
        self.server = Some(
            Launchgate::start_with(
                &dir,
                Some(&ctx.env.kubeconfig),
                "127.0.0.1",
                &config,
                &flags,
            )
            .await?,
        );
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.stop();
        }
    }
}

/// The existing namespace `name` as a tenants' namespace of a page's install: labelled away
/// from the suite's own launchgate, which is waited for to leave it alone.
pub(crate) async fn kept_from_the_suite(ctx: &Ctx, name: &str) -> Result<Ctx> {
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    namespaces
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {UNREGISTERED_LABEL: "true"}}})),
        )
        .await?;
    let tenant = Ctx {
        env: ctx.env.clone(),
        client: ctx.client.clone(),
        ns: name.to_string(),
    };
    let probe = tenant.launch_pod("probe");
    tenant
        .wait_for(
            "the suite's launchgate to leave the namespace alone",
            Duration::from_secs(20),
            || async { Ok(crate::ctx::mutations(&tenant.create(&probe, true).await?).is_none()) },
        )
        .await?;
    Ok(tenant)
}

/// The release's Deployment (as an object with its kind) and its `config.yaml`, as Helm (or
/// `kubectl apply`) stored them.
pub(crate) async fn installed(ctx: &Ctx) -> Result<(Value, String)> {
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), RELEASE);
    let mut deployment = serde_json::to_value(deployments.get(RELEASE).await?)?;
    deployment["kind"] = json!("Deployment");
    let configmaps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), RELEASE);
    let config = configmaps
        .get(RELEASE)
        .await?
        .data
        .and_then(|d| d.get("config.yaml").cloned())
        .context("the ConfigMap has no config.yaml")?;
    Ok((deployment, config))
}

/// What the pods load is the config the page checked.
async fn installed_config_is(ctx: &Ctx, shell: &Shell, enforcement: &str) -> Result<()> {
    let (_, config) = installed(ctx).await?;
    let installed: Value = serde_yaml::from_str(&config)?;
    let checked: Value = serde_yaml::from_str(&shell.file("my-config.yaml")?)?;
    ensure!(
        installed == checked,
        "the installed config is not the checked one:\n{config}"
    );
    ensure!(
        installed["queues"]["gpu-queue"]["limits"]["enforcement"] == enforcement,
        "the installed queue's enforcement is not {enforcement}"
    );
    Ok(())
}

/// The image the release's Deployment runs.
async fn image(ctx: &Ctx) -> Result<String> {
    let (deployment, _) = installed(ctx).await?;
    Ok(deployment
        .pointer("/spec/template/spec/containers/0/image")
        .and_then(Value::as_str)
        .context("no image")?
        .to_string())
}

/// A dry run of the page's Job in the tenants' namespace: the status and the warnings.
async fn dry_run(tenant: &Ctx, shell: &Shell) -> Result<(u16, Value, Vec<String>)> {
    let job: Value = serde_yaml::from_str(&shell.file("over-the-limit.yaml")?)?;
    tenant.create_raw(&job, true).await
}

/// A dry-run probe of the queue's limit, as the page's Job asks it: a launch Job of the queue
/// asking 8 GPUs. The status and the warnings.
async fn probe_limit(tenant: &Ctx) -> Result<(u16, Vec<String>)> {
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "limit-probe",
            "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": "gpu-queue"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "train", "image": "busybox:1.36",
            "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}});
    let (status, _, warnings) = tenant.create_raw(&job, true).await?;
    Ok((status, warnings))
}

/// Runs the page's `helm uninstall` block while playing the kubelet for the pre-delete hook's
/// pod (its container's arguments run with the built binary as the hook's service account)
/// and removing the server once Helm has deleted the Deployment.
async fn uninstall(
    ctx: &Ctx,
    shell: &mut Shell,
    pods: &mut Pods,
    page: &'static str,
) -> Result<Ran> {
    let script = shell.script(page, "helm uninstall")?;
    let mut child = shell.spawn(&script)?;
    let release = Ctx {
        env: ctx.env.clone(),
        client: ctx.client.clone(),
        ns: RELEASE.into(),
    };
    let hook_user = format!("system:serviceaccount:{RELEASE}:{RELEASE}-uninstall");
    let kubeconfig = kubeconfig_as(ctx, &hook_user, pods.dir.path())?;
    let pod_api: Api<Pod> = release.api();
    let deployments: Api<Deployment> = release.api();
    let mut handled = BTreeSet::new();
    let mut hook_runs = 0;
    let until = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        ensure!(Instant::now() < until, "helm uninstall did not end");
        let hooks = pod_api
            .list(&ListParams::default().labels("app.kubernetes.io/component=uninstall-hook"))
            .await?;
        for pod in hooks.items {
            let pod = serde_json::to_value(pod)?;
            let name = pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if !handled.insert(name.clone()) {
                continue;
            }
            let args: Vec<String> = pod["spec"]["containers"][0]["args"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect();
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_launchgate"))
                .args(&args)
                .env("KUBECONFIG", &kubeconfig)
                .output()?;
            println!(
                "e2e: the uninstall hook `launchgate {}` as {hook_user}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let code = out.status.code().unwrap_or(1);
            let phase = if code == 0 { "Succeeded" } else { "Failed" };
            crate::guardrails::finish_pod(&release, &pod, phase, code, false).await?;
            hook_runs += 1;
        }
        if pods.server.is_some() && deployments.get_opt(RELEASE).await?.is_none() {
            // Helm deleted the Deployment: its pods go.
            pods.stop();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let out = child.wait_with_output()?;
    let ran = Ran {
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    };
    println!("e2e: {page}: `helm uninstall…` printed:\n{}", ran.all());
    ensure!(
        status.success(),
        "helm uninstall exited {status}:\n{}",
        ran.all()
    );
    ensure!(hook_runs >= 1, "the pre-delete hook never ran");
    pods.stop();
    Ok(ran)
}

/// The scheduled audit's run, as the CronJob's pod would run it: its container's arguments and
/// environment with the built binary, the ConfigMap's config where its volume puts it, as the
/// audit's service account (retried while its RBAC reaches the authorizer): it must succeed
/// with every list it makes allowed.
async fn scheduled_audit(ctx: &Ctx, pods: &Pods) -> Result<()> {
    let cronjobs: Api<CronJob> = Api::namespaced(ctx.client.clone(), RELEASE);
    let name = format!("{RELEASE}-audit");
    let cronjob = serde_json::to_value(cronjobs.get(&name).await?)?;
    ensure!(
        cronjob["spec"]["schedule"] == "*/30 * * * *",
        "the audit's schedule: {}",
        cronjob["spec"]["schedule"]
    );
    let container = &cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let (_, config) = installed(ctx).await?;
    let dir = pods.dir.path().join("audit");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("config.yaml"), config)?;
    let mut env: Vec<(String, String)> = Vec::new();
    for var in container["env"].as_array().into_iter().flatten() {
        let (Some(key), Some(value)) = (var["name"].as_str(), var["value"].as_str()) else {
            continue;
        };
        // The ConfigMap's volume is mounted at /etc/launchgate/config.
        let value = value.replace("/etc/launchgate/config", &dir.display().to_string());
        env.push((key.to_string(), value));
    }
    let user = format!("system:serviceaccount:{RELEASE}:{name}");
    let kubeconfig = kubeconfig_as(ctx, &user, &dir)?;
    let mut last = String::new();
    for _ in 0..20 {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_launchgate"))
            .args(&args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("KUBECONFIG", &kubeconfig)
            .output()?;
        last = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() && !last.contains("could not be listed") {
            println!(
                "e2e: the scheduled audit `launchgate {}` as {user}:\n{last}",
                args.join(" ")
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    bail!("the scheduled audit failed as {user}: {last}")
}

/// `page`'s `helm uninstall` block, then uninstall.md's checks: they list the release's
/// webhook configurations, RBAC and objects before, and nothing after; nor is anything left of
/// Helm's release records, and the tenants' Job is created as written.
async fn uninstall_and_check(
    ctx: &Ctx,
    shell: &mut Shell,
    pods: &mut Pods,
    tenant: &Ctx,
    page: &'static str,
) -> Result<()> {
    let check = "kubectl get mutatingwebhookconfigurations";
    let before = shell.run(UNINSTALL, check, 0)?;
    for listed in [
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/launchgate",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/launchgate",
        "clusterrole.rbac.authorization.k8s.io/launchgate-webhooks",
        "deployment.apps/launchgate",
        "configmap/launchgate",
    ] {
        ensure!(
            before.stdout.contains(listed),
            "before the uninstall the checks do not list {listed}:\n{}",
            before.stdout
        );
    }
    uninstall(ctx, shell, pods, page).await?;
    let left = shell.run(UNINSTALL, check, 0)?;
    ensure!(
        left.stdout.trim().is_empty(),
        "left after the uninstall:\n{}",
        left.stdout
    );
    let release_secrets = shell.spawn(&format!(
        "kubectl -n {RELEASE} get secrets -l owner=helm,name={RELEASE} -o name"
    ))?;
    let release_secrets = release_secrets.wait_with_output()?;
    ensure!(
        release_secrets.status.success() && release_secrets.stdout.is_empty(),
        "Helm's release records are left: {}",
        String::from_utf8_lossy(&release_secrets.stdout)
    );
    // Nothing judges the tenants' Job any more: created as written.
    let (status, body, warnings) = dry_run(tenant, shell).await?;
    ensure!(
        status == 201 && crate::ctx::mutations(&body).is_none() && warnings.is_empty(),
        "after the uninstall the Job is still judged: {status} {warnings:?} {body}"
    );
    Ok(())
}

/// The install path end to end (see the module's comment): every step's effect on the real
/// API server — the checked config is the installed one; warned and admitted (mutated) in
/// `warn`; the Event and the counter; the audit's PolicyReport; the audit of the `deny` config
/// lists the running Job; refused after the upgrade to `deny`; an upgrade with the values file
/// keeps the config and takes the new tag, and the history lists every revision; after the
/// uninstall no webhook configuration, admission policy, RBAC object or object of the release
/// in its namespace is left, and the Job is admitted untouched; the chart README's install and
/// uninstall do the same once more, its dry run shows the mutations; with the namespace deleted
/// first, the stranded fail-closed webhook refuses a run within the limits until the deletes
/// by label.
pub async fn the_documented_install_path_warns_denies_and_leaves_nothing(ctx: &Ctx) -> Result<()> {
    let helm = std::process::Command::new("python3")
        .args(["-c", "import helm_sdkpy"])
        .output();
    if !helm.is_ok_and(|o| o.status.success()) {
        let required =
            std::env::var("LAUNCHGATE_HELM_REQUIRED").is_ok_and(|v| !v.is_empty() && v != "0");
        ensure!(
            !required,
            "LAUNCHGATE_HELM_REQUIRED: python3 cannot import helm_sdkpy \
             (pip install --ignore-requires-python helm-sdkpy)"
        );
        println!("SKIPPED: the install path needs python3 with helm-sdkpy");
        return Ok(());
    }
    let tenant_name = format!("team-a-{}", &ctx.ns[ctx.ns.len() - 4..]);
    let admin = crate::cluster::free_port()?;
    let mut shell = Shell::new(&ctx.env.kubeconfig, MARKER, &tenant_name, admin)?;
    let mut pods = Pods {
        server: None,
        admin,
        rollouts: 0,
        dir: tempfile::tempdir()?,
    };
    let result = path(ctx, &mut shell, &mut pods, &tenant_name).await;
    pods.stop();
    // The cause first (the harness prints the error's outermost message only).
    let result = result.map_err(|e| {
        let log = pods
            .dir
            .path()
            .join(format!("rollout-{}", pods.rollouts))
            .join("launchgate.log");
        anyhow::anyhow!(
            "{e:#}\nthe release's launchgate log ends:\n{}",
            crate::cluster::tail(&log, 80)
        )
    });
    if result.is_err() {
        // What a failed step may have left: the release's cluster-scoped objects.
        if let Ok(child) = shell.spawn(&format!(
            "kubectl delete --ignore-not-found validatingwebhookconfiguration,mutatingwebhookconfiguration {RELEASE}; \
             kubectl delete --ignore-not-found clusterroles,clusterrolebindings -l app.kubernetes.io/instance={RELEASE}"
        )) {
            let _ = child.wait_with_output();
        }
    }
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    for ns in [RELEASE, tenant_name.as_str()] {
        let _ = namespaces.delete(ns, &Default::default()).await;
    }
    // Gone before the next test that names the release's namespace runs.
    result.and(crate::manifests::gone(ctx, &[RELEASE, tenant_name.as_str()]).await)
}

/// The pages' blocks in the order a reader runs them, each step's effect asserted.
async fn path(ctx: &Ctx, shell: &mut Shell, pods: &mut Pods, tenant_name: &str) -> Result<()> {
    // The `helm` the pages run refuses what it does not do, before touching the cluster.
    let refused = shell
        .spawn("helm install launchgate charts/launchgate --namespace launchgate --atomic")?
        .wait_with_output()?;
    ensure!(
        refused.status.code() == Some(2)
            && String::from_utf8_lossy(&refused.stderr)
                .contains("unrecognized arguments: --atomic"),
        "helm took a flag it does not know: {refused:?}"
    );
    // The tenants' namespace first, kept from the suite's own launchgate.
    shell.run(INSTALL, "kubectl create namespace", 0)?;
    let tenant = kept_from_the_suite(ctx, tenant_name).await?;
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());

    // 1. The config, checked, in the values file. 3. Installed, warn.
    let checked = shell.run(INSTALL, "sed 's/enforcement: deny", 0)?;
    ensure!(
        checked.stdout.contains("my-config.yaml: ok (1 queue(s))"),
        "check-config: {}",
        checked.all()
    );
    let installed_out = shell.run(INSTALL, "helm install", 0)?;
    ensure!(installed_out.stdout.contains("STATUS: deployed"));
    installed_config_is(ctx, shell, "warn").await?;
    ensure!(image(ctx).await? == "registry.example.com/launchgate:0.1.0");
    pods.roll(ctx, tenant_name).await?;
    tenant
        .wait_for(
            "the release's webhooks to take effect (a run over the limit warned)",
            Duration::from_secs(30),
            || async {
                let (status, warnings) = probe_limit(&tenant).await?;
                Ok(status == 201 && !warnings.is_empty())
            },
        )
        .await?;

    // 4. The webhooks the pods registered, as the page shows them.
    shell.run(
        INSTALL,
        "kubectl get validatingwebhookconfiguration launchgate",
        0,
    )?;

    // The runbook's remedies, on the installed release: the config as the pods check it, and
    // the serving certificate's end.
    let remedy = shell.run(OPERATIONS, "launchgate check-config my-config.yaml", 0)?;
    ensure!(
        remedy.stdout.contains("my-config.yaml: ok (1 queue(s))"),
        "the runbook's config check: {}",
        remedy.all()
    );
    let remedy = shell.run(
        OPERATIONS,
        "kubectl -n launchgate get secret launchgate-tls",
        0,
    )?;
    ensure!(
        remedy.stdout.starts_with("notAfter="),
        "the runbook's certificate check: {}",
        remedy.all()
    );
    // The troubleshooting page's remedies: the CA the API server trusts and the Secret's. Here
    // they differ, which is what the remedy finds: the pods serve on 127.0.0.1 with the dev
    // certificate `serve` makes (the API server cannot reach the Service), and register its CA,
    // while the Secret holds the CA the chart generated.
    let remedy = shell.run(
        TROUBLESHOOTING,
        "kubectl get validatingwebhookconfiguration launchgate",
        0,
    )?;
    let subjects: Vec<&str> = remedy.stdout.lines().collect();
    ensure!(
        subjects == ["subject=CN = launchgate CA", "subject=CN = launchgate-ca"],
        "the caBundle remedy did not print the registered CA's subject, then the Secret's: {}",
        remedy.all()
    );
    let remedy = shell.run(
        TROUBLESHOOTING,
        "kubectl -n launchgate get pods,endpointslices",
        0,
    )?;
    ensure!(
        remedy.stdout.contains("Name:") && remedy.stdout.contains("launchgate"),
        "the endpoints remedy did not describe the Deployment: {}",
        remedy.all()
    );
    let remedy = shell.run(TROUBLESHOOTING, "kubectl -n launchgate port-forward", 0)?;
    ensure!(
        remedy
            .stdout
            .contains("launchgate_admission_duration_seconds_count{")
            && remedy.stdout.contains("launchgate_memory_queued_requests "),
        "the deadline remedy did not print the review durations and the memory queue: {}",
        remedy.all()
    );

    // 5. The Job over the limit: warned, admitted, mutated.
    let created = shell.run(INSTALL, "cat > over-the-limit.yaml", 0)?;
    let printed = created.all();
    ensure!(
        printed.contains("Warning:")
            && printed.contains("exceeds maximum 4")
            && printed.contains("job.batch/over-the-limit created"),
        "not warned and created: {printed}"
    );
    let job = json!({"apiVersion": "batch/v1", "kind": "Job"});
    let stored = tenant
        .get(&job, "over-the-limit")
        .await?
        .context("the Job was not stored")?;
    ensure!(
        crate::ctx::mutations(&stored).is_some() && stored["spec"]["backoffLimit"] == 0,
        "the Job was not mutated: {stored}"
    );

    // 6. The Event and the counter.
    tenant
        .event(
            "LaunchgateWarning",
            Some("over-the-limit"),
            Duration::from_secs(20),
        )
        .await?;
    let seen = shell.run(INSTALL, "kubectl -n team-a get events", 0)?;
    ensure!(
        seen.stdout.contains("LaunchgateWarning") && seen.stdout.contains("over-the-limit"),
        "no Event listed: {}",
        seen.all()
    );
    let counted = seen
        .stdout
        .lines()
        .find(|l| l.starts_with("launchgate_violations_total{"))
        .with_context(|| format!("no launchgate_violations_total line: {}", seen.stdout))?;
    // The Job and its pod (the test's dry-run probes count too).
    let count: f64 = counted
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .context("a counter's value")?;
    ensure!(
        counted.starts_with(
            "launchgate_violations_total{queue=\"gpu-queue\",rule=\"limits.variables\",enforcement=\"warn\"} "
        ) && count >= 2.0,
        "not the Job's and its pod's warned violations of gpu-queue: {counted}"
    );
    ensure!(
        seen.stdout.contains("job/over-the-limit") && seen.stdout.contains("pod/over-the-limit-"),
        "no Event on the Job and on its pod: {}",
        seen.stdout
    );

    // The chart README's scheduled audit, turned on with --reuse-values while the queue warns:
    // the config kept; its run (played as the CronJob's pod would run it) reports the Job.
    shell.run(
        CHART,
        "helm upgrade launchgate charts/launchgate -n launchgate --reuse-values",
        0,
    )?;
    installed_config_is(ctx, shell, "warn").await?;
    scheduled_audit(ctx, pods).await?;
    let reports = shell.run(CHART, "kubectl get policyreports", 0)?;
    ensure!(
        reports
            .stdout
            .lines()
            .any(|l| l.split_whitespace().next() == Some(tenant_name)),
        "no report for {tenant_name}: {}",
        reports.stdout
    );

    // 7. Deny: the config switched, checked and audited as upgrade.md's "Before the upgrade"
    // says (the running Job would be refused: exit 1), then upgraded; the same Job refused.
    shell.run(INSTALL, "sed -i.bak", 0)?;
    let before = shell.run(UPGRADE, "launchgate check-config my-config.yaml", 1)?;
    ensure!(
        before.stdout.contains("my-config.yaml: ok (1 queue(s))")
            && before.stdout.lines().any(|l| {
                l.starts_with(tenant_name) && l.contains("over-the-limit") && l.contains("FAIL")
            }),
        "the audit does not find the running Job the new config refuses: {}",
        before.all()
    );
    let upgraded = shell.run(INSTALL, "{ echo 'image:", 0)?;
    ensure!(upgraded.stdout.contains("REVISION: 3"));
    // The values file again, without --reuse-values: the audit is off as the file leaves it.
    let cronjobs: Api<CronJob> = Api::namespaced(ctx.client.clone(), RELEASE);
    ensure!(
        cronjobs
            .get_opt(&format!("{RELEASE}-audit"))
            .await?
            .is_none(),
        "the audit CronJob outlived an upgrade without it"
    );
    installed_config_is(ctx, shell, "deny").await?;
    pods.roll(ctx, tenant_name).await?;
    tenant
        .wait_for("the Job to be refused", Duration::from_secs(30), || async {
            Ok(probe_limit(&tenant).await?.0 == 403)
        })
        .await?;
    let refused = shell.run(INSTALL, "kubectl -n team-a delete job", 1)?;
    ensure!(
        refused
            .stderr
            .contains("admission webhook \"validate-deny.launchgate.io\" denied the request")
            && refused.stderr.contains("exceeds maximum 4"),
        "not refused by the fail-closed webhook: {}",
        refused.all()
    );
    ensure!(tenant.get(&job, "over-the-limit").await?.is_none());
    tenant
        .event(
            "LaunchgateDenied",
            Some("over-the-limit"),
            Duration::from_secs(20),
        )
        .await?;

    // upgrade.md: a new tag, the values file again; the config kept.
    shell.run(UPGRADE, "# Build and push", 0)?;
    ensure!(image(ctx).await? == format!("registry.example.com/launchgate:{NEW_TAG}"));
    installed_config_is(ctx, shell, "deny").await?;
    pods.roll(ctx, tenant_name).await?;
    tenant
        .wait_for(
            "the Job to be refused after the upgrade",
            Duration::from_secs(30),
            || async { Ok(probe_limit(&tenant).await?.0 == 403) },
        )
        .await?;
    // The history: the install and the three upgrades.
    let history = shell.run(UPGRADE, "helm history", 0)?;
    for revision in ["1", "2", "3", "4"] {
        ensure!(
            history
                .stdout
                .lines()
                .any(|l| l.split_whitespace().next() == Some(revision)),
            "revision {revision} not in the history: {}",
            history.stdout
        );
    }

    // uninstall.md: the hook, then nothing left.
    uninstall_and_check(ctx, shell, pods, &tenant, UNINSTALL).await?;

    // The chart README's install, into the namespace the uninstall left, and its uninstall.
    shell.run(CHART, "helm install launchgate charts/launchgate", 0)?;
    installed_config_is(ctx, shell, "deny").await?;
    ensure!(image(ctx).await? == "registry.example.com/launchgate:0.1.0");
    pods.roll(ctx, tenant_name).await?;
    tenant
        .wait_for(
            "the Job to be refused after the reinstall",
            Duration::from_secs(30),
            || async { Ok(probe_limit(&tenant).await?.0 == 403) },
        )
        .await?;
    // Its dry run, in the reader's current namespace (the tenants').
    let tried = shell.run_with(
        CHART,
        "cat > demo-job.yaml",
        0,
        &shell.kubeconfig_in(tenant_name)?,
    )?;
    let demo: Value = serde_yaml::from_str(&tried.stdout)?;
    let container = &demo["spec"]["template"]["spec"]["containers"][0];
    ensure!(
        demo["metadata"]["namespace"] == tenant_name
            && demo["spec"]["backoffLimit"] == 0
            && demo["spec"]["ttlSecondsAfterFinished"].is_number()
            && container["securityContext"].is_object()
            && container["env"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| e["name"] == "NVIDIA_VISIBLE_DEVICES" && e["value"] == "void")
            && demo["metadata"]["labels"]["launchgate.io/queue"] == "gpu-queue"
            && crate::ctx::mutations(&demo).is_some(),
        "the dry run does not show what the page says: {demo}"
    );
    ensure!(
        tenant.get(&demo, "demo").await?.is_none(),
        "the dry run created the Job"
    );
    uninstall_and_check(ctx, shell, pods, &tenant, CHART).await?;

    // Installed once more, then its namespace deleted first: the cluster-scoped objects stay,
    // and the deny queue's fail-closed webhook refuses even a run within the limits, until the
    // page's deletes by label.
    shell.run(CHART, "helm install launchgate charts/launchgate", 0)?;
    pods.roll(ctx, tenant_name).await?;
    tenant
        .wait_for(
            "the Job to be refused after the second reinstall",
            Duration::from_secs(30),
            || async { Ok(probe_limit(&tenant).await?.0 == 403) },
        )
        .await?;
    namespaces.delete(RELEASE, &Default::default()).await?;
    tenant
        .wait_for(
            "the release namespace to be gone",
            Duration::from_secs(90),
            || async { Ok(namespaces.get_opt(RELEASE).await?.is_none()) },
        )
        .await?;
    pods.stop();
    let check = "kubectl get mutatingwebhookconfigurations";
    let stranded = shell.run(UNINSTALL, check, 0)?;
    ensure!(
        stranded
            .stdout
            .contains("validatingwebhookconfiguration.admissionregistration.k8s.io/launchgate")
            && stranded
                .stdout
                .contains("clusterrole.rbac.authorization.k8s.io/launchgate-webhooks"),
        "the namespace's deletion took the cluster-scoped objects too: {}",
        stranded.stdout
    );
    let within = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "within-the-limit",
            "labels": {"wandb.ai/monitor": "true", "launchgate.io/queue": "gpu-queue"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "train", "image": "busybox:1.36",
            "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}});
    tenant
        .wait_for(
            "a run within the limits to be refused by the stranded webhook",
            Duration::from_secs(30),
            || async {
                let (status, body, _) = tenant.create_raw(&within, true).await?;
                Ok(status != 201 && body.to_string().contains("failed calling webhook"))
            },
        )
        .await?;
    shell.run(UNINSTALL, "kubectl delete mutatingwebhookconfigurations", 0)?;
    let left = shell.run(UNINSTALL, check, 0)?;
    ensure!(
        left.stdout.trim().is_empty(),
        "left after the deletes by label:\n{}",
        left.stdout
    );
    tenant
        .wait_for(
            "a run within the limits to be admitted again",
            Duration::from_secs(30),
            || async { Ok(tenant.create_raw(&within, true).await?.0 == 201) },
        )
        .await?;

    // README.md's install: the chart's defaults, the reader's image; and uninstalled again.
    shell.run(README, "helm install launchgate charts/launchgate", 0)?;
    ensure!(image(ctx).await? == "registry.example.com/launchgate:0.1.0");
    pods.roll(ctx, tenant_name).await?;
    // The pod registers the mutating configuration, then the validating one.
    let validating: Api<DynamicObject> = Api::all_with(
        ctx.client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
            ),
            "validatingwebhookconfigurations",
        ),
    );
    ctx.wait_for(
        "the default install's validating webhooks",
        Duration::from_secs(30),
        || async { Ok(validating.get_opt(RELEASE).await?.is_some()) },
    )
    .await?;
    uninstall_and_check(ctx, shell, pods, &tenant, CHART).await?;

    // Every block marked for this test was run.
    shell.ensure_all_run(&[
        INSTALL,
        UPGRADE,
        UNINSTALL,
        CHART,
        README,
        OPERATIONS,
        TROUBLESHOOTING,
    ])
}
