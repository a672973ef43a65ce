//! Is a pod (or a child workload) its workload's, made by that workload's controller?
//!
//! Whoever creates a pod writes its owner references and labels: a bare Pod can name any Job
//! (a suspended decoy) as its controller. A pod is judged as controller-made — on the per-pod
//! rules only, its workload having been judged on the workload rules — only when the claim is
//! verifiable: the request comes from the controller of the owner's kind (`match.podCreators`,
//! an identity a tenant cannot take) and the pod carries the labels that controller writes for
//! that very owner. Anything else is judged on every rule.
//!
//! The same holds one level up for the workloads other launch workloads make: the Jobs a
//! JobSet's controller creates (carrying `jobset.sigs.k8s.io/jobset-uid`), and the JobSet
//! Kubeflow Trainer creates for a TrainJob (named after it). A verified child is judged on the
//! per-pod rules and gets no workload-level mutation (job defaults, PyTorch wiring, queue
//! hand-off): its root was given those, and a denial would only make its controller retry.

use super::exemption::{Requester, any_match, user_pattern_covers_everyone};
use crate::error::ConfigError;
use crate::json::Pointer as _;
use crate::workload::{self, WorkloadKind};
use serde_json::Value;
use std::collections::BTreeMap;

/// The kinds whose pods (or child workloads) a controller creates, as `match.podCreators`
/// names them: every kind whose descriptor says what its controller makes.
pub fn owner_kinds() -> impl Iterator<Item = WorkloadKind> {
    WorkloadKind::all().filter(|k| !k.spec().makes.is_empty())
}

/// The default `match.podCreators`: the identities the upstream controllers run as.
pub fn default_pod_creators() -> BTreeMap<String, Vec<String>> {
    owner_kinds()
        .map(|k| {
            let users = k.spec().controller.iter().map(|u| u.to_string()).collect();
            (k.as_str().to_string(), users)
        })
        .collect()
}

/// Gives every owner kind `creators` leaves out its default identities (a config written before
/// launchgate knew a kind keeps working, and verifies that kind's children); a kind listed with
/// `[]` stays trusted by no one.
pub fn complete_pod_creators(creators: &mut BTreeMap<String, Vec<String>>) {
    for (kind, users) in default_pod_creators() {
        creators.entry(kind).or_insert(users);
    }
}

/// Checks `match.podCreators` at `at`.
pub fn check_pod_creators(
    creators: &BTreeMap<String, Vec<String>>,
    at: &str,
    errors: &mut Vec<ConfigError>,
) {
    for (kind, users) in creators {
        let here = format!("{at}.{kind}");
        if !owner_kinds().any(|k| k.as_str() == kind) {
            let known: Vec<&str> = owner_kinds().map(|k| k.as_str()).collect();
            errors.push(ConfigError::new(
                here.clone(),
                format!("unknown workload kind; one of {}", known.join(", ")),
            ));
        }
        for (i, user) in users.iter().enumerate() {
            let everyone = if user.is_empty() {
                Some("everyone")
            } else {
                user_pattern_covers_everyone(user)
            };
            if let Some(everyone) = everyone {
                errors.push(ConfigError::new(
                    format!("{here}[{i}]"),
                    format!("a pod creator names the controller's user; this matches {everyone}, so any pod could claim an owner"),
                ));
            }
        }
    }
}

/// The identity Kueue's controller runs as when installed with its manifests or Helm chart.
const KUEUE_CONTROLLER: &str = "system:serviceaccount:kueue-system:kueue-controller-manager";

/// The default `match.workloadUpdaters`: Kueue's controller, which admits a run by an UPDATE
/// (unsuspending it, writing its flavor's node selector).
pub fn default_workload_updaters() -> Vec<String> {
    vec![KUEUE_CONTROLLER.to_string()]
}

