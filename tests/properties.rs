//! Property tests over generated launch workloads (and objects that are not, or are excluded):
//! every generated object is wrapped in an AdmissionReview v1 CREATE request and answered by
//! the public core (`launchgate::review`, mutate endpoint, built-in policy, no cluster).
//!
//! When the answer is allowed:
//! * (a) the patch applies cleanly (`json_patch::patch`);
//! * (b) feeding the patched object back as a CREATE (API-server reinvocation) gives no patch;
//! * (c) fields launchgate does not model survive: the planted `x-future-*` fields are unchanged,
//!   and nothing the user wrote is lost (only the documented replacements happen);
//! * (d) the result deserialises into k8s-openapi types (Pod, Job; each Volcano task and
//!   PyTorchJob replica template as a `PodTemplateSpec`);
//! * (e) no container has two env vars, ports (by name, or by containerPort + protocol) or
//!   volumeMounts (by name, or by mountPath) alike, no pod spec has two volumes of one name,
//!   container names stay unique and every mount names a volume of its pod.
//!
//! A denied answer carries no patch (the validating endpoint is asked too, so denials really
//! occur), and objects that are not launch workloads (or carry an exclude label) get no patch.
//!
//! The request bytes are read with the objects' managed field sets kept as text: with generated
//! `metadata.managedFields` (apply and update records over the fields the mutators ask about),
//! both endpoints answer byte for byte as they do on the request parsed whole, and the object the
//! API server stores keeps its managed fields exactly.
//!
//! Generated: Pods, Volcano pods (`volcano.sh/*` annotations), batch/v1 Jobs (plain and
//! Indexed, opted in with `launchgate.io/pytorch`), Volcano Jobs (with and without the pytorch
//! plugin; master/worker/extra tasks), PyTorchJobs (Master/Worker), and pods made by the
//! controllers from those templates after launchgate mutated them. The generators only produce
//! objects the API server could send (after defaulting): unique names everywhere, mounts of
//! existing volumes, no contradictory securityContext, Indexed Jobs with `completions`, and so
//! on. 256 cases per property; `PROPTEST_CASES=20000` for a longer hunt.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use launchgate::Policy;
use launchgate::admission::{AdmissionResponse, AdmissionReviewResponse, review_response_body};
use launchgate::cluster::NoCluster;
use launchgate::review::{Endpoint, decide, parse_request, review};
use proptest::prelude::*;
use proptest::sample::{select, subsequence};
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::sync::OnceLock;

const CASES: u32 = 256;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("LG_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(CASES),
        ..ProptestConfig::default()
    }
}

fn policy() -> &'static Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    POLICY.get_or_init(Policy::embedded_default)
}

// ---------------------------------------------------------------------------------------------
// Generated cases
// ---------------------------------------------------------------------------------------------

/// Unknown fields planted at several levels; (c) checks each one is unchanged.
const UNKNOWN_KEY: &str = "x-future-field";
/// A second unknown key that needs JSON-Pointer escaping (`/` and `~`).
const UNKNOWN_KEY_ESCAPED: &str = "x-future/field~v2";

fn unknown_value() -> Value {
    json!({"nested": [1, "a"]})
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Pod,
    VolcanoPod,
    BatchJob,
    IndexedJob,
    VolcanoJob,
    PyTorchJob,
    /// A pod made by a controller from a (launchgate-mutated) Job, Volcano or PyTorchJob
    /// A JobSet: replicated jobs of Indexed Jobs.
    JobSet,
    /// A Trainer v2 TrainJob: no pod template, `spec.trainer` and runtime patches.
    TrainJob,
    /// template.
    ControllerPod,
}

impl Kind {
    const ALL: [Kind; 9] = [
        Kind::Pod,
        Kind::VolcanoPod,
        Kind::BatchJob,
        Kind::IndexedJob,
        Kind::VolcanoJob,
        Kind::PyTorchJob,
        Kind::JobSet,
        Kind::TrainJob,
        Kind::ControllerPod,
    ];

    /// (group, version, kind, resource) of the admission request.
    fn gvkr(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Kind::Pod | Kind::VolcanoPod | Kind::ControllerPod => ("", "v1", "Pod", "pods"),
            Kind::BatchJob | Kind::IndexedJob => ("batch", "v1", "Job", "jobs"),
            Kind::VolcanoJob => ("batch.volcano.sh", "v1alpha1", "Job", "jobs"),
            Kind::PyTorchJob => ("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
            Kind::JobSet => ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
            Kind::TrainJob => ("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs"),
        }
    }
}

/// Which launch labels the generator placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Marking {
    /// At least one launch/queue label on the object or a template.
    Launch,
    /// No launch or queue label anywhere (other labels and the queue env may still be there).
    NotLaunch,
    /// A launch workload that also carries the image-build label `wandb: launch` on the object
    /// or a template, sent by a user (not the W&B agent): judged like any launch workload.
    ImageBuildLabel,
}

#[derive(Debug, Clone)]
struct Case {
    kind: Kind,
    marking: Marking,
    object: Value,
}

// ----- labels ---------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct LabelPlan {
    monitor: bool,
    agent: bool,
    lg_queue: Option<&'static str>,
    queue: Option<&'static str>,
    entity: bool,
    /// A `launchgate.io/mutations` annotation already there (a re-applied mutated manifest).
    recorded: Option<&'static str>,
}

fn label_plan() -> impl Strategy<Value = LabelPlan> {
    (
        prop::bool::weighted(0.4),
        prop::bool::weighted(0.3),
        prop::option::weighted(0.3, select(vec!["gpu-queue", "k8s-test", ""])),
        prop::option::weighted(0.3, select(vec!["gpu-queue", "k8s-test"])),
        any::<bool>(),
        prop::option::weighted(
            0.05,
            select(vec!["cache", "cache,security-context", "pytorch"]),
        ),
    )
        .prop_map(
            |(monitor, agent, lg_queue, queue, entity, recorded)| LabelPlan {
                monitor,
                agent,
                lg_queue,
                queue,
                entity,
                recorded,
            },
        )
}

/// The labels that mark a launch workload under the built-in `match` (`queue` only names the
/// queue of one: `match.queueNameLabels`).
const LAUNCH_KEYS: [&str; 3] = ["wandb.ai/monitor", "wandb.ai/agent", "launchgate.io/queue"];

impl LabelPlan {
    fn labels(&self, marking: Marking) -> Map<String, Value> {
        let mut m = Map::new();
        if marking != Marking::NotLaunch {
            if self.monitor {
                m.insert("wandb.ai/monitor".into(), json!("true"));
            }
            if self.agent {
                m.insert("wandb.ai/agent".into(), json!("agent-a"));
            }
            if let Some(q) = self.lg_queue {
                m.insert("launchgate.io/queue".into(), json!(q));
            }
            if let Some(q) = self.queue {
                m.insert("queue".into(), json!(q));
            }
        }
        if self.entity {
            m.insert("wandb_entity".into(), json!("acme"));
            // Not the exclude value: only `wandb: launch` excludes.
            m.insert("wandb".into(), json!("run"));
        }
        m
    }
}

/// Applies the marking over all label carriers (object first, then templates):
/// `Launch` guarantees one launch label somewhere, `ImageBuildLabel` also adds `wandb: launch`
/// to one.
fn apply_marking(carriers: &mut [Map<String, Value>], marking: Marking, pick: usize) {
    match marking {
        Marking::Launch | Marking::ImageBuildLabel => {
            let marked = carriers
                .iter()
                .any(|c| LAUNCH_KEYS.iter().any(|k| c.contains_key(*k)));
            if !marked {
                let n = carriers.len();
                carriers[pick % n].insert("wandb.ai/monitor".into(), json!("true"));
            }
        }
        Marking::NotLaunch => {}
    }
    if marking == Marking::ImageBuildLabel {
        let n = carriers.len();
        carriers[(pick + 1) % n].insert("wandb".into(), json!("launch"));
    }
}

fn marking() -> impl Strategy<Value = Marking> {
    prop_oneof![
        8 => Just(Marking::Launch),
        1 => Just(Marking::NotLaunch),
        1 => Just(Marking::ImageBuildLabel),
    ]
}

// ----- containers -----------------------------------------------------------------------------

const CONTAINER_NAMES: [&str; 11] = [
    "main",
    "trainer",
    "pytorch",
    "master",
    "worker",
    "istio-proxy",
    "linkerd-proxy",
    "logger",
    "init",
    "fetch-data",
    "setup",
];

const ENV_NAMES: [&str; 14] = [
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_NPROC_PER_NODE",
    "HF_HOME",
    "XDG_CACHE_HOME",
    "TORCH_HOME",
    "WANDB_LAUNCH_QUEUE_NAME",
    "PYTHONUNBUFFERED",
];

fn env_entry(name: &str, variant: usize) -> Value {
    match variant {
        0 => json!({"name": name, "value": "23456"}),
        1 => json!({"name": name, "value": "ddp-0.ddp"}),
        // An empty value, as the API server serialises it (omitempty).
        2 => json!({"name": name}),
        3 => {
            json!({"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}})
        }
        4 => json!({"name": name, "valueFrom": {"secretKeyRef": {"name": "creds", "key": "k"}}}),
        5 => json!({"name": name, "value": "/data/hf"}),
        // Exactly launchgate's RANK form for Indexed Jobs.
        6 => json!({"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1",
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}),
        7 => json!({"name": name, "value": "0"}),
        8 => json!({"name": name, "value": "ünïcødé \"q\" \\ /a~1b"}),
        // launchgate's own cache value for a root container.
        9 => json!({"name": name, "value": "/root/.cache/huggingface"}),
        _ => json!({"name": name, "value": "gpu-queue"}),
    }
}
const ENV_VARIANTS: usize = 11;

/// (name, containerPort, protocol)
const PORTS: [(Option<&str>, i64, &str); 9] = [
    (Some("pytorchjob-port"), 23456, "TCP"),
    (Some("pytorchjob-port"), 29500, "TCP"),
    (Some("rdzv"), 23456, "TCP"),
    (Some("rdzv-udp"), 23456, "UDP"),
    (Some("http"), 8080, "TCP"),
    (None, 23456, "TCP"),
    (None, 5000, "TCP"),
    (Some("metrics"), 9090, "TCP"),
    (Some("alt"), 29500, "TCP"),
];

/// (name, source)
fn volume_pool() -> Vec<(&'static str, Value)> {
    vec![
        ("launchgate-cache", json!({"emptyDir": {}})),
        (
            "launchgate-cache",
            json!({"persistentVolumeClaim": {"claimName": "nfs-pvc"}}),
        ),
        (
            "nfs-storage",
            json!({"persistentVolumeClaim": {"claimName": "nfs-pvc"}}),
        ),
        (
            "data",
            json!({"persistentVolumeClaim": {"claimName": "other-claim"}}),
        ),
        ("scratch", json!({"emptyDir": {}})),
        ("shm", json!({"emptyDir": {"medium": "Memory"}})),
        (
            "kube-api-access-abcde",
            json!({"projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
            ]}}),
        ),
        (
            "nfs-direct",
            json!({"nfs": {"server": "10.0.0.2", "path": "/srv/nfs/kubedata"}}),
        ),
    ]
}

