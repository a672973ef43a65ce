//! Launch guardrails: what keeps a run from starting half, dying on a preemption or running
//! unattended for days. Both paths read them: the mutating webhook fixes what it can (raises a
//! gang's `minAvailable`, adds a `podFailurePolicy`, a `successPolicy`, `/dev/shm`, a default
//! deadline); the validating webhook denies what the queue says to deny (a gang that can start
//! half, a run over its GPU-hour cap). Each is per queue (`queues.<name>.guardrails`).

use crate::error::ConfigError;
use crate::json::Pointer as _;
use crate::kinds::{Deadline, Holders, JobSpecs, Position, field};
use crate::quantity::Quantity;
use crate::rules;
use crate::workload::WorkloadKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What to do with a gang that could start with fewer pods than it has ranks.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum GangAction {
    /// Leave it alone.
    #[default]
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
    /// Give Jobs a `podFailurePolicy` that ignores disruptions (preemption, node drain).
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

/// `guardrails.costCeiling`: every run has a run-level deadline, and no run can use more
/// GPU-hours.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct CostCeilingConfig {
    /// The run-level deadline for a run that sets none (a pod template's own
    /// `activeDeadlineSeconds` bounds one pod, not the run).
    pub default_deadline_seconds: Option<i64>,
    /// Most GPU-hours one run may use: GPUs that can run at once × the run's bound in hours (its
    /// run-level deadline; a JobSet's Job deadline × (maxRestarts + 1); a Volcano Job's pod
    /// deadline × (maxRetry + 1)). A run with no such bound is judged over it.
    pub max_gpu_hours: Option<f64>,
    /// A run over `maxGpuHours` is denied (`deny`) or only warned about (`warn`).
    pub enforcement: GuardrailEnforcement,
}

/// `queues.<name>.guardrails`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
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

/// The longest a run can hold its GPUs, as written: `runs` × `deadline` seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunBound {
    /// How many times the run can start over (1 where the deadline covers every restart).
    pub runs: i64,
    /// Where `runs` comes from, e.g. `spec.maxRetry 3 + 1`; `None` when it is 1 by construction.
    pub runs_from: Option<String>,
    /// The longest deadline of one run, in seconds.
    pub deadline: i64,
    /// The field that sets it, e.g. `spec.activeDeadlineSeconds`.
    pub field: String,
    /// What to lower, for a message: `spec.activeDeadlineSeconds`, or the per-Job or per-task
    /// field.
    pub set: &'static str,
    /// The field that sets how often the run starts over, when there is one.
    pub restarts: Option<&'static str>,
}

/// How long a run can hold its GPUs: a bound the GPU-hour ceiling can multiply by, or why
/// there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunLength {
    Bounded(RunBound),
    /// No bound can be read: why (names the field), and what to set.
    Unbounded {
        why: String,
        set: &'static str,
    },
    /// The run may be bounded, but its resources outlive it (its descriptor's
    /// [`crate::kinds::Ends::When`] does not hold): why (names the field and what stays), and
    /// what to write.
    Outlives {
        why: String,
        set: String,
    },
}

fn int(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_i64)
}

/// What makes a batch/v1 Job (`spec`) run longer than one pod: waves, retries.
fn job_lengtheners(spec: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let parallelism = int(spec.get("parallelism")).unwrap_or(1).max(1);
    match int(spec.get("completions")) {
        Some(c) if c > parallelism => out.push(format!(
            "completions {c} at parallelism {parallelism} ({} waves of pods)",
            c.saturating_add(parallelism - 1) / parallelism
        )),
        Some(_) => {}
        None if spec.get("parallelism").is_some() => {
            out.push(format!(
                "no completions at parallelism {parallelism} (pods until one succeeds)"
            ));
        }
        None => {}
    }
    if let Some(b) = int(spec.get("backoffLimit")).filter(|b| *b > 0) {
        out.push(format!("backoffLimit {b} (failed pods replaced)"));
    }
    if let Some(b) = int(spec.get("backoffLimitPerIndex")).filter(|b| *b > 0) {
        out.push(format!(
            "backoffLimitPerIndex {b} (failed pods replaced per index)"
        ));
    }
    let ignores = spec
        .at("/podFailurePolicy/rules")
        .and_then(Value::as_array)
        .is_some_and(|rules| {
            rules
                .iter()
                .any(|r| r.get("action").and_then(Value::as_str) == Some("Ignore"))
        });
    if ignores {
        out.push("podFailurePolicy Ignore rules (failed pods replaced without counting)".into());
    }
    out
}

