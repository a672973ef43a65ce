//! The queue's PyTorch settings (`queues.<name>.pytorch`): whether and how workloads are
//! wired, what to do with one that can never rendezvous, the wait-for-master init container.
//! Both paths read them: the mutating webhook wires by them, the validating webhook denies by
//! `onUnwirable`.

use crate::error::ConfigError;
use crate::quantity::Quantity;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// Default rendezvous port (the Volcano plugin's and the Kubeflow operator's default).
pub const DEFAULT_PORT: u16 = 23456;
/// Default wait-for-master image: pinned, has `nc`.
pub const DEFAULT_WAIT_IMAGE: &str = "busybox:1.36.1";
/// Upper bound of `waitForMaster.timeoutSeconds`.
pub const MAX_WAIT_TIMEOUT_SECONDS: u32 = 3600;

/// What to do with a workload that asks for PyTorch wiring but can never rendezvous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnUnwirable {
    /// The validating webhook denies it.
    Deny,
    /// It is admitted with a warning.
    Warn,
}

/// `nprocPerNode`: a process count or `auto` (torchrun picks GPUs or CPUs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NprocPerNode {
    Count(u32),
    Auto,
}

impl fmt::Display for NprocPerNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NprocPerNode::Count(n) => write!(f, "{n}"),
            NprocPerNode::Auto => f.write_str("auto"),
        }
    }
}

impl Serialize for NprocPerNode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            NprocPerNode::Count(n) => s.serialize_u32(*n),
            NprocPerNode::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for NprocPerNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct NprocVisitor;
        impl Visitor<'_> for NprocVisitor {
            type Value = NprocPerNode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a positive process count or \"auto\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                match u32::try_from(v) {
                    Ok(n) if n > 0 => Ok(NprocPerNode::Count(n)),
                    _ => Err(E::custom(format!(
                        "{v} is not a positive process count (1..={})",
                        u32::MAX
                    ))),
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!("{v} is not a positive process count"))),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                if v == "auto" {
                    return Ok(NprocPerNode::Auto);
                }
                match v.parse::<u64>() {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::custom(format!(
                        "{v:?} is neither a positive process count nor \"auto\""
                    ))),
                }
            }
        }
        d.deserialize_any(NprocVisitor)
    }
}

/// `indexedJobs`: which Indexed batch/v1 Jobs of a queue are distributed PyTorch training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IndexedJobs {
    /// `false`: only a Job annotated `launchgate.io/pytorch: "true"`.
    #[default]
    Off,
    /// `auto`: an Indexed Job that shows it is PyTorch training (a launcher such as torchrun,
    /// accelerate or deepspeed in a container's command, or PyTorch env the user set), or is
    /// annotated. A sharded evaluation or any other Indexed Job is left alone.
    Auto,
    /// `true`: every Indexed Job of the queue (the queue says so explicitly).
    All,
}

impl Serialize for IndexedJobs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            IndexedJobs::Off => s.serialize_bool(false),
            IndexedJobs::All => s.serialize_bool(true),
            IndexedJobs::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for IndexedJobs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ModeVisitor;
        impl Visitor<'_> for ModeVisitor {
            type Value = IndexedJobs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true, false or \"auto\"")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(if v {
                    IndexedJobs::All
                } else {
                    IndexedJobs::Off
                })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                match v {
                    "auto" => Ok(IndexedJobs::Auto),
                    "true" => Ok(IndexedJobs::All),
                    "false" => Ok(IndexedJobs::Off),
                    _ => Err(E::custom(format!(
                        "{v:?} is not one of true, false, \"auto\""
                    ))),
                }
            }
        }
        d.deserialize_any(ModeVisitor)
    }
}

/// A resource quantity written as a YAML string or number (`100m`, `1`, `0.5`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct QuantityText(pub String);

impl<'de> Deserialize<'de> for QuantityText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(QuantityText(s)),
            Value::Number(n) => Ok(QuantityText(n.to_string())),
            other => Err(de::Error::custom(format!(
                "expected a quantity, got {other}"
            ))),
        }
    }
}

/// Container resources of the wait-for-master init container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct InitResources {
    /// Resource requests (e.g. `cpu: 10m`).
    pub requests: BTreeMap<String, QuantityText>,
    /// Resource limits (e.g. `memory: 32Mi`).
    pub limits: BTreeMap<String, QuantityText>,
}

