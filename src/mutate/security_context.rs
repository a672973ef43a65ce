//! Container `securityContext` defaults, merged per field where the user left them unset:
//! `allowPrivilegeEscalation: false`, `capabilities.drop: [ALL]`,
//! `seccompProfile.type: RuntimeDefault`; optional pod-level `runAsNonRoot`, `runAsUser`,
//! `fsGroup`. Applied to `containers` and `initContainers` of every pod spec.

use super::{Findings, MutationContext, Mutator};
use crate::policy::ConfigError;
use crate::workload::{self, CONTAINER_LISTS};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Per-queue security defaults.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct SecurityContextConfig {
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
pub struct SecurityContext;

fn object_entry<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = map.entry(key).or_insert_with(|| json!({}));
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut().expect("just made an object")
}

fn is_unset(map: &Map<String, Value>, key: &str) -> bool {
    map.get(key).is_none_or(Value::is_null)
}

/// Sets `map[key] = value` when unset; true when it changed something.
fn set_if_unset(map: &mut Map<String, Value>, key: &str, value: Value) -> bool {
    if is_unset(map, key) {
        map.insert(key.to_string(), value);
        true
    } else {
        false
    }
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
    container: &mut Map<String, Value>,
    where_: &str,
    findings: &mut Findings,
) -> bool {
    let privileged = container
        .get("securityContext")
        .and_then(|s| s.get("privileged"))
        .and_then(Value::as_bool)
        == Some(true);
    if privileged {
        findings.warn(format!(
            "launchgate: {where_} is privileged; its securityContext was left as is"
        ));
        return false;
    }
    let before = container.get("securityContext").cloned();
    let sc = object_entry(container, "securityContext");
    if let Some(ape) = cfg.allow_privilege_escalation {
        // The API rejects allowPrivilegeEscalation=false together with CAP_SYS_ADMIN.
        let conflicts_with_sys_admin = !ape && adds_sys_admin(sc);
        if !conflicts_with_sys_admin {
            set_if_unset(sc, "allowPrivilegeEscalation", Value::Bool(ape));
        } else if is_unset(sc, "allowPrivilegeEscalation") {
            findings.warn(format!(
                "launchgate: {where_} adds CAP_SYS_ADMIN; allowPrivilegeEscalation was left unset"
            ));
        }
    }
    if !cfg.drop_capabilities.is_empty() {
        let caps = object_entry(sc, "capabilities");
        set_if_unset(caps, "drop", json!(cfg.drop_capabilities));
    }
    if let Some(profile) = &cfg.seccomp_profile
        && !pod_sets_seccomp
    {
        set_if_unset(sc, "seccompProfile", json!({ "type": profile }));
    }
    let after = container.get("securityContext");
    if before.is_none() && after.is_some_and(|v| v.as_object().is_some_and(Map::is_empty)) {
        container.remove("securityContext");
        return false;
    }
    before.as_ref() != after
}

fn default_pod(cfg: &SecurityContextConfig, pod_spec: &mut Map<String, Value>) -> bool {
    if cfg.run_as_non_root.is_none() && cfg.run_as_user.is_none() && cfg.fs_group.is_none() {
        return false;
    }
    let sc = object_entry(pod_spec, "securityContext");
    let mut changed = false;
    if let Some(v) = cfg.run_as_non_root {
        changed |= set_if_unset(sc, "runAsNonRoot", Value::Bool(v));
    }
    if let Some(v) = cfg.run_as_user {
        changed |= set_if_unset(sc, "runAsUser", json!(v));
    }
    if let Some(v) = cfg.fs_group {
        changed |= set_if_unset(sc, "fsGroup", json!(v));
    }
    changed
}

