//! launchgate as the API server meets it: the built binary serving on loopback, registered by
//! URL with the webhook configurations the chart ships (its rules, selectors and
//! `matchConditions`, read from `manifests/launchgate.yaml`), reinvocation `IfNeeded`.

use crate::cluster::{Proc, free_port, tail};
use anyhow::{Context, Result, bail};
use base64::Engine;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// Label that keeps a namespace away from launchgate (as if it were not installed yet): the
/// suite adds it to the chart's namespaceSelector.
pub const UNREGISTERED_LABEL: &str = "e2e.launchgate.io/unregistered";

/// Queue whose limits only warn (the built-in queue copied with `enforcement: warn`).
pub const WARN_QUEUE: &str = "warn-queue";

/// Queue that caps `activeDeadlineSeconds` (the built-in queue with `maxActiveDeadlineSeconds`).
pub const DEADLINE_QUEUE: &str = "deadline-queue";

/// Queue whose limits are the W&B docs' Kubeflow queue config, pasted as-is (the PyTorchJob
/// under `kubernetes:`), with `gpus` 0..4.
pub const KUBEFLOW_QUEUE: &str = "kubeflow-queue";
/// The built-in queue, with images only from `docker.io/acme`.
pub const REGISTRY_QUEUE: &str = "acme-images-queue";
/// The built-in queue with the strict guardrails: a gang below its rendezvous size is denied,
/// a distributed Indexed Job ends with index 0, every run gets a 1 h deadline and at most 8
/// GPU-hours, a wired Indexed Job's rendezvous Service is preflighted, and every Indexed Job is
/// wired.
pub const GUARDRAILS_QUEUE: &str = "guardrails-queue";
/// A queue whose template is a Trainer v2 TrainJob (nodes 1..4, 8 GPUs a node, 16 in all).
pub const TRAINJOB_QUEUE: &str = "trainjob-queue";
/// The built-in queue handing off to the Kueue LocalQueue `team-a`, wiring every Indexed Job,
/// warning about jobs it cannot wire, with at most 4 GPUs per Job in all.
pub const KUEUE_QUEUE: &str = "kueue-queue";
/// The built-in queue for KubeRay: handing off to the Kueue LocalQueue `team-a`, with at most
/// 8 GPUs per workload in all.
pub const RAY_QUEUE: &str = "ray-queue";
/// The KubeRay queue with a GPU-hour ceiling: at most 8 GPU-hours per run.
pub const RAY_CAPPED_QUEUE: &str = "ray-capped-queue";

/// The running launchgate binary.
pub struct Launchgate {
    pub base: String,
    pub ca_pem: String,
    proc: Proc,
    /// Webhook configurations this run created (deleted again against an existing cluster).
    pub registered: Vec<(ApiResource, String)>,
}

impl Launchgate {
    /// Starts `launchgate serve` with the suite's config, its cluster lookups reading the API
    /// server of `kubeconfig`, and waits until it is ready.
    pub async fn start(dir: &Path, kubeconfig: &Path, host: &str) -> Result<Launchgate> {
        Self::start_with(dir, Some(kubeconfig), host, &suite_config()?, &[]).await
    }

    /// Starts `launchgate serve` with `config` (YAML) in `dir`; with a kubeconfig, its cluster
    /// lookups and Events use that API server.
    pub async fn start_with(
        dir: &Path,
        kubeconfig: Option<&Path>,
        host: &str,
        config_text: &str,
        extra_args: &[String],
    ) -> Result<Launchgate> {
        Self::start_until(
            dir,
            kubeconfig,
            host,
            None,
            config_text,
            extra_args,
            "/readyz",
        )
        .await
    }

    /// [`Launchgate::start_with`] on `port` (one a webhook configuration already names).
    pub async fn start_on(
        dir: &Path,
        kubeconfig: Option<&Path>,
        host: &str,
        port: u16,
        config_text: &str,
        extra_args: &[String],
    ) -> Result<Launchgate> {
        Self::start_until(
            dir,
            kubeconfig,
            host,
            Some(port),
            config_text,
            extra_args,
            "/readyz",
        )
        .await
    }

