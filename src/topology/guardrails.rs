//! Launch guardrails: what keeps a run from starting half, dying on a preemption or running
//! unattended for days. Both paths read them: the mutating webhook fixes what it can (raises a
//! gang's `minAvailable`, adds a `podFailurePolicy`, a `successPolicy`, `/dev/shm`, a default
//! deadline); the validating webhook denies what the queue says to deny (a gang that can start
//! half, a run over its GPU-hour cap). Each is per queue (`queues.<name>.guardrails`).

use super::volcano;
use crate::error::ConfigError;
use crate::json::Pointer as _;
use crate::quantity::Quantity;
use crate::workload::WorkloadKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What to do with a gang that could start with fewer pods than it has ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GangAction {
    /// Leave it alone.
    Off,
    /// Raise `minAvailable` to the rendezvous size (mutating webhook).
    Raise,
    /// Deny it, saying the rendezvous size (validating webhook).
    Deny,
}

/// `guardrails.preemption`: a pod evicted by a preemption or a node drain does not fail the run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct PreemptionConfig {
    pub enabled: bool,
    /// Container exit codes that are retried without counting as a failure (1..=255).
    pub retriable_exit_codes: Vec<i32>,
}

/// `guardrails.sharedMemory`: a memory-backed `/dev/shm` for DataLoader workers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SharedMemoryConfig {
    /// The `emptyDir.sizeLimit` (a quantity, e.g. `8Gi`); it counts against the container's
    /// memory limit.
    pub size_limit: String,
}

/// What a broken guardrail that can deny does.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum GuardrailEnforcement {
    /// The validating webhook denies the run.
    #[default]
    Deny,
    /// The run is admitted with a warning.
    Warn,
}

/// `guardrails.costCeiling`: every run has a deadline, and no run can use more GPU-hours.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct CostCeilingConfig {
    /// `activeDeadlineSeconds` for a run that sets none.
    pub default_deadline_seconds: Option<i64>,
    /// Most GPU-hours one run may use: GPUs that can run at once × its deadline in hours.
    pub max_gpu_hours: Option<f64>,
    /// A run over `maxGpuHours` is denied (`deny`) or only warned about (`warn`).
    pub enforcement: GuardrailEnforcement,
}

/// `queues.<name>.guardrails`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct GuardrailsConfig {
    /// A distributed job whose gang could start with fewer pods than its world size.
    pub gang: GangAction,
    pub preemption: PreemptionConfig,
    /// Indexed launches complete when index 0 (rank 0) succeeds.
    pub end_with_rank_zero: bool,
    /// Warn about a container that asks for several GPUs but starts no launcher.
    pub multi_gpu_warning: bool,
    pub shared_memory: Option<SharedMemoryConfig>,
    pub cost_ceiling: CostCeilingConfig,
    /// With `--cluster-lookups`: warn when the Service a wired Indexed Job's pods rendezvous
    /// through is missing or cannot give them DNS names in time.
    pub rendezvous_preflight: bool,
}

impl Default for GuardrailsConfig {
    fn default() -> Self {
        GuardrailsConfig {
            gang: GangAction::Off,
            preemption: PreemptionConfig::default(),
            end_with_rank_zero: false,
            multi_gpu_warning: false,
            shared_memory: None,
            cost_ceiling: CostCeilingConfig::default(),
            rendezvous_preflight: false,
        }
    }
}

impl GuardrailsConfig {
    pub fn check(&self, at: &str, errors: &mut Vec<ConfigError>) {
        for (i, code) in self.preemption.retriable_exit_codes.iter().enumerate() {
            if !(1..=255).contains(code) {
                errors.push(ConfigError::new(
                    format!("{at}.preemption.retriableExitCodes[{i}]"),
                    format!("{code} is not a failure exit code (1..=255)"),
                ));
            }
        }
        if let Some(shm) = &self.shared_memory {
            match Quantity::parse(&shm.size_limit) {
                Ok(q) if q > Quantity::ZERO => {}
                Ok(_) => errors.push(ConfigError::new(
                    format!("{at}.sharedMemory.sizeLimit"),
                    "must be more than 0",
                )),
                Err(e) => errors.push(ConfigError::new(
                    format!("{at}.sharedMemory.sizeLimit"),
                    format!("{:?} is not a quantity: {e}", shm.size_limit),
                )),
            }
        }
        let cost = &self.cost_ceiling;
        if cost
            .default_deadline_seconds
            .is_some_and(|s| !(1..=i64::from(i32::MAX)).contains(&s))
        {
            errors.push(ConfigError::new(
                format!("{at}.costCeiling.defaultDeadlineSeconds"),
                "must be between 1 and 2147483647",
            ));
        }
        if cost
            .max_gpu_hours
            .is_some_and(|h| !h.is_finite() || h <= 0.0)
        {
            errors.push(ConfigError::new(
                format!("{at}.costCeiling.maxGpuHours"),
                "must be a number above 0",
            ));
        }
    }