/// Why pod templates' own deadlines do not bound the run: "; X bounds one pod, not the run: …".
fn pod_deadlines_note(kind: WorkloadKind, object: &Value) -> String {
    if kind.is_pod() {
        return String::new();
    }
    let pod_deadlines: Vec<String> = crate::workload::templates(kind, object)
        .iter()
        .filter_map(|(info, t)| {
            let d = t.get("spec")?.get("activeDeadlineSeconds")?.as_i64()?;
            Some(format!("{}.activeDeadlineSeconds {d}", info.spec_path()))
        })
        .collect();
    if pod_deadlines.is_empty() {
        return String::new();
    }
    let why = if kind.spec().job_specs == JobSpecs::Object {
        let more = object.get("spec").map(job_lengtheners).unwrap_or_default();
        if more.is_empty() {
            "the Job replaces a pod that fails or is deleted".to_string()
        } else {
            format!("the Job runs longer: {}", more.join(", "))
        }
    } else if let Some(r) = &kind.spec().run.pod_restarts {
        match int(field(object, r.at)) {
            Some(b) => format!("{} restarts failed pods ({} {b})", r.by, r.at.join(".")),
            None => format!("{} restarts failed pods", r.by),
        }
    } else {
        "the controller replaces failed pods".to_string()
    };
    format!(
        "; {} bounds one pod, not the run ({why})",
        rules::listed(&pod_deadlines)
    )
}

/// The bound the GPU-hour ceiling reads. A pod template's `activeDeadlineSeconds` bounds one
/// pod, not a run that starts pods in waves and replaces failed ones, so it counts only where
/// the kind has no other (a Volcano Job), multiplied by the restarts the kind allows (its
/// descriptor's [`crate::kinds::Run::restarts`]). A run whose resources do not end with it
/// (its descriptor's [`crate::kinds::Run::ends`]) is counted as they are: without a bound.
pub fn run_length(kind: WorkloadKind, object: &Value) -> RunLength {
    if let Some((unmet, keeps, set)) = kind.spec().run.ends.outlives(object) {
        return RunLength::Outlives {
            why: format!("{unmet}, so {keeps}"),
            set,
        };
    }
    match kind.spec().run.deadline {
        Deadline::Run(holder, key, set) => {
            let field = set.to_string();
            match int(object.at(holder).and_then(|h| h.get(key))) {
                Some(deadline) => bounded(kind, object, deadline, field, set),
                None => RunLength::Unbounded {
                    why: format!(
                        "this run has no {field}{}",
                        pod_deadlines_note(kind, object)
                    ),
                    set,
                },
            }
        }
        Deadline::EachJob => jobset_length(kind, object),
        Deadline::EachPod => volcano_length(kind, object),
        Deadline::Never { why, set } => RunLength::Unbounded {
            why: why.to_string(),
            set,
        },
    }
}

/// Every holder of the kind's pod-template positions, with its dotted path and position,
/// whether or not it has a pod template.
fn holders_of(kind: WorkloadKind, object: &Value) -> Vec<(String, &Value, &'static Position)> {
    let mut out = Vec::new();
    for position in kind.spec().positions {
        let at = position.holders.path();
        let dotted = at.join(".");
        match position.holders {
            Holders::Root => out.push((String::new(), object, position)),
            Holders::At(_) => {
                if let Some(h) = field(object, at) {
                    out.push((dotted, h, position));
                }
            }
            Holders::Each(_) => {
                let items = field(object, at).and_then(Value::as_array);
                for (i, h) in items.into_iter().flatten().enumerate() {
                    out.push((format!("{dotted}[{i}]"), h, position));
                }
            }
            Holders::Keyed(_) => {
                let items = field(object, at).and_then(Value::as_object);
                for (k, h) in items.into_iter().flatten() {
                    out.push((format!("{dotted}.{k}"), h, position));
                }
            }
        }
    }
    out
}

