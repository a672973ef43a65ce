//! Launch guardrails ([`crate::topology::guardrails`]), the validating half: a gang that could
//! start half (`gang: deny`), and a run over the queue's GPU-hour cap
//! (`costCeiling.maxGpuHours`), denied with the arithmetic.

use super::check::{NotCounted, gpus_at_once};
use crate::quantity::Quantity;
use crate::rules::{self, Effect, Violation};
use crate::topology::guardrails::{
    GangAction, GuardrailEnforcement, GuardrailsConfig, RunLength, gang_shortfall, run_length,
};
use crate::workload::WorkloadKind;
use crate::workload::consumption::Accounting;
use crate::workload::runtime::TrainingRuntime;
use serde_json::Value;

/// How a workload breaks the queue's guardrails.
#[derive(Debug, Default, PartialEq)]
pub struct GuardrailReport {
    /// Each with its effect: [`Effect::Deny`] or, for a guardrail set to `warn`,
    /// [`Effect::Warn`].
    pub violations: Vec<Violation>,
}

#[cfg(test)]
impl GuardrailReport {
    /// The messages of the violations that deny.
    pub fn denials(&self) -> Vec<String> {
        self.messages(Effect::Deny)
    }

    /// The messages of the violations that only warn.
    pub fn warnings(&self) -> Vec<String> {
        self.messages(Effect::Warn)
    }

    fn messages(&self, effect: Effect) -> Vec<String> {
        self.violations
            .iter()
            .filter(|v| v.effect == effect)
            .map(|v| v.message.clone())
            .collect()
    }
}

/// Why the workload breaks the queue's guardrails: denials, and what a guardrail set to `warn`
/// only warns about.
pub fn check(
    queue: &str,
    kind: WorkloadKind,
    cfg: &GuardrailsConfig,
    object: &Value,
    runtime: Option<&TrainingRuntime>,
    accounting: &Accounting<'_>,
) -> GuardrailReport {
    let mut report = GuardrailReport::default();
    if cfg.gang == GangAction::Deny
        && let Some(short) = gang_shortfall(kind, object)
    {
        report.violations.push(
            Violation::new(
                rules::GUARDRAILS_GANG,
                format!(
                    "queue {queue:?}: {}; set it to {} (guardrails.gang: deny)",
                    short.explain(kind),
                    short.needed
                ),
            )
            .at(short.path.clone())
            .value(short.current.to_string())
            .limit(short.needed.to_string()),
        );
    }
    if let Some(max) = cfg.cost_ceiling.max_gpu_hours
        && let Some((problem, amount)) = over_the_ceiling(
            queue,
            max,
            gpus_at_once(kind, object, runtime, accounting),
            || run_length(kind, object),
        )
    {
        report
            .violations
            .push(ceiling_violation(cfg, problem, amount, max));
    }
    report
}

/// What a run over the GPU-hour cap amounts to.
enum Amount {
    /// Its GPU-hours.
    GpuHours(f64),
    /// No run-level bound: its GPUs at once.
    Unbounded(String),
    /// Too many GPUs to count.
    Uncountable,
}

