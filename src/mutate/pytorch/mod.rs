//! PyTorch distributed wiring: `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK` (env://),
//! their torchrun twins `PET_MASTER_ADDR`, `PET_MASTER_PORT`, `PET_NNODES`, `PET_NODE_RANK`,
//! `PET_NPROC_PER_NODE`, the `pytorchjob-port` container port and an optional TCP
//! wait-for-master init container — done in admission, for every kind of launch workload.
//!
//! One module per workload kind, all writing through [`env`]:
//!
//! * [`volcano`] — a Volcano Job with `spec.plugins.pytorch` gets the job-wide values in every
//!   task template; each Volcano pod gets its `RANK` from the `volcano.sh/task-index`
//!   annotation (never the pod name). A pod whose Job was never mutated is completed from the
//!   owner Job read through [`crate::cluster::ClusterView`].
//! * [`indexed_job`] — an opted-in batch/v1 Indexed Job gets everything at Job level, `RANK`
//!   as a downward-API `fieldRef` on the completion-index annotation.
//! * [`pytorchjob`] — a Kubeflow PyTorchJob: the operator sets the env itself; only what it
//!   lacks is added.
//! * [`deferred`] — a Job with only a `generateName`: the decision is recorded on its
//!   templates and each pod is wired in full at pod admission (never half-wired).
//!
//! hostNetwork pods get `dnsPolicy: ClusterFirstWithHostNet` unless the user wrote a
//! `dnsPolicy` ([`crate::mutate::intent`]); every env read and write follows the last entry of
//! a name (the one the kubelet uses).
//!
//! `WORLD_SIZE` (and `PET_NNODES`) is the number of **pods** (nodes) that rendezvous, never the
//! number of processes: with one process per pod it is what `init_process_group("env://")`
//! needs, and torchrun replaces `WORLD_SIZE`/`RANK` for its workers with
//! `nnodes × nproc_per_node` and the global process rank.
//!
//! Structural problems (no master task, several master replicas, an Indexed Job that can never
//! rendezvous) are denied by [`check`] (the validating webhook) when the queue says
//! `onUnwirable: deny`; the mutator skips the wiring and warns either way.

pub mod deferred;
pub mod env;
pub mod indexed_job;
pub mod pytorchjob;
pub mod volcano;

use super::{Findings, MutationContext, Mutator};
use crate::policy::ConfigError;
use crate::validate::quantity::Quantity;
use crate::workload::WorkloadKind;
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
#[serde(deny_unknown_fields)]
pub struct InitResources {
    #[serde(default)]
    pub requests: BTreeMap<String, QuantityText>,
    #[serde(default)]
    pub limits: BTreeMap<String, QuantityText>,
}

/// `pytorch.waitForMaster`: an init container on non-master pods that waits until the
/// master's rendezvous port accepts TCP connections (not merely until its name resolves).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct WaitForMasterConfig {
    pub enabled: bool,
    /// Pinned image with a busybox/BSD `nc` (a tag other than `latest`, or a digest).
    pub image: String,
    /// Give up (the pod fails and is retried by its controller) after this many seconds.
    pub timeout_seconds: u32,
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
    pub enabled: bool,
    /// Rendezvous port for Indexed Jobs (a Volcano Job uses its plugin's `--port`).
    pub port: u16,
    /// Replace values the user set (in place, never duplicated) instead of keeping them.
    #[serde(rename = "override")]
    pub override_user_values: bool,
    /// Also write the torchrun `PET_*` variables.
    pub torchrun: bool,
    /// Wire every Indexed Job of this queue (a Job can also opt in or out with the
    /// `launchgate.io/pytorch` annotation).
    pub indexed_jobs: bool,
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
            indexed_jobs: false,
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

/// The PyTorch wiring mutator: dispatches on the workload kind.
pub struct PytorchWiring;

