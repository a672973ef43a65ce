//! Keeps the policy's native admission policies in the cluster (`--native-policies=<set>`), and
//! serves a config only once they hold it.
//!
//! **The set is slots, created by someone else.** A set of `n` slots
//! (`--native-policy-slots`) is the `4 × n` objects named by [`native::slot_objects`]: whoever
//! installs it (the chart, or an admin with `launchgate compile-native --dormant-slots`) creates
//! them dormant, matching nothing. The server only reads (`get`) and replaces (`update`, a PUT
//! of the whole spec) those names: it needs no `create`, no `delete` and no `list` on admission
//! policies, so a compromised pod can make no admission policy of its own and touch no one
//! else's. A queue keeps its slot across config changes; a slot no queue holds any more is put
//! back to dormant. A PUT rather than server-side apply: the objects are Helm's too (created by
//! it, their live spec rendered back into the release by `lookup`), and an apply leaves fields
//! another manager co-owns in place — a `matchCondition` a new config dropped would stay and
//! narrow the policy; a PUT makes the spec exactly the compiled one.
//!
//! **A config is served once the cluster holds it.** A config that passes its checks (at start
//! and on every reload) is offered to the sync loop; the webhook keeps serving the previous one
//! until every object of the set has been written for the new one ([`sync`]), and only then
//! serves it. So the webhook and the native policies never judge by different configs beyond
//! the moments of a sync, and a queue that is gone never keeps a policy: its slot is made
//! dormant before anything of the new config is written ([`native::write_order`]).
//!
//! **What cannot be synced fails loudly.** A config with more queues than slots is refused as a
//! reload is refused (the previous config keeps serving, webhook and native policies alike; on
//! a fresh start nothing is served), a missing slot object is named, and an API error is
//! retried every interval. Until the set is in step the server is not ready (`/readyz` says
//! why), `launchgate_native_policy_sync_failing{reason}` is 1, and a `Warning` Event
//! `NativePoliciesNotInStep` regards the server's pod (a `Normal` `NativePoliciesInStep` when it
//! recovers). In `hybrid` mode an unready pod also registers no webhook.
//!
//! **The emergency bypass holds the set dormant.** While the bypass is on
//! ([`super::bypass`]) no config is synced: every object of the set that is not dormant is made
//! dormant ([`make_dormant`], the policy before its binding; an object that is missing — a
//! binding an admin deleted — is left missing), every interval, so a set an admin or an older
//! replica brought back goes dormant again; a config read meanwhile waits, and the pod stays
//! ready (`Warning` Event `EmergencyBypass`). Once the bypass is lifted the waiting config —
//! or the one served before — is synced at once.
//!
//! Required RBAC on `validatingadmissionpolicies`, `validatingadmissionpolicybindings`,
//! `mutatingadmissionpolicies` and `mutatingadmissionpolicybindings`: `get` and `update`, limited
//! to [`native::slot_names`] of the set; `create` on `events.k8s.io` events in the pod's
//! namespace for the Events.

use super::AppState;
use super::bypass::Observed;
use super::events::{EventSink, OwnPod};
// Why a sync did not complete: the `reason` label of `launchgate_native_policy_sync_failing`.
use super::metrics::{Metrics, NATIVE_SYNC_FAILURES as SYNC_FAILURES, ReasonLabels};
use crate::native::{self, POLICY_SET_LABEL, SlotKind};
use crate::policy::Policy;
use anyhow::{Context, Result};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// The field manager of the server's writes.
pub const FIELD_MANAGER: &str = "launchgate";

/// The Event reasons of the set's state.
pub const REASON_NOT_IN_STEP: &str = "NativePoliciesNotInStep";
/// A `Normal` Event: the set holds the served config again after a failure.
pub const REASON_IN_STEP: &str = "NativePoliciesInStep";
/// A `Warning` Event: the emergency bypass holds the set dormant.
pub const REASON_BYPASS: &str = "EmergencyBypass";