const MOUNT_PATHS: [&str; 8] = [
    "/root/.cache",
    "/cache",
    "/root/.cache/",
    "/cache/",
    "/data",
    "/scratch",
    "/dev/shm",
    "/var/run/secrets/kubernetes.io/serviceaccount",
];

#[derive(Debug, Clone)]
struct SecurityPlan {
    allow_privilege_escalation: Option<bool>,
    /// (drop ALL, add: 0 none / 1 NET_ADMIN / 2 SYS_ADMIN)
    capabilities: Option<(bool, usize)>,
    seccomp: Option<&'static str>,
    run_as_user: Option<i64>,
    run_as_non_root: Option<bool>,
    privileged: Option<bool>,
}

fn security_plan() -> impl Strategy<Value = SecurityPlan> {
    (
        prop::option::of(any::<bool>()),
        prop::option::of((any::<bool>(), 0usize..3)),
        prop::option::of(select(vec!["RuntimeDefault", "Unconfined"])),
        prop::option::of(select(vec![0i64, 1000])),
        prop::option::weighted(0.25, any::<bool>()),
        prop::option::weighted(0.3, any::<bool>()),
    )
        .prop_map(
            |(
                allow_privilege_escalation,
                capabilities,
                seccomp,
                run_as_user,
                run_as_non_root,
                privileged,
            )| {
                SecurityPlan {
                    allow_privilege_escalation,
                    capabilities,
                    seccomp,
                    run_as_user,
                    // runAsNonRoot with runAsUser 0 can never start.
                    run_as_non_root: run_as_non_root.filter(|n| !*n || run_as_user != Some(0)),
                    privileged,
                }
            },
        )
}

impl SecurityPlan {
    fn to_json(&self) -> Value {
        let mut sc = Map::new();
        let adds_sys_admin = matches!(self.capabilities, Some((_, 2)));
        // The API rejects allowPrivilegeEscalation=false with privileged or CAP_SYS_ADMIN.
        let ape = self
            .allow_privilege_escalation
            .filter(|ape| *ape || !(self.privileged == Some(true) || adds_sys_admin));
        if let Some(ape) = ape {
            sc.insert("allowPrivilegeEscalation".into(), json!(ape));
        }
        if let Some((drop, add)) = self.capabilities {
            let mut caps = Map::new();
            if drop {
                caps.insert("drop".into(), json!(["ALL"]));
            }
            match add {
                1 => {
                    caps.insert("add".into(), json!(["NET_ADMIN"]));
                }
                2 => {
                    caps.insert("add".into(), json!(["SYS_ADMIN"]));
                }
                _ => {}
            }
            sc.insert("capabilities".into(), Value::Object(caps));
        }
        if let Some(t) = self.seccomp {
            sc.insert("seccompProfile".into(), json!({"type": t}));
        }
        if let Some(uid) = self.run_as_user {
            sc.insert("runAsUser".into(), json!(uid));
        }
        if let Some(n) = self.run_as_non_root {
            sc.insert("runAsNonRoot".into(), json!(n));
        }
        if let Some(p) = self.privileged {
            sc.insert("privileged".into(), json!(p));
        }
        Value::Object(sc)
    }
}

#[derive(Debug, Clone)]
struct ContainerPlan {
    security: Option<SecurityPlan>,
    /// (env name index, value variant); duplicates by name are dropped.
    env: Vec<(usize, usize)>,
    /// indexes into PORTS; duplicates by name or by number+protocol are dropped.
    ports: Vec<usize>,
    /// (volume index, mount path index, 1: readOnly / 2: subPath); duplicates by volume or
    /// by path are dropped.
    mounts: Vec<(usize, usize, usize)>,
    /// index into `resources()`
    resources: usize,
    unknown: bool,
}

/// Container resources; some exceed the default queue's limits (cpu 4, memory 12Gi, 4 GPUs),
/// so the validating endpoint denies them.
fn resources(variant: usize) -> Value {
    match variant {
        1 => {
            json!({"limits": {"cpu": "2", "memory": "2Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}})
        }
        2 => json!({"limits": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "8"},
                    "requests": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "8"}}),
        3 => json!({"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}),
        _ => json!({}),
    }
}

fn container_plan() -> BoxedStrategy<ContainerPlan> {
    (
        prop::option::weighted(0.6, security_plan()),
        prop::collection::vec((0..ENV_NAMES.len(), 0..ENV_VARIANTS), 0..6),
        prop::collection::vec(0..PORTS.len(), 0..3),
        prop::collection::vec((0usize..16, 0..MOUNT_PATHS.len(), 0usize..4), 0..3),
        0usize..4,
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(security, env, ports, mounts, resources, unknown)| ContainerPlan {
                security,
                env,
                ports,
                mounts,
                resources,
                unknown,
            },
        )
        .boxed()
}

fn build_container(name: &str, plan: &ContainerPlan, volumes: &[String]) -> Value {
    let mut c = Map::new();
    c.insert("name".into(), json!(name));
    c.insert("image".into(), json!("acme/train:1"));
    c.insert("resources".into(), resources(plan.resources));
    c.insert(
        "terminationMessagePath".into(),
        json!("/dev/termination-log"),
    );
    c.insert("terminationMessagePolicy".into(), json!("File"));
    c.insert("imagePullPolicy".into(), json!("IfNotPresent"));
    if let Some(sc) = &plan.security {
        c.insert("securityContext".into(), sc.to_json());
    }
    let mut seen = HashSet::new();
    let env: Vec<Value> = plan
        .env
        .iter()
        .filter(|(n, _)| seen.insert(*n))
        .map(|(n, v)| env_entry(ENV_NAMES[*n], *v))
        .collect();
    if !env.is_empty() {
        c.insert("env".into(), Value::Array(env));
    }
    let mut names = HashSet::new();
    let mut numbers = HashSet::new();
    let ports: Vec<Value> = plan
        .ports
        .iter()
        .map(|i| PORTS[*i])
        .filter(|(name, number, protocol)| {
            name.is_none_or(|n| names.insert(n)) && numbers.insert((*number, *protocol))
        })
        .map(|(name, number, protocol)| {
            let mut p = json!({"containerPort": number, "protocol": protocol});
            if let Some(n) = name {
                p["name"] = json!(n);
            }
            p
        })
        .collect();
    if !ports.is_empty() {
        c.insert("ports".into(), Value::Array(ports));
    }
    if !volumes.is_empty() {
        let mut used_volumes = HashSet::new();
        let mut used_paths = HashSet::new();
        let mounts: Vec<Value> = plan
            .mounts
            .iter()
            .map(|(v, p, extra)| (&volumes[v % volumes.len()], MOUNT_PATHS[*p], *extra))
            .filter(|(v, p, _)| {
                used_volumes.insert(v.as_str()) && used_paths.insert(p.trim_end_matches('/'))
            })
            .map(|(v, p, extra)| match extra {
                1 => json!({"name": v, "mountPath": p, "readOnly": true}),
                2 => json!({"name": v, "mountPath": p, "subPath": "sub"}),
                _ => json!({"name": v, "mountPath": p}),
            })
            .collect();
        if !mounts.is_empty() {
            c.insert("volumeMounts".into(), Value::Array(mounts));
        }
    }
    if plan.unknown {
        c.insert(UNKNOWN_KEY.into(), unknown_value());
    }
    Value::Object(c)
}

// ----- pod specs ------------------------------------------------------------------------------

fn pod_security_contexts() -> Vec<Value> {
    vec![
        json!({}),
        json!({}),
        json!({"runAsNonRoot": true}),
        json!({"runAsUser": 1000}),
        json!({"runAsUser": 0}),
        json!({"runAsNonRoot": true, "runAsUser": 1000}),
        json!({"seccompProfile": {"type": "RuntimeDefault"}}),
        json!({"fsGroup": 100, "runAsGroup": 100}),
    ]
}

#[derive(Debug, Clone)]
struct PodPlan {
    /// Unique container names (containers and initContainers share one namespace).
    names: Vec<&'static str>,
    n_init: usize,
    containers: Vec<ContainerPlan>,
    /// indexes into `volume_pool()`; duplicates by name are dropped.
    volumes: Vec<usize>,
    security: Value,
    unknown: bool,
    unknown_escaped: bool,
    /// `os.name: windows` (no Linux securityContext fields allowed).
    windows: bool,
}

fn pod_plan() -> BoxedStrategy<PodPlan> {
    (
        subsequence(CONTAINER_NAMES.to_vec(), 1..=6).prop_shuffle(),
        0usize..=2,
        prop::collection::vec(container_plan(), 6),
        prop::collection::vec(0usize..8, 0..4),
        select(pod_security_contexts()),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.05),
    )
        .prop_map(
            |(names, n_init, containers, volumes, security, unknown, unknown_escaped, windows)| {
                PodPlan {
                    names,
                    n_init,
                    containers,
                    volumes,
                    security,
                    unknown,
                    unknown_escaped,
                    windows,
                }
            },
        )
        .boxed()
}

/// Which containers a pod spec gets: 1–4 containers, 0–2 initContainers.
fn split_names(
    plan: &PodPlan,
    first_container: Option<&'static str>,
) -> (Vec<&'static str>, Vec<&'static str>) {
    let mut names: Vec<&'static str> = plan
        .names
        .iter()
        .copied()
        .filter(|n| Some(*n) != first_container)
        .collect();
    let mut containers = Vec::new();
    if let Some(first) = first_container {
        containers.push(first);
    }
    let n_init = plan.n_init.min(
        names
            .len()
            .saturating_sub(usize::from(containers.is_empty())),
    );
    let init: Vec<&'static str> = names.drain(..n_init).collect();
    containers.extend(names);
    containers.truncate(4);
    (containers, init)
}

struct PodSpecExtras {
    restart_policy: &'static str,
    hostname: Option<String>,
    subdomain: Option<String>,
    scheduler: &'static str,
    first_container: Option<&'static str>,
}

fn build_pod_spec(plan: &PodPlan, extras: &PodSpecExtras) -> Value {
    let pool = volume_pool();
    let mut volume_names: Vec<String> = Vec::new();
    let mut volumes = Vec::new();
    for i in &plan.volumes {
        let (name, source) = &pool[*i];
        if volume_names.iter().any(|n| n == name) {
            continue;
        }
        volume_names.push(name.to_string());
        let mut v = source.clone();
        v["name"] = json!(name);
        volumes.push(v);
    }
    let (containers, init) = split_names(plan, extras.first_container);
    let mut plans = plan.containers.iter().cycle();
    let mut spec = Map::new();
    if !volumes.is_empty() {
        spec.insert("volumes".into(), Value::Array(volumes));
    }
    if !init.is_empty() {
        let list = init
            .iter()
            .map(|n| build_container(n, plans.next().unwrap(), &volume_names))
            .collect();
        spec.insert("initContainers".into(), Value::Array(list));
    }
    let list = containers
        .iter()
        .map(|n| build_container(n, plans.next().unwrap(), &volume_names))
        .collect();
    spec.insert("containers".into(), Value::Array(list));
    spec.insert("restartPolicy".into(), json!(extras.restart_policy));
    spec.insert("terminationGracePeriodSeconds".into(), json!(30));
    spec.insert("dnsPolicy".into(), json!("ClusterFirst"));
    if plan.windows {
        spec.insert("os".into(), json!({"name": "windows"}));
        spec.insert("securityContext".into(), json!({}));
        for list in ["containers", "initContainers"] {
            for c in spec
                .get_mut(list)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                c.as_object_mut().unwrap().remove("securityContext");
            }
        }
    } else {
        spec.insert("securityContext".into(), plan.security.clone());
    }
    spec.insert("schedulerName".into(), json!(extras.scheduler));
    if let Some(h) = &extras.hostname {
        spec.insert("hostname".into(), json!(h));
    }
    if let Some(s) = &extras.subdomain {
        spec.insert("subdomain".into(), json!(s));
    }
    if plan.unknown {
        spec.insert(UNKNOWN_KEY.into(), unknown_value());
    }
    if plan.unknown_escaped {
        spec.insert(UNKNOWN_KEY_ESCAPED.into(), json!("kept"));
    }
    Value::Object(spec)
}

/// A pod template; without labels, a batch/v1 Job's has `metadata: {}` (as the API server
/// serialises it) and a custom resource's may have none.
fn template(labels: Map<String, Value>, spec: Value, unknown: bool, builtin: bool) -> Value {
    let mut t = json!({"spec": spec});
    if !labels.is_empty() {
        t["metadata"] = json!({"labels": labels});
    } else if builtin {
        t["metadata"] = json!({});
    }
    if unknown {
        t[UNKNOWN_KEY] = unknown_value();
    }
    t
}

/// Top-level metadata: `name` or `generateName`, namespace, labels, annotations.
fn metadata(
    name: Option<&str>,
    prefix: &str,
    labels: Map<String, Value>,
    annotations: Map<String, Value>,
) -> Value {
    let mut m = Map::new();
    match name {
        Some(n) => m.insert("name".into(), json!(n)),
        None => m.insert("generateName".into(), json!(format!("{prefix}-"))),
    };
    m.insert("namespace".into(), json!("wandb"));
    if !labels.is_empty() {
        m.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), Value::Object(annotations));
    }
    Value::Object(m)
}

