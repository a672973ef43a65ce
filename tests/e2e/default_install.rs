//! A default install touches only launch workloads. The chart is rendered with its defaults
//! (`scripts/helm_check.py`, the real Helm library): launchgate serves the config it renders
//! into its ConfigMap with the settings its Deployment passes (cluster lookups, Events, and
//! `webhook.registration: server`: the server registers the webhook configurations itself —
//! rules, selectors, `matchConditions`, the fail-open scale webhook — here by URL, for one
//! namespace). Ordinary workloads of other teams, with the labels such workloads carry
//! (`queue`, `app`, `team`), are then stored exactly as the same objects are in a twin namespace
//! launchgate does not see: nothing mutated, nothing denied, another team's PyTorchJob scaled by
//! the HPA's identity.

use crate::ctx::{Ctx, manifest, mutations};
use crate::native_rbac::render_chart;
use crate::webhook::Launchgate;
use anyhow::{Context, Result, bail, ensure};
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use std::time::Duration;

/// The Horizontal Pod Autoscaler's identity, as kube-controller-manager's HPA controller
/// sends its Scale updates.
const HPA: &str = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";
/// The CronJob controller's identity.
const CRONJOB_CONTROLLER: &str = "system:serviceaccount:kube-system:cronjob-controller";
/// The ReplicaSet controller's identity (a Deployment's pods).
const REPLICASET_CONTROLLER: &str = "system:serviceaccount:kube-system:replicaset-controller";
/// The groups of a kube-system service account.
const KUBE_SYSTEM_GROUPS: [&str; 2] = [
    "system:serviceaccounts",
    "system:serviceaccounts:kube-system",
];

/// Environment the chart's Deployment sets that is the pod's own plumbing, which the harness
/// provides itself: where it listens and logs, its serving certificate, its identity, and how
/// the API server reaches it (a Service; here the URL the server derives from where it
/// listens, with its development CA).
const PLUMBING: [&str; 15] = [
    "LAUNCHGATE_LISTEN",
    "LAUNCHGATE_ADMIN_LISTEN",
    "LAUNCHGATE_CONFIG",
    "LAUNCHGATE_TLS_CERT",
    "LAUNCHGATE_TLS_KEY",
    "LAUNCHGATE_LOG_FORMAT",
    "LAUNCHGATE_LOG_LEVEL",
    "LAUNCHGATE_SHUTDOWN_DELAY",
    "LAUNCHGATE_DRAIN_TIMEOUT",
    "LAUNCHGATE_POD_NAME",
    "LAUNCHGATE_POD_NAMESPACE",
    "LAUNCHGATE_POD_UID",
    "LAUNCHGATE_WEBHOOK_SERVICE",
    "LAUNCHGATE_WEBHOOK_CA_BUNDLE",
    "LAUNCHGATE_WEBHOOK_CA_BUNDLE_BASE64",
];

/// The `serve` flags the chart's Deployment sets through its environment (every
/// `LAUNCHGATE_*` variable with a value, but the [`PLUMBING`]), each as its flag: cluster
/// lookups, Events, registering the webhooks (their rules, selectors, failure policies,
/// `matchConditions`). The webhooks' namespace selector is the chart's narrowed to `ns`, so
/// other tests' namespaces never reach this server.
pub(crate) fn serve_flags(objects: &[Value], ns: &str) -> Result<Vec<String>> {
    let flags = deployment_flags(objects, ns)?;
    for needed in ["--cluster-lookups=", "--events=", "--register-webhooks="] {
        ensure!(
            flags.iter().any(|f| f.starts_with(needed)),
            "the rendered Deployment sets no {needed}: {flags:?}"
        );
    }
    Ok(flags)
}

