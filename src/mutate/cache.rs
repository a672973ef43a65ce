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
//! * The env never points into a read-only mount: a read-only volume of the same claim/export
//!   is not reused, a read-only mount of the cache volume gets no env (warned), and a cache
//!   configured `readOnly` is mounted without env.
//! * NFS paths compare normalised; the volume is added only when some container mounts it;
//!   Windows pods get nothing.

use super::{Findings, MutationContext, Mutator};
use crate::error::ConfigError;
use crate::json::Pointer as _;
use crate::patch::{MapNode, Node};
use crate::workload;
use crate::workload::edit::{self, Upsert, normalise_path};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// Per-queue cache settings.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct CacheConfig {
    /// Add the cache (false: configured but not mounted).
    pub enabled: bool,
    /// Name of the volume launchgate adds.
    pub volume_name: String,
    /// Mount this PersistentVolumeClaim as the cache (or `nfs`).
    pub persistent_volume_claim: Option<ClaimSource>,
    /// Mount this NFS export as the cache (or `persistentVolumeClaim`).
    pub nfs: Option<NfsSource>,
    /// Mount path for root containers.
    pub mount_path: String,
    /// Mount path for containers that run as non-root.
    pub non_root_mount_path: String,
    /// Env vars to point into the cache: name → sub-directory ("" = the cache root).
    pub env: BTreeMap<String, String>,
    /// Mount the cache read-only (then no cache env is set).
    pub read_only: bool,
}

/// An existing PersistentVolumeClaim.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClaimSource {
    /// Name of the PersistentVolumeClaim, in the workload's namespace.
    pub claim_name: String,
}