/// Checks `match.workloadUpdaters` at `at`: each names a controller, not everyone.
pub fn check_workload_updaters(users: &[String], at: &str, errors: &mut Vec<ConfigError>) {
    for (i, user) in users.iter().enumerate() {
        let everyone = if user.is_empty() {
            Some("everyone")
        } else {
            user_pattern_covers_everyone(user)
        };
        if let Some(everyone) = everyone {
            errors.push(ConfigError::new(
                format!("{at}[{i}]"),
                format!("a workload updater names a controller's user; this matches {everyone}, so anyone's UPDATE of an exempt workload would keep its exemption"),
            ));
        }
    }
}

/// True when `who` is a controller that updates launch workloads it did not create
/// (`match.workloadUpdaters`).
pub fn is_workload_updater(updaters: &[String], who: &Requester<'_>) -> bool {
    !who.username.is_empty() && any_match(updaters, who.username)
}

/// An exemption covers the workload, and so the pods its controller makes: with no controller
/// of a kind named in `match.podCreators`, those pods could never be verified, never inherit
/// the exemption, and would be judged (and, denied, retried forever). `exemption` names one
/// configured exemption, if any.
pub fn check_inheritance(
    creators: &BTreeMap<String, Vec<String>>,
    exemption: Option<&str>,
    at: &str,
    errors: &mut Vec<ConfigError>,
) {
    let Some(exemption) = exemption else {
        return;
    };
    // The owner kinds whose pods (or child workloads) inherit an exemption of the owner: their
    // controller copies the pod templates' annotations, where launchgate writes the mark (a
    // kind whose pods come from a runtime has no templates to carry it).
    for kind in owner_kinds().filter(|k| k.spec().runtime.is_none()) {
        if creators.get(kind.as_str()).is_none_or(Vec::is_empty) {
            errors.push(ConfigError::new(
                format!("{at}.{}", kind.as_str()),
                format!(
                    "exemption {exemption:?} covers a {kind}'s pods only through its controller, and none is named here: an exempt {kind} would have every pod (child workload) it creates judged and denied, retried forever; name the {kind} controller's user",
                    kind = kind.as_str()
                ),
            ));
        }
    }
}

/// What a pod's controller owner reference is worth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerClaim {
    /// No controller owner of a launch kind (a bare pod, a top-level workload, or another
    /// controller's): every rule.
    None,
    /// Verified: the owner's controller sent it, with the owner's labels. Per-pod rules only.
    Verified(WorkloadKind),
    /// Claimed but not verifiable: every rule, and why in a warning (`why`, for the validating
    /// webhook); a child workload (not a pod) is then mutated as a standalone workload, and
    /// `standalone` says so (for the mutating webhook).
    Unverified {
        /// Why the claim is not trusted.
        why: String,
        /// For a child workload: the warning that it is wired as a workload of its own.
        standalone: Option<String>,
    },
}

/// Stands for the object's own `metadata.name` in [`owner_mark`]'s keys.
pub(crate) use crate::kinds::OWN_NAME;

/// The label (or annotation) `owner`'s controller sets to the owner's identity on what it
/// makes of `kind`, and which field of the owner reference it must equal.
pub(crate) fn owner_mark(
    owner: WorkloadKind,
    kind: WorkloadKind,
) -> (&'static [&'static str], &'static str) {
    kind.mark_from(owner)
        .map_or((&[], "uid"), |m| (m.mark, m.of))
}