/// The `serve` flags of the Deployment among `objects` (every `LAUNCHGATE_*` variable with a
/// value, but the [`PLUMBING`]), the webhooks' namespace selector narrowed to `ns`.
pub(crate) fn deployment_flags(objects: &[Value], ns: &str) -> Result<Vec<String>> {
    let env = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .and_then(|d| d.pointer("/spec/template/spec/containers/0/env"))
        .and_then(Value::as_array)
        .context("the chart rendered no Deployment with an environment")?;
    let mut flags = Vec::new();
    for var in env {
        let (Some(name), Some(value)) = (var["name"].as_str(), var["value"].as_str()) else {
            continue;
        };
        let Some(option) = name.strip_prefix("LAUNCHGATE_") else {
            continue;
        };
        if PLUMBING.contains(&name) {
            continue;
        }
        let value = if name == "LAUNCHGATE_WEBHOOK_NAMESPACE_SELECTOR" {
            let mut selector: Value = serde_json::from_str(value)?;
            selector["matchExpressions"]
                .as_array_mut()
                .context("the chart's namespace selector has no matchExpressions")?
                .push(
                    json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": [ns]}),
                );
            selector.to_string()
        } else {
            value.to_string()
        };
        flags.push(format!(
            "--{}={value}",
            option.to_lowercase().replace('_', "-")
        ));
    }
    Ok(flags)
}

fn admission_resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        &format!("{}s", kind.to_lowercase()),
    )
}

/// What is compared of a stored object: its labels, annotations, owner references and spec,
/// with what differs between two namespaces by construction (the namespace, the uids the API
/// server gave, the names of the service account token volumes) written alike.
fn comparable(object: &Value, ns: &str, uids: &[String]) -> Result<Value> {
    let meta = &object["metadata"];
    let mut text = json!({
        "kind": object["kind"],
        "labels": meta["labels"],
        "annotations": meta["annotations"],
        "ownerReferences": meta["ownerReferences"],
        "spec": object["spec"],
    })
    .to_string();
    let mut generated: Vec<String> = uids.to_vec();
    generated.extend(meta["uid"].as_str().map(str::to_string));
    // The service account admission plugin names each pod's token volume at random.
    for volume in object["spec"]["volumes"].as_array().into_iter().flatten() {
        if let Some(name) = volume["name"]
            .as_str()
            .filter(|n| n.starts_with("kube-api-access-"))
        {
            generated.push(name.to_string());
        }
    }
    for value in generated.iter().filter(|v| !v.is_empty()) {
        text = text.replace(value.as_str(), "<generated>");
    }
    text = text.replace(ns, "<namespace>");
    Ok(serde_json::from_str(&text)?)
}

/// One ordinary workload, created in both namespaces.
struct Workload {
    what: &'static str,
    object: Value,
    /// Sent as this controller (with the kube-system service accounts' groups), else as the
    /// suite's admin.
    by: Option<&'static str>,
}

/// Creates `object` in `ctx`'s namespace as `by` (or the admin): the stored object.
async fn create(ctx: &Ctx, object: &Value, by: Option<&str>) -> Result<Value> {
    let groups: &[&str] = if by.is_some() {
        &KUBE_SYSTEM_GROUPS
    } else {
        &[]
    };
    let (status, body, _) = ctx
        .create_raw_impersonating(object, false, by, groups)
        .await?;
    ensure!(
        status == 201,
        "creating {} {} in {}: {status} {body}",
        object["kind"],
        object["metadata"]["name"],
        ctx.ns
    );
    Ok(body)
}

/// Updates the `pytorchjobs/scale` of `name` to `replicas` as the HPA does (read the Scale,
/// write it back with the new count): the HTTP status and the body.
async fn hpa_scale(ctx: &Ctx, name: &str, replicas: i64) -> Result<(u16, Value)> {
    let url = format!(
        "/apis/kubeflow.org/v1/namespaces/{}/pytorchjobs/{name}/scale",
        ctx.ns
    );
    let get = http::Request::get(&url).body(Vec::new())?;
    let mut scale: Value = ctx.client.request(get).await?;
    scale["spec"]["replicas"] = json!(replicas);
    let (status, body, _) = ctx
        .send_as(
            http::Request::put(&url),
            &scale,
            Some(HPA),
            &KUBE_SYSTEM_GROUPS,
        )
        .await?;
    Ok((status, body))
}