/// A direct NFS export.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NfsSource {
    /// NFS server name or address.
    pub server: String,
    /// Exported path on the NFS server.
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
        // Kubernetes names the service-account token volume kube-api-access-<random>: a cache
        // volume of that form would collide with (or be mistaken for) it.
        if self.volume_name.starts_with("kube-api-access-") {
            errors.push(ConfigError::new(
                format!("{at}.volumeName"),
                format!(
                    "{:?} is reserved: Kubernetes names the service-account token volume kube-api-access-*",
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
            } else if p.split('/').all(str::is_empty) {
                errors.push(ConfigError::new(
                    format!("{at}.{key}"),
                    "the cache cannot be mounted at / (it would hide the container's whole file system)",
                ));
            } else if p.split('/').any(|part| part == ".." || part == ".") {
                errors.push(ConfigError::new(
                    format!("{at}.{key}"),
                    format!("{p:?} must not contain . or .. segments"),
                ));
            }
        }
        // Each env var points below the mount: a sub-directory, never out of it.
        for (name, sub) in &self.env {
            if sub.starts_with('/') || sub.split('/').any(|part| part == ".." || part == ".") {
                errors.push(ConfigError::new(
                    format!("{at}.env.{name}"),
                    format!(
                        "{sub:?} must be a relative sub-directory of the cache (no leading /, no . or .. segments)"
                    ),
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
        let (key, mut source) = match (&self.persistent_volume_claim, &self.nfs) {
            (Some(c), _) => ("persistentVolumeClaim", json!({"claimName": c.claim_name})),
            (None, Some(n)) => ("nfs", json!({"server": n.server, "path": n.path})),
            (None, None) => return None,
        };
        if self.read_only {
            source["readOnly"] = json!(true);
        }
        Some((key, source))
    }

    /// Does this existing volume point at our cache storage, writable unless the cache is
    /// configured read-only? (A read-only volume of the same claim or export is not the cache.)
    fn backs(&self, volume: &Value) -> bool {
        let (key, same_storage) = if let Some(c) = &self.persistent_volume_claim {
            let same = volume
                .at("/persistentVolumeClaim/claimName")
                .and_then(Value::as_str)
                == Some(&c.claim_name);
            ("persistentVolumeClaim", same)
        } else if let Some(n) = &self.nfs {
            let path = volume.at("/nfs/path").and_then(Value::as_str);
            let same = volume.at("/nfs/server").and_then(Value::as_str) == Some(&n.server)
                && path.map(normalise_path) == Some(normalise_path(&n.path));
            ("nfs", same)
        } else {
            return false;
        };
        let read_only = volume
            .get(key)
            .and_then(|s| s.get("readOnly"))
            .and_then(Value::as_bool)
            == Some(true);
        same_storage && (self.read_only || !read_only)
    }
}

/// The cache mutator.
pub const MUTATOR: Mutator = Mutator::new("cache", mutate);

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

fn is_read_only_mount(mount: &Value) -> bool {
    mount.get("readOnly").and_then(Value::as_bool) == Some(true)
}

/// Adds the cache to one pod spec; returns true when it changed it.
///
/// The env vars point only into a writable mount of the cache: a read-only mount of the same
/// volume (or a read-only volume of the same claim/export) is the user's, not the cache. The
/// volume is added only when some container mounts it.
fn add_to_pod_spec(
    ctx: &MutationContext<'_>,
    cfg: &CacheConfig,
    spec: &mut MapNode<'_>,
    spec_path: &dyn std::fmt::Display,
    findings: &mut Findings,
) -> bool {
    let Some((source_key, source)) = cfg.source() else {
        return false;
    };
    // Windows pods: no Linux cache paths.
    if workload::is_windows(spec) {
        return false;
    }
    let mut changed = false;
    // 1. The volume: reuse one that already points at the cache storage.
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .and_then(|vols| vols.iter().find(|v| cfg.backs(v)))
        .and_then(|v| workload::name_of(v))
        .map(str::to_string);
    let new_volume = existing.is_none();
    let volume_name = match existing {
        Some(name) => name,
        None => {
            let taken = spec
                .get("volumes")
                .and_then(Value::as_array)
                .is_some_and(|v| {
                    v.iter()
                        .any(|v| workload::name_of(v) == Some(&cfg.volume_name))
                });
            if taken {
                findings.warn(crate::rules::CACHE_VOLUME_TAKEN, format!(
                    "launchgate: {spec_path}.volumes already has a volume named {:?} for other storage; the shared cache was not added",
                    cfg.volume_name
                ));
                return false;
            }
            cfg.volume_name.clone()
        }
    };
    // 2. Mounts and env, per training container.
    let pod_sc = spec.get("securityContext").cloned();
    let mut mounted = false;
    ctx.for_each_training_container(spec, spec_path, |where_, c| {
        let mounts = c.get("volumeMounts").and_then(Value::as_array);
        let of_volume: Vec<&Value> = mounts
            .into_iter()
            .flatten()
            .filter(|m| workload::name_of(m) == Some(&volume_name))
            .collect();
        let own_mount = of_volume
            .iter()
            .find(|m| cfg.read_only || !is_read_only_mount(m))
            .and_then(|m| m.get("mountPath").and_then(Value::as_str))
            .map(str::to_string);
        if own_mount.is_none()
            && let Some(path) = of_volume
                .first()
                .and_then(|m| m.get("mountPath").and_then(Value::as_str))
        {
            // The user mounts the cache storage read-only: that is not a cache.
            findings.warn(crate::rules::CACHE_READ_ONLY, format!(
                "launchgate: {where_} mounts the cache volume {volume_name:?} read-only at {path}; {} were not pointed there",
                cfg.env.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
            mounted = true;
            return;
        }
        let mount_path = match own_mount {
            Some(path) => path,
            None => {
                let path = if runs_as_non_root(pod_sc.as_ref(), c) {
                    cfg.non_root_mount_path.clone()
                } else {
                    cfg.mount_path.clone()
                };
                if edit::mount_at(c, &path).is_some() {
                    findings.warn(crate::rules::CACHE_MOUNT_TAKEN, format!(
                        "launchgate: {where_} already mounts something at {path}; the shared cache was not mounted there"
                    ));
                    return;
                }
                let mut mount = json!({"name": volume_name, "mountPath": path});
                if cfg.read_only {
                    mount["readOnly"] = json!(true);
                }
                c.array_or_new("volumeMounts").push(mount);
                changed = true;
                path
            }
        };
        mounted = true;
        // A read-only cache is for reading: tools would fail writing their caches there.
        if cfg.read_only {
            return;
        }
        let mut from_env_from = Vec::new();
        for (name, sub) in &cfg.env {
            // A value the container may get from envFrom is not overridden behind its back.
            if let Some(source) = workload::env_from_source(c, name) {
                from_env_from.push((name.as_str(), source));
                continue;
            }
            changed |= edit::upsert_env(c, name, &join(&mount_path, sub), false) == Upsert::Added;
        }
        if !from_env_from.is_empty() {
            findings.add_warning(super::env_from_warning(where_, &from_env_from));
        }
    });
    // 3. The volume, only when something mounts it.
    if new_volume && mounted {
        let mut volume = Map::new();
        volume.insert("name".into(), json!(cfg.volume_name));
        volume.insert(source_key.into(), source);
        changed |= edit::upsert_named(spec, "volumes", Value::Object(volume), false).changed();
    }
    changed
}

pub fn mutate(
    ctx: &MutationContext<'_>,
    object: &mut Node<'_, Value>,
    findings: &mut Findings,
) -> bool {
    let Some(cfg) = ctx.settings.cache.filter(|c| c.enabled) else {
        return false;
    };
    ctx.for_each_pod_spec(object, |spec, spec_path| {
        add_to_pod_spec(ctx, cfg, spec, spec_path, findings)
    })
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
            &MUTATOR,
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
        assert!(f.warning_texts().is_empty());
    }

    #[test]
    fn non_root_pod_mounts_at_cache() {
        let spec = json!({"securityContext": {"runAsUser": 1000}, "containers": [{"name": "a"}]});
        let (out, _) = mutate_with(&MUTATOR, PVC, pod(spec));
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
        let (out, _) = mutate_with(&MUTATOR, PVC, pod(spec));
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
        let (out, f) = mutate_with(&MUTATOR, PVC, pod(spec));
        assert_eq!(
            out["spec"]["containers"][0]["volumeMounts"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert_eq!(f.warning_texts().len(), 1);
        assert!(
            f.warning_texts()[0].contains("spec.containers[0]"),
            "{:?}",
            f.warning_texts()
        );
    }

    #[test]
    fn a_cache_that_cannot_work_is_a_config_error() {
        let errors = |yaml: &str| {
            let cfg: CacheConfig = serde_yaml::from_str(yaml).unwrap();
            let mut errors = Vec::new();
            cfg.check("c", &mut errors);
            errors.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        let base = "persistentVolumeClaim: {claimName: nfs}";
        assert!(errors(base).is_empty());
        let e = errors(&format!("{{{base}, mountPath: /}}"));
        assert!(
            e[0].starts_with("c.mountPath: the cache cannot be mounted at /"),
            "{e:?}"
        );
        let e = errors(&format!("{{{base}, nonRootMountPath: /data/../etc}}"));
        assert!(e[0].starts_with("c.nonRootMountPath:"), "{e:?}");
        let e = errors(&format!("{{{base}, env: {{HF_HOME: ../../etc}}}}"));
        assert!(e[0].starts_with("c.env.HF_HOME:"), "{e:?}");
        let e = errors(&format!("{{{base}, env: {{HF_HOME: /etc}}}}"));
        assert!(e[0].starts_with("c.env.HF_HOME:"), "{e:?}");
        let e = errors(&format!("{{{base}, volumeName: kube-api-access-abcde}}"));
        assert!(e[0].contains("reserved"), "{e:?}");
    }

    #[test]
    fn env_that_env_from_may_set_is_left_alone_with_a_warning() {
        let (out, f) = mutate_with(
            &MUTATOR,
            PVC,
            pod(json!({"containers": [{"name": "a",
                "envFrom": [{"configMapRef": {"name": "hf-settings"}}]}]})),
        );
        let c = &out["spec"]["containers"][0];
        assert!(c.get("env").is_none(), "{c}");
        assert_eq!(c["volumeMounts"][0]["mountPath"], "/root/.cache");
        assert!(
            f.warning_texts()[0].contains("from envFrom (configMapRef \"hf-settings\")")
                && f.warning_texts()[0].contains("HF_HOME"),
            "{:?}",
            f.warning_texts()
        );
    }

    #[test]
    fn user_env_is_kept_and_nfs_source() {
        let spec = json!({"containers": [{"name": "a", "env": [{"name": "HF_HOME", "value": "/data/hf"}]}]});
        let (out, _) = mutate_with(
            &MUTATOR,
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
    fn a_read_only_volume_of_the_same_claim_is_not_the_cache() {
        let spec = json!({
            "volumes": [{"name": "datasets", "persistentVolumeClaim": {"claimName": "nfs-pvc", "readOnly": true}}],
            "containers": [{"name": "a", "volumeMounts": [{"name": "datasets", "mountPath": "/data"}]}]});
        let (out, _) = mutate_with(&MUTATOR, PVC, pod(spec));
        let vols = out["spec"]["volumes"].as_array().unwrap();
        assert_eq!(vols.len(), 2, "own writable volume added");
        assert_eq!(vols[1]["name"], "launchgate-cache");
        let a = &out["spec"]["containers"][0];
        assert_eq!(a["volumeMounts"][1]["mountPath"], "/root/.cache");
        assert_eq!(
            a["env"][2],
            json!({"name": "XDG_CACHE_HOME", "value": "/root/.cache"})
        );
    }

    #[test]
    fn env_never_points_into_a_read_only_mount() {
        // The user mounts the cache volume read-only (here also at the cache path itself):
        // the env is not pointed into it, and no second mount of the volume is added.
        for path in ["/data", "/root/.cache/"] {
            let spec = json!({
                "volumes": [{"name": "nfs-storage", "persistentVolumeClaim": {"claimName": "nfs-pvc"}}],
                "containers": [{"name": "a", "volumeMounts": [{"name": "nfs-storage", "mountPath": path, "readOnly": true}]}]});
            let (out, f) = mutate_with(&MUTATOR, PVC, pod(spec.clone()));
            assert_eq!(out["spec"], spec, "{path}");
            assert_eq!(f.warning_texts().len(), 1, "{:?}", f.warning_texts());
            assert!(
                f.warning_texts()[0].contains("read-only"),
                "{:?}",
                f.warning_texts()
            );
        }
        // A cache configured read-only is mounted read-only and gets no env.
        let (out, _) = mutate_with(
            &MUTATOR,
            "cache: {persistentVolumeClaim: {claimName: nfs-pvc}, readOnly: true}",
            pod(json!({"containers": [{"name": "a"}]})),
        );
        let a = &out["spec"]["containers"][0];
        assert_eq!(a["volumeMounts"][0]["readOnly"], true);
        assert!(a.get("env").is_none());
    }

    #[test]
    fn nfs_paths_compare_normalised() {
        let q = "cache: {nfs: {server: 10.0.0.2, path: /srv/nfs/kubedata}}";
        let spec = json!({
            "volumes": [{"name": "mine", "nfs": {"server": "10.0.0.2", "path": "/srv//nfs/kubedata/"}}],
            "containers": [{"name": "a"}]});
        let (out, _) = mutate_with(&MUTATOR, q, pod(spec));
        assert_eq!(out["spec"]["volumes"].as_array().unwrap().len(), 1);
        assert_eq!(
            out["spec"]["containers"][0]["volumeMounts"][0]["name"],
            "mine"
        );
        assert_eq!(normalise_path("/"), "/");
        assert_eq!(normalise_path("/a//b/"), "/a/b");
    }

    #[test]
    fn no_volume_that_nothing_mounts_and_no_cache_on_windows() {
        let (out, _) = mutate_with(
            &MUTATOR,
            PVC,
            pod(json!({"containers": [{"name": "istio-proxy"}]})),
        );
        assert!(out["spec"].get("volumes").is_none(), "{}", out["spec"]);
        let spec = json!({"volumes": [{"name": "scratch", "emptyDir": {}}],
                          "containers": [{"name": "a", "volumeMounts": [{"name": "scratch", "mountPath": "/root/.cache"}]}]});
        let (out, _) = mutate_with(&MUTATOR, PVC, pod(spec));
        assert_eq!(out["spec"]["volumes"].as_array().unwrap().len(), 1);
        let windows = json!({"os": {"name": "windows"}, "containers": [{"name": "a"}]});
        let (out, _) = mutate_with(&MUTATOR, PVC, pod(windows.clone()));
        assert_eq!(out["spec"], windows);
    }

    #[test]
    fn idempotent_and_config_checked() {
        let (once, _) = mutate_with(&MUTATOR, PVC, pod(json!({"containers": [{"name": "a"}]})));
        let (twice, _) = mutate_with(&MUTATOR, PVC, once.clone());
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
