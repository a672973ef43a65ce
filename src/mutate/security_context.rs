//! Container `securityContext` defaults, merged per field where the user left them unset:
//! `allowPrivilegeEscalation: false`, `capabilities.drop: [ALL]`,
//! `seccompProfile.type: RuntimeDefault`; optional pod-level `runAsNonRoot`, `runAsUser`,
//! `fsGroup`. Applied to `containers` and `initContainers` of every pod spec. Pod-level
//! `runAsNonRoot` is never added where a container (or the pod) explicitly runs as UID 0.
//! A TrainJob's trainer pods get them through launchgate's runtime patch ([`runtime_patch`]).

use super::{Findings, MutationContext, Mutator, runtime_patch};
use crate::error::ConfigError;
use crate::json::Pointer as _;
use crate::kinds::RuntimeSpec;
use crate::patch::{MapNode, Node};
use crate::workload;
use crate::workload::edit::deep_merge;
use crate::workload::runtime::{self, TrainingRuntime};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Per-queue security defaults.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct SecurityContextConfig {
    /// Apply these defaults to the queue's pod specs (false: leave every securityContext alone).
    pub enabled: bool,
    /// Container `allowPrivilegeEscalation` (null: leave alone).
    pub allow_privilege_escalation: Option<bool>,
    /// Container `capabilities.drop` when the user set none (empty: leave alone).
    pub drop_capabilities: Vec<String>,
    /// Container `seccompProfile.type` (null: leave alone). `Localhost` is not supported here.
    pub seccomp_profile: Option<String>,
    /// Pod-level `runAsNonRoot` (off by default: it breaks root images).
    pub run_as_non_root: Option<bool>,
    /// Pod-level `runAsUser`.
    pub run_as_user: Option<i64>,
    /// Pod-level `fsGroup` (useful for NFS ownership).
    pub fs_group: Option<i64>,
}

impl Default for SecurityContextConfig {
    fn default() -> Self {
        SecurityContextConfig {
            enabled: true,
            allow_privilege_escalation: Some(false),
            drop_capabilities: vec!["ALL".into()],
            seccomp_profile: Some("RuntimeDefault".into()),
            run_as_non_root: None,
            run_as_user: None,
            fs_group: None,
        }
    }
}

impl SecurityContextConfig {
    pub fn check(&self, at: &str, errors: &mut Vec<ConfigError>) {
        if let Some(p) = &self.seccomp_profile
            && p != "RuntimeDefault"
            && p != "Unconfined"
        {
            errors.push(ConfigError::new(
                format!("{at}.seccompProfile"),
                format!("must be RuntimeDefault or Unconfined, got {p:?}"),
            ));
        }
        for (key, v) in [("runAsUser", self.run_as_user), ("fsGroup", self.fs_group)] {
            if v.is_some_and(|v| !(0..=i64::from(i32::MAX)).contains(&v)) {
                errors.push(ConfigError::new(
                    format!("{at}.{key}"),
                    "must be between 0 and 2147483647",
                ));
            }
        }
        if self.run_as_non_root == Some(true) && self.run_as_user == Some(0) {
            errors.push(ConfigError::new(
                format!("{at}.runAsUser"),
                "0 (root) contradicts runAsNonRoot: true",
            ));
        }
    }
}

/// The security-context mutator.
pub const MUTATOR: Mutator = Mutator::new("security-context", mutate);

fn is_unset(map: &Map<String, Value>, key: &str) -> bool {
    map.get(key).is_none_or(Value::is_null)
}

/// Sets `map[key] = value` when unset; true when it changed something.
fn set_if_unset(map: &mut MapNode<'_>, key: &str, value: Value) -> bool {
    if is_unset(map, key) {
        map.set(key, value);
        true
    } else {
        false
    }
}

/// The pod spec sets a pod-level `seccompProfile`, which its containers inherit.
fn sets_seccomp(pod_spec: &Map<String, Value>) -> bool {
    pod_spec
        .get("securityContext")
        .and_then(|s| s.get("seccompProfile"))
        .is_some_and(|v| !v.is_null())
}

