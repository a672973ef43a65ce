//! `serve --launchqueues`: the queues of the cluster's LaunchQueues (`launchgate.io/v1alpha1`)
//! served beside the config file's.
//!
//! A watch (kube's watcher, not polling) keeps every LaunchQueue; after the first list and on
//! every change the served policy is rebuilt from the config file and the LaunchQueues
//! ([`crate::policy::launchqueue::resolve`]: a LaunchQueue overrides the file's queue of its
//! name, and a spec that does not hold never replaces the last good one), through the same
//! path a reloaded config file takes (with native policies, served once they hold it). The
//! server is not ready until the first list has been read, so no request is judged without
//! them (without the CRD there are none: the config file's queues are served alone).
//!
//! Each LaunchQueue's `status` says what is served of it: `observedGeneration`, the
//! conditions `Ready` (this generation is enforced), `Enforcing` (the queue is enforced, maybe
//! an earlier generation) and `Degraded` (why this generation is not: the key paths of a config
//! error, the native policies' trouble), and what it caps per pod and per run. One replica
//! writes it: the holder of the Lease `launchgate-launchqueues` in the server's namespace.

use super::AppState;
use crate::policy::launchqueue::{self, LaunchQueue};
use crate::policy::{Config, Policy};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// The Lease whose holder writes the LaunchQueues' status.
pub(crate) const LEASE: &str = "launchgate-launchqueues";

/// How long a Lease is held without renewal.
const LEASE_SECONDS: i32 = 15;

/// The LaunchQueue resource.
pub(crate) fn resource() -> ApiResource {
    ApiResource {
        group: launchqueue::GROUP.into(),
        version: launchqueue::VERSION.into(),
        api_version: launchqueue::api_version(),
        kind: launchqueue::KIND.into(),
        plural: launchqueue::PLURAL.into(),
    }
}

/// What the server holds of the LaunchQueues.
pub(crate) struct LaunchQueues {
    inner: Mutex<Inner>,
    /// The first list has been read.
    listed: AtomicBool,
    /// The status each LaunchQueue should show, for the writer.
    statuses: watch::Sender<BTreeMap<String, Value>>,
}

struct Inner {
    /// The config file's config (or the embedded default), before any LaunchQueue.
    base: Config,
    /// Its hash.
    base_hash: String,
    /// Every LaunchQueue as stored, by name.
    objects: BTreeMap<String, Value>,
    /// The last spec of each that held.
    last_good: BTreeMap<String, LaunchQueue>,
    /// While the watch lists, what it has listed so far.
    listing: Option<BTreeMap<String, Value>>,
}

impl LaunchQueues {
    /// Holds `base` (hashed `base_hash`) until the first list.
    pub(crate) fn new(base: Config, base_hash: String) -> Arc<Self> {
        Arc::new(LaunchQueues {
            inner: Mutex::new(Inner {
                base,
                base_hash,
                objects: BTreeMap::new(),
                last_good: BTreeMap::new(),
                listing: None,
            }),
            listed: AtomicBool::new(false),
            statuses: watch::channel(BTreeMap::new()).0,
        })
    }

    /// Why the server is not ready on their account.
    pub(crate) fn not_ready(&self) -> Option<String> {
        (!self.listed.load(Ordering::Acquire))
            .then(|| "the LaunchQueues have not been listed yet".to_string())
    }

    /// A new config file (`base`, hashed `hash`): served with the LaunchQueues. Whether it was.
    pub(crate) fn set_base(&self, state: &AppState, base: Config, hash: String) -> bool {
        {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            inner.base = base;
            inner.base_hash = hash;
        }
        self.rebuild(state)
    }