impl Mutator for PytorchWiring {
    fn name(&self) -> &'static str {
        "pytorch"
    }

    fn mutate(&self, ctx: &MutationContext<'_>, object: &mut Value, f: &mut Findings) -> bool {
        let cfg = &ctx.queue.config.pytorch;
        if !cfg.enabled || !object.is_object() {
            return false;
        }
        match ctx.kind {
            WorkloadKind::VolcanoJob => volcano::mutate_job(ctx, cfg, object, f),
            WorkloadKind::Pod if deferred::is_deferred(object) => {
                deferred::mutate_pod(ctx, cfg, object, f)
            }
            WorkloadKind::Pod => volcano::mutate_pod(ctx, cfg, object, f),
            WorkloadKind::BatchJob => indexed_job::mutate(ctx, cfg, object, f),
            WorkloadKind::PyTorchJob => pytorchjob::mutate(ctx, cfg, object, f),
        }
    }
}

/// Structural checks run by the validating webhook on CREATE: a PyTorch workload that can
/// never rendezvous is denied when the queue says `onUnwirable: deny` (with `warn` the
/// mutating webhook's warning is all the user gets).
pub fn check(ctx: &MutationContext<'_>, object: &Value) -> Findings {
    let mut findings = Findings::default();
    let cfg = &ctx.queue.config.pytorch;
    if !cfg.enabled || cfg.on_unwirable != OnUnwirable::Deny || !object.is_object() {
        return findings;
    }
    let problems = match ctx.kind {
        WorkloadKind::VolcanoJob => volcano::job_problems(ctx, object),
        WorkloadKind::BatchJob => indexed_job::problems(ctx, cfg, object),
        WorkloadKind::PyTorchJob => {
            let mut problems = pytorchjob::problems(object);
            problems.extend(pytorchjob::dns_problems(object));
            problems
        }
        WorkloadKind::Pod => Vec::new(),
    };
    for p in problems {
        findings.deny(format!("launchgate: {p}"));
    }
    findings
}

/// Reports problems found while wiring: always a warning from the mutator.
pub(crate) fn warn_unwirable(findings: &mut Findings, problems: &[String]) {
    for p in problems {
        findings.warn(format!("launchgate: PyTorch wiring skipped: {p}"));
    }
}

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

#[cfg(test)]
mod mutator_tests {
    use super::*;
    use crate::mutate::test_support::{mutate_with, queue_yaml};
    use serde_json::json;

