//! The worst day, provoked on the real API server: a webhook whose server is gone, whose
//! certificate the `caBundle` does not trust, or which does not answer in time. Each refusal
//! the API server gives is checked against the runbook (docs/troubleshooting.md, "When the API
//! server cannot reach launchgate"): the cause in the message must be one of its entries, the
//! one for that outage. Each webhook here is `failurePolicy: Fail` with `timeoutSeconds: 1`,
//! for ConfigMaps of this test's namespace only, so nothing else in the suite sees it.

use crate::ctx::Ctx;
use anyhow::{Context, Result, bail, ensure};
use base64::Engine;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use std::time::Duration;

/// The runbook's outage entries: the `### `…`` headings of its outage section, each an exact
/// string the API server prints.
fn runbook_keys() -> Result<Vec<String>> {
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/troubleshooting.md"),
    )?;
    let (_, section) = page
        .split_once("## When the API server cannot reach launchgate")
        .context("docs/troubleshooting.md has no outage section")?;
    let section = section.split("\n## ").next().unwrap_or_default();
    Ok(section
        .lines()
        .filter_map(|l| l.strip_prefix("### `")?.strip_suffix('`'))
        .map(str::to_owned)
        .collect())
}

fn webhook_configurations() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
        ),
        "validatingwebhookconfigurations",
    )
}

/// Registers a fail-closed webhook with `client_config` for this namespace's ConfigMaps,
/// creates one, and returns the API server's refusal.
async fn refusal(ctx: &Ctx, symptom: &str, client_config: Value) -> Result<String> {
    let name = format!("outage-{symptom}-{}", &ctx.ns[ctx.ns.len() - 4..]);
    let hook = format!("{symptom}.outage.launchgate.io");
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": hook,
            "clientConfig": client_config,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["configmaps"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ctx.ns}},
            "objectSelector": {"matchLabels": {"outage": symptom}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 1
        }]
    });
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &webhook_configurations());
    api.create(&PostParams::default(), &serde_json::from_value(config)?)
        .await?;
    let configmaps: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &ctx.ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "ConfigMap"),
            "configmaps",
        ),
    );
    let probe = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"generateName": "probe-", "labels": {"outage": symptom}}
    });
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    // The API server takes the new configuration up within a moment.
    let result = ctx
        .poll(
            &format!("the API server to call the {symptom} webhook"),
            Duration::from_secs(20),
            || async {
                match configmaps
                    .create(&dry_run, &serde_json::from_value(probe.clone())?)
                    .await
                {
                    Err(kube::Error::Api(e)) if e.message.contains(&hook) => Ok(Some(e.message)),
                    _ => Ok(None),
                }
            },
        )
        .await;
    let _ = api.delete(&name, &DeleteParams::default()).await;
    result
}

/// The runbook entry the API server's message is keyed by: the one for `expected`, else fail
/// naming what the message said.
fn entry_for(message: &str, keys: &[String], expected: &str) -> Result<()> {
    ensure!(
        message.contains("failed calling webhook"),
        "the API server's refusal does not say `failed calling webhook`: {message}"
    );
    ensure!(
        keys.iter().any(|k| k == "failed calling webhook"),
        "docs/troubleshooting.md has no entry `failed calling webhook`"
    );
    let found: Vec<&String> = keys
        .iter()
        .filter(|k| *k != "failed calling webhook" && message.contains(k.as_str()))
        .collect();
    if !found.iter().any(|k| *k == expected) {
        bail!(
            "the API server said {message:?}; docs/troubleshooting.md's outage entries {keys:?} \
             do not include {expected:?} (matched: {found:?})"
        );
    }
    Ok(())
}

/// A Service with no endpoints (every launchgate pod down), a stopped server, a `caBundle`
/// that did not sign the serving certificate, and a server that never answers: each refusal
/// names the cause the runbook has an entry for.
pub async fn each_outage_the_api_server_reports_has_a_runbook_entry(ctx: &Ctx) -> Result<()> {
    let keys = runbook_keys()?;

    // Every pod down: the Service has no endpoints.
    let services: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &ctx.ns,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Service"), "services"),
    );
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "launchgate-down"},
                "spec": {"selector": {"app": "launchgate-down"}, "ports": [{"port": 443, "targetPort": 8443}]}
            }))?,
        )
        .await?;
    let ca = launchgate::certs::generate(&["launchgate.invalid".into()], 1)?.ca_pem;
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(&ca);
    let message = refusal(
        ctx,
        "no-endpoints",
        json!({"service": {"namespace": ctx.ns, "name": "launchgate-down", "path": "/validate"},
               "caBundle": ca_bundle}),
    )
    .await?;
    entry_for(&message, &keys, "no endpoints available for service")?;

    // A stopped server: nothing listens at the address.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.local_addr()?.port()
    };
    let message = refusal(
        ctx,
        "stopped",
        json!({"url": format!("https://127.0.0.1:{closed}/validate"), "caBundle": ca_bundle}),
    )
    .await?;
    entry_for(&message, &keys, "connect: connection refused")?;

    // The wrong CA: a server that answers TLS (the API server itself) with a certificate the
    // `caBundle` (another CA) did not sign.
    let kubeconfig: Value = serde_yaml::from_str(&std::fs::read_to_string(&ctx.env.kubeconfig)?)?;
    let server = kubeconfig["clusters"][0]["cluster"]["server"]
        .as_str()
        .context("the suite's kubeconfig names no server")?
        .to_owned();
    let message = refusal(
        ctx,
        "wrong-ca",
        json!({"url": format!("{server}/validate"), "caBundle": ca_bundle}),
    )
    .await?;
    entry_for(
        &message,
        &keys,
        "x509: certificate signed by unknown authority",
    )?;

    // A server that accepts the connection and never answers, past `timeoutSeconds: 1`.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = silent.local_addr()?.port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            open.push(conn);
        }
    });
    let message = refusal(
        ctx,
        "slow",
        json!({"url": format!("https://127.0.0.1:{port}/validate"), "caBundle": ca_bundle}),
    )
    .await;
    held.abort();
    entry_for(&message?, &keys, "context deadline exceeded")?;
    Ok(())
}
