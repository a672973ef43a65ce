//! The shared cache: a per-queue volume (an existing PVC, or NFS `server` + `path`) added to
//! every pod spec and mounted into every training container, plus `XDG_CACHE_HOME`, `HF_HOME`
//! and `TORCH_HOME` pointing into it (unless set), so Hugging Face, W&B artifacts and torch hub
//! share one download cache.
//!
//! * A volume already backed by the same claim (or NFS export) is reused under the user's name.
//! * The mount path is `mountPath` (default `/root/.cache`) for root pods and
//!   `nonRootMountPath` (default `/cache`) when the pod or container runs as non-root.
//! * A container that already mounts the cache volume keeps its mount; one that mounts
//!   something else at the cache path is left alone and warned about.

use super::upsert::{self, Upsert};
use super::{Findings, MutationContext, Mutator};
use crate::policy::ConfigError;
use crate::workload;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// Per-queue cache settings.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct CacheConfig {
    pub enabled: bool,
    /// Name of the volume launchgate adds.
    pub volume_name: String,
    pub persistent_volume_claim: Option<ClaimSource>,
    pub nfs: Option<NfsSource>,
    /// Mount path for root containers.
    pub mount_path: String,
    /// Mount path for containers that run as non-root.
    pub non_root_mount_path: String,
    /// Env vars to point into the cache: name → sub-directory ("" = the cache root).
    pub env: BTreeMap<String, String>,
    pub read_only: bool,
}

/// An existing PersistentVolumeClaim.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClaimSource {
    pub claim_name: String,
}

/// A direct NFS export.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NfsSource {
    pub server: String,
    pub path: String,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: true,
            volume_name: "launchgate-cache".into(),
            persistent_volume_claim: None,
            nfs: None,
            mount_path: "/root/.cache".into(),
            non_root_mount_path: "/cache".into(),
            env: BTreeMap::from([
                ("XDG_CACHE_HOME".into(), String::new()),
                ("HF_HOME".into(), "huggingface".into()),
                ("TORCH_HOME".into(), "torch".into()),
            ]),
            read_only: false,
        }
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

impl CacheConfig {
    pub fn check(&self, at: &str, errors: &mut Vec<ConfigError>) {
        match (&self.persistent_volume_claim, &self.nfs) {
            (Some(_), Some(_)) => errors.push(ConfigError::new(
                at,
                "set either persistentVolumeClaim or nfs, not both",
            )),
            (None, None) if self.enabled => errors.push(ConfigError::new(
                at,
                "an enabled cache needs persistentVolumeClaim.claimName or nfs.server + nfs.path",
            )),
            _ => {}
        }
        if !is_dns_label(&self.volume_name) {
            errors.push(ConfigError::new(
                format!("{at}.volumeName"),
                format!(
                    "{:?} is not a valid volume name (DNS label)",
                    self.volume_name
                ),
            ));
        }
        for (key, p) in [
            ("mountPath", &self.mount_path),
            ("nonRootMountPath", &self.non_root_mount_path),
        ] {
            if !p.starts_with('/') || p.contains(':') {
                errors.push(ConfigError::new(
                    format!("{at}.{key}"),
                    format!("{p:?} must be an absolute path"),
                ));
            }
        }
        if let Some(nfs) = &self.nfs
            && (nfs.server.is_empty() || !nfs.path.starts_with('/'))
        {
            errors.push(ConfigError::new(
                format!("{at}.nfs"),
                "needs a server and an absolute path",
            ));
        }
        if let Some(c) = &self.persistent_volume_claim
            && c.claim_name.is_empty()
        {
            errors.push(ConfigError::new(
                format!("{at}.persistentVolumeClaim.claimName"),
                "must not be empty",
            ));
        }
    }

    /// The volume source JSON (`{"persistentVolumeClaim": ...}` or `{"nfs": ...}`).
    fn source(&self) -> Option<(&'static str, Value)> {
        if let Some(c) = &self.persistent_volume_claim {
            let mut v = json!({"claimName": c.claim_name});
            if self.read_only {
                v["readOnly"] = json!(true);
            }
            return Some(("persistentVolumeClaim", v));
        }
        self.nfs.as_ref().map(|n| {
            let mut v = json!({"server": n.server, "path": n.path});
            if self.read_only {
                v["readOnly"] = json!(true);
            }
            ("nfs", v)
        })
    }

    /// Does this existing volume point at our cache storage?
    fn backs(&self, volume: &Value) -> bool {
        if let Some(c) = &self.persistent_volume_claim {
            return volume
                .pointer("/persistentVolumeClaim/claimName")
                .and_then(Value::as_str)
                == Some(&c.claim_name);
        }
        if let Some(n) = &self.nfs {
            return volume.pointer("/nfs/server").and_then(Value::as_str) == Some(&n.server)
                && volume.pointer("/nfs/path").and_then(Value::as_str) == Some(&n.path);
        }
        false
    }
}