    /// [`Launchgate::start_with`], returning once the server answers `/healthz`, ready or not.
    pub async fn start_serving(
        dir: &Path,
        kubeconfig: Option<&Path>,
        host: &str,
        config_text: &str,
        extra_args: &[String],
    ) -> Result<Launchgate> {
        Self::start_until(
            dir,
            kubeconfig,
            host,
            None,
            config_text,
            extra_args,
            "/healthz",
        )
        .await
    }

    /// `GET path` on the server's HTTPS port: the status and the body.
    pub async fn get(&self, path: &str) -> Result<(u16, String)> {
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(self.ca_pem.as_bytes())?)
            .tls_built_in_root_certs(false)
            .timeout(Duration::from_secs(5))
            .build()?;
        let response = client.get(format!("{}{path}", self.base)).send().await?;
        let status = response.status().as_u16();
        Ok((status, response.text().await?))
    }

    async fn start_until(
        dir: &Path,
        kubeconfig: Option<&Path>,
        host: &str,
        port: Option<u16>,
        config_text: &str,
        extra_args: &[String],
        until_ok: &str,
    ) -> Result<Launchgate> {
        let config = dir.join("launchgate-config.yaml");
        std::fs::write(&config, config_text)?;
        let port = match port {
            Some(port) => port,
            None => free_port()?,
        };
        let certs = dir.join("launchgate-certs");
        let mut args: Vec<String> = vec![
            "serve".into(),
            format!("--listen={host}:{port}"),
            format!("--config={}", config.display()),
            format!("--dev-cert-dir={}", certs.display()),
            format!("--dev-cert-names={host}"),
        ];
        if kubeconfig.is_some() {
            // Cluster lookups, and denials and warnings as Kubernetes Events written with the
            // same kubeconfig, unless `extra_args` says otherwise (a chart's settings).
            for flag in ["--cluster-lookups", "--events"] {
                if !extra_args
                    .iter()
                    .any(|a| a.starts_with(&format!("{flag}=")))
                {
                    args.push(format!("{flag}=true"));
                }
            }
        }
        args.extend([
            "--log-format=json".into(),
            "--log-level=launchgate=debug,info".into(),
            "--reload-interval=1".into(),
            // The budget the chart's default 256 MiB memory limit gives.
            format!(
                "--memory-budget-mib={}",
                launchgate::server::budget::default_budget(Some(SUITE_MEMORY_LIMIT)) >> 20
            ),
        ]);
        // LAUNCHGATE_E2E_BIN: another build of launchgate (e.g. target/release/launchgate, to
        // measure the API server's view of an optimised binary).
        let bin = std::env::var_os("LAUNCHGATE_E2E_BIN")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_launchgate").into());
        args.extend(extra_args.iter().cloned());
        let envs: Vec<(&str, &Path)> = kubeconfig.map(|k| ("KUBECONFIG", k)).into_iter().collect();
        let mut proc = Proc::spawn("launchgate", &bin, &args, &envs, dir)?;
        let base = format!("https://{host}:{port}");
        let until = Instant::now() + Duration::from_secs(30);
        let ca_path = certs.join("ca.crt");
        loop {
            proc.check_running()?;
            if let Ok(ca_pem) = std::fs::read_to_string(&ca_path)
                && !ca_pem.is_empty()
            {
                let client = reqwest::Client::builder()
                    .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes())?)
                    .tls_built_in_root_certs(false)
                    .timeout(Duration::from_secs(2))
                    .build()?;
                if client
                    .get(format!("{base}{until_ok}"))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
                {
                    return Ok(Launchgate {
                        base,
                        ca_pem,
                        proc,
                        registered: Vec::new(),
                    });
                }
            }
            if Instant::now() > until {
                bail!(
                    "launchgate not ready; last log lines:\n{}",
                    tail(&proc.log, 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    pub fn check_running(&mut self) -> Result<()> {
        self.proc.check_running()
    }

    /// SIGTERM, as the kubelet sends it; the exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        self.proc.stop_with(libc::SIGTERM, Duration::from_secs(10))
    }

    /// Registers the chart's webhook configurations, pointed at this server by URL.
    pub async fn register(&mut self, client: &Client, run: &str) -> Result<()> {
        self.register_with(client, run, &[], None).await
    }

    /// [`Launchgate::register`], for namespaces that also match `namespace_exprs`, with
    /// `failure_policy` on every webhook when given.
    pub async fn register_with(
        &mut self,
        client: &Client,
        run: &str,
        namespace_exprs: &[Value],
        failure_policy: Option<&str>,
    ) -> Result<()> {
        self.register_named(client, run, namespace_exprs, failure_policy, None)
            .await
    }

    /// [`Launchgate::register_with`], the webhooks named `<prefix>-mutate.launchgate.io` and
    /// `<prefix>-validate.launchgate.io` when `prefix` is given (the API server's metrics are
    /// per webhook name).
    pub async fn register_named(
        &mut self,
        client: &Client,
        run: &str,
        namespace_exprs: &[Value],
        failure_policy: Option<&str>,
        prefix: Option<&str>,
    ) -> Result<()> {
        let ca_bundle = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        for doc in chart_webhook_configurations()? {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let mut doc = doc;
            let name = format!("launchgate-e2e-{run}");
            doc["metadata"] = json!({"name": name});
            for hook in doc["webhooks"].as_array_mut().into_iter().flatten() {
                let path = hook
                    .pointer("/clientConfig/service/path")
                    .and_then(Value::as_str)
                    .context("chart webhook without a service path")?
                    .to_string();
                hook["clientConfig"] = json!({
                    "url": format!("{}{path}", self.base),
                    "caBundle": ca_bundle,
                });
                let exprs = hook
                    .pointer_mut("/namespaceSelector/matchExpressions")
                    .and_then(Value::as_array_mut)
                    .context("chart webhook without namespaceSelector.matchExpressions")?;
                if namespace_exprs.is_empty() {
                    // Namespaces of this run's own bookkeeping and "not installed yet" ones.
                    exprs.push(json!({"key": UNREGISTERED_LABEL, "operator": "DoesNotExist"}));
                }
                exprs.extend(namespace_exprs.iter().cloned());
                if let Some(policy) = failure_policy {
                    hook["failurePolicy"] = json!(policy);
                }
                if let Some(prefix) = prefix {
                    let name = hook["name"].as_str().unwrap_or_default();
                    hook["name"] = json!(format!("{prefix}-{name}"));
                }
            }
            let resource = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", &kind),
                &format!("{}s", kind.to_lowercase()),
            );
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            let obj: DynamicObject = serde_json::from_value(doc)?;
            api.create(&PostParams::default(), &obj)
                .await
                .with_context(|| format!("registering {kind}"))?;
            self.registered.push((resource, name));
        }
        Ok(())
    }

    /// Deletes what [`Launchgate::register`] created.
    pub async fn unregister(&mut self, client: &Client) {
        for (resource, name) in self.registered.drain(..) {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            let _ = api.delete(&name, &Default::default()).await;
        }
    }
}