fn adds_sys_admin(sc: &Map<String, Value>) -> bool {
    sc.get("capabilities")
        .and_then(|c| c.get("add"))
        .and_then(Value::as_array)
        .is_some_and(|add| {
            add.iter()
                .any(|c| matches!(c.as_str(), Some("SYS_ADMIN" | "CAP_SYS_ADMIN")))
        })
}

/// Applies the container defaults to one container; returns true when it changed it.
fn default_container(
    cfg: &SecurityContextConfig,
    pod_sets_seccomp: bool,
    container: &mut MapNode<'_>,
    where_: &dyn std::fmt::Display,
    findings: &mut Findings,
) -> bool {
    let privileged = container
        .get("securityContext")
        .and_then(|s| s.get("privileged"))
        .and_then(Value::as_bool)
        == Some(true);
    if privileged {
        findings.warn(
            crate::rules::SECURITY_CONTEXT_PRIVILEGED,
            format!("launchgate: {where_} is privileged; its securityContext was left as is"),
        );
        return false;
    }
    let before = container.get("securityContext");
    let absent = before.is_none();
    // A securityContext that is not an object is replaced.
    let mut changed = before.is_some_and(|v| !v.is_object());
    let mut sc = container.object_or_new("securityContext");
    if let Some(ape) = cfg.allow_privilege_escalation {
        // The API rejects allowPrivilegeEscalation=false together with CAP_SYS_ADMIN.
        let conflicts_with_sys_admin = !ape && adds_sys_admin(&sc);
        if !conflicts_with_sys_admin {
            changed |= set_if_unset(&mut sc, "allowPrivilegeEscalation", Value::Bool(ape));
        } else if is_unset(&sc, "allowPrivilegeEscalation") {
            findings.warn(crate::rules::SECURITY_CONTEXT_SYS_ADMIN, format!(
                "launchgate: {where_} adds CAP_SYS_ADMIN; allowPrivilegeEscalation was left unset"
            ));
        }
    }
    if !cfg.drop_capabilities.is_empty() {
        changed |= !sc.get("capabilities").is_some_and(Value::is_object);
        let mut caps = sc.object_or_new("capabilities");
        changed |= set_if_unset(&mut caps, "drop", json!(cfg.drop_capabilities));
    }
    if let Some(profile) = &cfg.seccomp_profile
        && !pod_sets_seccomp
    {
        changed |= set_if_unset(&mut sc, "seccompProfile", json!({ "type": profile }));
    }
    if absent && sc.is_empty() {
        container.remove("securityContext");
        return false;
    }
    changed
}

/// Where pod-level `runAsNonRoot: true` would contradict what the user wrote: a container that
/// explicitly runs as UID 0 (and does not set its own `runAsNonRoot`), or a pod-level
/// `runAsUser: 0` that some container inherits. The kubelet refuses to start such a container
/// (`CreateContainerConfigError`), so the run would never start.
fn root_containers(
    pod_spec: &Map<String, Value>,
    spec_path: &dyn std::fmt::Display,
) -> Vec<String> {
    let uid = |sc: Option<&Value>| sc.and_then(|s| s.get("runAsUser")).and_then(Value::as_i64);
    let pod_uid = uid(pod_spec.get("securityContext"));
    let mut out = Vec::new();
    for (slot, c) in workload::containers(pod_spec, &[]) {
        let sc = c.get("securityContext");
        let own_non_root = sc
            .and_then(|s| s.get("runAsNonRoot"))
            .is_some_and(|v| !v.is_null());
        if !own_non_root && uid(sc).or(pod_uid) == Some(0) {
            let name = workload::name_in(c).unwrap_or_default().to_string();
            out.push(
                workload::ContainerAt {
                    spec_path,
                    slot,
                    name,
                }
                .to_string(),
            );
        }
    }
    out
}