/// `pytorch.waitForMaster`: an init container on non-master pods that waits until the
/// master's rendezvous port accepts TCP connections (not merely until its name resolves).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct WaitForMasterConfig {
    /// Add the wait-for-master init container.
    pub enabled: bool,
    /// Pinned image with a busybox/BSD `nc` (a tag other than `latest`, or a digest).
    pub image: String,
    /// Give up (the pod fails and is retried by its controller) after this many seconds.
    pub timeout_seconds: u32,
    /// Resources of the init container.
    pub resources: InitResources,
}

impl Default for WaitForMasterConfig {
    fn default() -> Self {
        WaitForMasterConfig {
            enabled: false,
            image: DEFAULT_WAIT_IMAGE.into(),
            timeout_seconds: 300,
            resources: InitResources {
                requests: BTreeMap::from([
                    ("cpu".into(), QuantityText("10m".into())),
                    ("memory".into(), QuantityText("16Mi".into())),
                ]),
                limits: BTreeMap::from([
                    ("cpu".into(), QuantityText("100m".into())),
                    ("memory".into(), QuantityText("32Mi".into())),
                ]),
            },
        }
    }
}

/// True when `image` names a fixed version: a digest, or a tag other than `latest`.
fn is_pinned_image(image: &str) -> bool {
    if image.contains("@sha256:") {
        return true;
    }
    // The tag is after the last ':' that follows the last '/' (a registry port is not a tag).
    let last_segment = image.rsplit('/').next().unwrap_or(image);
    match last_segment.rsplit_once(':') {
        Some((name, tag)) => !name.is_empty() && !tag.is_empty() && tag != "latest",
        None => false,
    }
}

impl WaitForMasterConfig {
    fn check(&self, at: &str, errors: &mut Vec<ConfigError>) {
        if self.image.trim().is_empty() || self.image.contains(char::is_whitespace) {
            errors.push(ConfigError::new(
                format!("{at}.image"),
                format!("{:?} is not an image reference", self.image),
            ));
        } else if !is_pinned_image(&self.image) {
            errors.push(ConfigError::new(
                format!("{at}.image"),
                format!(
                    "{:?} is not pinned: use a version tag other than `latest` or a digest",
                    self.image
                ),
            ));
        }
        if !(1..=MAX_WAIT_TIMEOUT_SECONDS).contains(&self.timeout_seconds) {
            errors.push(ConfigError::new(
                format!("{at}.timeoutSeconds"),
                format!(
                    "{} is out of range 1..={MAX_WAIT_TIMEOUT_SECONDS}",
                    self.timeout_seconds
                ),
            ));
        }
        for (list, items) in [
            ("requests", &self.resources.requests),
            ("limits", &self.resources.limits),
        ] {
            for (resource, quantity) in items {
                let path = format!("{at}.resources.{list}.{resource}");
                match Quantity::parse(&quantity.0) {
                    Ok(q) if q.is_negative() => {
                        errors.push(ConfigError::new(path, "must not be negative"))
                    }
                    Ok(_) => {}
                    Err(e) => errors.push(ConfigError::new(
                        path,
                        format!("{:?} is not a quantity: {e}", quantity.0),
                    )),
                }
            }
        }
    }
}

/// Per-queue PyTorch settings.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct PytorchConfig {
    /// Write the distributed-training env (false: no PyTorch wiring for this queue).
    pub enabled: bool,
    /// Rendezvous port for Indexed Jobs (a Volcano Job uses its plugin's `--port`).
    pub port: u16,
    /// Replace values the user set (in place, never duplicated) instead of keeping them.
    #[serde(rename = "override")]
    pub override_user_values: bool,
    /// Also write the torchrun `PET_*` variables.
    pub torchrun: bool,
    /// Which Indexed Jobs of this queue are wired: `false` (only annotated ones), `auto` (those
    /// that show they are PyTorch training), `true` (all). A Job opts in or out with the
    /// `launchgate.io/pytorch` annotation either way.
    pub indexed_jobs: IndexedJobs,
    pub on_unwirable: OnUnwirable,
    /// `PET_NPROC_PER_NODE` (needs `torchrun`); PyTorchJobs get `spec.nprocPerNode`.
    pub nproc_per_node: Option<NprocPerNode>,
    pub wait_for_master: WaitForMasterConfig,
}