/// How many times a run starts with a fresh deadline (its descriptor's restarts + 1), where
/// that comes from (`None` when once), and the field that sets it.
fn runs_of(kind: WorkloadKind, object: &Value) -> (i64, Option<String>, Option<&'static str>) {
    let Some(r) = &kind.spec().run.restarts else {
        return (1, None, None);
    };
    let (mut restarts, mut from) = match int(field(object, r.at)) {
        Some(n) if n > 0 || (n == 0 && !r.zero_is_default) => (n, r.dotted.to_string()),
        _ => (r.default, format!("{} ({})", r.dotted, r.default_is)),
    };
    if let Some(key) = r.per_holder {
        for (at, holder, _) in holders_of(kind, object) {
            if let Some(n) = int(holder.get(key)).filter(|n| *n > restarts) {
                restarts = n;
                from = format!("{at}.{key}");
            }
        }
    }
    (
        restarts.saturating_add(1),
        (restarts > 0).then(|| format!("{from} {restarts} + 1")),
        Some(r.dotted),
    )
}

/// A run of `deadline` seconds (set at `field`), run again as often as the kind restarts.
fn bounded(
    kind: WorkloadKind,
    object: &Value,
    deadline: i64,
    field: String,
    set: &'static str,
) -> RunLength {
    let (runs, runs_from, restarts) = runs_of(kind, object);
    RunLength::Bounded(RunBound {
        runs,
        runs_from,
        deadline,
        field,
        set,
        restarts,
    })
}

/// A run bounded by each of its Job templates' own deadline (a JobSet's replicated Jobs), run
/// again as often as the kind restarts.
fn jobset_length(kind: WorkloadKind, object: &Value) -> RunLength {
    const SET: &str = "each replicated Job's template.spec.activeDeadlineSeconds";
    let mut missing = Vec::new();
    let mut longest: Option<(i64, String)> = None;
    for (at, holder, position) in holders_of(kind, object) {
        // The Job spec holds the pod template.
        let Some((_, up)) = position.template.split_last() else {
            continue;
        };
        let at = format!("{at}.{}.activeDeadlineSeconds", up.join("."));
        match int(field(holder, up).and_then(|j| j.get("activeDeadlineSeconds"))) {
            Some(d) if longest.as_ref().is_none_or(|(l, _)| d > *l) => longest = Some((d, at)),
            Some(_) => {}
            None => {
                let pod = int(field(holder, position.template)
                    .and_then(|t| t.at("/spec/activeDeadlineSeconds")))
                    .map(|d| format!(" (its pod template's activeDeadlineSeconds {d} bounds one pod, not the Job)"))
                    .unwrap_or_default();
                missing.push(format!("{at} is not set{pod}"));
            }
        }
    }
    if !missing.is_empty() {
        return RunLength::Unbounded {
            why: format!(
                "this JobSet has no deadline of its own and {}",
                rules::listed(&missing)
            ),
            set: SET,
        };
    }
    // Restarts that do not count against the run's bound.
    if let Some(u) = kind
        .spec()
        .run
        .restarts
        .as_ref()
        .and_then(|r| r.uncounted.as_ref())
    {
        let rules = field(object, u.rules).and_then(Value::as_array);
        for (i, rule) in rules.into_iter().flatten().enumerate() {
            if let Some(action) = rule.get(u.action).and_then(Value::as_str)
                && action.ends_with(u.suffix)
            {
                return RunLength::Unbounded {
                    why: format!(
                        "{}[{i}].{} {action} restarts without limit, so no deadline bounds the run",
                        u.dotted, u.action
                    ),
                    set: u.set,
                };
            }
        }
    }
    let Some((deadline, field)) = longest else {
        return RunLength::Unbounded {
            why: "this JobSet has no replicated Jobs".into(),
            set: SET,
        };
    };
    bounded(kind, object, deadline, field, SET)
}