/// Unknown fields at the object root and in `spec`; a recorded mutations annotation.
fn plant_top_level(object: &mut Value, root: bool, spec: bool, recorded: Option<&str>) {
    if let Some(r) = recorded {
        object["metadata"]["annotations"]["launchgate.io/mutations"] = json!(r);
    }
    if root {
        object[UNKNOWN_KEY] = unknown_value();
    }
    if spec {
        object["spec"][UNKNOWN_KEY] = unknown_value();
        object["spec"][UNKNOWN_KEY_ESCAPED] = json!(["kept"]);
    }
}

// ----- Pods -----------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct VolcanoPlace {
    job: &'static str,
    task: &'static str,
    index: Option<&'static str>,
    rank_offset: Option<&'static str>,
    keys_as_labels: bool,
}

fn volcano_place() -> impl Strategy<Value = VolcanoPlace> {
    (
        select(vec!["wandb-job-run42", "vc-ddp"]),
        select(vec!["master", "worker", "worker", "tensorboard", "chief"]),
        prop::option::weighted(0.85, select(vec!["0", "1", "2", "x"])),
        prop::option::weighted(0.5, select(vec!["0", "1", "2", "none"])),
        any::<bool>(),
    )
        .prop_map(
            |(job, task, index, rank_offset, keys_as_labels)| VolcanoPlace {
                job,
                task,
                index,
                rank_offset,
                keys_as_labels,
            },
        )
}

fn pod_case(volcano: bool) -> impl Strategy<Value = Case> {
    (
        marking(),
        label_plan(),
        pod_plan(),
        prop::option::of(select(vec![
            "demo",
            "run42-master-0",
            "launch-acme-mnist-mzxkz",
        ])),
        volcano_place(),
        select(vec!["Never", "OnFailure", "Always"]),
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(
            move |(marking, labels, plan, name, place, restart, (unknown_root, unknown_spec))| {
                let recorded = labels.recorded;
                let mut carriers = [labels.labels(marking)];
                apply_marking(&mut carriers, marking, 0);
                let [mut labels] = carriers;
                let mut annotations = Map::new();
                let mut extras = PodSpecExtras {
                    restart_policy: restart,
                    hostname: None,
                    subdomain: None,
                    scheduler: "default-scheduler",
                    first_container: None,
                };
                let mut name = name.map(str::to_string);
                if volcano {
                    let index = place.index.unwrap_or("0");
                    name = Some(format!("{}-{}-{index}", place.job, place.task));
                    extras.hostname = name.clone();
                    extras.subdomain = Some(place.job.to_string());
                    extras.scheduler = "volcano";
                    extras.restart_policy = if restart == "Always" {
                        "OnFailure"
                    } else {
                        restart
                    };
                    let mut keys = vec![
                        ("volcano.sh/job-name", place.job),
                        ("volcano.sh/task-spec", place.task),
                        ("volcano.sh/queue-name", "default"),
                    ];
                    if let Some(i) = place.index {
                        keys.push(("volcano.sh/task-index", i));
                    }
                    for (k, v) in keys {
                        annotations.insert(k.into(), json!(v));
                        if place.keys_as_labels {
                            labels.insert(k.into(), json!(v));
                        }
                    }
                    if let Some(offset) = place.rank_offset {
                        annotations
                            .insert("launchgate.io/pytorch-rank-offset".into(), json!(offset));
                    }
                }
                let kind = if volcano { Kind::VolcanoPod } else { Kind::Pod };
                let mut object = json!({
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "metadata": metadata(name.as_deref(), "pod", labels, annotations),
                    "spec": build_pod_spec(&plan, &extras),
                    "status": {},
                });
                plant_top_level(&mut object, unknown_root, unknown_spec, recorded);
                Case {
                    kind,
                    marking,
                    object,
                }
            },
        )
}

// ----- batch/v1 Jobs --------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct JobPlan {
    name: Option<&'static str>,
    completions: Option<i64>,
    /// 0: parallelism = completions, 1: completions - 1, 2: completions + 1, 3: 1
    parallelism: usize,
    backoff_limit: i64,
    per_index: bool,
    keep_annotation: bool,
    last_applied: Option<bool>,
    opt_in: Option<&'static str>,
    subdomain: bool,
    ttl: Option<i64>,
    restart: &'static str,
}

fn job_plan(indexed: bool) -> impl Strategy<Value = JobPlan> {
    (
        prop::option::weighted(0.85, select(vec!["ddp", "demo", "launch-acme-mnist"])),
        if indexed {
            // The API requires completions for Indexed Jobs.
            (1i64..5).prop_map(Some).boxed()
        } else {
            prop::option::weighted(0.6, 1i64..5).boxed()
        },
        0usize..4,
        select(vec![6i64, 6, 6, 0, 1, 3]),
        prop::bool::weighted(if indexed { 0.15 } else { 0.0 }),
        prop::bool::weighted(0.15),
        prop::option::weighted(0.3, any::<bool>()),
        if indexed {
            prop::option::weighted(0.8, select(vec!["true", "true", "false", "TRUE"])).boxed()
        } else {
            prop::option::weighted(0.2, select(vec!["true", "false"])).boxed()
        },
        prop::bool::weighted(if indexed { 0.85 } else { 0.2 }),
        prop::option::weighted(0.3, select(vec![0i64, 60, 3600])),
        select(vec!["Never", "OnFailure", "Always"]),
    )
        .prop_map(
            |(
                name,
                completions,
                parallelism,
                backoff_limit,
                per_index,
                keep_annotation,
                last_applied,
                opt_in,
                subdomain,
                ttl,
                restart,
            )| JobPlan {
                name,
                completions,
                parallelism,
                backoff_limit,
                per_index,
                keep_annotation,
                last_applied,
                opt_in,
                subdomain,
                ttl,
                restart,
            },
        )
}

