//! Is a pod (or a child workload) its workload's, made by that workload's controller?
//!
//! Whoever creates a pod writes its owner references and labels: a bare Pod can name any Job
//! (a suspended decoy) as its controller. A pod is judged as controller-made — on the per-pod
//! rules only, its workload having been judged on the workload rules — only when the claim is
//! verifiable: the request comes from the controller of the owner's kind (`match.podCreators`,
//! an identity a tenant cannot take) and the pod carries the labels that controller writes for
//! that very owner. Anything else is judged on every rule.
//!
//! The same holds one level up for the workloads other launch workloads make: the Jobs a
//! JobSet's controller creates (carrying `jobset.sigs.k8s.io/jobset-uid`), and the JobSet
//! Kubeflow Trainer creates for a TrainJob (named after it). A verified child is judged on the
//! per-pod rules and gets no workload-level mutation (job defaults, PyTorch wiring, queue
//! hand-off): its root was given those, and a denial would only make its controller retry.

use super::exemption::{Requester, any_match, user_pattern_covers_everyone};
use crate::error::ConfigError;
use crate::json::Pointer as _;
use crate::kinds::Intermediate;
use crate::workload::{self, WorkloadKind};
use serde_json::Value;
use std::collections::BTreeMap;

/// The kinds whose pods (or child workloads) a controller creates, as `match.podCreators`
/// names them: every kind whose descriptor says what its controller makes.
pub fn owner_kinds() -> impl Iterator<Item = WorkloadKind> {
    WorkloadKind::all().filter(|k| !k.spec().makes.is_empty())
}

/// The namespaces tenants commonly hold, whatever a config says: no identity in one is built
/// in, and one a config names there is warned about. Anyone who may create a pod in a
/// namespace can run it as any service account of that namespace, and so send what that
/// service account sends.
pub const TENANT_HELD_NAMESPACES: &[&str] = &["default"];

/// Whether the user pattern `pattern` (`*` and `?` wildcards) matches a service account of
/// `namespace`: `system:serviceaccount:<namespace>:<name>` for the name the pattern ends with
/// (its wildcards standing for themselves), so `system:serviceaccount:*:kuberay-operator`,
/// `system:serviceaccount:default:*` and `*:default:*` all do for `default`.
pub(crate) fn matches_service_account_in(pattern: &str, namespace: &str) -> bool {
    let name = pattern.rsplit(':').next().unwrap_or(pattern);
    wildmatch::WildMatch::new(pattern)
        .matches(&format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"))
}

/// The username prefix the API server gives a service account.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// The default `match.podCreators`: the identities the upstream controllers run as. A kind whose
/// controller has none a tenant cannot take (KubeRay's) is left out: trusted by no one until
/// configured.
pub fn default_pod_creators() -> BTreeMap<String, Vec<String>> {
    owner_kinds()
        .filter(|k| !k.spec().controller.is_empty())
        .map(|k| {
            let users = k.spec().controller.iter().map(|u| u.to_string()).collect();
            (k.as_str().to_string(), users)
        })
        .collect()
}

/// Why the identities of one kind's controller are trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustedBecause {
    /// The config names them (`match.podCreators.<Kind>`; `[]` names no one).
    Configured,
    /// The config leaves the kind out, so the identities its upstream controller runs as are
    /// trusted (less any in a namespace where the config says tenants launch, `dropped`).
    BuiltIn {
        /// The built-in identities not trusted, each with where the config puts tenants in
        /// its namespace.
        dropped: Vec<(String, String)>,
    },
    /// The config leaves the kind out and its controller has no built-in identity: no one.
    NoBuiltIn,
}

/// Who is trusted to make one kind's pods and child workloads, and why: what `check-config`
/// prints for each kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedCreators {
    /// The owner kind (`match.podCreators` key).
    pub kind: WorkloadKind,
    /// The trusted user patterns.
    pub users: Vec<String>,
    /// Where they come from.
    pub because: TrustedBecause,
}

impl std::fmt::Display for TrustedCreators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = self.kind.as_str();
        if self.users.is_empty() {
            f.write_str("no one")?;
        } else {
            f.write_str(&self.users.join(", "))?;
        }
        match &self.because {
            TrustedBecause::Configured => write!(f, " (match.podCreators.{kind})"),
            TrustedBecause::BuiltIn { dropped } => {
                write!(
                    f,
                    " (built in: the upstream controller's identity; match.podCreators.{kind} replaces it"
                )?;
                for (user, why) in dropped {
                    write!(f, "; not {user}: its namespace is a tenants' ({why})")?;
                }
                f.write_str(")")
            }
            TrustedBecause::NoBuiltIn => write!(
                f,
                " (no built-in identity: name the controller's in match.podCreators.{kind}; until then what it makes is judged on every rule)"
            ),
        }
    }
}