/// The controller owner reference of `object` (a `kind`) when it names a launch kind whose
/// controller makes objects of `kind`.
fn claimed_owner(kind: WorkloadKind, object: &Value) -> Option<(WorkloadKind, &Value)> {
    object
        .at("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .find_map(|r| Some((WorkloadKind::of_object(r)?, r)))
        .filter(|(k, _)| kind.made_by().any(|owner| owner == *k))
}

/// Judges the controller owner reference of `object` (a `kind`) for a request from `who`,
/// with the configured pod creators.
pub fn owner_claim(
    kind: WorkloadKind,
    object: &Value,
    who: &Requester<'_>,
    creators: &BTreeMap<String, Vec<String>>,
) -> OwnerClaim {
    let what = if kind.is_pod() { "pod" } else { kind.as_str() };
    let Some((owner_kind, owner)) = claimed_owner(kind, object) else {
        return OwnerClaim::None;
    };
    fn text(v: Option<&Value>) -> &str {
        v.and_then(Value::as_str).unwrap_or_default()
    }
    let owner_name = text(owner.get("name"));
    let claimed = format!("{} {owner_name:?}", owner_kind.as_str());
    let allowed = creators
        .get(owner_kind.as_str())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let child = !kind.is_pod();
    if !any_match(allowed, who.username) {
        // A child workload (a JobSet's Job, a TrainJob's JobSet) from a user that is not its
        // owner's controller: the short warning names the `match.podCreators` entry that
        // user belongs in, if it is the controller.
        let standalone = child.then(|| {
            format!(
                "launchgate: {} is not in match.podCreators.{owner}, so this {kind} of {owner} {owner_name:?} is wired and judged as a standalone {kind}, a world of its own",
                who.describe(),
                owner = owner_kind.as_str(),
                kind = kind.as_str(),
            )
        });
        return OwnerClaim::Unverified {
            why: format!(
                "launchgate: the {what} names {claimed} as its controller but is sent by {}, not by that kind's controller (match.podCreators.{}: {}); it is judged on every rule of its queue",
                who.describe(),
                owner_kind.as_str(),
                if allowed.is_empty() {
                    "none configured".to_string()
                } else {
                    allowed.join(", ")
                }
            ),
            standalone,
        };
    }
    let (keys, field) = owner_mark(owner_kind, kind);
    let expected = text(owner.get(field));
    let marked = !expected.is_empty()
        && object.as_object().is_some_and(|made| {
            keys.iter().any(|&k| {
                if k == OWN_NAME {
                    return made
                        .get("metadata")
                        .and_then(|m| m.get("name"))
                        .and_then(Value::as_str)
                        == Some(expected);
                }
                workload::label(made, k) == Some(expected)
                    || workload::annotation(made, k) == Some(expected)
            })
        });
    if marked {
        OwnerClaim::Verified(owner_kind)
    } else {
        let why = format!(
            "launchgate: the {what} names {claimed} as its controller but does not carry {} = the owner's {field}; it is judged on every rule of its queue",
            keys.join(" or ")
        );
        OwnerClaim::Unverified {
            standalone: child.then(|| why.clone()),
            why,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const JOB_CONTROLLER: &str = "system:serviceaccount:kube-system:job-controller";

    fn pod(owner_kind: &str, api_version: &str, labels: Value) -> Value {
        json!({"metadata": {"generateName": "train-", "labels": labels,
            "ownerReferences": [{"apiVersion": api_version, "kind": owner_kind, "name": "train",
                "uid": "u-1", "controller": true}]}})
    }

    fn claim(object: &Value, user: &str) -> OwnerClaim {
        let who = Requester {
            username: user,
            groups: &[],
            namespace: "ns",
        };
        owner_claim(WorkloadKind::Pod, object, &who, &default_pod_creators())
    }

    #[test]
    fn a_kind_left_out_of_pod_creators_keeps_its_controller_and_an_empty_list_trusts_no_one() {
        let policy = |creators: &str| {
            crate::Policy::from_yaml(&format!(
                "match:\n  exemptions: []\n  podCreators:\n{creators}\nqueues: {{q: {{}}}}\ndefaultQueue: q\n"
            ))
            .unwrap()
        };
        let written = policy("    Job: [system:kube-controller-manager]");
        let creators = &written.config.match_rules.pod_creators;
        assert_eq!(creators["Job"], ["system:kube-controller-manager"]);
        assert_eq!(
            creators["VolcanoJob"],
            default_pod_creators()["VolcanoJob"],
            "a kind the config leaves out keeps its controller's identity"
        );
        let none = policy("    VolcanoJob: []");
        assert!(none.config.match_rules.pod_creators["VolcanoJob"].is_empty());
        let who = Requester {
            username: "system:serviceaccount:volcano-system:volcano-controllers",
            groups: &[],
            namespace: "ns",
        };
        let volcano_pod = pod(
            "Job",
            "batch.volcano.sh/v1alpha1",
            json!({"volcano.sh/job-name": "train"}),
        );
        assert_eq!(
            owner_claim(
                WorkloadKind::Pod,
                &volcano_pod,
                &who,
                &written.config.match_rules.pod_creators
            ),
            OwnerClaim::Verified(WorkloadKind::VolcanoJob)
        );
        assert!(matches!(
            owner_claim(
                WorkloadKind::Pod,
                &volcano_pod,
                &who,
                &none.config.match_rules.pod_creators
            ),
            OwnerClaim::Unverified { .. }
        ));
    }

    #[test]
    fn the_controller_with_the_owners_labels_is_verified() {
        let job_pod = pod(
            "Job",
            "batch/v1",
            json!({"batch.kubernetes.io/controller-uid": "u-1"}),
        );
        assert_eq!(
            claim(&job_pod, JOB_CONTROLLER),
            OwnerClaim::Verified(WorkloadKind::BatchJob)
        );
        assert_eq!(
            claim(&job_pod, "system:kube-controller-manager"),
            OwnerClaim::Verified(WorkloadKind::BatchJob)
        );
        let vc_pod = pod(
            "Job",
            "batch.volcano.sh/v1alpha1",
            json!({"volcano.sh/job-name": "train"}),
        );
        assert_eq!(
            claim(
                &vc_pod,
                "system:serviceaccount:volcano-system:volcano-controllers"
            ),
            OwnerClaim::Verified(WorkloadKind::VolcanoJob)
        );
    }

    #[test]
    fn a_claim_from_anyone_else_or_without_the_labels_is_not() {
        // A tenant's bare pod naming a (decoy) Job, with labels copied from it.
        let decoy = pod(
            "Job",
            "batch/v1",
            json!({"batch.kubernetes.io/controller-uid": "u-1"}),
        );
        let OwnerClaim::Unverified { why, .. } = claim(&decoy, "alice") else {
            panic!("verified")
        };
        assert!(
            why.contains(r#"Job "train""#) && why.contains(r#""alice""#),
            "{why}"
        );
        assert!(why.contains(JOB_CONTROLLER), "{why}");
        // The Volcano controller cannot vouch for a batch/v1 Job's pod.
        assert!(matches!(
            claim(
                &decoy,
                "system:serviceaccount:volcano-system:volcano-controllers"
            ),
            OwnerClaim::Unverified { .. }
        ));
        // The controller's pod must carry the owner's uid.
        let other = pod(
            "Job",
            "batch/v1",
            json!({"batch.kubernetes.io/controller-uid": "u-2"}),
        );
        let OwnerClaim::Unverified { why, .. } = claim(&other, JOB_CONTROLLER) else {
            panic!("verified")
        };
        assert!(why.contains("controller-uid"), "{why}");
        // Offline (no requester): never verified.
        assert!(matches!(claim(&decoy, ""), OwnerClaim::Unverified { .. }));
        // No controller owner of a launch kind: no claim at all.
        let mut plain = decoy.clone();
        plain["metadata"]["ownerReferences"][0]["controller"] = json!(false);
        assert_eq!(claim(&plain, "alice"), OwnerClaim::None);
        plain["metadata"]["ownerReferences"][0]["controller"] = json!(true);
        plain["metadata"]["ownerReferences"][0]["apiVersion"] = json!("apps/v1");
        plain["metadata"]["ownerReferences"][0]["kind"] = json!("ReplicaSet");
        assert_eq!(claim(&plain, "alice"), OwnerClaim::None);
    }

    #[test]
    fn child_workloads_of_jobsets_and_trainjobs_are_verified_the_same_way() {
        let creators = default_pod_creators();
        let as_user = |user: &'static str| Requester {
            username: user,
            groups: &[],
            namespace: "ns",
        };
        const JOBSET: &str = "system:serviceaccount:jobset-system:jobset-controller-manager";
        const TRAINER: &str =
            "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager";
        let child_job = json!({"metadata": {"name": "ddp-node-0",
            "labels": {"jobset.sigs.k8s.io/jobset-uid": "js-1"},
            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "name": "ddp", "uid": "js-1", "controller": true}]}});
        assert_eq!(
            owner_claim(
                WorkloadKind::BatchJob,
                &child_job,
                &as_user(JOBSET),
                &creators
            ),
            OwnerClaim::Verified(WorkloadKind::JobSet)
        );
        let claimed = owner_claim(
            WorkloadKind::BatchJob,
            &child_job,
            &as_user("alice"),
            &creators,
        );
        assert!(
            matches!(&claimed, OwnerClaim::Unverified { why, .. } if why.contains("the Job names JobSet \"ddp\"")),
            "{claimed:?}"
        );
        let trainer_jobset = json!({"metadata": {"name": "run",
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": "run", "uid": "t-1", "controller": true}]}});
        assert_eq!(
            owner_claim(
                WorkloadKind::JobSet,
                &trainer_jobset,
                &as_user(TRAINER),
                &creators
            ),
            OwnerClaim::Verified(WorkloadKind::TrainJob)
        );
        let mut renamed = trainer_jobset.clone();
        renamed["metadata"]["name"] = json!("other");
        // Sent by Trainer's controller but without the owner's mark: the standalone warning
        // says what is missing, not that the controller is unconfigured.
        let OwnerClaim::Unverified { why, standalone } =
            owner_claim(WorkloadKind::JobSet, &renamed, &as_user(TRAINER), &creators)
        else {
            panic!("a JobSet without its TrainJob's name is not verified");
        };
        assert!(why.contains("does not carry"), "{why}");
        assert_eq!(standalone.as_deref(), Some(why.as_str()));
        // From another user: the standalone warning names match.podCreators.
        let OwnerClaim::Unverified { standalone, .. } =
            owner_claim(WorkloadKind::JobSet, &renamed, &as_user("alice"), &creators)
        else {
            panic!("a JobSet from alice is not verified");
        };
        let standalone = standalone.unwrap_or_default();
        assert!(
            standalone.contains("is not in match.podCreators.TrainJob"),
            "{standalone}"
        );
        // A top-level Job names no JobSet; a Volcano Job has no launch owner kind.
        let top = json!({"metadata": {"name": "j"}});
        assert_eq!(
            owner_claim(WorkloadKind::BatchJob, &top, &as_user(JOBSET), &creators),
            OwnerClaim::None
        );
        assert_eq!(
            owner_claim(
                WorkloadKind::VolcanoJob,
                &child_job,
                &as_user(JOBSET),
                &creators
            ),
            OwnerClaim::None
        );
    }

    #[test]
    fn pod_creators_are_checked() {
        let mut errors = Vec::new();
        let creators = BTreeMap::from([
            ("Deployment".to_string(), vec!["x".to_string()]),
            ("Job".to_string(), vec!["*".to_string()]),
            (
                "JobSet".to_string(),
                vec![
                    "?*".to_string(),
                    "system:serviceaccount:*".to_string(),
                    "system:serviceaccount:jobset-system:*".to_string(),
                ],
            ),
        ]);
        check_pod_creators(&creators, "match.podCreators", &mut errors);
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 4, "{text:?}");
        assert!(text[0].starts_with("match.podCreators.Deployment: unknown workload kind"));
        assert!(text[1].starts_with("match.podCreators.Job[0]:"));
        assert!(
            text[2].starts_with("match.podCreators.JobSet[0]:"),
            "{text:?}"
        );
        assert!(
            text[3].starts_with("match.podCreators.JobSet[1]:"),
            "{text:?}"
        );
        assert!(text[3].contains("every service account"), "{text:?}");
    }
}