    /// The LaunchQueue resource is not served (no CRD): none exist. True the first time it is
    /// said, so the caller serves the config without them.
    fn none_installed(&self) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.listing = None;
        let changed = !inner.objects.is_empty() || !self.listed.load(Ordering::Acquire);
        inner.objects.clear();
        self.listed.store(true, Ordering::Release);
        changed
    }

    /// Applies one watch event.
    fn apply(&self, event: watcher::Event<DynamicObject>) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let named = |o: DynamicObject| {
            let name = o.metadata.name.clone().unwrap_or_default();
            serde_json::to_value(o).ok().map(|v| (name, v))
        };
        match event {
            watcher::Event::Init => {
                inner.listing = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(o) => {
                if let (Some(listing), Some((name, v))) = (inner.listing.as_mut(), named(o)) {
                    listing.insert(name, v);
                }
                false
            }
            watcher::Event::InitDone => {
                inner.objects = inner.listing.take().unwrap_or_default();
                self.listed.store(true, Ordering::Release);
                true
            }
            watcher::Event::Apply(o) => {
                if let Some((name, v)) = named(o) {
                    inner.objects.insert(name, v);
                }
                true
            }
            watcher::Event::Delete(o) => {
                let name = o.metadata.name.unwrap_or_default();
                inner.objects.remove(&name);
                true
            }
        }
    }

    /// Builds and serves the policy of the config file and the LaunchQueues, and says what
    /// each LaunchQueue's status should be. Whether the policy was served.
    pub(crate) fn rebuild(&self, state: &AppState) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let inner = &mut *inner;
        let objects: Vec<Value> = inner.objects.values().cloned().collect();
        let resolved = launchqueue::resolve(&inner.base, &objects, &mut inner.last_good);
        let config = launchqueue::merged(inner.base.clone(), &resolved.served);
        let mut hashed = inner.base_hash.clone();
        for q in &resolved.served {
            hashed.push_str(&format!("\n{}@{}", q.name, q.generation));
        }
        let hash = crate::policy::config_hash(hashed.as_bytes());
        let served = match Policy::from_config(config) {
            Ok(policy) => {
                let policy = Arc::new(policy);
                let served = match &state.native {
                    Some(_) => super::reload::accept(state, policy, hash),
                    None => {
                        state.policy.store(policy);
                        state.metrics.config_loaded(hash);
                        true
                    }
                };
                tracing::info!(
                    launch_queues = resolved.served.len(),
                    invalid = resolved.invalid.len(),
                    "serving the config with the LaunchQueues"
                );
                served
            }
            Err(e) => {
                tracing::error!(error = %e, "the LaunchQueues do not hold with the config; keeping the current policy");
                false
            }
        };
        let enforced: BTreeMap<&str, i64> = if served {
            resolved
                .served
                .iter()
                .map(|q| (q.name.as_str(), q.generation))
                .collect()
        } else {
            BTreeMap::new()
        };
        let statuses = inner
            .objects
            .iter()
            .map(|(name, object)| {
                let generation = object
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let status = status_of(
                    generation,
                    enforced.get(name.as_str()).copied(),
                    resolved.invalid.get(name).map(ToString::to_string),
                    inner.last_good.get(name),
                );
                (name.clone(), status)
            })
            .collect();
        self.statuses.send_replace(statuses);
        served
    }
}

/// The status of a LaunchQueue at `generation`: `enforced`, the generation served (if any);
/// `invalid`, what is wrong with this generation (if anything); `good`, its last spec that held.
fn status_of(
    generation: i64,
    enforced: Option<i64>,
    invalid: Option<String>,
    good: Option<&LaunchQueue>,
) -> Value {
    let condition = |kind: &str, on: bool, reason: &str, message: String| {
        json!({"type": kind, "status": if on { "True" } else { "False" }, "reason": reason,
            "message": message, "observedGeneration": generation})
    };
    let ready = enforced == Some(generation);
    let (reason, message) = match (&invalid, enforced) {
        (Some(why), Some(old)) => (
            "ConfigInvalid",
            format!("generation {generation} does not hold, generation {old} stays enforced: {why}"),
        ),
        (Some(why), None) => (
            "ConfigInvalid",
            format!("generation {generation} does not hold: {why}"),
        ),
        (None, Some(_)) if ready => ("Enforced", format!("generation {generation} is enforced")),
        (None, _) => (
            "NotServed",
            "the config with this queue is not served yet (the native admission policies, or another queue's error: see the server's log)".to_string(),
        ),
    };
    let mut conditions = vec![
        condition("Ready", ready, reason, message.clone()),
        condition(
            "Enforcing",
            enforced.is_some(),
            if enforced.is_some() {
                "Enforced"
            } else {
                reason
            },
            match enforced {
                Some(g) => format!("generation {g} is enforced"),
                None => message.clone(),
            },
        ),
        condition(
            "Degraded",
            !ready,
            if ready { "Enforced" } else { reason },
            message,
        ),
    ];
    if ready {
        conditions[2]["message"] = json!("");
    }
    let (per_pod, per_run) = good.map(|q| launchqueue::caps(&q.spec)).unwrap_or_default();
    let mut status = json!({"observedGeneration": generation, "conditions": conditions,
        "perPod": per_pod, "perRun": per_run});
    if let Some(g) = enforced {
        status["enforcedGeneration"] = json!(g);
    }
    status
}