fn job_case(indexed: bool) -> impl Strategy<Value = Case> {
    (
        marking(),
        (label_plan(), label_plan()),
        job_plan(indexed),
        pod_plan(),
        0usize..2,
        (any::<bool>(), any::<bool>(), prop::bool::weighted(0.3)),
    )
        .prop_map(
            move |(marking, (top, tmpl), job, plan, pick, (unknown_root, unknown_spec, unknown_tmpl))| {
                let mut carriers = [top.labels(marking), tmpl.labels(marking)];
                apply_marking(&mut carriers, marking, pick);
                let [top_labels, template_labels] = carriers;
                let name = job.name.unwrap_or("job");
                let mut annotations = Map::new();
                if let Some(v) = job.opt_in {
                    annotations.insert("launchgate.io/pytorch".into(), json!(v));
                }
                if job.keep_annotation {
                    annotations.insert("launchgate.io/keep-backoff-limit".into(), json!("true"));
                }
                let completions = job.completions;
                let parallelism = match (job.parallelism, completions) {
                    (0, Some(c)) => c,
                    (1, Some(c)) => (c - 1).max(0),
                    (2, Some(c)) => c + 1,
                    _ => 1,
                };
                // Per-index backoff: the API defaults backoffLimit to MaxInt32, pods must not restart.
                let (backoff_limit, restart) = if job.per_index {
                    (i64::from(i32::MAX), "Never")
                } else {
                    (job.backoff_limit, job.restart)
                };
                if let Some(wrote_backoff) = job.last_applied {
                    let mut applied = json!({"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": name, "namespace": "wandb"},
                        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "acme/train:1"}]}}}});
                    if wrote_backoff {
                        applied["spec"]["backoffLimit"] = json!(backoff_limit);
                    }
                    annotations.insert(
                        "kubectl.kubernetes.io/last-applied-configuration".into(),
                        json!(format!("{applied}\n")),
                    );
                }
                let extras = PodSpecExtras {
                    restart_policy: restart,
                    hostname: None,
                    subdomain: job.subdomain.then(|| name.to_string()),
                    scheduler: "default-scheduler",
                    first_container: None,
                };
                let mut spec = json!({
                    "parallelism": parallelism,
                    "backoffLimit": backoff_limit,
                    "completionMode": if indexed { "Indexed" } else { "NonIndexed" },
                    "suspend": false,
                    "manualSelector": false,
                    "podReplacementPolicy": "TerminatingOrFailed",
                    "template": template(template_labels, build_pod_spec(&plan, &extras), unknown_tmpl, true),
                });
                if let Some(c) = completions {
                    spec["completions"] = json!(c);
                }
                if job.per_index {
                    spec["backoffLimitPerIndex"] = json!(1);
                    spec["podReplacementPolicy"] = json!("Failed");
                }
                if let Some(ttl) = job.ttl {
                    spec["ttlSecondsAfterFinished"] = json!(ttl);
                }
                let mut object = json!({
                    "kind": "Job",
                    "apiVersion": "batch/v1",
                    "metadata": metadata(job.name, "job", top_labels, annotations),
                    "spec": spec,
                    "status": {},
                });
                plant_top_level(&mut object, unknown_root, unknown_spec, top.recorded);
                Case {
                    kind: if indexed { Kind::IndexedJob } else { Kind::BatchJob },
                    marking,
                    object,
                }
            },
        )
}

// ----- Volcano Jobs ---------------------------------------------------------------------------

/// `spec.plugins.pytorch` args and the master/worker task names they imply.
fn plugin_variants() -> Vec<(Value, &'static str, &'static str)> {
    vec![
        (json!([]), "master", "worker"),
        (
            json!(["--master=master", "--worker=worker", "--port=23456"]),
            "master",
            "worker",
        ),
        (json!(["--port=29500"]), "master", "worker"),
        (json!(["--master=chief", "--worker=wk"]), "chief", "wk"),
        (
            json!(["-master", "chief", "--port", "5000"]),
            "chief",
            "worker",
        ),
        (json!(["--bogus"]), "master", "worker"),
    ]
}

#[derive(Debug, Clone)]
struct TaskPlan {
    present: bool,
    replicas: i64,
    labels: LabelPlan,
    pod: PodPlan,
    unknown: bool,
    host_and_subdomain: bool,
    restart: &'static str,
}

fn task_plan(
    presence: f64,
    replicas: impl Strategy<Value = i64>,
) -> impl Strategy<Value = TaskPlan> {
    (
        prop::bool::weighted(presence),
        replicas,
        label_plan(),
        pod_plan(),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.2),
        select(vec!["OnFailure", "Never"]),
    )
        .prop_map(
            |(present, replicas, labels, pod, unknown, host_and_subdomain, restart)| TaskPlan {
                present,
                replicas,
                labels,
                pod,
                unknown,
                host_and_subdomain,
                restart,
            },
        )
}

fn volcano_job_case() -> impl Strategy<Value = Case> {
    (
        marking(),
        label_plan(),
        prop::option::weighted(0.85, select(vec!["wandb-job-run42", "vc-ddp"])),
        prop::option::weighted(0.8, select(plugin_variants())),
        any::<bool>(),
        (
            task_plan(0.85, prop_oneof![6 => Just(1i64), 1 => Just(2i64)]),
            task_plan(0.8, 0i64..4),
            task_plan(0.3, 1i64..3),
        ),
        prop::option::weighted(0.3, select(vec![3i64, 0])),
        0usize..4,
        (any::<bool>(), any::<bool>(), prop::bool::weighted(0.3)),
    )
        .prop_map(
            |(
                marking,
                top,
                name,
                plugin,
                other_plugins,
                (master, worker, extra),
                max_retry,
                pick,
                (unknown_root, unknown_spec, unknown_template),
            )| {
                let (args, master_name, worker_name) = plugin
                    .clone()
                    .unwrap_or((Value::Null, "master", "worker"));
                let job_name = name.unwrap_or("vc-job");
                let mut tasks_plans: Vec<(&str, TaskPlan)> = vec![
                    (master_name, master),
                    (worker_name, worker),
                    ("tensorboard", extra),
                ];
                tasks_plans.retain(|(_, t)| t.present);
                if tasks_plans.is_empty() {
                    // Volcano needs at least one task.
                    tasks_plans.push((worker_name, worker_default()));
                }
                let mut carriers: Vec<Map<String, Value>> = std::iter::once(top.labels(marking))
                    .chain(tasks_plans.iter().map(|(_, t)| t.labels.labels(marking)))
                    .collect();
                apply_marking(&mut carriers, marking, pick);
                let tasks: Vec<Value> = tasks_plans
                    .iter()
                    .zip(carriers.iter().skip(1))
                    .map(|((task_name, t), labels)| {
                        let extras = PodSpecExtras {
                            restart_policy: t.restart,
                            hostname: t
                                .host_and_subdomain
                                .then(|| format!("{job_name}-{task_name}-0")),
                            subdomain: t.host_and_subdomain.then(|| job_name.to_string()),
                            scheduler: "volcano",
                            first_container: None,
                        };
                        let mut task = json!({
                            "name": task_name,
                            "replicas": t.replicas,
                            "template": template(labels.clone(), build_pod_spec(&t.pod, &extras), unknown_template, false),
                        });
                        if *task_name == master_name {
                            task["policies"] =
                                json!([{"event": "TaskCompleted", "action": "CompleteJob"}]);
                        }
                        if t.unknown {
                            task[UNKNOWN_KEY] = unknown_value();
                        }
                        task
                    })
                    .collect();
                let mut plugins = Map::new();
                if other_plugins {
                    plugins.insert("svc".into(), json!([]));
                    plugins.insert("env".into(), json!([]));
                }
                if plugin.is_some() {
                    plugins.insert("pytorch".into(), args);
                }
                let mut spec = json!({
                    "minAvailable": 1,
                    "schedulerName": "volcano",
                    "queue": "default",
                    "tasks": tasks,
                });
                if !plugins.is_empty() {
                    spec["plugins"] = Value::Object(plugins);
                }
                if let Some(r) = max_retry {
                    spec["maxRetry"] = json!(r);
                }
                let mut object = json!({
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "metadata": metadata(name, "vc", carriers[0].clone(), Map::new()),
                    "spec": spec,
                });
                plant_top_level(&mut object, unknown_root, unknown_spec, top.recorded);
                Case {
                    kind: Kind::VolcanoJob,
                    marking,
                    object,
                }
            },
        )
}

fn worker_default() -> TaskPlan {
    TaskPlan {
        present: true,
        replicas: 1,
        labels: LabelPlan {
            monitor: false,
            agent: false,
            lg_queue: None,
            queue: None,
            entity: false,
            recorded: None,
        },
        pod: PodPlan {
            names: vec!["worker"],
            n_init: 0,
            containers: vec![ContainerPlan {
                security: None,
                env: vec![],
                ports: vec![],
                mounts: vec![],
                resources: 0,
                unknown: false,
            }],
            volumes: vec![],
            security: json!({}),
            unknown: false,
            unknown_escaped: false,
            windows: false,
        },
        unknown: false,
        host_and_subdomain: false,
        restart: "OnFailure",
    }
}

// ----- PyTorchJobs ----------------------------------------------------------------------------

fn run_policies() -> Vec<Option<Value>> {
    vec![
        None,
        None,
        Some(json!({"cleanPodPolicy": "None"})),
        Some(json!({"backoffLimit": 3})),
        Some(json!({"backoffLimit": 6, "ttlSecondsAfterFinished": 100})),
    ]
}

fn pytorchjob_case() -> impl Strategy<Value = Case> {
    (
        marking(),
        label_plan(),
        prop::option::weighted(0.85, select(vec!["run42-pytorch-job", "pt"])),
        (
            task_plan(0.8, prop_oneof![8 => Just(1i64), 1 => Just(2i64)]),
            task_plan(0.9, 0i64..5),
        ),
        select(run_policies()),
        prop::option::weighted(0.3, Just(600i64)),
        prop::option::weighted(0.2, select(vec!["auto", "2"])),
        select(vec!["OnFailure", "Never", "ExitCode"]),
        0usize..3,
        (any::<bool>(), any::<bool>(), prop::bool::weighted(0.3)),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(
                marking,
                top,
                name,
                (master, worker),
                run_policy,
                misplaced_ttl,
                nproc,
                restart,
                pick,
                (unknown_root, unknown_spec, unknown_template),
                lower_case,
            )| {
                // The operator matches replica types case-insensitively.
                let (master_key, worker_key) = if lower_case {
                    ("master", "worker")
                } else {
                    ("Master", "Worker")
                };
                let mut replicas: Vec<(&str, TaskPlan)> =
                    vec![(master_key, master), (worker_key, worker)];
                replicas.retain(|(_, t)| t.present);
                if replicas.is_empty() {
                    replicas.push((worker_key, worker_default()));
                }
                let mut carriers: Vec<Map<String, Value>> = std::iter::once(top.labels(marking))
                    .chain(replicas.iter().map(|(_, t)| t.labels.labels(marking)))
                    .collect();
                apply_marking(&mut carriers, marking, pick);
                let mut specs = Map::new();
                for ((replica_type, t), labels) in replicas.iter().zip(carriers.iter().skip(1)) {
                    let extras = PodSpecExtras {
                        restart_policy: "Never",
                        hostname: None,
                        subdomain: None,
                        scheduler: "default-scheduler",
                        // The training operator requires a container named `pytorch`.
                        first_container: Some("pytorch"),
                    };
                    let mut rs = json!({
                        "replicas": t.replicas,
                        "restartPolicy": restart,
                        "template": template(labels.clone(), build_pod_spec(&t.pod, &extras), unknown_template, false),
                    });
                    if t.unknown {
                        rs[UNKNOWN_KEY] = unknown_value();
                    }
                    specs.insert(replica_type.to_string(), rs);
                }
                let mut spec = json!({"pytorchReplicaSpecs": specs});
                if let Some(rp) = run_policy {
                    spec["runPolicy"] = rp;
                }
                if let Some(ttl) = misplaced_ttl {
                    spec["ttlSecondsAfterFinished"] = json!(ttl);
                }
                if let Some(n) = nproc {
                    spec["nprocPerNode"] = json!(n);
                }
                let mut object = json!({
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "metadata": metadata(name, "pt", carriers[0].clone(), Map::new()),
                    "spec": spec,
                });
                plant_top_level(&mut object, unknown_root, unknown_spec, top.recorded);
                Case {
                    kind: Kind::PyTorchJob,
                    marking,
                    object,
                }
            },
        )
}