/// The cache mutator.
pub struct Cache;

fn runs_as_non_root(pod_sc: Option<&Value>, container: &Map<String, Value>) -> bool {
    let sc = container.get("securityContext");
    let get_bool = |v: Option<&Value>| {
        v.and_then(|s| s.get("runAsNonRoot"))
            .and_then(Value::as_bool)
    };
    let get_uid = |v: Option<&Value>| v.and_then(|s| s.get("runAsUser")).and_then(Value::as_i64);
    if let Some(uid) = get_uid(sc).or_else(|| get_uid(pod_sc)) {
        return uid != 0;
    }
    get_bool(sc).or_else(|| get_bool(pod_sc)).unwrap_or(false)
}

fn join(root: &str, sub: &str) -> String {
    if sub.is_empty() {
        root.to_string()
    } else {
        format!("{}/{}", root.trim_end_matches('/'), sub)
    }
}

/// Adds the cache to one pod spec; returns true when it changed it.
fn add_to_pod_spec(
    ctx: &MutationContext<'_>,
    cfg: &CacheConfig,
    spec: &mut Map<String, Value>,
    spec_path: &str,
    findings: &mut Findings,
) -> bool {
    let Some((source_key, source)) = cfg.source() else {
        return false;
    };
    let mut changed = false;
    // 1. The volume: reuse one that already points at the cache storage.
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .and_then(|vols| vols.iter().find(|v| cfg.backs(v)))
        .and_then(|v| v.get("name").and_then(Value::as_str))
        .map(str::to_string);
    let volume_name = match existing {
        Some(name) => name,
        None => {
            let taken = spec
                .get("volumes")
                .and_then(Value::as_array)
                .is_some_and(|v| {
                    v.iter()
                        .any(|v| v.get("name").and_then(Value::as_str) == Some(&cfg.volume_name))
                });
            if taken {
                findings.warn(format!(
                    "launchgate: {spec_path}.volumes already has a volume named {:?} for other storage; the shared cache was not added",
                    cfg.volume_name
                ));
                return false;
            }
            let mut volume = Map::new();
            volume.insert("name".into(), json!(cfg.volume_name));
            volume.insert(source_key.into(), source);
            changed |=
                upsert::upsert_named(spec, "volumes", Value::Object(volume), false).changed();
            cfg.volume_name.clone()
        }
    };
    // 2. Mounts and env, per training container.
    let pod_sc = spec.get("securityContext").cloned();
    let Some(containers) = spec.get_mut("containers").and_then(Value::as_array_mut) else {
        return changed;
    };
    for (i, c) in containers.iter_mut().enumerate() {
        let Some(c) = c.as_object_mut() else { continue };
        let cname = c.get("name").and_then(Value::as_str).unwrap_or_default();
        if ctx.is_sidecar(cname) {
            continue;
        }
        let mounts = c.get("volumeMounts").and_then(Value::as_array);
        let own_mount = mounts
            .and_then(|m| {
                m.iter()
                    .find(|m| m.get("name").and_then(Value::as_str) == Some(&volume_name))
            })
            .and_then(|m| m.get("mountPath").and_then(Value::as_str))
            .map(str::to_string);
        let mount_path = match own_mount {
            Some(path) => path,
            None => {
                let path = if runs_as_non_root(pod_sc.as_ref(), c) {
                    cfg.non_root_mount_path.clone()
                } else {
                    cfg.mount_path.clone()
                };
                let occupied = mounts.is_some_and(|m| {
                    m.iter().any(|m| {
                        m.get("mountPath")
                            .and_then(Value::as_str)
                            .map(|p| p.trim_end_matches('/'))
                            == Some(path.trim_end_matches('/'))
                    })
                });
                if occupied {
                    findings.warn(format!(
                        "launchgate: {spec_path}.containers[{i}] already mounts something at {path}; the shared cache was not mounted there"
                    ));
                    continue;
                }
                let mut mount = json!({"name": volume_name, "mountPath": path});
                if cfg.read_only {
                    mount["readOnly"] = json!(true);
                }
                upsert::array_mut(c, "volumeMounts").push(mount);
                changed = true;
                path
            }
        };
        for (name, sub) in &cfg.env {
            changed |= upsert::upsert_env(c, name, &join(&mount_path, sub), false) == Upsert::Added;
        }
    }
    changed
}