fn default_pod(
    cfg: &SecurityContextConfig,
    pod_spec: &mut MapNode<'_>,
    spec_path: &dyn std::fmt::Display,
    findings: &mut Findings,
) -> bool {
    if cfg.run_as_non_root.is_none() && cfg.run_as_user.is_none() && cfg.fs_group.is_none() {
        return false;
    }
    let roots = if cfg.run_as_non_root == Some(true) {
        root_containers(pod_spec, spec_path)
    } else {
        Vec::new()
    };
    let had_sc = pod_spec.contains_key("securityContext");
    let mut changed = pod_spec
        .get("securityContext")
        .is_some_and(|v| !v.is_object());
    let mut sc = pod_spec.object_or_new("securityContext");
    if let Some(v) = cfg.run_as_non_root {
        if roots.is_empty() {
            changed |= set_if_unset(&mut sc, "runAsNonRoot", Value::Bool(v));
        } else if is_unset(&sc, "runAsNonRoot") {
            findings.warn(crate::rules::SECURITY_CONTEXT_ROOT, format!(
                "launchgate: {} run(s) as UID 0 (runAsUser: 0); pod-level runAsNonRoot was not added because the kubelet would refuse to start it",
                roots.join(", ")
            ));
        }
    }
    if let Some(v) = cfg.run_as_user {
        changed |= set_if_unset(&mut sc, "runAsUser", json!(v));
    }
    if let Some(v) = cfg.fs_group {
        changed |= set_if_unset(&mut sc, "fsGroup", json!(v));
    }
    if !had_sc && sc.is_empty() {
        pod_spec.remove("securityContext");
    }
    changed
}

pub fn mutate(
    ctx: &MutationContext<'_>,
    object: &mut Node<'_, Value>,
    findings: &mut Findings,
) -> bool {
    let cfg = ctx.settings.security_context;
    if !cfg.enabled {
        return false;
    }
    if let Some(rt) = ctx.kind.spec().runtime {
        let runtime = ctx.runtime;
        let named = runtime::runtime_ref(rt, object)
            .map_or_else(|| "its runtime".to_string(), |r| r.describe());
        // The tenant's own runtime patches are merged into the same pods, before launchgate's.
        let tenant = runtime::tenant_patch_pod_spec(ctx.kind, object, runtime_patch::MANAGER);
        let kind = ctx.kind;
        return runtime_patch::with_trainer_pod_spec(kind, object, |spec, at| match runtime {
            Some(runtime) => harden_over_runtime(cfg, kind, spec, &at, runtime, &tenant, findings),
            None => harden_blind(cfg, rt, spec, &at, &named, &tenant, findings),
        });
    }
    ctx.for_each_pod_spec(object, |spec, spec_path| {
        harden_pod_spec(ctx, cfg, spec, spec_path, findings)
    })
}

/// The defaults for one pod spec and its containers.
fn harden_pod_spec(
    ctx: &MutationContext<'_>,
    cfg: &SecurityContextConfig,
    spec: &mut MapNode<'_>,
    spec_path: &dyn std::fmt::Display,
    findings: &mut Findings,
) -> bool {
    // Windows pods cannot take Linux security options.
    if workload::is_windows(spec) {
        return false;
    }
    let mut changed = default_pod(cfg, spec, spec_path, findings);
    let pod_sets_seccomp = sets_seccomp(spec);
    workload::for_each_container_mut(spec, ctx.sidecars, |slot, c| {
        let where_ = slot.path(spec_path);
        changed |= default_container(cfg, pod_sets_seccomp, c, &where_, findings);
    });
    changed
}

/// A TrainJob whose runtime is known: the defaults the trainer's pod would get, judged on the
/// pod Trainer makes (the runtime's trainer pod with the TrainJob's runtime patches over it),
/// and written into launchgate's patch only where that pod leaves them unset. A field the
/// runtime sets keeps the runtime's value; a privileged node container (RDMA, GPUDirect) is
/// left as is and warned about, as in a Job.
fn harden_over_runtime(
    cfg: &SecurityContextConfig,
    kind: workload::WorkloadKind,
    patch: &mut Map<String, Value>,
    spec_path: &dyn std::fmt::Display,
    runtime: &TrainingRuntime,
    tenant: &Map<String, Value>,
    findings: &mut Findings,
) -> bool {
    let mut base = runtime::node_pod_spec(kind, &runtime.object).unwrap_or_default();
    runtime::merge_pod_spec(&mut base, tenant);
    let where_ = format!(
        "the node container of {} (a TrainJob's trainer)",
        runtime.reference.describe()
    );
    let rt = kind.spec().runtime.expect("a kind that reads a runtime");
    harden_over(cfg, rt, patch, spec_path, base, &where_, findings)
}