/// An `admissionregistration.k8s.io/v1` kind's resource: the native policies and bindings,
/// the webhook configurations.
pub(super) fn resource(kind: &str) -> ApiResource {
    let plural = match kind.strip_suffix('y') {
        Some(stem) => format!("{}ies", stem.to_lowercase()),
        None => format!("{}s", kind.to_lowercase()),
    };
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        &plural,
    )
}

/// A failed read or replace of one object.
#[derive(Debug)]
pub enum StoreError {
    /// The object changed since it was read (HTTP 409).
    Conflict,
    /// Anything else, as the API server said it.
    Other(String),
}

/// Where a set's objects are read and replaced: the API server, or a test's map.
#[async_trait::async_trait]
pub trait SlotStore: Send + Sync + 'static {
    /// The object `name` of `kind`, `None` when there is none.
    async fn get(&self, kind: SlotKind, name: &str) -> Result<Option<Value>, StoreError>;
    /// Replaces the object `object` names (a PUT carrying its `resourceVersion`); what was
    /// stored.
    async fn replace(&self, kind: SlotKind, object: &Value) -> Result<Value, StoreError>;
}

/// The set's objects through the Kubernetes API.
pub struct KubeSlots {
    client: kube::Client,
}

impl KubeSlots {
    /// Reads and replaces with `client`.
    pub fn new(client: kube::Client) -> Self {
        KubeSlots { client }
    }

    fn api(&self, kind: SlotKind) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &resource(kind.kind))
    }
}

fn store_error(e: kube::Error) -> StoreError {
    match e {
        kube::Error::Api(status) if status.code == 409 => StoreError::Conflict,
        kube::Error::Api(status) => StoreError::Other(format!(
            "{} ({} {})",
            status.message, status.code, status.reason
        )),
        other => StoreError::Other(other.to_string()),
    }
}

#[async_trait::async_trait]
impl SlotStore for KubeSlots {
    async fn get(&self, kind: SlotKind, name: &str) -> Result<Option<Value>, StoreError> {
        let found = self.api(kind).get_opt(name).await.map_err(store_error)?;
        found
            .map(|o| serde_json::to_value(o).map_err(|e| StoreError::Other(e.to_string())))
            .transpose()
    }

    async fn replace(&self, kind: SlotKind, object: &Value) -> Result<Value, StoreError> {
        let (_, name) = native::key_of(object);
        let typed: DynamicObject =
            serde_json::from_value(object.clone()).map_err(|e| StoreError::Other(e.to_string()))?;
        let params = PostParams {
            dry_run: false,
            field_manager: Some(FIELD_MANAGER.into()),
        };
        let stored = self
            .api(kind)
            .replace(&name, &params, &typed)
            .await
            .map_err(store_error)?;
        serde_json::to_value(stored).map_err(|e| StoreError::Other(e.to_string()))
    }
}

/// Why a sync did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncError {
    /// The config has more queues than the set has slots (the [`native::check_capacity`]
    /// message): nothing was written.
    TooManyQueues(String),
    /// Slot objects that are not in the cluster (`<kind> <name>`): nothing was written.
    Missing(Vec<String>),
    /// Reading or replacing an object failed.
    Api(String),
}

impl SyncError {
    /// The `reason` label: one of [`SYNC_FAILURES`].
    pub fn reason(&self) -> &'static str {
        match self {
            SyncError::TooManyQueues(_) => SYNC_FAILURES[0],
            SyncError::Missing(_) => SYNC_FAILURES[1],
            SyncError::Api(_) => SYNC_FAILURES[2],
        }
    }
}

impl std::fmt::Display for SyncError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyncError::TooManyQueues(why) => f.write_str(why),
            SyncError::Missing(objects) => {
                let shown: Vec<&str> = objects.iter().take(8).map(String::as_str).collect();
                let more = objects.len().saturating_sub(shown.len());
                write!(
                    f,
                    "{} slot object(s) of the set are not in the cluster: {}{}; the chart \
                     creates them (nativePolicySlots), without it an admin creates them once \
                     with `launchgate compile-native --dormant-slots=<slots> --policy-set=<set> \
                     | kubectl create -f -`",
                    objects.len(),
                    shown.join(", "),
                    if more > 0 {
                        format!(" … and {more} more")
                    } else {
                        String::new()
                    }
                )
            }
            SyncError::Api(why) => f.write_str(why),
        }
    }
}