/// Keeps `queues` in step with the cluster's LaunchQueues, and (while holding the Lease in
/// `lease_namespace`, as `identity`; every replica when there is none) writes their status.
pub(crate) fn spawn(
    state: Arc<AppState>,
    queues: Arc<LaunchQueues>,
    client: kube::Client,
    lease_namespace: Option<String>,
    identity: String,
    mut shutdown: watch::Receiver<bool>,
) {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    tokio::spawn(follow(stream, state, queues.clone(), shutdown.clone()));
    let mut wanted = queues.statuses.subscribe();
    tokio::spawn(async move {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
        let leases: Option<Api<Lease>> = lease_namespace
            .as_deref()
            .map(|ns| Api::namespaced(client.clone(), ns));
        // What was last written of each: the status as wanted, and as written (stamped).
        let mut written: BTreeMap<String, (Value, Value)> = BTreeMap::new();
        let mut leading = false;
        loop {
            let now_leading = match &leases {
                None => true,
                Some(leases) => hold_lease(leases, &identity).await,
            };
            if now_leading != leading {
                tracing::info!(
                    holder = now_leading,
                    lease = LEASE,
                    "LaunchQueue status writer"
                );
                // A new holder writes every status afresh.
                written.clear();
                leading = now_leading;
            }
            if leading {
                let statuses = wanted.borrow_and_update().clone();
                for (name, status) in statuses {
                    if written.get(&name).is_some_and(|(w, _)| *w == status) {
                        continue;
                    }
                    let mut body = json!({"status": status});
                    stamp_transitions(&mut body["status"], written.get(&name).map(|(_, s)| s));
                    let patch = Patch::Merge(&body);
                    match api
                        .patch_status(&name, &PatchParams::default(), &patch)
                        .await
                    {
                        Ok(_) => {
                            written.insert(name, (status, body["status"].take()));
                        }
                        Err(e) => {
                            tracing::warn!(launch_queue = %name, error = %super::redact::in_text(&e.to_string()), "cannot write the LaunchQueue's status")
                        }
                    }
                }
                written.retain(|name, _| wanted.borrow().contains_key(name));
            }
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = wanted.changed() => {}
                _ = tokio::time::sleep(Duration::from_secs(u64::try_from(LEASE_SECONDS / 3).unwrap_or(5))) => {}
            }
        }
    });
}

/// Applies the watch's events to `queues`, rebuilding the served policy after each change.
async fn follow<S>(
    stream: S,
    state: Arc<AppState>,
    queues: Arc<LaunchQueues>,
    mut stop: watch::Receiver<bool>,
) where
    S: WatchStreamExt<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    loop {
        let event = tokio::select! {
            _ = stop.changed() => return,
            event = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)) => event,
        };
        match event {
            None => {
                tracing::warn!("the LaunchQueue watch ended");
                return;
            }
            Some(Ok(event)) => {
                if queues.apply(event) {
                    queues.rebuild(&state);
                }
            }
            // The CRD is not installed: no LaunchQueue can exist, so there are none to wait
            // for (the watch keeps retrying, and picks them up once it is).
            Some(Err(watcher::Error::InitialListFailed(kube::Error::Api(status))))
                if status.code == 404 =>
            {
                if queues.none_installed() {
                    tracing::warn!(
                        "the LaunchQueue CRD is not installed (launchqueues.launchgate.io): serving the config file's queues alone until it is"
                    );
                    queues.rebuild(&state);
                }
            }
            Some(Err(e)) => {
                tracing::warn!(error = %super::redact::in_text(&e.to_string()), "LaunchQueue watch failed; retrying")
            }
        }
    }
}