impl Mutator for SecurityContext {
    fn name(&self) -> &'static str {
        "security-context"
    }

    fn mutate(
        &self,
        ctx: &MutationContext<'_>,
        object: &mut Value,
        findings: &mut Findings,
    ) -> bool {
        let cfg = &ctx.queue.config.security_context;
        if !cfg.enabled {
            return false;
        }
        let mut changed = false;
        workload::for_each_template_mut(ctx.kind, object, |info, template| {
            let Some(spec) = workload::pod_spec_mut(template) else {
                return;
            };
            // Windows pods cannot take Linux security options.
            if spec
                .get("os")
                .and_then(|o| o.get("name"))
                .and_then(Value::as_str)
                == Some("windows")
            {
                return;
            }
            changed |= default_pod(cfg, spec);
            let pod_sets_seccomp = spec
                .get("securityContext")
                .and_then(|s| s.get("seccompProfile"))
                .is_some_and(|v| !v.is_null());
            for list in CONTAINER_LISTS {
                let Some(items) = spec.get_mut(list).and_then(Value::as_array_mut) else {
                    continue;
                };
                for (i, c) in items.iter_mut().enumerate() {
                    let Some(c) = c.as_object_mut() else { continue };
                    let where_ = format!("{}.{list}[{i}]", info.spec_path());
                    changed |= default_container(cfg, pod_sets_seccomp, c, &where_, findings);
                }
            }
        });
        changed
    }
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
        let (out, f) = mutate_with(&SecurityContext, "{}", pod(json!([{"name": "a"}])));
        let expected: Value = serde_json::from_str(RESTRICTED).unwrap();
        assert_eq!(out["spec"]["containers"][0]["securityContext"], expected);
        assert!(f.warnings.is_empty());
    }

    #[test]
    fn user_fields_are_kept_and_merged() {
        let c = json!([{"name": "a", "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": true}}]);
        let (out, _) = mutate_with(&SecurityContext, "{}", pod(c));
        let sc = &out["spec"]["containers"][0]["securityContext"];
        assert_eq!(sc["runAsUser"], 1000);
        assert_eq!(sc["allowPrivilegeEscalation"], true);
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    }

    #[test]
    fn privileged_container_is_left_and_warned() {
        let c = json!([{"name": "a", "securityContext": {"privileged": true}}]);
        let (out, f) = mutate_with(&SecurityContext, "{}", pod(c));
        assert_eq!(
            out["spec"]["containers"][0]["securityContext"],
            json!({"privileged": true})
        );
        assert_eq!(f.warnings.len(), 1);
        assert!(f.warnings[0].contains("spec.containers[0]"));
    }

    #[test]
    fn init_containers_and_pod_level_seccomp() {
        let mut p = pod(json!([{"name": "a"}]));
        p["spec"]["initContainers"] = json!([{"name": "i"}]);
        p["spec"]["securityContext"] = json!({"seccompProfile": {"type": "Unconfined"}});
        let (out, _) = mutate_with(&SecurityContext, "{}", p);
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
        let (out, f) = mutate_with(&SecurityContext, "{}", pod(c));
        let sc = &out["spec"]["containers"][0]["securityContext"];
        assert!(sc.get("allowPrivilegeEscalation").is_none());
        assert_eq!(f.warnings.len(), 1);
    }

    #[test]
    fn pod_level_options_when_configured() {
        let q = "securityContext: {runAsNonRoot: true, runAsUser: 1000, fsGroup: 2000}";
        let (out, _) = mutate_with(&SecurityContext, q, pod(json!([{"name": "a"}])));
        assert_eq!(
            out["spec"]["securityContext"],
            json!({"runAsNonRoot": true, "runAsUser": 1000, "fsGroup": 2000})
        );
        assert!(queue_yaml("securityContext: {runAsNonRoot: true, runAsUser: 0}").is_err());
    }

    #[test]
    fn disabled_and_idempotent() {
        let (out, _) = mutate_with(
            &SecurityContext,
            "securityContext: {enabled: false}",
            pod(json!([{"name": "a"}])),
        );
        assert!(
            out["spec"]["containers"][0]
                .get("securityContext")
                .is_none()
        );
        let (once, _) = mutate_with(&SecurityContext, "{}", pod(json!([{"name": "a"}])));
        let (twice, _) = mutate_with(&SecurityContext, "{}", once.clone());
        assert_eq!(once, twice);
    }
}
