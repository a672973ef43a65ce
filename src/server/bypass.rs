//! The emergency bypass: while the Namespace the server runs in (the release namespace) carries
//! the annotation [`ANNOTATION`], the server puts nothing of launchgate into the API server's
//! admission path — it registers no webhook (and withdraws the webhooks of the configurations
//! it registers, [`super::webhook_sync`]) and keeps every slot of its native policy set dormant
//! ([`super::native_sync`]) — and once the annotation is gone it registers and syncs again at
//! once.
//!
//! **Who can turn it on.** Writing the annotation takes `update` or `patch` on the Namespace
//! object itself, which the built-in namespace roles (`admin`, `edit`) do not grant and a
//! namespace admin cannot grant (RBAC's escalation check): cluster-admin by default, never a
//! tenant or a namespace admin, whatever namespace launchgate is installed in. The pods only
//! `get` their own namespace.
//!
//! **It is never silent.** `launchgate_emergency_bypass` is 1 while it is on (the chart's alert
//! `LaunchgateEmergencyBypass` fires), `/readyz` answers `ready; emergency bypass on: …` with the
//! annotation's value, and the log says so when it turns on, every ten minutes while it stays
//! on, and when it is lifted.
//!
//! Until the namespace has been read once nothing is registered or synced. A namespace that
//! cannot be read (no RBAC, the API server away) is logged and counts as no bypass on the first
//! read — enforcement goes on — and leaves the state as it was after that.

use super::AppState;
use super::metrics::Metrics;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The annotation on the release namespace that turns the bypass on; its value says who, when
/// and why.
pub const ANNOTATION: &str = "launchgate.io/bypass";

/// How often the log repeats that the bypass is on.
const REMINDER: Duration = Duration::from_secs(600);

/// What the server knows of the bypass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Observed {
    /// The namespace has not been read yet: nothing is registered or synced.
    Unread,
    /// No bypass.
    Off,
    /// The bypass is on; the annotation's value.
    On(String),
}

/// The bypass a server honours: the namespace it reads and what it last read there.
pub(crate) struct Bypass {
    pub(crate) namespace: String,
    observed: watch::Sender<Observed>,
}

/// The annotation's value on a Namespace object, when it carries the annotation (an empty
/// value counts).
pub(crate) fn of_namespace(namespace: &serde_json::Value) -> Option<String> {
    namespace["metadata"]["annotations"][ANNOTATION]
        .as_str()
        .map(str::to_string)
}

impl Bypass {
    pub(crate) fn new(namespace: String) -> Self {
        Bypass {
            namespace,
            observed: watch::Sender::new(Observed::Unread),
        }
    }

    pub(crate) fn observed(&self) -> Observed {
        self.observed.borrow().clone()
    }

    /// The annotation's value while the bypass is on.
    pub(crate) fn on(&self) -> Option<String> {
        match self.observed() {
            Observed::On(value) => Some(value),
            _ => None,
        }
    }

    /// Records a read of the namespace (`Ok(annotation)`, or why it failed): the gauge, and a
    /// log line when the state changes.
    pub(crate) fn record(&self, read: Result<Option<String>, String>, metrics: &Metrics) {
        let old = self.observed();
        let new = match (read, &old) {
            (Ok(Some(value)), _) => Observed::On(value),
            (Ok(None), _) => Observed::Off,
            (Err(why), Observed::Unread) => {
                tracing::error!(namespace = %self.namespace, error = %super::redact::in_text(&why), "cannot read the release namespace: the emergency bypass ({ANNOTATION}) is not honoured until it can be read (RBAC: get on this namespace)");
                Observed::Off
            }
            (Err(why), _) => {
                tracing::warn!(namespace = %self.namespace, error = %super::redact::in_text(&why), "cannot read the release namespace; the emergency bypass stays as last read");
                old.clone()
            }
        };
        metrics
            .emergency_bypass
            .set(i64::from(matches!(new, Observed::On(_))));
        if new == old {
            return;
        }
        match (&old, &new) {
            (_, Observed::On(value)) => tracing::warn!(
                namespace = %self.namespace,
                bypass = %value,
                "emergency bypass on ({ANNOTATION}): no webhook is registered and the native policy slots are kept dormant; remove the annotation to end it"
            ),
            (Observed::On(_), Observed::Off) => tracing::warn!(
                namespace = %self.namespace,
                "emergency bypass lifted: registering the webhooks and syncing the native policies again"
            ),
            _ => {}
        }
        self.observed.send_replace(new);
    }
}

