//! Job-level defaults: batch/v1 Job `backoffLimit`, `ttlSecondsAfterFinished` and the pod
//! template's `restartPolicy`; Volcano Job `ttlSecondsAfterFinished` and `maxRetry`;
//! PyTorchJob `runPolicy.backoffLimit` and `runPolicy.ttlSecondsAfterFinished`; JobSet
//! `failurePolicy.maxRestarts` (from `backoffLimit`: how often the whole JobSet is restarted
//! after a Job fails) and `ttlSecondsAfterFinished`. A JobSet's pod `restartPolicy` is left to
//! JobSet's webhook (it defaults OnFailure, before or after launchgate: writing one here would
//! make the outcome depend on the order). A TrainJob has none of these: they come from its
//! runtime. The Jobs a JobSet makes, and a TrainJob's JobSet, get none either (see
//! [`MutationContext::child`]).
//!
//! **The backoffLimit rule.** The API server defaults a batch/v1 Job's `backoffLimit` to 6
//! *before* mutating admission, so "unset" cannot be read off the object. launchgate treats a
//! `backoffLimit` of exactly 6 on CREATE as the API default, and replaces it — unless
//! * the Job carries the annotation `launchgate.io/keep-backoff-limit: "true"`, or
//! * the user wrote `backoffLimit` ([`super::intent`]: kubectl's
//!   `last-applied-configuration`, or a server-side apply manager owning `spec.backoffLimit`), or
//! * the Job uses `backoffLimitPerIndex` (then the API default is different and meaningful).

use super::{Findings, MutationContext, Mutator};
use crate::error::ConfigError;
use crate::workload::intent::UserIntent;
use crate::workload::{self, WorkloadKind};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The value the API server gives `spec.backoffLimit` when the user sets none.
pub const API_DEFAULT_BACKOFF_LIMIT: i64 = 6;
/// Opt-out annotation: keep a `backoffLimit: 6` as written.
pub const KEEP_BACKOFF_LIMIT_ANNOTATION: &str = "launchgate.io/keep-backoff-limit";

/// Per-queue job defaults. A null value leaves that field alone.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct JobDefaultsConfig {
    /// Apply the Job defaults below (false: leave retries and cleanup alone).
    pub enabled: bool,
    /// Job `spec.backoffLimit` (a PyTorchJob's `spec.runPolicy.backoffLimit`, a JobSet's
    /// `spec.failurePolicy.maxRestarts`) where the user left it unset.
    pub backoff_limit: Option<i64>,
    /// `ttlSecondsAfterFinished`: seconds after which a finished run is deleted (a PyTorchJob's
    /// under `spec.runPolicy`).
    pub ttl_seconds_after_finished: Option<i64>,
    /// Volcano Job `spec.maxRetry`.
    pub volcano_max_retry: Option<i64>,
    /// batch/v1 Job pod-template `restartPolicy` (Never or OnFailure).
    pub restart_policy: Option<String>,
    /// Treat a `backoffLimit` of 6 on CREATE as the API default (see the module docs).
    pub treat_api_default_backoff_as_unset: bool,
}

impl Default for JobDefaultsConfig {
    fn default() -> Self {
        JobDefaultsConfig {
            enabled: true,
            backoff_limit: Some(0),
            ttl_seconds_after_finished: Some(60),
            volcano_max_retry: None,
            restart_policy: Some("Never".into()),
            treat_api_default_backoff_as_unset: true,
        }
    }
}

impl JobDefaultsConfig {
    pub fn check(&self, at: &str, errors: &mut Vec<ConfigError>) {
        for (key, v) in [
            ("backoffLimit", self.backoff_limit),
            ("ttlSecondsAfterFinished", self.ttl_seconds_after_finished),
            ("volcanoMaxRetry", self.volcano_max_retry),
        ] {
            if v.is_some_and(|v| !(0..=i64::from(i32::MAX)).contains(&v)) {
                errors.push(ConfigError::new(
                    format!("{at}.{key}"),
                    "must be between 0 and 2147483647",
                ));
            }
        }
        if self.volcano_max_retry == Some(0) {
            errors.push(ConfigError::new(
                format!("{at}.volcanoMaxRetry"),
                "0 is not kept: Volcano's admission webhook and job controller treat maxRetry 0 as unset and use 3; use 1 (the job fails at its first restart, i.e. no restarts) or null to leave maxRetry to Volcano",
            ));
        }
        if let Some(p) = &self.restart_policy
            && p != "Never"
            && p != "OnFailure"
        {
            errors.push(ConfigError::new(
                format!("{at}.restartPolicy"),
                format!("a Job's pods may only use Never or OnFailure, got {p:?}"),
            ));
        }
    }
}