/// Gives each condition of `status` a `lastTransitionTime`: now, unless `before` (what was
/// last written) had it in the same state.
fn stamp_transitions(status: &mut Value, before: Option<&Value>) {
    let now = Timestamp::now().to_string();
    let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) else {
        return;
    };
    for c in conditions {
        let same = before
            .and_then(|b| b.get("conditions"))
            .and_then(Value::as_array)
            .and_then(|old| old.iter().find(|o| o["type"] == c["type"]))
            .filter(|o| o["status"] == c["status"]);
        let at = same
            .and_then(|o| o.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now));
        c["lastTransitionTime"] = at;
    }
}

/// Takes or renews the Lease [`LEASE`] for `identity`: true while it holds it.
async fn hold_lease(leases: &Api<Lease>, identity: &str) -> bool {
    let now = Timestamp::now();
    let ours = |resource_version: Option<String>, transitions: Option<i32>| Lease {
        metadata: ObjectMeta {
            name: Some(LEASE.into()),
            resource_version,
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(identity.into()),
            lease_duration_seconds: Some(LEASE_SECONDS),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: transitions,
            ..Default::default()
        }),
    };
    match leases.get_opt(LEASE).await {
        Ok(None) => leases
            .create(&PostParams::default(), &ours(None, Some(0)))
            .await
            .is_ok(),
        Ok(Some(lease)) => {
            let spec = lease.spec.clone().unwrap_or_default();
            let holder = spec.holder_identity.as_deref().unwrap_or_default();
            let expired = spec.renew_time.as_ref().is_none_or(|t| {
                let seconds = i64::from(spec.lease_duration_seconds.unwrap_or(LEASE_SECONDS));
                now.as_second() > t.0.as_second() + seconds
            });
            if holder != identity && !expired {
                return false;
            }
            let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(holder != identity);
            let mut renewed = ours(lease.metadata.resource_version.clone(), Some(transitions));
            if holder == identity
                && let (Some(spec), Some(acquired)) = (renewed.spec.as_mut(), spec.acquire_time)
            {
                spec.acquire_time = Some(acquired);
            }
            leases
                .replace(LEASE, &PostParams::default(), &renewed)
                .await
                .is_ok()
        }
        Err(e) => {
            tracing::warn!(error = %super::redact::in_text(&e.to_string()), lease = LEASE, "cannot read the LaunchQueue status Lease");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conditions(status: &Value) -> Vec<(String, String, String)> {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["type"].as_str().unwrap().to_string(),
                    c["status"].as_str().unwrap().to_string(),
                    c["reason"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// Enforced at its generation: Ready; a newer generation that does not hold: not Ready,
    /// still Enforcing the old one, Degraded with the key path.
    #[test]
    fn the_status_says_what_generation_is_enforced_and_why_not_this_one() {
        let ready = status_of(3, Some(3), None, None);
        assert_eq!(
            conditions(&ready),
            [
                ("Ready".into(), "True".into(), "Enforced".into()),
                ("Enforcing".into(), "True".into(), "Enforced".into()),
                ("Degraded".into(), "False".into(), "Enforced".into())
            ]
        );
        assert_eq!(ready["observedGeneration"], 3);
        let bad = status_of(
            4,
            Some(3),
            Some("spec.limits.enforcement: unknown variant".into()),
            None,
        );
        assert_eq!(
            conditions(&bad),
            [
                ("Ready".into(), "False".into(), "ConfigInvalid".into()),
                ("Enforcing".into(), "True".into(), "Enforced".into()),
                ("Degraded".into(), "True".into(), "ConfigInvalid".into())
            ]
        );
        let message = bad["conditions"][0]["message"].as_str().unwrap();
        assert!(
            message.contains("generation 3 stays enforced")
                && message.contains("spec.limits.enforcement"),
            "{message}"
        );
        assert_eq!(bad["enforcedGeneration"], 3);
    }

    /// A condition keeps its transition time while its state stays.
    #[test]
    fn a_transition_time_moves_only_with_the_state() {
        let mut first = status_of(1, Some(1), None, None);
        stamp_transitions(&mut first, None);
        let mut again = status_of(2, Some(2), None, None);
        stamp_transitions(&mut again, Some(&first));
        assert_eq!(
            again["conditions"][0]["lastTransitionTime"],
            first["conditions"][0]["lastTransitionTime"]
        );
        let mut bad = status_of(3, Some(2), Some("x".into()), None);
        stamp_transitions(&mut bad, Some(&first));
        assert_eq!(
            bad["conditions"][1]["lastTransitionTime"],
            first["conditions"][1]["lastTransitionTime"]
        );
    }
}