/// The set a server keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The set's name: the objects' name prefix and [`POLICY_SET_LABEL`].
    pub set: String,
    /// Its slots.
    pub slots: usize,
    /// The namespaceSelector of every binding.
    pub namespace_selector: Option<Value>,
}

/// A failed read of the object `name` of `kind`, as a sync reports it.
fn read_failed(kind: &str, name: &str, error: StoreError) -> SyncError {
    let why = match error {
        StoreError::Conflict => "conflict".to_string(),
        StoreError::Other(why) => why,
    };
    SyncError::Api(format!("reading {kind} {name}: {why}"))
}

/// Reads every object of the set.
async fn read_set(
    store: &dyn SlotStore,
    target: &Target,
) -> Result<BTreeMap<(String, String), Value>, SyncError> {
    let mut live = BTreeMap::new();
    let mut missing = Vec::new();
    for (_, kind, name) in native::slot_objects(&target.set, target.slots) {
        match store.get(kind, &name).await {
            Ok(Some(object)) => {
                live.insert((kind.kind.to_string(), name), object);
            }
            Ok(None) => missing.push(format!("{} {name}", kind.kind)),
            Err(error) => return Err(read_failed(kind.kind, &name, error)),
        }
    }
    if missing.is_empty() {
        Ok(live)
    } else {
        Err(SyncError::Missing(missing))
    }
}

/// Replaces one object with `desired`, read again and retried when it changed meanwhile.
async fn replace(
    store: &dyn SlotStore,
    live: &mut BTreeMap<(String, String), Value>,
    desired: &Value,
) -> Result<(), SyncError> {
    let key = native::key_of(desired);
    let kind = SlotKind::of(&key.0)
        .ok_or_else(|| SyncError::Api(format!("{} is not a slot kind", key.0)))?;
    for _ in 0..5 {
        let current = live
            .get(&key)
            .ok_or_else(|| SyncError::Missing(vec![format!("{} {}", key.0, key.1)]))?;
        match store
            .replace(kind, &native::replacement(current, desired))
            .await
        {
            Ok(stored) => {
                live.insert(key, stored);
                return Ok(());
            }
            Err(StoreError::Conflict) => match store.get(kind, &key.1).await {
                Ok(Some(fresh)) => {
                    live.insert(key.clone(), fresh);
                }
                Ok(None) => return Err(SyncError::Missing(vec![format!("{} {}", key.0, key.1)])),
                Err(StoreError::Conflict) => {}
                Err(StoreError::Other(why)) => {
                    return Err(SyncError::Api(format!(
                        "reading {} {}: {why}",
                        key.0, key.1
                    )));
                }
            },
            Err(StoreError::Other(why)) => {
                return Err(SyncError::Api(format!(
                    "replacing {} {}: {why}",
                    key.0, key.1
                )));
            }
        }
    }
    Err(SyncError::Api(format!(
        "replacing {} {}: it kept changing while being written",
        key.0, key.1
    )))
}

/// Makes the set's objects in the cluster hold `policy` (config hash `hash`): reads every slot
/// object, then replaces them in [`native::write_order`]. Writes nothing when the config has
/// more queues than slots or a slot object is missing. How many objects it wrote.
pub async fn sync(
    store: &dyn SlotStore,
    policy: &Policy,
    hash: Option<&str>,
    target: &Target,
) -> Result<usize, SyncError> {
    native::check_capacity(policy.queues.len(), target.slots).map_err(SyncError::TooManyQueues)?;
    let mut live = read_set(store, target).await?;
    let existing = native::existing_slots(&target.set, live.values());
    let desired = native::slot_set(
        policy,
        &target.set,
        target.slots,
        target.namespace_selector.as_ref(),
        hash,
        &existing,
    )
    .map_err(SyncError::TooManyQueues)?;
    let order = native::write_order(&target.set, &live, &desired);
    for object in &order {
        replace(store, &mut live, object).await?;
    }
    Ok(order.len())
}