/// The ordinary workloads of other teams (`cronjob_uid`: the CronJob that owns the Job its
/// controller makes, in that namespace).
fn ordinary(cronjob_uid: &str) -> Vec<Workload> {
    let container = json!([{"name": "main", "image": "busybox:1.36", "command": ["true"]}]);
    let job = |name: &str, labels: Value| {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": labels.clone()},
            "spec": {"template": {"metadata": {"labels": labels},
                "spec": {"restartPolicy": "Never", "containers": container.clone()}}}})
    };
    let mut cron_made = job("nightly-29000000", json!({"app": "nightly", "queue": "x"}));
    cron_made["metadata"]["annotations"] =
        json!({"batch.kubernetes.io/cronjob-scheduled-timestamp": "2025-01-01T00:00:00Z"});
    cron_made["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1",
        "kind": "CronJob", "name": "nightly", "uid": cronjob_uid,
        "controller": true, "blockOwnerDeletion": true}]);
    let web = json!({"app": "web", "team": "b", "queue": "x"});
    let mut rs_pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-7d9c5b-", "labels": web.clone(),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web-7d9c5b", "uid": "3c1d9e3e-1111-4a5b-9c7d-000000000001",
                "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"containers": container.clone()}});
    rs_pod["metadata"]["labels"]["pod-template-hash"] = json!("7d9c5b");
    let mut pytorchjob = manifest("ptjob.yaml");
    pytorchjob["metadata"]["name"] = json!("elastic-b");
    pytorchjob["metadata"]["labels"] = json!({"team": "b", "queue": "x"});
    for role in ["Master", "Worker"] {
        pytorchjob["spec"]["pytorchReplicaSpecs"][role]["template"]["metadata"]["labels"] =
            json!({"team": "b", "queue": "x"});
    }
    let mut ray_spec = manifest("rayjob.yaml")["spec"]["rayClusterSpec"].clone();
    for template in [
        "/headGroupSpec/template/metadata",
        "/workerGroupSpecs/0/template/metadata",
    ] {
        if let Some(meta) = ray_spec.pointer_mut(template) {
            *meta = json!({"labels": {"team": "b", "queue": "x"}});
        }
    }
    vec![
        Workload {
            what: "a Job labelled queue: x",
            object: job("etl-x", json!({"queue": "x"})),
            by: None,
        },
        Workload {
            what: "a Job whose `queue` label names a configured queue",
            object: job(
                "etl-gpu",
                json!({"queue": "gpu-queue", "app": "etl", "team": "data"}),
            ),
            by: None,
        },
        Workload {
            what: "a Job labelled app and team",
            object: job("web-batch", json!({"app": "web", "team": "b"})),
            by: None,
        },
        Workload {
            what: "a Job as a CronJob's controller makes it",
            object: cron_made,
            by: Some(CRONJOB_CONTROLLER),
        },
        Workload {
            what: "a Deployment",
            object: json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "labels": web.clone()},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": web.clone()},
                        "spec": {"containers": container.clone()}}}}),
            by: None,
        },
        Workload {
            what: "a pod as a Deployment's ReplicaSet controller makes it",
            object: rs_pod,
            by: Some(REPLICASET_CONTROLLER),
        },
        Workload {
            what: "a RayCluster",
            object: json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                "metadata": {"name": "ray-b", "labels": {"team": "b", "queue": "x"}},
                "spec": ray_spec}),
            by: None,
        },
        Workload {
            what: "another team's PyTorchJob",
            object: pytorchjob,
            by: None,
        },
    ]
}