/// Gives every owner kind `creators` leaves out its default identities (a config written before
/// launchgate knew a kind keeps working, and verifies that kind's children) — except those in a
/// namespace of `tenant_namespaces` (namespace → the config key that puts tenants there), which
/// are never trusted; a kind listed with `[]` stays trusted by no one. Returns who is trusted
/// for each owner kind, and why.
pub fn complete_pod_creators(
    creators: &mut BTreeMap<String, Vec<String>>,
    tenant_namespaces: &BTreeMap<String, String>,
) -> Vec<TrustedCreators> {
    let mut trusted = Vec::new();
    for kind in owner_kinds() {
        let built_in = kind.spec().controller;
        let (users, because) = match creators.get(kind.as_str()) {
            Some(users) => (users.clone(), TrustedBecause::Configured),
            None if built_in.is_empty() => (Vec::new(), TrustedBecause::NoBuiltIn),
            None => {
                let mut dropped = Vec::new();
                let mut users = Vec::new();
                for user in built_in {
                    match tenant_namespace_of(user, tenant_namespaces) {
                        Some((_, why)) => dropped.push((user.to_string(), why)),
                        None => users.push(user.to_string()),
                    }
                }
                (users, TrustedBecause::BuiltIn { dropped })
            }
        };
        // A kind the config leaves out with no one to trust stays out, so the completed
        // config loads again to the same trust (listed as `[]`, it would be the config's word).
        if !users.is_empty() {
            creators.insert(kind.as_str().to_string(), users.clone());
        }
        trusted.push(TrustedCreators {
            kind,
            users,
            because,
        });
    }
    trusted
}

/// The tenants' namespace `user` is a service account of, if any, and why it is one: a
/// namespace of `tenant_namespaces` (with the config key that puts tenants there) or one
/// tenants commonly hold ([`TENANT_HELD_NAMESPACES`]).
fn tenant_namespace_of(
    user: &str,
    tenant_namespaces: &BTreeMap<String, String>,
) -> Option<(String, String)> {
    tenant_namespaces
        .iter()
        .map(|(ns, why)| (ns.clone(), why.clone()))
        .chain(
            TENANT_HELD_NAMESPACES
                .iter()
                .map(|ns| (ns.to_string(), "tenants commonly hold it".to_string())),
        )
        .find(|(ns, _)| matches_service_account_in(user, ns))
}

/// Checks that no identity trusted with what a controller makes is a service account a tenant
/// can take. One the config names in a namespace where it puts tenants (`tenant_namespaces`:
/// namespace → the config key that does) is an error, the config contradicting itself; one it
/// names in a namespace tenants commonly hold ([`TENANT_HELD_NAMESPACES`]) a warning, since
/// launchgate cannot read the cluster's RBAC and a platform team may keep tenants out of it;
/// a built-in identity left untrusted for its namespace ([`complete_pod_creators`]) a warning.
pub fn check_tenant_identities(
    trusted: &[TrustedCreators],
    tenant_namespaces: &BTreeMap<String, String>,
    at: &str,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<ConfigError>,
) {
    for t in trusted {
        let kind = t.kind.as_str();
        if let TrustedBecause::BuiltIn { dropped } = &t.because {
            for (user, why) in dropped {
                warnings.push(ConfigError::new(
                    format!("{at}.{kind}"),
                    format!("the {kind} controller's built-in identity {user} is not trusted: its namespace is one where tenants launch workloads ({why}), so anyone who may create a pod there could send what the controller sends; name the controller's identity (in a namespace of its own) here"),
                ));
            }
        }
        if t.because != TrustedBecause::Configured {
            continue;
        }
        for (i, user) in t.users.iter().enumerate() {
            let here = format!("{at}.{kind}[{i}]");
            if let Some((ns, why)) = tenant_namespaces
                .iter()
                .find(|(ns, _)| matches_service_account_in(user, ns))
            {
                errors.push(ConfigError::new(
                    here,
                    format!("{user} is a service account of namespace {ns:?}, where tenants launch workloads ({why}): anyone who may create a pod there can run it as that service account, and what it sends would be judged as the {kind} controller's, on the per-pod rules only; run the controller in a namespace of its own and name that identity"),
                ));
            } else if let Some(ns) = TENANT_HELD_NAMESPACES
                .iter()
                .find(|ns| matches_service_account_in(user, ns))
            {
                warnings.push(ConfigError::new(
                    here,
                    format!("{user} is a service account of namespace {ns:?}, which tenants commonly hold: anyone who may create a pod there can run it as that service account, and what it sends is judged as the {kind} controller's, on the per-pod rules only; run the controller in a namespace of its own and name that identity, unless no tenant can create pods in {ns:?}"),
                ));
            }
        }
    }
}

/// Checks `match.podCreators` at `at`.
pub fn check_pod_creators(
    creators: &BTreeMap<String, Vec<String>>,
    at: &str,
    errors: &mut Vec<ConfigError>,
) {
    for (kind, users) in creators {
        let here = format!("{at}.{kind}");
        if !owner_kinds().any(|k| k.as_str() == kind) {
            let known: Vec<&str> = owner_kinds().map(|k| k.as_str()).collect();
            errors.push(ConfigError::new(
                here.clone(),
                format!("unknown workload kind; one of {}", known.join(", ")),
            ));
        }
        for (i, user) in users.iter().enumerate() {
            if let Some(everyone) = covers_everyone(user) {
                errors.push(ConfigError::new(
                    format!("{here}[{i}]"),
                    format!("a pod creator names the controller's user; this matches {everyone}, so any pod could claim an owner"),
                ));
            }
        }
    }
}