/// The job-defaults mutator.
pub const MUTATOR: Mutator = Mutator {
    name: "job-defaults",
    run: mutate,
};

fn set_if_absent(map: &mut Map<String, Value>, key: &str, value: Option<i64>) -> bool {
    match value {
        Some(v) if map.get(key).is_none_or(Value::is_null) => {
            map.insert(key.into(), json!(v));
            true
        }
        _ => false,
    }
}

/// Did the user write `spec.backoffLimit` themselves?
fn backoff_limit_is_explicit(job: &Value) -> bool {
    let Some(meta) = job.as_object() else {
        return false;
    };
    workload::annotation(meta, KEEP_BACKOFF_LIMIT_ANNOTATION) == Some("true")
        || UserIntent::of(job).wrote(&["spec", "backoffLimit"])
}

fn batch_job(cfg: &JobDefaultsConfig, job: &mut Value) -> bool {
    let explicit = backoff_limit_is_explicit(job);
    let Some(spec) = job.get_mut("spec").and_then(Value::as_object_mut) else {
        return false;
    };
    let mut changed = false;
    if let Some(limit) = cfg.backoff_limit {
        let current = spec.get("backoffLimit").and_then(Value::as_i64);
        let per_index = spec
            .get("backoffLimitPerIndex")
            .is_some_and(|v| !v.is_null());
        let api_default = current == Some(API_DEFAULT_BACKOFF_LIMIT)
            && cfg.treat_api_default_backoff_as_unset
            && !explicit
            && !per_index;
        if (current.is_none() && !per_index) || (api_default && limit != API_DEFAULT_BACKOFF_LIMIT)
        {
            spec.insert("backoffLimit".into(), json!(limit));
            changed = true;
        }
    }
    changed |= set_if_absent(
        spec,
        "ttlSecondsAfterFinished",
        cfg.ttl_seconds_after_finished,
    );
    if let Some(policy) = &cfg.restart_policy
        && let Some(pod_spec) = spec
            .get_mut("template")
            .and_then(|t| t.get_mut("spec"))
            .and_then(Value::as_object_mut)
    {
        // "Always" is what pod defaulting fills in and is invalid for a Job.
        let current = pod_spec.get("restartPolicy").and_then(Value::as_str);
        if matches!(current, None | Some("Always")) {
            pod_spec.insert("restartPolicy".into(), json!(policy));
            changed = true;
        }
    }
    changed
}

fn volcano_job(cfg: &JobDefaultsConfig, job: &mut Value) -> bool {
    let Some(spec) = job.get_mut("spec").and_then(Value::as_object_mut) else {
        return false;
    };
    let mut changed = set_if_absent(
        spec,
        "ttlSecondsAfterFinished",
        cfg.ttl_seconds_after_finished,
    );
    // Volcano treats `maxRetry: 0` as unset (its webhook writes 3), so launchgate does too.
    if let Some(retry) = cfg.volcano_max_retry
        && spec
            .get("maxRetry")
            .is_none_or(|v| v.is_null() || v.as_i64() == Some(0))
        && spec.get("maxRetry").and_then(Value::as_i64) != Some(retry)
    {
        spec.insert("maxRetry".into(), json!(retry));
        changed = true;
    }
    changed
}

fn pytorch_job(cfg: &JobDefaultsConfig, job: &mut Value, findings: &mut Findings) -> bool {
    let Some(spec) = job.get_mut("spec").and_then(Value::as_object_mut) else {
        return false;
    };
    // A common mistake (also in the W&B docs): ttlSecondsAfterFinished at spec level, where
    // the operator never reads it. Honour the user's value in the right place.
    let misplaced_ttl = spec.get("ttlSecondsAfterFinished").and_then(Value::as_i64);
    let run_policy = spec.entry("runPolicy").or_insert_with(|| json!({}));
    if !run_policy.is_object() {
        return false;
    }
    let run_policy = run_policy.as_object_mut().expect("checked above");
    let mut changed = set_if_absent(run_policy, "backoffLimit", cfg.backoff_limit);
    let ttl = misplaced_ttl.or(cfg.ttl_seconds_after_finished);
    if set_if_absent(run_policy, "ttlSecondsAfterFinished", ttl) {
        changed = true;
        if let Some(v) = misplaced_ttl {
            findings.warn(format!(
                "launchgate: spec.ttlSecondsAfterFinished is not a PyTorchJob field; set spec.runPolicy.ttlSecondsAfterFinished={v} instead"
            ));
        }
    }
    if run_policy.is_empty() {
        spec.remove("runPolicy");
    }
    changed
}