// ----- JobSets and TrainJobs ------------------------------------------------------------------

fn jobset_case() -> impl Strategy<Value = Case> {
    (
        marking(),
        (label_plan(), label_plan()),
        prop::collection::vec(
            (
                select(vec!["driver", "workers", "tensorboard"]),
                1i64..3,
                1i64..4,
                0usize..3,
                prop::option::weighted(0.2, select(vec!["true", "false"])),
                pod_plan(),
                prop::bool::weighted(0.3),
            ),
            1..3,
        ),
        prop::option::weighted(0.85, select(vec!["ddp", "sweep"])),
        prop::option::weighted(0.5, select(vec!["true", "false"])),
        prop::option::weighted(0.3, select(vec![json!({}), json!({"enableDNSHostnames": false}), json!({"subdomain": "svc"})])),
        (prop::option::weighted(0.3, select(vec![0i64, 3])), prop::option::weighted(0.3, select(vec![0i64, 600]))),
        0usize..2,
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(marking, (top, tmpl), jobs, name, opt_in, network, (max_restarts, ttl), pick, (unknown_root, unknown_spec))| {
                let mut carriers = [top.labels(marking), tmpl.labels(marking)];
                apply_marking(&mut carriers, marking, pick);
                let [top_labels, template_labels] = carriers;
                let mut seen = HashSet::new();
                let mut replicated = Vec::new();
                for (i, (rj, replicas, pods, mode, rj_opt_in, plan, unknown)) in jobs.into_iter().enumerate() {
                    if !seen.insert(rj) {
                        continue;
                    }
                    let extras = PodSpecExtras {
                        restart_policy: "OnFailure",
                        hostname: None,
                        subdomain: None,
                        scheduler: "default-scheduler",
                        first_container: None,
                    };
                    let labels = if i == 0 { template_labels.clone() } else { Map::new() };
                    let mut job = json!({"parallelism": pods, "completions": pods,
                        "template": template(labels, build_pod_spec(&plan, &extras), unknown, false)});
                    match mode {
                        1 => job["completionMode"] = json!("Indexed"),
                        2 => job["completionMode"] = json!("NonIndexed"),
                        _ => {}
                    }
                    let mut rjob = json!({"name": rj, "replicas": replicas, "template": {"spec": job}});
                    if let Some(v) = rj_opt_in {
                        rjob["template"]["metadata"] = json!({"annotations": {"launchgate.io/pytorch": v}});
                    }
                    replicated.push(rjob);
                }
                let mut annotations = Map::new();
                if let Some(v) = opt_in {
                    annotations.insert("launchgate.io/pytorch".into(), json!(v));
                }
                let mut spec = json!({"replicatedJobs": replicated});
                if let Some(n) = network {
                    spec["network"] = n;
                }
                if let Some(m) = max_restarts {
                    spec["failurePolicy"] = json!({"maxRestarts": m, "restartStrategy": "Recreate"});
                }
                if let Some(t) = ttl {
                    spec["ttlSecondsAfterFinished"] = json!(t);
                }
                let mut object = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                    "metadata": metadata(name, "jobset", top_labels, annotations), "spec": spec});
                plant_top_level(&mut object, unknown_root, unknown_spec, top.recorded);
                Case { kind: Kind::JobSet, marking, object }
            },
        )
}

fn trainjob_case() -> impl Strategy<Value = Case> {
    (
        marking(),
        label_plan(),
        prop::collection::vec((0..ENV_NAMES.len(), 0..ENV_VARIANTS), 0..4),
        0usize..4,
        prop::option::weighted(0.8, 1i64..6),
        prop::option::weighted(0.3, 1i64..9),
        prop::bool::weighted(0.3),
        prop::option::weighted(0.3, select(vec!["true", "false"])),
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(marking, top, env, resources_variant, nodes, procs, other_patch, opt_in, (unknown_root, unknown_spec))| {
                let mut carriers = [top.labels(marking)];
                apply_marking(&mut carriers, marking, 0);
                let [top_labels] = carriers;
                let mut trainer = json!({"image": "acme/train:1", "command": ["torchrun", "train.py"]});
                let mut names = HashSet::new();
                let env: Vec<Value> = env
                    .into_iter()
                    .filter(|(n, _)| names.insert(*n))
                    .map(|(n, v)| env_entry(ENV_NAMES[n], v))
                    .collect();
                if !env.is_empty() {
                    trainer["env"] = json!(env);
                }
                let resources = resources(resources_variant);
                if resources != json!({}) {
                    trainer["resourcesPerNode"] = resources;
                }
                if let Some(n) = nodes {
                    trainer["numNodes"] = json!(n);
                }
                if let Some(p) = procs {
                    trainer["numProcPerNode"] = json!(p);
                }
                let mut spec = json!({"runtimeRef": {"apiGroup": "trainer.kubeflow.org",
                    "kind": "ClusterTrainingRuntime", "name": "torch-distributed"},
                    "suspend": false, "managedBy": "trainer.kubeflow.org/trainjob-controller",
                    "trainer": trainer});
                if other_patch {
                    spec["runtimePatches"] = json!([{"manager": "kueue.x-k8s.io/kueue",
                        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node",
                            "template": {"spec": {"template": {"spec": {"nodeSelector": {"gpu": "a100"}}}}}}]}}}}]);
                }
                let mut annotations = Map::new();
                if let Some(v) = opt_in {
                    annotations.insert("launchgate.io/pytorch".into(), json!(v));
                }
                let mut object = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "metadata": metadata(Some("llama-ft"), "trainjob", top_labels, annotations), "spec": spec});
                plant_top_level(&mut object, unknown_root, unknown_spec, top.recorded);
                Case { kind: Kind::TrainJob, marking, object }
            },
        )
}

// ----- pods made by controllers ---------------------------------------------------------------

fn marking_of(labels: &Map<String, Value>) -> Marking {
    if !LAUNCH_KEYS.iter().any(|k| labels.contains_key(*k)) {
        Marking::NotLaunch
    } else if labels.get("wandb").and_then(Value::as_str) == Some("launch") {
        Marking::ImageBuildLabel
    } else {
        Marking::Launch
    }
}

/// Appends `name=value` to a container's env unless the name is there.
fn append_env(container: &mut Value, name: &str, value: &str) {
    let env = container
        .as_object_mut()
        .unwrap()
        .entry("env")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .unwrap();
    if !env.iter().any(|e| e["name"] == name) {
        env.push(json!({"name": name, "value": value}));
    }
}

fn containers_mut(spec: &mut Value) -> impl Iterator<Item = &mut Value> {
    spec.as_object_mut()
        .unwrap()
        .iter_mut()
        .filter(|(k, _)| *k == "containers" || *k == "initContainers")
        .flat_map(|(_, v)| v.as_array_mut().unwrap().iter_mut())
}

