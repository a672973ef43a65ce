//! `serve --register-webhooks` (the chart's `webhook.registration: server`): nothing routes
//! launch workloads to launchgate before a replica is ready, and once registered the
//! validating webhook fails closed only for `deny` queues.

use crate::cluster::{Proc, free_port, tail};
use crate::ctx::{Ctx, manifest};
use crate::native::{containers_mut, create_in};
use crate::webhook::{Launchgate, WARN_QUEUE, suite_config};
use anyhow::{Context, Result, bail, ensure};
use base64::Engine;
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        &format!("{}s", kind.to_lowercase()),
    )
}

/// The webhook configuration `kind` named `name`, if it exists.
async fn configuration(ctx: &Ctx, kind: &str, name: &str) -> Result<Option<Value>> {
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource(kind));
    Ok(api
        .get_opt(name)
        .await?
        .map(serde_json::to_value)
        .transpose()?)
}

/// The configurations' name for this test, and flags registering them for its namespace only.
fn registration(ctx: &Ctx) -> (String, Vec<String>) {
    let name = format!("launchgate-e2e-{}", &ctx.ns[ctx.ns.len() - 4..]);
    let selector = json!({"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [ctx.ns]}
    ]});
    let flags = vec![
        format!("--register-webhooks={name}"),
        format!("--webhook-namespace-selector={selector}"),
    ];
    (name, flags)
}

/// The demo Job in queue `queue` named `name`, asking for `gpus` GPUs a container.
fn job(name: &str, queue: &str, gpus: u32) -> Value {
    let mut job = manifest("job-demo.yaml");
    job["metadata"]["name"] = json!(name);
    job["metadata"]["labels"] = json!({"wandb.ai/monitor": "true", "queue": queue});
    for c in containers_mut(&mut job) {
        c["resources"]["limits"]["nvidia.com/gpu"] = json!(gpus.to_string());
    }
    job
}

/// `launchgate delete-webhooks` (the chart's uninstall hook) for both configurations `name`.
fn uninstall(ctx: &Ctx, name: &str) -> Result<()> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_launchgate"))
        .args(["delete-webhooks", "--mutating", name, "--validating", name])
        .env("KUBECONFIG", &ctx.env.kubeconfig)
        .output()?;
    ensure!(
        out.status.success(),
        "delete-webhooks: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A kubeconfig acting as the ServiceAccount `registrar` of the test's namespace, bound to a
/// ClusterRole with the chart's registration rights only (get, create and patch on the two
/// configurations named `name`); returns it and the cluster-scoped objects to delete.
async fn registrar(ctx: &Ctx, name: &str, dir: &Path) -> Result<(std::path::PathBuf, Vec<Value>)> {
    let sa =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "registrar"}});
    create_in(&ctx.client, &ctx.ns, &sa, false)
        .await?
        .map_err(|e| anyhow::anyhow!("creating the ServiceAccount: {}", e.message))?;
    let rule = |resource: &str| {
        json!({
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": [resource],
            "resourceNames": [name],
            "verbs": ["get", "create", "patch"],
        })
    };
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": format!("{name}-registrar")},
        "rules": [rule("mutatingwebhookconfigurations"), rule("validatingwebhookconfigurations")],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("{name}-registrar")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("{name}-registrar")},
        "subjects": [{"kind": "ServiceAccount", "name": "registrar", "namespace": ctx.ns}],
    });
    let mut made = Vec::new();
    for obj in [role, binding] {
        let resource = crate::ctx::resource_for(&obj)?;
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
        api.create(&Default::default(), &serde_json::from_value(obj.clone())?)
            .await
            .with_context(|| format!("creating {}", obj["kind"]))?;
        made.push(obj);
    }
    let mut kubeconfig: Value =
        serde_yaml::from_str(&std::fs::read_to_string(&ctx.env.kubeconfig)?)?;
    for user in kubeconfig["users"].as_array_mut().into_iter().flatten() {
        user["user"]["as"] = json!(format!("system:serviceaccount:{}:registrar", ctx.ns));
    }
    let path = dir.join("registrar.kubeconfig");
    std::fs::write(&path, serde_json::to_vec_pretty(&kubeconfig)?)?;
    Ok((path, made))
}

/// Deletes the cluster-scoped `objects`.
async fn delete_all(ctx: &Ctx, objects: &[Value]) {
    for obj in objects {
        if let Ok(resource) = crate::ctx::resource_for(obj) {
            let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            let _ = api.delete(name, &Default::default()).await;
        }
    }
}

