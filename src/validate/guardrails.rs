//! Launch guardrails ([`crate::topology::guardrails`]), the validating half: a gang that could
//! start half (`gang: deny`), and a run over the queue's GPU-hour cap
//! (`costCeiling.maxGpuHours`), denied with the arithmetic.

use super::check::gpus_at_once;
use crate::topology::guardrails::{
    GangAction, GuardrailEnforcement, GuardrailsConfig, gang_shortfalls, run_deadline,
};
use crate::workload::WorkloadKind;
use crate::workload::trainjob::TrainingRuntime;
use serde_json::Value;

/// How a workload breaks the queue's guardrails.
#[derive(Debug, Default, PartialEq)]
pub struct GuardrailReport {
    pub denials: Vec<String>,
    pub warnings: Vec<String>,
}

/// Why the workload breaks the queue's guardrails: denials, and what a guardrail set to `warn`
/// only warns about.
pub fn check(
    queue: &str,
    kind: WorkloadKind,
    cfg: &GuardrailsConfig,
    object: &Value,
    object_name: &str,
    runtime: Option<&TrainingRuntime>,
) -> GuardrailReport {
    let mut report = GuardrailReport::default();
    if cfg.gang == GangAction::Deny {
        for short in gang_shortfalls(kind, object, object_name) {
            report.denials.push(format!(
                "queue {queue:?}: {}; set it to {} (guardrails.gang: deny)",
                short.explain(kind),
                short.needed
            ));
        }
    }
    if let Some(max) = cfg.cost_ceiling.max_gpu_hours
        && let Some(problem) = gpu_hours_problem(queue, kind, object, max, runtime)
    {
        match cfg.cost_ceiling.enforcement {
            GuardrailEnforcement::Deny => report.denials.push(problem),
            GuardrailEnforcement::Warn => report.warnings.push(problem),
        }
    }
    report
}

fn gpu_hours_problem(
    queue: &str,
    kind: WorkloadKind,
    object: &Value,
    max: f64,
    runtime: Option<&TrainingRuntime>,
) -> Option<String> {
    let Some((gpus, parts)) = gpus_at_once(kind, object, runtime) else {
        return Some(format!(
            "queue {queue:?}: the GPUs this run can use at once are too many to count (guardrails.costCeiling.maxGpuHours {max})"
        ));
    };
    let gpus = gpus.to_f64();
    if gpus <= 0.0 {
        return None;
    }
    let parts = parts.join(", ");
    let longest = (max / gpus * 3600.0).floor();
    let Some(deadline) = run_deadline(kind, object) else {
        return Some(format!(
            "queue {queue:?}: this run has no activeDeadlineSeconds, so its {gpus} GPUs ({parts}) could run without end; the queue allows at most {max} GPU-hours per run (guardrails.costCeiling.maxGpuHours): set activeDeadlineSeconds to at most {longest}"
        ));
    };
    let hours = gpus * deadline as f64 / 3600.0;
    (hours > max).then(|| {
        format!(
            "queue {queue:?}: {gpus} GPUs at once ({parts}) × activeDeadlineSeconds {deadline} ({:.2} h) = {hours:.2} GPU-hours exceeds the queue's maximum {max} GPU-hours per run (guardrails.costCeiling.maxGpuHours): set activeDeadlineSeconds to at most {longest} or use fewer GPUs",
            deadline as f64 / 3600.0
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
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
            check("q", WorkloadKind::BatchJob, cfg, job, "j", None).denials
        };
        // 8 GPUs × 8 h = 64: at the cap.
        assert!(denials(&cfg, &job(Some(8 * 3600))).is_empty());
        let d = denials(&cfg, &job(Some(86400)));
        assert_eq!(
            d,
            [
                r#"queue "q": 8 GPUs at once (nvidia.com/gpu spec.template: 2 × 4) × activeDeadlineSeconds 86400 (24.00 h) = 192.00 GPU-hours exceeds the queue's maximum 64 GPU-hours per run (guardrails.costCeiling.maxGpuHours): set activeDeadlineSeconds to at most 28800 or use fewer GPUs"#
            ]
        );
        let d = denials(&cfg, &job(None));
        assert!(
            d[0].contains("no activeDeadlineSeconds") && d[0].contains("at most 28800"),
            "{d:?}"
        );
        let cpu_only = json!({"spec": {"template": {"spec": {"containers": [{"name": "t"}]}}}});
        assert!(denials(&cfg, &cpu_only).is_empty());
        // `warn`: the same words, as a warning.
        cfg.cost_ceiling.enforcement = GuardrailEnforcement::Warn;
        let report = check(
            "q",
            WorkloadKind::BatchJob,
            &cfg,
            &job(Some(86400)),
            "j",
            None,
        );
        assert!(report.denials.is_empty());
        assert!(
            report.warnings[0].contains("192.00 GPU-hours"),
            "{report:?}"
        );
    }
}