fn jobset(cfg: &JobDefaultsConfig, jobset: &mut Value) -> bool {
    let Some(spec) = jobset.get_mut("spec").and_then(Value::as_object_mut) else {
        return false;
    };
    let mut changed = set_if_absent(
        spec,
        "ttlSecondsAfterFinished",
        cfg.ttl_seconds_after_finished,
    );
    if let Some(limit) = cfg.backoff_limit {
        let policy = spec.entry("failurePolicy").or_insert_with(|| json!({}));
        if let Some(policy) = policy.as_object_mut() {
            changed |= set_if_absent(policy, "maxRestarts", Some(limit));
        }
    }
    changed
}

pub fn mutate(ctx: &MutationContext<'_>, object: &mut Value, findings: &mut Findings) -> bool {
    let cfg = ctx.settings.job_defaults;
    if !cfg.enabled || ctx.child {
        return false;
    }
    let kind = ctx.kind;
    if kind == WorkloadKind::JobSet {
        jobset(cfg, object)
    } else if kind == WorkloadKind::BatchJob {
        batch_job(cfg, object)
    } else if kind == WorkloadKind::VolcanoJob {
        volcano_job(cfg, object)
    } else if kind == WorkloadKind::PyTorchJob {
        pytorch_job(cfg, object, findings)
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutate::test_support::{mutate_with, queue_yaml};

    fn job(spec: Value, annotations: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "demo", "annotations": annotations},
               "spec": spec})
    }

    fn template() -> Value {
        json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "main"}]}})
    }

    #[test]
    fn api_default_backoff_is_replaced() {
        let (out, _) = mutate_with(
            &MUTATOR,
            "{}",
            job(
                json!({"backoffLimit": 6, "template": template()}),
                json!({}),
            ),
        );
        assert_eq!(out["spec"]["backoffLimit"], 0);
        assert_eq!(out["spec"]["ttlSecondsAfterFinished"], 60);
    }

    #[test]
    fn explicit_six_is_kept() {
        let keep = json!({KEEP_BACKOFF_LIMIT_ANNOTATION: "true"});
        let (out, _) = mutate_with(
            &MUTATOR,
            "{}",
            job(json!({"backoffLimit": 6, "template": template()}), keep),
        );
        assert_eq!(out["spec"]["backoffLimit"], 6);
        let applied = json!({crate::workload::intent::LAST_APPLIED_ANNOTATION: r#"{"spec":{"backoffLimit":6}}"#});
        let (out, _) = mutate_with(
            &MUTATOR,
            "{}",
            job(json!({"backoffLimit": 6, "template": template()}), applied),
        );
        assert_eq!(out["spec"]["backoffLimit"], 6);
    }

    #[test]
    fn six_owned_by_a_server_side_apply_manager_is_kept() {
        let mut j = job(
            json!({"backoffLimit": 6, "template": template()}),
            json!({}),
        );
        j["metadata"]["managedFields"] = json!([{
            "manager": "argocd-controller", "operation": "Apply", "apiVersion": "batch/v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:backoffLimit": {}, "f:template": {}}}
        }]);
        let (out, _) = mutate_with(&MUTATOR, "{}", j.clone());
        assert_eq!(out["spec"]["backoffLimit"], 6);
        // The same Job created with `kubectl create` (an Update manager) gets the default.
        j["metadata"]["managedFields"][0]["operation"] = json!("Update");
        let (out, _) = mutate_with(&MUTATOR, "{}", j);
        assert_eq!(out["spec"]["backoffLimit"], 0);
    }

    #[test]
    fn user_values_are_kept() {
        let spec = json!({"backoffLimit": 2, "ttlSecondsAfterFinished": 5, "template": template()});
        let (out, _) = mutate_with(&MUTATOR, "{}", job(spec.clone(), json!({})));
        assert_eq!(out["spec"], spec);
    }

    #[test]
    fn per_index_backoff_is_left_alone() {
        let spec =
            json!({"backoffLimit": 2147483647, "backoffLimitPerIndex": 1, "template": template()});
        let (out, _) = mutate_with(&MUTATOR, "{}", job(spec, json!({})));
        assert_eq!(out["spec"]["backoffLimit"], 2147483647);
    }

    #[test]
    fn restart_policy_always_becomes_never() {
        let t = json!({"spec": {"restartPolicy": "Always", "containers": []}});
        let (out, _) = mutate_with(&MUTATOR, "{}", job(json!({"template": t}), json!({})));
        assert_eq!(out["spec"]["template"]["spec"]["restartPolicy"], "Never");
        let t = json!({"spec": {"restartPolicy": "OnFailure", "containers": []}});
        let (out, _) = mutate_with(&MUTATOR, "{}", job(json!({"template": t}), json!({})));
        assert_eq!(
            out["spec"]["template"]["spec"]["restartPolicy"],
            "OnFailure"
        );
    }

    #[test]
    fn volcano_and_pytorch_fields() {
        let vc = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"}, "spec": {"tasks": []}});
        let (out, _) = mutate_with(&MUTATOR, "jobDefaults: {volcanoMaxRetry: 1}", vc);
        assert_eq!(out["spec"]["ttlSecondsAfterFinished"], 60);
        assert_eq!(out["spec"]["maxRetry"], 1);
        let pt = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p"},
                        "spec": {"pytorchReplicaSpecs": {}, "ttlSecondsAfterFinished": 600}});
        let (out, f) = mutate_with(&MUTATOR, "{}", pt);
        assert_eq!(
            out["spec"]["runPolicy"],
            json!({"backoffLimit": 0, "ttlSecondsAfterFinished": 600})
        );
        assert_eq!(
            out["spec"]["ttlSecondsAfterFinished"], 600,
            "unknown fields survive"
        );
        assert_eq!(f.warnings.len(), 1);
    }

    #[test]
    fn jobset_fields() {
        let js = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "s"},
                        "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": template()}}}]}});
        let (out, _) = mutate_with(&MUTATOR, "{}", js.clone());
        assert_eq!(out["spec"]["ttlSecondsAfterFinished"], 60);
        assert_eq!(out["spec"]["failurePolicy"], json!({"maxRestarts": 0}));
        assert_eq!(
            out["spec"]["replicatedJobs"], js["spec"]["replicatedJobs"],
            "the pod templates' restartPolicy is JobSet's to default"
        );
        let mut own = js.clone();
        own["spec"]["failurePolicy"] = json!({"maxRestarts": 3, "restartStrategy": "Recreate"});
        own["spec"]["ttlSecondsAfterFinished"] = json!(5);
        let (out, _) = mutate_with(&MUTATOR, "{}", own.clone());
        assert_eq!(out, own);
        let tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "t"}, "spec": {}});
        let (out, _) = mutate_with(&MUTATOR, "{}", tj.clone());
        assert_eq!(out, tj);
    }

    #[test]
    fn volcano_max_retry_is_a_value_volcano_keeps() {
        // Volcano writes 3 over 0: a queue default of 0 would be a lie, so it is rejected.
        let err = queue_yaml("jobDefaults: {volcanoMaxRetry: 0}")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("queues.q.jobDefaults.volcanoMaxRetry") && err.contains("use 3"),
            "{err}"
        );
        // A Job's own maxRetry: 0 is unset for Volcano, so the queue's value goes in.
        let vc = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"},
                        "spec": {"maxRetry": 0, "tasks": []}});
        let (out, _) = mutate_with(&MUTATOR, "jobDefaults: {volcanoMaxRetry: 1}", vc);
        assert_eq!(out["spec"]["maxRetry"], 1);
        let vc = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"},
                        "spec": {"maxRetry": 5, "tasks": []}});
        let (out, _) = mutate_with(&MUTATOR, "jobDefaults: {volcanoMaxRetry: 1}", vc);
        assert_eq!(out["spec"]["maxRetry"], 5);
    }

    #[test]
    fn pods_untouched_and_config_checked() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}});
        let (out, _) = mutate_with(&MUTATOR, "{}", pod.clone());
        assert_eq!(out, pod);
        let err = queue_yaml("jobDefaults: {restartPolicy: Always}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("queues.q.jobDefaults.restartPolicy"), "{err}");
        assert!(queue_yaml("jobDefaults: {backoffLimit: -1}").is_err());
    }
}