/// Hardens launchgate's `patch` as it would the pod `merged` with `patch` over it, writing
/// into `patch` only what the hardening adds.
fn harden_over(
    cfg: &SecurityContextConfig,
    rt: &RuntimeSpec,
    patch: &mut Map<String, Value>,
    spec_path: &dyn std::fmt::Display,
    mut merged: Map<String, Value>,
    where_: &dyn std::fmt::Display,
    findings: &mut Findings,
) -> bool {
    runtime::merge_pod_spec(&mut merged, patch);
    if workload::is_windows(&merged) {
        return false;
    }
    let before = merged.clone();
    default_pod(cfg, &mut Node::scratch(&mut merged), spec_path, findings);
    let pod_sets_seccomp = sets_seccomp(&merged);
    if let Some(node) = runtime::node_container_mut(rt, &mut merged) {
        default_container(
            cfg,
            pod_sets_seccomp,
            &mut Node::scratch(node),
            where_,
            findings,
        );
    }
    // Only what the hardening added goes into the patch.
    let mut changed = false;
    if let Some(added) = added_leaves(before.get("securityContext"), merged.get("securityContext"))
    {
        changed |= deep_merge(
            &mut Node::scratch(&mut *patch).object_or_new("securityContext"),
            &added,
        );
    }
    let node_sc = |spec: &Map<String, Value>| {
        let mut spec = spec.clone();
        runtime::node_container_mut(rt, &mut spec)?.remove("securityContext")
    };
    if let Some(added) = added_leaves(node_sc(&before).as_ref(), node_sc(&merged).as_ref())
        && let Some(node) = runtime::node_container_mut(rt, patch)
    {
        changed |= deep_merge(
            &mut Node::scratch(node).object_or_new("securityContext"),
            &added,
        );
    }
    changed
}

/// A TrainJob whose runtime cannot be read: only the defaults no runtime can make invalid.
/// `allowPrivilegeEscalation: false` is not written (with a runtime whose node container is
/// privileged or adds CAP_SYS_ADMIN the API server would reject every pod Trainer makes), nor
/// pod-level `runAsNonRoot` (a runtime container running as UID 0 would never start); the
/// user is told.
fn harden_blind(
    cfg: &SecurityContextConfig,
    rt: &RuntimeSpec,
    spec: &mut Map<String, Value>,
    spec_path: &dyn std::fmt::Display,
    runtime: &str,
    tenant: &Map<String, Value>,
    findings: &mut Findings,
) -> bool {
    let cautious = SecurityContextConfig {
        allow_privilege_escalation: None,
        run_as_non_root: None,
        ..cfg.clone()
    };
    let where_ = format!("the node container of the TrainJob's runtime patches ({runtime})");
    let changed = harden_over(
        &cautious,
        rt,
        spec,
        spec_path,
        tenant.clone(),
        &where_,
        findings,
    );
    let unset =
        |key: &str, sc: Option<&Value>| sc.and_then(|s| s.get(key)).is_none_or(Value::is_null);
    let node_sc =
        runtime::node_container_mut(rt, spec).and_then(|c| c.get("securityContext").cloned());
    let mut left = Vec::new();
    if cfg.allow_privilege_escalation.is_some()
        && unset("allowPrivilegeEscalation", node_sc.as_ref())
    {
        left.push("allowPrivilegeEscalation");
    }
    if cfg.run_as_non_root.is_some() && unset("runAsNonRoot", spec.get("securityContext")) {
        left.push("runAsNonRoot");
    }
    if !left.is_empty() {
        findings.warn(crate::rules::SECURITY_CONTEXT_UNREADABLE_RUNTIME, format!(
            "launchgate: {runtime} cannot be read, so {} was not set on the TrainJob's node pods (a privileged or root runtime would make them invalid)",
            left.join(" and ")
        ));
    }
    changed
}