    /// The shared-memory size, parsed (checked at load).
    pub fn shm_size(&self) -> Option<Quantity> {
        Quantity::parse(&self.shared_memory.as_ref()?.size_limit).ok()
    }
}

/// Where a kind keeps its run's deadline: (JSON Pointer of the holder, key); `None` for the
/// kinds without one (Volcano Job, JobSet), whose pod templates each carry theirs.
pub fn deadline_place(kind: WorkloadKind) -> Option<(&'static str, &'static str)> {
    match kind {
        WorkloadKind::BatchJob | WorkloadKind::TrainJob | WorkloadKind::Pod => {
            Some(("/spec", "activeDeadlineSeconds"))
        }
        WorkloadKind::PyTorchJob => Some(("/spec/runPolicy", "activeDeadlineSeconds")),
        WorkloadKind::VolcanoJob | WorkloadKind::JobSet => None,
    }
}

/// The run's deadline in seconds as written: the run's own ([`deadline_place`]), else the
/// longest of its pod templates' when every one sets one. The mutating webhook writes the
/// queue's default where this is `None`; the GPU-hour cap multiplies by it.
pub fn run_deadline(kind: WorkloadKind, object: &Value) -> Option<i64> {
    if let Some((holder, key)) = deadline_place(kind)
        && let Some(own) = object
            .at(holder)
            .and_then(|h| h.get(key))
            .and_then(Value::as_i64)
    {
        return Some(own);
    }
    let templates = crate::workload::templates(kind, object);
    if templates.is_empty() {
        return None;
    }
    templates
        .iter()
        .map(|(_, t)| t.get("spec")?.get("activeDeadlineSeconds")?.as_i64())
        .try_fold(0, |longest, d| d.map(|d| longest.max(d)))
}

/// Where a gang's minimum sits and what it must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangShortfall {
    /// Dotted path, e.g. `spec.minAvailable`.
    pub path: String,
    /// JSON Pointer of the same place.
    pub pointer: String,
    pub current: i64,
    /// The rendezvous size (pods that must all run for the job to start).
    pub needed: i64,
}

/// The gang minimums of a distributed job that are below its rendezvous size: a Volcano Job
/// with the pytorch plugin (`spec.minAvailable`, the least the gang scheduler starts), a
/// PyTorchJob with a gang scheduler (`spec.runPolicy.schedulingPolicy.minAvailable`). An unset
/// minimum is the operator's (Volcano and the training operator default it to every replica).
pub fn gang_shortfalls(kind: WorkloadKind, object: &Value, name: &str) -> Vec<GangShortfall> {
    let (needed, path) = match kind {
        WorkloadKind::VolcanoJob => match volcano::analyse(object, name) {
            Ok(Some(job)) => (job.wiring.nnodes, "spec.minAvailable"),
            _ => return Vec::new(),
        },
        WorkloadKind::PyTorchJob => {
            let specs = super::pytorchjob::replica_specs(object);
            let master = super::pytorchjob::replicas_of(&specs, "Master").unwrap_or(0);
            let workers = super::pytorchjob::replicas_of(&specs, "Worker").unwrap_or(0);
            (
                master.saturating_add(workers),
                "spec.runPolicy.schedulingPolicy.minAvailable",
            )
        }
        _ => return Vec::new(),
    };
    let pointer = format!("/{}", path.replace('.', "/"));
    match object.at(&pointer).and_then(Value::as_i64) {
        Some(current) if current < needed => vec![GangShortfall {
            path: path.to_string(),
            pointer,
            current,
            needed,
        }],
        _ => Vec::new(),
    }
}