impl Default for PytorchConfig {
    fn default() -> Self {
        PytorchConfig {
            enabled: true,
            port: DEFAULT_PORT,
            override_user_values: false,
            torchrun: true,
            indexed_jobs: IndexedJobs::Off,
            on_unwirable: OnUnwirable::Deny,
            nproc_per_node: None,
            wait_for_master: WaitForMasterConfig::default(),
        }
    }
}

impl PytorchConfig {
    pub fn check(&self, at: &str, errors: &mut Vec<ConfigError>) {
        if self.port == 0 {
            errors.push(ConfigError::new(
                format!("{at}.port"),
                "0 is not a port (1..=65535)",
            ));
        }
        if self.nproc_per_node.is_some() && !self.torchrun {
            errors.push(ConfigError::new(
                format!("{at}.nprocPerNode"),
                "is written as PET_NPROC_PER_NODE, which needs `torchrun: true`",
            ));
        }
        self.wait_for_master
            .check(&format!("{at}.waitForMaster"), errors);
    }
}

/// Job annotation opting a batch/v1 Job in (`"true"`) or out (`"false"`) of PyTorch wiring.
pub const OPT_IN_ANNOTATION: &str = "launchgate.io/pytorch";

#[cfg(test)]
mod tests {
    use crate::policy::Policy;

    fn errors_of(pytorch: &str) -> String {
        match Policy::from_yaml(&format!("queues:\n  q:\n    pytorch: {pytorch}\n")) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn defaults_load_and_keys_are_camel_case() {
        assert_eq!(errors_of("{}"), "");
        assert_eq!(
            errors_of(
                "{enabled: true, port: 29500, override: true, torchrun: true, indexedJobs: true, onUnwirable: warn, nprocPerNode: auto, waitForMaster: {enabled: true, image: 'busybox:1.36.1', timeoutSeconds: 600, resources: {limits: {cpu: 1, memory: 32Mi}}}}"
            ),
            ""
        );
        assert_eq!(errors_of("{nprocPerNode: 8}"), "");
        assert_eq!(errors_of("{nprocPerNode: '4'}"), "");
    }

    #[test]
    fn bad_values_name_their_key() {
        let e = errors_of("{onUnwirable: maybe}");
        assert!(e.contains("queues.q.pytorch.onUnwirable"), "{e}");
        let e = errors_of("{nprocPerNode: 0}");
        assert!(e.contains("queues.q.pytorch.nprocPerNode"), "{e}");
        let e = errors_of("{nprocPerNode: many}");
        assert!(e.contains("nprocPerNode") && e.contains("auto"), "{e}");
        let e = errors_of("{prot: 1}");
        assert!(e.contains("prot"), "{e}");
        let e = errors_of("{port: 0}");
        assert!(e.contains("queues.q.pytorch.port"), "{e}");
        let e = errors_of("{torchrun: false, nprocPerNode: 2}");
        assert!(e.contains("queues.q.pytorch.nprocPerNode"), "{e}");
    }

    #[test]
    fn wait_for_master_is_bounded_and_pinned() {
        let e = errors_of("{waitForMaster: {timeoutSeconds: 0}}");
        assert!(
            e.contains("queues.q.pytorch.waitForMaster.timeoutSeconds"),
            "{e}"
        );
        let e = errors_of("{waitForMaster: {timeoutSeconds: 3601}}");
        assert!(e.contains("timeoutSeconds"), "{e}");
        for image in ["busybox", "busybox:latest", "registry:5000/busybox"] {
            let e = errors_of(&format!("{{waitForMaster: {{image: '{image}'}}}}"));
            assert!(
                e.contains("queues.q.pytorch.waitForMaster.image") && e.contains("pinned"),
                "{image}: {e}"
            );
        }
        for image in [
            "registry:5000/busybox:1.36.1",
            "busybox@sha256:0123456789abcdef",
        ] {
            assert_eq!(
                errors_of(&format!("{{waitForMaster: {{image: '{image}'}}}}")),
                "",
                "{image}"
            );
        }
        let e = errors_of("{waitForMaster: {resources: {limits: {cpu: lots}}}}");
        assert!(
            e.contains("queues.q.pytorch.waitForMaster.resources.limits.cpu"),
            "{e}"
        );
        let e = errors_of("{waitForMaster: {resources: {requests: {cpu: -1}}}}");
        assert!(e.contains("negative"), "{e}");
        let e = errors_of("{waitForMaster: {retries: 3}}");
        assert!(e.contains("retries"), "{e}");
    }
}