/// The leaves of `after` that `before` lacks (or has otherwise), as an object; `None` when
/// nothing was added.
fn added_leaves(before: Option<&Value>, after: Option<&Value>) -> Option<Value> {
    let after = after?;
    match (before, after) {
        (Some(Value::Object(b)), Value::Object(a)) => {
            let out: Map<String, Value> = a
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), added_leaves(b.get(k), Some(v))?)))
                .collect();
            (!out.is_empty()).then_some(Value::Object(out))
        }
        (Some(b), a) if b == a => None,
        _ => Some(after.clone()),
    }
}

/// `kubectl debug` adds an ephemeral container through the `pods/ephemeralcontainers`
/// subresource (an UPDATE): the new ones (names not in `old_object`) get the same container
/// defaults. Existing ephemeral containers cannot change, so they are left as they are.
pub fn mutate_ephemeral(
    ctx: &MutationContext<'_>,
    object: &mut Value,
    old_object: Option<&Value>,
    findings: &mut Findings,
) -> bool {
    let cfg = ctx.settings.security_context;
    if !cfg.enabled {
        return false;
    }
    let existing: Vec<&str> = old_object
        .and_then(|o| o.at("/spec/ephemeralContainers"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(workload::name_of)
        .collect();
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return false;
    };
    if workload::is_windows(spec) {
        return false;
    }
    let pod_sets_seccomp = sets_seccomp(spec);
    let mut changed = false;
    let items = spec
        .get_mut("ephemeralContainers")
        .and_then(Value::as_array_mut);
    for (i, c) in items.into_iter().flatten().enumerate() {
        let Some(c) = c.as_object_mut() else { continue };
        if workload::name_in(c).is_some_and(|n| existing.contains(&n)) {
            continue;
        }
        let where_ = format!("spec.ephemeralContainers[{i}]");
        changed |= default_container(
            cfg,
            pod_sets_seccomp,
            &mut Node::scratch(c),
            &where_,
            findings,
        );
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutate::test_support::{mutate_with, queue_yaml};
    use serde_json::json;

    fn pod(containers: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "labels": {"wandb.ai/monitor": "true"}},
               "spec": {"securityContext": {}, "containers": containers}})
    }

    const RESTRICTED: &str = r#"{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]},"seccompProfile":{"type":"RuntimeDefault"}}"#;

    #[test]
    fn empty_container_gets_three_defaults() {
        let (out, f) = mutate_with(&MUTATOR, "{}", pod(json!([{"name": "a"}])));
        let expected: Value = serde_json::from_str(RESTRICTED).unwrap();
        assert_eq!(out["spec"]["containers"][0]["securityContext"], expected);
        assert!(f.warning_texts().is_empty());
    }

    #[test]
    fn user_fields_are_kept_and_merged() {
        let c = json!([{"name": "a", "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": true}}]);
        let (out, _) = mutate_with(&MUTATOR, "{}", pod(c));
        let sc = &out["spec"]["containers"][0]["securityContext"];
        assert_eq!(sc["runAsUser"], 1000);
        assert_eq!(sc["allowPrivilegeEscalation"], true);
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    }

    #[test]
    fn privileged_container_is_left_and_warned() {
        let c = json!([{"name": "a", "securityContext": {"privileged": true}}]);
        let (out, f) = mutate_with(&MUTATOR, "{}", pod(c));
        assert_eq!(
            out["spec"]["containers"][0]["securityContext"],
            json!({"privileged": true})
        );
        assert_eq!(f.warning_texts().len(), 1);
        assert!(f.warning_texts()[0].contains("spec.containers[0]"));
    }

    #[test]
    fn init_containers_and_pod_level_seccomp() {
        let mut p = pod(json!([{"name": "a"}]));
        p["spec"]["initContainers"] = json!([{"name": "i"}]);
        p["spec"]["securityContext"] = json!({"seccompProfile": {"type": "Unconfined"}});
        let (out, _) = mutate_with(&MUTATOR, "{}", p);
        let init = &out["spec"]["initContainers"][0]["securityContext"];
        assert_eq!(init["allowPrivilegeEscalation"], false);
        assert!(
            init.get("seccompProfile").is_none(),
            "pod-level seccomp wins"
        );
    }

    #[test]
    fn sys_admin_keeps_escalation_unset() {
        let c = json!([{"name": "a", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]);
        let (out, f) = mutate_with(&MUTATOR, "{}", pod(c));
        let sc = &out["spec"]["containers"][0]["securityContext"];
        assert!(sc.get("allowPrivilegeEscalation").is_none());
        assert_eq!(f.warning_texts().len(), 1);
    }

    #[test]
    fn pod_level_options_when_configured() {
        let q = "securityContext: {runAsNonRoot: true, runAsUser: 1000, fsGroup: 2000}";
        let (out, _) = mutate_with(&MUTATOR, q, pod(json!([{"name": "a"}])));
        assert_eq!(
            out["spec"]["securityContext"],
            json!({"runAsNonRoot": true, "runAsUser": 1000, "fsGroup": 2000})
        );
        assert!(queue_yaml("securityContext: {runAsNonRoot: true, runAsUser: 0}").is_err());
    }

    #[test]
    fn pod_run_as_non_root_never_contradicts_a_root_container() {
        let q = "securityContext: {runAsNonRoot: true}";
        let c = json!([{"name": "app"}, {"name": "fixer", "securityContext": {"runAsUser": 0}}]);
        let (out, f) = mutate_with(&MUTATOR, q, pod(c));
        assert!(
            out["spec"]["securityContext"].get("runAsNonRoot").is_none(),
            "{}",
            out["spec"]["securityContext"]
        );
        assert_eq!(f.warning_texts().len(), 1, "{:?}", f.warning_texts());
        assert!(
            f.warning_texts()[0].contains("spec.containers[1] (fixer)")
                && f.warning_texts()[0].contains("UID 0"),
            "{:?}",
            f.warning_texts()
        );
        // An init container as root counts too; pod-level runAsUser: 0 inherited counts.
        let mut p = pod(json!([{"name": "app"}]));
        p["spec"]["initContainers"] =
            json!([{"name": "chown", "securityContext": {"runAsUser": 0}}]);
        let (out, f) = mutate_with(&MUTATOR, q, p);
        assert!(out["spec"]["securityContext"].get("runAsNonRoot").is_none());
        assert!(
            f.warning_texts()[0].contains("initContainers[0] (chown)"),
            "{:?}",
            f.warning_texts()
        );
        let mut p = pod(json!([{"name": "app"}]));
        p["spec"]["securityContext"] = json!({"runAsUser": 0});
        let (out, _) = mutate_with(&MUTATOR, q, p);
        assert!(out["spec"]["securityContext"].get("runAsNonRoot").is_none());
        // A root container that sets its own runAsNonRoot, or a non-root one: no contradiction.
        let c = json!([{"name": "app", "securityContext": {"runAsUser": 1000}},
                       {"name": "b", "securityContext": {"runAsUser": 0, "runAsNonRoot": false}}]);
        let (out, f) = mutate_with(&MUTATOR, q, pod(c));
        assert_eq!(out["spec"]["securityContext"]["runAsNonRoot"], true);
        assert!(f.warning_texts().is_empty(), "{:?}", f.warning_texts());
    }

    #[test]
    fn disabled_and_idempotent() {
        let (out, _) = mutate_with(
            &MUTATOR,
            "securityContext: {enabled: false}",
            pod(json!([{"name": "a"}])),
        );
        assert!(
            out["spec"]["containers"][0]
                .get("securityContext")
                .is_none()
        );
        let (once, _) = mutate_with(&MUTATOR, "{}", pod(json!([{"name": "a"}])));
        let (twice, _) = mutate_with(&MUTATOR, "{}", once.clone());
        assert_eq!(once, twice);
    }
}
