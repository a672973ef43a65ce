//! Keeps the policy's native admission policies in the cluster (`--native-policies=<set>`):
//! at start and after every config reload, each compiled object is server-side applied
//! (field manager `launchgate`), and the set's objects the config no longer compiles are
//! deleted. A failed sync is logged and retried at the next interval; serving is unaffected.
//!
//! The objects are named by slot (`<set>-q<n>-mutate`, `<set>-q<n>-limits`, n below the
//! slot count), never by queue, so the names the pods may update, patch and delete are known
//! before the config is (the chart's ClusterRole lists them in `resourceNames`). A queue keeps
//! the slot its objects in the cluster have across config changes.
//!
//! Required RBAC on `validatingadmissionpolicies`, `validatingadmissionpolicybindings`,
//! `mutatingadmissionpolicies` and `mutatingadmissionpolicybindings`: `list` (all of the set's
//! objects, by label) and `create` (RBAC cannot limit `create` by name), and `get`, `update`,
//! `patch` and `delete` limited to [`native::slot_names`] of the set.

use super::AppState;
use crate::native::{self, POLICY_SET_LABEL, QUEUE_KEY_ANNOTATION};
use crate::policy::Policy;
use anyhow::{Context, Result};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The four kinds a set is made of.
const KINDS: [&str; 4] = [
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
];

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

/// The slot each queue's objects of `set` have in the cluster (queue key → slot), read from
/// the policies' names and queue-key annotations.
async fn existing_slots(client: &kube::Client, set: &str) -> Result<BTreeMap<String, usize>> {
    let selector = ListParams::default().labels(&format!("{POLICY_SET_LABEL}={set}"));
    let mut slots = BTreeMap::new();
    for kind in [KINDS[2], KINDS[0]] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind));
        let list = api
            .list_metadata(&selector)
            .await
            .with_context(|| format!("listing {kind}s of set {set}"))?;
        for item in list.items {
            let slot = item
                .metadata
                .name
                .as_deref()
                .and_then(|name| native::slot_of(set, name));
            let key = item
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(QUEUE_KEY_ANNOTATION));
            if let (Some(slot), Some(key)) = (slot, key) {
                slots.entry(key.clone()).or_insert(slot);
            }
        }
    }
    Ok(slots)
}

/// Applies the set's objects for `policy` (its queues in at most `slots` slots) and deletes
/// the set's others; what it did.
pub async fn sync(
    client: &kube::Client,
    policy: &Policy,
    set: &str,
    slots: usize,
    namespace_selector: Option<&Value>,
) -> Result<(usize, usize)> {
    let existing = existing_slots(client, set).await?;
    let assigned = native::assign_slots(policy.queues.keys().map(String::as_str), &existing, slots)
        .map_err(anyhow::Error::msg)?;
    let options = native::Options {
        config_hash: None,
        policy_set: Some(set.to_string()),
        namespace_selector: namespace_selector.cloned(),
        slots: Some(assigned),
    };
    let compiled = native::compile(policy, &options);
    let mut wanted: BTreeSet<(String, String)> = BTreeSet::new();
    let params = PatchParams::apply("launchgate").force();
    for object in &compiled.objects {
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(&kind));
        api.patch(&name, &params, &Patch::Apply(object))
            .await
            .with_context(|| format!("applying {kind} {name}"))?;
        wanted.insert((kind, name));
    }
    let deleted = delete_set(client, set, &wanted).await?;
    Ok((wanted.len(), deleted))
}

/// Deletes the objects of `set` not in `keep`; how many.
pub async fn delete_set(
    client: &kube::Client,
    set: &str,
    keep: &BTreeSet<(String, String)>,
) -> Result<usize> {
    let selector = ListParams::default().labels(&format!("{POLICY_SET_LABEL}={set}"));
    let mut deleted = 0;
    // Bindings before their policies.
    for kind in [KINDS[1], KINDS[3], KINDS[0], KINDS[2]] {
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

/// Syncs now and whenever the loaded policy changes (checked every `interval`).
pub(crate) fn spawn(
    state: Arc<AppState>,
    client: kube::Client,
    set: String,
    slots: usize,
    namespace_selector: Option<Value>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let mut synced: Option<Arc<Policy>> = None;
        loop {
            let policy = state.policy.load_full();
            if synced.as_ref().is_none_or(|s| !Arc::ptr_eq(s, &policy)) {
                match sync(&client, &policy, &set, slots, namespace_selector.as_ref()).await {
                    Ok((applied, deleted)) => {
                        tracing::info!(set = %set, applied, deleted, "native admission policies in step with the config");
                        synced = Some(policy);
                    }
                    Err(e) => {
                        tracing::warn!(set = %set, error = %super::redact::in_text(&format!("{e:#}")), "cannot sync the native admission policies; retrying")
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = shutdown.changed() => return,
            }
        }
    });
}