impl Mutator for Cache {
    fn name(&self) -> &'static str {
        "cache"
    }

    fn mutate(
        &self,
        ctx: &MutationContext<'_>,
        object: &mut Value,
        findings: &mut Findings,
    ) -> bool {
        let Some(cfg) = ctx.queue.config.cache.as_ref().filter(|c| c.enabled) else {
            return false;
        };
        let mut changed = false;
        workload::for_each_template_mut(ctx.kind, object, |info, template| {
            if let Some(spec) = workload::pod_spec_mut(template) {
                changed |= add_to_pod_spec(ctx, cfg, spec, &info.spec_path(), findings);
            }
        });
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutate::test_support::{mutate_with, queue_yaml};

    const PVC: &str = "cache: {persistentVolumeClaim: {claimName: nfs-pvc}}";

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn root_pod_gets_volume_mount_and_env() {
        let (out, f) = mutate_with(
            &Cache,
            PVC,
            pod(json!({"containers": [{"name": "a"}, {"name": "istio-proxy"}]})),
        );
        assert_eq!(
            out["spec"]["volumes"],
            json!([{"name": "launchgate-cache", "persistentVolumeClaim": {"claimName": "nfs-pvc"}}])
        );
        let a = &out["spec"]["containers"][0];
        assert_eq!(
            a["volumeMounts"],
            json!([{"name": "launchgate-cache", "mountPath": "/root/.cache"}])
        );
        assert_eq!(
            a["env"],
            json!([{"name": "HF_HOME", "value": "/root/.cache/huggingface"},
                   {"name": "TORCH_HOME", "value": "/root/.cache/torch"},
                   {"name": "XDG_CACHE_HOME", "value": "/root/.cache"}])
        );
        assert!(
            out["spec"]["containers"][1].get("volumeMounts").is_none(),
            "sidecar untouched"
        );
        assert!(f.warnings.is_empty());
    }

    #[test]
    fn non_root_pod_mounts_at_cache() {
        let spec = json!({"securityContext": {"runAsUser": 1000}, "containers": [{"name": "a"}]});
        let (out, _) = mutate_with(&Cache, PVC, pod(spec));
        assert_eq!(
            out["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
            "/cache"
        );
        assert_eq!(out["spec"]["containers"][0]["env"][2]["value"], "/cache");
    }

    #[test]
    fn users_own_volume_of_same_claim_is_reused() {
        let spec = json!({
            "volumes": [{"name": "nfs-storage", "persistentVolumeClaim": {"claimName": "nfs-pvc"}}],
            "containers": [{"name": "a", "securityContext": {"runAsUser": 1000},
                            "volumeMounts": [{"name": "nfs-storage", "mountPath": "/root/.cache"}]}]});
        let (out, _) = mutate_with(&Cache, PVC, pod(spec));
        assert_eq!(out["spec"]["volumes"].as_array().unwrap().len(), 1);
        let a = &out["spec"]["containers"][0];
        assert_eq!(a["volumeMounts"].as_array().unwrap().len(), 1);
        assert_eq!(
            a["env"][0],
            json!({"name": "HF_HOME", "value": "/root/.cache/huggingface"})
        );
    }

    #[test]
    fn occupied_path_is_left_and_warned() {
        let spec = json!({"volumes": [{"name": "scratch", "emptyDir": {}}],
                          "containers": [{"name": "a", "volumeMounts": [{"name": "scratch", "mountPath": "/root/.cache/"}]}]});
        let (out, f) = mutate_with(&Cache, PVC, pod(spec));
        assert_eq!(
            out["spec"]["containers"][0]["volumeMounts"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert_eq!(f.warnings.len(), 1);
        assert!(
            f.warnings[0].contains("spec.containers[0]"),
            "{:?}",
            f.warnings
        );
    }

    #[test]
    fn user_env_is_kept_and_nfs_source() {
        let spec = json!({"containers": [{"name": "a", "env": [{"name": "HF_HOME", "value": "/data/hf"}]}]});
        let (out, _) = mutate_with(
            &Cache,
            "cache: {nfs: {server: 10.0.0.2, path: /srv/nfs/kubedata}}",
            pod(spec),
        );
        assert_eq!(
            out["spec"]["volumes"][0]["nfs"],
            json!({"server": "10.0.0.2", "path": "/srv/nfs/kubedata"})
        );
        assert_eq!(
            out["spec"]["containers"][0]["env"][0],
            json!({"name": "HF_HOME", "value": "/data/hf"})
        );
    }

    #[test]
    fn idempotent_and_config_checked() {
        let (once, _) = mutate_with(&Cache, PVC, pod(json!({"containers": [{"name": "a"}]})));
        let (twice, _) = mutate_with(&Cache, PVC, once.clone());
        assert_eq!(once, twice);
        assert!(
            queue_yaml("cache: {}")
                .unwrap_err()
                .to_string()
                .contains("queues.q.cache")
        );
        assert!(queue_yaml("cache: {enabled: false}").is_ok());
        let err = queue_yaml("cache: {nfs: {server: a, path: b}, mountPath: rel}")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("queues.q.cache.nfs") && err.contains("queues.q.cache.mountPath"),
            "{err}"
        );
    }
}