fn write_certs(dir: &Path, certs: &launchgate::certs::GeneratedCerts) -> Result<()> {
    // The key first: the server reloads a pair only when both files parse and match.
    std::fs::write(dir.join("tls.key"), &certs.key_pem)?;
    std::fs::write(dir.join("tls.crt"), &certs.cert_pem)?;
    std::fs::write(dir.join("ca.crt"), &certs.ca_pem)?;
    Ok(())
}

/// A first install: the server runs but is not ready (its certificate has expired), so nothing
/// is registered and an over-limit launch Job is admitted, not refused. Once a valid
/// certificate arrives the server is ready, registers its webhooks (caBundle from the new CA)
/// with no more rights than the chart grants (get, create and patch on those two objects by
/// name), and the same Job is denied; a Job within the limits comes back mutated. A config in
/// which no queue denies is re-registered with no fail-closed webhook.
pub async fn a_first_install_admits_launch_workloads_until_a_replica_registers(
    ctx: &Ctx,
) -> Result<()> {
    let (name, flags) = registration(ctx);
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("launchgate-config.yaml");
    std::fs::write(&config, suite_config()?)?;
    let hosts = vec!["127.0.0.1".to_string()];
    write_certs(dir.path(), &launchgate::certs::generate(&hosts, -2)?)?;
    let port = free_port()?;
    let admin = free_port()?;
    let mut args = vec![
        "serve".to_string(),
        format!("--listen=127.0.0.1:{port}"),
        format!("--admin-listen=127.0.0.1:{admin}"),
        format!("--config={}", config.display()),
        format!("--tls-cert={}", dir.path().join("tls.crt").display()),
        format!("--tls-key={}", dir.path().join("tls.key").display()),
        format!(
            "--webhook-ca-bundle={}",
            dir.path().join("ca.crt").display()
        ),
        "--reload-interval=1".into(),
        "--log-format=json".into(),
    ];
    args.extend(flags);
    let (kubeconfig, rbac) = registrar(ctx, &name, dir.path()).await?;
    let mut server = Proc::spawn(
        "launchgate-registering",
        Path::new(env!("CARGO_BIN_EXE_launchgate")),
        &args,
        &[("KUBECONFIG", kubeconfig.as_path())],
        dir.path(),
    )?;
    let result = async {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()?;
        let readyz = format!("http://127.0.0.1:{admin}/readyz");
        ctx.wait_for(
            "the server to answer, not ready",
            Duration::from_secs(30),
            || async {
                Ok(match http.get(&readyz).send().await {
                    Ok(r) => r.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE,
                    Err(_) => false,
                })
            },
        )
        .await?;
        for kind in [
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ] {
            ensure!(
                configuration(ctx, kind, &name).await?.is_none(),
                "{kind} {name} registered by a server that is not ready"
            );
        }
        let over = job("over-the-limit", "gpu-queue", 8);
        if let Err(e) = create_in(&ctx.client, &ctx.ns, &over, true).await? {
            bail!(
                "a launch Job was refused before any replica was ready: {}",
                e.message
            );
        }

        // The certificate is renewed: the server becomes ready and registers.
        let fresh = launchgate::certs::generate(&hosts, 30)?;
        write_certs(dir.path(), &fresh)?;
        let expected_ca = base64::engine::general_purpose::STANDARD.encode(&fresh.ca_pem);
        ctx.wait_for(
            "the server to register its webhooks",
            Duration::from_secs(30),
            || async {
                let v = configuration(ctx, "ValidatingWebhookConfiguration", &name).await?;
                let m = configuration(ctx, "MutatingWebhookConfiguration", &name).await?;
                Ok(v.zip(m).is_some_and(|(v, m)| {
                    v["webhooks"][0]["clientConfig"]["caBundle"] == expected_ca.as_str()
                        && m["webhooks"][0]["clientConfig"]["url"]
                            == format!("https://127.0.0.1:{port}/mutate").as_str()
                }))
            },
        )
        .await?;
        ctx.wait_for(
            "the over-limit Job to be denied",
            Duration::from_secs(30),
            || async {
                Ok(match create_in(&ctx.client, &ctx.ns, &over, true).await? {
                    Ok(_) => false,
                    Err(e) => {
                        ensure!(
                            e.code == 403
                                && e.message.contains("exceeds maximum 4 (variable \"gpus\")"),
                            "unexpected denial: {} {}",
                            e.code,
                            e.message
                        );
                        true
                    }
                })
            },
        )
        .await?;
        match create_in(&ctx.client, &ctx.ns, &job("within", "gpu-queue", 1), true).await? {
            Ok(made) => ensure!(
                crate::ctx::mutations(&made).is_some(),
                "a launch Job was not mutated by the registered webhook"
            ),
            Err(e) => bail!("a Job within the limits was refused: {}", e.message),
        }

        // A config change re-registers: with every rule of every queue only warning, no
        // webhook fails closed.
        let mut all_warn: Value = serde_yaml::from_str(&suite_config()?)?;
        for queue in all_warn["queues"]
            .as_object_mut()
            .into_iter()
            .flat_map(|q| q.values_mut())
        {
            queue["limits"]["enforcement"] = json!("warn");
            queue["pytorch"]["onUnwirable"] = json!("warn");
            if queue["guardrails"]["gang"] == "deny" {
                queue["guardrails"]["gang"] = json!("raise");
            }
            queue["guardrails"]["costCeiling"]["enforcement"] = json!("warn");
            queue["limits"]["unverifiableRuntime"] = json!("warn");
        }
        std::fs::write(&config, serde_yaml::to_string(&all_warn)?)?;
        ctx.wait_for(
            "the validating webhooks to follow the config",
            Duration::from_secs(30),
            || async {
                let v = configuration(ctx, "ValidatingWebhookConfiguration", &name).await?;
                Ok(v.is_some_and(|v| {
                    let hooks = v["webhooks"].as_array().cloned().unwrap_or_default();
                    hooks.len() == 3
                        && hooks[0]["name"] == "validate-warn.launchgate.io"
                        && hooks[0]["failurePolicy"] == "Ignore"
                        && hooks[1]["name"] == "validate-scale.launchgate.io"
                        && hooks[1]["failurePolicy"] == "Ignore"
                        && hooks[2]["name"] == "validate-intermediates.launchgate.io"
                        && hooks[2]["failurePolicy"] == "Ignore"
                }))
            },
        )
        .await?;
        Ok(())
    }
    .await;
    server.stop();
    let removed = uninstall(ctx, &name);
    delete_all(ctx, &rbac).await;
    result
        .with_context(|| format!("launchgate log:\n{}", tail(&server.log, 20)))
        .and(removed)
}

