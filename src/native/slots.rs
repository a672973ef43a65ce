//! The slots of a native policy set (`serve --native-policies=<set>`, the chart's
//! `policyMode: native|hybrid`): every object a set may ever be is named in advance, so the
//! identity that keeps the set in step needs no `create` and no `delete` on admission policies.
//!
//! A set of `n` slots is `4 × n` objects: slot `s` is the `MutatingAdmissionPolicy` and its
//! binding `<set>-q<s>-mutate`, and the `ValidatingAdmissionPolicy` and its binding
//! `<set>-q<s>-limits`. Whoever installs the set (the chart, or an admin with
//! `launchgate compile-native --dormant-slots`) creates all of them **dormant** — a form that
//! matches nothing ([`dormant`]) — and the server only reads and replaces them: a queue's
//! objects go into a slot, a slot no queue holds any more is put back to dormant, never deleted.
//!
//! [`write_order`] says in which order a sync replaces them, so that no binding ever binds
//! another queue's policy and a queue that is gone (removed or renamed) is made dormant before
//! anything of the new config is written.

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// The label every generated object carries.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "launchgate");
/// The annotation naming the config key of the queue an object is for (absent on a dormant
/// object).
pub const QUEUE_KEY_ANNOTATION: &str = "launchgate.io/queue-key";
/// The label naming the set (an installation) a generated object belongs to: what the
/// uninstall hook deletes by.
pub const POLICY_SET_LABEL: &str = "launchgate.io/policy-set";
/// The label giving a slot-named object its slot (`q<n>`); objects without it were named by
/// queue key.
pub const POLICY_SLOT_LABEL: &str = "launchgate.io/policy-slot";
/// How many queues a set has slots for unless told otherwise (the chart's `nativePolicySlots`).
pub const DEFAULT_POLICY_SLOTS: usize = 16;
/// The most slots a set may have (`--native-policy-slots`, the chart's `nativePolicySlots`).
pub const MAX_POLICY_SLOTS: usize = 256;

/// One of the four objects of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotKind {
    /// Its `admissionregistration.k8s.io/v1` kind.
    pub kind: &'static str,
    /// Its resource (what RBAC names).
    pub resource: &'static str,
    /// The end of its name: `mutate` or `limits`.
    pub suffix: &'static str,
    /// A binding (of the policy of the same name).
    pub binding: bool,
}

/// The four objects of a slot: the mutating pair, then the validating (limits) pair.
pub const SLOT_KINDS: [SlotKind; 4] = [
    SlotKind {
        kind: "MutatingAdmissionPolicy",
        resource: "mutatingadmissionpolicies",
        suffix: "mutate",
        binding: false,
    },
    SlotKind {
        kind: "MutatingAdmissionPolicyBinding",
        resource: "mutatingadmissionpolicybindings",
        suffix: "mutate",
        binding: true,
    },
    SlotKind {
        kind: "ValidatingAdmissionPolicy",
        resource: "validatingadmissionpolicies",
        suffix: "limits",
        binding: false,
    },
    SlotKind {
        kind: "ValidatingAdmissionPolicyBinding",
        resource: "validatingadmissionpolicybindings",
        suffix: "limits",
        binding: true,
    },
];

impl SlotKind {
    /// The slot kind of `kind`, if it is one of the four.
    pub fn of(kind: &str) -> Option<SlotKind> {
        SLOT_KINDS.into_iter().find(|k| k.kind == kind)
    }

    /// The policy kind of this pair (itself for a policy).
    fn policy(self) -> SlotKind {
        SLOT_KINDS
            .into_iter()
            .find(|k| k.suffix == self.suffix && !k.binding)
            .unwrap_or(self)
    }

    /// The binding kind of this pair (itself for a binding).
    fn binding(self) -> SlotKind {
        SLOT_KINDS
            .into_iter()
            .find(|k| k.suffix == self.suffix && k.binding)
            .unwrap_or(self)
    }
}

/// The name part of the objects in slot `slot` of `set`.
pub fn slot_base(set: &str, slot: usize) -> String {
    format!("{set}-q{slot}")
}

/// Every object name a set of `slots` slots can use, in slot order: the only names the pods
/// of that set read and replace.
pub fn slot_names(set: &str, slots: usize) -> Vec<String> {
    (0..slots)
        .flat_map(|slot| {
            let base = slot_base(set, slot);
            [format!("{base}-mutate"), format!("{base}-limits")]
        })
        .collect()
}