/// A pod as a controller creates it from one template of `owner` (mutated by launchgate when
/// it is a launch workload), after pod defaulting and the ServiceAccount admission plugin:
/// Job-controller pods (completion index, hostname), Volcano pods (task annotations,
/// VK_TASK_INDEX/VC_TASK_INDEX), training-operator pods (its env, port and init container).
fn controller_pod(owner: &Case, pick: usize, index: i64, token: bool) -> Case {
    let owner_object = mutate(owner.kind, &owner.object)
        .ok()
        .and_then(|answer| patched(owner, &answer).ok())
        .unwrap_or_else(|| owner.object.clone());
    let owner_name = owner_object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| {
            let prefix = owner_object["metadata"]["generateName"].as_str().unwrap();
            format!("{prefix}x7k2p")
        });
    let templates = pod_templates(owner.kind, &owner_object);
    let (at, template) = templates[pick % templates.len()].clone();
    let mut labels = template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut annotations = template
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut spec = template["spec"].clone();
    let uid = "5597c61e-515b-42ea-acd9-3415d699eac3";
    let mut metadata = Map::new();
    let (api_version, owner_kind) = match owner.kind {
        Kind::VolcanoJob => ("batch.volcano.sh/v1alpha1", "Job"),
        Kind::PyTorchJob => ("kubeflow.org/v1", "PyTorchJob"),
        _ => ("batch/v1", "Job"),
    };
    match owner.kind {
        Kind::VolcanoJob => {
            let task_index = at
                .trim_start_matches("/spec/tasks/")
                .trim_end_matches("/template")
                .parse::<usize>()
                .unwrap();
            let task = &owner_object["spec"]["tasks"][task_index];
            let task_name = task["name"].as_str().unwrap();
            let replicas = task["replicas"].as_i64().unwrap_or(1).max(1);
            let i = (index % replicas).to_string();
            let name = format!("{owner_name}-{task_name}-{i}");
            for (k, v) in [
                ("volcano.sh/job-name", owner_name.as_str()),
                ("volcano.sh/task-spec", task_name),
                ("volcano.sh/task-index", i.as_str()),
                ("volcano.sh/queue-name", "default"),
            ] {
                labels.insert(k.into(), json!(v));
                annotations.insert(k.into(), json!(v));
            }
            labels.insert("volcano.sh/job-namespace".into(), json!("wandb"));
            annotations.insert(
                "volcano.sh/template-uid".into(),
                json!(format!("{owner_name}-{task_name}")),
            );
            annotations.insert("volcano.sh/job-version".into(), json!("0"));
            if spec.get("hostname").is_none() {
                spec["hostname"] = json!(name);
            }
            if spec.get("subdomain").is_none() {
                spec["subdomain"] = json!(owner_name);
            }
            for c in containers_mut(&mut spec) {
                append_env(c, "VK_TASK_INDEX", &i);
                append_env(c, "VC_TASK_INDEX", &i);
            }
            metadata.insert("name".into(), json!(name));
        }
        Kind::PyTorchJob => {
            let replica_type = at
                .trim_start_matches("/spec/pytorchReplicaSpecs/")
                .trim_end_matches("/template")
                .to_string();
            let rt = replica_type.to_lowercase();
            let specs = owner_object["spec"]["pytorchReplicaSpecs"]
                .as_object()
                .unwrap();
            let replicas = specs[&replica_type]["replicas"]
                .as_i64()
                .unwrap_or(1)
                .max(1);
            let i = index % replicas;
            let master = specs.keys().any(|k| k.eq_ignore_ascii_case("master"));
            let world: i64 = specs
                .values()
                .map(|rs| rs["replicas"].as_i64().unwrap_or(1))
                .sum();
            let rank = if rt == "master" {
                0
            } else {
                i + i64::from(master)
            };
            for (k, v) in [
                ("training.kubeflow.org/job-name", owner_name.clone()),
                (
                    "training.kubeflow.org/operator-name",
                    "pytorchjob-controller".into(),
                ),
                ("training.kubeflow.org/replica-type", rt.clone()),
                ("training.kubeflow.org/replica-index", i.to_string()),
            ] {
                labels.insert(k.into(), json!(v));
            }
            if rt == "master" {
                labels.insert("training.kubeflow.org/job-role".into(), json!("master"));
            }
            let master_addr = format!("{owner_name}-master-0");
            for c in spec["containers"].as_array_mut().unwrap() {
                if c["name"] != "pytorch" {
                    continue;
                }
                if master {
                    append_env(c, "MASTER_PORT", "23456");
                    append_env(c, "MASTER_ADDR", &master_addr);
                    append_env(c, "WORLD_SIZE", &world.to_string());
                    append_env(c, "RANK", &rank.to_string());
                    append_env(c, "PET_MASTER_PORT", "23456");
                    append_env(c, "PET_MASTER_ADDR", &master_addr);
                    append_env(c, "PET_NNODES", &world.to_string());
                    append_env(c, "PET_NODE_RANK", &rank.to_string());
                }
                append_env(c, "PYTHONUNBUFFERED", "1");
                let ports = c
                    .as_object_mut()
                    .unwrap()
                    .entry("ports")
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                    .unwrap();
                let clash = ports.iter().any(|p| {
                    p["name"] == "pytorchjob-port"
                        || (p["containerPort"] == 23456 && p["protocol"] == "TCP")
                });
                if !clash {
                    ports.push(json!({"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}));
                }
            }
            let has_init = spec
                .get("initContainers")
                .and_then(Value::as_array)
                .is_some_and(|l| l.iter().any(|c| c["name"] == "init-pytorch"));
            if master && rt == "worker" && !has_init {
                let init = json!({"name": "init-pytorch", "image": "alpine:3.10",
                    "command": ["sh", "-c", format!("until nslookup {master_addr}; do sleep 2; done")],
                    "resources": {"limits": {"cpu": "100m", "memory": "20Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"});
                spec.as_object_mut()
                    .unwrap()
                    .entry("initContainers")
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                    .unwrap()
                    .push(init);
            }
            metadata.insert("name".into(), json!(format!("{owner_name}-{rt}-{i}")));
        }
        _ => {
            for (k, v) in [
                ("batch.kubernetes.io/controller-uid", uid),
                ("batch.kubernetes.io/job-name", owner_name.as_str()),
                ("controller-uid", uid),
                ("job-name", owner_name.as_str()),
            ] {
                labels.insert(k.into(), json!(v));
            }
            let indexed = owner_object["spec"]["completionMode"] == "Indexed";
            if indexed {
                let completions = owner_object["spec"]["completions"].as_i64().unwrap_or(1);
                let i = (index % completions.max(1)).to_string();
                labels.insert("batch.kubernetes.io/job-completion-index".into(), json!(i));
                annotations.insert("batch.kubernetes.io/job-completion-index".into(), json!(i));
                metadata.insert("generateName".into(), json!(format!("{owner_name}-{i}-")));
                if spec.get("subdomain").is_some() {
                    spec["hostname"] = json!(format!("{owner_name}-{i}"));
                }
            } else {
                metadata.insert("generateName".into(), json!(format!("{owner_name}-")));
            }
            metadata.insert(
                "finalizers".into(),
                json!(["batch.kubernetes.io/job-tracking"]),
            );
        }
    }
    metadata.insert("namespace".into(), json!("wandb"));
    let marking = marking_of(&labels);
    if !labels.is_empty() {
        metadata.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    metadata.insert(
        "ownerReferences".into(),
        json!([{"apiVersion": api_version, "kind": owner_kind, "name": owner_name, "uid": uid,
                "controller": true, "blockOwnerDeletion": true}]),
    );
    // Pod defaulting and the ServiceAccount admission plugin (both run before webhooks).
    for (k, v) in [
        ("serviceAccountName", json!("default")),
        ("serviceAccount", json!("default")),
        ("enableServiceLinks", json!(true)),
        ("priority", json!(0)),
        ("preemptionPolicy", json!("PreemptLowerPriority")),
        (
            "tolerations",
            json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 300}]),
        ),
    ] {
        spec[k] = v;
    }
    const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
    let token_volume = "kube-api-access-q8szq";
    if token {
        spec.as_object_mut()
            .unwrap()
            .entry("volumes")
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .unwrap()
            .push(json!({"name": token_volume, "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]}}));
        for c in containers_mut(&mut spec) {
            let mounts = c
                .as_object_mut()
                .unwrap()
                .entry("volumeMounts")
                .or_insert_with(|| json!([]))
                .as_array_mut()
                .unwrap();
            if !mounts.iter().any(|m| m["mountPath"] == TOKEN_PATH) {
                mounts
                    .push(json!({"name": token_volume, "readOnly": true, "mountPath": TOKEN_PATH}));
            }
        }
    }
    let object = json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": metadata,
        "spec": spec,
        "status": {},
    });
    Case {
        kind: Kind::ControllerPod,
        marking,
        object,
    }
}

fn controller_pod_case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![
            job_case(false).boxed(),
            job_case(true).boxed(),
            volcano_job_case().boxed(),
            pytorchjob_case().boxed(),
        ],
        0usize..3,
        0i64..3,
        prop::bool::weighted(0.8),
    )
        .prop_map(|(owner, pick, index, token)| controller_pod(&owner, pick, index, token))
}

fn any_case() -> impl Strategy<Value = Case> {
    prop_oneof![
        pod_case(false).boxed(),
        pod_case(true).boxed(),
        job_case(false).boxed(),
        job_case(true).boxed(),
        volcano_job_case().boxed(),
        pytorchjob_case().boxed(),
        jobset_case().boxed(),
        trainjob_case().boxed(),
        controller_pod_case().boxed(),
    ]
}

// ---------------------------------------------------------------------------------------------
// Running a case through the core
// ---------------------------------------------------------------------------------------------

fn admission_review(kind: Kind, object: &Value, uid: &str) -> Vec<u8> {
    let (group, version, k, resource) = kind.gvkr();
    let mut request = json!({
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": k},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": k},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "namespace": "wandb",
        "operation": "CREATE",
        "userInfo": {"username": "admin", "uid": "admin",
                     "groups": ["system:masters", "system:authenticated"]},
        "object": object,
        "oldObject": null,
        "dryRun": false,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1",
                    "fieldManager": "kubectl-create", "fieldValidation": "Ignore"},
    });
    // A CREATE that relies on generateName has no name yet.
    if let Some(name) = object.pointer("/metadata/name") {
        request["name"] = name.clone();
    }
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": request,
    }))
    .unwrap()
}

/// One answer of the mutate endpoint.
struct Answer {
    response: AdmissionResponse,
    patch: Option<json_patch::Patch>,
}

fn mutate(kind: Kind, object: &Value) -> Result<Answer, TestCaseError> {
    ask(Endpoint::Mutate, kind, object)
}

fn ask(endpoint: Endpoint, kind: Kind, object: &Value) -> Result<Answer, TestCaseError> {
    let uid = "705ab4f5-6393-11e8-b7cc-42010a800002";
    let body = admission_review(kind, object, uid);
    let outcome = review(policy(), endpoint, &body, &NoCluster)
        .map_err(|e| TestCaseError::fail(format!("request rejected: {e}")))?;
    let answer: AdmissionReviewResponse = serde_json::from_slice(&outcome.body)
        .map_err(|e| TestCaseError::fail(format!("response is not an AdmissionReview: {e}")))?;
    let response = answer.response;
    prop_assert_eq!(&response.uid, uid);
    let patch = match response.decoded_patch() {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => return Err(TestCaseError::fail(format!("undecodable patch: {e}"))),
    };
    prop_assert_eq!(
        response.patch_type.is_some(),
        patch.is_some(),
        "patchType goes with a patch"
    );
    if let Some(p) = &patch {
        prop_assert!(!p.0.is_empty(), "an attached patch is never empty");
        prop_assert_eq!(response.patch_type.as_deref(), Some("JSONPatch"));
    }
    if response.allowed {
        prop_assert!(response.status.is_none());
    } else {
        prop_assert!(patch.is_none(), "a denial carries no patch");
        prop_assert!(
            response.status.as_ref().is_some_and(|s| s.code == 403),
            "{:?}",
            response.status
        );
    }
    Ok(Answer { response, patch })
}

/// The object after the patch (the object itself when there is none).
fn patched(case: &Case, answer: &Answer) -> Result<Value, TestCaseError> {
    let mut object = case.object.clone();
    if let Some(p) = &answer.patch {
        json_patch::patch(&mut object, p).map_err(|e| {
            TestCaseError::fail(format!("patch does not apply: {e}\npatch: {}", json!(p)))
        })?;
    }
    Ok(object)
}

