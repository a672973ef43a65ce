//! Judging an object the way the cluster does: launchgate's mutating webhook first, then its
//! validating webhook on the mutated object.
//!
//! The API server calls the mutating webhooks, applies their patches, and only then calls the
//! validating webhooks. Judging the object as submitted would therefore disagree with the
//! cluster whenever a mutation changes what validation sees (a `backoffLimit` the job defaults
//! replace, a `restartPolicy` they fill in). The offline `validate`, `launchgate test` and
//! `launchgate audit` all go through [`judge`]. Pure: no I/O.

use crate::admission::{AdmissionRequest, Operation};
use crate::cluster::ClusterView;
use crate::policy::Policy;
use crate::review::{Decision, Endpoint, Outcome, decide};
use crate::rules::{Violation, Warning};
use serde_json::Value;

/// Which webhook gave a denial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Mutate,
    Validate,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Mutate => "mutate",
            Stage::Validate => "validate",
        }
    }
}

/// Both webhooks' answers on one request.
#[derive(Debug, Clone)]
pub struct Judgement {
    /// The mutating webhook's decision (its patch, warnings, denial).
    pub mutation: Decision,
    /// The validating webhook's decision on the mutated object; `None` when the mutating
    /// webhook already denied (the API server stops there).
    pub validation: Option<Decision>,
    /// The object after launchgate's patch (the object itself when nothing changed);
    /// `None` for a request without an object.
    pub mutated: Option<Value>,
}

impl Judgement {
    /// True when the cluster would admit the object.
    pub fn allowed(&self) -> bool {
        self.mutation.response.allowed
            && self.validation.as_ref().is_none_or(|v| v.response.allowed)
    }

    /// The webhook that denied, if one did.
    pub fn denied_by(&self) -> Option<Stage> {
        if !self.mutation.response.allowed {
            Some(Stage::Mutate)
        } else if self
            .validation
            .as_ref()
            .is_some_and(|v| !v.response.allowed)
        {
            Some(Stage::Validate)
        } else {
            None
        }
    }

    /// The denial message shown to the user (empty when allowed).
    pub fn message(&self) -> String {
        let decision = match self.denied_by() {
            Some(Stage::Mutate) => &self.mutation,
            Some(Stage::Validate) => self.validation.as_ref().unwrap_or(&self.mutation),
            None => return String::new(),
        };
        decision
            .response
            .status
            .as_ref()
            .map(|s| s.message.clone())
            .unwrap_or_default()
    }

    /// The mutating webhook's decision, then the validating webhook's when it was asked.
    fn decisions(&self) -> impl Iterator<Item = &Decision> {
        std::iter::once(&self.mutation).chain(&self.validation)
    }

    /// Every warning kubectl would print, each once (by its text), mutation's first, with the
    /// id of its rule or notice.
    pub fn warnings(&self) -> Vec<Warning> {
        let mut out: Vec<Warning> = Vec::new();
        for w in self.decisions().flat_map(|d| &d.summary.warnings) {
            if !out.iter().any(|seen| seen.message == w.message) {
                out.push(w.clone());
            }
        }
        out
    }

    /// Every violation found: the mutating webhook's, then the validating webhook's.
    pub fn violations(&self) -> impl Iterator<Item = &Violation> {
        self.decisions().flat_map(|d| &d.summary.violations)
    }

    /// The distinct ids of the rules that denied (empty when allowed).
    pub fn denied_rules(&self) -> Vec<&'static str> {
        crate::rules::ids(
            self.violations()
                .filter(|v| v.effect == crate::rules::Effect::Deny),
        )
    }

    /// Violations found under `audit` enforcement (logged by the server, not shown to users).
    pub fn audit_violations(&self) -> Vec<&str> {
        self.validation.as_ref().map_or(Vec::new(), |v| {
            v.summary
                .audit_violations()
                .map(|v| v.message.as_str())
                .collect()
        })
    }

    /// The queue the object was judged against (`None`: not a launch workload, or no queue).
    pub fn queue(&self) -> Option<&str> {
        self.mutation.summary.queue.as_deref()
    }

    /// Why launchgate left the object alone, when it did ([`Judgement::skipped`]).
    pub fn skip_reason(&self) -> Option<String> {
        if !self.skipped() {
            return None;
        }
        let summary = &self.mutation.summary;
        Some(if let Some(exemption) = &summary.exempted_by {
            format!("exempted by {exemption:?}")
        } else if summary.kind == "other" {
            "not a kind launchgate judges".to_string()
        } else if summary.skipped == Some("no-queue") {
            "names no configured queue and no default queue is set".to_string()
        } else {
            "not a launch workload: no launch or queue label on it or a pod template".to_string()
        })
    }

    /// True when launchgate leaves the object alone (not a launch workload, excluded, another
    /// kind or operation).
    pub fn skipped(&self) -> bool {
        self.mutation.summary.outcome == Outcome::Skipped
            && self
                .validation
                .as_ref()
                .is_none_or(|v| v.summary.outcome == Outcome::Skipped)
    }
}