/// The memory limit the suite's launchgate is budgeted for (the chart's default).
pub const SUITE_MEMORY_LIMIT: u64 = 256 << 20;

/// The chart's MutatingWebhookConfiguration and ValidatingWebhookConfiguration, as rendered
/// into `manifests/launchgate.yaml`.
pub fn chart_webhook_configurations() -> Result<Vec<Value>> {
    let path = crate::common::root().join("manifests/launchgate.yaml");
    let text = std::fs::read_to_string(&path)?;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value: Value = serde::Deserialize::deserialize(doc)?;
        let kind = value["kind"].as_str().unwrap_or_default();
        if kind == "MutatingWebhookConfiguration" || kind == "ValidatingWebhookConfiguration" {
            out.push(value);
        }
    }
    if out.len() != 2 {
        bail!("{}: expected both webhook configurations", path.display());
    }
    Ok(out)
}

/// The built-in policy plus variants of its queue (one that only warns, one with a deadline
/// cap) and a queue made from the W&B docs' Kubeflow queue config.
pub fn suite_config() -> Result<String> {
    let mut config: Value = serde_yaml::from_str(launchgate::policy::DEFAULT_CONFIG_YAML)?;
    let default_queue = config["defaultQueue"]
        .as_str()
        .context("built-in config without defaultQueue")?
        .to_string();
    let mut warn = config["queues"][&default_queue].clone();
    warn["limits"]["enforcement"] = json!("warn");
    // Every rule of the warn queue only warns (a deny rule would make it fail closed).
    warn["pytorch"]["onUnwirable"] = json!("warn");
    let mut deadline = config["queues"][&default_queue].clone();
    deadline["limits"]["maxActiveDeadlineSeconds"] = json!(86400);
    let mut kubeflow = config["queues"][&default_queue].clone();
    kubeflow["limits"] = json!({
        "enforcement": "deny",
        "template": crate::common::queue_config("kubeflow-pytorchjob-kubernetes.yaml"),
        "variables": {"gpus": {"type": "integer", "minimum": 0, "maximum": 4, "default": 1}},
    });
    let mut registries = config["queues"][&default_queue].clone();
    registries["limits"]["allowedRegistries"] = json!(["docker.io/acme"]);
    config["queues"][REGISTRY_QUEUE] = registries;
    let mut trainjob = config["queues"][&default_queue].clone();
    trainjob["limits"] = json!({
        "enforcement": "deny",
        "template": "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nspec:\n  runtimeRef: {name: torch-distributed}\n  trainer:\n    numNodes: '{{nodes}}'\n    resourcesPerNode: {limits: {nvidia.com/gpu: '{{gpus}}'}}\n",
        "variables": {"nodes": {"type": "integer", "minimum": 1, "maximum": 4},
                      "gpus": {"type": "integer", "minimum": 0, "maximum": 8}},
        "totals": {"nvidia.com/gpu": {"maximum": 16}},
    });
    config["queues"][TRAINJOB_QUEUE] = trainjob;
    let mut kueue = config["queues"][&default_queue].clone();
    kueue["kueue"] =
        json!({"localQueue": "team-a", "priorityClass": "research", "maxExecutionSeconds": 3600});
    kueue["pytorch"]["indexedJobs"] = json!(true);
    kueue["pytorch"]["onUnwirable"] = json!("warn");
    kueue["limits"]["totals"] = json!({"nvidia.com/gpu": {"maximum": 4}});
    config["queues"][KUEUE_QUEUE] = kueue;
    let mut ray = config["queues"][&default_queue].clone();
    ray["kueue"] = json!({"localQueue": "team-a"});
    ray["limits"]["totals"] = json!({"nvidia.com/gpu": {"maximum": 8}});
    config["queues"][RAY_QUEUE] = ray;
    let mut guarded = config["queues"][&default_queue].clone();
    guarded["pytorch"]["indexedJobs"] = json!(true);
    guarded["guardrails"]["gang"] = json!("deny");
    guarded["guardrails"]["endWithRankZero"] = json!(true);
    guarded["guardrails"]["costCeiling"] =
        json!({"defaultDeadlineSeconds": 3600, "maxGpuHours": 8});
    guarded["guardrails"]["rendezvousPreflight"] = json!(true);
    config["queues"][GUARDRAILS_QUEUE] = guarded;
    let mut accelerators = config["queues"][&default_queue].clone();
    accelerators["limits"]["totals"] = json!({"nvidia.com/gpu": {"maximum": 16}});
    accelerators["guardrails"]["costCeiling"] = json!({"maxGpuHours": 64});
    config["queues"][crate::accelerators::ACCELERATORS_QUEUE] = accelerators;
    // The docs' exemption example, on the default queue only.
    config["queues"][&default_queue]["exemptions"] = json!([{"name": "platform-smoke-tests",
        "groups": [crate::trust::EXEMPT_GROUP], "namespaces": ["exempt-group-*"]}]);
    config["queues"][WARN_QUEUE] = warn;
    config["queues"][DEADLINE_QUEUE] = deadline;
    config["queues"][KUBEFLOW_QUEUE] = kubeflow;
    // KubeRay has no built-in identity: the suite names its operator's, as a platform team does.
    for kind in ["RayJob", "RayCluster"] {
        config["match"]["podCreators"][kind] = json!([crate::ray::KUBERAY_OPERATOR]);
    }
    Ok(serde_yaml::to_string(&config)?)
}