/// Whom a controller's user pattern matches when it matches everyone (an empty one too).
fn covers_everyone(user: &str) -> Option<&'static str> {
    if user.is_empty() {
        Some("everyone")
    } else {
        user_pattern_covers_everyone(user)
    }
}

/// The identity Kueue's controller runs as when installed with its manifests or Helm chart.
const KUEUE_CONTROLLER: &str = "system:serviceaccount:kueue-system:kueue-controller-manager";

/// The default `match.workloadUpdaters`: Kueue's controller, which admits a run by an UPDATE
/// (unsuspending it, writing its flavor's node selector).
pub fn default_workload_updaters() -> Vec<String> {
    vec![KUEUE_CONTROLLER.to_string()]
}

/// Checks `match.workloadUpdaters` at `at`: each names a controller, not everyone.
pub fn check_workload_updaters(users: &[String], at: &str, errors: &mut Vec<ConfigError>) {
    for (i, user) in users.iter().enumerate() {
        if let Some(everyone) = covers_everyone(user) {
            errors.push(ConfigError::new(
                format!("{at}[{i}]"),
                format!("a workload updater names a controller's user; this matches {everyone}, so anyone's UPDATE of an exempt workload would keep its exemption"),
            ));
        }
    }
}

/// True when `who` is a controller that updates launch workloads it did not create
/// (`match.workloadUpdaters`).
pub fn is_workload_updater(updaters: &[String], who: &Requester<'_>) -> bool {
    !who.username.is_empty() && any_match(updaters, who.username)
}

/// An exemption covers the workload, and so the pods its controller makes: with no controller
/// of a kind named in `match.podCreators`, those pods could never be verified, never inherit
/// the exemption, and would be judged (and, denied, retried forever). `exemption` names one
/// configured exemption, if any.
pub fn check_inheritance(
    trusted: &[TrustedCreators],
    exemption: Option<&str>,
    at: &str,
    errors: &mut Vec<ConfigError>,
) {
    let Some(exemption) = exemption else {
        return;
    };
    // The owner kinds whose pods (or child workloads) inherit an exemption of the owner: their
    // controller copies the pod templates' annotations, where launchgate writes the mark (a
    // kind whose pods come from a runtime has no templates to carry it). Only a kind the
    // config lists with no one is refused: one it leaves out whose controller has no built-in
    // identity (KubeRay's), or whose built-in identity is in a tenants' namespace, is said by
    // `check-config`'s listing (and the second by a warning).
    for t in trusted {
        let kind = t.kind;
        if kind.spec().runtime.is_none()
            && t.users.is_empty()
            && t.because == TrustedBecause::Configured
        {
            errors.push(ConfigError::new(
                format!("{at}.{}", kind.as_str()),
                format!(
                    "exemption {exemption:?} covers a {kind}'s pods only through its controller, and none is named here: an exempt {kind} would have every pod (child workload) it creates judged and denied, retried forever; name the {kind} controller's user",
                    kind = kind.as_str()
                ),
            ));
        }
    }
}

/// What a pod's controller owner reference is worth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerClaim {
    /// No controller owner of a launch kind (a bare pod, a top-level workload, or another
    /// controller's): every rule.
    None,
    /// Verified: the owner's controller sent it, with the owner's labels. Per-pod rules only.
    Verified(WorkloadKind),
    /// Claimed but not verifiable: every rule, and why in a warning (`why`, for the validating
    /// webhook); a child workload (not a pod) is then mutated as a standalone workload, and
    /// `standalone` says so (for the mutating webhook).
    Unverified {
        /// Why the claim is not trusted.
        why: String,
        /// For a child workload: the warning that it is wired as a workload of its own.
        standalone: Option<String>,
    },
}

/// Stands for the object's own `metadata.name` in [`owner_mark`]'s keys.
pub(crate) use crate::kinds::OWN_NAME;

/// The label (or annotation) `owner`'s controller sets to the owner's identity on what it
/// makes of `kind`, and which field of the owner reference it must equal.
pub(crate) fn owner_mark(
    owner: WorkloadKind,
    kind: WorkloadKind,
) -> (&'static [&'static str], &'static str) {
    kind.mark_from(owner)
        .map_or((&[], "uid"), |m| (m.mark, m.of))
}