/// Runs the mutating webhook, applies its patch, and runs the validating webhook on the result,
/// as the API server would.
pub fn judge(policy: &Policy, request: &AdmissionRequest, cluster: &dyn ClusterView) -> Judgement {
    let mutation = decide(policy, Endpoint::Mutate, request, cluster);
    let mutated = request.object.as_ref().map(|original| {
        let mut obj = original.clone();
        if !mutation.patch.0.is_empty() && json_patch::patch(&mut obj, &mutation.patch).is_err() {
            // Our own diff always applies to the object it was computed from; keep the
            // original rather than judge a half-patched object if that ever breaks.
            obj = original.clone();
        }
        obj
    });
    if !mutation.response.allowed {
        return Judgement {
            mutation,
            validation: None,
            mutated,
        };
    }
    let validation =
        if matches!(request.operation, Operation::Create) && !mutation.patch.0.is_empty() {
            let mut patched = request.clone();
            patched.object = mutated.clone();
            decide(policy, Endpoint::Validate, &patched, cluster)
        } else {
            decide(policy, Endpoint::Validate, request, cluster)
        };
    Judgement {
        mutation,
        validation: Some(validation),
        mutated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NoCluster;
    use serde_json::json;

    fn strict_policy() -> Policy {
        let yaml = crate::policy::DEFAULT_CONFIG_YAML.replace("strict: false", "strict: true");
        Policy::from_yaml(&yaml).unwrap()
    }

    /// A W&B Launch Job as the API server hands it to admission: `backoffLimit` already
    /// defaulted to 6, no `restartPolicy` written by the user.
    fn defaulted_job() -> Value {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "run-1", "namespace": "wandb", "labels": {"wandb.ai/monitor": "true"}},
            "spec": {"backoffLimit": 6, "template": {"spec": {"containers": [
                {"name": "main", "image": "acme/train:1",
                 "resources": {"limits": {"cpu": "4", "memory": "12Gi", "nvidia.com/gpu": "1"}}}
            ]}}}
        })
    }

    #[test]
    fn skip_reasons_say_why_the_object_was_left_alone() {
        let yaml = crate::policy::DEFAULT_CONFIG_YAML.replace("defaultQueue: gpu-queue\n", "");
        let no_default = Policy::from_yaml(&yaml).unwrap();
        let reason = |policy: &Policy, object: Value| {
            let request = AdmissionRequest::synthetic_create(object, Some("wandb")).unwrap();
            judge(policy, &request, &NoCluster).skip_reason()
        };
        assert_eq!(
            reason(&no_default, defaulted_job()).as_deref(),
            Some("names no configured queue and no default queue is set")
        );
        let mut unlabelled = defaulted_job();
        unlabelled["metadata"]["labels"] = json!({});
        assert_eq!(
            reason(&no_default, unlabelled).as_deref(),
            Some("not a launch workload: no launch or queue label on it or a pod template")
        );
        assert_eq!(reason(&Policy::embedded_default(), defaulted_job()), None);
    }

    #[test]
    fn validation_sees_the_mutated_object() {
        let policy = strict_policy();
        let req = AdmissionRequest::synthetic_create(defaulted_job(), None).unwrap();
        // The validating webhook alone, on the object as submitted, denies it...
        let raw = decide(&policy, Endpoint::Validate, &req, &NoCluster);
        assert!(!raw.response.allowed);
        assert!(
            raw.response
                .status
                .as_ref()
                .unwrap()
                .message
                .contains("backoffLimit"),
            "{:?}",
            raw.response.status
        );
        // ...but the cluster first runs the mutation, which replaces the API default.
        let j = judge(&policy, &req, &NoCluster);
        assert!(j.allowed(), "{}", j.message());
        assert_eq!(j.denied_by(), None);
        assert_eq!(j.mutated.as_ref().unwrap()["spec"]["backoffLimit"], 0);
        assert_eq!(j.queue(), Some("gpu-queue"));
        assert!(!j.skipped());
    }

    #[test]
    fn a_validation_denial_is_reported_with_its_stage() {
        let mut job = defaulted_job();
        job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
            json!("8");
        let req = AdmissionRequest::synthetic_create(job, None).unwrap();
        let j = judge(&Policy::embedded_default(), &req, &NoCluster);
        assert!(!j.allowed());
        assert_eq!(j.denied_by(), Some(Stage::Validate));
        assert!(j.message().contains("nvidia.com/gpu"), "{}", j.message());
    }

    #[test]
    fn objects_that_are_not_launch_workloads_are_skipped() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        let req = AdmissionRequest::synthetic_create(pod, Some("default")).unwrap();
        let j = judge(&Policy::embedded_default(), &req, &NoCluster);
        assert!(j.allowed() && j.skipped());
        assert!(j.warnings().is_empty());
        assert_eq!(j.mutation.summary.kind, "Pod");
    }

    #[test]
    fn warnings_are_listed_once() {
        // Names a queue that is not configured: both webhooks warn the same way.
        let mut job = defaulted_job();
        job["metadata"]["labels"]["launchgate.io/queue"] = json!("nope");
        let req = AdmissionRequest::synthetic_create(job, None).unwrap();
        let j = judge(&Policy::embedded_default(), &req, &NoCluster);
        let w = j.warnings();
        assert_eq!(
            w.iter().filter(|w| w.message.contains("nope")).count(),
            1,
            "{w:?}"
        );
        assert!(w.iter().any(|w| w.rule == "queue.unknown"), "{w:?}");
    }
}

#[cfg(test)]
mod accelerator_tests;
#[cfg(test)]
mod trainjob_tests;
#[cfg(test)]
mod visible_devices_tests;
