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
//! Which fields a kind takes, where they are and what counts as unset is its descriptor's
//! ([`crate::kinds::Run::defaults`]); this module only reads it, so a new kind gets its
//! defaults from its descriptor.
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
use crate::kinds::{Replaces, RunDefault, Setting, field};
use crate::patch::{Node, Step};
use crate::workload::intent::UserIntent;
use crate::workload::{self, WorkloadKind};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

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
        // A value the kind's controller reads as unset is never kept (Volcano's `maxRetry: 0`).
        for kind in WorkloadKind::all() {
            let run = &kind.spec().run;
            for default in run.defaults {
                let (Replaces::Value(unset) | Replaces::ValueOrApiDefault { unset, .. }) =
                    default.replaces
                else {
                    continue;
                };
                if value_of(self, kind, default.setting) != Some(Value::from(unset)) {
                    continue;
                }
                let field = default.at.join(".");
                let instead = run
                    .restarts
                    .as_ref()
                    .filter(|r| r.at == default.at)
                    .map_or_else(
                        || "the kind's default".to_string(),
                        |r| format!("{} ({})", r.default_is, r.default),
                    );
                errors.push(ConfigError::new(
                    format!("{at}.{}", default.setting.key()),
                    format!(
                        "{unset} is not kept: a {}'s {field} of {unset} counts as unset, so {instead} applies; use {} or more, or null to leave {field} to the {}",
                        kind.as_str(),
                        unset + 1,
                        kind.as_str()
                    ),
                ));
            }
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
pub const MUTATOR: Mutator = Mutator::new("job-defaults", mutate);

/// Did the user write the field of `default` themselves, as `intent` shows (or keep a
/// `backoffLimit` as the API server defaulted it, by annotation)?
fn is_explicit(job: &Value, default: &RunDefault, intent: &UserIntent) -> bool {
    let Some(meta) = job.as_object() else {
        return false;
    };
    (default.setting == Setting::BackoffLimit
        && workload::annotation(meta, KEEP_BACKOFF_LIMIT_ANNOTATION) == Some("true"))
        || intent.wrote(default.at)
}

/// The value of `setting` in the queue's job defaults (for `kind`).
fn value_of(cfg: &JobDefaultsConfig, kind: WorkloadKind, setting: Setting) -> Option<Value> {
    match setting {
        Setting::BackoffLimit => cfg.backoff_limit.map(Value::from),
        Setting::Ttl => cfg.ttl_seconds_after_finished.map(Value::from),
        Setting::VolcanoMaxRetry => cfg.volcano_max_retry.map(Value::from),
        Setting::RestartPolicy => cfg.restart_policy.clone().map(Value::from),
        Setting::EndWithRun => kind.spec().run.ends.written(),
    }
}

/// Writes one run-level default of the kind's descriptor where it is unset (and `intent`
/// does not show the user wrote it).
fn apply(
    cfg: &JobDefaultsConfig,
    kind: WorkloadKind,
    default: &RunDefault,
    object: &mut Node<'_, Value>,
    intent: &UserIntent,
    findings: &mut Findings,
) -> bool {
    let Some((key, parents)) = default.at.split_last() else {
        return false;
    };
    if default
        .when
        .as_ref()
        .is_some_and(|c| !c.holds(object, object, None))
        || default
            .unless
            .as_ref()
            .is_some_and(|c| c.holds(object, object, None))
    {
        return false;
    }
    let misplaced = default
        .misplaced
        .and_then(|at| field(object, at))
        .and_then(Value::as_i64);
    let Some(value) = misplaced
        .map(Value::from)
        .or_else(|| value_of(cfg, kind, default.setting))
    else {
        return false;
    };
    let explicit = matches!(
        default.replaces,
        Replaces::ApiDefault(_) | Replaces::ValueOrApiDefault { .. }
    ) && is_explicit(object, default, intent);
    // The holder of the field: its parents must exist, but for the last with `make`.
    let Some((last, above)) = parents.split_last() else {
        return false;
    };
    let steps: Vec<Step<'_>> = above.iter().map(|k| Step::Key(k)).collect();
    let Some(mut grand) = object.at_steps(&steps) else {
        return false;
    };
    let Some(mut grand) = grand.as_map_node() else {
        return false;
    };
    if default.make && !grand.contains_key(*last) {
        grand.set(last, json!({}));
    }
    let Some(holder) = grand.get(*last).and_then(Value::as_object) else {
        return false;
    };
    let current = holder.get(*key);
    let unset = match default.replaces {
        Replaces::Absent => current.is_none_or(Value::is_null),
        Replaces::Value(v) => {
            current.is_none_or(|c| c.is_null() || c.as_i64() == Some(v)) && current != Some(&value)
        }
        Replaces::ApiDefault(api) => {
            let current = current.and_then(Value::as_i64);
            // `treatApiDefaultBackoffAsUnset` speaks for retries; any other API default is
            // the API server's, never the user's, unless they wrote it.
            let treat =
                default.setting != Setting::BackoffLimit || cfg.treat_api_default_backoff_as_unset;
            let api_default = current == Some(api) && treat && !explicit;
            current.is_none() || (api_default && value.as_i64() != Some(api))
        }
        Replaces::ValueOrApiDefault { unset, api } => {
            let current = current.filter(|c| !c.is_null()).map(Value::as_i64);
            let api_default = current == Some(Some(api)) && !explicit;
            (current.is_none() || current == Some(Some(unset)) || api_default)
                && current != Some(value.as_i64())
        }
        Replaces::Text(t) => current.and_then(Value::as_str).is_none_or(|c| c == t),
    };
    if !unset {
        if default.make && holder.is_empty() {
            grand.remove(last);
        }
        return false;
    }
    grand
        .object(last)
        .expect("an object member")
        .set(key, value.clone());
    if let Some(v) = misplaced {
        let from = default.misplaced.unwrap_or_default().join(".");
        findings.warn(
            crate::rules::JOB_DEFAULTS_MISPLACED,
            format!(
                "launchgate: {from} is not a {} field; set {}={v} instead",
                kind.api_kind(),
                default.at.join(".")
            ),
        );
    }
    true
}

pub fn mutate(
    ctx: &MutationContext<'_>,
    object: &mut Node<'_, Value>,
    findings: &mut Findings,
) -> bool {
    let cfg = ctx.settings.job_defaults;
    if !cfg.enabled || ctx.child {
        return false;
    }
    let mut changed = false;
    for default in ctx.kind.spec().run.defaults {
        changed |= apply(cfg, ctx.kind, default, object, ctx.intent(object), findings);
    }
    changed
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
        assert_eq!(f.warning_texts().len(), 1);
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

    fn rayjob(spec: Value) -> Value {
        json!({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r"}, "spec": spec})
    }

    #[test]
    fn a_rayjob_ends_its_cluster_with_the_job_and_a_second_pass_writes_nothing() {
        // As the API server stores it: the CRD's defaults, no shutdownAfterJobFinishes.
        let r = rayjob(
            json!({"entrypoint": "python t.py", "backoffLimit": 0, "ttlSecondsAfterFinished": 0}),
        );
        let (out, _) = mutate_with(&MUTATOR, "{}", r);
        assert_eq!(
            out["spec"],
            json!({"entrypoint": "python t.py", "backoffLimit": 0,
                   "shutdownAfterJobFinishes": true, "ttlSecondsAfterFinished": 60})
        );
        let (again, _) = mutate_with(&MUTATOR, "{}", out.clone());
        assert_eq!(again, out);
        // Job defaults off: nothing written.
        let bare = rayjob(json!({"entrypoint": "python t.py"}));
        let (out, _) = mutate_with(&MUTATOR, "jobDefaults: {enabled: false}", bare.clone());
        assert_eq!(out, bare);
    }

    #[test]
    fn a_rayjob_that_keeps_its_cluster_on_purpose_is_left_so() {
        // An explicit false is the tenant's (the CRD defaults nothing there): kept, with no
        // TTL, which KubeRay rejects without shutdownAfterJobFinishes.
        let kept = rayjob(json!({"entrypoint": "e", "shutdownAfterJobFinishes": false,
                                 "ttlSecondsAfterFinished": 0}));
        let (out, _) = mutate_with(&MUTATOR, "{}", kept.clone());
        assert_eq!(out["spec"]["shutdownAfterJobFinishes"], false);
        assert_eq!(out["spec"]["ttlSecondsAfterFinished"], 0);
        // A deletionStrategy decides the cluster's end itself (KubeRay rejects its rules
        // together with shutdownAfterJobFinishes).
        let strategy =
            rayjob(json!({"entrypoint": "e", "deletionStrategy": {"deletionRules": []}}));
        let (out, _) = mutate_with(&MUTATOR, "{}", strategy);
        assert!(out["spec"].get("shutdownAfterJobFinishes").is_none());
    }

    #[test]
    fn volcano_max_retry_is_a_value_volcano_keeps() {
        // Volcano writes 3 over 0: a queue default of 0 would be a lie, so it is rejected.
        let err = queue_yaml("jobDefaults: {volcanoMaxRetry: 0}")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("queues.q.jobDefaults.volcanoMaxRetry")
                && err.contains("default (3) applies"),
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
        // The CRD's schema writes 3 where the user wrote none: replaced, as offline (where
        // nothing writes it) ...
        let defaulted = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"},
                        "spec": {"maxRetry": 3, "tasks": []}});
        let (out, _) = mutate_with(
            &MUTATOR,
            "jobDefaults: {volcanoMaxRetry: 1}",
            defaulted.clone(),
        );
        assert_eq!(out["spec"]["maxRetry"], 1);
        // ... unless the user wrote it (kubectl's last-applied-configuration).
        let mut written = defaulted;
        written["metadata"]["annotations"] = json!({
            "kubectl.kubernetes.io/last-applied-configuration":
                r#"{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","spec":{"maxRetry":3,"tasks":[]}}"#});
        let (out, _) = mutate_with(&MUTATOR, "jobDefaults: {volcanoMaxRetry: 1}", written);
        assert_eq!(out["spec"]["maxRetry"], 3);
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

    #[test]
    fn a_default_that_applies_only_when_its_condition_holds_is_written_only_then() {
        use crate::kinds::{Cond, From};
        // A run's TTL that its controller honours only when the run shuts down at the end.
        static TTL: RunDefault = RunDefault {
            setting: Setting::Ttl,
            at: &["spec", "ttlSecondsAfterFinished"],
            replaces: Replaces::Absent,
            make: false,
            when: Some(Cond::True {
                from: From::Object,
                at: &["spec", "shutdownAfterJobFinishes"],
            }),
            unless: None,
            misplaced: None,
        };
        static RETRIES: RunDefault = RunDefault {
            setting: Setting::BackoffLimit,
            at: &["spec", "policy", "retries"],
            replaces: Replaces::Value(0),
            make: true,
            when: None,
            unless: None,
            misplaced: None,
        };
        let cfg = JobDefaultsConfig::default();
        let kind = WorkloadKind::BatchJob;
        let mut findings = Findings::default();
        let mut kept = json!({"spec": {"shutdownAfterJobFinishes": false}});
        assert!(!apply(
            &cfg,
            kind,
            &TTL,
            &mut Node::scratch(&mut kept),
            &UserIntent::default(),
            &mut findings
        ));
        assert_eq!(kept, json!({"spec": {"shutdownAfterJobFinishes": false}}));
        let mut shut = json!({"spec": {"shutdownAfterJobFinishes": true}});
        assert!(apply(
            &cfg,
            kind,
            &TTL,
            &mut Node::scratch(&mut shut),
            &UserIntent::default(),
            &mut findings
        ));
        assert_eq!(shut["spec"]["ttlSecondsAfterFinished"], json!(60));
        assert!(apply(
            &cfg,
            kind,
            &RETRIES,
            &mut Node::scratch(&mut shut),
            &UserIntent::default(),
            &mut findings
        ));
        assert_eq!(shut["spec"]["policy"], json!({"retries": 0}));
        let mut zero = json!({"spec": {"policy": {"retries": 0}}});
        assert!(
            !apply(
                &cfg,
                kind,
                &RETRIES,
                &mut Node::scratch(&mut zero),
                &UserIntent::default(),
                &mut findings
            ),
            "0 is already the value"
        );
        assert!(findings.warning_texts().is_empty());
    }
}
