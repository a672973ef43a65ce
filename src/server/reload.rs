//! Hot reload of the serving certificate and the config file.
//!
//! Kubernetes updates Secret and ConfigMap volumes with an atomic symlink swap (`..data`
//! points at a new timestamped directory), which inotify watches on the file path miss. We
//! poll instead: every interval the files' *contents* are read (through the symlinks) and
//! compared with what is loaded. A new certificate is used only when the pair parses and the
//! key matches; a new config only when it passes every check. Otherwise the old one stays,
//! the failure is logged and counted, and readiness is unaffected. With native policies
//! (`--native-policies`) a new config is served once the cluster's native policies hold it
//! ([`super::native_sync`]), and one with more queues than their slots is refused and makes
//! the server not ready until another config is read.

use super::AppState;
use super::metrics::ResultLabels;
use super::tls::{LoadedCert, SwappableCert, load_pem};
use crate::certs::GeneratedCerts;
use crate::policy::Policy;
use anyhow::{Context, Result};
use prometheus_client::metrics::{counter::Counter, family::Family};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// Where the serving certificate comes from.
pub(crate) enum CertSource {
    Files { cert: PathBuf, key: PathBuf },
    Generated(GeneratedCerts),
}

impl CertSource {
    fn read(&self) -> Result<(Vec<u8>, Vec<u8>)> {
        match self {
            CertSource::Files { cert, key } => Ok((
                std::fs::read(cert).with_context(|| format!("reading {}", cert.display()))?,
                std::fs::read(key).with_context(|| format!("reading {}", key.display()))?,
            )),
            CertSource::Generated(g) => Ok((
                g.cert_pem.clone().into_bytes(),
                g.key_pem.clone().into_bytes(),
            )),
        }
    }

    pub(crate) fn load(&self) -> Result<LoadedCert> {
        let (cert, key) = self.read()?;
        load_pem(&cert, &key)
    }
}

/// Counts one reload by its result (`success`, `failure`).
fn count(reloads: &Family<ResultLabels, Counter>, result: &'static str) {
    reloads.get_or_create(&ResultLabels { result }).inc();
}

/// True while `not_after_unix` lies in the future.
pub(crate) fn not_expired(not_after_unix: i64) -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    not_after_unix > now
}

/// With native policies (`--native-policies`): a config that passed its checks is served once
/// the set holds it; one with more queues than the set has slots is refused, as a config that
/// fails a check is, and the previous one keeps serving. Whether it was accepted.
pub(crate) fn accept(state: &AppState, policy: Arc<Policy>, hash: String) -> bool {
    let Some(native) = &state.native else {
        return false;
    };
    match native.admit(&policy, &state.metrics) {
        Ok(()) => {
            state.metrics.config_last_reload_successful.set(1);
            native.offer(super::native_sync::Wanted { policy, hash });
            true
        }
        Err(why) => {
            state.metrics.config_last_reload_successful.set(0);
            tracing::error!(%hash, error = %why, "config refused: the native admission policies cannot hold it; keeping the current policy");
            native.refuse(why, &state.metrics);
            false
        }
    }
}

pub(crate) fn spawn(
    state: Arc<AppState>,
    resolver: Arc<SwappableCert>,
    cert_source: CertSource,
    config_path: Option<PathBuf>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last_config = config_path.as_ref().and_then(|p| std::fs::read(p).ok());
    let loaded = match (&config_path, &last_config) {
        (None, _) => crate::policy::DEFAULT_CONFIG_YAML.as_bytes(),
        (Some(_), Some(bytes)) => bytes.as_slice(),
        (Some(_), None) => &[],
    };
    let hash = crate::policy::config_hash(loaded);
    match &state.native {
        None => state.metrics.config_loaded(hash),
        Some(_) => {
            accept(&state, state.policy.load_full(), hash);
        }
    }
    tokio::spawn(async move {
        let mut last_cert = cert_source.read().ok();
        let mut not_after = state.metrics.cert_not_after.get();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = shutdown.changed() => return,
            }
            if let CertSource::Files { .. } = cert_source {
                match cert_source.read() {
                    Ok(pair) if Some(&pair) != last_cert.as_ref() => {
                        match load_pem(&pair.0, &pair.1) {
                            Ok(loaded) => {
                                resolver.swap(loaded.key);
                                not_after = loaded.not_after_unix;
                                state.metrics.cert_not_after.set(not_after);
                                count(&state.metrics.cert_reloads, "success");
                                tracing::info!("reloaded TLS certificate");
                            }
                            Err(e) => {
                                // Possibly half-written: retried at the next tick, old cert kept.
                                count(&state.metrics.cert_reloads, "failure");
                                tracing::warn!(error = %format!("{e:#}"), "new TLS certificate rejected; keeping the current one");
                            }
                        }
                        last_cert = Some(pair);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "cannot read TLS certificate files; keeping the current one")
                    }
                }
            }
            state
                .cert_valid
                .store(not_expired(not_after), Ordering::Release);
            if let Some(path) = &config_path {
                match std::fs::read(path) {
                    Ok(bytes) if Some(&bytes) != last_config.as_ref() => {
                        let parsed = std::str::from_utf8(&bytes)
                            .map_err(|e| e.to_string())
                            .and_then(|text| Policy::from_yaml(text).map_err(|e| e.to_string()));
                        match parsed {
                            Ok(policy) => {
                                for warning in &policy.warnings {
                                    tracing::warn!(path = %path.display(), %warning, "config loads, but does not hold as written");
                                }
                                let hash = crate::policy::config_hash(&bytes);
                                if let Some(queues) = &state.launch_queues {
                                    if queues.set_base(&state, policy.config.clone(), hash.clone())
                                    {
                                        count(&state.metrics.config_reloads, "success");
                                        tracing::info!(path = %path.display(), %hash, "reloaded config; serving it with the LaunchQueues");
                                    } else {
                                        count(&state.metrics.config_reloads, "failure");
                                    }
                                } else if state.native.is_some() {
                                    if accept(&state, Arc::new(policy), hash.clone()) {
                                        count(&state.metrics.config_reloads, "success");
                                        tracing::info!(path = %path.display(), %hash, "reloaded config; serving it once the native admission policies hold it");
                                    } else {
                                        count(&state.metrics.config_reloads, "failure");
                                    }
                                } else {
                                    state.policy.store(Arc::new(policy));
                                    state.metrics.config_loaded(hash.clone());
                                    count(&state.metrics.config_reloads, "success");
                                    tracing::info!(path = %path.display(), %hash, "reloaded config");
                                }
                            }
                            Err(e) => {
                                state.metrics.config_last_reload_successful.set(0);
                                count(&state.metrics.config_reloads, "failure");
                                tracing::error!(path = %path.display(), error = %e, "new config rejected; keeping the current policy");
                            }
                        }
                        last_config = Some(bytes);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "cannot read config; keeping the current policy")
                    }
                }
            }
        }
    });
}