/// The controller owner reference of `object` (a `kind`) when it names a launch kind whose
/// controller makes objects of `kind`.
fn claimed_owner(kind: WorkloadKind, object: &Value) -> Option<(WorkloadKind, &Value)> {
    object
        .at("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .find_map(|r| Some((WorkloadKind::of_object(r)?, r)))
        .filter(|(k, _)| kind.made_by().any(|owner| owner == *k))
}

/// The controller owner reference of `object` (a `kind`), when it names an intermediate owner a
/// launch kind's controller makes `kind` through ([`Through::Owner`]) and `object` carries that
/// kind's mark: what the claim is.
fn claimed_through(kind: WorkloadKind, object: &Value) -> Option<ThroughClaim<'_>> {
    let owner = controller_reference(object)?;
    let text = |k: &str| owner.get(k).and_then(Value::as_str).unwrap_or_default();
    kind.made_through().find_map(|(owner_kind, makes, via)| {
        if text("apiVersion") != via.api_version() || text("kind") != via.kind {
            return None;
        }
        let (key, value) = carried_mark(object, makes.mark)?;
        Some(ThroughClaim {
            owner_kind,
            via,
            intermediate: text("name"),
            key,
            value,
        })
    })
}

/// The first controller owner reference of `object`.
fn controller_reference(object: &Value) -> Option<&Value> {
    object
        .at("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

/// The first of `keys` that `made` (an object, or a pod template) carries as a label or an
/// annotation with a value, and that value.
fn carried_mark<'v>(made: &'v Value, keys: &[&'static str]) -> Option<(&'static str, &'v str)> {
    let made = made.as_object()?;
    keys.iter().find_map(|&k| {
        let value = workload::label(made, k).or_else(|| workload::annotation(made, k))?;
        (!value.is_empty()).then_some((k, value))
    })
}

/// A claim through an intermediate owner: a pod from a StatefulSet, carrying a
/// LeaderWorkerSet's mark.
struct ThroughClaim<'v> {
    owner_kind: WorkloadKind,
    via: &'static Intermediate,
    /// The intermediate owner's name.
    intermediate: &'v str,
    /// The mark carried, and its value (the launch owner's name).
    key: &'static str,
    value: &'v str,
}

impl ThroughClaim<'_> {
    /// Verified when the intermediate's controller sends it: launchgate lets only the launch
    /// kind's controller create or change an intermediate that carries the mark
    /// ([`intermediate_guard`]).
    fn claim(&self, what: &str, who: &Requester<'_>) -> OwnerClaim {
        if any_match(self.via.controller, who.username) {
            return OwnerClaim::Verified(self.owner_kind);
        }
        OwnerClaim::Unverified {
            why: format!(
                "launchgate: the {what} carries {} = {:?}, the mark of {} {:?}, from {} {:?}, but is sent by {}, not by the {} controller ({}); it is judged on every rule of its queue",
                self.key,
                self.value,
                self.owner_kind.as_str(),
                self.value,
                self.via.kind,
                self.intermediate,
                who.describe(),
                self.via.kind,
                self.via.controller.join(", "),
            ),
            standalone: None,
        }
    }
}

/// A request to create or change an intermediate owner (a StatefulSet: `kind` of API group
/// `group`) whose pod template carries a launch kind's mark: `Some(why)` when `who` is not
/// that kind's controller (`creators`), for the pods it would make would pass as that kind's.
/// `old` is the object before an UPDATE: one that leaves its spec as it was (the garbage
/// collector's, a label's) is anyone's. `None` for everything else.
pub fn intermediate_guard(
    group: &str,
    kind: &str,
    object: &Value,
    old: Option<&Value>,
    who: &Requester<'_>,
    creators: &BTreeMap<String, Vec<String>>,
) -> Option<String> {
    if old.is_some_and(|old| old.get("spec") == object.get("spec")) {
        return None;
    }
    let made = WorkloadKind::all().flat_map(|k| k.made_through());
    made.filter(|(_, _, via)| via.group == group && via.kind == kind)
        .find_map(|(owner_kind, makes, via)| {
            let template = via.template.iter().try_fold(object, |v, k| v.get(k))?;
            let (key, value) = carried_mark(template, makes.mark)?;
            let allowed = creators
                .get(owner_kind.as_str())
                .map(Vec::as_slice)
                .unwrap_or_default();
            if any_match(allowed, who.username) {
                return None;
            }
            Some(format!(
                "launchgate: the {kind}'s pod template carries {key} = {value:?}, by which its pods pass as {owner} {value:?}'s: only that kind's controller creates or changes such a {kind} (match.podCreators.{owner}: {}), and this request is sent by {}",
                if allowed.is_empty() {
                    "none configured".to_string()
                } else {
                    allowed.join(", ")
                },
                who.describe(),
                owner = owner_kind.as_str(),
            ))
        })
}

