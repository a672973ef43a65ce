//! `serve --register-webhooks=<name>`: the server registers its own webhook configurations.
//!
//! Nothing is registered until this server is ready (HTTPS listener serving, policy loaded,
//! certificate valid — what `/readyz` says), so a first install never routes launch workloads
//! to a webhook that cannot answer. Then, and whenever the desired objects change (a config
//! reload changes the queues, a rotated CA changes the caBundle) or `--webhook-resync-seconds`
//! (a minute) have passed (a deleted or edited configuration is restored), both configurations
//! are server-side applied with the field manager [`FIELD_MANAGER`]. They are never deleted on
//! shutdown: other replicas still serve (`launchgate delete-webhooks` removes them on
//! uninstall). A failed apply is logged and retried at the next check; serving is unaffected.
//!
//! While the emergency bypass is on ([`super::bypass`]) nothing is applied, ready or not: a
//! configuration that exists and still holds webhooks has them removed (the pods may `patch`
//! it, not delete it), again every resync period, and one that is gone stays gone. Once the
//! bypass is lifted both are applied at once.

use super::AppState;
use super::bypass::Observed;
use super::native_sync::resource;
use super::options::RegistrationOptions;
use crate::native::webhooks;
use anyhow::{Context, Result};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The field manager of the registered configurations.
pub const FIELD_MANAGER: &str = "launchgate-webhook-registration";

/// Where the caBundle comes from.
pub(crate) enum CaSource {
    /// A PEM file, read at every check.
    File(PathBuf),
    /// Given inline, or the generated development CA.
    Pem(String),
}

impl CaSource {
    fn read(&self) -> Result<String> {
        match self {
            CaSource::File(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading the CA bundle {}", path.display()))?;
                anyhow::ensure!(
                    text.contains("-----BEGIN CERTIFICATE-----"),
                    "the CA bundle {} holds no PEM certificate",
                    path.display()
                );
                Ok(text)
            }
            CaSource::Pem(pem) => Ok(pem.clone()),
        }
    }
}

/// The caBundle to register: the current CA, and the one before it while this process has
/// seen the CA change (replicas still serving a certificate of the old CA keep working until
/// the kubelet gives them the new one).
#[derive(Default)]
struct Bundle {
    current: String,
    previous: Option<String>,
}

impl Bundle {
    fn update(&mut self, pem: String) -> String {
        if !self.current.is_empty() && self.current != pem {
            self.previous = Some(std::mem::replace(&mut self.current, pem));
        } else {
            self.current = pem;
        }
        match &self.previous {
            Some(old) if !self.current.contains(old.trim()) => {
                format!("{}\n{}\n", self.current.trim_end(), old.trim())
            }
            _ => self.current.clone(),
        }
    }
}

/// Server-side applies `objects` (webhook configurations).
pub async fn apply(client: &kube::Client, objects: &[Value]) -> Result<()> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind));
        api.patch(name, &params, &Patch::Apply(object))
            .await
            .with_context(|| format!("applying {kind} {name}"))?;
    }
    Ok(())
}

/// Removes every webhook from the configurations `name` that exist (a JSON merge patch of
/// `webhooks: null`, which the pods' `patch` right allows); creates nothing. How many
/// configurations it emptied.
pub async fn withdraw(client: &kube::Client, name: &str) -> Result<usize> {
    let mut emptied = 0;
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind));
        let Some(live) = api
            .get_opt(name)
            .await
            .with_context(|| format!("reading {kind} {name}"))?
        else {
            continue;
        };
        let holds_webhooks = live
            .data
            .get("webhooks")
            .and_then(Value::as_array)
            .is_some_and(|hooks| !hooks.is_empty());
        if holds_webhooks {
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            };
            api.patch(
                name,
                &params,
                &Patch::Merge(serde_json::json!({"webhooks": null})),
            )
            .await
            .with_context(|| format!("withdrawing the webhooks of {kind} {name}"))?;
            emptied += 1;
        }
    }
    Ok(emptied)
}