/// The GPU-hour ceiling for `gpus` at once (`None`: too many to count) held for the run's
/// bound (read only when there are GPUs).
fn over_the_ceiling(
    queue: &str,
    max: f64,
    gpus: Result<(Quantity, Vec<String>), NotCounted>,
    bound: impl FnOnce() -> RunLength,
) -> Option<(String, Amount)> {
    let (gpus, parts) = match gpus {
        Ok(counted) => counted,
        Err(NotCounted::TooMany) => {
            return Some((
                format!(
                    "queue {queue:?}: the GPUs this run can use at once are too many to count (guardrails.costCeiling.maxGpuHours {max})"
                ),
                Amount::Uncountable,
            ));
        }
        Err(NotCounted::Devices(why)) => {
            return Some((
                format!(
                    "queue {queue:?}: the GPUs this run can use at once cannot be counted: {why} (guardrails.costCeiling.maxGpuHours {max})"
                ),
                Amount::Uncountable,
            ));
        }
    };
    let gpus = gpus.to_f64();
    if gpus <= 0.0 {
        return None;
    }
    let parts = rules::listed(&parts);
    let per_second = gpus / 3600.0;
    let bound = match bound() {
        RunLength::Bounded(bound) => bound,
        RunLength::Unbounded { why, set } => {
            let longest = (max / per_second).floor();
            return Some((
                format!(
                    "queue {queue:?}: {why}, so its {gpus} GPUs at once ({parts}) have no run-level bound and the GPU-hours cannot be judged; the queue allows at most {max} GPU-hours per run (guardrails.costCeiling.maxGpuHours): set {set} to at most {longest}"
                ),
                Amount::Unbounded(gpus.to_string()),
            ));
        }
        RunLength::Outlives { why, set } => {
            return Some((
                format!(
                    "queue {queue:?}: {why}: its {gpus} GPUs at once ({parts}) are not bounded by the run and the GPU-hours cannot be judged; the queue allows at most {max} GPU-hours per run (guardrails.costCeiling.maxGpuHours): set {set}"
                ),
                Amount::Unbounded(gpus.to_string()),
            ));
        }
    };
    let runs = bound.runs as f64;
    let seconds = runs * bound.deadline as f64;
    let hours = gpus * seconds / 3600.0;
    (hours > max).then(|| {
        let longest = (max / per_second / runs).floor();
        let times = match &bound.runs_from {
            Some(from) => format!("{} runs ({from}) × ", bound.runs),
            None => String::new(),
        };
        let fewer_runs = match (bound.runs > 1, bound.restarts) {
            (true, Some(field)) => format!(", allow fewer restarts ({field})"),
            _ => String::new(),
        };
        let message = format!(
            "queue {queue:?}: {gpus} GPUs at once ({parts}) × {times}{} {} ({:.2} h) = {hours:.2} GPU-hours exceeds the queue's maximum {max} GPU-hours per run (guardrails.costCeiling.maxGpuHours): set {} to at most {longest}{fewer_runs} or use fewer GPUs",
            bound.field,
            bound.deadline,
            seconds / 3600.0,
            bound.set
        );
        (message, Amount::GpuHours(hours))
    })
}

/// The GPU-hour ceiling of a run whose size its runtime decides, held by the child its
/// controller made (`child`, a `kind`: the JobSet Trainer made for a TrainJob): the GPUs the
/// child runs at once — the runtime as it is now, which may have grown since the run was
/// admitted — over the run's bound, read from `parent` (the TrainJob, from the cluster view).
/// Without the parent the child's own bound counts, and a child without one is over the cap.
pub fn child_cost(
    queue: &str,
    cfg: &GuardrailsConfig,
    kind: WorkloadKind,
    child: &Value,
    parent: Option<&Value>,
    accounting: &Accounting<'_>,
) -> Option<Violation> {
    let max = cfg.cost_ceiling.max_gpu_hours?;
    let gpus = gpus_at_once(kind, child, None, accounting);
    let (problem, amount) = over_the_ceiling(queue, max, gpus, || {
        let owner = parent.and_then(|p| WorkloadKind::of_object(p).map(|k| (k, p)));
        match owner {
            Some((owner, p)) => run_length(owner, p),
            None => match run_length(kind, child) {
                RunLength::Unbounded { why, .. } => RunLength::Unbounded {
                    why: format!(
                        "the run this {} belongs to cannot be read (no cluster lookups, or not in their cache yet) and {why}",
                        kind.as_str()
                    ),
                    set: "the run's deadline (spec.activeDeadlineSeconds)",
                },
                bounded => bounded,
            },
        }
    })?;
    let whose = match parent.and_then(|p| p.get("kind")).and_then(Value::as_str) {
        Some(owner) => format!(
            " (this {} is its {owner}'s run as its runtime is now; the deadline is the {owner}'s)",
            kind.as_str()
        ),
        None => String::new(),
    };
    Some(ceiling_violation(cfg, problem + &whose, amount, max))
}