/// Makes every object of the set that exists and is not dormant dormant (each slot's policies
/// before their bindings), for the emergency bypass; an object that is missing is left so.
/// How many objects it wrote.
pub async fn make_dormant(store: &dyn SlotStore, target: &Target) -> Result<usize, SyncError> {
    let mut objects = native::slot_objects(&target.set, target.slots);
    // Policies first: a binding is never left binding a policy still in force alone.
    objects.sort_by_key(|(slot, kind, _)| (*slot, kind.binding));
    let mut written = 0;
    for (slot, kind, name) in objects {
        let live = match store.get(kind, &name).await {
            Ok(Some(live)) => live,
            Ok(None) => continue,
            Err(error) => return Err(read_failed(kind.kind, &name, error)),
        };
        if native::is_dormant(&live, kind, &name) {
            continue;
        }
        let dormant = native::dormant(&target.set, slot, kind, &name);
        let mut one = BTreeMap::from([((kind.kind.to_string(), name.clone()), live)]);
        match replace(store, &mut one, &dormant).await {
            Ok(()) => written += 1,
            // Deleted meanwhile: as dormant as it gets.
            Err(SyncError::Missing(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

/// A config waiting to be served: the policy and the hash of its file.
#[derive(Clone)]
pub(crate) struct Wanted {
    pub(crate) policy: Arc<Policy>,
    pub(crate) hash: String,
}

/// Where the set stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Status {
    /// Not synced yet since the server started.
    Pending,
    /// The set holds the served config.
    InStep,
    /// The last sync failed (or the config on disk was refused): reason and message.
    Failing(&'static str, String),
    /// The emergency bypass is on: the set is held dormant, no config is synced.
    Bypassed,
}

/// The native policy set a server keeps, and where it stands: what readiness, the metrics and
/// the Events say.
pub(crate) struct Native {
    pub(crate) target: Target,
    status: Mutex<Status>,
    wanted: watch::Sender<Option<Wanted>>,
    /// The config the set last held: synced again when the emergency bypass is lifted.
    served: Mutex<Option<Wanted>>,
    /// Where Events about the set's state go, and the pod they regard.
    reporter: Option<(Arc<dyn EventSink>, OwnPod)>,
}

impl Native {
    pub(crate) fn new(
        target: Target,
        reporter: Option<(Arc<dyn EventSink>, OwnPod)>,
        metrics: &Metrics,
    ) -> Self {
        metrics.native_slots.set(target.slots as i64);
        Native {
            target,
            status: Mutex::new(Status::Pending),
            wanted: watch::Sender::new(None),
            served: Mutex::new(None),
            reporter,
        }
    }

    pub(crate) fn status(&self) -> Status {
        self.status.lock().expect("not poisoned").clone()
    }

    /// Why the server is not ready on account of the set, if it is not (`bypassed`: the
    /// emergency bypass is on now). A set held dormant is ready while the bypass is on, and not
    /// once it is lifted until the set holds the config again: a server registering webhooks
    /// registers them only after the native policies are back.
    pub(crate) fn not_ready(&self, bypassed: bool) -> Option<String> {
        match self.status() {
            Status::InStep => None,
            Status::Bypassed if bypassed => None,
            Status::Bypassed => Some(format!(
                "native admission policies of set {} not synced since the emergency bypass was lifted",
                self.target.set
            )),
            Status::Pending => Some(format!(
                "native admission policies of set {} not synced yet",
                self.target.set
            )),
            Status::Failing(_, message) => Some(format!(
                "native admission policies of set {} not in step: {message}",
                self.target.set
            )),
        }
    }

    /// Whether a config can be kept in the set at all: an error when it has more queues than
    /// the set has slots.
    pub(crate) fn admit(&self, policy: &Policy, metrics: &Metrics) -> Result<(), String> {
        metrics.native_queues.set(policy.queues.len() as i64);
        native::check_capacity(policy.queues.len(), self.target.slots)
    }

    /// A config that passed its checks: served once the set holds it.
    pub(crate) fn offer(&self, wanted: Wanted) {
        self.wanted.send_replace(Some(wanted));
    }

    /// The config on disk is refused (`why`): no config is waiting any more — the served one
    /// stays — and the server says so until another config is read.
    pub(crate) fn refuse(&self, why: String, metrics: &Metrics) {
        self.wanted.send_replace(None);
        self.set_status(
            Status::Failing(SYNC_FAILURES[0], format!("config refused: {why}")),
            metrics,
        );
    }

    /// Records where the set stands: the gauges, and on a change a log line and an Event.
    fn set_status(&self, new: Status, metrics: &Metrics) {
        let old = std::mem::replace(&mut *self.status.lock().expect("not poisoned"), new.clone());
        let failing = match &new {
            Status::Failing(reason, _) => Some(*reason),
            _ => None,
        };
        for reason in SYNC_FAILURES {
            metrics
                .native_sync_failing
                .get_or_create(&ReasonLabels { reason })
                .set(i64::from(failing == Some(reason)));
        }
        let reason_of = |s: &Status| match s {
            Status::Failing(reason, _) => Some(*reason),
            _ => None,
        };
        // A log line and an Event when the set starts failing or fails for another reason,
        // and when it recovers; not for every retry.
        if reason_of(&old) == reason_of(&new) && (old == new || failing.is_some()) {
            return;
        }
        let set = &self.target.set;
        let event = match (&old, &new) {
            (_, Status::Failing(reason, message)) => {
                tracing::error!(set = %set, reason, error = %super::redact::in_text(message), "native admission policies not in step; not ready");
                Some((
                    "Warning",
                    REASON_NOT_IN_STEP,
                    format!("native admission policies of set {set} not in step: {message}"),
                ))
            }
            (Status::Failing(..), Status::InStep) => {
                tracing::info!(set = %set, "native admission policies in step again; ready");
                Some((
                    "Normal",
                    REASON_IN_STEP,
                    format!("native admission policies of set {set} hold the served config"),
                ))
            }
            (_, Status::Bypassed) => Some((
                "Warning",
                REASON_BYPASS,
                format!(
                    "native admission policies of set {set} held dormant: the emergency bypass \
                     ({}) is on",
                    super::bypass::ANNOTATION
                ),
            )),
            _ => None,
        };
        if let (Some((type_, reason, note)), Some((sink, pod))) = (event, &self.reporter) {
            let event = pod.event(
                type_,
                reason,
                "Sync",
                &super::redact::in_text(&note),
                k8s_openapi::jiff::Timestamp::now(),
            );
            let sink = sink.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(Duration::from_secs(5), sink.create(&event)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "creating a Kubernetes Event about the native policies failed")
                    }
                    Err(_) => tracing::warn!(
                        "creating a Kubernetes Event about the native policies timed out"
                    ),
                }
            });
        }
    }

    /// One round: syncs the waiting config, if any, and serves it once the set holds it.
    pub(crate) async fn sync_waiting(&self, store: &dyn SlotStore, state: &AppState) {
        let Some(wanted) = self.wanted.borrow().clone() else {
            return;
        };
        match sync(store, &wanted.policy, Some(&wanted.hash), &self.target).await {
            Ok(written) => {
                *self.served.lock().expect("not poisoned") = Some(wanted.clone());
                state.policy.store(wanted.policy.clone());
                state.metrics.config_loaded(wanted.hash.clone());
                // Served: unless a newer config came meanwhile, nothing waits any more.
                self.wanted.send_if_modified(|w| {
                    let same = w
                        .as_ref()
                        .is_some_and(|w| Arc::ptr_eq(&w.policy, &wanted.policy));
                    if same {
                        *w = None;
                    }
                    same
                });
                tracing::info!(set = %self.target.set, written, hash = %wanted.hash, "native admission policies hold the config; serving it");
                self.set_status(Status::InStep, &state.metrics);
            }
            Err(e) => self.set_status(
                Status::Failing(e.reason(), format!("{e}; retrying")),
                &state.metrics,
            ),
        }
    }
}

impl Native {
    /// One round while the emergency bypass is on: the set made dormant, nothing synced.
    pub(crate) async fn hold_dormant(&self, store: &dyn SlotStore, metrics: &Metrics) {
        match make_dormant(store, &self.target).await {
            Ok(written) => {
                if written > 0 {
                    tracing::warn!(set = %self.target.set, written, "emergency bypass: native admission policies made dormant");
                }
                // A config refused meanwhile stays refused: the pod says so until another is read.
                let refused = matches!(self.status(), Status::Failing(reason, _) if reason == SYNC_FAILURES[0])
                    && self.wanted.borrow().is_none();
                if !refused {
                    self.set_status(Status::Bypassed, metrics);
                }
            }
            Err(e) => self.set_status(
                Status::Failing(e.reason(), format!("{e}; retrying")),
                metrics,
            ),
        }
    }

    /// The emergency bypass was lifted: the config waiting, or else the one served before, is
    /// synced now; not ready until it is.
    pub(crate) fn resume(&self, metrics: &Metrics) {
        if self.status() != Status::Bypassed {
            return;
        }
        let served = self.served.lock().expect("not poisoned").clone();
        self.wanted.send_if_modified(|w| {
            if w.is_none() {
                *w = served;
            }
            false
        });
        self.set_status(Status::Pending, metrics);
    }
}

/// Syncs whenever a config is waiting: at once when one is offered, and again every `interval`
/// while a sync fails. While the emergency bypass is on, holds the set dormant instead, every
/// `interval`.
pub(crate) fn spawn(
    state: Arc<AppState>,
    store: Arc<dyn SlotStore>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(mut offered) = state.native.as_ref().map(|n| n.wanted.subscribe()) else {
        return;
    };
    tokio::spawn(async move {
        loop {
            if let Some(native) = &state.native {
                match state.bypass.as_ref().map(|b| b.observed()) {
                    // Nothing until the bypass has been read once.
                    Some(Observed::Unread) => {}
                    Some(Observed::On(_)) => {
                        native.hold_dormant(store.as_ref(), &state.metrics).await
                    }
                    _ => {
                        native.resume(&state.metrics);
                        native.sync_waiting(store.as_ref(), &state).await;
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = offered.changed() => {}
                _ = shutdown.changed() => return,
            }
        }
    });
}

/// Deletes the objects of `set` not in `keep` (found by [`POLICY_SET_LABEL`]); how many. The
/// uninstall hook's, which may `list` and `delete` the four kinds: it also removes objects an
/// earlier version named by queue.
pub async fn delete_set(
    client: &kube::Client,
    set: &str,
    keep: &BTreeSet<(String, String)>,
) -> Result<usize> {
    let selector = ListParams::default().labels(&format!("{POLICY_SET_LABEL}={set}"));
    let mut deleted = 0;
    // Bindings before their policies.
    for kind in [
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
        "MutatingAdmissionPolicy",
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind));
        let list = api
            .list_metadata(&selector)
            .await
            .with_context(|| format!("listing {kind}s of set {set}"))?;
        for item in list.items {
            let Some(name) = item.metadata.name else {
                continue;
            };
            if keep.contains(&(kind.to_string(), name.clone())) {
                continue;
            }
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => deleted += 1,
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e).with_context(|| format!("deleting {kind} {name}")),
            }
        }
    }
    Ok(deleted)
}

#[cfg(test)]
#[path = "native_sync_tests.rs"]
mod tests;
