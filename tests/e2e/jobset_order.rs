//! JobSet's own defaulting webhook and launchgate's, in either order: the same JobSet.
//!
//! JobSet's webhook (`pkg/webhooks/jobset_webhook.go`, `Default`) runs on the API server next to
//! launchgate's. Which goes first depends on the webhook configurations' names; launchgate is
//! reinvoked (`IfNeeded`) when a later webhook changes the object, JobSet's is not. The test
//! registers a stand-in for JobSet's webhook — the same defaults, served over HTTPS on loopback —
//! once before launchgate and once after it, each for its own namespace, creates the same
//! JobSet in both, and compares what the API server stored.

use crate::ctx::Ctx;
use anyhow::{Context, Result, ensure};
use axum::Json;
use axum::routing::post;
use base64::Engine;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use std::sync::Arc;

/// What JobSet's `Default` does to a JobSet (v0.12).
pub fn jobset_defaults(js: &mut Value) {
    let spec = &mut js["spec"];
    if spec.get("successPolicy").is_none() {
        spec["successPolicy"] = json!({"operator": "All"});
    }
    if spec.get("startupPolicy").is_none() {
        spec["startupPolicy"] = json!({"startupPolicyOrder": "AnyOrder"});
    }
    for rjob in spec["replicatedJobs"].as_array_mut().into_iter().flatten() {
        let job = &mut rjob["template"]["spec"];
        if job.get("completionMode").is_none() {
            job["completionMode"] = json!("Indexed");
        }
        let pod = &mut job["template"]["spec"];
        if pod.get("restartPolicy").is_none() {
            pod["restartPolicy"] = json!("OnFailure");
        }
    }
    if spec.get("network").is_none() {
        spec["network"] = json!({});
    }
    let network = &mut spec["network"];
    if network.get("enableDNSHostnames").is_none() {
        network["enableDNSHostnames"] = json!(true);
    }
    if network.get("publishNotReadyAddresses").is_none() {
        network["publishNotReadyAddresses"] = json!(true);
    }
}

async fn review(Json(review): Json<Value>) -> Json<Value> {
    let uid = review["request"]["uid"].clone();
    let before = review["request"]["object"].clone();
    let mut after = before.clone();
    jobset_defaults(&mut after);
    let patch = json_patch::diff(&before, &after);
    let mut response = json!({"uid": uid, "allowed": true});
    if !patch.0.is_empty() {
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(
            base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&patch).unwrap())
        );
    }
    Json(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
    )
}

/// Serves the stand-in on 127.0.0.1; returns its URL and CA bundle (PEM).
async fn serve() -> Result<(String, String)> {
    let certs = launchgate::certs::generate(&["127.0.0.1".to_string()], 1)?;
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(certs.cert_pem.as_bytes()).collect::<Result<_, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(certs.key_pem.as_bytes())?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(chain, key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("https://{}/mutate", listener.local_addr()?);
    let app = axum::Router::new().route("/mutate", post(review));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let app = app.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                        .await;
                }
            });
        }
    });
    Ok((url, certs.ca_pem))
}

fn jobset() -> Value {
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "ddp", "labels": {"wandb.ai/monitor": "true"}},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {
            "parallelism": 2, "completions": 2,
            "template": {"spec": {"containers": [{"name": "train", "image": "acme/train:1",
                "command": ["torchrun", "train.py"]}]}}}}}]}})
}

/// The JobSet as stored, without what differs between two creates (namespace, uid, times).
fn comparable(stored: &Value) -> Value {
    let mut v = crate::workloads::comparable(stored);
    if let Some(meta) = v["metadata"].as_object_mut() {
        meta.remove("namespace");
    }
    v
}

/// The same JobSet, with JobSet's defaulting webhook registered before launchgate's and after
/// it: the API server stores the same object, wired (its record) and hardened.
pub async fn jobset_defaults_before_or_after_launchgate_give_the_same_jobset(
    ctx: &Ctx,
) -> Result<()> {
    let (url, ca) = serve().await?;
    let after_ctx = Ctx::new(ctx.env.clone(), "jobset-defaults-after-launchgate", true).await?;
    let result = async {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                "MutatingWebhookConfiguration",
            ),
            "mutatingwebhookconfigurations",
        );
        let configs: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
        // Configurations run in name order: "a-…" before "launchgate-e2e-…", "zz-…" after.
        let mut names = Vec::new();
        for (name, ns) in [
            (format!("a-jobset-defaults-{}", ctx.ns), &ctx.ns),
            (
                format!("zz-jobset-defaults-{}", after_ctx.ns),
                &after_ctx.ns,
            ),
        ] {
            let config = json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration", "metadata": {"name": name},
                "webhooks": [{"name": "mjobset.x-k8s.io", "admissionReviewVersions": ["v1"],
                    "sideEffects": "None", "failurePolicy": "Fail", "reinvocationPolicy": "Never",
                    "clientConfig": {"url": url,
                        "caBundle": base64::engine::general_purpose::STANDARD.encode(&ca)},
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                    "rules": [{"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"],
                        "resources": ["jobsets"], "operations": ["CREATE", "UPDATE"]}]}]});
            configs
                .create(&PostParams::default(), &serde_json::from_value(config)?)
                .await
                .with_context(|| format!("registering {name}"))?;
            names.push(name);
        }
        let outcome = async {
            // The API server picks up new configurations from an informer.
            let mut stored = Vec::new();
            for c in [ctx, &after_ctx] {
                let probe = {
                    let mut p = jobset();
                    p["metadata"]["name"] = json!("probe");
                    p
                };
                c.wait_for(
                    "the JobSet webhook stand-in",
                    std::time::Duration::from_secs(20),
                    || async {
                        let dry = c.create(&probe, true).await?;
                        Ok(dry.pointer("/spec/network/enableDNSHostnames").is_some())
                    },
                )
                .await?;
                stored.push(c.create(&jobset(), false).await?);
            }
            Ok::<_, anyhow::Error>(stored)
        }
        .await;
        for name in &names {
            let _ = configs.delete(name, &Default::default()).await;
        }
        let stored = outcome?;
        let (first, last) = (comparable(&stored[0]), comparable(&stored[1]));
        ensure!(
            first == last,
            "JobSet defaults before launchgate:\n{first}\nafter launchgate:\n{last}"
        );
        let template = &first["spec"]["replicatedJobs"][0]["template"]["spec"]["template"];
        ensure!(
            template["metadata"]["annotations"]["launchgate.io/pytorch-wiring"]
                .as_str()
                .is_some_and(|r| r.contains("\"nnodes\":4")),
            "no wiring record: {template}"
        );
        ensure!(
            template["spec"]["restartPolicy"] == "OnFailure"
                && template["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"]
                    == false,
            "{template}"
        );
        Ok(())
    }
    .await;
    after_ctx.cleanup().await;
    result
}