/// The pod templates (maps holding `metadata` and `spec`) of a kind, with a display path.
fn pod_templates(kind: Kind, object: &Value) -> Vec<(String, Value)> {
    match kind {
        Kind::Pod | Kind::VolcanoPod | Kind::ControllerPod => {
            vec![(String::new(), object.clone())]
        }
        Kind::BatchJob | Kind::IndexedJob => {
            vec![("/spec/template".into(), object["spec"]["template"].clone())]
        }
        Kind::VolcanoJob => object["spec"]["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| (format!("/spec/tasks/{i}/template"), t["template"].clone()))
            .collect(),
        Kind::PyTorchJob => object["spec"]["pytorchReplicaSpecs"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(rt, rs)| {
                (
                    format!("/spec/pytorchReplicaSpecs/{rt}/template"),
                    rs["template"].clone(),
                )
            })
            .collect(),
        Kind::JobSet => object["spec"]["replicatedJobs"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, rj)| {
                (
                    format!("/spec/replicatedJobs/{i}/template/spec/template"),
                    rj["template"]["spec"]["template"].clone(),
                )
            })
            .collect(),
        // launchgate's runtime patch holds the only pod template launchgate writes.
        Kind::TrainJob => object["spec"]["runtimePatches"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .filter(|(_, p)| p["manager"] == "launchgate.io/admission")
            .map(|(i, p)| {
                let at =
                    "trainingRuntimeSpec/template/spec/replicatedJobs/0/template/spec/template";
                (
                    format!("/spec/runtimePatches/{i}/{at}"),
                    p.pointer(&format!("/{at}")).cloned().unwrap_or_default(),
                )
            })
            .collect(),
    }
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// JSON pointers of every planted unknown field, with its value.
fn unknown_fields(value: &Value, pointer: &str, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let p = format!("{pointer}/{}", escape(k));
                if k.starts_with("x-future") {
                    out.push((p, v.clone()));
                } else {
                    unknown_fields(v, &p, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                unknown_fields(v, &format!("{pointer}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Checks that everything in `original` is still in `mutated` (objects may gain members,
/// arrays may gain elements at the end), except at `replaceable` pointers.
fn contained(
    original: &Value,
    mutated: &Value,
    pointer: &str,
    replaceable: &[String],
    errors: &mut Vec<String>,
) {
    if replaceable.iter().any(|r| r == pointer) {
        return;
    }
    match (original, mutated) {
        (Value::Object(o), Value::Object(m)) => {
            for (k, v) in o {
                let p = format!("{pointer}/{}", escape(k));
                match m.get(k) {
                    Some(mv) => contained(v, mv, &p, replaceable, errors),
                    None => errors.push(format!("{p} was removed")),
                }
            }
        }
        (Value::Array(o), Value::Array(m)) => {
            if m.len() < o.len() {
                errors.push(format!("{pointer} lost elements"));
            }
            for (i, (ov, mv)) in o.iter().zip(m).enumerate() {
                contained(ov, mv, &format!("{pointer}/{i}"), replaceable, errors);
            }
        }
        (o, m) if o == m => {}
        (o, m) => errors.push(format!("{pointer} changed from {o} to {m}")),
    }
}

/// Where launchgate documents that it replaces a value the object already had.
fn replaceable(kind: Kind) -> Vec<String> {
    let mut r = vec!["/metadata/annotations/launchgate.io~1mutations".to_string()];
    if matches!(kind, Kind::BatchJob | Kind::IndexedJob) {
        // The API default 6 (and the invalid pod default Always) are replaced.
        r.push("/spec/backoffLimit".into());
        r.push("/spec/template/spec/restartPolicy".into());
        // The API's podReplacementPolicy gives way to the one a podFailurePolicy needs.
        r.push("/spec/podReplacementPolicy".into());
    }
    // A gang minimum below the rendezvous size is raised (guardrails.gang: raise).
    if kind == Kind::VolcanoJob {
        r.push("/spec/minAvailable".into());
    }
    if kind == Kind::PyTorchJob {
        r.push("/spec/runPolicy/schedulingPolicy/minAvailable".into());
    }
    r
}

fn name_of(item: &Value) -> Option<&str> {
    item.get("name").and_then(Value::as_str)
}

fn duplicates(keys: impl IntoIterator<Item = String>, what: &str, at: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    keys.into_iter()
        .filter(|k| !seen.insert(k.clone()))
        .map(|k| format!("{at}: duplicate {what} {k}"))
        .collect()
}

/// (e): duplicate-free lists, unique container names, mounts of existing volumes.
fn structural_problems(spec: &Value, at: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let items = |v: &Value, key: &str| -> Vec<Value> {
        v.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let volumes = items(spec, "volumes");
    errors.extend(duplicates(
        volumes.iter().map(|v| format!("{:?}", name_of(v))),
        "volume",
        at,
    ));
    let volume_names: HashSet<&str> = volumes.iter().filter_map(name_of).collect();
    let containers: Vec<(String, Value)> = ["initContainers", "containers"]
        .iter()
        .flat_map(|list| {
            items(spec, list)
                .into_iter()
                .enumerate()
                .map(move |(i, c)| (format!("{at}/spec/{list}/{i}"), c))
        })
        .collect();
    errors.extend(duplicates(
        containers.iter().map(|(_, c)| format!("{:?}", name_of(c))),
        "container name",
        at,
    ));
    for (where_, c) in &containers {
        errors.extend(duplicates(
            items(c, "env").iter().map(|e| format!("{:?}", name_of(e))),
            "env var",
            where_,
        ));
        let ports = items(c, "ports");
        errors.extend(duplicates(
            ports.iter().filter_map(name_of).map(str::to_string),
            "port name",
            where_,
        ));
        errors.extend(duplicates(
            ports.iter().map(|p| {
                format!(
                    "{}/{}",
                    p["containerPort"],
                    p.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                )
            }),
            "containerPort/protocol",
            where_,
        ));
        let mounts = items(c, "volumeMounts");
        errors.extend(duplicates(
            mounts.iter().map(|m| format!("{:?}", name_of(m))),
            "volumeMount name",
            where_,
        ));
        errors.extend(duplicates(
            mounts.iter().map(|m| {
                m["mountPath"]
                    .as_str()
                    .unwrap_or_default()
                    .trim_end_matches('/')
                    .to_string()
            }),
            "mountPath",
            where_,
        ));
        for m in &mounts {
            if !name_of(m).is_some_and(|n| volume_names.contains(n)) {
                errors.push(format!("{where_}: mount {m} names no volume of the pod"));
            }
        }
    }
    errors
}

// ---------------------------------------------------------------------------------------------
// The properties
// ---------------------------------------------------------------------------------------------

fn check_patch_applies(case: &Case) -> Result<(), TestCaseError> {
    let answer = mutate(case.kind, &case.object)?;
    if !answer.response.allowed {
        prop_assert!(answer.patch.is_none(), "a denial carries no patch");
        return Ok(());
    }
    patched(case, &answer)?;
    Ok(())
}

fn check_reinvocation(case: &Case) -> Result<(), TestCaseError> {
    let first = mutate(case.kind, &case.object)?;
    if !first.response.allowed {
        return Ok(());
    }
    let once = patched(case, &first)?;
    let second = mutate(case.kind, &once)?;
    prop_assert!(second.response.allowed, "{:?}", second.response.status);
    prop_assert!(
        second.patch.is_none(),
        "second pass patched: {}",
        json!(second.patch)
    );
    Ok(())
}

fn check_unknown_fields(case: &Case) -> Result<(), TestCaseError> {
    let answer = mutate(case.kind, &case.object)?;
    if !answer.response.allowed {
        return Ok(());
    }
    let after = patched(case, &answer)?;
    let mut planted = Vec::new();
    unknown_fields(&case.object, "", &mut planted);
    for (pointer, value) in &planted {
        prop_assert_eq!(after.pointer(pointer), Some(value), "at {}", pointer);
    }
    let mut errors = Vec::new();
    let mut replaceable = replaceable(case.kind);
    if matches!(case.kind, Kind::VolcanoJob)
        && [json!(0), json!(3)]
            .iter()
            .any(|v| case.object.pointer("/spec/maxRetry") == Some(v))
    {
        // Volcano treats maxRetry 0 as unset (its webhook writes 3), and its CRD writes 3 where
        // the user wrote none (no intent is generated here): so does launchgate.
        replaceable.push("/spec/maxRetry".into());
    }
    if matches!(case.kind, Kind::IndexedJob)
        && case.object.pointer("/spec/parallelism") == Some(&json!(1))
    {
        // The API server's default parallelism 1 runs the ranks one at a time: an opted-in
        // Indexed Job whose user did not write it gets parallelism = completions.
        replaceable.push("/spec/parallelism".into());
    }
    contained(&case.object, &after, "", &replaceable, &mut errors);
    prop_assert!(errors.is_empty(), "user fields lost: {:?}", errors);
    Ok(())
}

fn check_typed(case: &Case) -> Result<(), TestCaseError> {
    let answer = mutate(case.kind, &case.object)?;
    if !answer.response.allowed {
        return Ok(());
    }
    let after = patched(case, &answer)?;
    match case.kind {
        Kind::Pod | Kind::VolcanoPod | Kind::ControllerPod => {
            serde_json::from_value::<Pod>(after.clone())
                .map_err(|e| TestCaseError::fail(format!("not a Pod: {e}")))?;
        }
        Kind::BatchJob | Kind::IndexedJob => {
            serde_json::from_value::<Job>(after.clone())
                .map_err(|e| TestCaseError::fail(format!("not a Job: {e}")))?;
        }
        Kind::VolcanoJob | Kind::PyTorchJob | Kind::JobSet | Kind::TrainJob => {}
    }
    let templates = pod_templates(case.kind, &after);
    prop_assert!(!templates.is_empty() || case.kind == Kind::TrainJob);
    for (at, t) in templates {
        serde_json::from_value::<PodTemplateSpec>(t)
            .map_err(|e| TestCaseError::fail(format!("{at} is not a PodTemplateSpec: {e}")))?;
    }
    Ok(())
}

fn check_no_duplicates(case: &Case) -> Result<(), TestCaseError> {
    // The generator's own output must be valid, or the property proves nothing.
    let mut before = Vec::new();
    for (at, t) in pod_templates(case.kind, &case.object) {
        before.extend(structural_problems(&t["spec"], &at));
    }
    prop_assert!(before.is_empty(), "generator bug: {:?}", before);
    let answer = mutate(case.kind, &case.object)?;
    if !answer.response.allowed {
        return Ok(());
    }
    let after = patched(case, &answer)?;
    let mut errors = Vec::new();
    for (at, t) in pod_templates(case.kind, &after) {
        errors.extend(structural_problems(&t["spec"], &at));
    }
    prop_assert!(errors.is_empty(), "{:?}", errors);
    Ok(())
}

fn check_untouched_unless_launch(case: &Case) -> Result<(), TestCaseError> {
    // The validating endpoint never patches, and denies (without a patch) only launch workloads.
    let validated = ask(Endpoint::Validate, case.kind, &case.object)?;
    prop_assert!(validated.patch.is_none(), "the validating webhook patched");
    if case.marking == Marking::NotLaunch {
        prop_assert!(validated.response.allowed);
    }
    let answer = mutate(case.kind, &case.object)?;
    if case.marking == Marking::NotLaunch {
        prop_assert!(answer.response.allowed);
        prop_assert!(
            answer.patch.is_none(),
            "{:?} object patched: {}",
            case.marking,
            json!(answer.patch)
        );
    }
    Ok(())
}

/// Field paths whose apply record changes what the mutators do (a default the user wrote is
/// kept), and some no rule asks about.
const RECORDED_FIELDS: &[&[&str]] = &[
    &["spec", "backoffLimit"],
    &["spec", "ttlSecondsAfterFinished"],
    &["spec", "activeDeadlineSeconds"],
    &["spec", "podReplacementPolicy"],
    &["spec", "maxRetry"],
    &["spec", "nprocPerNode"],
    &["spec", "dnsPolicy"],
    &["spec", "runPolicy", "backoffLimit"],
    &["spec", "runPolicy", "ttlSecondsAfterFinished"],
    &["spec", "failurePolicy", "maxRestarts"],
    &["spec", "template", "spec", "dnsPolicy"],
    &["metadata", "labels", "app"],
    &["spec", "x-future-field"],
];

/// A `fieldsV1` owning `paths` (`{"f:spec": {"f:backoffLimit": {}}}`).
fn field_set(paths: &[&[&str]]) -> Value {
    let mut set = json!({});
    for path in paths {
        let mut at = &mut set;
        for key in *path {
            at = at
                .as_object_mut()
                .unwrap()
                .entry(format!("f:{key}"))
                .or_insert_with(|| json!({}));
        }
        at["."] = json!({});
    }
    set
}

/// `metadata.managedFields`: apply and update records, one of the status subresource.
fn managed_fields() -> impl Strategy<Value = Vec<Value>> {
    let entry = (
        select(vec!["Apply", "Update"]),
        select(vec!["", "status"]),
        subsequence(RECORDED_FIELDS.to_vec(), 0..=RECORDED_FIELDS.len()),
    )
        .prop_map(|(operation, subresource, paths)| {
            let mut entry = json!({
                "manager": "kubectl", "operation": operation, "apiVersion": "v1",
                "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": field_set(&paths),
            });
            if !subresource.is_empty() {
                entry["subresource"] = json!(subresource);
            }
            entry
        });
    prop::collection::vec(entry, 1..4)
}

/// Both endpoints answer `object` read with its field sets kept as text exactly as they
/// answer it parsed whole, and the stored object keeps its managed fields.
fn check_field_sets_kept_as_text(case: &Case, entries: Vec<Value>) -> Result<(), TestCaseError> {
    let mut object = case.object.clone();
    object["metadata"]["managedFields"] = Value::Array(entries);
    let body = admission_review(case.kind, &object, "uid-1");
    for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
        let kept = review(policy(), endpoint, &body, &NoCluster)
            .map_err(|e| TestCaseError::fail(format!("request rejected: {e}")))?;
        let request = parse_request(&body).unwrap();
        prop_assert!(
            request
                .object
                .as_ref()
                .unwrap()
                .pointer("/metadata/managedFields/0/fieldsV1")
                .unwrap()
                .is_object()
        );
        let whole = decide(policy(), endpoint, &request, &NoCluster);
        let whole = review_response_body(&whole.response);
        prop_assert_eq!(
            String::from_utf8_lossy(&kept.body),
            String::from_utf8_lossy(&whole),
            "{:?}",
            endpoint
        );
        let answer: AdmissionReviewResponse = serde_json::from_slice(&kept.body).unwrap();
        if let Some(patch) = answer.response.decoded_patch() {
            let mut stored = object.clone();
            json_patch::patch(&mut stored, &patch.unwrap()).unwrap();
            prop_assert_eq!(
                stored["metadata"]["managedFields"].to_string(),
                object["metadata"]["managedFields"].to_string()
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// (a) The patch always applies cleanly; a denial carries none.
    #[test]
    fn patch_applies_cleanly(case in any_case()) {
        check_patch_applies(&case)?;
    }

    /// (b) Idempotency: the mutated object fed back as a CREATE gives an empty patch.
    #[test]
    fn second_pass_gives_an_empty_patch(case in any_case()) {
        check_reinvocation(&case)?;
    }

    /// (c) Fields launchgate does not model survive, and nothing the user wrote is lost.
    #[test]
    fn unknown_fields_survive(case in any_case()) {
        check_unknown_fields(&case)?;
    }

    /// (d) The result is valid Kubernetes as far as k8s-openapi can tell.
    #[test]
    fn result_deserialises_into_k8s_openapi(case in any_case()) {
        check_typed(&case)?;
    }

    /// (e) No duplicate env vars, ports, volumeMounts or volumes.
    #[test]
    fn no_duplicate_names(case in any_case()) {
        check_no_duplicates(&case)?;
    }

    /// Objects that are not launch workloads pass untouched (a label never exempts one); no
    /// denial (of either endpoint) carries a patch.
    #[test]
    fn only_launch_workloads_are_patched(case in any_case()) {
        check_untouched_unless_launch(&case)?;
    }

    /// Managed field sets kept as text change no answer and no stored byte.
    #[test]
    fn field_sets_kept_as_text_change_nothing(case in any_case(), entries in managed_fields()) {
        check_field_sets_kept_as_text(&case, entries)?;
    }
}

/// The generators reach what the properties are about: every kind, launch and non-launch,
/// patched objects, and the pre-existing values the mutators must respect.
#[test]
fn generators_cover_the_interesting_cases() {
    let mut runner = TestRunner::deterministic();
    let strategy = any_case();
    let mut kinds = HashSet::new();
    let mut patched_kinds = HashSet::new();
    let mut markings = HashSet::new();
    let mut features = HashSet::new();
    let mut denied = 0;
    for _ in 0..400 {
        let case = strategy.new_tree(&mut runner).unwrap().current();
        kinds.insert(case.kind);
        markings.insert(case.marking);
        let answer = mutate(case.kind, &case.object).unwrap();
        if answer.patch.is_some() {
            patched_kinds.insert(case.kind);
        }
        denied += usize::from(
            !ask(Endpoint::Validate, case.kind, &case.object)
                .unwrap()
                .response
                .allowed,
        );
        let text = case.object.to_string();
        for needle in [
            "pytorchjob-port",
            "\"containerPort\":23456",
            "\"/root/.cache\"",
            "\"/cache\"",
            "nfs-pvc",
            "launchgate-cache",
            "istio-proxy",
            "MASTER_ADDR",
            "PET_MASTER_PORT",
            "HF_HOME",
            "XDG_CACHE_HOME",
            "\"backoffLimit\":6",
            "\"runAsNonRoot\":true",
            "\"privileged\":true",
            "SYS_ADMIN",
            "initContainers",
            "volcano.sh/task-index",
            "launchgate.io/pytorch-rank-offset",
            "\"pytorch\":[",
            "\"launchgate.io/pytorch\":\"true\"",
            "\"completionMode\":\"Indexed\"",
            "\"subdomain\"",
            "\"Master\"",
            "x-future-field",
        ] {
            if text.contains(needle) {
                features.insert(needle);
            }
        }
    }
    assert_eq!(kinds.len(), Kind::ALL.len(), "{kinds:?}");
    assert_eq!(patched_kinds.len(), Kind::ALL.len(), "{patched_kinds:?}");
    assert_eq!(markings.len(), 3, "{markings:?}");
    assert_eq!(features.len(), 24, "{features:?}");
    assert!(
        denied >= 20,
        "only {denied} validate denials: the denial property is vacuous"
    );
}

/// The checkers themselves catch what they are meant to catch.
#[test]
fn checkers_detect_violations() {
    let spec = json!({
        "volumes": [{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}],
        "initContainers": [{"name": "c"}],
        "containers": [{
            "name": "c",
            "env": [{"name": "X", "value": "1"}, {"name": "X", "value": "2"}],
            "ports": [
                {"name": "p", "containerPort": 1, "protocol": "TCP"},
                {"name": "p", "containerPort": 2, "protocol": "TCP"},
                {"containerPort": 3, "protocol": "TCP"},
                {"containerPort": 3},
            ],
            "volumeMounts": [
                {"name": "a", "mountPath": "/x"},
                {"name": "a", "mountPath": "/y/"},
                {"name": "b", "mountPath": "/y"},
            ],
        }],
    });
    let problems = structural_problems(&spec, "");
    for what in [
        "duplicate volume",
        "duplicate container name",
        "duplicate env var",
        "duplicate port name",
        "duplicate containerPort/protocol",
        "duplicate volumeMount name",
        "duplicate mountPath",
        "names no volume",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(what)),
            "{what}: {problems:?}"
        );
    }

    let original = json!({"a": {"b": [1, 2], "x/y~z": 3}, "c": 4});
    let mut errors = Vec::new();
    contained(
        &original,
        &json!({"a": {"b": [1, 2, 5], "x/y~z": 3, "n": 1}, "c": 4}),
        "",
        &[],
        &mut errors,
    );
    assert!(errors.is_empty(), "{errors:?}");
    contained(
        &original,
        &json!({"a": {"b": [1], "x/y~z": 4}}),
        "",
        &["/c".into()],
        &mut errors,
    );
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors.iter().any(|e| e.starts_with("/a/x~1y~0z changed")),
        "{errors:?}"
    );

    let mut planted = Vec::new();
    unknown_fields(
        &json!({"s": [{UNKNOWN_KEY_ESCAPED: 1}], UNKNOWN_KEY: 2}),
        "",
        &mut planted,
    );
    planted.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        planted,
        vec![
            ("/s/0/x-future~1field~0v2".to_string(), json!(1)),
            ("/x-future-field".to_string(), json!(2))
        ]
    );
}