/// Every object of a set of `slots` slots: (slot, kind, name), in slot order and, within a
/// slot, in the order of [`SLOT_KINDS`].
pub fn slot_objects(set: &str, slots: usize) -> Vec<(usize, SlotKind, String)> {
    (0..slots)
        .flat_map(|slot| {
            SLOT_KINDS.into_iter().map(move |k| {
                let name = format!("{}-{}", slot_base(set, slot), k.suffix);
                (slot, k, name)
            })
        })
        .collect()
}

/// The slot of the object named `name` if it is a slot name of `set`.
pub fn slot_of(set: &str, name: &str) -> Option<usize> {
    let rest = name.strip_prefix(set)?.strip_prefix("-q")?;
    let digits = rest
        .strip_suffix("-mutate")
        .or_else(|| rest.strip_suffix("-limits"))?;
    if digits.is_empty() || digits.len() > 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // No leading zeros: one slot has one name.
    if digits.len() > 1 && digits.starts_with('0') {
        return None;
    }
    digits.parse().ok()
}

/// A config with more queues than a set has slots cannot be kept in the cluster: the one check
/// `serve` (at start and on every reload), `check-config --native-policy-slots` and
/// [`assign_slots`] make.
pub fn check_capacity(queues: usize, capacity: usize) -> Result<(), String> {
    if queues > capacity {
        return Err(format!(
            "the config has {queues} queues, more than the {capacity} native policy slots \
             (--native-policy-slots, the chart's nativePolicySlots): raise it to at least \
             {queues}, or merge queues"
        ));
    }
    Ok(())
}

/// Gives each queue of `keys` a slot below `capacity`: the one `existing` (queue key → slot,
/// read from the objects in the cluster) gives it when that slot is free and in range, so a
/// config change renames nothing; the others the lowest free slots, in key order. An error
/// when there are more queues than slots.
pub fn assign_slots<'a>(
    keys: impl IntoIterator<Item = &'a str>,
    existing: &BTreeMap<String, usize>,
    capacity: usize,
) -> Result<BTreeMap<String, usize>, String> {
    let keys: BTreeSet<&str> = keys.into_iter().collect();
    check_capacity(keys.len(), capacity)?;
    let mut assigned = BTreeMap::new();
    let mut taken = BTreeSet::new();
    for &key in &keys {
        if let Some(&slot) = existing.get(key)
            && slot < capacity
            && taken.insert(slot)
        {
            assigned.insert(key.to_string(), slot);
        }
    }
    let mut free = (0..capacity).filter(|s| !taken.contains(s));
    for &key in &keys {
        if !assigned.contains_key(key) {
            let slot = free.next().ok_or("no free native policy slot")?;
            assigned.insert(key.to_string(), slot);
        }
    }
    Ok(assigned)
}

/// The `resourceRules` of a dormant policy: a resource no API server serves (`.invalid` is a
/// top-level domain that is never delegated).
fn nothing() -> Value {
    json!({"resourceRules": [{
        "apiGroups": ["launchgate.invalid"],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["dormant"],
    }]})
}

/// A dormant binding's `matchResources`: no namespace, since every namespace carries its
/// `kubernetes.io/metadata.name` label.
fn no_namespace() -> Value {
    json!({"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "DoesNotExist"}
    ]}})
}

/// The spec of a dormant object of `kind`, without a binding's `policyName`: it matches
/// nothing twice over — a policy matches a resource no API server serves and only where a
/// condition that is always false holds, a binding binds in no namespace — and does nothing
/// if it matched (a mutation with no patch, a validation that holds, only audited).
fn dormant_spec_unnamed(kind: SlotKind) -> Value {
    let never = json!([{"name": "dormant", "expression": "false"}]);
    match (kind.suffix, kind.binding) {
        ("mutate", false) => json!({
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "Never",
            "matchConstraints": nothing(),
            "matchConditions": never,
            "mutations": [{"patchType": "ApplyConfiguration",
                           "applyConfiguration": {"expression": "Object{}"}}],
        }),
        (_, false) => json!({
            "failurePolicy": "Ignore",
            "matchConstraints": nothing(),
            "matchConditions": never,
            "validations": [{"expression": "true"}],
        }),
        ("mutate", true) => json!({"matchResources": no_namespace()}),
        (_, true) => json!({"matchResources": no_namespace(), "validationActions": ["Audit"]}),
    }
}