/// A violation of the GPU-hour ceiling `max`, with the effect its enforcement gives it. What an
/// UPDATE compares (`OnUpdate::Grown`): the GPU-hours, or the GPUs at once of a run with no
/// bound, each under its own key.
fn ceiling_violation(
    cfg: &GuardrailsConfig,
    problem: String,
    amount: Amount,
    max: f64,
) -> Violation {
    let effect = match cfg.cost_ceiling.enforcement {
        GuardrailEnforcement::Deny => Effect::Deny,
        GuardrailEnforcement::Warn => Effect::Warn,
    };
    let found = Violation::new(rules::GUARDRAILS_COST_CEILING, problem)
        .limit(format!("{max} GPU-hours"))
        .effect(effect);
    match amount {
        Amount::GpuHours(hours) => found.key("gpuHours").value(format!("{hours:.2}")),
        Amount::Unbounded(gpus) => found.key("unbounded").value(gpus),
        Amount::Uncountable => found.key("uncountable"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The guardrails of queue `q` on `object`, GPUs counted by the built-in map, offline.
    fn checked(kind: WorkloadKind, cfg: &GuardrailsConfig, object: &Value) -> GuardrailReport {
        check(
            "q",
            kind,
            cfg,
            object,
            None,
            &crate::workload::consumption::offline(),
        )
    }
    use crate::topology::guardrails::CostCeilingConfig;
    use serde_json::json;

    fn job(deadline: Option<i64>) -> Value {
        let mut j = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {"containers": [
                {"name": "t", "resources": {"limits": {"nvidia.com/gpu": 4}}}]}}}});
        if let Some(d) = deadline {
            j["spec"]["activeDeadlineSeconds"] = json!(d);
        }
        j
    }

    #[test]
    fn a_run_over_its_gpu_hours_is_denied_with_the_arithmetic() {
        let mut cfg = GuardrailsConfig {
            cost_ceiling: CostCeilingConfig {
                max_gpu_hours: Some(64.0),
                ..CostCeilingConfig::default()
            },
            ..GuardrailsConfig::default()
        };
        let denials = |cfg: &GuardrailsConfig, job: &Value| {
            checked(WorkloadKind::BatchJob, cfg, job).denials()
        };
        // 8 GPUs × 8 h = 64: at the cap.
        assert!(denials(&cfg, &job(Some(8 * 3600))).is_empty());
        let d = denials(&cfg, &job(Some(86400)));
        assert_eq!(
            d,
            [
                r#"queue "q": 8 GPUs at once (nvidia.com/gpu spec.template: 2 × 4) × spec.activeDeadlineSeconds 86400 (24.00 h) = 192.00 GPU-hours exceeds the queue's maximum 64 GPU-hours per run (guardrails.costCeiling.maxGpuHours): set spec.activeDeadlineSeconds to at most 28800 or use fewer GPUs"#
            ]
        );
        let d = denials(&cfg, &job(None));
        assert!(
            d[0].contains("no spec.activeDeadlineSeconds") && d[0].contains("at most 28800"),
            "{d:?}"
        );
        let cpu_only = json!({"spec": {"template": {"spec": {"containers": [{"name": "t"}]}}}});
        assert!(denials(&cfg, &cpu_only).is_empty());
        // `warn`: the same words, as a warning.
        cfg.cost_ceiling.enforcement = GuardrailEnforcement::Warn;
        let report = checked(WorkloadKind::BatchJob, &cfg, &job(Some(86400)));
        assert!(report.denials().is_empty());
        assert!(
            report.warnings()[0].contains("192.00 GPU-hours"),
            "{report:?}"
        );
    }

    fn capped(max: f64) -> GuardrailsConfig {
        GuardrailsConfig {
            cost_ceiling: CostCeilingConfig {
                max_gpu_hours: Some(max),
                ..CostCeilingConfig::default()
            },
            ..GuardrailsConfig::default()
        }
    }

    #[test]
    fn a_pod_deadline_does_not_hide_a_long_job() {
        // Pods of 1 h, two at a time, 100 to complete: ~50 h on 2 GPUs, not 2 GPU-hours.
        let long = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sweep"},
            "spec": {"completions": 100, "parallelism": 2, "backoffLimit": 6, "template": {"spec": {
                "activeDeadlineSeconds": 3600,
                "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}});
        let d = checked(WorkloadKind::BatchJob, &capped(8.0), &long).denials();
        assert_eq!(
            d,
            [
                r#"queue "q": this run has no spec.activeDeadlineSeconds; spec.template.spec.activeDeadlineSeconds 3600 bounds one pod, not the run (the Job runs longer: completions 100 at parallelism 2 (50 waves of pods), backoffLimit 6 (failed pods replaced)), so its 2 GPUs at once (nvidia.com/gpu spec.template: 2 × 1) have no run-level bound and the GPU-hours cannot be judged; the queue allows at most 8 GPU-hours per run (guardrails.costCeiling.maxGpuHours): set spec.activeDeadlineSeconds to at most 14400"#
            ]
        );
        // The run-level deadline is what counts.
        let mut bounded = long.clone();
        bounded["spec"]["activeDeadlineSeconds"] = json!(14400);
        assert!(
            checked(WorkloadKind::BatchJob, &capped(8.0), &bounded)
                .denials()
                .is_empty()
        );
        bounded["spec"]["activeDeadlineSeconds"] = json!(14401);
        assert_eq!(
            checked(WorkloadKind::BatchJob, &capped(8.0), &bounded)
                .denials()
                .len(),
            1
        );
    }

    #[test]
    fn restarts_multiply_a_deadline_that_restarts_with_them() {
        let vc = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"},
            "spec": {"maxRetry": 3, "tasks": [{"name": "w", "replicas": 2, "template": {"spec": {
                "activeDeadlineSeconds": 3600,
                "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}]}});
        let d = checked(WorkloadKind::VolcanoJob, &capped(6.0), &vc).denials();
        assert_eq!(
            d,
            [
                r#"queue "q": 2 GPUs at once (nvidia.com/gpu spec.tasks[0].template: 2 × 1) × 4 runs (spec.maxRetry 3 + 1) × spec.tasks[0].template.spec.activeDeadlineSeconds 3600 (4.00 h) = 8.00 GPU-hours exceeds the queue's maximum 6 GPU-hours per run (guardrails.costCeiling.maxGpuHours): set each task's template.spec.activeDeadlineSeconds to at most 2700, allow fewer restarts (spec.maxRetry) or use fewer GPUs"#
            ]
        );
        assert!(
            checked(WorkloadKind::VolcanoJob, &capped(8.0), &vc)
                .denials()
                .is_empty()
        );
        let js = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "s"},
            "spec": {"failurePolicy": {"maxRestarts": 1}, "replicatedJobs": [{"name": "w", "replicas": 1,
                "template": {"spec": {"parallelism": 2, "completions": 2, "activeDeadlineSeconds": 3600,
                    "template": {"spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}}]}});
        let d = checked(WorkloadKind::JobSet, &capped(3.0), &js).denials();
        assert!(
            d[0].contains("× 2 runs (spec.failurePolicy.maxRestarts 1 + 1) × spec.replicatedJobs[0].template.spec.activeDeadlineSeconds 3600 (2.00 h) = 4.00 GPU-hours"),
            "{d:?}"
        );
        assert!(
            checked(WorkloadKind::JobSet, &capped(4.0), &js)
                .denials()
                .is_empty()
        );
    }

    #[test]
    fn a_rayjob_whose_cluster_outlives_it_is_judged_as_its_cluster_is() {
        use crate::mutate::job_defaults::MUTATOR;
        use crate::mutate::test_support::mutate_with;
        let ray = WorkloadKind::named("RayJob").unwrap();
        // 2 GPUs × 1 h, well within 8 GPU-hours, as long as the cluster ends with the job.
        let job = |spec_extra: Value| {
            let mut r = json!({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r"},
                "spec": {"entrypoint": "e", "activeDeadlineSeconds": 3600, "rayClusterSpec": {
                    "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}},
                    "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "template": {"spec": {
                        "containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}]}}});
            for (k, v) in spec_extra.as_object().unwrap() {
                r["spec"][k] = v.clone();
            }
            r
        };
        let denials = |r: &Value| checked(ray, &capped(8.0), r).denials();
        // Unset: the job defaults make the cluster end with the job, and it is admitted.
        let (defaulted, _) = mutate_with(&MUTATOR, "{}", job(json!({})));
        assert_eq!(defaulted["spec"]["shutdownAfterJobFinishes"], true);
        assert!(denials(&defaulted).is_empty());
        // An explicit false is kept, and the cluster it keeps is unbounded.
        let (kept, _) = mutate_with(
            &MUTATOR,
            "{}",
            job(json!({"shutdownAfterJobFinishes": false})),
        );
        assert_eq!(kept["spec"]["shutdownAfterJobFinishes"], false);
        assert_eq!(
            denials(&kept),
            [
                r#"queue "q": spec.shutdownAfterJobFinishes is not true, so KubeRay keeps the RayJob's RayCluster, and its GPUs, after the job ends or reaches its deadline, until it is deleted: its 2 GPUs at once (nvidia.com/gpu spec.rayClusterSpec.workerGroupSpecs[0].template: 2 × 1) are not bounded by the run and the GPU-hours cannot be judged; the queue allows at most 8 GPU-hours per run (guardrails.costCeiling.maxGpuHours): set spec.shutdownAfterJobFinishes: true"#
            ]
        );
        // A RayJob without GPUs is not the ceiling's concern.
        let mut cpu = kept.clone();
        cpu["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
            ["resources"] = json!({});
        assert!(denials(&cpu).is_empty());
    }

    proptest::proptest! {
        /// Whatever its waves, retries and pod deadlines, a Job is judged by its run-level
        /// deadline, and without one it is never within the cap.
        #[test]
        fn a_job_is_judged_by_its_run_level_deadline(
            completions in 1i64..300, parallelism in 1i64..16, backoff in 0i64..10,
            pod_deadline in proptest::option::of(1i64..100_000),
            run_deadline in proptest::option::of(1i64..100_000),
            gpus in 1i64..8, max in 1u32..500,
        ) {
            let mut pod = json!({"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]});
            if let Some(d) = pod_deadline {
                pod["activeDeadlineSeconds"] = json!(d);
            }
            let mut job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                "spec": {"completions": completions, "parallelism": parallelism,
                    "backoffLimit": backoff, "template": {"spec": pod}}});
            if let Some(d) = run_deadline {
                job["spec"]["activeDeadlineSeconds"] = json!(d);
            }
            let max = f64::from(max);
            let denied = !checked(WorkloadKind::BatchJob, &capped(max), &job).denials().is_empty();
            // Pods at once: min(parallelism, completions).
            let at_once = parallelism.min(completions) * gpus;
            let within = run_deadline.is_some_and(|d| at_once as f64 * d as f64 / 3600.0 <= max);
            proptest::prop_assert_eq!(denied, !within);
        }

        /// A JobSet's bound is its longest Job deadline once per run its restarts allow.
        #[test]
        fn a_jobset_is_judged_once_per_restart(
            restarts in 0i64..6, deadlines in proptest::collection::vec(1i64..50_000, 1..4),
            gpus in 1i64..4, max in 1u32..200,
        ) {
            let jobs: Vec<Value> = deadlines.iter().enumerate().map(|(i, d)| json!({
                "name": format!("j{i}"), "replicas": 1, "template": {"spec": {
                    "parallelism": 1, "completions": 1, "activeDeadlineSeconds": d,
                    "template": {"spec": {"activeDeadlineSeconds": 1, "containers": [
                        {"name": "t", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}})).collect();
            let js = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "s"},
                "spec": {"failurePolicy": {"maxRestarts": restarts}, "replicatedJobs": jobs}});
            let max = f64::from(max);
            let denied = !checked(WorkloadKind::JobSet, &capped(max), &js).denials().is_empty();
            let longest = deadlines.iter().copied().max().unwrap_or(0);
            let hours = (gpus * deadlines.len() as i64) as f64 * (restarts + 1) as f64 * longest as f64 / 3600.0;
            proptest::prop_assert_eq!(denied, hours > max);
        }
    }
}