/// A run bounded only by its pod templates' own deadlines (a Volcano Job's tasks), run again
/// as often as the kind restarts.
fn volcano_length(kind: WorkloadKind, object: &Value) -> RunLength {
    const SET: &str = "each task's template.spec.activeDeadlineSeconds";
    let mut missing = Vec::new();
    let mut longest: Option<(i64, String)> = None;
    for (info, template) in crate::workload::templates(kind, object) {
        let at = format!("{}.activeDeadlineSeconds", info.spec_path());
        match int(template
            .get("spec")
            .and_then(|s| s.get("activeDeadlineSeconds")))
        {
            Some(d) if longest.as_ref().is_none_or(|(l, _)| d > *l) => longest = Some((d, at)),
            Some(_) => {}
            None => missing.push(format!("{at} is not set")),
        }
    }
    if !missing.is_empty() {
        return RunLength::Unbounded {
            why: format!(
                "a Volcano Job has no deadline of its own and {}",
                rules::listed(&missing)
            ),
            set: SET,
        };
    }
    let Some((deadline, field)) = longest else {
        return RunLength::Unbounded {
            why: "this Volcano Job has no tasks".into(),
            set: SET,
        };
    };
    bounded(kind, object, deadline, field, SET)
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

/// The gang minimum of a run that is below its rendezvous size, every pod of the run (the
/// sum of its positions' `replicas`), where its kind has a gang scheduler's minimum
/// ([`crate::kinds::KindSpec::gang`]) and the run waits for all its pods (the gang's
/// condition). An unset minimum is the operator's (every operator defaults it to every pod).
pub fn gang_shortfall(kind: WorkloadKind, object: &Value) -> Option<GangShortfall> {
    let gang = kind.spec().gang.as_ref()?;
    if gang
        .when
        .as_ref()
        .is_some_and(|c| !c.holds(object, object, None))
    {
        return None;
    }
    let current = field(object, gang.at)?.as_i64()?;
    let needed = crate::workload::templates(kind, object)
        .iter()
        .fold(0i64, |n, (info, _)| n.saturating_add(info.replicas));
    (current < needed).then(|| GangShortfall {
        path: gang.at.join("."),
        pointer: gang
            .at
            .iter()
            .map(|k| format!("/{}", crate::json::escape(k)))
            .collect(),
        current,
        needed,
    })
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
    let selector = field("selector")
        .and_then(Value::as_object)
        .filter(|s| !s.is_empty());
    match selector {
        None => out.push(format!(
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
                    rules::listed(&missing)
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

    /// A kind with a run-level deadline that each retry starts afresh, known only to this test.
    static RETRIED: crate::kinds::KindSpec = {
        use crate::kinds::*;
        KindSpec {
            name: "Retried",
            group: "example.com",
            version: "v1",
            kind: "Retried",
            resource: "retrieds",
            run: Run {
                deadline: Deadline::Run(
                    "/spec",
                    "activeDeadlineSeconds",
                    "spec.activeDeadlineSeconds",
                ),
                restarts: Some(Restarts {
                    at: &["spec", "backoffLimit"],
                    dotted: "spec.backoffLimit",
                    default: 0,
                    zero_is_default: false,
                    default_is: "the default",
                    per_holder: None,
                    uncounted: None,
                }),
                ends: Ends::WithRun,
                ..Run::UNSTATED
            },
            webhook_rule: "retried",
            ..KindSpec::BASE
        }
    };

    /// A kind that runs until it is deleted, known only to this test.
    static FOREVER: crate::kinds::KindSpec = {
        use crate::kinds::*;
        KindSpec {
            name: "Forever",
            kind: "Forever",
            resource: "forevers",
            run: Run {
                deadline: Deadline::Never {
                    why: "a Forever runs until it is deleted",
                    set: "a bounded kind's deadline",
                },
                ends: Ends::Never,
                ..Run::UNSTATED
            },
            group: "example.com",
            version: "v1",
            webhook_rule: "forever",
            ..KindSpec::BASE
        }
    };

    #[test]
    fn a_kind_that_runs_until_deleted_has_no_run_bound_whatever_it_sets() {
        let kind = WorkloadKind::unregistered(&FOREVER);
        let object = json!({"spec": {"activeDeadlineSeconds": 600}});
        assert_eq!(
            run_length(kind, &object),
            RunLength::Unbounded {
                why: "a Forever runs until it is deleted".into(),
                set: "a bounded kind's deadline",
            }
        );
    }

    /// Every kind's run length reads what ends its resources: one that outlives the run without
    /// its condition has no bound whatever its deadline, one that ends with it is bounded by its
    /// deadline whatever else it sets, one that never ends has none.
    #[test]
    fn every_kinds_run_length_respects_what_ends_its_resources() {
        use crate::kinds::Ends;
        for kind in WorkloadKind::all() {
            let spec = kind.spec();
            // Every deadline the kinds read, set, and the RayJob's cluster kept.
            let deadlines = json!({"apiVersion": kind.api_version(), "kind": kind.api_kind(),
                "spec": {"activeDeadlineSeconds": 600, "shutdownAfterJobFinishes": false,
                    "runPolicy": {"activeDeadlineSeconds": 600},
                    "replicatedJobs": [{"name": "a", "template": {"spec": {"activeDeadlineSeconds": 600}}}],
                    "tasks": [{"name": "a", "template": {"spec": {"activeDeadlineSeconds": 600}}}]}});
            let length = run_length(kind, &deadlines);
            match &spec.run.ends {
                Ends::WithRun => assert!(
                    matches!(length, RunLength::Bounded(RunBound { deadline: 600, .. })),
                    "{kind:?}: {length:?}"
                ),
                Ends::When { cond, .. } => {
                    assert_eq!(
                        length,
                        RunLength::Outlives {
                            why: format!(
                                "{}, so {}",
                                cond.unmet(),
                                spec.run.ends.outlives(&deadlines).unwrap().1
                            ),
                            set: cond.wanted(),
                        },
                        "{kind:?}"
                    );
                    let (Some(at), Some(written)) = (cond.field_written(), cond.written()) else {
                        panic!("{kind:?}: a condition the job defaults cannot write")
                    };
                    let mut ends = deadlines.clone();
                    let (key, holder) = at.split_last().unwrap();
                    crate::kinds::field_mut(&mut ends, holder)
                        .and_then(Value::as_object_mut)
                        .unwrap()
                        .insert(key.to_string(), written);
                    assert!(
                        matches!(
                            run_length(kind, &ends),
                            RunLength::Bounded(RunBound { deadline: 600, .. })
                        ),
                        "{kind:?}"
                    );
                }
                Ends::Never => assert!(
                    matches!(length, RunLength::Unbounded { .. }),
                    "{kind:?}: {length:?}"
                ),
            }
        }
        let ray = WorkloadKind::named("RayJob").unwrap();
        let unset = json!({"spec": {"activeDeadlineSeconds": 600}});
        assert_eq!(
            run_length(ray, &unset),
            RunLength::Outlives {
                why: "spec.shutdownAfterJobFinishes is not true, so KubeRay keeps the RayJob's RayCluster, and its GPUs, after the job ends or reaches its deadline, until it is deleted".into(),
                set: "spec.shutdownAfterJobFinishes: true".into(),
            }
        );
    }

    #[test]
    fn a_run_deadline_counts_once_per_retry_the_descriptor_names() {
        let kind = WorkloadKind::unregistered(&RETRIED);
        let bound = |object: Value| match run_length(kind, &object) {
            RunLength::Bounded(b) => (b.runs, b.runs_from, b.restarts),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            bound(json!({"spec": {"activeDeadlineSeconds": 600, "backoffLimit": 2}})),
            (
                3,
                Some("spec.backoffLimit 2 + 1".to_string()),
                Some("spec.backoffLimit")
            )
        );
        assert_eq!(
            bound(json!({"spec": {"activeDeadlineSeconds": 600}})),
            (1, None, Some("spec.backoffLimit"))
        );
        // A kind whose deadline covers every restart runs once.
        let job = json!({"spec": {"activeDeadlineSeconds": 600, "backoffLimit": 2}});
        assert!(matches!(
            run_length(WorkloadKind::BatchJob, &job),
            RunLength::Bounded(RunBound { runs: 1, .. })
        ));
    }

    #[test]
    fn a_volcano_gang_below_its_rendezvous_size_is_found() {
        let vc = json!({"metadata": {"name": "j"}, "spec": {"minAvailable": 1, "plugins": {"pytorch": []},
            "tasks": [{"name": "master", "replicas": 1, "template": {}},
                      {"name": "worker", "replicas": 2, "template": {}}]}});
        let found = gang_shortfall(WorkloadKind::VolcanoJob, &vc).unwrap();
        assert_eq!((found.current, found.needed), (1, 3));
        assert!(
            found
                .explain(WorkloadKind::VolcanoJob)
                .contains("spec.minAvailable=1 is below the job's rendezvous size 3")
        );
        let mut whole = vc.clone();
        whole["spec"]["minAvailable"] = json!(3);
        assert!(gang_shortfall(WorkloadKind::VolcanoJob, &whole).is_none());
        let mut unset = vc.clone();
        unset["spec"]
            .as_object_mut()
            .unwrap()
            .remove("minAvailable");
        assert!(gang_shortfall(WorkloadKind::VolcanoJob, &unset).is_none());
        let mut plain = vc.clone();
        plain["spec"].as_object_mut().unwrap().remove("plugins");
        assert!(gang_shortfall(WorkloadKind::VolcanoJob, &plain).is_none());
        let pt = json!({"spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 2}},
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {}},
                "Worker": {"replicas": 3, "template": {}}}}});
        assert_eq!(
            gang_shortfall(WorkloadKind::PyTorchJob, &pt)
                .unwrap()
                .needed,
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

    fn bounded(kind: WorkloadKind, object: &Value) -> RunBound {
        match run_length(kind, object) {
            RunLength::Bounded(b) => b,
            other => panic!("not bounded: {other:?}"),
        }
    }

    fn seconds(b: RunBound) -> i64 {
        b.runs * b.deadline
    }

    fn unbounded(kind: WorkloadKind, object: &Value) -> String {
        match run_length(kind, object) {
            RunLength::Unbounded { why, .. } => why,
            other => panic!("bounded: {other:?}"),
        }
    }

    #[test]
    fn a_pod_deadline_is_not_a_jobs_run_bound() {
        // 100 completions two at a time: ~50 h of pods that may each run 1 h.
        let job = json!({"spec": {"completions": 100, "parallelism": 2, "backoffLimit": 6,
            "template": {"spec": {"activeDeadlineSeconds": 3600}}}});
        let why = unbounded(WorkloadKind::BatchJob, &job);
        assert_eq!(
            why,
            "this run has no spec.activeDeadlineSeconds; spec.template.spec.activeDeadlineSeconds 3600 bounds one pod, not the run (the Job runs longer: completions 100 at parallelism 2 (50 waves of pods), backoffLimit 6 (failed pods replaced))"
        );
        let mut own = job.clone();
        own["spec"]["activeDeadlineSeconds"] = json!(7200);
        let b = bounded(WorkloadKind::BatchJob, &own);
        assert_eq!((b.runs, b.deadline, b.runs * b.deadline), (1, 7200, 7200));
        assert_eq!(b.field, "spec.activeDeadlineSeconds");
        let pt = json!({"spec": {"runPolicy": {"activeDeadlineSeconds": 5}}});
        let b = bounded(WorkloadKind::PyTorchJob, &pt);
        assert_eq!(
            (b.runs * b.deadline, b.field.as_str()),
            (5, "spec.runPolicy.activeDeadlineSeconds")
        );
        let pt = json!({"spec": {"runPolicy": {"backoffLimit": 3}, "pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": {"spec": {"activeDeadlineSeconds": 60}}}}}});
        assert!(unbounded(WorkloadKind::PyTorchJob, &pt).contains("runPolicy.backoffLimit 3"));
        let tj = json!({"spec": {"trainer": {"numNodes": 2}}});
        assert_eq!(
            unbounded(WorkloadKind::TrainJob, &tj),
            "this run has no spec.activeDeadlineSeconds"
        );
        let pod = json!({"spec": {"activeDeadlineSeconds": 60}});
        assert_eq!(seconds(bounded(WorkloadKind::Pod, &pod)), 60);
    }

    #[test]
    fn a_jobset_runs_its_jobs_deadline_once_per_restart() {
        let js = json!({"spec": {"failurePolicy": {"maxRestarts": 2}, "replicatedJobs": [
            {"name": "a", "template": {"spec": {"activeDeadlineSeconds": 60, "template": {}}}},
            {"name": "b", "template": {"spec": {"activeDeadlineSeconds": 90, "template": {}}}}]}});
        let b = bounded(WorkloadKind::JobSet, &js);
        assert_eq!((b.runs, b.deadline, b.runs * b.deadline), (3, 90, 270));
        assert_eq!(
            b.field,
            "spec.replicatedJobs[1].template.spec.activeDeadlineSeconds"
        );
        assert_eq!(
            b.runs_from.as_deref(),
            Some("spec.failurePolicy.maxRestarts 2 + 1")
        );
        // A pod template's deadline bounds one pod of the Job, not the Job.
        let mut pods_only = js.clone();
        pods_only["spec"]["replicatedJobs"][1]["template"]["spec"] =
            json!({"template": {"spec": {"activeDeadlineSeconds": 90}}});
        assert!(
            unbounded(WorkloadKind::JobSet, &pods_only).contains(
                "spec.replicatedJobs[1].template.spec.activeDeadlineSeconds is not set (its pod template's activeDeadlineSeconds 90 bounds one pod, not the Job)"
            )
        );
        let mut forever = js.clone();
        forever["spec"]["failurePolicy"]["rules"] =
            json!([{"action": "FailJobSet"}, {"action": "RestartJobSetAndIgnoreMaxRestarts"}]);
        assert!(
            unbounded(WorkloadKind::JobSet, &forever)
                .contains("spec.failurePolicy.rules[1].action RestartJobSetAndIgnoreMaxRestarts restarts without limit")
        );
        let mut once = js.clone();
        once["spec"]
            .as_object_mut()
            .unwrap()
            .remove("failurePolicy");
        assert_eq!(seconds(bounded(WorkloadKind::JobSet, &once)), 90);
    }

    #[test]
    fn a_volcano_job_runs_its_pods_deadline_once_per_retry() {
        let vc = json!({"spec": {"tasks": [
            {"name": "a", "template": {"spec": {"activeDeadlineSeconds": 60}}},
            {"name": "b", "template": {"spec": {"activeDeadlineSeconds": 90}}}]}});
        // maxRetry unset or 0: Volcano's default 3.
        let b = bounded(WorkloadKind::VolcanoJob, &vc);
        assert_eq!((b.runs, b.deadline), (4, 90));
        assert_eq!(
            b.runs_from.as_deref(),
            Some("spec.maxRetry (Volcano's default) 3 + 1")
        );
        let mut zero = vc.clone();
        zero["spec"]["maxRetry"] = json!(0);
        assert_eq!(bounded(WorkloadKind::VolcanoJob, &zero).runs, 4);
        let mut one = vc.clone();
        one["spec"]["maxRetry"] = json!(1);
        assert_eq!(seconds(bounded(WorkloadKind::VolcanoJob, &one)), 180);
        one["spec"]["tasks"][0]["maxRetry"] = json!(5);
        assert_eq!(bounded(WorkloadKind::VolcanoJob, &one).runs, 6);
        let mut half = vc.clone();
        half["spec"]["tasks"][1]["template"]["spec"] = json!({});
        assert!(
            unbounded(WorkloadKind::VolcanoJob, &half)
                .contains("spec.tasks[1].template.spec.activeDeadlineSeconds is not set")
        );
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