/// Judges the controller owner reference of `object` (a `kind`) for a request from `who`,
/// with the configured pod creators.
pub fn owner_claim(
    kind: WorkloadKind,
    object: &Value,
    who: &Requester<'_>,
    creators: &BTreeMap<String, Vec<String>>,
) -> OwnerClaim {
    let what = if kind.is_pod() { "pod" } else { kind.as_str() };
    let Some((owner_kind, owner)) = claimed_owner(kind, object) else {
        return claimed_through(kind, object)
            .map_or(OwnerClaim::None, |through| through.claim(what, who));
    };
    fn text(v: Option<&Value>) -> &str {
        v.and_then(Value::as_str).unwrap_or_default()
    }
    let owner_name = text(owner.get("name"));
    let claimed = format!("{} {owner_name:?}", owner_kind.as_str());
    let allowed = creators
        .get(owner_kind.as_str())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let child = !kind.is_pod();
    if !any_match(allowed, who.username) {
        // A child workload (a JobSet's Job, a TrainJob's JobSet) from a user that is not its
        // owner's controller: the short warning names the `match.podCreators` entry that
        // user belongs in, if it is the controller.
        let standalone = child.then(|| {
            format!(
                "launchgate: {} is not in match.podCreators.{owner}, so this {kind} of {owner} {owner_name:?} is wired and judged as a standalone {kind}, a world of its own",
                who.describe(),
                owner = owner_kind.as_str(),
                kind = kind.as_str(),
            )
        });
        return OwnerClaim::Unverified {
            why: format!(
                "launchgate: the {what} names {claimed} as its controller but is sent by {}, not by that kind's controller (match.podCreators.{}: {}); it is judged on every rule of its queue",
                who.describe(),
                owner_kind.as_str(),
                if allowed.is_empty() {
                    "none configured".to_string()
                } else {
                    allowed.join(", ")
                }
            ),
            standalone,
        };
    }
    let (keys, field) = owner_mark(owner_kind, kind);
    let expected = text(owner.get(field));
    let marked = !expected.is_empty()
        && object.as_object().is_some_and(|made| {
            keys.iter().any(|&k| {
                if k == OWN_NAME {
                    return made
                        .get("metadata")
                        .and_then(|m| m.get("name"))
                        .and_then(Value::as_str)
                        == Some(expected);
                }
                workload::label(made, k) == Some(expected)
                    || workload::annotation(made, k) == Some(expected)
            })
        });
    if marked {
        OwnerClaim::Verified(owner_kind)
    } else {
        let why = format!(
            "launchgate: the {what} names {claimed} as its controller but does not carry {} = the owner's {field}; it is judged on every rule of its queue",
            keys.join(" or ")
        );
        OwnerClaim::Unverified {
            standalone: child.then(|| why.clone()),
            why,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const JOB_CONTROLLER: &str = "system:serviceaccount:kube-system:job-controller";

    fn pod(owner_kind: &str, api_version: &str, labels: Value) -> Value {
        json!({"metadata": {"generateName": "train-", "labels": labels,
            "ownerReferences": [{"apiVersion": api_version, "kind": owner_kind, "name": "train",
                "uid": "u-1", "controller": true}]}})
    }

    fn claim(object: &Value, user: &str) -> OwnerClaim {
        let who = Requester {
            username: user,
            groups: &[],
            namespace: "ns",
        };
        owner_claim(WorkloadKind::Pod, object, &who, &default_pod_creators())
    }

    #[test]
    fn a_kind_left_out_of_pod_creators_keeps_its_controller_and_an_empty_list_trusts_no_one() {
        let policy = |creators: &str| {
            crate::Policy::from_yaml(&format!(
                "match:\n  exemptions: []\n  podCreators:\n{creators}\nqueues: {{q: {{}}}}\ndefaultQueue: q\n"
            ))
            .unwrap()
        };
        let written = policy("    Job: [system:kube-controller-manager]");
        let creators = &written.config.match_rules.pod_creators;
        assert_eq!(creators["Job"], ["system:kube-controller-manager"]);
        assert_eq!(
            creators["VolcanoJob"],
            default_pod_creators()["VolcanoJob"],
            "a kind the config leaves out keeps its controller's identity"
        );
        let none = policy("    VolcanoJob: []");
        assert!(none.config.match_rules.pod_creators["VolcanoJob"].is_empty());
        let who = Requester {
            username: "system:serviceaccount:volcano-system:volcano-controllers",
            groups: &[],
            namespace: "ns",
        };
        let volcano_pod = pod(
            "Job",
            "batch.volcano.sh/v1alpha1",
            json!({"volcano.sh/job-name": "train"}),
        );
        assert_eq!(
            owner_claim(
                WorkloadKind::Pod,
                &volcano_pod,
                &who,
                &written.config.match_rules.pod_creators
            ),
            OwnerClaim::Verified(WorkloadKind::VolcanoJob)
        );
        assert!(matches!(
            owner_claim(
                WorkloadKind::Pod,
                &volcano_pod,
                &who,
                &none.config.match_rules.pod_creators
            ),
            OwnerClaim::Unverified { .. }
        ));
    }

    #[test]
    fn the_controller_with_the_owners_labels_is_verified() {
        let job_pod = pod(
            "Job",
            "batch/v1",
            json!({"batch.kubernetes.io/controller-uid": "u-1"}),
        );
        assert_eq!(
            claim(&job_pod, JOB_CONTROLLER),
            OwnerClaim::Verified(WorkloadKind::BatchJob)
        );
        assert_eq!(
            claim(&job_pod, "system:kube-controller-manager"),
            OwnerClaim::Verified(WorkloadKind::BatchJob)
        );
        let vc_pod = pod(
            "Job",
            "batch.volcano.sh/v1alpha1",
            json!({"volcano.sh/job-name": "train"}),
        );
        assert_eq!(
            claim(
                &vc_pod,
                "system:serviceaccount:volcano-system:volcano-controllers"
            ),
            OwnerClaim::Verified(WorkloadKind::VolcanoJob)
        );
    }

    #[test]
    fn a_claim_from_anyone_else_or_without_the_labels_is_not() {
        // A tenant's bare pod naming a (decoy) Job, with labels copied from it.
        let decoy = pod(
            "Job",
            "batch/v1",
            json!({"batch.kubernetes.io/controller-uid": "u-1"}),
        );
        let OwnerClaim::Unverified { why, .. } = claim(&decoy, "alice") else {
            panic!("verified")
        };
        assert!(
            why.contains(r#"Job "train""#) && why.contains(r#""alice""#),
            "{why}"
        );
        assert!(why.contains(JOB_CONTROLLER), "{why}");
        // The Volcano controller cannot vouch for a batch/v1 Job's pod.
        assert!(matches!(
            claim(
                &decoy,
                "system:serviceaccount:volcano-system:volcano-controllers"
            ),
            OwnerClaim::Unverified { .. }
        ));
        // The controller's pod must carry the owner's uid.
        let other = pod(
            "Job",
            "batch/v1",
            json!({"batch.kubernetes.io/controller-uid": "u-2"}),
        );
        let OwnerClaim::Unverified { why, .. } = claim(&other, JOB_CONTROLLER) else {
            panic!("verified")
        };
        assert!(why.contains("controller-uid"), "{why}");
        // Offline (no requester): never verified.
        assert!(matches!(claim(&decoy, ""), OwnerClaim::Unverified { .. }));
        // No controller owner of a launch kind: no claim at all.
        let mut plain = decoy.clone();
        plain["metadata"]["ownerReferences"][0]["controller"] = json!(false);
        assert_eq!(claim(&plain, "alice"), OwnerClaim::None);
        plain["metadata"]["ownerReferences"][0]["controller"] = json!(true);
        plain["metadata"]["ownerReferences"][0]["apiVersion"] = json!("apps/v1");
        plain["metadata"]["ownerReferences"][0]["kind"] = json!("ReplicaSet");
        assert_eq!(claim(&plain, "alice"), OwnerClaim::None);
    }

    const STATEFULSET_CONTROLLER: &str = "system:serviceaccount:kube-system:statefulset-controller";
    const LWS_CONTROLLER: &str = "system:serviceaccount:lws-system:lws-controller-manager";

    /// A LeaderWorkerSet's pods come from StatefulSets: one the StatefulSet controller sends
    /// from a StatefulSet, carrying the set's name, is the set's; the same pod from anyone
    /// else, a pod owned by a set directly (the LWS controller never makes one) or a
    /// StatefulSet's pod without the mark is not.
    #[test]
    fn a_leaderworkerset_pod_is_verified_through_its_statefulset() {
        let lws = WorkloadKind::named("LeaderWorkerSet").unwrap();
        let from_sts = pod(
            "StatefulSet",
            "apps/v1",
            json!({"leaderworkerset.sigs.k8s.io/name": "serve"}),
        );
        assert_eq!(
            claim(&from_sts, STATEFULSET_CONTROLLER),
            OwnerClaim::Verified(lws)
        );
        assert_eq!(
            claim(&from_sts, "system:kube-controller-manager"),
            OwnerClaim::Verified(lws)
        );
        let OwnerClaim::Unverified { why, standalone } = claim(&from_sts, "alice") else {
            panic!("a tenant's pod is not verified");
        };
        assert!(
            why.contains("leaderworkerset.sigs.k8s.io/name = \"serve\"")
                && why.contains("StatefulSet \"train\"")
                && why.contains("alice"),
            "{why}"
        );
        assert_eq!(standalone, None);
        // Not the LWS controller's way of making pods, or no mark: no claim at all.
        let direct = pod(
            "LeaderWorkerSet",
            "leaderworkerset.x-k8s.io/v1",
            json!({"leaderworkerset.sigs.k8s.io/name": "train"}),
        );
        assert_eq!(claim(&direct, STATEFULSET_CONTROLLER), OwnerClaim::None);
        let unmarked = pod("StatefulSet", "apps/v1", json!({"app": "db"}));
        assert_eq!(claim(&unmarked, STATEFULSET_CONTROLLER), OwnerClaim::None);
        let empty = pod(
            "StatefulSet",
            "apps/v1",
            json!({"leaderworkerset.sigs.k8s.io/name": ""}),
        );
        assert_eq!(claim(&empty, STATEFULSET_CONTROLLER), OwnerClaim::None);
    }

    /// Only the LeaderWorkerSet controller creates a StatefulSet whose pod template carries a
    /// set's name, or changes its spec; a StatefulSet without the mark, or an update that leaves
    /// the spec alone (the garbage collector's), is anyone's.
    #[test]
    fn only_the_lws_controller_makes_a_statefulset_carrying_its_mark() {
        let sts = |labels: Value, replicas: i64| {
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "serve"},
                "spec": {"replicas": replicas, "template": {"metadata": {"labels": labels}}}})
        };
        let guard = |object: &Value, old: Option<&Value>, user: &str| {
            let who = Requester {
                username: user,
                groups: &[],
                namespace: "ns",
            };
            intermediate_guard(
                "apps",
                "StatefulSet",
                object,
                old,
                &who,
                &default_pod_creators(),
            )
        };
        let marked = sts(json!({"leaderworkerset.sigs.k8s.io/name": "serve"}), 2);
        assert_eq!(guard(&marked, None, LWS_CONTROLLER), None);
        let why = guard(&marked, None, "alice").expect("a tenant's forged StatefulSet");
        assert!(
            why.contains("leaderworkerset.sigs.k8s.io/name = \"serve\"")
                && why.contains("match.podCreators.LeaderWorkerSet: system:serviceaccount:lws-system:lws-controller-manager")
                && why.contains("alice"),
            "{why}"
        );
        // As an annotation too: the StatefulSet controller copies both onto the pods.
        let annotated = json!({"spec": {"template": {"metadata": {"annotations":
            {"leaderworkerset.sigs.k8s.io/name": "serve"}}}}});
        assert!(guard(&annotated, None, "alice").is_some());
        // A tenant's own StatefulSet; the mark added by an update; the spec left as it was.
        let plain = sts(json!({"app": "db"}), 2);
        assert_eq!(guard(&plain, None, "alice"), None);
        assert!(guard(&marked, Some(&plain), "alice").is_some());
        let mut relabelled = marked.clone();
        relabelled["metadata"]["labels"] = json!({"x": "y"});
        assert_eq!(guard(&relabelled, Some(&marked), "alice"), None);
        let scaled = sts(json!({"leaderworkerset.sigs.k8s.io/name": "serve"}), 9);
        assert!(guard(&scaled, Some(&marked), "alice").is_some());
        assert_eq!(guard(&scaled, Some(&marked), LWS_CONTROLLER), None);
        // Another kind of the group, or another group, is not an intermediate owner.
        let who = Requester {
            username: "alice",
            groups: &[],
            namespace: "ns",
        };
        let creators = default_pod_creators();
        assert_eq!(
            intermediate_guard("apps", "Deployment", &marked, None, &who, &creators),
            None
        );
    }

    #[test]
    fn child_workloads_of_jobsets_and_trainjobs_are_verified_the_same_way() {
        let creators = default_pod_creators();
        let as_user = |user: &'static str| Requester {
            username: user,
            groups: &[],
            namespace: "ns",
        };
        const JOBSET: &str = "system:serviceaccount:jobset-system:jobset-controller-manager";
        const TRAINER: &str =
            "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager";
        let child_job = json!({"metadata": {"name": "ddp-node-0",
            "labels": {"jobset.sigs.k8s.io/jobset-uid": "js-1"},
            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "name": "ddp", "uid": "js-1", "controller": true}]}});
        assert_eq!(
            owner_claim(
                WorkloadKind::BatchJob,
                &child_job,
                &as_user(JOBSET),
                &creators
            ),
            OwnerClaim::Verified(WorkloadKind::JobSet)
        );
        let claimed = owner_claim(
            WorkloadKind::BatchJob,
            &child_job,
            &as_user("alice"),
            &creators,
        );
        assert!(
            matches!(&claimed, OwnerClaim::Unverified { why, .. } if why.contains("the Job names JobSet \"ddp\"")),
            "{claimed:?}"
        );
        let trainer_jobset = json!({"metadata": {"name": "run",
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": "run", "uid": "t-1", "controller": true}]}});
        assert_eq!(
            owner_claim(
                WorkloadKind::JobSet,
                &trainer_jobset,
                &as_user(TRAINER),
                &creators
            ),
            OwnerClaim::Verified(WorkloadKind::TrainJob)
        );
        let mut renamed = trainer_jobset.clone();
        renamed["metadata"]["name"] = json!("other");
        // Sent by Trainer's controller but without the owner's mark: the standalone warning
        // says what is missing, not that the controller is unconfigured.
        let OwnerClaim::Unverified { why, standalone } =
            owner_claim(WorkloadKind::JobSet, &renamed, &as_user(TRAINER), &creators)
        else {
            panic!("a JobSet without its TrainJob's name is not verified");
        };
        assert!(why.contains("does not carry"), "{why}");
        assert_eq!(standalone.as_deref(), Some(why.as_str()));
        // From another user: the standalone warning names match.podCreators.
        let OwnerClaim::Unverified { standalone, .. } =
            owner_claim(WorkloadKind::JobSet, &renamed, &as_user("alice"), &creators)
        else {
            panic!("a JobSet from alice is not verified");
        };
        let standalone = standalone.unwrap_or_default();
        assert!(
            standalone.contains("is not in match.podCreators.TrainJob"),
            "{standalone}"
        );
        // A top-level Job names no JobSet; a Volcano Job has no launch owner kind.
        let top = json!({"metadata": {"name": "j"}});
        assert_eq!(
            owner_claim(WorkloadKind::BatchJob, &top, &as_user(JOBSET), &creators),
            OwnerClaim::None
        );
        assert_eq!(
            owner_claim(
                WorkloadKind::VolcanoJob,
                &child_job,
                &as_user(JOBSET),
                &creators
            ),
            OwnerClaim::None
        );
    }

    #[test]
    fn no_built_in_identity_is_in_a_namespace_tenants_hold() {
        // The matcher finds a service account of `default` however it is written.
        for pattern in [
            "system:serviceaccount:default:kuberay-operator",
            "system:serviceaccount:*:kuberay-operator",
            "system:serviceaccount:default:*",
            "system:serviceaccount:def*",
            "*:default:kuberay-operator",
        ] {
            assert!(matches_service_account_in(pattern, "default"), "{pattern}");
        }
        for pattern in [
            "system:serviceaccount:ray-system:kuberay-operator",
            "system:serviceaccount:default-ray:kuberay-operator",
            "system:kube-controller-manager",
        ] {
            assert!(!matches_service_account_in(pattern, "default"), "{pattern}");
        }
        // Every descriptor's built-in identities are ones no tenant can take.
        let mut built_in = 0;
        for spec in crate::kinds::all() {
            for user in spec.controller {
                built_in += 1;
                assert!(
                    user_pattern_covers_everyone(user).is_none(),
                    "{}: {user}",
                    spec.name
                );
                for ns in TENANT_HELD_NAMESPACES {
                    assert!(
                        !matches_service_account_in(user, ns),
                        "{}: the built-in identity {user} is a service account of {ns:?}, which tenants commonly hold",
                        spec.name
                    );
                }
            }
        }
        assert!(built_in > 0, "the descriptors name built-in identities");
    }

    #[test]
    fn the_config_says_who_is_trusted_for_each_kind_and_why() {
        let policy = crate::Policy::from_yaml(
            "match:\n  exemptions: []\n  podCreators:\n    Job: [system:kube-controller-manager]\n    VolcanoJob: []\nqueues: {q: {}}\n",
        )
        .unwrap();
        let said: BTreeMap<&str, String> = policy
            .trusted_creators
            .iter()
            .map(|t| (t.kind.as_str(), t.to_string()))
            .collect();
        // Every owner kind, in the registry's order.
        let kinds: Vec<WorkloadKind> = owner_kinds().collect();
        let listed: Vec<WorkloadKind> = policy.trusted_creators.iter().map(|t| t.kind).collect();
        assert_eq!(listed, kinds);
        assert_eq!(
            said["Job"],
            "system:kube-controller-manager (match.podCreators.Job)"
        );
        assert_eq!(said["VolcanoJob"], "no one (match.podCreators.VolcanoJob)");
        assert_eq!(
            said["JobSet"],
            "system:serviceaccount:jobset-system:jobset-controller-manager (built in: the upstream controller's identity; match.podCreators.JobSet replaces it)"
        );
        for kind in ["RayJob", "RayCluster"] {
            assert!(
                said[kind].starts_with(&format!(
                    "no one (no built-in identity: name the controller's in match.podCreators.{kind}"
                )),
                "{}",
                said[kind]
            );
        }
        // What is said is what is trusted.
        for t in &policy.trusted_creators {
            let creators = &policy.config.match_rules.pod_creators;
            assert_eq!(
                creators.get(t.kind.as_str()).cloned().unwrap_or_default(),
                t.users
            );
        }
    }

    #[test]
    fn pod_creators_are_checked() {
        let mut errors = Vec::new();
        let creators = BTreeMap::from([
            ("Deployment".to_string(), vec!["x".to_string()]),
            ("Job".to_string(), vec!["*".to_string()]),
            (
                "JobSet".to_string(),
                vec![
                    "?*".to_string(),
                    "system:serviceaccount:*".to_string(),
                    "system:serviceaccount:jobset-system:*".to_string(),
                ],
            ),
        ]);
        check_pod_creators(&creators, "match.podCreators", &mut errors);
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 4, "{text:?}");
        assert!(text[0].starts_with("match.podCreators.Deployment: unknown workload kind"));
        assert!(text[1].starts_with("match.podCreators.Job[0]:"));
        assert!(
            text[2].starts_with("match.podCreators.JobSet[0]:"),
            "{text:?}"
        );
        assert!(
            text[3].starts_with("match.podCreators.JobSet[1]:"),
            "{text:?}"
        );
        assert!(text[3].contains("every service account"), "{text:?}");
    }
}