/// The chart installed with its defaults changes nothing outside launch workloads: every
/// ordinary workload is stored as its twin in a namespace launchgate does not see, and the
/// HPA's Scale of another team's PyTorchJob is stored as there; a launch Job is still mutated
/// (the registration is live).
pub async fn a_default_install_touches_only_launch_workloads(ctx: &Ctx) -> Result<()> {
    let id = &ctx.ns[ctx.ns.len() - 4..];
    let release = format!("launchgate-{id}");
    // The release lives in a namespace of its own, as the chart's README installs it: the
    // chart's webhooks leave out its release namespace.
    let objects = render_chart(&release, "launchgate-system", &json!({}))?;
    let config = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["data"]["config.yaml"].is_string())
        .and_then(|o| o["data"]["config.yaml"].as_str())
        .context("the chart rendered no config.yaml")?
        .to_string();
    let flags = serve_flags(&objects, &ctx.ns)?;
    let dir = tempfile::tempdir()?;
    let mut server = Launchgate::start_with(
        dir.path(),
        Some(&ctx.env.kubeconfig),
        "127.0.0.1",
        &config,
        &flags,
    )
    .await?;
    let twin = Ctx::new(ctx.env.clone(), "default-install-twin", false).await?;
    let result = async {
        // The registration is live: a launch Job (the W&B agent's label, and `queue` naming
        // its queue) comes back mutated, in the queue its `queue` label names.
        let launch = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "launch", "labels": {"wandb.ai/monitor": "true", "queue": "gpu-queue"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "train", "image": "busybox:1.36"}]}}}});
        ctx.wait_for(
            "the chart's webhooks to take effect",
            Duration::from_secs(30),
            || async { Ok(mutations(&ctx.create(&launch, true).await?).is_some()) },
        )
        .await?;
        let stored = create(ctx, &launch, None).await?;
        ensure!(
            stored["metadata"]["labels"]["launchgate.io/queue"] == "gpu-queue"
                && stored["spec"]["backoffLimit"] == 0,
            "a launch Job was not judged in the queue its label names: {stored}"
        );
        let twin_launch = create(&twin, &launch, None).await?;
        ensure!(
            comparable(&stored, &ctx.ns, &[])? != comparable(&twin_launch, &twin.ns, &[])?,
            "a launch Job was stored as without launchgate: the comparison below could not fail"
        );

        // The CronJob whose controller makes a Job, in both namespaces.
        let cronjob = json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "nightly", "labels": {"app": "nightly", "queue": "x"}},
            "spec": {"schedule": "0 3 * * *", "suspend": true, "jobTemplate": {
                "metadata": {"labels": {"app": "nightly", "queue": "x"}},
                "spec": {"template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36"}]}}}}}});
        let here_cron = create(ctx, &cronjob, None).await?;
        let there_cron = create(&twin, &cronjob, None).await?;
        let uid = |o: &Value| o["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        let (here_uid, there_uid) = (uid(&here_cron), uid(&there_cron));
        ensure!(
            comparable(&here_cron, &ctx.ns, &[])? == comparable(&there_cron, &twin.ns, &[])?,
            "the CronJob was stored differently"
        );

        let here_all = ordinary(&here_uid);
        let there_all = ordinary(&there_uid);
        let mut differences = Vec::new();
        for (here, there) in here_all.iter().zip(&there_all) {
            let stored = create(ctx, &here.object, here.by).await?;
            let without = create(&twin, &there.object, there.by).await?;
            if mutations(&stored).is_some()
                || comparable(&stored, &ctx.ns, std::slice::from_ref(&here_uid))?
                    != comparable(&without, &twin.ns, std::slice::from_ref(&there_uid))?
            {
                differences.push(format!(
                    "{}:\n  with launchgate:    {}\n  without launchgate: {}",
                    here.what,
                    comparable(&stored, &ctx.ns, std::slice::from_ref(&here_uid))?,
                    comparable(&without, &twin.ns, std::slice::from_ref(&there_uid))?
                ));
            }
        }

        // The HPA scales another team's PyTorchJob: stored as without launchgate.
        let (status, body) = hpa_scale(ctx, "elastic-b", 8).await?;
        let (twin_status, twin_body) = hpa_scale(&twin, "elastic-b", 8).await?;
        ensure!(
            twin_status == 200,
            "the HPA's Scale without launchgate: {twin_status} {twin_body}"
        );
        if status != twin_status {
            differences.push(format!(
                "the HPA's Scale of another team's PyTorchJob: {status} {body}"
            ));
        }
        let pytorchjob = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"});
        let here_job = ctx.get(&pytorchjob, "elastic-b").await?.context("elastic-b")?;
        let there_job = twin.get(&pytorchjob, "elastic-b").await?.context("elastic-b")?;
        if comparable(&here_job, &ctx.ns, &[])? != comparable(&there_job, &twin.ns, &[])? {
            differences.push(format!(
                "another team's PyTorchJob after the HPA's Scale:\n  with launchgate:    {}\n  without launchgate: {}",
                comparable(&here_job, &ctx.ns, &[])?,
                comparable(&there_job, &twin.ns, &[])?
            ));
        }
        if !differences.is_empty() {
            bail!(
                "a default install changed what it should not have:\n{}",
                differences.join("\n")
            );
        }
        server.check_running()
    }
    .await;
    server.stop();
    // The pods registered the configurations under the release's name; the chart's
    // uninstall hook would remove them.
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &admission_resource(kind));
        let _ = api.delete(&release, &Default::default()).await;
    }
    twin.cleanup().await;
    result.with_context(|| {
        format!(
            "launchgate log:\n{}",
            crate::cluster::tail(&dir.path().join("launchgate.log"), 30)
        )
    })
}