/// The spec of the dormant object `name` of `kind` (a binding binds the policy of its own
/// name).
pub fn dormant_spec(kind: SlotKind, name: &str) -> Value {
    let mut spec = dormant_spec_unnamed(kind);
    if kind.binding {
        spec["policyName"] = json!(name);
    }
    spec
}

/// The object `name` of `kind` in slot `slot` of `set`, dormant: what the chart creates and
/// what a slot no queue holds is put back to.
pub fn dormant(set: &str, slot: usize, kind: SlotKind, name: &str) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind.kind,
        "metadata": {
            "name": name,
            "labels": {
                MANAGED_BY.0: MANAGED_BY.1,
                POLICY_SET_LABEL: set,
                POLICY_SLOT_LABEL: format!("q{slot}"),
            },
        },
        "spec": dormant_spec(kind, name),
    })
}

/// Whether the live object `name` of `kind` (as the API server stores it) is dormant: it holds
/// no queue, and its spec holds every field of the dormant spec with the dormant value — lists
/// entry for entry, at the same length — whatever the API server defaulted beside them (a
/// rule's `scope`, a `matchPolicy`). An object that holds the dormant spec matches nothing, and
/// a binding of one binds no namespace.
pub fn is_dormant(live: &Value, kind: SlotKind, name: &str) -> bool {
    fn holds(live: &Value, wanted: &Value) -> bool {
        match (live, wanted) {
            (Value::Object(live), Value::Object(wanted)) => wanted
                .iter()
                .all(|(k, v)| live.get(k).is_some_and(|l| holds(l, v))),
            (Value::Array(live), Value::Array(wanted)) => {
                live.len() == wanted.len() && live.iter().zip(wanted).all(|(l, w)| holds(l, w))
            }
            _ => live == wanted,
        }
    }
    owner(live).is_none() && holds(&live["spec"], &dormant_spec(kind, name))
}

/// Every object of a set of `slots` slots, dormant: `compile-native --dormant-slots`, for an
/// admin to create once.
pub fn dormant_set(set: &str, slots: usize) -> Vec<Value> {
    slot_objects(set, slots)
        .into_iter()
        .map(|(slot, kind, name)| dormant(set, slot, kind, &name))
        .collect()
}

/// What the chart renders each slot from (`charts/launchgate/files/native-slot.json`): per
/// kind, its `apiVersion`, name suffix and dormant spec (a binding's `policyName` is the
/// chart's to add: the object's own name).
pub fn chart_slot_file() -> Value {
    Value::Array(
        SLOT_KINDS
            .into_iter()
            .map(|k| {
                json!({
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": k.kind,
                    "suffix": k.suffix,
                    "spec": dormant_spec_unnamed(k),
                })
            })
            .collect(),
    )
}

/// `desired` as the replacement of `live` (what a sync PUTs): the desired spec whole — fields
/// anyone else wrote into it are gone — and, of the labels and annotations, the desired ones
/// plus those of `live` that are not launchgate's (`launchgate.io/…`: Helm's stay, and an
/// `app.kubernetes.io/managed-by` already there is kept), with live's `resourceVersion`, so a
/// concurrent change is a conflict, never overwritten unseen.
pub fn replacement(live: &Value, desired: &Value) -> Value {
    let mut out = live.clone();
    if let Some(object) = out.as_object_mut() {
        object.remove("status");
        object.insert("spec".into(), desired["spec"].clone());
    }
    if let Some(meta) = out["metadata"].as_object_mut() {
        meta.remove("managedFields");
        for field in ["labels", "annotations"] {
            let mut map = live["metadata"][field]
                .as_object()
                .cloned()
                .unwrap_or_default();
            map.retain(|k, _| !k.starts_with("launchgate.io/"));
            if let Some(wanted) = desired["metadata"][field].as_object() {
                for (k, v) in wanted {
                    // Whoever created the object says who manages it (Helm does, on the
                    // chart's): the server never takes a field from it.
                    if k != MANAGED_BY.0 || !map.contains_key(k) {
                        map.insert(k.clone(), v.clone());
                    }
                }
            }
            if map.is_empty() {
                meta.remove(field);
            } else {
                meta.insert(field.into(), Value::Object(map));
            }
        }
    }
    out
}