/// A queue whose limits only warn but whose cost ceiling denies.
const CEILING_QUEUE: &str = "ceiling-queue";

/// With the registered webhooks' server stopped: a `warn` queue's Job is admitted (its
/// webhook fails open) while a `deny` queue's Job is refused (its webhook fails closed), and so
/// is the Job of a queue whose limits only warn but whose cost ceiling denies (any deny rule
/// fails closed); another team's PyTorchJob still scales (`pytorchjobs/scale`'s own webhook
/// fails open). The configurations outlive the server (other replicas serve) and
/// `delete-webhooks` removes them.
pub async fn a_stopped_webhook_fails_open_only_for_warn_queues(ctx: &Ctx) -> Result<()> {
    let (name, flags) = registration(ctx);
    let dir = tempfile::tempdir()?;
    let mut config: Value = serde_yaml::from_str(&suite_config()?)?;
    let mut ceiling = config["queues"][WARN_QUEUE].clone();
    ceiling["guardrails"]["costCeiling"] =
        json!({"defaultDeadlineSeconds": 3600, "maxGpuHours": 8, "enforcement": "deny"});
    config["queues"][CEILING_QUEUE] = ceiling;
    let mut server = Launchgate::start_with(
        dir.path(),
        Some(&ctx.env.kubeconfig),
        "127.0.0.1",
        &serde_yaml::to_string(&config)?,
        &flags,
    )
    .await?;
    let result = async {
        let deny_hook = "validate-deny.launchgate.io";
        let warn_hook = "validate-warn.launchgate.io";
        ctx.wait_for(
            "the split validating webhooks",
            Duration::from_secs(30),
            || async {
                let v = configuration(ctx, "ValidatingWebhookConfiguration", &name).await?;
                Ok(v.is_some_and(|v| {
                    let hooks: Vec<(&str, &str)> = v["webhooks"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|h| {
                            (
                                h["name"].as_str().unwrap_or_default(),
                                h["failurePolicy"].as_str().unwrap_or_default(),
                            )
                        })
                        .collect();
                    hooks
                        == [
                            (deny_hook, "Fail"),
                            (warn_hook, "Ignore"),
                            ("validate-scale.launchgate.io", "Ignore"),
                            ("validate-intermediates.launchgate.io", "Fail"),
                        ]
                }))
            },
        )
        .await?;
        // Both queues' Jobs reach the running webhook (each through its own validating hook):
        // the deny queue's is denied, the warn queue's judged by the open webhook (a warning,
        // counted in launchgate's metrics; a call that timed out would have been ignored).
        let warned = job("warned", WARN_QUEUE, 8);
        let metrics_client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(server.ca_pem.as_bytes())?)
            .tls_built_in_root_certs(false)
            .build()?;
        let metrics_url = format!("{}/metrics", server.base);
        ctx.wait_for(
            "both queues' Jobs to be judged by their webhooks",
            Duration::from_secs(30),
            || async {
                let d =
                    create_in(&ctx.client, &ctx.ns, &job("probe", "gpu-queue", 8), true).await?;
                let w = create_in(&ctx.client, &ctx.ns, &warned, true).await?;
                let metrics = metrics_client
                    .get(&metrics_url)
                    .send()
                    .await?
                    .text()
                    .await?;
                let warned_counted = metrics.lines().any(|l| {
                    l.starts_with("launchgate_decisions_total{")
                        && l.contains("endpoint=\"validate\"")
                        && l.contains(&format!("queue=\"{WARN_QUEUE}\""))
                        && l.contains("outcome=\"warned\"")
                });
                Ok(d.is_err_and(|e| e.code == 403)
                    && w.is_ok_and(|w| crate::ctx::mutations(&w).is_some())
                    && warned_counted)
            },
        )
        .await?;

        // Another team's PyTorchJob (no launch label), to scale while launchgate is down.
        let mut elastic = manifest("ptjob.yaml");
        elastic["metadata"]["name"] = json!("elastic-b");
        elastic["metadata"]["labels"] = json!({"team": "b"});
        for role in ["Master", "Worker"] {
            elastic["spec"]["pytorchReplicaSpecs"][role]["template"]["metadata"]["labels"] =
                json!({"team": "b"});
        }
        let elastic = ctx.create(&elastic, false).await?;
        ensure!(server.stop().is_some(), "the webhook process did not stop");
        // pytorchjobs/scale fails open: an outage never stops another team's scaling.
        ctx.api_for(&elastic)?
            .patch_scale(
                "elastic-b",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"replicas": 8}})),
            )
            .await
            .context("scaling another team's PyTorchJob while launchgate was down")?;
        for kind in [
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ] {
            ensure!(
                configuration(ctx, kind, &name).await?.is_some(),
                "{kind} {name} deleted when one replica stopped"
            );
        }
        let admitted = match create_in(&ctx.client, &ctx.ns, &warned, false).await? {
            Ok(stored) => stored,
            Err(e) => bail!(
                "a warn queue's Job was refused while the webhook was down: {}",
                e.message
            ),
        };
        ensure!(
            crate::ctx::mutations(&admitted).is_none(),
            "the webhook answered although it was stopped"
        );
        for (queue, what) in [
            ("gpu-queue", "a deny queue's Job"),
            (
                CEILING_QUEUE,
                "the Job of a warn queue whose cost ceiling denies",
            ),
        ] {
            match create_in(
                &ctx.client,
                &ctx.ns,
                &job(&format!("denied-{queue}"), queue, 1),
                false,
            )
            .await?
            {
                Ok(_) => bail!("{what} was admitted while its webhook was down"),
                Err(e) => ensure!(
                    e.message.contains(deny_hook) && e.message.contains("failed calling webhook"),
                    "{what}: unexpected refusal: {} {}",
                    e.code,
                    e.message
                ),
            }
        }
        uninstall(ctx, &name)?;
        for kind in [
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ] {
            ensure!(
                configuration(ctx, kind, &name).await?.is_none(),
                "{kind} {name} left after delete-webhooks"
            );
        }
        Ok(())
    }
    .await;
    server.stop();
    if result.is_err() {
        let _ = uninstall(ctx, &name);
    }
    result
}