/// What to register, and where from.
pub(crate) struct Registration {
    pub(crate) client: kube::Client,
    /// The configurations' name.
    pub(crate) name: String,
    pub(crate) options: RegistrationOptions,
    /// The HTTPS address served (the URL when neither a Service nor a URL is given).
    pub(crate) listen: SocketAddr,
    pub(crate) ca: CaSource,
}

/// Registers the webhooks once the server is ready, and keeps them in step.
pub(crate) fn spawn(
    state: Arc<AppState>,
    registration: Registration,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let Registration {
        client,
        name,
        options,
        listen,
        ca,
    } = registration;
    tokio::spawn(async move {
        let mut bundle = Bundle::default();
        let mut applied: Option<(Vec<Value>, Instant)> = None;
        let mut withdrawn: Option<Instant> = None;
        let mut waiting_logged = false;
        let resync = options.webhook_resync;
        loop {
            let bypass = state.bypass.as_ref().map(|b| b.observed());
            if bypass == Some(Observed::Unread) {
                // Nothing until the bypass has been read once.
            } else if let Some(Observed::On(_)) = bypass {
                // Applied again at once when the bypass is lifted.
                applied = None;
                if withdrawn.is_none_or(|at| at.elapsed() >= resync) {
                    match withdraw(&client, &name).await {
                        Ok(emptied) => {
                            if emptied > 0 {
                                tracing::warn!(configuration = %name, emptied, "emergency bypass: the webhooks of the configurations withdrawn");
                            }
                            withdrawn = Some(Instant::now());
                        }
                        Err(e) => {
                            tracing::warn!(configuration = %name, error = %super::redact::in_text(&format!("{e:#}")), "emergency bypass: cannot withdraw the webhooks; retrying")
                        }
                    }
                }
            } else if state.is_ready() {
                withdrawn = None;
                let desired = ca.read().and_then(|pem| {
                    let mut settings = options.settings(&name, listen, bundle.update(pem));
                    settings.launch_queues = state.launch_queues.is_some();
                    webhooks::configurations(&state.policy.load(), &settings)
                        .map_err(anyhow::Error::msg)
                });
                match desired {
                    Ok(desired) => {
                        let due = applied.as_ref().is_none_or(|(objects, at)| {
                            *objects != desired || at.elapsed() >= resync
                        });
                        if due {
                            match apply(&client, &desired).await {
                                Ok(()) => {
                                    if applied.as_ref().is_none_or(|(o, _)| *o != desired) {
                                        let hooks: Vec<&str> = desired
                                            .iter()
                                            .flat_map(|o| {
                                                o["webhooks"].as_array().into_iter().flatten()
                                            })
                                            .filter_map(|h| h["name"].as_str())
                                            .collect();
                                        tracing::info!(configuration = %name, webhooks = ?hooks, "webhook configurations registered");
                                    }
                                    applied = Some((desired, Instant::now()));
                                }
                                Err(e) => {
                                    tracing::warn!(configuration = %name, error = %super::redact::in_text(&format!("{e:#}")), "cannot register the webhook configurations; retrying")
                                }
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(configuration = %name, error = %super::redact::in_text(&format!("{e:#}")), "cannot build the webhook configurations; retrying")
                    }
                }
            } else if !waiting_logged
                && !state
                    .shutting_down
                    .load(std::sync::atomic::Ordering::Acquire)
            {
                tracing::info!(configuration = %name, "not ready: webhook configurations not registered yet");
                waiting_logged = true;
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = shutdown.changed() => return,
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotated_ca_keeps_the_previous_one_in_the_bundle() {
        let mut b = Bundle::default();
        assert_eq!(b.update("A\n".into()), "A\n");
        assert_eq!(b.update("A\n".into()), "A\n");
        assert_eq!(b.update("B\n".into()), "B\nA\n");
        assert_eq!(b.update("B\n".into()), "B\nA\n");
        assert_eq!(b.update("C\n".into()), "C\nB\n");
    }
}