/// Reads the annotation of the server's bypass namespace every `interval` (nothing without
/// one).
pub(crate) fn spawn(
    state: Arc<AppState>,
    client: kube::Client,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    use k8s_openapi::api::core::v1::Namespace;
    let Some(bypass) = state.bypass.clone() else {
        return;
    };
    tokio::spawn(async move {
        let api: kube::Api<Namespace> = kube::Api::all(client);
        let mut reminded = Instant::now();
        loop {
            let read = match api.get_opt(&bypass.namespace).await {
                Ok(namespace) => Ok(namespace
                    .and_then(|n| serde_json::to_value(n).ok())
                    .and_then(|n| of_namespace(&n))),
                Err(e) => Err(e.to_string()),
            };
            let was_on = bypass.on().is_some();
            bypass.record(read, &state.metrics);
            match bypass.on() {
                Some(value) if was_on && reminded.elapsed() >= REMINDER => {
                    tracing::warn!(namespace = %bypass.namespace, bypass = %value, "emergency bypass still on ({ANNOTATION}): launchgate enforces nothing");
                    reminded = Instant::now();
                }
                Some(_) if !was_on => reminded = Instant::now(),
                _ => {}
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
    use serde_json::json;

    fn gauge(metrics: &Metrics) -> String {
        metrics
            .encode()
            .lines()
            .find(|l| l.starts_with("launchgate_emergency_bypass "))
            .unwrap_or_default()
            .to_string()
    }

    #[test]
    fn the_annotation_turns_it_on_whatever_its_value() {
        let on = json!({"metadata": {"name": "launchgate", "annotations": {ANNOTATION: "alice: INC-1"}}});
        assert_eq!(of_namespace(&on).as_deref(), Some("alice: INC-1"));
        let empty = json!({"metadata": {"annotations": {ANNOTATION: ""}}});
        assert_eq!(of_namespace(&empty).as_deref(), Some(""));
        for off in [
            json!({"metadata": {"name": "launchgate"}}),
            json!({"metadata": {"annotations": {"launchgate.io/bypassed": "x"}}}),
            json!({"metadata": {"labels": {ANNOTATION: "true"}}}),
            json!(null),
        ] {
            assert_eq!(of_namespace(&off), None, "{off}");
        }
    }

    #[test]
    fn what_was_read_is_the_state_and_the_gauge() {
        let metrics = Metrics::new();
        let bypass = Bypass::new("launchgate".into());
        assert_eq!(bypass.observed(), Observed::Unread);
        assert_eq!(gauge(&metrics), "launchgate_emergency_bypass 0");
        bypass.record(Ok(Some("alice".into())), &metrics);
        assert_eq!(bypass.on().as_deref(), Some("alice"));
        assert_eq!(gauge(&metrics), "launchgate_emergency_bypass 1");
        // A failed read keeps what was read last: the bypass stays on.
        bypass.record(Err("connection refused".into()), &metrics);
        assert_eq!(bypass.on().as_deref(), Some("alice"));
        assert_eq!(gauge(&metrics), "launchgate_emergency_bypass 1");
        bypass.record(Ok(None), &metrics);
        assert_eq!(bypass.observed(), Observed::Off);
        assert_eq!(gauge(&metrics), "launchgate_emergency_bypass 0");
    }

    #[test]
    fn a_namespace_that_cannot_be_read_at_first_means_no_bypass() {
        let metrics = Metrics::new();
        let bypass = Bypass::new("launchgate".into());
        bypass.record(
            Err("namespaces \"launchgate\" is forbidden".into()),
            &metrics,
        );
        assert_eq!(bypass.observed(), Observed::Off);
        assert_eq!(gauge(&metrics), "launchgate_emergency_bypass 0");
    }
}