/// The queue (config key) an object of a set is for; `None` for a dormant one.
pub fn owner(object: &Value) -> Option<&str> {
    object["metadata"]["annotations"][QUEUE_KEY_ANNOTATION].as_str()
}

/// The key of an object: (kind, name).
pub fn key_of(object: &Value) -> (String, String) {
    (
        object["kind"].as_str().unwrap_or_default().to_string(),
        object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// The slot each queue's objects have in the cluster (queue key → slot), read from the slot
/// objects of `set` in `live`: what [`assign_slots`] keeps, so a config change moves no queue.
/// A queue found in two slots keeps the lower one.
pub fn existing_slots<'a>(
    set: &str,
    live: impl IntoIterator<Item = &'a Value>,
) -> BTreeMap<String, usize> {
    let mut slots: BTreeMap<String, usize> = BTreeMap::new();
    for object in live {
        let (_, name) = key_of(object);
        if let (Some(slot), Some(queue)) = (slot_of(set, &name), owner(object)) {
            let at = slots.entry(queue.to_string()).or_insert(slot);
            *at = (*at).min(slot);
        }
    }
    slots
}

/// The order in which a sync replaces the objects of `set` in the cluster (`live`, by
/// [`key_of`]) to make them `desired` (every object of every slot, compiled or dormant):
///
/// 1. every pair (policy and binding) with an object of a queue other than the one the pair is
///    now for — a queue that was removed or renamed, or that moved — is made dormant, its
///    policy before its binding, before anything else is written;
/// 2. then every pair takes its desired form, its binding before its policy.
///
/// So a binding never binds a policy of another queue (a binding is only written over a
/// dormant policy or its own queue's), and no object of a queue the new config does not have
/// is active once the first object of the new config is written.
pub fn write_order(
    set: &str,
    live: &BTreeMap<(String, String), Value>,
    desired: &BTreeMap<(String, String), Value>,
) -> Vec<Value> {
    let mut retire = Vec::new();
    let mut activate = Vec::new();
    let mut slots: BTreeSet<usize> = BTreeSet::new();
    for (_, name) in desired.keys() {
        if let Some(slot) = slot_of(set, name) {
            slots.insert(slot);
        }
    }
    for slot in slots {
        for suffix in ["mutate", "limits"] {
            let name = format!("{}-{suffix}", slot_base(set, slot));
            let pair: Vec<SlotKind> = SLOT_KINDS
                .into_iter()
                .filter(|k| k.suffix == suffix)
                .collect();
            let key = |k: SlotKind| (k.kind.to_string(), name.clone());
            let Some(policy_kind) = pair.iter().copied().find(|k| !k.binding) else {
                continue;
            };
            let wanted = desired.get(&key(policy_kind)).and_then(owner);
            let stale = pair.iter().any(|&k| {
                live.get(&key(k))
                    .and_then(owner)
                    .is_some_and(|o| Some(o) != wanted)
            });
            if stale {
                retire.push(dormant(set, slot, policy_kind.policy(), &name));
                retire.push(dormant(set, slot, policy_kind.binding(), &name));
            }
            for k in [policy_kind.binding(), policy_kind.policy()] {
                if let Some(object) = desired.get(&key(k)) {
                    activate.push(object.clone());
                }
            }
        }
    }
    retire.extend(activate);
    retire
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dormant_object_is_told_apart_whatever_the_api_server_defaulted() {
        for (slot, kind, name) in slot_objects("lg", 2) {
            let mut live = dormant("lg", slot, kind, &name);
            assert!(is_dormant(&live, kind, &name), "{name}");
            // What the API server adds beside the dormant fields does not matter.
            if kind.binding {
                live["spec"]["matchResources"]["matchPolicy"] = json!("Equivalent");
                live["spec"]["matchResources"]["objectSelector"] = json!({});
            } else {
                live["spec"]["matchConstraints"]["resourceRules"][0]["scope"] = json!("*");
                live["spec"]["matchConstraints"]["matchPolicy"] = json!("Equivalent");
            }
            assert!(is_dormant(&live, kind, &name), "{name} defaulted");
            // A queue's object, a binding that selects namespaces, a policy that matches.
            let mut held = live.clone();
            held["metadata"]["annotations"] = json!({QUEUE_KEY_ANNOTATION: "gpu-queue"});
            assert!(!is_dormant(&held, kind, &name), "{name} held by a queue");
            let mut active = live.clone();
            if kind.binding {
                active["spec"]["matchResources"]["namespaceSelector"] = json!({});
            } else {
                active["spec"]["matchConditions"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "more", "expression": "true"}));
            }
            assert!(!is_dormant(&active, kind, &name), "{name} active");
        }
    }

    #[test]
    fn slot_names_are_enumerable_and_parse_back() {
        assert_eq!(
            slot_names("lg", 2),
            [
                "lg-q0-mutate",
                "lg-q0-limits",
                "lg-q1-mutate",
                "lg-q1-limits"
            ]
        );
        for (slot, name) in slot_names("lg", 12).iter().enumerate() {
            assert_eq!(slot_of("lg", name), Some(slot / 2), "{name}");
        }
        for foreign in [
            "lg-gpu-queue-limits",
            "lg-q-limits",
            "lg-q01-limits",
            "lg-q1-other",
            "other-q1-limits",
            "lg-q1",
            "lg-q99999999999999999999-mutate",
            "lgx-q1-mutate",
        ] {
            assert_eq!(slot_of("lg", foreign), None, "{foreign}");
        }
        // The objects are the names, each under both kinds of its pair.
        let objects = slot_objects("lg", 3);
        assert_eq!(objects.len(), 12);
        let names: BTreeSet<&str> = objects.iter().map(|(_, _, n)| n.as_str()).collect();
        assert_eq!(
            names,
            slot_names("lg", 3)
                .iter()
                .map(String::as_str)
                .collect::<BTreeSet<_>>()
        );
        for (slot, kind, name) in &objects {
            assert_eq!(slot_of("lg", name), Some(*slot));
            assert!(name.ends_with(kind.suffix));
        }
    }

    #[test]
    fn queues_keep_their_slots_and_new_ones_take_the_free_ones() {
        let existing = BTreeMap::from([
            ("b".to_string(), 0),
            ("gone".to_string(), 1),
            ("c".to_string(), 7),
            // Two queues claiming one slot: the first in key order keeps it.
            ("d".to_string(), 0),
        ]);
        let assigned = assign_slots(["a", "b", "c", "d"], &existing, 4).unwrap();
        assert_eq!(
            assigned,
            BTreeMap::from([
                ("a".to_string(), 1),
                ("b".to_string(), 0),
                ("c".to_string(), 2),
                ("d".to_string(), 3),
            ])
        );
        let err = assign_slots(["a", "b", "c"], &BTreeMap::new(), 2).unwrap_err();
        assert!(
            err.contains("3 queues") && err.contains("2 native policy slots"),
            "{err}"
        );
        assert!(assign_slots([], &existing, 1).unwrap().is_empty());
        assert!(check_capacity(2, 2).is_ok() && check_capacity(3, 2).is_err());
    }

    #[test]
    fn a_dormant_slot_matches_nothing_and_binds_its_own_policy() {
        for (slot, kind, name) in slot_objects("lg", 2) {
            let object = dormant("lg", slot, kind, &name);
            assert_eq!(object["kind"], kind.kind);
            assert_eq!(object["metadata"]["labels"][POLICY_SET_LABEL], "lg");
            assert_eq!(
                object["metadata"]["labels"][POLICY_SLOT_LABEL],
                format!("q{slot}")
            );
            assert_eq!(owner(&object), None);
            let spec = &object["spec"];
            if kind.binding {
                assert_eq!(spec["policyName"], name.as_str());
                assert_eq!(
                    spec["matchResources"]["namespaceSelector"]["matchExpressions"][0]["operator"],
                    "DoesNotExist"
                );
            } else {
                let rules = &spec["matchConstraints"]["resourceRules"];
                assert_eq!(rules[0]["apiGroups"][0], "launchgate.invalid");
                assert_eq!(spec["matchConditions"][0]["expression"], "false");
                assert_eq!(spec["failurePolicy"], "Ignore");
            }
        }
        // The chart's file is the same specs without the binding's name.
        let file = chart_slot_file();
        for (entry, kind) in file.as_array().unwrap().iter().zip(SLOT_KINDS) {
            let mut spec = entry["spec"].clone();
            if kind.binding {
                spec["policyName"] = json!("x");
            }
            assert_eq!(spec, dormant_spec(kind, "x"));
            assert_eq!(entry["suffix"], kind.suffix);
        }
    }
}