    fn vcjob(master_replicas: i64) -> Value {
        json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "wandb"},
        "spec": {"plugins": {"pytorch": ["--port=5000"]}, "tasks": [
            {"name": "master", "replicas": master_replicas, "template": {"spec": {"containers": [
                {"name": "train"}, {"name": "istio-proxy", "ports": [{"name": "http", "containerPort": 15001}]}
            ]}}},
            {"name": "worker", "replicas": 2, "template": {"spec": {"containers": [{"name": "train"}]}}},
            {"name": "tensorboard", "replicas": 1, "template": {"spec": {"containers": [{"name": "tb"}]}}}
        ]}})
    }

    #[test]
    fn volcano_job_is_wired_once_and_sidecars_are_untouched() {
        let (out, f) = mutate_with(&PytorchWiring, "{}", vcjob(1));
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);
        let master = &out["spec"]["tasks"][0]["template"];
        assert_eq!(
            master["metadata"]["annotations"][volcano::RANK_OFFSET_ANNOTATION],
            "0"
        );
        let train = &master["spec"]["containers"][0];
        assert_eq!(
            train["env"][0],
            json!({"name": "MASTER_ADDR", "value": "j-master-0.j"})
        );
        assert_eq!(
            train["env"][1],
            json!({"name": "MASTER_PORT", "value": "5000"})
        );
        assert_eq!(train["env"][2], json!({"name": "WORLD_SIZE", "value": "3"}));
        assert_eq!(train["ports"][0]["containerPort"], 5000);
        assert_eq!(
            master["spec"]["containers"][1],
            vcjob(1)["spec"]["tasks"][0]["template"]["spec"]["containers"][1],
            "sidecar untouched"
        );
        let worker = &out["spec"]["tasks"][1]["template"];
        assert_eq!(
            worker["metadata"]["annotations"][volcano::RANK_OFFSET_ANNOTATION],
            "1"
        );
        let tb = &out["spec"]["tasks"][2]["template"];
        assert_eq!(
            tb["metadata"]["annotations"][volcano::RANK_OFFSET_ANNOTATION],
            "none"
        );
        assert!(
            tb["spec"]["containers"][0].get("ports").is_none(),
            "no port for extra tasks"
        );
        assert_eq!(tb["spec"]["containers"][0]["env"][2]["value"], "3");
        let (again, _) = mutate_with(&PytorchWiring, "{}", out.clone());
        assert_eq!(again, out, "idempotent");
    }

    #[test]
    fn two_master_replicas_are_denied_by_check_and_skipped_by_the_mutator() {
        let (out, f) = mutate_with(&PytorchWiring, "{}", vcjob(2));
        // Nothing wired; only the record that its pods take no rank.
        let mut expected = vcjob(2);
        for task in expected["spec"]["tasks"].as_array_mut().unwrap() {
            task["template"]["metadata"] =
                json!({"annotations": {volcano::RANK_OFFSET_ANNOTATION: "none"}});
        }
        assert_eq!(out, expected);
        assert!(
            f.warnings[0].contains("replicas of the PyTorch master task \"master\" is 2"),
            "{:?}",
            f.warnings
        );
        for (body, denied) in [
            ("{}", true),
            ("{pytorch: {onUnwirable: warn}}", false),
            ("{pytorch: {enabled: false}}", false),
        ] {
            let policy = queue_yaml(body).unwrap();
            let request =
                crate::admission::AdmissionRequest::synthetic_create(vcjob(2), None).unwrap();
            let ctx = MutationContext {
                kind: WorkloadKind::VolcanoJob,
                policy: &policy,
                queue: policy.queue("q").unwrap(),
                request: &request,
                cluster: &crate::cluster::NoCluster,
            };
            let findings = check(&ctx, &vcjob(2));
            assert_eq!(!findings.denials.is_empty(), denied, "{body}: {findings:?}");
        }
    }

    #[test]
    fn wait_for_master_goes_to_workers_only() {
        let (out, _) = mutate_with(
            &PytorchWiring,
            "{pytorch: {waitForMaster: {enabled: true, timeoutSeconds: 60}}}",
            vcjob(1),
        );
        assert!(
            out["spec"]["tasks"][0]["template"]["spec"]
                .get("initContainers")
                .is_none()
        );
        let init = &out["spec"]["tasks"][1]["template"]["spec"]["initContainers"][0];
        assert_eq!(init["name"], "wait-for-master");
        assert_eq!(init["env"][0]["value"], "j-master-0.j");
        assert_eq!(init["env"][1]["value"], "5000");
        assert_eq!(init["env"][2]["value"], "60");
    }

    #[test]
    fn disabled_queue_and_malformed_objects_change_nothing() {
        let (out, _) = mutate_with(&PytorchWiring, "{pytorch: {enabled: false}}", vcjob(1));
        assert_eq!(out, vcjob(1));
        for spec in [
            json!(null),
            json!({"plugins": {"pytorch": null}, "tasks": 3}),
            json!({"plugins": {"pytorch": {}}, "tasks": [1, {"name": "master", "replicas": 1, "template": 2}]}),
        ] {
            let mut job = vcjob(1);
            job["spec"] = spec;
            let _ = mutate_with(&PytorchWiring, "{}", job);
        }
        for obj in [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {"volcano.sh/job-name": 3}}, "spec": []}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {"volcano.sh/job-name": "j", "volcano.sh/task-spec": "worker", "volcano.sh/task-index": "1"}}, "spec": {"containers": "x"}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "d", "annotations": {OPT_IN_ANNOTATION: "true"}}, "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "template": {"spec": {"subdomain": "d", "containers": [7]}}}}),
            json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {}, "spec": {"pytorchReplicaSpecs": {"Master": 1, "Worker": {"template": {"spec": {"containers": {}}}}}}}),
        ] {
            let _ = mutate_with(
                &PytorchWiring,
                "{pytorch: {waitForMaster: {enabled: true}, nprocPerNode: 2}}",
                obj,
            );
        }
    }
}