/// An outage never blocks the Job controller: with the registered webhooks' server stopped
/// (the validating webhook of the deny queue fails closed), a launch Job's pod still takes a
/// label and an annotation, and once the pod has succeeded the real Job controller removes its
/// `batch.kubernetes.io/job-tracking` finalizer and completes the Job. A pod UPDATE that changes
/// its spec (an image) and a new launch Job still fail closed.
pub async fn a_stopped_webhook_never_blocks_the_job_controller(ctx: &Ctx) -> Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Patch, PatchParams};
    const TRACKING: &str = "batch.kubernetes.io/job-tracking";
    let (name, flags) = registration(ctx);
    let dir = tempfile::tempdir()?;
    let mut server = Launchgate::start_with(
        dir.path(),
        Some(&ctx.env.kubeconfig),
        "127.0.0.1",
        &suite_config()?,
        &flags,
    )
    .await?;
    let result = async {
        let deny_hook = "validate-deny.launchgate.io";
        ctx.wait_for(
            "the webhooks to be registered and to act",
            Duration::from_secs(30),
            || async {
                let v = configuration(ctx, "ValidatingWebhookConfiguration", &name).await?;
                let denied =
                    create_in(&ctx.client, &ctx.ns, &job("probe", "gpu-queue", 8), true).await?;
                Ok(v.is_some() && denied.is_err_and(|e| e.message.contains(deny_hook)))
            },
        )
        .await?;
        ctx.create(&job("tracked", "gpu-queue", 1), false).await?;
        let pods = ctx
            .wait_for_pods("batch.kubernetes.io/job-name=tracked", 1)
            .await?;
        let pod = &pods[0];
        let pod_name = pod["metadata"]["name"].as_str().context("pod name")?.to_string();
        ensure!(
            pod["metadata"]["finalizers"].to_string().contains(TRACKING),
            "the Job controller's pod has no tracking finalizer: {}",
            pod["metadata"]
        );
        ensure!(server.stop().is_some(), "the webhook process did not stop");

        let pods_api: Api<Pod> = ctx.api();
        let patch = |p: Value| Patch::Merge(p);
        pods_api
            .patch(
                &pod_name,
                &PatchParams::default(),
                &patch(json!({"metadata": {"labels": {"e2e.launchgate.io/seen": "yes"},
                    "annotations": {"e2e.launchgate.io/note": "while launchgate is down"}}})),
            )
            .await
            .context("a label and annotation update was refused while the webhook was down")?;
        let mut image = serde_json::to_value(pods_api.get(&pod_name).await?)?;
        image["spec"]["containers"][0]["image"] = json!("busybox:1.37");
        match pods_api
            .replace(&pod_name, &Default::default(), &serde_json::from_value(image)?)
            .await
        {
            Ok(p) => {
                let v = configuration(ctx, "ValidatingWebhookConfiguration", &name).await?;
                bail!(
                    "a pod image change was admitted while the fail-closed webhook was down: {}\nVWC: {}",
                    serde_json::to_value(p)?["spec"]["containers"][0]["image"],
                    serde_json::to_string_pretty(&v)?
                )
            }
            Err(e) => ensure!(
                e.to_string().contains(deny_hook) && e.to_string().contains("failed calling webhook"),
                "unexpected refusal of the image change: {e}"
            ),
        }
        match create_in(&ctx.client, &ctx.ns, &job("refused", "gpu-queue", 1), false).await? {
            Ok(_) => bail!("a deny queue's Job was admitted while its webhook was down"),
            Err(e) => ensure!(
                e.message.contains(deny_hook) && e.message.contains("failed calling webhook"),
                "unexpected refusal: {} {}",
                e.code,
                e.message
            ),
        }

        // Play the kubelet: the pod succeeds; the Job controller does the rest.
        let current = serde_json::to_value(pods_api.get(&pod_name).await?)?;
        crate::guardrails::finish_pod(ctx, &current, "Succeeded", 0, false).await?;
        ctx.wait_for(
            "the Job controller to complete the Job",
            crate::ctx::CONTROLLER_WAIT,
            || async { crate::guardrails::condition(ctx, "tracked", "Complete").await },
        )
        .await?;
        let after = serde_json::to_value(pods_api.get(&pod_name).await?)?;
        ensure!(
            !after["metadata"]["finalizers"].to_string().contains(TRACKING),
            "the tracking finalizer is still there: {}",
            after["metadata"]
        );
        Ok(())
    }
    .await;
    server.stop();
    let removed = uninstall(ctx, &name);
    result.and(removed)
}