impl GangShortfall {
    /// Why it matters, for a warning or a denial.
    pub fn explain(&self, kind: WorkloadKind) -> String {
        format!(
            "{} {}={} is below the job's rendezvous size {}: the gang scheduler may start {} of its {} pods, which then wait at rendezvous for the others while holding their GPUs",
            kind.as_str(),
            self.path,
            self.current,
            self.needed,
            self.current,
            self.needed
        )
    }
}

/// Labels the Job controller gives every pod of Job `job` (beside its template's), and whether
/// a key's value is unknown at admission (the Job's uid).
fn controller_label(key: &str, job: &str) -> Option<Option<String>> {
    match key {
        "batch.kubernetes.io/job-name" | "job-name" => {
            Some((!job.is_empty()).then(|| job.to_string()))
        }
        "batch.kubernetes.io/controller-uid" | "controller-uid" => Some(None),
        _ => None,
    }
}

/// Why the Service `subdomain` cannot give the pods of a wired Indexed Job the DNS names their
/// rendezvous needs (`service`: the Service as the cluster has it, `None` when it has none).
/// `template_labels` are the pod template's labels, `job` the Job's name (empty with
/// `generateName`), `port` the rendezvous port.
pub fn rendezvous_service_problems(
    service: Option<&Value>,
    namespace: &str,
    subdomain: &str,
    template_labels: Option<&serde_json::Map<String, Value>>,
    job: &str,
    port: u16,
) -> Vec<String> {
    let at = format!("Service {namespace}/{subdomain}");
    let Some(service) = service else {
        return vec![format!(
            "{at} does not exist (yet): the pods' subdomain names no headless Service, so their DNS names (MASTER_ADDR) never resolve and rendezvous hangs; create it (clusterIP: None, a selector on the Job's pods, publishNotReadyAddresses: true)"
        )];
    };
    let spec = service.get("spec");
    let field = |k: &str| spec.and_then(|s| s.get(k));
    let mut out = Vec::new();
    if field("clusterIP").and_then(Value::as_str) != Some("None") {
        out.push(format!(
            "{at} is not headless (clusterIP: None): pods get no per-pod DNS names through it, so MASTER_ADDR never resolves"
        ));
    }
    let selector = field("selector").and_then(Value::as_object);
    match selector {
        None => out.push(format!(
            "{at} has no selector: it lists none of the Job's pods, so their DNS names never resolve"
        )),
        Some(selector) if selector.is_empty() => out.push(format!(
            "{at} has no selector: it lists none of the Job's pods, so their DNS names never resolve"
        )),
        Some(selector) => {
            let missing: Vec<String> = selector
                .iter()
                .filter(|(k, v)| {
                    let want = v.as_str().unwrap_or_default();
                    match controller_label(k, job) {
                        Some(Some(value)) => value != want,
                        Some(None) => false,
                        None => template_labels
                            .and_then(|l| l.get(k.as_str()))
                            .and_then(Value::as_str)
                            != Some(want),
                    }
                })
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect();
            if !missing.is_empty() {
                out.push(format!(
                    "{at} selects {} which the Job's pods do not carry: it lists none of them, so their DNS names never resolve",
                    missing.join(", ")
                ));
            }
        }
    }
    let ports = field("ports").and_then(Value::as_array);
    if let Some(ports) = ports.filter(|p| !p.is_empty())
        && !ports
            .iter()
            .any(|p| p.get("port").and_then(Value::as_i64) == Some(i64::from(port)))
    {
        out.push(format!(
            "{at} does not list the rendezvous port {port} among its ports"
        ));
    }
    if field("publishNotReadyAddresses").and_then(Value::as_bool) != Some(true) {
        out.push(format!(
            "{at} does not publish not-ready addresses (publishNotReadyAddresses: true): a pod's DNS name then resolves only once it is ready, which a rank waiting at rendezvous never is"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_volcano_gang_below_its_rendezvous_size_is_found() {
        let vc = json!({"metadata": {"name": "j"}, "spec": {"minAvailable": 1, "plugins": {"pytorch": []},
            "tasks": [{"name": "master", "replicas": 1, "template": {}},
                      {"name": "worker", "replicas": 2, "template": {}}]}});
        let found = gang_shortfalls(WorkloadKind::VolcanoJob, &vc, "j");
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].current, found[0].needed), (1, 3));
        assert!(
            found[0]
                .explain(WorkloadKind::VolcanoJob)
                .contains("spec.minAvailable=1 is below the job's rendezvous size 3")
        );
        let mut whole = vc.clone();
        whole["spec"]["minAvailable"] = json!(3);
        assert!(gang_shortfalls(WorkloadKind::VolcanoJob, &whole, "j").is_empty());
        let mut unset = vc.clone();
        unset["spec"]
            .as_object_mut()
            .unwrap()
            .remove("minAvailable");
        assert!(gang_shortfalls(WorkloadKind::VolcanoJob, &unset, "j").is_empty());
        let pt = json!({"spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 2}},
            "pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}}});
        assert_eq!(
            gang_shortfalls(WorkloadKind::PyTorchJob, &pt, "p")[0].needed,
            4
        );
    }

    #[test]
    fn the_rendezvous_service_is_checked() {
        let labels = json!({"app": "ddp"});
        let labels = labels.as_object();
        let problems = |svc: Option<Value>| {
            rendezvous_service_problems(svc.as_ref(), "ns", "ddp", labels, "ddp", 23456).join("\n")
        };
        assert!(problems(None).contains("Service ns/ddp does not exist (yet)"));
        let good = json!({"spec": {"clusterIP": "None", "selector": {"batch.kubernetes.io/job-name": "ddp"},
            "ports": [{"port": 23456}], "publishNotReadyAddresses": true}});
        assert_eq!(problems(Some(good.clone())), "");
        let mut by_label = good.clone();
        by_label["spec"]["selector"] = json!({"app": "ddp"});
        assert_eq!(problems(Some(by_label)), "");
        let bad = json!({"spec": {"clusterIP": "10.0.0.1", "selector": {"app": "other"},
            "ports": [{"port": 80}]}});
        let text = problems(Some(bad));
        for part in [
            "is not headless",
            "selects app=other",
            "rendezvous port 23456",
            "publishNotReadyAddresses",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        assert!(
            problems(Some(
                json!({"spec": {"clusterIP": "None", "publishNotReadyAddresses": true}})
            ))
            .contains("has no selector")
        );
    }

    #[test]
    fn shared_memory_above_the_queues_memory_ceiling_is_a_config_error() {
        let e = crate::Policy::from_yaml(
            "queues:\n  q:\n    guardrails: {sharedMemory: {sizeLimit: 16Gi}}\n    limits:\n      fields:\n        - {path: 'containers[*].resources.limits.memory', type: quantity, maximum: 12Gi}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("queues.q.guardrails.sharedMemory.sizeLimit: 16Gi is more memory than a container of this queue may have (field \"containers[*].resources.limits.memory\")"),
            "{e}"
        );
        assert!(crate::Policy::from_yaml(
            "queues:\n  q:\n    guardrails: {sharedMemory: {sizeLimit: 2Gi}}\n    limits:\n      fields:\n        - {path: 'containers[*].resources.limits.memory', type: quantity, maximum: 12Gi}\n",
        )
        .is_ok());
    }

    #[test]
    fn deadlines_come_from_the_run_or_every_pod_template() {
        let vc = json!({"spec": {"tasks": [
            {"name": "a", "template": {"spec": {"activeDeadlineSeconds": 60}}},
            {"name": "b", "template": {"spec": {"activeDeadlineSeconds": 90}}}]}});
        assert_eq!(run_deadline(WorkloadKind::VolcanoJob, &vc), Some(90));
        let mut half = vc.clone();
        half["spec"]["tasks"][1]["template"]["spec"] = json!({});
        assert_eq!(run_deadline(WorkloadKind::VolcanoJob, &half), None);
        let pt = json!({"spec": {"runPolicy": {"activeDeadlineSeconds": 5}}});
        assert_eq!(run_deadline(WorkloadKind::PyTorchJob, &pt), Some(5));
    }

    #[test]
    fn config_is_checked() {
        let mut errors = Vec::new();
        let cfg = GuardrailsConfig {
            preemption: PreemptionConfig {
                enabled: true,
                retriable_exit_codes: vec![0, 137],
            },
            shared_memory: Some(SharedMemoryConfig {
                size_limit: "lots".into(),
            }),
            cost_ceiling: CostCeilingConfig {
                default_deadline_seconds: Some(0),
                max_gpu_hours: Some(-1.0),
                ..CostCeilingConfig::default()
            },
            ..GuardrailsConfig::default()
        };
        cfg.check("g", &mut errors);
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 4, "{text:?}");
        assert!(text[0].starts_with("g.preemption.retriableExitCodes[0]"));
    }
}
